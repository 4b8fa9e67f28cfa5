"""Keras 3 `keras.ops.custom_gradient`: the magic's --keras, the seed's three forms of log1pexp, and the
portability check (--backends), whose other backends run in real subprocesses with real JAX and PyTorch."""

import functools

import keras
import numpy as np
import pytest
from conftest import codes, problem
from IPython.core.error import UsageError

import gradmagic
from gradmagic import portability
from gradmagic.checking.structure import PORTABLE_FORM
from gradmagic.render.text import render_text

# The seed's log1pexp (keras.ops.custom_gradient's documentation), in its three forms, as cell bodies.
GRADIENTS = {
    "portable": """    def grad(*args, upstream=None):
        if upstream is None:
            (upstream,) = args
        return ops.multiply(upstream, 1.0 - 1.0 / ops.add(1, e))
""",
    "jax-and-tensorflow": """    def grad(upstream):
        return ops.multiply(upstream, 1.0 - 1.0 / ops.add(1, e))
""",
    "pytorch": """    def grad(*args, upstream):
        return ops.multiply(upstream, 1.0 - 1.0 / ops.add(1, e))
""",
}


def log1pexp_cell(form: str, line: str = "") -> str:
    return (
        f"%%custom_gradient --keras {line}\ndef log1pexp(x):\n    e = ops.exp(x)\n{GRADIENTS[form]}"
        "    return ops.log(1 + e), grad\n"
    )


@pytest.fixture
def knb(nb):
    """A notebook with Keras's ops imported, as Keras users write them."""
    nb.ok("import keras\nfrom keras import ops")
    return nb


def test_keras_runs_on_tensorflow_in_the_test_process():
    # The in-process tests below are about the TensorFlow backend; the others run in subprocesses.
    assert keras.backend.backend() == "tensorflow"


@pytest.mark.parametrize("form", ["portable", "jax-and-tensorflow"])
def test_seed_log1pexp_keras_op_gives_gradient_one_at_100(knb, form):
    run = knb.ok(log1pexp_cell(form))
    assert "log1pexp(x) is now a keras.ops.custom_gradient op (Keras 3 (TensorFlow backend)" in run.stdout
    knb.ok(
        "x = tf.constant([100.0])\nwith tf.GradientTape() as tape:\n    tape.watch(x)\n    y = log1pexp(x)\n"
        "g = tape.gradient(y, x)"
    )
    np.testing.assert_allclose(knb.ns["g"].numpy(), [1.0])
    report = gradmagic.check(knb.ns["log1pexp"], np.array([-5.0, 0.0, 100.0]), framework="keras")
    assert report.ok, report
    assert (report.op.framework, report.op.backend) == ("keras", "tensorflow")
    assert "Keras 3 on TensorFlow (keras " in render_text(report)


def test_pytorch_only_form_fails_on_tensorflow_with_the_portable_form_shown(knb):
    knb.ok(log1pexp_cell("pytorch"))
    report = gradmagic.check(knb.ns["log1pexp"], np.array([-5.0, 0.0, 100.0]), framework="keras")
    found = problem(report, "backend-signature")
    assert found.severity == "error" and found.location.line == 4  # the `def grad` line of the cell
    assert "missing a required argument: 'upstream'" in found.message
    assert "Keras's TensorFlow backend calls it, `grad(*upstreams)`" in found.message
    assert PORTABLE_FORM in found.message
    # The text renderer keeps the code sample's lines.
    assert "        (upstream,) = args" in render_text(report)


def test_two_inputs_and_a_wrong_gradient_on_keras_tensorflow(knb):
    knb.ok(
        """%%custom_gradient --keras
def mul_sin(x, y):
    def grad(*args, upstream=None):
        if upstream is None:
            (upstream,) = args
        return upstream * (y + ops.cos(x)), upstream * x * 1.5
    return x * y + ops.sin(x), grad
"""
    )
    report = gradmagic.check(knb.ns["mul_sin"], np.array([0.5, -1.0]), np.array([2.0, 3.0]), framework="keras")
    assert codes(report) == ["fd-mismatch"]
    assert problem(report, "fd-mismatch").location.input == "y"


def test_shape_advice_uses_keras_ops(knb):
    knb.ok(
        """%%custom_gradient --keras
def add_bias(x, b):
    def grad(upstream):
        return upstream, upstream
    return x + b, grad
"""
    )
    report = gradmagic.check(knb.ns["add_bias"], np.ones((2, 3)), np.zeros(3), framework="keras")
    found = problem(report, "grad-shape")
    assert "ops.sum(grad, axis=[0])" in found.message and "tf." not in found.message


def test_backends_needs_keras_and_known_names(knb):
    run = knb.fails(
        "%%custom_gradient --backends all --check x=np.array([1.0])\ndef f(x):\n    return x, lambda u: u",
        UsageError,
    )
    assert "--backends checks a keras.ops.custom_gradient op" in run.shown and "f" not in knb.ns
    run = knb.fails(log1pexp_cell("portable", "--backends jax,mxnet --check x=np.array([1.0])"), UsageError)
    assert "unknown Keras backend 'mxnet'" in run.shown and "log1pexp" not in knb.ns


# -- the portability check: each backend in its own process -----------------------------------------------------


@keras.ops.custom_gradient
def _hand_decorated_cube(x):
    return x * x * x, lambda upstream: upstream * 3 * x * x


def _plain_cube(x):
    return x * x * x, lambda upstream: upstream * 3 * x * x


class _CallableCube:
    def __call__(self, x):
        return _plain_cube(x)


def test_what_travels_to_the_other_backends_is_the_function_the_check_resolved():
    for op in (_hand_decorated_cube, _plain_cube):
        recipe = portability.recipe_for(op)
        assert (recipe["kind"], recipe["name"]) == ("function", op.__name__), recipe
        assert (
            recipe["source"]
            .lstrip()
            .startswith(
                "@keras.ops.custom_gradient\ndef _hand_decorated_cube"
                if op is _hand_decorated_cube
                else "def _plain_cube"
            )
        )
        assert recipe["filename"] == __file__
    for op in (_CallableCube(), functools.partial(_plain_cube)):
        with pytest.raises(portability.NotPortable, match="not a function whose source can be sent"):
            portability.recipe_for(op)


def backend_verdicts(report) -> dict:
    return {result.backend: result.verdict for result in report.backends}


def backend_codes(report, backend: str) -> list[str]:
    return [p.code for result in report.backends if result.backend == backend for p in result.problems]


def test_portable_log1pexp_passes_on_every_backend(knb):
    run = knb.ok(log1pexp_cell("portable", "--backends all --check x=np.array([-5.0, 0.0, 100.0])"))
    report = run.result.result
    assert backend_verdicts(report) == {"tensorflow": "pass", "jax": "pass", "torch": "pass"}, report
    assert report.ok and report.timings["backends"] > 0
    versions = {result.backend: result.version for result in report.backends}
    assert "jax " in versions["jax"] and "torch " in versions["torch"]
    text = render_text(report)
    assert "TensorFlow (this kernel)" in text and "PyTorch" in text


def test_jax_and_tensorflow_form_fails_on_pytorch_only(knb):
    run = knb.ok(log1pexp_cell("jax-and-tensorflow", "--backends all --check x=np.array([-5.0, 0.0, 100.0])"))
    report = run.result.result
    assert backend_verdicts(report) == {"tensorflow": "pass", "jax": "pass", "torch": "fail"}, report
    assert backend_codes(report, "torch") == ["backend-signature"]
    torch_problem = next(result for result in report.backends if result.backend == "torch").problems[0]
    assert "`grad(*inputs, upstream=upstream)`" in torch_problem.message and PORTABLE_FORM in torch_problem.message
    assert torch_problem.location.line == 4  # the cell's own line, though it ran in another process
    assert torch_problem.location.filename.startswith("Cell In[")  # named as the user knows the cell
    # The verdict of the op fails and names the backend and the cause.
    assert not report.ok
    summary = problem(report, "backend-fails")
    assert summary.message.startswith("On Keras's PyTorch backend the check fails: [backend-signature]")


def test_backend_specific_mistakes_get_their_own_problems(knb):
    # A list of gradients: fine on TensorFlow and JAX (measured with jax 0.10.2), not on PyTorch; two outputs:
    # not on PyTorch.
    knb.ok(
        """%%custom_gradient --keras --backends jax,torch --check x=np.array([0.5, 2.0]) --check y=np.array([1.0, -1.0])
def prod(x, y):
    def grad(*args, upstream=None):
        if upstream is None:
            (upstream,) = args
        return [upstream * y, upstream * x]
    return x * y, grad
"""
    )
    report = knb.ns["_"]
    assert backend_verdicts(report) == {"jax": "pass", "torch": "fail"}, report
    assert backend_codes(report, "jax") == [] and backend_codes(report, "torch") == ["grad-list"]
    message = report.backends[1].problems[0].message
    assert "needs a tuple" in message and "incorrect number of gradients (expected 3, got 2)" in message

    knb.ok(
        """%%custom_gradient --keras --backends torch --check x=np.array([0.5, 2.0])
def pair(x):
    def grad(*args, upstream=None):
        if upstream is None:
            (upstream,) = args
        return upstream[0] * 2 * x + upstream[1]
    return (x * x, x), grad
"""
    )
    report = knb.ns["_"]
    assert backend_codes(report, "torch") == ["backend-outputs"]


def test_closed_over_variable_is_explained_on_jax_and_pytorch(knb):
    knb.ok("w = keras.Variable(np.array([2.0, 3.0]), name='w')")
    knb.ok(
        """%%custom_gradient --keras --backends jax,torch --check x=np.array([0.5, 2.0])
def scale(x):
    def grad(*args, upstream=None, variables=None):
        if upstream is None:
            (upstream,) = args
        return (upstream * w,), [upstream * x]
    return x * w, grad
"""
    )
    report = knb.ns["_"]
    # On TensorFlow, tf.custom_gradient hands the variable to grad: correct there; JAX cannot differentiate it,
    # PyTorch gives it no gradient (what model.fit then does: tests/test_precision.py).
    assert report.op.backend == "tensorflow" and codes(report) == ["backend-fails", "backend-fails"]
    assert backend_codes(report, "jax") == backend_codes(report, "torch") == ["closed-over-variable"]
    for result, summary in zip(report.backends, report.problems):
        message = result.problems[0].message
        assert "trainable Keras variable `w`" in message and "Pass it as input" in message
        # The summary names the backend once, the message does not again.
        assert summary.message.count("Keras's") == 1, summary.message


def test_what_cannot_travel_makes_a_backend_unavailable_with_the_reason(knb):
    knb.ok("import threading\nLOCK = threading.Lock()")
    knb.ok(
        """%%custom_gradient --keras --backends jax --check x=np.array([1.0])
def guarded(x):
    with LOCK:
        return x * 2.0, lambda upstream: upstream * 2.0
"""
    )
    report = knb.ns["_"]
    assert backend_verdicts(report) == {"jax": "unavailable"}
    assert "reads `LOCK` (a lock)" in report.backends[0].note
    assert problem(report, "backend-unavailable").severity == "info" and report.ok
