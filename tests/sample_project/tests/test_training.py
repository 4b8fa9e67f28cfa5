import keras
import numpy as np
import tensorflow as tf
from layerkit import build_classifier, build_domain_adversarial, build_sequence_encoder


def test_classifier_trains(blobs):
    x, y = blobs
    model = build_classifier(input_dim=6, num_classes=3)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, epochs=2, batch_size=16, verbose=0)
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses))
    assert losses[-1] < losses[0]
    assert model.predict(x[:5], verbose=0).shape == (5, 3)


def test_quantized_classifier_trains(blobs):
    x, y = blobs
    model = build_classifier(input_dim=6, num_classes=3, quantize=True)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
    history = model.fit(x, y, epochs=2, batch_size=16, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert history.history["loss"][-1] < history.history["loss"][0]


def test_custom_training_step(blobs):
    x, y = blobs
    model = build_classifier(input_dim=6, num_classes=3, hidden=8)
    optimizer = keras.optimizers.SGD(0.05)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()

    @tf.function
    def train_step(inputs, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(inputs, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    losses = [float(train_step(x, y)) for _ in range(8)]
    assert np.all(np.isfinite(losses))
    assert losses[-1] < losses[0]


def test_sequence_encoder_trains(rng):
    x = rng.normal(size=(32, 5, 3)).astype("float32")
    target = x.sum(axis=(1, 2))[:, None].astype("float32")
    model = build_sequence_encoder(features=3)
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss="mse")
    history = model.fit(x, target, epochs=2, batch_size=8, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert history.history["loss"][-1] < history.history["loss"][0]


def test_sequence_encoder_on_padded_batch(padded_sequences):
    model = build_sequence_encoder(features=3)
    with tf.GradientTape() as tape:
        outputs = model(padded_sequences, training=True)
        loss = tf.reduce_mean(tf.square(outputs - 1.0))
    assert outputs.shape == (4, 1)
    assert np.all(np.isfinite(outputs.numpy()))
    grads = tape.gradient(loss, model.trainable_variables)
    assert all(g is not None for g in grads)
    assert [g.shape for g in grads] == [v.shape for v in model.trainable_variables]


def test_gradient_reversal_flips_the_domain_gradient(blobs):
    x, _ = blobs
    domains = (np.arange(len(x)) % 2).astype("float32")[:, None]
    model = build_domain_adversarial(input_dim=6, num_classes=3, strength=1.0)
    features = model.get_layer("features")

    def domain_gradient():
        with tf.GradientTape() as tape:
            predicted = model(x, training=True)["domain"]
            loss = keras.losses.binary_crossentropy(domains, predicted)
        return tape.gradient(loss, features.kernel)

    reversed_gradient = domain_gradient()
    model.get_layer("reversal").strength = -1.0
    plain_gradient = domain_gradient()
    np.testing.assert_allclose(reversed_gradient.numpy(), -plain_gradient.numpy(), rtol=1e-5, atol=1e-7)


def test_domain_adversarial_model_fits(blobs):
    x, y = blobs
    domains = (np.arange(len(x)) % 2).astype("float32")[:, None]
    model = build_domain_adversarial(input_dim=6, num_classes=3, strength=0.5)
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss={"label": "sparse_categorical_crossentropy", "domain": "binary_crossentropy"},
    )
    history = model.fit(x, {"label": y, "domain": domains}, epochs=1, batch_size=16, verbose=0)
    assert np.isfinite(history.history["loss"][0])
