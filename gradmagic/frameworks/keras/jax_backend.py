"""Keras 3's `keras.ops.custom_gradient` on the JAX backend. Importing this module imports Keras and JAX.

On JAX, `keras.ops.custom_gradient` is `jax.custom_gradient` (a `jax.custom_vjp`)
behind a wrapper that unwraps Keras variables. The checks take gradients with
`jax.vjp` inside `jax.jit`, vectorised with `jax.vmap`; float64 work runs with
x64 for its own duration (see `jax_values`).
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

import jax
import jax.numpy as jnp
import keras
import numpy as np
from jax import tree_util

from gradmagic.frameworks.base import ForwardRun, GradientConvention, Layout, RawGraph, Target, TensorMeta, Vjps, native
from gradmagic.frameworks.cache import cache_of
from gradmagic.frameworks.keras.common import KerasAdapter, VariableReads, closure, refuse_variables
from gradmagic.frameworks.keras.jax_graph import GraphTracer
from gradmagic.frameworks.keras.jax_values import (
    NARROW_FLOATS,
    WithX64,
    dtype_of,
    is_none,
    needs_x64,
    on_z,
    pack,
    path_step,
    shape_and_dtype,
    to_tensor,
    x64,
)
from gradmagic.frameworks.keras.wording import KERAS_ON_JAX

#: What tracing the forward's own gradient raises when an op in it has no reverse-mode derivative
#: (`lax.while_loop`, `jax.pure_callback`, a `custom_jvp` used in reverse mode, ...).
_NOT_DIFFERENTIABLE = (LookupError, NotImplementedError, TypeError, ValueError)
#: Mapped rows (points, directions) evaluated at once, in elements of z and outputs; the rest run in sequence.
_BATCH_ELEMENTS = 2**24


class KerasJaxAdapter(KerasAdapter):
    """`keras.ops.custom_gradient` ops on Keras 3's JAX backend, checked through `jax.vjp` inside `jax.jit`."""

    display_name = "Keras 3 (JAX backend)"
    version = f"keras {keras.__version__}, jax {jax.__version__}"
    backend = "jax"
    # Measured with jax 0.10.2: `jax.custom_gradient` calls the rule once, with one cotangent shaped like the
    # outputs (a tuple for a tuple of outputs, a dict for a dict); a list of gradients as long as the op's
    # argument list is taken as a tuple (custom_derivatives._flatten_bwd).
    convention = GradientConvention(upstream="structure", variables="closed-over", signature_checked=True)
    autodiff = "jax.vjp"
    compiled = "jax.jit"
    wording = KERAS_ON_JAX

    def _unwrap(self, op: Callable) -> tuple[Callable, str] | None:
        """The user's function inside `keras.ops.custom_gradient(f)` (or `jax.custom_gradient(f)`)."""
        if getattr(op, "__qualname__", "") == "custom_gradient.<locals>.fun_with_custom_gradient_wrapper":
            op = closure(op).get("fun_with_custom_gradient")
        if (
            isinstance(op, jax.custom_vjp)
            and getattr(op.fun, "__qualname__", "") == "custom_gradient.<locals>.wrapped_fun"
        ):
            function = closure(op.fun).get("fun")
            return (function, "decorated") if function is not None else None
        return None

    # -- values ---------------------------------------------------------------------------------------------------

    def to_tensors(self, structure: Any) -> Any:
        return tree_util.tree_map(to_tensor, structure, is_leaf=is_none)

    def flatten(self, structure: Any) -> tuple[list, list[str]]:
        flat, _ = tree_util.tree_flatten_with_path(structure, is_leaf=is_none)
        return [leaf for _, leaf in flat], ["".join(f"[{path_step(key)!r}]" for key in path) for path, _ in flat]

    def pack(self, structure: Any, leaves: list) -> Any:
        return pack(structure, leaves)

    def meta(self, value: Any) -> TensorMeta | None:
        if not isinstance(value, (jax.Array, np.ndarray, np.generic, keras.Variable)):
            return None
        dtype = np.dtype(value.dtype)
        name = str(getattr(value, "path", None) or value.name) if isinstance(value, keras.Variable) else None
        return TensorMeta(tuple(value.shape), dtype.name, bool(jnp.issubdtype(dtype, jnp.floating)), name)

    def to_numpy(self, value: Any) -> np.ndarray:
        return native(np.asarray(value.value if isinstance(value, keras.Variable) else value))

    def constant(self, array: np.ndarray, dtype: str) -> Any:
        with x64(needs_x64(np.empty(0, dtype))):
            return jnp.asarray(array, dtype=dtype)

    # -- running --------------------------------------------------------------------------------------------------

    def run_forward(self, call: Callable[[], Any], exclude: list) -> ForwardRun:
        """Run `call()` eagerly; the trainable Keras variables it read (a non-trainable one is a constant of the op, as
        for a Keras trainer), minus `exclude`, and whether it narrows float64.

        With float64 inputs (`exclude` holds the input leaves) it runs with x64, and so does the gradient function it
        returns when the checker calls it.
        """
        wide = needs_x64(*exclude)
        with x64(wide), VariableReads() as reads:
            result = call()
        variables = [v for v in reads.variables if v.trainable and not any(v is other for other in exclude)]
        if wide and isinstance(result, (tuple, list)) and len(result) == 2 and callable(result[1]):
            result = type(result)([result[0], WithX64(result[1])])
        return ForwardRun(result, variables, wide and _narrows_float64(call))

    def evaluate(self, target, layout, offsets, upstream=None, signs=(1.0,)) -> np.ndarray:
        refuse_variables(layout, self.backend)

        def compute(perturbed, offsets, signs, *upstream):
            forward = on_z(layout, perturbed)(target.forward)
            z = jnp.concatenate([jnp.ravel(leaf).astype(offsets.dtype) for leaf in perturbed])
            outputs = jax.eval_shape(forward, z).shape[0]

            def at(offset):
                return forward(z + offset) @ upstream[0] if upstream else forward(z + offset)

            displaced = (signs[:, None, None] * offsets[None]).reshape(-1, offsets.shape[1])
            results = _map_rows(at, displaced, z.size + outputs)
            return results.reshape(signs.size, offsets.shape[0], *results.shape[1:])

        extra = [upstream.astype(offsets.dtype)] if upstream is not None else []
        with x64(needs_x64(*layout.inputs, offsets)):
            compiled = self._compiled(target, layout, f"evaluate/{upstream is not None}", compute)
            values = compiled(layout.perturbed, _padded(offsets), np.asarray(signs, offsets.dtype), *extra)
            return np.asarray(values)[:, : len(offsets)]

    def vjps(self, target, layout, points, upstreams, autodiff=True, jacobian=False) -> Vjps:
        refuse_variables(layout, self.backend)

        def compute(perturbed, points, upstreams):
            of_z = on_z(layout, perturbed)

            def pulled_back(function: Callable, point) -> tuple:
                outputs, pullback = jax.vjp(of_z(function), point)
                rows = (
                    jnp.concatenate([upstreams, jnp.eye(outputs.size, dtype=outputs.dtype)]) if jacobian else upstreams
                )
                return outputs, jax.vmap(lambda upstream: pullback(upstream)[0])(rows)

            def at(point):
                outputs, custom = pulled_back(target.op, point)
                if not autodiff:
                    return outputs, custom
                plain_vjps = _unless_undifferentiable(lambda: pulled_back(target.forward, point)[1], custom)
                return outputs, custom, plain_vjps

            return _map_rows(at, points, (1 + 2 * len(upstreams)) * points.shape[1])

        count = len(upstreams)
        kept = slice(None) if jacobian else slice(count)  # padded upstream rows dropped (the Jacobian's follow them)
        if jacobian:
            upstreams = upstreams.astype(points.dtype)
        else:
            upstreams = _padded(upstreams.astype(points.dtype), fill=0)
        with x64(needs_x64(*layout.inputs, points)):
            compiled = self._compiled(target, layout, f"vjps/{autodiff}/{jacobian}", compute)
            results = compiled(layout.perturbed, _padded(points), upstreams)
        outputs, custom = np.asarray(results[0])[: len(points)], np.asarray(results[1])[: len(points), kept]
        return Vjps.of(outputs, custom, np.asarray(results[2])[: len(points), kept] if autodiff else None)

    def second_order(self, target: Target, layout: Layout, upstream: np.ndarray) -> np.ndarray:
        """The Jacobian of the custom VJP J(z)^T u, by `jax.jacrev` through the gradient function."""
        refuse_variables(layout, self.backend)

        def compute(perturbed, upstream):
            of_z = on_z(layout, perturbed)
            z = jnp.concatenate([jnp.ravel(leaf).astype(upstream.dtype) for leaf in perturbed])

            def custom_vjp(point):
                return jax.vjp(of_z(target.op), point)[1](upstream)[0]

            return jax.jacrev(custom_vjp)(z)

        with x64(needs_x64(*layout.inputs, upstream)):
            compiled = self._compiled(target, layout, "second_order", compute)
            return np.asarray(compiled(layout.perturbed, upstream))

    def gradient_graph(self, target: Target, layout: Layout, upstreams: list, arguments: list) -> RawGraph:
        """The jaxprs of the forward (with the residuals `jax.vjp` keeps) and of the backward, as one graph."""
        refuse_variables(layout, self.backend)
        with x64(needs_x64(*layout.inputs, *upstreams)):
            return GraphTracer(target, layout, upstreams, arguments).trace()

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


def _narrows_float64(call: Callable[[], Any]) -> bool:
    """Whether an equation of the forward's jaxpr (traced with x64) turns a float64 value into a narrower float; True
    when the forward cannot be traced (its precision inside cannot be told)."""

    def outputs():
        result = call()
        return result[0] if isinstance(result, (tuple, list)) and len(result) == 2 and callable(result[1]) else result

    try:
        with x64(True):
            jaxpr = jax.make_jaxpr(outputs)()
    except Exception:  # the forward uses Python values of its inputs: measured eagerly only
        return True
    return any(
        any(dtype_of(v) == np.float64 for v in equation.invars)
        and any(dtype_of(v) in NARROW_FLOATS for v in equation.outvars)
        for equation in jaxpr.jaxpr.eqns
    )


def _unless_undifferentiable(autodiff: Callable[[], jax.Array], like: jax.Array) -> jax.Array:
    """`autodiff()` traced, or NaN shaped like `like` when the forward has an op without a reverse-mode derivative."""
    try:
        return autodiff()
    except _NOT_DIFFERENTIABLE:
        return jnp.full(like.shape, jnp.nan, like.dtype)


def _map_rows(function: Callable, rows: Any, elements_per_row: int) -> Any:
    """`function` over the leading axis of `rows`: vectorised, in batches that bound the memory."""
    count = tree_util.tree_leaves(rows)[0].shape[0]
    batch = max(1, _BATCH_ELEMENTS // max(1, int(elements_per_row)))
    if batch >= count:
        return jax.vmap(function)(rows)
    return jax.lax.map(function, rows, batch_size=batch)


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


def _key(target: Target, layout: Layout, kind: str) -> tuple:
    """What a compiled function depends on besides the perturbable inputs' values."""
    leaves = []
    for k, leaf in enumerate(layout.inputs):
        # The other leaves are constants of the compiled function: their values matter.
        leaves.append(shape_and_dtype(leaf) if k in layout.perturbable else _value_key(leaf))
    return (
        kind,
        id(target.op),
        str(tree_util.tree_structure(layout.structure, is_leaf=is_none)),
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
