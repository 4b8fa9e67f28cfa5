"""Shared fixtures: a real IPython shell with gradmagic loaded, and real TensorFlow.

Jupyter, IPython and matplotlib write their config and caches to a temporary
folder for the whole session, never to the user's home.
"""

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

_CONFIG_ROOT = Path(tempfile.mkdtemp(prefix="gradmagic-tests-"))
ISOLATED_ENV = {
    "IPYTHONDIR": str(_CONFIG_ROOT / "ipython"),
    "JUPYTER_CONFIG_DIR": str(_CONFIG_ROOT / "jupyter-config"),
    "JUPYTER_DATA_DIR": str(_CONFIG_ROOT / "jupyter-data"),
    "JUPYTER_RUNTIME_DIR": str(_CONFIG_ROOT / "jupyter-runtime"),
    "MPLCONFIGDIR": str(_CONFIG_ROOT / "matplotlib"),
    "TF_CPP_MIN_LOG_LEVEL": "2",
}
os.environ.update(ISOLATED_ENV)

from IPython.core.interactiveshell import InteractiveShell  # noqa: E402 - after the environment is set
from IPython.utils.capture import capture_output  # noqa: E402
from traitlets.config import Config  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
#: Screenshots and other files kept from a run for a person to look at.
ARTIFACTS = ROOT / "test-artifacts"
#: A project of its own (its package and test suite), on which `pytest --gradmagic` is tried: never collected here.
collect_ignore = ["sample_project"]


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_CONFIG_ROOT, ignore_errors=True)


@dataclass
class CellRun:
    """What running one cell showed the user."""

    result: object  # IPython's ExecutionResult
    stdout: str
    stderr: str

    @property
    def error(self):
        return self.result.error_before_exec or self.result.error_in_exec

    @property
    def shown(self) -> str:
        return self.stdout + self.stderr


class Notebook:
    """A real IPython shell driven cell by cell, as a notebook drives its kernel."""

    def __init__(self, shell: InteractiveShell):
        self.shell = shell

    @property
    def ns(self) -> dict:
        return self.shell.user_ns

    def run(self, cell: str) -> CellRun:
        with capture_output(display=False) as captured:
            result = self.shell.run_cell(cell, store_history=True)
        return CellRun(result, captured.stdout, captured.stderr)

    def ok(self, cell: str) -> CellRun:
        """Run a cell that must succeed."""
        run = self.run(cell)
        assert run.error is None, f"cell failed:\n{cell}\n--- shown:\n{run.shown}"
        return run

    def fails(self, cell: str, error_type: type = Exception) -> CellRun:
        """Run a cell that must fail with `error_type`."""
        run = self.run(cell)
        assert isinstance(run.error, error_type), f"expected {error_type.__name__}, got {run.error!r}:\n{run.shown}"
        return run

    @property
    def last_cell_number(self) -> int:
        return self.shell.execution_count - 1


@pytest.fixture(scope="session")
def shell() -> InteractiveShell:
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    shell = InteractiveShell.instance(colors="nocolor", config=config)
    yield shell
    InteractiveShell.clear_instance()


@pytest.fixture
def nb(shell) -> Notebook:
    """A notebook with a fresh namespace, gradmagic loaded and TensorFlow imported as tf."""
    shell.reset(new_session=False)
    notebook = Notebook(shell)
    notebook.ok("%load_ext gradmagic")
    notebook.ok("import tensorflow as tf\nimport numpy as np")
    yield notebook
    shell.run_line_magic("unload_ext", "gradmagic")


def codes(report) -> list[str]:
    """The problem codes of a Report, in order."""
    return [p.code for p in report.problems]


def problem(report, code: str):
    """The first problem with `code` (failing with the whole report if there is none)."""
    found = [p for p in report.problems if p.code == code]
    assert found, f"no {code} in {codes(report)}:\n{report}"
    return found[0]


def run_python(code: str, timeout: float = 120) -> str:
    """Run `code` in a fresh Python of this environment (for what must start clean)."""
    import subprocess

    completed = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **ISOLATED_ENV},
        cwd=ROOT,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


@pytest.fixture
def kernel(tmp_path):
    """A real IPython kernel (ipykernel) in its own process, and a client talking to it."""
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel(kernel_name="python3", env={**os.environ, **ISOLATED_ENV}, cwd=str(tmp_path))
    yield manager, client
    client.stop_channels()
    manager.shutdown_kernel(now=True)


def run(
    client, code: str, timeout: float = 120, cell_id: str | None = None, deleted_cells=(), front_end: str = "jupyterlab"
) -> dict:
    """Execute `code` as a notebook frontend does: naming the cell if `cell_id`, with JupyterLab's and Notebook 7's
    other metadata (`deletedCells`, `recordTiming`) for `front_end` "jupyterlab", the cell id alone (as VS Code) for
    "notebook".

    Returns the reply's content plus `shown` (the text it printed, displayed
    or raised), `outputs` (the MIME bundles it displayed), `metadata` (each
    output's metadata), `opened` and `closed` (the comm ids it opened and
    closed), `states` (comm id -> the widget state it opened with and
    every update since) and `messages` (comm id -> the widget's own messages).
    """
    content = {
        "code": code,
        "silent": False,
        "store_history": True,
        "user_expressions": {},
        "allow_stdin": False,
        "stop_on_error": True,
    }
    metadata = {}
    if cell_id:
        metadata = {"cellId": cell_id}
        if front_end == "jupyterlab":
            metadata.update(deletedCells=list(deleted_cells), recordTiming=False)
    request = client.session.msg("execute_request", content, metadata=metadata)
    client.shell_channel.send(request)
    return {**_answer(client, request["header"]["msg_id"], timeout, shell_reply=True)}


def send_to_widget(client, comm_id: str, content: dict, timeout: float = 120) -> dict:
    """Send a widget's front-end message (`model.send(content)` in its view) to the kernel, as JupyterLab does, and
    collect what the kernel answers until it is idle (as `run`)."""
    data = {"method": "custom", "content": content}
    request = client.session.msg("comm_msg", {"comm_id": comm_id, "data": data})
    client.shell_channel.send(request)
    return _answer(client, request["header"]["msg_id"], timeout, shell_reply=False)


def _answer(client, message_id: str, timeout: float, shell_reply: bool) -> dict:
    shown, outputs, metadata, opened, closed, states, messages = [], [], [], [], [], {}, {}
    while True:
        message = client.get_iopub_msg(timeout=timeout)
        if message["parent_header"].get("msg_id") != message_id:
            continue
        content = message["content"]
        kind = message["msg_type"]
        if kind == "stream":
            shown.append(content["text"])
        elif kind in ("execute_result", "display_data"):
            outputs.append(content["data"])
            metadata.append(content.get("metadata") or {})
            shown.append(content["data"].get("text/plain", ""))
        elif kind == "error":
            shown.append(f"{content['ename']}: {content['evalue']}")
        elif kind == "comm_open":
            opened.append(content["comm_id"])
            states.setdefault(content["comm_id"], []).append(content["data"].get("state", {}))
        elif kind == "comm_msg" and content["data"].get("method") == "update":
            states.setdefault(content["comm_id"], []).append(content["data"]["state"])
        elif kind == "comm_msg" and content["data"].get("method") == "custom":
            messages.setdefault(content["comm_id"], []).append(content["data"]["content"])
        elif kind == "comm_close":
            closed.append(content["comm_id"])
        elif kind == "status" and content["execution_state"] == "idle":
            break
    reply = {}
    while shell_reply:
        reply = client.get_shell_msg(timeout=timeout)
        if reply["parent_header"].get("msg_id") == message_id:
            reply = reply["content"]
            break
    return {
        **reply,
        "shown": "".join(shown),
        "outputs": outputs,
        "metadata": metadata,
        "opened": opened,
        "closed": closed,
        "states": states,
        "messages": messages,
    }


def interrupted(manager, client, code: str, after: float = 5) -> dict:
    """Run `code`, press Ctrl-C (an interrupt request) `after` seconds in, when it is well under way, and return the
    reply's content (which must be a KeyboardInterrupt)."""
    import queue
    import time

    message_id = client.execute(code)
    time.sleep(after)
    manager.interrupt_kernel()
    deadline = time.time() + 60
    while True:
        try:
            reply = client.get_shell_msg(timeout=max(1, deadline - time.time()))
        except queue.Empty:
            pytest.fail("the interrupt did not stop the cell")
        if reply["parent_header"].get("msg_id") == message_id:
            break
    content = reply["content"]
    assert content["status"] == "error" and content["ename"] == "KeyboardInterrupt", content
    # ipykernel 7 aborts the requests it finds queued after an error until a callback on its event loop says stop;
    # a request sent the instant the error's reply arrives can land before that callback runs.
    time.sleep(1)
    return content


# -- the browser tests' (test_browser*.py): a real headless Chromium and a real JupyterLab ------------------------


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium through Playwright, for the module."""
    from jupyterlab_server import CHROMIUM, launch_chromium
    from playwright.sync_api import sync_playwright

    assert os.access(CHROMIUM, os.X_OK), f"{CHROMIUM} is missing: ./dev test installs Debian's chromium"
    with sync_playwright() as playwright:
        chromium = launch_chromium(playwright)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def lab(folders):
    """JupyterLab (and Notebook 7, the same server) in the module's `folders`, saving widget state with notebooks as
    users can ask it to."""
    from jupyterlab_server import JupyterLab

    root, state = folders
    with JupyterLab(root, state / "server", save_widget_state=True) as server:
        yield server
