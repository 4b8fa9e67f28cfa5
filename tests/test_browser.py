"""gradmagic in a real JupyterLab, seen through a real headless Chromium: the report of the seeds' log1pexp
cell and of a declared straight-through estimator, the notebook commands, a saved notebook reopened where no
kernel exists (its reports drawn from data: the gradient graph, the sweep), and hostile text.

The server and the browser are started once for the module and stopped at its end; everything they write
goes to a temporary folder. A screenshot of each rendered report is kept in test-artifacts/."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import report_fixtures
import tensorflow as tf
from jupyterlab_server import (
    CHROMIUM,
    JupyterLab,
    launch_chromium,
    open_notebook,
    run_cell,
    wait_for_prompt,
    write_notebook,
)

import gradmagic
from gradmagic.render import surrogate_line
from gradmagic.report import MIME_TYPE

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
LOG1PEXP_CELL = """%%custom_gradient --check x=tf.constant([-5., 0., 100.])
import tensorflow as tf

def log1pexp(x):
    e = tf.exp(x)
    def grad(upstream):
        return upstream * (1 - 1 / (1 + e))
    return tf.math.log(1 + e), grad"""
STRAIGHT_THROUGH_CELL = f"""%%custom_gradient --surrogate --check x=tf.constant({report_fixtures.QUANTISE_INPUT})
import tensorflow as tf

def quantise(x):
    def grad(upstream):
        return upstream * tf.cast(tf.abs(x) <= 1, upstream.dtype)
    return tf.round(x), grad"""
#: The cell line of `e = tf.exp(x)` (the magic line is line 1).
EXP_LINE = 5
TIMEOUT = 120_000  # ms: the first check imports TensorFlow in the kernel


@pytest.fixture(scope="module")
def expected():
    """The same op checked here, in Python: what the browser must show."""
    return gradmagic.check(tf.custom_gradient(report_fixtures.log1pexp), tf.constant([-5.0, 0.0, 100.0]))


@pytest.fixture(scope="module")
def expected_surrogate():
    """The straight-through estimator checked here, in Python."""
    quantise = tf.custom_gradient(report_fixtures.quantise)
    return gradmagic.check(quantise, tf.constant(report_fixtures.QUANTISE_INPUT), surrogate=True)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    base = tmp_path_factory.mktemp("jupyterlab")
    (base / "notebooks").mkdir()
    return base / "notebooks", base


@pytest.fixture(scope="module")
def browser():
    assert os.access(CHROMIUM, os.X_OK), f"{CHROMIUM} is missing: ./dev test installs Debian's chromium"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = launch_chromium(playwright)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def lab(folders):
    root, state = folders
    with JupyterLab(root, state / "server") as server:
        yield server


@pytest.fixture
def page(browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    yield page
    page.close()


@pytest.fixture(scope="module")
def checked(browser, lab, folders):
    """log1pexp.ipynb opened in JupyterLab with `%load_ext gradmagic`, and the log1pexp and straight-through
    estimator cells run by the user."""
    root, _ = folders
    write_notebook(root / "log1pexp.ipynb", ["%load_ext gradmagic", LOG1PEXP_CELL, STRAIGHT_THROUGH_CELL])
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    open_notebook(page, lab, "log1pexp.ipynb")
    run_cell(page, 0, 1)
    run_cell(page, 1, 2)
    run_cell(page, 2, 3)
    yield page
    page.close()


def save(page) -> None:
    """The notebook toolbar's save button."""
    page.locator(".jp-NotebookPanel:visible .jp-NotebookPanel-toolbar [data-jp-item-name='save'] button").click()


def screenshot(locator, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    locator.screenshot(path=str(path))
    return path


def tooltip_after_hovering(page, target) -> str:
    target.hover()
    tooltip = page.locator(".jp-gradmagic-tooltip:visible")
    tooltip.wait_for(timeout=5_000)
    return tooltip.inner_text()


def test_the_log1pexp_cell_shows_its_live_report(checked, expected):
    page = checked
    output = page.locator(".jp-Notebook .jp-Cell").nth(1).locator(".jp-Cell-outputArea")
    output.get_by_text("PASSES WITH WARNINGS").wait_for(timeout=TIMEOUT)
    assert "log1pexp(x)" in output.inner_text()
    output.get_by_role("tab", name="Shapes").click()
    rows = output.locator(".widget-tab-contents table tr, .lm-TabPanel-stackedPanel table tr").filter(
        has_not=page.locator("th")
    )
    rows.first.wait_for()
    seen = [row.inner_text().split("\t")[:3] for row in rows.all() if row.is_visible()]
    assert [cells[:2] for cells in seen] == [[t.role, t.name] for t in expected.tensors]

    output.get_by_role("tab", name="Graph").click()
    graph = output.locator(".jp-gradmagic-graph")
    graph.wait_for()
    assert int(graph.get_attribute("data-node-count")) == len(expected.graph.nodes)
    assert graph.locator(".jp-gradmagic-node").count() == len(expected.graph.nodes)
    saved = next(edge for edge in expected.graph.edges if edge.saved)
    details = tooltip_after_hovering(page, graph.locator(".jp-gradmagic-saved .jp-gradmagic-edge-label").first)
    assert "saved: the backward keeps this forward tensor alive" in details
    assert f"bytes: {saved.bytes} B" in details and "shape: [3]" in details and "dtype: float32" in details
    details = tooltip_after_hovering(page, graph.locator(".jp-gradmagic-node[data-role='forward']").first)
    assert "(Exp)" in details and f"cell line {EXP_LINE}" in details and "shape: [3]" in details

    # Zoom and pan.
    scale = float(graph.get_attribute("data-scale"))
    graph.get_by_role("button", name="+").click()
    assert float(graph.get_attribute("data-scale")) == pytest.approx(min(8.0, scale * 1.25), abs=2e-3)
    viewport = graph.locator(".jp-gradmagic-viewport")
    before = viewport.get_attribute("transform")
    box = graph.locator("svg").bounding_box()
    page.mouse.move(box["x"] + 20, box["y"] + 20)
    page.mouse.down()
    page.mouse.move(box["x"] + 120, box["y"] + 60, steps=5)
    page.mouse.up()
    assert viewport.get_attribute("transform") != before
    screenshot(output, "log1pexp-live-widget-graph.png")


def test_the_declared_straight_through_estimator_shows_its_live_report(checked, expected_surrogate):
    page = checked
    output = page.locator(".jp-Notebook .jp-Cell").nth(2).locator(".jp-Cell-outputArea")
    output.get_by_text("SURROGATE GRADIENT (DECLARED)").wait_for(timeout=TIMEOUT)
    assert surrogate_line(expected_surrogate) in output.inner_text()
    # The live widget (made by Python) opens on its Sweep tab when nothing fails.
    output.get_by_role("tab", name="Sweep").wait_for()
    output.get_by_text("SURROGATE GRADIENT (DECLARED)").scroll_into_view_if_needed()
    screenshot(page, "straight-through-live-widget.png")


def test_recheck_all_runs_every_custom_gradient_cell_and_nothing_else(checked):
    page = checked
    page.locator(".jp-NotebookPanel-toolbar").get_by_text("Re-check all").click()
    wait_for_prompt(page, 2, 5)
    prompts = page.locator(".jp-Notebook .jp-Cell .jp-InputArea-prompt")
    assert "[1]" in prompts.nth(0).inner_text() and "[4]" in prompts.nth(1).inner_text()


def test_the_palette_inserts_the_template_and_the_load_ext_cell(browser, lab, folders, page):
    root, _ = folders
    write_notebook(root / "empty.ipynb", ["import numpy as np"])
    open_notebook(page, lab, "empty.ipynb", kernel=False)
    page.locator(".jp-NotebookPanel:visible .jp-Cell").first.locator(".jp-InputArea-prompt").click()
    page.locator(".lm-MenuBar-itemLabel", has_text="View").click()
    page.locator(".lm-Menu-itemLabel", has_text="Command Palette").click()
    palette = page.locator("#command-palette input")
    palette.fill("Insert custom-gradient cell")
    page.locator("#command-palette .lm-CommandPalette-item.lm-mod-active").get_by_text(
        "Insert custom-gradient cell"
    ).wait_for()
    page.keyboard.press("Enter")
    page.locator(".jp-NotebookPanel:visible .jp-Cell").nth(2).wait_for()
    save(page)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            cells = json.loads((root / "empty.ipynb").read_text())["cells"]
        except json.JSONDecodeError:  # read while JupyterLab rewrites the file: read again
            cells = []
        if len(cells) == 3:
            break
        time.sleep(0.2)
    else:
        screenshot(page, "failed-saving-the-inserted-cells.png")
        pytest.fail("the notebook with the inserted cells was not saved")
    sources = ["".join(cell["source"]) for cell in cells]
    assert sources[0] == "import numpy as np" and sources[1] == "%load_ext gradmagic"
    assert sources[2].startswith("%%custom_gradient --check x=tf.constant([-5., 0., 100.])")
    assert "def log1pexp(x):" in sources[2] and "return tf.math.log(1 + e), grad" in sources[2]


def test_a_saved_notebook_reopened_where_no_kernel_exists_still_shows_the_reports(
    checked, browser, folders, expected, expected_surrogate
):
    page = checked
    save(page)
    root, state = folders
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        cells = json.loads((root / "log1pexp.ipynb").read_text())["cells"]
        if all(any(MIME_TYPE in output.get("data", {}) for output in cell["outputs"]) for cell in cells[1:3]):
            break
        time.sleep(0.2)
    else:
        pytest.fail("the notebook was not saved with the reports' outputs")

    with JupyterLab(root, state / "server-without-kernels", kernels=False) as bare:
        reopened = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            open_notebook(reopened, bare, "log1pexp.ipynb", kernel=False)
            # The server has no kernel to offer: JupyterLab asks, and the user keeps "No Kernel".
            reopened.locator(".jp-Dialog").get_by_role("button", name="No Kernel").click()
            reopened.locator(".jp-NotebookPanel:visible .jp-Toolbar-kernelName").get_by_text("No Kernel").wait_for(
                timeout=30_000
            )
            cells = reopened.locator(".jp-Notebook .jp-Cell")
            report = cells.nth(1).locator(".jp-gradmagic-report")
            report.wait_for(timeout=30_000)
            assert report.locator(".jp-gradmagic-verdict").inner_text().lower() == "passes with warnings"
            assert "log1pexp(x)" in report.locator(".jp-gradmagic-signature").inner_text()
            rows = report.locator(".jp-gradmagic-shapes-table tbody tr")
            assert rows.count() == len(expected.tensors)
            assert [rows.nth(i).locator("td").nth(1).inner_text() for i in range(rows.count())] == [
                t.name for t in expected.tensors
            ]
            assert int(report.locator(".jp-gradmagic-graph").get_attribute("data-node-count")) == len(
                expected.graph.nodes
            )
            assert "Error displaying widget" not in reopened.locator(".jp-Notebook").inner_text()
            screenshot(report, "log1pexp-reopened-without-kernel.png")

            surrogate = cells.nth(2).locator(".jp-gradmagic-report")
            assert surrogate.locator(".jp-gradmagic-verdict").inner_text().lower() == "surrogate gradient (declared)"
            assert surrogate.locator(".jp-gradmagic-surrogate-line").inner_text() == surrogate_line(expected_surrogate)
            sweep = surrogate.locator(".jp-gradmagic-sweep-section")
            chart = sweep.locator("svg.jp-gradmagic-sweep-svg")
            chart.wait_for()
            labels = {
                "custom": "surrogate (custom gradient)",
                "numerical": "true derivative (finite differences)",
                "autodiff": "autodiff",
            }
            for series, label in labels.items():
                curve = chart.locator(f"path[data-series='{series}']")
                assert curve.get_attribute("d").startswith("M") and curve.locator("title").text_content() == label
                assert label in sweep.locator(".jp-gradmagic-sweep-legend").inner_text()
            box = chart.bounding_box()
            assert box["width"] > 500 and box["height"] > 250, box  # drawn at a readable size
            details = tooltip_after_hovering(reopened, chart)  # the middle of the sweep: inside the box
            assert "surrogate (custom gradient): 1" in details and "true derivative (finite differences): 0" in details
            reopened.mouse.move(0, 0)
            screenshot(surrogate.locator(".jp-gradmagic-header"), "straight-through-header-reopened-without-kernel.png")
            screenshot(sweep, "straight-through-sweep-reopened-without-kernel.png")
        finally:
            reopened.close()


def test_hostile_text_in_a_report_is_shown_literally_and_never_runs(browser, lab, folders, page):
    root, _ = folders
    write_notebook(
        root / "hostile.ipynb",
        [
            "import sys\n"
            f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
            "import report_fixtures, gradmagic, tensorflow as tf\n"
            "from IPython.display import display\n"
            "report = gradmagic.check(report_fixtures.hostile_op(), tf.constant(1.0))\n"
            f"display({{{MIME_TYPE!r}: report.to_dict(), 'text/plain': 'hostile'}}, raw=True)\n"
            "report"
        ],
    )
    open_notebook(page, lab, "hostile.ipynb")
    run_cell(page, 0, 1)
    report = page.locator(".jp-gradmagic-report")
    report.first.wait_for(timeout=TIMEOUT)
    page.get_by_text("FAILS").first.wait_for(timeout=TIMEOUT)  # the live widget too
    signature = report.first.locator(".jp-gradmagic-signature").inner_text()
    assert report_fixtures.HOSTILE in signature
    assert f"{report_fixtures.HOSTILE} broke" in report.first.inner_text()
    assert page.locator('img[src="x"]').count() == 0
    assert page.evaluate("window.__pwned") is None
    screenshot(report.first, "hostile-report.png")
