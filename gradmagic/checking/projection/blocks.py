"""Block probes: directions restricted to blocks of elements, each output compared on its own, for an error at a
single element that rounding over all of them hides; and the measurement of chosen elements along their own steps,
judged by their own rounding and the tolerances (`BlockProbes.elements`)."""

from __future__ import annotations

import numpy as np

from gradmagic.checking.differences import EPSILONS
from gradmagic.checking.projection.constants import (
    BLOCK_BUDGET,
    BLOCK_CALL_VALUES,
    BLOCK_MARGIN,
    BLOCKS,
    EPSILON_FLOOR,
    KINK_SHARE,
    LOCATED,
    NARROWING_CALLS,
    SINGLE_ELEMENT_WARNING,
)
from gradmagic.checking.projection.probing import Prober
from gradmagic.report import ElementComparison


class BlockProbes:
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
        self.upstream = prober.upstream_vector.astype(np.float64, copy=False)
        self.custom = prober.custom.astype(np.float64, copy=False)
        self.budget = BLOCK_BUDGET
        self.failing = np.zeros(0, bool)
        self.worst_error = self.worst_relative = 0.0
        self.predicted = self.differences = np.zeros(0)
        #: The failing blocks (element ranges) that the budget left unmeasured element by element.
        self.unmeasured: list[tuple[int, int]] = []
        self.narrowing_calls = 0

    def beyond_tolerance(self, element: ElementComparison) -> bool:
        """Whether an element's custom and finite-difference values differ by more than the tolerances."""
        custom, numerical = measured(element)
        return abs(custom - numerical) > self.rtol * max(abs(custom), abs(numerical)) + self.atol

    @property
    def in_float64(self) -> bool:
        """Whether the op runs in float64: u . f taken inside the call then rounds as little as each output compared
        on its own (a narrower op's u . f, contracted in float64 too, carries the rounding of all its outputs)."""
        return self.epsilon <= EPSILONS["float64"]

    def contracts(self, count: int) -> bool:
        """Whether `count` elements are measured contracted (u . f taken inside the call) rather than each output
        compared on its own, whose rounding is then only that of the outputs an element moves: compared on their
        own where that takes one call's outputs, else contracted in float64 (whose rounding allows it) or where the
        budget cannot take them."""
        outputs = 2 * (count + 1) * max(1, self.upstream.size)
        if outputs <= BLOCK_CALL_VALUES:
            return False
        return self.in_float64 or outputs > self.budget

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
                ).astype(np.float64, copy=False)
                self.budget -= plus.size + minus.size
                moved = plus != minus
                out[0, part] = ((plus - minus) @ self.upstream) / 2
                rounding = np.where(moved, np.abs(plus) + np.abs(minus), 0) @ np.abs(self.upstream)
                out[3, part] = self.epsilon * rounding / 2
                out[4, part] = ((plus + minus) @ self.upstream) / 2
        # g . d and |d| . |g| span by span: a dense product over every row would cost N multiplications a row (a
        # million for one element's step).
        for k, (start, stop) in enumerate(spans):
            along, custom = steps[start:stop].astype(np.float64), self.custom[start:stop]
            out[1, k], out[2, k] = along @ custom, np.abs(along) @ np.abs(custom)
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
        contracted = self.in_float64
        outputs = max(1, self.upstream.size)
        pending = [(start, stop, allowed)]
        found: list[ElementComparison] = []
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


def measured(element: ElementComparison) -> tuple[float, float]:
    """The custom gradient and the finite difference of an element projection mode located, which measures both."""
    if element.custom is None or element.numerical is None:
        raise ValueError(f"the located element {element.input}{list(element.index)} lacks a measured value")
    return element.custom, element.numerical
