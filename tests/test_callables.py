"""Issue 18: any callable that reaches a custom gradient is checked as what it is, and the op's real precision and
the single-element resolution of projection mode in float32 are measured, never assumed."""

import functools

import jsonschema
import keras
import numpy as np
import tensorflow as tf
from conftest import problem

import gradmagic
from gradmagic.report import Report, schema

X = np.array([0.5, -1.0, 2.0, 0.25], np.float32)


@tf.custom_gradient
def softplus(x):
    e = tf.exp(x)
    return tf.math.log1p(e), lambda upstream: upstream * e / (1 + e)


@tf.custom_gradient
def softplus_missing_term(x):
    e = tf.exp(x)
    return tf.math.log1p(e), lambda upstream: upstream * e  # forgets the 1 / (1 + e)


class Scaled(keras.layers.Layer):
    """A layer whose custom gradient is a method, bound to it (as in Keras's own quantised layers)."""

    def __init__(self, factor, wrong=False):
        super().__init__()
        self.factor, self.wrong = factor, wrong

    @tf.custom_gradient
    def scale(self, x):
        factor = self.factor * (2.0 if self.wrong else 1.0)
        return x * self.factor, lambda upstream: upstream * factor

    def call(self, x):
        return tf.tanh(self.scale(x))


def test_a_bound_custom_gradient_method_is_checked_as_the_op_it_is():
    layer = Scaled(3.0)
    report = gradmagic.check(layer.scale, tf.constant(X))
    assert report.ok and report.op.origin == "decorated" and report.op.name == "scale", report.codes()
    wrong = gradmagic.check(Scaled(3.0, wrong=True).scale, tf.constant(X))
    assert wrong.codes() == ["fd-mismatch"]


def test_tf_function_and_partial_of_an_op_are_checked_with_every_structure_check():
    assert gradmagic.check(tf.function(softplus), tf.constant(X)).ok
    assert gradmagic.check(tf.function(softplus_missing_term), tf.constant(X)).codes() == ["fd-mismatch"]

    @tf.custom_gradient
    def power(x, exponent):
        return x**exponent, lambda upstream: (upstream * exponent * x ** (exponent - 1), None)

    fixed = functools.partial(power, exponent=tf.constant(3.0))
    report = gradmagic.check(fixed, tf.constant(X))
    # A structure check, not a pass: keyword inputs get no gradient, so the gradient function returns one too many.
    assert report.op.origin == "decorated" and report.codes() == ["grad-count"], report.codes()


def test_wrappers_layers_and_recompute_grad_are_checked_through_the_custom_gradients_they_reach():
    cases = {
        "lambda": (lambda x: softplus(x) * 2.0, True),
        "lambda around a wrong op": (lambda x: softplus_missing_term(x) + 1.0, False),
        "recompute_grad": (tf.recompute_grad(lambda x: softplus(x) * 2.0), True),
        "a layer's call": (Scaled(3.0), True),
        "a layer's call, wrong": (Scaled(3.0, wrong=True), False),
    }
    for name, (op, right) in cases.items():
        report = gradmagic.check(op, tf.constant(X))
        assert report.op.origin == "composite", name
        assert "composite" in report.codes(), name
        assert report.ok == right, (name, report.codes())
        if not right:
            mismatch = problem(report, "fd-mismatch")
            assert mismatch.location is not None and mismatch.location.input is not None, name
        data = report.to_dict()  # the contract with every renderer holds for composites
        jsonschema.validate(data, schema())
        assert Report.from_dict(data).op.origin == "composite"
    reached = problem(gradmagic.check(lambda x: softplus_missing_term(x) + 1.0, tf.constant(X)), "composite")
    assert "`softplus_missing_term`" in reached.message and "1 custom-gradient op" in reached.message
    assert (
        "`tf.recompute_grad`"
        in problem(gradmagic.check(cases["recompute_grad"][0], tf.constant(X)), "composite").message
    )
    assert "`scale`" in problem(gradmagic.check(Scaled(3.0), tf.constant(X)), "composite").message


def test_a_callable_that_is_neither_says_what_was_expected():
    report = gradmagic.check(lambda x: tf.sin(x) * 2.0, tf.constant(X))
    message = problem(report, "return-structure").message
    assert "reaches no custom gradient" in message and "needs `(outputs, grad_fn)`" in message
    assert "a function that calls custom-gradient ops" in message


def float32_inside(wrong=1.0):
    """Takes and returns float64, computes in float32 (as Keras's quantised layers do)."""

    @tf.custom_gradient
    def op(x):
        inside = tf.cast(x, tf.float32)
        return tf.cast(
            tf.sin(inside) * 3.0, tf.float64
        ), lambda upstream: upstream * tf.cast(tf.cos(inside) * 3.0 * wrong, tf.float64)

    return op


def test_an_op_computing_in_float32_inside_is_measured_and_judged_in_float32_in_both_modes():
    for size in (7, 5000):
        x = tf.constant(np.random.default_rng(1).normal(size=size))
        report = gradmagic.check(float32_inside(), x)
        assert report.ok and {p.code for p in report.problems if p.severity != "info"} == set(), report.codes()
        assert "precision-measured" in report.codes()
        assert report.numerics.dtype == "float32"
        assert "computes with float32 precision inside" in problem(report, "precision-measured").message
        assert "fd-mismatch" in gradmagic.check(float32_inside(1.1), x).codes()
    right = gradmagic.check(float32_inside(), tf.constant(np.linspace(-1, 1, 7)))
    assert "nondifferentiable-point" not in right.codes()
    # A float64 op is measured as such, and judged in float64 as before.
    assert gradmagic.check(softplus, tf.constant(X.astype(np.float64))).numerics.dtype == "float64"


def where_with_python_floats(size, wrong_element=None, factor=2.0):
    """Runs in float32 only: tf.where with Python float constants refuses float64 inputs."""
    mask = np.ones(size, np.float32)
    if wrong_element is not None:
        mask[wrong_element] = factor
    mask = tf.constant(mask)

    @tf.custom_gradient
    def leaky(x):
        slope = tf.where(x > 0, 1.0, 0.1)
        return tf.where(x > 0, x, 0.1 * x) + 0.5 * tf.sin(x), lambda u: u * (slope + 0.5 * tf.cos(x)) * mask

    return leaky


def test_a_single_wrong_element_in_float32_at_ten_thousand_is_caught_and_located():
    x = tf.constant(np.random.default_rng(0).normal(size=10_000).astype(np.float32))
    assert gradmagic.check(where_with_python_floats(10_000), x).ok
    for factor in (2.0, 1.1):
        report = gradmagic.check(where_with_python_floats(10_000, 1234, factor), x)
        assert report.codes() == ["fd-mismatch"], (factor, report.codes())
        assert report.numerics.mode == "projection" and report.numerics.dtype == "float32"
        assert [(e.input, e.index) for e in report.numerics.worst][:1] == [("x", (1234,))]


def test_at_five_million_float32_elements_the_unresolved_single_element_error_is_stated():
    x = tf.constant(np.random.default_rng(0).normal(size=5_000_000).astype(np.float32))
    report = gradmagic.check(where_with_python_floats(5_000_000, 4_000_000, 1.1), x)
    found = problem(report, "projection-resolution")
    assert found.severity == "warning" and report.verdict == "warn"
    assert "5,000,000 float32 elements" in found.message and "would not show" in found.message
    assert "full mode" in found.message and "does not run in float64" in found.message


def test_a_single_wrong_element_of_a_3000_element_float32_variable_is_caught_and_located():
    w = tf.Variable(np.random.default_rng(2).normal(size=3000).astype(np.float32), name="w")
    mask = np.ones(3000, np.float32)
    mask[2500] = 2.0

    @tf.custom_gradient
    def scale(x):
        def grad(upstream, variables=None):
            slope = tf.where(x > 0, 1.0, 0.5)
            return upstream * w * slope, [upstream * x * slope * mask]

        return x * w * tf.where(x > 0, 1.0, 0.5), grad

    report = gradmagic.check(scale, tf.constant(np.random.default_rng(3).normal(size=3000).astype(np.float32)))
    assert report.codes() == ["fd-mismatch"]
    assert [(e.input, e.index) for e in report.numerics.worst][:1] == [("w", (2500,))]


def test_a_composite_reaching_a_gradient_of_the_wrong_shape_gets_grad_shape_not_an_fd_error():
    def lbeta(x, y):  # TensorFlow Probability's pattern: a wrapper around an inner tf.custom_gradient of *args
        @tf.custom_gradient
        def inner(*args):
            a, b = args
            common = tf.math.digamma(a + b)
            value = tf.math.lgamma(a) + tf.math.lgamma(b) - tf.math.lgamma(a + b)
            # Both gradients have the broadcast shape [2, 3]: neither is summed back to its input's shape.
            return value, lambda upstream: (
                upstream * (tf.math.digamma(a) - common),
                upstream * (tf.math.digamma(b) - common),
            )

        return inner(x, y)

    report = gradmagic.check(lbeta, tf.constant([0.5, 1.5, 3.0]), tf.constant([[2.0], [4.5]]))
    assert report.op.origin == "composite" and "fd-error" not in report.codes()
    found = problem(report, "grad-shape")
    assert "has 12 elements where its inputs (`x` [3], `y` [2, 1]) have 5" in found.message


class _HalfBroadcast(keras.layers.Layer):
    """A layer whose custom-gradient method returns its gradient as [1, n] for an input of [n]: as many elements,
    another shape, which TensorFlow hands on unchecked (the layer's gradient comes out [1, n] too)."""

    @tf.custom_gradient
    def op(self, x):
        return x * x, lambda upstream: upstream * 2.0 * x[None, :]

    def call(self, x):
        return self.op(x) * 1.0


def test_a_composite_reaching_a_gradient_of_the_same_size_but_another_shape_gets_grad_shape():
    x = tf.constant([0.1, 0.2, 0.3])
    with tf.GradientTape() as tape:  # what TensorFlow itself makes of it: the wrong shape, handed on
        tape.watch(x)
        taken = tape.gradient(_HalfBroadcast()(x), x)
    assert taken.shape == (1, 3)
    assert gradmagic.check(_HalfBroadcast().op, x).codes() == ["grad-shape"]  # the op itself, as before
    for composite in (_HalfBroadcast(), lambda v: _HalfBroadcast().op(v) + 1.0):
        for options in ({}, {"graph": False}, {"graph": False, "tf_function": False}):
            report = gradmagic.check(composite, x, **options)
            assert report.verdict == "fail" and report.op.origin == "composite", (options, report.codes())
            found = problem(report, "grad-shape")
            assert "has shape [1, 3] but" in found.message and "reaches (`op`)" in found.message, found.message
            assert "sum the gradient over the broadcast axes, `tf.reduce_sum(grad, axis=[0])`" in found.message
    # A composite whose custom gradients hand on the right shapes still passes.
    assert gradmagic.check(Scaled(3.0), tf.constant(X)).ok
