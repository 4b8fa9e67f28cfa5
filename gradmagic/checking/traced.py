"""The graph phase: the op's forward and backward traced together, as the framework compiles them, and drawn for the
report (`graph.py`); where tracing is how the framework compiles, the traced graph's run measured against the direct
call (`compiled.measure_compiled`). Put off to the op's next check for an op of thousands of ops."""

from __future__ import annotations

import dataclasses
from collections import Counter

from gradmagic.checking import surrogate
from gradmagic.checking.compiled import measure_compiled, report_compiled_failure
from gradmagic.checking.graph import DRAWN_OPS, build_graph
from gradmagic.checking.run import CheckRun, OpFailed, Traced
from gradmagic.frameworks.cache import cache_of


def trace(run: CheckRun) -> Traced:
    """The traced graph where the report shows it, the framework compiles by tracing (its run is the compiled run
    the structure checks' direct call is compared with), or the op is a composite (its traced gradients show the
    shapes its custom gradients hand on: a wrong shape of the right size hides otherwise, traced on every check)."""
    options, adapter, compared = run.options, run.adapter, run.compared
    composite = run.target.origin == "composite" and compared
    if not (options.graph or (options.tf_function and compared and adapter.graph_compiles) or composite):
        return Traced()
    if adapter.graph_compiles and adapter.mode == "eager" and not composite and _deferred(run):
        return Traced(deferred=True)
    return _traced(run)


#: An op whose forward ran this many of the framework's ops eagerly is not traced on its first check: tracing it with
#: its gradient takes 20 to 50 times as long as running them (6.6 s for a chain of 3,000 ops, measured), more than the
#: rest of the check. Decided by what the op is, never by a clock, so that a check's report is the same on a busy
#: machine. In TensorFlow 1's graph mode the structure run builds a graph already: no deferral there.
DEFERRED_TRACE_OPS = 1000
#: The key in an op's cache (`cache_of`) noting that its trace was put off once.
_DEFERRED = "gradient graph deferred"


def _deferred(run: CheckRun) -> bool:
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


def _traced(run: CheckRun) -> Traced:
    """The forward and backward of the op, traced at the example inputs, and drawn (see graph.py)."""
    inputs, trial = run.inputs, run.trial
    perturbed = [inputs.names[k] for k in run.layout.perturbable] + trial.variable_names
    arguments = [("input", name) for name in inputs.names] + [("upstream", f"d{name}") for name in trial.output_names]
    try:
        raw = run.gradient_graph(run.layout, trial.upstreams, arguments)
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
        return Traced()
    forward_ops = surrogate.forward_ops(raw)
    measured, compiled = False, None
    if run.options.tf_function and raw.run is not None:
        measured, compiled = True, measure_compiled(run, raw.run, raw)
    raw = dataclasses.replace(raw, run=None)  # measured: two N-sized arrays not kept at millions
    if not run.options.graph:
        return Traced(raw, forward_ops, measured=measured, compiled=compiled)
    if len(raw.ops) > DRAWN_OPS:
        passes = Counter(op.scope for op in raw.ops)
        run.findings.add(
            "graph-unavailable",
            "info",
            f"The gradient graph has {len(raw.ops):,} ops ({passes['forward']:,} in the forward, "
            f"{passes['backward']:,} in the backward): too many to draw in a report (over {DRAWN_OPS:,}). Check a "
            "smaller instance of the op (fewer layers or steps) to see its structure.",
        )
        return Traced(raw, forward_ops, measured=measured, compiled=compiled)
    graph = build_graph(raw, trial.output_names, [f"d{name}" for name in perturbed], fold=run.options.fold_graph)
    return Traced(raw, forward_ops, graph, measured=measured, compiled=compiled)
