"""Keras 3 `keras.ops.custom_gradient` on the JAX backend, checked with real JAX.

Keras fixes its backend at import and runs on TensorFlow in the test process,
so every check here runs in a fresh Python with KERAS_BACKEND=jax
(`backend_process`); the Report comes back as data, as a user would see it.
"""

import textwrap

import pytest
from backend_process import check_in_backend, run_in_backend
from conftest import codes, problem

from gradmagic.render.text import render_text
from gradmagic.report import Report

# The seed's log1pexp (keras.ops.custom_gradient's documentation): its gradient functions.
GRADIENTS = {
    "portable": """\
    def grad(*args, upstream=None):
        if upstream is None:
            (upstream,) = args
        return ops.multiply(upstream, 1.0 - 1.0 / ops.add(1, e))
""",
    "jax-and-tensorflow": """\
    def grad(upstream):
        return ops.multiply(upstream, 1.0 - 1.0 / ops.add(1, e))
""",
    "pytorch": """\
    def grad(*args, upstream):
        return ops.multiply(upstream, 1.0 - 1.0 / ops.add(1, e))
""",
}


def log1pexp_source(form: str) -> str:
    return f"def log1pexp(x):\n    e = ops.exp(x)\n{GRADIENTS[form]}    return ops.log(1 + e), grad\n"


IMPORTS = """import gradmagic, jax, keras
import numpy as np
from keras import ops
from gradmagic.frameworks import get_adapter
"""


def in_jax(code: str) -> dict:
    """Run `code` under Keras's JAX backend with gradmagic, ops, NumPy and JAX imported; its RESULT."""
    return run_in_backend("jax", IMPORTS + code)


@pytest.mark.parametrize("form", ["portable", "jax-and-tensorflow"])
def test_seed_log1pexp_passes_on_jax_with_gradient_one_at_100(form):
    result = in_jax(
        log1pexp_source(form)
        + textwrap.dedent(
            """
            x = np.array([-5.0, 0.0, 100.0], np.float32)
            decorated = ops.custom_gradient(log1pexp)
            made = get_adapter("keras").decorate(log1pexp)
            RESULT = {
                "plain": gradmagic.check(log1pexp, x, framework="keras").to_dict(),
                "decorated": gradmagic.check(decorated, x, framework="keras").to_dict(),
                "grads at 100": [
                    float(jax.grad(lambda v: ops.sum(op(v)))(np.array([100.0], np.float32))[0])
                    for op in (decorated, made)
                ],
            }
            """
        )
    )
    assert result["grads at 100"] == [1.0, 1.0]
    for origin in ("plain", "decorated"):
        report = Report.from_dict(result[origin])
        assert report.ok, report
        assert (report.op.name, report.op.origin) == ("log1pexp", origin)
        assert (report.op.framework, report.op.backend) == ("keras", "jax")
        assert report.op.framework_version.startswith("keras 3.") and ", jax 0." in report.op.framework_version
        assert "Keras 3 on JAX (keras " in render_text(report)
        # The custom gradient at x = 100, where the plain forward overflows: d output[2] / d x[2] is 1.
        (block,) = report.numerics.jacobians
        assert block.custom[8] == pytest.approx(1.0)
        assert block.numerical[0] == pytest.approx(1 / (1 + 2.718281828**5), rel=1e-2)


def test_pytorch_only_form_is_refused_the_way_jax_calls_the_gradient():
    report = check_in_backend("jax", log1pexp_source("pytorch"), "log1pexp, np.array([-5.0, 0.0, 100.0])")
    found = problem(report, "backend-signature")
    assert "Keras's JAX backend calls it, `grad(upstream)`" in found.message
    assert "missing a required argument: 'upstream'" in found.message


def test_a_wrong_gradient_of_the_second_input_is_located_at_that_input():
    # Two inputs with a correct gradient pass: a case of test_conformance.py.
    setup = """
def mul_sin(x, y):
    def grad(upstream):
        return upstream * (y + ops.cos(x)), upstream * y
    return x * y + ops.sin(x), grad
"""
    report = check_in_backend(
        "jax", setup, "mul_sin, np.array([0.5, -1.0, 2.0], np.float32), np.array([1.5, 0.25, -3.0], np.float32)"
    )
    assert [row.name for row in report.tensors if row.role == "downstream"] == ["dx", "dy"]
    assert codes(report) == ["fd-mismatch"]
    found = problem(report, "fd-mismatch")
    assert found.location.input == "y" and found.location.output == "output"
    assert "d output[2] / d y[2] at y[2] = -3: custom -3, finite differences 2" in found.message


@pytest.mark.parametrize("user_x64", [False, True])
def test_float64_inputs_stay_float64_and_the_users_x64_setting_is_untouched(user_x64):
    result = in_jax(
        f"jax.config.update('jax_enable_x64', {user_x64})\n"
        + log1pexp_source("portable")
        + textwrap.dedent(
            """
            report = gradmagic.check(log1pexp, np.array([-5.0, 0.0, 30.0]), framework="keras", sweep=True)
            RESULT = {
                "report": report.to_dict(),
                "x64 after": jax.config.jax_enable_x64,
                "float64 NumPy becomes": str(jax.numpy.asarray(np.ones(2)).dtype),
            }
            """
        )
    )
    report = Report.from_dict(result["report"])
    assert report.ok, report
    assert {row.dtype for row in report.tensors} == {"float64"}
    assert report.numerics.dtype == "float64" and report.sweep.numerical_dtype == "float64"
    assert (report.numerics.rtol, report.numerics.atol) == (1e-5, 1e-8)
    assert result["x64 after"] is user_x64
    assert result["float64 NumPy becomes"] == ("float64" if user_x64 else "float32")


def test_float32_inputs_get_float64_finite_differences_without_x64():
    report = check_in_backend("jax", log1pexp_source("portable"), "log1pexp, np.array([-5.0, 0.0], np.float32)")
    assert report.ok, report
    assert report.numerics.dtype == "float64"


def test_gradient_graph_shows_forward_backward_and_the_saved_exp_with_source_lines():
    source = log1pexp_source("jax-and-tensorflow")
    code = source + 'RESULT = gradmagic.check(log1pexp, np.array([1.0, 2.0], np.float32), framework="keras").to_dict()'
    report = Report.from_dict(in_jax(code))
    first = IMPORTS.count("\n") + 1
    line_of = {text.strip(): first + number for number, text in enumerate(source.splitlines())}
    graph = report.graph
    ops_by_role = {
        role: sorted((node.op, node.line) for node in graph.nodes if node.role == role)
        for role in ("forward", "backward")
    }
    exp_line, return_line = line_of["e = ops.exp(x)"], line_of["return ops.log(1 + e), grad"]
    assert ops_by_role["forward"] == [("add", return_line), ("exp", exp_line), ("log", return_line)]
    gradient_line = line_of["return ops.multiply(upstream, 1.0 - 1.0 / ops.add(1, e))"]
    assert ops_by_role["backward"] == [(op, gradient_line) for op in ("add", "div", "mul", "sub")]
    nodes = {node.id: node for node in graph.nodes}
    (saved,) = [edge for edge in graph.edges if edge.saved]
    assert nodes[saved.source].op == "exp" and nodes[saved.target].role == "backward"
    assert (graph.saved_tensors, graph.saved_bytes) == (1, 8)
    assert {node.label for node in graph.nodes if node.role in ("input", "upstream")} == {"x", "doutput"}


def test_several_outputs_reach_the_gradient_as_one_structure_and_a_list_of_gradients_works():
    setup = """
def pair(x, y):
    def grad(upstream):
        d_product, d_sum = upstream
        return [d_product * y + d_sum, d_product * x + d_sum]
    return (x * y, x + y), grad

def named(x):
    def grad(upstream):
        return upstream["square"] * 2.0 * x + upstream["double"] * 2.0
    return {"square": x * x, "double": 2.0 * x}, grad
"""
    result = in_jax(
        setup + "RESULT = [gradmagic.check(*call, framework='keras').to_dict() for call in "
        "[(pair, np.float32(2.0), np.float32(3.0)), (named, np.array([1.0, -2.0], np.float32))]]"
    )
    pair, named = (Report.from_dict(data) for data in result)
    assert pair.ok and named.ok, (pair, named)
    assert [row.name for row in pair.tensors if row.role == "upstream"] == ["doutput[0]", "doutput[1]"]
    assert [row.name for row in named.tensors if row.role == "output"] == ["output['double']", "output['square']"]


def test_forward_without_reverse_mode_derivative_is_checked_on_finite_differences_alone():
    # lax.while_loop has no reverse-mode derivative: JAX's autodiff of the plain forward is unavailable.
    setup = """
def doubled(x):
    twice = ops.while_loop(lambda i, y: i < 1, lambda i, y: (i + 1, y * 2.0), (0, x))[1]
    return twice, lambda upstream: upstream * 2.0
"""
    report = check_in_backend("jax", setup, "doubled, np.array([1.0, -2.0], np.float32)")
    assert report.ok, report
    assert report.numerics.mode == "full" and report.numerics.max_error < 1


def test_integer_input_stays_concrete_and_keywords_are_constants_of_gradmagics_op():
    setup = """
def rows(x, count, scale=1.0):
    def grad(upstream):
        return ops.reshape(upstream, x.shape) * scale, None
    return ops.reshape(x, (count, -1)) * scale, grad
from gradmagic.frameworks import get_adapter
op = get_adapter("keras").decorate(rows)
"""
    report = check_in_backend("jax", setup, "op, np.arange(6, dtype=np.float32), 2, kwargs={'scale': 3.0}")
    assert report.ok, report
    assert report.op.origin == "magic"
    assert [(row.name, row.shape) for row in report.tensors if row.role == "output"] == [("output", (2, 3))]


def test_hand_decorated_op_given_a_keyword_is_told_that_jax_refuses_keywords():
    setup = """
@ops.custom_gradient
def scaled(x, scale=1.0):
    def grad(upstream):
        return upstream * scale
    return x * scale, grad
"""
    report = check_in_backend("jax", setup, "scaled, np.ones(3, np.float32), kwargs={'scale': 2.0}")
    (found,) = [p for p in report.problems if p.code == "graph-mismatch"]
    assert "refuses keyword arguments" in found.message and "functools.partial" in found.message, found.message
    assert "Python values of tensors" not in found.message


def test_a_python_if_on_a_vector_is_explained_in_keras_words():
    setup = """
def doubled_where_positive(x):
    y = x * 2.0 if x > 0 else x
    return y, lambda upstream: upstream * 2.0
"""
    report = check_in_backend("jax", setup, "doubled_where_positive, np.array([-1.0, 0.0, 1.0], np.float32)")
    found = problem(report, "forward-error")
    assert "A Python `if` needs a scalar predicate" in found.message and "tf." not in found.message, found.message
    assert "`ops.where(condition, a, b)`" in found.message


def test_redefined_ops_and_their_compiled_functions_are_freed():
    result = in_jax(
        textwrap.dedent(
            """
            import gc, weakref
            from gradmagic.notebook import contexts
            freed = []
            for i in range(contexts.KEPT_CONTEXTS + 4):
                namespace = {"ops": ops}
                exec(f"def square(x):\\n    return x * x * {i + 1.0}, lambda g: g * 2.0 * x * {i + 1.0}\\n", namespace)
                assert gradmagic.check(namespace["square"], np.ones(3, np.float32), framework="keras").ok
                freed.append(weakref.ref(namespace["square"]))
                del namespace
            gc.collect()
            # Only the re-check contexts of the last KEPT_CONTEXTS checks (gradmagic.notebook.contexts) hold their ops.
            RESULT = [reference() is None for reference in freed][:4]
            """
        )
    )
    assert result == [True] * 4
