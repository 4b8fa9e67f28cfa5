"""gradmagic.check in TensorFlow 1's graph mode, against tf.compat.v1.test.compute_gradient, in one run.

1. The seed's log1pexp (seed 000, the TensorFlow 1 page) at N = 3, 100 and
   1,000 elements, eager execution disabled: the check (cold: the first check
   of the run; warm: median of 5) against one call of
   tf.compat.v1.test.compute_gradient in a session, the anchor, which gives
   the two Jacobians but no verdict. Both run their sessions through a
   counting Session, so the session.run calls are printed too.
2. The same full check of the seed's example, eager against graph mode, each
   in a fresh Python (eager execution cannot come back once disabled).

Run: .venv/bin/python benchmarks/bench_graph_mode.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import textwrap
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import gradmagic  # noqa: E402

tf.get_logger().setLevel("ERROR")


class CountingSession(tf.compat.v1.Session):
    """A real Session that counts its runs (gradmagic's checks make theirs with tf.compat.v1.Session)."""

    runs = 0

    def run(self, *args, **kwargs):
        CountingSession.runs += 1
        return super().run(*args, **kwargs)


@tf.custom_gradient
def log1pexp(x):
    e = tf.exp(x)

    def grad(dy):
        return dy * (1 - 1 / (1 + e))

    return tf.compat.v1.log(1 + e), grad


def timed(call):
    """(seconds, session.run calls, result) of `call()`."""
    runs = CountingSession.runs
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, CountingSession.runs - runs, result


def against_compute_gradient() -> None:
    print("1. Graph mode: gradmagic.check vs tf.compat.v1.test.compute_gradient (one process, same op)")
    print(
        f"   {'N':>5} {'check cold':>11} {'check warm':>11} {'runs':>5} {'compute_gradient':>17} {'runs':>6}"
        f" {'ratio warm':>11} verdict"
    )
    for n in (3, 100, 1_000):
        values = np.linspace(-5, 100, n).astype(np.float32)
        cold, _, _ = timed(lambda: gradmagic.check(log1pexp, values))
        warm = []
        for _ in range(5):
            seconds, runs, report = timed(lambda: gradmagic.check(log1pexp, values))
            warm.append(seconds)
        with tf.Graph().as_default():
            x = tf.constant(values)
            y = log1pexp(x)
            with CountingSession() as session, session.as_default():
                anchor, anchor_runs, _ = timed(lambda: tf.compat.v1.test.compute_gradient(x, [n], y, [n]))
        median = statistics.median(warm)
        print(
            f"   {n:>5} {cold * 1e3:9.0f}ms {median * 1e3:9.0f}ms {runs:>5} {anchor * 1e3:15.0f}ms {anchor_runs:>6}"
            f" {anchor / median:10.2f}x {report.verdict}"
        )


_SEED_CHECK = """
import json, time
import numpy as np
import tensorflow as tf
{disable}
import gradmagic

@tf.custom_gradient
def log1pexp(x):
    e = tf.exp(x)
    def grad(dy):
        return dy * (1 - 1 / (1 + e))
    return tf.math.log(1 + e), grad

times = []
for _ in range(6):
    start = time.perf_counter()
    report = gradmagic.check(log1pexp, np.array([-5.0, 0.0, 100.0], np.float32))
    times.append(time.perf_counter() - start)
print(json.dumps({{"mode": report.op.mode, "cold": times[0], "warm": sorted(times[1:])[2], "codes": report.codes()}}))
"""


def eager_against_graph() -> None:
    print("2. The seed's full check, eager against graph mode (each in a fresh Python)")
    results = {}
    for label, disable in (("eager", ""), ("graph", "tf.compat.v1.disable_eager_execution()")):
        code = textwrap.dedent(_SEED_CHECK.format(disable=disable))
        completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        results[label] = json.loads(completed.stdout.strip().splitlines()[-1])
    for label, result in results.items():
        print(
            f"   {label:>5} ({result['mode']}): first check {result['cold'] * 1e3:6.0f}ms, later checks "
            f"{result['warm'] * 1e3:6.1f}ms (median of 5), problems {result['codes']}"
        )
    print(
        f"   graph / eager: first {results['graph']['cold'] / results['eager']['cold']:.2f}x, later "
        f"{results['graph']['warm'] / results['eager']['warm']:.1f}x"
    )


if __name__ == "__main__":
    tf.compat.v1.disable_eager_execution()  # before any op: section 2 runs eager mode in its own process
    tf.compat.v1.Session = CountingSession
    against_compute_gradient()
    eager_against_graph()
