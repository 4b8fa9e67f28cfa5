"""The gradient graph from real TensorFlow traces: lanes, saved tensors and their bytes, folding, its layout (carried
in the Report), drawings."""

import dataclasses
import html
import inspect
import json
from xml.etree import ElementTree

import jsonschema
import numpy as np
import pytest
import tensorflow as tf
from report_fixtures import graph_of_about, log1pexp, scoped_chain

import gradmagic
from gradmagic.checking.graph_layout import BACKWARD_LANE, BAND, MAX_NODES, graph_layout, path_clear
from gradmagic.render.graph import NO_LAYOUT, graph_summary, graph_svg
from gradmagic.report import SCHEMA_VERSION, Graph, GraphEdge, GraphLayout, GraphNode, Report, schema


def complex_op(x, y):
    z = tf.multiply(x, y) + tf.sin(x)
    w = tf.square(y)

    def grad(dy_dz, dy_dw):
        return dy_dz * (y + tf.cos(x)), dy_dz * x + dy_dw * 2 * y

    return (z, w), grad


def square(x):
    return x * x, lambda dy: 2 * x * dy


def non_diff_op(x):
    return tf.where(x > 0, x * 2, x), lambda dy: tf.where(x > 0, dy * 2, dy)


def long_loop(x):
    y = x
    for _ in range(50):  # 50 steps of three ops
        y = tf.sin(y) * 1.01 + 0.1
    return y, lambda dy: dy * tf.ones_like(x)


def graph_of(function, *args, **options):
    return gradmagic.gradient_graph(tf.custom_gradient(function), *args, **options)


def by_role(graph, role):
    return [node for node in graph.nodes if node.role == role]


def test_log1pexp_forward_lane_backward_lane_and_the_saved_exp():
    graph = graph_of(log1pexp, tf.constant([-5.0, 0.0, 100.0]))
    assert [n.op for n in by_role(graph, "forward")] == ["Exp", "AddV2", "Log"]
    assert {n.op for n in by_role(graph, "backward")} == {"AddV2", "RealDiv", "Sub", "Mul"}
    assert [n.label for n in by_role(graph, "input")] == ["x"] and [n.label for n in by_role(graph, "output")] == [
        "output"
    ]
    assert [n.label for n in by_role(graph, "upstream")] == ["doutput"]
    assert [n.label for n in by_role(graph, "downstream")] == ["dx"]

    saved = [edge for edge in graph.edges if edge.saved]
    exp = next(n for n in graph.nodes if n.op == "Exp")
    assert {edge.source for edge in saved} == {exp.id}  # the backward consumes e = exp(x), and only it
    assert graph.saved_tensors == 1 and graph.saved_bytes == 3 * 4 and saved[0].bytes == 12
    assert all(next(n for n in graph.nodes if n.id == edge.target).role == "backward" for edge in saved)

    lines, first = inspect.getsourcelines(log1pexp)
    assert exp.line == first + next(i for i, line in enumerate(lines) if "tf.exp(x)" in line)
    assert graph_summary(graph).endswith("the backward keeps 12 B alive (1 saved tensor)")


def test_plumbing_is_folded_away_unless_raw():
    folded = graph_of(log1pexp, tf.constant([1.0, 2.0]))
    assert not {"Identity", "IdentityN", "NoOp", "Const", "Placeholder"} & {n.op for n in folded.nodes}
    raw = graph_of(log1pexp, tf.constant([1.0, 2.0]), fold=False)
    assert raw.raw and len(raw.nodes) > len(folded.nodes) and {"IdentityN", "Const"} <= {n.op for n in raw.nodes}
    assert folded.traced_ops == raw.traced_ops


def test_two_inputs_two_outputs_have_two_upstream_and_two_downstream_nodes():
    graph = graph_of(complex_op, tf.constant([2.0, 1.0]), tf.constant([3.0, 0.5]))
    upstream = {n.label: n.shapes for n in by_role(graph, "upstream")}
    downstream = {n.label: n.shapes for n in by_role(graph, "downstream")}
    assert upstream == {"doutput[0]": ((2,),), "doutput[1]": ((2,),)}
    assert downstream == {"dx": ((2,),), "dy": ((2,),)}
    assert graph.saved_tensors == 2  # x and y are both used by the gradient function


def test_variable_node_and_its_gradient():
    weights = tf.Variable([1.0, 2.0, 3.0], name="weights")

    def scale(x):
        def grad(dy, variables=None):
            return dy * weights, [dy * x]

        return x * weights, grad

    graph = graph_of(scale, tf.constant([3.0, 4.0, 5.0]))
    (variable,) = by_role(graph, "variable")
    assert variable.label == "weights" and variable.shapes == ((3,),) and variable.dtypes == ("float32",)
    assert {n.label for n in by_role(graph, "downstream")} == {"dx", "dweights"}
    assert any(edge.source == variable.id for edge in graph.edges)


@pytest.mark.parametrize(
    "function, args",
    [
        (log1pexp, [tf.constant([-5.0, 0.0, 100.0])]),
        (square, [tf.constant([1.0, 2.0, 3.0])]),
        (complex_op, [tf.constant(2.0), tf.constant(3.0)]),
        (non_diff_op, [tf.constant([-1.0, 0.0, 1.0])]),
        (long_loop, [tf.constant([1.0, 2.0])]),
    ],
    ids=["log1pexp", "square", "two inputs two outputs", "non-differentiable point", "150-op loop"],
)
def test_drawing_is_produced_for_the_seed_examples_and_a_150_op_loop(function, args):
    graph = graph_of(function, *args)
    svg = graph_svg(graph)
    parsed = ElementTree.fromstring(svg)  # self-contained SVG: one document, no script, no stylesheet
    assert parsed.tag.endswith("svg") and "saved for the backward" in svg
    assert "<script" not in svg and "<style" not in svg and "href=" not in svg.replace("url(#", "")
    drawn = graph.folded()
    assert svg.count("<rect") >= len(drawn.nodes) and svg.count('marker-end="url(#arrow') == len(drawn.edges)
    if function is long_loop:
        assert len(by_role(graph, "forward")) == 150


def test_large_graphs_fold_name_scopes_with_counts():
    def blocks(x):
        y = x
        for i in range(80):
            with tf.name_scope(f"block_{i}"):
                y = tf.sin(y) * 1.01 + 0.1
        return y, lambda dy: dy

    graph = graph_of(blocks, tf.constant([1.0]))
    assert len(graph.nodes) > MAX_NODES
    scopes = graph.layout.scopes
    assert [scope.id for scope in scopes] == [f"forward/block_{i}" for i in range(80)]
    assert all(scope.count == 3 and scope.label == scope.id[8:] and scope.role == "forward" for scope in scopes)
    assert all(len(scope.members) == 3 and all(m.startswith(f"{scope.id}/") for m in scope.members) for scope in scopes)
    folded = graph.folded()
    assert [n for n in folded.nodes if n.count > 1] == [n for n in folded.nodes if n.op == "scope"]
    assert len(folded.nodes) == len(graph.nodes) - 2 * 80 and set(graph.layout.positions) == {
        n.id for n in folded.nodes
    }
    assert "(3 ops)" in graph_svg(graph)  # drawn folded


def test_report_carries_the_graph_and_renders_it(nb):
    report = gradmagic.check(tf.custom_gradient(log1pexp), tf.constant([1.0, 2.0]))
    assert report.graph.saved_bytes == 8
    bundle, _ = nb.shell.display_formatter.format(report)
    assert "gradient graph: 3 forward and 4 backward ops" in bundle["text/plain"]
    assert '<img alt="gradient graph:' in bundle["text/html"] and "data:image/svg+xml;base64," in bundle["text/html"]
    assert gradmagic.check(tf.custom_gradient(log1pexp), tf.constant([1.0]), graph=False).graph is None


def test_magics_graph_options_and_gradgraph(nb):
    cell = "%%custom_gradient {}--check x=tf.constant([1., 2.])\ndef sq(x):\n    return x * x, lambda dy: 2 * x * dy"
    assert "gradient graph:" in nb.ok(cell.format("")).stdout
    assert nb.ns["_"].graph is not None
    nb.ok(cell.format("--no-graph "))
    assert nb.ns["_"].graph is None and "gradient graph" not in str(nb.ns["_"])

    nb.ok("g = %gradgraph sq")
    graph = nb.ns["g"]
    assert {n.role for n in graph.nodes} >= {"input", "forward", "output", "upstream", "backward", "downstream"}
    assert set(nb.shell.display_formatter.format(graph)[0]) == {"image/svg+xml", "text/plain"}
    nb.ok("raw = %gradgraph sq x=tf.constant([3.]) --raw")
    assert nb.ns["raw"].raw and len(nb.ns["raw"].nodes) > len(graph.nodes)
    assert "Give example inputs: `%gradgraph" in nb.fails("%gradgraph tf.sin").stderr


def test_graph_extraction_of_a_large_input_is_as_small_as_its_ops():
    graph = graph_of(log1pexp, tf.constant(np.zeros(1_000_000, np.float32)))
    assert len(graph.nodes) == 11 and graph.saved_bytes == 4_000_000


def lane_of(node: GraphNode) -> str:
    return "backward" if node.role in BACKWARD_LANE else "forward"


def assert_two_lanes(graph: Graph) -> None:
    """Every drawn node placed, each in its own place, the forward lane's rows above the backward lane's."""
    drawn, positions = graph.folded(), graph.layout.positions
    assert list(positions) == [node.id for node in drawn.nodes]
    assert len(set(positions.values())) == len(positions)
    assert all(0 <= x < BAND and y >= 0 for x, y in positions.values())
    lowest_forward = max(positions[n.id][1] for n in drawn.nodes if lane_of(n) == "forward")
    assert lowest_forward < min(positions[n.id][1] for n in drawn.nodes if lane_of(n) == "backward")


def test_layout_two_lanes_forward_left_to_right_gradients_under_their_tensors():
    graph = graph_of(log1pexp, tf.constant([-5.0, 0.0, 100.0]))
    assert graph.layout == graph_layout(graph) and graph.layout.scopes == ()
    assert_two_lanes(graph)
    at = graph.layout.positions
    forward = ["inputs", "forward/Exp", "forward/add", "forward/Log", "output:0"]  # x -> exp -> 1 + e -> log
    assert [at[node_id][0] for node_id in forward] == [0, 1, 2, 3, 4] and len({at[n][1] for n in forward}) == 1
    assert at["upstreams"][0] == at["output:0"][0] and at["gradient:0"][0] == at["inputs"][0]  # gradients under
    assert at["upstreams"][1] == at["gradient:0"][1] > at["inputs"][1]
    backward = ["upstreams", "backward/truediv", "backward/sub", "backward/mul", "gradient:0"]  # right to left
    assert [at[node_id][0] for node_id in backward] == [4, 3, 2, 1, 0] and len({at[n][1] for n in backward}) == 1
    assert at["backward/add"] == (4, at["upstreams"][1] + 1)  # 1 + e, fed by the saved e only: before its consumer


def synthetic(forward_ops: int, variable: bool = False) -> Graph:
    """input -> forward ops (three to a name scope) -> output, upstream -> as many backward ops -> downstream."""
    forward = [f"forward/block_{i // 3}/op_{i}" for i in range(forward_ops)]
    backward = [f"backward/block_{i // 3}/op_{i}" for i in range(forward_ops)]
    nodes = [GraphNode("inputs", "", "x", "input"), *[GraphNode(id, "Sin", "sin", "forward") for id in forward]]
    nodes += [GraphNode("output:0", "", "output", "output"), GraphNode("upstreams", "", "doutput", "upstream")]
    nodes += [
        *[GraphNode(id, "Cos", "cos", "backward") for id in backward],
        GraphNode("gradient:0", "", "dx", "downstream"),
    ]
    chains = [["inputs", *forward, "output:0"], ["upstreams", *backward, "gradient:0"]]
    edges = [GraphEdge(a, b, (2,), "float32") for chain in chains for a, b in zip(chain, chain[1:])]
    edges += [GraphEdge(f, b, (2,), "float32", saved=True, bytes=8) for f, b in zip(forward, backward)]
    if variable:
        nodes.append(GraphNode("w", "", "w", "variable"))
        edges.append(GraphEdge("w", forward[0], (2,), "float32"))
    return Graph(tuple(nodes), tuple(edges))


def test_layout_folds_name_scopes_above_max_nodes_only():
    assert MAX_NODES == 200
    at_most = synthetic(98)
    assert len(at_most.nodes) == MAX_NODES and graph_layout(at_most).scopes == ()
    assert_two_lanes(dataclasses.replace(at_most, layout=graph_layout(at_most)))
    above = synthetic(98, variable=True)
    layout = graph_layout(above)
    assert len(above.nodes) == MAX_NODES + 1
    assert [scope.id for scope in layout.scopes] == [
        f"{lane}/block_{i}" for lane in ("forward", "backward") for i in range(33)
    ]
    last = layout.scopes[32]
    assert (last.label, last.role, last.count, last.members) == (
        "block_32",
        "forward",
        2,
        ("forward/block_32/op_96", "forward/block_32/op_97"),
    )
    folded = dataclasses.replace(above, layout=layout)
    assert_two_lanes(folded)
    drawn = folded.folded()
    assert len(drawn.nodes) == 5 + 2 * 33 and sum(n.count for n in drawn.nodes) == len(above.nodes)
    assert ("forward/block_0", "backward/block_0") in {(e.source, e.target) for e in drawn.edges if e.saved}
    assert all(e.source != e.target for e in drawn.edges)  # the edges inside a scope are gone


def test_layout_of_the_198_node_fixture_wraps_into_bands_unfolded():
    graph = graph_of_about(200).graph
    assert len(graph.nodes) == 198 and graph.layout.scopes == ()
    assert_two_lanes(graph)
    forward_rows = {y for n in graph.nodes if lane_of(n) == "forward" for _, y in [graph.layout.positions[n.id]]}
    assert len(forward_rows) > 2  # more than one band: the forward's 98 ops do not fit in 16 layers


def test_report_carries_the_layout_through_json_and_its_schema():
    report = gradmagic.check(tf.custom_gradient(scoped_chain), tf.constant([0.3, 0.5]), numbers=False)
    layout = report.graph.layout
    assert len(report.graph.nodes) == 6 * 40 + 4 and len(layout.scopes) == 2 * 40
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    jsonschema.validate(data, schema())
    assert data["version"] == SCHEMA_VERSION
    assert data["graph"]["layout"]["scopes"][0] == {
        "id": "forward/block_0",
        "label": "block_0",
        "role": "forward",
        "count": 3,
        "members": ["forward/block_0/Sin", "forward/block_0/mul", "forward/block_0/add"],
    }
    again = Report.from_dict(data)
    assert again.graph == report.graph and again.graph.layout == layout
    assert again.to_dict() == data

    broken = json.loads(json.dumps(data))
    broken["graph"]["layout"]["positions"]["inputs"] = [0.0, 1.0, 2.0]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema())
    del broken["graph"]["layout"]["scopes"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema())


def test_the_drawing_reads_the_layout_and_a_graph_without_one_says_so():
    graph = graph_of(log1pexp, tf.constant([1.0, 2.0]))
    wide = GraphLayout({node_id: (3 * x, y) for node_id, (x, y) in graph.layout.positions.items()})

    def width(drawn) -> float:
        return float(ElementTree.fromstring(graph_svg(drawn)).get("width"))

    assert width(dataclasses.replace(graph, layout=wide)) > 1.5 * width(graph)

    data = gradmagic.check(tf.custom_gradient(log1pexp), tf.constant([1.0])).to_dict()
    del data["graph"]["layout"]
    old = Report.from_dict({**data, "version": "1.4"})  # as gradmagic wrote it before the layout travelled
    assert old.graph.layout is None and old.graph.nodes
    jsonschema.validate({**data, "version": "1.4"}, schema())
    svg = graph_svg(old.graph)
    assert html.escape(NO_LAYOUT) in svg and "re-run the cell" in NO_LAYOUT
    assert "Exp" not in svg and "saved for the backward" not in svg  # no node, no legend


def test_no_edge_runs_through_another_node():
    """An edge that would cross a node drawn straight bends through a gap between rows (the layout carries its bend
    points, schema 1.7); every drawn edge then clears every other node's box."""

    def skips(x):  # x and exp(x) feed ops several layers on: straight, their edges would cross the ops between
        a = tf.exp(x)
        b = tf.sin(a)
        c = tf.cos(b)
        d = tf.tanh(c)
        return d * x + a, lambda dy: dy

    graph = graph_of(skips, tf.constant([1.0, 2.0]))
    layout, drawn = graph.layout, graph.folded()
    assert layout.routes, "no edge was bent"
    bends = {(route.source, route.target): route.points for route in layout.routes}
    centres = np.array(list(layout.positions.values()))
    ids = list(layout.positions)
    for edge in drawn.edges:
        bent = bends.get((edge.source, edge.target), ())
        path = [layout.positions[edge.source], *bent, layout.positions[edge.target]]
        others = centres[[k for k, node_id in enumerate(ids) if node_id not in (edge.source, edge.target)]]
        assert path_clear(path, others), f"{edge.source} -> {edge.target} crosses a node"
    data = graph_layout(graph).routes
    assert data == layout.routes  # computed once, carried in the Report
    svg = graph_svg(graph)
    assert svg.count(" Q") >= len(layout.routes)  # each bend drawn rounded


def test_a_saved_tensor_label_sits_on_its_own_edge_clear_of_every_other_edge_and_node():
    """root_scale's saved sqrt crosses the backward lane between `truediv` and `mul`: its size label ("24 B") must
    not sit on the truediv <- mul edge (where the middle of its longest segment falls), nor on any node."""
    import re

    from gradmagic.render.graph import BOX_HEIGHT, CHAR_WIDTH, _crosses, _label_box, _node_text, _place, edge_path

    def root_scale(x):
        y = tf.sqrt(x)
        return y, lambda upstream: upstream * 1.5 / (2 * y)

    graph = graph_of(root_scale, tf.constant([[0.5, 1.0, 2.0], [3.0, 1.5, 4.0]]))
    drawn, layout = graph.folded(), graph.layout
    halves = {n.id: max(len(t) for t in _node_text(n)) * CHAR_WIDTH / 2 + 8 for n in drawn.nodes}
    bends = {(r.source, r.target): r.points for r in layout.routes}
    polylines = {}
    for edge in drawn.edges:
        points = [_place(layout.positions[edge.source])]
        points += [_place(p) for p in bends.get((edge.source, edge.target), ())]
        points.append(_place(layout.positions[edge.target]))
        polylines[(edge.source, edge.target)] = edge_path(points, halves[edge.source], halves[edge.target])[2]
    pattern = r'<text x="([\d.]+)" y="([\d.]+)" font-size="10" fill="#d62728"[^>]*>([^<]+)</text>'
    labels = re.findall(pattern, graph_svg(graph))
    assert [text for _, _, text in labels] == ["24 B"]
    x, y, text = float(labels[0][0]), float(labels[0][1]) - 3, labels[0][2]
    box = _label_box(x, y, len(text) * 6.0)
    saved = [(e.source, e.target) for e in drawn.edges if e.saved]
    for key, polyline in polylines.items():
        if key not in saved:
            assert not any(_crosses(s, box) for s in zip(polyline, polyline[1:])), f"the label sits on {key}"
    for node in drawn.nodes:
        cx, cy = _place(layout.positions[node.id])
        half = halves[node.id]
        top, bottom = cy - BOX_HEIGHT / 2, cy + BOX_HEIGHT / 2
        assert box[2] <= cx - half or box[0] >= cx + half or box[3] <= top or box[1] >= bottom, node.id
    (own,) = [polylines[key] for key in saved]
    assert any(_crosses(s, box) for s in zip(own, own[1:])), "the label is on its own edge"
