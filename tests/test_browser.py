"""gradmagic in a real JupyterLab and Notebook 7, seen through a real headless Chromium, and its shared HTML opened
with the network refused and with JavaScript off.

One view everywhere: the live report (the kernel's widget, drawn by the view bundled from labextension/src) with
its controls, re-checking and sweeping in place; the same view drawn from the saved data where no kernel is; the
static HTML an export and GitHub show. The server and the browser are started once for the module and stopped at
its end; everything they write goes to a temporary folder. Screenshots of what a user sees, at two widths, are
kept in test-artifacts/ and were looked at.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import report_fixtures
import tensorflow as tf
from conftest import ARTIFACTS, ISOLATED_ENV
from jupyterlab_server import (
    JupyterLab,
    open_in_notebook7,
    open_notebook,
    run_cell,
    wait_for_prompt,
    write_notebook,
)
from playwright.sync_api import TimeoutError as PlaywrightTimeout

import gradmagic
from gradmagic.render import surrogate_line
from gradmagic.report import MIME_TYPE

ROOT = Path(__file__).resolve().parents[1]
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
ABS_CELL = """%%custom_gradient --check x=tf.constant([1., 2., 3.])
def square(x):
    def grad(upstream):
        return upstream * 2 * tf.abs(x)   # wrong for negative x
    return x * x, grad"""
#: The cell line of `e = tf.exp(x)` (the magic line is line 1).
EXP_LINE = 5
TIMEOUT = 120_000  # ms: the first check imports TensorFlow in the kernel
WIDTHS = (1400, 760)


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


@pytest.fixture
def page(browser):
    page = browser.new_page(viewport={"width": WIDTHS[0], "height": 1000})
    yield page
    page.close()


@pytest.fixture(scope="module")
def checked(browser, lab, folders):
    """log1pexp.ipynb opened in JupyterLab with `%load_ext gradmagic`, and its three checking cells run by the user:
    log1pexp, a declared straight-through estimator, and a gradient wrong for negative inputs (passing at the
    positive ones it is checked at)."""
    root, _ = folders
    write_notebook(root / "log1pexp.ipynb", ["%load_ext gradmagic", LOG1PEXP_CELL, STRAIGHT_THROUGH_CELL, ABS_CELL])
    page = browser.new_page(viewport={"width": WIDTHS[0], "height": 1000})
    page.console_messages = []  # what the page logs, for the tests to read
    page.on("console", lambda message: page.console_messages.append(f"{message.type}: {message.text}"))
    open_notebook(page, lab, "log1pexp.ipynb")
    for cell in range(4):
        run_cell(page, cell, cell + 1)
    yield page
    page.close()


def output_of(page, cell: int):
    return page.locator(".jp-Notebook .jp-Cell").nth(cell).locator(".jp-Cell-outputArea")


def open_section(report, name: str):
    """Open the report's section `name` (a click on its summary, as a user does) and return it."""
    section = report.locator(f"details.jp-gradmagic-{name}").first
    if section.get_attribute("open") is None:
        section.locator("> summary").click()
    return section


def save(page) -> None:
    """The notebook toolbar's save button."""
    page.locator(".jp-NotebookPanel:visible .jp-NotebookPanel-toolbar [data-jp-item-name='save'] button").click()


def saved_cells(path: Path, ready, timeout: float = 20) -> list:
    """The notebook's cells once `ready(cells)` holds (JupyterLab may be rewriting the file: read again)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            cells = json.loads(path.read_text())["cells"]
        except json.JSONDecodeError:
            cells = []
        if cells and ready(cells):
            return cells
        time.sleep(0.2)
    pytest.fail(f"{path.name} was not saved as expected")


def screenshot(locator, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    locator.screenshot(path=str(path))
    return path


def at_widths(page, locator, name: str) -> None:
    """Screenshots of `locator` at each of WIDTHS (the page's viewport), kept as test artifacts."""
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 1000})
        locator.scroll_into_view_if_needed()
        time.sleep(0.3)
        screenshot(locator, f"{name}-{width}px.png")
        box, area = locator.bounding_box(), locator.locator("xpath=ancestor::*[contains(@class, 'jp-OutputArea')][1]")
        bounds = area.bounding_box() if area.count() else None
        if bounds is not None:  # nothing cut off at the right
            assert box["x"] + box["width"] <= bounds["x"] + bounds["width"] + 1, (name, width, box, bounds)
    page.set_viewport_size({"width": WIDTHS[0], "height": 1000})


def tooltip_after_hovering(page, target) -> str:
    target.hover()
    tooltip = page.locator(".jp-gradmagic-tooltip:visible")
    tooltip.wait_for(timeout=5_000)
    return tooltip.inner_text()


def test_the_log1pexp_cell_shows_its_live_report(checked, expected):
    page = checked
    report = output_of(page, 1).locator(".jp-gradmagic-widget .jp-gradmagic-report")
    report.wait_for(timeout=TIMEOUT)
    assert report.locator(".jp-gradmagic-badge").inner_text().lower() == "passes with warnings"
    assert "log1pexp(x)" in report.locator(".jp-gradmagic-signature").inner_text()
    # The widget's module speaks anywidget's current API: no deprecation logged for any of the page's reports.
    assert not [line for line in page.console_messages if "anywidget" in line and "eprecat" in line]
    problems = report.locator(":scope > .jp-gradmagic-problems > .jp-gradmagic-problem")
    assert [problems.nth(i).get_attribute("data-code") for i in range(problems.count())] == [
        p.code for p in expected.problems if p.severity != "info"
    ]
    assert report.locator("input[name='inputs']").input_value() == "x=tf.constant([-5., 0., 100.])"
    rows = open_section(report, "shapes").locator("tbody tr")
    assert [rows.nth(i).locator("td").nth(1).inner_text() for i in range(rows.count())] == [
        t.name for t in expected.tensors
    ]
    graph = open_section(report, "graph-section").locator(".jp-gradmagic-graph")
    graph.wait_for()
    assert int(graph.get_attribute("data-node-count")) == len(expected.graph.nodes)
    saved = next(edge for edge in expected.graph.edges if edge.saved)
    details = tooltip_after_hovering(page, graph.locator(".jp-gradmagic-saved .jp-gradmagic-edge-label").first)
    assert "saved: the backward keeps this forward tensor alive" in details
    assert f"bytes: {saved.bytes} B" in details and "shape: [3]" in details and "dtype: float32" in details
    details = tooltip_after_hovering(page, graph.locator(".jp-gradmagic-node[data-role='forward']").first)
    assert "(Exp)" in details and f"cell line {EXP_LINE}" in details and "shape: [3]" in details
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
    page.mouse.move(0, 0)
    at_widths(page, report, "lab-log1pexp-live")


def test_a_passing_report_is_one_line_and_the_sweep_is_drawn_when_asked(checked, expected_surrogate):
    page = checked
    report = output_of(page, 2).locator(".jp-gradmagic-report")
    report.wait_for(timeout=TIMEOUT)
    assert report.locator(".jp-gradmagic-badge").inner_text().lower() == "surrogate gradient (declared)"
    assert report.locator(":scope > .jp-gradmagic-surrogate-line").inner_text() == surrogate_line(expected_surrogate)
    details = report.locator(":scope > details.jp-gradmagic-details")
    assert details.get_attribute("open") is None, "a passing report's details are folded"
    at_widths(page, report, "lab-straight-through-folded")
    details.locator("> summary").click()
    sweep = open_section(report, "sweep-section")
    assert "The sweep is computed when asked" in sweep.inner_text()
    sweep.locator("input[name='sweep-from']").fill("-2.5")
    sweep.locator("input[name='sweep-to']").fill("2.5")
    sweep.get_by_role("button", name="Sweep").click()
    chart = report.locator(".jp-gradmagic-sweep-section svg.jp-gradmagic-sweep-svg")
    chart.wait_for(timeout=TIMEOUT)
    labels = {
        "custom": "surrogate (custom gradient)",
        "numerical": "true derivative (finite differences)",
        "autodiff": "autodiff",
    }
    for series, label in labels.items():
        curve = chart.locator(f"path[data-series='{series}']")
        assert curve.get_attribute("d").startswith("M") and curve.locator("title").text_content() == label
    assert chart.locator(".jp-gradmagic-sweep-jump").count() == 6  # round's jumps at the half-integers
    box = chart.bounding_box()
    assert box["width"] > 500 and box["height"] > 250, box  # drawn at a readable size
    assert report.locator(".jp-gradmagic-status").inner_text().startswith("Swept in")
    assert report.locator(":scope > details.jp-gradmagic-details").get_attribute("open") is not None, "kept open"
    at_widths(page, report, "lab-straight-through-swept")


def test_a_recheck_updates_the_report_in_place_and_the_notebook_saves_it(checked, folders):
    page = checked
    report = output_of(page, 3).locator(".jp-gradmagic-report")
    report.wait_for(timeout=TIMEOUT)
    assert report.locator(".jp-gradmagic-badge").inner_text().lower() == "passes"
    report.locator("input[name='inputs']").fill("x=tf.constant([-1., 2.])")
    report.get_by_role("button", name="Re-check").click()
    report.locator(".jp-gradmagic-badge.jp-gradmagic-fail").wait_for(timeout=TIMEOUT)
    problem = report.locator(".jp-gradmagic-problem[data-code='fd-mismatch']")
    assert "x[0]" in problem.locator(".jp-gradmagic-where").inner_text()
    assert report.locator(".jp-gradmagic-status").inner_text().startswith("Re-checked in")
    assert report.locator("input[name='inputs']").input_value() == "x=tf.constant([-1., 2.])"
    at_widths(page, report, "lab-rechecked-fails")
    report.locator("input[name='rtol']").fill("-1")
    report.get_by_role("button", name="Re-check").click()
    status = report.locator(".jp-gradmagic-status.jp-gradmagic-error")
    status.wait_for(timeout=TIMEOUT)
    assert "rtol must be positive" in status.inner_text()
    assert report.locator(".jp-gradmagic-badge").inner_text().lower() == "fails", "a bad option keeps the report"

    save(page)
    root, _ = folders

    def rechecked(cells) -> bool:
        data = next((o["data"] for o in cells[3]["outputs"] if MIME_TYPE in o.get("data", {})), {})
        return data.get(MIME_TYPE, {}).get("verdict") == "fail"

    cells = saved_cells(root / "log1pexp.ipynb", rechecked)
    data = next(o["data"] for o in cells[3]["outputs"] if MIME_TYPE in o.get("data", {}))
    html = "".join(data["text/html"])
    assert "FAILS" in html and "fd-mismatch" in html, "the static fallback saved is the re-checked report's"
    assert "square(x) fails" in "".join(data["text/plain"])


def test_the_palette_inserts_the_template_and_the_load_ext_cell(browser, lab, folders, page):
    root, _ = folders
    write_notebook(root / "empty.ipynb", ["import numpy as np"])
    # The kernel idle first: the notebook takes the focus back when its kernel comes up, which closes the palette.
    open_notebook(page, lab, "empty.ipynb")
    page.locator(".jp-NotebookPanel:visible .jp-Cell").first.locator(".jp-InputArea-prompt").click()
    # The modal palette closes when something else takes the focus (the notebook does, as its kernel comes up): a
    # user opens it again, and so does this test, at most three times.
    for attempt in range(3):
        page.locator(".lm-MenuBar-itemLabel", has_text="View").click()
        page.locator(".lm-Menu-itemLabel", has_text="Command Palette").click()
        try:
            page.locator("#command-palette input").fill("Insert custom-gradient cell", timeout=10_000)
            page.locator("#command-palette .lm-CommandPalette-item.lm-mod-active").get_by_text(
                "Insert custom-gradient cell"
            ).wait_for(timeout=10_000)
            page.keyboard.press("Enter")
            page.locator(".jp-NotebookPanel:visible .jp-Cell").nth(2).wait_for(timeout=10_000)
            break
        except PlaywrightTimeout:
            if attempt == 2:
                raise
    save(page)
    cells = saved_cells(root / "empty.ipynb", lambda cells: len(cells) == 3)
    sources = ["".join(cell["source"]) for cell in cells]
    assert sources[0] == "import numpy as np" and sources[1] == "%load_ext gradmagic"
    assert sources[2].startswith("%%custom_gradient --check x=tf.constant([-5., 0., 100.])")
    assert "def log1pexp(x):" in sources[2] and "return tf.math.log(1 + e), grad" in sources[2]


@pytest.fixture(scope="module")
def saved(checked, folders):
    """log1pexp.ipynb saved by JupyterLab, with its widgets' state (the server saves it, as users can ask)."""
    save(checked)
    root, _ = folders
    saved_cells(root / "log1pexp.ipynb", lambda cells: len(cells) >= 4)
    return root / "log1pexp.ipynb"


def test_a_saved_notebook_reopened_where_no_kernel_exists_shows_the_same_view(browser, folders, saved, expected):
    root, state = folders
    assert "widgets" in json.loads(saved.read_text())["metadata"], "JupyterLab saved the widget state"
    with JupyterLab(root, state / "server-without-kernels", kernels=False) as bare:
        reopened = browser.new_page(viewport={"width": WIDTHS[0], "height": 1000})
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
            assert report.locator(".jp-gradmagic-badge").inner_text().lower() == "passes with warnings"
            assert report.locator(".jp-gradmagic-controls").count() == 0, "no kernel: no controls"
            rows = open_section(report, "shapes").locator("tbody tr")
            assert [rows.nth(i).locator("td").nth(1).inner_text() for i in range(rows.count())] == [
                t.name for t in expected.tensors
            ]
            graph = open_section(report, "graph-section").locator(".jp-gradmagic-graph")
            assert int(graph.get_attribute("data-node-count")) == len(expected.graph.nodes)
            assert "Error displaying widget" not in reopened.locator(".jp-Notebook").inner_text()
            at_widths(reopened, report, "lab-reopened-without-kernel")

            surrogate = cells.nth(2).locator(".jp-gradmagic-report")
            assert surrogate.locator(".jp-gradmagic-badge").inner_text().lower() == "surrogate gradient (declared)"
            surrogate.locator(":scope > details.jp-gradmagic-details > summary").click()
            chart = open_section(surrogate, "sweep-section").locator("svg.jp-gradmagic-sweep-svg")
            chart.wait_for()  # the sweep asked for in the live view was saved with the output
            details = tooltip_after_hovering(reopened, chart)  # the middle of the sweep: inside the box
            assert "surrogate (custom gradient): 1" in details and "true derivative (finite differences): 0" in details
            reopened.mouse.move(0, 0)

            rechecked = cells.nth(3).locator(".jp-gradmagic-report")
            assert rechecked.locator(".jp-gradmagic-badge").inner_text().lower() == "fails", "the re-check was saved"
        finally:
            reopened.close()


def test_the_report_reads_the_same_in_notebook_7(browser, lab, folders, page):
    root, _ = folders
    write_notebook(root / "nb7.ipynb", ["%load_ext gradmagic", LOG1PEXP_CELL, ABS_CELL])
    open_in_notebook7(page, lab, "nb7.ipynb")
    for cell in range(3):
        run_cell(page, cell, cell + 1)
    report = output_of(page, 1).locator(".jp-gradmagic-widget .jp-gradmagic-report")
    report.wait_for(timeout=TIMEOUT)
    assert report.locator(".jp-gradmagic-badge").inner_text().lower() == "passes with warnings"
    at_widths(page, report, "notebook7-log1pexp-live")
    failing = output_of(page, 2).locator(".jp-gradmagic-report")
    failing.locator("input[name='inputs']").fill("x=tf.constant([-1., 2.])")
    failing.get_by_role("button", name="Re-check").click()
    failing.locator(".jp-gradmagic-badge.jp-gradmagic-fail").wait_for(timeout=TIMEOUT)
    open_section(failing, "numerics")
    at_widths(page, failing, "notebook7-rechecked-fails")


def test_hostile_text_in_a_report_is_shown_literally_and_never_runs(browser, lab, folders, page):
    root, _ = folders
    write_notebook(
        root / "hostile.ipynb",
        [
            "import sys\n"
            f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
            "import report_fixtures, gradmagic, tensorflow as tf\n"
            "from IPython.display import display\n"
            "from gradmagic.render.words import report_data\n"
            "report = gradmagic.check(report_fixtures.hostile_op(), tf.constant(1.0))\n"
            f"display({{{MIME_TYPE!r}: report_data(report), 'text/plain': 'hostile'}}, raw=True)\n"
            "report"
        ],
    )
    open_notebook(page, lab, "hostile.ipynb")
    run_cell(page, 0, 1)
    report = page.locator(".jp-gradmagic-report")
    report.first.wait_for(timeout=TIMEOUT)
    page.locator(".jp-gradmagic-widget .jp-gradmagic-badge").wait_for(timeout=TIMEOUT)  # the live widget too
    signature = report.first.locator(".jp-gradmagic-signature").inner_text()
    assert report_fixtures.HOSTILE in signature
    assert f"{report_fixtures.HOSTILE} broke" in report.first.inner_text()
    assert page.locator('img[src="x"]').count() == 0
    assert page.evaluate("window.__pwned") is None
    screenshot(report.first, "hostile-report.png")


def nbconvert(*arguments: str, cwd: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", *arguments],
        capture_output=True,
        text=True,
        env={**os.environ, **ISOLATED_ENV},
        timeout=600,
        cwd=cwd,
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def exports(tmp_path_factory, saved):
    """HTML exports of a notebook executed by nbclient (`nbconvert --execute`), and of the one JupyterLab saved
    with its widgets' state."""
    folder = tmp_path_factory.mktemp("exports")
    write_notebook(folder / "executed.ipynb", ["%load_ext gradmagic", LOG1PEXP_CELL, ABS_CELL])
    nbconvert("--to", "html", "--execute", "executed.ipynb", cwd=folder)
    shutil.copy(saved, folder / "saved-by-jupyterlab.ipynb")
    nbconvert("--to", "html", "saved-by-jupyterlab.ipynb", cwd=folder)
    return {"executed": folder / "executed.html", "saved-by-jupyterlab": folder / "saved-by-jupyterlab.html"}


def check_static_reports(page, name: str, verdicts: list[str]) -> None:
    """Every report of the opened export: its verdict, problems, shapes and figures, shown."""
    reports = page.locator(".gradmagic-report")
    assert reports.count() == len(verdicts), f"{name}: {reports.count()} reports"
    for k, verdict in enumerate(verdicts):
        report = reports.nth(k)
        assert report.is_visible() and report.bounding_box()["height"] > 20, f"{name}: report {k} is blank"
        assert verdict.upper() in report.inner_text()
        for summary in report.locator("summary").all():  # open every section, as a reader may
            if summary.is_visible() and summary.locator("xpath=..").get_attribute("open") is None:
                summary.click()
        text = report.inner_text()
        assert "Shapes" in text and "input" in text and "output" in text, f"{name}: report {k} shows no shapes"
        images = report.locator("img")
        assert images.count() > 0, f"{name}: report {k} has no figure"
        loaded = page.evaluate(
            "report => [...report.querySelectorAll('img')].every(img => img.complete && img.naturalWidth > 0)",
            report.element_handle(),
        )
        assert loaded, f"{name}: a figure of report {k} did not load"
        screenshot(report, f"export-{name}-report{k}.png")


@pytest.mark.parametrize("name", ["executed", "saved-by-jupyterlab"])
def test_an_html_export_shows_every_report_with_the_network_refused(browser, exports, name):
    context = browser.new_context(viewport={"width": WIDTHS[0], "height": 1000})
    refused = []

    def refuse(route):
        refused.append(route.request.url)
        route.abort()

    context.route("http*://**/*", refuse)  # no CDN, no network: what a reader offline (or behind a proxy) has
    page = context.new_page()
    try:
        page.goto(exports[name].as_uri())
        page.wait_for_load_state("load")
        verdicts = (
            ["passes with warnings", "passes"]
            if name == "executed"
            else [
                "passes with warnings",
                "surrogate gradient (declared)",
                "fails",
            ]
        )
        check_static_reports(page, name, verdicts)
        assert page.locator(".jupyter-widgets, .widget-area").filter(has_text="passes").count() == 0
    finally:
        context.close()


def test_an_html_export_reads_with_javascript_off_as_on_github(browser, exports):
    """GitHub's notebook view runs no script: the static output must be what a reader sees."""
    context = browser.new_context(viewport={"width": WIDTHS[1], "height": 1000}, java_script_enabled=False)
    context.route("http*://**/*", lambda route: route.abort())
    page = context.new_page()
    try:
        page.goto(exports["saved-by-jupyterlab"].as_uri())
        check_static_reports(page, "no-javascript", ["passes with warnings", "surrogate gradient (declared)", "fails"])
        assert "fd-mismatch" in page.locator(".gradmagic-report").nth(2).inner_text()
    finally:
        context.close()


def test_recheck_all_runs_every_custom_gradient_cell_and_nothing_else(checked, exports):
    """Last: it runs the cells again (the exports and the reopened notebook were made from the first runs)."""
    page = checked
    page.locator(".jp-NotebookPanel-toolbar").get_by_text("Re-check all").click()
    wait_for_prompt(page, 3, 7)
    prompts = page.locator(".jp-Notebook .jp-Cell .jp-InputArea-prompt")
    assert "[1]" in prompts.nth(0).inner_text() and "[5]" in prompts.nth(1).inner_text()


# Issue 32: a registered gradient's report (its registration said first) and an override that did nothing.
REGISTERED_CELLS = [
    "%load_ext gradmagic\nimport numpy as np\nimport tensorflow as tf",
    "%%register_gradient PyFunc --check x=tf.constant([1., 2., 3.])\n"
    "def square_grad(op, grad):\n    return grad * op.inputs[0]\n\n"
    "def py_square(x):\n    return tf.numpy_function(np.square, [x], tf.float32)",
    '@tf.RegisterGradient("HalfMatMul")\ndef half(op, grad):\n    a, b = op.inputs\n'
    "    return tf.matmul(grad, b, transpose_b=True), tf.matmul(a, grad, transpose_a=True)\n\n"
    "@tf.function\ndef product(a, b):\n"
    '    with tf.compat.v1.get_default_graph().gradient_override_map({"Matmul": "HalfMatMul"}):\n'
    "        return tf.matmul(a, b)",
    "%gradcheck product a=tf.ones([2, 3]) b=tf.ones([3, 2])",
]


@pytest.mark.parametrize("ui", ["lab", "notebook7"])
def test_registered_gradient_reports_read_in_jupyterlab_and_notebook_7(browser, lab, folders, page, ui):
    root, _ = folders
    name = f"registered-{ui}.ipynb"
    write_notebook(root / name, REGISTERED_CELLS)
    (open_notebook if ui == "lab" else open_in_notebook7)(page, lab, name)
    for cell in range(4):
        run_cell(page, cell, cell + 1)
    wrong = output_of(page, 1).locator(".jp-gradmagic-widget .jp-gradmagic-report")
    wrong.locator(".jp-gradmagic-badge.jp-gradmagic-fail").wait_for(timeout=TIMEOUT)  # the view drawn, not only begun
    assert wrong.locator(".jp-gradmagic-badge").inner_text().lower() == "fails"
    assert "dx is 0.5 times the finite differences at every element" in " ".join(wrong.inner_text().split())
    notes = " ".join(open_section(wrong, "notes").inner_text().split())  # what the magic did, in the notes
    assert "registered as square_grad for PyFunc ops" in notes.replace("`", ""), notes
    at_widths(page, wrong, f"{ui}-registered-py-func")
    unused = output_of(page, 3).locator(".jp-gradmagic-widget .jp-gradmagic-report")
    unused.locator(".jp-gradmagic-badge.jp-gradmagic-fail").wait_for(timeout=TIMEOUT)
    text = " ".join(unused.inner_text().split())
    assert "did nothing" in text and "MatMul" in text, text
    at_widths(page, unused, f"{ui}-override-unused")
