"""The report's figures as self-contained SVG, for the static HTML (shared notebooks, exports, GitHub): the Jacobian
heatmaps and the sweep, drawn as the live view draws them (`labextension/src/heatmapview.ts`, `sweepview.ts`: the
same sizes, colours and marks), with no JavaScript, stylesheet or font to load. String building only: a few
milliseconds, no plotting library. The gradient graph's drawing is in `graph.py`.
"""

from __future__ import annotations

import base64
import math
from html import escape

import numpy as np

from gradmagic.render import format_number
from gradmagic.report import JacobianBlock, Numerics, Sweep, element_label

FONT = "font-family: system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"
TEXT = "#32383f"
MUTED = "#59636e"
BORDER = "#d1d9e0"
GRID = "#e6eaef"

# -- heatmaps (heatmapview.ts) -----------------------------------------------------------------------------------

CELL_MAX, CELL_MIN, MATRIX, TOP, LABEL, SLOT = 28, 6, 220, 30, 26, 116
HEATMAP_MIN_SIDE = 4
HEATMAP_BLOCKS = 6
NEGATIVE, POSITIVE, ERROR_HIGH = (140, 81, 10), (1, 102, 94), (207, 34, 46)
WITHIN_TOLERANCE = "#eef0f2"


def data_uri(svg: str) -> str:
    """An SVG as a `data:` URI, for `<img src=...>`: kept by notebook sanitisers, which drop inline `<svg>`."""
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")


def _mix(start, end, t: float) -> str:
    t = min(1.0, max(0.0, t))
    return "rgb({},{},{})".format(*(round(a + (b - a) * t) for a, b in zip(start, end)))


def value_colour(value: float, scale: float) -> str | None:
    """A value's fill on a scale symmetric around zero, white at 0; None for a non-finite value."""
    if not math.isfinite(value):
        return None
    t = value / scale if scale > 0 else 0.0
    return _mix((255, 255, 255), NEGATIVE, -t) if t < 0 else _mix((255, 255, 255), POSITIVE, t)


def error_colour(error: float) -> str | None:
    """An entry's error fill: grey within the tolerance whatever its size, red beyond it; None when not judged."""
    if not math.isfinite(error):
        return _mix((255, 255, 255), ERROR_HIGH, 1)
    if error < 0:
        return None
    if error <= 1:
        return WITHIN_TOLERANCE
    return _mix((250, 200, 200), ERROR_HIGH, math.log10(error))


def _finite(values) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def heatmap_blocks(numerics: Numerics) -> list[JacobianBlock]:
    """The blocks worth drawing: at least HEATMAP_MIN_SIDE on a side, or holding a failing entry; failing first."""

    def failing(block: JacobianBlock) -> bool:
        return block.error is not None and bool(np.any(_finite(block.error) > 1))

    drawn = [b for b in numerics.jacobians if max(b.shape) >= HEATMAP_MIN_SIDE or failing(b)]
    return sorted(drawn, key=lambda b: not failing(b))[:HEATMAP_BLOCKS]


def block_scale(block: JacobianBlock) -> float:
    values = np.abs(np.concatenate([_finite(block.custom), _finite(block.numerical), _finite(block.autodiff)]))
    values = values[np.isfinite(values)]
    return float(values.max()) if values.size else 0.0


_PATTERNS = (
    '<defs><pattern id="nonfinite" width="5" height="5" patternUnits="userSpaceOnUse" '
    'patternTransform="rotate(45)"><rect width="5" height="5" fill="#d0d7de"/>'
    '<line x1="0" y1="0" x2="0" y2="5" stroke="#6e7781" stroke-width="2"/></pattern>'
    '<pattern id="unjudged" width="4" height="4" patternUnits="userSpaceOnUse"><rect width="4" height="4" '
    'fill="#ffffff"/><circle cx="2" cy="2" r="0.8" fill="#8c959f"/></pattern></defs>'
)


def heatmap_matrices(block: JacobianBlock) -> list[tuple[str, list, str]]:
    """The matrices drawn for a block, as (label, values, kind): custom, finite differences, autodiff (where finite
    somewhere), error ÷ tolerance."""
    matrices = [("custom gradient", block.custom, "value"), ("finite differences", block.numerical, "value")]
    if np.isfinite(_finite(block.autodiff)).any():
        matrices.append(("autodiff", block.autodiff, "value"))
    if block.error is not None:
        matrices.append(("error ÷ tolerance", block.error, "error"))
    return matrices


def heatmap_panel_svg(block: JacobianBlock, label: str, values, kind: str) -> str:
    """One matrix of a block as an SVG of its own (its title, `in →` over it, `out` at its left), at its own size in
    pixels: a block's panels wrap onto rows where the page is narrow, labels never scaled down."""
    rows, columns = block.shape
    cell = max(CELL_MIN, min(CELL_MAX, MATRIX // max(rows, columns, 1)))
    width, height = columns * cell, rows * cell
    scale = block_scale(block)
    slot = max(width, SLOT)
    total = LABEL + slot + 4
    full_height = TOP + height + 18
    left = LABEL + (slot - width) / 2
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total}" height="{full_height}" '
        f'viewBox="0 0 {total} {full_height}" style="{FONT}">',
        f"<title>{escape(f'{label}: d {block.output} / d {block.input}')}</title>",
        _PATTERNS,
        f'<text x="{left - 4}" y="{TOP + height / 2}" font-size="10" fill="{MUTED}" text-anchor="end">out</text>',
        f'<text x="{left + width / 2}" y="12" font-size="11" fill="{TEXT}" text-anchor="middle">{escape(label)}</text>'
        f'<text x="{left + width / 2}" y="25" font-size="10" fill="{MUTED}" text-anchor="middle">in →</text>',
    ]
    array = _finite(values)
    for i in range(rows):
        for j in range(columns):
            value = array[i * columns + j]
            fill = value_colour(value, scale) if kind == "value" else error_colour(value)
            if fill is None:
                fill = "url(#unjudged)" if kind == "error" and math.isfinite(value) else "url(#nonfinite)"
            parts.append(
                f'<rect x="{left + j * cell}" y="{TOP + i * cell}" width="{cell}" height="{cell}" fill="{fill}">'
                f"<title>{escape(_cell_details(block, i, j))}</title></rect>"
            )
    parts.append(f'<rect x="{left}" y="{TOP}" width="{width}" height="{height}" fill="none" stroke="{BORDER}"/>')
    parts.append("</svg>")
    return "".join(parts)


def heatmap_svgs(block: JacobianBlock) -> list[tuple[str, str]]:
    """A block's heatmaps, one SVG per matrix: (label, svg)."""
    return [(label, heatmap_panel_svg(block, label, values, kind)) for label, values, kind in heatmap_matrices(block)]


def _cell_details(block: JacobianBlock, row: int, column: int) -> str:
    at = row * block.shape[1] + column
    lines = [
        f"d {block.output}[{row}] / d {block.input}[{column}]",
        f"custom {format_number(block.custom[at])}",
        f"finite differences {format_number(block.numerical[at])}",
        f"autodiff {format_number(block.autodiff[at])}",
    ]
    if block.error is not None:
        error = block.error[at]
        judged = error is None or not math.isfinite(error) or error >= 0
        lines.append(f"error {format_number(error)} of tolerance" if judged else "not judged")
    return "\n".join(lines)


#: The heatmaps' legend, as (fill, label): what each colour, hatch and dot means.
def heatmap_legend(scale: float) -> list[tuple[str, str]]:
    return [
        (_mix((255, 255, 255), NEGATIVE, 1), f"−{format_number(scale)}"),
        ("#ffffff", "0"),
        (_mix((255, 255, 255), POSITIVE, 1), f"+{format_number(scale)}"),
        (WITHIN_TOLERANCE, "error within tolerance"),
        (_mix((250, 200, 200), ERROR_HIGH, 0.5), "beyond it (darker: up to 10×)"),
        ("url(#nonfinite)", "NaN or inf"),
        ("url(#unjudged)", "not judged (kink, no finite difference)"),
    ]


def swatch_svg(fill: str) -> str:
    """A legend swatch (14 x 12), patterns included."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="14" height="12" viewBox="0 0 14 12">{_PATTERNS}'
        f'<rect x="0.5" y="0.5" width="13" height="11" fill="{fill}" stroke="#8c959f"/></svg>'
    )


# -- the sweep (sweepview.ts) ------------------------------------------------------------------------------------

WIDTH, HEIGHT, LEFT, RIGHT = 720, 430, 66, 14
VALUE_PANEL, DERIVATIVE_PANEL = (30, 146), (160, 380)
MARGIN = 0.05
JUMP_MARKER = "M0,-5 L4.5,3 L-4.5,3 z"
SERIES_STYLE = {
    "output": 'stroke="#1f2328" stroke-width="1.6"',
    "numerical": 'stroke="#1a7f37" stroke-width="5" stroke-opacity="0.45"',
    "custom": 'stroke="#0969da" stroke-width="1.8"',
    "autodiff": 'stroke="#bf8700" stroke-width="1.5" stroke-dasharray="6 4"',
}
BAND_STYLE = {
    "output": 'fill="#8c959f" fill-opacity="0.22"',
    "custom": 'fill="#0969da" fill-opacity="0.14"',
    "autodiff": 'fill="#bf8700" fill-opacity="0.16"',
}


def derivative_labels(surrogate: bool) -> dict[str, str]:
    """What the legend calls each curve: the surrogate and the true derivative when declared."""
    return {
        "numerical": "true derivative (finite differences)" if surrogate else "finite differences",
        "custom": "surrogate (custom gradient)" if surrogate else "custom gradient",
        "autodiff": "autodiff",
        "jump": f"{'true derivative' if surrogate else 'finite differences'} at a jump (off scale)",
    }


def jumps(points: np.ndarray, values: np.ndarray, numerical: np.ndarray) -> np.ndarray:
    """Where a central difference straddles a jump of the forward (round, sign): it is the jump over 2h there,
    orders of magnitude above the slope between neighbouring sweep points, and off any useful scale."""
    if points.size < 3:
        return np.zeros(points.size, bool)
    with np.errstate(all="ignore"):
        secant = np.abs(np.gradient(values, points))
        return np.isfinite(numerical) & np.isfinite(secant) & (np.abs(numerical) > 10 * secant + 1e-12)


def non_finite_runs(series: np.ndarray) -> list[tuple[int, int]]:
    """The stretches where `series` is NaN or infinite, as (first, last) indices."""
    runs: list[list[int]] = []
    for i in np.flatnonzero(~np.isfinite(series)):
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = int(i)
        else:
            runs.append([int(i), int(i)])
    return [(first, last) for first, last in runs]


def nice_ticks(low: float, high: float, count: int) -> list[float]:
    """About `count` ticks inside [low, high], at 1, 2, 2.5 or 5 times a power of ten."""
    rough = (high - low) / count
    power = 10 ** math.floor(math.log10(rough))
    step = next(factor * power for factor in (1, 2, 2.5, 5, 10) if factor * power >= rough)
    return [float(f"{k * step:.12g}") + 0.0 for k in range(math.ceil(low / step), math.floor(high / step) + 1)]


def _range(*series: np.ndarray) -> tuple[float, float]:
    finite = np.concatenate([s[np.isfinite(s)] for s in series]) if series else np.zeros(0)
    if not finite.size:
        low, high = -1.0, 1.0
    else:
        low, high = float(finite.min()), float(finite.max())
        if low == high:
            spread = abs(low) / 10 or 1.0
            low, high = low - spread, high + spread
    margin = (high - low) * MARGIN
    return low - margin, high + margin


def _scale(domain: tuple[float, float], span: tuple[float, float]):
    (start, stop), (low, high) = domain, span
    return lambda value: low + (value - start) / (stop - start) * (high - low)


def _path(xs: np.ndarray, ys: np.ndarray) -> str:
    parts, drawing = [], False
    for x, y in zip(xs, ys):
        if math.isfinite(x) and math.isfinite(y):
            parts.append(f"{'L' if drawing else 'M'}{x:.1f},{y:.1f}")
            drawing = True
        else:
            drawing = False
    return "".join(parts)


def sweep_svg(sweep: Sweep, surrogate: bool = False) -> str:
    """The output along the swept element above, its derivative three ways below; non-finite stretches shaded,
    finite differences at a jump marked on the top edge; a legend at the top."""
    labels = derivative_labels(surrogate)
    points, values, numerical = _finite(sweep.points), _finite(sweep.values), _finite(sweep.numerical)
    custom = _finite(sweep.custom)
    autodiff = None if sweep.autodiff is None else _finite(sweep.autodiff)
    off_scale = jumps(points, values, numerical)
    derivatives = [("numerical", np.where(off_scale, np.nan, numerical)), ("custom", custom)]
    if autodiff is not None:
        derivatives.append(("autodiff", autodiff))
    output = element_label(sweep.output, tuple(sweep.output_index) or None)
    element = element_label(sweep.input, tuple(sweep.index) or None)

    x_range = _range(points)
    x = _scale(x_range, (LEFT, WIDTH - RIGHT))
    xs = np.array([x(p) for p in points])
    value_range = _range(values)
    derivative_range = _range(*[series for _, series in derivatives])
    legend = [(labels[name], SERIES_STYLE[name], "line") for name, _ in derivatives]
    bands = [
        (f"{output} NaN/inf", values, VALUE_PANEL, "output"),
        (f"{labels['custom']} NaN/inf", custom, DERIVATIVE_PANEL, "custom"),
    ]
    if autodiff is not None:
        bands.append((f"{labels['autodiff']} NaN/inf", autodiff, DERIVATIVE_PANEL, "autodiff"))
    shaded = [band for band in bands if non_finite_runs(band[1])]
    legend += [(label, BAND_STYLE[name], "band") for label, _, _, name in shaded]
    if sweep.kinks:
        legend.append(("not differentiable", 'stroke="#cf222e" stroke-width="1.2" stroke-dasharray="6 4"', "line"))
    if off_scale.any():
        legend.append((labels["jump"], 'fill="#1a7f37"', "marker"))
    drawn_legend, legend_height = _legend(legend)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT + legend_height}" '
        f'viewBox="0 -{legend_height} {WIDTH} {HEIGHT + legend_height}" style="{FONT}">',
        f"<title>{escape(sweep_title(sweep))}</title>",
        drawn_legend,
    ]
    middle = (LEFT + WIDTH - RIGHT) / 2
    parts.append(text(sweep_title(sweep), middle, 18, 13, anchor="middle", fill="#1f2328"))
    parts += _y_axis(value_range, VALUE_PANEL, output)
    parts += _y_axis(derivative_range, DERIVATIVE_PANEL, f"d {output} / d {element}")
    for tick in nice_ticks(x_range[0], x_range[1], 7):
        for top, bottom in (VALUE_PANEL, DERIVATIVE_PANEL):
            parts.append(line(x(tick), top, x(tick), bottom, f'stroke="{GRID}" stroke-width="0.6"'))
        parts.append(text(format_number(tick), x(tick), DERIVATIVE_PANEL[1] + 14, 10, anchor="middle"))
    axis_label = f"{element} (finite differences in {sweep.numerical_dtype})"
    parts.append(text(axis_label, middle, DERIVATIVE_PANEL[1] + 34, 11, "middle"))
    step = (xs[-1] - xs[0]) / (xs.size - 1) if xs.size > 1 else 0.0
    for label, series, (top, bottom), name in shaded:
        for first, last in non_finite_runs(series):
            left, right = max(LEFT, xs[first] - step / 2), min(WIDTH - RIGHT, xs[last] + step / 2)
            parts.append(
                f'<rect x="{left:.1f}" y="{top}" width="{max(1.0, right - left):.1f}" height="{bottom - top}" '
                f"{BAND_STYLE[name]}><title>{escape(label)}</title></rect>"
            )
    verticals = [(kink, 'stroke="#cf222e" stroke-width="1.2" stroke-dasharray="6 4"') for kink in sweep.kinks]
    verticals.append((sweep.example, f'stroke="{MUTED}" stroke-width="1" stroke-dasharray="1.5 3"'))
    for at, style in verticals:
        for top, bottom in (VALUE_PANEL, DERIVATIVE_PANEL):
            parts.append(line(x(at), top, x(at), bottom, style))
    parts.append(text(f"example {format_number(sweep.example)}", x(sweep.example) + 3, DERIVATIVE_PANEL[1] - 4, 10))
    value_y = _scale(value_range, (VALUE_PANEL[1], VALUE_PANEL[0]))
    output_path = _path(xs, np.array([value_y(v) for v in values]))
    parts.append(f'<path d="{output_path}" fill="none" {SERIES_STYLE["output"]}/>')
    derivative_y = _scale(derivative_range, (DERIVATIVE_PANEL[1], DERIVATIVE_PANEL[0]))
    for name, series in derivatives:
        d = _path(xs, np.array([derivative_y(v) for v in series]))
        parts.append(f'<path d="{d}" fill="none" stroke-linejoin="round" {SERIES_STYLE[name]}/>')
    for i in np.flatnonzero(off_scale):
        parts.append(
            f'<path d="{JUMP_MARKER}" fill="#1a7f37" transform="translate({xs[i]:.1f} {DERIVATIVE_PANEL[0]})"/>'
        )
    for top, bottom in (VALUE_PANEL, DERIVATIVE_PANEL):
        parts.append(
            f'<rect x="{LEFT}" y="{top}" width="{WIDTH - LEFT - RIGHT}" height="{bottom - top}" fill="none" '
            f'stroke="{BORDER}"/>'
        )
    parts.append("</svg>")
    return "".join(parts)


def sweep_title(sweep: Sweep) -> str:
    output = element_label(sweep.output, tuple(sweep.output_index) or None)
    element = element_label(sweep.input, tuple(sweep.index) or None)
    return f"{output} along {element}{' (element-wise op)' if sweep.elementwise else ''}, {sweep.dtype}"


def _legend(entries: list[tuple[str, str, str]]) -> tuple[str, float]:
    """The legend above the chart, wrapped into rows that fit its width; and the height it takes."""
    parts, x, row = [], float(LEFT), 0
    for label, style, kind in entries:
        width = 28 + 6.2 * len(label) + 14
        if x + width > WIDTH - RIGHT and x > LEFT:
            x, row = float(LEFT), row + 1
        parts.append((x, row, label, style, kind))  # placed once the number of rows is known
        x += width
    rows = row + 1
    drawn = []
    for x, row, label, style, kind in parts:
        y = -22 * (rows - row) + 6
        if kind == "band":
            drawn.append(f'<rect x="{x}" y="{y - 5}" width="24" height="10" {style}/>')
        elif kind == "marker":
            drawn.append(f'<path d="{JUMP_MARKER}" {style} transform="translate({x + 12} {y + 1})"/>')
        else:
            drawn.append(line(x, y, x + 24, y, style))
        drawn.append(text(label, x + 28, y + 4, 11))
    return "".join(drawn), 22.0 * rows


def _y_axis(span: tuple[float, float], panel: tuple[float, float], label: str) -> list[str]:
    y = _scale(span, (panel[1], panel[0]))
    parts = []
    for tick in nice_ticks(span[0], span[1], 5):
        parts.append(line(LEFT, y(tick), WIDTH - RIGHT, y(tick), f'stroke="{GRID}" stroke-width="0.6"'))
        parts.append(text(format_number(tick), LEFT - 5, y(tick) + 3.5, 10, anchor="end"))
    middle = (panel[0] + panel[1]) / 2
    parts.append(
        f'<text x="14" y="{middle}" transform="rotate(-90 14 {middle})" font-size="11" fill="{TEXT}" '
        f'text-anchor="middle">{escape(label)}</text>'
    )
    return parts


def line(x1: float, y1: float, x2: float, y2: float, style: str) -> str:
    return f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" {style}/>'


def text(content: str, x: float, y: float, size: float, anchor: str = "start", fill: str = TEXT) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}" text-anchor="{anchor}">'
        f"{escape(content)}</text>"
    )
