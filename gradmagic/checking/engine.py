"""The check engine's `check`: a check as a sequence of named phases over one `CheckRun` (see the package's
docstring for the phases and where each lives)."""

from __future__ import annotations

from collections import Counter
from typing import Callable

from gradmagic.checking import precision, surrogate
from gradmagic.checking.arguments import lay_out, prepare_inputs
from gradmagic.checking.compiled import check_linearity, compare_compiled, report_compiled_failure, take_own_precision
from gradmagic.checking.differences import machine_epsilon
from gradmagic.checking.findings import Findings
from gradmagic.checking.full import compare_full
from gradmagic.checking.graph import DRAWN_OPS, build_graph
from gradmagic.checking.options import CheckOptions
from gradmagic.checking.projection import compare_projected, note_autodiff_rescued
from gradmagic.checking.run import CheckRun, OpFailed
from gradmagic.checking.second_order import compare_second_order
from gradmagic.checking.side_effects import OpEffects
from gradmagic.checking.structure import check_structure
from gradmagic.checking.sweep import sweep_along
from gradmagic.errors import GradmagicError
from gradmagic.frameworks import get_adapter
from gradmagic.frameworks.base import Layout
from gradmagic.frameworks.cache import cache_of
from gradmagic.report import Numerics, Report


def check(
    op: Callable,
    args: tuple,
    kwargs: dict | None = None,
    options: CheckOptions | None = None,
    progress: Callable[[float, str], None] | None = None,
    name_source: Callable[[str | None], str | None] | None = None,
) -> Report:
    """Check the custom gradient of `op` at the example inputs `args` (and keyword arguments `kwargs`).

    `progress`, if given, is called with the fraction done (0 to 1) and the
    phase starting; `name_source` turns the op's file name into what the user
    calls it ("Cell In[3]").
    """
    options = options or CheckOptions()
    adapter = get_adapter(options.framework)
    target = adapter.resolve(op)
    source = name_source(target.filename) if name_source else target.filename
    findings = Findings(target.name, adapter.wording, source)
    try:  # graph mode: the check builds and runs in a graph and session of the op's own
        with adapter.check_scope(target), OpEffects(adapter, target.raw) as effects:  # the op's effects, undone
            run = CheckRun(adapter, target, options, findings, progress or (lambda fraction, phase: None))
            run.effects = effects
            with run.phase("structure", 0.0, timing="structure"):
                prepare_inputs(run, args, dict(kwargs or {}))
                if run.inputs is not None:
                    check_structure(run)
            if run.trial is None or run.failed:
                return run.report()
            lay_out(run)
            compared = run.rows.size and run.columns.size
            # Where tracing is compiling, the graph is also the compiled run; a composite's traced gradients show the
            # shapes its custom gradients hand on (traced on every check: a wrong shape of the right size hides
            # otherwise).
            composite = run.target.origin == "composite" and compared
            deferred = False
            if options.graph or (options.tf_function and compared and adapter.graph_compiles) or composite:
                deferred = adapter.graph_compiles and adapter.mode == "eager" and not composite and _trace_deferred(run)
                if not deferred:
                    with run.phase("graph", 0.15, timing="graph"):
                        trace_graph(run)
            if (options.tf_function or options.numbers) and compared and not run.failed:
                with run.phase(adapter.compiled, 0.3, timing="tf_function"):
                    if take_own_precision(run):
                        if options.tf_function and not deferred:
                            compare_compiled(run)
                        run.trial.let_go(gradients_only=True)  # compared: not needed again
                        if not run.failed:
                            check_linearity(run)
            if options.numbers and not run.failed:
                with run.phase("finite differences", 0.45, timing="numerics"):
                    compare_numbers(run)
            if run.state is not None:  # the gradient function changed state again in the calls since: put it back
                run.state.restore()
            return run.report()
    except Exception as error:  # not the op's: its failures are findings (`OpFailed`, the structure checks)
        if not isinstance(error, GradmagicError) and hasattr(error, "add_note"):  # Python 3.11 on
            error.add_note(f"This is an error in gradmagic's own code, not in `{target.name}`; please report it.")
        raise


#: An op whose forward ran this many of the framework's ops eagerly is not traced on its first check: tracing it with
#: its gradient takes 20 to 50 times as long as running them (6.6 s for a chain of 3,000 ops, measured), more than the
#: rest of the check. Decided by what the op is, never by a clock, so that a check's report is the same on a busy
#: machine. In TensorFlow 1's graph mode the structure run builds a graph already: no deferral there.
DEFERRED_TRACE_OPS = 1000
#: The key in an op's cache (`cache_of`) noting that its trace was put off once.
_DEFERRED = "gradient graph deferred"


def _trace_deferred(run: CheckRun) -> bool:
    """Whether to leave the trace of the gradient graph (and the comparison with the compiled run it gives) to the
    op's next check, with an info saying so: on the first check of an op that runs thousands of ops."""
    ops = run.trial.ops
    cache = cache_of(run.target.raw)
    if ops is None or ops < DEFERRED_TRACE_OPS or cache.get(_DEFERRED):
        return False
    cache[_DEFERRED] = True
    wording = run.findings.wording
    run.findings.add(
        "graph-unavailable",
        "info",
        f"Not traced on this first check: the forward of `{run.findings.name}` ran {ops:,} ops, and tracing it "
        f"with its gradient function, to run them {wording.compiled}, takes 20 to 50 times as long as running them "
        f"once. The gradient graph and the comparison with the op run {wording.compiled} come with its next check "
        "(the cell run again unchanged, or %gradcheck).",
    )
    return True


def trace_graph(run: CheckRun) -> None:
    """The forward and backward of the op, traced at the example inputs (see graph.py)."""
    inputs, trial = run.inputs, run.trial
    perturbed = [inputs.names[k] for k in run.layout.perturbable] + trial.variable_names
    arguments = [("input", name) for name in inputs.names] + [("upstream", f"d{name}") for name in trial.output_names]
    try:
        run.raw_graph = run.gradient_graph(run.layout, trial.upstreams, arguments)
    except OpFailed as failed:
        error = failed.error
        if run.adapter.graph_compiles and run.options.tf_function:  # the op failing compiled: a mistake of the op's
            report_compiled_failure(run, error)
        else:  # the op traced in a graph: its failures are reported elsewhere; the graph is a view
            run.findings.add(
                "graph-unavailable",
                "info",
                f"The gradient graph could not be traced: {type(error).__name__}: {run.findings.wording.cause(error)}",
            )
        return
    run.forward_ops = surrogate.forward_ops(run.raw_graph)
    if run.options.graph and len(run.raw_graph.ops) > DRAWN_OPS:
        passes = Counter(op.scope for op in run.raw_graph.ops)
        run.findings.add(
            "graph-unavailable",
            "info",
            f"The gradient graph has {len(run.raw_graph.ops):,} ops ({passes['forward']:,} in the forward, "
            f"{passes['backward']:,} in the backward): too many to draw in a report (over {DRAWN_OPS:,}). Check a "
            "smaller instance of the op (fewer layers or steps) to see its structure.",
        )
    elif run.options.graph:
        run.graph = build_graph(
            run.raw_graph, trial.output_names, [f"d{name}" for name in perturbed], fold=run.options.fold_graph
        )


def compare_numbers(run: CheckRun) -> None:
    """Finite differences against the custom gradient (full or projection mode), the second order, the sweep."""
    options, findings = run.options, run.findings
    nothing = _nothing_to_compare(run)
    if nothing:
        run.numerics = Numerics(mode="skipped", skipped_because=nothing)
        return
    elements = run.columns.size
    full = elements <= options.full_threshold
    if not full:  # what projection mode needs of the own-precision products, taken before the wider float's runs
        note_autodiff_rescued(run)
    if not full and options.order == 2:
        findings.add(
            "second-order-skipped",
            "info",
            f"The second-order check runs with dense Jacobians, up to full_threshold = "
            f"{options.full_threshold} elements; this op has {elements}. Check it at smaller inputs.",
        )
    try:
        precise = _compare_in_best_precision(run, full)
    except OpFailed as failed:  # the op failing at perturbed inputs, or inside a compiled function
        error = failed.error
        findings.add(
            "fd-error",
            "error",
            f"Evaluating `{findings.name}` for the finite differences (at inputs perturbed by a tiny step, "
            f"{findings.wording.compiled}) raised {type(error).__name__}: {findings.wording.cause(error)}",
        )
        run.numerics = Numerics(mode="skipped", skipped_because="the op failed at perturbed inputs")
        return
    if full and options.sweep:
        with run.phase("sweep", 0.85):
            try:
                run.sweep = sweep_along(run, precise)
            except OpFailed as failed:  # the op failing away from the example point: the sweep is a view, say why
                error = failed.error
                findings.add(
                    "sweep-unavailable",
                    "info",
                    f"The sweep could not be computed: {type(error).__name__}: {findings.wording.cause(error)}",
                )


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
        return "no floating output: integer, boolean and string outputs have no gradient"
    return None


def _compare_in_best_precision(run: CheckRun, full: bool) -> Layout:
    """The comparison in float64 where the op accepts it (float32 for an op of a 16-bit float that does not), else in
    its own precision; the layout it ran in."""
    precise = precision.finest(run) if run.options.float64 else run.layout
    precise = _measure_precision(run, precise)
    problems = len(run.findings.problems)
    try:
        _compare(run, precise, full)
    except OpFailed:
        if precise is run.layout:
            raise
        # The forward accepted the wider float but the gradient function did not (e.g. it mixes in float32
        # constants): compare in the op's own precision.
        del run.findings.problems[problems:]
        precision.refuse(run, precise)
        precise = run.layout
        _compare(run, precise, full)
    return precise


def _measure_precision(run: CheckRun, layout: Layout) -> Layout:
    """The layout finite differences run in, once the op's real precision there is measured (`run.effective`):
    inputs cast up from the op's own precision are dropped when it computes narrower inside anyway."""
    measured = precision.effective(run, layout)
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


def _compare(run: CheckRun, layout: Layout, full: bool) -> None:
    if not full:
        run.numerics = compare_projected(run, layout)
        return
    run.numerics = compare_full(run, layout)
    if run.options.order == 2:
        with run.phase("second order", 0.7):
            compare_second_order(run, layout)
