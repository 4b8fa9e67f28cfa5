"""Projection mode: the custom gradient against finite differences at any size, and where it is wrong.

Detection. For a random upstream vector u and signed random directions d_k
(each element +-h_i), the custom gradient g = J^T u predicts g . d_k, and
central differences measure u . (f(z + d_k) - f(z - d_k)) / 2 = u . J d_k.
Their difference divided by the sum of the absolute terms is a scale-aware
error. The same directions at twice the step give, by Richardson's argument,
the truncation error of the differences; with their rounding bound, that is
the measured noise floor the error is judged against. Nothing grows with the
number of elements, and signed directions cannot cancel a wrong element out.

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

import math
from dataclasses import dataclass

import numpy as np

from gradmagic.checking import precision, surrogate
from gradmagic.checking.differences import EPSILONS, Axis, aligned_empty, machine_epsilon, norm, steps_for, tolerances
from gradmagic.checking.findings import LISTED
from gradmagic.checking.run import CheckRun
from gradmagic.frameworks.base import Directions, Layout, Signs
from gradmagic.report import ElementComparison, Numerics, element_label

#: A direction fails when its error exceeds this many times the noise floor.
NOISE_MARGIN = 30.0
#: ... and this many times the root-sum-square of the custom gradient's own rounding (`precision.gradient_rounding`).
GRADIENT_MARGIN = 3.0
#: ... and this many machine epsilons (rounding of the long dot products themselves, which run in float32 at least:
#: a 16-bit op's own rounding is in the measured noise).
EPSILON_FLOOR = 1e3
#: Directions measured at a second step size too, for the truncation error.
RICHARDSON = 1
#: A noise floor above this leaves finite differences unable to judge (a discontinuous forward): a warning ...
UNJUDGEABLE_NOISE = 1e-2
#: ... or above this many times the floor of a smooth op in the precision they run in, eps^(2/3) (truncation and
#: rounding at the step eps^(1/3)): about 1 % in float16, 4 % in bfloat16, which is their smooth ops' own noise.
SMOOTH_FLOORS = 10
#: Located elements reported at most.
LOCATED = 8
#: Elements of a spread error measured besides its worst (`_Locator.samples`).
SAMPLED = 3
#: Blocks when the error is spread over many elements.
BLOCKS = 16
#: Largest base of the digit code.
MAX_BASE = 1024
#: Points evaluated in one call, in elements of z: bounds the memory of a measurement at millions of elements.
CALL_ELEMENTS = 2**23
#: A single element whose gradient may be off by more than this (relative) unseen is noted; by more than the second,
#: a warning.
SINGLE_ELEMENT_NOTE = 0.01
SINGLE_ELEMENT_WARNING = 0.1
#: Calls the narrowing of failing blocks may take in a check (`_Blocks._narrowed`), each measuring BLOCKS parts or
#: elements.
NARROWING_CALLS = 24
#: A block fails when its mismatch exceeds this many times its noise (a worst-case rounding bound already): a false
#: alarm only costs the block's measurement element by element, where full mode's tolerances judge.
BLOCK_MARGIN = 4.0
#: A block's one-sided differences may disagree by this share of its first-order change before it counts as holding
#: a kink (smooth forwards: about the relative step times f''/f').
KINK_SHARE = 0.05
#: Outputs evaluated, in all, by the block probes that look for a single wrong element (`_Blocks`), and per call.
BLOCK_BUDGET = 2**25
BLOCK_CALL_VALUES = 2**22
#: Elements of a slice when N-sized sums are taken a slice at a time.
TOTALS_SLICE = 1 << 20
#: Elements whose median gradient step stands for a typical element's (a regular sample of them, beyond this many).
RESOLUTION_SAMPLE = 2**16
#: The quantile of the elements' gradient steps |g_i h_i| that the block probes are sized for, and the resolution
#: stated for: all but this share of the elements (those of the smallest gradients) are judged as finely.
SMALL = 0.05


@dataclass(frozen=True)
class Projections:
    """Measurements along directions d_t, for the prober's upstream vector u and custom gradient g."""

    differences: np.ndarray  # [T]: (u . f(z + d_t) - u . f(z - d_t)) / 2, central differences of u . f along d_t
    rounding: np.ndarray  # [T]: eps * sum |u * f(z)|: the worst-case rounding of the above
    rounding_rms: np.ndarray  # [T]: eps * sqrt(sum (u * f(z))^2): the typical size of independent roundings
    predicted: np.ndarray  # [T]: g . d_t, what the custom gradient predicts
    magnitude: np.ndarray  # [T]: sum |g * d_t|


def _product_totals(first: np.ndarray, second: np.ndarray) -> tuple[float, float]:
    """The sum and the root-sum-square of |first * second|, a slice at a time (no N-sized temporary at millions of
    elements)."""
    total, norms = 0.0, []
    for start in range(0, first.size, TOTALS_SLICE):
        part = np.multiply(first[start : start + TOTALS_SLICE], second[start : start + TOTALS_SLICE])
        np.abs(part, out=part)
        total += float(part.sum())
        norms.append(norm(part))
    return total, norm(np.array(norms))


class Prober:
    """Measurements for one projection-mode check: a random upstream vector u, the custom vector-Jacobian product
    g = J^T u (and autodiff's), and central differences of u . f along signed directions.

    Direction t is `weights_t * signs[rows_t] * steps`: a row of random signs,
    scaled per element (the locator's digit codes) or as a whole (Richardson's
    second step).
    """

    def __init__(self, run: CheckRun, layout: Layout):
        self.run, self.layout = run, layout
        self.z = run.z(layout)
        self._gradient_steps: dict[float, tuple[float, float]] = {}
        self._step_totals: tuple[float, float] | None = None
        self.upstream_vector = probe_upstream(run.options.seed, run.rows.size).astype(self.z.dtype, copy=False)
        vjps = run.vjps(layout, self.z[None], self.upstream_vector[None], autodiff=False)
        self.custom = vjps.custom[0, 0]
        self._autodiff: tuple[np.ndarray | None] | None = None
        #: Autodiff's vector-Jacobian product, where it is trusted to name candidates (`trust_reference`).
        self.reference: np.ndarray | None = None
        # The rounding of u . f(z +- d) is that of u . f(z): measured once, at the centre.
        epsilon = machine_epsilon(run.precision(layout))
        self.rounding = tuple(epsilon * total for total in _product_totals(self.upstream_vector, vjps.outputs[0]))
        del vjps  # the steps and signs after the product's temporaries are gone: less at millions
        options = run.options
        self.steps = steps_for(self.z, *run.dtypes_and_sizes(layout), options.eps)
        self.signs = Signs.of(random_signs(options.seed, options.probes, self.z.size))

    def direction(self, row: int, element: int) -> float:
        """The value of probe `row`'s direction at `element`: its sign times its step."""
        return float(self.signs.at(row, element)) * float(self.steps[element])

    def gradient_steps(self, atol: float) -> tuple[float, float, float]:
        """|g_i h_i| of a small element (the SMALL quantile), a typical one (the median) and the largest, over
        elements whose gradient is above atol; zeros when none is. Measured once per check; the quantiles of a
        regular sample at millions of elements."""
        if atol not in self._gradient_steps:
            custom, steps = self.custom, self.steps
            stride = max(1, custom.size // RESOLUTION_SAMPLE)
            strided = np.abs(custom[::stride])
            sample = (strided * steps[::stride])[strided > atol]
            largest, highest = self._largest_step()
            if not sample.size or abs(custom[largest]) <= atol:  # every element to look at, not a sample
                magnitudes = self.step_magnitudes()
                above = np.abs(custom) > atol
                sample = magnitudes[above][:: max(1, int(np.count_nonzero(above)) // RESOLUTION_SAMPLE)]
                highest = float(np.max(np.where(above, magnitudes, -1.0))) if sample.size else 0.0
            quantiles = np.quantile(sample, [SMALL, 0.5]) if sample.size else None
            self._gradient_steps[atol] = (
                (float(quantiles[0]), float(quantiles[1]), highest) if sample.size else (0.0,) * 3
            )
        return self._gradient_steps[atol]

    def _largest_step(self) -> tuple[int, float]:
        """The element of the largest |g_i h_i| and that value, a slice at a time."""
        element, highest = 0, -1.0
        for start in range(0, self.custom.size, TOTALS_SLICE):
            part = np.abs(self.custom[start : start + TOTALS_SLICE])
            part *= self.steps[start : start + TOTALS_SLICE]
            top = int(np.argmax(part))
            if part[top] > highest:
                element, highest = start + top, float(part[top])
        return element, max(highest, 0.0)

    @property
    def autodiff(self) -> np.ndarray | None:
        """Autodiff's vector-Jacobian product for u (None where autodiff fails), taken when first asked for: only
        where elements are listed."""
        if self._autodiff is None:
            vjps = self.run.vjps(self.layout, self.z[None], self.upstream_vector[None])
            self._autodiff = (None if vjps.autodiff is None else vjps.autodiff[0, 0],)
        return self._autodiff[0]

    def trust_reference(self, differences: np.ndarray, threshold: float) -> None:
        """Take autodiff as the reference that names the candidates of the wrong elements (`_Locator.by_reference`)
        when it is finite and agrees with the central differences along every probe (`differences`, at unit weight)
        within `threshold`, the relative error the custom gradient failed at."""
        autodiff = self.autodiff
        self.reference = None
        if autodiff is None or not np.isfinite(autodiff).all():
            return
        along = autodiff * self.steps  # each probe's direction is its signs times the steps
        predicted = np.array([float(self.signs.row(row) @ along) for row in range(len(differences))])
        with np.errstate(all="ignore"):
            scale = float(np.abs(along).sum()) + np.abs(differences)
            error = np.where(scale == 0, 0.0, np.abs(differences - predicted) / scale)
        if np.all(error <= threshold):
            self.reference = autodiff

    def leave_out(self, elements: np.ndarray) -> None:
        """Directions leave these elements where they are from now on (their steps zero)."""
        self.steps = self.steps.copy()
        self.steps[elements] = 0
        self._step_totals = None
        self._gradient_steps.clear()

    def step_magnitudes(self) -> np.ndarray:
        """|g_i| h_i: the size of each element's part in a direction of unit weight (|d_i| = h_i), computed anew
        (N values not kept through the check's measurements)."""
        magnitudes = np.abs(self.custom)
        return np.multiply(magnitudes, self.steps, out=magnitudes)

    @property
    def step_totals(self) -> tuple[float, float]:
        """The sum and the root-sum-square of `step_magnitudes`, taken once, a slice at a time (no N-sized
        temporary at millions of elements)."""
        if self._step_totals is None:
            self._step_totals = _product_totals(self.custom, self.steps)
        return self._step_totals

    def signed_steps(self, row: int, weight: np.ndarray | float, out: np.ndarray) -> np.ndarray:
        """Probe `row`'s direction at `weight` (per element, or one factor), written into `out`."""
        np.multiply(self.signs.row(row), self.steps, out=out)
        if np.ndim(weight) or weight != 1:
            np.multiply(out, weight, out=out)
        return out

    def measure(self, rows: list[int], weights: np.ndarray, rounding: bool = True) -> Projections:
        """Central differences along d_t = weights_t * signs[rows_t] * steps, and the custom gradient's prediction
        g . d_t, the directions formed inside the framework's compiled call (`Directions`).

        `weights` is [T, N] (per element: a few rows per call, bounding its memory at millions of elements) or
        [T, 1] (one factor per direction: all in one call). Without `rounding`, the rounding and magnitude fields
        are NaN.
        """
        count = len(rows)
        differences, predicted = np.empty(count), np.empty(count)
        weights = weights.astype(np.float32, copy=False)
        batch = max(1, CALL_ELEMENTS // max(1, self.z.size)) if weights.shape[1] > 1 else count
        rows = np.asarray(rows, np.int32)
        for start in range(0, count, batch):
            part = slice(start, start + batch)
            directions = Directions(self.signs, self.steps, rows[part], weights[part], self.custom)
            plus, minus, along = self.run.evaluate(self.layout, directions, self.upstream_vector, signs=(1.0, -1.0))
            differences[part] = (plus - minus) / 2
            predicted[part] = along
        # sum |g_i d_i| = |weight| . (|g| h), the signs being +-1.
        if not rounding:
            magnitude = np.full(count, np.nan)
        elif weights.shape[1] == 1:
            magnitude = np.abs(weights[:, 0]) * self.step_totals[0]
        else:
            magnitude = np.abs(weights) @ self.step_magnitudes().astype(np.float32)
        worst, typical = self.rounding if rounding else (np.nan, np.nan)
        return Projections(differences, np.full(count, worst), np.full(count, typical), predicted, magnitude)


def compare_projected(run: CheckRun, layout: Layout) -> Numerics:
    """Projection-mode comparison in `layout`'s precision; records fd-mismatch (or surrogate-*) and
    autodiff-nonfinite problems."""
    options, findings = run.options, run.findings
    probes = options.probes
    rescued = note_autodiff_rescued(run)
    run.trial.let_go()  # millions of elements: what the trial computed is not needed again
    if layout is not run.layout:
        run.release_z(run.layout)
    z = run.z(layout)
    dtype = run.precision(layout)
    epsilon = machine_epsilon(dtype)
    prober = Prober(run, layout)

    # Every probe at step h, and the first RICHARDSON of them at 2h: the change measures the truncation error.
    richardson = min(RICHARDSON, probes)
    rows = list(range(probes)) + list(range(richardson))
    weights = np.concatenate([np.ones((probes, 1)), np.full((richardson, 1), 2.0)])
    measured = prober.measure(rows, weights)
    if not np.isfinite(measured.differences).all():
        # Elements at the edge of the forward's domain (a square root at zero): found, left out (their step made
        # zero), named; the rest is judged without them.
        edge = _nonfinite_elements(prober)
        if edge is not None and edge.size < z.size:
            _report_edge(run, z, prober.steps, edge)
            prober.leave_out(edge)
            measured = prober.measure(rows, weights)
    if not np.isfinite(measured.differences).all():
        findings.add(
            "fd-nonfinite",
            "warning",
            "Finite differences along random directions are NaN/Inf: the forward is not finite within a step of some "
            "elements (the edge of its domain: a square root or a logarithm at zero, say), and they could not be "
            "told apart (too many, or only together), so nothing could be judged in projection mode. Check the op at "
            f"up to full_threshold = {options.full_threshold} elements, where each element is judged on its own and "
            "those at the edge are named, or at points inside its domain.",
        )
        return Numerics(mode="skipped", skipped_because="finite differences along random directions are NaN/Inf")
    differences, predicted = measured.differences[:probes], measured.predicted[:probes]
    with np.errstate(all="ignore"):
        scale = measured.magnitude[:probes] + np.abs(differences)
        truncation = np.abs(measured.differences[probes:] / 2 - differences[:richardson]) / 3
        # 0 / 0 (no direction moves anything: a zero gradient and flat forward) is no noise.
        relative_truncation = float(np.max(np.nan_to_num(truncation / scale[:richardson], nan=0.0)))
        # Judged against the worst-case rounding; located with the typical (root-sum-square) rounding.
        noise = np.nan_to_num(relative_truncation + 1.5 * measured.rounding[:probes] / scale, nan=0.0)
        typical_noise = np.nan_to_num(relative_truncation + 1.5 * measured.rounding_rms[:probes] / scale, nan=0.0)
        error = np.where(scale == 0, 0.0, np.abs(differences - predicted) / scale)  # NaN where predicted is
    noise_floor = float(np.max(noise))
    unjudgeable = max(UNJUDGEABLE_NOISE, SMOOTH_FLOORS * epsilon ** (2 / 3))
    if noise_floor > unjudgeable:
        findings.add(
            "fd-noisy",
            "warning",
            f"Finite differences along random directions are too noisy to judge the custom gradient here "
            f"(measured relative noise {noise_floor:.3g}): the forward is probably discontinuous (round, sign, a "
            "step), with elements within a finite-difference step of a jump. Check it at fewer elements (up to "
            f"full_threshold = {options.full_threshold}), where each element is judged on its own and jumps are "
            "recognised.",
        )
    # A custom gradient computed in the op's own 16-bit float where the finite differences run wider (its constants
    # in float16, kept so by PyTorch): each g_i carries a few of that float's roundings, which the prediction g . d
    # sums like random errors, sqrt(sum (g_i d_i)^2) of them.
    with np.errstate(all="ignore"):
        steps_norm = prober.step_totals[1]
        gradient_noise = np.nan_to_num(
            precision.gradient_rounding(run, layout) * steps_norm / scale, nan=0.0, posinf=0.0
        )
    floor = EPSILON_FLOOR * min(epsilon, EPSILONS["float32"]) + GRADIENT_MARGIN * float(np.max(gradient_noise))
    threshold = NOISE_MARGIN * noise_floor + floor
    failing = ~(error <= threshold)
    rtol, atol = tolerances(dtype, options.rtol, options.atol)

    located: list[ElementComparison] = []
    max_error = float(np.nanmax(error)) / threshold
    if failing.any():
        worst = int(np.nanargmax(np.where(np.isfinite(error), error, np.inf)))
        noise_of = lambda relative: (relative + floor) * scale[worst]  # noqa: E731
        prober.trust_reference(differences, threshold)
        locator = _Locator(
            prober,
            worst,
            differences[worst] - predicted[worst],
            noise_of(NOISE_MARGIN * noise[worst]),
            noise_of(typical_noise[worst]),
            run.columns,
            _Blocks(prober, relative_truncation, epsilon, rtol, atol),
        )
        located, spread = locator.run()
        _report_mismatch(
            run,
            layout,
            prober,
            failing,
            float(np.nanmax(error)),
            noise_floor,
            located,
            spread,
            predicted,
            differences,
            true_zero=bool(np.all(np.abs(differences) <= threshold * measured.magnitude[:probes])),
        )
    else:
        seen = threshold * float(np.min(scale))
        unmeasured: list[tuple[int, int]] = []
        # Block probes where rounding hides a typical element's error (float32 at scale), sized for the small ones.
        small, typical, _ = _resolution(prober, seen, atol)
        if noise_floor <= unjudgeable and typical > SINGLE_ELEMENT_WARNING:
            blocks = _Blocks(prober, relative_truncation, epsilon, rtol, atol)
            located, seen = blocks.run(small)
            unmeasured = blocks.unmeasured
            if located:
                _report_mismatch(
                    run,
                    layout,
                    prober,
                    blocks.failing,
                    blocks.worst_relative,
                    noise_floor,
                    located,
                    [],
                    blocks.predicted,
                    blocks.differences,
                    true_zero=False,
                    directions="random directions, each over one block of the elements",
                )
                max_error = max(max_error, blocks.worst_error)
        if not located:
            if options.surrogate and noise_floor <= unjudgeable and not unmeasured:
                surrogate.report_declared_match(findings)
            _report_resolution(run, layout, prober, seen, dtype, (rtol, atol), threshold, unmeasured)
    _report_autodiff(run, rescued)
    return Numerics(
        mode="projection",
        dtype=dtype,
        rtol=rtol,
        atol=atol,
        eps=options.eps if options.eps is not None else epsilon ** (1 / 3),
        elements=int(z.size),
        max_error=max_error,
        probes=probes,
        noise_floor=noise_floor,
        worst=tuple(located),
    )


#: Elements at the edge of the forward's domain that projection mode finds and leaves out, at most.
EDGE_ELEMENTS = 64


def _nonfinite_elements(prober: Prober) -> np.ndarray | None:
    """The elements whose own step makes the forward NaN/Inf (group testing: sets split in BLOCKS, a call per
    level, down to single elements), or None when there are more than EDGE_ELEMENTS or they are NaN only together."""
    size = prober.z.size
    pending, found = [np.arange(size)], []
    while pending:
        sets = [block for candidates in pending for block in np.array_split(candidates, min(BLOCKS, candidates.size))]
        nonfinite = np.zeros(len(sets), bool)
        chunk = max(1, CALL_ELEMENTS // max(1, size))
        for start in range(0, len(sets), chunk):
            part = sets[start : start + chunk]
            weights = np.zeros((len(part), size), np.float32)
            for row, elements in enumerate(part):
                weights[row, elements] = 1
            measured = prober.measure([0] * len(part), weights, rounding=False)
            nonfinite[start : start + len(part)] = ~np.isfinite(measured.differences)
        culprits = [block for block, bad in zip(sets, nonfinite) if bad]
        if not culprits and pending:  # NaN only together: no set alone makes it
            return None
        found += [block for block in culprits if block.size == 1]
        pending = [block for block in culprits if block.size > 1]
        if len(found) + len(pending) > EDGE_ELEMENTS:
            return None
    return np.sort(np.concatenate(found))


def _report_edge(run: CheckRun, z: np.ndarray, steps: np.ndarray, edge: np.ndarray) -> None:
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


def _resolution(prober: Prober, seen: float, atol: float) -> tuple[float, float, float]:
    """How far one element's gradient could be off (relative) and not show: for a small element (the SMALL quantile
    of the elements' |g_i h_i|), a typical one and at the largest gradients. A probe sees an error e at element i as
    e * |g_i d_i|, against `seen`, the smallest mismatch any probe tells from noise: errors spread over many
    elements add up, one element's does not. Elements whose gradient is within atol of zero are not counted: an
    error there is within the tolerance anyway."""
    small, typical, largest = prober.gradient_steps(atol)
    return (seen / small, seen / typical, seen / largest) if largest else (0.0, 0.0, 0.0)


def _report_resolution(
    run: CheckRun,
    layout: Layout,
    prober: Prober,
    seen: float,
    dtype: str,
    tolerances,
    spread: float,
    unmeasured: list[tuple[int, int]],
) -> None:
    """`projection-resolution`: how far one element's gradient could be off and not show, and how far the whole
    gradient (`spread`, the relative error along a direction that fails it: a third in a 16-bit float), where either
    is more than the tolerance; and the blocks of elements that disagreed but were left unmeasured."""
    rtol, atol = tolerances
    small, typical, best = _resolution(prober, seen, atol)
    # Said where a typical element's error could hide beyond the tolerance, or a small one's beyond 10 %.
    single = typical > max(rtol, SINGLE_ELEMENT_NOTE) or small > SINGLE_ELEMENT_WARNING
    if not single and spread <= rtol and not unmeasured:
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
    if spread > rtol:  # finite differences at this precision's steps are that noisy along every direction
        seen_here = f"rules out errors spread over the gradient only beyond {_percent(spread)} of it"
    else:
        seen_here = "rules out errors spread over the gradient"
    if single:
        seen_here += (
            f", but not every single element's: one element of {parts} whose gradient is off by less than "
            f"{_percent(typical)} (a typical element; {_percent(small)} for the {SMALL:.0%} of elements with the "
            f"smallest gradients, {_percent(best)} at the largest) would not show, {dtype} rounding over this many "
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


class _Blocks:
    """Probes restricted to blocks of elements, for errors at a single element that rounding over all of them hides.

    Each output of the forward is compared in float64 after the call, so outputs a block does not move cancel
    exactly and the rounding is that of the block's outputs: the resolution improves with the number of blocks,
    as far as the budget of evaluated outputs allows. Failing blocks are then measured element by element, while
    the budget lasts; an element is wrong where it also exceeds the tolerances full mode would apply.
    """

    def __init__(self, prober: Prober, relative_truncation: float, epsilon: float, rtol: float, atol: float):
        self.prober, self.truncation, self.epsilon, self.rtol, self.atol = (
            prober,
            relative_truncation,
            epsilon,
            rtol,
            atol,
        )
        self.upstream = prober.upstream_vector.astype(np.float64)
        self.custom = prober.custom.astype(np.float64)
        self.budget = BLOCK_BUDGET
        self.failing = np.zeros(0, bool)
        self.worst_error = self.worst_relative = 0.0
        self.predicted = self.differences = np.zeros(0)
        #: The failing blocks (element ranges) that the budget left unmeasured element by element.
        self.unmeasured: list[tuple[int, int]] = []
        self.narrowing_calls = 0

    def beyond_tolerance(self, element: ElementComparison) -> bool:
        """Whether an element's custom and finite-difference values differ by more than the tolerances."""
        custom, numerical = element.custom, element.numerical
        return abs(custom - numerical) > self.rtol * max(abs(custom), abs(numerical)) + self.atol

    def contracts(self, count: int) -> bool:
        """Whether `count` elements are measured contracted (u . f taken inside the call) rather than each output
        compared on its own, whose rounding is then only that of the outputs an element moves: compared on their
        own where that takes one call's outputs, else contracted in float64 (whose rounding allows it) or where the
        budget cannot take them."""
        outputs = 2 * (count + 1) * max(1, self.upstream.size)
        if outputs <= BLOCK_CALL_VALUES:
            return False
        return self.prober.z.dtype == np.float64 or outputs > self.budget

    def measure(self, spans: list[tuple[int, int]], each: bool = False, contracted: bool = False):
        """Central differences of u . f along the signed steps over each span of elements (with `each`, along each
        element's own step, a first row at the centre): (u . J d, g . d, |d| . |g|, rounding, the
        differences' half sums (u . f(z + d) + u . f(z - d)) / 2). `contracted` (z in float64 only): u . f taken
        inside the framework's call, which costs evaluations but none of the budget of outputs, its rounding that
        of the whole u . f."""
        prober, size = self.prober, self.prober.z.size
        steps = prober.signed_steps(0, 1.0, np.empty_like(prober.steps)) if not each else prober.steps
        count = len(spans)
        out = np.zeros((5, count))
        batch = max(1, BLOCK_CALL_VALUES // max(1, self.upstream.size, size))
        for first in range(0, count, batch):
            rows = spans[first : first + batch]
            directions = np.zeros((len(rows), size), prober.z.dtype)
            for k, (start, stop) in enumerate(rows):
                directions[k, start:stop] = steps[start:stop]
            part = slice(first, first + len(rows))
            if contracted:
                plus, minus = prober.run.evaluate(prober.layout, directions, self.upstream, signs=(1.0, -1.0))
                out[0, part], out[3, part], out[4, part] = (plus - minus) / 2, prober.rounding[0], (plus + minus) / 2
            else:
                plus, minus = prober.run.adapter.evaluate(
                    prober.run.target, prober.layout, directions, signs=(1.0, -1.0)
                ).astype(np.float64)
                self.budget -= plus.size + minus.size
                moved = plus != minus
                out[0, part] = ((plus - minus) @ self.upstream) / 2
                rounding = np.where(moved, np.abs(plus) + np.abs(minus), 0) @ np.abs(self.upstream)
                out[3, part] = self.epsilon * rounding / 2
                out[4, part] = ((plus + minus) @ self.upstream) / 2
            directions = directions.astype(np.float64)
            out[1, part] = directions @ self.custom
            out[2, part] = np.abs(directions) @ np.abs(self.custom)
        return out

    def _judged(self, values: np.ndarray, edges: np.ndarray):
        """For the blocks between `edges` measured as `values` (the centre first, `measure`): each block's mismatch,
        what its noise allows, whether it fails, whether a kink explains it, and its differences, predictions and
        one-sided disagreement."""
        centre = values[4, 0]
        differences, predicted, magnitude, rounding, sums = values[:, 1:]
        scale = magnitude + np.abs(differences)
        with np.errstate(all="ignore"):
            noise = self.truncation + 1.5 * rounding / scale
            allowed = (BLOCK_MARGIN * noise + EPSILON_FLOOR * min(self.epsilon, EPSILONS["float32"])) * scale
            error = np.abs(differences - predicted)
        # A block can hold an element wrong beyond atol (as full mode judges it) only where its mismatch is beyond
        # atol times its largest step.
        steps = self.prober.steps[edges[0] : edges[-1]]
        largest = np.maximum.reduceat(steps, edges[:-1] - edges[0]) if len(edges) > 1 else np.zeros(0)
        failing = ~(error <= allowed) & (error > self.atol * largest)
        # Central differences across a change of slope miss the derivative by as much as the mean of the two sides
        # misses the centre (a ReLU's element at a < h from zero: both are (h - a) / 2 of the slopes' jump): a
        # block whose mismatch is no more than that disagreement is a kink's, not a wrong gradient's. (An element
        # within a step of zero is likely among a few hundred thousand.)
        disagreement = np.abs(sums - centre)
        kink_only = error <= disagreement + allowed
        return error, allowed, failing, kink_only, (differences, predicted, magnitude, disagreement)

    def run(self, resolution: float) -> tuple[list[ElementComparison], float]:
        """The wrong elements found, and the smallest mismatch the block probes told from noise (for the
        resolution)."""
        size, outputs = self.prober.z.size, max(1, self.upstream.size)
        wanted = int(np.ceil(resolution / (SINGLE_ELEMENT_WARNING / 2)))  # blocks for the resolution wanted
        count = int(min(size, wanted, max(1, self.budget // (4 * outputs))))  # half the budget for the blocks
        edges = np.linspace(0, size, count + 1).astype(int)
        spans = list(zip(edges[:-1], edges[1:]))
        values = self.measure([(0, 0)] + spans)  # the centre first
        error, allowed, self.failing, kink_only, measured = self._judged(values, edges)
        differences, predicted, magnitude, disagreement = measured
        self.predicted, self.differences = predicted, differences
        scale = magnitude + np.abs(differences)
        with np.errstate(all="ignore"):
            self.worst_error = float(np.nanmax(error / allowed)) if count else 0.0  # of the tolerance
            self.worst_relative = float(np.nanmax(error / scale)) if count else 0.0
        # A block holding a kink (a ReLU's elements within a step of zero) fails for its differences' sake, not
        # its gradient's: its one-sided differences disagree by far more than a smooth forward's curvature allows
        # (h f'' against f'). Blocks without one are measured element by element first, the worst first.
        kink = disagreement > allowed + KINK_SHARE * magnitude
        located: list[ElementComparison] = []
        self.unmeasured = []
        for row in np.lexsort((-np.nan_to_num(error / allowed, nan=np.inf), kink)):
            if not self.failing[row] or len(located) >= LOCATED:
                continue
            start, stop = spans[row]
            if 2 * (stop - start + 1) * outputs <= self.budget:
                located += self._elements(start, stop, allowed[row])
            elif not kink_only[row]:  # a kink's is neither measured nor said
                located += self._narrowed(int(start), int(stop), float(allowed[row]))
        return located[:LOCATED], float(np.nanmin(allowed)) if count else np.inf

    def _narrowed(self, start: int, stop: int, allowed: float) -> list[ElementComparison]:
        """The wrong elements of a failing block too large to measure element by element (group testing): split into
        BLOCKS parts measured in one call, again in each part that fails (and is no kink's), down to parts the budget
        can measure element by element. In float64 the parts' u . f is taken inside the call, which spends none of
        the budget; elsewhere rounding needs each output compared on its own, while the budget lasts. What cannot
        be narrowed is noted in `unmeasured`."""
        contracted = self.prober.z.dtype == np.float64
        outputs = max(1, self.upstream.size)
        pending, found = [(start, stop, allowed)], []
        while pending and len(found) < LOCATED:
            start, stop, allowed = pending.pop()  # the worst part first, down to its elements (depth first)
            affordable = contracted or 2 * (min(stop - start, BLOCKS) + 1) * outputs <= self.budget
            if not affordable or self.narrowing_calls >= NARROWING_CALLS:
                self.unmeasured.append((start, stop))
                continue
            self.narrowing_calls += 1
            if stop - start <= BLOCKS or (not contracted and 2 * (stop - start + 1) * outputs <= self.budget):
                found += self._elements(start, stop, allowed, contracted=contracted)
                continue
            edges = np.linspace(start, stop, BLOCKS + 1).astype(int)
            values = self.measure([(0, 0)] + list(zip(edges[:-1], edges[1:])), contracted=contracted)
            error, allowed_parts, failing, kink_only, _ = self._judged(values, edges)
            with np.errstate(all="ignore"):
                order = np.argsort(np.nan_to_num(error / allowed_parts, nan=np.inf))  # the worst last
            failing_parts = [k for k in order if failing[k]]
            if not failing_parts:  # no part fails alone: an error spread thinly over the block, not narrowed
                self.unmeasured.append((start, stop))
            pending += [
                (int(edges[k]), int(edges[k + 1]), float(allowed_parts[k])) for k in failing_parts if not kink_only[k]
            ]
        return found[:LOCATED]

    def _elements(self, start: int, stop: int, allowed: float, contracted: bool = False) -> list[ElementComparison]:
        """Each element of a failing block along its own step: those whose gradient disagrees, worst first."""
        return self.elements(np.arange(start, stop), allowed, contracted)

    def elements(
        self, elements: np.ndarray, allowed: float | np.ndarray | None = None, contracted: bool = False
    ) -> list[ElementComparison]:
        """Each of `elements` along its own step, in one call: those whose gradient disagrees beyond `allowed` (by
        default what each one's own measured rounding allows) and the tolerances, worst first."""
        prober = self.prober
        values = self.measure([(0, 0)] + [(i, i + 1) for i in elements], each=True, contracted=contracted)
        centre = values[4, 0]
        differences, predicted, magnitude, rounding, sums = values[:, 1:]
        curvature = 0.0  # a block's allowance covers its elements' curvature
        if allowed is None:
            scale = magnitude + np.abs(differences)
            with np.errstate(all="ignore"):
                noise = np.nan_to_num(self.truncation + 1.5 * rounding / scale, nan=0.0)
            allowed = (BLOCK_MARGIN * noise + EPSILON_FLOOR * min(self.epsilon, EPSILONS["float32"])) * scale
            curvature = KINK_SHARE * magnitude  # an element's own: its one-sided differences part by h f''
        allowed = np.broadcast_to(np.asarray(allowed, np.float64), differences.shape)
        steps = prober.steps[elements].astype(np.float64)
        numerical = differences / steps
        # One-sided slopes differ by h f'' where smooth; at a kink (a ReLU at zero) by the slope's jump: left out,
        # as full mode leaves such elements out of the comparison.
        kink = np.abs(sums - centre) > allowed + curvature
        mismatch = np.abs(differences - predicted)
        tolerance = (self.rtol * np.maximum(np.abs(self.custom[elements]), np.abs(numerical)) + self.atol) * steps
        wrong = (mismatch > allowed) & (mismatch > tolerance) & ~kink
        found = []
        for k in np.argsort(-mismatch)[: LOCATED + int(np.count_nonzero(~wrong))]:
            if not wrong[k]:  # a kink, or within the tolerances, however large its difference
                continue
            name, index = prober.run.columns.label(int(elements[k]))
            autodiff = None if prober.autodiff is None else float(prober.autodiff[elements[k]])
            custom = float(prober.custom[elements[k]])
            found.append(
                ElementComparison(
                    name,
                    index,
                    None,
                    None,
                    custom,
                    float(numerical[k]),
                    autodiff,
                    float(mismatch[k] / max(allowed[k], tolerance[k])),
                )
            )
        return found[:LOCATED]


def _percent(relative: float) -> str:
    return f"{relative:.0%}" if relative >= 0.01 else f"{relative:.2g} (relative)"


#: Upstream vectors kept for later checks up to this many elements.
KEPT_UPSTREAM = 1 << 21


def probe_upstream(seed: int, size: int) -> np.ndarray:
    """The prober's random upstream vector u, float64: random signs, magnitudes uniform in [0.5, 1.5), so that no
    element's part of the vector-Jacobian product is hidden by a u_i near zero (an element-wise op's element i is
    seen as u_i g_i). Not to be written: the last ones drawn are kept for the next checks."""
    key = (seed, size)
    if key not in _UPSTREAMS:
        generator = np.random.default_rng([seed, 2])
        drawn = aligned_empty((size,), np.float64)  # taken by the framework without a copy
        generator.random(size, out=drawn)
        drawn += 0.5
        drawn *= random_signs(generator, 1, size)[0]
        if size > KEPT_UPSTREAM:
            return drawn
        _UPSTREAMS[key] = drawn
        while len(_UPSTREAMS) > 2:
            del _UPSTREAMS[next(iter(_UPSTREAMS))]
    return _UPSTREAMS[key]


_UPSTREAMS: dict[tuple[int, int], np.ndarray] = {}


def random_signs(seed: int | np.random.Generator, rows: int, size: int) -> np.ndarray:
    """[rows, size] of +-1 (int8), from random bits: ten times cheaper than drawing numbers at a million."""
    generator = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    bits = np.unpackbits(np.frombuffer(generator.bytes((rows * size + 7) // 8), np.uint8))
    signs = aligned_empty((rows, size), np.int8)  # taken by the framework without a copy
    np.multiply(bits[: rows * size].reshape(rows, size), 2, out=signs, casting="unsafe")
    signs -= 1
    return signs


class _Locator:
    """Finds the wrong elements behind one failing probe (see the module docstring)."""

    def __init__(
        self, prober, row: int, mismatch: float, noise: float, typical_noise: float, columns: Axis, judge: _Blocks
    ):
        self.prober, self.row, self.columns, self.judge = prober, row, columns, judge
        # `noise` decides whether a mismatch is real; `typical_noise` how finely a ratio can be read.
        self.mismatch, self.noise, self.typical_noise = mismatch, noise, typical_noise
        self.custom = prober.custom
        self.size = self.custom.size

    def measure(self, weights: np.ndarray) -> np.ndarray:
        """The mismatch along the failing probe weighted by each row of `weights`, in one compiled call."""
        measured = self.prober.measure([self.row] * len(weights), weights, rounding=False)
        return measured.differences - measured.predicted

    def run(self) -> tuple[list[ElementComparison], list[str]]:
        """The wrong elements, or when there are too many to list, the blocks that carry the error (and the elements
        found on the way, the worst last). Every element returned was measured along its own step and found wrong
        beyond the noise and the tolerances (an element whose values agree within them is no wrong element, however
        it was found)."""
        located, spread = self.search()
        located = [e for e in located if self.judge.beyond_tolerance(e)]
        return (_worst_last(located) if spread else located), spread

    def search(self) -> tuple[list[ElementComparison], list[str]]:
        """`run`'s search: the elements it measured beyond the noise."""
        everything = np.arange(self.size)
        located, remaining, spread = self.by_reference()
        if spread:
            return _worst_last(located), spread
        rest = np.ones(self.size, bool)
        rest[[self.element_of(e) for e in located]] = False
        pending = [(everything[rest], remaining)]  # sets of candidates and the mismatch they carry
        while pending and len(located) < LOCATED:
            candidates, mismatch = pending.pop()
            if abs(mismatch) <= self.noise:
                continue
            element, exact = self.locate_one(candidates, mismatch)
            if element is not None:
                part = mismatch if exact else float(self.measure(self.indicator([element]))[0])
                if abs(part) > self.noise:
                    located.append(self.comparison(element, part))
                    pending.append((candidates[candidates != element], mismatch - part))
                    continue
            # Several wrong elements in this set: split it, in one call, and go on with the blocks that carry some.
            blocks = np.array_split(candidates, min(BLOCKS, candidates.size))
            parts = [(block, float(m)) for block, m in zip(blocks, self.measure(self.indicator(*blocks)))]
            carrying = [(block, m) for block, m in parts if abs(m) > self.noise]
            # The blocks' mismatches add up to the set's: what the carrying ones leave is spread over blocks that
            # each carry less than the noise, so thinly that no search below finds it.
            thin = abs(mismatch - sum(m for _, m in carrying)) > self.noise
            if thin or len(carrying) > LOCATED - len(located):
                some = carrying if not thin else [(b, m) for b, m in parts if abs(m) > self.typical_noise]
                return _worst_last(located + self.searched(candidates, some)), self.describe(some, len(blocks))
            pending += carrying
        return located, []

    def by_reference(self) -> tuple[list[ElementComparison], float, list[str]]:
        """With a trusted reference (`Prober.trust_reference`): the elements whose custom gradient it puts beyond the
        tolerances, each measured along its own step in one call (`_Blocks.elements`), those found wrong; the
        mismatch along the failing probe they leave; and where more are wrong than are listed, the blocks that carry
        the error (as the reference tells, without a call) with the worst few elements measured. Nothing without a
        reference."""
        reference, prober = self.prober.reference, self.prober
        if reference is None:
            return [], self.mismatch, []
        magnitude = np.maximum(np.abs(self.custom), np.abs(reference))
        difference = np.abs(self.custom - reference)
        suspects = difference > self.judge.rtol * magnitude + self.judge.atol
        count = int(np.count_nonzero(suspects))
        if not count:
            return [], self.mismatch, []
        typical = float(np.median(magnitude[:: max(1, magnitude.size // RESOLUTION_SAMPLE)]))
        relative = np.divide(difference, np.maximum(magnitude, typical if typical > 0 else 1.0, out=magnitude))
        relative[~suspects] = -1.0
        listed = count if count <= LOCATED else 1 + SAMPLED  # all of them, or the worst of an error spread wide
        top = np.argpartition(relative, -listed)[-listed:] if relative.size > listed else np.arange(relative.size)
        top = top[np.argsort(-relative[top], kind="stable")]
        found = self.judge.elements(top, contracted=self.judge.contracts(len(top)))
        if count > LOCATED:
            return found, 0.0, self.reference_blocks(reference)
        parts = [(e.numerical - e.custom) * prober.direction(self.row, self.element_of(e)) for e in found]
        return found, self.mismatch - float(sum(parts)), []

    def reference_blocks(self, reference: np.ndarray) -> list[str]:
        """`describe` of the blocks whose mismatch along the failing probe the reference puts beyond the noise."""
        along = (reference - self.custom) * self.prober.steps
        along *= self.prober.signs.row(self.row)
        blocks = np.array_split(np.arange(self.size), min(BLOCKS, self.size))
        mismatches = np.add.reduceat(along, [int(block[0]) for block in blocks])
        carrying = [(b, float(m)) for b, m in zip(blocks, mismatches) if abs(m) > self.noise]
        carrying = carrying or [(b, float(m)) for b, m in zip(blocks, mismatches) if abs(m) > self.typical_noise]
        return self.describe(carrying, len(blocks))

    def searched(self, candidates: np.ndarray, blocks: list) -> list[ElementComparison]:
        """Elements of an error spread over many, without a reference to name them: the worst searched for by
        splitting (`worst_of`) and a few of the `blocks`' elements sampled, each then measured along its own step in
        one call (`_Blocks.elements`), those found wrong."""
        worst = self.worst_of(candidates)
        elements = np.array([worst] + self.samples(blocks, worst))
        return self.judge.elements(elements, contracted=self.judge.contracts(len(elements)))

    def element_of(self, comparison: ElementComparison) -> int:
        """The element of z a comparison names."""
        position = self.columns.names.index(comparison.input)
        shape = self.columns.shapes[position]
        return int(self.columns.offsets[position]) + (
            int(np.ravel_multi_index(comparison.index, shape)) if comparison.index else 0
        )

    def samples(self, blocks: list, worst: int) -> list[int]:
        """A few elements of a spread error besides its worst (which may be where the forward jumps, its finite
        difference off scale): the middle element of each of the SAMPLED blocks that carry the most. What they show
        of the forward (flat, or not) is evidence for the pattern."""
        ranked = sorted(blocks, key=lambda entry: -abs(entry[1]))
        elements = [int(block[block.size // 2]) for block, _ in ranked]
        return [element for element in elements if element != worst][:SAMPLED]

    def worst_of(self, candidates: np.ndarray) -> int:
        """The element whose gradient is the most wrong among `candidates`: the block carrying the most, split again
        and again (one call each, log16 of the size), down to one element.

        A block is measured along directions whose element i is h_i sign(g_i) c / max(|g_i|, c), c the typical
        |g_i|: its mismatch then sums its elements' relative errors e_i / g_i (elements of a small gradient count
        by e_i / c), of the same sign wherever a factor is off, so that they add up instead of cancelling; the
        worst is then the most wrong element, not the one the random upstream weighs most. The squared mismatches
        along every probe's random signs are added in, for errors of no common sign.
        """
        probes = len(self.prober.signs)
        magnitude = np.abs(self.custom)
        sample = magnitude[:: max(1, magnitude.size // RESOLUTION_SAMPLE)]
        typical = float(np.median(sample[sample > 0])) if np.any(sample > 0) else 1.0
        coherent = (np.where(self.custom < 0, -1.0, 1.0) * typical / np.maximum(magnitude, typical)).astype(np.float32)
        signs = self.prober.signs.row(self.row)
        while candidates.size > 1:
            blocks = np.array_split(candidates, min(BLOCKS, candidates.size))
            indicator = self.indicator(*blocks)
            # Direction = the probe's signs x steps x weight: the coherent rows undo the probe's signs.
            weights = np.concatenate([indicator * (coherent * signs)] + [indicator] * probes)
            rows = [self.row] * len(blocks) + [row for row in range(probes) for _ in blocks]
            measured = self.prober.measure(rows, weights, rounding=False)
            mismatch = (measured.differences - measured.predicted).reshape(1 + probes, len(blocks))
            energy = np.square(mismatch[0]) + np.square(mismatch[1:]).mean(axis=0)
            candidates = blocks[int(np.argmax(energy))]
        return int(candidates[0])

    def indicator(self, *sets) -> np.ndarray:
        """Weights: one row per set of elements, 1 on the set."""
        weights = np.zeros((len(sets), self.size), np.float32)
        for row, elements in enumerate(sets):
            weights[row, elements] = 1
        return weights

    def locate_one(self, candidates: np.ndarray, remaining: float) -> tuple[int | None, bool]:
        """The element behind `remaining`, if one element carries it, and whether that is certain without a check.

        Certain: every ratio sits on the digit lattice within a few noise widths.
        With several wrong elements a ratio is a weighted mean of lattice
        values, and all of them landing that close is very unlikely.
        """
        if candidates.size == 1:
            return int(candidates[0]), False
        # A digit is read from a ratio; 20 noise widths per digit step keep misreadings far in the tail.
        base = int(min(MAX_BASE, abs(remaining) / self.typical_noise / 20, candidates.size))
        if base < 2:
            return None, False
        digits = math.ceil(math.log(candidates.size) / math.log(base))
        rank = np.arange(candidates.size, dtype=np.int64)
        weights = np.zeros((digits, self.size), np.float32)
        for digit in range(digits):
            weights[digit, candidates] = ((rank // base**digit) % base + 1) / base
        ratios = self.measure(weights) / remaining * base - 1
        nearest = np.rint(ratios)
        deviation = np.abs(ratios - nearest)
        if not np.all((deviation < 0.25) & (nearest >= 0) & (nearest < base)):
            return None, False
        position = int(sum(int(d) * base**i for i, d in enumerate(nearest)))
        if position >= candidates.size:
            return None, False
        reading_noise = base * self.typical_noise / abs(remaining)
        return int(candidates[position]), bool(np.all(deviation < 5 * reading_noise) and 5 * reading_noise < 0.01)

    def describe(self, carrying, blocks: int) -> list[str]:
        """`k of n blocks`, then the readable ranges of the blocks that carry mismatch."""
        ranges = []
        for block, _ in carrying:
            first, first_index = self.columns.label(int(block[0]))
            last, last_index = self.columns.label(int(block[-1]))
            ranges.append(f"{element_label(first, first_index)} to {element_label(last, last_index)}")
        return [f"{len(carrying)} of {blocks} blocks"] + ranges

    def comparison(self, element: int, part: float) -> ElementComparison:
        name, index = self.columns.label(element)
        custom = float(self.custom[element])
        step = self.prober.direction(self.row, element)
        return ElementComparison(
            name,
            index,
            None,
            None,
            custom,
            custom + part / step,
            None if self.prober.autodiff is None else float(self.prober.autodiff[element]),
            abs(part) / self.noise if self.noise else None,
        )


def _worst_last(found: list[ElementComparison]) -> list[ElementComparison]:
    """`found` with its most wrong element (relative to the larger of its two values) moved last."""
    if not found:
        return found
    worst = max(found, key=lambda e: abs(e.custom - e.numerical) / (max(abs(e.custom), abs(e.numerical)) or 1.0))
    return [e for e in found if e is not worst] + [worst]


def _report_mismatch(
    run: CheckRun,
    layout: Layout,
    prober: Prober,
    failing,
    error: float,
    noise: float,
    located,
    spread,
    predicted,
    differences,
    true_zero: bool,
    directions: str = "random directions",
) -> None:
    """fd-mismatch, or surrogate-differs for a declared surrogate (see surrogate.py)."""
    options, findings, columns, rows = run.options, run.findings, run.columns, run.rows
    label = "surrogate" if options.surrogate else "custom"
    where = (
        f"along {int(failing.sum())} of {failing.size} {directions} (relative error {error:.3g}, measured "
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
        ratios = predicted / differences
        ratio = float(np.median(ratios))
    if spread and np.all(np.isfinite(ratios)) and np.allclose(ratios, ratio, rtol=1e-4):
        mistake_hint = (
            f" Along every direction the custom gradient is {ratio:.6g} times the finite differences: "
            "a constant factor is off" + (" (a flipped sign)." if np.isclose(ratio, -1) else ".")
        )
    square = surrogate.square_block(columns, rows)
    evidence = surrogate.projected_evidence(
        prober.custom, prober.upstream_vector, square, run.linearity, true_zero, run.forward_ops, tuple(located)
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
            run.forward_ops,
        )
    surrogate.report_mismatch(
        findings,
        options.surrogate,
        evidence,
        where,
        ". ".join(listing) if listing else "No single element carries the difference",
        {"input": (worst or located[0]).input, "index": (worst or located[0]).index} if located else {},
        mistake_hint,
        note,
    )


def note_autodiff_rescued(run: CheckRun) -> tuple[int, int] | None:
    """Where the framework's own gradient is NaN/Inf and the custom one is not, in the op's own precision for the
    trial's random upstream (taken by `compiled.py`): (how many elements, the first), or None. Taken once; the
    own-precision products are then let go (N-sized arrays at millions of elements that projection mode does not
    need again)."""
    own = run.own_precision
    if own is not None:
        trial, run.own_precision = own.trial, None
        run.autodiff_rescued = None
        if trial.autodiff is not None:
            with np.errstate(all="ignore"):
                rescued = ~np.isfinite(trial.autodiff[0, 0]) & np.isfinite(trial.custom[0, 0])
            if rescued.any():
                run.autodiff_rescued = (int(rescued.sum()), int(np.flatnonzero(rescued)[0]))
    return run.autodiff_rescued


def _report_autodiff(run: CheckRun, rescued: tuple[int, int] | None) -> None:
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
