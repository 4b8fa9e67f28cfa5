"""The numbers phase: finite differences against the custom gradient, with dense Jacobians (`full.py`) up to
`full_threshold` elements, random projections (`projection/`) above; in float64 where the op accepts it, at the
precision it really computes in (`precision.py`); the second order (`second_order.py`); the sweep (`sweep.py`)."""

from __future__ import annotations

from gradmagic.checking import precision
from gradmagic.checking.differences import machine_epsilon
from gradmagic.checking.full import compare_full
from gradmagic.checking.projection import compare_projected
from gradmagic.checking.run import CheckRun, Evidence, OpFailed
from gradmagic.checking.second_order import compare_second_order
from gradmagic.checking.structure import python_numbers_hint
from gradmagic.checking.sweep import sweep_along
from gradmagic.frameworks.base import Layout
from gradmagic.report import Numerics, Sweep


def compare_numbers(run: CheckRun, evidence: Evidence) -> tuple[Numerics, Sweep | None]:
    """Finite differences against the custom gradient (full or projection mode), the second order, the sweep: the
    numerics and the sweep (None where not asked for or not drawn)."""
    options, findings = run.options, run.findings
    nothing = _nothing_to_compare(run)
    if nothing:
        return Numerics(mode="skipped", skipped_because=nothing), None
    elements = run.columns.size
    full = elements <= options.full_threshold
    if not full and options.order == 2:
        findings.add(
            "second-order-skipped",
            "info",
            f"The second-order check runs with dense Jacobians, up to full_threshold = "
            f"{options.full_threshold} elements; this op has {elements}. Check it at smaller inputs.",
        )
    try:
        numerics, precise = _compare_in_best_precision(run, full, evidence)
    except OpFailed as failed:  # the op failing at perturbed inputs, or inside a compiled function
        error = failed.error
        findings.add(
            "fd-error",
            "error",
            f"Evaluating `{findings.name}` for the finite differences (at inputs perturbed by a tiny step, "
            f"{findings.wording.compiled}) raised {type(error).__name__}: {findings.wording.cause(error)}"
            + python_numbers_hint(run.inputs, findings),
        )
        return Numerics(mode="skipped", skipped_because="the op failed at perturbed inputs"), None
    if not (full and options.sweep):
        return numerics, None
    return numerics, run.phase("sweep", 0.85, _sweep, precise, numerics)


def _sweep(run: CheckRun, precise: Layout, numerics: Numerics) -> Sweep | None:
    """The sweep along one element, or None with `sweep-unavailable` saying why it could not be computed."""
    try:
        return sweep_along(run, precise, numerics)
    except OpFailed as failed:  # the op failing away from the example point: the sweep is a view, say why
        error, findings = failed.error, run.findings
        findings.add(
            "sweep-unavailable",
            "info",
            f"The sweep could not be computed: {type(error).__name__}: {findings.wording.cause(error)}",
        )
        return None


def _nothing_to_compare(run: CheckRun) -> str | None:
    """Why there is no gradient value to compare (a verdict of "not checked"), or None."""
    inputs, trial = run.inputs.metas, run.trial.output_metas
    if not run.columns.size:
        if any(meta.dtype.startswith("complex") for meta in inputs):
            return (
                "complex inputs: gradmagic compares the gradients of real inputs only (TensorFlow's gradient of a "
                "complex input follows the conjugate convention, not checked yet)"
            )
        if any(meta.floating for meta in inputs):
            return "the floating inputs have no elements"
        return "no floating input or variable: integer, boolean and string inputs have no gradient"
    if not run.rows.size:
        if any(meta.dtype.startswith("complex") for meta in trial):
            return "complex outputs: gradmagic compares the gradients of real outputs only"
        if any(meta.floating for meta in trial):
            return "the floating outputs have no elements"
        if run.target.origin != "composite":
            dtypes = ", ".join(sorted({meta.dtype for meta in trial}))
            run.findings.add(
                "dead-gradient",
                "info",
                f"`{run.findings.name}` returns only {dtypes} outputs: no gradient flows through an integer, boolean "
                f"or string output in training (casting one to a float has no gradient), so its gradient function "
                "is never called there, and nothing here checks it. If it is meant to pass a gradient (a "
                "straight-through estimator), return a float output (cast to the input's float).",
            )
        return "no floating output: integer, boolean and string outputs have no gradient"
    return None


def _compare_in_best_precision(run: CheckRun, full: bool, evidence: Evidence) -> tuple[Numerics, Layout]:
    """The comparison in float64 where the op accepts it (float32 for an op of a 16-bit float that does not), else in
    its own precision; and the layout it ran in."""
    precise = precision.finest(run) if run.options.float64 else run.layout
    precise = _measure_precision(run, precise, evidence)
    problems = len(run.findings.problems)
    try:
        return _compare(run, precise, full, evidence), precise
    except OpFailed:
        if precise is run.layout:
            raise
        # The forward accepted the wider float but the gradient function did not (e.g. it mixes in float32
        # constants): compare in the op's own precision.
        del run.findings.problems[problems:]
        precision.refuse(run, precise)
        return _compare(run, run.layout, full, evidence), run.layout


def _measure_precision(run: CheckRun, layout: Layout, evidence: Evidence) -> Layout:
    """The layout finite differences run in, once the op's real precision there is measured (`run.effective`):
    inputs cast up from the op's own precision are dropped when it computes narrower inside anyway."""
    measured = precision.effective(run, layout, evidence.traced.raw)
    if measured == run.precision(layout):
        return layout
    if layout is not run.layout:  # cast up by gradmagic: the op's own precision serves as well
        precision.refuse(run, layout)
        layout = run.layout
    declared = run.precision(layout)
    if machine_epsilon(measured) <= machine_epsilon(declared):
        return layout
    run.effective = measured
    run.findings.add(
        "precision-measured",
        "info",
        f"`{run.findings.name}` takes and returns {declared} but computes with {measured} precision inside (measured: "
        f"its finite differences at {declared} steps are {measured} rounding). Steps and tolerances are those of "
        f"{measured}; a bug smaller than {measured}'s tolerance cannot be seen here.",
    )
    return layout


def _compare(run: CheckRun, layout: Layout, full: bool, evidence: Evidence) -> Numerics:
    if not full:
        return compare_projected(run, layout, evidence)
    numerics = compare_full(run, layout, evidence)
    if run.options.order == 2:
        run.phase("second order", 0.7, compare_second_order, layout, evidence.traced.raw)
    return numerics
