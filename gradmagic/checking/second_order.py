"""Order 2: the custom gradient, as a function of the inputs, against its finite differences.

h(z) = J(z)^T u for a random upstream u; its Jacobian through autodiff of
the gradient function is what nested tapes (Hessians, gradient penalties)
compute, and central differences of h say what it should be.
"""

from __future__ import annotations

import numpy as np

from gradmagic.checking.differences import Axis, central_differences, central_points, judge, steps_for, tolerances
from gradmagic.checking.full import loose_advice, report_listing, too_loose
from gradmagic.checking.run import CheckRun
from gradmagic.frameworks.base import Layout, RawGraph
from gradmagic.report import element_label


def compare_second_order(run: CheckRun, layout: Layout, graph: RawGraph | None) -> None:
    """`second-order-mismatch` where the derivative of the custom gradient disagrees with its finite differences."""
    options, findings, columns = run.options, run.findings, run.columns
    z = run.z(layout)
    rtol, atol = tolerances(run.precision(layout), options.rtol, options.atol)
    steps = steps_for(z, *run.dtypes_and_sizes(layout), options.eps)
    upstream = np.random.default_rng(options.seed).standard_normal(run.rows.size).astype(z.dtype)
    evaluations = run.vjps(layout, central_points(z, steps), upstream[None], autodiff=False).custom[:, 0]
    plus, minus = evaluations[1 : z.size + 1], evaluations[z.size + 1 :]
    jacobian = run.second_order(layout, upstream)
    numerical_t, _, error_t = central_differences(plus, minus, jacobian, steps, rtol, atol)
    ranked, judged, mismatched = judge(numerical_t, error_t, np.zeros(z.size, bool))
    gradients = Axis(tuple(f"d{name}" for name in columns.names), columns.shapes)
    if not mismatched.any():
        loose = too_loose(numerical_t.T, judged, run.precision(layout), rtol, atol)
        if loose is not None:  # nothing judged: a wrong derivative of the gradient would have passed too
            largest, row, column = loose
            name, index = columns.label(column)
            where = f"d {element_label(*gradients.label(row))} / d {element_label(name, index)}"
            advice = loose_advice(options.label("atol"), atol, largest, where, run.precision(layout))
            findings.add("second-order-skipped", "info", f"The second order was not judged: {advice}")
        return
    listing, (_, column) = report_listing(
        ranked,
        mismatched,
        columns,
        gradients,
        lambda row, column: (
            f"through the gradient function {jacobian[row, column]:.6g}, "
            f"finite differences {numerical_t[column, row]:.6g}"
        ),
    )
    name, index = columns.label(int(column))
    findings.add(
        "second-order-mismatch",
        "error",
        f"Second order: the derivative of the custom gradient (what nested tapes compute) disagrees with finite "
        f"differences of the custom gradient at {int(mismatched.sum())} of {mismatched.size} elements. "
        + "; ".join(listing)
        + ". "
        + _why(run, graph),
        input=name,
        index=index,
    )


def _why(run: CheckRun, graph: RawGraph | None) -> str:
    """What the second-order mismatch says about the gradient function, in agreement with the first order's verdict
    and with what the gradient function calls."""
    wording = run.findings.wording
    if any(problem.code == "fd-mismatch" for problem in run.findings.problems):
        return (
            "The gradient function is already wrong at first order here (fd-mismatch): fix that first, its "
            "derivative follows."
        )
    if graph is not None and any(op.scope == "backward" and op.meaning == "custom_gradient" for op in graph.ops):
        return (
            "The gradient function is right at this point, and it calls a custom-gradient op of its own: nested "
            "tapes differentiate that op through its custom gradient, which is what disagrees. Check that op "
            "(`gradmagic.check` or %gradcheck on it) at the values the gradient function gives it."
        )
    return (
        "The gradient function is right at this point but its own ops do not differentiate to the second "
        f"derivative: compute it from differentiable tensors (not constants or {wording.stop_gradient}), or give it "
        "a custom gradient too." + wording.second_order
    )
