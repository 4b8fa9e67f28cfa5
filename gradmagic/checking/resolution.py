"""What a check could resolve: the precision its finite differences ran in and why (`precision.reason`), and for
each input (and variable) the smallest relative error of its gradient the comparison would have seen.

The error measured is the simplest a gradient makes: the input's whole gradient
(1 + r) times the right one (a forgotten factor, a wrong constant). In full
mode an entry of it is off by r |g|, beyond the entry's tolerance t once
r > t / |g|: the input's resolution is the smallest such ratio over its judged
entries. In projection mode it moves each probe's prediction by r g_x . d_x,
typically r sqrt(sum (g_i h_i)^2) over the input's elements, against the
smallest mismatch a probe fails beyond (`projection.input_resolutions`).
"""

from __future__ import annotations

import numpy as np

from gradmagic.checking import precision
from gradmagic.checking.differences import Axis
from gradmagic.checking.run import CheckRun
from gradmagic.frameworks.base import Layout
from gradmagic.report import InputResolution, Resolution


def of(run: CheckRun, layout: Layout, inputs: tuple[InputResolution, ...]) -> Resolution:
    """The resolution of a comparison in `layout`'s precision."""
    return Resolution(dtype=run.precision(layout), why=precision.reason(run, layout), inputs=inputs)


def full(columns: Axis, custom: np.ndarray, tolerance: np.ndarray, judged: np.ndarray) -> tuple[InputResolution, ...]:
    """Per input, from the [M, N] custom Jacobian, its entries' tolerances and which were judged."""
    found = []
    for name, start, stop in zip(columns.names, columns.offsets, columns.offsets[1:]):
        with np.errstate(all="ignore"):
            magnitude = np.abs(custom[:, start:stop])
            ratio = tolerance[:, start:stop] / magnitude
        usable = judged[:, start:stop] & (magnitude > 0) & np.isfinite(ratio)
        found.append(InputResolution(name, float(ratio[usable].min()) if usable.any() else None))
    return tuple(found)
