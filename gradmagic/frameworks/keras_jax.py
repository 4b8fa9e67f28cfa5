"""Keras 3's `keras.ops.custom_gradient` on the JAX backend. Importing this module imports Keras and JAX.

On JAX, `keras.ops.custom_gradient` is `jax.custom_gradient` (a `jax.custom_vjp`)
behind a wrapper that unwraps Keras variables. The checks take gradients with
`jax.vjp` inside `jax.jit`, vectorised with `jax.vmap`.

Precision: JAX turns float64 into float32 unless `jax_enable_x64` is set. The
computations of this adapter on float64 data (inputs, upstream gradients, the
finite differences' points) run with x64 enabled for their own thread and
duration only (`jax.enable_x64`), so the user's setting is left as it was.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
from typing import Any, Callable

import jax
import jax.numpy as jnp
import keras
import numpy as np
from jax import tree_util
from jax.extend import core as jax_core

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
from gradmagic.frameworks.keras_common import (
    VariableReads,
    cache_of,
    closure,
    initial_vector,
    keyword_binding_op,
    refuse_variables,
    unless_all_nan,
)

#: What tracing the forward's own gradient raises when an op in it has no reverse-mode derivative
#: (`lax.while_loop`, `jax.pure_callback`, a `custom_jvp` used in reverse mode, ...).
_NOT_DIFFERENTIABLE = (LookupError, NotImplementedError, TypeError, ValueError)
#: Mapped rows (points, directions) evaluated at once, in elements of z and outputs; the rest run in sequence.
_BATCH_ELEMENTS = 2**24
#: Primitives whose inner jaxpr the gradient graph shows op by op: calls and custom derivatives of library functions,
#: and rematerialisation. A `jax.jit` call inside a library function (`jnp.where`, `jax.nn.softplus`, Keras's
#: `ops.argmax`) stays one op, named after its function.
_INLINED = {
    "closed_call",
    "core_call",
    "custom_jvp_call",
    "custom_vjp_call",
    "custom_vjp_call_jaxpr",
    "remat",
    "checkpoint",
}
_NAMED_CALLS = {"pjit", "jit"}
_PASSTHROUGH = {"copy", "copy_p"}


class KerasJaxAdapter(EagerExecution):
    """`keras.ops.custom_gradient` ops on Keras 3's JAX backend, checked through `jax.vjp` inside `jax.jit`."""

    name = "keras"
    display_name = "Keras 3 (JAX backend)"
    version = f"keras {keras.__version__}, jax {jax.__version__}"
    decorator = "keras.ops.custom_gradient"
    backend = "jax"
    # Measured with jax 0.10.2: `jax.custom_gradient` calls the rule once, with one cotangent shaped like the
    # outputs (a tuple for a tuple of outputs, a dict for a dict); a list of gradients as long as the op's
    # argument list is taken as a tuple (custom_derivatives._flatten_bwd).
    convention = GradientConvention(
        upstream="structure", tuple_required=False, single_output=False, variables="closed-over"
    )
    autodiff = "jax.vjp"
    compiled = "jax.jit"

    def decorate(self, function: Callable) -> Callable:
        """Decorate with `keras.ops.custom_gradient`; the op also takes keyword arguments, as constants."""
        return keyword_binding_op(function)

    # -- checking ---------------------------------------------------------------

    def resolve(self, op: Callable) -> Target:
        """The raw function behind a gradmagic op, a hand-decorated op, or a plain function."""
        decorated = _decorated_function(op)
        if hasattr(op, "_gradmagic_function"):
            raw, origin = op._gradmagic_function, "magic"
        elif decorated is not None:
            raw, origin = decorated, "decorated"
        else:
            raw, origin = op, "plain"
            cache = cache_of(raw)
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
        return tree_util.tree_map(_to_tensor, structure, is_leaf=_is_none)

    def flatten(self, structure: Any) -> list:
        return tree_util.tree_leaves(structure, is_leaf=_is_none)

    def pack(self, structure: Any, leaves: list) -> Any:
        return _pack(structure, leaves)

    def leaf_paths(self, structure: Any) -> list[str]:
        """`[0]['a']`-style paths of the leaves, in `flatten` order ("" for a leaf itself)."""
        flat, _ = tree_util.tree_flatten_with_path(structure, is_leaf=_is_none)
        return ["".join(f"[{_path_step(key)!r}]" for key in path) for path, _ in flat]

    def meta(self, value: Any) -> TensorMeta | None:
        if not isinstance(value, (jax.Array, np.ndarray, np.generic, keras.Variable)):
            return None
        dtype = np.dtype(value.dtype)
        return TensorMeta(tuple(value.shape), dtype.name, bool(jnp.issubdtype(dtype, jnp.floating)))

    def to_numpy(self, value: Any) -> np.ndarray:
        return np.asarray(value.value if isinstance(value, keras.Variable) else value)

    def run_recording_variables(self, call: Callable[[], Any], exclude: list) -> tuple[Any, list]:
        """Run `call()` eagerly; return its result and the Keras variables it read, minus `exclude`.

        With float64 inputs (`exclude` holds the input leaves) it runs with x64, and so does the gradient
        function it returns when the checker calls it.
        """
        wide = _needs_x64(*exclude)
        with _x64(wide), VariableReads() as reads:
            result = call()
        variables = [v for v in reads.variables if not any(v is other for other in exclude)]
        if wide and isinstance(result, (tuple, list)) and len(result) == 2 and callable(result[1]):
            result = type(result)([result[0], _WithX64(result[1])])
        return result, variables

    def narrows_float64(self, call: Callable[[], Any]) -> bool:
        """Whether an equation of `call`'s jaxpr (traced with x64) turns a float64 value into a narrower float."""
        with _x64(True):
            jaxpr = jax.make_jaxpr(call)()
        return any(
            any(_dtype_of(v) == np.float64 for v in equation.invars)
            and any(_dtype_of(v) in _NARROW_FLOATS for v in equation.outvars)
            for equation in jaxpr.jaxpr.eqns
        )

    def variable_name(self, variable: Any) -> str:
        return str(getattr(variable, "path", None) or variable.name)

    def constant(self, array: np.ndarray, dtype: str) -> Any:
        with _x64(_needs_x64(np.empty(0, dtype))):
            return jnp.asarray(array, dtype=dtype)

    def cast(self, value: Any, dtype: str) -> Any:
        with _x64(_needs_x64(np.empty(0, dtype), value)):
            return jnp.asarray(value).astype(dtype)

    def machine_epsilon(self, dtype: str) -> float:
        return float(jnp.finfo(dtype).eps)

    def initial_vector(self, layout: Layout) -> np.ndarray:
        return initial_vector(layout, self.to_numpy)

    def decorated_gradients(self, target: Target, layout: Layout, upstreams: list) -> tuple[list, list]:
        """Outputs and gradients of the op through `jax.vjp`, inside `jax.jit`."""
        refuse_variables(layout, "JAX")

        def compute(perturbed, upstreams):
            outputs, pullback = jax.vjp(_of_perturbed(target.op, layout), *perturbed)
            return tree_util.tree_leaves(outputs), list(pullback(_cotangent(outputs, upstreams)))

        with _x64(_needs_x64(*layout.inputs, *upstreams)):
            compiled = self._compiled(target, layout, "decorated_gradients", compute)
            outputs, gradients = compiled(_perturbed(layout), [u for u in upstreams if _is_floating(u)])
        return [np.asarray(o) for o in outputs], [np.asarray(g) for g in gradients]

    def full_jacobians(self, target: Target, layout: Layout, steps: np.ndarray | None) -> FullJacobians:
        refuse_variables(layout, "JAX")
        with_differences = steps is not None

        def compute(perturbed, z, steps):
            on_z = _on_z(layout, perturbed)
            custom = jax.jacrev(on_z(target.op))(z)
            autodiff = _unless_undifferentiable(lambda: jax.jacrev(on_z(_plain(target)))(z), custom)
            evaluations = jnp.zeros((0, 0), z.dtype)
            if with_differences:
                identity = jnp.diag(steps)
                points = jnp.concatenate([z[None], z[None] + identity, z[None] - identity])
                evaluations = _map_rows(on_z(_plain(target)), points, z.size + custom.shape[0])
            return evaluations, custom, autodiff

        z = self.initial_vector(layout)
        with _x64(_needs_x64(*layout.inputs, z)):
            compiled = self._compiled(target, layout, f"full_jacobians/{with_differences}", compute)
            evaluations, custom, autodiff = compiled(_perturbed(layout), z, steps if with_differences else z)
        return FullJacobians(
            np.asarray(evaluations) if with_differences else None, np.asarray(custom), unless_all_nan(autodiff)
        )

    def second_order(self, target: Target, layout: Layout, steps: np.ndarray, upstream: np.ndarray) -> FullJacobians:
        """The custom VJP h(z) = J(z)^T u as a function of z: its central differences and autodiff Jacobian."""
        refuse_variables(layout, "JAX")

        def compute(perturbed, z, steps, upstream):
            on_z = _on_z(layout, perturbed)

            def custom_vjp(point):
                return jax.vjp(on_z(target.op), point)[1](upstream)[0]

            identity = jnp.diag(steps)
            points = jnp.concatenate([z[None], z[None] + identity, z[None] - identity])
            return _map_rows(custom_vjp, points, 2 * z.size + upstream.size), jax.jacrev(custom_vjp)(z)

        z = self.initial_vector(layout)
        with _x64(_needs_x64(*layout.inputs, z)):
            compiled = self._compiled(target, layout, "second_order", compute)
            evaluations, jacobian = compiled(_perturbed(layout), z, steps.astype(z.dtype), upstream.astype(z.dtype))
        return FullJacobians(np.asarray(evaluations), np.asarray(jacobian), None)

    def gradient_graph(self, target: Target, layout: Layout, upstreams: list, arguments: list) -> RawGraph:
        """The jaxprs of the forward (with the residuals `jax.vjp` keeps) and of the backward, as one graph.

        `arguments` gives (kind, label) for each input leaf, then each upstream gradient.
        """
        refuse_variables(layout, "JAX")
        with _x64(_needs_x64(*layout.inputs, *upstreams)):
            return _GraphTracer(target, layout, upstreams, arguments).trace()

    def evaluate_points(self, target: Target, layout: Layout, points: np.ndarray) -> np.ndarray:
        refuse_variables(layout, "JAX")

        def compute(perturbed, points):
            forward = _on_z(layout, perturbed)(_plain(target))
            outputs = jax.eval_shape(forward, points[0]).shape[0]
            return _map_rows(forward, points, points.shape[1] + outputs)

        with _x64(_needs_x64(*layout.inputs, points)):
            compiled = self._compiled(target, layout, "evaluate_points", compute)
            return np.asarray(compiled(_perturbed(layout), _padded(points)))[: len(points)]

    def sweep(
        self, target: Target, layout: Layout, points: np.ndarray, row: int, column: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        refuse_variables(layout, "JAX")

        def compute(perturbed, points, row, column):
            on_z = _on_z(layout, perturbed)

            def at(point):
                values, pullback = jax.vjp(on_z(target.op), point)
                one_hot = jnp.zeros_like(values).at[row].set(1)
                custom = pullback(one_hot)[0][column]
                autodiff = _unless_undifferentiable(
                    lambda: jax.vjp(on_z(_plain(target)), point)[1](one_hot)[0][column], custom
                )
                return jnp.stack([values[row], custom, autodiff])

            return _map_rows(at, points, 3 * points.shape[1])

        with _x64(_needs_x64(*layout.inputs, points)):
            compiled = self._compiled(target, layout, "sweep", compute)
            results = np.asarray(compiled(_perturbed(layout), _padded(points), row, column))[: len(points)]
        return results[:, 0], results[:, 1], unless_all_nan(results[:, 2])

    def vjps(self, target: Target, layout: Layout, upstream: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        refuse_variables(layout, "JAX")
        with _x64(_needs_x64(*layout.inputs, upstream)):
            custom, autodiff = self._compiled(target, layout, "vjps", _custom_and_autodiff_vjps(target, layout))(
                _perturbed(layout), upstream
            )
        return np.asarray(custom), unless_all_nan(autodiff)

    def prober(
        self, target: Target, layout: Layout, steps: np.ndarray, outputs: int, seed: int, signs: np.ndarray
    ) -> KerasJaxProber:
        refuse_variables(layout, "JAX")
        return KerasJaxProber(self, target, layout, steps, outputs, seed, signs)

    def _compiled(self, target: Target, layout: Layout, kind: str, function: Callable) -> Callable:
        """`function` under `jax.jit` for this op and input layout, kept with the op's raw function for later checks.

        Its first argument is the perturbable inputs; the other input leaves
        (integers, booleans) are constants in it, as concrete as in the eager
        run, so the op may use them as shapes.
        """
        key = _key(target, layout, kind)
        per_function = cache_of(target.raw)
        if key not in per_function:
            per_function[key] = jax.jit(function)
        return per_function[key]


class KerasJaxProber:
    """Projection-mode measurements for one check; the large vectors stay on the device between calls.

    The upstream vector u is drawn from the seed with `jax.random`, so the
    same seed gives the same vector.
    """

    def __init__(
        self,
        adapter: KerasJaxAdapter,
        target: Target,
        layout: Layout,
        steps: np.ndarray,
        outputs: int,
        seed: int,
        signs: np.ndarray,
    ):
        self.layout = layout
        self.wide = _needs_x64(*layout.inputs, steps)
        self.steps_array, self.signs_array = steps, signs
        with _x64(self.wide):
            self.steps = jnp.asarray(steps)
            self.signs = jnp.asarray(signs, jnp.int8)
            self.upstream = jax.random.normal(jax.random.key(seed), (outputs,), self.steps.dtype)
            vjps = adapter._compiled(target, layout, "vjps", _custom_and_autodiff_vjps(target, layout))
            self._custom, self._autodiff = vjps(_perturbed(layout), self.upstream)
        self._measure = {
            with_rounding: adapter._compiled(
                target, layout, f"projections/{with_rounding}", _projections(target, layout, with_rounding)
            )
            for with_rounding in (True, False)
        }

    @functools.cached_property
    def custom(self) -> np.ndarray:
        return np.asarray(self._custom)

    @functools.cached_property
    def autodiff(self) -> np.ndarray | None:
        return unless_all_nan(self._autodiff)

    @functools.cached_property
    def upstream_vector(self) -> np.ndarray:
        return np.asarray(self.upstream)

    def direction(self, row: int, element: int) -> float:
        return float(self.signs_array[row, element]) * float(self.steps_array[element])

    def measure(self, rows: list[int], weights: np.ndarray, rounding: bool = True) -> Projections:
        count = len(rows)
        with _x64(self.wide):
            results = self._measure[rounding](
                _perturbed(self.layout),
                self.steps,
                self.signs,
                _padded(np.asarray(rows, np.int32)),
                _padded(np.asarray(weights, np.float32), fill=0),
                self.upstream,
                self._custom,
            )
        return Projections(*np.asarray(results)[:count].T)


# -- the pieces of the compiled functions --------------------------------------------------------------------------


def _perturbed(layout: Layout) -> list:
    return [layout.inputs[k] for k in layout.perturbable]


def _with_perturbed(layout: Layout, perturbed) -> list:
    """All input leaves, the perturbable ones replaced by `perturbed`."""
    leaves = list(layout.inputs)
    for k, value in zip(layout.perturbable, perturbed):
        leaves[k] = value
    return leaves


def _call(function: Callable, layout: Layout, leaves: list) -> Any:
    return function(*_pack(layout.structure, leaves), **layout.kwargs)


def _of_perturbed(function: Callable, layout: Layout) -> Callable:
    """`function`'s outputs as a function of the perturbable input leaves."""
    return lambda *perturbed: _call(function, layout, _with_perturbed(layout, perturbed))


def _plain(target: Target) -> Callable:
    """The forward alone, without its custom gradient: what autodiff differentiates."""
    return lambda *args, **kwargs: target.raw(*args, **kwargs)[0]


def _on_z(layout: Layout, perturbed: list) -> Callable[[Callable], Callable]:
    """For a function of the inputs, its flat floating outputs (in z's dtype) as a function of z."""

    def of_z(function: Callable) -> Callable:
        def at(z):
            leaves, offset = [], 0
            for leaf in perturbed:
                leaves.append(jnp.reshape(z[offset : offset + leaf.size], leaf.shape).astype(leaf.dtype))
                offset += leaf.size
            return _flat_outputs(_call(function, layout, _with_perturbed(layout, leaves)), z.dtype)

        return at

    return of_z


def _flat_outputs(outputs: Any, dtype) -> jax.Array:
    """The floating outputs, flattened and concatenated, in `dtype`."""
    leaves = [jnp.ravel(o).astype(dtype) for o in tree_util.tree_leaves(outputs) if _is_floating(o)]
    return jnp.concatenate(leaves) if leaves else jnp.zeros(0, dtype)


def _z_vector(perturbed: list, dtype) -> jax.Array:
    """z inside a compiled function: the perturbable inputs, flattened."""
    parts = [jnp.ravel(leaf).astype(dtype) for leaf in perturbed]
    return jnp.concatenate(parts) if parts else jnp.zeros(0, dtype)


def _cotangent(outputs: Any, floating_upstreams: list) -> Any:
    """The upstream gradients shaped like the outputs; integer outputs take JAX's zero cotangent (float0)."""
    upstreams = iter(floating_upstreams)
    leaves = [
        next(upstreams) if _is_floating(o) else np.zeros(o.shape, jax.dtypes.float0)
        for o in tree_util.tree_leaves(outputs)
    ]
    return tree_util.tree_unflatten(tree_util.tree_structure(outputs), leaves)


def _unless_undifferentiable(autodiff: Callable[[], jax.Array], like: jax.Array) -> jax.Array:
    """`autodiff()` traced, or NaN shaped like `like` when the forward has an op without a reverse-mode derivative."""
    try:
        return autodiff()
    except _NOT_DIFFERENTIABLE:
        return jnp.full(like.shape, jnp.nan, like.dtype)


def _map_rows(function: Callable, rows: Any, elements_per_row: int) -> jax.Array:
    """`function` over the leading axis of `rows`: vectorised, in batches that bound the memory."""
    count = tree_util.tree_leaves(rows)[0].shape[0]
    batch = max(1, _BATCH_ELEMENTS // max(1, int(elements_per_row)))
    if batch >= count:
        return jax.vmap(function)(rows)
    return jax.lax.map(function, rows, batch_size=batch)


def _custom_and_autodiff_vjps(target: Target, layout: Layout) -> Callable:
    def compute(perturbed, upstream):
        on_z = _on_z(layout, perturbed)
        z = _z_vector(perturbed, upstream.dtype)
        custom = jax.vjp(on_z(target.op), z)[1](upstream)[0]
        autodiff = _unless_undifferentiable(lambda: jax.vjp(on_z(_plain(target)), z)[1](upstream)[0], custom)
        return custom, autodiff

    return compute


def _projections(target: Target, layout: Layout, with_rounding: bool) -> Callable:
    """Central differences along d_t = weights_t * signs[rows_t] * steps, projected on the upstream vector."""

    def compute(perturbed, steps, signs, rows, weights, upstream, gradient):
        dtype = steps.dtype
        z = _z_vector(perturbed, dtype)
        forward = _on_z(layout, perturbed)(_plain(target))
        rounding = rounding_rms = jnp.array(jnp.nan, dtype)
        if with_rounding:  # the rounding of f(z +- d) is that of f(z): measured once, at the centre
            rounding_terms = jnp.finfo(dtype).eps * jnp.abs(upstream) * jnp.abs(forward(z))
            rounding = jnp.sum(rounding_terms)
            rounding_rms = jnp.sqrt(jnp.sum(jnp.square(rounding_terms)))

        def along(row_and_weight):
            row, weight = row_and_weight
            direction = weight.astype(dtype) * signs[row].astype(dtype) * steps
            plus, minus = forward(z + direction), forward(z - direction)
            contribution = direction * gradient
            return jnp.stack(
                [
                    jnp.sum(upstream * (plus - minus)) / 2,
                    rounding,
                    rounding_rms,
                    jnp.sum(contribution),
                    jnp.sum(jnp.abs(contribution)),
                ]
            )

        return _map_rows(along, (rows, weights), 4 * z.size + 2 * upstream.size)

    return compute


def _padded(rows: np.ndarray, fill: Any = None) -> np.ndarray:
    """`rows` with the leading axis grown to a power of two, so that varying counts share compiled functions.

    The extra rows repeat the first (or hold `fill`); callers drop their results.
    """
    count = len(rows)
    size = 1 << max(0, count - 1).bit_length()
    if size == count:
        return rows
    if fill is None:
        extra = np.repeat(rows[:1], size - count, axis=0)
    else:
        extra = np.full((size - count, *rows.shape[1:]), fill, rows.dtype)
    return np.concatenate([rows, extra])


# -- the gradient graph ----------------------------------------------------------------------------------------------


class _GraphTracer:
    """The op's forward and backward as jaxprs, turned into a RawGraph.

    The forward jaxpr computes the outputs and the residuals of `jax.vjp` (what
    the backward keeps); the backward jaxpr takes the residuals and the upstream
    gradients. A backward use of a residual is connected to the forward
    equation (or input) that produced it. Calls of inner jaxprs (`jax.jit`
    inside library functions, custom derivatives) are inlined.
    """

    def __init__(self, target: Target, layout: Layout, upstreams: list, arguments: list):
        self.target, self.layout, self.upstreams, self.arguments = target, layout, upstreams, arguments
        self.ops: list[RawOp] = []
        self.counts: dict[str, int] = {}

    def trace(self) -> RawGraph:
        layout = self.layout
        captured: dict[str, Any] = {}

        def forward(perturbed):
            outputs, pullback = jax.vjp(_of_perturbed(self.target.op, layout), *perturbed)
            residuals, captured["pullback"] = tree_util.tree_flatten(pullback)
            captured["outputs"] = outputs
            return tree_util.tree_leaves(outputs), residuals

        forward_jaxpr = jax.make_jaxpr(forward)(_perturbed(layout))
        outputs = len(tree_util.tree_leaves(captured["outputs"]))
        residual_avals = forward_jaxpr.out_avals[outputs:]

        def backward(residuals, floating_upstreams):
            pullback = tree_util.tree_unflatten(captured["pullback"], residuals)
            return list(pullback(_cotangent(captured["outputs"], floating_upstreams)))

        floating_upstreams = [u for u in self.upstreams if _is_floating(u)]
        backward_jaxpr = jax.make_jaxpr(backward)(
            [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in residual_avals], floating_upstreams
        )

        placeholders = [
            self._placeholder(f"inputs/{k}", leaf, *self.arguments[k]) for k, leaf in enumerate(layout.inputs)
        ]
        upstream_placeholders = [
            self._placeholder(f"upstreams/{i}", upstream, *self.arguments[len(layout.inputs) + i])
            for i, upstream in enumerate(self.upstreams)
        ]
        leaf_placeholders = {id(leaf): placeholders[k] for k, leaf in enumerate(layout.inputs)}
        environment = self._constants(forward_jaxpr, leaf_placeholders)
        for k, variable in zip(layout.perturbable, forward_jaxpr.jaxpr.invars):
            environment[variable] = placeholders[k]
        self._emit(forward_jaxpr.jaxpr, "forward", environment)
        produced = [self._source(atom, environment) for atom in forward_jaxpr.jaxpr.outvars]

        backward_environment = self._constants(backward_jaxpr, {})
        floating = iter(i for i, u in enumerate(self.upstreams) if _is_floating(u))
        residuals = len(residual_avals)
        for position, variable in enumerate(backward_jaxpr.jaxpr.invars):
            backward_environment[variable] = (
                produced[outputs + position] if position < residuals else upstream_placeholders[next(floating)]
            )
        self._emit(backward_jaxpr.jaxpr, "backward", backward_environment)
        gradients = [self._source(atom, backward_environment) for atom in backward_jaxpr.jaxpr.outvars]
        return RawGraph(tuple(self.ops), tuple(produced[:outputs]), tuple(gradients))

    def _placeholder(self, name: str, value: Any, kind: str, label: str) -> tuple[str, int]:
        self.ops.append(
            RawOp(name, "", kind, None, (), ((tuple(value.shape), np.dtype(value.dtype).name),), None, label=label)
        )
        return (name, 0)

    def _constants(self, closed: Any, known: dict) -> dict:
        """An environment holding the closed jaxpr's constants: an input leaf's placeholder, or a constant op."""
        environment = {}
        for variable, value in zip(closed.jaxpr.constvars, closed.consts):
            environment[variable] = known.get(id(value)) or self._constant(variable.aval)
        return environment

    def _constant(self, aval: Any) -> tuple[str, int]:
        name = self._name("constants", "constant")
        self.ops.append(RawOp(name, "constant", "constant", None, (), (_shape_and_dtype(aval),), None))
        return (name, 0)

    def _source(self, atom: Any, environment: dict) -> tuple[str, int]:
        """The (op, output) producing a jaxpr atom; a literal becomes a constant op."""
        if isinstance(atom, jax_core.Literal):
            return self._constant(atom.aval)
        return environment[atom]

    def _emit(self, jaxpr: Any, scope: str, environment: dict, line: int | None = None) -> None:
        """The equations of `jaxpr` as ops; `line` is the enclosing call's, for equations traced elsewhere."""
        for equation in jaxpr.eqns:
            inputs = [self._source(atom, environment) for atom in equation.invars]
            equation_line = _line(equation, self.target.filename) or line
            inner = _inner_jaxpr(equation)
            if inner is not None:
                inner_environment = self._constants(inner, {}) if hasattr(inner, "consts") else {}
                body = getattr(inner, "jaxpr", inner)
                inner_environment.update(zip(body.invars, inputs))
                self._emit(body, scope, inner_environment, equation_line)
                for variable, atom in zip(equation.outvars, body.outvars):
                    environment[variable] = self._source(atom, inner_environment)
                continue
            primitive = equation.primitive.name
            if primitive in _NAMED_CALLS:
                primitive = str(equation.params.get("name", primitive))
            name = self._name(scope, primitive)
            passthrough = primitive in _PASSTHROUGH and len(equation.invars) == len(equation.outvars)
            self.ops.append(
                RawOp(
                    name,
                    primitive,
                    "passthrough" if passthrough else "op",
                    scope,
                    tuple(inputs),
                    tuple(_shape_and_dtype(variable.aval) for variable in equation.outvars),
                    equation_line,
                    tuple(range(len(equation.outvars))) if passthrough else (),
                )
            )
            for index, variable in enumerate(equation.outvars):
                environment[variable] = (name, index)

    def _name(self, scope: str, kind: str) -> str:
        count = self.counts.get(scope, 0)
        self.counts[scope] = count + 1
        return f"{scope}/{kind}_{count}"


def _inner_jaxpr(equation: Any) -> Any:
    """The jaxpr an inlinable call equation runs, if it takes and returns the equation's values one to one."""
    if equation.primitive.name not in _INLINED:
        return None
    for value in equation.params.values():
        body = getattr(value, "jaxpr", value)
        if isinstance(body, jax_core.Jaxpr) and (
            len(body.invars) == len(equation.invars) and len(body.outvars) == len(equation.outvars)
        ):
            return value
    return None


def _line(equation: Any, filename: str | None) -> int | None:
    """The innermost line of the user's source (the op's file or cell) that the equation was traced from."""
    traceback = equation.source_info.traceback
    if filename is None or traceback is None:
        return None
    for frame in traceback.frames:  # innermost first
        if frame.file_name == filename:
            return frame.line_num
    return None


def _shape_and_dtype(aval: Any) -> tuple[tuple[int | None, ...], str]:
    shape = tuple(int(d) if isinstance(d, (int, np.integer)) else None for d in getattr(aval, "shape", ()))
    dtype = getattr(aval, "dtype", None)
    return shape, (np.dtype(dtype).name if dtype is not None else str(aval))


# -- values, structures and precision ----------------------------------------------------------------------------


def _is_none(value: Any) -> bool:
    return value is None


def _pack(structure: Any, leaves: list) -> Any:
    return tree_util.tree_unflatten(tree_util.tree_structure(structure, is_leaf=_is_none), leaves)


def _path_step(key: Any) -> Any:
    """A tree_util path key as TensorFlow's nest paths give it: an index, a dict key, a field name."""
    for attribute in ("idx", "key", "name"):
        if hasattr(key, attribute):
            return getattr(key, attribute)
    return str(key)


_NARROW_FLOATS = {np.dtype("float32"), np.dtype("float16"), np.dtype(jnp.bfloat16)}


def _dtype_of(atom: Any) -> np.dtype | None:
    dtype = getattr(getattr(atom, "aval", None), "dtype", None)
    try:
        return np.dtype(dtype) if dtype is not None else None
    except TypeError:  # extended dtypes (PRNG keys, float0)
        return None


def _is_floating(value: Any) -> bool:
    return bool(jnp.issubdtype(value.dtype, jnp.floating))


_WIDE_DTYPES = {np.dtype("float64"), np.dtype("complex128")}


def _needs_x64(*values: Any) -> bool:
    """Whether any of `values` (arrays, variables, empty arrays standing for a dtype) is float64 or complex128.

    64-bit integers are left to JAX: without x64 they are int32, as in the user's own runs.
    """
    return any(getattr(value, "dtype", None) is not None and np.dtype(value.dtype) in _WIDE_DTYPES for value in values)


def _x64(enabled: bool) -> contextlib.AbstractContextManager:
    """x64 for this thread while the context lasts, when `enabled` and not already on."""
    if enabled and not jax.config.jax_enable_x64:
        return jax.enable_x64(True)
    return contextlib.nullcontext()


def _to_tensor(value: Any) -> jax.Array:
    """A JAX array of `value`; a float64 NumPy value stays float64 (Python numbers become float32/int32)."""
    if isinstance(value, jax.Array):
        return value
    with _x64(_needs_x64(value)):
        tensor = keras.ops.convert_to_tensor(value)
        return jnp.asarray(tensor, dtype=tensor.dtype) if tensor.weak_type else tensor


class _WithX64:
    """A gradient function closed over 64-bit values, run with x64 as the forward was; otherwise the same function.

    Without x64, JAX computes `1 + e` of a float64 `e` in float32.
    """

    def __init__(self, function: Callable):
        self.__wrapped__ = function
        for attribute in ("__name__", "__qualname__", "__doc__", "__module__", "__code__"):
            if hasattr(function, attribute):
                setattr(self, attribute, getattr(function, attribute))

    def __call__(self, *args, **kwargs):
        __tracebackhide__ = True
        with _x64(True):
            return self.__wrapped__(*args, **kwargs)


def _decorated_function(op: Any) -> Callable | None:
    """The user's function inside `keras.ops.custom_gradient(f)` (or `jax.custom_gradient(f)`), else None."""
    if getattr(op, "__qualname__", "") == "custom_gradient.<locals>.fun_with_custom_gradient_wrapper":
        op = closure(op).get("fun_with_custom_gradient")
    if isinstance(op, jax.custom_vjp) and getattr(op.fun, "__qualname__", "") == "custom_gradient.<locals>.wrapped_fun":
        return closure(op.fun).get("fun")
    return None


def _key(target: Target, layout: Layout, kind: str) -> tuple:
    """What a compiled function depends on besides the perturbable inputs' values."""
    leaves = []
    for k, leaf in enumerate(layout.inputs):
        # The other leaves are constants of the compiled function: their values matter.
        leaves.append(_shape_and_dtype(leaf) if k in layout.perturbable else _value_key(leaf))
    return (
        kind,
        id(target.op),
        str(tree_util.tree_structure(layout.structure, is_leaf=_is_none)),
        tuple(leaves),
        layout.perturbable,
        tuple(sorted((name, _value_key(value)) for name, value in layout.kwargs.items())),
    )


def _value_key(value: Any) -> Any:
    """A key standing for a constant's value: Python scalars and arrays by value, anything else by identity.

    By value, the same keyword argument or integer input given again reuses the compiled functions.
    """
    if value is None or isinstance(value, (bool, int, float, complex, str)):
        return (type(value).__name__, value)
    if isinstance(value, (jax.Array, np.ndarray, np.generic)):
        array = np.ascontiguousarray(value)
        return (array.shape, array.dtype.name, hashlib.blake2b(array.tobytes(), digest_size=16).hexdigest())
    return ("id", id(value))


ADAPTER = KerasJaxAdapter()
