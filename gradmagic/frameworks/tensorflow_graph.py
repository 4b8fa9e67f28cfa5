"""TensorFlow 1's graph mode: ops in a tf.compat.v1 graph, differentiated with `tf.gradients`, run in a Session.

`get_adapter("tensorflow")` gives this adapter where TensorFlow builds graphs
instead of running ops eagerly: after `tf.compat.v1.disable_eager_execution()`
(or `disable_v2_behavior()`), or inside `with tf.Graph().as_default():`. Ops
are decorated as in eager mode (`tf.custom_gradient` picks its graph-mode
implementation by itself); a check goes through the same phases as the eager
one, each built into a graph and run in a session:

* **A graph and session of gradmagic's own** (`check_scope`), one per op,
  kept for its later checks as the eager adapter keeps its compiled
  functions: what a check builds for an input layout, later checks run again
  with new feeds. The user's graph gets no operation and the user's session
  runs nothing but reads. The user's graph is finalized while a check runs,
  so that anything which would still try to add to it fails instead.
* **Example inputs** become placeholders, fed with their values in every run.
  Python and NumPy values are taken as they are; tensors and variables of the
  user's graph are read in the default session (or, without one on that
  graph, computed alone); a placeholder has no value to check at.
* **Variables**: what the forward reads is found before it is built for real,
  by building it once in a `FuncGraph`, which captures every tensor it takes
  from another graph instead of adding to that graph. Each resource variable
  of the user's graph it reads, directly or through `get_variable` (by name),
  gets a copy in the check's graph, set to the user's value at each check,
  and the user's variable object points at the copy until the check ends
  (`_Workspace.mirror`). Perturbing and restoring the copies never touches
  the user's values. Variables the op creates itself live in the check's
  graph. Non-resource variables (the seed's "the enclosing variable scope
  must be using ResourceVariables") and other tensors of the user's graph are
  problems of their own.
* **Batches**: one `session.run` where the eager adapter makes one compiled
  call. The finite differences go through one map over the stacked points
  (vectorised with `tf.vectorized_map`, or a sequential `tf.map_fn` when the
  points assign variables), the Jacobians through `tf.gradients` of one-hot
  upstream rows, vectorised.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
from typing import Any, Callable

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import record  # VariableWatcher: the variables a call reads, as tf.custom_gradient sees
from tensorflow.python.framework import func_graph  # FuncGraph: captures what a call takes from other graphs
from tensorflow.python.ops import resource_variable_ops

from gradmagic.frameworks.base import FullJacobians, Layout, OpProblem, Projections, RawGraph, Target, TensorMeta
from gradmagic.frameworks.tensorflow import (
    TensorFlowAdapter,
    _autodiff_or_nan,
    _cache_of,
    _flat_outputs,
    _gradient_registry,
    _input_leaves_at,
    _plain,
    _raw_op,
    _sources,
    _unless_all_nan,
    _unregister,
    _z_dtype,
)

_WORKSPACE = "graph-mode workspace"
# A workspace serves an op's checks until its graph holds this many operations; then the next check starts a new
# one. Each check builds the forward and the gradient function once more, for the structure checks, and its session
# keeps what it prepared to run them: about 0.16 MB a check for the seed's op, 12 operations (measured).
_KEPT_OPERATIONS = 2_000

_GLOBAL = tf.compat.v1.GraphKeys.GLOBAL_VARIABLES
_LOCAL = tf.compat.v1.GraphKeys.LOCAL_VARIABLES
_TRAINABLE = tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES


class TensorFlowGraphAdapter(TensorFlowAdapter):
    """`tf.custom_gradient` ops in TensorFlow 1's graph mode: `tf.gradients`, `tf.compat.v1.Session`."""

    mode = "graph"
    autodiff = "tf.gradients"
    compiled = "tf.compat.v1 Session"

    def __init__(self):
        self._workspaces: list[_Workspace] = []

    @contextlib.contextmanager
    def check_scope(self, target: Target):
        """The op's graph and session, kept for its later checks; the user's graph guarded, their variables
        restored after."""
        cache = _cache_of(target.raw)
        workspace = cache.get(_WORKSPACE)
        if workspace is None or workspace.full:
            if workspace is not None:
                workspace.close()
            workspace = cache[_WORKSPACE] = _Workspace()
        elif workspace.checking_now:  # a check of this op inside one of its checks (a progress callback's)
            workspace = _Workspace()
        with workspace.checking():
            self._workspaces.append(workspace)
            try:
                yield
            finally:
                self._workspaces.pop()

    def example_scope(self):
        """A graph of the examples' own: `tf.constant(...)` there, read by the check, adds nothing to the user's."""
        return tf.Graph().as_default()

    @property
    def _here(self) -> _Workspace:
        if not self._workspaces:
            raise RuntimeError("graph-mode checks build and run inside the adapter's check_scope()")
        return self._workspaces[-1]

    def to_tensors(self, structure: Any) -> Any:
        return tf.nest.map_structure(self._here.input_tensor, structure)

    def meta(self, value: Any) -> TensorMeta | None:
        if not isinstance(value, (tf.Tensor, tf.Variable)):
            return super().meta(value)
        dtype = tf.as_dtype(value.dtype).base_dtype
        # as_list: after tf.compat.v1.disable_v2_behavior() a shape's dimensions are Dimension objects.
        shape = tuple(value.shape.as_list()) if value.shape.rank is not None else None
        if (shape is None or None in shape) and self._workspaces:  # a shape only running the graph knows
            known = self._here.known.get(_key(value))
            shape = known.shape if known is not None else shape
        return TensorMeta(shape if shape is not None else (), dtype.name, dtype.is_floating)

    def to_numpy(self, value: Any) -> np.ndarray:
        return self._here.value(value)

    def run_recording_variables(self, call: Callable[[], Any], exclude: list) -> tuple[Any, list]:
        """Build `call()` in the check's graph and run it; the variables it reads, sorted by name as
        tf.custom_gradient passes them in graph mode."""
        return self._here.run_forward(call, exclude)

    def call_gradient(self, grad_fn: Callable, args: list, kwargs: dict) -> Any:
        returned = grad_fn(*args, **kwargs)
        self._here.evaluate([t for t in tf.nest.flatten(returned) if isinstance(t, tf.Tensor)])
        return returned

    def constant(self, array: np.ndarray, dtype: str) -> Any:
        return self._here.constant(array, dtype)

    def cast(self, value: Any, dtype: str) -> Any:
        return self._here.cast(value, dtype)

    def decorated_gradients(self, target: Target, layout: Layout, upstreams: list) -> tuple[list, list]:
        """Outputs and gradients of the op as a TensorFlow 1 user takes them: `tf.gradients`, one session.run."""
        signature = tuple((u.dtype.name, tuple(u.shape.as_list())) for u in upstreams)

        def build():
            inputs = list(layout.inputs)
            upstream_inputs = [tf.compat.v1.placeholder(dtype, shape, name="upstream") for dtype, shape in signature]
            outputs = tf.nest.flatten(target.op(*tf.nest.pack_sequence_as(layout.structure, inputs), **layout.kwargs))
            gradients = tf.gradients(
                outputs,
                _sources(layout, inputs),
                grad_ys=upstream_inputs,
                unconnected_gradients=tf.UnconnectedGradients.ZERO,
            )
            return upstream_inputs, [outputs, [tf.convert_to_tensor(g) for g in gradients]]

        upstream_inputs, fetches = self._here.built(("decorated_gradients", signature), layout, build)
        values = self._here.run(fetches, dict(zip(upstream_inputs, map(self.to_numpy, upstreams))))
        return list(values[0]), list(values[1])

    def full_jacobians(self, target: Target, layout: Layout, steps: np.ndarray | None) -> FullJacobians:
        with_differences = steps is not None
        z = self.initial_vector(layout)

        def build():
            inputs = list(layout.inputs)
            at = tf.compat.v1.placeholder(z.dtype, [z.size], name="z")
            step_sizes = tf.compat.v1.placeholder(z.dtype, [z.size], name="steps")
            custom = _jacobian(layout, inputs, target.op)
            autodiff = _autodiff_or_nan(lambda: _jacobian(layout, inputs, _plain(target)), custom)
            evaluations = tf.zeros([0, 0], z.dtype)
            if with_differences:
                identity = tf.linalg.diag(step_sizes)
                points = tf.concat([at[None], at[None] + identity, at[None] - identity], axis=0)
                with tf.control_dependencies([custom, autodiff]):  # the points assign the variables the above read
                    evaluations = _along(layout, inputs, points, at, _forward_vector(target, layout))
            return (at, step_sizes), (evaluations, custom, autodiff)

        (at, step_sizes), fetches = self._here.built(("full_jacobians", with_differences), layout, build)
        evaluations, custom, autodiff = self._here.run(
            fetches, {at: z, step_sizes: steps if with_differences else z}, perturbs=layout.variables
        )
        return FullJacobians(
            evaluations if with_differences else None,
            custom,
            None if np.isnan(autodiff).all() and autodiff.size else autodiff,
        )

    def second_order(self, target: Target, layout: Layout, steps: np.ndarray, upstream: np.ndarray) -> FullJacobians:
        """The custom VJP h(z) = J(z)^T u as a function of z: its central differences and its Jacobian (tf.gradients
        of the gradient function's ops), in one session.run."""
        z = self.initial_vector(layout)

        def build():
            inputs = list(layout.inputs)
            at = tf.compat.v1.placeholder(z.dtype, [z.size], name="z")
            step_sizes = tf.compat.v1.placeholder(z.dtype, [z.size], name="steps")
            upstream_vector = tf.compat.v1.placeholder(z.dtype, [upstream.size], name="upstream")
            gradient = _vjp(layout, inputs, target.op, upstream_vector)
            jacobian = _rows(gradient, _sources(layout, inputs), z.dtype, vectorize=False)
            identity = tf.linalg.diag(step_sizes)
            points = tf.concat([at[None], at[None] + identity, at[None] - identity], axis=0)
            with tf.control_dependencies([jacobian]):
                evaluations = _along(
                    layout, inputs, points, at, lambda leaves: _vjp(layout, leaves, target.op, upstream_vector)
                )
            return (at, step_sizes, upstream_vector), (evaluations, jacobian)

        (at, step_sizes, upstream_vector), fetches = self._here.built(("second_order",), layout, build)
        evaluations, jacobian = self._here.run(
            fetches, {at: z, step_sizes: steps, upstream_vector: upstream}, perturbs=layout.variables
        )
        return FullJacobians(evaluations, jacobian, None)

    def gradient_graph(self, target: Target, layout: Layout, upstreams: list, arguments: list) -> RawGraph:
        """Forward (name scope "forward") and `tf.gradients` backward ("backward") built together, ops classified."""
        signature = tuple((u.dtype.name, tuple(u.shape.as_list())) for u in upstreams)
        build = functools.partial(self._trace, target, layout, upstreams, arguments)
        return self._here.built(("gradient_graph", signature, tuple(arguments)), layout, build)

    def _trace(self, target: Target, layout: Layout, upstreams: list, arguments: list) -> RawGraph:
        graph = self._here.graph
        first = len(graph.get_operations())
        inputs = [tf.compat.v1.placeholder(t.dtype, t.shape, name="input") for t in layout.inputs]
        upstream_inputs = [tf.compat.v1.placeholder(u.dtype, u.shape, name="upstream") for u in upstreams]
        with tf.name_scope("forward") as forward:
            outputs = tf.nest.flatten(target.op(*tf.nest.pack_sequence_as(layout.structure, inputs), **layout.kwargs))
        with tf.name_scope("backward") as backward:
            gradients = [
                tf.convert_to_tensor(g)
                for g in tf.gradients(
                    outputs,
                    _sources(layout, inputs),
                    grad_ys=upstream_inputs,
                    unconnected_gradients=tf.UnconnectedGradients.ZERO,
                )
            ]
        built = graph.get_operations()[first:]
        inside = {op.name for op in built}
        outside = {t.op.name: t.op for op in built for t in op.inputs if t.op.name not in inside}
        placeholders = {t.op.name: kind for t, kind in zip(inputs + upstream_inputs, arguments)}
        variables = {v.handle.op.name: v for v in layout.variables}
        scopes = {forward.rstrip("/"): "forward", backward.rstrip("/"): "backward"}
        ops = [
            dataclasses.replace(_raw_op(op, target.filename, placeholders, variables, scopes), inputs=())
            for op in outside.values()
        ]
        ops += [_raw_op(op, target.filename, placeholders, variables, scopes) for op in built]
        return RawGraph(
            tuple(ops),
            tuple((t.op.name, t.value_index) for t in outputs),
            tuple((t.op.name, t.value_index) for t in gradients),
        )

    def evaluate_points(self, target: Target, layout: Layout, points: np.ndarray) -> np.ndarray:
        z = self.initial_vector(layout).astype(points.dtype)

        def build():
            at = tf.compat.v1.placeholder(points.dtype, [z.size], name="z")
            rows = tf.compat.v1.placeholder(points.dtype, [None, z.size], name="points")
            return (at, rows), _along(layout, list(layout.inputs), rows, at, _forward_vector(target, layout))

        (at, rows), evaluations = self._here.built(("evaluate_points", str(points.dtype)), layout, build)
        return self._here.run(evaluations, {at: z, rows: points}, perturbs=layout.variables)

    def sweep(
        self, target: Target, layout: Layout, points: np.ndarray, row: int, column: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        z = self.initial_vector(layout).astype(points.dtype)
        dtype = tf.as_dtype(points.dtype)

        def build():
            at = tf.compat.v1.placeholder(dtype, [z.size], name="z")
            rows = tf.compat.v1.placeholder(dtype, [None, z.size], name="points")
            row_index = tf.compat.v1.placeholder(tf.int32, [], name="row")
            column_index = tf.compat.v1.placeholder(tf.int32, [], name="column")

            def one_hot(flat):
                return tf.one_hot(row_index, tf.size(flat), dtype=flat.dtype)

            def evaluate(leaves):
                values, custom = _outputs_and_vjp(layout, leaves, target.op, one_hot, dtype)
                autodiff = _autodiff_or_nan(
                    lambda: _outputs_and_vjp(layout, leaves, _plain(target), one_hot, dtype)[1][column_index],
                    custom[column_index],
                )
                return tf.stack([values[row_index], custom[column_index], autodiff])

            return (at, rows, row_index, column_index), _along(layout, list(layout.inputs), rows, at, evaluate)

        (at, rows, row_index, column_index), results = self._here.built(("sweep", dtype.name), layout, build)
        results = self._here.run(
            results, {at: z, rows: points, row_index: row, column_index: column}, perturbs=layout.variables
        )
        return results[:, 0], results[:, 1], _unless_all_nan(results[:, 2])

    def vjps(self, target: Target, layout: Layout, upstream: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        def build():
            upstream_vector = tf.compat.v1.placeholder(upstream.dtype, [upstream.size], name="upstream")
            return upstream_vector, _custom_and_autodiff_vjps(target, layout, upstream_vector)

        upstream_vector, fetches = self._here.built(("vjps", str(upstream.dtype)), layout, build)
        custom, autodiff = self._here.run(fetches, {upstream_vector: upstream})
        return custom, _unless_all_nan(autodiff)

    def prober(
        self, target: Target, layout: Layout, steps: np.ndarray, outputs: int, seed: int, signs: np.ndarray
    ) -> GraphProber:
        return GraphProber(self._here, target, layout, steps, outputs, seed, signs, self.initial_vector(layout))


class GraphProber:
    """Projection-mode measurements for one check: the custom VJP in one run, then one run per `measure`.

    The upstream vector u is drawn from the seed with the same stateless random
    op as the eager adapter's, so a seed gives the same vector in both modes.
    """

    def __init__(
        self,
        workspace: _Workspace,
        target: Target,
        layout: Layout,
        steps: np.ndarray,
        outputs: int,
        seed: int,
        signs: np.ndarray,
        z: np.ndarray,
    ):
        self.workspace = workspace
        self.layout = layout
        self.steps = steps
        self.signs = signs.astype(np.int8)
        self.z = z

        def build_vjps():
            upstream = tf.random.stateless_normal([outputs], [seed, 2], dtype=steps.dtype)
            return (), (upstream, *_custom_and_autodiff_vjps(target, layout, upstream))

        _, fetches = workspace.built(("prober vjps", str(steps.dtype), outputs, seed), layout, build_vjps)
        self.upstream, self._custom, self._autodiff = workspace.run(fetches)
        self._measure = {}
        for with_rounding in (True, False):

            def build(with_rounding=with_rounding):
                return _projections(target, layout, steps.dtype, z.size, with_rounding)

            self._measure[with_rounding] = workspace.built(
                ("projections", str(steps.dtype), with_rounding), layout, build
            )

    @property
    def custom(self) -> np.ndarray:
        return self._custom

    @property
    def autodiff(self) -> np.ndarray | None:
        return _unless_all_nan(self._autodiff)

    @property
    def upstream_vector(self) -> np.ndarray:
        return self.upstream

    def direction(self, row: int, element: int) -> float:
        return float(self.signs[row, element]) * float(self.steps[element])

    def measure(self, rows: list[int], weights: np.ndarray, rounding: bool = True) -> Projections:
        placeholders, results = self._measure[rounding]
        values = (self.z, self.steps, self.signs, np.asarray(rows, np.int32), weights.astype(np.float32))
        values += (self.upstream, self._custom)
        results = self.workspace.run(results, dict(zip(placeholders, values)), perturbs=self.layout.variables)
        return Projections(*results.T)


class _Workspace:
    """The graph and session an op's checks build in and run, kept with the op as the eager adapter keeps its
    compiled functions: what a check builds for an input layout, later checks run again with new feeds.

    Per check (`checking`): the user's graph guarded, their variables pointed at their copies here and back, the
    values at the example point.
    """

    def __init__(self):
        self.graph = tf.Graph()
        self.session: tf.compat.v1.Session | None = None
        self.placeholders: dict = {}  # (dtype, shape, n) -> the n-th input placeholder of that dtype and shape
        self.casts: dict = {}  # (source key, dtype) -> the cast of an input
        self.built_computations: dict = {}
        self.copies: dict = {}  # user variable key -> (its copy here, the placeholder that initialises it)
        self.private_values: dict = {}  # key of a variable the op created here -> its value (kept between runs)
        self.scanned = 0  # operations already looked at by `_refuse_vector_conds`
        self.restorers: dict = {}
        self.checking_now = False
        self.refused = False  # the graph holds what must never run: the next check starts afresh
        self._start_check()

    def _start_check(self) -> None:
        self.user_graph = tf.compat.v1.get_default_graph()
        self.user_session = tf.compat.v1.get_default_session()
        self.feeds: dict = {}  # the input placeholders and their values, fed in every run
        self.known: dict = dict(self.private_values)  # tensor or variable key -> its value at the example point
        self.handed_out: collections.Counter = collections.Counter()  # input placeholders given, by signature
        self.swapped: dict = {}  # user variable key -> (the variable, its saved attributes)
        self.mirrored_names: dict = {}  # a mirrored variable's name in the user's graph -> the variable
        self.user_handles: set = set()  # the user graph's handles of mirrored variables
        self.scratch_sessions: dict = {}  # sessions of our own on the user's graphs, for values computed alone
        self.pending_mirrors: list = []  # (initializer, its placeholder, the user's value) of copies to set

    @property
    def full(self) -> bool:
        return self.refused or len(self.graph.get_operations()) > _KEPT_OPERATIONS

    @contextlib.contextmanager
    def checking(self):
        """One check: this graph the default, the user's graph finalized, mirrored variables restored after."""
        self._start_check()
        self.checking_now = True
        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(self.graph.as_default())
                stack.enter_context(
                    tf.compat.v1.variable_scope(
                        tf.compat.v1.get_variable_scope(),
                        reuse=tf.compat.v1.AUTO_REUSE,  # the forward is built more than once
                        custom_getter=self._get_variable,
                    )
                )
                if not self.user_graph.finalized:
                    self.user_graph.finalize()
                    stack.callback(self.user_graph._unsafe_unfinalize)
                registry = _gradient_registry()
                registered = set(registry)
                # Each graph-mode call of a custom-gradient op registers its gradient function for good; what this
                # check built has its gradients already.
                stack.callback(lambda: _unregister([name for name in list(registry) if name not in registered]))
                stack.callback(self._restore_user_variables)
                stack.callback(self._close_scratch_sessions)
                yield self
        finally:
            self.checking_now = False

    # -- values ---------------------------------------------------------------------

    def input_tensor(self, leaf: Any) -> Any:
        """An example input as a placeholder of this graph, fed with its value in every run of this check."""
        if getattr(leaf, "graph", None) is self.graph:  # the check's own (a gradient, given to `to_tensors`)
            return tf.convert_to_tensor(leaf)
        if isinstance(leaf, (tf.Tensor, tf.Variable)):
            value, dtype = self.outside_value(leaf), leaf.dtype.base_dtype
        else:
            proto = tf.make_tensor_proto(leaf)
            value, dtype = tf.make_ndarray(proto), tf.as_dtype(proto.dtype)
        signature = (dtype.name, value.shape)
        key = signature + (self.handed_out[signature],)
        self.handed_out[signature] += 1
        if key not in self.placeholders:
            with self.graph.name_scope(None):
                self.placeholders[key] = tf.compat.v1.placeholder(dtype, value.shape, name="example")
        placeholder = self.placeholders[key]
        self.feeds[placeholder] = value
        self.known[_key(placeholder)] = value
        return placeholder

    def outside_value(self, tensor: Any) -> np.ndarray:
        """The value of a tensor or variable of the user's graph, read in the user's default session (or, without
        one on that graph, computed alone): ValueError saying why when it has none."""
        name = tensor.name if isinstance(tensor, tf.Tensor) else tensor.name.removesuffix(":0")
        if isinstance(tensor, tf.Tensor) and tensor.op.type in ("Placeholder", "PlaceholderV2"):
            raise ValueError(
                f"`{name}` is a tf.compat.v1.placeholder: it has no value to check the op at. Give the value you "
                "would feed it (a NumPy array or Python numbers), e.g. `x=np.array([...], np.float32)`."
            )
        try:
            return np.asarray(self.session_for(tensor.graph).run(tensor))
        except tf.errors.OpError as error:
            cause = _cause(error)
            if isinstance(error, tf.errors.FailedPreconditionError):
                advice = (
                    "it reads a variable your default session has not initialised: initialise it, and make that "
                    "session the default (`tf.compat.v1.InteractiveSession()`, or `with sess.as_default():`)"
                )
            else:
                advice = "give its value instead (a NumPy array), e.g. the array you would feed"
            raise ValueError(f"`{name}` has no value here ({cause}): {advice}.") from None

    def session_for(self, graph: tf.Graph) -> tf.compat.v1.Session:
        """The user's default session if it runs `graph`, else a session of our own on it (nothing to initialise)."""
        if self.user_session is not None and self.user_session.graph is graph:
            return self.user_session
        if graph not in self.scratch_sessions:
            self.scratch_sessions[graph] = tf.compat.v1.Session(graph=graph)
        return self.scratch_sessions[graph]

    def constant(self, array: np.ndarray, dtype: str) -> tf.Tensor:
        tensor = tf.constant(array, dtype=dtype)
        self.known[_key(tensor)] = np.asarray(array).astype(tensor.dtype.as_numpy_dtype)
        return tensor

    def cast(self, value: Any, dtype: str) -> tf.Tensor:
        """`value` cast to `dtype`; the same tensor for the same input in every check (so what was built for it
        is run again)."""
        key = (_key(value), dtype)
        if key not in self.casts:
            self.casts[key] = tf.cast(value, dtype)
        tensor = self.casts[key]
        if _key(value) in self.known:
            self.known[_key(tensor)] = self.known[_key(value)].astype(tensor.dtype.as_numpy_dtype)
        return tensor

    def value(self, value: Any) -> np.ndarray:
        """A tensor or variable of this graph (or a NumPy or Python value) as NumPy."""
        if not isinstance(value, (tf.Tensor, tf.Variable, tf.IndexedSlices)):
            return np.asarray(value)
        key = _key(value)
        if key not in self.known:
            self.known[key] = self.run(tf.convert_to_tensor(value))
        return self.known[key]

    def evaluate(self, tensors: list) -> None:
        """Run `tensors` (in one session.run) and remember their values; errors the op raises at run time surface."""
        missing = list({_key(t): t for t in tensors if _key(t) not in self.known}.values())
        if missing:
            for tensor, value in zip(missing, self.run(missing)):
                self.known[_key(tensor)] = value

    # -- running ----------------------------------------------------------------------

    def built(self, kind: tuple, layout: Layout, build: Callable[[], Any]) -> Any:
        """`build()` for this layout, built once and kept for later checks."""
        key = kind + (layout.perturbable, tuple(map(id, layout.inputs)), tuple(map(id, layout.variables)))
        key += (tuple(sorted((name, id(value)) for name, value in layout.kwargs.items())),)
        if key not in self.built_computations:
            self.built_computations[key] = (build(), layout)  # the layout keeps the ids in the key alive
        return self.built_computations[key][0]

    def run(self, fetches: Any, feeds: dict | None = None, perturbs: tuple = ()) -> Any:
        """One session.run of this graph, the example inputs fed. If it may perturb variables (`perturbs`) and
        fails, they are put back."""
        self._initialise_variables()
        self._refuse_vector_conds()
        try:
            return self._session().run(fetches, {**self.feeds, **(feeds or {})})
        except BaseException as error:
            if perturbs:
                self._restore_variables(perturbs)
            if isinstance(error, tf.errors.OpError):  # the cause, not TensorFlow's framing; `op` keeps the line
                raise type(error)(error.node_def, error.op, _cause(error)) from None
            raise

    def _session(self) -> tf.compat.v1.Session:
        if self.session is None:
            self.session = tf.compat.v1.Session(graph=self.graph)
        return self.session

    def _refuse_vector_conds(self) -> None:
        """Raise where a tf.cond has a vector predicate: running it aborts the process (measured with TF 2.21)."""
        operations = self.graph.get_operations()
        for op in operations[self.scanned :]:
            predicate = op.inputs[0].shape if op.type in ("If", "StatelessIf") else None
            if predicate is not None and predicate.rank not in (None, 0):
                self.refused = True
                raise tf.errors.InvalidArgumentError(
                    None,
                    op,
                    f"tf.cond got a predicate of shape {predicate.as_list()}: it needs a scalar (one boolean). In a "
                    f"tf.compat.v1 Session TensorFlow {tf.__version__} raises no error for this: running the graph "
                    "aborts the whole Python process (a failed CHECK in its graph optimizer), which would end the "
                    "notebook's kernel, so gradmagic did not run it. For an element-wise choice use "
                    "`tf.where(condition, a, b)`, which also keeps the gradient element-wise.",
                )
        self.scanned = len(operations)

    def close(self) -> None:
        """Free the session (its graph goes with this workspace)."""
        if self.session is not None:
            self.session.close()

    def _close_scratch_sessions(self) -> None:
        for session in self.scratch_sessions.values():
            session.close()

    # -- the forward and its variables -----------------------------------------------

    def run_forward(self, call: Callable[[], Any], exclude: list) -> tuple[Any, list]:
        """Build `call()` here and run it; (its result, the trainable variables it reads, sorted by name)."""
        before = {_key(v) for v in self._variables()}  # the discovery may create the op's variables already
        self._discover(call)
        try:
            with record.VariableWatcher() as watcher:
                result = call()
        except (RuntimeError, ValueError) as error:
            if "Graph is finalized" in str(error) or "must be from the same graph" in str(error):
                raise OpProblem("closed-over-tensor", _outside_message(str(error))) from None
            raise
        created = [v for v in self._variables() if _key(v) not in before]
        for variable in created:
            if not resource_variable_ops.is_resource_variable(variable):
                raise OpProblem("non-resource-variable", _created_reference_message(variable), variable.op)
        self.evaluate([t for t in tf.nest.flatten(result) if isinstance(t, tf.Tensor)])
        variables = [v for v in watcher.watched_variables() if not any(v is other for other in exclude)]
        return result, sorted(variables, key=lambda v: v.name)

    def _discover(self, call: Callable[[], Any]) -> None:
        """Build `call()` once in a FuncGraph, which captures what it reads from other graphs without adding to
        them; mirror the user's resource variables it reads, and refuse what cannot be mirrored."""
        scratch = func_graph.FuncGraph("gradmagic_discovery")
        with scratch.as_default(), record.VariableWatcher() as watcher:
            try:
                call()
            except OpProblem:
                raise
            except Exception:  # the real build reports it, with its line
                pass
        for variable in watcher.watched_variables():
            if variable.graph is not self.graph and resource_variable_ops.is_resource_variable(variable):
                self.mirror(variable)
        for external, internal in scratch.captures:
            if external.graph is self.graph or _key(external) in self.user_handles:
                continue
            consumer = next(iter(internal.consumers()), None)
            variable = self._variable_of(external)
            if variable is not None and resource_variable_ops.is_resource_variable(variable):
                self.mirror(variable)
            elif variable is not None:
                raise OpProblem("non-resource-variable", _read_reference_message(variable), consumer)
            else:
                raise OpProblem("closed-over-tensor", _outside_message(external.name), consumer)

    def _variables(self) -> list:
        return self.graph.get_collection(_GLOBAL) + self.graph.get_collection(_LOCAL)

    def _user_variables(self, graph: tf.Graph) -> list:
        return graph.get_collection(_GLOBAL) + graph.get_collection(_LOCAL)

    def _variable_of(self, tensor: tf.Tensor) -> Any:
        """The user's variable whose handle (resource variable) or value (reference variable) `tensor` is."""
        for variable in self._user_variables(tensor.graph):
            if resource_variable_ops.is_resource_variable(variable):
                if variable.handle is tensor:
                    return variable
            elif any(tensor is getattr(variable, name, None) for name in ("_variable", "_snapshot")):
                return variable
        return None

    def _get_variable(self, getter: Callable, name: str, *args, **kwargs) -> Any:
        """`get_variable` in the check's graph: the user's resource variable of that name, mirrored, if there is
        one; else a variable of the check's graph (reused when the forward is built again)."""
        existing = self.mirrored_names.get(name)
        if existing is None:
            existing = next((v for v in self._user_variables(self.user_graph) if v.op.name == name), None)
        if existing is None:
            return getter(name, *args, **kwargs)
        if not resource_variable_ops.is_resource_variable(existing):
            raise OpProblem("non-resource-variable", _read_reference_message(existing))
        return self.mirror(existing)

    def mirror(self, variable: Any) -> Any:
        """Point the user's resource variable at its copy in this graph, set to the user's value, until the check
        ends; the same object, so tf.custom_gradient sees one variable, as in the user's graph."""
        key = _key(variable)
        if key in self.swapped:
            return variable
        value = self._user_value(variable)
        if key not in self.copies:
            with tf.init_scope(), self.graph.as_default(), self.graph.name_scope(None):
                initial = tf.compat.v1.placeholder(variable.dtype.base_dtype, variable.shape, name="mirrored_value")
                copy = resource_variable_ops.ResourceVariable(
                    initial_value=initial, name=variable.op.name, trainable=False, collections=[]
                )
            self.copies[key] = (copy, initial)
            # tf.custom_gradient looks the variables it finds in the graph up by name in these collections.
            self.graph.add_to_collection(_GLOBAL, variable)
            if variable.trainable:
                self.graph.add_to_collection(_TRAINABLE, variable)
        copy, initial = self.copies[key]
        self.swapped[key] = (variable, {name: getattr(variable, name) for name in _MIRRORED_ATTRIBUTES})
        self.mirrored_names[variable.op.name] = variable
        self.user_handles.add(_key(variable.handle))
        for name in _MIRRORED_ATTRIBUTES:
            setattr(variable, name, getattr(copy, name))
        self.pending_mirrors.append((copy.initializer, initial, value))
        self.known[key] = value
        return variable

    def _user_value(self, variable: Any) -> np.ndarray:
        """The value of the user's variable in their default session; its initial value if it has none there."""
        if self.user_session is not None and self.user_session.graph is variable.graph:
            try:
                return np.asarray(self.user_session.run(variable))
            except tf.errors.FailedPreconditionError:  # not initialised in that session
                pass
        try:
            return np.asarray(self.session_for(variable.graph).run(variable.initial_value))
        except tf.errors.OpError as error:
            raise OpProblem(
                "forward-error",
                f"The forward reads the variable `{variable.name.removesuffix(':0')}`, which no default session "
                f"holds and whose initial value cannot be computed alone ({_cause(error)}). "
                "Initialise it in your session and make that session the default "
                "(`tf.compat.v1.InteractiveSession()`, or `with sess.as_default():`).",
            ) from None

    def _restore_user_variables(self) -> None:
        for variable, saved in self.swapped.values():
            for name, value in saved.items():
                setattr(variable, name, value)

    def _initialise_variables(self) -> None:
        """Set the copies to the user's values and initialise the variables the op created in this graph, noting
        the latter's values: one run, before the first run that needs them."""
        fresh = [v for v in self._variables() if _key(v) not in self.private_values and _key(v) not in self.copies]
        if not fresh and not self.pending_mirrors:
            return
        initializers = [v.initializer for v in fresh] + [initializer for initializer, _, _ in self.pending_mirrors]
        with tf.init_scope(), tf.control_dependencies(initializers):
            reads = [tf.identity(v.read_value()) for v in fresh]
        values = self._session().run(
            [reads, initializers], {placeholder: value for _, placeholder, value in self.pending_mirrors}
        )[0]
        self.pending_mirrors = []
        for variable, value in zip(fresh, values):
            self.private_values[_key(variable)] = self.known[_key(variable)] = value

    def _restore_variables(self, variables: tuple) -> None:
        """Put the variables back to their values at the example point (after a run that failed midway)."""
        key = tuple(map(_key, variables))
        if key not in self.restorers:
            values = [tf.compat.v1.placeholder(v.dtype.base_dtype, v.shape) for v in variables]
            self.restorers[key] = (values, [v.assign(value, read_value=False) for v, value in zip(variables, values)])
        values, assignments = self.restorers[key]
        self._session().run(assignments, {p: self.known[_key(v)] for p, v in zip(values, variables)})


# What the user's variable object reads and writes through: pointed at its copy while a check runs.
_MIRRORED_ATTRIBUTES = ("_handle", "_graph_element", "_cached_value", "_initializer_op")


def _cause(error: tf.errors.OpError) -> str:
    """What went wrong, from a session.run error: the lines after TensorFlow's "Node: '...'" framing."""
    lines = [line.strip() for line in error.message.strip().splitlines()]
    after = [i for i, line in enumerate(lines) if line.startswith("Node: ")]
    lines = lines[after[-1] + 1 :] if after else lines
    return " ".join(line for line in lines if line and not line.startswith("[[")) or error.message


def _key(value: Any) -> Any:
    return value.ref() if hasattr(value, "ref") else id(value)


def _created_reference_message(variable: Any) -> str:
    return (
        f"The forward creates `{variable.name.removesuffix(':0')}` as a reference variable (a RefVariable), in a "
        "variable scope with `use_resource=False` (or TensorFlow 1's default after "
        '`tf.compat.v1.disable_v2_behavior()`). tf.custom_gradient needs ResourceVariables: "if the decorated '
        'function uses Variables, the enclosing variable scope must be using ResourceVariables"; calling the op '
        "raises `TypeError: All variables used by a function wrapped with @custom_gradient must be "
        "`ResourceVariable`s`. Create it with `tf.compat.v1.get_variable(..., use_resource=True)`, or inside "
        "`tf.compat.v1.variable_scope(..., use_resource=True)`."
    )


def _read_reference_message(variable: Any) -> str:
    return (
        f"The forward reads `{variable.name.removesuffix(':0')}`, a reference variable (a RefVariable, made by a "
        "variable scope with `use_resource=False` or after `tf.compat.v1.disable_v2_behavior()`). "
        'tf.custom_gradient needs ResourceVariables: "if the decorated function uses Variables, the enclosing '
        'variable scope must be using ResourceVariables" (TensorFlow 2.21 does not check a variable created '
        "outside the op, and gradmagic cannot copy it into the graph it checks in). Create it with "
        "`tf.compat.v1.get_variable(..., use_resource=True)`, or inside "
        "`tf.compat.v1.variable_scope(..., use_resource=True)`."
    )


def _outside_message(what: str) -> str:
    return (
        f"The forward uses a tensor of your graph that is not one of its inputs ({what}). gradmagic checks the op "
        "in a graph of its own, so that yours stays exactly as it is, and only variables can be copied there. "
        "Pass the tensor to the op as an input (by keyword if it needs no gradient), or create it inside the op."
    )


def _forward_vector(target: Target, layout: Layout) -> Callable:
    """The raw forward at input leaves, its floating outputs flattened in the dtype of z (see `_along`)."""

    def evaluate(leaves: list) -> tf.Tensor:
        outputs, _ = target.raw(*tf.nest.pack_sequence_as(layout.structure, leaves), **layout.kwargs)
        dtype = _z_dtype(layout, leaves)
        return _flat_outputs(outputs, dtype)

    return evaluate


def _at(layout: Layout, inputs: list, point: tf.Tensor, evaluate: Callable, after: list = ()) -> tf.Tensor:
    """`evaluate(leaves)` at the point z: inputs from z, variables assigned from its tail first (after `after`)."""
    with tf.control_dependencies(after):
        leaves, offset = _input_leaves_at(layout, inputs, point)
        assigned = _assignments(layout, point, offset)
    with tf.control_dependencies(assigned):  # the forward's variable reads, made inside, wait for the assignments
        return tf.cast(evaluate(leaves), point.dtype)


def _along(layout: Layout, inputs: list, points: tf.Tensor, z: tf.Tensor, evaluate: Callable) -> tf.Tensor:
    """`evaluate` at each row of `points`, in one graph: vectorised, or one row at a time when rows assign the
    variables, which are then put back to z."""

    def at(point: tf.Tensor) -> tf.Tensor:
        return _at(layout, inputs, point, evaluate)

    if not layout.variables:
        return tf.vectorized_map(at, points, fallback_to_while_loop=True)
    results = tf.map_fn(at, points, parallel_iterations=1)
    with tf.control_dependencies([results]):
        restored = _assignments(layout, z)
    with tf.control_dependencies(restored):
        return tf.identity(results)


def _assignments(layout: Layout, z: tf.Tensor, offset: int | None = None) -> list:
    """Assign the variables from z's tail (from `offset`); the assignment ops."""
    if offset is None:
        offset = int(z.shape[0]) - sum(int(np.prod(v.shape)) for v in layout.variables)
    assigned = []
    for variable in layout.variables:
        size = int(np.prod(variable.shape))
        value = tf.cast(tf.reshape(z[offset : offset + size], variable.shape), variable.dtype)
        assigned.append(variable.assign(value, read_value=False))
        offset += size
    return assigned


def _flat_gradient(flat: tf.Tensor, sources: list, upstream: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """tf.gradients of `flat` for the upstream vector, flattened over the sources."""
    gradients = tf.gradients(flat, sources, grad_ys=upstream, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return tf.concat([tf.reshape(tf.cast(tf.convert_to_tensor(g), dtype), [-1]) for g in gradients], axis=0)


def _outputs_and_vjp(
    layout: Layout, inputs: list, forward: Callable, upstream_for: Callable, dtype: tf.DType
) -> tuple[tf.Tensor, tf.Tensor]:
    """The flat floating outputs of `forward` and the flat vector-Jacobian product for `upstream_for(outputs)`."""
    flat = _flat_outputs(forward(*tf.nest.pack_sequence_as(layout.structure, inputs), **layout.kwargs), dtype)
    return flat, _flat_gradient(flat, _sources(layout, inputs), upstream_for(flat), dtype)


def _vjp(layout: Layout, inputs: list, forward: Callable, upstream: tf.Tensor) -> tf.Tensor:
    return _outputs_and_vjp(layout, inputs, forward, lambda flat: upstream, upstream.dtype)[1]


def _rows(flat: tf.Tensor, sources: list, dtype: tf.DType, vectorize: bool = True) -> tf.Tensor:
    """[M, N] Jacobian of `flat` over the sources: tf.gradients of each one-hot upstream row, vectorised."""
    rows = tf.eye(tf.size(flat), dtype=flat.dtype)

    def row(upstream: tf.Tensor) -> tf.Tensor:
        return _flat_gradient(flat, sources, upstream, dtype)

    if vectorize:
        try:
            return tf.vectorized_map(row, rows, fallback_to_while_loop=True)
        except ValueError:  # pfor cannot vectorise some op: a loop, still in one run
            pass
    return tf.map_fn(row, rows, fn_output_signature=dtype)


def _jacobian(layout: Layout, inputs: list, forward: Callable) -> tf.Tensor:
    """[M, N] Jacobian of the flat floating outputs of `forward` with respect to z."""
    dtype = _z_dtype(layout, inputs)
    flat = _flat_outputs(forward(*tf.nest.pack_sequence_as(layout.structure, inputs), **layout.kwargs), dtype)
    return _rows(flat, _sources(layout, inputs), dtype)


def _custom_and_autodiff_vjps(target: Target, layout: Layout, upstream: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    inputs = list(layout.inputs)
    custom = _vjp(layout, inputs, target.op, upstream)
    return custom, _autodiff_or_nan(lambda: _vjp(layout, inputs, _plain(target), upstream), custom)


def _projections(target: Target, layout: Layout, dtype: np.dtype, size: int, with_rounding: bool) -> tuple:
    """Central differences along d_t = weights_t * signs[rows_t] * steps, projected on the upstream vector:
    (placeholders, results [T, 5]) for z of `size` elements; one direction at a time when directions assign
    variables."""
    inputs = list(layout.inputs)
    z = tf.compat.v1.placeholder(dtype, [size], name="z")
    steps = tf.compat.v1.placeholder(dtype, [size], name="steps")
    signs = tf.compat.v1.placeholder(tf.int8, [None, None], name="signs")
    rows = tf.compat.v1.placeholder(tf.int32, [None], name="rows")
    weights = tf.compat.v1.placeholder(tf.float32, [None, None], name="weights")
    upstream = tf.compat.v1.placeholder(dtype, [None], name="upstream")
    gradient = tf.compat.v1.placeholder(dtype, [None], name="gradient")
    forward = _forward_vector(target, layout)
    rounding = rounding_rms = tf.constant(np.nan, dtype)
    start = []
    if with_rounding:  # the rounding of f(z +- d) is that of f(z): measured once, at the centre
        center = _at(layout, inputs, z, forward)
        rounding_terms = np.finfo(dtype).eps * tf.abs(upstream) * tf.abs(center)
        rounding = tf.reduce_sum(rounding_terms)
        rounding_rms = tf.sqrt(tf.reduce_sum(tf.square(rounding_terms)))
        start = [rounding, rounding_rms]

    def along(t):
        direction = tf.cast(weights[t], dtype) * tf.cast(signs[rows[t]], dtype) * steps
        plus = _at(layout, inputs, z + direction, forward)
        minus = _at(layout, inputs, z - direction, forward, after=[plus])  # the variables: after plus read them
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

    with tf.control_dependencies(start):
        directions = tf.range(tf.shape(rows)[0])
        one_at_a_time = 1 if layout.variables else None
        results = tf.map_fn(along, directions, fn_output_signature=dtype, parallel_iterations=one_at_a_time)
    if layout.variables:
        with tf.control_dependencies([results]):
            restored = _assignments(layout, z)
        with tf.control_dependencies(restored):
            results = tf.identity(results)
    return (z, steps, signs, rows, weights, upstream, gradient), results


ADAPTER = TensorFlowGraphAdapter()
