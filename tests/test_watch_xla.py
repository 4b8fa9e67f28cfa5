"""The watch where XLA compiles the step (a `tf.function(jit_compile=True)`, a Keras model compiled with
`jit_compile=True`), and where ops are reached but never run: the step keeps running compiled, its results bit for
bit those of the unwatched run, its ops recorded by replaying chosen runs uncompiled; an op traced and never run is in
the report and checked at inputs of its traced shapes; nothing unchecked passes."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from test_watch import BATCH, features_model, problem_of, scaled_tanh, training_data

import gradmagic
from gradmagic.render.text import render_watch_text


@tf.custom_gradient
def soft_square(x):
    """x² / (1 + x²), its gradient 1.5 times too large."""
    return x * x / (1 + x * x), lambda dy: dy * 3 * x / (1 + x * x) ** 2


@tf.custom_gradient
def safe_norm(x):
    """The norm of each row, its gradient NaN at an all-zero row."""
    norm = tf.norm(x, axis=1, keepdims=True)
    return norm, lambda dy: dy * x / norm


def xla_training(watched: bool, steps: int = 4):
    """A hand-written training loop whose step is one XLA-compiled tf.function; the weights after `steps` steps, the
    losses, and the watch's report (None unwatched). Batch 3 holds an all-zero row: `safe_norm`'s gradient is NaN
    there."""
    keras.utils.set_random_seed(3)
    w = tf.Variable(np.random.default_rng(3).normal(size=(4, 4)).astype("f4") * 0.3)

    @tf.function(jit_compile=True)
    def step(x):
        with tf.GradientTape() as tape:
            h = x @ w
            loss = tf.reduce_sum(soft_square(scaled_tanh(h))) + tf.reduce_sum(safe_norm(h))
        w.assign_sub(0.05 * tape.gradient(loss, w))
        return loss

    batches = np.random.default_rng(4).normal(size=(steps, 5, 4)).astype("f4")
    batches[2, 1] = 0.0
    step(tf.constant(batches[0]))  # traced (and run) before the watch, as a warmed-up step is
    losses, watch = [], gradmagic.watch()
    if watched:
        with watch:
            losses = [float(step(tf.constant(batch))) for batch in batches]
    else:
        losses = [float(step(tf.constant(batch))) for batch in batches]
    return w.numpy(), losses, watch.report if watched else None


@pytest.fixture(scope="module")
def xla_loop():
    plain_weights, plain_losses, _ = xla_training(False)
    weights, losses, report = xla_training(True)
    return {"plain": (plain_weights, plain_losses), "watched": (weights, losses), "report": report}


def test_an_xla_step_runs_compiled_bit_for_bit_as_without_the_watch(xla_loop):
    weights, losses = xla_loop["watched"]
    plain_weights, plain_losses = xla_loop["plain"]
    np.testing.assert_array_equal(weights, plain_weights)  # NaN where the unwatched run has NaN
    assert losses == pytest.approx(plain_losses, nan_ok=True) and str(losses) == str(plain_losses)


def test_an_xla_steps_ops_are_recorded_by_replays_and_every_run_counted(xla_loop):
    report = xla_loop["report"]
    assert [op.name for op in report.watched] == ["scaled_tanh", "soft_square", "safe_norm"]
    for op in report.watched:
        # 4 runs under XLA; replayed: the first run, then run 3 (its NaN loss) and run 2 before it
        assert (op.xla_calls, op.replayed_calls, op.calls) == (4, 3, 3), op.name
    text = render_watch_text(report)
    assert "4 (4 under XLA, 3 replayed uncompiled)" in text
    assert any("`step` ran compiled with XLA (jit_compile), as without the watch" in note for note in report.notes)


def test_an_xla_steps_wrong_and_nan_gradients_are_found(xla_loop):
    report = xla_loop["report"]
    assert [op.verdict for op in report.watched] == ["pass", "fail", "fail"] and not report.ok
    assert "fd-mismatch" in report["soft_square"].report.codes()
    first = report.first_nonfinite_gradient
    assert (first.op, first.tensor, first.index[0], first.from_finite) == ("safe_norm", "x", 1, True)
    assert problem_of(report["safe_norm"], "watched-nonfinite-gradient").severity == "error"


def keras_fit(watched: bool, jit_compile):
    model = features_model()
    model.compile(optimizer="sgd", loss="mse", jit_compile=jit_compile)
    x, y = training_data()
    model.fit(x[:BATCH], y[:BATCH], batch_size=BATCH, verbose=0)  # a model that has its train function
    before, watch = model.train_function, gradmagic.watch()
    if watched:
        with watch:
            model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    else:
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    return model, before, watch.report if watched else None


def test_a_keras_model_compiled_with_xla_keeps_it_under_the_watch_and_trains_identically():
    plain, _, _ = keras_fit(False, True)
    model, before, report = keras_fit(True, True)
    for mine, theirs in zip(model.get_weights(), plain.get_weights()):
        np.testing.assert_array_equal(mine, theirs)
    assert model.jit_compile is True and model.train_function is before  # its own (XLA) function back
    assert [(op.name, op.xla_calls, op.verdict) for op in report.watched] == [
        ("scaled_tanh", 4, "pass"),
        ("soft_square", 4, "fail"),
        ("row_norm", 4, "fail"),
    ]
    assert report.first_nonfinite_gradient.op == "row_norm" and report.checked == 3 and not report.ok
    assert not any("without XLA" in note for note in report.notes)


@tf.custom_gradient
def fake_quant(x):
    """Rounds to steps of 1/256, its straight-through gradient passed where x > 0, tested in fixed point (x scaled by
    2^31, cast to int32). For x >= 1 that cast is out of int32's range, where XLA saturates and TensorFlow's CPU kernel
    does not: the gradient at x = 3 is 1 under XLA and 0 uncompiled."""

    def grad(dy):
        return dy * tf.cast(tf.cast(x * 2.0**31, tf.int32) > 0, dy.dtype)

    return tf.round(x * 256) / 256, grad


def test_an_op_whose_gradient_differs_under_xla_is_named_with_the_element():
    @tf.function(jit_compile=True)
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(fake_quant(x) ** 2)
        return tape.gradient(y, x)

    x = tf.constant([0.25, -0.5, 3.0, 0.75])
    with gradmagic.watch(surrogates={"fake_quant"}) as watch:
        step(x)
    op = watch.report["fake_quant"]
    finding = problem_of(op, "watch-xla-difference")
    assert finding.severity == "warning" and op.verdict == "warn"
    assert "dx differs at" in finding.message and "first dx[" in finding.message
    assert "under XLA" in finding.message and "uncompiled" in finding.message


def test_an_op_whose_gradient_agrees_under_xla_gets_no_difference(xla_loop):
    for op in xla_loop["report"].watched:
        assert all(finding.code != "watch-xla-difference" for finding in op.findings), op.name


class ScaledQuant(keras.layers.Layer):
    """Fake quantisation with a learned scale, whose gradient for the scale is not reduced over the batch (shape of
    x, not of the scale): Keras's train function fails while it is built, before any step runs."""

    def build(self, shape):
        self.scale = self.add_weight(shape=(1,), initializer="ones")

    def call(self, x):
        return self.quantise(x, self.scale)

    @staticmethod
    @tf.custom_gradient
    def quantise(x, scale):
        q = tf.round(x / scale) * scale

        def grad(dy):
            return dy, dy * (q - x) / scale  # dscale left [batch, features]: it should be summed to [1]

        return q, grad


def test_an_op_traced_whose_train_function_fails_to_build_is_reported_and_checked():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(3), ScaledQuant(), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x, y = np.ones((8, 3), "f4"), np.ones((8, 1), "f4")
    with pytest.raises(Exception) as raised, gradmagic.watch() as watch:
        model.fit(x, y, verbose=0)
    report = watch.report
    (op,) = report.watched
    assert (op.name, op.calls, op.traces >= 1) == ("quantise", 0, True)
    assert [(v.name, v.dtype, v.shapes[0]) for v in op.traced_inputs] == [
        ("x", "float32", (None, 3)),
        ("scale", "float32", (1,)),
    ]
    assert op.checked and op.checked[0].call == 0 and op.checked[0].shapes == ((2, 3), (1,))
    assert op.verdict == "fail" and "grad-shape" in op.report.codes() and not report.ok
    never = problem_of(op, "watch-traced-only").message
    assert "was traced" in never and "never ran: the watched code raised" in never
    assert type(raised.value).__name__ in report.error
    assert "0 (traced" in render_watch_text(report)


def test_ok_only_when_every_op_reached_was_checked():
    with gradmagic.watch(check=False) as recorded:
        scaled_tanh(tf.constant([1.0]))
    assert (recorded.report.checked, recorded.report.ok, recorded.report.verdict) == (0, False, "unchecked")
    with gradmagic.watch() as empty:
        tf.tanh(tf.constant([1.0]))
    assert (empty.report.checked, empty.report.ok, empty.report.verdict) == (0, False, "unchecked")
    with gradmagic.watch() as checked:
        scaled_tanh(tf.constant([1.0]))
    assert (checked.report.checked, checked.report.ok, checked.report.verdict) == (1, True, "pass")
    assert checked.report.to_dict()["checked"] == 1
