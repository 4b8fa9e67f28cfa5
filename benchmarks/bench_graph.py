"""The gradient graph of a 50-node op: extraction and drawing, against TensorFlow's own trace, in one run.

Anchor: tracing the same forward and backward with tf.function (a fresh
function each time, as gradmagic's first look at an op), which any view of
the graph must at least do. Measured: gradmagic.gradient_graph (with its
trace cached, as when an op is looked at again), and drawing it as SVG (the
static view's figure; the live view draws it in the browser).
Target: extraction plus drawing under 0.3 s once TensorFlow is warm.

Run: .venv/bin/python benchmarks/bench_graph.py
"""

import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

import gradmagic  # noqa: E402
from gradmagic.render.graph import graph_svg  # noqa: E402

REPEATS = 7


def chain(x):
    y = x
    for _ in range(16):  # 48 forward ops
        y = tf.sin(y) * 1.01 + 0.1
    return y, lambda dy: dy * tf.cos(x)


def median_seconds(call) -> float:
    call()
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    op = tf.custom_gradient(chain)
    x = tf.constant([1.0, 2.0, 3.0])

    def trace():
        def forward_and_backward(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = op(x)
            return y, tape.gradient(y, x)

        tf.function(forward_and_backward).get_concrete_function(tf.TensorSpec([3], tf.float32))

    graph = gradmagic.gradient_graph(op, x)
    anchor = median_seconds(trace)
    extraction = median_seconds(lambda: gradmagic.gradient_graph(op, x))
    svg = median_seconds(lambda: graph_svg(graph))
    print(f"Gradient graph of a {len(graph.nodes)}-node op (median of {REPEATS}, TensorFlow warm)")
    print(f"  tf.function trace of forward + backward (anchor)   {anchor * 1e3:7.1f} ms")
    print(
        f"  gradmagic.gradient_graph (extraction, folding)     {extraction * 1e3:7.1f} ms   "
        f"ratio {extraction / anchor:5.2f}"
    )
    print(f"  drawing to SVG                                     {svg * 1e3:7.1f} ms")
    total = extraction + svg
    print(
        f"  extraction + drawing                               {total * 1e3:7.1f} ms   target < 300 ms: "
        f"{'met' if total < 0.3 else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
