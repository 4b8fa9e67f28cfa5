"""Keras 3's `keras.ops.custom_gradient` on the PyTorch backend. Importing this module imports Keras and PyTorch.

On PyTorch, `keras.ops.custom_gradient(f)` is a `torch.autograd.Function`:
its forward runs `f` under `torch.no_grad` and keeps the op's inputs; its
backward receives the op's one upstream gradient and calls
`grad(*inputs, upstream=upstream)`, which must return a tuple. The checks
take gradients with `torch.autograd.grad`.

PyTorch runs eagerly; the many evaluations a check needs are batched where
PyTorch can batch them. The forward's own ops (finite differences, autodiff)
run vectorised with `torch.func.vmap`, in a loop when the forward cannot be
(`.item()`, Python control flow on values). The rows of vector-Jacobian
products through the custom gradient are taken at once with
`is_grads_batched`; `torch.func` cannot transform Keras's Function itself (an
`autograd.Function` without `setup_context`), so values of the custom
gradient at many points (the sweep, second order) are computed one point
after the other.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import keras
import numpy as np
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from gradmagic.frameworks.base import ForwardRun, GradientConvention, Layout, RawGraph, Target, TensorMeta, Vjps, native
from gradmagic.frameworks.keras.common import KerasAdapter, VariableReads, refuse_variables
from gradmagic.frameworks.keras.torch_graph import GraphRecorder
from gradmagic.frameworks.keras.torch_values import OnZ, dtype_name, grad, to_tensor, torch_dtype, vjp_rows
from gradmagic.frameworks.keras.wording import KERAS_ON_TORCH

#: What taking the forward's own gradient raises when an op in it has no derivative in torch.autograd.
_NOT_DIFFERENTIABLE = (RuntimeError, NotImplementedError)
#: The class `keras.ops.custom_gradient` returns on this backend.
_KERAS_OP = type(keras.ops.custom_gradient(lambda: None))


class KerasTorchAdapter(KerasAdapter):
    """`keras.ops.custom_gradient` ops on Keras 3's PyTorch backend, checked through `torch.autograd`."""

    display_name = "Keras 3 (PyTorch backend)"
    version = f"keras {keras.__version__}, torch {torch.__version__}"
    backend = "torch"
    # keras/src/backend/torch/core.py (Keras 3.15): CustomGradientFunction.backward(ctx, grad_output) takes one
    # upstream gradient and calls grad_fn(*ctx.saved_tensors, upstream=grad_output); it returns (None,) + grads,
    # which needs a tuple. The forward runs under torch.no_grad, so closed-over variables get no gradient.
    convention = GradientConvention(
        upstream="keyword",
        tuple_required=True,
        single_output=True,
        variables="closed-over",
        fixes_gradients=True,
        signature_checked=True,
    )
    autodiff = "torch.autograd"
    compiled = "Keras's torch.autograd.Function"
    wording = KERAS_ON_TORCH

    def _unwrap(self, op: Callable) -> tuple[Callable, str] | None:
        return (op.forward_fn, "decorated") if isinstance(op, _KERAS_OP) else None

    # -- values ---------------------------------------------------------------------------------------------------

    def to_tensors(self, structure: Any) -> Any:
        return keras.tree.map_structure(to_tensor, structure)

    def flatten(self, structure: Any) -> tuple[list, list[str]]:
        flat = keras.tree.flatten_with_path(structure)
        return [leaf for _, leaf in flat], ["".join(f"[{key!r}]" for key in path) for path, _ in flat]

    def pack(self, structure: Any, leaves: list) -> Any:
        return keras.tree.pack_sequence_as(structure, leaves)

    def meta(self, value: Any) -> TensorMeta | None:
        name = None
        if isinstance(value, keras.Variable):
            name, value = str(getattr(value, "path", None) or value.name), value.value
        if isinstance(value, torch.Tensor):
            return TensorMeta(tuple(value.shape), dtype_name(value.dtype), value.dtype.is_floating_point, name)
        if isinstance(value, (np.ndarray, np.generic)):
            dtype = np.dtype(value.dtype)
            return TensorMeta(tuple(value.shape), dtype.name, bool(np.issubdtype(dtype, np.floating)))
        return None

    def to_numpy(self, value: Any) -> np.ndarray:
        if isinstance(value, keras.Variable):
            value = value.value
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu()
            return (value.float() if value.dtype == torch.bfloat16 else value).numpy()
        return native(np.asarray(value))

    def constant(self, array: np.ndarray, dtype: str) -> Any:
        return _tensor(np.asarray(array), dtype=torch_dtype(dtype))

    # -- running --------------------------------------------------------------------------------------------------

    def run_forward(self, call: Callable[[], Any], exclude: list) -> ForwardRun:
        """Run `call()` as Keras's Function runs the forward (under `torch.no_grad`); note the trainable variables it
        reads (a non-trainable one is a constant of the op, as for a Keras trainer), and, on float64 inputs, whether an
        op makes a narrower float of a float64 tensor."""
        wide = any(isinstance(leaf, torch.Tensor) and leaf.dtype == torch.float64 for leaf in exclude)
        watch = _NarrowingWatch() if wide else contextlib.nullcontext()
        with torch.no_grad(), VariableReads() as reads, watch:
            result = call()
        variables = [v for v in reads.variables if v.trainable and not any(v is other for other in exclude)]
        return ForwardRun(result, variables, wide and watch.narrowed)

    def evaluate(self, target, layout, offsets, upstream=None, signs=(1.0,)) -> np.ndarray:
        refuse_variables(layout, self.backend)
        on_z = OnZ(target, layout, np.dtype(offsets.dtype))
        z = torch.cat([leaf.reshape(-1).to(on_z.dtype) for leaf in layout.perturbed])
        displaced = _tensor(offsets)
        evaluations = torch.stack([on_z.evaluate(z + sign * displaced) for sign in signs])
        if upstream is not None:
            evaluations = evaluations @ _tensor(upstream, dtype=on_z.dtype)
        return evaluations.numpy()

    def vjps(self, target, layout, points, upstreams, autodiff=True, jacobian=False) -> Vjps:
        refuse_variables(layout, self.backend)
        on_z = OnZ(target, layout, np.dtype(points.dtype))
        given = _tensor(upstreams, dtype=on_z.dtype)
        outputs, custom, plain = [], [], []
        for values in _tensor(points):
            point = values.clone().requires_grad_()
            with torch.enable_grad():
                flat = on_z.custom(point)
            rows = torch.cat([given, torch.eye(flat.numel(), dtype=on_z.dtype)]) if jacobian else given
            outputs.append(flat.detach())
            custom.append(vjp_rows(flat, point, rows))
            if autodiff and plain is not None:
                plain = _unless_undifferentiable(lambda: plain + [vjp_rows(on_z.plain(point), point, rows)])
        return Vjps(
            torch.stack(outputs).numpy(),
            torch.stack(custom).numpy(),
            torch.stack(plain).numpy() if autodiff and plain is not None else None,
        )

    def second_order(self, target: Target, layout: Layout, upstream: np.ndarray) -> np.ndarray:
        """The Jacobian of the custom VJP J(z)^T u, by `torch.autograd.grad` with `create_graph`.

        On this backend h has no derivative through values the gradient
        function closes over: the forward ran under `torch.no_grad`. Its
        Jacobian is then zero where they matter, as nested `torch.autograd.grad`
        calls compute it.
        """
        refuse_variables(layout, self.backend)
        on_z = OnZ(target, layout, np.dtype(upstream.dtype))
        z = torch.cat([leaf.reshape(-1).to(on_z.dtype) for leaf in layout.perturbed])
        point = z.clone().requires_grad_()
        with torch.enable_grad():
            (gradient,) = grad([on_z.custom(point)], [point], [_tensor(upstream)], create_graph=True)
            return vjp_rows(gradient, point, torch.eye(gradient.numel(), dtype=on_z.dtype)).numpy()

    def gradient_graph(self, target: Target, layout: Layout, upstreams: list, arguments: list) -> RawGraph:
        """The aten ops of the forward and of the backward, recorded as they run, as one graph.

        `arguments` gives (kind, label) for each input leaf, then each upstream gradient.
        """
        refuse_variables(layout, self.backend)
        return GraphRecorder(target, layout, upstreams, arguments).trace()


def _tensor(array: np.ndarray, dtype: Any = None) -> torch.Tensor:
    """`array` as a tensor, sharing its memory where it can: a read-only array (the check's example point is one) is
    copied first, for PyTorch would share it writeable and warn ('The given NumPy array is not writable')."""
    if not array.flags.writeable:
        array = array.copy()
    return torch.as_tensor(array, dtype=dtype)


def _unless_undifferentiable(compute: Callable[[], list]) -> list | None:
    """`compute()` through the forward's own ops, or None when one of them has no derivative in torch.autograd."""
    try:
        return compute()
    except _NOT_DIFFERENTIABLE:
        return None


class _NarrowingWatch(TorchDispatchMode):
    """Notes whether an op turns a float64 tensor into a narrower floating one (Keras's `ops.sin` on float64)."""

    def __init__(self):
        super().__init__()
        self.narrowed = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if not self.narrowed and any(
            isinstance(t, torch.Tensor) and t.dtype == torch.float64 for t in pytree.tree_leaves((args, kwargs))
        ):
            self.narrowed = any(
                isinstance(t, torch.Tensor) and t.dtype.is_floating_point and t.dtype != torch.float64
                for t in pytree.tree_leaves(result)
            )
        return result


ADAPTER = KerasTorchAdapter()
