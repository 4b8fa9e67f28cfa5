"""Kernel memory over 200 re-runs of a checking cell, for each kind of client, against anchors in the same run.

In a real kernel (ipykernel, started with jupyter_client), a `%%custom_gradient --check` cell of the seed's op
(log1pexp) is run WARMUP times, then RERUNS times; the kernel's resident memory, its live widgets, its open comms,
the re-check contexts gradmagic keeps and the Report and ReportWidget objects alive (counted through `gc`; IPython's
output cache `Out` holds one Report per run) are read before and after, after a collection.
Each series runs in a kernel of its own, for each kind of client:

* JupyterLab (and Notebook 7): each execute request names its cell (`cellId`) and carries `deletedCells` and
  `recordTiming`, which is how gradmagic tells JupyterLab from other front-ends (`notebook/display.py`): the report
  gets a live widget, which the cell's next run must close;
* VS Code: the cell id alone: a widget view, closed by the cell's next run too;
* no cell id (nbclient, `jupyter console`, other clients): no widget; the report is the cell's value.

Series (A and B for every client, the anchors C and D for JupyterLab and no cell id, E once):

A. the cell run again unchanged, its report shown. Target: under 50 MB over 200 re-runs.
B. the cell edited before each run (a new constant in it: a new op each time, as when editing), its report shown.
   Target: under 50 MB.
C. anchor: A with `--quiet` (the check passes, nothing is shown): what checking costs, display aside.
D. anchor: B with `--quiet`.
E. anchor: the same op decorated by hand with `tf.custom_gradient`, edited each run, its tape gradient printed:
   what TensorFlow itself keeps for each new op (no gradmagic in the cell).

Then, in a JupyterLab kernel, the time to display one report (its data, HTML, text and live widget, published to
the client) against the check itself, warm, and the size of what is sent.

Measured here (2 cores shared with other jobs; MB over 200 re-runs after 20 warm-up runs; live widgets and
ReportWidgets alive after; the README's Benchmarks section has the same):

    client                  A. unchanged   B. edited   widgets  ReportWidgets
    before (97267f1)
      JupyterLab              109.0 MB     117.2 MB        2       220 (every closed one: anywidget's file watch)
      no cell id               50.5 MB      58.3 MB        0         0 (re-check contexts of 8 old ops kept)
      no cell id, when issue 20 was filed: 1,480 MB and 14,740 widgets alive
    after
      JupyterLab               34.4 MB      42.2 MB        2         1
      VS Code                  34.4 MB      42.2 MB        2         1
      no cell id               32.7 MB      40.4 MB        0         0
    anchors: C (--quiet) 12.2-20.4 MB, D (--quiet, edited) 20.0-28.7 MB, E (by hand, edited) 4.5 MB

What is left is mostly IPython's: every cell's value (`Out`, `_N`) and, since IPython 9, every output's data
(`history_manager.outputs`), about 0.1 MB per report. Displaying one report, warm: 13-16 ms against 31-34 ms for
the check; the first output sent (the widget and its view included) is 84 KiB.

Run: .venv/bin/python benchmarks/bench_widget.py [--reruns N] [--warmup N] [--only AB] [--clients jupyterlab,none]
(all series and clients, 200 re-runs: about 15 minutes here)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jupyter_client.manager import start_new_kernel

ROOT = Path(__file__).resolve().parents[1]

CELL = """%%custom_gradient --check x=tf.constant([-5., 0., 100.]){flags}
def log1pexp(x):
    e = tf.exp(x) * {factor}
    def grad(upstream):
        return upstream * (1 - 1 / (1 + e))
    return tf.math.log(1 + e), grad
"""

HAND = """@tf.custom_gradient
def log1pexp_by_hand(x):
    e = tf.exp(x) * {factor}
    def grad(upstream):
        return upstream * (1 - 1 / (1 + e))
    return tf.math.log(1 + e), grad

x = tf.constant([-5., 0., 100.])
with tf.GradientTape() as tape:
    tape.watch(x)
    y = log1pexp_by_hand(x)
print(tape.gradient(y, x).shape)
"""

SETUP = f"""import sys
sys.path.insert(0, {str(ROOT)!r})  # this checkout's gradmagic, whatever is installed
%load_ext gradmagic
import comm, gc, json, psutil, ipywidgets, tensorflow as tf, gradmagic
from gradmagic.notebook import contexts
from gradmagic.report import Report
from gradmagic.render.widget import ReportWidget
assert gradmagic.__file__.startswith({str(ROOT)!r}), gradmagic.__file__
"""

#: What the kernel holds, read after a collection (the probe cell's own objects aside).
PROBE = """gc.collect()
_probe = {"rss": psutil.Process().memory_info().rss,
          "widgets": len(ipywidgets.widgets.widget._instances),
          "comms": len(comm.get_comm_manager().comms),
          "contexts": len(contexts._contexts),
          "reports": sum(isinstance(o, Report) for o in gc.get_objects()),
          "report_widgets": sum(isinstance(o, ReportWidget) for o in gc.get_objects()),
          "outputs": len(Out)}
print(json.dumps(_probe))
del _probe
"""

DISPLAY_COST = """import time
from IPython.display import display
x = tf.constant([-5., 0., 100.])
_checks, _displays = [], []
for _ in range(11):
    _start = time.perf_counter()
    _report = gradmagic.check(log1pexp, x)
    _checks.append(time.perf_counter() - _start)
    _start = time.perf_counter()
    display(_report)
    _displays.append(time.perf_counter() - _start)
print(json.dumps({"check": sorted(_checks)[5], "display": sorted(_displays)[5]}))
"""


def metadata_of(client_kind: str, cell_id: str) -> dict:
    """The execute request's metadata: JupyterLab's (the cell, the cells deleted since, timing off), VS Code's (the
    cell alone), or none."""
    if client_kind == "jupyterlab":
        return {"cellId": cell_id, "deletedCells": [], "recordTiming": False}
    if client_kind == "vscode":
        return {"cellId": cell_id}
    return {}


def execute(client, code: str, metadata: dict, timeout: float = 600) -> dict:
    """Run `code` as the client would; what it printed and how many bytes of output data it sent."""
    content = {"code": code, "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False}
    request = client.session.msg("execute_request", content, metadata=metadata)
    client.shell_channel.send(request)
    printed, failed, sent = [], None, 0
    while True:
        message = client.get_iopub_msg(timeout=timeout)
        if message["parent_header"].get("msg_id") != request["header"]["msg_id"]:
            continue
        kind = message["msg_type"]
        if kind == "stream":
            printed.append(message["content"]["text"])
        elif kind == "error":
            failed = f"{message['content']['ename']}: {message['content']['evalue']}"
        elif kind in ("display_data", "execute_result", "comm_open"):
            sent += len(json.dumps(message["content"]))
        elif kind == "status" and message["content"]["execution_state"] == "idle":
            break
    if failed:
        raise RuntimeError(f"the cell failed: {failed}\n{code}")
    return {"printed": "".join(printed).strip(), "sent": sent}


SERIES = {
    "A": ("report shown, re-run unchanged", CELL, "", False),
    "B": ("report shown, edited each run", CELL, "", True),
    "C": ("anchor: --quiet, re-run unchanged", CELL, " --quiet", False),
    "D": ("anchor: --quiet, edited each run", CELL, " --quiet", True),
    "E": ("anchor: decorated by hand, edited", HAND, "", True),
}
CLIENTS = {"jupyterlab": "JupyterLab (cellId)", "vscode": "VS Code (cellId only)", "none": "no cell id (nbclient)"}


def measure(env: dict, folder: str, client_kind: str, series: str, warmup: int, reruns: int) -> dict:
    """One series in a fresh kernel: memory and live objects before and after `reruns` runs."""
    _, template, flags, edited = SERIES[series]
    manager, client = start_new_kernel(kernel_name="python3", env=env, cwd=folder, stderr=subprocess.DEVNULL)
    factors = (f"{1 + k * 1e-9:.12f}" if edited else "1.0" for k in range(warmup + reruns))
    cell_metadata = metadata_of(client_kind, "the-cell")
    probe_metadata = metadata_of(client_kind, "probe")
    try:
        execute(client, SETUP, probe_metadata)

        def probe() -> dict:
            return json.loads(execute(client, PROBE, probe_metadata)["printed"])

        for _ in range(warmup):
            execute(client, template.format(flags=flags, factor=next(factors)), cell_metadata)
        before = probe()
        start = time.perf_counter()
        for _ in range(reruns):
            execute(client, template.format(flags=flags, factor=next(factors)), cell_metadata)
        seconds = (time.perf_counter() - start) / reruns
        after = probe()
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    return {"before": before, "after": after, "seconds": seconds}


def display_cost(env: dict, folder: str) -> dict:
    """The check and the display of its report (widget included), warm, in a JupyterLab kernel; bytes sent."""
    manager, client = start_new_kernel(kernel_name="python3", env=env, cwd=folder, stderr=subprocess.DEVNULL)
    try:
        execute(client, SETUP, metadata_of("jupyterlab", "setup"))
        one = execute(client, CELL.format(flags="", factor="1.0"), metadata_of("jupyterlab", "cell"))
        ran = execute(client, DISPLAY_COST, metadata_of("jupyterlab", "cost"))
        return {**json.loads(ran["printed"]), "sent": one["sent"]}
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reruns", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--only", default="ABCDE", help="series to run, e.g. AB")
    parser.add_argument("--clients", default="jupyterlab,vscode,none")
    parser.add_argument("--no-display-cost", action="store_true")
    arguments = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="gradmagic-bench-widget-")
    env = {
        **os.environ,
        **{name: os.path.join(folder, name) for name in ("IPYTHONDIR", "JUPYTER_CONFIG_DIR", "MPLCONFIGDIR")},
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    print(
        f"{arguments.reruns} re-runs of one cell in a real kernel, after {arguments.warmup} warm-up runs "
        f"(Python {sys.version.split()[0]}); memory read after gc.collect()"
    )
    header = (
        f"{'client':<24} {'series':<40} {'growth':>9} {'per run':>8} "
        f"{'widgets':>11} {'comms':>9} {'contexts':>9} {'Reports':>9} {'RWidgets':>9} {'Out':>9}"
    )
    print(header)
    results: dict[tuple[str, str], dict] = {}
    clients = arguments.clients.split(",")
    for series in arguments.only:
        for client_kind in clients:
            if (series in "CDE" and client_kind == "vscode") or (series == "E" and client_kind != clients[0]):
                continue  # nothing shown in the anchors: the widget client is JupyterLab's; E once
            result = measure(env, folder, client_kind, series, arguments.warmup, arguments.reruns)
            results[client_kind, series] = result
            before, after = result["before"], result["after"]
            grown = (after["rss"] - before["rss"]) / 2**20

            def pair(name: str) -> str:
                return f"{before[name]}->{after[name]}"

            print(
                f"{CLIENTS[client_kind]:<24} {series}. {SERIES[series][0]:<37} {grown:>6.1f} MB "
                f"{result['seconds'] * 1e3:>5.0f} ms {pair('widgets'):>11} {pair('comms'):>9} {pair('contexts'):>9} "
                f"{pair('reports'):>9} {pair('report_widgets'):>9} {pair('outputs'):>9}",
                flush=True,
            )

    def growth(client_kind: str, series: str) -> float | None:
        result = results.get((client_kind, series))
        return None if result is None else (result["after"]["rss"] - result["before"]["rss"]) / 2**20

    print()
    for client_kind in clients:
        for shown, anchor in (("A", "C"), ("B", "D")):
            a = growth(client_kind, shown)
            c = growth(client_kind if client_kind != "vscode" else clients[0], anchor)
            if a is not None:
                verdict = "met" if a < 50 * arguments.reruns / 200 else "MISSED"
                over = f", {a - c:+.1f} MB over the same check with nothing shown" if c is not None else ""
                print(
                    f"{CLIENTS[client_kind]}: {SERIES[shown][0]}: {a:.1f} MB "
                    f"(target under {50 * arguments.reruns / 200:.0f} MB: {verdict}){over}"
                )
    if not arguments.no_display_cost:
        cost = display_cost(env, folder)
        print(
            f"\ndisplaying one report (data, HTML, text, live widget; published), warm, median of 11: "
            f"{cost['display'] * 1e3:.1f} ms; the check itself: {cost['check'] * 1e3:.1f} ms "
            f"({cost['display'] / cost['check']:.2f}x); sent {cost['sent'] / 1024:.0f} KiB"
        )


if __name__ == "__main__":
    main()
