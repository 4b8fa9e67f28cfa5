"""Run gradmagic code under another Keras backend, in a fresh Python (KERAS_BACKEND is fixed at import)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from gradmagic.report import Report

_EPILOGUE = """
import json as _json, sys as _sys
_sys.stdout.write("\\n@@gradmagic-result@@" + _json.dumps(RESULT) + "\\n")
"""


def run_in_backend(backend: str, code: str, timeout: float = 300) -> object:
    """Run `code` with KERAS_BACKEND=`backend`; it must set RESULT to something JSON can hold, which is returned."""
    environment = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code) + _EPILOGUE],
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    marker = "@@gradmagic-result@@"
    if completed.returncode != 0 or marker not in completed.stdout:
        raise AssertionError(f"{backend} subprocess failed (exit {completed.returncode}):\n{completed.stderr[-4000:]}")
    return json.loads(completed.stdout.rsplit(marker, 1)[1])


def check_in_backend(backend: str, setup: str, call: str, timeout: float = 300) -> Report:
    """`gradmagic.check(<call>)` after `setup` (which defines the op and inputs), under `backend`: the Report."""
    code = f"import gradmagic\nfrom keras import ops\nimport numpy as np\n{textwrap.dedent(setup)}\n"
    code += f"RESULT = gradmagic.check({call}, framework='keras').to_dict()\n"
    return Report.from_dict(run_in_backend(backend, code, timeout))
