"""The gradient graph as a static picture (SVG and PNG, matplotlib) and as a one-paragraph text summary.

Layout: two lanes. The forward runs left to right in the upper lane, from
the inputs to the outputs; the backward runs right to left in the lower
lane, from the upstream gradients (under the outputs) to the downstream
gradients (under the inputs), as the chain rule does. Within a lane, nodes
sit in the layer of their longest path from the lane's start and are
ordered by the mean position of their neighbours (a small Sugiyama layout:
igraph's cannot keep two lanes apart). Tensors the backward keeps from the
forward cross between the lanes as red dashed edges labelled with their
size. Long lanes wrap into bands; above MAX_NODES nodes, name scopes are
folded into one node each, with a count.
"""

from __future__ import annotations

import io
from collections import defaultdict

from gradmagic.report import Graph, GraphEdge, GraphNode

FORWARD_LANE = ("input", "variable", "forward", "output")
BACKWARD_LANE = ("upstream", "backward", "downstream")
COLOURS = {
    "input": "#4C72B0",
    "variable": "#8172B2",
    "forward": "#55A868",
    "output": "#2E7D32",
    "upstream": "#C44E52",
    "backward": "#DD8452",
    "downstream": "#8C564B",
}
SAVED_COLOUR = "#D62728"
#: Layers per band before a lane wraps.
BAND = 16
#: Above this many nodes, name scopes are folded.
MAX_NODES = 200


def graph_summary(graph: Graph) -> str:
    """`7 forward and 4 backward nodes; the backward keeps 12 B alive (1 saved tensor)`."""
    forward = sum(node.count for node in graph.nodes if node.role == "forward")
    backward = sum(node.count for node in graph.nodes if node.role == "backward")
    kept = (
        f"the backward keeps {format_bytes(graph.saved_bytes)} alive "
        f"({graph.saved_tensors} saved tensor{'s' * (graph.saved_tensors != 1)})"
        if graph.saved_tensors
        else "the backward keeps nothing from the forward"
    )
    return f"gradient graph: {forward} forward and {backward} backward ops; {kept}"


def format_bytes(size: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def graph_svg(graph: Graph) -> str:
    from matplotlib import rc_context

    buffer = io.StringIO()
    with rc_context({"svg.fonttype": "none"}):  # text stays text: smaller, faster, selectable
        draw(graph).savefig(buffer, format="svg")
    return buffer.getvalue()


def graph_png(graph: Graph, dpi: int = 100) -> bytes:
    buffer = io.BytesIO()
    draw(graph).savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def fold_scopes(graph: Graph) -> Graph:
    """One node per name scope inside each pass (`forward/block_2/...`), with the count of ops it stands for."""
    groups: dict[str, list[GraphNode]] = defaultdict(list)
    for node in graph.nodes:
        parts = node.id.split("/")
        key = "/".join(parts[:2]) if node.role in ("forward", "backward") and len(parts) > 2 else node.id
        groups[key].append(node)
    folded_id = {node.id: key for key, members in groups.items() for node in members}
    nodes = []
    for key, members in groups.items():
        first = members[0]
        if len(members) == 1:
            nodes.append(first)
        else:
            nodes.append(
                GraphNode(
                    key,
                    "scope",
                    key.split("/")[-1],
                    first.role,
                    first.shapes,
                    first.dtypes,
                    first.line,
                    sum(m.count for m in members),
                )
            )
    edges: dict[tuple[str, str], GraphEdge] = {}
    for edge in graph.edges:
        source, target = folded_id[edge.source], folded_id[edge.target]
        if source != target:
            edges.setdefault(
                (source, target), GraphEdge(source, target, edge.shape, edge.dtype, edge.saved, edge.bytes)
            )
    return Graph(
        tuple(nodes), tuple(edges.values()), graph.saved_tensors, graph.saved_bytes, graph.raw, graph.traced_ops
    )


def layout(graph: Graph) -> dict[str, tuple[float, float]]:
    """x (layer, wrapped into bands) and y (lane, band and order) of every node."""
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
        for lane in lanes.values()
    }
    forward_bands = widths["forward"] // BAND + 1
    positions = {}
    for node_id, col in column.items():
        band, x = divmod(col, BAND)
        if lanes[node_id] == "forward":
            y = -band * band_height["forward"] - row[node_id]
        else:  # below the forward lane, with a gap for the saved-tensor edges
            y = -forward_bands * band_height.get("forward", 1) - 0.5 - band * band_height["backward"] - row[node_id]
        positions[node_id] = (float(x), float(y))
    return positions


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


#: Size of one layout unit on the page, in inches (x: between layers, y: between rows).
UNIT_X, UNIT_Y = 1.35, 0.62
#: Narrowest page, in inches: the legend must fit.
MIN_WIDTH = 9.5
#: Box size in layout units for a label of n characters (7 pt text).
CHAR_WIDTH, BOX_HEIGHT = 0.045, 0.5


def draw(graph: Graph):
    """A matplotlib Figure of the graph (no pyplot: no global state, any backend).

    Every kind of mark is one artist (a patch collection for the boxes, a
    quiver for the arrows, a line collection for the saved tensors), so a
    graph of a few hundred nodes draws in a fraction of a second.
    """
    import numpy as np
    from matplotlib.collections import LineCollection, PatchCollection
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyBboxPatch, Patch

    if len(graph.nodes) > MAX_NODES:
        graph = fold_scopes(graph)
    positions = layout(graph)
    xs = [x for x, _ in positions.values()] or [0.0]
    ys = [y for _, y in positions.values()] or [0.0]
    left, right, bottom, top = min(xs) - 0.7, max(xs) + 0.7, min(ys) - 0.7, max(ys) + 0.7
    header = 1.0  # inches above the graph: legend and title
    width, height = (right - left) * UNIT_X, (top - bottom) * UNIT_Y
    page = max(width, MIN_WIDTH)
    figure = Figure(figsize=(page, height + header))
    axes = figure.add_axes((0, 0, 1, height / (height + header)))
    centre = (left + right) / 2  # a narrow graph sits in the middle of a page wide enough for the legend
    axes.set_xlim(centre - page / UNIT_X / 2, centre + page / UNIT_X / 2)
    axes.set_ylim(bottom, top)
    axes.axis("off")

    texts, boxes, half_widths = [], [], {}
    for node in graph.nodes:
        x, y = positions[node.id]
        shape = "x".join("?" if d is None else str(d) for d in node.shapes[0]) if node.shapes else ""
        title = node.label + (f" ({node.count} ops)" if node.count > 1 else "")
        detail = " ".join(
            part for part in (f"[{shape}]" if node.shapes else "", f"l.{node.line}" if node.line else "") if part
        )
        text = title + ("\n" + detail if detail else "")
        half = CHAR_WIDTH * max(len(line) for line in text.split("\n")) / 2 + 0.06
        half_widths[node.id] = half
        boxes.append(
            FancyBboxPatch(
                (x - half, y - BOX_HEIGHT / 2),
                2 * half,
                BOX_HEIGHT,
                boxstyle="round,pad=0,rounding_size=0.06",
                facecolor=COLOURS[node.role],
                edgecolor="none",
            )
        )
        texts.append((x, y, text))
    axes.add_collection(PatchCollection(boxes, match_original=True, linewidths=0, zorder=2))
    for x, y, text in texts:
        axes.text(x, y, text, ha="center", va="center", fontsize=7, color="white", zorder=3)

    for saved in (False, True):
        edges = [e for e in graph.edges if e.saved == saved]
        if not edges:
            continue
        start, end = [], []
        for edge in edges:  # from the edge of one box to the edge of the other
            (x0, y0), (x1, y1) = positions[edge.source], positions[edge.target]
            direction = np.array([x1 - x0, y1 - y0])
            length = float(np.hypot(*direction)) or 1.0
            unit = direction / length
            start.append(np.array([x0, y0]) + unit * _box_exit(unit, half_widths[edge.source]))
            end.append(np.array([x1, y1]) - unit * _box_exit(unit, half_widths[edge.target]))
        start, end = np.array(start), np.array(end)
        colour = SAVED_COLOUR if saved else "#8C8C8C"
        if saved:
            axes.add_collection(
                LineCollection(np.stack([start, end], axis=1), colors=colour, linewidths=1.6, linestyles="--", zorder=1)
            )
            heads = end - (end - start) / np.maximum(np.hypot(*(end - start).T), 1e-9)[:, None] * 0.15
            _arrows(axes, heads, end, colour, width=0.0025, head=5)
            for edge, (x0, y0), (x1, y1) in zip(edges, start, end):
                if edge.bytes is not None:
                    axes.text(
                        (x0 + x1) / 2,
                        (y0 + y1) / 2,
                        format_bytes(edge.bytes),
                        fontsize=6.5,
                        color=colour,
                        ha="center",
                        va="center",
                        zorder=3,
                        backgroundcolor="white",
                    )
        else:
            _arrows(axes, start, end, colour, width=0.0015, head=6)

    handles = [Patch(facecolor=COLOURS[role], label=role) for role in (*FORWARD_LANE, *BACKWARD_LANE)]
    handles.append(Line2D([0], [0], color=SAVED_COLOUR, linestyle="--", linewidth=1.6, label="saved for the backward"))
    figure.legend(
        handles=handles, loc="upper center", ncol=len(handles), fontsize=7, frameon=False, bbox_to_anchor=(0.5, 1.0)
    )
    figure.text(
        0.5,
        1 - 0.42 / (height + header),
        "forward: top, left to right; backward: bottom, right to left",
        ha="center",
        va="top",
        fontsize=7.5,
        color="#555555",
    )
    figure.text(
        0.5,
        1 - 0.62 / (height + header),
        graph_summary(graph).removeprefix("gradient graph: "),
        ha="center",
        va="top",
        fontsize=8,
        color="#222222",
    )
    return figure


def _arrows(axes, start, end, colour: str, width: float, head: float) -> None:
    """Arrows from `start` to `end` rows (data coordinates), all in one artist."""
    axes.quiver(
        *start.T,
        *(end - start).T,
        angles="xy",
        scale_units="xy",
        scale=1,
        color=colour,
        width=width,
        headwidth=head,
        headlength=head + 1,
        zorder=1,
    )


def _box_exit(unit, half_width: float) -> float:
    """How far from a box's centre a ray in direction `unit` leaves the box."""
    along_x = half_width / abs(unit[0]) if unit[0] else float("inf")
    along_y = (BOX_HEIGHT / 2) / abs(unit[1]) if unit[1] else float("inf")
    return min(along_x, along_y) + 0.03
