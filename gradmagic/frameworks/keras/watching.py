"""What the recordings of `keras.ops.custom_gradient` ops on Keras's JAX and PyTorch backends share (see
`gradmagic.frameworks.watching`; the backends' own parts are `jax_watching.py` and `torch_watching.py`, the module
`frameworks.get_watcher()` gives a watch on each). Importing this module imports Keras.

Both replace, while a watch runs, what every call of an op goes through (JAX: `jax.custom_vjp`'s `__call__`;
PyTorch: Keras's `custom_gradient.__call__`) so that the op runs a stand-in for the user's function: it calls the
function, hands the call's values to the recorder, and returns the function's outputs with a gradient function that
records each call of the user's, whose gradients it returns. The values pass through unchanged.

Where TensorFlow is imported too, the watch also runs TensorFlow's recording (`tensorflow/watching.py`), so that
`tf.custom_gradient` ops the watched code reaches are recorded and checked as TensorFlow's.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import importlib
import inspect
import sys
import threading
import weakref
from typing import Any, Callable, Iterator

import keras
import numpy as np

from gradmagic.frameworks.watching import (
    BackwardCall,
    Delivery,
    ForwardCall,
    Instrumentation,
    OpSite,
    Recorder,
    argument_names,
    path_label,
)

#: Packages whose own custom-gradient ops are not the user's: passed through unrecorded.
_FRAMEWORK_PACKAGES = ("jax", "keras", "flax", "optax", "torch", "tensorflow", "tf_keras", "gradmagic")
#: Calls of one traced op whose forward (or gradient) ran and waits for the other, to be paired (see `Pairing`).
_WAITING = 256
#: The running watch's recorder (code traced under an earlier watch records into it too), and gradmagic's own checks
#: running, whose calls of ops are not the watched code's.
_delivery = Delivery()
deliver, note_failure = _delivery.deliver, _delivery.note_failure
_one_watch = threading.Lock()


@contextlib.contextmanager
def recording_through(
    recorder: Recorder, installed: Callable[[], contextlib.AbstractContextManager], version: str, retraced: str = ""
) -> Iterator[Instrumentation]:
    """Within: `recorder` is the running watch's, and `installed()` (the backend's replacement, put back on the way
    out) routes every call of every op through the recording; also TensorFlow's, where TensorFlow is imported.
    `retraced`: what the backend's recording makes trace again for the watch, if anything."""
    if not _one_watch.acquire(blocking=False):
        raise RuntimeError("another watch is running in this process")
    try:
        with contextlib.ExitStack() as stack:
            instrumentation = Instrumentation("keras", version, [])
            tensorflow = _tensorflow_recording(stack, recorder)
            if tensorflow is not None:  # its lists, filled while it runs
                instrumentation = Instrumentation("keras", version, tensorflow.notes, tensorflow.retraced)
            if retraced:
                instrumentation.retraced.append(retraced)
            _delivery.recorder = recorder
            stack.callback(_forget_recorder)
            stack.enter_context(installed())
            yield instrumentation
    finally:
        _one_watch.release()


def _forget_recorder() -> None:
    _delivery.recorder = None


def _tensorflow_recording(stack: contextlib.ExitStack, recorder: Recorder) -> Instrumentation | None:
    """TensorFlow's recording entered on `stack` where TensorFlow is imported, its ops noted to be checked as
    TensorFlow's; what it is."""
    _TENSORFLOW_OPS.clear()
    if "tensorflow" not in sys.modules:
        return None
    tensorflow_watching = importlib.import_module("gradmagic.frameworks.tensorflow.watching")
    return stack.enter_context(tensorflow_watching.recording(_TensorFlowOps(recorder)))


#: The functions of the `tf.custom_gradient` ops the running (or last) watch recorded.
_TENSORFLOW_OPS: weakref.WeakSet = weakref.WeakSet()


class _TensorFlowOps:
    """The watch's recorder as TensorFlow's recording calls it: each op it hands over is noted as TensorFlow's, and
    every call goes on to the recorder."""

    def __init__(self, recorder: Recorder):
        self.recorder = recorder

    def __getattr__(self, method: str) -> Callable:
        handed = getattr(self.recorder, method)

        def note(site: OpSite, *arguments: Any) -> Any:
            with contextlib.suppress(TypeError):  # a function that cannot be referenced weakly is checked as Keras's
                _TENSORFLOW_OPS.add(site.function)
            return handed(site, *arguments)

        return note


def unrecorded() -> contextlib.AbstractContextManager:
    """Within: calls of ops are not recorded by a running watch (the Keras adapters' checks run inside)."""
    return _delivery.unrecorded()


def decorated(call: Callable) -> Callable:
    """`call` (an op's own function as recorded) decorated again, to be checked: with `keras.ops.custom_gradient`,
    or with `tf.custom_gradient` where TensorFlow's recording recorded it."""
    if innermost(call) in _TENSORFLOW_OPS:
        return importlib.import_module("gradmagic.frameworks.tensorflow.watching").decorated(call)
    return keras.ops.custom_gradient(call)


def recording_now() -> bool:
    """Whether a watch runs and records calls now (not inside gradmagic's own checks)."""
    return _delivery.recording


def innermost(function: Callable) -> Callable:
    """The Python function inside bound methods and partials."""
    while isinstance(function, functools.partial) or inspect.ismethod(function):
        function = function.func if isinstance(function, functools.partial) else function.__func__
    return function


def site_of(function: Callable) -> OpSite | None:
    """The op `function` (the user's function inside `keras.ops.custom_gradient`) belongs to, or None for the
    frameworks' own custom gradients."""
    inner = innermost(function)
    module = getattr(inner, "__module__", None) or ""
    if module.split(".")[0] in _FRAMEWORK_PACKAGES:
        return None
    name = str(getattr(inner, "__name__", None) or getattr(function, "__name__", type(function).__name__))
    return OpSite.of(inner, name, "keras")


class Call:
    """One call of an op: its recordable tensors (`is_tensor`), where they sit in its arguments, their names."""

    def __init__(self, function: Callable, args: tuple, kwargs: dict, result: Any, is_tensor: Callable[[Any], bool]):
        leaves = keras.tree.flatten((args, kwargs))
        self.function = function
        self.structure = keras.tree.map_structure(lambda leaf: None, (args, kwargs))  # no tensor kept alive
        names = _argument_names(function, args, kwargs)
        self.picked = [i for i, leaf in enumerate(leaves) if is_tensor(leaf)]
        self.inputs = [leaves[i] for i in self.picked]
        self.input_names = tuple(names[i] for i in self.picked)
        self.gradient_names = tuple(names[: len(keras.tree.flatten(args))])
        # What the arguments hold besides the recorded tensors (Python numbers, strings): kept to call the op again.
        self.constants = [None if is_tensor(leaf) else leaf for leaf in leaves]
        outputs = keras.tree.flatten_with_path(result)
        self.outputs = [leaf for _, leaf in outputs if is_tensor(leaf)]
        self.output_names = tuple("output" + path_label(path) for path, leaf in outputs if is_tensor(leaf))

    def arguments(self, arrays: list[np.ndarray]) -> tuple[tuple, dict]:
        leaves = list(self.constants)
        for position, array in zip(self.picked, arrays):
            leaves[position] = array
        return keras.tree.pack_sequence_as(self.structure, leaves)

    def forward(self, inputs: list[np.ndarray], outputs: list[np.ndarray], compiled: bool) -> ForwardCall:
        """The call as the recorder gets it, with these values (arrays of the call's or of a run's)."""
        return ForwardCall(
            self.function, self.input_names, inputs, self.output_names, outputs, self.arguments, compiled
        )


def gradient_names(count: int, input_names: tuple[str, ...]) -> tuple[str, ...]:
    """Names of `count` flat gradients: the inputs' where there is one per input, else `gradient[i]`."""
    return input_names if count == len(input_names) else tuple(f"gradient[{i}]" for i in range(count))


class Pairing:
    """One traced call of an op (its place in a compiled function): each run's forward and gradient calls come
    from callbacks that carry no call id, and are paired in the order they come (a run's gradient call with that
    run's forward call). A gradient call that comes before its forward call waits for it."""

    def __init__(self, site: OpSite):
        self.site = site
        self.forwards: collections.deque = collections.deque(maxlen=_WAITING)  # call ids waiting for their gradient
        self.backwards: collections.deque = collections.deque(maxlen=_WAITING)  # gradient calls waiting
        self.lock = threading.Lock()

    def forward(self, call: ForwardCall) -> None:
        with self.lock:
            call_id = deliver("forward", self.site, call)
            if self.backwards:
                deliver("backward", self.site, call_id, self.backwards.popleft())
            else:
                self.forwards.append(call_id)

    def backward(self, call: BackwardCall) -> None:
        with self.lock:
            if self.forwards:
                deliver("backward", self.site, self.forwards.popleft(), call)
            else:
                self.backwards.append(call)


def _argument_names(function: Callable, args: tuple, kwargs: dict) -> list[str]:
    """A name for each leaf of `(args, kwargs)`, in `keras.tree.flatten` order: `x`, `args[1]`, `pair[0]`."""
    return argument_names(function, args, kwargs, keras.tree.flatten_with_path)
