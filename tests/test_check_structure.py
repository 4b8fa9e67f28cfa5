"""Structure checks: each problem code provoked with real TensorFlow, and what its message tells the user."""

import inspect

import numpy as np
import pytest
import tensorflow as tf
from conftest import codes, problem

import gradmagic


def line_of(function, text: str) -> int:
    """The line number in this file of the line of `function` containing `text`."""
    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_seed_return_of_three_values_says_how_to_group_the_outputs():
    def complex_op(x, y):
        z = tf.multiply(x, y) + tf.sin(x)
        w = tf.square(y)

        def grad(dy_dz, dy_dw):
            return dy_dz * (y + tf.cos(x)), dy_dz * x + dy_dw * 2 * y

        return z, w, grad

    report = gradmagic.check(tf.custom_gradient(complex_op), tf.constant(2.0), tf.constant(3.0))
    found = problem(report, "return-structure")
    assert "`return (z, w), grad`" in found.message and "too many values to unpack" in found.message
    assert found.location.line == line_of(complex_op, "return z, w, grad")
    assert not report.ok and report.numerics.mode == "skipped"


def test_function_returning_only_outputs():
    report = gradmagic.check(lambda x: x * 2, tf.constant([1.0]))
    assert "needs `(outputs, grad_fn)`" in problem(report, "return-structure").message


def test_grad_count_is_found_before_tensorflow_fails_far_away():
    def two_inputs(x, y):
        return x * y, lambda dz: dz * y  # one gradient for two inputs

    op = tf.custom_gradient(two_inputs)
    report = gradmagic.check(op, tf.constant(2.0), tf.constant(3.0))
    message = problem(report, "grad-count").message
    assert "returns 1 gradient for 2 inputs (`x`, `y`)" in message and "`return grad_x, grad_y`" in message

    # What TensorFlow itself says, only when a gradient is taken, and inside tf.function:
    @tf.function
    def take(x, y):
        with tf.GradientTape() as tape:
            tape.watch([x, y])
            z = op(x, y)
        return tape.gradient(z, [x, y])

    with pytest.raises((tf.errors.InternalError, ValueError), match="too few gradients|expected to return 2"):
        take(tf.constant(2.0), tf.constant(3.0))


@pytest.mark.parametrize(
    "bias_shape, advice",
    [
        ([3], "`tf.reduce_sum(grad, axis=[0])`"),
        ([1, 3], "`tf.reshape(tf.reduce_sum(grad, axis=[0]), [1, 3])`"),
    ],
)
def test_unreduced_broadcast_gradient_names_the_axes(bias_shape, advice):
    def add_bias(x, b):
        return x + b, lambda dy: (dy, dy)  # db must be summed over the broadcast axis

    report = gradmagic.check(tf.custom_gradient(add_bias), tf.ones([2, 3]), tf.ones(bias_shape))
    found = problem(report, "grad-shape")
    assert f"has shape [2, 3] but `b` has shape {bias_shape}" in found.message and advice in found.message
    assert found.location.input == "b"
    row = next(r for r in report.tensors if r.name == "db")
    assert (
        row.role == "downstream" and row.shape == (2, 3) and row.expected_shape == tuple(bias_shape) and not row.matches
    )


def test_gradient_of_the_wrong_dtype():
    def op(x):
        return x * 2, lambda dy: tf.cast(dy * 2, tf.float64)

    found = problem(gradmagic.check(tf.custom_gradient(op), tf.constant([1.0, 2.0])), "grad-dtype")
    assert "is float64 but `x` is float32" in found.message and "tf.cast(grad, x.dtype)" in found.message


def test_forward_reading_a_variable_without_variables_kwarg_lists_the_variables():
    weights = tf.Variable([1.0, 2.0], name="weights")

    def scale(x):
        return x * weights, lambda dy: dy * weights

    found = problem(gradmagic.check(tf.custom_gradient(scale), tf.constant([3.0, 4.0])), "missing-variables-kwarg")
    assert "`weights`" in found.message and "def grad(upstream, variables=None)" in found.message


def test_wrong_number_of_variable_gradients():
    weights = tf.Variable([1.0, 2.0], name="weights")

    def scale(x):
        def grad(dy, variables=None):
            return dy * weights, [dy * x, dy * x]

        return x * weights, grad

    found = problem(gradmagic.check(tf.custom_gradient(scale), tf.constant([3.0, 4.0])), "variable-grad-count")
    assert "returns 2 variable gradients for 1 variable (`weights`)" in found.message


def test_gradient_function_not_returning_a_pair_with_variables():
    weights = tf.Variable([1.0], name="w")

    def scale(x):
        return x * weights, lambda dy, variables=None: dy * weights

    assert (
        "must return `(grad_xs, grad_vars)`"
        in problem(gradmagic.check(tf.custom_gradient(scale), tf.constant([3.0])), "grad-structure").message
    )


def test_none_gradient_warns_for_floats_and_integer_inputs_are_not_differentiable():
    def op(x, n, y):  # y does not enter the output: None is right, and the numbers confirm it
        return x * tf.cast(n, tf.float32), lambda dy: (dy * tf.cast(n, tf.float32), None, None)

    report = gradmagic.check(tf.custom_gradient(op), tf.constant([1.0]), tf.constant([2]), tf.constant([3.0]))
    confirmed = problem(report, "none-gradient")
    assert confirmed.severity == "info" and confirmed.location.input == "y" and "None is right" in confirmed.message
    unchecked = gradmagic.check(
        tf.custom_gradient(op), tf.constant([1.0]), tf.constant([2]), tf.constant([3.0]), numbers=False
    )
    warning = problem(unchecked, "none-gradient")
    assert warning.severity == "warning" and warning.location.input == "y" and "tf.zeros_like(y)" in warning.message
    info = problem(report, "not-differentiable")
    assert info.severity == "info" and info.location.input == "n" and "int32" in info.message
    assert report.ok  # warnings and infos only


def test_none_gradient_for_an_input_that_matters_is_caught_by_the_numbers():
    def op(x, y):
        return x + y, lambda dy: (dy, None)

    report = gradmagic.check(tf.custom_gradient(op), tf.constant([1.0]), tf.constant([2.0]))
    assert codes(report) == ["none-gradient", "fd-mismatch"]
    assert "d output[0] / d y[0] at y[0] = 2: custom 0, finite differences 1" in report.problems[1].message


def test_seed_tf_cond_on_a_vector_explains_scalar_predicates():
    def non_diff_op(x):
        y = tf.cond(x > 0, lambda: x * 2, lambda: x)
        return y, lambda dy: tf.where(x > 0, dy * 2, dy)

    found = problem(gradmagic.check(tf.custom_gradient(non_diff_op), tf.constant([-1.0, 0.0, 1.0])), "forward-error")
    assert "truth value of an array" in found.message and "tf.where(condition, a, b)" in found.message
    assert found.location.line == line_of(non_diff_op, "tf.cond(")


def test_error_in_the_gradient_function_names_its_line():
    def op(x):
        def grad(dy):
            return dy * not_defined_anywhere  # noqa: F821

        return x * 2, grad

    found = problem(gradmagic.check(tf.custom_gradient(op), tf.constant([1.0])), "grad-error")
    assert "NameError" in found.message and found.location.line == line_of(op, "not_defined_anywhere")


def test_grad_with_too_few_parameters_for_the_outputs_is_explained():
    def op(x):
        return (x * 2, x * 3), lambda dy: dy  # two outputs, one upstream parameter

    found = problem(gradmagic.check(tf.custom_gradient(op), tf.constant([1.0])), "grad-error")
    assert "one upstream gradient per output (2 here)" in found.message


def test_tensor_passed_by_keyword_gets_a_warning_and_tensorflow_refuses_it_in_a_graph():
    def op(x, *, scale):
        return x * scale, lambda dy: dy * scale

    report = gradmagic.check(tf.custom_gradient(op), tf.constant([1.0]), kwargs={"scale": tf.constant(2.0)})
    assert problem(report, "keyword-input").location.input == "scale"
    found = problem(report, "graph-mismatch")
    assert "supports keywords arguments only when eager execution is enabled" in found.message
    assert "pass them by position, or make the op with %%custom_gradient" in found.message

    from gradmagic.frameworks import get_adapter

    magic_op = get_adapter("tensorflow").decorate(op)  # the op %%custom_gradient binds
    report = gradmagic.check(magic_op, tf.constant([1.0]), kwargs={"scale": tf.constant(2.0)})
    assert codes(report) == ["keyword-input"] and report.ok


def test_non_finite_gradient_is_an_error_with_indices_and_output_overflow_a_warning():
    def op(x):
        return tf.exp(x), lambda dy: dy * tf.exp(x) / x  # Inf at x = 0

    report = gradmagic.check(tf.custom_gradient(op), tf.constant([1.0, 0.0, 100.0]))
    gradient = problem(report, "nonfinite-gradient")
    assert gradient.severity == "error" and gradient.location.index == (1,) and "at [1], [2]" in gradient.message
    output = problem(report, "nonfinite-output")
    assert output.severity == "warning" and output.location.index == (2,)


def test_example_input_that_cannot_become_a_tensor():
    report = gradmagic.check(tf.custom_gradient(lambda x: (x, lambda dy: dy)), object())
    assert "cannot become a tensor" in problem(report, "input-type").message


def test_graph_only_failure_is_a_graph_mismatch():
    def op(x):
        scale = float(np.sum(x.numpy()))  # fine eagerly, impossible in a graph
        return x * scale, lambda dy: dy * scale

    found = problem(gradmagic.check(tf.custom_gradient(op), tf.constant([1.0, 2.0])), "graph-mismatch")
    assert "works eagerly but taking its gradient inside tf.function fails" in found.message


def test_python_randomness_frozen_when_traced_is_a_graph_mismatch():
    rng = np.random.default_rng(3)

    def jittery(x):
        scale = float(rng.uniform(1, 2))  # a new number eagerly, a constant once traced
        return x * scale, lambda dy: dy * scale

    found = problem(gradmagic.check(tf.custom_gradient(jittery), tf.constant([1.0, 2.0])), "graph-mismatch")
    assert "different output (#0) eagerly and inside tf.function" in found.message


def test_check_never_raises_for_a_broken_op():
    def broken(x):
        raise RuntimeError("broken on purpose")

    report = gradmagic.check(broken, tf.constant(1.0))
    assert not report.ok and codes(report) == ["forward-error"]
    assert "RuntimeError: broken on purpose." in report.problems[0].message


def test_shapes_table_lists_inputs_outputs_upstream_and_downstream():
    def complex_op(x, y):
        z = x * y + tf.sin(x)
        w = tf.square(y)

        def grad(dz, dw):
            return dz * (y + tf.cos(x)), dz * x + dw * 2 * y

        return (z, w), grad

    report = gradmagic.check(tf.custom_gradient(complex_op), tf.constant([2.0, 1.0]), tf.constant([3.0, 0.5]))
    assert report.ok, report
    rows = {(r.role, r.name) for r in report.tensors}
    assert rows == {
        ("input", "x"),
        ("input", "y"),
        ("output", "output[0]"),
        ("output", "output[1]"),
        ("upstream", "doutput[0]"),
        ("upstream", "doutput[1]"),
        ("downstream", "dx"),
        ("downstream", "dy"),
    }


def test_string_inputs_and_outputs_are_not_differentiable_and_nothing_breaks():
    # An upstream for a string output was built as zeros, which TensorFlow cannot make a string of: gradmagic's own
    # ValueError reached the user.
    def echo(x):
        return x, lambda upstream: upstream

    report = gradmagic.check(echo, tf.constant(["a", "b"]))
    assert report.verdict == "unchecked" and report.codes() == ["not-differentiable"]
    assert "string inputs have no gradient" in report.numerics.skipped_because

    def sin_and_label(x):
        return (tf.sin(x), tf.strings.as_string(x)), lambda upstream, label: upstream * tf.cos(x)

    assert gradmagic.check(sin_and_label, tf.constant([1.0, 2.0])).verdict == "pass"
