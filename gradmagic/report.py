"""The Report: what a check found, as plain data.

A Report is the contract between the checker and every renderer (text,
HTML, widget, the JupyterLab extension); how it displays in IPython is the
business of IPython's formatters (`gradmagic.notebook.display`). `Report.to_dict()` gives
JSON-serialisable data that validates against the JSON Schema shipped in
`gradmagic/schema/report.schema.json` (`SCHEMA_ID`, version `SCHEMA_VERSION`);
`Report.from_dict()` reads it back. Renderers read a Report; they never re-run
checks.

The dataclasses here are the data model's one source: their fields, type hints and comments (`#:` above a field,
or `#` after it) make the JSON Schema and the lab extension's TypeScript types (`python -m gradmagic.schema`
writes both), and `to_dict()` and `from_dict()` follow the fields and type hints, whatever the class.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Annotated, Any, ClassVar, Literal, TypeVar

SCHEMA_ID = "urn:gradmagic:schema:report"
#: Bumped on any change of the data's meaning; readers check the major number. 1.1 added `graph`, 1.2 `sweep`, 1.3
#: `op.backend` and `backends` (the portability check), 1.4 the surrogate verdict and `surrogate`, 1.5
#: `graph.layout`, 1.6 the unchecked verdict and the composite origin, 1.7 `numerics.jacobians[].error` and
#: `graph.layout.routes`, 1.8 `words`, 1.9 `numerics.resolution`, `inputs`,
#: `inputs_from` and `words.checked_at`.
SCHEMA_VERSION = "1.9"
#: The MIME type under which a Report travels to the JupyterLab extension.
MIME_TYPE = "application/vnd.gradmagic.report+json"


class JsonSchema(Mapping[str, Any]):
    """JSON Schema keywords for a type, beside its Python type: `Annotated[int, JsonSchema(minimum=0)]`. Keywords
    add to the schema of the Python type; a `oneOf` replaces it. Read-only, and hashable: typing hashes what
    `Annotated` carries."""

    def __init__(self, **keywords: Any) -> None:
        self._keywords = keywords

    def __getitem__(self, key: str) -> Any:
        return self._keywords[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keywords)

    def __len__(self) -> int:
        return len(self._keywords)

    def __hash__(self) -> int:
        return hash(json.dumps(self._keywords, sort_keys=True))


#: A float, NaN and the infinities included: JSON carries those as the strings "NaN", "Infinity" and "-Infinity".
AnyFloat = Annotated[float, JsonSchema(oneOf=[{"type": "number"}, {"enum": ["NaN", "Infinity", "-Infinity"]}])]
#: A count, or a size in bytes.
Count = Annotated[int, JsonSchema(minimum=0)]
#: A tensor's shape; None for a dimension not known.
Shape = tuple[int | None, ...]
#: An element's index inside its tensor; empty for a scalar.
Index = tuple[Count, ...]
#: "fail": a problem of severity error; "unchecked": nothing fails but no gradient value could be compared
#: (`numerics.skipped_because` says why; 1.6); "surrogate": a declared surrogate gradient differs from the true
#: derivative and nothing fails (1.4); "warn": a warning; else "pass".
Verdict = Literal["pass", "warn", "surrogate", "unchecked", "fail"]
#: A verdict on one Keras backend; "unavailable" when the backend could not run (not installed, its process failed).
BackendVerdict = Literal["pass", "warn", "surrogate", "unchecked", "fail", "unavailable"]
Severity = Literal["error", "warning", "info"]
#: A row of the shapes table: an input, an output, an upstream or downstream gradient, a variable or its gradient.
TensorRole = Literal["input", "output", "upstream", "downstream", "variable", "variable-gradient"]
#: A node of the gradient graph: the forward lane's roles, then the backward lane's.
NodeRole = Literal["input", "variable", "forward", "output", "upstream", "backward", "downstream"]

SEVERITIES: tuple[str, ...] = typing.get_args(Severity)


def added_in(version: str, default: Any = None) -> Any:
    """A field that data of schema versions before `version` lacks: readers take `default` for it, and the schema
    does not require it."""
    return field(default=default, metadata={"added in": version})


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
        entries = {key: _shown(item, limit) for key, item in value.items()}
        return value if all(entries[key] is item for key, item in value.items()) else entries
    return value


class _Shown:
    """Every string this data holds is as every view can show it (`display_text`), whoever made it: the checker,
    the watch, or JSON read back. It is made so once, here, so that no renderer can show a user's text as markup,
    colours or a wall of text."""

    def __post_init__(self) -> None:
        cls: type = type(self)  # as `type`: mypy finds no class object hashable (it reads `__hash__` unbound)
        for name, limit in _text_fields(cls):
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
    index: Index | None = None  # element index inside the input (or variable)
    output_index: Index | None = None  # element index inside the output
    line: int | None = None  # line in the user's cell (the magic line is line 1) or file
    filename: str | None = None


@dataclass(frozen=True)
class Problem(_Shown):
    """One finding: a stable `code`, a severity, and a message naming cause and fix."""

    #: Stable identifier, e.g. return-structure, grad-count, grad-shape, grad-dtype, missing-variables-kwarg,
    #: variable-grad-count, none-gradient, not-differentiable, forward-error, grad-error, keyword-input, input-type,
    #: grad-structure, nonfinite-output, nonfinite-gradient, fd-mismatch, fd-error, second-order-mismatch,
    #: second-order-skipped, graph-unavailable, nondifferentiable-point, autodiff-nonfinite, autodiff-differs,
    #: graph-mismatch, non-resource-variable, closed-over-tensor, override-unused, override-unregistered,
    #: override-eager.
    code: str
    severity: Severity
    message: str  # the cause and the fix
    location: Location | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, not {self.severity!r}")


@dataclass(frozen=True)
class TensorRow(_Shown):
    """A line of the shapes table: one input, output, upstream or downstream gradient, or variable."""

    role: TensorRole
    name: str
    shape: Shape | None  # None: not a tensor (e.g. a None gradient)
    dtype: str | None
    expected_shape: Shape | None = None  # for gradients: the input's
    expected_dtype: str | None = None
    matches: bool = True  # the shape and dtype are the expected ones


@dataclass(frozen=True)
class ElementComparison(_Shown):
    """One Jacobian element (or a located element in projection mode), side by side."""

    input: str  # input or variable name
    index: Index
    output: str | None
    output_index: Index | None
    custom: AnyFloat | None  # through the custom gradient
    numerical: AnyFloat | None  # by finite differences
    autodiff: AnyFloat | None  # through the forward's own ops
    error: AnyFloat | None  # scaled error used for the verdict (1.0 is the tolerance)


@dataclass(frozen=True)
class JacobianBlock(_Shown):
    """Dense Jacobians d output / d input for small sizes (for heatmaps), row-major, outputs by rows."""

    input: str
    output: str
    shape: tuple[Count, Count]  # outputs, inputs
    custom: list[AnyFloat | None]
    numerical: list[AnyFloat | None]
    autodiff: list[AnyFloat | None]
    #: The check's scaled error of each entry (1.0 is the tolerance; -1 where nothing was judged: a kink, no finite
    #: difference).
    error: list[AnyFloat | None] | None = added_in("1.7")


@dataclass(frozen=True)
class CheckedInput(_Shown):
    """One example input the check ran at (a leaf of the op's arguments): how it was given and what it held."""

    name: str  # as the report names its elements: "x", "args[1]", "pair[0]"
    dtype: str | None
    shape: Shape | None
    minimum: AnyFloat | None = None  # its smallest and largest finite value (None for strings and empty tensors)
    maximum: AnyFloat | None = None
    expression: str | None = None  # the expression it was typed as (`--check x=EXPR`, Re-check); None for values


@dataclass(frozen=True)
class InputResolution(_Shown):
    """The smallest error of one input's (or variable's) gradient a check would have seen."""

    input: str
    #: The smallest relative error r for which the input's gradient, all of it (1 + r) times the right one, fails;
    #: None where no element of it was judged (or its gradient is zero there).
    relative: AnyFloat | None


@dataclass(frozen=True)
class Resolution(_Shown):
    """What a check could resolve: the precision its finite differences ran in and why, and the smallest error it
    would have seen in each input's gradient."""

    dtype: str  # the float the finite differences ran in
    why: str  # why that float: "`w` is a float32 variable", "the inputs' own", "the inputs cast up to float64 ..."
    inputs: tuple[InputResolution, ...] = ()


@dataclass(frozen=True)
class Numerics(_Shown):
    """How the finite-difference comparison was done, and what it found."""

    #: "full": every Jacobian entry by finite differences; "projection": random directions, wrong elements located
    #: after; "skipped": no gradient value compared (`skipped_because` says why).
    mode: Literal["full", "projection", "skipped"]
    dtype: str | None = None  # the dtype the finite differences ran in
    rtol: float | None = None
    atol: float | None = None
    eps: float | None = None  # relative step
    elements: Count = 0  # total input (and variable) elements perturbed
    max_error: AnyFloat | None = None  # worst scaled error (1.0 is the tolerance)
    probes: Count = 0  # projection mode: number of random directions
    noise_floor: AnyFloat | None = None  # projection mode: measured relative noise
    worst: tuple[ElementComparison, ...] = ()
    jacobians: tuple[JacobianBlock, ...] = ()
    skipped_because: str | None = None
    resolution: Resolution | None = added_in("1.9")  # what the comparison could resolve; None where it did not run


@dataclass(frozen=True)
class GraphNode(_Shown):
    """An op (or an input, output or gradient) of the traced forward-and-backward graph."""

    id: str
    op: str  # the framework's op type, e.g. "Exp"; "" for inputs, outputs and gradients
    label: str
    role: NodeRole
    shapes: tuple[Shape, ...] = ()  # the shapes of its outputs
    dtypes: tuple[str, ...] = ()
    line: int | None = None  # the line of the user's source that created it
    count: Annotated[int, JsonSchema(minimum=1)] = 1  # ops this node stands for (more than 1: a folded name scope)


@dataclass(frozen=True)
class GraphEdge(_Shown):
    """A tensor from one node to another; `saved` when the backward keeps it from the forward."""

    source: str
    target: str
    shape: Shape | None
    dtype: str | None
    saved: bool = False  # the backward keeps this forward tensor alive
    bytes: Count | None = None


@dataclass(frozen=True)
class GraphScope(_Shown):
    """A name scope drawn as one node (`id`, e.g. `forward/block_2`) in place of its `members`, which it stands for.

    The node's shapes, dtypes and line are those of its first member."""

    id: str
    label: str
    role: NodeRole
    count: Annotated[int, JsonSchema(minimum=1)]  # ops it stands for
    members: Annotated[tuple[str, ...], JsonSchema(minItems=2)]  # node ids, in the graph's order


@dataclass(frozen=True)
class GraphLayout:
    """Where the gradient graph's drawings put each node (computed in `gradmagic/checking/graph_layout.py`).

    `positions` holds every drawn node (a scope's id in place of its members) in layout units: x the layer
    (0 at the left), y the row, growing downwards: the forward lane's bands, then the backward lane's. `scopes`
    are the name scopes folded into one node each, when the graph has too many nodes to draw one by one.
    """

    #: Every drawn node by id (a folded scope's id in place of its members): [x, y] in layout units.
    positions: dict[str, tuple[float, float]]
    #: Name scopes drawn as one node each (graphs of more than 200 nodes); empty when none is folded.
    scopes: tuple[GraphScope, ...] = ()
    #: Edges that would cross another node's box drawn straight, with the points they pass through between their ends
    #: (layout units); an edge not listed is drawn straight.
    routes: tuple[GraphRoute, ...] = added_in("1.7", ())


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
    saved_tensors: Count = 0  # distinct forward tensors the backward consumes
    saved_bytes: Count = 0  # their total size: what the backward keeps alive from the forward
    raw: bool = False  # framework plumbing not folded away
    traced_ops: Count = 0  # ops in the traced graph before folding
    #: Where the drawings put each node, computed with the graph; without it (a report saved before 1.5) the graph
    #: is not drawn.
    layout: GraphLayout | None = added_in("1.5")

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

    input: str  # the swept input (or variable)
    index: Index  # the swept element inside it
    output: str
    output_index: Index
    example: AnyFloat  # the element's value at the example point
    points: tuple[AnyFloat, ...]  # the swept element's values
    values: tuple[AnyFloat | None, ...]  # the output element at each point
    custom: tuple[AnyFloat | None, ...]  # its derivative through the custom gradient
    autodiff: tuple[AnyFloat | None, ...] | None  # through the forward's own ops; None where it has no gradient
    numerical: tuple[AnyFloat | None, ...]  # its central difference
    dtype: str  # the dtype of values, custom and autodiff (the op's own)
    numerical_dtype: str  # the dtype the central differences ran in
    elementwise: bool = False  # output[i] depends on input[i] alone
    kinks: tuple[AnyFloat, ...] = ()  # where the check found the forward not differentiable


@dataclass(frozen=True)
class Surrogate(_Shown):
    """A custom gradient that is deliberately not the derivative: declared by the user, or recognised.

    Declared (`surrogate=True`), its difference from the true derivative is
    reported as `surrogate-differs` (info) and does not fail the check.
    Recognised only, the check fails with `fd-mismatch` and names the pattern.
    """

    declared: bool  # declared by the user (--surrogate, surrogate=True): its difference informs, it does not fail
    #: The recognised pattern: "straight-through estimator", "gradient clipping", "gradient reversal", "scaled
    #: gradient reversal", "scaled gradient", "stopped gradient", "stop_gradient-like forward"; None when none is.
    pattern: str | None = None
    reason: str | None = None  # what in the measurements shows the pattern


@dataclass(frozen=True)
class OpDescription(_Shown):
    """What was checked."""

    name: str
    signature: str  # Python signature, e.g. "(x, y=2.0)"
    #: The adapter's name: "tensorflow" (tf.custom_gradient) or "keras" (keras.ops.custom_gradient).
    framework: str
    framework_version: str
    #: Made by %%custom_gradient, decorated by hand, a plain function returning (outputs, grad_fn), or (1.6) a
    #: composite: a differentiable function that reaches custom-gradient ops inside.
    origin: Literal["magic", "decorated", "plain", "composite"]
    mode: str = "eager"  # execution mode the check ran in
    filename: str | None = None
    #: Keras 3's backend ("tensorflow", "jax", "torch") when framework is "keras", else None.
    backend: str | None = added_in("1.3")


@dataclass(frozen=True)
class BackendResult(_Shown):
    """The op checked on one Keras backend, in its own process (the portability check)."""

    backend: str  # "tensorflow", "jax" or "torch"
    verdict: BackendVerdict
    version: str | None = None  # Keras's and the backend's versions in that process
    problems: tuple[Problem, ...] = ()
    seconds: float = 0.0
    note: str | None = None  # why it is unavailable


@dataclass(frozen=True)
class WorstRow:
    """A row of the table of the worst (or located) elements, as every view shows it."""

    #: The element, its output's beside it where the Jacobian has one: "d output[2] / d x[2]"; then its custom
    #: gradient, finite differences and autodiff (with the digits that tell the first two apart where it is beyond
    #: the tolerance), and its error ÷ the tolerance.
    cells: tuple[str, str, str, str, str]
    beyond: bool  # beyond the tolerance (or its error not finite): the row is marked


@dataclass(frozen=True)
class ReportWords:
    """What every view of a report says, worded once, in Python (`gradmagic.render.words.report_words`): the static
    HTML is written with these words, and the JupyterLab view and the live widget show them as they are."""

    verdict: str  # the badge: "passes", "fails", "surrogate gradient (declared)", ...
    #: The verdict with each Keras backend it was checked on ("fails on PyTorch; passes on TensorFlow, JAX"); the
    #: badge's words for an op checked on one framework.
    headline: str
    figures: str  # the key figures after the verdict: "full mode · 3 elements in float64 · worst error ... · 24 ms"
    surrogate: str | None  # what the report says of a surrogate gradient, declared or recognised
    places: tuple[str, ...]  # where each of `problems` is ("x[2]; Cell In[3], line 4"), "" where it names no place
    numerics: str  # how the finite differences ran and what they found, in a sentence
    kinks: str | None  # where the forward is not differentiable, left out of the comparison
    worst_title: str  # "Worst elements" (full mode) or "Located elements (...)" (projection mode)
    worst: tuple[WorstRow, ...]  # the elements the table lists: those beyond the tolerance, else the first few
    #: The shapes table, a row per tensor: role, name, dtype and shape, the expected ones, and whether they match.
    shapes: tuple[tuple[str, str, str, str, str], ...]
    #: The portability table, a row per backend: backend, verdict, problems (or why not checked), versions, time.
    backends: tuple[tuple[str, str, str, str, str], ...]
    sweep: str | None  # the sweep's caption; None without a sweep
    no_sweep: str | None  # why there is no sweep; None with one
    no_sweep_live: str | None  # why there is no sweep, as the live view says it (where its Sweep button is)
    graph: str | None  # the gradient graph's summary; None without a graph
    no_graph: str | None  # why there is no gradient graph; None with one
    timings: str | None  # what ran the op, the execution mode, and the time of each phase of the check
    #: What it checked, in a sentence: the inputs (expressions and values), where they came from, the options given.
    checked_at: str | None = added_in("1.9")
    #: What the custom gradient fixes, said under the verdict where every view shows it without a click: the
    #: framework's own gradient NaN/Inf where the custom one is finite (`autodiff-nonfinite`); None otherwise.
    fixes: str | None = added_in("1.9")


@dataclass(frozen=True)
class Report(_Shown):
    """The result of `gradmagic.check()`: problems, the shapes table, the finite-difference comparison and
    timings."""

    op: OpDescription
    problems: tuple[Problem, ...] = ()
    tensors: tuple[TensorRow, ...] = ()
    numerics: Numerics = field(default_factory=lambda: Numerics(mode="skipped"))
    timings: dict[str, float] = field(default_factory=dict)  # seconds spent per phase: structure, numerics, total
    options: dict[str, Any] = field(default_factory=dict)  # the options the check ran with (rtol, atol, eps, ...)
    graph: Graph | None = added_in("1.1")  # the op's forward and backward as traced; None when not traced
    sweep: Sweep | None = added_in("1.2")  # the op along one input element (a scalar input or an element-wise op)
    #: The portability check: the same op and inputs checked on each Keras backend asked for, each in its own
    #: process; empty when not asked.
    backends: tuple[BackendResult, ...] = added_in("1.3", ())
    #: A custom gradient that is deliberately not the derivative: declared (surrogate=True), or recognised from an
    #: fd-mismatch; None otherwise.
    surrogate: Surrogate | None = added_in("1.4")
    inputs: tuple[CheckedInput, ...] = added_in("1.9", ())  # the example inputs it ran at
    #: Where those inputs came from: "the cell's --check", "%gradcheck", "gradmagic.check's arguments", "Re-check,
    #: not the cell's --check", ...; None where not said (data saved before 1.9).
    inputs_from: str | None = added_in("1.9")

    #: `$schema` and `version` head its data.
    ID: ClassVar[str] = SCHEMA_ID
    VERSION: ClassVar[str] = SCHEMA_VERSION
    #: Properties its data holds after `$schema` and `version`: derived from the fields, for readers that need not
    #: derive them again.
    DERIVED: ClassVar[tuple[str, ...]] = ("ok", "verdict")
    #: The words every view shows, and the schema version that added them: the renderers write them beside the
    #: fields, as `words` (`gradmagic.render.words.report_data`); `to_dict()` does not, and `from_dict()` leaves them.
    WORDS: ClassVar[tuple[type, str]] = (ReportWords, "1.8")

    @property
    def resolution(self) -> Resolution | None:
        """What the check could resolve (`numerics.resolution`): its precision and why, and per input the smallest
        relative error it would have seen."""
        return self.numerics.resolution

    @property
    def ok(self) -> bool:
        """True when no problem has severity `error`."""
        return not any(problem.severity == "error" for problem in self.problems)

    @property
    def verdict(self) -> Verdict:
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
        return json_data(self)

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
        """Read a Report back from `to_dict()` data of the same major version (fields a newer minor version added are
        left out, and those an older one lacked take their defaults)."""
        return _read_root(cls, data)


#: The report of a watch (`gradmagic.watch()`): a report of reports, one per custom-gradient op the watched code
#: reached.
WATCH_SCHEMA_ID = "urn:gradmagic:schema:watch-report"
#: Bumped on any change of the data's meaning; readers check the major number. 1.1 added `words`; 1.2 `traces`,
#: `traced_inputs`, `xla_calls`, `replayed_calls` and `replicas` of an op, and `checked` (an unchecked op is no pass:
#: `ok` is True only when every op reached was checked and passed), `worker` and `workers` (a multi-worker run); 1.3
#: the tests that reached an op and made a call (`tests`, `test`: `pytest --gradmagic`) and the checks' `budget`.
WATCH_SCHEMA_VERSION = "1.3"
WATCH_MIME_TYPE = "application/vnd.gradmagic.watch-report+json"
#: A watch's verdict is its ops' worst: an op not checked outweighs the others' passes.
WATCH_VERDICT_ORDER = ("fail", "warn", "unchecked", "surrogate", "pass")


@dataclass(frozen=True)
class ValueSummary(_Shown):
    """One input or output of an op over the calls a watch recorded: its dtype, the shapes it had, its range."""

    name: str  # "x", "args[1]", "output", "output[0]"
    dtype: str
    shapes: tuple[Shape, ...]  # the distinct shapes, in the order first seen (at most 8)
    minimum: AnyFloat | None = None  # over the finite elements of every recorded call; None: no finite number
    maximum: AnyFloat | None = None
    nonfinite_calls: Count = 0  # calls in which it had a NaN or infinite element


@dataclass(frozen=True)
class NonFinite(_Shown):
    """The first call in which an op's gradient (or its output) had NaN or infinite elements."""

    op: str
    call: int | None  # the op's call (1: its first) whose gradient or output it was; None: not recorded
    kind: Literal["gradient", "output"]
    tensor: str  # the input the gradient is for ("x"), or the output ("output")
    index: Index  # its first non-finite element
    elements: Count  # how many were non-finite
    values: str  # "NaN", "Inf", "NaN and Inf"
    from_finite: bool  # the upstream gradient (for a gradient) or the op's inputs (for an output) were finite
    #: The test (a pytest node id, under `pytest --gradmagic`) that made the call; None outside a test suite.
    test: str | None = added_in("1.3")

    def __str__(self) -> str:
        """`row_norm, call 3: dx[5, 0] NaN (8 elements), from a finite upstream gradient` (`, in test ...`)."""
        element = element_label(self.tensor, self.index)
        what = f"d{element}" if self.kind == "gradient" else element
        source = "a finite upstream gradient" if self.kind == "gradient" else "finite inputs"
        if not self.from_finite:
            source = source.replace("a finite", "a non-finite").replace("finite inputs", "non-finite inputs")
        call = f"call {self.call}" if self.call is not None else "an unnumbered call"
        elements = f"{self.elements} element{'s' * (self.elements != 1)}"
        test = f", in test {self.test}" if self.test else ""
        return f"{self.op}, {call}: {what} {self.values} ({elements}), from {source}{test}"


@dataclass(frozen=True)
class CheckedCall(_Shown):
    """A call a watch kept, and the verdict of the op's check at its inputs."""

    call: int
    reasons: tuple[str, ...]  # why it was kept: "first call", "largest values", "first non-finite gradient", ...
    shapes: tuple[Shape, ...]  # the shapes of its recorded inputs
    verdict: Verdict
    codes: tuple[str, ...]
    #: The test (a pytest node id, under `pytest --gradmagic`) that made the call; None outside a test suite.
    test: str | None = added_in("1.3")


@dataclass(frozen=True)
class CallsByTest(_Shown):
    """A test (under `pytest --gradmagic`) that reached an op, and how many of the op's calls it made."""

    test: str  # the pytest node id: "tests/test_layers.py::test_fit[2]"
    calls: Count


@dataclass(frozen=True)
class CheckBudget(_Shown):
    """How many checks a watch may run when it ends (each op at each kept call is one), and how many it ran: the
    kept calls beyond the budget go unchecked, chosen the same way on any machine (each op's most telling call
    first, the ops in turn)."""

    checks: Count  # the most checks the watch may run (`max_checks`)
    used: Count  # the checks it ran
    left_out: Count  # kept calls not checked for the budget


@dataclass(frozen=True)
class WatchedOp(_Shown):
    """One custom-gradient op under a watch: what its calls received and did, and its check at the inputs it got.

    `report` is an ordinary Report: the op checked at the kept call that shows the most (`checked_call`), or "not
    checked" with the reason. `findings` are what the watched code itself showed: a gradient that went non-finite from
    a finite upstream gradient, calls that could not be recorded.
    """

    report: Report
    where: str | None  # "Cell In[3], line 2" or "/path/model.py, line 14": where the op is defined
    calls: Count
    compiled_calls: Count = 0  # of `calls`, those inside compiled code (tf.function, model.fit, a TF1 graph)
    gradient_calls: Count = 0
    inputs: tuple[ValueSummary, ...] = ()
    outputs: tuple[ValueSummary, ...] = ()
    nonfinite_gradient_calls: Count = 0
    nonfinite_output_calls: Count = 0
    first_nonfinite_gradient: NonFinite | None = None
    first_nonfinite_output: NonFinite | None = None
    checked: tuple[CheckedCall, ...] = ()
    checked_call: int | None = None  # the kept call whose check `report` is
    findings: tuple[Problem, ...] = ()
    #: Times the op was traced into a graph (a tf.function, Keras's compiled functions, XLA): an op traced and never
    #: run (its graph failed, or ran inside XLA) is still reached, and checked at inputs of its traced shapes.
    traces: Count = added_in("1.2", 0)
    #: Its inputs as traced: dtypes and shapes, None for a dimension not known.
    traced_inputs: tuple[ValueSummary, ...] = added_in("1.2", ())
    #: Calls that ran inside XLA-compiled code (counted from the compiled steps that ran; their values never reach
    #: Python); not in `calls`.
    xla_calls: Count = added_in("1.2", 0)
    #: Of `calls`, those the watch made replaying an XLA-compiled step uncompiled at that step's inputs.
    replayed_calls: Count = added_in("1.2", 0)
    #: How many replicas in sync it ran on (tf.distribute), where more than one; 0 elsewhere.
    replicas: Count = added_in("1.2", 0)
    #: Under `pytest --gradmagic`: the tests that called it, in the order they first did, with their calls.
    tests: tuple[CallsByTest, ...] = added_in("1.3", ())

    #: Properties its data holds beside the fields.
    DERIVED: ClassVar[tuple[str, ...]] = ("name", "verdict")

    @property
    def name(self) -> str:
        """The op's name."""
        return self.report.op.name

    @property
    def verdict(self) -> Verdict:
        """The report's verdict, made "fail" by an error in `findings` (and "warn" by a warning, over "pass" and
        "surrogate")."""
        severities = {finding.severity for finding in self.findings}
        if "error" in severities:
            return "fail"
        if "warning" in severities and self.report.verdict in ("pass", "surrogate"):
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
    #: A Report's problem code, or one of the watch's own: watched-nonfinite-gradient, watched-nonfinite-output,
    #: watch-unrecorded.
    code: str
    severity: Severity
    message: str
    #: The op's call whose recorded inputs its check ran at; None for what the watched code itself showed.
    call: int | None = None
    location: Location | None = None

    @classmethod
    def of(cls, op: str, problem: Problem, call: int | None) -> WatchProblem:
        return cls(op, problem.code, problem.severity, problem.message, call, problem.location)

    def __str__(self) -> str:
        at = f" (at call {self.call}'s inputs)" if self.call is not None else ""
        return f"{self.op}: {self.severity} {self.code}{at}: {self.message}"


@dataclass(frozen=True)
class WorkerOp(_Shown):
    """An op as one worker of a multi-worker run watched it."""

    name: str
    calls: Count
    verdict: Verdict


@dataclass(frozen=True)
class WorkerWatch(_Shown):
    """One worker's watch of a multi-worker run (`tf.distribute.MultiWorkerMirroredStrategy`): each worker's is
    gathered on every worker when the watch ends."""

    worker: str  # "worker 1"
    verdict: Verdict
    ok: bool
    ops: tuple[WorkerOp, ...]
    problems: tuple[str, ...]  # its errors and warnings, a line each ("center: error watch-replica-gradient: ...")


@dataclass(frozen=True)
class WatchWords:
    """What every view of a watch's report says, worded once, in Python (`gradmagic.render.words.watch_words`)."""

    verdict: str  # the badge: "passes", "fails", ...
    summary: str  # "watch of 3 custom-gradient ops fails (2 errors, 0 warnings)"
    #: The framework; the time the watched code took, the watch's own part in it and the checks'; the memory the kept
    #: inputs took, of the limit.
    timings: str
    #: Where the first gradient and the first output went non-finite, that none did, or that no op was called.
    lines: tuple[str, ...]
    raised: str | None  # what the watched code raised, in a sentence
    #: The table, a row per op of `watched`: name, where, calls, verdict, its first problem (code and first sentence).
    rows: tuple[tuple[str, str, str, str, str], ...]
    #: A list per op of `watched`: what its calls received and did, and the calls it was checked at, a line each.
    calls: tuple[tuple[str, ...], ...]
    #: A list per op of `watched`: where each of its `findings` is ("model.py, line 14"), "" where it names no place.
    places: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class WatchReport(_Shown):
    """What `gradmagic.watch()` found: every custom-gradient op the watched code reached, each with an ordinary
    Report (`ops`), and where the first gradient went non-finite.

    `timings`: `watched` is the watched code's wall time (recording included), `recording` the part of it spent in
    the watch's recording, `checks` the checks at the end. Kept calls' inputs take at most `memory_limit` bytes;
    `calls_not_kept` calls that would have been kept were not, for that limit.
    """

    #: The ops, in the order their first calls returned (a nested op before the op calling it).
    watched: tuple[WatchedOp, ...]
    framework: str
    framework_version: str
    #: The first gradient in the watched code that went non-finite from a finite upstream gradient; else the first
    #: that went non-finite at all.
    first_nonfinite_gradient: NonFinite | None = None
    #: The first output that was non-finite from finite inputs; else the first non-finite at all.
    first_nonfinite_output: NonFinite | None = None
    timings: dict[str, float] = field(default_factory=dict)  # seconds: watched, recording, checks
    memory_limit: Count = 0  # bytes the kept calls' inputs may take
    kept_bytes: Count = 0
    calls_not_kept: Count = 0  # calls that would have been kept but for the memory limit
    notes: tuple[str, ...] = ()  # what the watch changed while it ran (each put back), and what it could not record
    error: str | None = None  # what the watched code raised ("ValueError: ..."), if it did
    #: In a multi-worker run, the worker this report is of ("worker 0"), and every worker's watch, gathered.
    worker: str | None = added_in("1.2")
    workers: tuple[WorkerWatch, ...] = added_in("1.2", ())
    #: The checks' budget and its use, where the watch had one (`max_checks`).
    budget: CheckBudget | None = added_in("1.3")

    #: `$schema` and `version` head its data.
    ID: ClassVar[str] = WATCH_SCHEMA_ID
    VERSION: ClassVar[str] = WATCH_SCHEMA_VERSION
    #: Properties its data holds after `$schema` and `version`, derived from the fields.
    DERIVED: ClassVar[tuple[str, ...]] = ("ok", "verdict", "checked", "problems")
    #: Of those, the ones data of an earlier schema version lacks, and the version that added them.
    DERIVED_ADDED: ClassVar[dict[str, str]] = {"checked": "1.2"}
    #: The words every view shows, and the schema version that added them (written by the renderers:
    #: `gradmagic.render.words.watch_data`).
    WORDS: ClassVar[tuple[type, str]] = (WatchWords, "1.1")

    @property
    def ops(self) -> tuple[Report, ...]:
        """One ordinary Report per op, in the order their first calls returned (a nested op before the op calling
        it)."""
        return tuple(op.report for op in self.watched)

    @property
    def problems(self) -> tuple[WatchProblem, ...]:
        """Every op's findings, then its check's errors and warnings, each naming its op."""
        return tuple(problem for op in self.watched for problem in op.problems)

    @property
    def ok(self) -> bool:
        """True when the watched code reached at least one op, every op it reached was checked, and no problem has
        severity `error`: an op not checked is no pass (`assert watch.report.ok` never passes on nothing). In a
        multi-worker run, on every worker."""
        mine = bool(self.watched) and self.checked == len(self.watched) and self.verdict != "fail"
        return mine and all(worker.ok for worker in self.workers)

    @property
    def checked(self) -> int:
        """How many of the ops reached were checked (their verdict is not "unchecked")."""
        return sum(op.verdict != "unchecked" for op in self.watched)

    @property
    def verdict(self) -> Verdict:
        """The worst of the ops' verdicts (every worker's, in a multi-worker run): "fail", then "warn", then
        "unchecked" when an op was not checked (also when no op was reached), then "surrogate", "pass"."""
        verdicts = {op.verdict for op in self.watched} or {"unchecked"}
        verdicts |= {worker.verdict for worker in self.workers}
        return min(verdicts, key=WATCH_VERDICT_ORDER.index)

    def __getitem__(self, name: str) -> WatchedOp:
        """The watched op called `name`."""
        for op in self.watched:
            if op.name == name:
                return op
        raise KeyError(f"no op named {name!r} was watched; the ops are {', '.join(op.name for op in self.watched)}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable data, valid against `watch_schema()`; each op's report as `Report.to_dict()` gives it."""
        return json_data(self)

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WatchReport:
        """Read a WatchReport back from `to_dict()` data of the same major version."""
        return _read_root(cls, data)

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


def schema() -> dict[str, Any]:
    """The JSON Schema of `Report.to_dict()`."""
    return json.loads(resources.files("gradmagic").joinpath("schema/report.schema.json").read_text())


def watch_schema() -> dict[str, Any]:
    """The JSON Schema of `WatchReport.to_dict()`, with the Report's schema (each op's report) bundled in."""
    bundled = json.loads(resources.files("gradmagic").joinpath("schema/watch.schema.json").read_text())
    bundled["$defs"]["report"] = schema()
    return bundled


_NON_FINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def json_data(value: Any) -> Any:
    """`value` as strict JSON data: a dataclass as an object of its fields (headed by its schema's `$schema` and
    `version` and its `DERIVED` properties, where it has them), tuples as lists, non-finite floats as the strings
    "NaN", "Infinity" and "-Infinity"."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data: dict[str, Any] = (
            {"$schema": value.ID, "version": value.VERSION} if isinstance(value, (Report, WatchReport)) else {}
        )
        for name in getattr(value, "DERIVED", ()):
            data[name] = json_data(getattr(value, name))
        for item in dataclasses.fields(value):
            data[item.name] = json_data(getattr(value, item.name))
        return data
    if isinstance(value, dict):
        return {key: json_data(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_data(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else "Infinity" if value > 0 else "-Infinity"
    return value


_Root = TypeVar("_Root", Report, WatchReport)


def _read_root(cls: type[_Root], data: dict[str, Any]) -> _Root:
    """`cls` (Report or WatchReport) read from its data, refusing data of another major version."""
    major = str(data.get("version", "")).split(".")[0]
    if major != cls.VERSION.split(".")[0]:
        what = "report" if cls is Report else "watch report"
        raise ValueError(f"{what} version {data.get('version')!r} is not readable by schema {cls.VERSION}")
    return _read(cls, data)


def _read(hint: Any, value: Any) -> Any:
    """JSON data `value` as the type `hint` says: a dataclass from an object (keys it does not know left out, fields
    the data lacks at their defaults), tuples from arrays, a float from the string of a non-finite number."""
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        return _read(args[0], value)
    if origin in (typing.Union, types.UnionType):
        options = [option for option in args if option is not type(None)]
        return _read(options[0], value) if len(options) == 1 else value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        hints = type_hints(hint)
        known = (item.name for item in dataclasses.fields(hint) if item.name in value)
        return hint(**{name: _read(hints[name], value[name]) for name in known})
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_read(args[0], item) for item in value)
        return tuple(_read(item_hint, item) for item_hint, item in zip(args, value))
    if origin is list:
        return [_read(args[0], item) for item in value]
    if origin is dict:
        return {key: _read(args[1], item) for key, item in value.items()}
    if hint is float and isinstance(value, str):
        return _NON_FINITE.get(value, value)
    return value


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """The type hints of a dataclass's fields (and its properties' return types, by name), `Annotated` kept."""
    hints = typing.get_type_hints(cls, include_extras=True)
    for name in getattr(cls, "DERIVED", ()):
        hints[name] = typing.get_type_hints(getattr(cls, name).fget, include_extras=True)["return"]
    return hints
