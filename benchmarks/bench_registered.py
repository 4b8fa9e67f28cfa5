"""The edit loop of a registered gradient, as a user feels it: a `%%register_gradient --check` cell edited and run
again, in a real kernel.

Cells are sent as JupyterLab sends them (naming the cell) and timed from the request to the kernel going idle, its
report sent: what the user waits for. Each run edits the cell (a new constant in the gradient), so every run
registers a new function under the same name (what TensorFlow alone refuses).

D. a straight-through `Sign` gradient as a `%%register_gradient Sign --surrogate --check` cell, edited each run: the
   registration replaced, the gradient checked through one `Sign` op (structure, full Jacobians, the gradient graph).
E. the same cell run again unchanged.
F. the "py_func with gradient" recipe as a `%%register_gradient PyFunc --check` cell (a `tf.numpy_function` forward),
   edited each run.
G. anchor: what a user writes without gradmagic, edited each run: the gradient registered by hand under a fresh name
   (TensorFlow refuses the old one), a new `tf.function` applying it with `gradient_override_map`, and its tape
   gradient printed.

Runs are interleaved (D, E, F, G, D, ...) after warm-up runs; medians (and ranges). The machine's load moves every
figure: compare ratios to G, measured in the same run.

Run: .venv/bin/python benchmarks/bench_registered.py
"""

from __future__ import annotations

import statistics
import sys

from bench_latency import kernel_state, timed
from jupyter_client.manager import start_new_kernel

STATE, ENV = kernel_state("registered")
RUNS = 12
WARMUP = 3

STE = """%%register_gradient Sign --surrogate --check x=tf.constant([-1.5, -0.2, 0.4, 2.0])
@tf.RegisterGradient("STE")
def ste(op, grad):
    return grad * {factor}
"""

PY_FUNC = """%%register_gradient PyFunc --check x=tf.constant([1., 2., 3.])
def square_grad(op, grad):
    return grad * 2 * {factor} * op.inputs[0]

def py_square(x):
    return tf.numpy_function(np.square, [x], tf.float32)
"""

HAND = """@tf.RegisterGradient("STEByHand{run}")
def ste_by_hand(op, grad):
    return grad * {factor}

@tf.function
def binarise(x):
    with tf.compat.v1.get_default_graph().gradient_override_map({{"Sign": "STEByHand{run}"}}):
        return tf.sign(x)

x = tf.constant([-1.5, -0.2, 0.4, 2.0])
with tf.GradientTape() as tape:
    tape.watch(x)
    y = binarise(x)
print(tape.gradient(y, x))
"""


def main() -> None:
    manager, client = start_new_kernel(kernel_name="python3", env=ENV, cwd=str(STATE))
    try:
        _, shown = timed(client, "%load_ext gradmagic\nimport numpy as np\nimport tensorflow as tf", "setup")
        assert shown["error"] is None, shown
        series: dict[str, list[float]] = {"D": [], "E": [], "F": [], "G": []}
        for run in range(WARMUP + RUNS):
            factor = f"{1 + run * 1e-9:.12f}"
            d, shown_d = timed(client, STE.format(factor=factor), "ste")
            e, shown_e = timed(client, STE.format(factor=factor), "ste")  # the same text again
            f, shown_f = timed(client, PY_FUNC.format(factor=factor), "py-func")
            g, shown_g = timed(client, HAND.format(factor=factor, run=run), "hand")
            for shown in (shown_d, shown_e, shown_f, shown_g):
                assert shown["error"] is None, shown
            assert shown_d["outputs"] and shown_e["outputs"] and shown_f["outputs"], "the reports were shown"
            if run >= WARMUP:
                for name, value in zip("DEFG", (d, e, f, g)):
                    series[name].append(value)
        median = {name: statistics.median(values) * 1e3 for name, values in series.items()}

        def row(name: str, what: str) -> str:
            values = series[name]
            return f"  {name}. {what:<52} {median[name]:7.1f} ms ({min(values) * 1e3:.0f}-{max(values) * 1e3:.0f})" + (
                f", {median[name] / median['G']:.1f}x the anchor" if name != "G" else ""
            )

        print(f"registered gradients, edit loop in a real kernel, median of {RUNS} after {WARMUP}:")
        print(row("D", "edited %%register_gradient Sign --surrogate --check"))
        print(row("E", "the same cell run again unchanged"))
        print(row("F", "edited %%register_gradient PyFunc (the py_func recipe)"))
        print(row("G", "anchor: registered by hand, applied, tape gradient"))
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


if __name__ == "__main__":
    sys.exit(main())
