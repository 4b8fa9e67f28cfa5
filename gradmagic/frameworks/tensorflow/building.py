"""What both TensorFlow adapters build their computations with: the op as a function of z, flat outputs and
gradients, and batches over rows. Eagerly these run inside a `tf.function`; in graph mode they are built into the
check's graph."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import tensorflow as tf

from gradmagic.frameworks.base import Layout


def call(function: Callable, layout: Layout, leaves: list) -> Any:
    """`function` called on the input leaves, packed as the layout's arguments, with its keyword arguments."""
    return function(*tf.nest.pack_sequence_as(layout.structure, leaves), **layout.kwargs)


def sources(layout: Layout, inputs: list) -> list:
    """What z holds, as tensors: the perturbable input leaves, then the variables."""
    return [inputs[k] for k in layout.perturbable] + list(layout.variables)


def flat_outputs(outputs: Any, dtype: tf.DType) -> tf.Tensor:
    """The floating outputs, flattened and concatenated, in `dtype`."""
    return _joined(
        [tf.reshape(tf.cast(o, dtype), [-1]) for o in tf.nest.flatten(outputs) if o.dtype.is_floating], dtype
    )


def flat_gradients(gradients: list, dtype: tf.DType) -> tf.Tensor:
    """Gradients of the sources (dense), flattened and concatenated in z's order, in `dtype`."""
    return _joined([tf.reshape(tf.cast(tf.convert_to_tensor(g), dtype), [-1]) for g in gradients], dtype)


def z_dtype(layout: Layout, inputs: list) -> tf.DType:
    """The dtype of z, as the check engine holds it: float64 if what it holds has one, else float32 (which holds float16
    and bfloat16 exactly)."""
    dtypes = [inputs[k].dtype.base_dtype for k in layout.perturbable] + [v.dtype.base_dtype for v in layout.variables]
    return tf.float64 if tf.float64 in dtypes else tf.float32


def z_vector(layout: Layout, inputs: list, dtype: tf.DType) -> tf.Tensor:
    """z: the perturbable inputs then the variables (their current values), flattened, in `dtype`."""
    return _joined([tf.reshape(tf.cast(part, dtype), [-1]) for part in sources(layout, inputs)], dtype)


def _joined(parts: list, dtype: tf.DType) -> tf.Tensor:
    """The flat parts one after the other: a single one as it is (a concatenation of one would copy it: millions of
    elements kept twice through a compiled call)."""
    if len(parts) == 1:
        return parts[0]
    return tf.concat(parts, axis=0) if parts else tf.zeros([0], dtype)


def displaced(offsets: tf.Tensor, signs: tf.Tensor) -> tf.Tensor:
    """[S * P, N]: each offset row times each sign, the signs' blocks one after the other."""
    return tf.reshape(signs[:, None, None] * offsets[None], [-1, tf.shape(offsets)[1]])


def input_leaves_at(layout: Layout, inputs: list, z: tf.Tensor) -> tuple[list, int]:
    """The input leaves at the point z, and where z's tail (the variables) starts."""
    leaves = list(inputs)
    offset = 0
    for k in layout.perturbable:
        size = int(np.prod(inputs[k].shape))
        part = z if size == z.shape[0] else z[offset : offset + size]  # one input and no variable: all of z
        leaves[k] = tf.cast(tf.reshape(part, inputs[k].shape), inputs[k].dtype)
        offset += size
    return leaves, offset


def variable_values(layout: Layout, z: tf.Tensor, offset: int | None = None) -> list[tuple[Any, tf.Tensor]]:
    """(variable, its value) for each variable, read from z's tail (from `offset`)."""
    if offset is None:
        offset = int(z.shape[0]) - sum(int(np.prod(v.shape)) for v in layout.variables)
    values = []
    for variable in layout.variables:
        size = int(np.prod(variable.shape))
        values.append((variable, tf.cast(tf.reshape(z[offset : offset + size], variable.shape), variable.dtype)))
        offset += size
    return values


def autodiff_or_nan(autodiff: Callable[[], tf.Tensor], like: tf.Tensor) -> tf.Tensor:
    """`autodiff()`, or NaN shaped like `like` when the forward has ops without a registered gradient."""
    try:
        return autodiff()
    except (LookupError, TypeError, ValueError):
        return tf.fill(tf.shape(like), tf.constant(np.nan, like.dtype))


#: Points of more elements than this are evaluated one after the other (`eager._map`): each is work enough for both
#: cores.
LARGE_ROWS = 1 << 16


def over_rows(function: Callable[[tf.Tensor], Any], rows: tf.Tensor) -> Any:
    """`function` of each row of `rows`, in one graph: vectorised (which also holds the least memory: a loop's
    TensorArray keeps each row's result and their stack), or a loop where an op cannot be vectorised; eagerly, a
    loop in Python."""
    if tf.executing_eagerly():
        return tf.stack([function(row) for row in rows])
    try:
        return tf.vectorized_map(function, rows, fallback_to_while_loop=True)
    except ValueError:  # pfor cannot vectorise the gradient of some op at all
        return tf.map_fn(function, rows, fn_output_signature=tf.nest.map_structure(_spec, function(rows[0])))


def _spec(tensor: tf.Tensor) -> tf.TensorSpec:
    return tf.TensorSpec(tensor.shape, tensor.dtype)
