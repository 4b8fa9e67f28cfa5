"""Every call of every `keras.ops.custom_gradient` op on Keras's JAX backend, recorded while a watch runs (see
`gradmagic.frameworks.watching` and `keras/watching.py`). Importing this module imports Keras and JAX.

On JAX, `keras.ops.custom_gradient(f)` is `jax.custom_gradient(f)`, a `jax.custom_vjp` whose forward calls `f` and
traces the gradient function `f` returns into a jaxpr, run in the backward pass. While a watch runs,
`jax.custom_vjp.__call__` calls such an op as `jax.custom_gradient` of a stand-in for `f`, which calls `f` and:

* eagerly (concrete inputs), hands the call's values to the recorder as the call happens;
* inside a trace (`jax.jit`: Keras's compiled train, test and predict steps, a training loop's step; `jax.vmap`),
  adds a `jax.debug.callback` that hands each run's values to the recorder (per example under `vmap`);
* returns `f`'s gradient function behind one that adds a `jax.debug.callback` with the upstream gradients and the
  gradients it returned: it runs in each backward pass.

The values pass through unchanged: a callback only reads them. The compiled program is not quite the same, though: a
value handed to a callback has one more user, and XLA may fuse around it differently, which can change a result in
its last bit (measured on small models: none after `model.fit` with three ops; a bias 4.7e-10 off after 8 steps of
another). `jax.debug.callback` is the callback that JAX allows
inside `custom_vjp` (`io_callback`'s effect is refused there: "Effects not supported in `custom_vjp`"); it returns
nothing, so a run's gradient call is paired with its forward call by their order (`watching.Pairing`).

Compiled functions keep their traces: JAX's caches are cleared when the watch starts, so that functions traced before
it (a model's train step made by an earlier `fit`, a training loop's `jax.jit` step) trace again with the recording,
and when it ends, so that they trace again without it when next called.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator

import jax
import keras
import numpy as np

from gradmagic.frameworks.keras.common import closure
from gradmagic.frameworks.keras.watching import (
    Call,
    Pairing,
    decorated,
    gradient_names,
    note_failure,
    recording_now,
    recording_through,
    site_of,
    unrecorded,
)
from gradmagic.frameworks.watching import BackwardCall, Instrumentation, OpSite, Recorder, in_callback

__all__ = ["decorated", "recording", "unrecorded"]

#: The function `jax.custom_gradient(f)` makes its `custom_vjp` of (closing over `f` as `fun`).
_CUSTOM_GRADIENT = "custom_gradient.<locals>.wrapped_fun"
VERSION = f"keras {keras.__version__}, jax {jax.__version__}"


def recording(recorder: Recorder) -> contextlib.AbstractContextManager[Instrumentation]:
    """Within: every call of every `keras.ops.custom_gradient` op (and of its gradient function) is handed to
    `recorder`; everything changed for it is put back on the way out, also on an error or KeyboardInterrupt."""
    return recording_through(recorder, _installed, VERSION, "every jax.jit function (JAX's caches cleared)")


@contextlib.contextmanager
def _installed() -> Iterator[None]:
    """`jax.custom_vjp.__call__` calling `jax.custom_gradient` ops through the recording stand-in, JAX's caches
    cleared on the way in and out."""
    original = vars(jax.custom_vjp)["__call__"]
    stand_ins: dict[int, tuple[Any, Any]] = {}  # id(op): (op, its recording stand-in op)

    @functools.wraps(original)
    def call(op, *args, **kwargs):
        if recording_now():
            entry = stand_ins.get(id(op))
            if entry is None or entry[0] is not op:
                entry = stand_ins[id(op)] = (op, _standing_in(op))
            if entry[1] is not None:
                return original(entry[1], *args, **kwargs)
        return original(op, *args, **kwargs)

    jax.custom_vjp.__call__ = call  # type: ignore[method-assign, assignment]
    jax.clear_caches()
    try:
        yield
    finally:
        jax.custom_vjp.__call__ = original  # type: ignore[method-assign]
        stand_ins.clear()
        jax.clear_caches()


def _standing_in(op: Any) -> Any:
    """The `jax.custom_gradient` op of the recording stand-in for `op`'s function, or None: not a
    `jax.custom_gradient` op, or the frameworks' own."""
    if getattr(op.fun, "__qualname__", "") != _CUSTOM_GRADIENT:
        return None
    function: Callable | None = closure(op.fun).get("fun")
    site = site_of(function) if function is not None else None
    if function is None or site is None:
        return None

    def stand_in(*args, **kwargs):
        result, gradient_function = function(*args, **kwargs)
        try:
            return result, _record_forward(site, Call(function, args, kwargs, result, _is_tensor), gradient_function)
        except Exception as error:  # noqa: BLE001 - the watched code runs as without the watch, recorded or not
            note_failure(site, error)
            return result, gradient_function

    stand_in.__name__ = site.name
    return jax.custom_gradient(stand_in)


def _record_forward(site: OpSite, call: Call, gradient_function: Callable) -> Callable:
    """Record the call now (concrete values) or at each run of the code being traced; the gradient function
    recording too."""
    values = call.inputs + call.outputs
    compiled = any(isinstance(value, jax.core.Tracer) for value in values)
    count, pairing = len(call.inputs), Pairing(site)

    def each_run(*values):
        arrays = _copied(values)
        pairing.forward(call.forward(arrays[:count], arrays[count:], compiled))

    if compiled:
        jax.debug.callback(in_callback(each_run), *values)
    else:
        each_run(*values)
    call.inputs = call.outputs = []  # the traced values: each run hands over its own
    return _recording_gradient(gradient_function, pairing, call.gradient_names)


def _recording_gradient(gradient_function: Callable, pairing: Pairing, input_names: tuple[str, ...]) -> Callable:
    """`gradient_function`, recording each run of it: `jax.custom_gradient` traces it when the op's forward runs
    under differentiation, and runs the trace in the backward pass."""

    @functools.wraps(gradient_function)
    def gradient(*args, **kwargs):
        gradients = gradient_function(*args, **kwargs)
        try:
            _record_backward(pairing, keras.tree.flatten((args, kwargs)), gradients, input_names)
        except Exception as error:  # noqa: BLE001 - as in the forward
            note_failure(pairing.site, error)
        return gradients

    return gradient


def _record_backward(pairing: Pairing, upstream: list, gradients: Any, input_names: tuple[str, ...]) -> None:
    flat = keras.tree.flatten(gradients)
    present = [_is_tensor(gradient) for gradient in flat]  # the others (None, a Python 0) are recorded as None
    upstream = [value for value in upstream if _is_tensor(value)]
    count, names = len(upstream), gradient_names(len(flat), input_names)

    def each_run(*values):
        arrays = _copied(values)
        given = iter(arrays[count:])
        pairing.backward(BackwardCall(arrays[:count], names, [next(given) if p else None for p in present]))

    jax.debug.callback(in_callback(each_run), *upstream, *[gradient for gradient, p in zip(flat, present) if p])


def _copied(values: tuple) -> list[np.ndarray]:
    """A callback's values as arrays of their own: those it is given may be the run's buffers, reused after it."""
    return [np.array(value, copy=True) for value in values]


def _is_tensor(value: Any) -> bool:
    """An array (or a traced one) of numbers or booleans: what a call's values are recorded of."""
    if not isinstance(value, (jax.Array, np.ndarray)):
        return False
    return bool(jax.dtypes.issubdtype(value.dtype, np.number)) or value.dtype == np.bool_
