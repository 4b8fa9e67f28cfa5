"""User-facing errors.

Every error gradmagic raises about the user's input derives from
`GradmagicError`; its message is complete (cause, where, and the fix), so the
magics show it as an IPython `UsageError`, without a traceback into gradmagic.
Errors raised by the user's own code are never wrapped: they keep their
traceback, which points at the user's cell lines; an interrupt (Ctrl-C) shows the user's frames alone
(`interrupts_in_user_frames`).
"""

from __future__ import annotations

import functools
import os
import types
from typing import Callable


class GradmagicError(Exception):
    """An error in what the user gave gradmagic; the message says how to fix it."""


class CellError(GradmagicError):
    """The cell does not define a function the magic can decorate."""


class InputError(GradmagicError):
    """An example input (`ARG=EXPR`) is malformed, unknown or fails to evaluate."""


class FrameworkUnavailable(GradmagicError):
    """The framework that would decorate the op is not installed or fails to import."""


class OptionError(GradmagicError, ValueError):
    """An option of a check has a value it cannot take (the message names the option)."""


def interrupts_in_user_frames(function: Callable) -> Callable:
    """Decorate an entry point (a magic, `gradmagic.check`): a Ctrl-C (`KeyboardInterrupt`) raised while it runs
    shows the user's frames only, where their code was (a forward, a gradient function), never gradmagic's own.

    The entry point's own frame stays in the traceback (Python adds the frame an exception passes through); it is
    marked `__tracebackhide__`, which IPython and pytest leave out.
    """

    @functools.wraps(function)
    def entry_point(*args, **kwargs):
        __tracebackhide__ = True
        try:
            return function(*args, **kwargs)
        except KeyboardInterrupt as interrupt:
            raise interrupt.with_traceback(_without_own_frames(interrupt.__traceback__)) from None

    return entry_point


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _without_own_frames(traceback: types.TracebackType | None) -> types.TracebackType | None:
    """The traceback with gradmagic's frames taken out (the others, the user's and the framework's, in order)."""
    kept = []
    while traceback is not None:
        if not traceback.tb_frame.f_code.co_filename.startswith(_PACKAGE):
            kept.append(traceback)
        traceback = traceback.tb_next
    rebuilt = None
    for entry in reversed(kept):
        rebuilt = types.TracebackType(rebuilt, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return rebuilt
