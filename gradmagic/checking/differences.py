"""Finite differences, written once: steps, stencils, tolerances and the scale-aware error, over z.

z is the op's floating inputs, then the variables its forward reads,
flattened (see `frameworks.base.Layout`). Central differences
(f(z + h e_i) - f(z - h e_i)) / 2h estimate column i of the Jacobian; each
step h_i = eps * max(|z_i|, 1) is rounded so that z +- h is exact in the
element's precision. An error is |custom - numerical| divided by a tolerance
made of atol, rtol times the larger value, and the rounding of the
differences themselves: above 1 is a mismatch.

The engine holds values as NumPy's float32 or float64: float16 and bfloat16
(which NumPy has only through ml_dtypes) are held exactly in float32, and
each element's precision is known by name ("bfloat16"); steps are made
exact in it (`rounded_to`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import DTypeLike

#: Machine epsilon by dtype name (bfloat16 and float16 are not NumPy's own everywhere).
EPSILONS = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
#: Default (rtol, atol) by the dtype finite differences run in.
TOLERANCES = {
    "float64": (1e-5, 1e-8),
    "float32": (2e-2, 1e-3),
    "float16": (1e-1, 1e-2),
    "bfloat16": (1e-1, 1e-1),
}


@dataclass(frozen=True)
class Axis:
    """Names flat positions along the inputs (columns) or outputs (rows) of a Jacobian."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]

    @property
    def offsets(self) -> np.ndarray:
        return np.cumsum([0] + [int(np.prod(shape)) for shape in self.shapes])

    @property
    def size(self) -> int:
        return int(self.offsets[-1])

    def label(self, flat: int) -> tuple[str, tuple[int, ...]]:
        """The name and the element index of flat position `flat`."""
        part = int(np.searchsorted(self.offsets, flat, side="right") - 1)
        index = np.unravel_index(flat - self.offsets[part], self.shapes[part]) if self.shapes[part] else ()
        return self.names[part], tuple(int(i) for i in index)


def aligned_empty(shape: tuple[int, ...], dtype: DTypeLike) -> np.ndarray:
    """An uninitialised array starting on a cache line (64 bytes): frameworks take such large arrays without a
    copy."""
    item = np.dtype(dtype)
    count = int(np.prod(shape))
    buffer = np.empty(count * item.itemsize + 64, np.uint8)
    start = -buffer.ctypes.data % 64
    return buffer[start : start + count * item.itemsize].view(item).reshape(shape)


def aligned_concatenate(parts: list[np.ndarray], dtype: DTypeLike) -> np.ndarray:
    """The flat parts, one after the other, in `dtype`, in an `aligned_empty` array (frameworks take it without a
    copy)."""
    out = aligned_empty((sum(part.size for part in parts),), dtype)
    offset = 0
    for part in parts:
        out[offset : offset + part.size] = np.ravel(part)
        offset += part.size
    return out


def coarser(dtype: str, other: str | None) -> str:
    """Of two precisions, the one with the larger machine epsilon (`dtype` when `other` is None)."""
    return other if other is not None and machine_epsilon(other) > machine_epsilon(dtype) else dtype


def norm(values: np.ndarray) -> float:
    """The Euclidean norm, as a float, without overflow in the values' own float (float32 gradients of 1e20 square to
    infinity, and NumPy warns)."""
    values = np.ravel(values)
    with np.errstate(over="ignore", invalid="ignore"):
        squares = float(np.dot(values, values))
    if np.isfinite(squares):
        return float(np.sqrt(squares))
    largest = float(np.max(np.abs(values), initial=0.0))
    if largest == 0 or not np.isfinite(largest):
        return largest
    return largest * float(np.linalg.norm(values / largest))


def machine_epsilon(dtype: str) -> float:
    return EPSILONS.get(dtype, EPSILONS["float32"])


def coarsest(precisions: list[str]) -> str:
    """Of several precisions, the coarsest (float32 when there is none)."""
    found = "float64" if precisions else "float32"
    for precision in precisions:
        found = coarser(found, precision)
    return found


def working_dtype(*dtypes: np.dtype) -> np.dtype:
    """The NumPy dtype the engine holds values of these dtypes in: float64 if one is, else float32 (which holds
    float16 and bfloat16 exactly)."""
    return np.dtype(np.float64 if any(np.dtype(dtype) == np.float64 for dtype in dtypes) else np.float32)


def rounded_to(values: np.ndarray, precision: str) -> np.ndarray:
    """`values` (float32 or float64) rounded to the nearest number of `precision`, in their own dtype.

    bfloat16 is float32 with the last 16 bits of the significand dropped,
    rounded to nearest even: done here on float32's bits.
    """
    if precision == "float16":
        return values.astype(np.float16).astype(values.dtype)
    if precision == "bfloat16":
        bits = np.ascontiguousarray(values, np.float32).view(np.uint32)
        rounded = (bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))) & np.uint32(0xFFFF0000)
        return rounded.view(np.float32).astype(values.dtype)
    if precision == "float32":
        return values.astype(np.float32).astype(values.dtype)
    return values


def tolerances(dtype: str, rtol: float | None, atol: float | None) -> tuple[float, float]:
    """(rtol, atol): the given ones, or the defaults of the dtype the finite differences run in."""
    default_rtol, default_atol = TOLERANCES.get(dtype, TOLERANCES["float32"])
    return (default_rtol if rtol is None else rtol), (default_atol if atol is None else atol)


#: Eager and compiled runs of one op round differently (TensorFlow's graph optimiser turns log(1 + x) into log1p,
#: XLA keeps the float32 intermediates of 16-bit floats): in a 16-bit float, up to this many roundings of a tensor's
#: largest element (measured: below one on TensorFlow, JAX and PyTorch for common ops; more is cancellation, judged
#: by the op's own rounding in a wider float, `compiled.py`).
COMPILED_ROUNDINGS = 4
#: In float32 and float64, what eager and compiled runs may differ by: atol + rtol * |value|.
COMPILED_RTOL, COMPILED_ATOL = 1e-5, 1e-6


def rounding_allowance(eager: np.ndarray, compiled: np.ndarray, precision: str) -> np.ndarray:
    """Per element, how far an eager and a compiled run of one op in `precision` may differ by rounding alone."""
    if machine_epsilon(precision) <= EPSILONS["float32"]:
        return COMPILED_ATOL + COMPILED_RTOL * np.abs(compiled)
    finite = [np.abs(values[np.isfinite(values)]) for values in (eager, compiled)]
    scale = max(part.max(initial=0.0) for part in finite)
    return np.full(compiled.shape, COMPILED_ROUNDINGS * machine_epsilon(precision) * scale)


def relative_step(dtype: str, eps: float | None) -> float:
    """The relative finite-difference step: `eps` if given, else machine epsilon ** (1/3) of `dtype`."""
    return eps if eps is not None else machine_epsilon(dtype) ** (1 / 3)


def step_sizes(
    values: np.ndarray, relative: float, precision: str | None = None, out: np.ndarray | None = None
) -> np.ndarray:
    """relative * max(|values|, 1), rounded so that values + h and values - h are exact in `precision` (values'
    own dtype by default); written into `out` if given. In place: one temporary of values' size (at millions of
    elements)."""
    # Stepped from |values|, so that h is a multiple of the spacing at |values| + h, the larger of the two points'
    # magnitudes: both are then numbers of the precision (stepped from a negative value, |values| - h would need
    # the finer spacing of the smaller magnitude).
    magnitude = np.abs(values)
    steps = np.maximum(magnitude, 1, out=out if out is not None else np.empty_like(values))
    steps *= relative
    steps += magnitude
    steps[...] = rounded_to(steps, precision or str(values.dtype))
    steps -= magnitude
    return steps


def steps_for(z: np.ndarray, dtypes: list[str], sizes: list[int], eps: float | None) -> np.ndarray:
    """Per-element steps for z, whose parts (inputs, then variables) have these dtypes and sizes: each part's steps
    are those of its own precision, made exact in it."""
    steps = aligned_empty(z.shape, z.dtype)  # handed to the framework without a copy
    offset = 0
    for dtype, size in zip(dtypes, sizes):
        part = slice(offset, offset + size)
        step_sizes(z[part], relative_step(dtype, eps), dtype, out=steps[part])
        offset += size
    return steps


def central_points(z: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """[2N + 1, N]: z, then z + h_i e_i for every i, then z - h_i e_i (the full-mode stencil, as points)."""
    identity = np.diag(steps)
    return np.concatenate([z[None], z[None] + identity, z[None] - identity])


def central_differences(
    plus: np.ndarray, minus: np.ndarray, custom: np.ndarray, steps: np.ndarray, rtol, atol, epsilon: float | None = None
):
    """Central differences and the scale-aware error of `custom` against them, in the [N, M] layout.

    `plus` and `minus` hold f(z + h_i e_i) and f(z - h_i e_i), row i for
    element i; `custom` is the [M, N] Jacobian to judge. The tolerance adds
    the rounding of the differences themselves (at `epsilon`, the op's
    precision; `plus`'s dtype's by default) to atol and rtol; an error
    above 1 is a mismatch. In-place arithmetic: N x M entries. Returns
    (numerical, tolerance, error), each [N, M].
    """
    h = steps[:, None]
    with np.errstate(all="ignore"):
        custom_t = np.ascontiguousarray(custom.T)
        numerical_t = np.subtract(plus, minus)
        numerical_t /= 2 * h
        tolerance_t = np.abs(plus)
        tolerance_t += np.abs(minus)
        rounding = np.finfo(plus.dtype).eps if epsilon is None else epsilon
        tolerance_t *= 10 * rounding / (2 * h)  # the rounding of the differences
        tolerance_t += rtol * np.maximum(np.abs(custom_t), np.abs(numerical_t))
        tolerance_t += atol
        error_t = np.subtract(custom_t, numerical_t)
        np.abs(error_t, out=error_t)
        error_t /= tolerance_t
    return numerical_t, tolerance_t, error_t


def judge(numerical_t: np.ndarray, error_t: np.ndarray, left_out: np.ndarray):
    """Worst entries (as Jacobian (row, column)), the judged and the mismatched entries (Jacobian layout).

    NaN errors (a NaN custom gradient) count as mismatches; entries not judged
    (a column `left_out`, or no finite difference) become -1 in `error_t`.
    """
    np.nan_to_num(error_t, copy=False, nan=np.inf)
    error_t[~np.isfinite(numerical_t)] = -1
    error_t[left_out] = -1
    ranked = [(output, element) for element, output in largest(error_t, 10)]
    return ranked, error_t.T >= 0, error_t.T > 1


def largest(values: np.ndarray, count: int) -> list[tuple[int, int]]:
    """(row, column) of the `count` largest entries of a 2-D array, largest first.

    Row maxima first, then only the best rows: one pass over the array,
    where a flat partial sort is slow on the many equal entries (structural
    zeros) of a Jacobian.
    """
    row_maxima = values.max(axis=1)
    count = min(count, values.size)
    rows = np.argsort(row_maxima)[::-1][:count]
    candidates = [
        (values[row, column], int(row), int(column)) for row in rows for column in np.argsort(values[row])[::-1][:count]
    ]
    return [(row, column) for _, row, column in sorted(candidates, reverse=True)[:count]]
