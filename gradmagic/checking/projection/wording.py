"""What projection mode found, in words: a mismatch (`Mismatch`, `report_mismatch`), the elements at the edge of
the forward's domain, how finely a pass resolves single elements, and where autodiff fails and the custom gradient
does not."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gradmagic.checking import surrogate
from gradmagic.checking.differences import tolerances
from gradmagic.checking.findings import LISTED, one_element_off
from gradmagic.checking.projection.constants import SINGLE_ELEMENT_NOTE, SINGLE_ELEMENT_WARNING, SMALL
from gradmagic.checking.projection.probing import Prober
from gradmagic.checking.run import CheckRun, Evidence
from gradmagic.frameworks.base import Layout
from gradmagic.report import ElementComparison, element_label


@dataclass(frozen=True)
class Mismatch:
    """What projection mode measured wrong: built where it is measured (the random probes, or the block probes),
    worded in one place (`report_mismatch`)."""

    failing: np.ndarray  # [T] bool: the directions that failed
    error: float  # the worst relative error along them
    noise: float  # the measured noise floor
    predicted: np.ndarray  # [T]: the custom gradient's prediction along each direction
    differences: np.ndarray  # [T]: the central differences along each
    located: tuple[ElementComparison, ...]  # elements measured wrong; for a spread error, its worst last
    spread: tuple[str, ...] = ()  # for an error over more elements than are listed: "k of n blocks", their ranges
    true_zero: bool = False  # every direction's difference is within its noise while the custom gradient predicts more
    directions: str = "random directions"  # what the directions were, as the message names them


def report_mismatch(run: CheckRun, prober: Prober, mismatch: Mismatch, earlier: Evidence) -> None:
    """fd-mismatch, or surrogate-differs for a declared surrogate (see surrogate.py); what the earlier phases found
    (`earlier`: the traced forward's ops, the linearity verdict) is evidence for the pattern."""
    options, findings, columns, rows = run.options, run.findings, run.columns, run.rows
    failing, error, noise, predicted = mismatch.failing, mismatch.error, mismatch.noise, mismatch.predicted
    located, spread = list(mismatch.located), mismatch.spread
    label = "surrogate" if options.surrogate else "custom"
    where = (
        f"along {int(failing.sum())} of {failing.size} {mismatch.directions} (relative error {error:.3g}, measured "
        f"noise floor {noise:.3g})"
    )
    listing = []
    quoted = options.surrogate and prober.autodiff is not None  # the note speaks of autodiff's values

    def listed(elements) -> str:
        return "; ".join(
            f"{element_label(e.input, e.index)}: {label} {e.custom:.6g}, finite differences {e.numerical:.6g}"
            + (f", autodiff {e.autodiff:.6g}" if quoted and e.autodiff is not None else "")
            for e in elements[:LISTED]
        )

    worst = located.pop() if spread and located else None  # the worst element of the spread error
    if spread:
        # Spread: no element is the wrong one. The worst found is named as such (and is where the problem points),
        # the others found on the way as more of the same; none where no element alone shows beyond the noise.
        what = "difference" if options.surrogate else "error"
        others = f"; others found: {listed(located)}" if located else ""
        found = (
            f"the worst element found, {listed([worst])}{others}"
            if worst
            else f"no single element's {what} shows beyond the rounding of the finite differences along its own step"
        )
        listing.append(
            f"The {what} is spread over many elements: mismatch in {', '.join(spread[: 1 + LISTED])}; {found}"
        )
        if worst:
            located.append(worst)
    elif located:
        what = "Differing" if options.surrogate else "Wrong"
        listing.append(
            f"{what} element{'s' if len(located) > 1 else ''}, as components of the vector-Jacobian product "
            f"for a random upstream gradient: {listed(located)}"
        )
    mistake_hint = ""
    with np.errstate(all="ignore"):  # a direction the forward does not move (flat, a step function): inf, nan
        ratios = predicted / mismatch.differences
        ratio = float(np.median(ratios))
    if spread and np.all(np.isfinite(ratios)) and np.allclose(ratios, ratio, rtol=1e-4):
        mistake_hint = (
            f"Along every direction the custom gradient is {ratio:.6g} times the finite differences: "
            "a constant factor is off" + (" (a flipped sign)." if np.isclose(ratio, -1) else ".")
        )
    elif len(located) == 1 and not spread:
        element = located[0]
        custom, numerical = element.custom, element.numerical
        if custom is not None and numerical:
            value = prober.value_at(element.input, element.index)
            mistake_hint = one_element_off(element.input, element.index, value, float(custom), float(numerical))
    square = surrogate.square_block(columns, rows)
    evidence = surrogate.projected_evidence(
        prober.custom,
        prober.upstream_vector,
        square,
        earlier.linearity,
        mismatch.true_zero,
        earlier.traced.forward_ops,
        tuple(located),
    )
    note = ""
    if options.surrogate:
        rtol, atol = tolerances(run.precision(prober.layout), options.rtol, options.atol)
        if located:
            values = np.array([[e.custom, e.numerical, np.nan if e.autodiff is None else e.autodiff] for e in located])
            custom, numerical, autodiff = values.T
        else:
            custom, autodiff = prober.custom, prober.autodiff
            numerical = np.full_like(custom, np.nan)
        autodiff = None if prober.autodiff is None else autodiff
        tolerance = atol + rtol * np.abs(custom)
        note = surrogate.autodiff_note(
            autodiff,
            custom,
            numerical,
            np.ones(custom.shape, bool),
            tolerance,
            findings.wording.autodiff,
            earlier.traced.forward_ops,
        )
    surrogate.report_mismatch(
        findings,
        options.surrogate,
        evidence,
        where,
        ". ".join(listing) if listing else "No single element carries the difference",
        where_wrong(run, (worst or located[0]) if located else None),
        mistake_hint,
        note,
    )


def where_wrong(run: CheckRun, element: ElementComparison | None) -> dict:
    """The location of a mismatch: the element (where one is named) and the gradient function's line."""
    location: dict[str, Any] = {"input": element.input, "index": element.index} if element is not None else {}
    if run.trial.gradient_line is not None:
        location["line"] = run.trial.gradient_line
    return location


def report_nonfinite(run: CheckRun) -> None:
    """fd-nonfinite: the differences along random directions are NaN/Inf, the elements responsible not found."""
    run.findings.add(
        "fd-nonfinite",
        "warning",
        "Finite differences along random directions are NaN/Inf: the forward is not finite within a step of some "
        "elements (the edge of its domain: a square root or a logarithm at zero, say), and they could not be "
        "told apart (too many, or only together), so nothing could be judged in projection mode. Check the op at "
        f"up to full_threshold = {run.options.full_threshold} elements, where each element is judged on its own and "
        "those at the edge are named, or at points inside its domain.",
    )


def report_noisy(run: CheckRun, noise_floor: float) -> None:
    """fd-noisy: the finite differences' measured noise is too large to judge anything (a discontinuous forward)."""
    run.findings.add(
        "fd-noisy",
        "warning",
        f"Finite differences along random directions are too noisy to judge the custom gradient here "
        f"(measured relative noise {noise_floor:.3g}): the forward is probably discontinuous (round, sign, a "
        "step), with elements within a finite-difference step of a jump. Check it at fewer elements (up to "
        f"full_threshold = {run.options.full_threshold}), where each element is judged on its own and jumps are "
        "recognised.",
    )


def report_edge(run: CheckRun, z: np.ndarray, steps: np.ndarray, edge: np.ndarray) -> None:
    """fd-nonfinite: the elements at the edge of the forward's domain, left out of projection mode's comparison."""
    columns = run.columns
    column = int(edge[0])
    name, index = columns.label(column)
    listed = ", ".join(element_label(*columns.label(int(e))) for e in edge[:LISTED])
    run.findings.add(
        "fd-nonfinite",
        "warning",
        f"Finite differences are NaN/Inf at {edge.size} element{'s' if edge.size > 1 else ''} ({listed}"
        f"{' ...' if edge.size > LISTED else ''}): the forward is not finite within a step of "
        f"{element_label(name, index)} = {z[column]:.6g} (h = {steps[column]:.3g}), at the edge of its domain (a "
        "square root or a logarithm at zero, say). The custom gradient there could not be judged, and the other "
        "elements were judged without them; check the op at points inside its domain too.",
        input=name,
        index=index,
    )


def resolution(prober: Prober, seen: float, atol: float) -> tuple[float, float, float]:
    """How far one element's gradient could be off (relative) and not show: for a small element (the SMALL quantile
    of the elements' |g_i h_i|), a typical one and at the largest gradients. A probe sees an error e at element i as
    e * |g_i d_i|, against `seen`, the smallest mismatch any probe tells from noise: errors spread over many
    elements add up, one element's does not. Elements whose gradient is within atol of zero are not counted: an
    error there is within the tolerance anyway."""
    small, typical, largest = prober.gradient_steps(atol)
    return (seen / small, seen / typical, seen / largest) if largest else (0.0, 0.0, 0.0)


def report_resolution(
    run: CheckRun,
    layout: Layout,
    prober: Prober,
    seen: float,
    dtype: str,
    tolerances,
    spread: float,
    unmeasured: list[tuple[int, int]],
) -> None:
    """`projection-resolution`: how far one element's gradient could be off and not show, and how far an input's
    whole gradient (`spread`, `input_resolutions`' largest: a third in a 16-bit float), where either is more than
    the tolerance; and the blocks of elements that disagreed but were left unmeasured."""
    rtol, atol = tolerances
    small, typical, best = resolution(prober, seen, atol)
    # Said where a typical element's error could hide beyond the tolerance, or a small one's beyond 10 %.
    single = typical > max(rtol, SINGLE_ELEMENT_NOTE) or small > SINGLE_ELEMENT_WARNING
    coarse = spread > max(rtol, SINGLE_ELEMENT_NOTE)
    if not single and not coarse and not unmeasured:
        return
    options, columns = run.options, run.columns
    z_size = prober.z.size
    refused = options.float64 and dtype != "float64" and layout is run.layout
    if dtype == "float64":
        remedy = ""
    elif run.effective is not None:
        remedy = f" (this op computes in {dtype} inside: float64 inputs do not help)"
    elif refused:
        remedy = " (this op does not run in float64: it mixes in constants or variables of a narrower float)"
    else:
        remedy = " or in float64"
    parts = ", ".join(f"`{name}`" for name in columns.names)
    if coarse:  # finite differences at this precision's steps are that noisy along every direction
        seen_here = f"rules out errors spread over the gradient only beyond {percent(spread)} of it"
    else:
        seen_here = "rules out errors spread over the gradient"
    if single:
        seen_here += (
            f", but not every single element's: one element of {parts} whose gradient is off by less than "
            f"{percent(typical)} (a typical element; {percent(small)} for the {SMALL:.0%} of elements with the "
            f"smallest gradients, {percent(best)} at the largest) would not show, {dtype} rounding over this many "
            "elements hides it"
        )
    if unmeasured:
        ranges = []
        for start, stop in unmeasured[:LISTED]:
            (first, first_index), (last, last_index) = run.columns.label(start), run.columns.label(stop - 1)
            ranges.append(f"{element_label(first, first_index)} to {element_label(last, last_index)}")
        seen_here += (
            f". {len(unmeasured)} block{'s' if len(unmeasured) > 1 else ''} of elements disagreed beyond their "
            f"rounding ({', '.join(ranges)}{', ...' if len(unmeasured) > LISTED else ''}) but could not be measured "
            "element by element within the check's budget: a wrong element, or elements within a step of a kink "
            "(a ReLU's at zero), where finite differences straddle the change of slope"
        )
    run.findings.add(
        "projection-resolution",
        "warning" if max(typical, spread) > SINGLE_ELEMENT_WARNING or unmeasured else "info",
        f"At {z_size:,} {dtype} elements, projection mode {seen_here}. To judge every element on its own, check in "
        f"full mode (full_threshold={z_size}, {z_size:,} evaluations){remedy}, or at fewer elements.",
    )


def percent(relative: float) -> str:
    return f"{relative:.0%}" if relative >= 0.01 else f"{relative:.2g} (relative)"


def report_autodiff(run: CheckRun, rescued: tuple[int, int] | None) -> None:
    """autodiff-nonfinite: the framework's own gradient is NaN/Inf (in the op's own precision), the custom one not."""
    if rescued is not None:
        count, element = rescued
        name, index = run.columns.label(element)
        run.findings.add(
            "autodiff-nonfinite",
            "info",
            f"{run.findings.wording.autodiff} of the forward is NaN/Inf at {count} element"
            f"{'s' if count > 1 else ''} (first at {element_label(name, index)}), where the custom gradient is "
            "finite: the custom gradient fixes it.",
            input=name,
            index=index,
        )
