"""A Report as self-contained, sanitiser-safe HTML: what shared notebooks, `jupyter nbconvert --to html` and
GitHub show, where no script runs and nothing loads from the network.

The same sections, words and order as the live view (`labextension/src/reportview.ts`): a passing op is one line
with the details folded; a failing one shows the verdict, each problem once (cause, fix, where), then the evidence.
No scripts, no stylesheets (inline styles only, and the page reads without them: plain tables, lists and
`<details>`, which folds without JavaScript); figures as SVG images inline (`data:` URIs, which sanitisers keep
where they drop `<svg>`). Every string from the data is escaped, and the report's root asks MathJax (which JupyterLab,
Notebook and nbconvert's pages run over HTML outputs) to leave it alone, so that a `$` in a message stays a `$`.
"""

from __future__ import annotations

from html import escape

from gradmagic.render import COLOURS, HEADLINE_INFOS
from gradmagic.render.figures import (
    block_scale,
    data_uri,
    heatmap_blocks,
    heatmap_legend,
    heatmap_svgs,
    swatch_svg,
    sweep_svg,
)
from gradmagic.render.graph import graph_summary, graph_svg
from gradmagic.render.words import report_words, watch_words
from gradmagic.report import Report, ReportWords, WatchedOp, WatchReport

MUTED = "color: #59636e"
CODE = "font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace"
#: The classes MathJax skips (3: `mathjax_ignore`; 2, in the classic Notebook and older exports: `tex2jax_ignore`).
NO_MATH = "tex2jax_ignore mathjax_ignore"
SHAPE_CODES = ("grad-shape", "grad-dtype", "grad-count", "grad-structure", "variable-grad-shape")
SEVERITY_BORDER = {"error": COLOURS["error"], "warning": COLOURS["warning"], "info": COLOURS["info"]}
ROOT = "font-family: system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif; font-size: 13px; line-height: 1.45"
#: A `<summary>`'s title, a box of its own beside the marker: where it wraps, it wraps under its own start, never back
#: under the marker (as the live view's `.jp-gradmagic-summary-text`).
SUMMARY_TEXT = "display: inline-block; max-width: calc(100% - 2em); vertical-align: top"


def render_html(report: Report) -> str:
    """The whole report, as the live view lays it out, in the words every view shows (`report_words`)."""
    words = report_words(report)
    parts = [
        f'<div class="gradmagic-report {NO_MATH}" style="{ROOT}; max-width: 100%">',
        header_html(report, words),
        problems_html(report, words),
    ]
    evidence = [
        backends_html(report, words),
        numerics_html(report, words),
        shapes_html(report, words),
        sweep_html(report, words),
        _section("Gradient graph", graph_html(report, words), False),
        notes_html(report, words),
        timings_html(words),
    ]
    if report.verdict in ("pass", "surrogate"):
        parts.append(_section("Details", "".join(evidence), False, muted=True))
    else:
        parts += evidence
    parts.append("</div>")
    return _ascii("".join(parts))


def _ascii(html: str) -> str:
    """`html` with every character beyond ASCII as a character reference: the same page, and half the memory of a
    string Python would hold two bytes per character for (IPython keeps every output it displays)."""
    return html.encode("ascii", "xmlcharrefreplace").decode("ascii")


def header_html(report: Report, words: ReportWords) -> str:
    """The verdict as a badge, the op's signature, the verdict per backend, the key figures; what it checked at;
    the surrogate line."""
    op = report.op
    head = f'<code style="{CODE}; font-weight: 600">{escape(op.name + op.signature)}</code>'
    if report.backends:
        head += f'<span style="font-weight: 600">{escape(words.headline)}</span>'
    parts = [_head(report.verdict, words.verdict, head + f'<span style="{MUTED}">{escape(words.figures)}</span>')]
    if words.checked_at:
        parts.append(f'<div style="margin: 2px 0 4px; {MUTED}; font-size: 12px">{escape(words.checked_at)}</div>')
    if words.fixes:
        parts.append(f'<div style="margin: 4px 0; color: {COLOURS["pass"]}">{escape(words.fixes)}</div>')
    if words.surrogate:
        parts.append(f'<div style="margin: 4px 0; color: {COLOURS["surrogate"]}">{escape(words.surrogate)}</div>')
    return "".join(parts)


def _head(verdict: str, said: str, rest: str) -> str:
    """The verdict as a badge (white capitals on the verdict's colour, rounded, as the live view's
    `.jp-gradmagic-badge`), then `rest`, on one line that wraps where the page is narrow."""
    return (
        '<div style="display: flex; flex-wrap: wrap; align-items: baseline; gap: 4px 10px">'
        f'<span style="background: {COLOURS[verdict]}; color: #ffffff; border-radius: 10px; padding: 1px 8px; '
        f'font-weight: 600; font-size: 11.5px; letter-spacing: 0.03em; white-space: nowrap">{escape(said.upper())}'
        f"</span>{rest}</div>"
    )


def problems_html(report: Report, words: ReportWords) -> str:
    """Errors and warnings, each once: severity, code, where, then the message (cause and fix)."""
    shown = [(problem, place) for problem, place in zip(report.problems, words.places) if problem.severity != "info"]
    return _problem_list(shown, ordered=True) if shown else ""


def notes_html(report: Report, words: ReportWords) -> str:
    """The infos, folded (but the one said under the verdict, `words.fixes`)."""
    infos = [
        (problem, place)
        for problem, place in zip(report.problems, words.places)
        if problem.severity == "info" and not (words.fixes and problem.code in HEADLINE_INFOS)
    ]
    return _section(f"Notes ({len(infos)})", _problem_list(infos), False) if infos else ""


def _problem_list(problems, ordered: bool = False) -> str:
    """Problems, each with where it is (`(problem, place)` pairs)."""
    tag = "ol" if ordered else "ul"
    items = []
    for problem, place in problems:
        colour = SEVERITY_BORDER[problem.severity]
        items.append(
            f'<li style="margin: 0 0 8px; padding: 4px 10px 6px; border-left: 3px solid {colour}; '
            'background: #f6f8fa">'
            f'<b style="color: {colour}; font-size: 11.5px">{escape(problem.severity.upper())}</b> '
            f'<code style="{CODE}; font-weight: 600">{escape(problem.code)}</code>'
            + (f' <span style="{MUTED}; {CODE}; font-size: 11.5px">{escape(place)}</span>' if place else "")
            + f'<div style="white-space: pre-wrap; margin-top: 2px">{escape(problem.message)}</div></li>'
        )
    return f'<{tag} style="margin: 8px 0; padding: 0; list-style: none">{"".join(items)}</{tag}>'


def backends_html(report: Report, words: ReportWords) -> str:
    """The portability check: the verdict on each Keras backend, each checked in its own process."""
    if not report.backends:
        return ""
    rows = [
        [name, (verdict, COLOURS[result.verdict]), detail, versions, took]
        for result, (name, verdict, detail, versions, took) in zip(report.backends, words.backends)
    ]
    note = (
        f'<p style="{MUTED}">The same op and inputs on each Keras backend, each in its own process (KERAS_BACKEND is '
        "fixed when Keras is imported). A failing backend's problems are in the list above.</p>"
    )
    failing = any(result.verdict in ("fail", "unavailable") for result in report.backends)
    table = _table(("backend", "verdict", "problems", "versions", "time"), rows, numeric=(4,))
    return _section(f"Backends ({len(report.backends)})", note + table, failing)


def shapes_html(report: Report, words: ReportWords) -> str:
    """Inputs, outputs, upstream and downstream gradients and variables: dtype and shape, and what was expected."""
    mismatch = any(not row.matches for row in report.tensors)
    opened = mismatch or any(problem.code in SHAPE_CODES for problem in report.problems)
    if not report.tensors:
        body = f'<p style="{MUTED}">No tensor reached the check: it stopped before calling the op.</p>'
        return _section("Shapes", body, opened)
    rows = [(list(cells), not row.matches) for row, cells in zip(report.tensors, words.shapes)]
    table = _table(("role", "name", "dtype and shape", "expected", ""), rows)
    return _section("Shapes", table, opened)


def numerics_html(report: Report, words: ReportWords) -> str:
    """How the comparison ran, the worst elements (full mode) or the located ones (projection mode), heatmaps."""
    numerics = report.numerics
    failing = any(problem.code == "fd-mismatch" for problem in report.problems)
    parts = [f'<p style="{MUTED}">{escape(words.numerics)}</p>']
    if words.kinks:
        parts.append(f'<p style="color: {COLOURS["warn"]}">{escape(words.kinks)}</p>')
    if words.worst:
        rows = [(list(row.cells), row.beyond) for row in words.worst]
        parts.append(f'<div style="font-weight: 600; margin-top: 6px">{escape(words.worst_title)}</div>')
        headings = ("element", "custom", "finite differences", "autodiff", "error ÷ tolerance")
        parts.append(_table(headings, rows, numeric=(1, 2, 3, 4)))
    if numerics.mode == "full":
        blocks = heatmap_blocks(numerics)
        if blocks:
            parts.append(_section("Jacobians", "".join(_heatmap(block) for block in blocks), failing))
        elif not numerics.jacobians:
            parts.append(f'<p style="{MUTED}">Jacobians of more than 4,096 entries are not kept for heatmaps.</p>')
    return _section("Finite differences", "".join(parts), failing)


def _heatmap(block) -> str:
    """A block's heatmaps, one image per matrix at its own size: they wrap onto rows where the page is narrow (labels
    stay legible, never scaled down), each scrolling on its own when wider than the page."""
    caption = f"d {block.output} / d {block.input}: {block.shape[0]} × {block.shape[1]}"
    legend = "".join(
        f'<span style="white-space: nowrap; margin-right: 12px"><img alt="" src="{data_uri(swatch_svg(fill))}" '
        f'style="vertical-align: middle"> {escape(label)}</span> '
        for fill, label in heatmap_legend(block_scale(block))
    )
    panels = " ".join(
        '<span style="display: inline-block; max-width: 100%; overflow-x: auto; vertical-align: top; '
        f'margin: 0 18px 6px 0"><img alt="{escape(f"{label}: {caption}")}" style="max-width: none" '
        f'src="{data_uri(svg)}"></span>'
        for label, svg in heatmap_svgs(block)
    )
    return (
        f'<figure style="margin: 0 0 10px"><figcaption style="{MUTED}; {CODE}">{escape(caption)}'
        f'</figcaption><div class="gradmagic-heatmaps">{panels}</div>'
        f'<div style="{MUTED}; font-size: 11.5px">{legend}</div></figure>'
    )


def sweep_html(report: Report, words: ReportWords) -> str:
    """The sweep's figure, or why there is none."""
    sweep = report.sweep
    if sweep is None:
        return _section("Sweep", f'<p style="{MUTED}">{escape(words.no_sweep)}</p>', False)
    image = data_uri(sweep_svg(sweep, report.verdict == "surrogate"))
    body = (
        f'<p style="{MUTED}">{escape(words.sweep)}</p>'
        f'<img alt="{escape(words.sweep)}" style="max-width: 100%" src="{image}">'
    )
    return _section("Sweep", body, True)


def graph_html(report: Report, words: ReportWords) -> str:
    """The gradient graph's summary and drawing, or why there is none."""
    if report.graph is None:
        return f'<p style="{MUTED}">{escape(words.no_graph)}</p>'
    return (
        f'<p style="{MUTED}">{escape(words.graph)}</p><div style="overflow-x: auto">'
        f'<img alt="{escape(graph_summary(report.graph))}" src="{data_uri(graph_svg(report.graph))}"></div>'
    )


def timings_html(words: ReportWords) -> str:
    return f'<p style="{MUTED}">{escape(words.timings)}</p>' if words.timings else ""


def _section(title: str, body: str, opened: bool, muted: bool = False) -> str:
    style = f"{MUTED}; font-weight: normal" if muted else "font-weight: 600"
    return (
        f'<details{" open" if opened else ""} style="margin: 6px 0"><summary style="cursor: pointer; {style}">'
        f'<span style="{SUMMARY_TEXT}">{escape(title)}</span></summary><div style="margin-left: 14px">{body}</div>'
        "</details>"
    )


def _table(headings, rows, numeric=(), prose=(), under=()) -> str:
    """A table; each row a list of cells (a cell may be (text, colour)), or (cells, mismatch). Cells are in the code
    font but those of the `prose` columns; `under`, where given, is HTML for each row, shown beneath it across the
    table. Every cell says its alignment: pages draw the HTML under table styles of their own (JupyterLab's and
    nbconvert's right-align cells and centre tables)."""
    # Text cells wrap at spaces where the page is narrow; numbers never wrap; a table still too wide scrolls.
    cell_style = "padding: 3px 14px 3px 0; border-bottom: 1px solid #e6eaef; vertical-align: top"
    head = "".join(
        f'<th style="padding: 3px 14px 3px 0; border-bottom: 1px solid #d1d9e0; text-align: '
        f'{"right" if k in numeric else "left"}; {MUTED}">{escape(h)}</th>'
        for k, h in enumerate(headings)
    )
    body = []
    for n, row in enumerate(rows):
        cells, bad = row if isinstance(row, tuple) else (row, False)
        line = []
        for k, cell in enumerate(cells):
            text, colour = cell if isinstance(cell, tuple) else (cell, None)
            align = "right; font-variant-numeric: tabular-nums; white-space: nowrap" if k in numeric else "left"
            colour = COLOURS["error"] if bad else colour
            font = "" if k in prose else f"; {CODE}"
            extra = f"; color: {colour}" if colour else ""
            weight = "; font-weight: 600" if bad else ""
            line.append(f'<td style="{cell_style}{font}; text-align: {align}{extra}{weight}">{escape(text)}</td>')
        body.append(f"<tr>{''.join(line)}</tr>")
        if under:
            body.append(
                f'<tr><td colspan="{len(headings)}" style="{cell_style}; padding-top: 0; text-align: left">'
                f"{under[n]}</td></tr>"
            )
    return (
        '<div style="max-width: 100%; overflow-x: auto"><table style="border-collapse: collapse; margin: 4px 0 8px">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


def render_watch_html(report: WatchReport) -> str:
    """A watch's report, laid out as the live view (`labextension/src/watchview.ts`) lays it out: the verdict as a
    badge, the summary and timings, where the first gradient went non-finite, and a table of the ops, each op's own
    report (as `render_html` draws every Report) folded under its row in a `<details>` block."""
    words = watch_words(report)
    parts = [
        f'<div class="gradmagic-watch {NO_MATH}" style="{ROOT}; max-width: 100%">',
        _head(report.verdict, words.verdict, f'<span style="font-weight: 600">{escape(words.summary)}</span>'),
        f'<div style="{MUTED}; font-size: 12px">{escape(words.timings)}</div>',
    ]
    parts += [f'<div style="{CODE}">{escape(line)}</div>' for line in words.lines]
    if words.raised:
        parts.append(f'<div style="color: {COLOURS["error"]}">{escape(words.raised)}</div>')
    parts += [f'<div style="{MUTED}">{escape(note)}</div>' for note in report.notes]
    if report.watched:
        rows = [
            [name, where, count, (verdict, COLOURS[op.verdict]), problem]
            for op, (name, where, count, verdict, problem) in zip(report.watched, words.rows)
        ]
        under = [
            _section(f"report of {op.name}", _watched_op_html(op, calls, places), False)
            for op, calls, places in zip(report.watched, words.calls, words.places)
        ]
        headings = ("op", "where", "calls", "verdict", "first problem")
        parts.append(_table(headings, rows, numeric=(2,), prose=(4,), under=under))
    parts.append("</div>")
    return _ascii("".join(parts))


def _watched_op_html(op: WatchedOp, calls: tuple[str, ...], places: tuple[str, ...]) -> str:
    """What an op's calls received and did, the calls it was checked at, what the watched code showed of it (each
    finding with its place), then its report."""
    lines = "".join(f"<div>{escape(line)}</div>" for line in calls)
    findings = _problem_list(zip(op.findings, places)) if op.findings else ""
    calls = f'<div style="{MUTED}; font-family: monospace; white-space: pre-wrap">{lines}</div>'
    return calls + findings + render_html(op.report)
