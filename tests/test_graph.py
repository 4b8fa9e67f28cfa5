"""The gradient graph from real TensorFlow traces: lanes, saved tensors and their bytes, folding, drawings."""

import inspect

import numpy as np
import pytest
import tensorflow as tf
from report_fixtures import log1pexp

import gradmagic
from gradmagic.render.graph import MAX_NODES, fold_scopes, graph_png, graph_summary, graph_svg


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
    png, svg = graph_png(graph), graph_svg(graph)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5_000
    assert "<svg" in svg and "saved for the backward" in svg
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
    folded = fold_scopes(graph)
    scopes = [n for n in folded.nodes if n.count > 1]
    assert len(scopes) == 80 and all(n.count == 3 and n.label.startswith("block_") for n in scopes)
    assert graph_png(graph).startswith(b"\x89PNG")  # drawn folded


def test_report_carries_the_graph_and_renders_it(nb):
    report = gradmagic.check(tf.custom_gradient(log1pexp), tf.constant([1.0, 2.0]))
    assert report.graph.saved_bytes == 8
    bundle, _ = nb.shell.display_formatter.format(report)
    assert "gradient graph: 3 forward and 4 backward ops" in bundle["text/plain"]
    assert '<img alt="gradient graph:' in bundle["text/html"] and "data:image/png;base64," in bundle["text/html"]
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
    assert set(nb.shell.display_formatter.format(graph)[0]) == {"image/svg+xml", "image/png", "text/plain"}
    nb.ok("raw = %gradgraph sq x=tf.constant([3.]) --raw")
    assert nb.ns["raw"].raw and len(nb.ns["raw"].nodes) > len(graph.nodes)
    assert "Give example inputs: `%gradgraph" in nb.fails("%gradgraph tf.sin").stderr


def test_graph_extraction_of_a_large_input_is_as_small_as_its_ops():
    graph = graph_of(log1pexp, tf.constant(np.zeros(1_000_000, np.float32)))
    assert len(graph.nodes) == 11 and graph.saved_bytes == 4_000_000
