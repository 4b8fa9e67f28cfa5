"""Reports made by the real checker, shared by the TypeScript unit tests (as JSON fixtures), the browser tests
and the browser benchmark: the Python side and the JupyterLab renderer read the very same data."""

from __future__ import annotations

import functools

import numpy as np
import tensorflow as tf
from keras import ops

import gradmagic
from gradmagic.report import Report

#: The example input of the straight-through estimator and of gradient reversal (and of the browser test).
QUANTISE_INPUT = [-1.7, -0.3, 0.2, 0.6, 1.4]
#: An op name and message that would run script if inserted as HTML.
HOSTILE = '<img src=x onerror="window.__pwned=1">'


def log1pexp(x):
    e = tf.exp(x)

    def grad(upstream):
        return upstream * (1 - 1 / (1 + e))

    return tf.math.log(1 + e), grad


def keras_log1pexp(x):
    """The seed's Keras log1pexp in its JAX-and-TensorFlow form: it passes there and fails on PyTorch."""
    e = ops.exp(x)

    def grad(upstream):
        return ops.multiply(upstream, 1.0 - 1.0 / ops.add(1, e))

    return ops.log(1 + e), grad


def quantise(x):
    """A straight-through estimator: `round` forward, the upstream gradient passed through where |x| <= 1."""

    def grad(upstream):
        return upstream * tf.cast(tf.abs(x) <= 1, upstream.dtype)

    return tf.round(x), grad


def reverse_gradient(x):
    """Gradient reversal (domain-adversarial training), not declared as a surrogate: the check fails and names it."""
    return tf.identity(x), lambda upstream: -upstream


def add_bias(x, b):
    return x + b, lambda dy: (dy, dy)  # the bias gradient is not reduced over the batch


def chain(x, length: int):
    """`length` sin-and-scale steps: a forward and backward of about 2 * length nodes each."""
    y = x
    for _ in range(length):
        y = tf.sin(y) * 1.01

    def grad(upstream):
        with tf.GradientTape() as tape:
            tape.watch(x)
            z = x
            for _ in range(length):
                z = tf.sin(z) * 1.01
        return tape.gradient(z, x, output_gradients=upstream)

    return y, grad


def scoped_chain(x, steps: int = 40):
    """`steps` sin-and-scale steps, each in its own name scope in the forward and in the backward: a graph of more
    than 200 nodes (6 a step), drawn with one node per scope."""
    inputs, y = [], x
    for i in range(steps):
        with tf.name_scope(f"block_{i}"):
            inputs.append(y)
            y = tf.sin(y) * 1.01 + 0.1

    def grad(upstream):
        for i in reversed(range(steps)):
            with tf.name_scope(f"block_{i}"):
                upstream = upstream * tf.cos(inputs[i]) * 1.01
        return upstream

    return y, grad


def hostile_op():
    def op(x):
        raise ValueError(f"{HOSTILE} broke")

    op.__name__ = op.__qualname__ = HOSTILE
    return op


def graph_of_about(nodes: int) -> Report:
    """A passing report whose gradient graph has about `nodes` nodes (not folded)."""
    length = max(1, (nodes - 2) // 7)  # 7 nodes a step, and the input and output
    return gradmagic.check(tf.custom_gradient(lambda x: chain(x, length)), tf.constant([0.3, 0.5]), numbers=False)


@functools.cache  # the reports are immutable; the Keras one runs two subprocesses
def reports() -> dict[str, Report]:
    bump = np.ones(5000, np.float32)
    bump[7] = 2.0
    return {
        "log1pexp": gradmagic.check(tf.custom_gradient(log1pexp), tf.constant([-5.0, 0.0, 100.0]), sweep=True),
        "unreduced_bias": gradmagic.check(tf.custom_gradient(add_bias), tf.ones([2, 3]), tf.ones([3])),
        "projection": gradmagic.check(
            tf.custom_gradient(lambda x: (tf.sin(x), lambda dy: dy * tf.cos(x) * bump)),
            tf.constant(np.linspace(0, 1, 5000)),
        ),
        "hostile": gradmagic.check(hostile_op(), tf.constant(1.0)),
        "big_graph": graph_of_about(200),
        "scoped_graph": gradmagic.check(tf.custom_gradient(scoped_chain), tf.constant([0.3, 0.5]), numbers=False),
        # Swept over [-2.5, 2.5]: sweep points fall on round's jumps at +-0.5, +-1.5 and +-2.5 (both ends),
        # where finite differences are the jump over 2h (off scale).
        "straight_through": gradmagic.check(
            tf.custom_gradient(quantise),
            tf.constant(QUANTISE_INPUT),
            surrogate=True,
            sweep=True,
            sweep_range=(-2.5, 2.5),
        ),
        "gradient_reversal": gradmagic.check(
            tf.custom_gradient(reverse_gradient), tf.constant(QUANTISE_INPUT), sweep=True
        ),
        # Wrong by a factor of 1.05 at 4 x 4 elements: Jacobian heatmaps worth drawing, the error map red on the
        # diagonal and grey (within the tolerance) elsewhere.
        "scaled_square": gradmagic.check(
            tf.custom_gradient(lambda x: (x * x, lambda dy: dy * 2.1 * x)), tf.constant([1.0, 2.0, 3.0, 4.0])
        ),
        "keras_backends": gradmagic.check(
            keras_log1pexp, np.array([-5.0, 0.0, 100.0]), framework="keras", backends="all"
        ),
    }
