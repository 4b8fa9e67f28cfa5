"""Whether a custom gradient is linear in the upstream gradient, as every derivative is.

A vector-Jacobian product J^T u scales with u. A gradient function that clips
or normalises the upstream gradient saturates instead (a deliberate
surrogate, gradient clipping); anything else that is not linear (a squared
upstream, a term not multiplied by it) is a mistake.
"""

from __future__ import annotations

from typing import Callable

import numpy as np


def response_to_upstream(vjps: Callable[[np.ndarray], np.ndarray], upstream: np.ndarray) -> str | None:
    """How the custom gradient responds to the upstream gradient scaled up a thousandfold, then a millionfold.

    `vjps(upstreams)` gives the custom vector-Jacobian product of each row of
    `upstreams`, in one call. A derivative scales with the upstream
    ("linear"). Clipping or normalising saturates: the millionfold response is
    no larger than the thousandfold ("bounded"). Anything else is "nonlinear",
    a mistake. None when it cannot be told (the gradient fails or is not finite
    there).
    """
    try:
        base, large, larger = vjps(np.stack([scale * upstream for scale in (1.0, 1e3, 1e6)]))
    except Exception:  # the user's gradient function, at larger upstream gradients: no evidence either way
        return None
    if not all(np.isfinite(value).all() for value in (base, large, larger)):
        return None
    if close(large, 1e3 * base):
        return "linear"
    return "bounded" if np.linalg.norm(larger) <= 2 * np.linalg.norm(large) else "nonlinear"


def close(value: np.ndarray, expected: np.ndarray) -> bool:
    """Equal up to the square root of the precision, relative to the larger of the two."""
    scale = max(float(np.max(np.abs(expected), initial=0)), float(np.max(np.abs(value), initial=0)), 1e-30)
    precision = max(float(np.finfo(value.dtype).eps), float(np.finfo(expected.dtype).eps)) ** 0.5
    return bool(np.all(np.abs(value - expected) <= precision * scale))
