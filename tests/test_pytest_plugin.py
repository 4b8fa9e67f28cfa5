"""`pytest --gradmagic`, tried as a team runs it: pytest itself, in a subprocess, over a project of its own
(`tests/sample_project`: the `layerkit` package of Keras layers with custom gradients, and an ordinary test suite
that never mentions gradmagic), copied to a temporary folder. Its two planted bugs (`PLANTED.md`): `layer_norm`'s
gradient forgets a term, `safe_norm`'s is NaN at a zero row that one test feeds it.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import pytest
from conftest import ISOLATED_ENV, ROOT

from gradmagic.report import WatchReport, watch_schema
from gradmagic.suite import settings as suite_settings
from gradmagic.watching.verdicts import allotted

SAMPLE = ROOT / "tests" / "sample_project"
SURROGATES = '[tool.gradmagic]\nsurrogates = ["round_ste", "reverse_gradient"]\n'
#: The project's own tests, as pytest counts them.
OWN_TESTS = 26


def planted() -> list[tuple[str, str]]:
    """(buggy, fixed) source texts of PLANTED.md, in its order."""
    blocks = re.findall(r"```python\n(.*?)\n```", (SAMPLE / "PLANTED.md").read_text(), re.S)
    return list(zip(blocks[0::2], blocks[1::2]))


def project(folder: Path, table: str = SURROGATES, fixed: bool = False, files: dict | None = None) -> Path:
    """A copy of the sample project in `folder`: its pyproject.toml with `table` added, its bugs fixed or not, and
    `files` (relative path: text) added."""
    shutil.copytree(SAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    pyproject = folder / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n" + table)
    if fixed:
        ops = folder / "layerkit" / "ops.py"
        source = ops.read_text()
        for buggy, right in planted():
            assert source.count(buggy) == 1
            source = source.replace(buggy, right)
        ops.write_text(source)
    for name, text in (files or {}).items():
        (folder / name).write_text(text)
    return folder


@dataclass
class Run:
    returncode: int
    output: str
    folder: Path

    def junit(self, name: str = "junit.xml") -> dict[str, ElementTree.Element]:
        """The JUnit XML's test cases by `classname::name`."""
        tree = ElementTree.parse(self.folder / name)
        return {f"{case.get('classname')}::{case.get('name')}": case for case in tree.iter("testcase")}

    def row(self, op: str) -> str:
        """The op's row in the terminal summary's table."""
        summary = self.output.split("= gradmagic: ", 1)[1]
        return next(line for line in summary.splitlines() if line.startswith(op + " "))


def pytest_in(folder: Path, *args: str, timeout: int = 600) -> Run:
    """pytest run in `folder` as a user runs it (its config files there; gradmagic's plugin from its entry point)."""
    env = {**os.environ, **ISOLATED_ENV, "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "200"}
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Run(done.returncode, done.stdout + done.stderr, folder)


def outcomes(cases: dict[str, ElementTree.Element]) -> dict[str, str]:
    """Each test case's outcome in a JUnit XML: passed, failure, error, skipped."""
    found = {}
    for name, case in cases.items():
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        found[name] = kinds[0] if kinds else "passed"
    return found


@pytest.fixture(scope="module")
def buggy(tmp_path_factory) -> Run:
    """The project with its bugs, its surrogates declared: under --gradmagic, with both reports and JUnit XML."""
    folder = project(tmp_path_factory.mktemp("buggy") / "layerkit")
    return pytest_in(folder, "--gradmagic", "--gradmagic-report=out/report", "--junitxml=junit.xml", "-rA")


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Run:
    """The same project without the plugin."""
    folder = project(tmp_path_factory.mktemp("plain") / "layerkit")
    return pytest_in(folder, "--junitxml=junit.xml")


def test_finds_the_planted_wrong_gradient(buggy):
    assert buggy.returncode == 1, buggy.output
    row = buggy.row("layer_norm")
    assert "layerkit/ops.py, line 49" in row and "failed" in row and "fd-mismatch" in row, row
    assert "FAILED layerkit/ops.py::gradmagic::layer_norm - layer_norm (layerkit/ops.py, line 49) fails" in buggy.output
    case = buggy.junit()["layerkit.ops.gradmagic::layer_norm"]
    failure = case.find("failure")
    assert failure is not None and "fd-mismatch" in failure.text and "reached by 10 tests" in failure.text


def test_finds_the_planted_nan_gradient(buggy):
    row = buggy.row("safe_norm")
    assert "failed" in row and "watched-nonfinite-gradient" in row, row
    assert re.search(
        r"first non-finite gradient: safe_norm, call \d+: dx\[1, 3, 0\] NaN \(48 elements\), from a finite upstream "
        r"gradient, in test tests/test_training.py::test_sequence_encoder_on_padded_batch",
        buggy.output,
    ), buggy.output
    failure = buggy.junit()["layerkit.ops.gradmagic::safe_norm"].find("failure")
    assert "nonfinite-gradient" in failure.text and "test_sequence_encoder_on_padded_batch" in failure.text


def test_the_suite_runs_as_without_the_plugin(buggy, plain):
    assert plain.returncode == 0, plain.output
    assert "= gradmagic" not in plain.output and "gradmagic::" not in plain.output  # off unless asked
    own = outcomes(plain.junit())
    assert len(own) == OWN_TESTS and set(own.values()) == {"passed"}
    watched = outcomes(buggy.junit())
    assert {name: watched[name] for name in own} == own
    ops = {name: outcome for name, outcome in watched.items() if ".gradmagic::" in name}
    assert ops == {
        "layerkit.ops.gradmagic::layer_norm": "failure",
        "layerkit.ops.gradmagic::safe_norm": "failure",
        "layerkit.ops.gradmagic::softplus": "passed",
        "layerkit.ops.gradmagic::round_ste": "passed",
        "layerkit.layers.gradmagic::reverse_gradient": "passed",
        "layerkit.layers.gradmagic::dense": "passed",
        "layerkit.activations.gradmagic::lecun_tanh": "passed",
    }
    assert re.search(rf"2 failed, {OWN_TESTS + 5} passed in", buggy.output)


def test_the_summary_lists_each_op_and_the_budget(buggy):
    summary = buggy.output.split("= gradmagic: ", 1)[1]
    assert summary.startswith("7 custom-gradient ops reached by 25 tests: 2 failed, 5 passed")
    dense = buggy.row("dense")  # defined in FusedDense.call: a new closure each call, one op
    assert "layerkit/layers.py, line 139" in dense and "passed" in dense
    assert re.search(r"^dense +layerkit/layers.py, line 139 +9 +52 \(47 compiled\) +passed", dense), dense
    assert "dense reached by tests/test_layers.py::test_fused_dense_matches_keras_dense[shape0]" in summary
    assert re.search(r"checks: [\d.]+ s \(22 of at most 100 checks\); inputs kept", summary), summary
    assert "pyproject.toml [tool.gradmagic]: max_checks 100, signatures 3" in summary
    assert "surrogates: reverse_gradient, round_ste" in summary


def test_the_reports_written(buggy):
    data = json.loads((buggy.folder / "out" / "report.json").read_text())
    jsonschema.validate(data, watch_schema())
    report = WatchReport.from_dict(data)
    assert report.verdict == "fail" and report.budget.used == 22 and report.budget.checks == 100
    layer_norm = report["layer_norm"]
    assert len(layer_norm.tests) == 10 and all(check.test for check in layer_norm.checked)
    assert report.first_nonfinite_gradient.test == "tests/test_training.py::test_sequence_encoder_on_padded_batch"
    page = (buggy.folder / "out" / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page.lower()
    assert not re.search(r"(src|href)=\"https?:", page)  # self-contained: nothing loads from the network
    assert "layer_norm" in page and "reached by 10 tests" in page
    assert f"report written: {buggy.folder / 'out' / 'report.json'}" in buggy.output


def test_a_right_project_passes_on_two_workers(tmp_path):
    """No false alarm on the fixed project; pytest-xdist's workers each watch their tests, their reports merged."""
    run = pytest_in(project(tmp_path / "layerkit", fixed=True), "--gradmagic", "-n", "2", "--junitxml=junit.xml")
    assert run.returncode == 0, run.output
    # Which worker runs which test is xdist's scheduling: where the zero row's call is among those a worker checks,
    # the fixed norm's gradient there (0, a subgradient at a kink) is a warning that says so, never a failure.
    assert re.search(r"7 custom-gradient ops reached by 25 tests: (1 passed \(warnings\), 6|7) passed", run.output)
    safe_norm = run.row("safe_norm")
    assert re.search(r" passed$", safe_norm) or "passed (warnings)  nondifferentiable-point (at call" in safe_norm
    assert "2 pytest-xdist workers each watched their tests" in run.output
    assert re.search(rf"{OWN_TESTS + 7} passed in", run.output)
    assert len(outcomes(run.junit())) == OWN_TESTS + 7


def test_declared_failures_and_surrogates(tmp_path):
    """xfail from the table (a reason of its own), a surrogate from a marker, an unexpected pass reported; -k works."""
    table = (
        '[tool.gradmagic]\nsurrogates = ["round_ste"]\n'
        'xfail = {layer_norm = "issue 12: the std term", softplus = "thought wrong"}\n'
    )
    marked = (
        "import pytest\n\n\n"
        '@pytest.mark.gradmagic(surrogate="reverse_gradient")\n'
        "def test_declares_the_reversal_a_surrogate():\n    pass\n"
    )
    folder = project(tmp_path / "layerkit", table, files={"tests/test_declared.py": marked})
    run = pytest_in(folder, "--gradmagic", "-k", "not padded", "-rA")
    assert run.returncode == 0, run.output
    assert re.search(r"XFAIL layerkit/ops.py::gradmagic::layer_norm - issue 12: the std term", run.output), run.output
    assert re.search(r"XPASS layerkit/ops.py::gradmagic::softplus - thought wrong", run.output), run.output
    assert "failed" not in run.row("reverse_gradient") and "passed" in run.row("reverse_gradient")
    assert "test_sequence_encoder_on_padded_batch" not in run.output  # deselected: neither run nor reaching an op
    assert "safe_norm" in run.output and "failed" not in run.row("safe_norm")
    strict = pytest_in(folder, "--gradmagic", "-k", "softplus_matches", "-o", "xfail_strict=true")
    assert strict.returncode == 1, strict.output
    assert "[XPASS(strict)] thought wrong: its check passes" in strict.output


BAD_TESTS = '''\
import tensorflow as tf

from layerkit.ops import softplus

CALLS = []


@tf.custom_gradient
def once_only(x):
    """An op with a side effect: it refuses to run twice."""
    CALLS.append(1)
    if len(CALLS) > 1:
        raise RuntimeError("once_only runs once per process")
    return x * 2.0, lambda upstream: upstream * 2.0


def test_an_op_that_cannot_be_checked():
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = once_only(x)
    assert tape.gradient(y, x).shape == (2,)


def test_with_a_watch_of_its_own():
    import gradmagic

    x = tf.constant([0.25])
    with gradmagic.watch() as watch:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = softplus(x)
        tape.gradient(y, x)
    assert watch.report.ok and watch.report["softplus"].calls == 1


def test_that_raises():
    x = tf.constant([0.5, -0.5])
    softplus(x)
    raise ValueError("this test fails on its own")


def test_never_reached_with_x():
    softplus(tf.constant([9.0]))
'''


def test_bad_input_stops_nothing(tmp_path):
    """A test that raises, an op that cannot be checked, a test with a watch of its own, under -x: reported per op,
    the suite's results intact."""
    folder = project(tmp_path / "layerkit", files={"tests/test_aa_bad.py": BAD_TESTS})
    run = pytest_in(folder, "--gradmagic", "-x", "--junitxml=junit.xml", "-rA")
    assert run.returncode == 1, run.output
    assert "FAILED tests/test_aa_bad.py::test_that_raises - ValueError: this test fails on its own" in run.output
    row = run.row("once_only")
    assert "not checked" in row and "called again at its call 1's inputs" in row, row
    assert re.search(
        r"SKIPPED \[1\] tests/test_aa_bad.py:8: not checked: called again at its call 1's inputs, which it ran at in "
        r"the watched code: The forward of `once_only` raised RuntimeError: once_only runs once per process",
        run.output,
    ), run.output
    assert "passed" in run.row("softplus")
    assert "2 custom-gradient ops reached by 2 tests" in run.output
    cases = outcomes(run.junit())
    assert cases["tests.test_aa_bad::test_that_raises"] == "failure"
    assert "tests.test_aa_bad::test_never_reached_with_x" not in cases  # -x stopped the session there
    assert cases["tests.test_aa_bad.gradmagic::once_only"] == "skipped"
    assert cases["tests.test_aa_bad::test_with_a_watch_of_its_own"] == "passed"
    assert "1 watch started inside this one (gradmagic.watch() in a test) ran as alone" in run.output
    summary = run.output.split("= gradmagic: ", 1)[1].split("short test summary info")[0]
    assert "test_with_a_watch_of_its_own" not in summary


def test_a_dead_worker_is_reported_per_op(tmp_path):
    crash = (
        "import os\n\nimport tensorflow as tf\n\nfrom layerkit.ops import softplus\n\n\n"
        "def test_dies():\n    softplus(tf.constant([1.0]))\n    os._exit(3)\n"
    )
    folder = project(tmp_path / "layerkit", files={"tests/test_dies.py": crash})
    run = pytest_in(folder, "--gradmagic", "-n", "2", "-k", "dies or lecun", "-rA")
    assert run.returncode == 1, run.output
    assert "worker 'gw" in run.output and "crashed while running 'tests/test_dies.py::test_dies'" in run.output
    row = run.row("softplus")
    assert re.search(r"not checked: pytest-xdist worker gw\d died before its checks", row), row
    assert "passed" in run.row("lecun_tanh")
    assert re.search(r"pytest-xdist worker gw\d died \([^)]*, while tests/test_dies.py::test_dies ran\)", run.output)


def test_the_budget_is_kept(tmp_path):
    folder = project(tmp_path / "layerkit", SURROGATES + "max_checks = 3\n")
    run = pytest_in(folder, "--gradmagic", "-k", "test_ops", "-rA")
    assert run.returncode == 0, run.output
    assert re.search(r"checks: [\d.]+ s \(3 of at most 3 checks, \d+ kept calls? left out\)", run.output), run.output
    unchecked = [line for line in run.output.splitlines() if "was spent on the ops reached before it" in line]
    assert unchecked and all(line.startswith("SKIPPED") or "not checked" in line for line in unchecked)


@pytest.mark.parametrize(
    "table, said",
    [
        ('rtol = "tight"', r"pyproject.toml, line {line}: \[tool.gradmagic\] rtol: rtol must be a number, not 'tight'"),
        ("rtoll = 1e-3", r"line {line}: \[tool.gradmagic\] rtoll is not an option of gradmagic's \(they are atol, eps"),
        ('memory_limit = "lots"', r"memory_limit must be bytes: a whole number or a size such as \"256 MiB\""),
        ("xfail = [3]", r"xfail must name ops: a string or a list of strings, not \[3\]"),
    ],
)
def test_a_mistake_in_the_table_is_named(tmp_path, table, said):
    folder = project(tmp_path / "layerkit", f"[tool.gradmagic]\n{table}\n")
    line = (folder / "pyproject.toml").read_text().splitlines().index(table) + 1
    run = pytest_in(folder, "--gradmagic", "--co", "-q")
    assert run.returncode == 4, run.output
    assert re.search(r"ERROR: gradmagic: .*" + said.replace("{line}", str(line)), run.output), run.output


def test_the_report_option_needs_the_plugin(tmp_path):
    run = pytest_in(project(tmp_path / "layerkit"), "--gradmagic-report=out", "--co", "-q")
    assert run.returncode == 4 and "--gradmagic-report writes what --gradmagic finds: add --gradmagic" in run.output
    collected = pytest_in(tmp_path / "layerkit", "--gradmagic", "--co", "-q")  # nothing runs: nothing to say
    assert collected.returncode == 0 and f"{OWN_TESTS} tests collected" in collected.output, collected.output
    assert "= gradmagic" not in collected.output
    (tmp_path / "layerkit" / "reports").write_text("a file where the report's folder would go")
    nowhere = pytest_in(tmp_path / "layerkit", "--gradmagic", "--gradmagic-report=reports/suite", "-q")
    assert nowhere.returncode == 4, nowhere.output  # said before the suite runs, not after
    assert (
        f"gradmagic: --gradmagic-report {tmp_path / 'layerkit' / 'reports' / 'suite'}: its folder cannot be made "
        f"({tmp_path / 'layerkit' / 'reports'}: File exists); no test ran"
    ) in nowhere.output, nowhere.output


def test_settings_read_sizes_and_reasons(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[tool.gradmagic]\nmemory_limit = "1.5 MiB"\nxfail = "layer_norm"\nmax_checks = 0\natol = 1e-6\n'
    )
    settings = suite_settings.read(pyproject, None, False)
    assert settings.memory_limit == int(1.5 * 2**20) and settings.max_checks == 0
    assert settings.xfail == {"layer_norm": "declared in pyproject.toml [tool.gradmagic]"}
    assert settings.options == {"atol": 1e-6}
    marked = settings.with_markers([("t.py::test_a", {"xfail": ["soft"], "reason": "known"})])
    assert marked.xfail == {"layer_norm": "declared in pyproject.toml [tool.gradmagic]", "soft": "known"}
    with pytest.raises(suite_settings.SettingsError, match="takes surrogate=, xfail= and reason=, not surogate="):
        settings.with_markers([("t.py::test_a", {"surogate": "x"})])


def test_the_budget_goes_round_the_ops_the_same_way_each_time():
    calls = [[1, 2, 3], [1], [1, 2]]
    assert allotted(calls, None) == [3, 1, 2]
    assert allotted(calls, 4) == [2, 1, 1]  # each op's most telling call first, the ops in turn
    assert allotted(calls, 2) == [1, 1, 0]
    assert allotted(calls, 0) == [0, 0, 0]
    assert allotted(calls, 100) == [3, 1, 2]


def test_the_plugin_loads_light():
    """pytest loads the plugin in every session: it imports no framework, nor gradmagic's engine."""
    heavy = ("tensorflow", "keras", "jax", "torch", "numpy", "gradmagic.report", "gradmagic.watching")
    code = f"import sys, gradmagic.suite.plugin; print([m for m in {heavy!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


KERAS_OP = """\
import keras
from keras import ops


@keras.ops.custom_gradient
def soft_clip(x):
    def grad(*args, upstream=None):
        upstream = args[0] if upstream is None else upstream
        return upstream * 1.3 * (1 - ops.tanh(x) ** 2)  # 1.3: a wrong factor

    return ops.tanh(x), grad
"""
KERAS_TEST = """\
import keras
import numpy as np

from kops import soft_clip


class Clip(keras.layers.Layer):
    def call(self, x):
        return soft_clip(x)


def test_fit():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), Clip(), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x = np.random.default_rng(0).normal(size=(16, 4)).astype("float32")
    model.fit(x, x[:, :1], epochs=1, verbose=0)
"""


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_keras_ops_on_other_backends(tmp_path, backend):
    """A `keras.ops.custom_gradient` op in a layer trained by `model.fit`, on Keras's JAX and PyTorch backends."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "kops.py").write_text(KERAS_OP)
    (tmp_path / "tests" / "test_k.py").write_text(KERAS_TEST)
    (tmp_path / "tests" / "conftest.py").write_text(f'import os\n\nos.environ["KERAS_BACKEND"] = "{backend}"\n')
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\npythonpath = ["."]\n')
    run = pytest_in(tmp_path, "--gradmagic")
    assert run.returncode == 1, run.output
    row = run.row("soft_clip")
    assert "kops.py, line 5" in row and "failed" in row and "dx is 1.3 times the finite differences" in row, row
    assert "1 failed, 1 passed" in run.output


@pytest.mark.parametrize("width", [1400, 760])
def test_the_html_report_reads_offline_in_chromium(browser, buggy, width):
    """The page `--gradmagic-report` writes, opened from disk in Chromium with the network cut: the badge, the table
    of ops read left to right, and an op's report (the tests that reached it) under its row. Screenshots kept in
    test-artifacts/."""
    from test_browser import ARTIFACTS

    context = browser.new_context(viewport={"width": width, "height": 1000})
    context.route("http*://**/*", lambda route: route.abort())
    page = context.new_page()
    try:
        page.goto((buggy.folder / "out" / "report.html").as_uri())
        page.wait_for_load_state("load")
        watch = page.locator(".gradmagic-watch")
        assert watch.count() == 1
        assert watch.locator("span").first.inner_text() == "FAILS"
        table = watch.locator("table").first
        names = table.locator(":scope > tbody > tr > td:first-child").all_inner_texts()
        assert [name for name in names if name and not name.startswith("report of")][:2] == ["layer_norm", "safe_norm"]
        assert table.evaluate("t => getComputedStyle(t.tBodies[0].rows[0].cells[0]).textAlign") in ("left", "start")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"pytest-report-{width}.png"), full_page=False)
        summary = watch.locator("details > summary").filter(has_text="report of layer_norm")
        summary.click()
        opened = summary.locator("xpath=..")
        assert "reached by 10 tests: tests/test_layers.py::test_shape_preserving_layers[shape0]" in opened.inner_text()
        assert opened.locator(".gradmagic-report").first.locator("span").first.inner_text() == "FAILS"
        opened.screenshot(path=str(ARTIFACTS / f"pytest-report-{width}-layer-norm.png"))
        assert page.evaluate("document.documentElement.scrollWidth") <= width + 1  # nothing spills sideways
    finally:
        context.close()


def test_a_watch_that_cannot_start_fails_the_session_saying_why(tmp_path):
    """A conftest that leaves a watch of its own running: the session's cannot start, and the session says so."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_text(
        "import gradmagic\nimport tensorflow as tf\n\nWATCH = gradmagic.watch()\nWATCH.__enter__()\n"
    )
    (tmp_path / "tests" / "test_a.py").write_text("def test_a():\n    pass\n")
    run = pytest_in(tmp_path, "--gradmagic")
    assert run.returncode == 1, run.output
    assert "FAILED gradmagic::watch - gradmagic: the watch could not start (GradmagicError: Cannot start a watch" in (
        run.output
    )
    assert "1 failed, 1 passed" in run.output


def test_nothing_checked_is_no_pass(tmp_path):
    """A memory limit of 0 keeps no call: the op is reached, nothing is checked, and the session says so and fails."""
    folder = project(tmp_path / "layerkit", SURROGATES + "memory_limit = 0\n")
    run = pytest_in(folder, "--gradmagic", "-k", "softplus_gradient")
    assert run.returncode == 1, run.output
    assert "FAILED gradmagic::watch - gradmagic: the tests reached 1 custom-gradient op(s) and none was checked" in (
        run.output
    )
    assert "not checked: no call's inputs could be kept within the watch's memory limit" in run.row("softplus")


REGISTERED_TESTS = '''import pytest
import tensorflow as tf

from layerkit.ops import softplus


@tf.RegisterGradient("HalfSign")
def _half_sign(op, upstream):
    return 0.5 * upstream


@tf.RegisterGradient("SquareTimesThree")
def _square_gradient(op, upstream):
    return 3.0 * upstream * op.inputs[0]


@tf.function
def step(x):
    with tf.compat.v1.get_default_graph().gradient_override_map({"Sign": "HalfSign", "Square": "SquareTimesThree"}):
        return tf.sign(x) + tf.square(x) + softplus(x)


@pytest.mark.gradmagic(surrogate="HalfSign")
def test_registered_gradients_in_use():
    x = tf.constant([0.5, -2.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = step(x)
    assert tape.gradient(y, x).shape == (2,)


@tf.RegisterGradient("PyCubeGradient")
def _py_cube_gradient(op, upstream):
    return 3.0 * upstream * op.inputs[0] ** 2


@tf.function
def py_cube(x):
    with tf.compat.v1.get_default_graph().gradient_override_map({"PyFunc": "PyCubeGradient"}):
        return tf.compat.v1.py_func(lambda v: v**3, [x], tf.float32)


def test_registered_py_func_gradient():
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = py_cube(x)
    assert tape.gradient(y, x).numpy().tolist() == [3.0, 12.0]
'''


def test_registered_gradients_are_checked(tmp_path):
    """Gradients registered with tf.RegisterGradient and applied by an override are checked at the inputs their ops
    got, each as an op named as registered: a declared surrogate passes, a wrong one fails naming its definition."""
    folder = project(tmp_path / "layerkit", files={"tests/test_registered.py": REGISTERED_TESTS})
    run = pytest_in(folder, "--gradmagic", "-k", "registered", "-rA")
    assert run.returncode == 1, run.output
    assert "4 custom-gradient ops reached by 2 tests: 1 failed, 1 not checked, 2 passed" in run.output, run.output
    assert "passed" in run.row("HalfSign") and "passed" in run.row("softplus")
    row = run.row("SquareTimesThree")
    assert "tests/test_registered.py, line 12" in row and "failed" in row and "1.5 times" in row, row
    assert "FAILED tests/test_registered.py::gradmagic::SquareTimesThree" in run.output
    # The py_func recipe's PyFunc takes a list of inputs: its gradient is named, saying why it is not checked.
    assert "not checked" in run.row("PyCubeGradient")
    assert "PyCubeGradient reached by tests/test_registered.py::test_registered_py_func_gradient" in run.output
    assert (
        "SKIPPED [1] tests/test_registered.py:32: not checked: `PyCubeGradient` was taken for a PyFunc op, whose "
        "inputs are lists: the watch cannot call it again"
    ) in run.output, run.output


def test_a_suite_that_never_imports_a_framework_is_told_so(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_plain.py").write_text("def test_sum():\n    assert 1 + 1 == 2\n")
    run = pytest_in(tmp_path, "--gradmagic")
    assert run.returncode == 0 and "1 passed" in run.output, run.output
    assert "No test imported TensorFlow or Keras, so no watch started: nothing was checked." in run.output


CTRL_C_CONFTEST = '''from gradmagic.watching.recording import CallRecorder

original, calls = CallRecorder.forward, []


def forward(self, site, call):  # a Ctrl-C landing in the recording's tf.numpy_function callback, at its third call
    calls.append(call)
    if len(calls) == 3:
        raise KeyboardInterrupt
    return original(self, site, call)


CallRecorder.forward = forward
'''
CTRL_C_TESTS = '''import tensorflow as tf

from layerkit.ops import softplus


@tf.function
def step(x):
    return softplus(x) * 2.0


def test_steps():
    for _ in range(5):
        step(tf.constant([1.0, 2.0]))


def test_after():
    pass
'''


def test_a_ctrl_c_landing_in_the_recording_stops_the_session_as_a_ctrl_c(tmp_path):
    """TensorFlow turns a Ctrl-C that lands in the watch's callback inside a tf.function into the test's
    UnknownError: the plugin gives it back as the Ctrl-C it was, and pytest stops there, as for any Ctrl-C."""
    files = {"tests/conftest.py": CTRL_C_CONFTEST, "tests/test_ctrl_c.py": CTRL_C_TESTS}
    folder = project(tmp_path / "layerkit", files=files)
    run = pytest_in(folder, "--gradmagic", "tests/test_ctrl_c.py")
    assert run.returncode == 2, run.output  # pytest's exit code for an interrupted session
    assert "KeyboardInterrupt: Ctrl-C, which landed in gradmagic's recording inside compiled code while " in run.output
    assert "tests/test_ctrl_c.py::test_steps ran" in run.output and "test_after" not in run.output.split("!!!")[-1]
    assert "not checked: the watch was interrupted" in run.row("softplus")
    assert "gradmagic::watch" not in run.output  # checks left out on a Ctrl-C are no failure of gradmagic's
