"""The JupyterLab extension's own tests: its TypeScript unit tests (jest) run on reports the real checker makes
here, and the built extension is installed where JupyterLab finds it."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import report_fixtures

from gradmagic.render import format_number
from gradmagic.render.figures import heatmap_blocks, jumps
from gradmagic.render.graph import graph_svg
from gradmagic.render.words import report_data, watch_data
from gradmagic.report import schema, watch_schema


def watch_fixture():
    """A watch of an eager step through three ops: correct, wrong by a factor, NaN gradient at an all-zero row."""
    import tensorflow as tf

    import gradmagic

    @tf.custom_gradient
    def fine(x):
        y = tf.tanh(x)
        return y, lambda dy: dy * (1 - y * y)

    @tf.custom_gradient
    def doubled(x):
        return x * x, lambda dy: dy * 3 * x

    @tf.custom_gradient
    def row_norm(x):
        norm = tf.norm(x, axis=1, keepdims=True)
        return norm, lambda dy: dy * x / norm

    with gradmagic.watch() as watch:
        for rows in ([[1.0, 2.0], [3.0, -1.0]], [[0.5, 1.0], [0.0, 0.0]]):
            x = tf.constant(rows)
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = tf.reduce_sum(row_norm(doubled(fine(x))))
            tape.gradient(y, x)
    return watch.report


ROOT = Path(__file__).resolve().parents[1]
LABEXTENSION = ROOT / "labextension"
BIN = Path(sys.executable).parent


def as_array(values) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=float)


@pytest.fixture(scope="module")
def fixture_folder(tmp_path_factory) -> Path:
    """Each report as `<name>.json`, as the kernel sends it to the views (its data and its words), and
    `python-figures.txt`: what the Python figures draw of each that the lab view's figures must draw alike (the
    heatmaps drawn, the sweep points whose finite differences the sweep figure marks at a jump, off scale, and the
    nodes and edges the graph drawing draws, name scopes folded, and where it puts the saved tensors' sizes)."""
    folder = tmp_path_factory.mktemp("report-fixtures")
    drawn = {}
    for name, report in report_fixtures.reports().items():
        data = report_data(report)
        jsonschema.validate(data, schema())
        (folder / f"{name}.json").write_text(json.dumps(data, allow_nan=False, indent=1))
        drawn[name] = {
            "heatmaps": [[b.input, b.output] for b in heatmap_blocks(report.numerics)],
            "jumps": None,
            "drawn": None,
        }
        if report.graph is not None:
            drawn[name]["labels"] = [
                [float(x), float(y), size]
                for x, y, size in re.findall(
                    r'<text x="([-\d.]+)" y="([-\d.]+)" font-size="10" fill="#d62728"[^>]*>([^<]+)</text>',
                    graph_svg(report.graph),
                )
            ]
            folded = report.graph.folded()
            drawn[name]["drawn"] = {
                "nodes": [[node.id, node.label, node.count] for node in folded.nodes],
                "edges": [[edge.source, edge.target, edge.saved] for edge in folded.edges],
            }
        if report.sweep is not None:
            sweep = report.sweep
            off_scale = jumps(np.array(sweep.points, float), as_array(sweep.values), as_array(sweep.numerical))
            drawn[name]["jumps"] = np.flatnonzero(off_scale).tolist()
    (folder / "python-figures.txt").write_text(json.dumps(drawn))
    # A watch (a correct op, a wrong one, one whose gradient goes NaN at a zero row), as the kernel sends it.
    watch = watch_data(watch_fixture())
    jsonschema.validate(watch, watch_schema())
    (folder / "watch-report.txt").write_text(json.dumps(watch, allow_nan=False))
    # Numbers as Python's figures write them at 4 to 10 significant digits.
    numbers = [0.249969, 0.25, 1 / 3, -2 / 3, 12345.678, 99999.5, 2.5e-7, -0.0012345, 123456.789, 0.00099996, 0.0]
    (folder / "python-numbers.txt").write_text(
        json.dumps({"numbers": numbers, "formatted": [[format_number(n, d) for d in range(4, 11)] for n in numbers]})
    )
    return folder


def test_typescript_unit_tests_pass_on_reports_from_the_python_checker(fixture_folder):
    jlpm = shutil.which("jlpm", path=str(BIN)) or shutil.which("jlpm")
    assert jlpm, "jlpm (from jupyterlab) is not installed: run ./dev test"
    assert (LABEXTENSION / "node_modules").is_dir(), "labextension/node_modules is missing: run ./dev test"
    env = {**os.environ, "GRADMAGIC_REPORT_FIXTURES": str(fixture_folder), "CI": "true"}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    result = subprocess.run(
        [jlpm, "jest", "--colors=false"], cwd=LABEXTENSION, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "failed" not in result.stderr.split("Tests:")[-1], result.stderr
    assert " passed" in result.stderr.split("Tests:")[-1], result.stderr


def test_jupyter_lists_the_built_extension_enabled_and_ok():
    result = subprocess.run([str(BIN / "jupyter"), "labextension", "list"], capture_output=True, text=True, timeout=120)
    listing = (result.stdout + result.stderr).replace("\x1b[32m", "").replace("\x1b[0m", "")
    line = next((line for line in listing.splitlines() if line.strip().startswith("gradmagic ")), "")
    assert "enabled" in line and "OK" in line, listing


def test_a_wheel_built_here_carries_the_extension_and_the_live_view(tmp_path):
    """`python -m build` works with what ./dev installs, and the wheel needs nothing built after `pip install`."""
    import zipfile

    done = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = tmp_path.glob("gradmagic-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "gradmagic/static/widget.js" in names and "gradmagic/static/widget.css" in names
    assert "gradmagic/static/stub.js" in names  # what each widget model carries instead of the view
    assert any(name.endswith("share/jupyter/labextensions/gradmagic/package.json") for name in names)
    assert "gradmagic/schema/report.schema.json" in names
