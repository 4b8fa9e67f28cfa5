"""Values, structures and precision on Keras's JAX backend, and the op as a function of z: what the JAX adapter and
its gradient-graph tracer share. Importing this module imports Keras and JAX.

Precision: JAX turns float64 into float32 unless `jax_enable_x64` is set. The
adapter's computations on float64 data run with x64 enabled for their own
thread and duration only (`x64`), so the user's setting is left as it was.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import jax
import jax.numpy as jnp
import keras
import numpy as np
from jax import tree_util

from gradmagic.frameworks.base import Layout

NARROW_FLOATS = {np.dtype("float32"), np.dtype("float16"), np.dtype(jnp.bfloat16)}
_WIDE_DTYPES = {np.dtype("float64"), np.dtype("complex128")}


def is_none(value: Any) -> bool:
    return value is None


def pack(structure: Any, leaves: list) -> Any:
    """The leaves put back into `structure`'s tree (None is a leaf)."""
    return tree_util.tree_unflatten(tree_util.tree_structure(structure, is_leaf=is_none), leaves)


def path_step(key: Any) -> Any:
    """A tree_util path key as TensorFlow's nest paths give it: an index, a dict key, a field name."""
    for attribute in ("idx", "key", "name"):
        if hasattr(key, attribute):
            return getattr(key, attribute)
    return str(key)


def dtype_of(atom: Any) -> np.dtype | None:
    """The dtype of a jaxpr atom, None for extended dtypes (PRNG keys, float0)."""
    dtype = getattr(getattr(atom, "aval", None), "dtype", None)
    try:
        return np.dtype(dtype) if dtype is not None else None
    except TypeError:
        return None


def is_floating(value: Any) -> bool:
    return bool(jnp.issubdtype(value.dtype, jnp.floating))


def shape_and_dtype(aval: Any) -> tuple[tuple[int | None, ...], str]:
    shape = tuple(int(d) if isinstance(d, (int, np.integer)) else None for d in getattr(aval, "shape", ()))
    dtype = getattr(aval, "dtype", None)
    return shape, (np.dtype(dtype).name if dtype is not None else str(aval))


def needs_x64(*values: Any) -> bool:
    """Whether any of `values` (arrays, variables, empty arrays standing for a dtype) is float64 or complex128.

    64-bit integers are left to JAX: without x64 they are int32, as in the user's own runs.
    """
    return any(getattr(value, "dtype", None) is not None and np.dtype(value.dtype) in _WIDE_DTYPES for value in values)


def x64(enabled: bool) -> contextlib.AbstractContextManager:
    """x64 for this thread while the context lasts, when `enabled` and not already on."""
    if enabled and not jax.config.jax_enable_x64:
        return jax.enable_x64(True)
    return contextlib.nullcontext()


def to_tensor(value: Any) -> jax.Array:
    """A JAX array of `value`; a float64 NumPy value stays float64 (Python numbers become float32/int32)."""
    if isinstance(value, jax.Array):
        return value
    with x64(needs_x64(value)):
        tensor = keras.ops.convert_to_tensor(value)
        return jnp.asarray(tensor, dtype=tensor.dtype) if tensor.weak_type else tensor


class WithX64:
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
        with x64(True):
            return self.__wrapped__(*args, **kwargs)


# -- the op as a function of its perturbed inputs, or of z ------------------------------------------------------------


def call(function: Callable, layout: Layout, leaves: list) -> Any:
    return function(*pack(layout.structure, leaves), **layout.kwargs)


def of_perturbed(function: Callable, layout: Layout) -> Callable:
    """`function`'s outputs as a function of the perturbable input leaves."""
    return lambda *perturbed: call(function, layout, layout.with_perturbed(list(perturbed)))


def on_z(layout: Layout, perturbed: list) -> Callable[[Callable], Callable]:
    """For a function of the inputs, its flat floating outputs (in z's dtype) as a function of z."""

    def of_z(function: Callable) -> Callable:
        def at(z):
            leaves, offset = [], 0
            for leaf in perturbed:
                leaves.append(jnp.reshape(z[offset : offset + leaf.size], leaf.shape).astype(leaf.dtype))
                offset += leaf.size
            return flat_outputs(call(function, layout, layout.with_perturbed(leaves)), z.dtype)

        return at

    return of_z


def flat_outputs(outputs: Any, dtype) -> jax.Array:
    """The floating outputs, flattened and concatenated, in `dtype`."""
    leaves = [jnp.ravel(o).astype(dtype) for o in tree_util.tree_leaves(outputs) if is_floating(o)]
    return jnp.concatenate(leaves) if leaves else jnp.zeros(0, dtype)


def cotangent(outputs: Any, floating_upstreams: list) -> Any:
    """The upstream gradients shaped like the outputs; integer outputs take JAX's zero cotangent (float0)."""
    upstreams = iter(floating_upstreams)
    leaves = [
        next(upstreams) if is_floating(o) else np.zeros(o.shape, jax.dtypes.float0)
        for o in tree_util.tree_leaves(outputs)
    ]
    return tree_util.tree_unflatten(tree_util.tree_structure(outputs), leaves)
