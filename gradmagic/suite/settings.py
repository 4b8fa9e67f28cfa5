"""What `pytest --gradmagic` is asked to do: the `[tool.gradmagic]` table of the project's `pyproject.toml`, the
command line's options, and the `@pytest.mark.gradmagic(...)` markers of the tests collected.

    [tool.gradmagic]
    surrogates = ["straight_through_round"]     # ops whose gradient is deliberately not the derivative
    xfail = ["layer_norm"]                      # known failures (or a table: {layer_norm = "issue 12"})
    rtol = 1e-4                                 # the check's options: rtol, atol, eps, full_threshold, probes, seed
    max_checks = 100                            # the checks' budget (an op at one kept call is one check)
    signatures = 3                              # calls kept per op for a new input signature
    memory_limit = "64 MiB"                     # what the kept inputs may take

An op is named by its function's name, or its module and name (`layerkit.ops.soft_round`), as `gradmagic.watch`'s
`surrogates` are. A mistake in the table stops pytest before any test runs, naming the file, the line and the cause.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ImportError:  # Python 3.10: pytest itself depends on tomli there
    import tomli as tomllib  # type: ignore[no-redef]

#: The check's options the table may set (`gradmagic.CheckOptions` fields); the others are the watch's to decide.
CHECK_OPTIONS = ("rtol", "atol", "eps", "full_threshold", "probes", "seed", "float64", "order")
#: The checks' budget by default: an op at one kept call is one check, each a second or less on small tensors.
MAX_CHECKS = 100
#: Calls kept per op for being the first with their input signature, beyond its first call, by default.
SIGNATURES = 3
#: What the kept calls' inputs may take by default, in bytes.
MEMORY_LIMIT = 64 * 2**20
_UNITS = {"": 1, "b": 1, "kb": 1000, "kib": 2**10, "mb": 1000**2, "mib": 2**20, "gb": 1000**3, "gib": 2**30}
MARKER = (
    "gradmagic(surrogate=None, xfail=None, reason=None): under `pytest --gradmagic`, declare ops (by name) whose "
    "custom gradient is deliberately not the derivative (surrogate), or is known to fail its check (xfail)"
)


class SettingsError(Exception):
    """A mistake in `[tool.gradmagic]` or a marker, in words naming where it is."""


@dataclass(frozen=True)
class Settings:
    """Everything `pytest --gradmagic` was told."""

    surrogates: frozenset[str] = frozenset()
    xfail: dict[str, str] = field(default_factory=dict)  # op name: the reason
    xfail_strict: bool = False  # an xfail op that passes fails the session (as pytest's `xfail_strict`)
    max_checks: int = MAX_CHECKS
    signatures: int = SIGNATURES
    memory_limit: int = MEMORY_LIMIT
    options: dict[str, Any] = field(default_factory=dict)  # CheckOptions fields
    report: Path | None = None  # --gradmagic-report: where the JSON and HTML reports go (PATH.json, PATH.html)
    source: str = "defaults"  # where the table was read: "pyproject.toml [tool.gradmagic]"

    def with_markers(self, markers: list[tuple[str, dict[str, Any]]]) -> Settings:
        """With the surrogates and xfails the tests' markers declare: (the test's id, the marker's keywords)."""
        surrogates, xfail = set(self.surrogates), dict(self.xfail)
        for test, keywords in markers:
            where = f"the gradmagic marker of {test}"
            unknown = sorted(set(keywords) - {"surrogate", "xfail", "reason"})
            if unknown:
                raise SettingsError(f"{where} takes surrogate=, xfail= and reason=, not {unknown[0]}=")
            surrogates |= set(_names(keywords.get("surrogate"), f"{where}: surrogate"))
            reason = keywords.get("reason") or f"declared by {test}"
            if not isinstance(reason, str):
                raise SettingsError(f"{where}: reason must be a string, not {reason!r}")
            for name in _names(keywords.get("xfail"), f"{where}: xfail"):
                xfail.setdefault(name, reason)
        return dataclasses.replace(self, surrogates=frozenset(surrogates), xfail=xfail)

    def described(self) -> str:
        """`pyproject.toml [tool.gradmagic]: max_checks 100, signatures 3, memory_limit 64 MiB, rtol 0.0001`."""
        said = [f"max_checks {self.max_checks}", f"signatures {self.signatures}"]
        said.append(f"memory_limit {self.memory_limit / 2**20:.4g} MiB")
        said += [f"{name} {value}" for name, value in self.options.items()]
        return f"{self.source}: {', '.join(said)}"


def read(pyproject: Path | None, report: str | None, xfail_strict: bool) -> Settings:
    """The settings from `pyproject` (its `[tool.gradmagic]` table, if any) and the command line's report path."""
    path = Path(report).absolute() if report else None
    if pyproject is None or not pyproject.is_file():
        return Settings(xfail_strict=xfail_strict, report=path)
    text = pyproject.read_text(encoding="utf-8")
    try:
        table = tomllib.loads(text).get("tool", {}).get("gradmagic")
    except tomllib.TOMLDecodeError as error:
        raise SettingsError(f"{pyproject} is not valid TOML: {error}") from None
    if table is None:
        return Settings(xfail_strict=xfail_strict, report=path)
    source = f"{pyproject.name} [tool.gradmagic]"
    if not isinstance(table, dict):
        raise SettingsError(f"{pyproject}: [tool.gradmagic] must be a table")

    def where(key: str) -> str:
        return f"{pyproject}, line {_line_of(text, key)}: [tool.gradmagic] {key}"

    known = {"surrogates", "xfail", "xfail_strict", "max_checks", "signatures", "memory_limit", *CHECK_OPTIONS}
    for key in table:
        if key not in known:
            raise SettingsError(
                f"{where(key)} is not an option of gradmagic's (they are {', '.join(sorted(known))}); the check's "
                "other options are the watch's to decide"
            )
    xfail = table.get("xfail", [])
    if isinstance(xfail, dict):
        reasons = {name: reason for name, reason in xfail.items()}
        if not all(isinstance(reason, str) for reason in reasons.values()):
            raise SettingsError(f"{where('xfail')}: a table of xfail maps op names to reasons (strings)")
    else:
        reasons = {name: f"declared in {source}" for name in _names(xfail, where("xfail"))}
    strict = table.get("xfail_strict", xfail_strict)
    if not isinstance(strict, bool):
        raise SettingsError(f"{where('xfail_strict')} must be true or false, not {strict!r}")
    options = {name: table[name] for name in CHECK_OPTIONS if name in table}
    _validated(options, where)
    return Settings(
        surrogates=frozenset(_names(table.get("surrogates", []), where("surrogates"))),
        xfail=reasons,
        xfail_strict=strict,
        max_checks=_whole(table.get("max_checks", MAX_CHECKS), where("max_checks")),
        signatures=_whole(table.get("signatures", SIGNATURES), where("signatures"), least=1),
        memory_limit=_bytes(table.get("memory_limit", MEMORY_LIMIT), where("memory_limit")),
        options=options,
        report=path,
        source=source,
    )


def _validated(options: dict[str, Any], where: Any) -> None:
    """The check's options as `CheckOptions` takes them, or a SettingsError naming the one it refuses."""
    from gradmagic.checking.options import CheckOptions
    from gradmagic.errors import OptionError

    for name, value in options.items():
        try:
            CheckOptions.of(**{name: value})
        except (OptionError, TypeError, ValueError) as error:
            raise SettingsError(f"{where(name)}: {error}") from None


def _names(value: Any, where: str) -> list[str]:
    """Op names: a string or a list of strings."""
    if value is None:
        return []
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(isinstance(name, str) and name for name in names):
        raise SettingsError(f"{where} must name ops: a string or a list of strings, not {value!r}")
    return list(names)


def _whole(value: Any, where: str, least: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise SettingsError(f"{where} must be a whole number, at least {least}, not {value!r}")
    return value


def _bytes(value: Any, where: str) -> int:
    """Bytes: a whole number, or a string with a unit ("64 MiB", "1GB")."""
    if isinstance(value, str):
        found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", value)
        if found and found.group(2).lower() in _UNITS:
            return int(float(found.group(1)) * _UNITS[found.group(2).lower()])
        raise SettingsError(f'{where} must be bytes: a whole number or a size such as "256 MiB", not {value!r}')
    return _whole(value, where)


def _line_of(text: str, key: str) -> int:
    """The line of `key`'s assignment in the `[tool.gradmagic]` table (else the table's heading, else 1)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "[tool.gradmagic]"), None)
    if start is None:
        return 1
    for index in range(start + 1, len(lines)):
        stripped = lines[index].strip()
        if stripped.startswith("["):
            break
        if re.match(rf"{re.escape(key)}\s*=", stripped):
            return index + 1
    return start + 1
