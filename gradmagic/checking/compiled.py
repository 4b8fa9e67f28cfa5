"""The op's gradient as the framework takes it, compiled (`tf.function`, `jax.jit`, a `tf.compat.v1` Session, Keras's
`torch.autograd.Function`), in one call at the example point in the op's own precision: against what the
structure checks' direct call of the forward and the gradient function returned, and for linearity in the upstream
gradient (`linearity.py`). In full mode the same call takes every row of the Jacobian, which the numbers phase
reuses.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gradmagic.checking import linearity, precision
from gradmagic.checking.differences import EPSILONS, Axis, coarser, machine_epsilon, rounding_allowance
from gradmagic.checking.findings import listing
from gradmagic.checking.linearity import Linearity
from gradmagic.checking.run import CheckRun, CompiledDifference, Evidence, OpFailed, OwnPrecision, Traced, flat_upstream
from gradmagic.checking.structure import direct_call, python_numbers_hint, shape_advice
from gradmagic.frameworks.base import Layout, RawGraph, Vjps
from gradmagic.report import Surrogate, element_label


def compile_and_judge(run: CheckRun, traced: Traced) -> Evidence:
    """The compiled phase: the own-precision products (`take_own_precision`), the comparison of the compiled run
    with the direct call (`compare_compiled`), the linearity in the upstream (`check_linearity`); what the numbers
    phase needs of them (full mode's Jacobians; projection mode only where autodiff alone is NaN/Inf)."""
    options = run.options
    if not ((options.tf_function or options.numbers) and run.compared):
        return Evidence(traced)
    own = take_own_precision(run, traced)
    if own is None:
        return Evidence(traced)
    if options.tf_function and not traced.deferred:
        compare_compiled(run, traced, own)
    run.trial.let_go(gradients_only=True)  # compared: not needed again
    if run.failed:
        return Evidence(traced, own)
    own, found = check_linearity(run, own)
    if own.jacobian is not None:
        return Evidence(traced, own, found)
    return Evidence(traced, None, found, rescued(own))  # N-sized products projection mode does not need


def rescued(own: OwnPrecision) -> tuple[int, int] | None:
    """Where the framework's own gradient is NaN/Inf and the custom one is not, in the op's own precision for the
    trial's random upstream: (how many elements, the first), or None."""
    if own.trial.autodiff is None:
        return None
    with np.errstate(all="ignore"):
        fixed = ~np.isfinite(own.trial.autodiff[0, 0]) & np.isfinite(own.trial.custom[0, 0])
    return (int(fixed.sum()), int(np.flatnonzero(fixed)[0])) if fixed.any() else None


def take_own_precision(run: CheckRun, traced: Traced) -> OwnPrecision | None:
    """The own-precision products: the trial's upstream with autodiff (and in full mode the Jacobians), and the
    linearity probes through the custom gradient alone; `graph-mismatch` or `grad-shape` (None) when they fail."""
    layout = run.layout
    z = run.z(layout)
    upstream = flat_upstream(run, z.dtype)
    full = run.options.numbers and run.columns.size <= run.options.full_threshold
    try:
        trial = run.vjps(layout, z[None], upstream[None], jacobian=full)
        probes = linearity.Probes(upstream, run.options.seed, run.precision(layout))
        if probes.batched:
            gradients = run.vjps(layout, z[None], probes.rows(), autodiff=False).custom[0]
            gradient_of = gradients.__getitem__
        else:  # at millions of elements, one upstream at a time, in `check_linearity`

            def gradient_of(k: int) -> np.ndarray:
                return run.vjps(layout, z[None], probes.row(k)[None], autodiff=False).custom[0, 0]

        own = OwnPrecision(trial, gradient_of)
    except OpFailed as failed:  # the framework's own error about the user's op
        report_compiled_failure(run, failed.error)
        return None
    return own if _gradients_have_the_inputs_shapes(run, own, traced.raw) else None


def _gradients_have_the_inputs_shapes(run: CheckRun, own: OwnPrecision, graph: RawGraph | None) -> bool:
    """`grad-shape` (False) when the gradient taken through the custom gradients a composite reaches has another
    shape than its input: one of them returned a gradient of the wrong shape, which the framework passed on
    unchecked (a decorated op's gradients were checked one by one before). The shapes are the traced graph's (its
    downstream gradients); without one, the numbers of elements."""
    columns, findings = run.columns, run.findings
    found = own.trial.custom.shape[-1]
    shapes = _traced_gradient_shapes(run, graph)
    if shapes is None or found != columns.size:
        if found == columns.size:
            return True
        inputs = ", ".join(f"`{name}` {list(shape)}" for name, shape in zip(columns.names, columns.shapes))
        findings.add(
            "grad-shape",
            "error",
            f"The gradient taken through the custom gradients that `{findings.name}` reaches{_reached(run)} has "
            f"{found} element{'s' * (found != 1)} where its inputs ({inputs}) have {columns.size}: a custom gradient "
            "returns a gradient "
            "of another shape than its input, and the framework passed it on without a check. After a broadcast, "
            "sum the gradient over the broadcast axes (and reshape it to the input's shape).",
        )
        return False
    wrong = [(name, shape, got) for name, shape, got in zip(columns.names, columns.shapes, shapes) if got != shape]
    for name, shape, got in wrong:
        findings.add(
            "grad-shape",
            "error",
            f"The gradient for input `{name}` taken through the custom gradients that `{findings.name}` "
            f"reaches{_reached(run)} has shape {list(got)} but `{name}` has shape {list(shape)}: one of them returns "
            f"a gradient of another shape than its input; {findings.wording.wrong_shape}"
            f"{shape_advice(name, shape, got, False, findings.wording)} A check of the custom-gradient op itself names "
            "its gradient and the line that returns it.",
            input=name,
        )
    return not wrong


def _traced_gradient_shapes(run: CheckRun, graph: RawGraph | None) -> list[tuple] | None:
    """The shape of each gradient in z's order (the perturbable inputs', then the variables') as the traced graph
    computes it, or None without a graph (or one whose shapes are not all known). A decorated op's own gradients
    were checked one by one (`structure.py`), as they come back from its gradient function: None for it."""
    if run.target.origin != "composite" or graph is None or len(graph.gradients) != len(run.columns.names):
        return None
    producers = {op.name: op for op in graph.ops}
    shapes = []
    for name, index in graph.gradients:
        op = producers.get(name)
        shape = tuple(op.outputs[index][0]) if op is not None and index < len(op.outputs) else None
        if shape is None or any(dimension is None for dimension in shape):
            return None
        shapes.append(shape)
    return shapes


def _reached(run: CheckRun) -> str:
    reached = run.trial.reached
    return f" ({listing(list(reached))})" if reached else ""


def report_compiled_failure(run: CheckRun, error: Exception) -> None:
    """`graph-mismatch`: the op works directly, but its gradient taken compiled fails with `error`."""
    findings = run.findings
    wording = findings.wording
    cause = wording.cause(error)
    variables = [name for name, meta in zip(run.inputs.names, run.inputs.metas) if meta is not None and meta.name]
    advice = wording.compiled_failure_advice(cause)
    if variables and wording.variable_input:  # the forward used the variable itself (`.assign`), eagerly only
        advice = (
            f"{listing(variables)} {'is a variable' if len(variables) == 1 else 'are variables'}: "
            f"{wording.compiled}, {wording.variable_input}, so the forward can use its value (arithmetic), not the "
            "variable's methods or attributes (`.assign`, `.trainable`). An op that updates a variable reads it from "
            f"outside (the gradient function then takes `variables=`). {advice}"
        )
    findings.add(
        "graph-mismatch",
        "error",
        f"`{findings.name}` works {wording.direct} but taking its gradient {wording.compiled} fails: "
        f"{type(error).__name__}{': ' + cause.rstrip('.') if cause else ''}. {advice}".rstrip()
        + python_numbers_hint(run.inputs, findings),
    )


def measure_compiled(run: CheckRun, compiled: Vjps, graph: RawGraph | None) -> CompiledDifference | None:
    """The largest difference between the `compiled` run's outputs and gradients and the direct call's (the trial) by
    more than rounding in the precision the op computes in (its tensors' dtypes, or a narrower float its traced
    `graph` computes in: float16 inside a float32 op); in a 16-bit float, a difference beyond a few roundings of the
    tensor's largest element is rounding when it vanishes in a wider float the op accepts (`precision.finest`), where
    the same two runs are compared again. None where they agree."""
    trial, layout = run.trial, run.layout
    eager_gradients = None
    if trial.gradients is not None:  # a composite has no gradient function of its own to call directly
        eager_gradients = [trial.gradients[k] for k in layout.perturbable] + list(trial.variable_gradients or [])
    eager_outputs = [output for output, meta in zip(trial.outputs, trial.output_metas) if meta.floating]
    found = _largest_difference(run, layout, eager_outputs, eager_gradients, compiled, graph)
    wider = precision.finest(run) if found is not None and found.rounding_bound else layout
    if found is None or wider is layout:
        return found
    try:
        in_wider = _difference_in(run, wider, graph)
    except OpFailed:  # the op fails in the wider float after all: judged in its own
        in_wider = found
    if in_wider is None:  # the same two runs agree there: the difference was the op's rounding
        return None
    return dataclasses.replace(found, wider=run.precision(wider), in_wider=in_wider.difference)


def compare_compiled(run: CheckRun, traced: Traced, own: OwnPrecision) -> None:
    """`graph-mismatch` when the compiled gradient gives other outputs or gradients than the direct call beyond
    rounding (`measure_compiled`): the gradient graph's run, measured by the graph phase where tracing is how the
    framework compiles (`traced.compiled`), else the own-precision call."""
    if traced.measured:
        found = traced.compiled
    else:
        found = measure_compiled(run, Vjps(own.outputs[None], own.trial.custom[:, :1], None), traced.raw)
    if found is None:
        return
    findings, wording = run.findings, run.findings.wording
    measured = f"largest difference {found.difference:.3g} at {found.element}"
    if found.rounding_bound:
        measured += f", where {found.precision} rounding allows {found.allowed:.3g}"
        if found.in_wider is not None:
            measured += f"; in {found.wider}, {found.in_wider:.3g}"
    findings.add(
        "graph-mismatch",
        "error",
        f"`{findings.name}` gives a different {found.what} (#{found.position}) {wording.direct} and "
        f"{wording.compiled}: {measured}. Python-side state or randomness in the op behaves differently when traced.",
    )


def _largest_difference(
    run: CheckRun, layout: Layout, eager_outputs, eager_gradients, compiled: Vjps, graph: RawGraph | None
):
    """The first output or gradient whose direct and compiled values differ beyond rounding, or None."""
    adapter = run.adapter
    # The narrowest float the traced graph computes in bounds the rounding of every output and gradient.
    traced = precision.traced_floats(graph)
    inside = traced[-1] if traced else None
    output_precisions = [coarser(dtype, inside) for dtype in _output_precisions(run, layout)]
    compared = [("output", eager_outputs, compiled.outputs[0], run.rows, output_precisions)]
    if eager_gradients is not None:
        gradient_axis = Axis(tuple(f"d{name}" for name in run.columns.names), run.columns.shapes)
        gradient_precisions = [coarser(dtype, inside) for dtype in run.dtypes_and_sizes(layout)[0]]
        compared.append(("gradient", eager_gradients, compiled.custom[0, 0], gradient_axis, gradient_precisions))
    for what, eager, values, axis, precisions in compared:
        for position, (value, start, stop) in enumerate(zip(eager, axis.offsets, axis.offsets[1:])):
            in_graph = values[start:stop]
            value = np.zeros_like(in_graph) if value is None else np.ravel(adapter.to_numpy(value))
            if value.size != in_graph.size:  # a gradient of another shape, which the framework fixed: grad-shape
                continue
            allowed = rounding_allowance(value, in_graph, precisions[position])
            with np.errstate(invalid="ignore", over="ignore"):  # in the values' own dtype: no copies at millions
                difference = np.abs(value - in_graph)
                beyond = ~(difference <= allowed)
                if beyond.any():  # equal values (infinities too) and NaN on both sides agree
                    beyond &= ~((value == in_graph) | (np.isnan(value) & np.isnan(in_graph)))
            if beyond.any():
                worst = int(np.argmax(np.where(beyond, np.nan_to_num(difference, nan=np.inf), -1)))
                name, index = axis.label(int(start) + worst)
                return CompiledDifference(
                    what,
                    position,
                    element_label(name, index),
                    float(difference[worst]),
                    float(allowed[worst]),
                    precisions[position],
                    machine_epsilon(precisions[position]) > EPSILONS["float32"],
                )
    return None


def _output_precisions(run: CheckRun, layout: Layout) -> list[str]:
    """The precision of each floating output at `layout`: the trial's dtypes in the op's own layout; elsewhere the
    wider float the op was cast up to (it keeps it, `precision.finest`)."""
    own = [meta.dtype for meta in run.trial.output_metas if meta.floating]
    return own if layout is run.layout else [run.precision(layout)] * len(own)


def _difference_in(run: CheckRun, layout: Layout, graph: RawGraph | None) -> CompiledDifference | None:
    """The direct and the compiled runs of the op compared again at `layout` (cast up), with the trial's upstream."""
    adapter, trial, dtype = run.adapter, run.trial, run.precision(layout)
    upstreams = [
        adapter.constant(adapter.to_numpy(upstream), dtype if meta.floating else meta.dtype)
        for upstream, meta in zip(trial.upstreams, trial.output_metas)
    ]
    try:
        outputs, gradients = direct_call(run, layout, upstreams)
    except Exception as error:  # the op's own code, called directly in the wider float
        raise OpFailed(error) from error
    if adapter.graph_compiles:
        arguments = [("input", name) for name in run.inputs.names]
        arguments += [("upstream", f"d{name}") for name in trial.output_names]
        compiled = run.gradient_graph(layout, upstreams, arguments).run
        if compiled is None:
            raise RuntimeError(f"{adapter.name}'s traced gradient graph came back without its run (`RawGraph.run`)")
    else:
        z = run.z(layout)
        compiled = run.vjps(layout, z[None], flat_upstream(run, z.dtype)[None], autodiff=False)
    eager_outputs = [output for output, meta in zip(outputs, trial.output_metas) if meta.floating]
    return _largest_difference(run, layout, eager_outputs, gradients, compiled, graph)


def check_linearity(run: CheckRun, own: OwnPrecision) -> tuple[OwnPrecision, Linearity | None]:
    """`grad-nonlinear` when the custom gradient is not linear in the upstream gradient; for a declared surrogate,
    `surrogate-nonlinear` (info). `own` without its probes (judged: 4 N not kept at millions), and the verdict (None
    where the op failed compiled)."""
    precision = run.precision(run.layout)
    if own.probes is None:
        raise RuntimeError("the linearity in the upstream is judged once, from the probes' gradients")
    judged = dataclasses.replace(own, probes=None)
    try:
        found = linearity.judge(own.trial_gradient, own.probes, precision)
    except OpFailed as failed:  # one upstream at a time (millions of elements): the op failing compiled
        report_compiled_failure(run, failed.error)
        return judged, None
    del own
    if found.response == "bounded":  # clipping, or a sign of the upstream: told apart by small upstreams
        z = run.z(run.layout)
        small = linearity.small_probes(flat_upstream(run, z.dtype), precision)
        try:
            gradients = run.vjps(run.layout, z[None], small, autodiff=False).custom[0]
        except OpFailed:  # the op failed at these upstreams after all: no clipping can be told
            gradients = np.full(small.shape, np.nan)
        if not linearity.linear_when_small(gradients, precision):
            found = dataclasses.replace(found, response="nonlinear")
    _report_linearity(run, found)
    return judged, found


def _report_linearity(run: CheckRun, found: Linearity) -> None:
    """`grad-nonlinear`, `surrogate-nonlinear` or nothing, for the linearity verdict `found`."""
    if found.response in ("linear", None) or found.worst is None:  # a deviation has its element
        return
    findings = run.findings
    name, index = run.columns.label(found.worst)
    clipping = found.response == "bounded"
    a, b = linearity.A, linearity.B
    sign = "-" if b < 0 else "+"
    measured = (
        f"grad({a:g} u1 {sign} {abs(b):g} u2) is {found.combined:.6g} at d{element_label(name, index)}, where "
        f"{a:g} grad(u1) {sign} {abs(b):g} grad(u2) is {found.expected:.6g}"
    )
    if run.options.surrogate:
        reason = "it clips or rescales the upstream gradient by its size" if clipping else "it transforms the upstream"
        findings.surrogate = Surrogate(True, "gradient clipping" if clipping else None, reason)
        findings.add(
            "surrogate-nonlinear",
            "info",
            f"Declared surrogate gradient{' (gradient clipping)' if clipping else ''}: it is not linear in the "
            f"upstream gradient ({measured}), so it is no derivative of any function, as intended: {reason}.",
            input=name,
            index=index,
        )
        return
    if clipping:
        reason = (
            "the custom gradient is not linear in the upstream gradient, as every derivative is: it clips or rescales "
            "the upstream gradient by its size (TensorFlow's own clip_gradients example does this with tf.clip_by_norm)"
        )
        findings.surrogate = Surrogate(False, "gradient clipping", reason)
        advice = (
            f" This looks like gradient clipping: {reason}. If that is intended, declare it with %%custom_gradient "
            "--surrogate (or surrogate=True)."
        )
    else:
        advice = (
            " Every vector-Jacobian product is linear in the upstream gradient: multiply the upstream gradient by the "
            "local derivative; do not square it, take its sign or norm, or add a term without it."
        )
    findings.add(
        "grad-nonlinear",
        "error",
        f"The custom gradient is not linear in the upstream gradient: {measured} (relative deviation "
        f"{found.deviation:.3g}). Full-Jacobian and projection checks, which use one-hot or single random upstream "
        f"gradients, cannot see this.{advice}",
        input=name,
        index=index,
    )
