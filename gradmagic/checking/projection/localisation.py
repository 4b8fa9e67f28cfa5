"""Localisation: the wrong elements behind a failing probe, named by a trusted reference (autodiff where it agrees
with the finite differences), by digit codes, or by group testing; and the elements at the edge of the forward's
domain (see the package's docstring)."""

from __future__ import annotations

import math

import numpy as np

from gradmagic.checking.differences import Axis
from gradmagic.checking.projection.blocks import BlockProbes, measured
from gradmagic.checking.projection.constants import (
    BLOCKS,
    CALL_ELEMENTS,
    EDGE_ELEMENTS,
    LOCATED,
    MAX_BASE,
    REFERENCE_ROUNDINGS,
    RESOLUTION_SAMPLE,
    SAMPLED,
)
from gradmagic.checking.projection.probing import Prober
from gradmagic.report import ElementComparison, element_label


class Locator:
    """Finds the wrong elements behind one failing probe (see the module docstring)."""

    def __init__(
        self, prober, row: int, mismatch: float, noise: float, typical_noise: float, columns: Axis, judge: BlockProbes
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
        return (worst_last(located) if spread else located), spread

    def search(self) -> tuple[list[ElementComparison], list[str]]:
        """`run`'s search: the elements it measured beyond the noise."""
        everything = np.arange(self.size)
        located, remaining, spread = self.by_reference()
        if spread:
            return worst_last(located), spread
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
                return worst_last(located + self.searched(candidates, some)), self.describe(some, len(blocks))
            pending += carrying
        return located, []

    def by_reference(self) -> tuple[list[ElementComparison], float, list[str]]:
        """With a trusted reference (`Prober.trust_reference`): the elements whose custom gradient it puts beyond the
        tolerances, each measured along its own step in one call (`BlockProbes.elements`), those found wrong; the
        mismatch along the failing probe they leave; and where more are wrong than are listed, the blocks that carry
        the error (as the reference tells, without a call) with the worst few elements measured. Nothing without a
        reference."""
        reference, prober = self.prober.reference, self.prober
        if reference is None:
            return [], self.mismatch, []
        magnitude = np.maximum(np.abs(self.custom), np.abs(reference))
        difference = np.abs(self.custom - reference)
        # The two gradients run in the op's float: a few of its roundings apart, an element is no suspect.
        allowed_rtol = self.judge.rtol + REFERENCE_ROUNDINGS * self.judge.epsilon
        suspects = difference > allowed_rtol * magnitude + self.judge.atol
        count = int(np.count_nonzero(suspects))
        if not count:
            return [], self.mismatch, []
        typical = float(np.median(magnitude[:: max(1, magnitude.size // RESOLUTION_SAMPLE)]))
        # Only the suspects ranked: a selection over the whole input, most of it tied, costs more than the check.
        indices = np.flatnonzero(suspects)
        relative = difference[indices] / np.maximum(magnitude[indices], typical if typical > 0 else 1.0)
        listed = count if count <= LOCATED else 1 + SAMPLED  # all of them, or the worst of an error spread wide
        if count > listed:
            keep = np.argpartition(relative, -listed)[-listed:]
            indices, relative = indices[keep], relative[keep]
        top = indices[np.argsort(-relative, kind="stable")]
        found = self.judge.elements(top, contracted=self.judge.contracts(len(top)))
        if count > LOCATED:
            return found, 0.0, self.reference_blocks(reference)
        parts = []
        for element in found:
            custom, numerical = measured(element)
            parts.append((numerical - custom) * prober.direction(self.row, self.element_of(element)))
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
        one call (`BlockProbes.elements`), those found wrong."""
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


def worst_last(found: list[ElementComparison]) -> list[ElementComparison]:
    """`found` with its most wrong element (relative to the larger of its two values) moved last."""
    if not found:
        return found
    worst = max(found, key=_relative_error)
    return [e for e in found if e is not worst] + [worst]


def _relative_error(element: ElementComparison) -> float:
    custom, numerical = measured(element)
    return abs(custom - numerical) / (max(abs(custom), abs(numerical)) or 1.0)


def nonfinite_elements(prober: Prober) -> np.ndarray | None:
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
