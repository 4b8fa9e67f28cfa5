"""The numerical checks with real TensorFlow: no false alarm on correct gradients, every planted bug caught."""

import re

import numpy as np
import pytest
import tensorflow as tf
from conftest import codes, problem

import gradmagic

RNG = np.random.default_rng(7)


# -- correct gradients: a corpus ---------------------------------------------------------------------------


def log1pexp(x):
    e = tf.exp(x)
    return tf.math.log(1 + e), lambda dy: dy * (1 - 1 / (1 + e))


def stable_sigmoid(x):
    y = tf.sigmoid(x)
    return y, lambda dy: dy * y * (1 - y)


def square(x):
    return x * x, lambda dy: 2 * x * dy


def tanh(x):
    y = tf.tanh(x)
    return y, lambda dy: dy * (1 - y * y)


def complex_op(x, y):
    z = x * y + tf.sin(x)
    w = tf.square(y)
    return (z, w), lambda dz, dw: (dz * (y + tf.cos(x)), dz * x + dw * 2 * y)


def matmul(a, b):
    return a @ b, lambda dy: (dy @ tf.transpose(b), tf.transpose(a) @ dy)


def add_bias(x, b):
    return x + b, lambda dy: (dy, tf.reduce_sum(dy, axis=0))


CORRECT = {
    "log1pexp float32": (log1pexp, [np.array([-5.0, 0.0, 3.0], np.float32)]),
    "log1pexp float64": (log1pexp, [np.array([-30.0, -5.0, 0.0, 30.0])]),
    "saturating sigmoid float32": (stable_sigmoid, [np.array([-30.0, -15.0, 0.0, 15.0, 30.0], np.float32)]),
    "saturating sigmoid float64": (stable_sigmoid, [np.linspace(-40, 40, 9)]),
    "values near zero": (square, [np.array([0.0, 1e-8, -1e-6, 1e-3], np.float32)]),
    "tanh": (tanh, [RNG.standard_normal(20).astype(np.float32) * 3]),
    "two inputs two outputs": (complex_op, [np.float32(2.0), np.float32(3.0)]),
    "matmul": (
        matmul,
        [RNG.standard_normal((3, 4)).astype(np.float32), RNG.standard_normal((4, 2)).astype(np.float32)],
    ),
    "broadcast reduced": (
        add_bias,
        [RNG.standard_normal((5, 3)).astype(np.float32), RNG.standard_normal(3).astype(np.float32)],
    ),
}


@pytest.mark.parametrize("name", CORRECT)
def test_correct_gradients_raise_no_false_alarm(name):
    function, inputs = CORRECT[name]
    report = gradmagic.check(tf.custom_gradient(function), *[tf.constant(x) for x in inputs])
    assert report.ok, report
    assert "fd-mismatch" not in codes(report) and report.numerics.mode == "full"
    assert report.numerics.max_error < 1


def test_float32_op_is_compared_in_float64_and_a_float32_only_op_in_its_own_precision():
    report = gradmagic.check(tf.custom_gradient(log1pexp), tf.constant([1.0, 2.0]))
    assert report.numerics.dtype == "float64"

    def float32_only(x):  # a float32 constant: float64 inputs fail, so the check stays in float32
        c = tf.constant(2.0)
        return c * x * x, lambda dy: dy * 2 * c * x

    report = gradmagic.check(tf.custom_gradient(float32_only), tf.constant([1.0, 2.0]))
    # Judged by what its differences measure (no fixed 2 % rtol), and the report says why float32.
    assert report.ok and report.numerics.dtype == "float32" and report.numerics.rtol == 0
    assert report.resolution.why == "the forward refuses float64 inputs (InvalidArgumentError)"


# -- planted bugs ---------------------------------------------------------------------------------------------


def test_gradient_scaled_by_1_001_is_caught_with_the_factor():
    def scaled(x):
        e = tf.exp(x)
        return tf.math.log(1 + e), lambda dy: dy * (1 - 1 / (1 + e)) * 1.001

    found = problem(gradmagic.check(tf.custom_gradient(scaled), tf.constant([-1.0, 0.5, 2.0])), "fd-mismatch")
    assert found.message.startswith("dx is 1.001 times the finite differences at every element: a constant factor")


def test_sign_flip_is_caught_and_named():
    def flipped(x):
        return tf.sin(x), lambda dy: -dy * tf.cos(x)

    found = problem(gradmagic.check(tf.custom_gradient(flipped), tf.constant([0.3, 1.0, 2.0])), "fd-mismatch")
    assert found.message.startswith("dx has the opposite sign at every element: a sign is flipped.")


def test_transposed_matrix_is_caught_with_the_wrong_elements():
    def transposed(a, b):
        return a @ b, lambda dy: (dy @ b, tf.transpose(a) @ dy)  # dy @ b needs b transposed

    a = RNG.standard_normal((3, 3)).astype(np.float32)
    b = RNG.standard_normal((3, 3)).astype(np.float32)
    found = problem(gradmagic.check(tf.custom_gradient(transposed), tf.constant(a), tf.constant(b)), "fd-mismatch")
    assert found.location.input == "a" and "d output[" in found.message


def test_one_element_in_a_thousand_off_by_ten_percent_is_located():
    bump = np.ones(1000, np.float32)
    bump[417] = 1.1

    def one_wrong(x):
        e = tf.exp(x)
        return tf.math.log(1 + e), lambda dy: dy * (1 - 1 / (1 + e)) * bump

    x = tf.constant(RNG.standard_normal(1000).astype(np.float32))
    # Above full_threshold (256 by default), projection mode locates it in a few evaluations.
    projected = gradmagic.check(tf.custom_gradient(one_wrong), x)
    assert projected.numerics.mode == "projection" and projected.codes() == ["fd-mismatch"]
    assert problem(projected, "fd-mismatch").location.index == (417,)
    assert projected.numerics.worst[0].custom == pytest.approx(1.1 * projected.numerics.worst[0].numerical, rel=1e-3)
    # Dense Jacobians, asked for, name the Jacobian element.
    report = gradmagic.check(tf.custom_gradient(one_wrong), x, full_threshold=1000)
    found = problem(report, "fd-mismatch")
    assert report.numerics.mode == "full"
    assert "at 1 of 1000000 Jacobian elements" in found.message
    assert found.location.input == "x" and found.location.index == (417,) and found.location.output_index == (417,)
    assert report.numerics.worst[0].index == (417,)
    assert report.numerics.worst[0].custom == pytest.approx(1.1 * report.numerics.worst[0].numerical, rel=1e-4)


def test_missing_term_is_caught():
    def missing_term(x, y):
        z = x * y + tf.sin(x)
        w = tf.square(y)
        return (z, w), lambda dz, dw: (dz * (y + tf.cos(x)), dz * x)  # forgot dw * 2 * y

    found = problem(
        gradmagic.check(tf.custom_gradient(missing_term), tf.constant(2.0), tf.constant(3.0)), "fd-mismatch"
    )
    assert found.message.startswith("dy is zero at y = 3 where the finite differences give 6: a term is missing")
    assert "d output[1] / d y at y = 3: custom 0, finite differences 6" in found.message


# -- kinks and autodiff ---------------------------------------------------------------------------------------


def test_seed_non_differentiable_point_is_a_warning_not_a_failure():
    def non_diff_op(x):
        y = tf.where(x > 0, x * 2, x)
        return y, lambda dy: tf.where(x > 0, dy * 2, dy)

    report = gradmagic.check(tf.custom_gradient(non_diff_op), tf.constant([-1.0, 0.0, 1.0]))
    found = problem(report, "nondifferentiable-point")
    assert report.ok and found.location.index == (1,)
    assert "slope is 1 from the left and 2 from the right" in found.message


def test_smooth_function_with_zero_slope_is_not_taken_for_a_kink():
    report = gradmagic.check(tf.custom_gradient(square), tf.constant([0.0]))
    assert codes(report) == [] and report.ok


def test_seed_log1pexp_at_100_autodiff_nan_custom_one_finite_differences_one():
    report = gradmagic.check(tf.custom_gradient(log1pexp), tf.constant([-5.0, 0.0, 100.0]))
    assert report.ok
    found = problem(report, "autodiff-nonfinite")
    assert found.severity == "info" and found.location.index == (2,)
    assert (
        "at x[2] = 100" in found.message
        and "autodiff gives nan, the custom gradient 1 and finite differences 1" in found.message
    )
    element = next(e for e in report.numerics.worst if e.index == (2,) and e.output_index == (2,))
    assert (
        np.isnan(element.autodiff) and element.custom == pytest.approx(1.0) and element.numerical == pytest.approx(1.0)
    )


def test_autodiff_differs_when_the_forward_hides_its_derivative():
    def true_square(x):  # the value is x**2, but autodiff sees only the identity
        return x + tf.stop_gradient(x * x - x), lambda dy: dy * 2 * x

    report = gradmagic.check(tf.custom_gradient(true_square), tf.constant([1.0, 3.0]))
    assert report.ok and problem(report, "autodiff-differs").severity == "info"


# -- variables -----------------------------------------------------------------------------------------------


def scale_by(weights, wrong_factor=1.0):
    def scaled(x):
        def grad(dy, variables=None):
            return dy * weights, [dy * x * wrong_factor]

        return x * weights, grad

    return tf.custom_gradient(scaled)


def test_variable_gradients_are_checked_and_the_variable_restored_exactly():
    weights = tf.Variable([0.5, -1.25, 3.0], name="weights")
    before = weights.numpy().copy()
    report = gradmagic.check(scale_by(weights), tf.constant([1.0, 2.0, 3.0]))
    assert report.ok, report
    assert report.numerics.elements == 6  # three inputs and three variable elements
    assert {r.name for r in report.tensors if r.role.startswith("variable")} == {"weights", "dweights"}
    assert weights.numpy().tobytes() == before.tobytes()


def test_wrong_variable_gradient_is_caught_and_names_the_variable():
    weights = tf.Variable([0.5, -1.25, 3.0], name="weights")
    found = problem(gradmagic.check(scale_by(weights, wrong_factor=2.0), tf.constant([1.0, 2.0, 3.0])), "fd-mismatch")
    assert "/ d weights[" in found.message


def test_variable_restored_when_the_op_fails_at_perturbed_inputs():
    weights = tf.Variable([1.0], name="weights")
    before = weights.numpy().copy()

    def fragile(x):
        checked = tf.debugging.assert_equal(weights, tf.constant([1.0]), message="weights moved")
        with tf.control_dependencies([checked]):
            y = x * weights

        def grad(dy, variables=None):
            return dy * weights, [dy * x]

        return y, grad

    report = gradmagic.check(tf.custom_gradient(fragile), tf.constant([2.0]))
    assert "fd-error" in codes(report) and "weights moved" in problem(report, "fd-error").message
    assert weights.numpy().tobytes() == before.tobytes()


# -- projection mode ------------------------------------------------------------------------------------------

N_LARGE = 20_000


def test_projection_mode_passes_a_correct_op_at_any_size():
    x = tf.constant(RNG.standard_normal(N_LARGE).astype(np.float32) * 3)
    report = gradmagic.check(tf.custom_gradient(log1pexp), x)
    assert report.ok, report
    assert report.numerics.mode == "projection" and report.numerics.probes == 4
    assert report.numerics.noise_floor < 1e-8


@pytest.mark.parametrize("element", [0, 12_345, N_LARGE - 1])
def test_projection_mode_locates_one_wrong_element(element):
    bump = np.ones(N_LARGE, np.float32)
    bump[element] = 1.1

    def one_wrong(x):
        e = tf.exp(x)
        return tf.math.log(1 + e), lambda dy: dy * (1 - 1 / (1 + e)) * bump

    report = gradmagic.check(
        tf.custom_gradient(one_wrong), tf.constant(RNG.standard_normal(N_LARGE).astype(np.float32))
    )
    found = problem(report, "fd-mismatch")
    assert found.location.index == (element,)
    located = report.numerics.worst
    assert [e.index for e in located] == [(element,)]
    assert located[0].custom == pytest.approx(1.1 * located[0].numerical, rel=1e-3)


def test_projection_mode_locates_several_wrong_elements():
    bump = np.ones(N_LARGE, np.float32)
    bump[[11, 5_000, 17_777]] = [1.5, 0.5, 2.0]

    def three_wrong(x):
        return tf.sin(x), lambda dy: dy * tf.cos(x) * bump

    report = gradmagic.check(
        tf.custom_gradient(three_wrong), tf.constant(RNG.standard_normal(N_LARGE).astype(np.float32))
    )
    assert sorted(e.index for e in report.numerics.worst) == [(11,), (5_000,), (17_777,)]


def test_projection_mode_says_when_the_error_is_everywhere():
    def scaled(x):
        return tf.sin(x), lambda dy: dy * tf.cos(x) * 1.001

    found = problem(
        gradmagic.check(tf.custom_gradient(scaled), tf.constant(RNG.standard_normal(N_LARGE))), "fd-mismatch"
    )
    assert "spread over many elements: mismatch in 16 of 16 blocks" in found.message
    assert "1.001 times the finite differences" in found.message


@pytest.mark.parametrize("autodiff", ["right", "hidden"])
def test_only_elements_measured_wrong_are_listed(autodiff):
    # The gradient is 1.5 times too large where x > 1, right where 0 < x < 1, and zero (as is the derivative) where
    # x < 0: an error spread over a third of the elements, among right ones and zeros. Whether autodiff names the
    # candidates (it agrees with the finite differences) or cannot (the forward hides its derivative behind
    # stop_gradient), every element the report names was measured wrong: custom and finite differences apart.
    x = tf.constant(RNG.uniform(-2, 3, 20_000))

    def half_wrong(x):
        y = tf.where(x > 0, tf.sin(x), tf.zeros_like(x))
        if autodiff == "hidden":
            y = tf.stop_gradient(y - x) + x  # autodiff: 1 everywhere

        def grad(upstream):
            return upstream * tf.where(x > 0, tf.cos(x), tf.zeros_like(x)) * (1 + 0.5 * tf.cast(x > 1, x.dtype))

        return y, grad

    report = gradmagic.check(tf.custom_gradient(half_wrong), x)
    found = problem(report, "fd-mismatch")
    listed = report.numerics.worst
    assert listed, found.message
    for element in listed:
        assert abs(element.custom - element.numerical) > 0.1 * abs(element.numerical), (element, found.message)
        assert x.numpy()[element.index] > 1, (element, found.message)
    named = re.findall(r"x\[(\d+)\]: custom", found.message)
    assert named and {int(i) for i in named} <= {e.index[0] for e in listed}, found.message


def test_an_error_spread_over_a_layer_norm_calls_no_element_the_wrong_one():
    def layer_norm(x):  # normalised rows, the gradient 1.2 times the right one everywhere
        centred = x - tf.reduce_mean(x, axis=-1, keepdims=True)
        scale = 1.0 / tf.sqrt(tf.reduce_mean(centred * centred, axis=-1, keepdims=True) + 1e-3)
        normed = centred * scale

        def grad(upstream):
            mean = tf.reduce_mean(upstream, axis=-1, keepdims=True)
            along = tf.reduce_mean(upstream * normed, axis=-1, keepdims=True)
            return 1.2 * scale * (upstream - mean - normed * along)

        return normed, grad

    report = gradmagic.check(tf.custom_gradient(layer_norm), tf.constant(RNG.standard_normal((32, 32))))
    found = problem(report, "fd-mismatch")
    assert report.numerics.mode == "projection" and "The error is spread over many elements" in found.message
    assert "Wrong element" not in found.message  # a spread error has no wrong element: its worst one is named so
    named = re.search(r"the worst element found, x\[(\d+), (\d+)\]", found.message)
    assert named and found.location.index == (int(named.group(1)), int(named.group(2))), found.message
    assert "1.2 times the finite differences" in found.message


# -- second order -------------------------------------------------------------------------------------------


def test_second_order_passes_a_gradient_that_differentiates_correctly():
    def cube(x):
        return x**3, lambda dy: dy * 3 * x * x

    report = gradmagic.check(tf.custom_gradient(cube), tf.constant([1.0, -2.0, 0.5]), order=2)
    assert report.ok and report.codes() == []


def test_second_order_catches_a_gradient_that_nested_tapes_cannot_differentiate():
    def frozen(x):
        slope = tf.stop_gradient(3 * x * x)  # right first derivative, no second derivative
        return x**3, lambda dy: dy * slope

    assert gradmagic.check(tf.custom_gradient(frozen), tf.constant([1.0, 2.0])).ok  # order 1 cannot see it
    found = problem(
        gradmagic.check(tf.custom_gradient(frozen), tf.constant([1.0, 2.0]), order=2), "second-order-mismatch"
    )
    assert "d dx[1] / d x[1]: through the gradient function 0" in found.message
    assert found.location.input == "x"


def test_second_order_above_the_full_threshold_says_it_was_skipped():
    def cube(x):
        return x**3, lambda dy: dy * 3 * x * x

    report = gradmagic.check(tf.custom_gradient(cube), tf.ones([50]), order=2, full_threshold=10)
    assert problem(report, "second-order-skipped").severity == "info" and report.ok


# -- the API ---------------------------------------------------------------------------------------------------


def test_check_takes_hand_decorated_ops_and_plain_functions():
    assert gradmagic.check(tf.custom_gradient(square), tf.constant([2.0])).op.origin == "decorated"
    plain = gradmagic.check(square, tf.constant([2.0]))
    assert plain.ok and plain.op.origin == "plain" and plain.op.name == "square"


def test_assert_gradient_raises_with_the_report_text():
    def wrong(x):
        return x * x, lambda dy: dy * x

    with pytest.raises(AssertionError, match="fd-mismatch"):
        gradmagic.assert_gradient(tf.custom_gradient(wrong), tf.constant([1.0, 2.0]))
    assert gradmagic.assert_gradient(tf.custom_gradient(square), tf.constant([1.0, 2.0])).ok


def test_options_reach_the_comparison():
    def slightly_off(x):
        return x * x, lambda dy: dy * 2.002 * x

    assert not gradmagic.check(slightly_off, tf.constant([1.0])).ok
    report = gradmagic.check(slightly_off, tf.constant([1.0]), rtol=1e-2)
    assert report.ok and report.options["rtol"] == 1e-2
    with pytest.raises(TypeError):
        gradmagic.check(slightly_off, tf.constant([1.0]), rtlo=1e-2)


# -- memory ------------------------------------------------------------------------------------------------

REDEFINED = """
def log1pexp(x):
    e = tf.exp(x)
    def grad(upstream):
        return upstream * (1 - 1 / (1 + e))
    return tf.math.log(1 + e), grad
"""


def test_a_redefined_op_is_freed_with_its_graphs_and_tensorflows_gradient_registry_lets_it_go():
    """Each trace of a custom-gradient op registers a gradient function in TensorFlow's global registry for good.

    Its `grad` holds the namespace the op was defined in, as a notebook cell's
    does, so the registry kept every redefinition and its traced graphs alive
    (about 5 MB each).
    """
    import gc
    import weakref

    from tensorflow.python.framework import ops

    from gradmagic.notebook.contexts import KEPT_CONTEXTS

    def define():
        namespace = {"tf": tf}
        exec(REDEFINED, namespace)
        return namespace["log1pexp"]

    def registered():
        return sum(name.startswith("CustomGradient-") for name in ops._gradient_registry._registry)

    x = tf.constant([-5.0, 0.0, 100.0])
    first = define()
    assert gradmagic.check(first, x).ok
    freed = weakref.ref(first)
    del first
    for _ in range(KEPT_CONTEXTS + 1):
        assert gradmagic.check(define(), x).ok
    gc.collect()
    assert freed() is None
    steady = registered()
    for _ in range(5):
        gradmagic.check(define(), x)
    gc.collect()
    assert registered() <= steady


def test_tensorflow_keeps_nothing_of_the_cell_a_check_runs_from():
    """TensorFlow keeps every distinct Python stack it traces ops from, and the code objects in it, for good.

    A notebook cell is a new code object each time it runs; tracing from it
    kept about 1 MB per re-run, the cell's code held by the ~700 stacks of the
    traced ops. The check traces in a thread of its own; what remains are the
    stacks of the few eager ops it runs from the caller's thread.
    """
    import gc
    import sys

    cell = compile("report = gradmagic.check(log1pexp, x)", "<cell>", "exec")
    namespace = {"gradmagic": gradmagic, "log1pexp": log1pexp, "x": tf.constant([-5.0, 0.0, 100.0])}
    held = sys.getrefcount(cell)
    exec(cell, namespace)
    gc.collect()
    assert namespace["report"].ok
    assert sys.getrefcount(cell) - held < 50
