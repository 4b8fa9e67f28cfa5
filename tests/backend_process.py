"""Run gradmagic code under another Keras backend, in a fresh Python (KERAS_BACKEND is fixed at import)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap

from gradmagic.report import Report

_EPILOGUE = """
import json as _json, sys as _sys
_sys.stdout.write("\\n@@gradmagic-result@@" + _json.dumps(RESULT) + "\\n")
"""


class BackendProcess:
    """A fresh Python running code under one Keras backend; `result()` waits for it and returns its RESULT."""

    def __init__(self, backend: str, code: str, timeout: float = 300):
        # The conftest's environment (config and caches in the session's temporary folder), imported here so that a
        # subprocess importing this module does not import the conftest (which would make a folder of its own).
        from conftest import ISOLATED_ENV

        self.backend, self.timeout = backend, timeout
        # Files, not pipes: several processes run at once, and a full pipe would stall one until it is read.
        self._stdout, self._stderr = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        environment = {**os.environ, **ISOLATED_ENV, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
        self._process = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code) + _EPILOGUE],
            env=environment,
            stdout=self._stdout,
            stderr=self._stderr,
            text=True,
        )

    def close(self) -> None:
        """Stop the process if it still runs (when its result was never asked for)."""
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._stdout.close()
        self._stderr.close()

    def result(self) -> object:
        try:
            returncode = self._process.wait(self.timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
            raise
        with self._stdout, self._stderr:
            self._stdout.seek(0)
            self._stderr.seek(0)
            stdout, stderr = self._stdout.read(), self._stderr.read()
        marker = "@@gradmagic-result@@"
        if returncode != 0 or marker not in stdout:
            raise AssertionError(f"{self.backend} subprocess failed (exit {returncode}):\n{stderr[-4000:]}")
        return json.loads(stdout.rsplit(marker, 1)[1])


def run_in_backend(backend: str, code: str, timeout: float = 300) -> object:
    """Run `code` with KERAS_BACKEND=`backend`; it must set RESULT to something JSON can hold, which is returned."""
    return BackendProcess(backend, code, timeout).result()


def check_in_backend(backend: str, setup: str, call: str, timeout: float = 300) -> Report:
    """`gradmagic.check(<call>)` after `setup` (which defines the op and inputs), under `backend`: the Report."""
    code = f"import gradmagic\nfrom keras import ops\nimport numpy as np\n{textwrap.dedent(setup)}\n"
    code += f"RESULT = gradmagic.check({call}, framework='keras').to_dict()\n"
    return Report.from_dict(run_in_backend(backend, code, timeout))
