"""Activations written with Keras 3 ops, so that they run on any Keras backend."""

from keras import ops

# LeCun et al., "Efficient BackProp" (1998): f(1) = 1 and f(-1) = -1, with the largest curvature near +-1.
LECUN_SCALE = 1.7159
LECUN_SLOPE = 2.0 / 3.0


@ops.custom_gradient
def lecun_tanh(x):
    """``1.7159 * tanh(2/3 * x)``, the scaled tanh of "Efficient BackProp"."""
    t = ops.tanh(LECUN_SLOPE * x)

    def grad(*args, upstream=None):
        if upstream is None:
            (upstream,) = args
        return upstream * (LECUN_SCALE * LECUN_SLOPE) * (1.0 - ops.square(t))

    return LECUN_SCALE * t, grad
