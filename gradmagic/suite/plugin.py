"""The pytest plugin (`pytest11` entry point `gradmagic`): `pytest --gradmagic` runs the project's tests under one
watch and checks every custom-gradient op they reach at the inputs they fed it; off unless asked.

Thin hooks over `session.py` (the watch) and `results.py` (what is made of its report):

- `pytest_runtestloop` (a wrapper): the watch runs from the first test to the last; when the loop ends (also on
  `-x`), the ops are checked and each op's outcome is reported as a test's (`layerkit/ops.py::gradmagic::soft_clip`):
  a failing op fails the session and shows in `-ra`, `--junitxml` and the terminal with its report's text;
- `pytest_runtest_protocol` (a wrapper): each call of an op is counted as the running test's;
- under pytest-xdist, each worker watches its tests and hands its report to the controller, which merges them
  (`pytest_testnodedown`); a worker that dies has its ops named from its progress file;
- `pytest_terminal_summary`: a row per op, the first non-finite gradient, the budget's use.

Importing this module imports neither gradmagic's engine nor a framework: pytest loads it in every session.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import traceback
from pathlib import Path

import pytest

from gradmagic.suite.session import SuiteWatch, read_progress
from gradmagic.suite.settings import MARKER, Settings, SettingsError, read

#: The key of a worker's `workeroutput` its report travels under.
OUTPUT = "gradmagic"
PROGRESS = "gradmagic_progress"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gradmagic", "custom gradients checked by gradmagic")
    group.addoption(
        "--gradmagic",
        action="store_true",
        default=False,
        help="run the tests under a gradmagic watch and check every custom-gradient op they reach at the inputs "
        "they fed it; options from pyproject.toml [tool.gradmagic]",
    )
    group.addoption(
        "--gradmagic-report",
        metavar="PATH",
        default=None,
        help="with --gradmagic, write the report as PATH.json (the watch report's schema) and PATH.html (a "
        "self-contained page)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)
    if not config.getoption("gradmagic"):
        if config.getoption("gradmagic_report"):
            raise pytest.UsageError("--gradmagic-report writes what --gradmagic finds: add --gradmagic")
        return
    pyproject = config.inipath if config.inipath and config.inipath.name == "pyproject.toml" else None
    pyproject = pyproject or config.rootpath / "pyproject.toml"
    try:
        settings = read(pyproject, config.getoption("gradmagic_report"), bool(config.getini("xfail_strict")))
    except SettingsError as error:
        raise pytest.UsageError(f"gradmagic: {error}") from None
    if settings.report is not None:  # said now, not after the whole suite ran
        try:
            settings.report.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise pytest.UsageError(
                f"gradmagic: --gradmagic-report {settings.report}: its folder cannot be made ({error.filename}: "
                f"{error.strerror or error}); no test ran"
            ) from None
    config.pluginmanager.register(GradmagicPlugin(config, settings), "gradmagic-suite")


class GradmagicPlugin:
    """`pytest --gradmagic` in one session: a plain session, an xdist worker, or an xdist controller."""

    def __init__(self, config: pytest.Config, settings: Settings):
        self.config, self.settings = config, settings
        self.worker = getattr(config, "workerinput", None) is not None
        self.progress_folder: Path | None = None
        self.suite: SuiteWatch | None = None  # the watch, in a session that runs tests (not xdist's controller)
        self.reports: list = []  # the workers' reports (controller)
        self.lost: list = []  # workers that died (controller)
        self.problems: list[str] = []  # what went wrong in gradmagic itself: a failure of the session
        self.notes: list[str] = []  # what the summary says besides
        self.report = None
        self.outcomes: list = []
        self.written: list[Path] = []
        self.looped = False  # the tests ran (no usage error stopped the session before)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # Every plugin is configured by now: xdist's controller (its `dsession`) runs no test and watches nothing.
        if self.config.pluginmanager.hasplugin("dsession"):
            return
        workerinput = getattr(self.config, "workerinput", None) or {}
        progress = None
        if workerinput.get(PROGRESS):
            progress = Path(workerinput[PROGRESS]) / f"{workerinput['workerid']}.json"
        self.suite = SuiteWatch(self.settings, progress)

    # -- settings from the tests' markers ------------------------------------------------------------------------

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        markers = []
        for item in session.items:
            for mark in item.iter_markers("gradmagic"):
                markers.append((item.nodeid, dict(mark.kwargs)))
                if mark.args:
                    raise pytest.UsageError(
                        f"gradmagic: the gradmagic marker of {item.nodeid} takes keywords (surrogate=, xfail=, "
                        f"reason=), not {mark.args!r}"
                    )
        try:
            self.settings = self.settings.with_markers(markers)
        except SettingsError as error:
            raise pytest.UsageError(f"gradmagic: {error}") from None
        if self.suite is not None:
            self.suite.settings = self.settings

    # -- the watch over the tests --------------------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        if self.suite is not None:
            self.suite.starting(item.nodeid)
        interrupts = self.suite.callback_interrupts() if self.suite is not None else 0
        try:
            result = yield
        finally:
            if self.suite is not None:
                self.suite.finished(item.nodeid)
        if self.suite is not None and self.suite.callback_interrupts() > interrupts:
            # A Ctrl-C landed in the watch's recording inside compiled code, which made it an error of the test's:
            # the session stops, as pytest stops for a Ctrl-C anywhere else.
            raise KeyboardInterrupt(
                f"Ctrl-C, which landed in gradmagic's recording inside compiled code while {item.nodeid} ran"
            )
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session):
        if session.config.option.collectonly:  # --collect-only: no test runs, nothing to watch or say
            return (yield)
        error: BaseException | None = None
        self.looped = True
        try:
            return (yield)
        except BaseException as raised:  # -x (session.Failed), Ctrl-C: the checks run, or not, then it goes on up
            error = raised
            raise
        finally:
            try:
                self._finish(error)
            except Exception:  # noqa: BLE001 - never a crash of pytest: say what went wrong
                self.problems.append(f"gradmagic failed to make its report:\n{traceback.format_exc()}")
            if not self.worker:
                self._tell(session)

    def _finish(self, error: BaseException | None) -> None:
        """End the watch (the checks run); a worker hands its report over, a session merges and writes them."""
        from gradmagic.suite import results

        interrupted = error if isinstance(error, KeyboardInterrupt) else None
        if self.suite is not None:
            report = self.suite.end(interrupted)
            if self.suite.error:
                self.problems.append(f"gradmagic: {self.suite.error}")
            before = self.suite.tests_before
            if before and self.suite.watch is not None:
                self.notes.append(
                    f"{before} test{'s' * (before != 1)} ran before TensorFlow or Keras was imported, unwatched; the "
                    f"watch started with {self.suite.started_before}."
                )
            if self.worker:
                self.config.workeroutput[OUTPUT] = json.dumps(
                    {
                        "report": report.to_dict() if report is not None else None,
                        "problems": self.problems,
                        "notes": self.notes,
                        "xfail": self.settings.xfail,
                        "surrogates": sorted(self.settings.surrogates),
                    }
                )
                return
            self.reports = [report] if report is not None else []
        self.report = results.merged(self.reports, self.lost, self.settings)
        if interrupted is None and self.report is not None and self.report.watched and not self.report.checked:
            # Ops reached and none checked (a budget or memory limit of 0, every call refused): no pass on nothing.
            self.problems.append(
                f"gradmagic: the tests reached {len(self.report.watched)} custom-gradient op(s) and none was checked "
                "(each op's row says why): nothing was verified"
            )
        if self.report is not None:
            self.outcomes = results.outcomes(self.report, self.settings)
            if self.settings.report is not None:
                try:
                    self.written = results.write(self.report, self.settings.report)
                except OSError as error:
                    self.problems.append(
                        f"gradmagic: the report could not be written to {self.settings.report} "
                        f"({type(error).__name__}: {error})"
                    )

    def _tell(self, session: pytest.Session) -> None:
        """Each op's outcome reported as a test's, and gradmagic's own failure (its watch could not start or end,
        a worker's could not, its report could not be made) as one more, as pytest reports them."""
        hook = self.config.hook
        told = [(o.nodeid, o.location, o.outcome, o.longrepr, o.wasxfail) for o in self.outcomes]
        if self.problems:
            failure = "\n".join(self.problems)
            told.append(("gradmagic::watch", ("gradmagic", None, "gradmagic"), "failed", failure, None))
        session.testscollected += len(told)
        for nodeid, location, outcome, longrepr, wasxfail in told:
            hook.pytest_runtest_logstart(nodeid=nodeid, location=location)
            for when in ("setup", "call", "teardown"):
                report = pytest.TestReport(
                    nodeid,
                    location,
                    {"gradmagic": 1},
                    outcome if when == "call" else "passed",
                    longrepr if when == "call" else None,
                    when,
                )
                if when == "call" and wasxfail is not None:
                    report.wasxfail = wasxfail
                hook.pytest_runtest_logreport(report=report)
            hook.pytest_runtest_logfinish(nodeid=nodeid, location=location)

    # -- pytest-xdist's controller -------------------------------------------------------------------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        if self.progress_folder is None:
            self.progress_folder = Path(tempfile.mkdtemp(prefix="gradmagic-workers-"))
        node.workerinput[PROGRESS] = str(self.progress_folder)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        from gradmagic.report import WatchReport

        worker = node.gateway.id
        output = getattr(node, "workeroutput", None) or {}
        if OUTPUT in output:
            data = json.loads(output[OUTPUT])
            if data["report"] is not None:
                self.reports.append(WatchReport.from_dict(data["report"]))
            self.problems += [f"{problem} (worker {worker})" for problem in data["problems"]]
            self.notes += [f"{note} (worker {worker})" for note in data["notes"]]
            self.settings = dataclasses.replace(
                self.settings,
                surrogates=self.settings.surrogates | frozenset(data["surrogates"]),
                xfail={**data["xfail"], **self.settings.xfail},
            )
            return
        from gradmagic.suite import results

        progress = read_progress(self.progress_folder / f"{worker}.json") if self.progress_folder else None
        cause = str(error).strip().splitlines()[0] if error else "it ended without its report"
        self.lost.append(results.LostWorker(worker, cause, progress))

    # -- the terminal ----------------------------------------------------------------------------------------------

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.worker or not self.looped:
            return
        from gradmagic.suite import results

        title, lines = results.summary_lines(self.report, self.outcomes, self.settings, self.problems + self.notes)
        failing = any(o.outcome == "failed" for o in self.outcomes)
        terminalreporter.write_sep("=", title, red=failing, green=not failing, bold=True)
        for line in lines:
            terminalreporter.write_line(line)
        for path in self.written:
            terminalreporter.write_line(f"report written: {path}")

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.suite is not None and self.suite.running:  # a session that ended before its loop did
            self.suite.end(KeyboardInterrupt())
        if self.progress_folder is not None:
            shutil.rmtree(self.progress_folder, ignore_errors=True)
