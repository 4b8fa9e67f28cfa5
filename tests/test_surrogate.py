"""Intended surrogate gradients with real TensorFlow: declared ones inform, undeclared ones are named, bugs stay bugs.

Each pattern is checked declared (`surrogate=True`: verdict "surrogate", a
`surrogate-differs` info saying where and by how much) and undeclared (an
`fd-mismatch` that names the pattern and says to declare it). Planted bugs,
including ones that resemble a pattern (a gradient scaled by 1.001), keep a
plain failure with no surrogate hint.
"""

from xml.etree import ElementTree

import numpy as np
import pytest
import tensorflow as tf
from conftest import codes, problem

import gradmagic
from gradmagic.render.html import render_html
from gradmagic.render.text import render_text
from gradmagic.render.words import report_data

RNG = np.random.default_rng(11)
POINTS = tf.constant([-1.7, -0.3, 0.2, 0.6, 1.4])
MANY = tf.constant(RNG.standard_normal(5000).astype(np.float32))  # above full_threshold: projection mode


def straight_through_round(x):
    """Quantisation: round forward, the upstream gradient passed through inside [-1, 1] (box-shaped)."""

    def grad(upstream):
        return upstream * tf.cast(tf.abs(x) <= 1, upstream.dtype)

    return tf.round(x), grad


def straight_through_sign(x):
    return tf.sign(x), lambda upstream: upstream


def clip_gradients(y):
    """TensorFlow's own example of tf.custom_gradient: identity forward, clipped backward."""

    def backward(dy):
        return tf.clip_by_norm(dy, 0.5)

    return y, backward


def reverse_gradient(x):
    return tf.identity(x), lambda upstream: -upstream


def scale_gradient(x):
    return tf.identity(x), lambda upstream: 0.1 * upstream


def stop_gradient(x):
    return tf.identity(x), lambda upstream: tf.zeros_like(upstream)


def straight_through_clip(x):
    return tf.clip_by_value(x, -1.0, 1.0), lambda upstream: upstream


PATTERNS = {
    "round STE": (straight_through_round, "straight-through estimator"),
    "sign STE": (straight_through_sign, "straight-through estimator"),
    "gradient clipping": (clip_gradients, "gradient clipping"),
    "gradient reversal": (reverse_gradient, "gradient reversal"),
    "scaled gradient": (scale_gradient, "scaled gradient"),
    "stopped gradient": (stop_gradient, "stopped gradient"),
    "clip STE": (straight_through_clip, "straight-through estimator"),
}


@pytest.mark.parametrize("name", PATTERNS)
def test_undeclared_surrogate_fails_and_names_its_pattern(name):
    function, pattern = PATTERNS[name]
    report = gradmagic.check(tf.custom_gradient(function), POINTS)
    assert report.verdict == "fail"
    # Clipping is not linear in the upstream gradient: that is found before any finite difference, on every check.
    found = problem(report, "grad-nonlinear" if pattern == "gradient clipping" else "fd-mismatch")
    assert f"This looks like {'a ' if not pattern.startswith('gradient') else ''}{pattern}" in found.message
    assert "--surrogate" in found.message
    assert report.surrogate is not None and not report.surrogate.declared and report.surrogate.pattern == pattern


@pytest.mark.parametrize("name", PATTERNS)
def test_declared_surrogate_informs_instead_of_failing(name):
    function, pattern = PATTERNS[name]
    report = gradmagic.check(tf.custom_gradient(function), POINTS, surrogate=True)
    assert report.ok and report.verdict == "surrogate", report
    assert "fd-mismatch" not in codes(report)
    differs = problem(report, "surrogate-differs")
    assert differs.severity == "info"
    assert f"Declared surrogate gradient ({pattern})" in differs.message
    assert differs.location.input in ("x", "y") and differs.location.index is not None
    assert report.surrogate.declared and report.surrogate.pattern == pattern


def test_declared_straight_through_estimator_says_where_by_how_much_and_that_autodiff_is_zero():
    report = gradmagic.check(tf.custom_gradient(straight_through_round), POINTS, surrogate=True)
    message = problem(report, "surrogate-differs").message
    # Inside [-1, 1] (x[1], x[2], x[3]) the surrogate is 1 where round's derivative is 0; outside both are 0.
    assert "at 3 of 25 Jacobian elements, by up to 1" in message
    assert "d output[1] / d x[1] at x[1] = -0.3: surrogate 1, finite differences 0" in message
    assert "TensorFlow's own gradient of the forward is zero there: `round` has derivative zero almost everywhere" in (
        message
    )
    assert problem(report, "surrogate-differs").location.index in ((1,), (2,), (3,))


def test_declared_reversal_compares_with_autodiff_where_it_exists():
    message = problem(
        gradmagic.check(tf.custom_gradient(reverse_gradient), POINTS, surrogate=True), "surrogate-differs"
    ).message
    assert "by up to 2" in message and "surrogate -1, finite differences 1" in message
    assert "TensorFlow's own gradient of the forward agrees with the true derivative there" in message


def test_the_sweep_shows_the_box_shaped_surrogate_against_the_step_shaped_round():
    report = gradmagic.check(tf.custom_gradient(straight_through_round), POINTS, surrogate=True, sweep=True)
    sweep = report.sweep
    assert sweep is not None and sweep.elementwise
    points, values = np.array(sweep.points), np.array(sweep.values)
    custom, autodiff = np.array(sweep.custom), np.array(sweep.autodiff)
    assert np.array_equal(values, np.round(points).astype(np.float32))  # the steps of round
    assert np.array_equal(custom, (np.abs(points.astype(np.float32)) <= 1).astype(np.float32))  # the box
    assert not autodiff.any()  # round's own gradient: zero everywhere
    from gradmagic.render.figures import jumps

    numerical = np.array(sweep.numerical)
    flat = ~jumps(points, values, numerical)
    assert np.allclose(numerical[flat], 0)  # the true derivative, away from the jumps


def test_declared_surrogates_in_projection_mode():
    report = gradmagic.check(tf.custom_gradient(reverse_gradient), MANY, surrogate=True)
    assert report.numerics.mode == "projection" and report.verdict == "surrogate"
    message = problem(report, "surrogate-differs").message
    assert "Declared surrogate gradient (gradient reversal)" in message and "random directions" in message
    undeclared = gradmagic.check(tf.custom_gradient(reverse_gradient), MANY)
    assert undeclared.surrogate.pattern == "gradient reversal"
    assert "This looks like gradient reversal" in problem(undeclared, "fd-mismatch").message
    clipped = gradmagic.check(tf.custom_gradient(clip_gradients), MANY)
    assert clipped.surrogate.pattern == "gradient clipping"


def test_a_discontinuous_forward_in_projection_mode_warns_instead_of_passing():
    # 5,000 normal values: some sit within a finite-difference step of round's jumps, where central differences
    # are the jump over 2h; random projections cannot tell that from a wrong gradient, and must not pass silently.
    report = gradmagic.check(tf.custom_gradient(straight_through_round), MANY, surrogate=True)
    assert report.numerics.mode == "projection" and report.verdict == "warn"
    assert "surrogate-matches" not in codes(report)
    assert "the forward is probably discontinuous" in problem(report, "fd-noisy").message


def test_a_declared_surrogate_that_matches_the_derivative_says_so_and_passes():
    def square(x):
        return x * x, lambda upstream: 2 * x * upstream

    report = gradmagic.check(tf.custom_gradient(square), POINTS, surrogate=True)
    assert report.verdict == "pass" and codes(report) == ["surrogate-matches"]
    assert report.surrogate.declared and report.surrogate.pattern is None


def test_structure_errors_still_fail_a_declared_surrogate():
    def unreduced(x, b):
        return x + b, lambda upstream: (upstream, upstream)  # the bias gradient is not summed over the batch

    report = gradmagic.check(tf.custom_gradient(unreduced), tf.ones([2, 3]), tf.ones([3]), surrogate=True)
    assert report.verdict == "fail" and "grad-shape" in codes(report)


# -- bugs must stay bugs --------------------------------------------------------------------------------------


def _log1pexp_scaled(x):
    e = tf.exp(x)
    return tf.math.log(1 + e), lambda dy: dy * (1 - 1 / (1 + e)) * 1.001


def _identity_scaled_by_1_001(x):  # resembles a scaled gradient, but a factor this close to 1 is a typo
    return tf.identity(x), lambda dy: 1.001 * dy


def _linear_with_forgotten_factor(x):  # 3 x, gradient dy: the chain-rule factor is missing
    return 3 * x, lambda dy: dy


def _sign_flip(x):
    return tf.sin(x), lambda dy: -dy * tf.cos(x)


def _transposed(a, b):
    return a @ b, lambda dy: (dy @ b, tf.transpose(a) @ dy)


def _one_wrong_element(x):
    bump = np.ones(1000, np.float32)
    bump[417] = 1.1
    e = tf.exp(x)
    return tf.math.log(1 + e), lambda dy: dy * (1 - 1 / (1 + e)) * bump


def _relu_without_mask(x):  # at negative inputs ReLU is flat, as round is; its gradient forgot the mask
    return tf.nn.relu(x), lambda dy: dy


def _wrong_variable_gradient(x):
    v = _VARIABLE

    def grad(dy, variables=None):
        return dy * v, [tf.reduce_sum(dy * x) * 2.0]

    return x * v, grad


def _round_beside_a_smooth_forward(x):  # round contributes nothing; the gradient of sin is doubled
    return tf.sin(x) + 0.0 * tf.round(x), lambda dy: dy * 2.0 * tf.cos(x)


def _sign_left_out(x):  # sin(x) sign(x): the gradient forgot the sign, wrong where x < 0 (not flat there)
    return tf.sin(x) * tf.sign(x), lambda dy: dy * tf.cos(x)


_VARIABLE = tf.Variable(1.5)
MATRIX = RNG.standard_normal((3, 3)).astype(np.float32)
BUGS = {
    "log1pexp scaled by 1.001": (_log1pexp_scaled, [tf.constant([-1.0, 0.5, 2.0])]),
    "identity scaled by 1.001": (_identity_scaled_by_1_001, [POINTS]),
    "linear op, forgotten factor": (_linear_with_forgotten_factor, [POINTS]),
    "sign flip": (_sign_flip, [tf.constant([0.3, 1.0, 2.0])]),
    "transposed matrix": (_transposed, [tf.constant(MATRIX), tf.constant(MATRIX.T + 1)]),
    "one element in a thousand": (_one_wrong_element, [tf.constant(RNG.standard_normal(1000).astype(np.float32))]),
    "ReLU without its mask": (_relu_without_mask, [tf.constant([-2.0, -1.0, -0.5])]),
    "wrong variable gradient": (_wrong_variable_gradient, [tf.constant([1.0, 2.0])]),
    "identity scaled by 1.001, projection mode": (_identity_scaled_by_1_001, [MANY]),
    # A quantising op in the forward is no straight-through estimator where the gradient is wrong where the forward
    # is not flat.
    "round beside a smooth forward": (_round_beside_a_smooth_forward, [tf.constant([0.3, -0.7, 1.1], tf.float64)]),
    "sign left out of the gradient": (_sign_left_out, [tf.constant([0.3, -0.7, 1.1], tf.float64)]),
}


@pytest.mark.parametrize("name", BUGS)
def test_bugs_fail_with_no_surrogate_hint(name):
    function, inputs = BUGS[name]
    report = gradmagic.check(tf.custom_gradient(function), *inputs)
    assert report.verdict == "fail"
    found = problem(report, "fd-mismatch")
    assert "--surrogate" not in found.message and "looks like" not in found.message
    assert report.surrogate is None


def test_the_1_001_bug_keeps_its_constant_factor_hint():
    found = problem(gradmagic.check(tf.custom_gradient(_identity_scaled_by_1_001), POINTS), "fd-mismatch")
    assert found.message.startswith("dx is 1.001 times the finite differences at every element: a constant factor")


# -- renderers and magics ------------------------------------------------------------------------------------


def test_renderers_name_a_declared_surrogate():
    report = gradmagic.check(tf.custom_gradient(straight_through_round), POINTS, surrogate=True)
    text = render_text(report)
    assert text.splitlines()[0].startswith("straight_through_round(x) surrogate gradient (declared)")
    assert "Declared surrogate gradient (straight-through estimator):" in text
    html = render_html(report)
    assert "SURROGATE GRADIENT (DECLARED)" in html and "#8250df" in html
    data = report.to_dict()
    assert data["verdict"] == "surrogate" and data["surrogate"]["pattern"] == "straight-through estimator"
    assert gradmagic.Report.from_dict(data).surrogate == report.surrogate


def test_renderers_suggest_declaring_a_recognised_surrogate():
    report = gradmagic.check(tf.custom_gradient(reverse_gradient), POINTS)
    assert "Looks like an intended surrogate (gradient reversal)" in render_text(report)
    assert "Declare it with --surrogate if so." in render_html(report)


def test_the_widget_carries_the_surrogate_verdict_for_its_view():
    report = gradmagic.check(tf.custom_gradient(straight_through_round), POINTS, surrogate=True)
    widget = gradmagic.widget(report)
    try:
        assert widget.report["verdict"] == "surrogate" and widget.report["surrogate"]["declared"]
        assert widget.report == report_data(report)
    finally:
        widget.close()


def test_the_sweep_figure_labels_the_surrogate_and_the_true_derivative():
    from gradmagic.render.figures import sweep_svg

    report = gradmagic.check(tf.custom_gradient(straight_through_round), POINTS, surrogate=True, sweep=True)
    svg = sweep_svg(report.sweep, surrogate=True)
    for label in ("surrogate (custom gradient)", "true derivative (finite differences)", "autodiff"):
        assert f">{label}</text>" in svg


def test_the_sweep_figure_marks_finite_differences_at_a_jump_off_scale():
    from gradmagic.render.figures import JUMP_MARKER, sweep_svg

    report = gradmagic.check(
        tf.custom_gradient(straight_through_round), POINTS, surrogate=True, sweep=True, sweep_range=(-2.5, 2.5)
    )  # 201 points from -2.5 to 2.5, step 0.025: the half-integers, where round jumps, are among them
    svg = ElementTree.fromstring(sweep_svg(report.sweep, surrogate=True))
    marks = [p for p in svg.iter("{http://www.w3.org/2000/svg}path") if p.get("d") == JUMP_MARKER]
    at = sorted(float(p.get("transform").split("(")[1].split()[0]) for p in marks[1:])  # the first is the legend's
    points = np.array(report.sweep.points)
    x = 66 + (points - points.min()) / np.ptp(points) / 1.1 * (720 - 14 - 66) + 0.05 / 1.1 * (720 - 14 - 66)
    expected = [float(f"{x[np.argmin(np.abs(points - half))]:.1f}") for half in (-2.5, -1.5, -0.5, 0.5, 1.5, 2.5)]
    assert at == expected
    ticks = [
        float(t.text.replace("−", "-"))
        for t in svg.iter("{http://www.w3.org/2000/svg}text")
        if t.get("text-anchor") == "end" and t.text
    ]
    assert max(map(abs, ticks)) <= 3, "the jumps' 1/(2h) spikes must not set the scale"


def test_magic_surrogate_flag_is_kept_with_the_op_for_gradcheck(nb):
    run = nb.ok("""%%custom_gradient --surrogate --check x=tf.constant([-1.7, -0.3, 0.2, 0.6, 1.4])
def quantise(x):
    def grad(upstream):
        return upstream * tf.cast(tf.abs(x) <= 1, upstream.dtype)
    return tf.round(x), grad
""")
    assert "quantise(x) surrogate gradient (declared)" in run.stdout
    report = nb.ns["_"]
    assert report.verdict == "surrogate"
    nb.ok("again = %gradcheck quantise")
    assert nb.ns["again"].verdict == "surrogate"


def test_magic_without_the_flag_hints_at_it(nb):
    run = nb.ok("""%%custom_gradient --check x=tf.constant([0.5, -2.0])
def flip(x):
    return tf.identity(x), lambda upstream: -upstream
""")
    assert "flip(x) fails" in run.stdout and "This looks like gradient reversal" in run.stdout
    assert "flip" in nb.ns, "the op is bound even though its check fails"
    nb.ok("declared = %gradcheck flip --surrogate")
    assert nb.ns["declared"].verdict == "surrogate"


def test_a_gradient_not_linear_in_the_upstream_is_a_bug_not_clipping():
    def squared_upstream(x):
        # Squares the upstream gradient (and doubles): unit upstream vectors alone would see only the factor 2.
        return tf.sin(x), lambda upstream: 2 * upstream * upstream * tf.cos(x)

    report = gradmagic.check(tf.custom_gradient(squared_upstream), POINTS)
    found = problem(report, "grad-nonlinear")
    assert report.codes() == ["grad-nonlinear"] and found.severity == "error"
    assert report.surrogate is None and "--surrogate" not in found.message
    assert "not linear in the upstream gradient" in found.message
    assert "Every vector-Jacobian product is linear in the upstream gradient" in found.message


def test_the_sign_of_the_upstream_is_a_bug_not_clipping_and_clipping_by_value_stays_clipping():
    def sign_of_upstream(x):  # bounded, as clipping is, but as large for the smallest upstream as for the largest
        return tf.sin(x), lambda upstream: tf.sign(upstream) * tf.cos(x)

    report = gradmagic.check(tf.custom_gradient(sign_of_upstream), POINTS)
    found = problem(report, "grad-nonlinear")
    assert report.codes() == ["grad-nonlinear"] and report.surrogate is None
    assert "clipping" not in found.message and "do not square it, take its sign or norm" in found.message

    def clipped_by_value(x):
        return tf.round(x), lambda upstream: tf.clip_by_value(upstream, -0.1, 0.1)

    clipped = gradmagic.check(tf.custom_gradient(clipped_by_value), POINTS * 3)
    assert clipped.surrogate.pattern == "gradient clipping"
    assert "This looks like gradient clipping" in problem(clipped, "grad-nonlinear").message


def test_an_upstream_term_left_unmultiplied_is_a_bug_not_clipping():
    def affine(x):
        return tf.sin(x), lambda upstream: upstream * tf.cos(x) + 0.1  # the 0.1 should be multiplied by upstream

    report = gradmagic.check(tf.custom_gradient(affine), POINTS)
    assert report.surrogate is None
    assert "not linear in the upstream gradient" in problem(report, "grad-nonlinear").message


def test_clipping_is_recognised_whatever_the_size_of_the_upstream():
    # Two elements: a random upstream gradient may be shorter than the 0.5 clip norm, where clipping does nothing.
    for seed in range(4):
        report = gradmagic.check(tf.custom_gradient(clip_gradients), tf.constant([3.0, -4.0]), seed=seed)
        assert report.surrogate.pattern == "gradient clipping", seed


def test_a_nan_gradient_gets_no_surrogate_or_linearity_hint():
    def nan_where_negative(x):
        return tf.identity(x), lambda upstream: upstream * tf.sqrt(x)  # NaN for x < 0

    report = gradmagic.check(tf.custom_gradient(nan_where_negative), POINTS)
    assert report.verdict == "fail" and report.surrogate is None
    assert all("not linear in the upstream" not in p.message for p in report.problems)


def test_a_straight_through_gumbel_softmax_is_named_by_its_argmax():
    noise = tf.constant([[0.3, -0.2, 0.9, 0.1], [0.5, 1.1, -0.4, 0.0]])

    def gumbel_softmax_hard(logits):  # the one-hot sample forward, the soft sample's gradient backward
        soft = tf.nn.softmax((logits + noise) / 0.5)
        hard = tf.one_hot(tf.argmax(soft, axis=-1), 4)
        return hard, lambda upstream: soft * (upstream - tf.reduce_sum(upstream * soft, -1, keepdims=True)) / 0.5

    logits = tf.constant([[0.5, 1.5, -0.2, 0.1], [1.0, 0.2, 0.3, -1.0]])
    report = gradmagic.check(tf.custom_gradient(gumbel_softmax_hard), logits)
    assert report.surrogate.pattern == "straight-through estimator"
    assert "`argmax` is piecewise constant" in problem(report, "fd-mismatch").message


def test_a_declared_quantiser_with_steps_finer_than_the_finite_difference_step_is_not_warned_about_its_jumps():
    step = 2 / 255  # 8-bit fake quantisation over [-1, 1]: jumps every 0.0078, some within a step of the points

    def fake_quant(x):  # computes in float32 (as TensorFlow's fake_quant ops do): finite differences in float32 steps
        inside = tf.cast(x, tf.float32)
        return tf.round(
            tf.clip_by_value(inside, -1.0, 1.0) / step
        ) * step, lambda upstream: upstream * tf.cast(tf.abs(x) <= 1, upstream.dtype)

    x = tf.constant([-1.4, -0.33, 0.02, 0.41, 0.77, 1.6])
    report = gradmagic.check(tf.custom_gradient(fake_quant), x, surrogate=True)
    assert report.verdict == "surrogate", report.codes()
    kinks = [p for p in report.problems if p.code == "nondifferentiable-point"]
    assert kinks and all(p.severity == "info" for p in kinks)
