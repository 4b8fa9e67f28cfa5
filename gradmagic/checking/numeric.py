"""Numerical checks: the custom gradient against finite differences and against autodiff.

Full mode (few elements): dense Jacobians three ways, custom (through the
custom gradient), numerical (central differences, every perturbation in one
compiled call) and autodiff (through the forward's own ops), compared
element by element with a scale-aware tolerance. Projection mode (many
elements) lives in `projection.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gradmagic.checking import surrogate
from gradmagic.checking.structure import LISTED, Findings
from gradmagic.frameworks.base import Adapter, Layout, Target
from gradmagic.report import ElementComparison, JacobianBlock, Numerics, element_label

#: Default (rtol, atol) by the dtype finite differences run in.
TOLERANCES = {
    "float64": (1e-5, 1e-8),
    "float32": (2e-2, 1e-3),
    "float16": (1e-1, 1e-1),
    "bfloat16": (1e-1, 1e-1),
}
#: Dense Jacobians up to this many entries go into the report (for heatmaps).
REPORTED_JACOBIAN_ENTRIES = 4096
#: One-sided differences disagreeing by more than this fraction mark a non-differentiable point.
KINK_FRACTION = 0.01


@dataclass(frozen=True)
class Axis:
    """Names flat positions along the inputs (columns) or outputs (rows) of a Jacobian."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]

    @property
    def offsets(self) -> np.ndarray:
        return np.cumsum([0] + [int(np.prod(shape)) for shape in self.shapes])

    def label(self, flat: int) -> tuple[str, tuple[int, ...]]:
        part = int(np.searchsorted(self.offsets, flat, side="right") - 1)
        index = np.unravel_index(flat - self.offsets[part], self.shapes[part]) if self.shapes[part] else ()
        return self.names[part], tuple(int(i) for i in index)


def tolerances(dtype: str, rtol: float | None, atol: float | None) -> tuple[float, float]:
    default_rtol, default_atol = TOLERANCES.get(dtype, TOLERANCES["float32"])
    return (default_rtol if rtol is None else rtol), (default_atol if atol is None else atol)


def steps_for(adapter: Adapter, layout: Layout, z: np.ndarray, eps: float | None) -> np.ndarray:
    """Per-element central-difference steps: eps * max(|z_i|, 1), eps = machine epsilon^(1/3) of the element's dtype.

    Each step is rounded so that z + h and z - h are exact in the element's dtype.
    """
    dtypes = [adapter.meta(layout.inputs[k]).dtype for k in layout.perturbable] + [
        adapter.meta(v).dtype for v in layout.variables
    ]
    sizes = layout.sizes(adapter.meta)
    steps = np.empty_like(z)
    offset = 0
    for dtype, size in zip(dtypes, sizes):
        part = slice(offset, offset + size)
        values = z[part].astype(np.dtype(dtype) if dtype != "bfloat16" else np.float32)
        steps[part] = step_sizes(values, relative_step(adapter, dtype, eps))
        offset += size
    return steps


def relative_step(adapter: Adapter, dtype: str, eps: float | None) -> float:
    """The relative finite-difference step: `eps` if given, else machine epsilon ** (1/3) of `dtype`."""
    return eps if eps is not None else adapter.machine_epsilon(dtype) ** (1 / 3)


def step_sizes(values: np.ndarray, relative: float) -> np.ndarray:
    """relative * max(|values|, 1), rounded so that values + h and values - h are exact in values' dtype."""
    raw = (relative * np.maximum(np.abs(values), 1)).astype(values.dtype)
    return (values + raw) - values


def compare_full(
    adapter: Adapter,
    target: Target,
    layout: Layout,
    original: Layout,
    columns: Axis,
    rows: Axis,
    options,
    findings: Findings,
    forward_ops: frozenset[str] | None = None,
) -> Numerics:
    """Full-Jacobian comparison; records fd-mismatch (or surrogate-*), nondifferentiable-point and autodiff-*
    problems. `forward_ops`: the forward's traced op names, evidence of an intended surrogate."""
    z = adapter.initial_vector(layout)
    dtype = str(z.dtype)
    rtol, atol = tolerances(dtype, options.rtol, options.atol)
    steps = steps_for(adapter, layout, z, options.eps)
    jacobians = adapter.full_jacobians(target, layout, steps)
    at_original = jacobians if original is layout else adapter.full_jacobians(target, original, None)

    n = z.size
    evaluations = jacobians.evaluations
    center, plus, minus = evaluations[0], evaluations[1 : n + 1], evaluations[n + 1 :]
    h = steps[:, None]
    custom = jacobians.custom
    numerical_t, tolerance_t, error_t = _central_differences(evaluations, custom, steps, rtol, atol)
    with np.errstate(all="ignore"):
        # One-sided slopes differ by |f(z+h) + f(z-h) - 2 f(z)| / h: h * f'' when smooth, the slope jump at a kink.
        jump_t = np.add(plus, minus)
        jump_t -= 2 * center
        np.abs(jump_t, out=jump_t)
        jump_t /= h
    kinks = _kinks(
        adapter,
        target,
        layout,
        z,
        steps,
        center,
        plus,
        minus,
        np.flatnonzero((jump_t > tolerance_t).any(axis=1)),
        tolerance_t,
    )
    ranked, judged, mismatched = _judge(numerical_t, error_t, kinks)
    numerical, error, tolerance = numerical_t.T, error_t.T, tolerance_t.T

    autodiff_original = at_original.autodiff
    if kinks.any():
        _report_kinks(kinks, z, (plus - center) / h, (center - minus) / h, columns, findings)
    if mismatched.any():
        _report_mismatch(
            mismatched,
            ranked,
            error,
            custom,
            numerical,
            jacobians.autodiff,
            tolerance,
            judged,
            columns,
            rows,
            options,
            findings,
            forward_ops,
            vjp=lambda upstream: adapter.vjps(target, layout, upstream)[0],
        )
    elif options.surrogate:
        surrogate.report_declared_match(findings)
    _report_autodiff(
        at_original.custom,
        autodiff_original,
        numerical,
        jacobians.autodiff,
        tolerance,
        judged,
        mismatched,
        original_z=adapter.initial_vector(original),
        columns=columns,
        rows=rows,
        findings=findings,
    )

    worst = [
        _element(columns, rows, row, column, custom, numerical, autodiff_original, error)
        for row, column in ranked
        if judged[row, column]
    ]
    blocks = []
    if custom.size <= REPORTED_JACOBIAN_ENTRIES:
        blocks = _blocks(columns, rows, custom, numerical, autodiff_original)
    finite_errors = error_t[(error_t >= 0) & (error_t < np.inf)]
    return Numerics(
        mode="full",
        dtype=dtype,
        rtol=rtol,
        atol=atol,
        eps=relative_step(adapter, dtype, options.eps),
        elements=n,
        max_error=float(finite_errors.max()) if finite_errors.size else None,
        worst=tuple(worst),
        jacobians=tuple(blocks),
    )


def compare_second_order(
    adapter: Adapter, target: Target, layout: Layout, columns: Axis, rows: Axis, options, findings: Findings
) -> None:
    """Order 2: the custom gradient, as a function of the inputs, against its finite differences.

    h(z) = J(z)^T u for a random upstream u; its Jacobian through autodiff of
    the gradient function is what nested tapes (Hessians, gradient penalties)
    compute, and central differences of h say what it should be.
    """
    z = adapter.initial_vector(layout)
    rtol, atol = tolerances(str(z.dtype), options.rtol, options.atol)
    steps = steps_for(adapter, layout, z, options.eps)
    upstream = np.random.default_rng(options.seed).standard_normal(int(rows.offsets[-1])).astype(z.dtype)
    second = adapter.second_order(target, layout, steps, upstream)
    numerical_t, _, error_t = _central_differences(second.evaluations, second.custom, steps, rtol, atol)
    ranked, _, mismatched = _judge(numerical_t, error_t, np.zeros(z.size, bool))
    if not mismatched.any():
        return
    gradients = Axis(tuple(f"d{name}" for name in columns.names), columns.shapes)
    listing, (_, column) = _listing(
        ranked,
        mismatched,
        columns,
        gradients,
        lambda row, column: (
            f"through the gradient function {second.custom[row, column]:.6g}, "
            f"finite differences {numerical_t[column, row]:.6g}"
        ),
    )
    name, index = columns.label(int(column))
    findings.add(
        "second-order-mismatch",
        "error",
        f"Second order: the derivative of the custom gradient (what nested tapes compute) disagrees with finite "
        f"differences of the custom gradient at {int(mismatched.sum())} of {mismatched.size} elements. "
        + "; ".join(listing)
        + ". The gradient function is right at this point but its own ops do not "
        "differentiate to the second derivative: compute it from differentiable tensors (not constants or "
        f"{findings.wording.stop_gradient}), or give it a custom gradient too." + findings.wording.second_order,
        input=name,
        index=index,
    )


def _central_differences(evaluations, custom, steps, rtol, atol):
    """Central differences and the scale-aware error of `custom` against them, in the [N, M] layout.

    `evaluations` holds f(z), then f(z + h_i e_i), then f(z - h_i e_i). The
    tolerance adds the rounding of the differences themselves to atol and
    rtol; an error above 1 is a mismatch. In-place arithmetic: N x M entries.
    """
    n = steps.size
    plus, minus = evaluations[1 : n + 1], evaluations[n + 1 :]
    h = steps[:, None]
    with np.errstate(all="ignore"):
        custom_t = np.ascontiguousarray(custom.T)
        numerical_t = np.subtract(plus, minus)
        numerical_t /= 2 * h
        tolerance_t = np.abs(plus)
        tolerance_t += np.abs(minus)
        tolerance_t *= 10 * np.finfo(evaluations.dtype).eps / (2 * h)  # the rounding of the differences
        tolerance_t += rtol * np.maximum(np.abs(custom_t), np.abs(numerical_t))
        tolerance_t += atol
        error_t = np.subtract(custom_t, numerical_t)
        np.abs(error_t, out=error_t)
        error_t /= tolerance_t
    return numerical_t, tolerance_t, error_t


def _judge(numerical_t, error_t, kinks):
    """Worst entries (as Jacobian (row, column)), the judged and the mismatched entries (Jacobian layout).

    NaN errors (a NaN custom gradient) count as mismatches; entries not judged
    (a kink, or no finite difference) become -1 in `error_t`.
    """
    np.nan_to_num(error_t, copy=False, nan=np.inf)
    error_t[~np.isfinite(numerical_t)] = -1
    error_t[kinks] = -1
    ranked = [(output, element) for element, output in _largest(error_t, 2 * LISTED)]
    return ranked, error_t.T >= 0, error_t.T > 1


def _largest(values: np.ndarray, count: int) -> list[tuple[int, int]]:
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


def _kinks(adapter, target, layout, z, steps, center, plus, minus, candidates, tolerance_t) -> np.ndarray:
    """Which perturbed elements sit on a kink: their slope jump does not shrink with the step.

    Smooth: one-sided slopes differ by h * f'', half as much at half the step.
    Kink: the jump stays. Only candidates (a jump above tolerance at step h)
    are evaluated again at half the step, in one compiled call.
    """
    kinks = np.zeros(z.size, bool)
    if not candidates.size:
        return kinks
    half = np.zeros((candidates.size, z.size), z.dtype)
    half[np.arange(candidates.size), candidates] = steps[candidates] / 2
    halves = adapter.evaluate_points(target, layout, np.concatenate([z + half, z - half]))
    for position, column in enumerate(candidates):
        step = steps[column]
        forward_side, backward_side = (plus[column] - center) / step, (center - minus[column]) / step
        jump = np.abs(forward_side - backward_side)
        half_jump = np.abs((halves[position] - 2 * center + halves[candidates.size + position]) / (step / 2))
        kink_tolerance = tolerance_t[column] + KINK_FRACTION * (np.abs(forward_side) + np.abs(backward_side))
        kinks[column] = bool(np.any((jump > kink_tolerance) & (half_jump > 0.75 * jump)))
    return kinks


def _report_kinks(kinks, z, forward_side_t, backward_side_t, columns: Axis, findings: Findings) -> None:
    kink_columns = np.flatnonzero(kinks)
    forward_side, backward_side = forward_side_t.T, backward_side_t.T
    for column in kink_columns[:LISTED]:
        name, index = columns.label(int(column))
        row = int(np.argmax(np.abs(forward_side[:, column] - backward_side[:, column])))
        findings.add(
            "nondifferentiable-point",
            "warning",
            f"At {element_label(name, index)} = {z[column]:.6g} the forward is not differentiable: its slope is "
            f"{backward_side[row, column]:.6g} from the left and {forward_side[row, column]:.6g} from the right. "
            "This element is left out of the finite-difference comparison; any value between is a valid "
            "subgradient. Check the op at a point away from the kink too.",
            input=name,
            index=index,
        )
    if len(kink_columns) > LISTED:
        findings.add(
            "nondifferentiable-point",
            "warning",
            f"{len(kink_columns) - LISTED} more elements sit on non-differentiable points.",
        )


def _report_mismatch(
    mismatched,
    ranked,
    error,
    custom,
    numerical,
    autodiff,
    tolerance,
    judged,
    columns: Axis,
    rows: Axis,
    options,
    findings: Findings,
    forward_ops,
    vjp,
) -> None:
    """fd-mismatch, or surrogate-differs for a declared surrogate (see checking/surrogate.py)."""
    count = int(mismatched.sum())
    label = "surrogate" if options.surrogate else "custom"
    listing, (row, column) = _listing(
        ranked,
        mismatched,
        columns,
        rows,
        lambda row, column: f"{label} {custom[row, column]:.6g}, finite differences {numerical[row, column]:.6g}",
    )
    input_name, index = columns.label(int(column))
    output_name, output_index = rows.label(int(row))
    square = len(columns.names) == 1 and len(rows.names) == 1 and columns.shapes == rows.shapes
    with np.errstate(all="ignore"):
        largest = float(np.nanmax(np.abs(custom - numerical)[mismatched]))
    where = f"at {count} of {error.size} Jacobian element{'s' if error.size > 1 else ''}"
    surrogate.report_mismatch(
        findings,
        options.surrogate,
        surrogate.full_evidence(custom, numerical, tolerance, judged, square, vjp, options.seed, forward_ops),
        where + (f", by up to {largest:.3g}" if options.surrogate else ""),
        "; ".join(listing),
        dict(input=input_name, index=index, output=output_name, output_index=output_index),
        _pattern(mismatched, custom, numerical),
        surrogate.autodiff_note(
            autodiff, custom, numerical, mismatched, tolerance, findings.wording.autodiff, forward_ops
        )
        if options.surrogate
        else "",
    )


def _listing(ranked, mismatched, columns: Axis, rows: Axis, values) -> tuple[list[str], tuple[int, int]]:
    """The worst mismatched entries as `d out[i] / d in[j]: <values(row, column)>`, and the worst (row, column)."""
    entries = [(row, column) for row, column in ranked if mismatched[row, column]]
    lines = []
    for row, column in entries[:LISTED]:
        output, output_index = rows.label(int(row))
        element, index = columns.label(int(column))
        lines.append(
            f"d {element_label(output, output_index)} / d {element_label(element, index)}: {values(row, column)}"
        )
    return lines, entries[0]


def _pattern(mismatched, custom, numerical) -> str:
    """A hint when the mismatch has a simple shape: a constant factor, a flipped sign, a dropped term."""
    compared = mismatched & (np.abs(numerical) > 0)
    if compared.sum() < 2 or mismatched.sum() != compared.sum():
        return ""
    ratios = custom[compared] / numerical[compared]
    ratio = float(np.median(ratios))
    if np.allclose(ratios, ratio, rtol=1e-3, atol=1e-9) and np.all(np.isfinite(ratios)):
        if np.isclose(ratio, -1, rtol=1e-3):
            return " The custom gradient has the opposite sign wherever it is wrong: a sign is flipped."
        if np.isclose(ratio, 0, atol=1e-9):
            return " The custom gradient is zero wherever it is wrong: a term is missing."
        return (
            f" Wherever it is wrong, the custom gradient is {ratio:.6g} times the finite differences: "
            "a constant factor is off."
        )
    return ""


def _report_autodiff(
    custom_original,
    autodiff_original,
    numerical,
    autodiff,
    tolerance,
    judged,
    mismatched,
    *,
    original_z,
    columns: Axis,
    rows: Axis,
    findings: Findings,
) -> None:
    if autodiff_original is not None and not np.isfinite(autodiff_original).all():
        with np.errstate(all="ignore"):
            rescued = ~np.isfinite(autodiff_original) & np.isfinite(custom_original) & ~mismatched
        rescued_columns = np.flatnonzero(rescued.any(axis=0))
        if rescued_columns.size:
            column = int(rescued_columns[0])
            row = int(np.argmax(np.where(rescued[:, column], np.abs(custom_original[:, column]), -1)))
            name, index = columns.label(column)
            output_name, output_index = rows.label(row)
            count = rescued_columns.size
            findings.add(
                "autodiff-nonfinite",
                "info",
                f"{findings.wording.autodiff} of the forward is NaN/Inf at {count} input "
                f"element{'s' if count > 1 else ''}: at {element_label(name, index)} = {original_z[column]:.6g}, "
                f"for d {element_label(output_name, output_index)} "
                f"autodiff gives {autodiff_original[row, column]:.6g}, the custom gradient "
                f"{custom_original[row, column]:.6g} and finite differences {numerical[row, column]:.6g}. "
                "The custom gradient fixes it.",
                input=name,
                index=index,
                output=output_name,
                output_index=output_index,
            )
    if autodiff is not None:
        with np.errstate(all="ignore"):
            differs = np.abs(autodiff - numerical) > tolerance  # False where either is NaN
        if differs.any():
            differs &= judged & ~mismatched
        if differs.any():
            row, column = np.argwhere(differs)[0]
            name, index = columns.label(int(column))
            findings.add(
                "autodiff-differs",
                "info",
                f"{findings.wording.autodiff} of the forward differs from the true derivative at {int(differs.sum())} "
                f"element{'s' if differs.sum() > 1 else ''} (at {element_label(name, index)}: autodiff "
                f"{autodiff[row, column]:.6g}, finite differences {numerical[row, column]:.6g}), while the custom "
                "gradient matches: the forward uses ops whose registered gradient is not their derivative "
                "(round, sign, stop_gradient, ...).",
                input=name,
                index=index,
            )


def _element(columns: Axis, rows: Axis, row, column, custom, numerical, autodiff, error) -> ElementComparison:
    name, index = columns.label(int(column))
    output_name, output_index = rows.label(int(row))
    return ElementComparison(
        name,
        index,
        output_name,
        output_index,
        float(custom[row, column]),
        float(numerical[row, column]),
        None if autodiff is None else float(autodiff[row, column]),
        float(error[row, column]),
    )


def _blocks(columns: Axis, rows: Axis, custom, numerical, autodiff) -> list[JacobianBlock]:
    blocks = []
    for i, (input_name, start, stop) in enumerate(zip(columns.names, columns.offsets, columns.offsets[1:])):
        for output_name, row_start, row_stop in zip(rows.names, rows.offsets, rows.offsets[1:]):
            part = (slice(row_start, row_stop), slice(start, stop))
            blocks.append(
                JacobianBlock(
                    input_name,
                    output_name,
                    (int(row_stop - row_start), int(stop - start)),
                    [float(v) for v in custom[part].ravel()],
                    [float(v) for v in numerical[part].ravel()],
                    [
                        float(v)
                        for v in (
                            autodiff[part].ravel() if autodiff is not None else np.full(custom[part].size, np.nan)
                        )
                    ],
                )
            )
    return blocks
