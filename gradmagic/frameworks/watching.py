"""What a framework's recording hands a watch (`gradmagic.watching`): the custom-gradient ops a watched call reaches
and the values of each call, as NumPy arrays, so that the watch keeps and checks them without knowing a framework.

A framework's recording (`tensorflow/watching.py`) calls a `Recorder` from wherever the op runs: eagerly, as the call
happens, or from inside compiled code, when each step runs. The arrays it hands over may share memory with the
framework's buffers: a recorder copies what it keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np


@dataclass(frozen=True, eq=False)
class OpSite:
    """A custom-gradient op as its user defined it: calls of the same Python function are calls of one op (a
    method's, on any of its objects; an op called from several layers)."""

    function: Callable  # the innermost Python function (a method's function, a partial's)
    name: str
    filename: str | None
    line: int | None


@dataclass(frozen=True)
class ForwardCall:
    """One call of an op: its inputs and outputs, and how to call it again at those inputs."""

    call: Callable  # the op's own function as it was called (bound to its object; a partial with its keywords)
    input_names: tuple[str, ...]  # "x", "args[1]", "inputs[0][2]": parameter names and paths into structures
    inputs: list[np.ndarray]  # the tensors it was called with (variables read), in the order of `input_names`
    output_names: tuple[str, ...]
    outputs: list[np.ndarray]
    arguments: Callable[[list[np.ndarray]], tuple[tuple, dict]]  # (args, kwargs) with these arrays as the inputs
    compiled: bool  # called inside compiled code (a tf.function, a Keras train function, a TF1 graph)


@dataclass(frozen=True)
class BackwardCall:
    """One call of an op's gradient function: the upstream gradients it got and the gradients it returned."""

    upstream: list[np.ndarray]
    gradient_names: tuple[str, ...]  # the inputs' names, then "variable NAME" for the variables' gradients
    gradients: list[np.ndarray | None]  # None: the gradient function returned None for it


class Recorder(Protocol):
    """What a framework's recording calls; `gradmagic.watching.recording.CallRecorder` is one."""

    def forward(self, site: OpSite, call: ForwardCall) -> int:
        """Note a call of the op; return its id, which the gradient of that call is recorded with."""

    def backward(self, site: OpSite, call_id: int, call: BackwardCall) -> None:
        """Note a call of the op's gradient function for the forward call `call_id` (-1: not recorded)."""

    def unrecorded(self, site: OpSite, reason: str) -> None:
        """Note calls of the op that cannot be recorded; `reason` follows the op's name: "was traced inside XLA ..."."""


@dataclass(frozen=True)
class Instrumentation:
    """What a framework's recording is, what it changed for the watch (each put back when the watch ends), and what
    it could not record."""

    framework: str
    version: str
    #: Filled while the watch runs and when it ends: what the watch changed (a Keras model run without XLA), what it
    #: could not record (custom-gradient ops of Keras's JAX backend).
    notes: list[str]
