"""The Report: what a check found, as plain data.

A Report is the contract between the checker and every renderer (text,
HTML, widget, the JupyterLab extension); how it displays in IPython is the
business of IPython's formatters (`gradmagic.notebook.display`). `Report.to_dict()` gives
JSON-serialisable data that validates against the JSON Schema shipped in
`gradmagic/schema/report.schema.json` (`SCHEMA_ID`, version `SCHEMA_VERSION`);
`Report.from_dict()` reads it back. Renderers read a Report; they never re-run
checks.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

SCHEMA_ID = "urn:gradmagic:schema:report"
#: Bumped on any change of the data's meaning; readers check the major number.
SCHEMA_VERSION = "1.7"
#: The MIME type under which a Report travels to the JupyterLab extension.
MIME_TYPE = "application/vnd.gradmagic.report+json"

SEVERITIES = ("error", "warning", "info")

#: The longest a message, a note or an error of a report may be; beyond, it is cut, with a note of how much more.
TEXT_LIMIT = 3_000
#: The longest a name, a label or a signature of a report may be.
NAME_LIMIT = 300
#: Characters no view shows as they are: control characters (an ANSI escape colours a terminal and JupyterLab's
#: text output, a NUL ends an SVG figure), bidirectional overrides (which reorder what is shown) and lone surrogates
#: (which cannot be sent as UTF-8). Newlines and tabs are kept.
_UNSHOWN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
#: Room kept for the note at the end of a cut text: ` … (1,234,567 characters more)`.
_NOTE_ROOM = 40


def display_text(text: str, limit: int | None = TEXT_LIMIT) -> str:
    """`text` as every view can show it literally: line endings made `\\n`, the characters no view shows as they are
    written as Python escapes (`\\x1b`, `\\x00`, `\\u202e`), and text beyond `limit` characters cut, with a note of
    how much more there was. Markup (HTML, `$...$`) is left as it is: each view shows it as text. Applying it again
    changes nothing."""
    if _UNSHOWN.search(text):
        text = _UNSHOWN.sub(_escaped, text.replace("\r\n", "\n").replace("\r", "\n"))
    if limit is not None and len(text) > limit:
        kept = max(limit - _NOTE_ROOM, 0)
        text = f"{text[:kept]} … ({len(text) - kept:,} characters more)"
    return text


def _escaped(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


#: Fields that hold prose (cut at TEXT_LIMIT; other strings are names, cut at NAME_LIMIT).
_PROSE_FIELDS = frozenset({"message", "reason", "note", "notes", "error", "skipped_because", "reasons"})
#: Fields that hold identifiers other data refers to (graph node ids): never changed, and never shown.
_KEY_FIELDS = frozenset({"id", "source", "target", "members"})


@functools.cache
def _text_fields(cls: type) -> tuple[tuple[str, int], ...]:
    return tuple(
        (f.name, TEXT_LIMIT if f.name in _PROSE_FIELDS else NAME_LIMIT)
        for f in dataclasses.fields(cls)
        if f.name not in _KEY_FIELDS and ("str" in str(f.type) or "dict" in str(f.type))
    )


def _shown(value: Any, limit: int) -> Any:
    """`value` with its strings (its own, or a tuple's, list's or dict's values') made `display_text`; `value` itself
    when they are already."""
    if isinstance(value, str):
        return value if len(value) <= limit and not _UNSHOWN.search(value) else display_text(value, limit)
    if isinstance(value, (tuple, list)):
        items = [_shown(item, limit) for item in value]
        return value if all(a is b for a, b in zip(items, value)) else type(value)(items)
    if isinstance(value, dict):
        items = {key: _shown(item, limit) for key, item in value.items()}
        return value if all(items[key] is item for key, item in value.items()) else items
    return value


class _Shown:
    """Every string this data holds is as every view can show it (`display_text`), whoever made it: the checker,
    the watch, or JSON read back. It is made so once, here, so that no renderer can show a user's text as markup,
    colours or a wall of text."""

    def __post_init__(self) -> None:
        for name, limit in _text_fields(type(self)):
            value = getattr(self, name)
            if value is None or (type(value) is str and len(value) <= limit and not _UNSHOWN.search(value)):
                continue  # the common case, quickly
            shown = _shown(value, limit)
            if shown is not value:
                object.__setattr__(self, name, shown)


def element_label(name: str, index: tuple[int, ...] | None) -> str:
    """`x[2, 0]` for an element, `x` for a scalar or the whole tensor."""
    return f"{name}[{', '.join(map(str, index))}]" if index else name


@dataclass(frozen=True)
class Location(_Shown):
    """Where a problem is. Every field is optional; a problem names what it can."""

    input: str | None = None  # argument name, e.g. "x", or "args[1]" for a *args element
    output: str | None = None  # output name, e.g. "output[0]"
    variable: str | None = None  # a tf.Variable's name
    index: tuple[int, ...] | None = None  # element index inside the input (or variable)
    output_index: tuple[int, ...] | None = None  # element index inside the output
    line: int | None = None  # line in the user's cell (the magic line is line 1) or file
    filename: str | None = None


@dataclass(frozen=True)
class Problem(_Shown):
    """One finding: a stable `code`, a severity, and a message naming cause and fix."""

    code: str
    severity: str
    message: str
    location: Location | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, not {self.severity!r}")


@dataclass(frozen=True)
class TensorRow(_Shown):
    """A line of the shapes table: one input, output, upstream or downstream gradient, or variable."""

    role: str  # "input" | "output" | "upstream" | "downstream" | "variable" | "variable-gradient"
    name: str
    shape: tuple[int | None, ...] | None  # None: not a tensor (e.g. a None gradient)
    dtype: str | None
    expected_shape: tuple[int | None, ...] | None = None  # for gradients: the input's
    expected_dtype: str | None = None
    matches: bool = True


@dataclass(frozen=True)
class ElementComparison(_Shown):
    """One Jacobian element (or a located element in projection mode), side by side."""

    input: str  # input or variable name
    index: tuple[int, ...]
    output: str | None
    output_index: tuple[int, ...] | None
    custom: float | None
    numerical: float | None
    autodiff: float | None
    error: float | None  # scaled error used for the verdict (1.0 is the tolerance)


@dataclass(frozen=True)
class JacobianBlock(_Shown):
    """Dense Jacobians d output / d input for small sizes (for heatmaps), row-major, outputs by rows."""

    input: str
    output: str
    shape: tuple[int, int]
    custom: list[float | None]
    numerical: list[float | None]
    autodiff: list[float | None]
    #: The check's scaled error of each entry (1.0 is the tolerance; -1 where nothing was judged: a kink, no finite
    #: difference); None in a report saved before schema 1.7.
    error: list[float | None] | None = None


@dataclass(frozen=True)
class Numerics(_Shown):
    """How the finite-difference comparison was done, and what it found."""

    mode: str  # "full" | "projection" | "skipped"
    dtype: str | None = None  # dtype the finite differences ran in
    rtol: float | None = None
    atol: float | None = None
    eps: float | None = None  # relative step
    elements: int = 0  # total input (and variable) elements perturbed
    max_error: float | None = None  # worst scaled error (1.0 is the tolerance)
    probes: int = 0  # projection mode: number of random directions
    noise_floor: float | None = None  # projection mode: measured relative noise
    worst: tuple[ElementComparison, ...] = ()
    jacobians: tuple[JacobianBlock, ...] = ()
    skipped_because: str | None = None


@dataclass(frozen=True)
class GraphNode(_Shown):
    """An op (or an input, output or gradient) of the traced forward-and-backward graph."""

    id: str
    op: str  # the framework's op type, e.g. "Exp"; "" for inputs, outputs and gradients
    label: str
    role: str  # "input" | "variable" | "forward" | "output" | "upstream" | "backward" | "downstream"
    shapes: tuple[tuple[int | None, ...], ...] = ()  # of its outputs
    dtypes: tuple[str, ...] = ()
    line: int | None = None  # the line of the user's source that created it
    count: int = 1  # ops this node stands for (more than 1 when a name scope is folded)


@dataclass(frozen=True)
class GraphEdge(_Shown):
    """A tensor from one node to another; `saved` when the backward keeps it from the forward."""

    source: str
    target: str
    shape: tuple[int | None, ...] | None
    dtype: str | None
    saved: bool = False
    bytes: int | None = None


@dataclass(frozen=True)
class GraphScope(_Shown):
    """A name scope drawn as one node (`id`, e.g. `forward/block_2`) in place of its `members`, which it stands for.

    The node's shapes, dtypes and line are those of its first member."""

    id: str
    label: str
    role: str
    count: int  # ops it stands for
    members: tuple[str, ...]  # node ids, in the graph's order


@dataclass(frozen=True)
class GraphLayout:
    """Where the gradient graph's drawings put each node (computed in `gradmagic/checking/graph_layout.py`).

    `positions` holds every drawn node (a scope's id in place of its members) in layout units: x the layer
    (0 at the left), y the row, growing downwards: the forward lane's bands, then the backward lane's. `scopes`
    are the name scopes folded into one node each, when the graph has too many nodes to draw one by one.
    """

    positions: dict[str, tuple[float, float]]
    scopes: tuple[GraphScope, ...] = ()
    #: Edges that would cross another node's box drawn straight, with the points they pass through between their ends
    #: (layout units); an edge not listed is drawn straight.
    routes: tuple[GraphRoute, ...] = ()


@dataclass(frozen=True)
class GraphRoute:
    """The bend points of one drawn edge, between its ends, in layout units."""

    source: str
    target: str
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Graph:
    """The op's forward and backward as the framework traced them, plumbing folded away unless `raw`."""

    nodes: tuple[GraphNode, ...]
    edges: tuple[GraphEdge, ...]
    saved_tensors: int = 0
    saved_bytes: int = 0  # what the backward keeps alive from the forward
    raw: bool = False
    traced_ops: int = 0  # ops in the traced graph before folding
    layout: GraphLayout | None = None  # None in a report saved before schema 1.5

    def folded(self, scopes: tuple[GraphScope, ...] | None = None) -> Graph:
        """The graph as drawn: each of `scopes` (by default its layout's) one node, edges between nodes once."""
        if scopes is None:
            scopes = self.layout.scopes if self.layout is not None else ()
        if not scopes:
            return self
        folded_id = {member: scope.id for scope in scopes for member in scope.members}
        by_id = {scope.id: scope for scope in scopes}
        nodes: dict[str, GraphNode] = {}
        for node in self.nodes:
            key = folded_id.get(node.id, node.id)
            if key in nodes:
                continue
            scope = by_id.get(key)
            nodes[key] = (
                node
                if scope is None
                else GraphNode(key, "scope", scope.label, scope.role, node.shapes, node.dtypes, node.line, scope.count)
            )
        edges: dict[tuple[str, str], GraphEdge] = {}
        for edge in self.edges:
            source, target = folded_id.get(edge.source, edge.source), folded_id.get(edge.target, edge.target)
            if source != target and (source, target) not in edges:
                edges[(source, target)] = dataclasses.replace(edge, source=source, target=target)
        return dataclasses.replace(self, nodes=tuple(nodes.values()), edges=tuple(edges.values()))

    def __repr__(self) -> str:
        saved = self.saved_tensors
        return (
            f"<Graph: {len(self.nodes)} node{'s' * (len(self.nodes) != 1)}, {len(self.edges)} "
            f"edge{'s' * (len(self.edges) != 1)}, {saved} saved tensor{'s' * (saved != 1)}>"
        )


@dataclass(frozen=True)
class Sweep(_Shown):
    """The op along one input element, the others held at the example point.

    `values` is the output element, `custom` and `autodiff` its derivative
    through the custom gradient and through the forward's own ops (both in the
    op's dtype), `numerical` the central difference (in `numerical_dtype`).
    The input is a scalar, or the op is element-wise in it (`elementwise`):
    then output[i] depends on input[i] alone and the curve is the op's
    element-wise function.
    """

    input: str
    index: tuple[int, ...]
    output: str
    output_index: tuple[int, ...]
    example: float  # the element's value at the example point
    points: tuple[float, ...]
    values: tuple[float | None, ...]
    custom: tuple[float | None, ...]
    autodiff: tuple[float | None, ...] | None  # None where the forward has no autodiff gradient
    numerical: tuple[float | None, ...]
    dtype: str
    numerical_dtype: str
    elementwise: bool = False
    kinks: tuple[float, ...] = ()  # where the check found the forward not differentiable


@dataclass(frozen=True)
class Surrogate(_Shown):
    """A custom gradient that is deliberately not the derivative: declared by the user, or recognised.

    Declared (`surrogate=True`), its difference from the true derivative is
    reported as `surrogate-differs` (info) and does not fail the check.
    Recognised only, the check fails with `fd-mismatch` and names the pattern.
    """

    declared: bool
    pattern: str | None = None  # "straight-through estimator", "gradient clipping", "gradient reversal", ...
    reason: str | None = None  # what in the measurements shows the pattern


@dataclass(frozen=True)
class OpDescription(_Shown):
    """What was checked."""

    name: str
    signature: str
    framework: str
    framework_version: str
    origin: str  # "magic" | "decorated" | "plain" | "composite"
    mode: str = "eager"  # execution mode the check ran in
    filename: str | None = None
    backend: str | None = None  # Keras 3's backend ("tensorflow", "jax", "torch") when framework is "keras"


@dataclass(frozen=True)
class BackendResult(_Shown):
    """The op checked on one Keras backend, in its own process (the portability check)."""

    backend: str  # "tensorflow" | "jax" | "torch"
    verdict: str  # "pass" | "warn" | "surrogate" | "fail" | "unavailable"
    version: str | None = None
    problems: tuple[Problem, ...] = ()
    seconds: float = 0.0
    note: str | None = None  # why it is unavailable


@dataclass(frozen=True)
class Report(_Shown):
    """The result of `gradmagic.check`: problems, the shapes table, numerics and timings."""

    op: OpDescription
    problems: tuple[Problem, ...] = ()
    tensors: tuple[TensorRow, ...] = ()
    numerics: Numerics = field(default_factory=lambda: Numerics(mode="skipped"))
    timings: dict[str, float] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    graph: Graph | None = None
    sweep: Sweep | None = None
    backends: tuple[BackendResult, ...] = ()
    surrogate: Surrogate | None = None

    @property
    def ok(self) -> bool:
        """True when no problem has severity `error`."""
        return not any(problem.severity == "error" for problem in self.problems)

    @property
    def verdict(self) -> str:
        """ "fail" with an error; "unchecked" when no gradient value could be compared (`numerics.skipped_because`
        says why: no floating input, complex inputs, finite differences NaN everywhere); "surrogate" when a declared
        surrogate gradient differs from the true derivative (`surrogate-differs`, `surrogate-nonlinear`); "warn"
        with a warning; else "pass"."""
        if not self.ok:
            return "fail"
        if self.numerics.mode == "skipped":
            return "unchecked"
        if any(problem.code in ("surrogate-differs", "surrogate-nonlinear") for problem in self.problems):
            return "surrogate"
        return "warn" if any(problem.severity == "warning" for problem in self.problems) else "pass"

    def codes(self) -> list[str]:
        """The problem codes, in order."""
        return [problem.code for problem in self.problems]

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable data, valid against the package's JSON Schema."""
        data = _plain(dataclasses.asdict(self))
        return {"$schema": SCHEMA_ID, "version": SCHEMA_VERSION, "ok": self.ok, "verdict": self.verdict, **data}

    def __str__(self) -> str:
        """One line: the op, its verdict and its problem codes. The whole report as text is
        `gradmagic.render.text.render_text(report)`, what IPython shows in a terminal."""
        codes = ", ".join(dict.fromkeys(self.codes()))
        return f"{self.op.name}{self.op.signature}: {self.verdict}" + (f" ({codes})" if codes else "")

    def __repr__(self) -> str:
        return f"<Report {self}>"

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        """Read a Report back from `to_dict()` data of the same major version."""
        major = str(data.get("version", "")).split(".")[0]
        if major != SCHEMA_VERSION.split(".")[0]:
            raise ValueError(f"report version {data.get('version')!r} is not readable by schema {SCHEMA_VERSION}")
        numerics = dict(data["numerics"])
        for key in ("max_error", "noise_floor"):
            numerics[key] = _number(numerics[key])
        numerics["worst"] = tuple(
            ElementComparison(
                **{
                    **_tuples(e, "index", "output_index"),
                    **{key: _number(e[key]) for key in ("custom", "numerical", "autodiff", "error")},
                }
            )
            for e in numerics["worst"]
        )
        numerics["jacobians"] = tuple(
            JacobianBlock(
                **{
                    **block,
                    "shape": tuple(block["shape"]),
                    **{key: [_number(v) for v in block[key]] for key in ("custom", "numerical", "autodiff")},
                    "error": None if block.get("error") is None else [_number(v) for v in block["error"]],
                }
            )
            for block in numerics["jacobians"]
        )
        return cls(
            op=OpDescription(**data["op"]),
            problems=_problems(data["problems"]),
            tensors=tuple(TensorRow(**_tuples(t, "shape", "expected_shape")) for t in data["tensors"]),
            numerics=Numerics(**numerics),
            timings=dict(data["timings"]),
            options=dict(data["options"]),
            graph=_graph(data.get("graph")),
            sweep=_sweep(data.get("sweep")),
            backends=tuple(
                BackendResult(**{**b, "problems": _problems(b["problems"])}) for b in data.get("backends", ())
            ),
            surrogate=Surrogate(**data["surrogate"]) if data.get("surrogate") else None,
        )


#: The report of a watch (`gradmagic.watch()`): a report of reports, one per custom-gradient op the watched code
#: reached.
WATCH_SCHEMA_ID = "urn:gradmagic:schema:watch-report"
WATCH_SCHEMA_VERSION = "1.0"
WATCH_MIME_TYPE = "application/vnd.gradmagic.watch-report+json"
_VERDICT_ORDER = ("fail", "warn", "surrogate", "pass", "unchecked")


@dataclass(frozen=True)
class ValueSummary(_Shown):
    """One input or output of an op over the calls a watch recorded: its dtype, the shapes it had, its range."""

    name: str  # "x", "args[1]", "output", "output[0]"
    dtype: str
    shapes: tuple[tuple[int | None, ...], ...]  # the distinct shapes, in the order first seen (at most 8)
    minimum: float | None = None  # over the finite elements of every recorded call; None: no finite number
    maximum: float | None = None
    nonfinite_calls: int = 0  # calls in which it had a NaN or infinite element


@dataclass(frozen=True)
class NonFinite(_Shown):
    """The first call in which an op's gradient (or its output) had NaN or infinite elements."""

    op: str
    call: int | None  # the op's call (1: its first) whose gradient or output it was; None: not recorded
    kind: str  # "gradient" | "output"
    tensor: str  # the input the gradient is for ("x"), or the output ("output")
    index: tuple[int, ...]  # its first non-finite element
    elements: int  # how many were non-finite
    values: str  # "NaN", "Inf", "NaN and Inf"
    from_finite: bool  # the upstream gradient (for a gradient) or the op's inputs (for an output) were finite

    def __str__(self) -> str:
        """`row_norm, call 3: dx[5, 0] NaN (8 elements), from a finite upstream gradient`."""
        element = element_label(self.tensor, self.index)
        what = f"d{element}" if self.kind == "gradient" else element
        source = "a finite upstream gradient" if self.kind == "gradient" else "finite inputs"
        if not self.from_finite:
            source = source.replace("a finite", "a non-finite").replace("finite inputs", "non-finite inputs")
        call = f"call {self.call}" if self.call is not None else "an unnumbered call"
        elements = f"{self.elements} element{'s' * (self.elements != 1)}"
        return f"{self.op}, {call}: {what} {self.values} ({elements}), from {source}"


@dataclass(frozen=True)
class CheckedCall(_Shown):
    """A call a watch kept, and the verdict of the op's check at its inputs."""

    call: int
    reasons: tuple[str, ...]  # why it was kept: "first call", "largest values", "first non-finite gradient", ...
    shapes: tuple[tuple[int, ...], ...]  # of its recorded inputs
    verdict: str
    codes: tuple[str, ...]


@dataclass(frozen=True)
class WatchedOp(_Shown):
    """One custom-gradient op under a watch: what its calls received and did, and its check at the inputs it got.

    `report` is an ordinary Report: the op checked at the kept call that shows the most (`checked_call`), or "not
    checked" with the reason. `findings` are what the watched code itself showed: a gradient that went non-finite from
    a finite upstream gradient, calls that could not be recorded.
    """

    report: Report
    where: str | None  # "Cell In[3], line 2" or "/path/model.py, line 14": where the op is defined
    calls: int
    compiled_calls: int = 0  # of `calls`, those inside compiled code (tf.function, model.fit, a TF1 graph)
    gradient_calls: int = 0
    inputs: tuple[ValueSummary, ...] = ()
    outputs: tuple[ValueSummary, ...] = ()
    nonfinite_gradient_calls: int = 0
    nonfinite_output_calls: int = 0
    first_nonfinite_gradient: NonFinite | None = None
    first_nonfinite_output: NonFinite | None = None
    checked: tuple[CheckedCall, ...] = ()
    checked_call: int | None = None
    findings: tuple[Problem, ...] = ()

    @property
    def name(self) -> str:
        return self.report.op.name

    @property
    def verdict(self) -> str:
        """The report's verdict, made "fail" by an error in `findings` (and "warn" by a warning, over "pass")."""
        severities = {finding.severity for finding in self.findings}
        if "error" in severities:
            return "fail"
        if "warning" in severities and self.report.verdict == "pass":
            return "warn"
        return self.report.verdict

    @property
    def first_problem(self) -> WatchProblem | None:
        """The first error (else warning) the watch found for this op, in its findings or its check."""
        problems = self.problems
        return next((p for p in problems if p.severity == "error"), problems[0] if problems else None)

    @property
    def problems(self) -> tuple[WatchProblem, ...]:
        """Its findings, then its check's errors and warnings, each naming the op."""
        return tuple(WatchProblem.of(self.name, finding, None) for finding in self.findings) + tuple(
            WatchProblem.of(self.name, problem, self.checked_call)
            for problem in self.report.problems
            if problem.severity != "info"
        )


@dataclass(frozen=True)
class WatchProblem(_Shown):
    """A problem of a watch: the op it is about, and the call whose recorded inputs show it (None: the watched code
    itself showed it)."""

    op: str
    code: str
    severity: str
    message: str
    call: int | None = None
    location: Location | None = None

    @classmethod
    def of(cls, op: str, problem: Problem, call: int | None) -> WatchProblem:
        return cls(op, problem.code, problem.severity, problem.message, call, problem.location)

    def __str__(self) -> str:
        at = f" (at call {self.call}'s inputs)" if self.call is not None else ""
        return f"{self.op}: {self.severity} {self.code}{at}: {self.message}"


@dataclass(frozen=True)
class WatchReport(_Shown):
    """What `gradmagic.watch()` found: every custom-gradient op the watched code reached, each with an ordinary
    Report (`ops`), and where the first gradient went non-finite.

    `timings`: `watched` is the watched code's wall time (recording included), `recording` the part of it spent in
    the watch's recording, `checks` the checks at the end. Kept calls' inputs take at most `memory_limit` bytes;
    `calls_not_kept` calls that would have been kept were not, for that limit.
    """

    watched: tuple[WatchedOp, ...]
    framework: str
    framework_version: str
    first_nonfinite_gradient: NonFinite | None = None
    first_nonfinite_output: NonFinite | None = None
    timings: dict[str, float] = field(default_factory=dict)
    memory_limit: int = 0
    kept_bytes: int = 0
    calls_not_kept: int = 0
    notes: tuple[str, ...] = ()
    error: str | None = None  # what the watched code raised ("ValueError: ..."), if it did

    @property
    def ops(self) -> tuple[Report, ...]:
        """One ordinary Report per op, in the order their first calls returned (a nested op before the op calling
        it)."""
        return tuple(op.report for op in self.watched)

    @property
    def problems(self) -> tuple[WatchProblem, ...]:
        """Every op's errors and warnings, each naming its op."""
        return tuple(problem for op in self.watched for problem in op.problems)

    @property
    def ok(self) -> bool:
        """True when no problem has severity `error`."""
        return not any(problem.severity == "error" for problem in self.problems)

    @property
    def verdict(self) -> str:
        """The worst of the ops' verdicts ("fail", "warn", "surrogate", "pass"); "unchecked" when no op was checked."""
        verdicts = [op.verdict for op in self.watched]
        return min(verdicts, key=_VERDICT_ORDER.index) if verdicts else "unchecked"

    def __getitem__(self, name: str) -> WatchedOp:
        """The watched op called `name`."""
        for op in self.watched:
            if op.name == name:
                return op
        raise KeyError(f"no op named {name!r} was watched; the ops are {', '.join(op.name for op in self.watched)}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable data, valid against `watch_schema()`; each op's report as `Report.to_dict()` gives it."""
        data = _plain(dataclasses.asdict(self))
        for entry, op in zip(data["watched"], self.watched):
            entry.update(name=op.name, verdict=op.verdict, report=op.report.to_dict())
        problems = [_plain(dataclasses.asdict(problem)) for problem in self.problems]
        return {
            "$schema": WATCH_SCHEMA_ID,
            "version": WATCH_SCHEMA_VERSION,
            "ok": self.ok,
            "verdict": self.verdict,
            "problems": problems,
            **data,
        }

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WatchReport:
        """Read a WatchReport back from `to_dict()` data of the same major version."""
        major = str(data.get("version", "")).split(".")[0]
        if major != WATCH_SCHEMA_VERSION.split(".")[0]:
            raise ValueError(
                f"watch report version {data.get('version')!r} is not readable by schema {WATCH_SCHEMA_VERSION}"
            )
        return cls(
            watched=tuple(_watched_op(entry) for entry in data["watched"]),
            framework=data["framework"],
            framework_version=data["framework_version"],
            first_nonfinite_gradient=_non_finite(data.get("first_nonfinite_gradient")),
            first_nonfinite_output=_non_finite(data.get("first_nonfinite_output")),
            timings=dict(data["timings"]),
            memory_limit=data["memory_limit"],
            kept_bytes=data["kept_bytes"],
            calls_not_kept=data["calls_not_kept"],
            notes=tuple(data["notes"]),
            error=data.get("error"),
        )

    def __str__(self) -> str:
        """One line: the verdict and each failing op's problem codes."""
        failing = [
            f"{op.name}: {', '.join(dict.fromkeys(p.code for p in op.problems if p.severity == 'error'))}"
            for op in self.watched
            if op.verdict == "fail"
        ]
        count = len(self.watched)
        return f"watch of {count} custom-gradient op{'s' * (count != 1)}: {self.verdict}" + (
            f" ({'; '.join(failing)})" if failing else ""
        )

    def __repr__(self) -> str:
        return f"<WatchReport {self}>"


def _watched_op(data: dict[str, Any]) -> WatchedOp:
    summaries = {
        key: tuple(
            ValueSummary(
                **{
                    **summary,
                    "shapes": tuple(tuple(shape) for shape in summary["shapes"]),
                    "minimum": _number(summary["minimum"]),
                    "maximum": _number(summary["maximum"]),
                }
            )
            for summary in data[key]
        )
        for key in ("inputs", "outputs")
    }
    return WatchedOp(
        report=Report.from_dict(data["report"]),
        where=data["where"],
        calls=data["calls"],
        compiled_calls=data["compiled_calls"],
        gradient_calls=data["gradient_calls"],
        **summaries,
        nonfinite_gradient_calls=data["nonfinite_gradient_calls"],
        nonfinite_output_calls=data["nonfinite_output_calls"],
        first_nonfinite_gradient=_non_finite(data.get("first_nonfinite_gradient")),
        first_nonfinite_output=_non_finite(data.get("first_nonfinite_output")),
        checked=tuple(
            CheckedCall(
                **{
                    **checked,
                    "reasons": tuple(checked["reasons"]),
                    "shapes": tuple(tuple(shape) for shape in checked["shapes"]),
                    "codes": tuple(checked["codes"]),
                }
            )
            for checked in data["checked"]
        ),
        checked_call=data["checked_call"],
        findings=_problems(data["findings"]),
    )


def _non_finite(data: dict[str, Any] | None) -> NonFinite | None:
    return NonFinite(**_tuples(data, "index")) if data else None


def _problems(data: list[dict[str, Any]]) -> tuple[Problem, ...]:
    return tuple(
        Problem(
            **{
                **p,
                "location": Location(**_tuples(p["location"], "index", "output_index")) if p.get("location") else None,
            }
        )
        for p in data
    )


def _graph(data: dict[str, Any] | None) -> Graph | None:
    if data is None:
        return None
    return Graph(
        nodes=tuple(
            GraphNode(**{**n, "shapes": tuple(tuple(s) for s in n["shapes"]), "dtypes": tuple(n["dtypes"])})
            for n in data["nodes"]
        ),
        edges=tuple(GraphEdge(**_tuples(e, "shape")) for e in data["edges"]),
        **{key: data[key] for key in ("saved_tensors", "saved_bytes", "raw", "traced_ops")},
        layout=_graph_layout(data.get("layout")),
    )


def _graph_layout(data: dict[str, Any] | None) -> GraphLayout | None:
    if data is None:
        return None
    return GraphLayout(
        positions={node_id: tuple(point) for node_id, point in data["positions"].items()},
        scopes=tuple(GraphScope(**_tuples(scope, "members")) for scope in data["scopes"]),
        routes=tuple(
            GraphRoute(route["source"], route["target"], tuple(tuple(point) for point in route["points"]))
            for route in data.get("routes", ())
        ),
    )


def _sweep(data: dict[str, Any] | None) -> Sweep | None:
    if data is None:
        return None
    series = {
        key: None if data[key] is None else tuple(_number(v) for v in data[key])
        for key in ("points", "values", "custom", "autodiff", "numerical", "kinks")
    }
    return Sweep(**{**_tuples(data, "index", "output_index"), **series, "example": _number(data["example"])})


def schema() -> dict[str, Any]:
    """The JSON Schema of `Report.to_dict()`."""
    return json.loads(resources.files("gradmagic").joinpath("schema/report.schema.json").read_text())


def watch_schema() -> dict[str, Any]:
    """The JSON Schema of `WatchReport.to_dict()`, with the Report's schema (each op's report) bundled in."""
    bundled = json.loads(resources.files("gradmagic").joinpath("schema/watch.schema.json").read_text())
    bundled["$defs"]["report"] = schema()
    return bundled


_NON_FINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def _plain(value: Any) -> Any:
    """Tuples to lists and non-finite floats to "NaN"/"Infinity"/"-Infinity", so the data is strict JSON."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _number(value: Any) -> Any:
    """The inverse of `_plain` for one numeric field."""
    return _NON_FINITE.get(value, value) if isinstance(value, str) else value


def _tuples(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {key: tuple(value) if key in keys and value is not None else value for key, value in data.items()}
