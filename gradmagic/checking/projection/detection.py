"""Detection: the probes measured (the elements at the edge of the forward's domain left out) and judged, each
direction's error against the noise floor its own measurements give (see the package's docstring)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gradmagic.checking import precision
from gradmagic.checking.differences import machine_epsilon
from gradmagic.checking.projection.constants import (
    EPSILON_FLOOR,
    GRADIENT_MARGIN,
    NOISE_MARGIN,
    RICHARDSON,
    SMOOTH_FLOORS,
    UNJUDGEABLE_NOISE,
)
from gradmagic.checking.projection.localisation import nonfinite_elements
from gradmagic.checking.projection.probing import Prober, Projections
from gradmagic.checking.projection.wording import Mismatch, report_edge, report_noisy, report_nonfinite
from gradmagic.checking.run import CheckRun
from gradmagic.frameworks.base import Layout
from gradmagic.report import ElementComparison


@dataclass(frozen=True)
class Detection:
    """The probes' verdict: for each of the T random directions, the measured central differences of u . f, the
    custom gradient's prediction, their relative error and the noise it is judged against."""

    differences: np.ndarray  # [T]
    predicted: np.ndarray  # [T]
    magnitude: np.ndarray  # [T]: sum |g_i d_i|
    scale: np.ndarray  # [T]: magnitude + |differences|, what the errors are relative to
    error: np.ndarray  # [T]: |differences - predicted| / scale
    noise: np.ndarray  # [T]: relative truncation (Richardson) plus the worst-case rounding, relative
    typical_noise: np.ndarray  # [T]: the same with the typical (root-sum-square) rounding
    relative_truncation: float
    floor: float  # what no error below is told from rounding: the long dot products', the gradient's own
    unjudgeable: float  # a noise floor above this judges nothing (a discontinuous forward)

    @property
    def noise_floor(self) -> float:
        return float(np.max(self.noise))

    @property
    def threshold(self) -> float:
        """The relative error a direction fails beyond."""
        return NOISE_MARGIN * self.noise_floor + self.floor

    @property
    def failing(self) -> np.ndarray:
        return ~(self.error <= self.threshold)  # NaN fails

    @property
    def judgeable(self) -> bool:
        return self.noise_floor <= self.unjudgeable

    @property
    def max_error(self) -> float:
        """The worst error as a share of the threshold."""
        return float(np.nanmax(self.error)) / self.threshold

    @property
    def worst(self) -> int:
        """The direction of the worst error (a NaN one first)."""
        return int(np.nanargmax(np.where(np.isfinite(self.error), self.error, np.inf)))

    def allowance(self, row: int, relative: float) -> float:
        """A relative noise along direction `row`, with the floor, as an absolute mismatch there."""
        return (relative + self.floor) * float(self.scale[row])

    def mismatch(self, located: list[ElementComparison], spread: list[str]) -> Mismatch:
        """What the failing directions measured, with the elements located there."""
        true_zero = bool(np.all(np.abs(self.differences) <= self.threshold * self.magnitude))
        failing, error = self.failing, float(np.nanmax(self.error))
        return Mismatch(
            failing, error, self.noise_floor, self.predicted, self.differences, tuple(located), tuple(spread), true_zero
        )


def probe(run: CheckRun, prober: Prober) -> Projections | None:
    """Every probe at step h, and the first RICHARDSON of them at 2h (the change measures the truncation error);
    elements at the edge of the forward's domain (a square root at zero) found, left out (their step made zero) and
    named. None, said, where the differences are NaN/Inf and those elements cannot be told apart."""
    probes = run.options.probes
    richardson = min(RICHARDSON, probes)
    rows = list(range(probes)) + list(range(richardson))
    weights = np.concatenate([np.ones((probes, 1)), np.full((richardson, 1), 2.0)])
    measured = prober.measure(rows, weights)
    if not np.isfinite(measured.differences).all():
        edge = nonfinite_elements(prober)
        if edge is not None and edge.size < prober.z.size:
            report_edge(run, prober.z, prober.steps, edge)
            prober.leave_out(edge)
            measured = prober.measure(rows, weights)
    if not np.isfinite(measured.differences).all():
        report_nonfinite(run)
        return None
    return measured


def detect(run: CheckRun, layout: Layout, prober: Prober, measured: Projections) -> Detection:
    """Each direction's error and noise; `fd-noisy` where the noise judges nothing."""
    probes = run.options.probes
    richardson = min(RICHARDSON, probes)
    epsilon = machine_epsilon(run.precision(layout))
    differences, predicted = measured.differences[:probes], measured.predicted[:probes]
    magnitude = measured.magnitude[:probes]
    with np.errstate(all="ignore"):
        scale = magnitude + np.abs(differences)
        truncation = np.abs(measured.differences[probes:] / 2 - differences[:richardson]) / 3
        # 0 / 0 (no direction moves anything: a zero gradient and flat forward) is no noise.
        relative_truncation = float(np.max(np.nan_to_num(truncation / scale[:richardson], nan=0.0)))
        # Judged against the worst-case rounding; located with the typical (root-sum-square) rounding.
        noise = np.nan_to_num(relative_truncation + 1.5 * measured.rounding[:probes] / scale, nan=0.0)
        typical_noise = np.nan_to_num(relative_truncation + 1.5 * measured.rounding_rms[:probes] / scale, nan=0.0)
        error = np.where(scale == 0, 0.0, np.abs(differences - predicted) / scale)  # NaN where predicted is
        # A custom gradient computed in the op's own 16-bit float where the finite differences run wider (its
        # constants in float16, kept so by PyTorch): each g_i carries a few of that float's roundings, which the
        # prediction g . d sums like random errors, sqrt(sum (g_i d_i)^2) of them.
        gradient_noise = np.nan_to_num(
            precision.gradient_rounding(run, layout) * prober.step_totals[1] / scale, nan=0.0, posinf=0.0
        )
    floor = EPSILON_FLOOR * prober.contraction_epsilon + GRADIENT_MARGIN * float(np.max(gradient_noise))
    unjudgeable = max(UNJUDGEABLE_NOISE, SMOOTH_FLOORS * epsilon ** (2 / 3))
    detection = Detection(
        differences, predicted, magnitude, scale, error, noise, typical_noise, relative_truncation, floor, unjudgeable
    )
    if not detection.judgeable:
        report_noisy(run, detection.noise_floor)
    return detection
