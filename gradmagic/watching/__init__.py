"""`gradmagic.watch()`: check custom gradients where they live, at the inputs a model really feeds them.

    with gradmagic.watch() as watch:
        model.fit(x, y, epochs=1)
    watch.report          # a WatchReport: .ok, .problems, .ops (one Report per op), .first_nonfinite_gradient

While the block runs, every call of every custom-gradient op it reaches is recorded by the framework's recording
(`gradmagic.frameworks.get_watcher()`) into a `CallRecorder` (`recording.py`), which keeps a few calls per op; when
it ends, everything the recording changed is put back and each op is checked by the check engine at the inputs it
kept (`verdicts.py`).
"""

from __future__ import annotations

import time
from typing import Any

from gradmagic.checking.options import CheckOptions
from gradmagic.errors import GradmagicError, OptionError
from gradmagic.frameworks import get_watcher
from gradmagic.frameworks.watching import callback_interrupts
from gradmagic.notebook import display
from gradmagic.report import WatchReport
from gradmagic.watching.recording import CallRecorder
from gradmagic.watching.verdicts import Verdicts, op_where, watch_report

#: Bytes the kept calls' inputs (and the recent calls held for their gradients) may take, by default.
MEMORY_LIMIT = 64 * 2**20
#: Check options a watch decides per op.
_PER_OP = {
    "framework": "each op is checked with the framework that made it",
    "backends": "the watch checks each op in this process only",
    "surrogate": "name the ops whose gradient is deliberately not the derivative: surrogates={'name', ...}",
}

__all__ = ["MEMORY_LIMIT", "Watch", "callback_interrupts", "watch"]

#: The watch running in this process (its recording installed), if any: a watch started inside an `outer` one
#: pauses it.
_current: Watch | None = None


def watch(
    *,
    check: bool = True,
    memory_limit: int = MEMORY_LIMIT,
    surrogates: Any = (),
    max_checks: int | None = None,
    signatures: int | None = None,
    **options: Any,
) -> Watch:
    """Watch the custom gradients the code in a `with` block reaches, and check each at the inputs it received.

    Every call of every custom-gradient op (`tf.custom_gradient`, `keras.ops.custom_gradient` on TensorFlow, ops made
    by `%%custom_gradient`; in layers, methods, nested ops, `tf.function` and `model.fit`) is recorded: how many
    calls, input shapes, dtypes and ranges, and which calls' gradients went non-finite. A few calls per op are kept
    (the first, the extreme values, the first non-finite output and gradient), their inputs within `memory_limit`
    bytes. When the block ends, everything the watch changed is put back (also on an error or Ctrl-C) and, with
    `check`, each op is checked at the inputs it kept; `watch.report` is the WatchReport.

    `surrogates`: names of ops whose custom gradient is deliberately not the derivative (as `--surrogate`): a
    function's name, or its module and name (`layerkit.ops.soft_round`).
    `max_checks`: the most checks to run when the watch ends (an op at one kept call is one check; None: all); the
    kept calls beyond it go unchecked, each op's most telling call checked before any op's second, the same on any
    machine (`report.budget` says how many ran).
    `signatures`: None keeps the first call of each op, its first on each new input shape or object (up to 3 more)
    and its calls with the extreme input values; a number N checks each op once per distinct input signature (shapes
    and dtypes, whatever the object): its first call on each, up to N signatures (`pytest --gradmagic` sets it).
    Either way the first calls whose gradient or output went non-finite are kept too.
    `options`: the check's options (`gradmagic.CheckOptions`: rtol, atol, eps, full_threshold, ...).
    """
    return Watch(
        check=check,
        memory_limit=memory_limit,
        surrogates=surrogates,
        max_checks=max_checks,
        signatures=signatures,
        **options,
    )


class Watch:
    """A watch: a context manager recording custom-gradient calls, with the report once it ends (`report`)."""

    def __init__(
        self,
        *,
        check: bool = True,
        memory_limit: int = MEMORY_LIMIT,
        surrogates: Any = (),
        max_checks: int | None = None,
        signatures: int | None = None,
        **options: Any,
    ):
        if not isinstance(check, bool):
            raise OptionError(f"check must be True or False, not {check!r}")
        if isinstance(memory_limit, bool) or not isinstance(memory_limit, int) or memory_limit < 0:
            raise OptionError(f"memory_limit must be a whole number of bytes, at least 0, not {memory_limit!r}")
        names = tuple(surrogates) if isinstance(surrogates, (list, tuple, set, frozenset)) else None
        if names is None or not all(isinstance(name, str) for name in names):
            raise OptionError(f"surrogates must be a collection of op names, not {surrogates!r}")
        for name, value, least in (("max_checks", max_checks, 0), ("signatures", signatures, 1)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                raise OptionError(f"{name} must be None or a whole number, at least {least}, not {value!r}")
        self.max_checks, self.signatures = max_checks, signatures
        refused = sorted(set(options) & set(_PER_OP))
        if refused:
            raise TypeError(f"watch() takes no {refused[0]!r} option: {_PER_OP[refused[0]]}")
        CheckOptions.of(**options)  # a bad option fails here, not when the watch ends
        self.check, self.memory_limit, self.options = check, memory_limit, options
        self.surrogates = frozenset(names)
        self._report: WatchReport | None = None
        self._running = None
        self._test: str | None = None
        #: Called with (name, where) when the running watch first reaches an op, from the watched code's thread (it
        #: must not call the watch back): `pytest --gradmagic`'s workers note it for the controller.
        self.on_new_op: Any = None
        #: A watch over a whole test session (`pytest --gradmagic`): a watch a test starts inside it runs as it would
        #: alone (the calls within are that watch's), this one paused meanwhile.
        self.outer = False
        self._paused = 0  # watches that ran inside this one
        self._interrupts = 0  # Ctrl-Cs counted in the recordings' callbacks when it started (`in_callback`)
        self._inside: Watch | None = None  # the outer watch this one paused
        self._more: list = []  # the instrumentations of the recordings after a pause

    @property
    def test(self) -> str | None:
        """The test running now (a pytest node id; `pytest --gradmagic` sets it): the calls of ops it makes are
        counted as its own (`WatchedOp.tests`), and its name goes with the calls kept and the non-finite gradients
        seen. None outside a test."""
        return self._test

    @test.setter
    def test(self, name: str | None) -> None:
        self._test = name
        recorder = getattr(self, "_recorder", None)
        if recorder is not None:
            recorder.test = name

    @property
    def finished(self) -> bool:
        """Whether the watch has ended and made its report."""
        return self._running is None and self._report is not None

    @property
    def report(self) -> WatchReport:
        """The WatchReport, once the watch has ended."""
        if self._running is not None:
            raise GradmagicError("The watch is still running: its report is made when the `with` block ends.")
        if self._report is None:
            raise GradmagicError("Nothing was watched yet: use the watch as `with gradmagic.watch() as watch: ...`.")
        return self._report

    def reached(self) -> list[dict[str, Any]]:
        """While the watch runs, the ops reached so far as plain data: each op's `name`, `where` it is defined, its
        `calls` and the `tests` that made them (by test, under `pytest --gradmagic`). Empty when not running."""
        recorder = getattr(self, "_recorder", None) if self._running is not None else None
        if recorder is None:
            return []
        with recorder.lock:
            records = sorted(recorder.ops.values(), key=lambda op: op.first_seen)
            return [
                {"name": op.site.name, "where": op_where(op), "calls": op.calls, "tests": dict(op.tests)}
                for op in records
            ]

    def __enter__(self) -> Watch:
        if self._running is not None:
            raise GradmagicError("This watch is running already: a watch cannot be entered twice at once.")
        self._entered = time.perf_counter()
        global _current
        outer = _current
        if outer is not None and outer.outer and outer._running is not None:
            outer._pause()
            self._inside = outer
        try:
            self._start()
        except BaseException:
            if self._inside is not None:
                self._inside._resume()
                self._inside = None
            raise
        _current = self
        return self

    def _start(self) -> None:
        watcher = get_watcher()
        if self.signatures is None:
            self._recorder = CallRecorder(self.memory_limit)
        else:
            self._recorder = CallRecorder(self.memory_limit, self.signatures - 1, by_object=False, extremes=False)
        self._recorder.test = self._test
        if self.on_new_op is not None:
            listener = self.on_new_op
            self._recorder.reached = lambda op: listener(op.site.name, op_where(op))
        recording = watcher.recording(self._recorder)
        try:
            self._instrumentation = recording.__enter__()
        except RuntimeError as error:
            raise GradmagicError(
                f"Cannot start a watch: {error}. Watches do not nest: end the other one first."
            ) from None
        self._verdicts = Verdicts(
            self.check,
            dict(self.options),
            self.surrogates,
            watcher.decorated,
            getattr(watcher, "compiled_difference", None),
            getattr(watcher, "replica_difference", None),
            getattr(watcher, "gather_workers", None),
            self.max_checks,
        )
        self._running, self._started = recording, time.perf_counter()
        self._interrupts = callback_interrupts()

    def _pause(self) -> None:
        """Put back what the recording changed, keeping what it recorded, while a watch inside this one runs."""
        global _current
        recording, self._running = self._running, _Paused()
        recording.__exit__(None, None, None)
        self._paused += 1
        _current = None

    def _resume(self) -> None:
        """Record again, into the same recorder, once the watch inside has ended."""
        global _current
        if not isinstance(self._running, _Paused):  # it ended meanwhile: nothing to record into
            return
        recording = get_watcher().recording(self._recorder)
        instrumentation = recording.__enter__()
        self._running, _current = recording, self
        mine = self._instrumentation
        for seen, more in ((mine.notes, instrumentation.notes), (mine.retraced, instrumentation.retraced)):
            seen += [item for item in more if item not in seen]
        self._more.append(instrumentation)

    def __exit__(self, kind, error, traceback) -> bool:
        if self._running is None:  # never entered, or ended already: nothing to put back, no report to make
            raise GradmagicError(
                "This watch has ended already: its report is `watch.report`. A watch runs once; start another with "
                "`with gradmagic.watch() as watch: ...`."
                if self._report is not None
                else "This watch was never started: use it as `with gradmagic.watch() as watch: ...`, which starts "
                "and ends it."
            )
        global _current
        recording, self._running = self._running, None
        ended = time.perf_counter()
        try:
            recording.__exit__(kind, error, traceback)
        finally:
            _current = None
            if self._inside is not None:
                self._inside._resume()
                self._inside = None
        restored = time.perf_counter()
        for later in self._more:  # what the recordings after a pause noted, as they ended
            self._instrumentation.notes.extend(note for note in later.notes if note not in self._instrumentation.notes)
        if self._paused:
            self._instrumentation.notes.append(
                f"{self._paused} watch{'es' * (self._paused != 1)} started inside this one (gradmagic.watch() in "
                "a test) ran as alone: the calls within were theirs, not counted or checked here."
            )
        display.register()
        ctrl_c = None
        if error is not None and not isinstance(error, KeyboardInterrupt) and callback_interrupts() > self._interrupts:
            # A Ctrl-C landed in the recording's callback inside compiled code, which turned it into its own error.
            ctrl_c = KeyboardInterrupt(
                f"Ctrl-C, which landed in the watch's recording inside compiled code: {type(error).__name__} above"
            )
        report, interrupted = watch_report(
            self._recorder, self._instrumentation, self._verdicts, self._timings(ended, restored), ctrl_c or error
        )
        self._report = report
        del self._recorder
        if ctrl_c is not None:
            raise ctrl_c from error
        if interrupted is not None and error is None:
            raise interrupted
        return False

    def _timings(self, ended: float, restored: float) -> dict[str, float]:
        """What the watch took, its own part included: `watched`, from entering the block to everything put back;
        `setup`, the watch's installing and putting back; `before_first_call`, when the first recorded call ran in
        compiled code and the watch traced compiled code again for itself (a copy of a function traced before it, a
        Keras model's function made again, an XLA step's uncompiled copy), the time from the block's start to it:
        the retrace and the watched code's own work before its first op ran (an upper bound of the retrace)."""
        timings = {"watched": restored - self._entered, "setup": (self._started - self._entered) + (restored - ended)}
        recorder = self._recorder
        if recorder.first_call_at is not None and recorder.first_call_compiled and self._instrumentation.retraced:
            timings["before_first_call"] = recorder.first_call_at - self._started
        return timings

    def __repr__(self) -> str:
        state = "running" if self._running is not None else (str(self._report) if self._report else "not started")
        return f"<gradmagic.Watch: {state}>"


class _Paused:
    """An outer watch's recording while a watch inside it runs: nothing installed, nothing to put back."""

    def __exit__(self, kind, error, traceback) -> bool:
        return False
