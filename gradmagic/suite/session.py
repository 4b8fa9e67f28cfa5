"""The watch a test session runs under: one `gradmagic.watch()` from the first test to the last (in each
pytest-xdist worker, over that worker's tests), each call of an op counted as the test's that made it.

The watch starts before the first test once TensorFlow or Keras is imported (by the collected test modules, as a
rule; else before the first test after one imported it): a suite that never imports a framework is never made to.
While the tests run, a worker of pytest-xdist writes the ops it reached to a small progress file after each test,
so that the controller can still name them if the worker dies before its checks end.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradmagic.suite.settings import Settings

if TYPE_CHECKING:
    from gradmagic.report import WatchReport

#: Modules whose import means custom-gradient ops may be reached.
FRAMEWORKS = ("tensorflow", "keras")


class SuiteWatch:
    """A session's (or an xdist worker's) watch: started lazily, told which test runs, ended once."""

    def __init__(self, settings: Settings, progress: Path | None = None):
        self.settings = settings
        self.progress = progress  # an xdist worker's progress file
        self.watch: Any = None
        self.report: WatchReport | None = None
        self.error: str | None = None  # why the watch could not start or end
        self.started_before: str | None = None  # the first test it watched
        self.tests_before = 0  # tests that ran before it started (no framework imported yet)
        self.seconds = 0.0  # the checks' time at the end, as the plugin saw it
        self._test: str | None = None
        self._ops: list[dict[str, Any]] = []  # what the progress file lists

    @property
    def running(self) -> bool:
        return self.watch is not None and self.report is None

    def starting(self, test: str) -> None:
        """Before `test` runs: start the watch if a framework is imported now (and it has not started), and count
        the test as the watch's."""
        if self.watch is None and self.error is None:
            if not any(name in sys.modules for name in FRAMEWORKS):
                self.tests_before += 1
                return
            self._start(test)
        if self.running:
            self.watch.test = self._test = test

    def callback_interrupts(self) -> int:
        """Ctrl-Cs that landed in the recordings' callbacks so far (0 before the watch started: none can)."""
        if self.watch is None:
            return 0
        from gradmagic.watching import callback_interrupts

        return callback_interrupts()

    def finished(self, test: str) -> None:
        """After `test` ran (its teardown included)."""
        if self.running:
            self.watch.test = self._test = None
            self._ops = self.watch.reached()
            self._write_progress("tests", test)

    def end(self, interrupted: KeyboardInterrupt | None = None) -> WatchReport | None:
        """End the watch: the ops checked at the calls kept (not when the session was `interrupted`); the report
        (None when it never started)."""
        if not self.running:
            return self.report
        self._ops = self.watch.reached()
        self._write_progress("checks", None)
        started = time.perf_counter()
        try:
            if interrupted is None:
                self.watch.__exit__(None, None, None)
            else:
                self.watch.__exit__(type(interrupted), interrupted, None)
            self.report = self.watch.report
        except Exception as error:  # noqa: BLE001 - the suite's results stand; say why there is no report
            self.error = f"the watch could not end and check its ops ({type(error).__name__}: {error})"
            self.watch = None
        self.seconds = time.perf_counter() - started
        self._write_progress("done", None)
        return self.report

    def _start(self, test: str) -> None:
        from gradmagic.watching import Watch

        settings = self.settings
        try:
            watch = Watch(
                memory_limit=settings.memory_limit,
                surrogates=settings.surrogates,
                max_checks=settings.max_checks,
                signatures=settings.signatures,
                **settings.options,
            )
            watch.outer = True  # a test's own gradmagic.watch() runs as alone
            if self.progress is not None:
                watch.on_new_op = self._reached
            watch.__enter__()
        except Exception as error:  # noqa: BLE001 - the tests run all the same; the summary says why
            self.error = f"the watch could not start ({type(error).__name__}: {error})"
            return
        self.watch, self.started_before = watch, test

    def _reached(self, name: str, where: str | None) -> None:
        """An op first reached, in the running test: noted in the progress file at once (the test may never end)."""
        self._ops.append({"name": name, "where": where, "calls": 1, "tests": {self._test: 1} if self._test else {}})
        self._write_progress("tests", self._test)

    def _write_progress(self, phase: str, test: str | None) -> None:
        """Write what this worker reached so far (its ops, their calls and tests) for the controller."""
        if self.progress is None:
            return
        data = {"phase": phase, "test": test, "ops": self._ops}
        temporary = self.progress.with_suffix(".tmp")
        try:
            temporary.write_text(json.dumps(data), encoding="utf-8")
            os.replace(temporary, self.progress)
        except OSError:  # the progress file is a fallback: the run goes on without it
            pass


def read_progress(path: Path) -> dict[str, Any] | None:
    """A worker's progress file, or None where it wrote none (or it cannot be read)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
