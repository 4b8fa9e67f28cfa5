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
import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

SCHEMA_ID = "urn:gradmagic:schema:report"
#: Bumped on any change of the data's meaning; readers check the major number.
SCHEMA_VERSION = "1.7"
#: The MIME type under which a Report travels to the JupyterLab extension.
MIME_TYPE = "application/vnd.gradmagic.report+json"

SEVERITIES = ("error", "warning", "info")


def element_label(name: str, index: tuple[int, ...] | None) -> str:
    """`x[2, 0]` for an element, `x` for a scalar or the whole tensor."""
    return f"{name}[{', '.join(map(str, index))}]" if index else name


@dataclass(frozen=True)
class Location:
    """Where a problem is. Every field is optional; a problem names what it can."""

    input: str | None = None  # argument name, e.g. "x", or "args[1]" for a *args element
    output: str | None = None  # output name, e.g. "output[0]"
    variable: str | None = None  # a tf.Variable's name
    index: tuple[int, ...] | None = None  # element index inside the input (or variable)
    output_index: tuple[int, ...] | None = None  # element index inside the output
    line: int | None = None  # line in the user's cell (the magic line is line 1) or file
    filename: str | None = None


@dataclass(frozen=True)
class Problem:
    """One finding: a stable `code`, a severity, and a message naming cause and fix."""

    code: str
    severity: str
    message: str
    location: Location | None = None

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, not {self.severity!r}")


@dataclass(frozen=True)
class TensorRow:
    """A line of the shapes table: one input, output, upstream or downstream gradient, or variable."""

    role: str  # "input" | "output" | "upstream" | "downstream" | "variable" | "variable-gradient"
    name: str
    shape: tuple[int | None, ...] | None  # None: not a tensor (e.g. a None gradient)
    dtype: str | None
    expected_shape: tuple[int | None, ...] | None = None  # for gradients: the input's
    expected_dtype: str | None = None
    matches: bool = True


@dataclass(frozen=True)
class ElementComparison:
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
class JacobianBlock:
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
class Numerics:
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
class GraphNode:
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
class GraphEdge:
    """A tensor from one node to another; `saved` when the backward keeps it from the forward."""

    source: str
    target: str
    shape: tuple[int | None, ...] | None
    dtype: str | None
    saved: bool = False
    bytes: int | None = None


@dataclass(frozen=True)
class GraphScope:
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
        return f"<Graph: {len(self.nodes)} nodes, {len(self.edges)} edges, {self.saved_tensors} saved tensors>"


@dataclass(frozen=True)
class Sweep:
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
class Surrogate:
    """A custom gradient that is deliberately not the derivative: declared by the user, or recognised.

    Declared (`surrogate=True`), its difference from the true derivative is
    reported as `surrogate-differs` (info) and does not fail the check.
    Recognised only, the check fails with `fd-mismatch` and names the pattern.
    """

    declared: bool
    pattern: str | None = None  # "straight-through estimator", "gradient clipping", "gradient reversal", ...
    reason: str | None = None  # what in the measurements shows the pattern


@dataclass(frozen=True)
class OpDescription:
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
class BackendResult:
    """The op checked on one Keras backend, in its own process (the portability check)."""

    backend: str  # "tensorflow" | "jax" | "torch"
    verdict: str  # "pass" | "warn" | "surrogate" | "fail" | "unavailable"
    version: str | None = None
    problems: tuple[Problem, ...] = ()
    seconds: float = 0.0
    note: str | None = None  # why it is unavailable


@dataclass(frozen=True)
class Report:
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
