"""Verdicts to trust: `ok` means judged and right. A gradient not linear in the upstream fails in every mode; bad
options are errors naming the option; what could not be judged says so ("not checked", fd-nonfinite), never a pass;
advice says what is really wrong."""

import logging
import math
import warnings

import numpy as np
import pytest
import tensorflow as tf
from conftest import codes, problem

import gradmagic
from gradmagic.errors import OptionError


def squared_upstream(x):
    # Right on one-hot upstream vectors (u * u = u), wrong on any other: full mode built from one-hot rows passed it.
    return x * x, lambda upstream: upstream * upstream * 2 * x


def clip_by_norm(x):
    """TensorFlow's own clip_gradients example."""
    return tf.identity(x), lambda upstream: tf.clip_by_norm(upstream, 0.5)


@pytest.mark.parametrize("size", [3, 3000])
def test_a_gradient_not_linear_in_the_upstream_fails_in_both_modes(size):
    x = tf.constant(np.linspace(0.5, 1.5, size).astype(np.float32))
    report = gradmagic.check(squared_upstream, x, full_threshold=2000)
    assert report.codes() == ["grad-nonlinear"]
    found = problem(report, "grad-nonlinear")
    assert found.severity == "error" and found.location.input == "x" and found.location.index is not None
    assert "grad(0.75 u1 - 1.5 u2)" in found.message and "0.75 grad(u1) - 1.5 grad(u2)" in found.message
    assert report.numerics.mode == "skipped" and "grad-nonlinear" in report.numerics.skipped_because


def test_a_linear_gradient_passes_the_linearity_probe_in_float32_and_float64():
    def softplus(x):
        return tf.math.softplus(x), lambda upstream: upstream * tf.sigmoid(x)

    for dtype in (tf.float32, tf.float64):
        report = gradmagic.check(softplus, tf.constant(np.linspace(-30, 30, 41), dtype))
        assert report.verdict == "pass", report


def test_clipping_by_norm_is_nonlinear_named_undeclared_and_never_a_declared_match():
    x = tf.constant([1.0, 2.0, 3.0])
    undeclared = gradmagic.check(clip_by_norm, x)
    assert undeclared.codes() == ["grad-nonlinear"] and undeclared.surrogate.pattern == "gradient clipping"
    assert "--surrogate" in problem(undeclared, "grad-nonlinear").message
    # Declared: at a point where the one-hot rows (norm 1) are clipped the finite differences differ as well.
    declared = gradmagic.check(clip_by_norm, x, surrogate=True)
    assert declared.ok and declared.verdict == "surrogate" and "surrogate-matches" not in codes(declared)
    assert problem(declared, "surrogate-nonlinear").severity == "info"
    # A clip wide enough that no one-hot row is clipped: the finite differences agree, yet no "matches" is said.
    wide = gradmagic.check(lambda x: (tf.identity(x), lambda u: tf.clip_by_norm(u, 2.0)), x, surrogate=True)
    assert wide.verdict == "surrogate" and "surrogate-matches" not in codes(wide), wide


@pytest.mark.parametrize(
    "options, named",
    [
        ({"eps": 0}, "eps"),
        ({"eps": -1e-3}, "eps"),
        ({"eps": math.inf}, "eps"),
        ({"rtol": -1}, "rtol"),
        ({"rtol": math.nan}, "rtol"),
        ({"atol": math.inf}, "atol"),
        ({"atol": "small"}, "atol"),
        ({"probes": 0}, "probes"),
        ({"full_threshold": 2.5}, "full_threshold"),
        ({"order": 3}, "order"),
        ({"seed": -1}, "seed"),
        ({"sweep_range": (1, 0)}, "sweep_range"),
        ({"framework": "nonsense"}, "framework"),
        ({"graph": "yes"}, "graph"),
    ],
)
def test_bad_options_are_errors_naming_the_option(options, named):
    too_large = lambda x: (x * x, lambda upstream: upstream * 2 * x * 5 / 3)  # noqa: E731 - a wrong gradient
    with pytest.raises(OptionError, match=f"^{named}"):
        gradmagic.check(too_large, tf.constant([1.0, 2.0]), **options)


def test_bad_options_on_the_magic_line_name_the_option(nb):
    cell = "%%custom_gradient {} --check x=tf.constant([1., 2.])\ndef sq(x):\n    return x * x, lambda dy: 2 * x * dy"
    for line, named in (("--rtol -1", "--rtol"), ("--eps 0", "--eps"), ("--atol nan", "--atol")):
        shown = nb.fails(cell.format(line)).stderr
        assert named in shown and "UsageError" in shown, shown
    nb.ok("%config GradientMagics.eps = -0.5")
    try:
        assert "%config GradientMagics.eps must be" in nb.fails(cell.format("")).stderr
    finally:  # the shell's configuration outlives this notebook
        nb.ok("%config GradientMagics.eps = None")


def test_finite_differences_that_are_nan_are_named_never_dropped():
    def safe_sqrt(x):
        y = tf.sqrt(x)
        return y, lambda upstream: upstream * tf.where(x > 0, 0.5 / tf.sqrt(tf.maximum(x, 1e-30)), 0.0)

    report = gradmagic.check(safe_sqrt, tf.constant([0.0, 1.0, 4.0]))
    found = problem(report, "fd-nonfinite")
    assert found.severity == "warning" and found.location.index == (0,)
    assert "x[0] = 0" in found.message and "could not be judged" in found.message
    assert report.verdict == "warn"  # judged at x[1] and x[2], and says what was not
    nowhere = gradmagic.check(safe_sqrt, tf.constant([0.0]))
    assert nowhere.verdict == "unchecked" and "NaN/Inf" in nowhere.numerics.skipped_because


def test_what_cannot_be_judged_is_not_checked_never_passes():
    def doubled(x):
        return x * 2, lambda upstream: upstream * 2

    integers = gradmagic.check(doubled, tf.constant([1, 2]))
    assert integers.verdict == "unchecked" and "integer" in integers.numerics.skipped_because
    empty = gradmagic.check(doubled, tf.zeros([0]))
    assert empty.verdict == "unchecked" and "no elements" in empty.numerics.skipped_because
    # A wrong gradient of a complex input is not passed: it is not checked, and the report says so.
    wrong_complex = gradmagic.check(
        lambda z: (z * z, lambda upstream: upstream * tf.math.conj(3 * z)), tf.constant([1 + 2j], tf.complex64)
    )
    assert wrong_complex.verdict == "unchecked" and not wrong_complex.verdict == "pass"
    assert "complex" in problem(wrong_complex, "complex-unchecked").message
    assert "complex inputs" in wrong_complex.numerics.skipped_because
    assert "not checked" in gradmagic.render.text.render_text(wrong_complex).splitlines()[0]


def test_a_full_jacobian_returned_instead_of_a_vector_jacobian_product_is_told_so():
    def squares(x):
        return x * x, lambda upstream: tf.linalg.diag(2 * x)  # the Jacobian, not upstream times it

    found = problem(gradmagic.check(squares, tf.constant([1.0, 2.0, 3.0])), "grad-shape")
    assert "returns the full Jacobian d output / d x" in found.message
    assert "was broadcast" not in found.message


def test_a_batched_per_example_jacobian_returned_instead_of_a_vector_jacobian_product_is_told_so():
    def batched_softmax(x):  # x [2, 3]: the gradient is each row's [3, 3] Jacobian, scaled but never contracted
        y = tf.nn.softmax(x)

        def grad(upstream):
            jacobian = tf.linalg.diag(y) - y[..., :, None] * y[..., None, :]
            return tf.einsum("bi,bij->bij", upstream, jacobian)

        return y, grad

    report = gradmagic.check(batched_softmax, tf.constant([[0.1, 0.5, -0.3], [1.0, 2.0, 3.0]]))
    assert report.codes() == ["grad-shape"]
    found = problem(report, "grad-shape")
    assert "has shape [2, 3, 3] but `x` has shape [2, 3]" in found.message
    assert "the batch axes [2] that the input and the output share, then the output's [3], then the input's [3]" in (
        found.message
    )
    assert "returns one Jacobian d output / d x per example, not the vector-Jacobian product" in found.message
    assert 'tf.einsum("ai,aip->ap", upstream, jacobian)' in found.message
    # The input's axes first, the output's last: the same, the other way round.
    transposed = problem(
        gradmagic.check(lambda x: (tf.tile(x[:, :1], [1, 4]), lambda upstream: tf.zeros([2, 3, 4])), tf.ones([2, 3])),
        "grad-shape",
    )
    assert "then the input's [3], then the output's [4]" in transposed.message
    assert 'tf.einsum("ai,api->ap", upstream, jacobian)' in transposed.message
    # A broadcast over a batch is no Jacobian: a per-example scale's gradient left unreduced is told to be summed.
    scale = problem(
        gradmagic.check(
            lambda x, s: (x * s, lambda upstream: (upstream * s, upstream * x)), tf.ones([2, 3]), tf.ones([2, 1])
        ),
        "grad-shape",
    )
    assert "Jacobian" not in scale.message and "tf.reduce_sum(grad, axis=[1])" in scale.message


def test_variables_of_the_same_name_are_told_apart():
    first, second = tf.Variable([1.0, 2.0]), tf.Variable([3.0, 4.0, 5.0])  # both named "Variable"

    def scaled(x):
        y = x * first + tf.reduce_sum(second)

        def grad(upstream, variables=None):
            wrong = tf.ones([3]) * tf.reduce_sum(upstream) * 1.5  # should be 1 times
            return upstream * first, [upstream * x, wrong]

        return y, grad

    report = gradmagic.check(scaled, tf.constant([1.0, 2.0]))
    rows = [(row.name, row.shape) for row in report.tensors if row.role == "variable"]
    assert rows == [("first", (2,)), ("second", (3,))]  # as the code names them (issue 31)
    assert problem(report, "fd-mismatch").location.input == "second"

    held = [first, second]  # reached through a list: no name of the code's, TensorFlow's told apart

    def listed(x):
        y = x * held[0] + tf.reduce_sum(held[1])

        def grad(upstream, variables=None):
            return upstream * held[0], [upstream * x, tf.ones([3]) * tf.reduce_sum(upstream) * 1.5]

        return y, grad

    report = gradmagic.check(listed, tf.constant([1.0, 2.0]))
    rows = [(row.name, row.shape) for row in report.tensors if row.role == "variable"]
    assert rows == [("Variable#1", (2,)), ("Variable#2", (3,))]
    assert problem(report, "fd-mismatch").location.input == "Variable#2"


@pytest.mark.parametrize("options", [{}, {"tf_function": False}, {"tf_function": False, "graph": False}, {"order": 2}])
def test_an_op_whose_forward_calls_tf_py_function_is_checked_and_its_autodiff_note_names_it(options):
    def py_sin(factor):
        @tf.custom_gradient
        def op(x):
            y = tf.py_function(tf.sin, [x], tf.float64)
            y.set_shape(x.shape)
            return y, lambda upstream: upstream * tf.cos(x) * factor

        return op

    x = tf.constant([0.3, -0.7, 1.1], tf.float64)
    # TensorFlow takes the gradient of tf.py_function once per run of the forward: a second fails (the check's
    # Jacobian rows came from one run, which used to make a correct op a graph-mismatch).
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = tf.py_function(tf.sin, [x], tf.float64)
    tape.gradient(y, x)
    with pytest.raises(tf.errors.UnknownError, match=r"KeyError: b'pyfunc_\d+'"):
        tape.gradient(y, x)
    right = gradmagic.check(py_sin(1.0), x, **options)
    assert right.verdict == "pass" and right.codes() == ["autodiff-unavailable"], right
    note = problem(right, "autodiff-unavailable").message
    assert (
        "because it uses tf.py_function (TensorFlow takes its gradient, autodiff of the Python function as it ran, "
        "at most once per run of the forward" in note
    )
    assert "numpy_function" not in note
    assert "finite differences judged the custom gradient" in note
    wrong = gradmagic.check(py_sin(1.2), x, **options)
    assert wrong.codes() == ["fd-mismatch", "autodiff-unavailable"]
    assert "1.2 times the finite differences" in problem(wrong, "fd-mismatch").message


def test_the_autodiff_notes_name_the_ops_that_really_stop_gradients():
    def numpy_softplus(x):
        y = tf.numpy_function(lambda v: np.log1p(np.exp(v)), [x], tf.float32)
        y.set_shape(x.shape)
        return y, lambda upstream: upstream * tf.sigmoid(x)

    # TensorFlow's own gradient through tf.numpy_function is zero (unconnected): named, not guessed.
    found = problem(gradmagic.check(numpy_softplus, tf.constant([-1.0, 0.0, 2.0])), "autodiff-differs")
    assert "the forward uses tf.numpy_function (no gradient at all) whose" in found.message
    assert "tf.py_function" not in found.message

    def stopped(x):
        return x * x + tf.stop_gradient(x), lambda upstream: upstream * (2 * x + 1)

    differs = problem(gradmagic.check(stopped, tf.constant([1.0, 2.0])), "autodiff-differs")
    assert "uses `tf.stop_gradient` whose registered gradient" in differs.message
    assert "round" not in differs.message and "sign" not in differs.message


def test_a_reversal_layer_with_a_hyper_parameter_input_still_gets_the_reversal_hint():
    def reverse(x, strength):
        return tf.identity(x), lambda upstream: (-strength * upstream, tf.zeros_like(strength))

    report = gradmagic.check(reverse, tf.constant([1.0, -2.0, 3.0]), tf.constant(1.0))
    assert "This looks like gradient reversal" in problem(report, "fd-mismatch").message
    assert report.surrogate.pattern == "gradient reversal"
    declared = gradmagic.check(reverse, tf.constant([1.0, -2.0, 3.0]), tf.constant(0.5), surrogate=True)
    assert declared.verdict == "surrogate" and declared.surrogate.pattern == "scaled gradient reversal"


def test_an_error_spread_over_many_elements_still_names_the_worst_one_found():
    def ramp_wrong(x):
        # Wrong everywhere by a factor growing with the index: the worst element is the last.
        factor = 1 + tf.linspace(0.0, 0.5, 5000)
        return tf.sin(x), lambda upstream: upstream * tf.cos(x) * factor

    report = gradmagic.check(ramp_wrong, tf.constant(np.linspace(-1, 1, 5000).astype(np.float32)))
    found = problem(report, "fd-mismatch")
    assert report.numerics.mode == "projection" and "spread over many elements" in found.message
    assert "the worst element found, x[" in found.message
    worst = report.numerics.worst[-1]
    assert worst.index[0] > 4000 and worst.custom / worst.numerical == pytest.approx(
        1 + 0.5 * worst.index[0] / 4999, rel=1e-2
    )


def test_second_order_messages_agree_with_first_order_and_name_a_nested_custom_gradient():
    @tf.custom_gradient
    def tripled(v):
        return 3 * v, lambda dy: 2 * dy  # wrong: should be 3 * dy

    def cube(x):
        # Right at first order: d(x^3)/dx = 3 x^2 = tripled(x^2). Its derivative goes through tripled's gradient.
        return x**3, lambda dy: dy * tripled(x * x)

    report = gradmagic.check(cube, tf.constant([1.0, 2.0]), order=2)
    assert report.codes() == ["second-order-mismatch"]
    assert "calls a custom-gradient op of its own" in problem(report, "second-order-mismatch").message

    def wrong_cube(x):
        return x**3, lambda dy: dy * tf.stop_gradient(2 * x * x)  # wrong at first order, and not differentiable

    both = gradmagic.check(wrong_cube, tf.constant([1.0, 2.0]), order=2)
    assert codes(both)[:2] == ["fd-mismatch", "second-order-mismatch"]
    message = problem(both, "second-order-mismatch").message
    assert "already wrong at first order" in message and "is right at this point" not in message


def test_a_gradient_function_with_side_effects_is_noticed_and_its_state_put_back():
    calls = tf.Variable(0.0)
    seen = []

    def counted(x):
        def grad(upstream):
            calls.assign_add(1.0)
            seen.append(1)
            return upstream * 2 * x

        return x * x, grad

    report = gradmagic.check(counted, tf.constant([1.0, 2.0]))
    found = problem(report, "grad-side-effect")
    assert found.severity == "warning" and "`calls` (assigned)" in found.message and "`seen` (changed)" in found.message
    assert "put it back" in found.message
    assert float(calls.numpy()) == 0.0 and seen == []
    assert report.verdict == "warn"


def test_a_none_gradient_for_a_hyper_parameter_the_forward_ignores_is_right_not_a_warning():
    def clip_gradient_by_norm(x, norm):  # TensorFlow's eager guide: the clip norm is an input with no gradient
        return tf.identity(x), lambda upstream: [tf.clip_by_norm(upstream, norm), None]

    report = gradmagic.check(clip_gradient_by_norm, tf.constant([3.0, -4.0, 1.0]), tf.constant(1.0), surrogate=True)
    found = problem(report, "none-gradient")
    assert found.severity == "info" and found.location.input == "norm" and "None is right" in found.message
    assert report.verdict == "surrogate"

    def scaled(x, scale):  # the output depends on `scale`: its None gradient stays a warning, and the numbers fail it
        return x * scale, lambda upstream: (upstream * scale, None)

    wrong = gradmagic.check(scaled, tf.constant([3.0, -4.0]), tf.constant(2.0))
    assert problem(wrong, "none-gradient").severity == "warning" and "fd-mismatch" in wrong.codes()


def test_state_a_gradient_function_reaches_through_self_is_noticed_and_put_back():
    class ScheduledReversal(tf.Module):  # DANN's schedule: every backward pass counts itself, updates the strength
        def __init__(self):
            super().__init__()
            self.calls, self.strength = tf.Variable(0.0), tf.Variable(0.0)

        @tf.custom_gradient
        def reverse(self, x):
            def grad(upstream):
                self.calls.assign_add(1.0)
                self.strength.assign(2.0 / (1.0 + tf.exp(-self.calls)) - 1.0)
                return -self.strength * upstream

            return tf.identity(x), grad

    layer = ScheduledReversal()
    report = gradmagic.check(layer.reverse, tf.constant([0.5, -1.0, 2.0]), surrogate=True)
    found = problem(report, "grad-side-effect")
    assert "`self.calls` (assigned)" in found.message and "`self.strength` (assigned)" in found.message
    assert "graph-mismatch" not in report.codes() and report.verdict == "surrogate"
    assert float(layer.calls.numpy()) == 0.0 and float(layer.strength.numpy()) == 0.0


def test_a_scalar_hyper_parameters_unreduced_gradient_is_told_to_be_summed_not_called_a_jacobian():
    def gradient_reversal(x, strength):  # public DANN code: [-dy * lamb, -dy * lamb], lamb's gradient never summed
        return tf.identity(x), lambda upstream: [-upstream * strength, -upstream * strength]

    found = problem(gradmagic.check(gradient_reversal, tf.constant([0.5, -1.0, 2.0]), tf.constant(0.3)), "grad-shape")
    assert found.location.input == "strength" and "full Jacobian" not in found.message
    assert "`strength` was broadcast in the forward" in found.message
    assert "tf.reduce_sum(grad, axis=[0])" in found.message


def five_thirds(x):
    return tf.sin(x), lambda upstream: upstream * tf.cos(x) * 5 / 3


def test_a_step_too_small_to_judge_is_said_never_passes():
    x = tf.constant([0.3, -0.7, 1.1], tf.float64)
    # eps = 1e-15: the differences are rounding; their tolerance, which holds it, would pass 5/3 of the derivative.
    for eps in (1e-15, 1e-16, 1e-300):
        report = gradmagic.check(five_thirds, x, eps=eps)
        assert report.verdict == "unchecked" and "rounding" in report.numerics.skipped_because, (eps, report)
        found = problem(report, "fd-rounding")
        cause = "rounds to zero in float64" if eps == 1e-300 else "is too small for float64"  # no step at all
        assert found.severity == "warning" and f"eps={eps:.3g} {cause}" in found.message
    # A step small but still larger than rounding judges, and a mismatch beyond the rounding is found at any step.
    assert gradmagic.check(five_thirds, x, eps=1e-8).codes() == ["fd-mismatch"]
    assert gradmagic.check(five_thirds, x, eps=1e-12).codes() == ["fd-mismatch"]
    right = lambda x: (tf.sin(x), lambda upstream: upstream * tf.cos(x))  # noqa: E731
    assert gradmagic.check(right, x, eps=1e-8).verdict == "pass"


def test_a_relative_tolerance_of_one_half_or_more_is_refused():
    # At 0.9, a gradient 5 times too large passes the max-relative tolerance; at 0.5, one twice too large.
    for rtol in (0.5, 0.9, 1.0, 1e6):
        with pytest.raises(OptionError, match="^rtol is a relative tolerance: at 0.5 or more it passes a gradient"):
            gradmagic.check(five_thirds, tf.constant([0.3]), rtol=rtol)
    assert gradmagic.check(five_thirds, tf.constant([0.3]), rtol=0.3).codes() == ["fd-mismatch"]


def test_an_element_whose_derivative_could_not_be_judged_leaves_no_pass_behind():
    def wrong_safe_sqrt(x):  # 0.7 where 0.5 is right; at 0 the finite differences are NaN
        y = tf.sqrt(x)
        return y, lambda upstream: upstream * tf.where(x > 0, 0.7 / tf.sqrt(tf.where(x > 0, x, 1.0)), 0.0)

    # Every diagonal entry is NaN: the zeros judged off the diagonal judge nothing of the elements.
    report = gradmagic.check(wrong_safe_sqrt, tf.zeros([3]))
    assert report.verdict == "unchecked" and report.codes() == ["fd-nonfinite"], report


def safe_sqrt_times(factor):
    def safe_sqrt(x):
        y = tf.sqrt(x)
        return y, lambda upstream: upstream * tf.where(x > 0, factor * 0.5 / tf.sqrt(tf.where(x > 0, x, 1.0)), 0.0)

    return safe_sqrt


def test_projection_mode_leaves_out_and_names_the_elements_at_the_edge_of_the_domain(recwarn):
    values = np.abs(np.random.default_rng(0).standard_normal(1000)) + 0.1
    values[[3, 500, 777]] = 0.0
    x = tf.constant(values)
    right = gradmagic.check(safe_sqrt_times(1.0), x)
    assert right.numerics.mode == "projection" and right.verdict == "warn", right
    edge = problem(right, "fd-nonfinite")
    assert "at 3 elements (x[3], x[500], x[777])" in edge.message and "judged without them" in edge.message
    wrong = gradmagic.check(safe_sqrt_times(1.2), x)
    assert "fd-mismatch" in wrong.codes()
    assert "1.2 times the finite differences" in problem(wrong, "fd-mismatch").message
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]  # no NumPy warning from gradmagic


def leaky_wrong_at(element):
    """tf.where with Python floats: float32 only; the gradient 1.1 times too large at `element`."""

    def leaky(x):
        slope = tf.where(x > 0, 1.0, 0.1)

        def grad(u):
            return tf.tensor_scatter_nd_update(u * slope, [[element]], [u[element] * slope[element] * 1.1])

        return x * slope, grad

    return leaky


def test_float32_only_op_a_wrong_element_of_a_small_gradient_is_caught_and_located():
    # Half the elements have a gradient ten times smaller (0.1); the probes' random upstream hides none (its
    # magnitudes stay within [0.5, 1.5)), and blocks holding a kink (elements within a step of 0) are measured last.
    values = np.random.default_rng(0).standard_normal(10_000)
    x = tf.constant(values, tf.float32)
    for element in np.flatnonzero(values < 0)[:3].tolist() + [8058]:
        report = gradmagic.check(leaky_wrong_at(element), x)
        assert report.codes() == ["fd-mismatch"], (element, report)
        assert [e.index for e in report.numerics.worst][:1] == [(element,)]


def test_a_constant_factor_is_named_only_where_it_explains_every_wrong_element():
    x = tf.constant([0.5, 1.0, 1.5, 2.0], tf.float64)
    varying = gradmagic.check(lambda x: (tf.sin(x), lambda u: u * tf.cos(x) * (1 + 1e-4 * x)), x)
    assert "fd-mismatch" in varying.codes() and "constant factor" not in problem(varying, "fd-mismatch").message
    constant = gradmagic.check(lambda x: (tf.sin(x), lambda u: u * tf.cos(x) * 1.5), x)
    assert (
        "dx is 1.5 times the finite differences at every element: a constant factor is off"
        in problem(constant, "fd-mismatch").message
    )


def embedding(factor: float = 1.0):
    """An embedding lookup whose gradient is `tf.IndexedSlices`, as TensorFlow's own gather's is (an id looked up
    twice gets both rows' gradients, summed), its values times `factor`."""

    def lookup(table, ids):
        def grad(upstream):
            return tf.IndexedSlices(factor * upstream, ids, dense_shape=tf.shape(table, out_type=tf.int64)), None

        return tf.gather(table, ids), grad

    return tf.custom_gradient(lookup)


@pytest.mark.parametrize("lookups", [4, 300])
def test_an_embedding_gradient_as_indexed_slices_is_checked(lookups):
    table = tf.constant(np.random.default_rng(1).standard_normal((50, 4)).astype(np.float32))
    ids = np.concatenate([[7, 7], np.random.default_rng(2).integers(0, 50, lookups - 2)])
    report = gradmagic.check(embedding(), table, tf.constant(ids), graph=False)
    assert report.verdict == "pass", [(p.code, p.message) for p in report.problems]
    wrong = gradmagic.check(embedding(1.5), table, tf.constant(ids), graph=False)
    assert wrong.codes() == ["not-differentiable", "fd-mismatch"] and wrong.verdict == "fail"
    assert {e.index[0] for e in wrong.numerics.worst} <= set(ids.tolist())


def test_an_op_tensorflow_cannot_vectorise_logs_nothing(caplog):
    # TensorFlow's vectorizer logs an ERROR with the op's whole definition when it falls back to a loop, which the
    # check asks it to do: a user saw a page of protobuf text in red under a checking cell.
    table = tf.constant(np.random.default_rng(1).standard_normal((50, 4)).astype(np.float32))
    ids = tf.constant(np.random.default_rng(2).integers(0, 50, 300))

    def scattered(t, i):
        def grad(upstream):  # tensor_scatter_nd_update has no vectorised form
            return tf.tensor_scatter_nd_update(tf.zeros_like(t), i[:, None], upstream), None

        return tf.gather(t, i), grad

    with caplog.at_level(logging.DEBUG, logger="tensorflow"):
        gradmagic.check(scattered, table, ids, graph=False)  # its Jacobian's rows, vectorised where TensorFlow can
    logged = [record.getMessage()[:80] for record in caplog.records if "parallel_for" in record.pathname]
    assert not logged, logged


def test_no_numpy_warning_leaks_from_a_gradient_near_float32s_largest_number():
    # The linearity probe scales the upstream a millionfold: the norm of 2e36 in float32 overflowed in NumPy's dot
    # product, and its RuntimeWarning reached the user through gradmagic's code.
    def square(x):
        return x * x, lambda upstream: 2 * x * upstream

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = gradmagic.check(square, tf.constant([1e30, 2.0]))
    assert report.codes() == ["nonfinite-output"] and report.numerics.mode == "full"


def test_no_numpy_warning_leaks_from_a_step_function_checked_in_projection_mode():
    # A straight-through estimator at 300 elements: along some random directions the rounded forward does not move
    # at all, and the median of the custom-over-numerical ratios (inf there) warned through gradmagic's code.
    x = tf.constant(np.random.default_rng(4).uniform(-3, 3, 300).astype(np.float32))

    def straight_through(x):
        return tf.round(x), lambda upstream: upstream

    for seed in range(4):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            report = gradmagic.check(straight_through, x, seed=seed, graph=False)
        assert report.verdict in ("fail", "warn"), report.codes()
