"""Intended surrogate gradients: told apart from mistakes, and explained.

Many custom gradients are deliberately not the derivative of their forward:
a straight-through estimator passes the upstream gradient through `round`
or `sign`, gradient clipping bounds it, gradient reversal flips it, a scaled
or stopped gradient multiplies it by a constant. For these a
finite-difference mismatch is the point.

Declared (`surrogate=True`, `%%custom_gradient --surrogate`), the mismatch
becomes `surrogate-differs` (info): where and by how much the surrogate
differs from the true derivative (finite differences) and from autodiff.
Undeclared, an `fd-mismatch` whose evidence fits a known pattern names it
and says to declare it. The evidence is read from what the check measured
anyway (the dense Jacobians, or the projections), the forward's traced ops,
and three more vector-Jacobian products that tell whether the custom gradient
is linear in the upstream gradient, as every true derivative is (clipping
saturates; anything else non-linear is a mistake).

Recognising errs on the side of a bug: a constant factor within
`NEAR_ONE` of the true derivative (`1.001 * upstream`) or a forward that is
a scaled identity (`3 * x` with a gradient of `upstream`) is a mistake, and
the report keeps the plain `fd-mismatch` with its own hint.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gradmagic.checking.findings import Findings
from gradmagic.checking.linearity import Linearity, close
from gradmagic.frameworks.base import RawGraph
from gradmagic.report import Surrogate

#: A constant factor closer than this to the true derivative's is a mistake (a typo), not an intended scaling.
NEAR_ONE = 0.1
#: Relative tolerance of the structural tests on Jacobians (a multiple of the identity, linearity in the upstream).
STRUCTURE_RTOL = 1e-6

# What the forward's ops do (`RawOp.meaning`, each adapter's spelling normalised) where that makes a surrogate likely.
_PIECEWISE_CONSTANT = ("round", "sign", "floor", "ceil", "argmax")
#: tf.clip_by_value traces as a Minimum and a Maximum.
_CLIP_PAIR = frozenset({"minimum", "maximum"})
#: A traced forward op that is none of the above.
OTHER = "op"


@dataclass(frozen=True)
class Evidence:
    """What the check measured that tells an intended surrogate from a mistake."""

    #: What the forward's traced ops do ("round", "clip", ..., `OTHER`; see `forward_ops`); None without a graph.
    forward_ops: frozenset[str] | None
    #: The true derivative (finite differences) at every compared element: "zero", "identity", "scaled-identity"
    #: (k times the identity, k != 1), or None (anything else, or not known).
    true_derivative: str | None
    #: c when the custom gradient is c times the upstream gradient (one input, one output of the same shape).
    custom_factor: float | None
    #: How the custom gradient responds to the upstream gradient: "linear" (as every derivative), "bounded" (not
    #: linear, and smaller than linear: clipped or normalised), "nonlinear" (otherwise); None when not measured.
    upstream_response: str | None
    #: Where the custom gradient differs, the true derivative is zero (flat parts of the forward) everywhere.
    differs_only_where_flat: bool = False
    #: The custom gradient differs at an input element where the forward is flat (the true derivative of every
    #: output in it zero), with a gradient flowing there: what a straight-through estimator does.
    flows_where_flat: bool = False
    #: Autodiff of the forward agrees with the true derivative at every compared element (a `stop_gradient` inside
    #: then changes no derivative: a numerical safeguard, as in JAX's softmax); None when not known.
    autodiff_matches: bool | None = None


@dataclass(frozen=True)
class Pattern:
    """A recognised surrogate: its usual name and what in the evidence shows it."""

    name: str
    reason: str

    @property
    def phrase(self) -> str:
        """The name in a sentence: "a straight-through estimator", "gradient clipping"."""
        return self.name if self.name.startswith("gradient") else f"a {self.name}"


def forward_ops(graph: RawGraph | None) -> frozenset[str] | None:
    """What the forward's traced ops do: their meanings (`RawOp.meaning`), `OTHER` for any other computing op."""
    if graph is None:
        return None
    return frozenset(
        op.meaning or OTHER
        for op in graph.ops
        if op.scope == "forward" and (op.kind == "op" or op.meaning) and op.meaning != "custom_gradient"
    )


def recognise(evidence: Evidence) -> Pattern | None:
    """The surrogate pattern the evidence fits, or None when it looks like a mistake."""
    ops = evidence.forward_ops or frozenset()
    if "stop_gradient" in ops and evidence.autodiff_matches and evidence.true_derivative != "zero":
        # A stop_gradient that changes no derivative of a forward that is not flat (JAX's softmax subtracts the
        # stopped maximum): no evidence of a forward built to differentiate otherwise.
        ops = ops - {"stop_gradient"}
    piecewise_constant = [op for op in _PIECEWISE_CONSTANT if op in ops]
    # A quantiser when the graph shows one and the custom gradient differs where the forward is flat (every
    # compared element, or some input element where the gradient flows instead of being zero): a `round` added to a
    # smooth forward, whose gradient is wrong where the forward is not flat, is no straight-through estimator. Flat
    # everywhere it was compared: a quantiser too where a cast through integers shows one, or where there is no graph
    # to ask; a flat stretch of another op (ReLU below zero) is no evidence.
    flat = evidence.true_derivative == "zero"
    flat_forward = (bool(piecewise_constant) and (flat or evidence.flows_where_flat)) or (
        flat and (evidence.forward_ops is None or "cast" in ops)
    )
    clips = "clip" in ops or _CLIP_PAIR <= ops
    factor = evidence.custom_factor
    # A traced forward without a single computing op passes its input through: its derivative is the identity.
    true_derivative = evidence.true_derivative or ("identity" if evidence.forward_ops == frozenset() else None)
    if evidence.upstream_response == "bounded":
        return Pattern(
            "gradient clipping",
            "the custom gradient is not linear in the upstream gradient, as every derivative is: it clips or "
            "rescales the upstream gradient by its size (TensorFlow's own clip_gradients example does this with "
            "tf.clip_by_norm)",
        )
    if flat_forward and factor != 0:
        forward = f"`{'`, `'.join(piecewise_constant)}`" if piecewise_constant else "the forward"
        return Pattern(
            "straight-through estimator",
            f"{forward} is piecewise constant, so its true derivative is zero almost everywhere, and the custom "
            "gradient passes the upstream gradient through instead",
        )
    if clips and evidence.differs_only_where_flat:
        return Pattern(
            "straight-through estimator",
            "the forward clips its input and the custom gradient passes the upstream gradient through where the "
            "clipped forward is flat",
        )
    if factor is not None and true_derivative == "identity":
        return _scaled_identity(factor)
    if factor is not None and true_derivative is None and ops and "stop_gradient" not in ops:
        # A non-linear forward whose custom gradient ignores it: the upstream times a constant.
        if factor == 1:
            return Pattern(
                "straight-through estimator",
                "the custom gradient is the upstream gradient itself, whatever the forward computes",
            )
        return _scaled_identity(factor)
    if "stop_gradient" in ops:
        return Pattern(
            "stop_gradient-like forward",
            "the forward uses stop_gradient, so it is built to differentiate as something other than what it computes",
        )
    return None


def _scaled_identity(factor: float) -> Pattern | None:
    if abs(factor) <= STRUCTURE_RTOL:
        return Pattern("stopped gradient", "the custom gradient is zero: no gradient flows back through the op")
    if factor < 0:
        name = "gradient reversal" if np.isclose(factor, -1) else "scaled gradient reversal"
        return Pattern(name, f"the custom gradient is {factor:.6g} times the upstream gradient")
    if abs(factor - 1) < NEAR_ONE:
        return None
    return Pattern("scaled gradient", f"the custom gradient is {factor:.6g} times the upstream gradient")


def full_evidence(
    custom: np.ndarray,
    numerical: np.ndarray,
    tolerance: np.ndarray,
    judged: np.ndarray,
    square: slice | None,
    linearity: Linearity | None,
    ops: frozenset[str] | None,
    autodiff: np.ndarray | None = None,
) -> Evidence:
    """Evidence from dense Jacobians ([outputs, inputs]); `square`: the columns of the input shaped like the op's one
    output (a reversal layer's `x`, beside its hyper-parameters), where the forward may be the identity;
    `linearity`: how the custom gradient responds to the upstream gradient (measured on every check); `autodiff`:
    the forward's own Jacobian, when it was taken."""
    compared = judged & np.isfinite(numerical)
    true_derivative = None
    if compared.any():
        if np.all(np.abs(numerical[compared]) <= tolerance[compared]):
            true_derivative = "zero"
        elif square is not None:
            block = (slice(None), square)
            scale = _identity_factor(numerical[block], compared[block], tolerance[block])
            if scale is not None:
                true_derivative = "identity" if np.isclose(scale, 1, rtol=1e-3) else "scaled-identity"
    factor = None
    if square is not None:
        custom_block = custom[:, square]
        factor = _identity_factor(custom_block, np.isfinite(custom_block), None)
    response = linearity.response if linearity is not None else None
    with np.errstate(all="ignore"):
        differs = compared & (np.abs(custom - numerical) > tolerance)
        zero = np.abs(numerical) <= tolerance
        flat_columns = np.all(zero | ~compared, axis=0) & compared.any(axis=0)  # the forward flat in that element
        flows = (differs & (np.abs(custom) > tolerance)).any(axis=0)
        matches = None
        if autodiff is not None:
            agreeing = np.abs(autodiff - numerical) <= tolerance
            matches = bool(compared.any()) and bool(np.all(agreeing[compared]))
    flat = bool(differs.any()) and bool(np.all(np.abs(numerical[differs]) <= tolerance[differs]))
    return Evidence(ops, true_derivative, factor, response, flat, bool((flat_columns & flows).any()), matches)


def projected_evidence(
    custom_vjp: np.ndarray,
    upstream: np.ndarray,
    square: slice | None,
    linearity: Linearity | None,
    true_zero: bool,
    ops: frozenset[str] | None,
    located: tuple = (),
) -> Evidence:
    """Evidence in projection mode: `custom_vjp` = J^T `upstream`, measured; `square` as for `full_evidence`;
    `true_zero`: every probe's finite difference is within its noise while the custom gradient predicts more;
    `located`: the elements found wrong (`ElementComparison`s, components of the vector-Jacobian product), where a
    gradient flowing against a finite difference near zero shows the forward flat there."""
    factor = None
    if square is not None:
        block = custom_vjp[square]
        candidate = float(block @ upstream / (upstream @ upstream))
        factor = _rounded(candidate) if close(block, candidate * upstream) else None
    response = linearity.response if linearity is not None else None
    flows = any(e.custom != 0 and abs(e.numerical) <= NEAR_ONE * abs(e.custom) for e in located)
    return Evidence(ops, "zero" if true_zero else None, factor, response, flows_where_flat=flows)


def square_block(columns, rows) -> slice | None:
    """The columns of z (an input's elements) shaped like the op's one output, where the forward may be the
    identity; None with several outputs or no such input."""
    if len(rows.names) != 1:
        return None
    for shape, start, stop in zip(columns.shapes, columns.offsets, columns.offsets[1:]):
        if shape == rows.shapes[0]:
            return slice(int(start), int(stop))
    return None


def _identity_factor(matrix: np.ndarray, where: np.ndarray, tolerance: np.ndarray | None) -> float | None:
    """c when `matrix` is c times the identity at the entries `where` (within `tolerance`, or tightly), else None."""
    if matrix.shape[0] != matrix.shape[1] or not where.any():
        return None
    diagonal = np.diagonal(matrix)[np.diagonal(where)]
    if not diagonal.size:
        return None
    with np.errstate(all="ignore"):  # inf or NaN on the diagonal
        factor = float(np.median(diagonal))
        expected = factor * np.eye(matrix.shape[0], dtype=matrix.dtype)
        allowed = (
            tolerance[where]
            if tolerance is not None
            else STRUCTURE_RTOL * max(abs(factor), 1e-30) + np.finfo(matrix.dtype).eps
        )
        fits = np.all(np.abs(matrix[where] - expected[where]) <= allowed)
    return _rounded(factor) if fits else None


def _rounded(factor: float) -> float:
    """A factor as the user wrote it: -1, not -0.99999994 (float32 rounding)."""
    return float(f"{factor:.6g}") if factor else 0.0


def report_mismatch(
    findings: Findings,
    declared: bool,
    evidence: Evidence,
    where: str,
    listing: str,
    location: dict,
    diagnosis: str,
    autodiff_note: str,
) -> None:
    """Record a finite-difference mismatch: `surrogate-differs` when declared, else `fd-mismatch`, its message
    leading with what is wrong in one sentence (`diagnosis`: "dx is 1.5 times the finite differences at every
    element: a constant factor is off"; in its place what the measurements show: not linear in the upstream
    gradient, or the surrogate pattern it resembles), then the evidence.

    `where`: "at 3 of 25 Jacobian elements"-like; `listing`: the worst elements, custom against finite
    differences; `autodiff_note`: what autodiff of the forward gives there (declared only).
    """
    pattern = recognise(evidence)
    if declared:
        named = f" ({pattern.name})" if pattern else ""
        findings.surrogate = Surrogate(True, pattern.name if pattern else None, pattern.reason if pattern else None)
        findings.add(
            "surrogate-differs",
            "info",
            f"Declared surrogate gradient{named}: it differs from the true derivative (finite differences) {where}, "
            f"as intended. {listing}.{autodiff_note}",
            **location,
        )
        return
    lead, advice = diagnosis, ""
    if evidence.upstream_response == "nonlinear":
        lead = (
            "The custom gradient is not linear in the upstream gradient, as every derivative is: it must multiply "
            "the upstream gradient (by the local derivative), not transform it."
        )
    if pattern is not None:
        findings.surrogate = Surrogate(False, pattern.name, pattern.reason)
        lead = f"This looks like {pattern.phrase}: {pattern.reason}."
        advice = (
            " If the difference is intended, declare it with %%custom_gradient --surrogate (or surrogate=True): the "
            "report then shows how the surrogate differs instead of failing."
        )
    findings.add(
        "fd-mismatch",
        "error",
        (f"{lead} " if lead else "")
        + f"The custom gradient disagrees with finite differences {where}. {listing}."
        + advice,
        **location,
    )


def report_declared_match(findings: Findings) -> None:
    """A declared surrogate that equals the true derivative at the example: say so, the verdict stays a pass. (One
    that is not linear in the upstream gradient is no derivative at all, and was said so.)"""
    if any(problem.code == "surrogate-nonlinear" for problem in findings.problems):
        return
    findings.surrogate = Surrogate(True, None, None)
    findings.add(
        "surrogate-matches",
        "info",
        "Declared a surrogate gradient, but the custom gradient matches the true derivative (finite differences) "
        "at these inputs: check it where the surrogate is meant to differ (e.g. away from the identity region), "
        "or drop --surrogate so that a mismatch fails the check.",
    )


def autodiff_note(
    autodiff: np.ndarray | None,
    custom: np.ndarray,
    numerical: np.ndarray,
    differs: np.ndarray,
    tolerance: np.ndarray | float,
    autodiff_name: str,
    ops: frozenset[str] | None,
) -> str:
    """One sentence on autodiff of the forward where the surrogate differs, true of every such element (the listing
    quotes autodiff's value at each element it names)."""
    if autodiff is None:
        return f" {autodiff_name} gives no gradient through this forward."
    tolerance = np.broadcast_to(tolerance, custom.shape)[differs]
    values, surrogate_values, true_values = autodiff[differs], custom[differs], numerical[differs]
    with np.errstate(all="ignore"):
        if np.all(np.abs(values) <= tolerance):
            flat = [op for op in _PIECEWISE_CONSTANT if op in (ops or ())]
            because = f": `{'`, `'.join(flat)}` has derivative zero almost everywhere" if flat else " at these elements"
            return (
                f" {autodiff_name} of the forward is zero there{because}, so without the custom gradient no "
                "gradient would flow back through the op."
            )
        if np.all(np.abs(values - true_values) <= tolerance):
            return f" {autodiff_name} of the forward agrees with the true derivative there."
        if np.all(np.abs(values - surrogate_values) <= tolerance):
            return f" {autodiff_name} of the forward gives the surrogate's values there."
    return f" {autodiff_name} of the forward gives neither the true derivative nor the surrogate's values there."


def gradient_stoppers(ops: frozenset[str] | None, wording) -> str | None:
    """The forward's ops whose registered gradient is not their derivative, as a phrase ("`round` (its gradient is
    zero)"), or None when the traced forward has none (or was not traced)."""
    found = [f"`{op}` (its gradient is zero)" for op in _PIECEWISE_CONSTANT if op in (ops or ())]
    if "stop_gradient" in (ops or ()):
        found.append(f"`{wording.stop_gradient}`")
    if "python_function" in (ops or ()):
        found.append(f"{wording.python_function} (no gradient at all)")
    if "eager_python_function" in (ops or ()):
        found.append(f"{wording.eager_python_function} ({wording.eager_python_function_gradient})")
    return ", ".join(found) or None
