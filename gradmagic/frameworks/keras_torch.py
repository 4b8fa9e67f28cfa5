"""Keras 3's `keras.ops.custom_gradient` on the PyTorch backend. Importing this module imports Keras and PyTorch.

On PyTorch, `keras.ops.custom_gradient(f)` is a `torch.autograd.Function`:
its forward runs `f` under `torch.no_grad` and keeps the op's inputs; its
backward receives the op's one upstream gradient and calls
`grad(*inputs, upstream=upstream)`, which must return a tuple. The checks
take gradients with `torch.autograd.grad`.

PyTorch runs eagerly; the many evaluations a check needs are batched where
PyTorch can batch them. The forward's own ops (finite differences, autodiff)
run vectorised with `torch.func.vmap`, in a loop when the forward cannot be
(`.item()`, Python control flow on values). The rows of a Jacobian through
the custom gradient are taken at once with `is_grads_batched`; `torch.func`
cannot transform Keras's Function itself (an `autograd.Function` without
`setup_context`), so values of the custom gradient at many points (the sweep,
second order) are computed one point after the other.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any, Callable

import keras
import numpy as np
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from gradmagic.frameworks.base import (
    EagerExecution,
    FullJacobians,
    GradientConvention,
    Layout,
    Projections,
    RawGraph,
    RawOp,
    Target,
    TensorMeta,
)
from gradmagic.frameworks.keras_common import (
    VariableReads,
    cache_of,
    initial_vector,
    keyword_binding_op,
    refuse_variables,
)

#: What taking the forward's own gradient raises when an op in it has no derivative in torch.autograd.
_NOT_DIFFERENTIABLE = (RuntimeError, NotImplementedError)
#: Rows (points, directions) evaluated at once by vmap, in elements of z and outputs; the rest run in sequence.
_BATCH_ELEMENTS = 2**24
#: Ops of the gradient graph that forward their input as it is.
_PASSTHROUGH = {"detach", "alias", "lift_fresh", "lift_fresh_copy"}
#: The class `keras.ops.custom_gradient` returns on this backend.
_KERAS_OP = type(keras.ops.custom_gradient(lambda: None))
#: Marks, on a raw function, that vmap cannot run its forward (so later checks go straight to the loop).
_NO_VMAP = "no-vmap"


class KerasTorchAdapter(EagerExecution):
    """`keras.ops.custom_gradient` ops on Keras 3's PyTorch backend, checked through `torch.autograd`."""

    name = "keras"
    display_name = "Keras 3 (PyTorch backend)"
    version = f"keras {keras.__version__}, torch {torch.__version__}"
    decorator = "keras.ops.custom_gradient"
    backend = "torch"
    # keras/src/backend/torch/core.py (Keras 3.15): CustomGradientFunction.backward(ctx, grad_output) takes one
    # upstream gradient and calls grad_fn(*ctx.saved_tensors, upstream=grad_output); it returns (None,) + grads,
    # which needs a tuple. The forward runs under torch.no_grad, so closed-over variables get no gradient.
    convention = GradientConvention(
        upstream="keyword", tuple_required=True, single_output=True, variables="closed-over"
    )
    autodiff = "torch.autograd"
    compiled = "Keras's torch.autograd.Function"

    def decorate(self, function: Callable) -> Callable:
        """Decorate with `keras.ops.custom_gradient`; the op also takes keyword arguments, as constants."""
        return keyword_binding_op(function)

    # -- checking ---------------------------------------------------------------

    def resolve(self, op: Callable) -> Target:
        """The raw function behind a gradmagic op, a hand-decorated op, or a plain function."""
        if hasattr(op, "_gradmagic_function"):
            raw, origin = op._gradmagic_function, "magic"
        elif isinstance(op, _KERAS_OP):
            raw, origin = op.forward_fn, "decorated"
        else:
            raw, origin = op, "plain"
            cache = cache_of(raw)
            op = cache.get("decorated") or cache.setdefault("decorated", self.decorate(raw))
        try:
            signature = inspect.signature(raw)
        except (TypeError, ValueError):
            signature = None
        code = getattr(raw, "__code__", None)
        return Target(
            raw, op, origin, getattr(raw, "__name__", type(raw).__name__), signature, code.co_filename if code else None
        )

    def to_tensors(self, structure: Any) -> Any:
        return keras.tree.map_structure(_to_tensor, structure)

    def flatten(self, structure: Any) -> list:
        return keras.tree.flatten(structure)

    def pack(self, structure: Any, leaves: list) -> Any:
        return keras.tree.pack_sequence_as(structure, leaves)

    def leaf_paths(self, structure: Any) -> list[str]:
        """`[0]['a']`-style paths of the leaves, in `flatten` order ("" for a leaf itself)."""
        return ["".join(f"[{key!r}]" for key in path) for path, _ in keras.tree.flatten_with_path(structure)]

    def meta(self, value: Any) -> TensorMeta | None:
        if isinstance(value, keras.Variable):
            value = value.value
        if isinstance(value, torch.Tensor):
            return TensorMeta(tuple(value.shape), _dtype_name(value.dtype), value.dtype.is_floating_point)
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
        return np.asarray(value)

    def run_recording_variables(self, call: Callable[[], Any], exclude: list) -> tuple[Any, list]:
        """Run `call()` as Keras's Function runs the forward (under `torch.no_grad`); note the variables it reads."""
        with torch.no_grad(), VariableReads() as reads:
            result = call()
        return result, [v for v in reads.variables if not any(v is other for other in exclude)]

    def narrows_float64(self, call: Callable[[], Any]) -> bool:
        """Whether an aten op `call()` runs takes a float64 tensor and makes a narrower floating one."""
        with torch.no_grad(), _NarrowingWatch() as watch:
            call()
        return watch.narrowed

    def variable_name(self, variable: Any) -> str:
        return str(getattr(variable, "path", None) or variable.name)

    def constant(self, array: np.ndarray, dtype: str) -> Any:
        return torch.as_tensor(np.asarray(array), dtype=_torch_dtype(dtype))

    def cast(self, value: Any, dtype: str) -> Any:
        return _to_tensor(value).to(_torch_dtype(dtype))

    def machine_epsilon(self, dtype: str) -> float:
        return float(torch.finfo(_torch_dtype(dtype)).eps)

    def initial_vector(self, layout: Layout) -> np.ndarray:
        return initial_vector(layout, self.to_numpy)

    def decorated_gradients(self, target: Target, layout: Layout, upstreams: list) -> tuple[list, list]:
        """Outputs and gradients of the op through Keras's Function and `torch.autograd.grad`."""
        refuse_variables(layout, "PyTorch")
        perturbed = [leaf.detach().requires_grad_() for leaf in _perturbed(layout)]
        with torch.enable_grad():
            outputs = keras.tree.flatten(_call(target.op, layout, perturbed))
        floating = [(o, u) for o, u in zip(outputs, upstreams) if o.dtype.is_floating_point and o.requires_grad]
        gradients = _grad([o for o, _ in floating], perturbed, [u for _, u in floating])
        return [self.to_numpy(o) for o in outputs], [self.to_numpy(g) for g in gradients]

    def full_jacobians(self, target: Target, layout: Layout, steps: np.ndarray | None) -> FullJacobians:
        refuse_variables(layout, "PyTorch")
        z = torch.as_tensor(self.initial_vector(layout))
        on_z = _OnZ(target, layout, z.dtype)
        point = z.clone().requires_grad_()
        with torch.enable_grad():
            custom = _jacobian(on_z.custom(point), point)
        autodiff = _autodiff(lambda: _jacobian(on_z.plain(point), point))
        evaluations = None
        if steps is not None:
            identity = torch.diag(torch.as_tensor(steps, dtype=z.dtype))
            points = torch.cat([z[None], z[None] + identity, z[None] - identity])
            evaluations = on_z.evaluate(points).numpy()
        return FullJacobians(evaluations, custom.numpy(), None if autodiff is None else autodiff.numpy())

    def second_order(self, target: Target, layout: Layout, steps: np.ndarray, upstream: np.ndarray) -> FullJacobians:
        """The custom VJP h(z) = J(z)^T u as a function of z: its central differences and autodiff Jacobian.

        On this backend h has no derivative through values the gradient
        function closes over: the forward ran under `torch.no_grad`. Its
        Jacobian is then zero where they matter, as nested `torch.autograd.grad`
        calls compute it.
        """
        refuse_variables(layout, "PyTorch")
        z = torch.as_tensor(self.initial_vector(layout))
        on_z = _OnZ(target, layout, z.dtype)
        u = torch.as_tensor(upstream, dtype=z.dtype)

        def h(point: torch.Tensor, create_graph: bool = False) -> torch.Tensor:
            with torch.enable_grad():
                (gradient,) = _grad([on_z.custom(point)], [point], [u], create_graph=create_graph)
            return gradient

        identity = torch.diag(torch.as_tensor(steps, dtype=z.dtype))
        points = torch.cat([z[None], z[None] + identity, z[None] - identity])
        evaluations = torch.stack([h(p.clone().requires_grad_()).detach() for p in points])
        point = z.clone().requires_grad_()
        with torch.enable_grad():
            jacobian = _jacobian(h(point, create_graph=True), point)
        return FullJacobians(evaluations.numpy(), jacobian.numpy(), None)

    def gradient_graph(self, target: Target, layout: Layout, upstreams: list, arguments: list) -> RawGraph:
        """The aten ops of the forward and of the backward, recorded as they run, as one graph.

        `arguments` gives (kind, label) for each input leaf, then each upstream gradient.
        """
        refuse_variables(layout, "PyTorch")
        return _GraphRecorder(target, layout, upstreams, arguments).trace()

    def evaluate_points(self, target: Target, layout: Layout, points: np.ndarray) -> np.ndarray:
        refuse_variables(layout, "PyTorch")
        z = torch.as_tensor(points)
        return _OnZ(target, layout, z.dtype).evaluate(z).numpy()

    def sweep(
        self, target: Target, layout: Layout, points: np.ndarray, row: int, column: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        refuse_variables(layout, "PyTorch")
        on_z = _OnZ(target, layout, np.dtype(points.dtype))
        values, custom, autodiff = [], [], []
        for values_at in torch.as_tensor(points):
            point = values_at.clone().requires_grad_()
            with torch.enable_grad():
                outputs = on_z.custom(point)
            values.append(float(outputs[row]))
            custom.append(float(_grad([outputs[row]], [point], [torch.ones((), dtype=outputs.dtype)])[0][column]))
            derivative = _autodiff(
                lambda: _grad([on_z.plain(point)[row]], [point], [torch.ones((), dtype=outputs.dtype)])[0][column]
            )
            autodiff.append(np.nan if derivative is None else float(derivative))
        autodiff = np.asarray(autodiff)
        return np.asarray(values), np.asarray(custom), None if np.isnan(autodiff).all() else autodiff

    def vjps(self, target: Target, layout: Layout, upstream: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        refuse_variables(layout, "PyTorch")
        z = torch.as_tensor(self.initial_vector(layout))
        custom, autodiff = _vjps(_OnZ(target, layout, z.dtype), z, torch.as_tensor(upstream, dtype=z.dtype))
        return custom.numpy(), None if autodiff is None else autodiff.numpy()

    def prober(
        self, target: Target, layout: Layout, steps: np.ndarray, outputs: int, seed: int, signs: np.ndarray
    ) -> KerasTorchProber:
        refuse_variables(layout, "PyTorch")
        return KerasTorchProber(self, target, layout, steps, outputs, seed, signs)


class KerasTorchProber:
    """Projection-mode measurements for one check. The upstream vector u is drawn from the seed with a
    `torch.Generator`, so the same seed gives the same vector."""

    def __init__(
        self,
        adapter: KerasTorchAdapter,
        target: Target,
        layout: Layout,
        steps: np.ndarray,
        outputs: int,
        seed: int,
        signs: np.ndarray,
    ):
        self.z = torch.as_tensor(adapter.initial_vector(layout))
        self.on_z = _OnZ(target, layout, self.z.dtype)
        self.steps_array, self.signs_array = steps, signs
        self.steps = torch.as_tensor(steps, dtype=self.z.dtype)
        self.signs = torch.as_tensor(signs, dtype=torch.int8)
        generator = torch.Generator().manual_seed(seed)
        self.upstream = torch.randn(outputs, generator=generator, dtype=self.z.dtype)
        self._custom, self._autodiff = _vjps(self.on_z, self.z, self.upstream)
        self.custom = self._custom.numpy()
        self.autodiff = None if self._autodiff is None else self._autodiff.numpy()
        self.upstream_vector = self.upstream.numpy()
        self._rounding: tuple[float, float] | None = None

    def direction(self, row: int, element: int) -> float:
        return float(self.signs_array[row, element]) * float(self.steps_array[element])

    def measure(self, rows: list[int], weights: np.ndarray, rounding: bool = True) -> Projections:
        dtype = self.z.dtype
        weights = torch.as_tensor(np.asarray(weights), dtype=dtype)
        rows_tensor = torch.as_tensor(rows, dtype=torch.long)
        size, outputs = self.z.numel(), self.upstream.numel()
        batch = max(1, _BATCH_ELEMENTS // max(1, 4 * size + 2 * outputs))
        differences, predicted, magnitude = [], [], []
        for start in range(0, len(rows), batch):  # the [T, N] directions, a batch at a time
            directions = weights[start : start + batch] * self.signs[rows_tensor[start : start + batch]].to(dtype)
            directions *= self.steps
            values = self.on_z.evaluate(torch.cat([self.z + directions, self.z - directions]))
            plus, minus = values[: len(directions)], values[len(directions) :]
            differences.append((plus - minus) @ self.upstream / 2)
            contribution = directions * self._custom
            predicted.append(contribution.sum(dim=1))
            magnitude.append(contribution.abs().sum(dim=1))
        count = len(rows)
        worst = typical = float("nan")
        if rounding:  # the rounding of f(z +- d) is that of f(z): measured once, at the centre
            if self._rounding is None:
                terms = torch.finfo(dtype).eps * (self.upstream * self.on_z.evaluate(self.z[None])[0]).abs()
                self._rounding = (float(terms.sum()), float(terms.square().sum().sqrt()))
            worst, typical = self._rounding
        return Projections(
            torch.cat(differences).numpy() if differences else np.zeros(0),
            np.full(count, worst),
            np.full(count, typical),
            torch.cat(predicted).numpy() if predicted else np.zeros(0),
            torch.cat(magnitude).numpy() if magnitude else np.zeros(0),
        )


# -- the op and its forward as functions of z --------------------------------------------------------------------


class _OnZ:
    """The op (through its custom gradient) and its forward alone (what autodiff and finite differences see), as
    functions of z: their floating outputs, flattened and concatenated, in z's dtype."""

    def __init__(self, target: Target, layout: Layout, dtype: Any):
        self.target, self.layout = target, layout
        self.dtype = dtype if isinstance(dtype, torch.dtype) else _torch_dtype(np.dtype(dtype).name)
        self.perturbed = _perturbed(layout)

    def custom(self, z: torch.Tensor) -> torch.Tensor:
        return self._at(self.target.op, z)

    def plain(self, z: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            return self._at(lambda *args, **kwargs: self.target.raw(*args, **kwargs)[0], z)

    def evaluate(self, points: torch.Tensor) -> torch.Tensor:
        """[P, M]: the forward at each row of `points`, vectorised where the forward allows it."""
        if len(points) == 0:
            return torch.zeros((0, 0), dtype=self.dtype)
        forward = lambda z: self._at(lambda *a, **k: self.target.raw(*a, **k)[0], z)  # noqa: E731
        cache = cache_of(self.target.raw)
        with torch.no_grad():
            first = forward(points[0])
            batch = max(1, _BATCH_ELEMENTS // max(1, points.shape[1] + first.numel()))
            if not cache.get(_NO_VMAP) and len(points) > 1:
                try:
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
        outputs = keras.tree.flatten(_call(function, self.layout, leaves))
        flat = [o.reshape(-1).to(self.dtype) for o in outputs if o.dtype.is_floating_point]
        return torch.cat(flat) if flat else torch.zeros(0, dtype=self.dtype)


def _perturbed(layout: Layout) -> list:
    return [layout.inputs[k] for k in layout.perturbable]


def _call(function: Callable, layout: Layout, perturbed: list) -> Any:
    """`function` on the layout's inputs, the perturbable ones replaced by `perturbed`."""
    leaves = list(layout.inputs)
    for k, value in zip(layout.perturbable, perturbed):
        leaves[k] = value
    return function(*keras.tree.pack_sequence_as(layout.structure, leaves), **layout.kwargs)


def _grad(outputs: list, inputs: list, upstreams: list, create_graph: bool = False) -> list:
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


def _jacobian(outputs: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """[M, N]: the Jacobian of the flat `outputs` in `z`, its rows taken at once (`is_grads_batched`) if they can be."""
    if outputs.numel() == 0 or not outputs.requires_grad:
        return torch.zeros((outputs.numel(), z.numel()), dtype=z.dtype)
    identity = torch.eye(outputs.numel(), dtype=outputs.dtype)
    try:
        (jacobian,) = torch.autograd.grad(
            outputs, z, identity, retain_graph=True, is_grads_batched=True, allow_unused=True, materialize_grads=True
        )
        return jacobian.detach()
    except (RuntimeError, NotImplementedError, TypeError, ValueError):
        # A gradient function vmap cannot run (`.item()`, `if` on values): one row at a time, so that its
        # own error, if it has one, is raised as in a plain backward pass.
        return torch.stack([_grad([outputs], [z], [row])[0].detach() for row in identity])


def _autodiff(compute: Callable[[], torch.Tensor]) -> torch.Tensor | None:
    """`compute()` through the forward's own ops, or None when one of them has no derivative in torch.autograd."""
    try:
        return compute()
    except _NOT_DIFFERENTIABLE:
        return None


def _vjps(on_z: _OnZ, z: torch.Tensor, upstream: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The custom and the autodiff vector-Jacobian products for `upstream` at z."""
    point = z.clone().requires_grad_()
    with torch.enable_grad():
        (custom,) = _grad([on_z.custom(point)], [point], [upstream])
    autodiff = _autodiff(lambda: _grad([on_z.plain(point)], [point], [upstream])[0])
    return custom.detach(), None if autodiff is None else autodiff.detach()


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


# -- the gradient graph ----------------------------------------------------------------------------------------------


class _GraphRecorder(TorchDispatchMode):
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
                outputs = keras.tree.flatten(_call(self.target.op, layout, perturbed))
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
            self._source(g) if g is not None else self._constant(tuple(x.shape), _dtype_name(x.dtype))
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
                tuple((tuple(t.shape), _dtype_name(t.dtype)) for t in outputs),
                _user_line(self.target.filename),
                (0,) if passthrough else (),
            )
        )
        for index, tensor in enumerate(outputs):
            self.producers[id(tensor)] = (name, index)
        self.alive += inputs + outputs
        return result

    def _placeholder(self, name: str, value: torch.Tensor, kind: str, label: str) -> None:
        self.ops.append(
            RawOp(name, "", kind, None, (), ((tuple(value.shape), _dtype_name(value.dtype)),), None, label=label)
        )
        self.producers[id(value)] = (name, 0)
        self.alive.append(value)

    def _source(self, tensor: torch.Tensor) -> tuple[str, int]:
        """The (op, output) that made `tensor`; a tensor made outside the recording is a constant."""
        source = self.producers.get(id(tensor))
        if source is None:
            source = self.producers[id(tensor)] = self._constant(tuple(tensor.shape), _dtype_name(tensor.dtype))
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


# -- values ----------------------------------------------------------------------------------------------------------


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _torch_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"PyTorch has no dtype {name!r}")
    return dtype


def _to_tensor(value: Any) -> Any:
    """A PyTorch tensor of `value` (Keras's conversion: NumPy keeps its dtype, Python floats become float32)."""
    if value is None or isinstance(value, torch.Tensor):
        return value
    return keras.ops.convert_to_tensor(value)


ADAPTER = KerasTorchAdapter()
