"""The TensorFlow adapter. Importing this module imports TensorFlow."""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import functools
import inspect
import queue
import threading
import weakref
from typing import Any, Callable

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context as tf_context  # for the caller's device scope, see _Compiled
from tensorflow.python.framework import ops as tf_ops  # for the gradient registry, see _Registrations
from tensorflow.python.util import nest  # for flatten_with_tuple_paths, which tf.nest lacks

from gradmagic.frameworks.base import (
    EagerExecution,
    FullJacobians,
    GradientConvention,
    Layout,
    Projections,
    RawGraph,
    RawOp,
    Target,
    TensorMeta,
)


def executes_eagerly() -> bool:
    """Whether TensorFlow runs ops as they are called here (else it builds graphs: TensorFlow 1's graph mode)."""
    return tf.executing_eagerly()


class TensorFlowAdapter(EagerExecution):
    """`tf.custom_gradient` ops, called eagerly or inside `tf.function`."""

    name = "tensorflow"
    display_name = "TensorFlow"
    version = tf.__version__
    decorator = "tf.custom_gradient"
    backend = None
    convention = GradientConvention()
    autodiff = "tf.GradientTape"
    compiled = "tf.function"

    def decorate(self, function: Callable) -> Callable:
        """Decorate with `tf.custom_gradient`; the op also works where TensorFlow's alone fails.

        * Keyword arguments: eagerly, `tf.custom_gradient` passes them through
          as constants that get no gradient; inside `tf.function` it refuses
          them ("supports keywords arguments only when eager execution is
          enabled"). Here graph mode gets the eager behaviour.
        * AutoGraph: TensorFlow's op exposes the user's function as
          `__wrapped__`, and a `tf.function` that receives the op as an
          argument follows it and calls the raw function, which returns
          `(outputs, grad_fn)` instead of outputs. This op exposes its
          signature (`__signature__`) but not the raw function, and every call
          it makes to the user's code goes through `tf.custom_gradient`, which
          AutoGraph leaves unconverted: the user's code runs as written.
        """
        op = tf.custom_gradient(function)

        def custom_gradient_op(*args, **kwargs):
            __tracebackhide__ = True
            if kwargs and not tf.executing_eagerly():
                with_keywords = functools.partial(function, **kwargs)
                with_keywords.__name__ = function.__name__
                return tf.custom_gradient(with_keywords)(*args)
            return op(*args, **kwargs)

        for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(custom_gradient_op, attribute, getattr(function, attribute))
        custom_gradient_op.__signature__ = inspect.signature(function)
        custom_gradient_op._gradmagic_function = function
        return custom_gradient_op

    # -- checking ---------------------------------------------------------------

    def resolve(self, op: Callable) -> Target:
        """The raw function behind a gradmagic op, a hand-decorated op, or a plain function."""
        decorator = getattr(op, "_tf_decorator", None)
        if hasattr(op, "_gradmagic_function"):
            raw, origin = op._gradmagic_function, "magic"
        elif decorator is not None and decorator.decorator_name == "custom_gradient":
            raw, origin = decorator.decorated_target, "decorated"
        else:
            raw, origin = op, "plain"
            cache = _cache_of(raw)
            op = cache.get("decorated") or cache.setdefault("decorated", self.decorate(raw))
        try:
            signature = inspect.signature(raw)
        except (TypeError, ValueError):
            signature = None
        code = getattr(raw, "__code__", None)
        return Target(
            raw, op, origin, getattr(raw, "__name__", type(raw).__name__), signature, code.co_filename if code else None
        )

    def to_tensors(self, structure: Any) -> Any:
        return tf.nest.map_structure(tf.convert_to_tensor, structure)

    def flatten(self, structure: Any) -> list:
        return tf.nest.flatten(structure)

    def pack(self, structure: Any, leaves: list) -> Any:
        return tf.nest.pack_sequence_as(structure, leaves)

    def leaf_paths(self, structure: Any) -> list[str]:
        """`[0]['a']`-style paths of the leaves, in `flatten` order ("" for a leaf itself)."""
        return ["".join(f"[{step!r}]" for step in path) for path, _ in nest.flatten_with_tuple_paths(structure)]

    def meta(self, value: Any) -> TensorMeta | None:
        if not isinstance(value, (tf.Tensor, tf.Variable, np.ndarray)):
            return None
        dtype = tf.as_dtype(value.dtype)
        return TensorMeta(tuple(value.shape), dtype.name, dtype.is_floating)

    def to_numpy(self, value: Any) -> np.ndarray:
        return np.asarray(value.numpy() if hasattr(value, "numpy") else value)

    def run_recording_variables(self, call: Callable[[], Any], exclude: list) -> tuple[Any, list]:
        # The trainable variables a tape watches are those tf.custom_gradient hands to grad_fn.
        with tf.GradientTape() as tape:
            result = call()
        return result, [v for v in tape.watched_variables() if not any(v is other for other in exclude)]

    def narrows_float64(self, call: Callable[[], Any]) -> bool:
        # TensorFlow does not mix dtypes implicitly; an explicit tf.cast to float32 shows in the outputs.
        return False

    def variable_name(self, variable: Any) -> str:
        return variable.name.removesuffix(":0")

    def constant(self, array: np.ndarray, dtype: str) -> Any:
        return tf.constant(array, dtype=dtype)

    def cast(self, value: Any, dtype: str) -> Any:
        return tf.cast(value, dtype)

    def machine_epsilon(self, dtype: str) -> float:
        return float(np.finfo(tf.as_dtype(dtype).as_numpy_dtype).eps)

    def decorated_gradients(self, target: Target, layout: Layout, upstreams: list) -> tuple[list, list]:
        """Outputs and gradients of the op through TensorFlow's gradient machinery, inside tf.function."""
        outputs, gradients = self._forward_and_backward(target, layout)(list(layout.inputs), list(upstreams))
        return [o.numpy() for o in outputs], [g.numpy() for g in gradients]

    def _forward_and_backward(self, target: Target, layout: Layout) -> Callable:
        """The op and its gradient in one compiled function, each pass in its name scope ("forward", "backward").

        Shared by the eager-against-graph comparison and the gradient graph, which reads the same trace.
        """

        def traced(inputs, upstreams):
            watched = [inputs[k] for k in layout.perturbable]
            with tf.name_scope("forward"):
                with tf.GradientTape() as tape:
                    tape.watch(watched)
                    outputs = tf.nest.flatten(
                        target.op(*tf.nest.pack_sequence_as(layout.structure, inputs), **layout.kwargs)
                    )
            with tf.name_scope("backward"):
                gradients = tape.gradient(
                    outputs,
                    watched + list(layout.variables),
                    output_gradients=upstreams,
                    unconnected_gradients=tf.UnconnectedGradients.ZERO,
                )
            return outputs, gradients

        return self._compiled(target, layout, "forward_and_backward", traced)

    def full_jacobians(self, target: Target, layout: Layout, steps: np.ndarray | None) -> FullJacobians:
        def compute(inputs, z, steps):
            custom = _jacobian(layout, inputs, target.op)
            autodiff = _autodiff_or_nan(lambda: _jacobian(layout, inputs, _plain(target)), custom)
            evaluations = tf.zeros([0, 0], z.dtype)
            if with_differences:
                identity = tf.linalg.diag(steps)
                points = tf.concat([z[None], z[None] + identity, z[None] - identity], axis=0)
                evaluations = _map(layout, lambda point: _forward_vector(target, layout, inputs, point), points)
                _assign_variables(layout, z)
            return evaluations, custom, autodiff

        with_differences = steps is not None
        compiled = self._compiled(target, layout, f"full_jacobians/{with_differences}", compute)
        z = self.initial_vector(layout)
        with _variables_restored(layout):
            evaluations, custom, autodiff = compiled(
                list(layout.inputs), tf.constant(z), tf.constant(steps if with_differences else z, z.dtype)
            )
        autodiff = autodiff.numpy()
        return FullJacobians(
            evaluations.numpy() if with_differences else None,
            custom.numpy(),
            None if np.isnan(autodiff).all() and autodiff.size else autodiff,
        )

    def second_order(self, target: Target, layout: Layout, steps: np.ndarray, upstream: np.ndarray) -> FullJacobians:
        """The custom VJP h(z) = J(z)^T u as a function of z: its central differences and autodiff Jacobian."""

        def compute(inputs, z, steps, upstream):
            sources = _sources(layout, inputs)
            with tf.GradientTape() as outer:
                outer.watch([inputs[k] for k in layout.perturbable])
                gradient = _vjp(layout, inputs, target.op, upstream)
            jacobian = outer.jacobian(
                gradient, sources, unconnected_gradients=tf.UnconnectedGradients.ZERO, experimental_use_pfor=False
            )
            jacobian = tf.concat(
                [tf.reshape(tf.cast(block, z.dtype), [tf.size(gradient), -1]) for block in jacobian], axis=1
            )
            identity = tf.linalg.diag(steps)
            points = tf.concat([z[None], z[None] + identity, z[None] - identity], axis=0)
            evaluations = tf.map_fn(
                lambda point: _vjp(layout, _leaves_at(layout, inputs, point), target.op, upstream), points
            )
            _assign_variables(layout, z)
            return evaluations, jacobian

        compiled = self._compiled(target, layout, "second_order", compute)
        z = self.initial_vector(layout)
        with _variables_restored(layout):
            evaluations, jacobian = compiled(
                list(layout.inputs), tf.constant(z), tf.constant(steps, z.dtype), tf.constant(upstream, z.dtype)
            )
        return FullJacobians(evaluations.numpy(), jacobian.numpy(), None)

    def gradient_graph(self, target: Target, layout: Layout, upstreams: list, arguments: list) -> RawGraph:
        """Trace forward (name scope "forward") and backward ("backward") in one graph and classify its ops.

        `arguments` gives (kind, label) for each input leaf, then each upstream gradient.
        """

        compiled = self._forward_and_backward(target, layout)
        concrete = compiled.get_concrete_function(
            [tf.TensorSpec(t.shape, t.dtype) for t in layout.inputs],
            [tf.TensorSpec(u.shape, u.dtype) for u in upstreams],
        )
        graph = concrete.graph
        placeholders = {tensor.op.name: kind_and_label for tensor, kind_and_label in zip(graph.inputs, arguments)}
        variables = {
            internal.op.name: variable
            for external, internal in graph.captures
            for variable in layout.variables
            if external is variable.handle
        }
        ops = [_raw_op(op, target.filename, placeholders, variables) for op in graph.get_operations()]
        flat = [(t.op.name, t.value_index) for t in concrete.outputs]
        count = len(tf.nest.flatten(concrete.structured_outputs[0]))
        return RawGraph(tuple(ops), tuple(flat[:count]), tuple(flat[count:]))

    def evaluate_points(self, target: Target, layout: Layout, points: np.ndarray) -> np.ndarray:
        def compute(inputs, points):
            evaluations = _map(layout, lambda point: _forward_vector(target, layout, inputs, point), points)
            _assign_variables(layout, _z_vector(layout, inputs, points.dtype))
            return evaluations

        compiled = self._compiled(
            target,
            layout,
            "evaluate_points",
            compute,
            [
                [tf.TensorSpec(t.shape, t.dtype) for t in layout.inputs],
                tf.TensorSpec([None, points.shape[1]], points.dtype),
            ],
        )
        with _variables_restored(layout):
            return compiled(list(layout.inputs), tf.constant(points)).numpy()

    def sweep(
        self, target: Target, layout: Layout, points: np.ndarray, row: int, column: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        def compute(inputs, points, row, column):
            def one_hot(flat):
                return tf.one_hot(row, tf.size(flat), dtype=flat.dtype)

            def at(point):
                leaves = _leaves_at(layout, inputs, point)
                values, custom = _outputs_and_vjp(layout, leaves, target.op, one_hot, points.dtype)
                autodiff = _autodiff_or_nan(
                    lambda: _outputs_and_vjp(layout, leaves, _plain(target), one_hot, points.dtype)[1][column],
                    custom[column],
                )
                return tf.stack([values[row], custom[column], autodiff])

            results = _map(layout, at, points)
            _assign_variables(layout, _z_vector(layout, inputs, points.dtype))
            return results

        compiled = self._compiled(target, layout, "sweep", compute)
        with _variables_restored(layout):
            results = compiled(list(layout.inputs), tf.constant(points), tf.constant(row), tf.constant(column)).numpy()
        return results[:, 0], results[:, 1], _unless_all_nan(results[:, 2])

    def vjps(self, target: Target, layout: Layout, upstream: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        compiled = self._compiled(target, layout, "vjps", _custom_and_autodiff_vjps(layout, target))
        custom, autodiff = compiled(list(layout.inputs), tf.constant(upstream))
        return custom.numpy(), _unless_all_nan(autodiff.numpy())

    def prober(
        self, target: Target, layout: Layout, steps: np.ndarray, outputs: int, seed: int, signs: np.ndarray
    ) -> TensorFlowProber:
        return TensorFlowProber(self, target, layout, steps, outputs, seed, signs)

    def initial_vector(self, layout: Layout) -> np.ndarray:
        """z: the perturbable inputs then the variables, flattened, in the widest floating dtype among them."""
        parts = [np.ravel(self.to_numpy(layout.inputs[k])) for k in layout.perturbable]
        parts += [np.ravel(self.to_numpy(v)) for v in layout.variables]
        dtype = np.result_type(*[p.dtype for p in parts]) if parts else np.float32
        return np.concatenate([p.astype(dtype) for p in parts]) if parts else np.zeros(0, dtype)

    def _compiled(
        self, target: Target, layout: Layout, kind: str, function: Callable, input_signature: list | None = None
    ) -> Callable:
        """`function` compiled for this op and input layout, traced once and reused by later checks.

        AutoGraph stays off: inside the op TensorFlow never converts the user's
        function (tf.custom_gradient's op is exempt), so the check runs it as
        written too.
        """
        key = self._key(target, layout, kind)
        per_function = _cache_of(target.raw)
        if key not in per_function:
            compiled = tf.function(function, input_signature=input_signature, autograph=False)
            # Each op and layout gets its own function, traced once; TensorFlow's "frequent retracing" warning
            # counts traces per code object across all of them (Keras turns it off the same way).
            compiled._omit_frequent_tracing_warning = True
            per_function[key] = _Compiled(compiled, per_function[_REGISTERED])
        return per_function[key]

    @staticmethod
    def _key(target: Target, layout: Layout, kind: str) -> tuple:
        return (
            kind,
            id(target.op),
            str(tf.nest.map_structure(lambda leaf: (tuple(leaf.shape), leaf.dtype.name), layout.structure)),
            layout.perturbable,
            tuple(id(v) for v in layout.variables),
            tuple(sorted((name, id(value)) for name, value in layout.kwargs.items())),
        )


class TensorFlowProber:
    """Projection-mode measurements for one check; the large vectors stay tensors between calls.

    The upstream vector u is drawn from the seed with TensorFlow's stateless
    random ops, so the same seed gives the same vector.
    """

    def __init__(
        self,
        adapter: TensorFlowAdapter,
        target: Target,
        layout: Layout,
        steps: np.ndarray,
        outputs: int,
        seed: int,
        signs: np.ndarray,
    ):
        self.layout = layout
        self.steps = tf.constant(steps)
        dtype = self.steps.dtype
        self.signs = tf.constant(signs, tf.int8)
        self.upstream = tf.random.stateless_normal([outputs], [seed, 2], dtype=dtype)
        vjps = adapter._compiled(target, layout, "vjps", _custom_and_autodiff_vjps(layout, target))
        self._custom, self._autodiff = vjps(list(layout.inputs), self.upstream)
        signature = [
            [tf.TensorSpec(t.shape, t.dtype) for t in layout.inputs],
            tf.TensorSpec([None], dtype),
            tf.TensorSpec([None, None], tf.int8),
            tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([None, None], tf.float32),
            tf.TensorSpec([None], dtype),
            tf.TensorSpec([None], dtype),
        ]
        self._measure = {
            with_rounding: adapter._compiled(
                target, layout, f"projections/{with_rounding}", _projections(target, layout, with_rounding), signature
            )
            for with_rounding in (True, False)
        }

    @property
    def custom(self) -> np.ndarray:
        return self._custom.numpy()

    @property
    def autodiff(self) -> np.ndarray | None:
        return _unless_all_nan(self._autodiff.numpy())

    @property
    def upstream_vector(self) -> np.ndarray:
        return self.upstream.numpy()

    def direction(self, row: int, element: int) -> float:
        return float(self.signs[row, element].numpy()) * float(self.steps[element].numpy())

    def measure(self, rows: list[int], weights: np.ndarray, rounding: bool = True) -> Projections:
        with _variables_restored(self.layout):
            results = self._measure[rounding](
                list(self.layout.inputs),
                self.steps,
                self.signs,
                tf.constant(rows, tf.int32),
                tf.constant(weights, tf.float32),
                self.upstream,
                self._custom,
            )
        return Projections(*results.numpy().T)


_PASSTHROUGH = {"Identity", "IdentityN", "ReadVariableOp"}


_SCOPES = {"forward": "forward", "backward": "backward"}


def _raw_op(op, filename: str | None, placeholders: dict, variables: dict, scopes: dict = _SCOPES) -> RawOp:
    """An op of a traced graph in neutral terms (see RawOp); `scopes` maps top-level name scopes to passes."""
    scope = scopes.get(op.name.split("/")[0])
    label = ""
    outputs = tuple((tuple(t.shape.as_list()) if t.shape.rank is not None else (), t.dtype.name) for t in op.outputs)
    if op.name in placeholders:
        kind, label = placeholders[op.name]
    elif op.name in variables:  # the handle's placeholder: shown with the variable's own shape and dtype
        variable = variables[op.name]
        kind, label = "variable", variable.name.removesuffix(":0")
        outputs = ((tuple(variable.shape.as_list()), variable.dtype.name),)
    elif op.type == "Placeholder":
        kind = "capture"
    elif op.type == "Const":
        kind = "constant"
    elif op.type in _PASSTHROUGH:
        kind = "passthrough"
    elif op.type == "NoOp":
        kind = "noop"
    else:
        kind = "op"
    lines = [frame.lineno for frame in op.traceback if frame.filename == filename] if filename and scope else []
    return RawOp(
        op.name,
        op.type,
        kind,
        scope,
        tuple((t.op.name, t.value_index) for t in op.inputs),
        outputs,
        lines[-1] if lines else None,
        tuple(range(len(op.outputs))) if kind == "passthrough" else (),
        label,
    )


def _unless_all_nan(autodiff: np.ndarray) -> np.ndarray | None:
    """None when autodiff was unavailable (filled with NaN), else the array."""
    return None if autodiff.size and np.isnan(autodiff).all() else autodiff


def _custom_and_autodiff_vjps(layout: Layout, target: Target) -> Callable:
    def compute(inputs, upstream):
        custom = _vjp(layout, inputs, target.op, upstream)
        return custom, _autodiff_or_nan(lambda: _vjp(layout, inputs, _plain(target), upstream), custom)

    return compute


def _projections(target: Target, layout: Layout, with_rounding: bool) -> Callable:
    """Central differences along d_t = weights_t * signs[rows_t] * steps, projected on the upstream vector."""

    def compute(inputs, steps, signs, rows, weights, upstream, gradient):
        z = _z_vector(layout, inputs, steps.dtype)
        rounding = rounding_rms = tf.constant(np.nan, steps.dtype)
        if with_rounding:  # the rounding of f(z +- d) is that of f(z): measured once, at the centre
            center = _forward_vector(target, layout, inputs, z)
            rounding_terms = np.finfo(steps.dtype.as_numpy_dtype).eps * tf.abs(upstream) * tf.abs(center)
            rounding = tf.reduce_sum(rounding_terms)
            rounding_rms = tf.sqrt(tf.reduce_sum(tf.square(rounding_terms)))

        def along(t):
            direction = tf.cast(weights[t], steps.dtype) * tf.cast(signs[rows[t]], steps.dtype) * steps
            plus = _forward_vector(target, layout, inputs, z + direction)
            minus = _forward_vector(target, layout, inputs, z - direction)
            contribution = direction * gradient
            return tf.stack(
                [
                    tf.reduce_sum(upstream * (plus - minus)) / 2,
                    rounding,
                    rounding_rms,
                    tf.reduce_sum(contribution),
                    tf.reduce_sum(tf.abs(contribution)),
                ]
            )

        results = tf.map_fn(along, tf.range(tf.shape(rows)[0]), fn_output_signature=steps.dtype)
        _assign_variables(layout, z)
        return results

    return compute


_REGISTERED = "gradient functions registered"


def _cache_of(function: Callable) -> dict:
    """What gradmagic keeps for a raw function (its compiled functions), stored on the function itself.

    Freed with the function when the notebook redefines it: the entries refer
    back to the function, so a WeakKeyDictionary keyed by it would never let
    it go. The gradient functions that tracing registered for it (see
    `_Registrations`) leave TensorFlow's registry then too. A callable without
    attributes gets a fresh cache each time.
    """
    cache = getattr(function, "__gradmagic_cache__", None)
    if cache is None:
        try:
            cache = function.__dict__.setdefault("__gradmagic_cache__", {_REGISTERED: _Registrations()})
        except AttributeError:
            return {_REGISTERED: _Registrations()}
        weakref.finalize(function, _unregister, cache[_REGISTERED].names)
    return cache


class _Registrations:
    """The gradient functions `tf.custom_gradient` registered while an op's compiled functions traced.

    Each trace of a custom-gradient op in a graph registers a gradient
    function under a fresh name ("CustomGradient-N") in TensorFlow's global
    registry, for good; it holds the traced graph and, through the user's
    `grad`, the namespace it was defined in: about 5 MB per redefinition of
    a small op (TensorFlow issues 27492 and 97697). Here the registry keeps
    only a weak stand-in; the function itself is held by the op's cache,
    which also holds every graph that could ask for it, and the names leave
    the registry when the op's raw function is freed.
    """

    def __init__(self):
        self.names: list[str] = []
        self.functions: list[Callable] = []

    @contextlib.contextmanager
    def noting(self):
        registry = _gradient_registry()
        before = set(registry)  # not a count: a finalizer may unregister a freed op's names meanwhile
        try:
            yield
        finally:
            for name in [name for name in registry if name not in before]:
                if name.startswith("CustomGradient-"):
                    function = registry[name]["type"]
                    self.names.append(name)
                    self.functions.append(function)
                    registry[name] = {**registry[name], "type": _weak_stand_in(function)}


class _Compiled:
    """A `tf.function` traced in gradmagic's TensorFlow thread, its traces' gradient registrations noted.

    TensorFlow keeps two things for good when it traces a graph, however
    short-lived the graph:

    * the gradient functions of custom-gradient ops (see `_Registrations`);
    * what it records of the Python stack each op was created from, holding
      the stack's code objects. A notebook cell is a new code object every
      time it runs, at the bottom of every stack traced from it: re-running a
      checking cell kept about 1 MB each time. In gradmagic's own thread the
      stack starts at gradmagic's code; only the frames of the user's op can
      be new, and a `%%custom_gradient` cell run again unchanged keeps its
      code objects (`source.compile_cell`).

    Only tracing happens there: the traced function then runs in the caller's
    thread, as any `tf.function` call, so Ctrl-C and variable restoring work
    as they do without gradmagic. Ctrl-C during a trace returns at once (see
    `_in_tensorflow_thread`).
    """

    def __init__(self, function: Any, registrations: _Registrations):
        self.function = function
        self.registrations = registrations
        self.traced: set = set()  # the argument shapes and dtypes already traced for

    def __call__(self, *args):
        key = (tf_context.context().device_name,)
        if self.function.input_signature is None:  # else one trace serves every call
            key += tuple(_shape_and_dtype(leaf) for leaf in tf.nest.flatten(args))
        if key not in self.traced:
            self.get_concrete_function(*args)
            self.traced.add(key)
        return self.function(*args)

    def get_concrete_function(self, *args):
        def trace():
            with self.registrations.noting():
                return self.function.get_concrete_function(*args)

        return _in_tensorflow_thread(trace)


class _Worker:
    """A daemon thread tracing one function at a time; a new one replaces it when a caller gives up."""

    STOP = object()

    def __init__(self):
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name=_THREAD_NAME, daemon=True)
        self.thread.start()

    def submit(self, function: Callable[[], Any]) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self.jobs.put((future, function))
        return future

    def abandon(self) -> None:
        """Stop after the trace under way, which gets a KeyboardInterrupt as soon as it runs Python again.

        A trace stuck in a sleep or in C++ ends in the background when that
        returns; tracing changes nothing of the user's.
        """
        self.jobs.put(self.STOP)
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(self.thread.ident), ctypes.py_object(KeyboardInterrupt)
        )

    def _serve(self) -> None:
        while True:
            try:
                if self._serve_one() is self.STOP:
                    return
            except KeyboardInterrupt:  # abandoned between two calls
                return

    def _serve_one(self) -> Any:
        job = self.jobs.get()
        if job is self.STOP:
            return job
        future, function = job
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(function())
            except BaseException as error:
                future.set_exception(error)
        return None


_THREAD_NAME = "gradmagic-tensorflow"
_worker: _Worker | None = None
_worker_lock = threading.Lock()


def _in_tensorflow_thread(call: Callable[[], Any]) -> Any:
    """`call()` in gradmagic's TensorFlow thread (directly if already in it), in the caller's device.

    Ctrl-C while waiting raises KeyboardInterrupt here at once and abandons the
    thread (see `_Worker.abandon`); the next call starts a new one.
    """
    global _worker
    if threading.current_thread().name == _THREAD_NAME:
        return call()
    device = tf_context.context().device_name

    def in_scope():
        if not device:
            return call()
        with tf.device(device):
            return call()

    with _worker_lock:
        worker = _worker = _worker or _Worker()
    future = worker.submit(in_scope)
    try:
        return future.result()
    except KeyboardInterrupt:
        if not future.done():
            with _worker_lock:
                if _worker is worker:
                    _worker = None
            worker.abandon()
        raise


def _shape_and_dtype(leaf: Any) -> Any:
    shape = getattr(leaf, "shape", None)
    return (tuple(shape), leaf.dtype) if shape is not None and hasattr(leaf, "dtype") else leaf


def _weak_stand_in(function: Callable) -> Callable:
    reference = weakref.ref(function)

    def gradient(*args):
        alive = reference()
        if alive is None:
            raise LookupError("this custom gradient belonged to an op gradmagic has since freed")
        return alive(*args)

    return gradient


def _gradient_registry() -> dict:
    """TensorFlow's name → {"type": gradient function, ...} registry (private; an empty dict if it moves)."""
    registry = getattr(getattr(tf_ops, "_gradient_registry", None), "_registry", None)
    return registry if isinstance(registry, dict) else {}


def _unregister(names: list) -> None:
    registry = _gradient_registry()
    for name in names:
        registry.pop(name, None)


def _plain(target: Target) -> Callable:
    """The forward alone, without its custom gradient: what autodiff differentiates."""
    return lambda *args, **kwargs: target.raw(*args, **kwargs)[0]


def _sources(layout: Layout, inputs: list) -> list:
    return [inputs[k] for k in layout.perturbable] + list(layout.variables)


def _flat_outputs(outputs: Any, dtype: tf.DType) -> tf.Tensor:
    """The floating outputs, flattened and concatenated, in `dtype`."""
    leaves = [tf.reshape(tf.cast(o, dtype), [-1]) for o in tf.nest.flatten(outputs) if o.dtype.is_floating]
    return tf.concat(leaves, axis=0) if leaves else tf.zeros([0], dtype)


def _z_dtype(layout: Layout, inputs: list) -> tf.DType:
    dtypes = [inputs[k].dtype for k in layout.perturbable] + [v.dtype for v in layout.variables]
    return tf.float64 if tf.float64 in dtypes else (dtypes[0] if dtypes else tf.float32)


def _jacobian(layout: Layout, inputs: list, forward: Callable) -> tf.Tensor:
    """[M, N] Jacobian of the flat floating outputs of `forward` with respect to z."""
    sources = _sources(layout, inputs)
    dtype = _z_dtype(layout, inputs)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([inputs[k] for k in layout.perturbable])
        flat = _flat_outputs(forward(*tf.nest.pack_sequence_as(layout.structure, inputs), **layout.kwargs), dtype)
    try:
        blocks = tape.jacobian(flat, sources, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    except ValueError:  # pfor cannot vectorise some op: fall back to a loop, still in one compiled call
        blocks = tape.jacobian(
            flat, sources, unconnected_gradients=tf.UnconnectedGradients.ZERO, experimental_use_pfor=False
        )
    size = tf.size(flat)
    return tf.concat([tf.cast(tf.reshape(block, [size, -1]), dtype) for block in blocks], axis=1)


def _autodiff_or_nan(autodiff: Callable[[], tf.Tensor], like: tf.Tensor) -> tf.Tensor:
    """`autodiff()`, or NaN shaped like `like` when the forward has ops without a registered gradient."""
    try:
        return autodiff()
    except (LookupError, TypeError, ValueError):
        return tf.fill(tf.shape(like), tf.constant(np.nan, like.dtype))


def _vjp(layout: Layout, inputs: list, forward: Callable, upstream: tf.Tensor) -> tf.Tensor:
    """The flat vector-Jacobian product of `forward` for the flat upstream vector."""
    return _outputs_and_vjp(layout, inputs, forward, lambda flat: upstream, upstream.dtype)[1]


def _outputs_and_vjp(
    layout: Layout, inputs: list, forward: Callable, upstream_for: Callable, dtype: tf.DType
) -> tuple[tf.Tensor, tf.Tensor]:
    """The flat floating outputs of `forward` and the flat vector-Jacobian product for `upstream_for(outputs)`."""
    with tf.GradientTape() as tape:
        tape.watch([inputs[k] for k in layout.perturbable])
        flat = _flat_outputs(forward(*tf.nest.pack_sequence_as(layout.structure, inputs), **layout.kwargs), dtype)
    gradients = tape.gradient(
        flat,
        _sources(layout, inputs),
        output_gradients=upstream_for(flat),
        unconnected_gradients=tf.UnconnectedGradients.ZERO,
    )
    return flat, tf.concat([tf.reshape(tf.cast(g, dtype), [-1]) for g in gradients], axis=0)


def _z_vector(layout: Layout, inputs: list, dtype: tf.DType) -> tf.Tensor:
    """z inside a compiled function: the perturbable inputs then the variables, flattened."""
    parts = [tf.reshape(tf.cast(part, dtype), [-1]) for part in _sources(layout, inputs)]
    return tf.concat(parts, axis=0) if parts else tf.zeros([0], dtype)


def _leaves_at(layout: Layout, inputs: list, z: tf.Tensor) -> list:
    """The input leaves at the point z; the variables are assigned from z's tail."""
    leaves, offset = _input_leaves_at(layout, inputs, z)
    _assign_variables(layout, z, offset)
    return leaves


def _input_leaves_at(layout: Layout, inputs: list, z: tf.Tensor) -> tuple[list, int]:
    """The input leaves at the point z, and where z's tail (the variables) starts."""
    leaves = list(inputs)
    offset = 0
    for k in layout.perturbable:
        size = int(np.prod(inputs[k].shape))
        leaves[k] = tf.cast(tf.reshape(z[offset : offset + size], inputs[k].shape), inputs[k].dtype)
        offset += size
    return leaves, offset


def _forward_vector(target: Target, layout: Layout, inputs: list, z: tf.Tensor) -> tf.Tensor:
    """The raw forward at the point z, flattened, in z's dtype."""
    leaves = _leaves_at(layout, inputs, z)
    outputs, _ = target.raw(*tf.nest.pack_sequence_as(layout.structure, leaves), **layout.kwargs)
    return _flat_outputs(outputs, z.dtype)


def _assign_variables(layout: Layout, z: tf.Tensor, offset: int | None = None) -> None:
    if offset is None:
        offset = int(z.shape[0]) - sum(int(np.prod(v.shape)) for v in layout.variables)
    for variable in layout.variables:
        size = int(np.prod(variable.shape))
        variable.assign(tf.cast(tf.reshape(z[offset : offset + size], variable.shape), variable.dtype))
        offset += size


def _map(layout: Layout, function: Callable, points: tf.Tensor) -> tf.Tensor:
    """`function` over the rows of `points` in one compiled call: vectorised, or a loop when variables are assigned."""
    if layout.variables:
        return tf.map_fn(function, points)
    return tf.vectorized_map(function, points, fallback_to_while_loop=True)


class _variables_restored:
    """Put the variables back exactly as they were, whatever happens in between."""

    def __init__(self, layout: Layout):
        self.saved = [(v, v.numpy()) for v in layout.variables]

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        for variable, value in self.saved:
            variable.assign(value)
        return False


class KerasTensorFlowAdapter(TensorFlowAdapter):
    """`keras.ops.custom_gradient` on Keras 3's TensorFlow backend, where it is `tf.custom_gradient` itself.

    Ops are decorated and checked as TensorFlow's; only the names differ.
    """

    name = "keras"
    display_name = "Keras 3 (TensorFlow backend)"
    decorator = "keras.ops.custom_gradient"
    backend = "tensorflow"

    @property
    def version(self) -> str:
        import keras

        return f"keras {keras.__version__}, tensorflow {tf.__version__}"


ADAPTER = TensorFlowAdapter()
