"""Keras 3 layers built on layerkit's ops."""

import keras
import tensorflow as tf

from layerkit import ops


@keras.saving.register_keras_serializable(package="layerkit")
class LayerNorm(keras.layers.Layer):
    """Layer normalisation over the last axis, with a learned scale and offset."""

    def __init__(self, center=True, scale=True, **kwargs):
        super().__init__(**kwargs)
        self.center = center
        self.scale = scale

    def build(self, input_shape):
        dim = input_shape[-1]
        self.gamma = self.add_weight(shape=(dim,), initializer="ones", name="gamma") if self.scale else None
        self.beta = self.add_weight(shape=(dim,), initializer="zeros", name="beta") if self.center else None

    def call(self, inputs):
        outputs = ops.layer_norm(inputs)
        if self.gamma is not None:
            outputs = outputs * self.gamma
        if self.beta is not None:
            outputs = outputs + self.beta
        return outputs

    def get_config(self):
        return {**super().get_config(), "center": self.center, "scale": self.scale}


@keras.saving.register_keras_serializable(package="layerkit")
class L2Normalize(keras.layers.Layer):
    """Projects each row (last axis) onto the unit sphere; all-zero rows (padding) stay zero."""

    def call(self, inputs):
        return ops.l2_normalize(inputs)


@keras.saving.register_keras_serializable(package="layerkit")
class PositiveScale(keras.layers.Layer):
    """Multiplies each feature by a learned positive factor, ``softplus(raw)``, that starts at ``initial``."""

    def __init__(self, initial=1.0, **kwargs):
        super().__init__(**kwargs)
        self.initial = float(initial)

    def build(self, input_shape):
        raw = float(tf.math.log(tf.math.expm1(self.initial)))  # the inverse of softplus
        self.raw_scale = self.add_weight(
            shape=(input_shape[-1],), initializer=keras.initializers.Constant(raw), name="raw_scale"
        )

    def call(self, inputs):
        # Read the variable before the op: a variable read inside a tf.custom_gradient function is taken
        # for a captured variable, and softplus's gradient function takes none.
        return inputs * ops.softplus(tf.convert_to_tensor(self.raw_scale))

    def get_config(self):
        return {**super().get_config(), "initial": self.initial}


@keras.saving.register_keras_serializable(package="layerkit")
class FakeQuant(keras.layers.Layer):
    """Simulated symmetric integer quantisation for quantisation-aware training.

    Values are clipped to ``[-clip_value, clip_value]`` and rounded to ``2 ** (bits - 1) - 1`` levels on each
    side; the rounding's gradient passes straight through.
    """

    def __init__(self, bits=8, clip_value=1.0, **kwargs):
        super().__init__(**kwargs)
        self.bits = int(bits)
        self.clip_value = float(clip_value)

    @property
    def levels(self):
        return 2 ** (self.bits - 1) - 1

    def call(self, inputs):
        step = self.clip_value / self.levels
        clipped = tf.clip_by_value(inputs, -self.clip_value, self.clip_value)
        return ops.round_ste(clipped / step) * step

    def get_config(self):
        return {**super().get_config(), "bits": self.bits, "clip_value": self.clip_value}


@keras.saving.register_keras_serializable(package="layerkit")
class GradientReversal(keras.layers.Layer):
    """Identity on the way forward; multiplies the gradient by ``-strength`` on the way back.

    Used for domain-adversarial training (Ganin & Lempitsky, 2015): the feature extractor learns to make a
    domain classifier fail.
    """

    def __init__(self, strength=1.0, **kwargs):
        super().__init__(**kwargs)
        self.strength = float(strength)

    def call(self, inputs):
        strength = self.strength

        @tf.custom_gradient
        def reverse_gradient(x):
            def grad(upstream):
                return -strength * upstream

            return tf.identity(x), grad

        return reverse_gradient(inputs)

    def get_config(self):
        return {**super().get_config(), "strength": self.strength}


@keras.saving.register_keras_serializable(package="layerkit")
class FusedDense(keras.layers.Layer):
    """A dense layer whose backward pass is written by hand.

    Inputs of any rank are flattened to a matrix first, so the kernel's gradient is one matmul over all the
    leading axes (a batch of sequences included), and nothing but the inputs is kept for the backward pass.
    """

    def __init__(self, units, activation=None, use_bias=True, **kwargs):
        super().__init__(**kwargs)
        self.units = int(units)
        self.activation = keras.activations.get(activation)
        self.use_bias = use_bias

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units), initializer="glorot_uniform", name="kernel")
        self.bias = self.add_weight(shape=(self.units,), initializer="zeros", name="bias") if self.use_bias else None

    def call(self, inputs):
        @tf.custom_gradient
        def dense(x):
            flat = tf.reshape(x, [-1, tf.shape(x)[-1]])
            outputs = tf.matmul(flat, self.kernel)
            if self.bias is not None:
                outputs = outputs + self.bias

            def grad(upstream, variables=None):
                g = tf.reshape(upstream, [-1, self.units])
                d_x = tf.reshape(tf.matmul(g, self.kernel, transpose_b=True), tf.shape(x))
                # TensorFlow hands the variables over in no fixed order: match them by identity.
                by_variable = {self.kernel.value.ref(): tf.matmul(flat, g, transpose_a=True)}
                if self.bias is not None:
                    by_variable[self.bias.value.ref()] = tf.reduce_sum(g, axis=0)
                return d_x, [by_variable[v.ref()] for v in variables or ()]

            return tf.reshape(outputs, tf.concat([tf.shape(x)[:-1], [self.units]], axis=0)), grad

        return self.activation(dense(inputs))

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.units)

    def get_config(self):
        return {
            **super().get_config(),
            "units": self.units,
            "activation": keras.activations.serialize(self.activation),
            "use_bias": self.use_bias,
        }
