"""Values on Keras's PyTorch backend, and the op as a function of z: what the PyTorch adapter and its gradient-graph
recorder share. Importing this module imports Keras and PyTorch."""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable, Iterator

import keras
import numpy as np
import torch

from gradmagic.frameworks.base import Layout, Target
from gradmagic.frameworks.cache import cache_of

#: Rows (points, directions) evaluated at once by vmap, in elements of z and outputs; the rest run in sequence.
_BATCH_ELEMENTS = 2**24
#: Marks, on a raw function, that vmap cannot run its forward (so later checks go straight to the loop).
_NO_VMAP = "no-vmap"
#: What PyTorch warns when gradmagic's vectorised map meets an op without a batching rule (aten::quantile, which
#: `ops.median` calls): a fact about gradmagic's own calls, which the user's code never makes.
_BATCHING_WARNING = "There is a performance drop because we have not yet implemented the batching rule"


@contextlib.contextmanager
def batched() -> Iterator[None]:
    """Around gradmagic's vectorised maps (`torch.func.vmap`, `is_grads_batched`): PyTorch's warning that an op has no
    batching rule (and runs in a loop inside) is not shown; every other warning is."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_BATCHING_WARNING, category=UserWarning)
        yield


class OnZ:
    """The op (through its custom gradient) and its forward alone (what autodiff and finite differences see), as
    functions of z: their floating outputs, flattened and concatenated, in z's dtype."""

    def __init__(self, target: Target, layout: Layout, dtype: Any):
        self.target, self.layout = target, layout
        self.dtype = dtype if isinstance(dtype, torch.dtype) else torch_dtype(np.dtype(dtype).name)
        self.perturbed = layout.perturbed

    def custom(self, z: torch.Tensor) -> torch.Tensor:
        return self._at(self.target.op, z)

    def plain(self, z: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            return self._at(self.target.forward, z)

    def evaluate(self, points: torch.Tensor) -> torch.Tensor:
        """[P, M]: the forward at each row of `points`, vectorised where the forward allows it."""
        if len(points) == 0:
            return torch.zeros((0, 0), dtype=self.dtype)

        def forward(z: torch.Tensor) -> torch.Tensor:
            return self._at(self.target.forward, z)

        cache = cache_of(self.target.raw)
        with torch.no_grad():
            first = forward(points[0])
            batch = max(1, _BATCH_ELEMENTS // max(1, points.shape[1] + first.numel()))
            if not cache.get(_NO_VMAP) and len(points) > 1:
                try:
                    with batched():
                        return torch.cat(
                            [torch.func.vmap(forward)(points[i : i + batch]) for i in range(0, len(points), batch)]
                        )
                except (RuntimeError, NotImplementedError, TypeError, ValueError):
                    # The forward uses values of tensors (`.item()`, `if`) or an op vmap lacks: one point at a time.
                    cache[_NO_VMAP] = True
            return torch.stack([first] + [forward(point) for point in points[1:]])

    def _at(self, function: Callable, z: torch.Tensor) -> torch.Tensor:
        leaves, offset = [], 0
        for leaf in self.perturbed:
            leaves.append(z[offset : offset + leaf.numel()].reshape(leaf.shape).to(leaf.dtype))
            offset += leaf.numel()
        outputs = keras.tree.flatten(call(function, self.layout, leaves))
        flat = [o.reshape(-1).to(self.dtype) for o in outputs if o.dtype.is_floating_point]
        return torch.cat(flat) if flat else torch.zeros(0, dtype=self.dtype)


def call(function: Callable, layout: Layout, perturbed: list) -> Any:
    """`function` on the layout's inputs, the perturbable ones replaced by `perturbed`."""
    return function(*keras.tree.pack_sequence_as(layout.structure, layout.with_perturbed(perturbed)), **layout.kwargs)


def grad(outputs: list, inputs: list, upstreams: list, create_graph: bool = False) -> list:
    """`torch.autograd.grad`, with zeros for inputs the outputs do not depend on."""
    connected = [(o, u) for o, u in zip(outputs, upstreams) if o.requires_grad]
    if not connected:
        return [torch.zeros_like(x) for x in inputs]
    return list(
        torch.autograd.grad(
            [o for o, _ in connected],
            inputs,
            [u for _, u in connected],
            retain_graph=True,
            create_graph=create_graph,
            allow_unused=True,
            materialize_grads=True,
        )
    )


def vjp_rows(outputs: torch.Tensor, z: torch.Tensor, upstreams: torch.Tensor) -> torch.Tensor:
    """[K, N]: the VJP of the flat `outputs` in `z` for each upstream row, the rows taken at once
    (`is_grads_batched`) where they can be."""
    if outputs.numel() == 0 or not outputs.requires_grad:
        return torch.zeros((len(upstreams), z.numel()), dtype=z.dtype)
    if len(upstreams) == 1:
        return grad([outputs], [z], [upstreams[0]])[0].detach()[None]
    try:
        with batched():
            (rows,) = torch.autograd.grad(
                outputs,
                z,
                upstreams,
                retain_graph=True,
                is_grads_batched=True,
                allow_unused=True,
                materialize_grads=True,
            )
        return rows.detach()
    except (RuntimeError, NotImplementedError, TypeError, ValueError):
        # A gradient function vmap cannot run (`.item()`, `if` on values): one row at a time, so that its
        # own error, if it has one, is raised as in a plain backward pass.
        return torch.stack([grad([outputs], [z], [row])[0].detach() for row in upstreams])


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def torch_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"PyTorch has no dtype {name!r}")
    return dtype


def to_tensor(value: Any) -> Any:
    """A PyTorch tensor of `value` (Keras's conversion: NumPy keeps its dtype, Python floats become float32)."""
    if value is None or isinstance(value, torch.Tensor):
        return value
    return keras.ops.convert_to_tensor(value)
