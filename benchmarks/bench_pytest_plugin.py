"""What `pytest --gradmagic` costs a test suite: the sample project's suite (`tests/sample_project`, 26 tests of Keras
layers with custom gradients, its two planted bugs in place) run with the plugin, against the same suite without it.

What the user waits for is the whole run: each run is a fresh `python -m pytest` process in a copy of the project
(TensorFlow's import, collection, the tests, and with the plugin the recording and the checks at the end), as CI
runs it. Rounds alternate a plain run and a watched one, so that a change in the machine's load falls on both; the
script prints each pair's wall times and ratio, then the median and the range, and the plugin's own account of its
checks (time, budget used) from its summary. Target of issue 34: at most 2x the suite's own run time, checks
included.

Run: .venv/bin/python benchmarks/bench_pytest_plugin.py [ROUNDS]
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[1] / "tests" / "sample_project"
TABLE = '\n[tool.gradmagic]\nsurrogates = ["round_ste", "reverse_gradient"]\n'


def run(folder: Path, *args: str) -> tuple[float, str]:
    """One pytest process in `folder`: its wall time and output."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "200"}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
    )
    took = time.perf_counter() - started
    if "26 passed" not in done.stdout and "2 failed, 31 passed" not in done.stdout:
        raise SystemExit(f"the suite did not run as expected:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return took, done.stdout


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with tempfile.TemporaryDirectory(prefix="bench-pytest-plugin-") as scratch:
        folder = Path(scratch) / "layerkit"
        shutil.copytree(SAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
        (folder / "pyproject.toml").write_text((folder / "pyproject.toml").read_text() + TABLE)
        run(folder)  # warm the file system's caches (TensorFlow's files) before anything is timed
        ratios = []
        for index in range(rounds):
            plain, _ = run(folder)
            watched, output = run(folder, "--gradmagic")
            checks = re.search(r"checks: ([\d.]+) s \((\d+) of at most (\d+) checks", output)
            ratios.append(watched / plain)
            print(
                f"round {index + 1}: plain {plain:.1f} s, --gradmagic {watched:.1f} s ({watched / plain:.2f}x); "
                f"its checks {checks.group(1)} s, {checks.group(2)} of at most {checks.group(3)}"
            )
        print(
            f"--gradmagic / plain: median {statistics.median(ratios):.2f}x, from {min(ratios):.2f}x to "
            f"{max(ratios):.2f}x over {rounds} rounds"
        )


if __name__ == "__main__":
    main()
