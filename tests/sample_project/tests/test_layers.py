import keras
import numpy as np
import pytest
import tensorflow as tf
from layerkit import FakeQuant, FusedDense, GradientReversal, L2Normalize, LayerNorm, PositiveScale

LAYERS = [
    lambda: LayerNorm(),
    lambda: L2Normalize(),
    lambda: PositiveScale(initial=0.5),
    lambda: FakeQuant(bits=4, clip_value=2.0),
    lambda: GradientReversal(strength=0.3),
]


@pytest.mark.parametrize("shape", [(4, 6), (2, 5, 6)])
def test_shape_preserving_layers(rng, shape):
    x = tf.constant(rng.normal(size=shape).astype("float32"))
    for make_layer in LAYERS:
        y = make_layer()(x)
        assert y.shape == x.shape
        assert y.dtype == tf.float32


def test_layer_norm_matches_keras(rng):
    x = rng.normal(loc=1.0, scale=2.0, size=(5, 12)).astype("float32")
    ours = LayerNorm()(x)
    reference = keras.layers.LayerNormalization(epsilon=1e-5)(x)
    np.testing.assert_allclose(ours.numpy(), reference.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(4, 3), (2, 5, 3)])
def test_fused_dense_matches_keras_dense(rng, shape):
    x = tf.constant(rng.normal(size=shape).astype("float32"))
    ours = FusedDense(4)
    ours.build(x.shape)
    reference = keras.layers.Dense(4)
    reference.build(x.shape)
    reference.set_weights([w + 0.1 for w in ours.get_weights()])
    ours.set_weights(reference.get_weights())

    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y_ours, y_ref = ours(x), reference(x)
        loss_ours, loss_ref = tf.reduce_sum(tf.sin(y_ours)), tf.reduce_sum(tf.sin(y_ref))
    np.testing.assert_allclose(y_ours.numpy(), y_ref.numpy(), rtol=1e-5, atol=1e-6)
    grads_ours = tape.gradient(loss_ours, [x, *ours.trainable_variables])
    grads_ref = tape.gradient(loss_ref, [x, *reference.trainable_variables])
    for g_ours, g_ref in zip(grads_ours, grads_ref):
        np.testing.assert_allclose(g_ours.numpy(), g_ref.numpy(), rtol=1e-5, atol=1e-5)


def test_gradient_reversal_is_identity_forward_and_flips_gradient():
    x = tf.constant([[1.0, -2.0, 3.0]])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = GradientReversal(strength=0.5)(x)
        loss = tf.reduce_sum(3.0 * y)
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), [[-1.5, -1.5, -1.5]])


def test_fake_quant_snaps_to_grid_and_clips():
    layer = FakeQuant(bits=3, clip_value=1.5)  # 3 levels each side: a step of 0.5
    y = layer(tf.constant([-4.0, -0.7, 0.1, 0.3, 1.2, 9.0])).numpy()
    np.testing.assert_allclose(y, [-1.5, -0.5, 0.0, 0.5, 1.0, 1.5])


def test_positive_scale_starts_at_initial_value(rng):
    x = rng.normal(size=(3, 4)).astype("float32")
    np.testing.assert_allclose(PositiveScale(initial=2.0)(x).numpy(), 2.0 * x, rtol=1e-5)


def test_config_round_trip():
    layers = [
        LayerNorm(center=False),
        PositiveScale(initial=0.25),
        FakeQuant(bits=6, clip_value=3.0),
        GradientReversal(strength=0.1),
        FusedDense(7, activation="relu", use_bias=False),
    ]
    for layer in layers:
        config = layer.get_config()
        clone = type(layer).from_config(config)
        assert clone.get_config() == config
        restored = keras.layers.deserialize(keras.layers.serialize(layer))
        assert type(restored) is type(layer)
        assert restored.get_config() == config
