"""TensorFlow 1's graph mode: ops in a tf.compat.v1 graph, differentiated with `tf.gradients`, run in a Session.

`get_adapter("tensorflow")` gives this adapter where TensorFlow builds graphs
instead of running ops eagerly: after `tf.compat.v1.disable_eager_execution()`
(or `disable_v2_behavior()`), or inside `with tf.Graph().as_default():`. Ops
are decorated as in eager mode (`tf.custom_gradient` picks its graph-mode
implementation by itself); a check goes through the same phases as the eager
one, each built into a graph and run in a session:

* **A graph and session of gradmagic's own** (`check_scope`, see
  `workspace.py`), one per op, kept for its later checks as the eager adapter
  keeps its compiled functions. The user's graph gets no operation and the
  user's session runs nothing but reads; the user's graph is finalized while a
  check runs, so that anything which would still try to add to it fails.
* **Example inputs** become placeholders, fed with their values in every run.
* **Variables**: each resource variable of the user's graph the forward reads
  gets a copy in the check's graph, set to the user's value at each check;
  perturbing and restoring the copies never touches the user's values.
* **Batches**: one `session.run` where the eager adapter makes one compiled
  call: a map over the stacked points (vectorised with `tf.vectorized_map`, or
  a sequential `tf.map_fn` when the points assign variables), the
  vector-Jacobian products through `tf.gradients` of the upstream rows,
  vectorised.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from gradmagic.frameworks.base import ForwardRun, Layout, RawGraph, Target, TensorMeta, Vjps, native
from gradmagic.frameworks.cache import cache_of
from gradmagic.frameworks.tensorflow import building, composite, overrides, watching
from gradmagic.frameworks.tensorflow.eager import TensorFlowAdapter
from gradmagic.frameworks.tensorflow.traced_ops import raw_op
from gradmagic.frameworks.tensorflow.wording import GRAPH_MODE
from gradmagic.frameworks.tensorflow.workspace import Workspace

_WORKSPACE = "graph-mode workspace"


class TensorFlowGraphAdapter(TensorFlowAdapter):
    """`tf.custom_gradient` ops in TensorFlow 1's graph mode: `tf.gradients`, `tf.compat.v1.Session`."""

    mode = "graph"
    keeps_unchanged_ops = False  # an op's graph and session go with it; a new cell run builds afresh
    takes_directions = False  # its own `evaluate` builds points in the session's graph
    autodiff = "tf.gradients"
    compiled = "tf.compat.v1 Session"
    wording = GRAPH_MODE

    def __init__(self):
        self._workspaces: list[Workspace] = []

    @contextlib.contextmanager
    def check_scope(self, target: Target):
        """The op's graph and session, kept for its later checks; the user's graph guarded, their variables
        restored after; a running watch does not record the check's calls."""
        cache = cache_of(target.raw)
        workspace = cache.get(_WORKSPACE)
        if workspace is None or workspace.full:
            if workspace is not None:
                workspace.close()
            workspace = cache[_WORKSPACE] = Workspace()
        elif workspace.checking_now:  # a check of this op inside one of its checks (a progress callback's)
            workspace = Workspace()
        with workspace.checking(), watching.unrecorded():
            self._workspaces.append(workspace)
            try:
                yield
            finally:
                self._workspaces.pop()

    def example_scope(self):
        """A graph of the examples' own: `tf.constant(...)` there, read by the check, adds nothing to the user's."""
        return tf.Graph().as_default()

    @property
    def _here(self) -> Workspace:
        if not self._workspaces:
            raise RuntimeError("graph-mode checks build and run inside the adapter's check_scope()")
        return self._workspaces[-1]

    # -- values ---------------------------------------------------------------------------------------------------

    def to_tensors(self, structure: Any) -> Any:
        return tf.nest.map_structure(self._here.input_tensor, structure)

    def meta(self, value: Any) -> TensorMeta | None:
        if not isinstance(value, (tf.Tensor, tf.Variable)):
            return super().meta(value)
        dtype = tf.as_dtype(value.dtype).base_dtype
        # as_list: after tf.compat.v1.disable_v2_behavior() a shape's dimensions are Dimension objects.
        shape = tuple(value.shape.as_list()) if value.shape.rank is not None else None
        if (shape is None or None in shape) and self._workspaces:  # a shape only running the graph knows
            shape = self._here.known_shape(value) or shape
        name = value.name.removesuffix(":0") if isinstance(value, tf.Variable) else None
        return TensorMeta(shape if shape is not None else (), dtype.name, dtype.is_floating, name)

    def to_numpy(self, value: Any) -> np.ndarray:
        return native(self._here.value(value))

    def constant(self, array: np.ndarray, dtype: str) -> Any:
        return self._here.constant(array, dtype)

    # -- running --------------------------------------------------------------------------------------------------

    def run_forward(self, call: Callable[[], Any], exclude: list) -> ForwardRun:
        """Build `call()` in the check's graph and run it; the variables it reads, sorted by name as
        tf.custom_gradient passes them in graph mode; the gradient overrides it entered."""
        with overrides.recording() as entered:
            result, variables = self._here.run_forward(call, exclude)
        return ForwardRun(result, variables, overrides=overrides.merged(entered))

    def _composite(self, function: Callable, overrides: bool) -> Target | None:
        """A function that enters gradient overrides, built as it is (its gradient, `tf.gradients`, through them);
        functions that call custom-gradient ops are checked as those ops here, not as composites."""
        if not overrides:
            return None
        return self._target(function, function, "composite", function, composite.without_custom(function), True, True)

    def assign(self, variable: Any, value: np.ndarray) -> None:
        raise NotImplementedError("graph mode: the user's variables hold their values in the user's session")

    def call_gradient(self, grad_fn: Callable, args: list, kwargs: dict) -> Any:
        returned = grad_fn(*args, **kwargs)
        self._here.evaluate([t for t in tf.nest.flatten(returned) if isinstance(t, tf.Tensor)])
        return returned

    def evaluate(self, target, layout, offsets, upstream=None, signs=(1.0,)) -> np.ndarray:
        z = self._z(layout, offsets.dtype)
        contracted = upstream is not None

        def build():
            at = tf.compat.v1.placeholder(offsets.dtype, [z.size], name="z")
            rows = tf.compat.v1.placeholder(offsets.dtype, [None, z.size], name="offsets")
            scales = tf.compat.v1.placeholder(offsets.dtype, [None], name="signs")
            vector = tf.compat.v1.placeholder(offsets.dtype, [None], name="upstream")
            forward = _forward(target, layout)

            def evaluate(leaves: list) -> tf.Tensor:
                return tf.tensordot(forward(leaves), vector, 1) if contracted else forward(leaves)

            # One point after the other where they assign variables (see `_along`).
            results = _along(layout, list(layout.inputs), at[None] + building.displaced(rows, scales), at, evaluate)
            shape = tf.concat([[tf.size(scales), tf.shape(rows)[0]], tf.shape(results)[1:]], 0)
            return (at, rows, scales, vector), tf.reshape(results, shape)

        kind = ("evaluate", str(offsets.dtype), contracted)
        (at, rows, scales, vector), evaluations = self._here.built(kind, layout, build)
        feeds = {at: z, rows: offsets, scales: np.asarray(signs, offsets.dtype)}
        feeds.update({vector: upstream} if contracted else {})
        return self._here.run(evaluations, feeds, perturbs=layout.variables)

    def vjps(self, target, layout, points, upstreams, autodiff=True, jacobian=False) -> Vjps:
        z = self._z(layout, points.dtype)
        one_point, count = len(points) == 1, len(upstreams)

        def build():
            at = tf.compat.v1.placeholder(points.dtype, [z.size], name="z")
            rows = tf.compat.v1.placeholder(points.dtype, [1 if one_point else None, z.size], name="points")
            upstream_rows = tf.compat.v1.placeholder(points.dtype, [count if count <= 1 else None, None], "upstreams")

            def evaluate(leaves: list) -> tuple:
                outputs, custom = _outputs_and_vjps(layout, leaves, target.op, upstream_rows, jacobian)
                if not autodiff:
                    return outputs, custom
                plain_vjps = building.autodiff_or_nan(
                    lambda: _outputs_and_vjps(layout, leaves, target.forward, upstream_rows, jacobian)[1], custom
                )
                return outputs, custom, plain_vjps

            vectorize = count == 1 and not jacobian
            fetches = _along(layout, list(layout.inputs), rows, at, evaluate, 3 if autodiff else 2, vectorize)
            return (at, rows, upstream_rows), fetches

        kind = ("vjps", str(points.dtype), one_point, min(count, 2), autodiff, jacobian)
        (at, rows, upstream_rows), fetches = self._here.built(kind, layout, build)
        results = self._here.run(fetches, {at: z, rows: points, upstream_rows: upstreams}, perturbs=layout.variables)
        return Vjps.of(results[0], results[1], results[2] if autodiff else None)

    def second_order(self, target: Target, layout: Layout, upstream: np.ndarray) -> np.ndarray:
        """The Jacobian of the custom VJP J(z)^T u: tf.gradients of the gradient function's ops, in one run."""

        def build():
            inputs = list(layout.inputs)
            upstream_vector = tf.compat.v1.placeholder(upstream.dtype, [1, upstream.size], name="upstream")
            _, gradient = _outputs_and_vjps(layout, inputs, target.op, upstream_vector)
            dtype = tf.as_dtype(upstream.dtype)
            jacobian = tf.map_fn(
                lambda row: building.flat_gradients(
                    _gradients(gradient[0], building.sources(layout, inputs), row), dtype
                ),
                tf.eye(tf.size(gradient[0]), dtype=dtype),
                fn_output_signature=dtype,
            )
            return upstream_vector, jacobian

        upstream_vector, jacobian = self._here.built(("second_order", str(upstream.dtype)), layout, build)
        return self._here.run(jacobian, {upstream_vector: upstream[None]})

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
            outputs = tf.nest.flatten(building.call(target.op, layout, inputs))
        with tf.name_scope("backward") as backward:
            gradients = [
                tf.convert_to_tensor(g) for g in _gradients(outputs, building.sources(layout, inputs), upstream_inputs)
            ]
        built = graph.get_operations()[first:]
        inside = {op.name for op in built}
        outside = {t.op.name: t.op for op in built for t in op.inputs if t.op.name not in inside}
        placeholders = {t.op.name: kind for t, kind in zip(inputs + upstream_inputs, arguments)}
        variables = {v.handle.op.name: v for v in layout.variables}
        scopes = {forward.rstrip("/"): "forward", backward.rstrip("/"): "backward"}
        ops = [
            dataclasses.replace(raw_op(op, target.filename, placeholders, variables, scopes), inputs=())
            for op in outside.values()
        ]
        ops += [raw_op(op, target.filename, placeholders, variables, scopes) for op in built]
        return RawGraph(
            tuple(ops),
            tuple((t.op.name, t.value_index) for t in outputs),
            tuple((t.op.name, t.value_index) for t in gradients),
        )

    def _z(self, layout: Layout, dtype: np.dtype) -> np.ndarray:
        """z at the example point: the perturbable inputs then the variables, flattened, in `dtype`."""
        parts = [np.ravel(self.to_numpy(leaf)) for leaf in layout.perturbed]
        parts += [np.ravel(self.to_numpy(v)) for v in layout.variables]
        return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)


# -- the pieces of the graphs ----------------------------------------------------------------------------------------


def _forward(target: Target, layout: Layout) -> Callable:
    """The raw forward at input leaves, its floating outputs flattened in the dtype of z (see `_along`)."""

    def evaluate(leaves: list) -> tf.Tensor:
        return building.flat_outputs(building.call(target.forward, layout, leaves), building.z_dtype(layout, leaves))

    return evaluate


def _gradients(outputs: Any, xs: list, upstreams: Any) -> list:
    return tf.gradients(outputs, xs, grad_ys=upstreams, unconnected_gradients=tf.UnconnectedGradients.ZERO)


def _outputs_and_vjps(
    layout: Layout, leaves: list, forward: Callable, upstreams: tf.Tensor, jacobian: bool = False
) -> tuple:
    """The flat floating outputs of `forward` at the leaves, and [K, N]: tf.gradients for each upstream row, then
    with `jacobian` for every one-hot row."""
    dtype = building.z_dtype(layout, leaves)
    flat = building.flat_outputs(building.call(forward, layout, leaves), dtype)
    xs = building.sources(layout, leaves)

    def vjp(upstream: tf.Tensor) -> tf.Tensor:
        return building.flat_gradients(_gradients(flat, xs, upstream), dtype)

    if upstreams.shape[0] == 1 and not jacobian:
        return flat, vjp(upstreams[0])[None]
    rows = tf.concat([upstreams, tf.eye(tf.size(flat), dtype=dtype)], axis=0) if jacobian else upstreams
    return flat, building.over_rows(vjp, rows)


def _at(layout: Layout, inputs: list, point: tf.Tensor, evaluate: Callable, after: list = ()) -> Any:
    """`evaluate(leaves)` at the point z: inputs from z, variables assigned from its tail first (after `after`)."""
    with tf.control_dependencies(after):
        leaves, offset = building.input_leaves_at(layout, inputs, point)
        assigned = _assignments(layout, point, offset)
    with tf.control_dependencies(assigned):  # the forward's variable reads, made inside, wait for the assignments
        return tf.nest.map_structure(lambda result: tf.cast(result, point.dtype), evaluate(leaves))


def _along(
    layout: Layout,
    inputs: list,
    points: tf.Tensor,
    z: tf.Tensor,
    evaluate: Callable,
    results: int = 1,
    vectorize: bool = True,
) -> Any:
    """`evaluate` at each row of `points`, in one graph: vectorised, or one row at a time when rows assign the
    variables (or `vectorize` is off); the variables are then put back to z. `evaluate` returns one tensor, or a
    tuple of `results` tensors."""

    def at(point: tf.Tensor) -> Any:
        return _at(layout, inputs, point, evaluate)

    if points.shape[0] == 1:  # one point: nothing to map over (and no map around vectorised upstream rows)
        results = tf.nest.map_structure(lambda result: result[None], at(points[0]))
    elif vectorize and not layout.variables:
        return tf.vectorized_map(at, points, fallback_to_while_loop=True)
    else:
        spec = tf.TensorSpec(None, points.dtype)
        signature = spec if results == 1 else (spec,) * results
        results = tf.map_fn(at, points, fn_output_signature=signature, parallel_iterations=1)
    if not layout.variables:
        return results
    with tf.control_dependencies(tf.nest.flatten(results)):
        restored = _assignments(layout, z)
    with tf.control_dependencies(restored):
        return tf.nest.map_structure(tf.identity, results)


def _assignments(layout: Layout, z: tf.Tensor, offset: int | None = None) -> list:
    """Assign the variables from z's tail (from `offset`); the assignment ops."""
    return [variable.assign(value, read_value=False) for variable, value in building.variable_values(layout, z, offset)]


ADAPTER = TensorFlowGraphAdapter()
