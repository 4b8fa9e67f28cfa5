"""The gradient graph on Keras's PyTorch backend: the aten ops the op's forward and backward dispatch, recorded as
they run. Importing this module imports Keras and PyTorch."""

from __future__ import annotations

import sys

import keras
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from gradmagic.frameworks.base import Layout, RawGraph, RawOp, Target
from gradmagic.frameworks.keras.torch_values import call, dtype_name

#: Ops of the gradient graph that forward their input as it is.
_PASSTHROUGH = {"detach", "alias", "lift_fresh", "lift_fresh_copy"}
#: aten ops that tell an intended surrogate gradient from a mistake (`RawOp.meaning`).
_MEANINGS = {
    **{name: name for name in ("round", "sign", "floor", "ceil", "minimum", "maximum", "argmax")},
    "argmin": "argmax",
    **{"clamp": "clip", "clip": "clip", "hardtanh": "clip", "detach": "stop_gradient", "_to_copy": "cast"},
}


class GraphRecorder(TorchDispatchMode):
    """The aten ops PyTorch runs for the op's forward and for its backward, turned into a RawGraph.

    Every op is recorded below autograd (a TorchDispatchMode): the forward's
    ops run inside Keras's Function under `torch.no_grad`, the backward's when
    `torch.autograd.grad` calls the gradient function. A tensor the backward
    uses that the forward made (a value the gradient function closes over, or
    an input Keras saved) is what the backward keeps from the forward.
    Tensors are matched by identity; all of them stay alive while recording,
    so no identity is reused.
    """

    def __init__(self, target: Target, layout: Layout, upstreams: list, arguments: list):
        super().__init__()
        self.target, self.layout, self.upstreams, self.arguments = target, layout, upstreams, arguments
        self.ops: list[RawOp] = []
        self.counts: dict[str, int] = {}
        self.producers: dict[int, tuple[str, int]] = {}
        self.alive: list = []
        self.scope = "forward"

    def trace(self) -> RawGraph:
        layout = self.layout
        leaves = [
            leaf.detach().requires_grad_() if k in layout.perturbable else leaf for k, leaf in enumerate(layout.inputs)
        ]
        for k, leaf in enumerate(leaves):
            if isinstance(leaf, torch.Tensor):
                self._placeholder(f"inputs/{k}", leaf, *self.arguments[k])
        for i, upstream in enumerate(self.upstreams):
            self._placeholder(f"upstreams/{i}", upstream, *self.arguments[len(layout.inputs) + i])
        perturbed = [leaves[k] for k in layout.perturbable]
        with self:
            with torch.enable_grad():
                outputs = keras.tree.flatten(call(self.target.op, layout, perturbed))
            self.scope = "backward"
            floating = [(o, u) for o, u in zip(outputs, self.upstreams) if o.dtype.is_floating_point]
            connected = [(o, u) for o, u in floating if o.requires_grad]
            gradients = (
                torch.autograd.grad([o for o, _ in connected], perturbed, [u for _, u in connected], allow_unused=True)
                if connected
                else [None] * len(perturbed)
            )
        produced = [self._source(o) for o in outputs]
        downstream = [
            self._source(g) if g is not None else self._constant(tuple(x.shape), dtype_name(x.dtype))
            for g, x in zip(gradients, perturbed)
        ]
        return RawGraph(tuple(self.ops), tuple(produced), tuple(downstream))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        inputs = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        outputs = [t for t in pytree.tree_leaves(result) if isinstance(t, torch.Tensor)]
        sources = [self._source(t) for t in inputs]
        kind = func.overloadpacket.__name__
        name = self._name(self.scope, kind)
        passthrough = kind in _PASSTHROUGH and len(inputs) == len(outputs) == 1
        self.ops.append(
            RawOp(
                name,
                kind,
                "passthrough" if passthrough else "op",
                self.scope,
                tuple(sources),
                tuple((tuple(t.shape), dtype_name(t.dtype)) for t in outputs),
                _user_line(self.target.filename),
                (0,) if passthrough else (),
                meaning=_MEANINGS.get(kind),
            )
        )
        for index, tensor in enumerate(outputs):
            self.producers[id(tensor)] = (name, index)
        self.alive += inputs + outputs
        return result

    def _placeholder(self, name: str, value: torch.Tensor, kind: str, label: str) -> None:
        self.ops.append(
            RawOp(name, "", kind, None, (), ((tuple(value.shape), dtype_name(value.dtype)),), None, label=label)
        )
        self.producers[id(value)] = (name, 0)
        self.alive.append(value)

    def _source(self, tensor: torch.Tensor) -> tuple[str, int]:
        """The (op, output) that made `tensor`; a tensor made outside the recording is a constant."""
        source = self.producers.get(id(tensor))
        if source is None:
            source = self.producers[id(tensor)] = self._constant(tuple(tensor.shape), dtype_name(tensor.dtype))
            self.alive.append(tensor)
        return source

    def _constant(self, shape: tuple, dtype: str) -> tuple[str, int]:
        name = self._name("constants", "constant")
        self.ops.append(RawOp(name, "constant", "constant", None, (), ((shape, dtype),), None))
        return (name, 0)

    def _name(self, scope: str, kind: str) -> str:
        count = self.counts.get(scope, 0)
        self.counts[scope] = count + 1
        return f"{scope}/{kind}_{count}"


def _user_line(filename: str | None) -> int | None:
    """The innermost line of the user's source (the op's file or cell) on the Python stack."""
    if filename is None:
        return None
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename == filename:
            return frame.f_lineno
        frame = frame.f_back
    return None
