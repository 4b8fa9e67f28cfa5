"""The sweep: drawn wherever the op is element-wise in an input, a NaN at one element (the edge of a square root's
domain) notwithstanding; where it cannot be drawn, the report says the true reason, in every view."""

import tensorflow as tf

import gradmagic
from gradmagic.render import no_sweep_reason
from gradmagic.render.html import render_html


@tf.custom_gradient
def soft_root(x):
    def grad(upstream):
        return upstream * 0.5 / tf.sqrt(x + 1e-3)

    return tf.sqrt(x), grad


@tf.custom_gradient
def mix_rows(x):
    """Each output element depends on every input element: not element-wise."""

    def grad(upstream):
        return tf.ones_like(x) * tf.reduce_sum(upstream)

    return x + tf.reduce_sum(x), grad


def test_an_element_wise_op_is_swept_although_its_finite_difference_is_nan_at_one_element():
    x = tf.constant([[0.0, 1, 2, 3], [4, 5, 6, 7]])  # sqrt(0 - h) is NaN: d output[0, 0] / d x[0, 0] is NaN
    report = gradmagic.check(soft_root, x, sweep=True)
    assert report.sweep is not None, [p.message for p in report.problems]
    assert report.sweep.elementwise and report.sweep.input == "x"
    assert "sweep-unavailable" not in [p.code for p in report.problems]
    assert "the op is element-wise in it" in render_html(report)


def test_an_op_that_is_not_element_wise_says_which_derivative_shows_it():
    report = gradmagic.check(mix_rows, tf.constant([1.0, 2.0, 3.0]), sweep=True)
    assert report.sweep is None
    (unavailable,) = [p for p in report.problems if p.code == "sweep-unavailable"]
    assert unavailable.severity == "info"
    reason = no_sweep_reason(report)
    assert reason == unavailable.message == no_sweep_reason(report, live=True)
    assert "is not diagonal: d output[0] / d x[1] = 1" in reason and "element-wise" in reason
    assert reason in render_html(report).replace("&#x27;", "'")


def test_the_jacobians_too_large_to_keep_are_the_reason_given_for_no_sweep():
    report = gradmagic.check(mix_rows, tf.range(100, dtype=tf.float32), sweep=True)  # 10,000 entries
    assert report.numerics.mode == "full" and report.sweep is None and not report.numerics.jacobians
    assert "kept up to 4,096 entries" in no_sweep_reason(report)
