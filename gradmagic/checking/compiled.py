"""The op's gradient as the framework takes it, compiled (`tf.function`, `jax.jit`, a `tf.compat.v1` Session, Keras's
`torch.autograd.Function`), in one call at the example point in the op's own precision: against what the
structure checks' direct call of the forward and the gradient function returned, and for linearity in the upstream
gradient (`linearity.py`). In full mode the same call takes every row of the Jacobian, which the numbers phase
reuses.
"""

from __future__ import annotations

import numpy as np

from gradmagic.checking import linearity
from gradmagic.checking.findings import listing
from gradmagic.checking.run import CheckRun, OwnPrecision, flat_upstream
from gradmagic.report import Surrogate, element_label


def take_own_precision(run: CheckRun) -> bool:
    """The own-precision products, kept in `run.own_precision`: the trial's upstream with autodiff (and in full mode
    the Jacobians), and the linearity probes through the custom gradient alone; `graph-mismatch` (False) when they
    fail."""
    adapter, layout = run.adapter, run.layout
    z = run.z(layout)
    upstream = flat_upstream(run, z.dtype)
    full = run.options.numbers and run.columns.size <= run.options.full_threshold
    try:
        trial = adapter.vjps(run.target, layout, z[None], upstream[None], jacobian=full)
        probes = adapter.vjps(
            run.target, layout, z[None], linearity.probes(upstream, run.options.seed), autodiff=False
        )
        run.own_precision = OwnPrecision(trial, probes)
    except Exception as error:  # the framework's own error about the user's op
        report_compiled_failure(run, error)
        return False
    return _gradient_has_the_inputs_size(run)


def _gradient_has_the_inputs_size(run: CheckRun) -> bool:
    """`grad-shape` (False) when the gradient taken through the custom gradients a composite reaches has another
    number of elements than its inputs: one of them returned a gradient of the wrong shape, which the framework passed
    on unchecked (a decorated op's gradients were checked one by one before)."""
    found, columns = run.own_precision.trial.custom.shape[-1], run.columns
    if found == columns.size:
        return True
    inputs = ", ".join(f"`{name}` {list(shape)}" for name, shape in zip(columns.names, columns.shapes))
    run.findings.add(
        "grad-shape",
        "error",
        f"The gradient taken through the custom gradients that `{run.findings.name}` reaches has {found} elements "
        f"where its inputs ({inputs}) have {columns.size}: a custom gradient returns a gradient of another shape than "
        "its input, and the framework passed it on without a check. After a broadcast, sum the gradient over the "
        "broadcast axes (and reshape it to the input's shape).",
    )
    return False


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
        f"{type(error).__name__}{': ' + cause.rstrip('.') if cause else ''}. {advice}".rstrip(),
    )


def compare_compiled(run: CheckRun) -> None:
    """`graph-mismatch` when the compiled gradient gives other outputs or gradients than the direct call."""
    adapter, trial, layout, findings = run.adapter, run.trial, run.layout, run.findings
    wording = findings.wording
    # Compiled: the gradient graph's run where tracing is how the framework compiles, else the own-precision call.
    traced = run.raw_graph.run if run.raw_graph is not None and run.raw_graph.run is not None else None
    compiled_outputs = traced.outputs[0] if traced is not None else run.own_precision.outputs
    compiled_gradient = traced.custom[0, 0] if traced is not None else run.own_precision.trial_gradient
    eager_outputs = [output for output, meta in zip(trial.outputs, trial.output_metas) if meta.floating]
    compared = [("output", eager_outputs, compiled_outputs, run.rows)]
    if trial.gradients is not None:  # a composite has no gradient function of its own to call directly
        eager_gradients = [trial.gradients[k] for k in layout.perturbable] + list(trial.variable_gradients or [])
        compared.append(("gradient", eager_gradients, compiled_gradient, run.columns))
    for what, eager, compiled, axis in compared:
        for position, (value, start, stop) in enumerate(zip(eager, axis.offsets, axis.offsets[1:])):
            in_graph = compiled[start:stop]
            value = np.zeros_like(in_graph) if value is None else np.ravel(adapter.to_numpy(value))
            if not np.allclose(value, in_graph, rtol=1e-5, atol=1e-6, equal_nan=True):
                findings.add(
                    "graph-mismatch",
                    "error",
                    f"`{findings.name}` gives a different {what} (#{position}) {wording.direct} and "
                    f"{wording.compiled}: largest difference {np.nanmax(np.abs(value - in_graph)):.3g}. Python-side "
                    "state or randomness in the op behaves differently when traced.",
                )
                return


def check_linearity(run: CheckRun) -> None:
    """`grad-nonlinear` when the custom gradient is not linear in the upstream gradient; for a declared surrogate,
    `surrogate-nonlinear` (info)."""
    found = run.linearity = linearity.judge(run.own_precision.probe_gradients)
    if found.response in ("linear", None):
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
