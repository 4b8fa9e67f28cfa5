"""A real `jupyter lab` (gradmagic's built extension in it) on a free port, and a real headless Chromium from
Debian's packages driven by Playwright: for the browser tests and the browser benchmark.

Everything JupyterLab writes (settings, workspaces, runtime files) goes to the folder given; both are stopped
by `close()` (or `with`)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import TimeoutError as PlaywrightTimeout

CHROMIUM = "/usr/bin/chromium"
#: Chromium on a machine with a closed network: no background connections, no sandbox (root in a container).
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class JupyterLab:
    """`jupyter lab` serving `root`, its state under `state`; with `kernels=False` it offers no kernel; with
    `save_widget_state`, notebooks are saved with their widgets' state (JupyterLab's setting, off by default)."""

    def __init__(self, root: Path, state: Path, kernels: bool = True, save_widget_state: bool = False):
        self.root, self.state = root, state
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        settings = state / "lab-settings" / "@jupyterlab" / "apputils-extension"
        settings.mkdir(parents=True, exist_ok=True)
        # No news or update toasts over the notebook.
        (settings / "notification.jupyterlab-settings").write_text(
            json.dumps({"fetchNews": "false", "checkForUpdates": False})
        )
        if save_widget_state:
            widgets = state / "lab-settings" / "@jupyter-widgets" / "jupyterlab-manager"
            widgets.mkdir(parents=True, exist_ok=True)
            (widgets / "plugin.jupyterlab-settings").write_text(json.dumps({"saveState": True}))
        env = {
            **os.environ,
            "JUPYTERLAB_SETTINGS_DIR": str(state / "lab-settings"),
            "JUPYTERLAB_WORKSPACES_DIR": str(state / "workspaces"),
            "JUPYTER_RUNTIME_DIR": str(state / "runtime"),
        }
        command = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            f"--port={self.port}",
            "--ip=127.0.0.1",
            "--ServerApp.token=",
            "--ServerApp.password=",
            "--ServerApp.disable_check_xsrf=True",
            f"--ServerApp.root_dir={root}",
            "--LabApp.news_url=None",
        ]
        if not kernels:  # a server that offers no kernel at all: notebooks open with "No Kernel"
            command.append("--KernelSpecManager.allowed_kernelspecs=no-kernel-here")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.append("--allow-root")
        self.log = open(state / "jupyterlab.log", "w")
        self.process = subprocess.Popen(command, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self._wait_until_up()

    def _wait_until_up(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited: {(self.state / 'jupyterlab.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/status", timeout=2):
                    return
            except OSError:
                time.sleep(0.3)
        raise TimeoutError(f"jupyter lab did not answer in {timeout} s")

    def api(self, path: str, method: str = "GET") -> object:
        request = urllib.request.Request(f"{self.url}/api/{path}", method=method)
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        return json.loads(body) if body else None

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()

    def __enter__(self) -> JupyterLab:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def launch_chromium(playwright):
    """Debian's Chromium, headless (Playwright's own browser download cannot run here)."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)


def open_in_notebook7(page, lab: JupyterLab, name: str) -> None:
    """Open `name` in Notebook 7 (served by the same server) and wait until its kernel is idle."""
    page.goto(f"{lab.url}/notebooks/{name}")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)


def open_notebook(page, lab: JupyterLab, name: str, kernel: bool = True) -> None:
    """Open `name` in JupyterLab and wait until the page is up (and, with `kernel`, until the kernel is idle).

    Each page gets a workspace of its own, so it shows this notebook alone (not the tabs of other pages)."""
    page.goto(f"{lab.url}/lab/workspaces/{name.replace('.', '-')}-{free_port()}/tree/{name}")
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
    if kernel:
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)


def run_cell(page, cell: int, count: int, timeout: float = 180_000) -> None:
    """Click into cell `cell` and press Shift+Enter, as a user does, until the kernel has run it (`[count]`).

    A key pressed while JupyterLab is still wiring the kernel can be lost: press again if the cell shows no
    sign of running after a while (never once it runs or ran)."""
    target = page.locator(".jp-Notebook .jp-Cell").nth(cell)
    prompt = target.locator(".jp-InputArea-prompt")
    for _ in range(3):
        click_through(page, target.locator(".jp-InputArea-editor"))
        page.keyboard.press("Shift+Enter")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and prompt.inner_text().strip() in ("[ ]:", ""):
            time.sleep(0.2)
        if prompt.inner_text().strip() not in ("[ ]:", ""):
            break
    wait_for_prompt(page, cell, count, timeout)


def click_through(page, locator) -> None:
    """Click `locator`; where a JupyterLab dialog stays over it, fail saying what the dialog says."""
    try:
        locator.click()
    except PlaywrightTimeout:
        dialog = page.locator(".jp-Dialog")
        if dialog.count():
            shown = dialog.first.inner_text()
            raise AssertionError(f"a JupyterLab dialog stayed over the notebook: {shown!r}") from None
        raise


def wait_for_prompt(page, cell: int, count: int, timeout: float = 180_000) -> None:
    """Until cell `cell` shows execution count `count`: the kernel has run it."""
    page.locator(".jp-Notebook .jp-Cell").nth(cell).locator(f".jp-InputArea-prompt:has-text('[{count}]')").wait_for(
        timeout=timeout
    )


def write_notebook(path: Path, cells: list[str]) -> None:
    """A notebook of code cells, no outputs, for the python3 kernel."""
    notebook = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": f"cell-{i}",
                "metadata": {},
                "outputs": [],
                "source": source,
            }
            for i, source in enumerate(cells)
        ],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(notebook, indent=1))
