"""Every call of every `tf.custom_gradient` op, recorded while a watch runs (see `gradmagic.frameworks.watching`).

`tf.custom_gradient` (and `keras.ops.custom_gradient` on TensorFlow, which is it) routes each call of an op through
one of two module functions, `_eager_mode_decorator` and `_graph_mode_decorator`, looked up when the call happens.
While a watch runs, both give TensorFlow a stand-in for the user's function, which calls it and records the call:

* eagerly, the values as the call happens, and those of its gradient when a tape calls the gradient function;
* in a graph (a `tf.function`, Keras's train function, a TensorFlow 1 graph) the stand-in runs when the graph is
  traced: it adds a `tf.numpy_function` that hands each run's values to the recorder, and makes the op's outputs (and
  the gradients its gradient function returns) depend on it, so that it runs whenever they are computed. The values
  themselves pass through unchanged;
* inside XLA (`jit_compile=True`), which cannot call back into Python, it adds nothing: the op is noted as traced
  there (`Recorder.traced`), each run of the XLA-compiled function is counted at its boundary, and chosen runs are
  replayed uncompiled to record the ops (`_XlaSteps`);
* in a step replicated over several replicas (`tf.distribute`), each call says its replica, and the op is checked
  across them (`replicas.py`).

A graph traced before the watch would run without the recording, so while a watch runs:

* Keras's compiled train, test and predict functions (traced once per model and kept) are made again the first time
  a model needs them (XLA kept where the model has it); the model gets its own back when the watch ends;
* a `tf.function` of the user's traced before the watch runs a copy of itself traced for the watch (`_clone`: the
  same function and settings), and keeps its own trace for after. A copy whose trace would create variables (others
  than the function's own) is never run: the function runs its own trace, unrecorded, and the watch says so.

A `tf.function` first traced during the watch is not copied (its first trace may create the variables it keeps): its
traces are forgotten when the watch ends, so that it traces again, without the recording, when next called.
TensorFlow's and Keras's own custom gradients (`tf.recompute_grad`, distributed all-reduce) are not recorded.

A gradient registered with `tf.RegisterGradient` (not TensorFlow's own) is recorded where TensorFlow takes it from the
registry (`overrides.taken`): it gets a stand-in that calls it and records, now or at each run of the backward being
built, a call of the op it was taken for (its inputs and outputs) and of the gradient; the op is checked through that
op built again under the override (`_registered_forward`).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import inspect
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
import tensorflow as tf
from tensorflow.python.eager.polymorphic_function import polymorphic_function  # tf.function, to trace again
from tensorflow.python.framework import op_def_registry  # an op type's inputs, to build one again
from tensorflow.python.framework import ops as tf_ops  # the default graph, to tell an XLA context
from tensorflow.python.ops import control_flow_util  # whether a graph is compiled by XLA
from tensorflow.python.ops import custom_gradient as tf_custom_gradient
from tensorflow.python.util import (
    nest,  # for flatten_with_tuple_paths, which tf.nest lacks
    tf_decorator,
)

from gradmagic.frameworks import is_keras_variable, keras_backend, watching
from gradmagic.frameworks.tensorflow import overrides, replicas
from gradmagic.frameworks.tensorflow.replicas import traced_once
from gradmagic.frameworks.watching import (
    BackwardCall,
    ForwardCall,
    Instrumentation,
    OpSite,
    Recorder,
    Replica,
    TracedCall,
    in_callback,
)

_DECORATORS = ("_eager_mode_decorator", "_graph_mode_decorator")
#: Packages whose own custom-gradient ops are not the user's: passed through unrecorded.
_FRAMEWORK_PACKAGES = ("tensorflow", "keras", "tf_keras", "gradmagic")
_KERAS_FUNCTIONS = ("train", "test", "predict")
#: The running watch's recorder (graphs traced under an earlier watch record into it too), and gradmagic's own checks
#: running, whose calls of ops (perturbed inputs, compiled batches) are not the watched code's.
_delivery = watching.Delivery()
#: The watch replaying an XLA-compiled step uncompiled (_XlaSteps): the calls recorded are replayed ones.
_replaying = 0
#: The running watch's list of multi-worker strategies met (Instrumentation.workers).
_workers: list | None = None
_one_watch = threading.Lock()


@contextlib.contextmanager
def recording(recorder: Recorder) -> Iterator[Instrumentation]:
    """Within: every call of every custom-gradient op (and of its gradient function) is handed to `recorder`;
    everything changed for it is put back on the way out, also on an error or KeyboardInterrupt."""
    global _workers
    notes: list[str] = []
    retraced: list[str] = []
    workers: list = []
    keras_functions, traced_functions = _KerasFunctions(retraced), _TracedFunctions(notes, retraced)
    if not _one_watch.acquire(blocking=False):
        raise RuntimeError("another watch is running in this process")
    originals = {name: getattr(tf_custom_gradient, name) for name in _DECORATORS}
    try:
        _delivery.recorder, _workers = recorder, workers
        for name, original in originals.items():
            setattr(tf_custom_gradient, name, _standing_in(original))
        keras_functions.install()
        traced_functions.install()
        with overrides.taken(_registered_taken):
            yield Instrumentation("tensorflow", tf.__version__, notes, retraced, workers)
    finally:
        try:
            traced_functions.xla.finish()
        finally:
            for name, original in originals.items():
                setattr(tf_custom_gradient, name, original)
            _delivery.recorder = _workers = None
        try:
            traced_functions.restore()
            keras_functions.restore()
        finally:
            _one_watch.release()


def unrecorded() -> contextlib.AbstractContextManager:
    """Within: calls of ops are not recorded by a running watch (the adapters' checks run inside)."""
    return _delivery.unrecorded()


def decorated(call: Callable) -> Callable:
    """`call` (an op's own function as recorded) decorated again with `tf.custom_gradient`, to be checked."""
    return tf.custom_gradient(call)


#: How far XLA's gradient of an op may be from its uncompiled one, in units of the dtype's machine epsilon times the
#: gradient's largest magnitude: XLA fuses and reorders arithmetic, which moves results by a few roundings.
XLA_ROUNDINGS = 1024


def compiled_difference(call: Callable, args: tuple, kwargs: dict) -> str | None:
    """Where the gradient of the op (its function as recorded, `call`) at these arguments, compiled by XLA, differs
    from its uncompiled gradient beyond XLA's rounding (XLA_ROUNDINGS), in words; None where they agree.

    Both are taken with the same upstream gradient (standard normal, seeded), each in a `tf.function`, with and
    without `jit_compile`."""
    op = tf.custom_gradient(call)
    leaves = tf.nest.flatten((args, kwargs))
    names = argument_names(call, args, kwargs)
    picked = [i for i, leaf in enumerate(leaves) if isinstance(leaf, np.ndarray) and leaf.dtype.kind == "f"]
    structure = tf.nest.map_structure(lambda leaf: None, (args, kwargs))
    generator = np.random.default_rng(0)

    def gradient(inputs, upstream):
        filled = list(leaves)
        for position, value in zip(picked, inputs):
            filled[position] = value
        call_args, call_kwargs = tf.nest.pack_sequence_as(structure, filled)
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            outputs = tf.nest.flatten(op(*call_args, **call_kwargs))
        return tape.gradient(outputs, inputs, output_gradients=upstream)

    inputs = [tf.constant(leaves[i]) for i in picked]
    with unrecorded():
        outputs = tf.nest.flatten(op(*args, **kwargs))
        upstream = [tf.constant(generator.standard_normal(output.shape), output.dtype) for output in outputs]
        plain = traced_once(gradient)(inputs, upstream)
        xla = traced_once(gradient, jit_compile=True)(inputs, upstream)
    for position, ours, theirs in zip(picked, plain, xla):
        if ours is None or theirs is None:
            continue
        ours, theirs = np.asarray(ours), np.asarray(theirs)
        scale = float(np.nanmax(np.abs(ours), initial=0.0)) or 1.0
        bound = XLA_ROUNDINGS * np.finfo(ours.dtype).eps * scale
        apart = (np.abs(ours - theirs) > bound) | (np.isnan(ours) != np.isnan(theirs))
        if apart.any():
            first = tuple(int(i) for i in np.argwhere(apart)[0])
            where = names[position] + "".join(f"[{i}]" for i in first)
            return (
                f"d{names[position]} differs at {int(apart.sum()):,} of {apart.size:,} elements (first d{where}: "
                f"under XLA {theirs[first]:.6g}, uncompiled {ours[first]:.6g}; allowed {bound:.3g}, "
                f"{XLA_ROUNDINGS} roundings of {ours.dtype} at the gradient's scale)"
            )
    return None


def gather_workers(strategy: Any, text: str) -> tuple[int, list[tuple[int, str]]]:
    """Every worker's `text` gathered on every worker (`replicas.gather_workers`): this worker's index, and (worker
    index, text) for each."""
    with unrecorded():
        return replicas.gather_workers(strategy, text)


def replica_difference(strategy: Any, call: Callable, arguments: dict[int, tuple[tuple, dict]]) -> str | None:
    """Where the gradient of the op (its function as recorded) across the replicas it ran on is off, in words; None
    where it is right (`replicas.replica_difference`, its calls unrecorded)."""
    with unrecorded():
        return replicas.replica_difference(strategy, call, arguments, argument_names)


def _standing_in(original: Callable) -> Callable:
    """TensorFlow's module decorator, calling a recording stand-in for the user's function."""

    def decorator(function, args, kwargs):
        site = _site(function) if not _delivery.checks else None
        if site is None:
            return original(function, args, kwargs)
        return original(_recorded(function, site), args, kwargs)

    return decorator


def _registered_taken(name: str, function: Callable) -> Callable:
    """The gradient TensorFlow gets for one registered with `tf.RegisterGradient(name)` that it takes to build (in a
    graph) or run (eagerly) a backward: `function`, each call recorded as a call of the op it is taken for (its inputs
    and outputs, the upstream gradients, the gradients returned), checked through that op built under the override."""
    innermost = inspect.unwrap(function)
    if _delivery.checks or (getattr(innermost, "__module__", None) or "").split(".")[0] in _FRAMEWORK_PACKAGES:
        return function
    site = dataclasses.replace(OpSite.of(innermost, name, registered=True), function=function)

    @functools.wraps(function)
    def recording(op, *upstream):
        gradients = function(op, *upstream)
        try:
            return _record_registered(site, op, upstream, gradients)
        except Exception as error:  # noqa: BLE001 - the backward is built (or runs) as without the watch
            _delivery.note_failure(site, error)
            return gradients

    return recording


def _record_registered(site: OpSite, op: Any, upstream: tuple, gradients: Any) -> Any:
    """Record a call of a registered gradient now (eagerly) or at each run of the backward being built, as a call of
    the op it was taken for followed by its gradient's call; the gradients to return."""
    definition = op_def_registry.get(op.type)
    flat = list(gradients) if isinstance(gradients, (list, tuple)) else [gradients]
    why = None
    if definition is None or getattr(tf.raw_ops, op.type, None) is None:
        why = f"was taken for a {op.type} op, which tf.raw_ops cannot build again (a custom op library's)"
    elif any(argument.number_attr or argument.type_list_attr for argument in definition.input_arg):
        why = f"was taken for a {op.type} op, whose inputs are lists: the watch cannot call it again"
    elif not all(_recordable(value) for value in [*op.inputs, *op.outputs, *upstream]):
        why = f"was taken for a {op.type} op with inputs, outputs or upstream gradients that are not dense numbers"
    if why is not None:
        _delivery.deliver("unrecorded", site, why)
        return gradients
    forward = _registered_forward(op, site.name, site.function)
    input_names = tuple(argument.name for argument in definition.input_arg)
    output_names = tuple(f"output[{i}]" if len(op.outputs) > 1 else "output" for i in range(len(op.outputs)))
    returned = [gradient for gradient in flat if _recordable(gradient)]
    inputs, outputs = len(op.inputs), len(op.inputs) + len(op.outputs)
    calls = len(upstream)

    def arguments(given: list[np.ndarray]) -> tuple[tuple, dict]:
        return tuple(given), {}

    def record(values: list, compiled: bool) -> int:
        arrays = [np.asarray(value) for value in values]
        call = ForwardCall(forward, input_names, arrays[:inputs], output_names, arrays[inputs:outputs], arguments,
                           compiled)
        call_id = _delivery.deliver("forward", site, call)
        kept = iter(arrays[outputs + calls:])
        names = tuple(input_names[i] if i < len(input_names) else f"gradient[{i}]" for i in range(len(flat)))
        backward = BackwardCall(arrays[outputs:outputs + calls], names,
                                [next(kept) if _recordable(gradient) else None for gradient in flat])
        _delivery.deliver("backward", site, call_id, backward)
        return call_id

    values = [*op.inputs, *op.outputs, *upstream, *returned]
    if tf.executing_eagerly():
        record(values, False)
        return gradients
    shapes = [value.shape for value in op.inputs]
    if all(shape.rank is not None for shape in shapes):  # checked at inputs made to these where no run hands any over
        dtypes = tuple(np.dtype(value.dtype.as_numpy_dtype) for value in op.inputs)
        traced = TracedCall(forward, input_names, dtypes, tuple(tuple(shape.as_list()) for shape in shapes),
                            arguments, _in_xla())
        _delivery.deliver("traced", site, traced)
    if _in_xla():  # XLA cannot call back into Python: the op is checked at inputs of its traced shapes
        return gradients
    done = tf.numpy_function(
        in_callback(lambda *run: np.int64(record(list(run), True))),
        [tf.stop_gradient(value) for value in values],
        tf.int64,
        name="gradmagic_watch_registered",
    )
    return _after(done, gradients)


def _registered_forward(op: Any, name: str, function: Callable) -> Callable:
    """A tf.function building one op of `op`'s type with its attributes under the override that gives it the gradient
    registered as `name` (`function`; a gradient registered under the type itself is overridden by itself)."""
    build = overrides.primitive(op.type)
    signature = inspect.signature(build)
    attributes = {}
    for key in [p.name for p in signature.parameters.values() if p.kind is p.KEYWORD_ONLY]:
        with contextlib.suppress(ValueError, KeyError, TypeError):  # not set on this op: the op type's default
            attributes[key] = op.get_attr(key)

    def forward(*inputs):
        return build(*inputs, **attributes)

    forward.__name__ = forward.__qualname__ = name  # the op the report names: the registered gradient's
    forward.__signature__ = signature.replace(  # type: ignore[attr-defined]  # read by inspect.signature
        parameters=[p for p in signature.parameters.values() if p.kind is not p.KEYWORD_ONLY]
    )
    gradient = overrides.RegisteredGradient(name, function, (op.type,), None, False)
    with tf.init_scope():  # a tf.function, made eagerly, applies the override wherever the check calls it
        return overrides.applying(forward, gradient)


def _site(function: Callable) -> OpSite | None:
    """The op `function` belongs to, or None for TensorFlow's and Keras's own custom gradients."""
    innermost = function
    while isinstance(innermost, functools.partial) or inspect.ismethod(innermost):
        innermost = innermost.func if isinstance(innermost, functools.partial) else innermost.__func__
    module = getattr(innermost, "__module__", None) or ""
    if module.split(".")[0] in _FRAMEWORK_PACKAGES:
        return None
    name = getattr(innermost, "__name__", None) or getattr(function, "__name__", type(function).__name__)
    return OpSite.of(innermost, name)


def _recorded(function: Callable, site: OpSite) -> Callable:
    """The stand-in: `function` called, its call recorded, its gradient function recording too."""

    def recorded(*args, **kwargs):
        result, gradient_function = function(*args, **kwargs)
        try:
            return _record_forward(site, _Call(function, args, kwargs, result), result, gradient_function)
        except Exception as error:  # noqa: BLE001 - the watched code runs as without the watch, recorded or not
            _delivery.note_failure(site, error)
            return result, gradient_function

    # tf.custom_gradient names the op's gradient after the function it is given.
    recorded.__name__ = getattr(function, "__name__", site.name)
    return recorded


def _record_forward(site: OpSite, call: _Call, result: Any, gradient_function: Callable) -> tuple[Any, Callable]:
    """Record the call now (eagerly) or at each run of the graph being traced; the result to return and the
    gradient function recording too."""
    replica = _replica()
    if tf.executing_eagerly():
        if replica is not None:
            replica = Replica(replica[0], int(replica[1]), replica[2], replica[3])
        call_id = _delivery.deliver("forward", site, call.forward(call.inputs, call.outputs, False, replica=replica))
    else:
        xla = _in_xla()
        traced = call.traced(xla)
        if traced is not None:
            _delivery.deliver("traced", site, traced)
        if xla:  # XLA cannot call back into Python: its runs are counted, and replayed uncompiled (_XlaSteps)
            _XlaSteps.traced_in_xla(site)
            return result, gradient_function
        count, ends = len(call.inputs), len(call.inputs) + len(call.outputs)

        def each_run(*values):
            index = Replica(replica[0], int(values[ends]), replica[2], replica[3]) if replica is not None else None
            forward = call.forward(values[:count], values[count:ends], True, _replaying > 0, index)
            return _delivery.deliver("forward", site, forward)

        values = [tf.stop_gradient(value) for value in call.inputs + call.outputs]
        if replica is not None:
            values.append(tf.cast(replica[1], tf.int64))
        call_id = tf.numpy_function(in_callback(each_run), values, tf.int64, name="gradmagic_watch")
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
            _delivery.note_failure(site, error)
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
        _delivery.deliver("backward", site, int(call_id), call(upstream + returned))
        return gradients
    if _in_xla():
        return gradients

    def each_run(identifier, *values):
        return _delivery.deliver("backward", site, int(identifier), call(list(values)))

    values = [tf.convert_to_tensor(call_id, tf.int64)] + [tf.stop_gradient(value) for value in upstream + returned]
    done = tf.numpy_function(in_callback(each_run), values, tf.int64, name="gradmagic_watch_gradient")
    return _after(done, gradients)


class _Call:
    """The recordable tensors of one call of an op, where they sit in its arguments, and their names."""

    def __init__(self, function: Callable, args: tuple, kwargs: dict, result: Any):
        leaves = tf.nest.flatten((args, kwargs))
        self.function = function
        self.structure = tf.nest.map_structure(lambda leaf: None, (args, kwargs))  # no graph tensor kept alive
        names = argument_names(function, args, kwargs)
        # A Keras variable passed as an input is recorded as its value at the call (the check's is the one it had).
        self.keras_variables = {i: leaf for i, leaf in enumerate(leaves) if is_keras_variable(leaf)}
        leaves = [tf.convert_to_tensor(leaf) if i in self.keras_variables else leaf for i, leaf in enumerate(leaves)]
        self.picked = [i for i, leaf in enumerate(leaves) if _recordable(leaf)]
        self.inputs = [leaves[i] for i in self.picked]
        self.input_names = tuple(names[i] for i in self.picked)
        self.gradient_names = tuple(names[: len(tf.nest.flatten(args))])
        # What the arguments hold besides the recorded tensors (Python numbers, strings): kept to call the op again.
        self.constants = [None if _is_tensor(leaf) else leaf for leaf in leaves]
        outputs = nest.flatten_with_tuple_paths(result)
        self.outputs = [leaf for _, leaf in outputs if _recordable(leaf)]
        self.output_names = tuple("output" + watching.path_label(path) for path, leaf in outputs if _recordable(leaf))

    def arguments(self, arrays: list[np.ndarray]) -> tuple[tuple, dict]:
        """The call's arguments with these arrays as its inputs; a Keras variable's place holds a Keras variable of
        the array's value (the op reads a variable, as in the call)."""
        leaves = list(self.constants)
        for position, array in zip(self.picked, arrays):
            variable = self.keras_variables.get(position)
            leaves[position] = array if variable is None else _keras_variable_like(variable, array)
        return tf.nest.pack_sequence_as(self.structure, leaves)

    def forward(
        self, inputs: list, outputs: list, compiled: bool, replayed: bool = False, replica: Replica | None = None
    ) -> ForwardCall:
        """The call as the recorder gets it: these values (the tensors themselves, or a run's) as arrays."""
        return ForwardCall(
            self.function,
            self.input_names,
            [np.asarray(value) for value in inputs],
            self.output_names,
            [np.asarray(value) for value in outputs],
            self.arguments,
            compiled,
            replayed,
            replica,
        )

    def traced(self, xla: bool) -> TracedCall | None:
        """The call as a graph being traced has it (the inputs' dtypes and shapes); None where an input's rank is not
        known (no inputs can be made for it)."""
        shapes = [value.shape for value in self.inputs]
        if any(shape.rank is None for shape in shapes):
            return None
        return TracedCall(
            self.function,
            self.input_names,
            tuple(np.dtype(value.dtype.as_numpy_dtype) for value in self.inputs),
            tuple(tuple(shape.as_list()) for shape in shapes),
            self.arguments,
            xla,
        )


def _keras_variable_like(variable: Any, value: np.ndarray) -> Any:
    """A new Keras variable of `value`, named and typed as `variable`."""
    import keras

    return keras.Variable(value, dtype=variable.dtype, trainable=variable.trainable, name=variable.name)


def _after(done: tf.Tensor, structure: Any) -> Any:
    """`structure` with each tensor waiting for `done` (an identity), so that computing it runs `done` too."""
    with tf.control_dependencies([done]):
        return tf.nest.map_structure(lambda leaf: tf.identity(leaf) if _is_tensor(leaf) else leaf, structure)


def _replica() -> tuple[Any, Any, int, int] | None:
    """(the strategy, this replica's index, how many replicas, how many on this worker) where the op is called in one
    replica of a step replicated over several (`strategy.run`, Keras's distributed train step); None elsewhere. The
    index is a tensor inside a graph."""
    if not tf.distribute.has_strategy() or tf.distribute.in_cross_replica_context():
        return None
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync < 2:
        return None
    strategy = context.strategy
    local = len(strategy.extended.worker_devices)
    workers = _workers
    if workers is not None and local < context.num_replicas_in_sync and all(s is not strategy for s in workers):
        workers.append(strategy)
    return strategy, context.replica_id_in_sync_group, context.num_replicas_in_sync, local


def _in_xla() -> bool:
    return control_flow_util.GraphOrParentsInXlaContext(tf_ops.get_default_graph())


def _is_tensor(value: Any) -> bool:
    return isinstance(value, (tf.Tensor, tf.Variable))


def _recordable(value: Any) -> bool:
    """A dense tensor (or a variable, or an array) of numbers or booleans: what a call's values are recorded of."""
    if isinstance(value, (tf.Tensor, tf.Variable)):
        return value.dtype.is_numpy_compatible and value.dtype not in (tf.string, tf.resource, tf.variant)
    return isinstance(value, np.ndarray) and value.dtype.kind in "biufc"


def argument_names(function: Callable, args: tuple, kwargs: dict) -> list[str]:
    """A name for each leaf of `(args, kwargs)`, in `tf.nest.flatten` order: `x`, `args[1]`, `pair[0]`."""
    return watching.argument_names(function, args, kwargs, nest.flatten_with_tuple_paths)


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


class _KerasFunctions:
    """Keras models' compiled train, test and predict functions, made again under the watch, put back after.

    A model keeps the functions it traced (`model.train_function`); while a watch runs, the first time a model needs
    one it makes it again, so that the trace runs through the recording. A model compiled with XLA (`jit_compile`,
    Keras's default on a GPU) keeps it: its XLA-compiled step is counted and replayed at its boundary (`_XlaSteps`).
    When the watch ends, each model gets back the function it had (or none, to trace again when next needed).
    """

    def __init__(self, retraced: list[str]):
        self.retraced = retraced
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
                if getattr(model, attribute) is not None:
                    self.retraced.append(f"Keras model `{model.name}`'s {kind} function")
                force = True
            before = getattr(model, attribute)
            made = original(model, force=force)
            if getattr(model, attribute) is not before:
                self.made.setdefault(key, []).append(getattr(model, attribute))
            return made

        return make_function

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

    def __init__(self, notes: list[str], retraced: list[str]):
        self.notes, self.retraced = notes, retraced
        self.copies: dict[int, tuple[Any, Any]] = {}  # id(function): (function, its copy or None: run it as it is)
        self.traced: dict[int, Any] = {}  # the user's functions run as they are, and traced during the watch
        self.original: Callable | None = None
        self.xla = _XlaSteps(notes, retraced, self.copies)

    def install(self) -> None:
        self.original = polymorphic_function.Function.__call__
        original, copies = self.original, self.copies

        @functools.wraps(original)
        def call(function, *args, **kwargs):
            if function._jit_compile and not tf.config.functions_run_eagerly():
                return self.xla.call(function, functools.partial(original, function), args, kwargs)
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
        self.retraced.append(f"`{name}`")
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


#: Input signatures at which each XLA-compiled function is replayed uncompiled, at most.
REPLAYED_SIGNATURES = 3
#: Runs of each XLA-compiled function whose inputs and variables are held, to replay them once a run leaves its
#: variables non-finite: that run and the one before it (where the non-finite value may have started, in a variable
#: the second only read).
HELD_RUNS = 2
#: Per thread, a dict per XLA-compiled function being traced: how many calls of each op its trace holds.
_tracing_xla = threading.local()


@dataclass
class _Run:
    """A run of an XLA-compiled function: its arguments and the values of its variables before it (packed by
    `_snapshot_values`; empty where they were not held)."""

    args: tuple
    kwargs: dict
    variables: list


class _XlaSteps:
    """XLA-compiled functions (`jit_compile=True`: a user's `tf.function`, a Keras model's train step) under the watch.

    XLA cannot call back into Python, so the custom-gradient ops inside hand over no values. The function runs
    compiled, as without the watch; its boundary is watched instead: before each run (an eager call, or each run of
    the graph calling it, through a `tf.py_function` the compiled call's inputs wait for) the watch gets the run's
    inputs and a copy of the variables the function captures (packed, one flat tensor per dtype, on their device),
    with whether they are all finite. Each run counts a call of each op its trace holds. Chosen runs are replayed: an
    uncompiled copy of the function, traced under the watch (so it records), runs at the run's inputs and the values
    its variables had before it, then every variable it captures is put back, bit for bit. Chosen: the first run at
    each input signature (up to REPLAYED_SIGNATURES), replayed before it runs; and the first run that left the
    variables not all finite (a gradient gone NaN shows in the variables it updates: seen before the next run, or
    when the watch ends), with the run before it (the last HELD_RUNS runs' inputs and variables are held for it,
    while they fit in the watch's memory limit).
    """

    def __init__(self, notes: list[str], retraced: list[str], copies: dict[int, tuple[Any, Any]]):
        self.notes, self.retraced = notes, retraced
        self.copies = copies  # _TracedFunctions.copies: the uncompiled copies run as they are
        self.reached: dict[int, dict[OpSite, int]] = {}  # id(function): calls of each op in its latest trace
        self.replayed: dict[int, list] = {}  # id(function): the input signatures replayed
        self.uncompiled: dict[int, Any] = {}  # id(function): its uncompiled copy, None where it cannot have one
        self.held: dict[int, collections.deque] = {}  # id(function): its last runs (_Run), until it goes non-finite
        #: (id(function), input signature): its trace, and its variables' snapshot (_snapshot_of), for eager calls
        self.concretes: dict[tuple, tuple[Any, Callable]] = {}
        self.last: dict[int, Any] = {}  # id(function): the trace of its last run
        self.kept: list[Any] = []  # the functions met, alive while the watch runs (their ids are keys)

    @staticmethod
    def traced_in_xla(site: OpSite) -> None:
        """Count a call of the op in the XLA-compiled function being traced on this thread."""
        stack = getattr(_tracing_xla, "stack", None)
        if stack:
            stack[-1][site] = stack[-1].get(site, 0) + 1

    def call(self, function: Any, run: Callable, args: tuple, kwargs: dict) -> Any:
        """`function` called through `run` (its own `__call__`), counted and replayed at its boundary."""
        if tf.executing_eagerly():
            signature = _signature((args, kwargs))
            known = self.concretes.get((id(function), signature))
            if known is None:
                concrete = self._concrete(function, args, kwargs)
                known = self.concretes[id(function), signature] = (concrete, _snapshot_of(concrete.variables))
            concrete, snapshot = known
            reached = self.reached.get(id(function))
            if reached:
                copies, finite = snapshot()
                self._before(function, concrete, reached, args, kwargs, signature, copies, bool(finite))
            return run(*args, **kwargs)
        concrete = self._concrete(function, args, kwargs)
        reached = self.reached.get(id(function))
        if not reached:
            return run(*args, **kwargs)
        leaves = tf.nest.flatten((args, kwargs), expand_composites=True)
        picked = [i for i, leaf in enumerate(leaves) if isinstance(leaf, tf.Tensor)]
        structure = tf.nest.map_structure(lambda leaf: None, (args, kwargs), expand_composites=True)
        constants = [None if isinstance(leaf, tf.Tensor) else leaf for leaf in leaves]
        variables = list(concrete.variables)

        def before(finite, *values):
            filled = list(constants)
            for position, value in zip(picked, values[: len(picked)]):
                filled[position] = value
            step_args, step_kwargs = tf.nest.pack_sequence_as(structure, filled, expand_composites=True)
            signature = _signature((step_args, step_kwargs))
            self._before(function, concrete, reached, step_args, step_kwargs, signature, values[len(picked) :], finite)
            return np.int64(0)

        # In the graph: the variables' values before the run (read before the compiled call, which waits for them),
        # handed over as tensors where they are (a py_function: no copy to the host), and whether they are finite.
        copies, finite = _snapshot_values(variables)
        started = tf.py_function(
            in_callback(lambda *values: before(bool(values[0]), *values[1:])),
            [finite] + [leaves[i] for i in picked] + copies,
            tf.int64,
            name="gradmagic_watch_xla_step",
        )
        with tf.control_dependencies([started]):
            for position in picked:
                leaves[position] = tf.identity(leaves[position])
        step_args, step_kwargs = tf.nest.pack_sequence_as((args, kwargs), leaves, expand_composites=True)
        return run(*step_args, **step_kwargs)

    def finish(self) -> None:
        """When the watch ends: a function whose last run left its variables non-finite has its held runs replayed
        (no later run saw it)."""
        for function in self.kept:
            held = self.held.get(id(function))
            concrete = self.last.get(id(function))
            if held and concrete is not None and not bool(_snapshot_of(concrete.variables)()[1]):
                self.held[id(function)] = None
                self._replay(function, concrete.variables, list(held))

    def _concrete(self, function: Any, args: tuple, kwargs: dict) -> Any:
        """The function's trace for these arguments (traced now if it must be), noting the ops a new trace holds. A
        function traced before the watch is traced once more, a copy, to see which ops its trace holds."""
        if id(function) not in self.reached:
            self.kept.append(function)
            if function.experimental_get_tracing_count():
                self.retraced.append(f"`{_function_name(function)}`")
                copy = function._clone(None)
                self.reached[id(function)] = _reached(lambda: copy.get_concrete_function(*args, **kwargs))[1]
        traces = function.experimental_get_tracing_count()
        concrete, reached = _reached(lambda: function.get_concrete_function(*args, **kwargs))
        if function.experimental_get_tracing_count() != traces or id(function) not in self.reached:
            self.reached[id(function)] = reached
        return concrete

    def _before(
        self,
        function: Any,
        concrete: Any,
        reached: dict[OpSite, int],
        args: tuple,
        kwargs: dict,
        signature: tuple,
        copies: Any,
        finite: bool,
    ) -> None:
        """Before a run of the compiled function, given its variables' values (`copies`) and whether they are all
        finite: where they are not (the run before left them so), the held runs replayed; the run counted, held, and
        replayed first where it is the first at its input signature."""
        self.last[id(function)] = concrete
        held = self.held.get(id(function), collections.deque(maxlen=HELD_RUNS))
        if held is not None and not finite:
            self.held[id(function)] = None  # once
            self._replay(function, concrete.variables, list(held))
            held = None
        for site, calls in reached.items():
            _delivery.deliver("ran_in_xla", site, calls)
        if held is not None:
            held.append(_Run(args, kwargs, list(copies)))
            self.held[id(function)] = held if _fits(held) else None
        replayed = self.replayed.setdefault(id(function), [])
        if signature in replayed or len(replayed) >= REPLAYED_SIGNATURES:
            return
        replayed.append(signature)
        self._replay(function, concrete.variables, [_Run(args, kwargs, [])])

    def _replay(self, function: Any, variables: Any, runs: list[_Run]) -> None:
        """Run the uncompiled copy at each run's inputs and variables (those it had before it, where held; else as
        they are), recording, then put every variable the function captures back as it was."""
        global _replaying
        if not runs or (uncompiled := self._uncompiled(function, runs[0].args, runs[0].kwargs)) is None:
            return
        now = [tf.identity(variable) for variable in variables]
        _replaying += 1
        try:
            for run in runs:
                if run.variables:
                    for variable, value in zip(variables, _unpacked(list(variables), run.variables)):
                        variable.assign(value)
                uncompiled(*run.args, **run.kwargs)
        except Exception as error:  # noqa: BLE001 - the compiled function runs all the same, and raises if it raises
            self._note(
                f"Replaying XLA-compiled `{_function_name(function)}` uncompiled failed ({type(error).__name__}: "
                f"{error}): the custom-gradient ops it runs were counted, not recorded."
            )
        finally:
            _replaying -= 1
            for variable, value in zip(variables, now):
                variable.assign(value)

    def _uncompiled(self, function: Any, args: tuple, kwargs: dict) -> Any:
        """An uncompiled copy of `function` (the same Python function and settings, without XLA), traced under the
        watch; None where the copy's trace would create variables (it would not run on the function's own)."""
        if id(function) in self.uncompiled:
            return self.uncompiled[id(function)]
        name = _function_name(function)
        self.retraced.append(f"`{name}` (uncompiled)")
        copy = function._clone(None)
        copy._jit_compile = False
        self.copies[id(copy)] = (copy, None)  # it runs as it is
        try:
            copy.get_concrete_function(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - the compiled function runs all the same
            copy = None
            self._note(
                f"XLA-compiled `{name}` could not be replayed uncompiled ({type(error).__name__}: {error}): the "
                "custom-gradient ops it runs were counted, not recorded."
            )
        if copy is not None and copy._created_variables:
            copy = None
            self._note(
                f"XLA-compiled `{name}` creates variables when traced: an uncompiled copy would create others, so it "
                "was not replayed; the custom-gradient ops it runs were counted, not recorded."
            )
        self.uncompiled[id(function)] = copy
        if copy is not None:
            self._note(
                f"`{name}` ran compiled with XLA (jit_compile), as without the watch. XLA hands no values back to "
                f"Python, so the watch replayed chosen runs uncompiled, at their inputs and variables (every variable "
                f"put back, bit for bit, after), to record the custom-gradient ops inside: the first run at each input "
                f"signature (up to {REPLAYED_SIGNATURES}), and the first run that left its variables non-finite, "
                "with the run before it; its other runs were counted."
            )
        return copy

    def _note(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)


def _fits(held: collections.deque) -> bool:
    """Whether the held runs' variables fit in the running watch's memory limit (else none are held)."""
    limit = getattr(_delivery.recorder, "memory_limit", 0)
    return len(held) * sum(flat.shape.num_elements() * flat.dtype.size for flat in held[-1].variables) <= limit


def _snapshot_values(variables: list) -> tuple[list, tf.Tensor]:
    """The variables' values packed into one flat tensor per dtype (a copy, few tensors to hand over), and whether
    every floating one is all finite (`_unpacked` gives the values back)."""
    packed = [
        tf.concat([tf.reshape(variable, [-1]) for variable in variables if variable.dtype == dtype], axis=0)
        for dtype in _dtypes(variables)
    ]
    floating = [flat for flat in packed if flat.dtype.is_floating]
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(flat)) for flat in floating]) if floating else True
    return packed, tf.convert_to_tensor(finite)


def _unpacked(variables: list, packed: list) -> list:
    """Each variable's value from `_snapshot_values`'s packed tensors."""
    flats = dict(zip(_dtypes(variables), packed))
    offsets = dict.fromkeys(flats, 0)
    values = []
    for variable in variables:
        size = variable.shape.num_elements()
        start = offsets[variable.dtype]
        values.append(tf.reshape(flats[variable.dtype][start : start + size], variable.shape))
        offsets[variable.dtype] = start + size
    return values


def _dtypes(variables: list) -> list:
    return list(dict.fromkeys(variable.dtype for variable in variables))


def _snapshot_of(variables: Any) -> Callable[[], tuple[list, tf.Tensor]]:
    """`_snapshot_values` of these variables as one call taking no argument (a dispatch of a few microseconds, where
    handing over the variables would cost TensorFlow a signature match over all of them, each call)."""
    variables = list(variables)
    return traced_once(lambda: _snapshot_values(variables), autograph=False)


def _reached(trace: Callable[[], Any]) -> tuple[Any, dict[OpSite, int]]:
    """What `trace` returns, and the calls of each op that XLA-compiled code it traced holds."""
    stack = _tracing_xla.__dict__.setdefault("stack", [])
    stack.append({})
    try:
        return trace(), stack[-1]
    finally:
        stack.pop()


def _signature(structure: Any) -> tuple:
    """What tells the runs of a function apart for its replays: each tensor's dtype and shape, other values as they
    are."""
    return tuple(
        (str(leaf.dtype), tuple(leaf.shape)) if hasattr(leaf, "dtype") and hasattr(leaf, "shape") else repr(leaf)
        for leaf in tf.nest.flatten(structure, expand_composites=True)
    )


def _function_name(function: Any) -> str:
    return getattr(inspect.unwrap(function.python_function), "__name__", None) or "a tf.function"


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

