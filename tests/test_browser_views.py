"""The report's view as users see it, in a real JupyterLab and Notebook 7 seen through a real headless Chromium, at
two widths, and its static HTML exported: every figure drawn (NaN hatched, entries not judged dotted, in every
report of a page), heatmaps wrapping onto rows at their own size where the page is narrow, tables wrapping or
scrolling (never cut), a saved tensor's size label clear of every other edge, the sweep of an element-wise op drawn
although one element is NaN, a watch's report in the same view (live and saved), and a notebook saved with its
widgets' state carrying no copy of the view per report.

The server and the browser are started once for the module and stopped at its end; everything they write goes to
a temporary folder. Screenshots are kept in test-artifacts/ (`views-*.png`) and were looked at.
"""

from __future__ import annotations

import json
import struct
import time
import zlib
from pathlib import Path

import pytest
from jupyterlab_server import (
    JupyterLab,
    open_in_notebook7,
    open_notebook,
    run_cell,
    write_notebook,
)
from test_browser import ARTIFACTS, nbconvert, open_section, output_of, save, saved_cells

from gradmagic.report import MIME_TYPE, WATCH_MIME_TYPE

TIMEOUT = 180_000
WIDE, NARROW = 1400, 760
OPS = """%load_ext gradmagic
import numpy as np
import tensorflow as tf
import keras
from keras import ops
import gradmagic

@tf.custom_gradient
def doubled(x):
    return x * x, lambda dy: dy * 3 * x   # 1.5 times too large

@tf.custom_gradient
def row_norm(x):
    norm = tf.norm(x, axis=1, keepdims=True)
    return norm, lambda dy: dy * x / norm   # 0 / 0 at an all-zero row"""
ROOT_SCALE = """%%custom_gradient --check x=tf.constant([[0.5, 1.0, 2.0], [3.0, 1.5, 4.0]])
def root_scale(x):
    y = tf.sqrt(x)
    def grad(upstream):
        return upstream * 1.5 / (2 * y)   # wrong factor
    return y, grad"""
SOFT_ROOT = """%%custom_gradient --check x=tf.constant([[0., 1., 2., 3.], [4., 5., 6., 7.]])
def soft_root(x):
    def grad(upstream):
        return upstream * 0.5 / tf.sqrt(x + 1e-3)   # finite at 0, slightly off elsewhere
    return tf.sqrt(x), grad"""
KERAS_BACKENDS = """%%custom_gradient --keras --backends all --check x=np.array([-5., 0., 100.])
def keras_log1pexp(x):
    e = ops.exp(x)
    def grad(upstream):
        return ops.multiply(upstream, 1.0 - 1.0 / ops.add(1, e))
    return ops.log(1 + e), grad"""
GRADWATCH = """%%gradwatch
x = tf.constant([[1.0, 2.0], [0.0, 0.0]])
with tf.GradientTape() as tape:
    tape.watch(x)
    y = tf.reduce_sum(row_norm(doubled(x)))
tape.gradient(y, x)"""
CELLS = [OPS, ROOT_SCALE, SOFT_ROOT, KERAS_BACKENDS, GRADWATCH]
VIEW_KEY = "gradmagic.view/1"


def shot(locator, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"views-{name}.png"
    locator.screenshot(path=str(path))
    return path


def pixels(png: bytes) -> list[list[tuple[int, int, int]]]:
    """The RGB rows of a PNG as Chromium writes screenshots (8 bits per channel, RGB or RGBA, not interlaced)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    at, chunks, header = 8, [], None
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, body = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        at += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            chunks.append(body)
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and not interlace, header
    channels = 4 if colour == 6 else 3
    raw, stride, rows, previous = zlib.decompress(b"".join(chunks)), width * channels, [], bytearray(width * channels)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append([tuple(line[x * channels : x * channels + 3]) for x in range(width)])
        previous = line
    return rows


def coloured_fraction(png: bytes, margin: int = 2) -> float:
    """The fraction of an image's pixels (inside `margin`) that are not white: 0 for a plain white cell."""
    rows = pixels(png)
    inner = [pixel for row in rows[margin:-margin] for pixel in row[margin:-margin]]
    return sum(1 for pixel in inner if min(pixel) < 235) / max(1, len(inner))


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    base = tmp_path_factory.mktemp("views")
    (base / "notebooks").mkdir()
    return base / "notebooks", base


def opened_and_run(browser, lab, folders, name: str, width: int, opener, front_end: str):
    """The view cells in `name`, opened by `opener` in a page `width` wide, every cell run by the user, each report
    drawn; a dialog that stopped a run is named (and screenshot)."""
    root, _ = folders
    write_notebook(root / name, CELLS)
    page = browser.new_page(viewport={"width": width, "height": 1400})
    opener(page, lab, name)
    try:
        for cell in range(len(CELLS)):
            run_cell(page, cell, cell + 1, timeout=300_000)
    except Exception:
        shot(page, f"{front_end}-failed-run")
        raise AssertionError(f"{front_end} showed {page.locator('.jp-Dialog').all_inner_texts()}") from None
    for cell in range(1, len(CELLS)):
        report_of(page, cell).wait_for(timeout=TIMEOUT)
    return page


@pytest.fixture(scope="module")
def lab_page(browser, lab, folders):
    """views.ipynb in JupyterLab (its file browser open), every cell run by the user."""
    page = opened_and_run(browser, lab, folders, "views.ipynb", WIDE, open_notebook, "lab")
    yield page
    page.close()


@pytest.fixture(scope="module")
def nb7_page(browser, lab, folders):
    """The same cells in Notebook 7 at 760 px, run by the user."""
    page = opened_and_run(browser, lab, folders, "views-nb7.ipynb", NARROW, open_in_notebook7, "nb7")
    yield page
    page.close()


def report_of(page, cell: int):
    return output_of(page, cell).locator(".jp-gradmagic-widget .jp-gradmagic-report").first


def open_file_browser(page) -> None:
    if not page.locator("#filebrowser").is_visible():
        page.locator(".jp-SideBar.jp-mod-left [data-id='filebrowser']").click()
    page.locator("#filebrowser").wait_for(state="visible")
    time.sleep(0.5)


def visible_right(report) -> float:
    """The right edge of what the notebook shows of an output (its output area, clipped by the notebook)."""
    return report.evaluate(
        """report => {
          const area = report.closest('.jp-OutputArea-output') ?? report.parentElement;
          const panel = report.closest('.jp-WindowedPanel-outer, .jp-Notebook') ?? document.body;
          return Math.min(area.getBoundingClientRect().right, panel.getBoundingClientRect().right, innerWidth);
        }"""
    )


def test_nan_cells_and_unjudged_cells_are_hatched_and_dotted_in_every_live_report(lab_page):
    """soft_root's finite difference at x[0, 0] = 0 is NaN (hatched) and its error not judged (dotted), also while an
    earlier report's heatmaps (root_scale's, a drawing of another copy of the view) are folded."""
    page = lab_page
    earlier = report_of(page, 1)
    earlier_jacobians = open_section(earlier, "jacobians")
    earlier_jacobians.locator("> summary").click()  # folded: its drawing is hidden
    report = report_of(page, 2)
    jacobians = open_section(report, "jacobians")
    jacobians.scroll_into_view_if_needed()
    time.sleep(0.3)
    ids = page.evaluate(
        """() => {
          const ids = [...document.querySelectorAll('[id^="jp-gradmagic"]')].map(e => e.id);
          const referring = '.jp-gradmagic-report [fill^="url(#"], .jp-gradmagic-report [marker-end^="url(#"]';
          const refs = [...document.querySelectorAll(referring)]
            .map(e => [e, (e.getAttribute('fill') || e.getAttribute('marker-end')).slice(5, -1)]);
          const home = ([e, id]) => document.getElementById(id)?.closest('svg') === e.closest('svg');
          return {count: ids.length, repeated: ids.filter((id, k) => ids.indexOf(id) !== k),
                  elsewhere: refs.filter(ref => !home(ref)).length, references: refs.length};
        }"""
    )
    assert ids["count"] > 0 and ids["references"] > 0
    assert ids["repeated"] == [], "ids repeat across the page's reports"
    assert ids["elsewhere"] == 0, "a url(#id) resolves into another drawing"
    nan_cell = jacobians.locator("g[data-matrix='finite differences'] rect").first
    unjudged_cell = jacobians.locator("g[data-matrix='error ÷ tolerance'] rect").first
    assert coloured_fraction(nan_cell.screenshot(), margin=3) > 0.3, "the NaN cell is drawn plain white"
    assert coloured_fraction(unjudged_cell.screenshot(), margin=3) > 0.03, "the not-judged cell is drawn plain white"
    legend = jacobians.locator(".jp-gradmagic-key-entry")
    for label in ("NaN or inf", "not judged (kink, no finite difference)"):
        swatch = legend.filter(has_text=label).locator("svg")
        assert coloured_fraction(swatch.screenshot(), margin=2) > 0.03, f"the {label!r} swatch is plain white"
    shot(jacobians, "lab-nan-hatched-1400")
    earlier_jacobians.locator("> summary").click()


def check_heatmaps(report, name: str) -> None:
    """Every heatmap drawn at its own size (labels never scaled down) and inside what the notebook shows."""
    jacobians = open_section(report, "jacobians")
    jacobians.scroll_into_view_if_needed()
    time.sleep(0.3)
    right = visible_right(report)
    panels = jacobians.locator("svg.jp-gradmagic-heatmap-svg")
    assert panels.count() == 4
    tops = set()
    for k in range(panels.count()):
        panel = panels.nth(k)
        box = panel.bounding_box()
        assert box["x"] + box["width"] <= right + 1, f"{name}: heatmap {k} is cut ({box} beyond {right})"
        assert abs(box["width"] - float(panel.get_attribute("width"))) < 1, f"{name}: heatmap {k} is scaled"
        size = panel.locator("text").first.evaluate("t => parseFloat(getComputedStyle(t).fontSize)")
        assert size >= 10, f"{name}: heatmap labels at {size} px"
        tops.add(round(box["y"]))
    shot(jacobians, name)
    return len(tops)


def test_live_heatmaps_wrap_onto_rows_beside_the_file_browser_and_in_notebook_7_at_760px(lab_page, nb7_page):
    open_file_browser(lab_page)
    rows_lab = check_heatmaps(report_of(lab_page, 2), "lab-heatmaps-filebrowser-1400")
    rows_nb7 = check_heatmaps(report_of(nb7_page, 2), "nb7-heatmaps-760")
    assert rows_nb7 >= 2 and rows_lab >= 1, "the four heatmaps wrap onto rows where the page is narrow"


def test_tables_wrap_or_scroll_in_notebook_7_at_760px_never_cut(nb7_page):
    report = report_of(nb7_page, 3)
    backends = open_section(report, "backends")
    backends.scroll_into_view_if_needed()
    time.sleep(0.3)
    right = visible_right(report)
    for table in report.locator("table.jp-gradmagic-table").all():
        if not table.is_visible():
            continue
        frame = table.locator("xpath=..")
        scrolls = frame.evaluate("f => f.scrollWidth > f.clientWidth + 1")
        last = table.locator("th").last.bounding_box()
        frame_box = frame.bounding_box()
        assert frame_box["x"] + frame_box["width"] <= right + 1
        assert scrolls or last["x"] + last["width"] <= frame_box["x"] + frame_box["width"] + 1, "a column is cut"
    time_header = backends.locator("table th").last
    box = time_header.bounding_box()
    assert time_header.inner_text() == "time" and box["x"] + box["width"] <= right + 1, "the time column is cut"
    shot(backends, "nb7-backends-760")


def test_a_saved_tensor_label_sits_clear_of_every_other_edge_and_node(lab_page):
    report = report_of(lab_page, 1)
    graph = open_section(report, "graph-section")
    graph.locator("svg.jp-gradmagic-graph-svg").wait_for()
    graph.scroll_into_view_if_needed()
    time.sleep(0.3)
    found = graph.evaluate(
        """section => {
          const svg = section.querySelector('svg.jp-gradmagic-graph-svg');
          return [...svg.querySelectorAll('.jp-gradmagic-edge-label')].map(label => {
            const box = label.getBBox();
            const own = label.closest('.jp-gradmagic-edge');
            const strokes = [...svg.querySelectorAll('.jp-gradmagic-edge .jp-gradmagic-stroke')]
              .filter(path => path.closest('.jp-gradmagic-edge') !== own);
            const crossed = [];
            for (let x = box.x - 1; x <= box.x + box.width + 1; x += 1) {
              for (let y = box.y - 1; y <= box.y + box.height + 1; y += 1) {
                const point = new DOMPoint(x, y);
                for (const path of strokes) {
                  if (path.isPointInStroke(point)) {
                    crossed.push(path.closest('.jp-gradmagic-edge').dataset.target);
                  }
                }
              }
            }
            const nodes = [...svg.querySelectorAll('.jp-gradmagic-node rect')].filter(rect => {
              const r = rect.getBBox();
              return box.x < r.x + r.width && r.x < box.x + box.width
                && box.y < r.y + r.height && r.y < box.y + box.height;
            }).length;
            return {text: label.textContent, crossed: [...new Set(crossed)], nodes};
          });
        }"""
    )
    assert [label["text"] for label in found] == ["24 B"]
    assert found[0]["crossed"] == [] and found[0]["nodes"] == 0, found
    shot(graph, "lab-graph-label-1400")


def test_sweeping_an_element_wise_op_with_a_nan_element_draws_it(lab_page):
    report = report_of(lab_page, 2)
    sweep = open_section(report, "sweep-section")
    sweep.get_by_role("button", name="Sweep").click()
    report = report_of(lab_page, 2)
    report.locator(".jp-gradmagic-sweep-section svg.jp-gradmagic-sweep-svg").wait_for(timeout=TIMEOUT)
    status = report.locator(".jp-gradmagic-status").inner_text()
    assert status.startswith("Swept in"), status
    shot(report.locator(".jp-gradmagic-sweep-section"), "lab-soft-root-swept-1400")


def check_watch(report, name: str) -> None:
    report.scroll_into_view_if_needed()
    report.wait_for(state="visible")
    rows = report.locator("tr.jp-gradmagic-watch-row")
    assert [rows.nth(k).get_attribute("data-op") for k in range(rows.count())] == ["doubled", "row_norm"]
    assert "first non-finite gradient: row_norm" in report.text_content()
    assert report.bounding_box()["height"] > 60
    details = report.locator("details.jp-gradmagic-watch-details[data-op='doubled']")
    details.locator("> summary").click()  # one click away
    inner = details.locator(".jp-gradmagic-report")
    inner.wait_for()
    assert inner.locator(".jp-gradmagic-badge").inner_text().lower() == "fails"
    assert inner.locator(".jp-gradmagic-problem[data-code='fd-mismatch']").count() == 1
    report.scroll_into_view_if_needed()
    time.sleep(0.3)
    right = visible_right(report)
    box = report.bounding_box()
    assert box["x"] + box["width"] <= right + 1, f"{name}: the watch's report is cut"
    shot(report, name)


def test_a_gradwatch_cell_shows_its_table_and_each_op_report_through_the_same_view(lab_page, nb7_page):
    check_watch(output_of(lab_page, 4).locator(".jp-gradmagic-widget .jp-gradmagic-watch"), "lab-gradwatch-1400")
    check_watch(output_of(nb7_page, 4).locator(".jp-gradmagic-widget .jp-gradmagic-watch"), "nb7-gradwatch-760")


def test_the_view_comes_from_the_kernel_once_per_page_where_the_extension_is_missing(lab_page):
    """Elsewhere than JupyterLab and Notebook 7 (VS Code) no extension registers the view: the widgets' stub asks the
    kernel for it, once per page. Here: the page forgets the extension's view, then two new widgets show."""
    page = lab_page
    page.evaluate(f"() => {{ delete globalThis.__gradmagic[{VIEW_KEY!r}]; }}")
    cell = len(CELLS)
    if page.locator(".jp-Notebook .jp-Cell").count() <= cell:  # Shift+Enter on the last cell made one below it
        page.locator(".jp-NotebookPanel:visible .jp-NotebookPanel-toolbar [data-jp-item-name='insert'] button").click()
    editor = page.locator(".jp-Notebook .jp-Cell").nth(cell).locator(".jp-InputArea-editor")
    editor.click()
    page.keyboard.insert_text(
        "from IPython.display import display\n"
        "display(gradmagic.widget(gradmagic.check(doubled, tf.constant([1.0, 2.0]))))\n"
        "display(gradmagic.widget(gradmagic.check(row_norm, tf.constant([[1.0, 2.0]]))))"
    )
    run_cell(page, cell, cell + 1)
    badges = output_of(page, cell).locator(".jp-gradmagic-widget .jp-gradmagic-badge")
    badges.nth(1).wait_for(timeout=TIMEOUT)
    assert [badges.nth(k).inner_text().lower() for k in range(2)] == ["fails", "passes"]
    assert page.evaluate("() => document.querySelectorAll('style[data-gradmagic]').length") == 1, "once per page"
    assert page.evaluate(f"() => typeof globalThis.__gradmagic[{VIEW_KEY!r}].render") == "function"
    shot(output_of(page, cell), "lab-view-from-the-kernel-1400")


@pytest.fixture(scope="module")
def saved(lab_page, folders):
    save(lab_page)
    root, _ = folders
    path = root / "views.ipynb"
    saved_cells(path, lambda cells: all(cell.get("outputs") for cell in cells[1 : len(CELLS)]))
    time.sleep(1)
    return path


def test_a_notebook_saved_with_widget_state_carries_no_copy_of_the_view_per_report(saved):
    notebook = json.loads(saved.read_text())
    state = notebook["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    outputs = [o for cell in notebook["cells"] for o in cell.get("outputs", [])]
    reports = [o for o in outputs if MIME_TYPE in o.get("data", {}) or WATCH_MIME_TYPE in o.get("data", {})]
    assert len(reports) >= 4
    assert len(state) <= 3 * len(reports), f"{len(state)} widget models for {len(reports)} reports"
    for model in state.values():
        traits = model["state"]
        assert len(traits.get("_esm", "")) < 2_000, "the view's code is saved in a widget's state"
        assert "_css" not in traits and "fallback" not in traits
    # The report's data (a watch's is 20 KB and more) and the stub, never the view itself (39 KiB of JavaScript).
    per_report = len(json.dumps(state)) / len(reports)
    assert per_report < 30_000, f"{per_report:.0f} B of widget state per report"
    (ARTIFACTS / "views-saved-notebook.txt").write_text(
        f"{saved.name}: {saved.stat().st_size} B, {len(reports)} reports, {len(state)} widget models, "
        f"widget state {len(json.dumps(state))} B\n"
    )


def test_a_saved_watch_report_reopened_without_a_kernel_shows_the_same_view(browser, folders, saved):
    root, state = folders
    with JupyterLab(root, state / "server-without-kernels", kernels=False) as bare:
        page = browser.new_page(viewport={"width": WIDE, "height": 1400})
        try:
            open_notebook(page, bare, "views.ipynb", kernel=False)
            page.locator(".jp-Dialog").get_by_role("button", name="No Kernel").click()
            page.locator(".jp-NotebookPanel:visible .jp-Toolbar-kernelName").get_by_text("No Kernel").wait_for(
                timeout=30_000
            )
            watch = output_of(page, 4).locator(".jp-gradmagic-watch")
            watch.wait_for(timeout=30_000)
            shot(page, "lab-reopened-page-1400")
            assert page.locator(".jp-gradmagic-widget").count() == 0, "no kernel: drawn from the saved data"
            check_watch(watch, "lab-gradwatch-saved-1400")
        finally:
            page.close()


def test_reports_saved_by_an_older_gradmagic_open_without_a_kernel_in_the_same_view(browser, folders):
    """Outputs saved before schema 1.8 carry no words: the view shows what their data holds (the verdict, problems,
    shapes, the sweep and the graph drawn) and says, where the key figures go, to re-run the cell for the rest."""
    root, state = folders
    saved = Path(__file__).resolve().parent / "saved_reports"
    outputs = [
        {
            "output_type": "display_data",
            "metadata": {},
            "data": {MIME_TYPE: json.loads((saved / f"{name}-1.7.json").read_text()), "text/plain": [name]},
        }
        for name in ("straight_through", "unreduced_bias")
    ]
    watch = json.loads((saved / "watch-1.0.json").read_text())
    outputs.append(
        {"output_type": "display_data", "metadata": {}, "data": {WATCH_MIME_TYPE: watch, "text/plain": ["watch"]}}
    )
    write_notebook(root / "older.ipynb", ["# saved by gradmagic before schema 1.8"])
    notebook = json.loads((root / "older.ipynb").read_text())
    notebook["cells"][0]["outputs"] = outputs
    (root / "older.ipynb").write_text(json.dumps(notebook))
    with JupyterLab(root, state / "server-for-older-reports", kernels=False) as bare:
        page = browser.new_page(viewport={"width": WIDE, "height": 1400})
        try:
            open_notebook(page, bare, "older.ipynb", kernel=False)
            page.locator(".jp-Dialog").get_by_role("button", name="No Kernel").click()
            reports = output_of(page, 0).locator(".jp-gradmagic-report:not(.jp-gradmagic-watch)")
            reports.nth(1).wait_for(timeout=30_000)
            surrogate, failing = reports.nth(0), reports.nth(1)
            assert surrogate.locator(".jp-gradmagic-badge").inner_text() == "SURROGATE"  # the verdict, in capitals
            assert "older gradmagic" in surrogate.locator(".jp-gradmagic-figures").inner_text()
            assert failing.locator(".jp-gradmagic-badge").inner_text() == "FAIL"
            assert failing.locator(".jp-gradmagic-problem[data-code='grad-shape']").count() == 1
            open_section(surrogate, "details")
            open_section(surrogate, "sweep-section")
            assert surrogate.locator(".jp-gradmagic-sweep-svg").is_visible()
            open_section(surrogate, "graph-section").locator(".jp-gradmagic-graph").wait_for(timeout=30_000)
            shot(surrogate, "lab-older-report-1400")
            watch = output_of(page, 0).locator(".jp-gradmagic-watch")
            assert watch.locator("tr.jp-gradmagic-watch-row").count() == 3
            shot(watch, "lab-older-watch-1400")
        finally:
            page.close()


def test_exported_heatmaps_wrap_at_760px_with_their_labels_at_their_own_size(browser, tmp_path, saved):
    (tmp_path / "views.ipynb").write_text(saved.read_text())
    nbconvert("--to", "html", "views.ipynb", cwd=tmp_path)
    context = browser.new_context(viewport={"width": NARROW, "height": 1400})
    context.route("http*://**/*", lambda route: route.abort())
    page = context.new_page()
    try:
        page.goto((tmp_path / "views.html").as_uri())
        page.wait_for_load_state("load")
        for width in (WIDE, NARROW):
            page.set_viewport_size({"width": width, "height": 1400})
            time.sleep(0.3)
            figures = page.locator(".gradmagic-report .gradmagic-heatmaps")
            assert figures.count() >= 2
            for k in range(figures.count()):
                figure = figures.nth(k)
                details = figure.locator("xpath=ancestor::details")
                for j in range(details.count()):
                    if details.nth(j).get_attribute("open") is None:
                        details.nth(j).locator("> summary").click()
                images = figure.locator("img")
                sizes = images.evaluate_all(
                    "imgs => imgs.map(i => [i.getBoundingClientRect().width, i.naturalWidth, "
                    "i.getBoundingClientRect().right])"
                )
                for shown, natural, right in sizes:
                    assert abs(shown - natural) < 1, f"an exported heatmap is scaled to {shown} of {natural} px"
                    assert right <= width, "an exported heatmap runs off the page"
            figure = figures.nth(1)
            figure.scroll_into_view_if_needed()
            shot(figure.locator("xpath=.."), f"export-heatmaps-{width}")
    finally:
        context.close()
