"""Every call of every `tf.custom_gradient` op, recorded while a watch runs (see `gradmagic.frameworks.watching`).

`tf.custom_gradient` (and `keras.ops.custom_gradient` on TensorFlow, which is it) routes each call of an op through
one of two module functions, `_eager_mode_decorator` and `_graph_mode_decorator`, looked up when the call happens.
While a watch runs, both give TensorFlow a stand-in for the user's function, which calls it and records the call:

* eagerly, the values as the call happens, and those of its gradient when a tape calls the gradient function;
* in a graph (a `tf.function`, Keras's train function, a TensorFlow 1 graph) the stand-in runs when the graph is
  traced: it adds a `tf.numpy_function` that hands each run's values to the recorder, and makes the op's outputs (and
  the gradients its gradient function returns) depend on it, so that it runs whenever they are computed. The values
  themselves pass through unchanged;
* inside XLA (`jit_compile=True`), which cannot call back into Python, it adds nothing and notes the op unrecorded.

A graph traced before the watch would run without the recording, so while a watch runs:

* Keras's compiled train, test and predict functions (traced once per model and kept) are made again the first time
  a model needs them (without XLA, so that they can call back into Python); the model gets its own back when the
  watch ends;
* a `tf.function` of the user's traced before the watch runs a copy of itself traced for the watch (`_clone`: the
  same function and settings), and keeps its own trace for after. A copy whose trace would create variables (others
  than the function's own) is never run, nor is one compiled by XLA: the function runs its own trace, unrecorded,
  and the watch says so.

A `tf.function` first traced during the watch is not copied (its first trace may create the variables it keeps): its
traces are forgotten when the watch ends, so that it traces again, without the recording, when next called.
TensorFlow's and Keras's own custom gradients (`tf.recompute_grad`, distributed all-reduce) are not recorded.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
import weakref
from typing import Any, Callable, Iterator

import numpy as np
import tensorflow as tf
from tensorflow.python.eager.polymorphic_function import polymorphic_function  # tf.function, to trace again
from tensorflow.python.framework import ops as tf_ops  # the default graph, to tell an XLA context
from tensorflow.python.ops import control_flow_util  # whether a graph is compiled by XLA
from tensorflow.python.ops import custom_gradient as tf_custom_gradient
from tensorflow.python.util import (
    nest,  # for flatten_with_tuple_paths, which tf.nest lacks
    tf_decorator,
)

from gradmagic.frameworks import keras_backend
from gradmagic.frameworks.names import backend_name
from gradmagic.frameworks.watching import BackwardCall, ForwardCall, Instrumentation, OpSite, Recorder

_DECORATORS = ("_eager_mode_decorator", "_graph_mode_decorator")
#: Packages whose own custom-gradient ops are not the user's: passed through unrecorded.
_FRAMEWORK_PACKAGES = ("tensorflow", "keras", "tf_keras", "gradmagic")
_KERAS_FUNCTIONS = ("train", "test", "predict")
#: What `keras.ops.custom_gradient` is on Keras's other backends, whose ops a watch does not record.
_KERAS_CUSTOM_GRADIENTS = {"jax": "jax.custom_vjp", "torch": "a torch.autograd.Function"}
#: The recorder of the running watch; graphs traced under an earlier watch record into it too.
_active: Recorder | None = None
#: gradmagic's own checks running: their calls of ops (perturbed inputs, compiled batches) are not the watched code's.
_checks = 0
_POSITIONAL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_one_watch = threading.Lock()


@contextlib.contextmanager
def recording(recorder: Recorder) -> Iterator[Instrumentation]:
    """Within: every call of every custom-gradient op (and of its gradient function) is handed to `recorder`;
    everything changed for it is put back on the way out, also on an error or KeyboardInterrupt."""
    global _active
    notes: list[str] = []
    keras_functions, traced_functions = _KerasFunctions(notes), _TracedFunctions(notes)
    if not _one_watch.acquire(blocking=False):
        raise RuntimeError("another watch is running in this process")
    originals = {name: getattr(tf_custom_gradient, name) for name in _DECORATORS}
    try:
        _active = recorder
        for name, original in originals.items():
            setattr(tf_custom_gradient, name, _standing_in(original))
        keras_functions.install()
        traced_functions.install()
        yield Instrumentation("tensorflow", tf.__version__, notes)
    finally:
        for name, original in originals.items():
            setattr(tf_custom_gradient, name, original)
        _active = None
        notes[:0] = _unrecorded_keras()
        try:
            traced_functions.restore()
            keras_functions.restore()
        finally:
            _one_watch.release()


@contextlib.contextmanager
def unrecorded() -> Iterator[None]:
    """Within: calls of ops are not recorded by a running watch (the adapters' checks run inside)."""
    global _checks
    _checks += 1
    try:
        yield
    finally:
        _checks -= 1


def decorated(call: Callable) -> Callable:
    """`call` (an op's own function as recorded) decorated again with `tf.custom_gradient`, to be checked."""
    return tf.custom_gradient(call)


def _standing_in(original: Callable) -> Callable:
    """TensorFlow's module decorator, calling a recording stand-in for the user's function."""

    def decorator(function, args, kwargs):
        site = None if _checks else _site(function)
        if site is None:
            return original(function, args, kwargs)
        return original(_recorded(function, site), args, kwargs)

    return decorator


def _site(function: Callable) -> OpSite | None:
    """The op `function` belongs to, or None for TensorFlow's and Keras's own custom gradients."""
    innermost = function
    while isinstance(innermost, functools.partial) or inspect.ismethod(innermost):
        innermost = innermost.func if isinstance(innermost, functools.partial) else innermost.__func__
    module = getattr(innermost, "__module__", None) or ""
    if module.split(".")[0] in _FRAMEWORK_PACKAGES:
        return None
    code = getattr(innermost, "__code__", None)
    name = getattr(innermost, "__name__", None) or getattr(function, "__name__", type(function).__name__)
    return OpSite(innermost, name, code.co_filename if code else None, code.co_firstlineno if code else None)


def _recorded(function: Callable, site: OpSite) -> Callable:
    """The stand-in: `function` called, its call recorded, its gradient function recording too."""

    def recorded(*args, **kwargs):
        result, gradient_function = function(*args, **kwargs)
        try:
            return _record_forward(site, _Call(function, args, kwargs, result), result, gradient_function)
        except Exception as error:  # noqa: BLE001 - the watched code runs as without the watch, recorded or not
            _note_failure(site, error)
            return result, gradient_function

    # tf.custom_gradient names the op's gradient after the function it is given.
    recorded.__name__ = getattr(function, "__name__", site.name)
    return recorded


def _record_forward(site: OpSite, call: _Call, result: Any, gradient_function: Callable) -> tuple[Any, Callable]:
    """Record the call now (eagerly) or at each run of the graph being traced; the result to return and the
    gradient function recording too."""
    if tf.executing_eagerly():
        call_id = _deliver("forward", site, call.forward(call.inputs, call.outputs, compiled=False))
    elif _in_xla():
        _deliver("unrecorded", site, "was traced inside XLA (jit_compile=True), which cannot call back into Python")
        return result, gradient_function
    else:
        count = len(call.inputs)

        def each_run(*values):
            return _deliver("forward", site, call.forward(values[:count], values[count:], compiled=True))

        values = [tf.stop_gradient(value) for value in call.inputs + call.outputs]
        call_id = tf.numpy_function(each_run, values, tf.int64, name="gradmagic_watch")
        call.inputs = call.outputs = []  # the graph's tensors: each run hands over its values
        result = _after(call_id, result)
    return result, _recording_gradient(gradient_function, site, call_id, call.gradient_names)


def _recording_gradient(
    gradient_function: Callable, site: OpSite, call_id: Any, input_names: tuple[str, ...]
) -> Callable:
    """`gradient_function`, recording each call (TensorFlow reads its signature, for `variables`, through it)."""

    def gradient(*upstream, **kwargs):
        gradients = gradient_function(*upstream, **kwargs)
        try:
            return _record_backward(site, call_id, upstream, gradients, input_names, kwargs.get("variables"))
        except Exception as error:  # noqa: BLE001 - as in the forward
            _note_failure(site, error)
            return gradients

    return tf_decorator.make_decorator(gradient_function, gradient)


def _record_backward(
    site: OpSite, call_id: Any, upstream: tuple, gradients: Any, input_names: tuple[str, ...], variables: Any
) -> Any:
    """Record a call of the gradient function now or at each run; the gradients to return."""
    names = _gradient_names(gradients, input_names, variables)
    flat = tf.nest.flatten(gradients)
    returned = [gradient for gradient in flat if _recordable(gradient)]
    upstream = [value for value in upstream if _recordable(value)]

    def call(values: list) -> BackwardCall:
        arrays = iter([np.asarray(value) for value in values[len(upstream) :]])
        return BackwardCall(
            [np.asarray(value) for value in values[: len(upstream)]],
            names,
            [next(arrays) if _recordable(gradient) else None for gradient in flat],
        )

    if tf.executing_eagerly():
        _deliver("backward", site, int(call_id), call(upstream + returned))
        return gradients
    if _in_xla():
        return gradients

    def each_run(identifier, *values):
        return _deliver("backward", site, int(identifier), call(list(values)))

    values = [tf.convert_to_tensor(call_id, tf.int64)] + [tf.stop_gradient(value) for value in upstream + returned]
    done = tf.numpy_function(each_run, values, tf.int64, name="gradmagic_watch_gradient")
    return _after(done, gradients)


class _Call:
    """The recordable tensors of one call of an op, where they sit in its arguments, and their names."""

    def __init__(self, function: Callable, args: tuple, kwargs: dict, result: Any):
        leaves = tf.nest.flatten((args, kwargs))
        self.function = function
        self.structure = tf.nest.map_structure(lambda leaf: None, (args, kwargs))  # no graph tensor kept alive
        names = _argument_names(function, args, kwargs)
        self.picked = [i for i, leaf in enumerate(leaves) if _recordable(leaf)]
        self.inputs = [leaves[i] for i in self.picked]
        self.input_names = tuple(names[i] for i in self.picked)
        self.gradient_names = tuple(names[: len(tf.nest.flatten(args))])
        # What the arguments hold besides the recorded tensors (Python numbers, strings): kept to call the op again.
        self.constants = [None if _is_tensor(leaf) else leaf for leaf in leaves]
        outputs = nest.flatten_with_tuple_paths(result)
        self.outputs = [leaf for _, leaf in outputs if _recordable(leaf)]
        self.output_names = tuple("output" + _path(path) for path, leaf in outputs if _recordable(leaf))

    def arguments(self, arrays: list[np.ndarray]) -> tuple[tuple, dict]:
        leaves = list(self.constants)
        for position, array in zip(self.picked, arrays):
            leaves[position] = array
        return tf.nest.pack_sequence_as(self.structure, leaves)

    def forward(self, inputs: list, outputs: list, compiled: bool) -> ForwardCall:
        """The call as the recorder gets it: these values (the tensors themselves, or a run's) as arrays."""
        return ForwardCall(
            self.function,
            self.input_names,
            [np.asarray(value) for value in inputs],
            self.output_names,
            [np.asarray(value) for value in outputs],
            self.arguments,
            compiled,
        )


def _deliver(method: str, site: OpSite, *arguments: Any) -> int:
    """Hand a call to the running watch's recorder (-1 when none runs). Recording never breaks the watched code: an
    error in it is noted as the op unrecorded."""
    recorder = _active
    if recorder is None or _checks:
        return -1
    try:
        return getattr(recorder, method)(site, *arguments) or -1
    except Exception as error:  # noqa: BLE001 - the watched code runs on whatever recording meets
        _note_failure(site, error)
        return -1


def _note_failure(site: OpSite, error: Exception) -> None:
    """Tell the running watch that recording a call of the op failed (the call itself went on)."""
    recorder = _active
    if recorder is not None:
        with contextlib.suppress(Exception):
            recorder.unrecorded(site, f"could not be recorded ({type(error).__name__}: {error})")


def _after(done: tf.Tensor, structure: Any) -> Any:
    """`structure` with each tensor waiting for `done` (an identity), so that computing it runs `done` too."""
    with tf.control_dependencies([done]):
        return tf.nest.map_structure(lambda leaf: tf.identity(leaf) if _is_tensor(leaf) else leaf, structure)


def _in_xla() -> bool:
    return control_flow_util.GraphOrParentsInXlaContext(tf_ops.get_default_graph())


def _is_tensor(value: Any) -> bool:
    return isinstance(value, (tf.Tensor, tf.Variable))


def _recordable(value: Any) -> bool:
    """A dense tensor (or a variable, or an array) of numbers or booleans: what a call's values are recorded of."""
    if isinstance(value, (tf.Tensor, tf.Variable)):
        return value.dtype.is_numpy_compatible and value.dtype not in (tf.string, tf.resource, tf.variant)
    return isinstance(value, np.ndarray) and value.dtype.kind in "biufc"


def _positional(function: Callable) -> tuple[tuple[str, ...], str]:
    """The names of `function`'s positional parameters, and of its `*args` (kept per function: eager calls ask
    often)."""
    try:
        return _POSITIONAL[function]
    except (KeyError, TypeError):
        pass
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return (), "args"
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = tuple(p.name for p in parameters if p.kind in kinds)
    variadic = next((p.name for p in parameters if p.kind == inspect.Parameter.VAR_POSITIONAL), "args")
    with contextlib.suppress(TypeError):  # a callable that cannot be referenced weakly is read each time
        _POSITIONAL[function] = (positional, variadic)
    return positional, variadic


def _argument_names(function: Callable, args: tuple, kwargs: dict) -> list[str]:
    """A name for each leaf of `(args, kwargs)`, in `tf.nest.flatten` order: `x`, `args[1]`, `pair[0]`."""
    skipped = 0
    while isinstance(function, functools.partial) or inspect.ismethod(function):
        if isinstance(function, functools.partial):
            skipped += len(function.args)
            function = function.func
        else:
            skipped += 1  # self
            function = function.__func__
    positional, variadic = _positional(function)
    positional = positional[skipped:]
    names = []
    for index, arg in enumerate(args):
        base = positional[index] if index < len(positional) else f"{variadic}[{index - len(positional)}]"
        names += [base + _path(path) for path, _ in nest.flatten_with_tuple_paths(arg)]
    names += [str(path[0]) + _path(path[1:]) for path, _ in nest.flatten_with_tuple_paths(kwargs)]
    return names


def _gradient_names(gradients: Any, input_names: tuple[str, ...], variables: Any) -> tuple[str, ...]:
    """Names of the flat gradients: the inputs', then `variable NAME` for each variable's."""
    inputs, variable_gradients = gradients, ()
    if variables and isinstance(gradients, (tuple, list)) and len(gradients) == 2:
        inputs, variable_gradients = gradients
    count = len(tf.nest.flatten(inputs))
    names = list(input_names) if count == len(input_names) else [f"gradient[{i}]" for i in range(count)]
    variable_names = [f"variable {getattr(v, 'name', i).removesuffix(':0')}" for i, v in enumerate(variables or ())]
    names += variable_names[: len(tf.nest.flatten(variable_gradients))]
    names += [f"gradient[{i}]" for i in range(len(names), len(tf.nest.flatten(gradients)))]
    return tuple(names)


def _path(path: tuple) -> str:
    return "".join(f"[{step!r}]" if isinstance(step, str) else f"[{step}]" for step in path)


class _KerasFunctions:
    """Keras models' compiled train, test and predict functions, made again under the watch, put back after.

    A model keeps the functions it traced (`model.train_function`); while a watch runs, the first time a model needs
    one it makes it again, so that the trace runs through the recording. XLA cannot call back into Python: a model
    compiled with XLA (`jit_compile`, Keras's default on a GPU) makes them without it, and the watch says so. When the
    watch ends, each model gets back the function it had (or none, to trace again when next needed).
    """

    def __init__(self, notes: list[str]):
        self.notes = notes
        self.trainer = _keras_trainer()
        self.originals: dict[str, Callable] = {}
        self.previous: dict[tuple[int, str], tuple[weakref.ref, Any]] = {}
        self.made: dict[tuple[int, str], list] = {}

    def install(self) -> None:
        if self.trainer is None:
            return
        for kind in _KERAS_FUNCTIONS:
            name = f"make_{kind}_function"
            self.originals[name] = self.trainer.__dict__[name]
            setattr(self.trainer, name, self._making(kind, self.originals[name]))

    def _making(self, kind: str, original: Callable) -> Callable:
        attribute = f"{kind}_function"

        @functools.wraps(original)
        def make_function(model, force=False):
            key = (id(model), kind)
            if key not in self.previous:
                self.previous[key] = (weakref.ref(model), getattr(model, attribute))
                force = True
            before = getattr(model, attribute)
            jit_compile = not model.run_eagerly and model.jit_compile  # resolves Keras's "auto" as making would
            if jit_compile:
                model._jit_compile = False
                self._note_xla(model, kind)
            try:
                made = original(model, force=force)
            finally:
                if jit_compile:
                    model._jit_compile = True
            if getattr(model, attribute) is not before:
                self.made.setdefault(key, []).append(getattr(model, attribute))
            return made

        return make_function

    def _note_xla(self, model: Any, kind: str) -> None:
        note = (
            f"Keras model `{model.name}` ran its {kind} steps without XLA (jit_compile) during the watch: XLA cannot "
            "call back into Python to record the custom gradients' calls."
        )
        if note not in self.notes:
            self.notes.append(note)

    def restore(self) -> None:
        for name, original in self.originals.items():
            setattr(self.trainer, name, original)
        for (_, kind), (model_reference, previous) in self.previous.items():
            model = model_reference()
            made = self.made.get((id(model), kind), [])
            attribute = f"{kind}_function"
            if model is not None and any(getattr(model, attribute) is function for function in made):
                # The function it had, unless the model was compiled again meanwhile (then it traces anew).
                setattr(model, attribute, previous if getattr(model, attribute) is made[0] else None)


class _TracedFunctions:
    """The user's `tf.function`s: those traced before the watch run a copy traced for it, those traced during it
    forget those traces when it ends (see the module's docstring)."""

    def __init__(self, notes: list[str]):
        self.notes = notes
        self.copies: dict[int, tuple[Any, Any]] = {}  # id(function): (function, its copy or None: run it as it is)
        self.traced: dict[int, Any] = {}  # the user's functions run as they are, and traced during the watch
        self.original: Callable | None = None

    def install(self) -> None:
        self.original = polymorphic_function.Function.__call__
        original, copies = self.original, self.copies

        @functools.wraps(original)
        def call(function, *args, **kwargs):
            entry = copies.get(id(function))
            if entry is None or entry[0] is not function:
                entry = copies[id(function)] = (function, self._copy(function, args, kwargs))
            if entry[1] is not None:
                return entry[1](*args, **kwargs)
            traces = function.experimental_get_tracing_count()
            try:
                return original(function, *args, **kwargs)
            finally:
                traced = function.experimental_get_tracing_count() != traces
                if traced and not function._jit_compile and _users(function):  # XLA: traced without the recording
                    self.traced[id(function)] = function

        polymorphic_function.Function.__call__ = call

    def _copy(self, function: Any, args: tuple, kwargs: dict) -> Any:
        """A copy of `function` traced under the watch for these arguments, or None to run it as it is: not traced
        yet (it traces under the watch), TensorFlow's or Keras's own, run eagerly, compiled by XLA, or creating
        variables when traced."""
        if function.experimental_get_tracing_count() == 0 or not _users(function) or tf.config.functions_run_eagerly():
            return None
        python_function = inspect.unwrap(function.python_function)
        name = getattr(python_function, "__name__", "a tf.function")
        if function._jit_compile:
            self._note(
                f"tf.function `{name}` was traced before the watch, with XLA (jit_compile=True): it ran its own "
                "trace, and the custom gradients it calls went unrecorded."
            )
            return None
        copy = function._clone(None)
        self.copies[id(copy)] = (copy, None)  # the copy itself runs as it is
        try:
            copy.get_concrete_function(*args, **kwargs)  # traced now, so that a copy creating variables never runs
        except Exception:  # noqa: BLE001 - the function itself runs, and raises if it raises
            return None
        if copy._created_variables:
            self._note(
                f"tf.function `{name}` was traced before the watch, and creates variables when traced (a copy traced "
                "for the watch would create others): it ran its own trace, and the custom gradients it calls went "
                "unrecorded. Define it again under the watch to record them."
            )
            return None
        self._note(
            f"tf.function `{name}` was traced before the watch: a copy of it was traced for the watch (its own trace "
            "is kept for after)."
        )
        return copy

    def _note(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)

    def restore(self) -> None:
        if self.original is not None:
            polymorphic_function.Function.__call__ = self.original
        for function in self.traced.values():
            # Its traces hold the recording: it traces again when next called (its variables, if it made any, stay).
            function._function_cache.clear()
        self.copies.clear()
        self.traced.clear()


def _users(function: Any) -> bool:
    """Whether a `tf.function` runs the user's code (not TensorFlow's, Keras's or gradmagic's own)."""
    python_function = inspect.unwrap(function.python_function)
    return (getattr(python_function, "__module__", None) or "").split(".")[0] not in _FRAMEWORK_PACKAGES


def _keras_trainer() -> type | None:
    """Keras 3's TensorFlow trainer class, if this process runs Keras on TensorFlow (Keras is not imported here)."""
    if keras_backend() != "tensorflow":
        return None
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer

    return TensorFlowTrainer


def _unrecorded_keras() -> list[str]:
    """A note where Keras runs on JAX or PyTorch in this process: its custom-gradient ops are not recorded, said
    plainly with what to do instead."""
    backend = keras_backend()
    if backend not in _KERAS_CUSTOM_GRADIENTS:
        return []
    name = backend_name(backend)
    return [
        f"Keras runs on {name} in this process (KERAS_BACKEND={backend}), and a watch records TensorFlow's "
        "custom-gradient ops only (tf.custom_gradient, and keras.ops.custom_gradient on Keras's TensorFlow backend): "
        f"keras.ops.custom_gradient ops on {name} ({_KERAS_CUSTOM_GRADIENTS[backend]}) are not watched, so none of "
        "their calls was recorded or checked. Check such an op with gradmagic.check(op, x) at the inputs its layer "
        "receives (a batch of the previous layer's outputs), or run the model with KERAS_BACKEND=tensorflow to watch "
        "it."
    ]
