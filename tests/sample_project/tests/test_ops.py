import numpy as np
import pytest
import tensorflow as tf
from layerkit import l2_normalize, layer_norm, lecun_tanh, round_ste, safe_norm, softplus

SHAPES = [(8,), (4, 8), (2, 3, 5)]


def test_softplus_matches_numpy(rng):
    for shape in SHAPES:
        x = rng.normal(scale=4.0, size=shape).astype("float32")
        np.testing.assert_allclose(softplus(tf.constant(x)).numpy(), np.logaddexp(0.0, x), rtol=1e-5, atol=1e-6)
    # No overflow where exp(x) does.
    y = softplus(tf.constant([-200.0, -30.0, 0.0, 30.0, 200.0])).numpy()
    np.testing.assert_allclose(y, [0.0, 9.357623e-14, np.log(2.0), 30.0, 200.0], rtol=1e-6)


def test_softplus_gradient_is_sigmoid():
    x = tf.constant([-3.0, -0.5, 0.0, 2.0, 50.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = softplus(x)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), tf.sigmoid(x).numpy(), rtol=1e-6)


def test_lecun_tanh_fixed_points():
    y = lecun_tanh(tf.constant([-1.0, 0.0, 1.0])).numpy()
    np.testing.assert_allclose(y, [-1.0, 0.0, 1.0], atol=1e-4)


def test_safe_norm_matches_numpy(rng):
    for shape in SHAPES:
        x = rng.normal(size=shape).astype("float32")
        np.testing.assert_allclose(safe_norm(tf.constant(x)).numpy(), np.linalg.norm(x, axis=-1), rtol=1e-5)


def test_l2_normalize_gives_unit_rows_and_keeps_zero_rows():
    x = np.array([[3.0, 4.0], [0.0, 0.0], [-1.0, 1.0]], dtype="float32")
    y = l2_normalize(tf.constant(x)).numpy()
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y[0], [0.6, 0.8], rtol=1e-6)
    np.testing.assert_array_equal(y[1], [0.0, 0.0])
    np.testing.assert_allclose(np.linalg.norm(y[[0, 2]], axis=-1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("shape", SHAPES)
def test_layer_norm_matches_numpy(rng, shape):
    x = rng.normal(loc=2.0, scale=3.0, size=shape).astype("float32")
    expected = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(layer_norm(tf.constant(x)).numpy(), expected, rtol=1e-4, atol=1e-5)


def test_round_ste_rounds_and_passes_the_gradient_through():
    x = tf.constant([-1.6, -0.4, 0.2, 0.7, 2.5])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = round_ste(x)
    np.testing.assert_array_equal(y.numpy(), [-2.0, -0.0, 0.0, 1.0, 2.0])
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), np.ones(5))


def test_ops_keep_float64(rng):
    x = tf.constant(rng.normal(size=(3, 4)))
    for op in (softplus, lecun_tanh, safe_norm, l2_normalize, layer_norm, round_ste):
        assert op(x).dtype == tf.float64, op.__name__
