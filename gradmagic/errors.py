"""User-facing errors.

Every error gradmagic raises about the user's input derives from
`GradmagicError`; its message is complete (cause, where, and the fix), so the
magics show it as an IPython `UsageError`, without a traceback into gradmagic.
Errors raised by the user's own code are never wrapped: they keep their
traceback, which points at the user's cell lines.
"""


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
