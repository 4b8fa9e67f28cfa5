"""Small reference models built from layerkit's layers."""

import keras

from layerkit.activations import lecun_tanh
from layerkit.layers import FakeQuant, FusedDense, GradientReversal, L2Normalize, LayerNorm, PositiveScale


def build_classifier(input_dim, num_classes, hidden=16, quantize=False):
    """An MLP classifier: FusedDense -> LayerNorm -> LeCun tanh -> PositiveScale -> softmax."""
    inputs = keras.Input(shape=(input_dim,))
    x = FusedDense(hidden)(inputs)
    x = LayerNorm()(x)
    x = keras.layers.Activation(lecun_tanh)(x)
    x = PositiveScale()(x)
    if quantize:
        x = FakeQuant(bits=4, clip_value=2.0)(x)
    outputs = keras.layers.Dense(num_classes, activation="softmax")(x)
    return keras.Model(inputs, outputs, name="classifier")


def build_sequence_encoder(features, dim=8):
    """Embeds a (padded) sequence: per-step projection onto the unit sphere, then the mean over the steps."""
    inputs = keras.Input(shape=(None, features))
    x = FusedDense(dim, use_bias=False)(inputs)
    x = L2Normalize()(x)
    x = keras.layers.GlobalAveragePooling1D()(x)
    outputs = keras.layers.Dense(1)(x)
    return keras.Model(inputs, outputs, name="sequence_encoder")


def build_domain_adversarial(input_dim, num_classes, hidden=16, strength=1.0):
    """Shared features feeding a label head, and a domain head through a gradient reversal (DANN)."""
    inputs = keras.Input(shape=(input_dim,))
    features = FusedDense(hidden, activation="relu", name="features")(inputs)
    labels = keras.layers.Dense(num_classes, activation="softmax", name="label")(features)
    reversed_features = GradientReversal(strength, name="reversal")(features)
    domain = keras.layers.Dense(1, activation="sigmoid", name="domain")(reversed_features)
    return keras.Model(inputs, {"label": labels, "domain": domain}, name="dann")
