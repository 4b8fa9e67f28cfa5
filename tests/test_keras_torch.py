"""Keras 3 `keras.ops.custom_gradient` on the PyTorch backend, checked with real PyTorch.

Keras fixes its backend at import and runs on TensorFlow in the test process,
so every check here runs in a fresh Python with KERAS_BACKEND=torch
(`backend_process`); the Report comes back as data, as a user would see it.
"""

import textwrap

import pytest
from backend_process import check_in_backend, run_in_backend
from conftest import codes, problem
from test_keras_jax import log1pexp_source

from gradmagic.render.text import render_text
from gradmagic.report import Report

IMPORTS = """import gradmagic, keras, torch
import numpy as np
from keras import ops
from gradmagic.frameworks import get_adapter
"""


def in_torch(code: str) -> dict:
    """Run `code` under Keras's PyTorch backend with gradmagic, ops, NumPy and PyTorch imported; its RESULT."""
    return run_in_backend("torch", IMPORTS + code)


@pytest.mark.parametrize("form", ["portable", "pytorch"])
def test_seed_log1pexp_passes_on_pytorch_with_gradient_one_at_100(form):
    result = in_torch(
        log1pexp_source(form)
        + textwrap.dedent(
            """
            x = np.array([-5.0, 0.0, 100.0], np.float32)
            decorated = ops.custom_gradient(log1pexp)
            made = get_adapter("keras").decorate(log1pexp)

            def gradient_at_100(op):
                v = torch.tensor([100.0], requires_grad=True)
                op(v).sum().backward()
                return float(v.grad[0])

            RESULT = {
                "plain": gradmagic.check(log1pexp, x, framework="keras").to_dict(),
                "decorated": gradmagic.check(decorated, x, framework="keras").to_dict(),
                "grads at 100": [gradient_at_100(op) for op in (decorated, made)],
            }
            """
        )
    )
    assert result["grads at 100"] == [1.0, 1.0]
    for origin in ("plain", "decorated"):
        report = Report.from_dict(result[origin])
        assert report.ok, report
        assert (report.op.name, report.op.origin) == ("log1pexp", origin)
        assert (report.op.framework, report.op.backend) == ("keras", "torch")
        assert report.op.framework_version.startswith("keras 3.") and ", torch 2.13.0" in report.op.framework_version
        assert "Keras 3 on PyTorch (keras " in render_text(report)
        # torch.autograd of the plain forward is NaN at x = 100; the custom gradient is 1.
        found = problem(report, "autodiff-nonfinite")
        assert "PyTorch's own gradient (torch.autograd)" in found.message
        assert "The custom gradient fixes it" in found.message
        (block,) = report.numerics.jacobians
        assert block.custom[8] == pytest.approx(1.0)
        assert block.numerical[0] == pytest.approx(1 / (1 + 2.718281828**5), rel=1e-6)
        # float32 inputs, float64 finite differences: the forward keeps float64 throughout.
        assert report.numerics.dtype == "float64"


def test_jax_and_tensorflow_form_fails_with_the_portable_form_in_the_message():
    report = check_in_backend("torch", log1pexp_source("jax-and-tensorflow"), "log1pexp, np.array([-5.0, 0.0])")
    assert codes(report) == ["backend-signature"]
    found = problem(report, "backend-signature")
    assert "Keras's PyTorch backend calls it, `grad(*inputs, upstream=upstream)`" in found.message
    assert "multiple values for argument 'upstream'" in found.message
    assert "def grad(*args, upstream=None):\n    if upstream is None:\n        (upstream,) = args" in found.message
    assert found.location.line == 6  # `def grad(upstream):`, after the three lines check_in_backend puts first


TWO_INPUTS = """
def mul_sin(x, y):
    def grad(*args, upstream=None):
        return upstream * (y + ops.cos(x)), upstream * {dy}
    return x * y + ops.sin(x), grad
"""


@pytest.mark.parametrize("dy, ok", [("x", True), ("y", False)])
def test_two_inputs_pass_and_a_wrong_gradient_is_located_at_its_input(dy, ok):
    report = check_in_backend(
        "torch",
        TWO_INPUTS.format(dy=dy),
        "mul_sin, np.array([0.5, -1.0, 2.0], np.float32), np.array([1.5, 0.25, -3.0], np.float32)",
    )
    assert report.ok is ok, report
    assert [row.name for row in report.tensors if row.role == "downstream"] == ["dx", "dy"]
    if not ok:
        assert codes(report) == ["fd-mismatch"]
        found = problem(report, "fd-mismatch")
        assert found.location.input == "y" and found.location.output == "output"
        assert "d output[2] / d y[2] at y[2] = -3: custom -3, finite differences 2" in found.message


def test_several_outputs_a_list_of_gradients_and_a_closed_over_variable_get_their_own_problems():
    setup = """
def pair(x, y):
    return (x * y, x + y), lambda *args, upstream: (upstream, upstream)

def listed(x, y):
    return x * y, lambda *args, upstream: [upstream * y, upstream * x]

scale = keras.Variable(np.float32(3.0), name="scale")
def scaled(x):
    return x * scale, lambda *args, upstream: upstream * scale
"""
    result = in_torch(
        setup + "RESULT = [gradmagic.check(op, *inputs, framework='keras').to_dict() for op, inputs in "
        "[(pair, (np.float32(2.0), np.float32(3.0))), (listed, (np.ones(2, np.float32), np.ones(2, np.float32))), "
        "(scaled, (np.ones(2, np.float32),))]]"
    )
    pair, listed, scaled = (Report.from_dict(data) for data in result)
    outputs = problem(pair, "backend-outputs")
    assert "returns 2 output tensors" in outputs.message and "takes 2 positional arguments but 3" in outputs.message
    found = problem(listed, "grad-list")
    assert "returned an incorrect number of gradients (expected 3, got 2)" in found.message
    assert "(grad_x, grad_y)" in found.message
    variable = problem(scaled, "closed-over-variable")
    assert "scale" in variable.message and "torch.no_grad" in variable.message
    # What PyTorch would do with each, measured: the errors quoted above, and no gradient for the variable.
    measured = in_torch(
        setup
        + textwrap.dedent(
            """
            def attempt(op, *inputs):
                tensors = [torch.tensor(v, requires_grad=True) for v in inputs]
                try:
                    torch.autograd.grad(ops.custom_gradient(op)(*tensors), tensors, allow_unused=True)
                except Exception as error:
                    return f"{type(error).__name__}: {error}"
            x = torch.ones(2, requires_grad=True)
            y = ops.custom_gradient(scaled)(x)
            y.sum().backward()
            RESULT = {"pair": attempt(pair, 2.0, 3.0), "listed": attempt(listed, [1.0], [1.0]),
                      "variable grad": scale.value.grad is None, "variable requires grad": scale.value.requires_grad}
            """
        )
    )
    assert "takes 2 positional arguments but 3 were given" in measured["pair"]
    assert "returned an incorrect number of gradients (expected 3, got 2)" in measured["listed"]
    assert measured["variable grad"] and measured["variable requires grad"]


def test_gradient_graph_shows_forward_backward_and_the_saved_exp_with_source_lines():
    source = log1pexp_source("pytorch")
    code = source + 'RESULT = gradmagic.check(log1pexp, np.array([1.0, 2.0], np.float32), framework="keras").to_dict()'
    report = Report.from_dict(in_torch(code))
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
    assert {op for op, _ in ops_by_role["backward"]} >= {"add", "mul"}
    assert {line for _, line in ops_by_role["backward"]} == {gradient_line}
    nodes = {node.id: node for node in graph.nodes}
    (saved,) = [edge for edge in graph.edges if edge.saved]
    assert nodes[saved.source].op == "exp" and nodes[saved.target].role == "backward"
    assert (graph.saved_tensors, graph.saved_bytes) == (1, 8)
    assert {node.label for node in graph.nodes if node.role in ("input", "upstream")} == {"x", "doutput"}


def test_forward_with_python_control_flow_on_values_is_checked_point_by_point():
    # vmap cannot run `if` on a tensor's value; the evaluations fall back to a loop, with the same verdicts.
    setup = """
def relu_or_square(x):
    def grad(*args, upstream=None):
        return upstream * (2.0 * x if bool(ops.all(x > 0)) else ops.cast(x > 0, x.dtype))
    if bool(ops.all(x > 0)):
        return x * x, grad
    return ops.relu(x), grad
"""
    result = in_torch(
        setup + "RESULT = [gradmagic.check(relu_or_square, v, framework='keras', sweep=True).to_dict() for v in "
        "(np.array([0.5, 2.0], np.float32), np.array([-0.5, 2.0], np.float32))]"
    )
    for data in result:
        report = Report.from_dict(data)
        assert report.ok, report
        assert report.numerics.mode == "full" and report.sweep is not None


def test_float64_inputs_stay_float64():
    report = check_in_backend("torch", log1pexp_source("portable"), "log1pexp, np.array([-5.0, 0.0, 30.0]), sweep=True")
    assert report.ok, report
    assert {row.dtype for row in report.tensors} == {"float64"}
    assert report.numerics.dtype == "float64" and report.sweep.numerical_dtype == "float64"


def test_integer_input_and_keywords_of_gradmagics_op_and_a_hand_decorated_op_refusing_keywords():
    setup = """
def rows(x, count, scale=1.0):
    def grad(*args, upstream=None):
        return ops.reshape(upstream, x.shape) * scale, None
    return ops.reshape(x, (int(count), -1)) * scale, grad
op = get_adapter("keras").decorate(rows)

@ops.custom_gradient
def scaled(x, scale=1.0):
    return x * scale, lambda *args, upstream: upstream * scale
"""
    made, hand = (
        Report.from_dict(data)
        for data in in_torch(
            setup + "RESULT = [gradmagic.check(op, np.arange(6, dtype=np.float32), 2, kwargs={'scale': 3.0}, "
            "framework='keras').to_dict(), gradmagic.check(scaled, np.ones(3, np.float32), kwargs={'scale': 2.0}, "
            "framework='keras').to_dict()]"
        )
    )
    assert made.ok, made
    assert made.op.origin == "magic"
    assert [(row.name, row.shape) for row in made.tensors if row.role == "output"] == [("output", (2, 3))]
    (found,) = [p for p in hand.problems if p.code == "graph-mismatch"]
    assert "on PyTorch refuses keyword arguments" in found.message and "functools.partial" in found.message


def test_second_order_through_values_the_forward_made_under_no_grad_is_flagged():
    # Keras runs the forward under torch.no_grad: the seed's `e` carries no history, so the derivative of the
    # gradient function misses d e / d x; computed from the op's inputs (`*args`), it differentiates.
    setup = (
        log1pexp_source("portable")
        + """
def from_args(x):
    return ops.log(1 + ops.exp(x)), lambda x, upstream: upstream * ops.sigmoid(x)
"""
    )
    seed, from_args = (
        Report.from_dict(data)
        for data in in_torch(
            setup + "RESULT = [gradmagic.check(op, np.array([0.5, -1.0]), order=2, framework='keras').to_dict() "
            "for op in (log1pexp, from_args)]"
        )
    )
    found = problem(seed, "second-order-mismatch")
    assert found.location.input == "x" and "through the gradient function 0" in found.message
    assert "torch.no_grad" in found.message and "`*args`" in found.message
    assert from_args.ok, from_args


def test_the_magic_in_an_ipython_shell_on_pytorch():
    result = in_torch(
        textwrap.dedent(
            """
            from IPython.core.interactiveshell import InteractiveShell
            shell = InteractiveShell.instance()
            shell.run_line_magic("load_ext", "gradmagic")
            shell.run_cell("from keras import ops\\nimport numpy as np, torch")
            cell = '''%%custom_gradient --keras --check x=np.array([-5.0, 0.0, 100.0])
            def log1pexp(x):
                e = ops.exp(x)
                def grad(*args, upstream=None):
                    if upstream is None:
                        (upstream,) = args
                    return ops.multiply(upstream, 1.0 - 1.0 / ops.add(1, e))
                return ops.log(1 + e), grad
            '''
            from IPython.utils.capture import capture_output
            with capture_output() as shown:
                outcome = shell.run_cell(cell)
            shell.run_cell("v = torch.tensor([100.0], requires_grad=True)\\nlog1pexp(v).sum().backward()")
            report = gradmagic.check(shell.user_ns["log1pexp"], np.array([-5.0, 0.0, 100.0]), framework="keras")
            RESULT = {"ok": outcome.success, "grad": float(shell.user_ns["v"].grad[0]), "shown": shown.stdout,
                      "report": report.to_dict()}
            """
        )
    )
    assert result["ok"] and result["grad"] == 1.0
    # --check shows the report (as text in a plain shell): float64 inputs, so exp(100) does not overflow.
    assert "log1pexp(x) passes (0 errors, 0 warnings) [Keras 3 on PyTorch (keras 3." in result["shown"]
    assert "gradient graph: 3 forward and" in result["shown"]
    report = Report.from_dict(result["report"])
    assert report.op.origin == "magic" and report.op.backend == "torch"
    assert report.ok and codes(report) == []


def test_redefined_ops_are_freed():
    result = in_torch(
        textwrap.dedent(
            """
            import gc, weakref
            from gradmagic.notebook import contexts
            freed = []
            for i in range(contexts.KEPT_CONTEXTS + 4):
                namespace = {"ops": ops}
                exec(f"def square(x):\\n    return x * x * {i + 1.0}, "
                     f"lambda *a, upstream: upstream * 2.0 * x * {i + 1.0}\\n", namespace)
                assert gradmagic.check(namespace["square"], np.ones(3, np.float32), framework="keras").ok
                freed.append(weakref.ref(namespace["square"]))
                del namespace
            gc.collect()
            RESULT = [reference() is None for reference in freed][:4]
            """
        )
    )
    assert result == [True] * 4


def test_no_pytorch_warning_leaks_from_gradmagics_own_calls_on_read_only_arrays():
    # A read-only NumPy array (a pickled one, an input the user froze, a view of the check's example point) that
    # torch.as_tensor would share makes PyTorch warn "The given NumPy array is not writable": gradmagic's own calls
    # copy such an array first. The user's own code may still warn; none of these calls is the user's.
    result = in_torch(
        log1pexp_source("portable")
        + textwrap.dedent(
            """
            import warnings
            from gradmagic.frameworks.base import Layout

            def frozen(array):
                array = np.array(array)
                array.setflags(write=False)
                return array

            adapter = get_adapter("keras")
            target = adapter.resolve(log1pexp)
            x = torch.tensor([-1.0, 0.5, 2.0], dtype=torch.float64)
            layout = Layout((x,), {}, (x,), (0,), ())
            points = frozen(np.array([[-1.0, 0.5, 2.0], [0.0, 1.0, 3.0]]))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                adapter.evaluate(target, layout, frozen(np.eye(3) * 1e-3), frozen(np.ones(3)), signs=(1.0, -1.0))
                adapter.vjps(target, layout, points, frozen(np.ones((1, 3))), jacobian=True)
                adapter.second_order(target, layout, frozen(np.ones(3)))
                adapter.constant(frozen([1.0, 2.0]), "float32")
                reports = [
                    gradmagic.check(log1pexp, frozen(np.linspace(-3, 3, n).astype(np.float32)), framework="keras",
                                    sweep=n < 100)
                    for n in (7, 1000)
                ]
            RESULT = {
                "verdicts": [report.verdict for report in reports],
                "warnings": [f"{w.category.__name__}: {w.message} ({w.filename})" for w in caught],
            }
            """
        )
    )
    assert result["verdicts"] == ["pass", "pass"]
    assert result["warnings"] == []
