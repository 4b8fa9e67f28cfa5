"""Whether a custom gradient is linear in the upstream gradient, as every derivative is, judged on every check.

A vector-Jacobian product J^T u is linear in u. Full mode builds Jacobians
from one-hot upstream vectors, on which `upstream * upstream * f'(x)` equals
the right gradient, and projection mode from one random u: neither sees a
gradient that transforms the upstream instead of multiplying it. So every
check also takes the custom gradient of two random upstreams u1, u2 (uniform in [-1, 1)), of
A u1 + B u2, and of u1 scaled up a thousandfold and a millionfold (tenfold
and a hundredfold in float16, whose largest number is 65504), in the one
call that takes the op's own-precision products (`compiled.py`), and judges
them in the op's own precision:

* grad(A u1 + B u2) = A grad(u1) + B grad(u2) and grad(1000 u1) = 1000 grad(u1):
  "linear";
* not linear, no larger at a millionfold than at a thousandfold, and linear
  for small upstreams: the gradient clips or normalises the upstream
  ("bounded"), the classic surrogate (TensorFlow's own clip_gradients
  example). Clipping leaves a small upstream as it is; a sign of the
  upstream, bounded too, is as large for the smallest upstream as for the
  largest. Only a gradient found bounded takes the two more products this
  needs, at u1 scaled down a thousandfold and a millionfold (ten- and a
  hundredfold in float16), `small_probes` and `linear_when_small`;
* anything else not linear: "nonlinear", a mistake.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from gradmagic.checking.differences import aligned_empty, machine_epsilon, norm

#: The combination grad(A u1 + B u2) is compared with A grad(u1) + B grad(u2).
A, B = 0.75, -1.5
#: Scales of u1 that tell a saturating (clipping) gradient from another nonlinear one, by the op's precision.
SCALES = {"float16": (1e1, 1e2)}
DEFAULT_SCALES = (1e3, 1e6)
#: Upstream rows a linearity probe takes: u1, u2, A u1 + B u2, then u1 at each scale.
ROWS = 3 + len(DEFAULT_SCALES)
#: Scales of u1 small enough that clipping leaves the upstream as it is: a clipped gradient is linear there.
SMALL_SCALES = {"float16": (1e-1, 1e-2)}
DEFAULT_SMALL_SCALES = (1e-3, 1e-6)


@dataclass(frozen=True)
class Linearity:
    """How the custom gradient responds to the upstream gradient, measured."""

    #: "linear" (as every derivative), "bounded" (clips or rescales by size), "nonlinear"; None: not told (the
    #: gradient is not finite at the probes).
    response: str | None
    #: The largest deviation from linearity, relative to the gradients' size.
    deviation: float = 0.0
    #: z's flat element where the deviation is largest.
    worst: int | None = None
    #: The gradient there: grad(A u1 + B u2) and A grad(u1) + B grad(u2).
    combined: float = 0.0
    expected: float = 0.0


#: Above this many upstream elements in all, the probes' products are taken one upstream at a time (each judged and
#: let go before the next): four gradients of millions of elements at once would hold more memory than the check.
BATCHED = 1 << 22


class Probes:
    """The upstream vectors of the linearity probe after u1 (the check's random upstream, whose gradient the check
    takes anyway), for an op computing in `precision`: u2, A u1 + B u2, then u1 at each scale."""

    def __init__(self, u1: np.ndarray, seed: int, precision: str):
        self.u1, self.scales = u1, SCALES.get(precision, DEFAULT_SCALES)
        drawn = u1.dtype if u1.dtype in (np.float32, np.float64) else np.float64  # what NumPy draws in directly
        # Uniform in [-1, 1), as u1: three times cheaper to draw than normal numbers at millions of elements.
        self.u2 = (np.random.default_rng([seed, 3]).random(u1.size, dtype=drawn) * 2 - 1).astype(u1.dtype, copy=False)

    @property
    def batched(self) -> bool:
        """Whether all rows are taken in one call (`rows`), else one at a time (`row`)."""
        return (ROWS - 1) * self.u1.size <= BATCHED

    def rows(self) -> np.ndarray:
        """[ROWS - 1, size], aligned (taken by the framework without a copy)."""
        rows = aligned_empty((ROWS - 1, self.u1.size), self.u1.dtype)
        for k, row in enumerate(rows):
            self.row(k, out=row)
        return rows

    def row(self, k: int, out: np.ndarray | None = None) -> np.ndarray:
        """Row k of `rows`."""
        out = aligned_empty((self.u1.size,), self.u1.dtype) if out is None else out
        if k == 0:
            out[...] = self.u2
        elif k == 1:
            np.multiply(self.u1, A, out=out)
            out += B * self.u2
        else:
            np.multiply(self.u1, self.scales[k - 2], out=out)
        return out


def judge(g1: np.ndarray, gradient_of: Callable[[int], np.ndarray], precision: str) -> Linearity:
    """The linearity of the custom gradient from its values at u1 ([N]) and at each row k of the `Probes`
    (`gradient_of(k)`, asked for in order and let go as soon as judged), for an op computing in `precision`."""
    g2, combined = gradient_of(0), gradient_of(1)
    if not all(np.isfinite(part).all() for part in (g1, g2, combined)):  # not told, as where any probe is not finite
        return Linearity(None)
    expected = A * g1 + B * g2
    deviations = np.abs(combined - expected)
    worst = int(np.argmax(deviations)) if deviations.size else None
    scale = max(max(float(np.max(np.abs(part), initial=0)) for part in (g1, g2, combined)), 1e-30)
    epsilon = machine_epsilon(precision)
    combines = close(combined, expected, epsilon)
    values = (float(combined[worst]), float(expected[worst])) if worst is not None else (0.0, 0.0)
    deviation = float(deviations.max(initial=0)) / scale
    del g2, combined, expected, deviations
    scaled = gradient_of(2)
    if not np.isfinite(scaled).all():
        return Linearity(None)
    linear = combines and close(scaled, SCALES.get(precision, DEFAULT_SCALES)[0] * g1, epsilon)
    first = norm(scaled)
    del scaled
    further = gradient_of(3)
    if not np.isfinite(further).all():
        return Linearity(None)
    if linear:
        response = "linear"
    elif norm(further) <= 2 * first:
        response = "bounded"
    else:
        response = "nonlinear"
    return Linearity(response, deviation, worst, *values)


def small_probes(u1: np.ndarray, precision: str) -> np.ndarray:
    """[2, size]: u1 scaled down to where clipping leaves it alone, for an op computing in `precision`."""
    return np.stack([u1 * scale for scale in SMALL_SCALES.get(precision, DEFAULT_SMALL_SCALES)]).astype(u1.dtype)


def linear_when_small(gradients: np.ndarray, precision: str) -> bool:
    """Whether the custom gradient at the `small_probes` rows ([2, N]) is linear there: the two agree, scaled."""
    small, smaller = SMALL_SCALES.get(precision, DEFAULT_SMALL_SCALES)
    with np.errstate(all="ignore"):
        return close(gradients[1] / smaller, gradients[0] / small, machine_epsilon(precision))


def close(value: np.ndarray, expected: np.ndarray, epsilon: float | None = None) -> bool:
    """Equal up to the square root of the precision (`epsilon`, the op's; float32's at least: an op may compute in
    float32 inside and return float64, and a gradient that is not linear is off by far more), relative to the larger
    of the two."""
    scale = max(float(np.max(np.abs(expected), initial=0)), float(np.max(np.abs(value), initial=0)), 1e-30)
    found = [float(np.finfo(array.dtype).eps) for array in (value, expected)]
    precision = max(*found, epsilon or 0.0, 2.0**-23) ** 0.5
    return bool(np.all(np.abs(value - expected) <= precision * scale))
