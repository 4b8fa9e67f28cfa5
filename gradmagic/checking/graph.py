"""The gradient graph: the forward and the backward of an op, as traced, with what the backward keeps alive.

The adapter traces both passes together and classifies every op; here the
framework's plumbing is folded away (pass-through ops such as Identity,
IdentityN and variable reads, no-ops, scalar constants, and whatever does
not lead to an output or a gradient), roles are given, and tensors the
backward takes from the forward are marked saved, with their size, and the
drawings' layout is computed (checking/graph_layout.py).
"""

from __future__ import annotations

import math
import re

import numpy as np

from gradmagic.checking.graph_layout import with_layout
from gradmagic.frameworks.base import RawGraph, RawOp
from gradmagic.report import Graph, GraphEdge, GraphNode, NodeRole

#: Traced graphs of more ops than this are not drawn: a report would carry thousands of nodes no one can read, and
#: laying them out costs seconds.
DRAWN_OPS = 2000
#: Roles whose tensors, consumed by the backward, stay alive from the forward to the backward.
_KEPT_FROM_FORWARD = ("input", "forward")
#: The roles of ops that are an input, an upstream gradient or a variable, whatever their scope, and of the others
#: by the scope they were traced in.
_KIND_ROLES: dict[str, NodeRole] = {"input": "input", "upstream": "upstream", "variable": "variable"}
_SCOPE_ROLES: dict[str | None, NodeRole] = {"forward": "forward", "backward": "backward"}


def build_graph(raw: RawGraph, output_names: list[str], gradient_names: list[str], fold: bool = True) -> Graph:
    """The Report's graph from a traced graph; `fold=False` keeps every traced op."""
    ops = {op.name: op for op in raw.ops}
    if fold:
        resolve = _resolver(ops)
        keep = lambda op: op.kind not in ("passthrough", "noop") and not _scalar_constant(op)  # noqa: E731
    else:
        resolve = lambda tensor: tensor  # noqa: E731
        keep = lambda op: True  # noqa: E731

    terminals: list[tuple[str, str, NodeRole, tuple[str, int]]] = [  # (node id, label, role, the tensor)
        (f"output:{i}", name, "output", tensor) for i, (name, tensor) in enumerate(zip(output_names, raw.outputs))
    ]
    terminals += [
        (f"gradient:{i}", name, "downstream", tensor)
        for i, (name, tensor) in enumerate(zip(gradient_names, raw.gradients))
    ]
    needed = _ancestors([resolve(t) for *_, t in terminals], ops, resolve, keep) if fold else set(ops)

    consumers: dict[str, list[str | None]] = {}  # op -> the scopes of the ops that read its (resolved) outputs
    for other in ops.values():
        for tensor in other.inputs:
            consumers.setdefault(resolve(tensor)[0], []).append(other.scope)
    roles = {name: _role(ops[name], consumers.get(name, [])) for name in needed}
    order = {name: k for k, name in enumerate(ops)}
    nodes = [
        GraphNode(
            name,
            "" if ops[name].kind in ("input", "upstream", "variable") else ops[name].type,
            ops[name].label or _readable(name),
            roles[name],
            tuple(shape for shape, _ in ops[name].outputs),
            tuple(dtype for _, dtype in ops[name].outputs),
            ops[name].line,
        )
        for name in sorted(needed, key=order.__getitem__)
    ]
    edges: dict[tuple[str, str, int], GraphEdge] = {}
    saved: dict[tuple[str, int], int | None] = {}

    def connect(tensor: tuple[str, int], target: str, target_role: str) -> None:
        source = resolve(tensor)
        if source[0] not in needed:
            return
        shape, dtype = ops[source[0]].outputs[source[1]]
        is_saved = fold and roles[source[0]] in _KEPT_FROM_FORWARD and target_role == "backward"
        size = _bytes(shape, dtype) if is_saved else None
        if is_saved:
            saved[source] = size
        edges[(source[0], target, source[1])] = GraphEdge(source[0], target, shape, dtype, is_saved, size)

    for name in needed:
        for tensor in ops[name].inputs:
            connect(tensor, name, roles[name])
    for node_id, label, role, tensor in terminals:
        shape, dtype = ops[resolve(tensor)[0]].outputs[resolve(tensor)[1]]
        nodes.append(GraphNode(node_id, "", label, role, (shape,), (dtype,)))
        connect(tensor, node_id, role)
    graph = Graph(
        tuple(nodes),
        tuple(edges.values()),
        saved_tensors=len(saved),
        saved_bytes=sum(size or 0 for size in saved.values()),
        raw=not fold,
        traced_ops=len(ops),
    )
    return with_layout(graph)  # and where the drawings put each node


def _resolver(ops: dict[str, RawOp]):
    """Follow pass-through ops back to the tensor they forward."""

    def resolve(tensor: tuple[str, int]) -> tuple[str, int]:
        seen = 0
        while ops[tensor[0]].kind == "passthrough" and seen < len(ops):
            op = ops[tensor[0]]
            tensor = op.inputs[op.passthrough[tensor[1]]]
            seen += 1
        return tensor

    return resolve


def _ancestors(starts: list[tuple[str, int]], ops: dict[str, RawOp], resolve, keep) -> set[str]:
    """The kept ops that the given tensors depend on."""
    needed: set[str] = set()
    pending = [tensor[0] for tensor in starts]
    while pending:
        name = pending.pop()
        if name in needed or not keep(ops[name]):
            continue
        needed.add(name)
        pending += [resolve(tensor)[0] for tensor in ops[name].inputs]
    return needed


def _role(op: RawOp, consumer_scopes: list[str | None]) -> NodeRole:
    role = _KIND_ROLES.get(op.kind) or _SCOPE_ROLES.get(op.scope)
    if role is not None:
        return role
    # A captured tensor (a constant array closed over by the op) takes the lane of its consumers.
    backward = consumer_scopes and all(scope == "backward" for scope in consumer_scopes)
    return "backward" if backward else "forward"


def _scalar_constant(op: RawOp) -> bool:
    return op.kind == "constant" and all(dim == 1 for shape, _ in op.outputs for dim in shape)


def _readable(name: str) -> str:
    """`forward/truediv_1` -> `truediv`."""
    return re.sub(r"_\d+$", "", name.split("/")[-1])


def _bytes(shape: tuple[int | None, ...], dtype: str) -> int | None:
    known = tuple(dim for dim in shape if dim is not None)
    if len(known) != len(shape):
        return None
    try:
        itemsize = np.dtype(dtype).itemsize
    except TypeError:  # bfloat16 and other framework-only dtypes
        itemsize = {"bfloat16": 2, "resource": 0, "variant": 0}.get(dtype, 0)
    return math.prod(known) * itemsize
