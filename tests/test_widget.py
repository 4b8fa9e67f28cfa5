"""The report's display and live widget, as users meet them.

In a real kernel (what JupyterLab, Notebook 7 and VS Code talk to), driven through the messages those front-ends
send: one output per report, whatever the client; one widget model per report where a notebook front-end shows it
(its model id in the output's metadata for JupyterLab and Notebook 7, a widget view in the data elsewhere), none
for clients that name no cell; re-checks and sweeps asked through the widget's own messages, progress while they
run; a cell run again closes its old widget. The static fallbacks: escaped, self-contained, exported by nbconvert.
"""

import os
import subprocess
import sys

import tensorflow as tf
from conftest import ISOLATED_ENV, ROOT, run, send_to_widget

import gradmagic
from gradmagic.render.html import render_html
from gradmagic.render.words import report_data
from gradmagic.report import MIME_TYPE

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
SQUARE_CELL = """%%custom_gradient --check x=tf.constant([1.0, 2.0, 3.0])
def square(x):
    def grad(upstream):
        return upstream * 2 * x
    return x * x, grad
"""
ABS_CELL = """%%custom_gradient --check x=tf.constant([1.0, 2.0])
def square(x):
    def grad(upstream):
        return upstream * 2 * tf.abs(x)   # wrong for negative x
    return x * x, grad
"""


def report_output(ran: dict) -> tuple[dict, dict]:
    """The report's output of a cell run (a progress bar's output may come first): its data and metadata."""
    (found,) = [(data, meta) for data, meta in zip(ran["outputs"], ran["metadata"]) if MIME_TYPE in data]
    return found


def test_in_jupyterlab_a_report_is_one_output_its_widget_named_in_the_metadata(kernel):
    _, client = kernel
    assert run(client, "%load_ext gradmagic\nimport tensorflow as tf")["status"] == "ok"
    ran = run(client, SQUARE_CELL, cell_id="cell-1")
    assert ran["status"] == "ok", ran["shown"]
    data, metadata = report_output(ran)
    assert set(data) == {MIME_TYPE, "text/html", "text/plain"}, "no widget view: an export must show the HTML"
    model_id = metadata[MIME_TYPE]["model_id"]
    widgets = [comm for comm in ran["opened"] if ran["states"][comm][0].get("_model_name") == "AnyModel"]
    assert widgets == [model_id], "one widget model per report"
    state = ran["states"][model_id][0]
    assert state["report"]["verdict"] == "pass" and state["report"] == data[MIME_TYPE]
    assert state["controls"]["available"] and state["controls"]["inputs"] == "x=tf.constant([1.0, 2.0, 3.0])"
    # The model carries a stub, not the view: it finds the view once per page (the JupyterLab extension's), or asks
    # the kernel for it once (VS Code), so that a saved notebook holds no copy of the view per report.
    assert "as default" in state["_esm"] and len(state["_esm"]) < 2_000 and "_css" not in state
    asked = send_to_widget(client, model_id, {"action": "view"})
    (view,) = asked["messages"][model_id]
    assert view["gradmagic"] == "view" and "as default" in view["esm"] and ".jp-gradmagic-report" in view["css"]
    assert len(view["esm"]) > 20_000 and not asked["states"], "answered with a message, the model unchanged"
    assert "square(x) passes" in data["text/plain"]
    html = data["text/html"]
    assert "PASSES" in html and "<script" not in html.lower() and "data:image/svg+xml;base64," in html


def test_in_vs_code_the_widget_view_is_in_the_output_and_a_console_gets_no_widget(kernel):
    _, client = kernel
    run(client, "%load_ext gradmagic\nimport tensorflow as tf")
    vs_code = run(client, SQUARE_CELL, cell_id="cell-1", front_end="notebook")
    data, metadata = report_output(vs_code)
    assert data[WIDGET_VIEW]["model_id"] in vs_code["opened"] and MIME_TYPE not in metadata
    assert {MIME_TYPE, "text/html", "text/plain"} <= set(data)
    console = run(client, SQUARE_CELL)  # nbclient and jupyter console name no cell
    data, metadata = report_output(console)
    assert console["opened"] == [] and set(data) == {MIME_TYPE, "text/html", "text/plain"} and not metadata


def test_running_a_cell_again_closes_its_old_widget_and_frees_it(kernel):
    _, client = kernel
    run(client, "%load_ext gradmagic\nimport tensorflow as tf\nimport ipywidgets")
    count = "print(len(ipywidgets.widgets.widget._instances))"
    first = run(client, SQUARE_CELL, cell_id="cell-1")
    after_first = int(run(client, count)["shown"])
    for _ in range(3):
        again = run(client, SQUARE_CELL, cell_id="cell-1")
        still_open = set(first["opened"]) - set(first["closed"])
        assert still_open and still_open <= set(again["closed"]), "the previous run's widgets stay open"
        first = again
    assert int(run(client, count)["shown"]) == after_first

    other = run(client, "%gradcheck square", cell_id="cell-2")
    assert set(other["closed"]) <= set(other["opened"]), "another cell's widgets stay (a progress bar may close)"
    assert report_output(other)[1][MIME_TYPE]["model_id"] in set(other["opened"]) - set(other["closed"])
    deleted = run(client, "1 + 1", cell_id="cell-3", deleted_cells=["cell-2"])
    assert set(other["opened"]) - set(other["closed"]) <= set(deleted["closed"])


def test_the_widget_rechecks_and_sweeps_when_its_view_asks(kernel):
    _, client = kernel
    run(client, "%load_ext gradmagic\nimport tensorflow as tf")
    ran = run(client, ABS_CELL, cell_id="cell-1")
    model_id = report_output(ran)[1][MIME_TYPE]["model_id"]
    request = {"action": "recheck", "inputs": "x=tf.constant([-1.0, 2.0])", "eps": "", "rtol": "1e-3", "atol": ""}
    answered = send_to_widget(client, model_id, request)
    updates = answered["states"][model_id]
    report = next(update["report"] for update in updates if "report" in update)
    assert report["verdict"] == "fail" and "fd-mismatch" in [p["code"] for p in report["problems"]]
    assert report["options"]["rtol"] == 1e-3 and report["sweep"] is None
    assert not any("fallback" in update for update in updates), "the static HTML is not kept in the widget's state"
    (saved,) = answered["messages"][model_id]  # the output's new data, for the JupyterLab extension to save
    assert saved["gradmagic"] == "saved" and saved["data"][MIME_TYPE] == report
    assert "FAILS" in saved["data"]["text/html"] and "square(x) fails" in saved["data"]["text/plain"]
    statuses = [update["status"] for update in updates if "status" in update]
    assert statuses[0]["running"] and statuses[-1]["message"].startswith("Re-checked in")
    controls = [update["controls"] for update in updates if "controls" in update][-1]
    assert controls["inputs"] == "x=tf.constant([-1.0, 2.0])" and controls["rtol"] == "0.001"

    swept = send_to_widget(client, model_id, {"action": "sweep", "from": "-4", "to": "4", "element": None})
    status = [u["status"] for u in swept["states"][model_id] if "status" in u][-1]
    assert status["message"].startswith("Swept in"), status
    report = next(u["report"] for u in swept["states"][model_id] if "report" in u)
    assert report["sweep"]["points"][0] == -4 and report["sweep"]["points"][-1] == 4
    element = {"input": report["sweep"]["input"], "index": [1]}
    again = send_to_widget(client, model_id, {"action": "sweep", "from": "", "to": "", "element": element})
    report = next(u["report"] for u in again["states"][model_id] if "report" in u)
    assert report["sweep"]["index"] == [1], "the element swept is the one asked for"
    rechecked = send_to_widget(client, model_id, {**request, "inputs": "x=tf.constant([-1.0, 2.5])"})
    report = next(u["report"] for u in rechecked["states"][model_id] if "report" in u)
    assert report["sweep"]["index"] == [1], "a re-check keeps the element swept"

    bad = send_to_widget(client, model_id, {**request, "inputs": "x=no_such_name"})
    updates = bad["states"][model_id]
    assert not any("report" in update for update in updates), "a failed re-check keeps the report shown"
    status = [u["status"] for u in updates if "status" in u][-1]
    assert status["error"] and "NameError" in status["message"] and "no_such_name" in status["message"]
    negative = send_to_widget(client, model_id, {**request, "rtol": "-1"})
    status = [u["status"] for u in negative["states"][model_id] if "status" in u][-1]
    assert status["error"] and "rtol must be positive" in status["message"]


def test_a_long_recheck_reports_its_progress_as_it_runs(kernel):
    _, client = kernel
    run(client, "%load_ext gradmagic\nimport tensorflow as tf")
    ran = run(
        client,
        """%%custom_gradient --check x=tf.constant([1.0, 2.0])
import time
def slow(x):
    time.sleep(0.3)   # each eager call
    return x * x, lambda upstream: upstream * 2 * x
""",
        cell_id="cell-1",
    )
    model_id = report_output(ran)[1][MIME_TYPE]["model_id"]
    request = {"action": "recheck", "inputs": "", "eps": "", "rtol": "", "atol": ""}
    updates = send_to_widget(client, model_id, request)["states"][model_id]
    running = [u["status"] for u in updates if "status" in u and u["status"]["running"]]
    assert len(running) >= 3 and running[-1]["fraction"] > running[0]["fraction"], running
    assert {"structure", "finite differences"} <= {status["message"] for status in running}


def test_a_report_without_a_context_has_its_controls_off_and_says_why():
    report = gradmagic.Report.from_dict(gradmagic.check(tf.custom_gradient(_square), tf.constant([1.0, 2.0])).to_dict())
    widget = gradmagic.widget(report)
    try:
        assert not widget.controls["available"] and "run its cell again" in widget.controls["reason"]
        widget._on_message(widget, {"action": "recheck", "inputs": ""}, [])  # nothing to check: nothing happens
        assert widget.report == report_data(report) and not widget.status["running"]
    finally:
        widget.close()


def test_every_user_string_is_escaped_in_the_html():
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


def test_text_plain_reads_well_in_a_terminal(nb):
    run_ = nb.ok(SQUARE_CELL)
    assert "square(x) passes" in run_.stdout
    assert "<" not in run_.stdout.split("\n")[0]


def test_an_executed_notebook_exports_the_static_report_not_an_empty_widget(tmp_path):
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
        env={**os.environ, **ISOLATED_ENV},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    exported = (tmp_path / "shared.html").read_text()
    report = exported[exported.index('class="gradmagic-report ') :]  # the report's HTML itself, not data in a script
    assert "square(x)" in report and "PASSES" in report and "data:image/svg+xml;base64," in report
    assert "application/vnd.jupyter.widget-view+json" not in exported


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
        env={**os.environ, **ISOLATED_ENV},
        timeout=900,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    exported = (tmp_path / "demo.html").read_text()
    assert exported.count('class="gradmagic-report ') >= 5 and "log1pexp(x)" in exported
    assert "application/vnd.jupyter.widget-view+json" not in exported


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


def test_a_sweep_that_draws_nothing_says_why_instead_of_swept(kernel):
    _, client = kernel
    run(client, "%load_ext gradmagic\nimport tensorflow as tf")
    mixing = """%%custom_gradient --check x=tf.constant([1.0, 2.0, 3.0])
def mix(x):
    def grad(upstream):
        return tf.ones_like(x) * tf.reduce_sum(upstream)
    return x + tf.reduce_sum(x), grad
"""
    ran = run(client, mixing, cell_id="cell-1")
    model_id = report_output(ran)[1][MIME_TYPE]["model_id"]
    swept = send_to_widget(client, model_id, {"action": "sweep", "from": "", "to": "", "element": None})
    report = next(u["report"] for u in swept["states"][model_id] if "report" in u)
    assert report["sweep"] is None
    status = [u["status"] for u in swept["states"][model_id] if "status" in u][-1]
    assert status["message"].startswith("Nothing swept"), status
    assert "not diagonal: d output[0] / d x[1]" in status["message"] and "Swept in" not in status["message"]


def test_a_watch_report_is_one_live_widget_drawn_by_the_same_view(kernel):
    from gradmagic.report import WATCH_MIME_TYPE

    _, client = kernel
    run(client, "%load_ext gradmagic\nimport tensorflow as tf")
    run(client, "op = tf.custom_gradient(lambda x: (x * x, lambda dy: dy * 3 * x))")
    cell = "%%gradwatch\nx = tf.constant([1.0, 2.0])\nwith tf.GradientTape() as tape:\n"
    cell += "    tape.watch(x)\n    y = op(x)\n"
    ran = run(client, cell + "tape.gradient(y, x)", cell_id="cell-1")
    ((data, metadata),) = [(d, m) for d, m in zip(ran["outputs"], ran["metadata"]) if WATCH_MIME_TYPE in d]
    assert set(data) == {WATCH_MIME_TYPE, "text/html", "text/plain"}, "the static HTML for exports and GitHub"
    model_id = metadata[WATCH_MIME_TYPE]["model_id"]
    widgets = [comm for comm in ran["opened"] if ran["states"][comm][0].get("_model_name") == "AnyModel"]
    assert widgets == [model_id], "one widget model per watch"
    state = ran["states"][model_id][0]
    assert state["view"] == "watch" and state["report"] == data[WATCH_MIME_TYPE] and len(state["_esm"]) < 2_000
    assert not state["controls"]["available"] and "%gradcheck" in state["controls"]["reason"]
    vs_code = run(client, cell + "tape.gradient(y, x)", cell_id="cell-1", front_end="notebook")
    ((data, _),) = [(d, m) for d, m in zip(vs_code["outputs"], vs_code["metadata"]) if WATCH_MIME_TYPE in d]
    assert data[WIDGET_VIEW]["model_id"] in vs_code["opened"]
