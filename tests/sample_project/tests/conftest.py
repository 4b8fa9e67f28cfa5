import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402 - after the environment is set
import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def seeded():
    """Every test starts from the same Python, NumPy and TensorFlow seeds."""
    keras.utils.set_random_seed(1234)


@pytest.fixture
def rng():
    return np.random.default_rng(7)


@pytest.fixture
def blobs(rng):
    """Three well separated Gaussian blobs in 6 dimensions: 96 samples, integer labels."""
    centers = rng.normal(scale=3.0, size=(3, 6))
    labels = rng.integers(0, 3, size=96)
    points = centers[labels] + rng.normal(size=(96, 6))
    return points.astype("float32"), labels.astype("int32")


@pytest.fixture
def padded_sequences(rng):
    """A batch of 4 sequences of 5 steps with 3 features, the shorter ones padded with zero steps."""
    lengths = [5, 3, 4, 2]
    batch = np.zeros((4, 5, 3), dtype="float32")
    for i, length in enumerate(lengths):
        batch[i, :length] = rng.normal(size=(length, 3))
    return batch
