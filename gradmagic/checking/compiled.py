"""The op eagerly against its compiled form: the decorated op through the framework's own gradient machinery,
compiled where the framework compiles (`tf.function`, `jax.jit`, a `tf.compat.v1` Session, Keras's
`torch.autograd.Function`), against what the structure checks' direct call of the forward and the gradient
function returned.

In full mode the same call also takes every row of the Jacobian at the op's own precision, which the numbers
phase reuses: one compiled call instead of two.
"""

from __future__ import annotations

import numpy as np

from gradmagic.checking.run import CheckRun, flat_upstream


def compare_compiled(run: CheckRun) -> None:
    """`graph-mismatch` when taking the gradient compiled fails, or gives other outputs or gradients."""
    adapter, trial, layout, findings = run.adapter, run.trial, run.layout, run.findings
    if not run.rows.size or not run.columns.size:  # nothing to differentiate: the numbers phase says so
        return
    wording = findings.wording
    z = run.z(layout)
    upstream = flat_upstream(run, z.dtype)
    full = run.options.numbers and run.columns.size <= run.options.full_threshold
    try:
        vjps = adapter.vjps(run.target, layout, z[None], upstream[None], jacobian=full)
    except Exception as error:  # the framework's own error about the user's op
        cause = wording.cause(error)
        findings.add(
            "graph-mismatch",
            "error",
            f"`{findings.name}` works {wording.direct} but taking its gradient {wording.compiled} fails: "
            f"{type(error).__name__}: {cause} {wording.compiled_failure_advice(cause)}".rstrip(),
        )
        return
    if full:
        run.own_precision = vjps
    eager_outputs = [output for output, meta in zip(trial.outputs, trial.output_metas) if meta.floating]
    eager_gradients = [trial.gradients[k] for k in layout.perturbable] + list(trial.variable_gradients or [])
    for what, eager, compiled, axis in (
        ("output", eager_outputs, vjps.outputs[0], run.rows),
        ("gradient", eager_gradients, vjps.custom[0, 0], run.columns),
    ):
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
