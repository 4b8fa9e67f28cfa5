"""Matplotlib figures of a Report: Jacobian heatmaps, the sweep, and a one-picture summary.

Figures are made with `matplotlib.figure.Figure` (no pyplot: no global state,
no backend switching in the user's session) and read only the Report.
`ReportImages` renders each one once per report and keeps the PNGs of the
last few reports, so the widget, the HTML fallback and the PNG summary share
them.
"""

from __future__ import annotations

import io
import textwrap
import weakref
from collections import OrderedDict

import numpy as np

from gradmagic.render import COLOURS, VERDICT_WORDS
from gradmagic.report import JacobianBlock, Report, Sweep, element_label

#: Resolution of every PNG: enough to read, small enough to keep notebooks light.
DPI = 80
#: Jacobian blocks drawn (input x output pairs); the rest are listed as text.
MAX_BLOCKS = 4
CUSTOM, AUTODIFF, NUMERICAL = "#0969da", "#bf8700", "#1a7f37"
MISMATCH = "#cf222e"
NONFINITE_SHADE = "#ffd7d5"


def png(figure, dpi: int = DPI) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return compact(buffer.getvalue())


def compact(png_bytes: bytes) -> bytes:
    """The PNG with a 128-colour palette: a quarter of the bytes, the same look for these flat-coloured plots.
    Every report embeds its images twice (widget state and HTML), so this is what keeps notebooks light."""
    from PIL import Image

    return png_of(Image.open(io.BytesIO(png_bytes)).convert("RGB").quantize(128, method=Image.Quantize.FASTOCTREE))


def jacobian_figure(report: Report):
    """Heatmaps of custom, numerical and autodiff Jacobians and of |custom - numerical|, one row per block.

    Mismatched elements are boxed in red; non-differentiable points (left out
    of the comparison) are marked with a triangle above their column; NaN and
    infinities are grey. The three Jacobians share one colour scale.
    """
    from matplotlib.figure import Figure

    blocks = report.numerics.jacobians[:MAX_BLOCKS]
    figure = Figure(figsize=(10, 2.2 * len(blocks)))
    height = 1 / len(blocks)
    for k, block in enumerate(blocks):  # fixed positions: a constrained layout costs more than the drawing
        bottom = 1 - (k + 1) * height
        axes = [figure.add_axes((0.06 + 0.225 * j, bottom + 0.16 * height, 0.19, 0.66 * height)) for j in range(4)]
        scales = [
            figure.add_axes((0.06 + 0.225 * j + 0.195, bottom + 0.16 * height, 0.008, 0.66 * height)) for j in (2, 3)
        ]
        _heatmaps(axes, block, report, scales)
    return figure


def _heatmaps(axes, block: JacobianBlock, report: Report, scales) -> None:
    """The four heatmaps of one block on four axes, and colour bars on the two `scales` axes (the Jacobians',
    the difference's)."""
    from matplotlib import colormaps
    from matplotlib.ticker import FormatStrFormatter

    rows, columns = block.shape
    custom, numerical, autodiff = (
        np.array([np.nan if v is None else v for v in values], dtype=float).reshape(rows, columns)
        for values in (block.custom, block.numerical, block.autodiff)
    )
    finite = np.concatenate([m[np.isfinite(m)] for m in (custom, numerical, autodiff)])
    limit = (float(np.abs(finite).max()) if finite.size else 0.0) or 1.0
    diverging = colormaps["RdBu_r"].with_extremes(bad="#bbbbbb")
    with np.errstate(invalid="ignore"):
        difference = np.abs(custom - numerical)
    panels = (
        (custom, "custom gradient", diverging, -limit, limit),
        (numerical, "finite differences", diverging, -limit, limit),
        (autodiff, "autodiff", diverging, -limit, limit),
        (difference, "|custom - finite diff.|", colormaps["Reds"].with_extremes(bad="#bbbbbb"), 0, None),
    )
    mismatched, kinks = _marked_elements(report, block)
    images = []
    for k, (ax, (matrix, title, cmap, low, high)) in enumerate(zip(axes, panels)):
        images.append(ax.imshow(matrix, cmap=cmap, vmin=low, vmax=high, aspect="auto", interpolation="nearest"))
        for row, column in mismatched:
            ax.add_patch(_box(row, column, MISMATCH))
        for column in kinks:
            ax.plot([column], [-0.5], marker="v", color="black", markersize=6, clip_on=False)
        ax.set_title(title, fontsize=8)
        if k:  # tick labels cost more than the images: on the first panel only
            ax.set_xticks([])
            ax.set_yticks([])
    first = axes[0]
    first.xaxis.set_major_locator(_few_ticks())
    first.yaxis.set_major_locator(_few_ticks())
    first.tick_params(labelsize=6)
    first.set_xlabel(f"{block.input} element" + ("  (▼ not differentiable)" if kinks else ""), fontsize=7)
    first.set_ylabel(f"d {block.output} element", fontsize=7)
    for scale, image in zip(scales, (images[2], images[3])):
        colourbar = first.figure.colorbar(image, cax=scale)
        colourbar.locator = _few_ticks(integer=False)
        colourbar.formatter = FormatStrFormatter("%.2g")
        colourbar.ax.tick_params(labelsize=6)


def _few_ticks(integer: bool = True):
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(4, integer=integer)


def _box(row: int, column: int, colour: str):
    from matplotlib.patches import Rectangle

    return Rectangle((column - 0.5, row - 0.5), 1, 1, fill=False, edgecolor=colour, linewidth=1.5)


def _marked_elements(report: Report, block: JacobianBlock) -> tuple[set[tuple[int, int]], set[int]]:
    """(row, column) of the elements out of tolerance, and the columns of non-differentiable points."""
    shapes = {row.name: row.shape for row in report.tensors if row.role in ("input", "variable", "output")}
    mismatched = {
        (row, column)
        for element in report.numerics.worst
        if element.input == block.input
        and element.output == block.output
        and element.error is not None
        and element.error > 1
        and (row := _flat(element.output_index, shapes.get(block.output))) is not None
        and (column := _flat(element.index, shapes.get(block.input))) is not None
    }
    kinks = {
        column
        for problem in report.problems
        if problem.code == "nondifferentiable-point"
        and problem.location is not None
        and block.input in (problem.location.input, problem.location.variable)
        and (column := _flat(problem.location.index, shapes.get(block.input))) is not None
    }
    return mismatched, kinks


def _flat(index, shape) -> int | None:
    if not index:
        return 0
    if not shape or len(shape) != len(index) or any(d is None for d in shape):
        return None
    return int(np.ravel_multi_index(index, shape))


def sweep_figure(sweep: Sweep, height: float = 4.2, surrogate: bool = False):
    """The output (top) and its derivative three ways (bottom) along the swept element; with `surrogate`, the
    custom gradient is labelled as the surrogate and finite differences as the true derivative."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7.5, height))
    top = figure.add_axes((0.1, 0.62, 0.87, 0.31))
    bottom = figure.add_axes((0.1, 0.11, 0.87, 0.47), sharex=top)
    top.tick_params(labelbottom=False)
    _sweep_axes(top, bottom, sweep, surrogate)
    return figure


def jumps(points: np.ndarray, values: np.ndarray, numerical: np.ndarray) -> np.ndarray:
    """Where a central difference straddles a jump of the forward (round, sign): it is the jump over 2h there,
    orders of magnitude above the slope between neighbouring sweep points, and off any useful scale."""
    if points.size < 3:
        return np.zeros(points.size, bool)
    with np.errstate(all="ignore"):
        secant = np.abs(np.gradient(values, points))
        return np.isfinite(numerical) & np.isfinite(secant) & (np.abs(numerical) > 10 * secant + 1e-12)


def _sweep_axes(top, bottom, sweep: Sweep, surrogate: bool = False) -> None:
    points = np.array(sweep.points, dtype=float)
    series = {
        key: None if values is None else np.array([np.nan if v is None else v for v in values], dtype=float)
        for key, values in (
            ("values", sweep.values),
            ("custom", sweep.custom),
            ("autodiff", sweep.autodiff),
            ("numerical", sweep.numerical),
        )
    }
    element = element_label(sweep.input, tuple(sweep.index) or None)
    output = element_label(sweep.output, tuple(sweep.output_index) or None)
    if top is not None:
        top.plot(points, series["values"], color="#24292f", linewidth=1.4)
        top.set_ylabel(output, fontsize=8)
        top.set_title(
            f"{output} along {element}" + (" (element-wise op)" if sweep.elementwise else "") + f", {sweep.dtype}",
            fontsize=9,
        )
        _shade_nonfinite(top, points, series["values"], "output not finite")
    numerical = series["numerical"]
    off_scale = jumps(points, series["values"], numerical)
    numerical_label = "true derivative (finite differences)" if surrogate else "finite differences"
    bottom.plot(
        points,
        np.where(off_scale, np.nan, numerical),
        color=NUMERICAL,
        linewidth=3.5,
        alpha=0.45,
        label=numerical_label,
    )
    bottom.plot(
        points,
        series["custom"],
        color=CUSTOM,
        linewidth=1.4,
        label="surrogate (custom gradient)" if surrogate else "custom gradient",
    )
    if series["autodiff"] is not None:
        bottom.plot(points, series["autodiff"], color=AUTODIFF, linewidth=1.2, linestyle="--", label="autodiff")
        _shade_nonfinite(bottom, points, series["autodiff"], "autodiff not finite")
    _shade_nonfinite(bottom, points, series["custom"], "custom gradient not finite", colour="#d8b9ff")
    bottom.set_ylabel(f"d {output} / d {element}", fontsize=8)
    bottom.set_xlabel(f"{element} (finite differences in {sweep.numerical_dtype})", fontsize=8)
    for ax in (top, bottom):
        if ax is None:
            continue
        ax.axvline(sweep.example, color="#57606a", linewidth=0.8, linestyle=":")
        for kink in sweep.kinks:
            ax.axvline(kink, color=MISMATCH, linewidth=1.0, linestyle="--")
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.25)
    bottom.annotate(
        f"example {sweep.example:.4g}",
        (sweep.example, 0),
        xycoords=("data", "axes fraction"),
        fontsize=7,
        color="#57606a",
        ha="left",
        va="bottom",
        xytext=(3, 2),
        textcoords="offset points",
    )
    if sweep.kinks:
        bottom.plot([], [], color=MISMATCH, linestyle="--", linewidth=1.0, label="not differentiable")
    if off_scale.any():
        # Marked on the top edge: drawn to scale, they would flatten every other curve to a line.
        bottom.plot(
            points[off_scale],
            np.ones(int(off_scale.sum())),
            "^",
            color=NUMERICAL,
            markersize=5,
            transform=bottom.get_xaxis_transform(),
            clip_on=False,
            label=f"{'true derivative' if surrogate else 'finite differences'} at a jump (off scale)",
        )
    bottom.legend(fontsize=7, loc="upper left", framealpha=0.8)


def _shade_nonfinite(ax, points, values, label: str, colour: str = NONFINITE_SHADE) -> None:
    """Shade the ranges where `values` is NaN or infinite."""
    if values is None:
        return
    bad = ~np.isfinite(values)
    if not bad.any():
        return
    step = (points[-1] - points[0]) / max(len(points) - 1, 1)
    edges = np.flatnonzero(np.diff(np.concatenate([[0], bad.astype(int), [0]])))
    for first, (start, stop) in enumerate(zip(edges[::2], edges[1::2])):
        ax.axvspan(
            points[start] - step / 2,
            points[stop - 1] + step / 2,
            color=colour,
            alpha=0.8,
            zorder=0,
            label=label if first == 0 else None,
        )


def summary_png(report: Report, images: ReportImages) -> bytes:
    """One picture for renderers that show no HTML: the verdict and first problems over the most telling plot
    (the sweep, else the heatmaps), which is reused from `images`, not drawn again."""
    from PIL import Image

    plot = images.sweep or images.jacobians
    below = Image.open(io.BytesIO(plot)) if plot else None
    width = below.width if below is not None else 8 * DPI
    headline = png(_headline_figure(report, width / DPI))
    if below is None:
        return headline
    band = Image.open(io.BytesIO(headline))
    picture = Image.new("RGB", (width, band.height + below.height), "white")
    picture.paste(band, (0, 0))
    picture.paste(below, (0, band.height))
    return compact(png_of(picture))


def _headline_figure(report: Report, width: float):
    """Verdict and op in colour, then the first problems' messages, on a figure `width` inches wide."""
    from matplotlib.figure import Figure

    characters = int(width * 17)  # of 7 pt text per line
    messages = [f"{p.severity}: {p.message}" for p in report.problems[:3]]
    lines = [line for message in messages for line in textwrap.wrap(message, characters)[:2]]
    height = 0.42 + 0.16 * len(lines)
    figure = Figure(figsize=(width, height))
    op = report.op
    figure.text(
        0.01,
        1 - 0.08 / height,
        f"{op.name}{op.signature} {VERDICT_WORDS[report.verdict]}",
        fontsize=11,
        fontweight="bold",
        color=COLOURS[report.verdict],
        va="top",
    )
    for k, line in enumerate(lines):
        figure.text(0.01, 1 - (0.36 + 0.16 * k) / height, line, fontsize=7, va="top")
    return figure


def png_of(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="png", optimize=True)
    return buffer.getvalue()


class ReportImages:
    """The PNGs of one report, each rendered on first use."""

    def __init__(self, report: Report):
        self._report = weakref.ref(report)
        self._cache: dict[str, bytes | None] = {}

    def _get(self, name: str, make) -> bytes | None:
        if name not in self._cache:
            report = self._report()
            self._cache[name] = None if report is None else make(report)
        return self._cache[name]

    @property
    def graph(self) -> bytes | None:
        from gradmagic.render.graph import graph_png

        return self._get("graph", lambda r: compact(graph_png(r.graph, dpi=DPI)) if r.graph is not None else None)

    @property
    def jacobians(self) -> bytes | None:
        return self._get("jacobians", lambda r: png(jacobian_figure(r)) if r.numerics.jacobians else None)

    @property
    def sweep(self) -> bytes | None:
        return self._get(
            "sweep",
            lambda r: png(sweep_figure(r.sweep, surrogate=r.verdict == "surrogate")) if r.sweep is not None else None,
        )

    @property
    def summary(self) -> bytes:
        return self._get("summary", lambda r: summary_png(r, self))


#: How many reports keep their rendered images (each a few hundred KB at most).
KEPT = 8
_recent: OrderedDict[int, tuple[weakref.ref, ReportImages]] = OrderedDict()


def images_of(report: Report) -> ReportImages:
    """The report's images, shared by every renderer; rendered again only after `KEPT` newer reports."""
    key = id(report)
    entry = _recent.get(key)
    if entry is not None and entry[0]() is report:
        _recent.move_to_end(key)
        return entry[1]
    images = ReportImages(report)
    _recent[key] = (weakref.ref(report), images)
    _recent.move_to_end(key)  # an id reused by a new report: the entry is the newest, not in the old one's place
    while len(_recent) > KEPT:
        _recent.popitem(last=False)
    return images
