"""The overhead of `gradmagic.watch()` on a training step, against the same step unwatched, in one process.

A small Keras model (Dense 64, a layer calling three custom-gradient ops, Dense 64, Dense 1; batch 32, 64 steps
an epoch), trained five ways:

- `model.fit` (Keras's compiled train function);
- `model.fit` of the model compiled with XLA (`jit_compile=True`, Keras's default on a GPU): the step runs compiled
  with XLA under the watch too; its boundary is watched and its first step replayed uncompiled;
- a custom training loop, its step a `tf.function(jit_compile=True)`;
- a custom training loop, its step a `tf.function`;
- the same step run eagerly.

Each way alternates unwatched and watched epochs (interleaved, so that both see the same load), and compares the
median time per step. A watched epoch runs inside `gradmagic.watch(check=False)` (recording only) after one
untimed warm-up epoch in the same watch, in which Keras traces its train function again for the watch (timed apart:
"re-trace"). Then one watched epoch with the checks at the end, which are timed apart (`report.timings["checks"]`).
The extra time per recorded call (each custom-gradient call and each gradient call) says what a watch adds to a
step of another model.

Run: .venv/bin/python benchmarks/bench_watch.py
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402 - after the log level
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import gradmagic  # noqa: E402

BATCH, STEPS, ROUNDS = 32, 64, 7


@tf.custom_gradient
def scaled_tanh(x):
    y = tf.tanh(x)
    return y, lambda dy: dy * (1 - y * y)


@tf.custom_gradient
def soft_square(x):
    return x * x / (1 + x * x), lambda dy: dy * 2 * x / (1 + x * x) ** 2


@tf.custom_gradient
def row_scale(x):
    norm = tf.sqrt(tf.reduce_sum(x * x, axis=1, keepdims=True) + 1.0)

    def grad(dy):
        return dy / norm - x * tf.reduce_sum(dy * x, axis=1, keepdims=True) / norm**3

    return x / norm, grad


class CustomGradients(keras.layers.Layer):
    def call(self, x):
        return row_scale(soft_square(scaled_tanh(x)))


def model(jit_compile: bool = False) -> keras.Model:
    built = keras.Sequential(
        [keras.Input((16,)), keras.layers.Dense(64), CustomGradients(), keras.layers.Dense(64), keras.layers.Dense(1)]
    )
    built.compile(optimizer="adam", loss="mse", jit_compile=jit_compile)
    return built


rng = np.random.default_rng(0)
X = rng.standard_normal((BATCH * STEPS, 16)).astype(np.float32)
Y = rng.standard_normal((BATCH * STEPS, 1)).astype(np.float32)
BATCHES = [(tf.constant(X[i : i + BATCH]), tf.constant(Y[i : i + BATCH])) for i in range(0, len(X), BATCH)]


def fit_epoch(net: keras.Model) -> None:
    net.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False)


def loop_epoch(net: keras.Model, step) -> None:
    for x, y in BATCHES:
        step(net, x, y)


def train_step(net: keras.Model, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((net(x, training=True) - y) ** 2)
    gradients = tape.gradient(loss, net.trainable_variables)
    net.optimizer.apply_gradients(zip(gradients, net.trainable_variables))
    return loss


def per_step(epoch) -> float:
    start = time.perf_counter()
    epoch()
    return (time.perf_counter() - start) / STEPS


def compare(name: str, make_epoch, jit_compile: bool = False) -> dict:
    """Unwatched and watched epochs, interleaved; medians per step, the re-trace and the checks apart."""
    net = model(jit_compile)
    epoch = make_epoch(net)
    epoch()  # traces the unwatched step
    plain, watched, retrace = [], [], []
    for _ in range(ROUNDS):
        plain.append(per_step(epoch))
        with gradmagic.watch(check=False):
            retrace.append(per_step(epoch) * STEPS)  # the first watched epoch traces its step again
            watched.append(per_step(epoch))
    with gradmagic.watch() as checked:
        epoch()
    report = checked.report
    return {
        "name": name,
        "plain": statistics.median(plain),
        "watched": statistics.median(watched),
        "retrace": statistics.median(retrace) - statistics.median(plain) * STEPS,
        "checks": report.timings["checks"],
        "recording": report.timings["recording"] / STEPS,
        "verdict": report.verdict,
        "calls": {op.name: op.calls - op.replayed_calls + op.xla_calls for op in report.watched},
        # under XLA the step's boundary is what a step calls back into Python for (twice), not the ops
        "recorded per step": 2.0
        if any(op.xla_calls for op in report.watched)
        else sum(op.calls + op.gradient_calls for op in report.watched) / STEPS,
    }


def main() -> None:
    tf_step = tf.function(train_step)
    xla_step = tf.function(train_step, jit_compile=True)
    results = [
        compare("model.fit (compiled)", lambda net: lambda: fit_epoch(net)),
        compare("model.fit, XLA (jit_compile)", lambda net: lambda: fit_epoch(net), jit_compile=True),
        compare("custom loop, XLA step", lambda net: lambda: loop_epoch(net, xla_step)),
        compare("custom loop, tf.function step", lambda net: lambda: loop_epoch(net, tf_step)),
        compare("custom loop, eager step", lambda net: lambda: loop_epoch(net, train_step)),
    ]
    print(f"tensorflow {tf.__version__}, keras {keras.__version__}; batch {BATCH}, {STEPS} steps an epoch, "
          f"median of {ROUNDS} interleaved epochs")
    print(
        f"{'training step':<32}{'unwatched':>11}{'watched':>11}{'ratio':>8}{'per call':>10}{'recording':>11}"
        f"{'re-trace':>10}{'checks at exit':>16}  verdict, calls"
    )
    for r in results:
        per_call = (r["watched"] - r["plain"]) / r["recorded per step"]
        print(
            f"{r['name']:<32}{r['plain'] * 1e3:>9.2f}ms{r['watched'] * 1e3:>9.2f}ms{r['watched'] / r['plain']:>7.2f}x"
            f"{per_call * 1e6:>8.0f}us{r['recording'] * 1e3:>9.2f}ms{max(r['retrace'], 0):>9.2f}s{r['checks']:>15.2f}s"
            f"  {r['verdict']}, {r['calls']}"
        )
    print(
        "per call: the watched step's extra time per recorded call (each custom-gradient call and each gradient "
        "call); recording: the part of the watched step spent in the watch's own recording code"
    )


if __name__ == "__main__":
    main()
