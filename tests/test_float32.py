"""Float32-only ops judged at what float32 resolves, and every report saying what it could resolve (issue 30).

An op that refuses float64 (a float32 variable or constant inside, as every Keras layer's weights) has its finite
differences in float32: extrapolated from three steps, judged against the noise they measure, so that a gradient
0.1 % off fails where a fixed 2 % tolerance passed 1.5 %. The ops are written as public code writes them: GELU's
tanh approximation with its float32 constants (BERT's and Keras's `gelu(approximate=True)`), a layer norm with a
float32 scale (`keras.layers.LayerNormalization`), a dense layer's tanh, w * sin(x) with a float32 variable.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

import gradmagic
from gradmagic.render.text import render_text
from gradmagic.render.words import report_words

W = tf.Variable(np.array([[0.7, -1.3, 2.1, 0.4]] * 3, np.float32), name="w")
GAMMA = tf.Variable(np.linspace(0.5, 1.5, 4).astype(np.float32), name="gamma")
KERNEL = tf.constant(np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32) * 0.5)
C, K = tf.constant(0.7978845608), tf.constant(0.044715)


def sine(factor):
    @tf.custom_gradient
    def op(x):
        def grad(u, variables=None):
            return u * W * tf.cos(x) * factor, [u * tf.sin(x) * factor]

        return W * tf.sin(x), grad

    return op


def gelu(factor):
    @tf.custom_gradient
    def op(x):
        t = tf.tanh(C * (x + K * x**3))
        return 0.5 * x * (
            1 + t
        ), lambda u: factor * u * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * C * (1 + 3 * K * x * x))

    return op


def layer_norm(factor):
    @tf.custom_gradient
    def op(x):
        centred = x - tf.reduce_mean(x, -1, keepdims=True)
        inverse = tf.math.rsqrt(tf.reduce_mean(centred * centred, -1, keepdims=True) + 1e-3)
        normal = centred * inverse

        def grad(u, variables=None):
            g = u * GAMMA
            dx = inverse * (
                g - tf.reduce_mean(g, -1, keepdims=True) - normal * tf.reduce_mean(g * normal, -1, keepdims=True)
            )
            return dx * factor, [tf.reduce_sum(u * normal, 0) * factor]

        return GAMMA * normal, grad

    return op


def dense_tanh(factor):
    @tf.custom_gradient
    def op(x):
        y = tf.tanh(x @ KERNEL)
        return y, lambda u: factor * (u * (1 - y * y)) @ tf.transpose(KERNEL)

    return op


OPS = {"w * sin(x)": sine, "GELU": gelu, "layer norm": layer_norm, "tanh(x @ kernel)": dense_tanh}


def inputs(seed: int) -> tf.Tensor:
    return tf.constant(np.random.default_rng(seed).uniform(-3, 3, (3, 4)).astype(np.float32))


@pytest.mark.parametrize("name", OPS)
def test_a_correct_float32_only_op_passes_at_many_inputs(name):
    for seed in range(8):
        report = gradmagic.check(OPS[name](1.0), inputs(seed), graph=False)
        assert report.verdict == "pass", (seed, render_text(report))
        assert report.numerics.dtype == "float32" and report.numerics.max_error < 0.7, seed


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("factor", [1.001, 0.99, 1.015])
def test_a_float32_only_gradient_a_tenth_of_a_percent_off_fails(name, factor):
    report = gradmagic.check(OPS[name](factor), inputs(0), graph=False)
    assert report.verdict == "fail" and "fd-mismatch" in report.codes(), render_text(report)


def test_a_pass_says_what_it_would_have_seen_in_each_input_and_why_its_float():
    report = gradmagic.check(sine(1.0), inputs(0), graph=False)
    resolution = report.resolution
    assert resolution.dtype == "float32" and resolution.why == "`w` is a float32 variable"
    assert [entry.input for entry in resolution.inputs] == ["x", "w"]
    assert all(0 < entry.relative < 1e-3 for entry in resolution.inputs)
    # What it says it would have seen, it sees: the whole gradient of x that far off (and a little more) fails.
    seen = resolution.inputs[0].relative
    assert gradmagic.check(sine(1 + 2 * seen), inputs(0), graph=False).verdict == "fail"
    words = report_words(report)
    assert "sees " in words.figures and "% off" in words.figures
    assert "in float32 (`w` is a float32 variable)" in words.numerics and " in x, " in words.numerics


def test_the_resolution_names_the_float_of_an_op_cast_up_and_of_one_in_projection_mode():
    @tf.custom_gradient
    def softplus(x):
        return tf.math.softplus(x), lambda u: u * tf.sigmoid(x)

    cast = gradmagic.check(softplus, tf.constant([0.5, -1.0, 2.0]))
    assert (cast.resolution.dtype, cast.resolution.why) == (
        "float64",
        "the inputs cast up to float64, which the op keeps",
    )
    own = gradmagic.check(softplus, tf.constant([0.5, -1.0, 2.0], tf.float64))
    assert own.resolution.why == "the inputs' own" and own.resolution.inputs[0].relative < 1e-4
    large = gradmagic.check(softplus, tf.random.stateless_normal([5000], seed=[1, 2]))
    assert large.numerics.mode == "projection" and large.resolution.inputs[0].relative < 1e-3
    assert gradmagic.check(softplus, tf.constant([0.5, -1.0, 2.0])).to_dict()["numerics"]["resolution"]["dtype"]


def test_a_cell_of_a_float32_layer_says_its_resolution(nb):
    nb.ok("w = tf.Variable([0.5, -1.5, 2.0], name='w')\nx = tf.constant([0.3, -1.2, 2.5])")
    run = nb.ok(
        "%%custom_gradient --check x=x\n"
        "def scaled_sine(x):\n"
        "    def grad(u, variables=None):\n"
        "        return u * w * tf.cos(x), [u * tf.sin(x)]\n"
        "    return w * tf.sin(x), grad\n"
    )
    assert "scaled_sine(x) passes" in run.stdout, run.stdout
    assert (
        "in float32 (`w` is a float32 variable)" in run.stdout and "It would have seen a whole gradient" in run.stdout
    ), run.stdout


# Projection mode (more elements than `full_threshold`): the probes are measured about float64 points and contracted
# in float64, their rounding measured, not bounded by N times a rounding (which hid a whole gradient 9 % off among
# 10,000 float32 elements, and 130 % among a million).
WIDE = np.random.default_rng(5).uniform(-2, 2, 6000).astype(np.float32)
WIDE_W = tf.Variable(np.random.default_rng(6).uniform(0.5, 1.5, 6000).astype(np.float32), name="w_wide")
LOG2 = tf.constant(np.log(2.0), tf.float32)


def wide_sine(factor):
    @tf.custom_gradient
    def op(x):
        def grad(u, variables=None):
            return u * WIDE_W * tf.cos(x) * factor, [u * tf.sin(x) * factor]

        return WIDE_W * tf.sin(x), grad

    return op, WIDE


def wide_softplus(factor):
    @tf.custom_gradient
    def op(x):
        return LOG2 * tf.math.softplus(x), lambda u: u * LOG2 * tf.sigmoid(x) * factor

    return op, WIDE


def wide_dense(factor):
    op = dense_tanh(factor)
    return op, WIDE.reshape(1500, 4)


WIDE_OPS = {"w * sin(x), w a variable": wide_sine, "log(2) softplus(x)": wide_softplus, "tanh(x @ kernel)": wide_dense}


@pytest.mark.parametrize("name", WIDE_OPS)
def test_a_float32_only_op_in_projection_mode_resolves_a_tenth_of_a_percent(name):
    op, x = WIDE_OPS[name](1.0)
    report = gradmagic.check(op, tf.constant(x), graph=False)
    assert report.verdict == "pass" and report.numerics.mode == "projection", render_text(report)
    assert report.numerics.dtype == "float32" and report.numerics.max_error < 0.2, render_text(report)
    assert all(entry.relative < 5e-3 for entry in report.resolution.inputs), report.resolution
    for factor in (1.003, 0.99, 1.01):
        op, x = WIDE_OPS[name](factor)
        wrong = gradmagic.check(op, tf.constant(x), graph=False)
        assert wrong.verdict == "fail" and "fd-mismatch" in wrong.codes(), (factor, render_text(wrong))
    # A constant factor is said first (1.01 measured to six digits prints as "1.01").
    factor = r"custom gradient is 1\.0(09\d*|10\d*|1) times the finite differences"
    assert re.search(factor, wrong.problems[0].message), render_text(wrong)
