"""Detection's measurements: a random upstream vector u, the custom vector-Jacobian product g = J^T u, and central
differences of u . f along signed random directions, formed inside the framework's compiled call."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gradmagic.checking import low_precision
from gradmagic.checking.differences import aligned_concatenate, aligned_empty, machine_epsilon, norm, steps_for
from gradmagic.checking.projection.constants import (
    CALL_ELEMENTS,
    KEPT_UPSTREAM,
    RESOLUTION_SAMPLE,
    SMALL,
    TOTALS_SLICE,
)
from gradmagic.checking.run import CheckRun
from gradmagic.frameworks.base import Directions, Layout, Signs


@dataclass(frozen=True)
class Projections:
    """Measurements along directions d_t, for the prober's upstream vector u and custom gradient g."""

    differences: np.ndarray  # [T]: (u . f(z + d_t) - u . f(z - d_t)) / 2, central differences of u . f along d_t
    rounding: np.ndarray  # [T]: eps * sum |u * f(z)|: the worst-case rounding of the above
    rounding_rms: np.ndarray  # [T]: eps * sqrt(sum (u * f(z))^2): the typical size of independent roundings
    predicted: np.ndarray  # [T]: g . d_t, what the custom gradient predicts
    magnitude: np.ndarray  # [T]: sum |g * d_t|


def product_totals(first: np.ndarray, second: np.ndarray) -> tuple[float, float]:
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
        precision = run.precision(layout)
        self.z = run.z(layout)
        if low_precision.applies(precision) and self.z.dtype != np.float64:
            # An op that runs only in a narrower float: measured about float64 points (each cast to the op's float
            # exactly: the steps are exact there) and contracted in float64, so that the long dot products add no
            # rounding of their own to what the op's outputs carry.
            self.z = aligned_concatenate([self.z], np.float64)
        self._gradient_steps: dict[float, tuple[float, float, float]] = {}
        self._step_totals: tuple[float, float] | None = None
        self.upstream_vector = probe_upstream(run.options.seed, run.rows.size).astype(self.z.dtype, copy=False)
        vjps = run.vjps(layout, self.z[None], self.upstream_vector[None], autodiff=False)
        self.custom = vjps.custom[0, 0]
        self._autodiff: tuple[np.ndarray | None] | None = None
        #: Autodiff's vector-Jacobian product, where it is trusted to name candidates (`trust_reference`).
        self.reference: np.ndarray | None = None
        # The rounding of u . f(z +- d) is that of u . f(z): bounded once, at the centre.
        epsilon = machine_epsilon(precision)
        worst, typical = product_totals(self.upstream_vector, vjps.outputs[0])
        self.rounding = (epsilon * worst, epsilon * typical)
        #: The bound (worst case, root-sum-square) of that rounding, where `rounding` is measured instead.
        self.rounding_bound: tuple[float, float] = self.rounding
        centre = float(self.upstream_vector @ vjps.outputs[0].astype(np.float64, copy=False))
        del vjps  # the steps and signs after the product's temporaries are gone: less at millions
        options = run.options
        self.steps = steps_for(self.z, *run.dtypes_and_sizes(layout), options.eps)
        self.signs = Signs.of(random_signs(options.seed, options.probes, self.z.size))
        if low_precision.applies(precision):
            self.rounding = self._measured_rounding(centre)

    def _measured_rounding(self, centre: float) -> tuple[float, float]:
        """Below float64, the rounding of u . f(z +- d) as measured along the first probe's direction (`NOISE_SIGMAS`
        standard deviations of its noise, `low_precision.measured_noise`), not bounded: a bound sums every output's
        rounding as if all had the same sign, N times a typical one where the measured noise grows as sqrt(N), and
        would hide a whole gradient 10 % off among 10,000 float32 elements. Never below the root-sum-square of the
        outputs' roundings, nor above the bound (a forward with kinks near the direction, a leaky ReLU's elements
        near zero, shows them as noise: judged as before); the bound where the measurement is not finite (the
        forward's domain ends within the points)."""
        worst, typical = self.rounding
        points = low_precision.NOISE_POINTS
        factors = np.arange(1, points + 1, dtype=np.float64)[:, None] / low_precision.NOISE_SPACING
        directions = Directions(self.signs, self.steps, np.zeros(points, np.int32), factors.astype(np.float32))
        plus, minus = self.run.evaluate(self.layout, directions, self.upstream_vector, signs=(1.0, -1.0))
        noise = float(low_precision.measured_noise(np.array([centre]), plus[:, None, None], minus[:, None, None])[0, 0])
        if not np.isfinite(noise):
            return worst, typical
        measured = min(worst, max(typical, low_precision.NOISE_SIGMAS * noise))
        return measured, measured

    @property
    def bound_over_measured(self) -> float:
        """How many times the measured rounding the worst-case bound is (1 where it is not measured): what block
        probes, whose rounding is the bound over the outputs they move, lose against the probes."""
        worst, measured = self.rounding_bound[0], self.rounding[0]
        return worst / measured if measured > 0 and np.isfinite(worst / measured) else 1.0

    @property
    def contraction_epsilon(self) -> float:
        """The machine epsilon of the long dot products (u . f, g . d), which run in z's float."""
        return machine_epsilon(self.z.dtype.name)

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
            if sample.size:
                small, median = np.quantile(sample, [SMALL, 0.5])
                self._gradient_steps[atol] = (float(small), float(median), highest)
            else:
                self._gradient_steps[atol] = (0.0, 0.0, 0.0)
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
        """Take autodiff as the reference that names the candidates of the wrong elements (`Locator.by_reference`)
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

    def value_at(self, name: str, index: tuple[int, ...]) -> float | None:
        """The input's value at an element the report names (`x`, (2,)); None for a name z does not hold."""
        columns = self.run.columns
        if name not in columns.names:
            return None
        part = columns.names.index(name)
        shape = columns.shapes[part]
        flat = int(columns.offsets[part]) + (int(np.ravel_multi_index(index, shape)) if shape else 0)
        return float(self.z[flat])

    @property
    def step_totals(self) -> tuple[float, float]:
        """The sum and the root-sum-square of `step_magnitudes`, taken once, a slice at a time (no N-sized
        temporary at millions of elements)."""
        if self._step_totals is None:
            self._step_totals = product_totals(self.custom, self.steps)
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
        taken = np.asarray(rows, np.int32)
        for start in range(0, count, batch):
            part = slice(start, start + batch)
            directions = Directions(self.signs, self.steps, taken[part], weights[part], self.custom)
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
