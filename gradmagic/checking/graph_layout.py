"""Where each node of the gradient graph is drawn: computed once, here, and carried in the Report (`Graph.layout`).

Both drawings read it: the static one (`gradmagic/render/graph.py`, SVG and
PNG) and the JupyterLab extension's interactive one (`graphview.ts`).

Two lanes. The forward runs left to right in the upper lane, from the inputs
to the outputs; the backward runs right to left in the lower lane, from the
upstream gradients (under the outputs) to the downstream gradients (under the
inputs), as the chain rule does. Within a lane, nodes sit in the layer of
their longest path from the lane's start and are ordered by the mean position
of their neighbours (a small Sugiyama layout: igraph's cannot keep two lanes
apart). Long lanes wrap into bands; above MAX_NODES nodes, name scopes are
folded into one node each, with a count.

NumPy only: no framework, no drawing library.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict

import numpy as np

from gradmagic.report import Graph, GraphLayout, GraphRoute, GraphScope

FORWARD_LANE = ("input", "variable", "forward", "output")
BACKWARD_LANE = ("upstream", "backward", "downstream")
#: Layers per band before a lane wraps.
BAND = 16
#: Above this many nodes, name scopes are folded.
MAX_NODES = 200
#: Edges are routed round other nodes in drawings of up to this many nodes (a larger one reads as a picture only).
MAX_ROUTED = 600
#: A node's box, as the drawings draw it, in layout units (a layer is 150 px wide, a row 54 px high): half its
#: height, and half the widest box (labels are cut to fit).
BOX_HALF_HEIGHT = 17 / 54
BOX_HALF_WIDTH = 0.46
#: Where an edge may bend: this far above or below its source's row (the gaps between rows), nearest first.
DETOURS = (0.5, -0.5, 1.5, -1.5)


def with_layout(graph: Graph) -> Graph:
    """`graph` with its `layout`."""
    return dataclasses.replace(graph, layout=graph_layout(graph))


def graph_layout(graph: Graph) -> GraphLayout:
    """The scopes folded (above MAX_NODES nodes), the position of every node drawn, and the bends of edges that
    would cross another node drawn straight."""
    scopes = fold_scopes(graph) if len(graph.nodes) > MAX_NODES else ()
    drawn = graph.folded(scopes)
    placed = positions(drawn)
    return GraphLayout(placed, scopes, routes(drawn, placed) if len(drawn.nodes) <= MAX_ROUTED else ())


def routes(graph: Graph, placed: dict[str, tuple[float, float]]) -> tuple[GraphRoute, ...]:
    """For each edge whose straight line would pass through another node's box: bend points through the gaps between
    rows and columns (the shortest clear path of a few shapes), so that no edge runs through a label. Others are
    drawn straight."""
    boxes = _Boxes(placed)
    found = []
    for edge in graph.edges:
        if edge.source not in placed or edge.target not in placed:
            continue
        start, end = placed[edge.source], placed[edge.target]
        ends = {edge.source, edge.target}
        if boxes.clear([start, end], ends):
            continue
        for bends in sorted(_detours(start, end), key=lambda bends: _length([start, *bends, end])):
            if boxes.clear([start, *bends, end], ends):
                found.append(GraphRoute(edge.source, edge.target, tuple(bends)))
                break
    return tuple(found)


class _Boxes:
    """The node boxes, found by the unit cell of the layout they sit in: a segment is tested against the boxes of
    the cells it crosses only (a graph of thousands of nodes routes in linear time)."""

    def __init__(self, placed: dict[str, tuple[float, float]]):
        self.cells: dict[tuple[int, int], list[tuple[str, float, float]]] = defaultdict(list)
        for node_id, (x, y) in placed.items():
            self.cells[(math.floor(x), math.floor(y))].append((node_id, x, y))

    def clear(self, path: list[tuple[float, float]], ignored: set[str]) -> bool:
        """Whether the polyline `path` stays out of every box but those of `ignored`."""
        for (x0, y0), (x1, y1) in zip(path, path[1:]):
            near = [
                (x, y)
                for cx in range(math.floor(min(x0, x1) - 1), math.floor(max(x0, x1) + 1) + 1)
                for cy in range(math.floor(min(y0, y1) - 1), math.floor(max(y0, y1) + 1) + 1)
                for node_id, x, y in self.cells.get((cx, cy), ())
                if node_id not in ignored
            ]
            if near and not path_clear([(x0, y0), (x1, y1)], np.array(near)):
                return False
        return True


def _detours(start: tuple[float, float], end: tuple[float, float]) -> list[list[tuple[float, float]]]:
    """Bend points to try: along a gap between rows (DETOURS from the source's row), then straight to the target;
    or along that gap to the gap between columns beside the target, down it, and into the target from the side."""
    (x0, y0), (x1, y1) = start, end
    step = 0.5 if x1 >= x0 else -0.5  # leave the source and reach the target horizontally
    candidates = []
    for detour in DETOURS:
        y = y0 + detour
        candidates.append([(x0 + step, y), (x1 - step, y)] if abs(x1 - x0) > 1 else [((x0 + x1) / 2, y)])
        for side in (-0.5, 0.5):
            candidates.append([(x0 + step, y), (x1 + side, y), (x1 + side, y1)])
    return candidates


def _length(path: list[tuple[float, float]]) -> float:
    return sum(math.hypot(b[0] - a[0], b[1] - a[1]) for a, b in zip(path, path[1:]))


def path_clear(path: list[tuple[float, float]], boxes: np.ndarray) -> bool:
    """Whether the polyline `path` stays out of every node box centred at `boxes` ([K, 2]): each segment clipped
    against every box at once (Liang and Barsky's slabs)."""
    if not len(boxes):
        return True
    half = np.array([BOX_HALF_WIDTH, BOX_HALF_HEIGHT])
    for point, end in zip(path, path[1:]):
        start, direction = np.asarray(point, float), np.subtract(end, point, dtype=float)
        low, high = boxes - half - start, boxes + half - start  # [K, 2]: the slabs, relative to the segment's start
        with np.errstate(divide="ignore", invalid="ignore"):
            near, far = low / direction, high / direction
        parallel = direction == 0  # along an axis: inside that slab for the whole segment, or never
        inside = (low < 0) & (high > 0)
        enter = np.where(parallel, np.where(inside, -np.inf, np.inf), np.minimum(near, far))
        leave = np.where(parallel, np.where(inside, np.inf, -np.inf), np.maximum(near, far))
        first = np.maximum(enter.max(axis=1), 0.0)
        last = np.minimum(leave.min(axis=1), 1.0)
        if np.any(first < last):
            return False
    return True


def fold_scopes(graph: Graph) -> tuple[GraphScope, ...]:
    """One scope per name scope inside each pass (`forward/block_2/...`) of more than one node, with the count of
    ops it stands for; its members in the graph's order."""
    groups = defaultdict(list)
    for node in graph.nodes:
        parts = node.id.split("/")
        key = "/".join(parts[:2]) if node.role in ("forward", "backward") and len(parts) > 2 else node.id
        groups[key].append(node)
    return tuple(
        GraphScope(
            key, key.split("/")[-1], members[0].role, sum(m.count for m in members), tuple(m.id for m in members)
        )
        for key, members in groups.items()
        if len(members) > 1
    )


def positions(graph: Graph) -> dict[str, tuple[float, float]]:
    """x (layer, wrapped into bands) and y (lane, band and row, growing downwards) of every node, in layout units."""
    lanes = {node.id: ("forward" if node.role in FORWARD_LANE else "backward") for node in graph.nodes}
    roles = {node.id: node.role for node in graph.nodes}
    before, after = defaultdict(list), defaultdict(list)  # neighbours within the lane
    for edge in graph.edges:
        if lanes[edge.source] == lanes[edge.target]:
            before[edge.target].append(edge.source)
            after[edge.source].append(edge.target)
    layer = _longest_paths([node.id for node in graph.nodes], before)
    # A node that starts nothing (a constant, or a backward op fed by saved tensors only) sits just before its
    # first consumer, not at the lane's start.
    for _ in range(len(layer)):
        moved = False
        for node_id in layer:
            if not before[node_id] and after[node_id] and roles[node_id] not in ("input", "variable", "upstream"):
                target = min(layer[n] for n in after[node_id]) - 1
                moved |= target != layer[node_id]
                layer[node_id] = target
        if not moved:
            break
    widths = {lane: max((layer[n] for n in layer if lanes[n] == lane), default=0) for lane in ("forward", "backward")}
    if max(widths.values()) < BAND:  # one band: both lanes share the width, gradients under their tensors
        widths = dict.fromkeys(widths, max(widths.values()))
    for node_id, role in roles.items():  # outputs at the right end; gradients start under them, end under inputs
        if role in ("output", "downstream"):
            layer[node_id] = widths[lanes[node_id]]
        elif role == "upstream":
            layer[node_id] = 0
    column = {n: (layer[n] if lanes[n] == "forward" else widths["backward"] - layer[n]) for n in layer}

    # Order within (lane, column) by the mean row of the neighbours, a few sweeps.
    neighbours = defaultdict(list)
    for edge in graph.edges:
        neighbours[edge.source].append(edge.target)
        neighbours[edge.target].append(edge.source)
    cells = defaultdict(list)
    for node in graph.nodes:
        cells[(lanes[node.id], column[node.id])].append(node.id)
    row = {node_id: float(i) for members in cells.values() for i, node_id in enumerate(members)}
    for _ in range(4):
        for members in cells.values():
            members.sort(key=lambda n: sum(row[m] for m in neighbours[n]) / len(neighbours[n]) if neighbours[n] else 0)
            for i, node_id in enumerate(members):
                row[node_id] = float(i)

    band_height = {
        lane: 1 + max((len(m) for (lane_, _), m in cells.items() if lane_ == lane), default=1)
        for lane in set(lanes.values())
    }
    forward_bands = widths["forward"] // BAND + 1
    placed = {}
    for node in graph.nodes:
        band, x = divmod(column[node.id], BAND)
        if lanes[node.id] == "forward":
            y = band * band_height["forward"] + row[node.id]
        else:  # below the forward lane, with a gap for the saved-tensor edges
            y = forward_bands * band_height.get("forward", 1) + 0.5 + band * band_height["backward"] + row[node.id]
        placed[node.id] = (float(x), float(y))
    return placed


def _longest_paths(nodes: list[str], before: dict) -> dict[str, int]:
    """Layer of each node: the length of the longest path reaching it. A traced graph has no cycles; were there
    one, the edge closing it would be ignored."""
    layer: dict[str, int] = {}
    for start in nodes:
        stack = [(start, False)]
        visiting: set[str] = set()
        while stack:
            node_id, done = stack.pop()
            if node_id in layer:
                continue
            if done:
                visiting.discard(node_id)
                layer[node_id] = 1 + max((layer.get(p, 0) for p in before[node_id] if p in layer), default=-1)
                continue
            visiting.add(node_id)
            stack.append((node_id, True))
            stack += [(p, False) for p in before[node_id] if p not in layer and p not in visiting]
    return layer
