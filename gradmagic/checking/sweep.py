"""The sweep: the op along one input element, so a NaN region or a kink is visible at a glance.

One element of one input moves along a range around the example point while
everything else stays put. Along it: the output element it drives, the
derivative through the custom gradient and through the forward's own ops
(in the op's dtype, as the user runs it), and central differences (in the
dtype the finite differences ran in). It is drawn when the input is a scalar,
or when the op is element-wise in it (output[i] depends on input[i] alone,
read off the numerical Jacobian, its non-finite entries aside: a NaN where the forward leaves its domain at one
element says nothing of the others), so the curve is the op's scalar function. Where no pair suits, the report
says why (`sweep-unavailable`, an info the views show in place of the figure).
"""

from __future__ import annotations

import numpy as np

from gradmagic.checking.differences import Axis, relative_step, rounded_to, step_sizes
from gradmagic.checking.run import CheckRun
from gradmagic.frameworks.base import Layout
from gradmagic.report import JacobianBlock, Numerics, Problem, Sweep, element_label

#: Off-diagonal numerical derivatives below this fraction of the largest mark an element-wise block.
ELEMENTWISE_FRACTION = 1e-12
#: An element-wise block is read off its finite off-diagonal entries; at least this fraction of them must be finite.
KNOWN_FRACTION = 0.5


def sweep_along(run: CheckRun, precise: Layout, numerics: Numerics) -> Sweep | None:
    """The sweep of the first suitable (input, output) pair, preferring the input a problem names; None if none.

    `precise` is the layout the finite differences ran in, `numerics` what they found; the output and the
    derivatives through the custom gradient and autodiff are in the op's own precision, as the user runs it.
    """
    columns, rows, options, problems = run.columns, run.rows, run.options, run.findings.problems
    choice = _choose(numerics.jacobians, problems, columns, options.sweep_element)
    if choice is None:
        run.findings.add("sweep-unavailable", "info", unsweepable(numerics.jacobians, columns, rows))
        return None
    block, element, output_element, elementwise = choice
    column = int(columns.offsets[columns.names.index(block.input)]) + element
    row = int(rows.offsets[rows.names.index(block.output)]) + output_element
    z = run.z(run.layout)
    if elementwise:  # the same function at every element: the range covers all the example's values
        values = z[columns.offsets[columns.names.index(block.input)] :][: block.shape[1]]
    else:
        values = z[column : column + 1]
    own = run.precision(run.layout)
    points = rounded_to(_points(values, options.sweep_range, options.sweep_points).astype(z.dtype), own)

    along = np.repeat(z[None], points.size, axis=0)
    along[:, column] = points
    one_hot = np.zeros((1, rows.size), z.dtype)
    one_hot[0, row] = 1
    vjps = run.vjps(run.layout, along, one_hot)

    z_precise = run.z(precise)
    centres = points.astype(z_precise.dtype)
    numerical_dtype = run.precision(precise)
    steps = step_sizes(centres, relative_step(numerical_dtype, options.eps), numerical_dtype)
    shifted = np.zeros((2 * points.size, z_precise.size), z_precise.dtype)
    shifted[:, column] = np.concatenate([centres + steps, centres - steps]) - z_precise[column]
    evaluations = run.evaluate(precise, shifted)[0, :, row]
    with np.errstate(all="ignore"):
        numerical = (evaluations[: points.size] - evaluations[points.size :]) / (2 * steps)

    name, index = columns.label(column)
    output_name, output_index = rows.label(row)
    kinks = tuple(
        float(z[column])
        for problem in problems
        if problem.code == "nondifferentiable-point"
        and problem.location is not None
        and (problem.location.input or problem.location.variable) == name
        and tuple(problem.location.index or ()) == index
    )
    return Sweep(
        input=name,
        index=index,
        output=output_name,
        output_index=output_index,
        example=float(z[column]),
        points=_floats(points),
        values=_floats(vjps.outputs[:, row]),
        custom=_floats(vjps.custom[:, 0, column]),
        autodiff=None if vjps.autodiff is None else _floats(vjps.autodiff[:, 0, column]),
        numerical=_floats(numerical),
        dtype=own,
        numerical_dtype=numerical_dtype,
        elementwise=elementwise,
        kinks=kinks,
    )


def _choose(
    blocks: tuple[JacobianBlock, ...],
    problems: list[Problem],
    columns: Axis,
    wanted: tuple[str, tuple[int, ...]] | None = None,
) -> tuple[JacobianBlock, int, int, bool] | None:
    """(block, input element, output element, element-wise) to sweep, or None when no block suits: the `wanted`
    element where it suits (the one a view showed, kept across re-checks), else the input a problem names."""
    suitable = []
    for block in blocks:
        rows, cols = block.shape
        numerical = np.array(block.numerical, dtype=float).reshape(rows, cols)
        if cols == 1 and rows >= 1:
            suitable.append((block, False, numerical))
        elif rows == cols and _diagonal(numerical):
            suitable.append((block, True, numerical))
    if not suitable:
        return None

    def located(problem: Problem, block: JacobianBlock) -> bool:
        """Whether `problem` is at `block`: its input (or variable), and its output where the problem names one."""
        location = problem.location
        return (
            location is not None
            and block.input in (location.input, location.variable)
            and location.output in (None, block.output)
        )

    if wanted is not None:
        name, index = wanted
        for block, elementwise, numerical in suitable:
            shape = columns.shapes[columns.names.index(block.input)]
            if block.input == name and (len(index) == len(shape) and all(0 <= i < d for i, d in zip(index, shape))):
                if elementwise:
                    element = int(np.ravel_multi_index(index, shape)) if shape else 0
                    return block, element, element, True
                return _elements(block, elementwise, numerical, None, columns)
    ranked = sorted(problems, key=lambda p: ("error", "warning", "info").index(p.severity))
    for problem in ranked:
        for block, elementwise, numerical in suitable:
            if located(problem, block):
                return _elements(block, elementwise, numerical, problem, columns)
    block, elementwise, numerical = suitable[0]
    return _elements(block, elementwise, numerical, None, columns)


def _elements(block, elementwise, numerical, problem, columns: Axis):
    shape = columns.shapes[columns.names.index(block.input)]
    if elementwise:
        element = 0
        if problem is not None and problem.location.index is not None and shape:
            element = int(np.ravel_multi_index(problem.location.index, shape))
        return block, element, element, True
    output_element = int(np.nanargmax(np.abs(numerical[:, 0]))) if np.isfinite(numerical).any() else 0
    return block, 0, output_element, False


def _diagonal(numerical: np.ndarray) -> bool:
    """Whether a square numerical Jacobian is diagonal (an element-wise op), read off its finite entries: a NaN
    where the forward leaves its domain at one element (a square root at 0) says nothing of the others. Most
    off-diagonal entries must be finite to tell."""
    if numerical.shape[0] < 2:
        return False
    off_diagonal = numerical[~np.eye(numerical.shape[0], dtype=bool)]
    known = off_diagonal[np.isfinite(off_diagonal)]
    finite = np.abs(numerical[np.isfinite(numerical)])
    if known.size < KNOWN_FRACTION * off_diagonal.size or not finite.size:
        return False
    return bool(np.all(np.abs(known) <= ELEMENTWISE_FRACTION * finite.max()))


def unsweepable(blocks: tuple[JacobianBlock, ...], columns: Axis, rows_axis: Axis) -> str:
    """Why no (input, output) pair can be swept, in a sentence the views show in place of the figure."""
    if not blocks:
        return (
            "No sweep: it is read off the Jacobians (a scalar input, or an op element-wise in an input), which are "
            "kept up to 4,096 entries; this op's are larger. Check it at a smaller input to sweep it."
        )
    reasons = []
    for block in blocks:
        rows, cols = block.shape
        numerical = np.array(block.numerical, dtype=float).reshape(rows, cols)
        pair = f"d {block.output} / d {block.input}"
        if rows != cols:
            reasons.append(f"{pair} is {rows} × {cols}, not square")
            continue
        off_diagonal = ~np.eye(rows, dtype=bool)
        known = np.isfinite(numerical) & off_diagonal
        if known.sum() < KNOWN_FRACTION * off_diagonal.sum():
            reasons.append(
                f"{pair} has finite differences at only {int(known.sum())} of its {int(off_diagonal.sum())} "
                "off-diagonal entries, too few to tell whether the op is element-wise"
            )
            continue
        where = np.where(known, np.abs(numerical), -np.inf)
        i, j = np.unravel_index(int(np.argmax(where)), where.shape)
        output = element_label(*rows_axis.label(int(rows_axis.offsets[rows_axis.names.index(block.output)]) + i))
        input_ = element_label(*columns.label(int(columns.offsets[columns.names.index(block.input)]) + j))
        reasons.append(f"{pair} is not diagonal: d {output} / d {input_} = {numerical[i, j]:.4g}")
    return (
        "No sweep: it needs a scalar input or an op element-wise in an input (output[i] depending on input[i] alone), "
        f"and {'; '.join(reasons)}."
    )


def _points(values: np.ndarray, given: tuple[float, float] | None, count: int) -> np.ndarray:
    """`count` points over `given`, or over the example's values widened by a quarter of their span on each side."""
    if given is not None:
        start, stop = float(given[0]), float(given[1])
    else:
        finite = values[np.isfinite(values)].astype(float)
        low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
        pad = (high - low) / 4 if high > low else max(1.0, abs(low))
        start, stop = low - pad, high + pad
    return np.linspace(start, stop, count)


def _floats(values: np.ndarray) -> tuple[float, ...]:
    return tuple(float(v) for v in np.asarray(values, dtype=float))
