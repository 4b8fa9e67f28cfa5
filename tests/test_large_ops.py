"""Big ops on the edit loop: an op slow to run eagerly is traced on its next check, not its first (the trace would cost
20 to 50 times its eager run), and a gradient graph of thousands of ops is not drawn; both say why."""

import functools
import time

import numpy as np
import tensorflow as tf
from conftest import problem
from report_fixtures import chain

import gradmagic


def slow_square():
    def slow(x):
        time.sleep(0.15)  # an op of thousands of small ops, as far as the eager clock can tell
        return x * x, lambda upstream: 2 * x * upstream

    return tf.custom_gradient(slow)


def test_an_op_slow_to_run_eagerly_is_traced_on_its_next_check():
    op, x = slow_square(), tf.constant([1.0, 2.0])
    first = gradmagic.check(op, x)
    assert first.verdict == "pass" and first.graph is None
    said = problem(first, "graph-unavailable")
    assert said.severity == "info" and "Not traced on this first check" in said.message
    assert "come with its next check" in said.message
    second = gradmagic.check(op, x)
    assert second.graph is not None and "graph-unavailable" not in second.codes()


def test_a_wrong_gradient_of_a_slow_op_is_still_caught_on_its_first_check():
    def slow_wrong(x):
        time.sleep(0.15)
        return x * x, lambda upstream: 3 * x * upstream

    report = gradmagic.check(slow_wrong, tf.constant([1.0, 2.0]))
    assert "fd-mismatch" in report.codes() and "graph-unavailable" in report.codes()


def test_a_gradient_graph_of_thousands_of_ops_is_not_drawn_and_says_why():
    op, x = functools.partial(chain, length=700), tf.constant(np.array([0.1, 0.2, 0.3], np.float32))
    report = gradmagic.check(op, x)
    if report.graph is None and "Not traced on this first check" in problem(report, "graph-unavailable").message:
        report = gradmagic.check(op, x)  # this machine ran it slowly: traced on the next check
    assert report.verdict == "pass" and report.graph is None
    said = problem(report, "graph-unavailable").message
    assert "too many to draw in a report (over 2,000)" in said and "in the forward" in said and "backward" in said


def test_a_wrong_element_of_a_small_gradient_is_located_among_a_million():
    # log1pexp at x = -4.7: its gradient (0.009) is among the smallest twentieth; 10 % off, it is found in float64,
    # where TensorFlow runs the op cast up throughout (no float32 rounding of the gradient to allow for).
    values = np.random.default_rng(0).standard_normal(1_000_000).astype(np.float32) * 3
    values[123_457] = -4.7
    bump = np.ones(values.size, np.float32)
    bump[123_457] = 1.1

    def one_wrong(x):
        e = tf.exp(x)
        return tf.math.log(1 + e), lambda upstream: upstream * (1 - 1 / (1 + e)) * bump

    report = gradmagic.check(one_wrong, tf.constant(values))
    assert report.numerics.mode == "projection" and report.numerics.dtype == "float64"
    assert report.codes() == ["fd-mismatch"] and [e.index for e in report.numerics.worst] == [(123_457,)]
