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
thus name i in log_B(N) directions, two for a million elements; one more
direction along i alone verifies it. Several wrong elements are peeled off
one by one; when the ratios do not fall on the digit lattice, the error is
spread out, and splitting into blocks says where.
"""

from __future__ import annotations

import math

import numpy as np

from gradmagic.checking.numeric import Axis, steps_for, tolerances
from gradmagic.checking.structure import LISTED, Findings
from gradmagic.frameworks.base import Adapter, Layout, Target
from gradmagic.report import ElementComparison, Numerics

#: A direction fails when its error exceeds this many times the noise floor.
NOISE_MARGIN = 30.0
#: ... and this many machine epsilons (rounding of the long dot products themselves).
EPSILON_FLOOR = 1e3
#: Located elements reported at most.
LOCATED = 8
#: Blocks when the error is spread over many elements.
BLOCKS = 16
#: Largest base of the digit code.
MAX_BASE = 1024


def compare_projected(adapter: Adapter, target: Target, layout: Layout, original: Layout, columns: Axis, rows: Axis,
                      options, findings: Findings) -> Numerics:
    z = adapter.initial_vector(layout)
    dtype = str(z.dtype)
    epsilon = float(np.finfo(z.dtype).eps)
    steps = steps_for(adapter, layout, z, options.eps)
    rng = np.random.default_rng(options.seed)
    upstream = rng.standard_normal(int(rows.offsets[-1])).astype(z.dtype)
    signs = rng.choice(np.array([-1.0, 1.0], z.dtype), size=(options.probes, z.size))
    directions = signs * steps

    measured = adapter.projections(target, layout, np.concatenate([directions, 2 * directions]), upstream)
    custom, autodiff = adapter.vjps(target, layout, upstream)
    probes = options.probes
    differences = measured.differences[:probes]
    predicted = directions @ custom
    with np.errstate(all="ignore"):
        scale = np.abs(directions) @ np.abs(custom) + np.abs(differences)
        truncation = np.abs(measured.differences[probes:] / 2 - differences) / 3
        noise = (truncation + measured.rounding[:probes] + measured.rounding[probes:] / 2) / scale
        error = np.abs(differences - predicted) / scale
    noise_floor = float(np.nanmax(noise))
    threshold = NOISE_MARGIN * noise_floor + EPSILON_FLOOR * epsilon
    failing = ~(error <= threshold)
    rtol, atol = tolerances(dtype, options.rtol, options.atol)

    located: list[ElementComparison] = []
    if failing.any():
        worst = int(np.nanargmax(np.where(np.isfinite(error), error, np.inf)))
        locator = _Locator(adapter, target, layout, upstream, custom, autodiff, directions[worst],
                           differences[worst] - predicted[worst], threshold * scale[worst], columns)
        located, spread = locator.run()
        findings.add("fd-mismatch", "error",
                     _mismatch_message(int(failing.sum()), probes, float(np.nanmax(error)), noise_floor, located, spread,
                                       predicted, differences),
                     **({"input": located[0].input, "index": located[0].index} if located else {}))
    _report_autodiff(adapter, target, original, layout, upstream, custom, autodiff, columns, findings)
    return Numerics(
        mode="projection", dtype=dtype, rtol=rtol, atol=atol,
        eps=options.eps if options.eps is not None else epsilon ** (1 / 3),
        elements=int(z.size), max_error=float(np.nanmax(error)) / threshold, probes=probes,
        noise_floor=noise_floor, worst=tuple(located),
    )


class _Locator:
    """Finds the wrong elements behind one failing direction (see the module docstring)."""

    def __init__(self, adapter, target, layout, upstream, custom, autodiff, direction, mismatch, noise, columns):
        self.adapter, self.target, self.layout = adapter, target, layout
        self.upstream, self.custom, self.autodiff = upstream, custom, autodiff
        self.direction, self.mismatch, self.noise, self.columns = direction, mismatch, noise, columns

    def measure(self, weights: np.ndarray) -> np.ndarray:
        """The mismatch along `direction * w` for each row w of `weights`, in one compiled call."""
        directions = weights * self.direction
        measured = self.adapter.projections(self.target, self.layout, directions, self.upstream)
        return measured.differences - directions @ self.custom

    def run(self) -> tuple[list[ElementComparison], list[str]]:
        active = np.ones(self.direction.size, bool)
        remaining = self.mismatch
        located = []
        while abs(remaining) > self.noise and len(located) < LOCATED:
            element = self.locate_one(np.flatnonzero(active), remaining)
            if element is None:
                return located, self.spread(active)
            single = np.zeros((1, self.direction.size))
            single[0, element] = 1
            part = float(self.measure(single)[0])
            if abs(part) <= self.noise:
                return located, self.spread(active)
            located.append(self.comparison(element, part))
            active[element] = False
            remaining -= part
        return located, []

    def locate_one(self, candidates: np.ndarray, remaining: float) -> int | None:
        if candidates.size == 1:
            return int(candidates[0])
        base = int(min(MAX_BASE, max(2, abs(remaining) / self.noise / 20), candidates.size))
        if base < 2:
            return None
        digits = math.ceil(math.log(candidates.size) / math.log(base))
        rank = np.arange(candidates.size)
        weights = np.zeros((digits, self.direction.size))
        for digit in range(digits):
            weights[digit, candidates] = ((rank // base**digit) % base + 1) / base
        ratios = self.measure(weights) / remaining * base - 1
        nearest = np.rint(ratios)
        if not np.all((np.abs(ratios - nearest) < 0.25) & (nearest >= 0) & (nearest < base)):
            return None
        position = int(sum(int(d) * base**i for i, d in enumerate(nearest)))
        return int(candidates[position]) if position < candidates.size else None

    def spread(self, active: np.ndarray) -> list[str]:
        """Blocks of the remaining elements that carry mismatch, as readable ranges."""
        candidates = np.flatnonzero(active)
        blocks = np.array_split(candidates, min(BLOCKS, candidates.size))
        weights = np.zeros((len(blocks), self.direction.size))
        for row, block in enumerate(blocks):
            weights[row, block] = 1
        mismatches = self.measure(weights)
        described = []
        for block, mismatch in zip(blocks, mismatches):
            if abs(mismatch) > self.noise:
                first, first_index = self.columns.label(int(block[0]))
                last, last_index = self.columns.label(int(block[-1]))
                described.append(f"{first}{list(first_index)} to {last}{list(last_index)}" if first == last
                                 else f"{first}{list(first_index)} to {last}{list(last_index)}")
        return [f"{len(described)} of {len(blocks)} blocks"] + described

    def comparison(self, element: int, part: float) -> ElementComparison:
        name, index = self.columns.label(element)
        custom = float(self.custom[element])
        numerical = custom + part / float(self.direction[element])
        autodiff = None if self.autodiff is None else float(self.autodiff[element])
        return ElementComparison(name, index, None, None, custom, numerical, autodiff,
                                 abs(part) / self.noise if self.noise else None)


def _mismatch_message(failing: int, probes: int, error: float, noise: float, located, spread, predicted,
                      differences) -> str:
    message = (f"The custom gradient disagrees with finite differences along {failing} of {probes} random directions "
               f"(relative error {error:.3g}, measured noise floor {noise:.3g}).")
    if located:
        listed = "; ".join(
            f"{e.input}{list(e.index)}: custom {e.custom:.6g}, finite differences {e.numerical:.6g}"
            for e in located[:LISTED]
        )
        message += (f" Wrong element{'s' if len(located) > 1 else ''}, as components of the vector-Jacobian product "
                    f"for a random upstream gradient: {listed}.")
    if spread:
        message += f" The error is spread over many elements: mismatch in {', '.join(spread[:1 + LISTED])}."
        with np.errstate(all="ignore"):
            ratios = predicted / differences
        ratio = float(np.median(ratios))
        if np.all(np.isfinite(ratios)) and np.allclose(ratios, ratio, rtol=1e-4):
            message += (f" Along every direction the custom gradient is {ratio:.6g} times the finite differences: "
                        "a constant factor is off" + (" (a flipped sign)." if np.isclose(ratio, -1) else "."))
    return message


def _report_autodiff(adapter, target, original, layout, upstream, custom, autodiff, columns, findings) -> None:
    """autodiff-nonfinite: TensorFlow's own gradient is NaN/Inf (in the op's own precision) where the custom one is not."""
    if original is not layout:
        custom, autodiff = adapter.vjps(target, original, upstream.astype(adapter.initial_vector(original).dtype))
    if autodiff is None:
        return
    with np.errstate(all="ignore"):
        rescued = ~np.isfinite(autodiff) & np.isfinite(custom)
    if rescued.any():
        element = int(np.flatnonzero(rescued)[0])
        name, index = columns.label(element)
        findings.add("autodiff-nonfinite", "info",
                     f"TensorFlow's own gradient of the forward is NaN/Inf at {int(rescued.sum())} element"
                     f"{'s' if rescued.sum() > 1 else ''} (first at {name}{list(index)}), where the custom gradient is "
                     "finite: the custom gradient fixes it.", input=name, index=index)
