"""Bad input, class by class: each gets a message naming its cause and where it came from (the cell line, the magic
line, `%config`), nothing of the user's is blamed on gradmagic, no option or input turns a wrong gradient into a pass,
and nothing a check runs is left behind in the notebook."""

import warnings

import numpy as np
import pytest
import tensorflow as tf
from conftest import codes, problem
from IPython.core.error import UsageError

import gradmagic


@pytest.fixture
def previous(nb):
    """An op and a variable defined before the cell under test, which a failing cell must leave as they were."""
    nb.ok("%%custom_gradient\ndef kept(x):\n    return x * 3, lambda dy: dy * 3")
    nb.ok("weights = tf.Variable([1., 2.])")
    return nb.ns["kept"], nb.ns["weights"]


def assert_kept(nb, previous):
    assert nb.ns["kept"] is previous[0] and nb.ns["weights"] is previous[1]
    nb.ok("assert float(tf.reduce_sum(kept(tf.constant([1., 1.])))) == 6.0")


# -- what the gradient function returns ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "returned, what",
    [("(g for g in [dy * 2])", "returns a generator, not the gradients"), ("object()", "is an object, not a tensor")],
)
def test_a_gradient_that_is_no_tensor_is_named_at_its_line_never_blamed_on_gradmagic(nb, returned, what):
    shown = nb.ok(
        f"%%custom_gradient --check x=tf.constant([1., 2.])\ndef op(x):\n    def grad(dy):\n        return {returned}\n"
        "    return x * 2, grad\n"
    ).shown
    report = nb.ns["_"]
    found = problem(report, "grad-type")
    assert found.severity == "error" and what in found.message and found.location.line == 3, found
    assert report.verdict == "fail" and "gradmagic's own code" not in shown and "ValueError" not in shown
    assert callable(nb.ns["op"])  # bound, to be inspected


# -- example inputs ------------------------------------------------------------------------------------------------


def test_non_finite_inputs_are_named_as_the_cause_without_a_numpy_warning(nb):
    shown = nb.ok(
        "%%custom_gradient --check x=tf.constant([1., float('nan'), float('inf')])\ndef square(x):\n"
        "    return x * x, lambda dy: dy * 2 * x\n"
    ).shown
    report = nb.ns["_"]
    assert report.verdict == "unchecked" and codes(report) == ["nonfinite-input"], report
    found = problem(report, "nonfinite-input")
    assert "The example input `x` has 2 non-finite elements (Inf/NaN): x[1], x[2]" in found.message
    assert found.location.input == "x" and found.location.index == (1,)
    assert report.numerics.skipped_because == "the example inputs are NaN/Inf at x[1], x[2]"
    assert "RuntimeWarning" not in shown and "forward" not in found.message.split(".")[0]

    def doubled(x):
        return x * 2.0, lambda dy: dy * 2.0

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning leaking from the check fails the test
        report = gradmagic.check(doubled, np.array([1.0, np.inf]))
    assert codes(report) == ["nonfinite-input"]


def test_a_variable_that_is_not_finite_is_named():
    weight = tf.Variable([1.0, np.nan], name="weight")

    @tf.custom_gradient
    def scaled(x):
        return x * weight, lambda dy, variables=None: (dy * weight, [dy * x])

    report = gradmagic.check(scaled, tf.constant([1.0, 2.0]))
    found = problem(report, "nonfinite-input")
    assert "The variable `weight`, which the forward reads, has 1 non-finite element (NaN): weight[1]" in found.message
    assert report.verdict == "unchecked" and found.location.variable == "weight"


def test_a_gradient_function_never_called_for_integer_inputs_is_not_failed(nb):
    nb.ok(
        "%%custom_gradient --check x=tf.constant([1, 2])\ndef squared(x):\n    def grad(dy):\n"
        "        return dy * 2 * x\n    return tf.cast(x, tf.float32) ** 2, grad\n"
    )
    report = nb.ns["_"]
    assert report.verdict == "unchecked" and report.ok, report
    found = problem(report, "grad-error")
    assert found.severity == "info" and "TensorFlow never calls it for these inputs" in found.message
    assert found.location.line == 4
    # With a floating input beside it, the gradient is asked for: its failure is the op's.
    nb.ok(
        "%%custom_gradient --check n=tf.constant([1, 2]) --check y=tf.constant([1., 2.])\ndef mixed(n, y):\n"
        "    def grad(dy):\n        return dy * n, dy\n    return tf.cast(n, tf.float32) * y, grad\n"
    )
    assert problem(nb.ns["_"], "grad-error").severity == "error"


# -- the magic line ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line, message",
    [
        ("--rtol 0.9", "--rtol is a relative tolerance: at 0.5 or more it passes a gradient twice too large"),
        ("--keras --backends all,jax", "--backends: 'all' stands alone (every installed backend), not in a list"),
    ],
)
def test_a_bad_magic_line_names_its_cause_and_loses_nothing(nb, previous, line, message):
    run = nb.fails(f"%%custom_gradient {line}\ndef kept(x):\n    return x * 5, lambda dy: dy * 5", UsageError)
    assert message in run.stderr, run.stderr
    assert_kept(nb, previous)


def test_a_bad_config_value_in_a_watch_is_said_to_come_from_config(nb):
    nb.ok("%config GradientMagics.probes = 0")
    try:
        run = nb.fails("%%gradwatch\nkept_value = 1", UsageError)
        assert "%config GradientMagics.probes must be at least 1, not 0" in run.stderr
        assert "kept_value" not in nb.ns
    finally:
        nb.ok("%config GradientMagics.probes = 4")
