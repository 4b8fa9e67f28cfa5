"""Memory of a notebook cell re-run 200 times, and the cost of displaying a report, against anchors in one run.

In a real kernel (ipykernel, started with jupyter_client), each cell is sent
as JupyterLab sends it, naming its cell (`cellId`), and run RERUNS times
after WARMUP runs; the kernel's resident memory is read before and after.

A. a `%%custom_gradient` cell that checks and displays its report widget
   (graph, heatmaps, sweep, HTML and PNG fallbacks). Target: under 50 MB.
B. anchor: the same cell with `--quiet`, which checks but displays nothing:
   what the check itself costs in memory.
C. anchor: a cell displaying a plain ipywidgets VBox of the same HTML and PNG,
   as one would build it by hand without closing it: what an unmanaged
   widget leaks.

Then the time to display one report (widget, HTML, PNG summary, text) against
the check itself, warm.

Run: .venv/bin/python benchmarks/bench_widget.py
"""

import os
import sys
import tempfile
import time

from jupyter_client.manager import start_new_kernel

WARMUP = 20
RERUNS = 200

CELL = """%%custom_gradient --check x=tf.constant([-5., 0., 100.]){flags}
def log1pexp(x):
    e = tf.exp(x)
    def grad(upstream):
        return upstream * (1 - 1 / (1 + e))
    return tf.math.log(1 + e), grad
"""

PLAIN_WIDGET = """import ipywidgets
from gradmagic.notebook.display import report_bundle
report = gradmagic.check(log1pexp, tf.constant([-5., 0., 100.]))
bundle = report_bundle(report)
ipywidgets.VBox([ipywidgets.HTML(bundle["text/html"]), ipywidgets.Image(value=bundle["image/png"])])
"""

RSS = "import psutil; print(psutil.Process().memory_info().rss)"
WIDGETS = "import ipywidgets; print(len(ipywidgets.widgets.widget._instances))"

DISPLAY_COST = """
import time
from gradmagic.notebook.display import report_bundle
from gradmagic.render import figures
x = tf.constant([-5., 0., 100.])
checks, displays = [], []
for _ in range(10):
    start = time.perf_counter()
    report = gradmagic.check(log1pexp, x)
    checks.append(time.perf_counter() - start)
    start = time.perf_counter()
    report_bundle(report)
    displays.append(time.perf_counter() - start)
checks.sort(); displays.sort()
print(checks[5], displays[5], sum(len(v) if isinstance(v, (str, bytes)) else 0 for v in report_bundle(report).values()))
"""


def execute(client, code: str, cell_id: str | None = None) -> str:
    content = {"code": code, "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False}
    request = client.session.msg("execute_request", content, metadata={"cellId": cell_id} if cell_id else {})
    client.shell_channel.send(request)
    printed, failed = [], None
    while True:
        message = client.get_iopub_msg(timeout=600)
        if message["parent_header"].get("msg_id") != request["header"]["msg_id"]:
            continue
        if message["msg_type"] == "stream":
            printed.append(message["content"]["text"])
        elif message["msg_type"] == "error":
            failed = message["content"]["evalue"]
        elif message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
            break
    if failed:
        raise RuntimeError(f"the cell failed: {failed}\n{code}")
    return "".join(printed).strip()


def growth(client, code: str, cell_id: str) -> tuple[float, float, int, int]:
    """(MB grown over RERUNS runs, seconds per run, widgets before, widgets after)."""
    for _ in range(WARMUP):
        execute(client, code, cell_id)
    before, widgets_before = int(execute(client, RSS)), int(execute(client, WIDGETS))
    start = time.perf_counter()
    for _ in range(RERUNS):
        execute(client, code, cell_id)
    seconds = (time.perf_counter() - start) / RERUNS
    after, widgets_after = int(execute(client, RSS)), int(execute(client, WIDGETS))
    return (after - before) / 2**20, seconds, widgets_before, widgets_after


def main() -> None:
    folder = tempfile.mkdtemp(prefix="gradmagic-bench-")
    env = {
        **os.environ,
        **{name: os.path.join(folder, name) for name in ("IPYTHONDIR", "JUPYTER_CONFIG_DIR", "MPLCONFIGDIR")},
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    print(
        f"{RERUNS} re-runs of one cell in a real kernel, after {WARMUP} warm-up runs (Python {sys.version.split()[0]})"
    )
    rows = []
    for label, code in (
        ("A. %%custom_gradient, report widget", CELL.format(flags="")),
        ("B. anchor: the same check, --quiet (nothing shown)", CELL.format(flags=" --quiet")),
        ("C. anchor: a hand-made VBox(HTML, Image), not closed", PLAIN_WIDGET),
    ):
        manager, client = start_new_kernel(kernel_name="python3", env=env, cwd=folder)
        try:
            execute(client, "%load_ext gradmagic\nimport gradmagic\nimport tensorflow as tf")
            execute(client, CELL.format(flags=" --no-check"))
            rows.append((label, *growth(client, code, "the-cell")))
            if label.startswith("A"):
                check, display, size = execute(client, DISPLAY_COST).split()
        finally:
            client.stop_channels()
            manager.shutdown_kernel(now=True)
    print(f"{'cell':<55} {'memory growth':>14} {'per run':>9} {'live widgets before/after':>27}")
    for label, grown, seconds, before, after in rows:
        print(f"{label:<55} {grown:>11.1f} MB {seconds * 1e3:>6.0f} ms {before:>13} / {after}")
    a, b, c = (row[1] for row in rows)
    print(f"\nwidget display over the check alone: {a - b:+.1f} MB in {RERUNS} re-runs (target: A under 50 MB)")
    print(f"hand-made widget, not closed: {c:.1f} MB, {c / max(a, 0.1):.1f}x A")
    print(
        f"\ndisplaying one report (widget + HTML + PNG summary + text), warm: {float(display) * 1e3:.0f} ms; "
        f"the check itself: {float(check) * 1e3:.0f} ms; bundle {int(size) / 1024:.0f} KiB"
    )


if __name__ == "__main__":
    main()
