"""Every call of every `keras.ops.custom_gradient` op on Keras's PyTorch backend, recorded while a watch runs (see
`gradmagic.frameworks.watching` and `keras/watching.py`). Importing this module imports Keras and PyTorch.

On PyTorch, `keras.ops.custom_gradient(f)` is an object of Keras's `custom_gradient` class whose `__call__` runs a
`torch.autograd.Function`: its forward calls `f` (without autograd) and keeps the gradient function `f` returns, its
backward calls that with the op's inputs and `upstream=`. While a watch runs, that `__call__` runs the Function with
a stand-in for `f`, which calls `f`, hands the call's values to the recorder, and returns `f`'s outputs with a
gradient function that records each of its calls (the upstream gradient and the gradients it returned). PyTorch runs
eagerly: every call is recorded as it happens, and the values pass through unchanged. Calls on meta tensors (Keras
working out a layer's output shape) are no calls of the op's. Code compiled by `torch.compile` is not recorded.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator

import keras
import numpy as np
import torch

from gradmagic.frameworks.keras.watching import (
    Call,
    decorated,
    deliver,
    gradient_names,
    note_failure,
    recording_now,
    recording_through,
    site_of,
    unrecorded,
)
from gradmagic.frameworks.watching import BackwardCall, Instrumentation, OpSite, Recorder

__all__ = ["decorated", "recording", "unrecorded"]

#: The class `keras.ops.custom_gradient` returns on this backend.
_KERAS_OP = type(keras.ops.custom_gradient(lambda: None))
VERSION = f"keras {keras.__version__}, torch {torch.__version__}"


def recording(recorder: Recorder) -> contextlib.AbstractContextManager[Instrumentation]:
    """Within: every call of every `keras.ops.custom_gradient` op (and of its gradient function) is handed to
    `recorder`; everything changed for it is put back on the way out, also on an error or KeyboardInterrupt."""
    return recording_through(recorder, _installed, VERSION)


@contextlib.contextmanager
def _installed() -> Iterator[None]:
    """Keras's `custom_gradient.__call__` running the op's Function with the recording stand-in."""
    original = vars(_KERAS_OP)["__call__"]

    @functools.wraps(original)
    def call(op, *args, **kwargs):
        site = site_of(op.forward_fn) if recording_now() else None
        if site is None:
            return original(op, *args, **kwargs)
        return original(_KERAS_OP(_standing_in(op.forward_fn, site)), *args, **kwargs)

    _KERAS_OP.__call__ = call
    try:
        yield
    finally:
        _KERAS_OP.__call__ = original


def _standing_in(function: Callable, site: OpSite) -> Callable:
    """The stand-in for the op's function: `function` called, its call recorded, its gradient function recording."""

    def stand_in(*args, **kwargs):
        result, gradient_function = function(*args, **kwargs)
        try:
            call = Call(function, args, kwargs, result, _is_tensor)
            if any(tensor.is_meta for tensor in call.inputs + call.outputs):  # Keras working out shapes: no call
                return result, gradient_function
            call_id = deliver("forward", site, call.forward(_arrays(call.inputs), _arrays(call.outputs), False))
            return result, _recording_gradient(gradient_function, site, call_id, call.gradient_names)
        except Exception as error:  # noqa: BLE001 - the watched code runs as without the watch, recorded or not
            note_failure(site, error)
            return result, gradient_function

    return stand_in


def _recording_gradient(
    gradient_function: Callable, site: OpSite, call_id: int, input_names: tuple[str, ...]
) -> Callable:
    """`gradient_function`, recording each call: Keras's Function calls it with the op's inputs and `upstream=`."""

    @functools.wraps(gradient_function)
    def gradient(*args, **kwargs):
        gradients = gradient_function(*args, **kwargs)
        try:
            upstream = [value for value in keras.tree.flatten(kwargs.get("upstream")) if _is_tensor(value)]
            flat = keras.tree.flatten(gradients)
            returned = iter(_arrays([value for value in flat if _is_tensor(value)]))
            call = BackwardCall(
                _arrays(upstream),
                gradient_names(len(flat), input_names),
                [next(returned) if _is_tensor(value) else None for value in flat],
            )
            deliver("backward", site, call_id, call)
        except Exception as error:  # noqa: BLE001 - as in the forward
            note_failure(site, error)
        return gradients

    return gradient


def _arrays(tensors: list) -> list[np.ndarray]:
    """Tensors as arrays of their own (copied: a tensor may change in place after the call), bfloat16 as float32."""
    arrays = []
    for tensor in tensors:
        tensor = tensor.detach().cpu()
        arrays.append((tensor.float() if tensor.dtype == torch.bfloat16 else tensor).numpy().copy())
    return arrays


def _is_tensor(value: Any) -> bool:
    """A tensor of numbers or booleans: what a call's values are recorded of."""
    return isinstance(value, torch.Tensor) and not value.dtype.is_complex
