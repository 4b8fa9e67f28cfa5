"""The report widget and the shared-notebook fallback, as users meet them.

In a real kernel (what JupyterLab, Notebook 7 and VS Code talk to): what a
magic cell displays and that re-running a cell frees its old widget. In a
real IPython shell: the widget's Re-check, its progress bar and its escaping.
"""

import base64
import subprocess
import sys

import tensorflow as tf
from conftest import ISOLATED_ENV, ROOT, run

import gradmagic
from gradmagic.render.html import render_html

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
SQUARE_CELL = """%%custom_gradient --check x=tf.constant([1.0, 2.0, 3.0])
def square(x):
    def grad(upstream):
        return upstream * 2 * x
    return x * x, grad
"""


def test_a_magic_cell_in_a_kernel_displays_the_widget_and_the_fallbacks(kernel):
    _, client = kernel
    assert run(client, "%load_ext gradmagic\nimport tensorflow as tf")["status"] == "ok"
    ran = run(client, SQUARE_CELL, cell_id="cell-1")
    assert ran["status"] == "ok", ran["shown"]
    (bundle,) = [output for output in ran["outputs"] if "text/html" in output]  # a progress bar may come first
    assert {WIDGET_VIEW, "text/html", "image/png", "text/plain"} <= set(bundle)
    assert bundle[WIDGET_VIEW]["model_id"] in ran["opened"]
    assert base64.b64decode(bundle["image/png"]).startswith(b"\x89PNG")
    assert "square(x) passes" in bundle["text/plain"] and "PASSES" in bundle["text/html"]
    assert "<script" not in bundle["text/html"].lower()


def test_running_a_cell_again_closes_its_old_widget_and_frees_it(kernel):
    _, client = kernel
    run(client, "%load_ext gradmagic\nimport tensorflow as tf\nimport ipywidgets")
    count = "print(len(ipywidgets.widgets.widget._instances))"
    first = run(client, SQUARE_CELL, cell_id="cell-1")
    after_first = int(run(client, count)["shown"])
    for _ in range(3):
        again = run(client, SQUARE_CELL, cell_id="cell-1")
        still_open = set(first["opened"]) - set(first["closed"])  # a progress bar closes in its own run
        assert still_open and still_open <= set(again["closed"]), "the previous run's widgets stay open"
        first = again
    assert int(run(client, count)["shown"]) == after_first

    other = run(client, "%gradcheck square", cell_id="cell-2")
    assert other["closed"] == [] and other["outputs"][-1][WIDGET_VIEW]
    deleted = run(client, "1 + 1", cell_id="cell-3", deleted_cells=["cell-2"])
    assert set(other["opened"]) <= set(deleted["closed"])


def test_recheck_updates_the_widget_in_place(nb):
    nb.ok("""
%%custom_gradient --check x=tf.constant([1.0, 2.0])
def square(x):
    def grad(upstream):
        return upstream * 2 * tf.abs(x)   # wrong for negative x
    return x * x, grad
""")
    report = nb.shell.user_ns["_"]
    widget = gradmagic.widget(report)
    assert widget.inputs.value == "x=tf.constant([1.0, 2.0])"
    assert "PASSES" in widget.header.value and widget.report.verdict == "pass"

    widget.inputs.value = "x=tf.constant([-1.0, 2.0])"
    widget.recheck_button.click()
    assert widget.report.verdict == "fail" and "fd-mismatch" in widget.report.codes()
    assert "FAILS" in widget.header.value and "x[0]" in widget.header.value
    assert "Re-checked" in widget.status.value

    widget.sweep_from.value, widget.sweep_to.value = "-4", "4"
    widget.rtol.value = "1e-3"
    widget.recheck_button.click()
    assert widget.report.sweep.points[0] == -4 and widget.report.sweep.points[-1] == 4
    assert widget.report.options["rtol"] == 1e-3

    before = widget.report
    widget.inputs.value = "x=no_such_name"
    widget.recheck_button.click()
    assert widget.report is before, "a failed re-check must keep the report shown"
    assert "NameError" in widget.status.value and "no_such_name" in widget.status.value
    widget.rtol.value = "-1"
    widget.recheck_button.click()
    assert "rtol must be positive" in widget.status.value and widget.report is before
    widget.close()
    assert widget.recheck_button.comm is None and widget.tabs.children[2].layout.comm is None


def test_a_long_recheck_shows_its_progress(nb):
    nb.ok("""
import time
import gradmagic
def slow(x):
    time.sleep(0.6)   # each eager call (a check makes one or two)
    def grad(upstream):
        return upstream * 2 * x
    return x * x, grad
report = gradmagic.check(slow, tf.constant([1.0, 2.0]))
""")
    widget = gradmagic.widget(nb.shell.user_ns["report"])
    seen = []
    widget.progress.observe(lambda change: seen.append((change["new"], widget.progress.layout.display)), "value")
    widget.recheck_button.click()
    assert seen and all(display is None for _, display in seen), "the bar was not shown while checking"
    assert widget.progress.layout.display == "none", "the bar stays after the check"


def test_a_report_without_a_context_shows_disabled_controls():
    report = gradmagic.Report.from_dict(gradmagic.check(tf.custom_gradient(_square), tf.constant([1.0, 2.0])).to_dict())
    widget = gradmagic.widget(report)
    assert widget.recheck_button.disabled and widget.inputs.disabled
    assert "run its cell again" in widget.recheck_button.tooltip
    widget.close()


def test_every_user_string_is_escaped_in_the_html_and_the_widget():
    name = "<img src=x onerror=alert(1)>"

    def op(x):
        def grad(upstream):
            return upstream * 3 * x  # wrong: a problem whose message names the op

        return x * x, grad

    op.__name__ = op.__qualname__ = name
    report = gradmagic.check(op, tf.constant([1.0, 2.0]))
    assert not report.ok
    html = render_html(report)
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<script" not in html.lower() and "onerror=alert" not in html.replace(
        "&lt;img src=x onerror=alert(1)&gt;", ""
    )
    widget = gradmagic.widget(report)
    for child in (widget.header, widget.problems, widget.shapes, widget.numerics, widget.sweep, widget.graph):
        assert "<img src=x" not in child.value
    widget.close()


def test_text_plain_reads_well_in_a_terminal(nb):
    run_ = nb.ok(SQUARE_CELL)
    assert "square(x) passes" in run_.stdout
    assert "<" not in run_.stdout.split("\n")[0]


def test_an_executed_notebook_exports_to_html_with_the_report(tmp_path):
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("%load_ext gradmagic\nimport tensorflow as tf"),
        nbformat.v4.new_code_cell(SQUARE_CELL),
    ]
    path = tmp_path / "shared.ipynb"
    nbformat.write(notebook, path)
    done = subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", "--execute", str(path)],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, **ISOLATED_ENV},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    exported = (tmp_path / "shared.html").read_text()
    assert "square(x)" in exported and "PASSES" in exported and "data:image/png;base64," in exported
    assert "application/vnd.jupyter.widget-state+json" in exported  # the widget too, where JavaScript runs


def test_demo_notebook_exports_to_html_with_nbconvert(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter",
            "nbconvert",
            "--to",
            "html",
            "--execute",
            "--output-dir",
            str(tmp_path),
            str(ROOT / "demo.ipynb"),
        ],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, **ISOLATED_ENV},
        timeout=900,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    exported = (tmp_path / "demo.html").read_text()
    assert "log1pexp(x)" in exported and "application/vnd.jupyter.widget-state+json" in exported


def _square(x):
    def grad(upstream):
        return upstream * 2 * x

    return x * x, grad


def test_a_freed_reports_context_is_dropped_and_an_id_reused_by_a_new_report_counts_as_newest():
    from gradmagic.notebook import contexts

    op = tf.custom_gradient(_square)
    kept = [gradmagic.check(op, tf.constant([1.0, 2.0])) for _ in range(contexts.KEPT_CONTEXTS)]
    for _ in range(3):  # reports freed at once: their ids are free to be given again
        gradmagic.check(op, tf.constant([1.0, 2.0]))
    newest = gradmagic.check(op, tf.constant([3.0, 4.0]))
    assert all(reference() is not None for reference, _ in contexts._contexts.values())
    assert contexts.context_of(newest) is not None and list(contexts._contexts)[-1] == id(newest)
    assert contexts.context_of(kept[0]) is None and all(contexts.context_of(r) is not None for r in kept[1:])
