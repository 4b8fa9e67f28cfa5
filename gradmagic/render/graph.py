"""The gradient graph as a self-contained SVG (for the static HTML), drawn as the live view draws it
(`labextension/src/graphview.ts`: the same boxes, colours and edges), and as a one-line text summary.

Where each node goes, which name scopes are folded and how edges bend round other nodes come with the graph
(`Graph.layout`, computed in `gradmagic/checking/graph_layout.py`): two lanes, the forward left to right above,
the backward right to left below. Tensors the backward keeps from the forward cross between the lanes as red
dashed edges labelled with their size. A graph from a report saved before schema 1.5 has no layout: the picture
says so instead.
"""

from __future__ import annotations

import math
from html import escape

from gradmagic.render import counted
from gradmagic.render.figures import FONT, MUTED, text
from gradmagic.report import Graph

#: Pixels per layout unit, the boxes, and the space around: graphview.ts's.
UNIT_X, UNIT_Y, BOX_HEIGHT, CHAR_WIDTH, GRAPH_MARGIN = 150, 54, 34, 6.4, 40
ROLE_COLOURS = {
    "input": "#4c72b0",
    "variable": "#8172b2",
    "forward": "#55a868",
    "output": "#2e7d32",
    "upstream": "#c44e52",
    "backward": "#dd8452",
    "downstream": "#8c564b",
}
SAVED = "#d62728"
NO_LAYOUT = (
    "This report was saved by an older gradmagic, without the graph's layout: re-run the cell to draw its gradient "
    "graph."
)


#: The legend's height above the drawing, and the width it needs.
LEGEND, LEGEND_WIDTH = 24, 640


def _legend() -> str:
    """The roles' colours, then the saved edge, as graphview.ts's legend bar."""
    parts, x = [], 4.0
    for role, colour in ROLE_COLOURS.items():
        width = CHAR_WIDTH * len(role) + 12
        parts.append(
            f'<rect x="{x:.1f}" y="-{LEGEND - 4}" width="{width:.1f}" height="15" rx="3" fill="{colour}"/>'
            f'<text x="{x + width / 2:.1f}" y="-{LEGEND - 15}" font-size="10.5" fill="#ffffff" '
            f'text-anchor="middle">{role}</text>'
        )
        x += width + 4
    parts.append(
        f'<line x1="{x + 2:.1f}" y1="-{LEGEND - 11}" x2="{x + 26:.1f}" y2="-{LEGEND - 11}" stroke="{SAVED}" '
        'stroke-width="1.8" stroke-dasharray="6 4"/>'
        f'<text x="{x + 30:.1f}" y="-{LEGEND - 15}" font-size="10.5" fill="{SAVED}">saved for the backward</text>'
    )
    return "".join(parts)


def _place(position) -> tuple[float, float]:
    return GRAPH_MARGIN + position[0] * UNIT_X, GRAPH_MARGIN + position[1] * UNIT_Y


def _node_text(node) -> tuple[str, str]:
    title = node.label + (f" ({node.count} ops)" if node.count > 1 else "")
    shape = ""
    if node.shapes:
        first = node.shapes[0]
        shape = f"[{', '.join('?' if d is None else str(d) for d in first)}]" if first else "scalar"
    detail = " ".join(part for part in (shape, f"l.{node.line}" if node.line is not None else "") if part)
    return title, detail


def _box_exit(ux: float, uy: float, half_width: float) -> float:
    along_x = half_width / abs(ux) if ux else math.inf
    along_y = BOX_HEIGHT / 2 / abs(uy) if uy else math.inf
    return min(along_x, along_y) + 2


def edge_path(points: list[tuple[float, float]], source_half: float, target_half: float):
    """An edge through `points` (source centre, bends, target centre): an SVG path from box to box, rounded at the
    bends, the middle of its longest segment, and its polyline from box to box. As `edgePath` in graphview.ts."""

    def unit(a, b):
        length = math.hypot(b[0] - a[0], b[1] - a[1]) or 1.0
        return (b[0] - a[0]) / length, (b[1] - a[1]) / length

    first, last = unit(points[0], points[1]), unit(points[-2], points[-1])
    start, end = _box_exit(*first, source_half), _box_exit(*last, target_half)
    ends = list(points)
    ends[0] = (points[0][0] + first[0] * start, points[0][1] + first[1] * start)
    ends[-1] = (points[-1][0] - last[0] * end, points[-1][1] - last[1] * end)
    d = f"M{ends[0][0]:.1f},{ends[0][1]:.1f}"
    for i in range(1, len(ends) - 1):
        before, after = unit(ends[i], ends[i - 1]), unit(ends[i], ends[i + 1])
        radius = min(
            14.0,
            math.hypot(ends[i][0] - ends[i - 1][0], ends[i][1] - ends[i - 1][1]) / 2,
            math.hypot(ends[i + 1][0] - ends[i][0], ends[i + 1][1] - ends[i][1]) / 2,
        )
        d += f" L{ends[i][0] + before[0] * radius:.1f},{ends[i][1] + before[1] * radius:.1f}"
        corner, leaving = ends[i], (ends[i][0] + after[0] * radius, ends[i][1] + after[1] * radius)
        d += f" Q{corner[0]:.1f},{corner[1]:.1f} {leaving[0]:.1f},{leaving[1]:.1f}"
    d += f" L{ends[-1][0]:.1f},{ends[-1][1]:.1f}"
    segments = list(zip(ends, ends[1:]))
    a, b = max(segments, key=lambda s: math.hypot(s[1][0] - s[0][0], s[1][1] - s[0][1]))
    return d, ((a[0] + b[0]) / 2, (a[1] + b[1]) / 2), ends


#: A saved edge's size label: pixels per character, its height, the space kept round it, and where along a segment
#: it may sit (its middle first).
LABEL_CHAR, LABEL_HEIGHT, LABEL_CLEARANCE = 6.0, 12.0, 2.0
LABEL_FRACTIONS = (0.5, 0.35, 0.65, 0.2, 0.8)


def _label_box(x: float, y: float, width: float) -> tuple[float, float, float, float]:
    """The box (left, top, right, bottom) of a label whose text is centred at x with its baseline at y + 3."""
    return (
        x - width / 2 - LABEL_CLEARANCE,
        y - LABEL_HEIGHT / 2 - LABEL_CLEARANCE,
        x + width / 2 + LABEL_CLEARANCE,
        y + LABEL_HEIGHT / 2 + LABEL_CLEARANCE,
    )


def _crosses(segment, box) -> bool:
    """Whether a segment ((x0, y0), (x1, y1)) meets a box (left, top, right, bottom) (Liang-Barsky clipping)."""
    (x0, y0), (x1, y1) = segment
    dx, dy = x1 - x0, y1 - y0
    low, high = 0.0, 1.0
    for p, q in ((-dx, x0 - box[0]), (dx, box[2] - x0), (-dy, y0 - box[1]), (dy, box[3] - y0)):
        if p == 0:
            if q < 0:
                return False
            continue
        t = q / p
        if p < 0:
            low = max(low, t)
        else:
            high = min(high, t)
        if low > high:
            return False
    return True


def _overlaps(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def label_place(ends, text_length: int, others, boxes) -> tuple[float, float]:
    """Where a saved edge's size label goes (its centre): on the edge (`ends`, its polyline), away from every other
    edge (`others`, polylines) and node box (`boxes`, (left, top, right, bottom)), so that it never reads as
    another edge's: along its longest segments first, their middle first, then beside them; the middle of the
    longest segment when no place is free. As `labelPlace` in graphview.ts."""
    width = text_length * LABEL_CHAR
    obstacles = [segment for polyline in others for segment in zip(polyline, polyline[1:])]
    segments = sorted(zip(ends, ends[1:]), key=lambda s: -math.hypot(s[1][0] - s[0][0], s[1][1] - s[0][1]))

    def free(x: float, y: float) -> bool:
        box = _label_box(x, y, width)
        return not any(_overlaps(box, node) for node in boxes) and not any(_crosses(o, box) for o in obstacles)

    candidates = []
    for (x0, y0), (x1, y1) in segments:
        candidates += [(x0 + (x1 - x0) * t, y0 + (y1 - y0) * t) for t in LABEL_FRACTIONS]
    for (x0, y0), (x1, y1) in segments:  # beside the segment's middle: right or left of an upright one, over or under
        x, y = (x0 + x1) / 2, (y0 + y1) / 2
        if abs(y1 - y0) >= abs(x1 - x0):
            candidates += [(x + width / 2 + 6, y), (x - width / 2 - 6, y)]
        else:
            candidates += [(x, y - LABEL_HEIGHT / 2 - 4), (x, y + LABEL_HEIGHT / 2 + 4)]
    for x, y in candidates:
        if free(x, y):
            return x, y
    (x0, y0), (x1, y1) = segments[0]
    return (x0 + x1) / 2, (y0 + y1) / 2


def graph_svg(graph: Graph) -> str:
    """The gradient graph: the forward lane above, the backward below, saved tensors as red dashed edges labelled
    with their size; placed by the Report's layout."""
    if graph.layout is None:
        return (
            '<svg xmlns="http://www.w3.org/2000/svg" width="640" height="30">'
            + text(NO_LAYOUT, 4, 18, 11, fill=MUTED)
            + "</svg>"
        )
    positions = graph.layout.positions
    drawn = graph.folded()
    nodes = [node for node in drawn.nodes if node.id in positions]
    halves = {node.id: max(len(text) for text in _node_text(node)) * CHAR_WIDTH / 2 + 8 for node in nodes}
    width = max((_place(positions[n.id])[0] + halves[n.id] + GRAPH_MARGIN for n in nodes), default=200)
    height = max((_place(positions[n.id])[1] + BOX_HEIGHT / 2 + GRAPH_MARGIN for n in nodes), default=60)
    routes = {(route.source, route.target): route.points for route in graph.layout.routes}
    width = max(width, LEGEND_WIDTH)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height + LEGEND:.0f}" '
        f'viewBox="0 -{LEGEND} {width:.0f} {height + LEGEND:.0f}" style="{FONT}">',
        _legend(),
        "<title>Gradient graph: forward above, backward below</title>",
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#8c8c8c"/></marker>'
        '<marker id="arrow-saved" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        f'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="{SAVED}"/></marker></defs>',
    ]
    saved_layer = []
    paths = []
    for edge in drawn.edges:
        if edge.source not in halves or edge.target not in halves:
            continue
        points = [_place(positions[edge.source])]
        points += [_place(point) for point in routes.get((edge.source, edge.target), ())]
        points.append(_place(positions[edge.target]))
        paths.append((edge, *edge_path(points, halves[edge.source], halves[edge.target])))
    boxes = [
        (x - halves[n.id], y - BOX_HEIGHT / 2, x + halves[n.id], y + BOX_HEIGHT / 2)
        for n in nodes
        for x, y in [_place(positions[n.id])]
    ]
    for k, (edge, d, _middle, ends) in enumerate(paths):
        if edge.saved:
            saved_layer.append(
                f'<path d="{d}" fill="none" stroke="{SAVED}" stroke-width="1.8" stroke-dasharray="6 4" '
                'marker-end="url(#arrow-saved)"/>'
            )
            if edge.bytes is not None:
                size = format_bytes(edge.bytes)
                others = [other[3] for j, other in enumerate(paths) if j != k]
                x, y = label_place(ends, len(size), others, boxes)
                saved_layer.append(
                    f'<text x="{x:.1f}" y="{y + 3:.1f}" font-size="10" fill="{SAVED}" '
                    f'text-anchor="middle" paint-order="stroke" stroke="#ffffff" stroke-width="3">'
                    f"{escape(size)}</text>"
                )
        else:
            parts.append(f'<path d="{d}" fill="none" stroke="#8c8c8c" stroke-width="1.2" marker-end="url(#arrow)"/>')
    for node in nodes:
        x, y = _place(positions[node.id])
        half = halves[node.id]
        title, detail = _node_text(node)
        parts.append(
            f"<g><title>{escape(node.label + (f' ({node.op})' if node.op else ''))}</title>"
            f'<rect x="{x - half:.1f}" y="{y - BOX_HEIGHT / 2:.1f}" width="{2 * half:.1f}" height="{BOX_HEIGHT}" '
            f'rx="5" fill="{ROLE_COLOURS.get(node.role, "#57606a")}"/>'
            f'<text x="{x:.1f}" y="{y - 3 if detail else y + 4:.1f}" font-size="11" fill="#ffffff" '
            f'text-anchor="middle">{escape(title)}</text>'
            + (
                f'<text x="{x:.1f}" y="{y + 11:.1f}" font-size="9.5" fill="#ffffff" text-anchor="middle">'
                f"{escape(detail)}</text>"
                if detail
                else ""
            )
            + "</g>"
        )
    parts += saved_layer
    parts.append("</svg>")
    return "".join(parts)


def graph_summary(graph: Graph) -> str:
    """`gradient graph: 7 forward and 4 backward ops; the backward keeps 12 B alive (1 saved tensor)`; the noun
    agrees with the last count: `1 forward and 1 backward op`."""
    forward = sum(node.count for node in graph.nodes if node.role == "forward")
    backward = sum(node.count for node in graph.nodes if node.role == "backward")
    kept = (
        f"the backward keeps {format_bytes(graph.saved_bytes)} alive ({counted(graph.saved_tensors, 'saved tensor')})"
        if graph.saved_tensors
        else "the backward keeps nothing from the forward"
    )
    return f"gradient graph: {forward:,} forward and {counted(backward, 'backward op')}; {kept}"


def format_bytes(size: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"
