"""Full-Jacobian mode (few elements): the custom gradient against finite differences and autodiff, element by
element.

Three dense Jacobians: custom (every row a vector-Jacobian product through
the custom gradient), numerical (central differences, every perturbation in
one compiled call) and autodiff (through the forward's own ops), compared with
a scale-aware tolerance. An element whose one-sided slopes disagree at two
step sizes sits on a non-differentiable point and is left out.
"""

from __future__ import annotations

import numpy as np

from gradmagic.checking import low_precision, precision, resolution, surrogate
from gradmagic.checking.differences import (
    Axis,
    central_differences,
    judge,
    machine_epsilon,
    relative_step,
    steps_for,
    tolerances,
)
from gradmagic.checking.findings import LISTED, Findings, one_element_off
from gradmagic.checking.run import CheckRun, Evidence, OwnPrecision
from gradmagic.frameworks.base import Layout, Vjps
from gradmagic.report import ElementComparison, JacobianBlock, Numerics, Severity, element_label

#: Dense Jacobians up to this many entries go into the report (for heatmaps).
REPORTED_JACOBIAN_ENTRIES = 4096
#: One-sided differences disagreeing by more than this fraction mark a non-differentiable point.
KINK_FRACTION = 0.01


def jacobians(run: CheckRun, layout: Layout, own: OwnPrecision | None = None) -> Vjps:
    """The custom and autodiff Jacobians ([M, N] in `custom[0]`, `autodiff[0]`) at the layout's example point;
    those in the op's own precision were taken with its other own-precision products (`own`, `compiled.py`)."""
    if layout is run.layout and own is not None and own.jacobian is not None:
        return own.jacobian
    z = run.z(layout)
    return run.vjps(layout, z[None], np.zeros((0, run.rows.size), z.dtype), jacobian=True)


def compare_full(run: CheckRun, layout: Layout, evidence: Evidence) -> Numerics:
    """Full-Jacobian comparison in `layout`'s precision; records fd-mismatch (or surrogate-*),
    nondifferentiable-point and autodiff-* problems."""
    options, findings = run.options, run.findings
    columns, rows = run.columns, run.rows
    z = run.z(layout)
    dtype = run.precision(layout)
    rtol, atol = tolerances(dtype, options.rtol, options.atol)
    steps = steps_for(z, *run.dtypes_and_sizes(layout), options.eps)
    plus, minus = run.evaluate(layout, np.diag(steps), signs=(1.0, -1.0))
    precise = jacobians(run, layout, evidence.own)
    own = precise if layout is run.layout else jacobians(run, run.layout, evidence.own)
    custom = precise.custom[0]
    autodiff = None if precise.autodiff is None else precise.autodiff[0]

    n = z.size
    center = precise.outputs[0]
    h = steps[:, None]
    # The custom gradient is judged in the precision it is written for (its constants in the op's own float).
    judged_rtol = rtol + precision.gradient_rounding(run, layout)
    numerical_t, tolerance_t, error_t = central_differences(
        plus, minus, custom, steps, judged_rtol, atol, machine_epsilon(dtype)
    )
    with np.errstate(all="ignore"):
        # One-sided slopes differ by |f(z+h) + f(z-h) - 2 f(z)| / h: h * f'' when smooth, the slope jump at a kink.
        jump_t = np.add(plus, minus)
        jump_t -= 2 * center
        np.abs(jump_t, out=jump_t)
        jump_t /= h
    candidates = np.flatnonzero((jump_t > tolerance_t).any(axis=1))
    kinks = _kinks(run, layout, z, steps, center, plus, minus, candidates, tolerance_t)
    given = rtol, atol  # what the user asked for (or the dtype's defaults), before a 16-bit float's measured noise
    needed_rtol = None
    if low_precision.applies(dtype):  # below float64: extrapolated, judged by the noise the steps measure
        fixed = numerical_t, tolerance_t, error_t
        numerical_t, tolerance_t, error_t, (rtol, atol) = low_precision.extrapolated(
            run, layout, z, steps, plus, minus, custom, center, judged_rtol - rtol
        )
        # Their tolerance holds the rounding the steps measured; a step that rounds to zero measures nothing.
        rounded_t = np.broadcast_to((steps == 0)[:, None], numerical_t.shape).copy()
        if not low_precision.coarser_than_float32(dtype):
            numerical_t, tolerance_t, error_t = low_precision.no_looser(fixed, (numerical_t, tolerance_t, error_t))
    else:
        # A difference beyond its tolerance, which holds the rounding, is a finding whatever the step; one within it
        # judges nothing where the rounding alone is as large as the tolerance.
        rounded_t = _rounded(plus, minus, custom, numerical_t, steps, dtype, rtol, atol) & ~kinks[:, None]
        rounded_t &= ~(error_t > 1)
        if rounded_t.any() and (options.rtol is not None or options.atol is not None):
            needed_rtol = _needed_rtol(plus, minus, custom, numerical_t, steps, dtype, rounded_t)
    error_t[rounded_t] = np.nan  # not judged, like a NaN difference (`judge`)
    numerical_t[rounded_t] = np.nan
    ranked, judged, mismatched = judge(numerical_t, error_t, kinks)
    numerical, error, tolerance = numerical_t.T, error_t.T, tolerance_t.T

    own_autodiff = None if own.autodiff is None else own.autodiff[0]
    if kinks.any():
        severity: Severity = "info" if options.surrogate else "warning"  # a declared surrogate's comparison informs
        _report_kinks(kinks, z, (plus - center) / h, (center - minus) / h, columns, findings, severity)
    rounded = rounded_t.any(axis=1)
    if rounded.any():
        _report_rounded(rounded, z, steps, dtype, options, needed_rtol, columns, findings)
    unjudged = ~kinks & ~rounded & ~np.isfinite(numerical_t).all(axis=1)
    if unjudged.any():
        _report_unjudged(unjudged, z, steps, custom, columns, findings)
    # An element is judged when every entry of its column is: a zero judged beside a derivative that could not be
    # (an element-wise op's diagonal at the edge of its domain) judges nothing of it.
    if not judged.all(axis=0).any() and not mismatched.any():
        rounding_only = rounded.any() and not unjudged.any()
        why = "finite differences are rounding" if rounding_only else "finite differences are NaN/Inf"
        return Numerics(mode="skipped", skipped_because=f"no element could be judged: {why}")
    loose = None if mismatched.any() else too_loose(numerical, judged, dtype, *given)
    if loose is not None:
        _report_loose(run, loose, given[1], dtype)
        label = options.label("atol")
        return Numerics(
            mode="skipped",
            skipped_because=f"no element could be judged: {label} = {given[1]:g} is at least half of every finite "
            "difference",
        )
    _confirm_none_gradients(findings, columns, numerical_t, tolerance_t, judged.T)
    if mismatched.any():
        _report_mismatch(run, evidence, z, mismatched, ranked, custom, numerical, autodiff, tolerance, judged)
    elif options.surrogate:
        surrogate.report_declared_match(findings)
    _report_autodiff(run, own, evidence.traced.forward_ops, numerical, autodiff, tolerance, judged, mismatched)

    worst = [
        _element(columns, rows, row, column, custom, numerical, own_autodiff, error)
        for row, column in ranked
        if judged[row, column]
    ]
    reported = custom.size <= REPORTED_JACOBIAN_ENTRIES
    blocks = _blocks(columns, rows, custom, numerical, own_autodiff, error) if reported else []
    finite_errors = error_t[(error_t >= 0) & (error_t < np.inf)]
    return Numerics(
        mode="full",
        dtype=dtype,
        rtol=rtol,
        atol=atol,
        eps=relative_step(dtype, options.eps),
        elements=n,
        max_error=float(finite_errors.max()) if finite_errors.size else None,
        worst=tuple(worst),
        jacobians=tuple(blocks),
        resolution=resolution.of(run, layout, resolution.full(columns, custom, tolerance, judged)),
    )


def report_listing(ranked, mismatched, columns: Axis, rows: Axis, values, z=None) -> tuple[list[str], tuple[int, int]]:
    """The worst mismatched entries as `d out[i] / d in[j] at in[j] = 0.5: <values(row, column)>` (the input's value
    where `z` is given), and the worst (row, column)."""
    entries = [(row, column) for row, column in ranked if mismatched[row, column]]
    lines = []
    for row, column in entries[:LISTED]:
        output, output_index = rows.label(int(row))
        element = element_label(*columns.label(int(column)))
        at = "" if z is None else f" at {element} = {float(z[column]):.4g}"
        lines.append(f"d {element_label(output, output_index)} / d {element}{at}: {values(row, column)}")
    return lines, entries[0]


def _kinks(run: CheckRun, layout: Layout, z, steps, center, plus, minus, candidates, tolerance_t) -> np.ndarray:
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
    half_plus, half_minus = run.evaluate(layout, half, signs=(1.0, -1.0))
    for position, column in enumerate(candidates):
        step = steps[column]
        forward_side, backward_side = (plus[column] - center) / step, (center - minus[column]) / step
        jump = np.abs(forward_side - backward_side)
        half_jump = np.abs((half_plus[position] - 2 * center + half_minus[position]) / (step / 2))
        kink_tolerance = tolerance_t[column] + KINK_FRACTION * (np.abs(forward_side) + np.abs(backward_side))
        kinks[column] = bool(np.any((jump > kink_tolerance) & (half_jump > 0.75 * jump)))
    return kinks


def _confirm_none_gradients(findings: Findings, columns: Axis, numerical_t, tolerance_t, judged_t) -> None:
    """A None gradient for an input the outputs do not depend on (finite differences zero at every judged element,
    as for a hyper-parameter of an identity forward) is right: its `none-gradient` warning becomes an info."""
    confirmed = set()
    for name, start, stop in zip(columns.names, columns.offsets, columns.offsets[1:]):
        compared = judged_t[start:stop]
        if compared.all() and not (np.abs(numerical_t[start:stop]) > tolerance_t[start:stop]).any():
            confirmed.add(name)
    findings.confirm_none_gradients(confirmed, "its finite differences are zero")


def _report_kinks(
    kinks, z, forward_side_t, backward_side_t, columns: Axis, findings: Findings, severity: Severity
) -> None:
    kink_columns = np.flatnonzero(kinks)
    forward_side, backward_side = forward_side_t.T, backward_side_t.T
    for column in kink_columns[:LISTED]:
        name, index = columns.label(int(column))
        row = int(np.argmax(np.abs(forward_side[:, column] - backward_side[:, column])))
        findings.add(
            "nondifferentiable-point",
            severity,
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
            severity,
            f"{len(kink_columns) - LISTED} more elements sit on non-differentiable points.",
        )


def too_loose(numerical, judged, dtype: str, rtol: float, atol: float) -> tuple[float, int, int] | None:
    """Where `atol` judges nothing of these finite differences ([M, N], the `judged` entries): it is looser than the
    dtype's own and at least half of every one (less rtol's share), so that a gradient half as large would pass at
    every element. Then (the largest finite difference, its row, its column); else None."""
    if atol <= tolerances(dtype, None, None)[1]:
        return None
    with np.errstate(all="ignore"):
        magnitudes = np.where(judged & np.isfinite(numerical), np.abs(numerical), 0.0)
    largest = float(np.max(magnitudes, initial=0.0))
    if largest * (0.5 - rtol) > atol:
        return None
    row, column = np.unravel_index(int(np.argmax(magnitudes)), magnitudes.shape) if magnitudes.size else (0, 0)
    return largest, int(row), int(column)


def loose_advice(label: str, atol: float, largest: float, where: str, dtype: str) -> str:
    """Why an atol that is `too_loose` judged nothing, and what to give instead."""
    default_atol = tolerances(dtype, None, None)[1]
    return (
        f"{label} = {atol:g} is at least half of every finite difference here (the largest is {largest:.3g}, "
        f"{where}): within it a gradient half as large would pass at every element, so nothing was judged. Give an "
        f"atol well below the gradient's scale (such as {max(largest * 1e-3, default_atol):.1g}), or leave the "
        f"default ({default_atol:g} in {dtype})."
    )


def _report_loose(run: CheckRun, loose: tuple[float, int, int], atol: float, dtype: str) -> None:
    """fd-tolerance: the user's atol judged nothing (`too_loose`)."""
    largest, row, column = loose
    name, index = run.columns.label(column)
    where = f"d {element_label(*run.rows.label(row))} / d {element_label(name, index)}"
    advice = loose_advice(run.options.label("atol"), atol, largest, where, dtype)
    run.findings.add("fd-tolerance", "warning", advice, input=name, index=index)


#: Differences whose rounding alone is beyond this share of the tolerance judge nothing.
ROUNDED_SHARE = 1.0


def _rounded(plus, minus, custom, numerical_t, steps, dtype: str, rtol: float, atol: float) -> np.ndarray:
    """[N, M]: the entries whose central differences are rounding rather than the derivative: the step is zero, or
    the rounding of f(z + h) - f(z - h) (eps |f| / h, at the precision's own epsilon, no safety factor) is beyond the
    tolerance of the entry (rtol times the larger of the custom and numerical value, plus atol). A step far below
    the precision's cube root (eps=1e-15 in float64) makes every entry so: its tolerance, which adds that
    rounding, would pass any gradient. An output the step leaves exactly as it was has no rounding to fear."""
    h = steps[:, None]
    with np.errstate(all="ignore"):
        rounding = machine_epsilon(dtype) * (np.abs(plus) + np.abs(minus)) / (2 * h)
        scale = rtol * np.maximum(np.abs(custom.T), np.abs(numerical_t)) + atol
        return (h == 0) | ((rounding > ROUNDED_SHARE * scale) & (plus != minus))


def _needed_rtol(plus, minus, custom, numerical_t, steps, dtype: str, rounded_t) -> float | None:
    """Where the rounded entries would be judged at the dtype's default tolerances, so that the user's tighter ones
    are why they are not: the smallest rtol that judges them (their rounding against their value); else None."""
    default_rtol, default_atol = tolerances(dtype, None, None)
    by_default = _rounded(plus, minus, custom, numerical_t, steps, dtype, default_rtol, default_atol)
    tight = rounded_t & ~by_default
    if not tight.any():
        return None
    h = steps[:, None]
    with np.errstate(all="ignore"):
        rounding = machine_epsilon(dtype) * (np.abs(plus) + np.abs(minus)) / (2 * h)
        share = rounding / np.maximum(np.abs(custom.T), np.abs(numerical_t))
    return float(np.max(share[tight & np.isfinite(share)], initial=machine_epsilon(dtype)))


def _report_rounded(
    rounded, z, steps, dtype: str, options, needed_rtol: float | None, columns: Axis, findings: Findings
) -> None:
    """fd-rounding: elements whose finite differences are rounding could not be judged; say which and why: a step
    too small for the precision (or one that rounds to zero in it), a tolerance tighter than the rounding of the
    differences, or values too large against their change over a step."""
    elements = np.flatnonzero(rounded)
    column = int(elements[0])
    name, index = columns.label(column)
    listed = ", ".join(element_label(*columns.label(int(e))) for e in elements[:LISTED])
    default = relative_step(dtype, None)
    eps = options.eps
    step = options.label("eps")
    if steps[column] == 0:
        resolution = machine_epsilon(dtype) * max(abs(float(z[column])), float(np.finfo(np.float32).tiny))
        findings.add(
            "fd-rounding",
            "warning",
            f"Finite differences measure nothing at {len(elements)} element{'s' if len(elements) > 1 else ''} "
            f"({listed}{' ...' if len(elements) > LISTED else ''}): at {element_label(name, index)} = "
            f"{z[column]:.6g} the step {step}={eps if eps is not None else default:.3g} rounds to zero in {dtype}, "
            f"which resolves steps of {resolution:.3g} there, so the custom gradient could not be judged. Use the "
            f"default step ({default:.3g}) or a larger one.",
            input=name,
            index=index,
        )
        return
    elif eps is not None and eps < default:
        cause = f"the step {step}={eps:.3g} is too small for {dtype}: use the default ({default:.3g}) or a larger one"
    elif needed_rtol is not None:
        _report_tight(elements, listed, z, dtype, options, needed_rtol, columns, findings)
        return
    else:
        cause = f"the forward's values are too large against its change over a step in {dtype}"
    findings.add(
        "fd-rounding",
        "warning",
        f"Finite differences are rounding, not the derivative, at {len(elements)} element"
        f"{'s' if len(elements) > 1 else ''} ({listed}{' ...' if len(elements) > LISTED else ''}): at "
        f"{element_label(name, index)} = {z[column]:.6g} the step h = {steps[column]:.3g} changes the forward by "
        f"less than {dtype} resolves against its value, so the custom gradient there could not be judged; "
        f"{cause}.",
        input=name,
        index=index,
    )


def _report_tight(elements, listed: str, z, dtype: str, options, needed_rtol: float, columns: Axis, findings) -> None:
    """fd-rounding where the user's tolerance, not the step or the forward, is why: tighter than the rounding that
    finite differences in `dtype` always carry (rtol=0 and atol=0 judge nothing)."""
    column = int(elements[0])
    name, index = columns.label(column)
    given = [f"{options.label(n)}={getattr(options, n):g}" for n in ("rtol", "atol") if getattr(options, n) is not None]
    default_rtol, default_atol = tolerances(dtype, None, None)
    findings.add(
        "fd-rounding",
        "warning",
        f"The tolerance ({', '.join(given)}) is tighter than the rounding finite differences in {dtype} carry, at "
        f"{len(elements)} element{'s' if len(elements) > 1 else ''} ({listed}"
        f"{' ...' if len(elements) > LISTED else ''}): there their rounding is up to {needed_rtol:.2g} of the "
        f"derivative (at {element_label(name, index)} = {z[column]:.6g}), so no gradient could be judged within it. "
        f"Give rtol of at least {2 * needed_rtol:.1g}, or leave the tolerances to their defaults (rtol "
        f"{default_rtol:g}, atol {default_atol:g} in {dtype}).",
        input=name,
        index=index,
    )


def _report_unjudged(unjudged, z, steps, custom, columns: Axis, findings: Findings) -> None:
    """fd-nonfinite: elements whose finite differences are NaN/Inf could not be judged; say which, never drop them."""
    elements = np.flatnonzero(unjudged)
    column = int(elements[0])
    name, index = columns.label(column)
    listed = ", ".join(element_label(*columns.label(int(e))) for e in elements[:LISTED])
    findings.add(
        "fd-nonfinite",
        "warning",
        f"Finite differences are NaN/Inf at {len(elements)} element{'s' if len(elements) > 1 else ''} ({listed}"
        f"{' ...' if len(elements) > LISTED else ''}): the forward is not finite within a step of "
        f"{element_label(name, index)} = {z[column]:.6g} (h = {steps[column]:.3g}), at the edge of its domain (a "
        "square root or a logarithm at zero, say). The custom gradient there could not be judged; check the op at "
        "points inside its domain too.",
        input=name,
        index=index,
    )


def _report_mismatch(
    run: CheckRun, evidence: Evidence, z, mismatched, ranked, custom, numerical, autodiff, tolerance, judged
):
    """fd-mismatch, or surrogate-differs for a declared surrogate (see surrogate.py)."""
    options, findings, columns, rows = run.options, run.findings, run.columns, run.rows
    count = int(mismatched.sum())
    label = "surrogate" if options.surrogate else "custom"
    quoted = options.surrogate and autodiff is not None  # a declared surrogate's note speaks of autodiff's values

    def values(row, column) -> str:
        found = f"{label} {custom[row, column]:.6g}, finite differences {numerical[row, column]:.6g}"
        return found + (f", autodiff {autodiff[row, column]:.6g}" if quoted else "")

    listing, (row, column) = report_listing(ranked, mismatched, columns, rows, values, z)
    input_name, index = columns.label(int(column))
    output_name, output_index = rows.label(int(row))
    square = surrogate.square_block(columns, rows)
    with np.errstate(all="ignore"):
        largest = float(np.nanmax(np.abs(custom - numerical)[mismatched]))
    where = f"at {count} of {custom.size} Jacobian element{'s' if custom.size > 1 else ''}"

    surrogate.report_mismatch(
        findings,
        options.surrogate,
        surrogate.full_evidence(
            custom, numerical, tolerance, judged, square, evidence.linearity, evidence.traced.forward_ops, autodiff
        ),
        where + (f", by up to {largest:.3g}" if options.surrogate else ""),
        "; ".join(listing),
        dict(
            input=input_name, index=index, output=output_name, output_index=output_index, line=run.trial.gradient_line
        ),
        _diagnosis(columns, rows, z, mismatched, judged, custom, numerical, tolerance),
        surrogate.autodiff_note(
            autodiff, custom, numerical, mismatched, tolerance, findings.wording.autodiff, evidence.traced.forward_ops
        )
        if options.surrogate
        else "",
    )


def _diagnosis(columns: Axis, rows: Axis, z, mismatched, judged, custom, numerical, tolerance) -> str:
    """What is wrong, in one sentence, where the mismatch has a simple shape: a constant factor ("dx is 1.5 times the
    finite differences at every element"), a flipped sign (where an input is negative, or everywhere), a dropped
    term, one element off ("dx is 10 % too large at x[3] = 0.731 alone"); "" otherwise. A factor is constant when it
    explains every wrong element within that element's own tolerance (ratios from 0.9995 to 0.99988 are rounding of
    another kind, no factor)."""
    wrong = np.flatnonzero(mismatched.any(axis=0))
    names = list(dict.fromkeys(columns.label(int(column))[0] for column in wrong))
    gradients = ", ".join(f"d{name}" for name in names)
    compared = mismatched & (np.abs(numerical) > 0)
    if mismatched.sum() == 1 and compared.sum() == 1:
        row, column = (int(k[0]) for k in np.nonzero(mismatched))
        name, index = columns.label(column)
        said = one_element_off(name, index, float(z[column]), custom[row, column], numerical[row, column])
        if rows.size > 1:  # which output's derivative
            said = f"{said[:-1]} (d {element_label(*rows.label(row))} / d {element_label(name, index)})."
        return said
    if compared.sum() < 2 or mismatched.sum() != compared.sum():
        return ""
    with np.errstate(all="ignore"):  # a custom gradient of inf or NaN somewhere
        ratios = custom[compared] / numerical[compared]
        ratio = float(np.median(ratios))
        explained = np.abs(custom[compared] - ratio * numerical[compared]) <= tolerance[compared]
    if not (np.all(explained) and np.all(np.isfinite(ratios))):
        return ""
    # Every judged nonzero entry of those inputs wrong, or only some of them.
    inputs = np.zeros(columns.size, bool)
    for name in names:
        part = columns.names.index(name)
        inputs[columns.offsets[part] : columns.offsets[part + 1]] = True
    everywhere = not (judged & (np.abs(numerical) > 0) & ~mismatched)[:, inputs].any()
    scope = "at every element" if everywhere else "wherever it is wrong"
    verb = "is" if len(names) == 1 else "are"
    if np.isclose(ratio, -1, rtol=1e-3):
        where = _sign_scope(columns, z, wrong, inputs, scope)
        return f"{gradients} {'has' if len(names) == 1 else 'have'} the opposite sign {where}: a sign is flipped."
    if np.isclose(ratio, 0, atol=1e-9):
        return f"{gradients} {verb} zero {scope} where the finite differences are not: a term is missing."
    return f"{gradients} {verb} {ratio:.6g} times the finite differences {scope}: a constant factor is off."


def _sign_scope(columns: Axis, z, wrong, inputs, scope: str) -> str:
    """Where a sign is flipped: "where x < 0" when the wrong elements are one input's negative (or positive) ones
    and its others are right; else `scope`."""
    names = {columns.label(int(column))[0] for column in wrong}
    if len(names) != 1 or scope == "at every element":
        return scope
    (name,) = names
    values, right = z[wrong], np.setdiff1d(np.flatnonzero(inputs), wrong)
    for side, holds in (("< 0", values < 0), ("> 0", values > 0)):
        if holds.all() and right.size and not (z[right] < 0 if side == "< 0" else z[right] > 0).any():
            return f"where {name} {side}"
    return scope


def _report_autodiff(run: CheckRun, own: Vjps, forward_ops, numerical, autodiff, tolerance, judged, mismatched) -> None:
    """autodiff-nonfinite (in the op's own precision, `own`) where the custom gradient is right, and
    autodiff-differs (in the finite differences' precision) where it is right and judged."""
    findings, columns, rows = run.findings, run.columns, run.rows
    example = run.z(run.layout)
    own_custom, own_autodiff = own.custom[0], None if own.autodiff is None else own.autodiff[0]
    if own_autodiff is not None and not np.isfinite(own_autodiff).all():
        with np.errstate(all="ignore"):
            rescued = ~np.isfinite(own_autodiff) & np.isfinite(own_custom) & np.isfinite(numerical) & ~mismatched
        rescued_columns = np.flatnonzero(rescued.any(axis=0))
        if rescued_columns.size:
            column = int(rescued_columns[0])
            row = int(np.argmax(np.where(rescued[:, column], np.abs(own_custom[:, column]), -1)))
            name, index = columns.label(column)
            output_name, output_index = rows.label(row)
            count = rescued_columns.size
            findings.add(
                "autodiff-nonfinite",
                "info",
                f"{findings.wording.autodiff} of the forward is NaN/Inf at {count} input "
                f"element{'s' if count > 1 else ''}: at {element_label(name, index)} = {example[column]:.6g}, "
                f"for d {element_label(output_name, output_index)} "
                f"autodiff gives {own_autodiff[row, column]:.6g}, the custom gradient "
                f"{own_custom[row, column]:.6g} and finite differences {numerical[row, column]:.6g}. "
                "The custom gradient fixes it.",
                input=name,
                index=index,
                output=output_name,
                output_index=output_index,
            )
    stoppers = surrogate.gradient_stoppers(forward_ops, findings.wording)
    failure = run.autodiff_failure
    if autodiff is None and failure is not None:  # taken, but it failed where the custom gradient alone worked
        cause = findings.wording.autodiff_failure(failure)
        if cause is None:
            raised = f"{type(failure).__name__}: {findings.wording.cause(failure)}"
            cause = f"it uses {stoppers}" if stoppers else raised
        findings.add(
            "autodiff-unavailable",
            "info",
            f"{findings.wording.autodiff} of the forward could not be taken beside the custom gradient, because "
            f"{cause}. "
            "It is left out; finite differences judged the custom gradient.",
        )
    elif autodiff is None and stoppers:
        findings.add(
            "autodiff-unavailable",
            "info",
            f"{findings.wording.autodiff} of the forward cannot be taken: it uses {stoppers}. The custom gradient "
            "is the op's only gradient; finite differences judged it.",
        )
    if autodiff is not None:
        with np.errstate(all="ignore"):
            differs = (np.abs(autodiff - numerical) > tolerance) & judged & ~mismatched  # False where either is NaN
        if differs.any():
            row, column = np.argwhere(differs)[0]
            name, index = columns.label(int(column))
            findings.add(
                "autodiff-differs",
                "info",
                f"{findings.wording.autodiff} of the forward differs from the true derivative at {int(differs.sum())} "
                f"element{'s' if differs.sum() > 1 else ''} (at {element_label(name, index)}: autodiff "
                f"{autodiff[row, column]:.6g}, finite differences {numerical[row, column]:.6g}), while the custom "
                f"gradient matches: the forward uses {stoppers or 'ops'} whose registered gradient is not the "
                "derivative.",
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


def _blocks(columns: Axis, rows: Axis, custom, numerical, autodiff, error) -> list[JacobianBlock]:
    """The Jacobians of each (input, output) pair, with each entry's scaled error (-1 where none was judged)."""
    blocks = []
    for input_name, start, stop in zip(columns.names, columns.offsets, columns.offsets[1:]):
        for output_name, row_start, row_stop in zip(rows.names, rows.offsets, rows.offsets[1:]):
            part = (slice(row_start, row_stop), slice(start, stop))
            missing = np.full(custom[part].size, np.nan)
            blocks.append(
                JacobianBlock(
                    input_name,
                    output_name,
                    (int(row_stop - row_start), int(stop - start)),
                    [float(v) for v in custom[part].ravel()],
                    [float(v) for v in numerical[part].ravel()],
                    [float(v) for v in (autodiff[part].ravel() if autodiff is not None else missing)],
                    [float(v) for v in error[part].ravel()],
                )
            )
    return blocks
