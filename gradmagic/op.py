"""What gradmagic records on each op it makes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from gradmagic.inputs import ExampleInput

_ATTRIBUTE = "__gradmagic__"


@dataclass(frozen=True)
class OpInfo:
    """Where an op came from and how it was last called."""

    name: str
    framework: str  # adapter name, e.g. "tensorflow"
    form: str  # "definition" or "body"
    filename: str  # the cell's name in linecache
    example_inputs: tuple[ExampleInput, ...]  # from --check, reused by %gradcheck
    target: str | None = None  # the magic line's NAME or NAME(PARAMS), to compile the cell again elsewhere
    surrogate: bool = False  # declared with --surrogate: the custom gradient is deliberately not the derivative


def attach(op: Callable, info: OpInfo) -> None:
    """Record `info` on `op`."""
    setattr(op, _ATTRIBUTE, info)


def info_of(op: object) -> OpInfo | None:
    """The `OpInfo` of an op made by gradmagic, else None."""
    info = getattr(op, _ATTRIBUTE, None)
    return info if isinstance(info, OpInfo) else None
