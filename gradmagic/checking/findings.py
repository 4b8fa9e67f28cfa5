"""What the checks have found so far: problems, the rows of the shapes table, a surrogate gradient.

Every phase records here and reads `failed` to decide whether the next can
run; the Report is made from it at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from gradmagic.frameworks.wording import Wording
from gradmagic.report import CheckedInput, Location, Problem, Severity, Surrogate, TensorRow, element_label

#: How many element indices a message lists.
LISTED = 5


@dataclass
class Findings:
    """Problems and shapes-table rows, as the checks find them."""

    name: str  # the op's name, as messages quote it
    wording: Wording  # how messages name the framework's things
    source: str | None = None  # how the user names the op's source: "Cell In[3]" or a file path
    problems: list[Problem] = field(default_factory=list)
    rows: list[TensorRow] = field(default_factory=list)
    inputs: list[CheckedInput] = field(default_factory=list)  # the example inputs (`arguments.prepare_inputs`)
    surrogate: Surrogate | None = None  # a declared or recognised surrogate gradient (see surrogate.py)
    #: Why the check stopped before comparing any number though nothing failed (non-finite example inputs): the
    #: reason of its "not checked".
    stopped: str | None = None

    def add(self, code: str, severity: Severity, message: str, **location: Any) -> None:
        if location.get("line") is not None:
            location.setdefault("filename", self.source)
        self.problems.append(Problem(code, severity, message, Location(**location) if location else None))

    @property
    def failed(self) -> bool:
        return any(problem.severity == "error" for problem in self.problems)

    def confirm_none_gradients(self, names: set[str], evidence: str) -> None:
        """The `none-gradient` warnings of these inputs become infos: the numbers show the outputs do not depend on
        them (`evidence` says how), so None, which the framework takes as zero, is right. One verdict and one
        wording for a None gradient wherever the numbers confirm it (full mode element by element, projection mode
        along its probes)."""
        for position, found in enumerate(self.problems):
            name = found.location.input if found.location is not None else None
            if found.code != "none-gradient" or found.severity != "warning" or name not in names:
                continue
            self.problems[position] = replace(
                found,
                severity="info",
                message=f"{found.message.split(':')[0]}, and the outputs do not depend on it here ({evidence}): None "
                "is right.",
            )


def listing(names: list[str]) -> str:
    """`a`, `b`: names as a message quotes them."""
    return ", ".join(f"`{name}`" for name in names)


def joined(parts: list[str]) -> str:
    """ "a", "a and b", "a, b and c": phrases in a sentence."""
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def identifier(name: str) -> str:
    """A Python identifier standing for an input's name in suggested code: `xs[1]` -> `xs_1`."""
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name).strip("_")


def plural(count: int, word: str) -> str:
    """`1 gradient`, `2 gradients`."""
    return f"{count} {word}{'s' if count != 1 else ''}"


def one_element_off(name: str, index: tuple, value: float | None, custom: float, numerical: float) -> str:
    """What is wrong where one element alone is: "dx is 1.1 times the finite differences (10 % off) at x[2] = 0.731
    alone", "dx has the opposite sign at x[2] = -1 alone"."""
    at = element_label(name, index) + ("" if value is None else f" = {value:.4g}")
    ratio = custom / numerical
    if ratio == 0:
        return f"d{name} is zero at {at} where the finite differences give {numerical:.6g}: a term is missing."
    if abs(ratio + 1) < 1e-3:
        return f"d{name} has the opposite sign at {at} alone."
    return f"d{name} is {ratio:.4g} times the finite differences ({abs(ratio - 1) * 100:.3g} % off) at {at} alone."
