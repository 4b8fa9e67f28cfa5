"""What users see of a watch: `%%gradwatch` over `model.fit` run by the user in a real JupyterLab and Notebook 7
seen through a real headless Chromium, and the notebook's HTML export opened with the network refused.

The cell's only output is the report (never the `History` that `model.fit` returns); the watch's table reads left
to right (its text cells left-aligned, also under the export page's own table styles), its verdict is a badge (a
coloured background, rounded) live and exported alike, and each op's summary, where it wraps, wraps under its own
start, not back under its marker. The server and the browser are started once for the module and stopped at its
end; everything they write goes to a temporary folder. Screenshots are kept in test-artifacts/ (`watch-*.png`) and
were looked at.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from jupyterlab_server import open_in_notebook7, open_notebook, run_cell, write_notebook
from test_browser import ARTIFACTS, nbconvert, output_of, save, saved_cells

from gradmagic.report import WATCH_MIME_TYPE

TIMEOUT = 300_000
WIDE, NARROW = 1400, 760
SETUP = """%load_ext gradmagic
import numpy as np
import keras
import tensorflow as tf

@tf.custom_gradient
def scaled_tanh(x):
    y = tf.tanh(x)
    return y, lambda dy: dy * (1 - y * y)

@tf.custom_gradient
def soft_square(x):
    return x * x / (1 + x * x), lambda dy: dy * 3 * x / (1 + x * x) ** 2   # 1.5 times too large

@tf.custom_gradient
def row_norm(x):
    norm = tf.norm(x, axis=1, keepdims=True)
    return norm, lambda dy: dy * x / norm   # 0 / 0 at an all-zero row

class Features(keras.layers.Layer):
    def call(self, x):
        h = soft_square(scaled_tanh(x))
        return tf.concat([h, row_norm(h)], axis=1)

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, use_bias=False), Features(), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
rng = np.random.default_rng(0)
x = rng.normal(size=(128, 8)).astype("float32")
x[40:44] = 0.0
y = rng.normal(size=(128, 1)).astype("float32")"""
FIT = """%%gradwatch
model.fit(x, y, epochs=1, shuffle=False)"""
CELLS = [SETUP, FIT]
OPS = ["scaled_tanh", "soft_square", "row_norm"]


def shot(locator, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"watch-{name}.png"
    locator.screenshot(path=str(path))
    return path


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    base = tmp_path_factory.mktemp("watch")
    (base / "notebooks").mkdir()
    return base / "notebooks", base


def fitted(browser, lab, folders, name: str, width: int, opener):
    """The notebook `name` opened by `opener` in a page `width` wide, its two cells run by the user."""
    root, _ = folders
    write_notebook(root / name, CELLS)
    page = browser.new_page(viewport={"width": width, "height": 1200})
    opener(page, lab, name)
    for cell in range(len(CELLS)):
        run_cell(page, cell, cell + 1, timeout=TIMEOUT)
    output_of(page, 1).locator(".jp-gradmagic-watch").wait_for(timeout=TIMEOUT)
    return page


@pytest.fixture(scope="module")
def lab_page(browser, lab, folders):
    page = fitted(browser, lab, folders, "fit.ipynb", WIDE, open_notebook)
    yield page
    page.close()


@pytest.fixture(scope="module")
def nb7_page(browser, lab, folders):
    page = fitted(browser, lab, folders, "fit-nb7.ipynb", NARROW, open_in_notebook7)
    yield page
    page.close()


def cell_styles(table, row: str = "tBodies[0].rows[0]") -> list[dict]:
    """Each cell of the table's `row` (its first op's, by default): its text, computed `text-align`, left edge."""
    return table.evaluate(
        f"""table => {{
          const row = table.{row};
          return [...row.cells].map(cell => ({{
            text: cell.textContent, align: getComputedStyle(cell).textAlign,
            left: cell.getBoundingClientRect().left,
          }}));
        }}"""
    )


def badge_style(badge) -> dict:
    return badge.evaluate(
        """badge => {
          const style = getComputedStyle(badge);
          return {background: style.backgroundColor, radius: parseFloat(style.borderTopLeftRadius),
                  colour: style.color, text: badge.textContent};
        }"""
    )


def summary_lines(summary) -> dict:
    """Where the summary's row starts (its `<details>`' left edge, the marker's column), and where each line of its
    text starts (one entry per line)."""
    return summary.evaluate(
        """summary => {
          const range = document.createRange();
          range.selectNodeContents(summary);
          const lines = new Map();
          for (const rect of range.getClientRects()) {
            if (rect.width < 1) continue;
            const top = Math.round(rect.top);
            lines.set(top, Math.min(lines.get(top) ?? Infinity, rect.left));
          }
          const ordered = [...lines.entries()].sort((a, b) => a[0] - b[0]).map(([, left]) => left);
          return {start: summary.parentElement.getBoundingClientRect().left, lines: ordered};
        }"""
    )


def check_wrapped_summary(summary, name: str) -> None:
    """The summary, in a frame too narrow for it to fit on one line, wraps under its own start: each line of its text
    starts where its first does, right of the summary's start (the marker's column), never back under the marker."""
    summary.evaluate("s => { s.parentElement.style.width = '7em'; }")  # as in a narrow side panel
    try:
        summary.scroll_into_view_if_needed()
        time.sleep(0.2)
        shot(summary.locator("xpath=ancestor::tr[1]"), f"{name}-summary-wrapped")
        found = summary_lines(summary)
        first, *rest = found["lines"]
        assert rest, f"{name}: the summary did not wrap at 7em: {found}"
        assert first > found["start"] + 4, f"{name}: the summary's text starts at its marker: {found}"
        assert all(abs(left - first) < 1.5 for left in rest), f"{name}: a wrapped line starts elsewhere: {found}"
    finally:
        summary.evaluate("s => { s.parentElement.style.width = ''; }")


def check_live_watch(page, name: str) -> None:
    output = output_of(page, 1)
    watch = output.locator(".jp-gradmagic-widget .jp-gradmagic-watch")
    watch.scroll_into_view_if_needed()
    time.sleep(0.3)
    shot(output, f"{name}-output")
    text = output.inner_text()
    assert "History" not in text, f"{name}: the History model.fit returned is shown"
    assert output.locator(".jp-OutputArea-executeResult").count() == 1, "the report is the cell's one value"
    assert output.locator(".jp-OutputArea-executeResult .jp-gradmagic-watch").count() == 1
    rows = watch.locator("tr.jp-gradmagic-watch-row")
    assert [rows.nth(k).get_attribute("data-op") for k in range(rows.count())] == OPS
    cells = cell_styles(watch.locator("table").first)
    assert [cell["align"] for cell in cells] == ["left", "left", "right", "left", "left"], cells
    badge = badge_style(watch.locator(".jp-gradmagic-head .jp-gradmagic-badge"))
    assert badge["text"].lower() == "fails" and badge["background"] not in ("rgba(0, 0, 0, 0)", "transparent")
    assert badge["radius"] >= 4, badge
    check_wrapped_summary(watch.locator("details[data-op='soft_square'] > summary"), name)


def test_a_gradwatch_over_model_fit_shows_the_report_alone_read_left_to_right_in_jupyterlab(lab_page):
    check_live_watch(lab_page, "lab-1400")


def test_a_gradwatch_over_model_fit_reads_the_same_in_notebook_7_at_760px(nb7_page):
    check_live_watch(nb7_page, "nb7-760")


@pytest.fixture(scope="module")
def exported(lab_page, folders, tmp_path_factory):
    """The notebook JupyterLab saved (with its widgets' state), exported by `jupyter nbconvert --to html`."""
    save(lab_page)
    root, _ = folders
    saved = root / "fit.ipynb"
    saved_cells(saved, lambda cells: any(WATCH_MIME_TYPE in o.get("data", {}) for o in cells[1].get("outputs", [])))
    time.sleep(1)
    folder = tmp_path_factory.mktemp("watch-export")
    (folder / "fit.ipynb").write_text(saved.read_text())
    nbconvert("--to", "html", "fit.ipynb", cwd=folder)
    return folder / "fit.html"


@pytest.mark.parametrize("width", [WIDE, NARROW])
def test_the_exported_watch_table_is_left_aligned_and_its_verdict_a_badge(browser, exported, width):
    context = browser.new_context(viewport={"width": width, "height": 1200})
    context.route("http*://**/*", lambda route: route.abort())  # no CDN, no network
    page = context.new_page()
    try:
        page.goto(exported.as_uri())
        page.wait_for_load_state("load")
        watch = page.locator(".gradmagic-watch")
        assert watch.count() == 1 and "History" not in page.locator(".jp-Cell").nth(1).inner_text()
        watch.scroll_into_view_if_needed()
        shot(watch, f"export-{width}")
        table = watch.locator("table").first
        cells = cell_styles(table)
        assert [cell["text"] for cell in cells][:1] == ["scaled_tanh"], cells
        assert [cell["align"] for cell in cells] == ["left", "left", "right", "left", "left"], cells
        head = cell_styles(table, "tHead.rows[0]")
        assert [cell["align"] for cell in head] == ["left", "left", "right", "left", "left"], head
        left = watch.bounding_box()["x"]
        assert abs(table.bounding_box()["x"] - left) < 2, "the table is not at the report's left edge"
        badge = badge_style(watch.locator("span").first)
        assert badge["text"] == "FAILS" and badge["background"] not in ("rgba(0, 0, 0, 0)", "transparent"), badge
        assert badge["radius"] >= 4 and badge["colour"] == "rgb(255, 255, 255)", badge
        summary = watch.locator("details > summary").filter(has_text="report of soft_square")
        assert summary.inner_text() == "report of soft_square"
        check_wrapped_summary(summary, f"export-{width}")
        summary.click()  # the op's own report, under its row, reads left to right too
        report = watch.locator(".gradmagic-report").nth(1)
        report.scroll_into_view_if_needed()
        shot(summary.locator("xpath=.."), f"export-{width}-soft-square")
        assert report.evaluate("r => getComputedStyle(r).textAlign") == "left"
        assert report.locator("span").first.inner_text() == "FAILS"
    finally:
        context.close()
