"""Projection mode: the custom gradient against finite differences at any size, and where it is wrong.

The package: `probing` (the measurements), `detection` (their verdict), `localisation` (which elements), `blocks`
(block probes, and single elements measured on their own), `wording` (what is reported), `constants`;
`compare_projected` here runs them in that order.

Detection. For a random upstream vector u and signed random directions d_k
(each element +-h_i), the custom gradient g = J^T u predicts g . d_k, and
central differences measure u . (f(z + d_k) - f(z - d_k)) / 2 = u . J d_k.
Their difference divided by the sum of the absolute terms is a scale-aware
error. The same directions at twice the step give, by Richardson's argument,
the truncation error of the differences; with their rounding bound, that is
the measured noise floor the error is judged against. Nothing grows with the
number of elements, and signed directions cannot cancel a wrong element out.

Narrower floats. An op that runs only in float32 (or a 16-bit float) is
probed about float64 points, each cast to its float exactly, and u . f is
taken in float64: what rounds is the op's outputs alone, whose rounding is
measured along a probe's direction (`Prober`, as full mode measures it) and
grows as sqrt(N), where a bound of N roundings would hide a whole gradient
9 % off among 10,000 elements. Elements are then judged by their measured
noise (float32 without a default rtol, as in full mode).

Localisation. The mismatch along a direction is linear in it: restricted to
a set S with element weights c, it is sum_{i in S} e_i c_i d_i where e is the
error of the custom gradient. With one wrong element i, the ratio of the
weighted to the unweighted mismatch is c_i. Weights that spell an element's
rank in base B (up to 1024, limited by the measured signal-to-noise ratio)
thus name i in log_B(N) directions, two for a million elements. When the
ratios sit on the digit lattice within the measured noise, one element it
is; when they only come close, one more direction along i alone verifies it.
Found elements are taken out and the rest of the mismatch searched again.
When the ratios fall off the lattice, the set holds several wrong elements:
it is split into blocks, measured in one call, and the search goes on in the
blocks that carry mismatch (group testing). More such blocks than can be
listed means the error is everywhere, and the report says so.
"""

from __future__ import annotations

import numpy as np

from gradmagic.checking import surrogate
from gradmagic.checking.differences import machine_epsilon, tolerances
from gradmagic.checking.projection.blocks import BlockProbes
from gradmagic.checking.projection.constants import NOISE_MARGIN, SINGLE_ELEMENT_WARNING
from gradmagic.checking.projection.detection import Detection, detect, probe
from gradmagic.checking.projection.localisation import Locator
from gradmagic.checking.projection.probing import Prober, probe_upstream, product_totals, random_signs
from gradmagic.checking.projection.wording import (
    Mismatch,
    report_autodiff,
    report_mismatch,
    report_resolution,
    resolution,
)
from gradmagic.checking.resolution import of as resolution_of
from gradmagic.checking.run import CheckRun, Evidence
from gradmagic.frameworks.base import Layout
from gradmagic.report import ElementComparison, InputResolution, Numerics

__all__ = ["compare_projected", "probe_upstream", "random_signs"]


def compare_projected(run: CheckRun, layout: Layout, evidence: Evidence) -> Numerics:
    """Projection-mode comparison in `layout`'s precision: the probes measured and judged (`detection`), then the
    wrong elements located (`localisation`), or, for a pass, block probes where rounding hides single elements and
    what the pass resolves said (`wording`). Records fd-mismatch (or surrogate-*), fd-nonfinite, fd-noisy,
    projection-resolution and autodiff-nonfinite problems."""
    options = run.options
    run.trial.let_go()  # millions of elements: what the trial computed is not needed again
    if layout is not run.layout:
        run.release_z(run.layout)
    dtype = run.precision(layout)
    epsilon = machine_epsilon(dtype)
    rtol, atol = element_tolerances(dtype, options.rtol, options.atol)
    prober = Prober(run, layout)
    measured = probe(run, prober)
    if measured is None:
        return Numerics(mode="skipped", skipped_because="finite differences along random directions are NaN/Inf")
    detection = detect(run, layout, prober, measured)
    judge = BlockProbes(prober, detection.relative_truncation, epsilon, rtol, atol)
    seen = detection.threshold * float(np.min(detection.scale))
    inputs = input_resolutions(run, prober, seen)
    if detection.failing.any():
        located, max_error = _located(run, prober, detection, judge, evidence)
    else:
        whole = max((found.relative for found in inputs if found.relative is not None), default=0.0)
        located, max_error = _passed(run, layout, prober, detection, judge, evidence, whole)
    report_autodiff(run, evidence.rescued)
    return Numerics(
        mode="projection",
        dtype=dtype,
        rtol=rtol,
        atol=atol,
        eps=options.eps if options.eps is not None else epsilon ** (1 / 3),
        elements=int(prober.z.size),
        max_error=max_error,
        probes=options.probes,
        noise_floor=detection.noise_floor,
        worst=tuple(located),
        resolution=resolution_of(run, layout, inputs),
    )


def element_tolerances(dtype: str, rtol: float | None, atol: float | None) -> tuple[float, float]:
    """The (rtol, atol) an element measured along its own step is judged with besides its measured noise: the
    given ones, else in float32 none (what its measurement resolves judges it, as full mode's float32 does:
    `low_precision`), else the defaults of the dtype."""
    if dtype == "float32":
        return rtol or 0.0, atol or 0.0
    return tolerances(dtype, rtol, atol)


def _located(
    run: CheckRun, prober: Prober, detection: Detection, judge: BlockProbes, evidence: Evidence
) -> tuple[list[ElementComparison], float]:
    """A failing probe's wrong elements (or the blocks carrying a spread error), reported; and the worst error as a
    share of its threshold."""
    worst = detection.worst
    prober.trust_reference(detection.differences, detection.threshold)
    locator = Locator(
        prober,
        worst,
        detection.differences[worst] - detection.predicted[worst],
        detection.allowance(worst, NOISE_MARGIN * detection.noise[worst]),
        detection.allowance(worst, detection.typical_noise[worst]),
        run.columns,
        judge,
    )
    located, spread = locator.run()
    report_mismatch(run, prober, detection.mismatch(located, spread), evidence)
    return located, detection.max_error


def _passed(
    run: CheckRun,
    layout: Layout,
    prober: Prober,
    detection: Detection,
    judge: BlockProbes,
    evidence: Evidence,
    whole: float,
) -> tuple[list[ElementComparison], float]:
    """Every probe within its noise: block probes where rounding hides a typical element's error (float32 at scale,
    sized for the small ones), then what the pass resolves, said where it is coarser than the tolerance (`whole`:
    the largest error of an input's whole gradient that could pass, `input_resolutions`)."""
    options, max_error = run.options, detection.max_error
    seen = detection.threshold * float(np.min(detection.scale))
    located: list[ElementComparison] = []
    small, typical, _ = resolution(prober, seen, judge.atol)
    if detection.judgeable and typical > SINGLE_ELEMENT_WARNING:
        located, seen = judge.run(small * prober.bound_over_measured)
        if located:
            mismatch = Mismatch(
                judge.failing,
                judge.worst_relative,
                detection.noise_floor,
                judge.predicted,
                judge.differences,
                tuple(located),
                directions="random directions, each over one block of the elements",
            )
            report_mismatch(run, prober, mismatch, evidence)
            max_error = max(max_error, judge.worst_error)
    if not located:
        if detection.judgeable and not judge.unmeasured:
            run.findings.confirm_none_gradients(
                _unmoved(run, prober), "its finite differences along a direction over it alone are zero"
            )
        if options.surrogate and detection.judgeable and not judge.unmeasured:
            surrogate.report_declared_match(run.findings)
        dtype = run.precision(layout)
        tolerated = (judge.rtol, judge.atol)
        report_resolution(run, layout, prober, seen, dtype, tolerated, whole, judge.unmeasured)
    return located, max_error


def _unmoved(run: CheckRun, prober: Prober) -> set[str]:
    """The inputs with a None gradient (`none-gradient`) whose elements, moved together along the first probe's
    signs and steps, move u . f by no more than its rounding allows: the outputs do not depend on them. Measured
    for each such input alone (a probe over every element would hide a small dependence behind the others')."""
    columns, found = run.columns, set()
    named = {p.location.input for p in run.findings.problems if p.code == "none-gradient" and p.location is not None}
    for name, start, stop in zip(columns.names, columns.offsets, columns.offsets[1:]):
        if name not in named:
            continue
        weights = np.zeros((1, prober.z.size), np.float32)
        weights[0, start:stop] = 1
        moved = abs(float(prober.measure([0], weights, rounding=False).differences[0]))
        if moved <= NOISE_MARGIN * 1.5 * prober.rounding[0]:
            found.add(name)
    return found


def input_resolutions(run: CheckRun, prober: Prober, seen: float) -> tuple[InputResolution, ...]:
    """Per input, the smallest relative error of its whole gradient the probes would typically have seen: `seen`,
    the smallest mismatch a probe fails beyond, over sqrt(sum (g_i h_i)^2) of its elements (`resolution.py`)."""
    columns, found = run.columns, []
    for name, start, stop in zip(columns.names, columns.offsets, columns.offsets[1:]):
        if start == 0 and stop == prober.z.size:  # one input: the prober's totals, taken already
            _, typical = prober.step_totals
        else:
            _, typical = product_totals(prober.custom[start:stop], prober.steps[start:stop])
        found.append(InputResolution(name, seen / typical if typical > 0 and np.isfinite(seen) else None))
    return tuple(found)
