"""Full-mode finite differences below float64 (float32, float16, bfloat16): as accurate as that float allows, and
judged by what they measure, not by a fixed table.

An op that refuses wider floats (a float32 variable or constant inside, its
constants cast to its own float) is differentiated in its own precision,
where a central difference at step h carries a truncation error (c h^2, or
a h at a kink of the derivative) and the noise of the two values it
subtracts (a rounding of their size, eps |f| / h, or more where the op
cancels inside: a float32 GELU's 1 + tanh near -1, a layer norm's centring).
One step size cannot tell them apart; three can. Central differences D at
h / 2, h and 2 h (each exact in the element's precision) give two Richardson
extrapolations, (r^2 D(a) - D(b)) / (r^2 - 1) for the pairs (h / 2, h) and
(h, 2 h), which cancel the h^2 term. Each comes with a bound on its error
that the differences measure:

    |D(a) - D(b)| + 2 noise(a) / a

(the first term holds the truncation, three times it for a smooth forward and
once at a kink, and the noise of both; the second the noise of the smaller
step's two values: the larger of a rounding of their size and `NOISE_SIGMAS`
standard deviations of the forward's noise measured along that element,
`measured_noise`), and each element takes the pair with the smaller bound:
a smooth forward the wider steps, a noisy one the narrower. The tolerance of
an entry is its bound, plus a few roundings of its output's largest Jacobian
entry (the custom gradient is computed in the same float, and so is every
intermediate it cancels), plus the `rtol` and `atol` the user gave (none by
default).

Measured with TensorFlow 2.21 on GELU, softsign, log1pexp, tanh, sin(2x) and
layer norms in bfloat16 and float16 (`tests/test_precision.py`): correct ops
stay under 0.7 of their tolerance, a gradient 1.25 times the right one is
beyond it (1.1 times too in float16, in bfloat16 where the derivative is not
small against its rounding). In float32 (`benchmarks/bench_check.py`, section
7): GELU, a layer norm, softmax, a tanh dense layer, w sin(x), w exp(-x^2)
and softplus stay under 0.5 of it over 25 random inputs each, and a gradient
0.1 % off fails on every one.
"""

from __future__ import annotations

import numpy as np

from gradmagic.checking.differences import EPSILONS, machine_epsilon, relative_step, step_sizes
from gradmagic.checking.run import CheckRun
from gradmagic.frameworks.base import Layout

#: The custom gradient and the intermediates a 16-bit op cancels may be off by this many roundings of an output's
#: largest Jacobian entry.
ROUNDINGS = 4
#: The noise of the forward is measured at this many points on each side of z, along each element.
NOISE_POINTS = 6
#: ... spaced by the check's step over this: wide enough for each point to round on its own (and for a forward whose
#: rounding is correlated over short distances, as a float32 layer norm's, to show it), narrow enough that the
#: forward's smooth part leaves nothing in the points' fourth differences.
NOISE_SPACING = 4
#: A difference's two values may each be off by this many standard deviations of the noise measured there.
NOISE_SIGMAS = 3


def applies(precision: str) -> bool:
    """Whether finite differences in `precision` are judged here: a float coarser than float64 (an op that refuses
    float64: a float32 variable, a float32 constant, a 16-bit float)."""
    return machine_epsilon(precision) > EPSILONS["float64"]


def coarser_than_float32(precision: str) -> bool:
    """A 16-bit float: judged by what its differences measure alone (float32 falls back on its fixed tolerance where
    that is tighter, `no_looser`)."""
    return machine_epsilon(precision) > EPSILONS["float32"]


def no_looser(fixed: tuple, measured: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(numerical, tolerance, error), each [N, M]: the measured ones (`extrapolated`), but where their tolerance is
    looser than float32's fixed one (`fixed`: the plain central difference, rtol 2e-2 and atol 1e-3 or the user's),
    the fixed ones, as before: a forward the steps cannot resolve (a staircase finer than the step, a noisy one)
    is judged no more loosely than a fixed tolerance would."""
    looser = ~(measured[1] <= fixed[1])  # NaN measured: the fixed ones
    numerical, tolerance, error = (np.where(looser, before, after) for before, after in zip(fixed, measured))
    return numerical, tolerance, error


def extrapolated(
    run: CheckRun,
    layout: Layout,
    z: np.ndarray,
    steps: np.ndarray,
    plus: np.ndarray,
    minus: np.ndarray,
    custom,
    center: np.ndarray,
    gradient_rtol: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[float, float]]:
    """Richardson-extrapolated central differences and their measured tolerance, in the [N, M] layout of
    `differences.central_differences`: (numerical, tolerance, error), and the (rtol, atol) applied on top (the
    user's rtol, and the user's atol plus the largest rounding allowance). `plus` and `minus` are f(z +- h e_i) at
    the check's steps h, `center` f(z); two more step sizes, and the points the noise is measured at
    (`measured_noise`), are evaluated here, in one compiled call. `gradient_rtol`: the rounding
    a gradient written for a coarser float than `layout`'s carries (`precision.gradient_rounding`), allowed on top."""
    options, rows = run.options, run.rows
    dtypes, sizes = run.dtypes_and_sizes(layout)
    precision = run.precision(layout)
    epsilon = machine_epsilon(precision)
    narrow, wide = (_steps(z, dtypes, sizes, options.eps, factor) for factor in (0.5, 2.0))
    spacing = steps / NOISE_SPACING
    n = z.size
    diagonal = np.arange(n)
    offsets = np.zeros(((2 + NOISE_POINTS) * n, n), z.dtype)
    for k, step in enumerate([narrow, wide] + [j * spacing for j in range(1, NOISE_POINTS + 1)]):
        offsets[k * n + diagonal, diagonal] = step
    more_plus, more_minus = run.evaluate(layout, offsets, signs=(1.0, -1.0))
    with np.errstate(all="ignore"):
        noise = measured_noise(
            center, more_plus[2 * n :].reshape(NOISE_POINTS, n, -1), more_minus[2 * n :].reshape(NOISE_POINTS, n, -1)
        )
        measured = [
            _differences(more_plus[:n], more_minus[:n], narrow, epsilon, noise),
            _differences(plus, minus, steps, epsilon, noise),
            _differences(more_plus[n : 2 * n], more_minus[n : 2 * n], wide, epsilon, noise),
        ]
        values, errors = [], []
        for (small, small_step, rounding), (large, large_step, _) in zip(measured, measured[1:]):
            ratio = (large_step / small_step)[:, None] ** 2
            value = (ratio * small - large) / (ratio - 1)
            error = np.abs(small - large) + 2 * rounding
            error[~np.isfinite(value) | ~np.isfinite(error)] = np.inf
            values.append(value)
            errors.append(error)
        # The pair with the smaller bound; where the two extrapolations disagree by more (steps so wide against the
        # forward's curvature that neither difference is right, and their difference can be small by chance), by
        # that much.
        better = errors[0] <= errors[1]
        best = np.where(better, values[0], values[1])
        bound = np.minimum(errors[0], errors[1])
        disagreement = np.abs(values[0] - values[1])
        both = np.isfinite(disagreement)
        bound[both] = np.maximum(bound[both], disagreement[both])
        # Where neither pair is finite (the forward's domain ends within 2h): the plain difference at h, judged
        # with its own rounding, ten times over, as before.
        plain, _, plain_rounding = measured[1]
        unbounded = ~np.isfinite(bound)
        best = np.where(unbounded, plain, best)
        bound = np.where(unbounded, 10 * plain_rounding, bound)

        custom_t = np.ascontiguousarray(custom.T)
        larger = np.maximum(np.abs(custom_t), np.abs(best))
        allowance = np.zeros(rows.size)
        for start, stop in zip(rows.offsets, rows.offsets[1:]):  # per output: its own scale
            finite = larger[:, start:stop][np.isfinite(larger[:, start:stop])]
            allowance[start:stop] = ROUNDINGS * epsilon * (finite.max() if finite.size else 0.0)
        rtol = (options.rtol or 0.0) + gradient_rtol
        atol = options.atol or 0.0
        tolerance = bound + allowance[None, :] + rtol * larger + atol
        error = np.abs(custom_t - best) / tolerance
        error[tolerance == 0] = np.where(custom_t == best, 0.0, np.inf)[tolerance == 0]
    return best, tolerance, error, (rtol, atol + float(allowance.max(initial=0.0)))


def _steps(z: np.ndarray, dtypes: list[str], sizes: list[int], eps: float | None, factor: float) -> np.ndarray:
    """The check's steps scaled by `factor`, each part's made exact in its own precision."""
    steps = np.empty_like(z)
    offset = 0
    for dtype, size in zip(dtypes, sizes):
        part = slice(offset, offset + size)
        steps[part] = step_sizes(z[part], factor * relative_step(dtype, eps), dtype)
        offset += size
    return steps


def measured_noise(center: np.ndarray, plus: np.ndarray, minus: np.ndarray) -> np.ndarray:
    """[N, M]: the noise of each output along each element, measured from its values at z + j s e_i for j from
    -NOISE_POINTS to NOISE_POINTS (`plus` and `minus` [NOISE_POINTS, N, M], `center` [M]) as Moré and Wild's ECnoise
    does: at that spacing the forward's smooth part vanishes from the k-th differences, and what is left is rounding,
    of variance gamma_k E[diff^2] (gamma_k = k!^2 / (2k)!); the larger of the estimates from the third and the fourth
    differences."""
    points = np.concatenate([minus[::-1], np.broadcast_to(center, plus.shape[1:])[None], plus]).astype(np.float64)
    third, fourth = np.diff(points, 3, axis=0), np.diff(points, 4, axis=0)
    variance = np.maximum(np.mean(third**2, axis=0) / 20, np.mean(fourth**2, axis=0) / 70)
    return np.sqrt(variance)


def _differences(plus: np.ndarray, minus: np.ndarray, steps: np.ndarray, epsilon: float, noise: np.ndarray):
    """([N, M] central differences, their steps, the rounding of the two values each subtracts: a rounding of
    their magnitude, or `NOISE_SIGMAS` of the noise measured there where that is larger)."""
    plus, minus = plus.astype(np.float64), minus.astype(np.float64)
    h = steps.astype(np.float64)[:, None]
    rounding = np.maximum(epsilon * (np.abs(plus) + np.abs(minus)) / 2, NOISE_SIGMAS * noise)
    return (plus - minus) / (2 * h), steps.astype(np.float64), rounding / h
