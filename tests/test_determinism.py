"""The same op at the same inputs gives the same report on a quiet and on a busy machine: no decision of the check
depends on the clock (a CI runner or a laptop compiling is often loaded several times over)."""

import contextlib
import subprocess
import sys
import time

import numpy as np
import tensorflow as tf

import gradmagic


def log1pexp(x):
    e = tf.exp(x)
    return tf.math.log(1 + e), lambda upstream: upstream * (1 - 1 / (1 + e))


def scaled(x):  # a factor off: fd-mismatch with its factor named
    return tf.sin(x), lambda upstream: 1.5 * upstream * tf.cos(x)


def round_straight_through(x):  # an undeclared surrogate: its pattern named
    return tf.round(x), lambda upstream: upstream


def dense(x):
    w = DENSE_WEIGHTS
    y = tf.matmul(x, w)

    def grad(upstream, variables=None):
        return tf.matmul(upstream, w, transpose_b=True), [tf.matmul(x, upstream, transpose_a=True)]

    return y, grad


def sequence(x):  # a few dozen ops: a short Python loop, as layers are
    y = x
    for _ in range(20):
        y = tf.sin(y) * 1.01
    return y, lambda upstream: upstream * tf.ones_like(x)  # wrong: the chain rule left out


DENSE_WEIGHTS = tf.Variable(np.linspace(-1, 1, 6).reshape(3, 2), dtype=tf.float32, name="w")
CASES = [
    (log1pexp, [np.array([-2.0, 0.5, 100.0], np.float32)]),
    (scaled, [np.linspace(-1, 1, 5)]),
    (round_straight_through, [np.array([0.2, 1.3, -0.7], np.float32)]),
    (dense, [np.arange(6, dtype=np.float32).reshape(2, 3) / 6]),
    (sequence, [np.array([0.1, 0.2, 0.3], np.float32)]),
    (log1pexp, [np.random.default_rng(0).standard_normal(2_000).astype(np.float32)]),
]


def reports() -> list[dict]:
    """Each case's first check as a new op (what every edit of a cell makes), without its timings."""
    found = []
    for function, arrays in CASES:
        # A new Python function each time: a new op, checked cold, as the edited cell makes it.
        fresh = type(function)(function.__code__, function.__globals__, function.__name__)
        report = gradmagic.check(fresh, *[tf.constant(a) for a in arrays]).to_dict()
        report.pop("timings")
        found.append(report)
    return found


@contextlib.contextmanager
def busy_machine():
    """Two CPU-bound processes beside the test (this machine has two cores): every step of a check takes several
    times as long."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


@contextlib.contextmanager
def slow_clock(factor: float = 1_000.0):
    """Every clock Python code reads runs `factor` times fast: to such code, a machine `factor` times slower (what a
    loaded machine is at its worst moments, made certain)."""
    clocks = {name: getattr(time, name) for name in ("perf_counter", "monotonic", "time")}
    for name, clock in clocks.items():
        start = clock()
        setattr(time, name, lambda clock=clock, start=start: start + (clock() - start) * factor)
    try:
        yield
    finally:
        for name, clock in clocks.items():
            setattr(time, name, clock)


def test_reports_are_the_same_on_a_busy_machine_as_on_a_quiet_one():
    quiet = reports()
    with busy_machine():
        busy = reports()
    with slow_clock():
        slow = reports()
    for loaded in (busy, slow):
        assert [r["problems"] for r in loaded] == [r["problems"] for r in quiet]
        for before, after in zip(quiet, loaded):
            assert after == before, before["op"]["name"]
