"""The gradient graph as a static picture (SVG and PNG, matplotlib) and as a one-paragraph text summary.

The drawing reads where each node goes from the graph's layout
(`Graph.layout`, computed with the graph in `gradmagic/checking/graph_layout.py`):
two lanes, the forward left to right above, the backward right to left below,
with name scopes folded above 200 nodes. Tensors the backward keeps from the
forward cross between the lanes as red dashed edges labelled with their size.
A graph from a report saved before schema 1.5 has no layout: the picture says
so instead.
"""

from __future__ import annotations

import io

from gradmagic.report import Graph

#: The colour of each role, in the legend's order: the forward lane's, then the backward lane's.
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
#: What the picture of a graph without a layout says.
NO_LAYOUT = (
    "This report was saved by an older gradmagic, without the graph's layout: re-run the cell to draw its gradient "
    "graph."
)


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

    if graph.layout is None:
        figure = Figure(figsize=(MIN_WIDTH, 0.5))
        figure.text(0.5, 0.5, NO_LAYOUT, ha="center", va="center", fontsize=8, color="#555555", wrap=True)
        return figure
    graph = graph.folded()  # name scopes as one node each, when the layout folded them
    positions = {node_id: (x, -y) for node_id, (x, y) in graph.layout.positions.items()}  # y grows upwards here
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

    handles = [Patch(facecolor=colour, label=role) for role, colour in COLOURS.items()]
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
