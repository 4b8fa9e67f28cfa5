"""How messages name Keras's things on its JAX and PyTorch backends, and what those backends' messages mean (measured
with Keras 3.15, JAX 0.10.2 and PyTorch 2.13)."""

from __future__ import annotations

from dataclasses import dataclass

from gradmagic.frameworks.names import backend_name
from gradmagic.frameworks.wording import KeywordRefusal, Wording, keras_on

# What Keras's trainer does with a closed-over trainable variable, measured with Keras 3.15 (tests/test_keras_jax.py,
# tests/test_keras_torch.py: model.fit of a layer whose op closes over one); a non-trainable one trains fine on every
# backend, and is a constant of the op here.
_TRAINER = "model.fit, which differentiates every trainable variable"


def _backend(backend: str, refusal: str) -> dict:
    """The fields Keras's JAX and PyTorch backends word alike: their names and ops, who reports a wrong number of
    gradients, and how keyword arguments are refused (the backend's error says `refusal`)."""
    fields = keras_on(backend)
    return {
        **fields,
        "wrong_count": f"{fields['framework']} reports this only when the gradient is taken.",
        "keywords": KeywordRefusal(
            (refusal,),
            f"keras.ops.custom_gradient on {backend_name(backend)} refuses keyword arguments",
            "bind them with functools.partial before decorating, or make the op with %%custom_gradient --keras, whose "
            "op accepts them.",
        ),
    }


@dataclass(frozen=True)
class JaxWording(Wording):
    def closed_over_consequence(self, plural: bool) -> str:
        return (
            "jax.custom_gradient, which keras.ops.custom_gradient is on JAX, gives gradients for the op's explicit "
            f"inputs only: {_TRAINER}, fails with JAX's UnexpectedTracerError, 'Encountered an unexpected tracer'"
        )


@dataclass(frozen=True)
class TorchWording(Wording):
    def list_failure(self, inputs: int) -> str:
        # Keras wraps what is not a tuple as one gradient: backward returns (None, [grads...]).
        if inputs == 1:
            error = "RuntimeError: expected Variable or None (got list)"
        else:
            error = (
                "RuntimeError: function CustomGradientFunctionBackward returned an incorrect number of gradients "
                f"(expected {inputs + 1}, got 2)"
            )
        return f"Keras's torch.autograd.Function takes the list for one gradient, and PyTorch fails with '{error}'"

    def closed_over_consequence(self, plural: bool) -> str:
        them = "them" if plural else "it"
        return (
            "keras.ops.custom_gradient's torch.autograd.Function runs the forward under torch.no_grad, so "
            f"{'they get' if plural else 'it gets'} no gradient at all: {_TRAINER}, trains on without moving "
            f"{them}, Keras only warning 'Gradients do not exist for variables ... when minimizing the loss'"
        )

    def fixed_gradient(self, what: str, dtype: str | None = None) -> str:
        # Measured with torch 2.13 (tests/test_keras_torch.py): autograd's validate_outputs sums a gradient whose shape
        # the input broadcasts to back to the input's shape, and casts a floating gradient to the input's dtype.
        if what == "shape":
            return (
                "PyTorch sums it back over the broadcast axes itself, so the op works here; keras.ops.custom_gradient "
                "on JAX refuses it ('Custom VJP bwd rule must produce an output with the same type as the args tuple') "
                "and on TensorFlow passes it on unreduced, so the op is not portable."
            )
        if dtype == "float64":
            # Measured with jax 0.10.2: with jax_enable_x64 off, a cast to float64 gives float32 (JAX warns that the
            # dtype "is not available, and will be truncated"); with it on, the gradient is float64.
            return (
                "PyTorch casts it to the input's dtype itself, so the op works here; on TensorFlow the gradient "
                "stays float64, and on JAX too with jax_enable_x64 on (with it off, JAX's default, the cast to "
                "float64 gives float32, with a warning), so the op is not portable."
            )
        return (
            "PyTorch casts it to the input's dtype itself, so the op works here; on TensorFlow and JAX the gradient "
            "keeps the wrong dtype, so the op is not portable."
        )

    def several_outputs(self, count: int) -> str:
        # keras/src/backend/torch/core.py: CustomGradientFunction.backward(ctx, grad_output) takes one upstream.
        return (
            "its torch.autograd.Function receives a single upstream gradient, and taking the gradient fails with "
            "`TypeError: CustomGradientFunction.backward() takes 2 positional arguments but "
            f"{count + 1} were given`"
        )


KERAS_ON_JAX = JaxWording(
    **_backend("jax", "positional-only arguments"),
    autodiff="JAX's own gradient (jax.vjp)",
    compiled="inside jax.jit",
    # Measured with jax 0.10.2 (tests/test_keras_jax.py).
    wrong_shape="JAX refuses it when the gradient is taken: 'Custom VJP bwd rule must produce an output with the same "
    "type as the args tuple of the primal function'.",
    ambiguous_truth=("truth value of an array", "Attempted boolean conversion of traced array"),
    python_function="jax.pure_callback",
)

KERAS_ON_TORCH = TorchWording(
    **_backend("torch", "forward() got an unexpected keyword argument"),
    autodiff="PyTorch's own gradient (torch.autograd)",
    compiled="with Keras's torch.autograd.Function",
    # Measured with torch 2.13 (tests/test_keras_torch.py): what the input does not broadcast to is refused.
    wrong_shape="PyTorch refuses it when the gradient is taken: 'Function CustomGradientFunctionBackward returned an "
    "invalid gradient at index ... expected shape compatible with ...'.",
    # keras/src/backend/torch/core.py: CustomGradientFunction.forward runs the forward under torch.no_grad.
    second_order=" On Keras's PyTorch backend the forward runs under torch.no_grad, so the tensors the gradient "
    "function closes over from the forward have no derivative: compute them in the gradient function from the op's "
    "inputs, which it receives as its `*args`.",
    ambiguous_truth=("truth value of an array", "Boolean value of Tensor with more than one value"),
)
