"""layerkit: Keras 3 layers with hand-written gradients."""

from layerkit.activations import lecun_tanh
from layerkit.layers import FakeQuant, FusedDense, GradientReversal, L2Normalize, LayerNorm, PositiveScale
from layerkit.models import build_classifier, build_domain_adversarial, build_sequence_encoder
from layerkit.ops import l2_normalize, layer_norm, round_ste, safe_norm, softplus

__version__ = "0.3.1"

__all__ = [
    "FakeQuant",
    "FusedDense",
    "GradientReversal",
    "L2Normalize",
    "LayerNorm",
    "PositiveScale",
    "build_classifier",
    "build_domain_adversarial",
    "build_sequence_encoder",
    "l2_normalize",
    "layer_norm",
    "lecun_tanh",
    "round_ste",
    "safe_norm",
    "softplus",
]
