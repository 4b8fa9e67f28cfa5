"""Conformance: the same cases checked by every adapter, with the same verdicts.

gradmagic checks custom gradients through five adapters: TensorFlow eager, TensorFlow 1 graph mode, and Keras 3 on
TensorFlow, JAX and PyTorch. Each case below is written once, with `ops` standing for `keras.ops` on Keras and for
a small shim of TensorFlow functions on the TensorFlow adapters, and its gradient function in the portable form
`grad(*args, upstream=None)` that every backend can call. Every adapter checks every case, and the tests assert
what a user relies on (verdict, problem codes, the located input and index, the numerics mode, the op's
description), so that a refactoring of the check engine or of one adapter cannot make the adapters drift apart.
Where an adapter must differ (several outputs on PyTorch, variables on JAX and PyTorch, second order through a
value the forward computed on PyTorch: see the README), the expectation says so for that adapter.

Keras fixes its backend at import and eager execution cannot be enabled again once disabled: TensorFlow 1 graph
mode and Keras on JAX and on PyTorch each run every case in one fresh Python (`backend_process`), all started
when the module's first test runs, and hand back the reports as data (`Report.to_dict()`); TensorFlow eager and
Keras on TensorFlow run in the test process meanwhile.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from backend_process import BackendProcess

from gradmagic.report import Report

ADAPTERS = ("tensorflow", "tensorflow-graph", "keras-tensorflow", "keras-jax", "keras-torch")
KERAS = ("keras-tensorflow", "keras-jax", "keras-torch")

# -- the cases, written once -------------------------------------------------------------------------------------


@dataclass
class Case:
    op: Callable
    args: tuple
    options: dict = field(default_factory=dict)


def tensorflow_ops(tf: Any) -> types.SimpleNamespace:
    """The `keras.ops` functions the cases use, from TensorFlow (Keras needs eager execution: not in graph mode)."""
    return types.SimpleNamespace(
        arange=tf.range,
        cast=tf.cast,
        cos=tf.cos,
        equal=tf.equal,
        exp=tf.exp,
        log=tf.math.log,
        reshape=tf.reshape,
        sigmoid=tf.sigmoid,
        sin=tf.sin,
        softplus=tf.math.softplus,
        stop_gradient=tf.stop_gradient,
    )


WRONG_ELEMENT = (3,)
PROJECTED_WRONG_ELEMENT = (4, 17)


def cases(ops: Any, variable: Callable[[np.ndarray, str], Any]) -> dict[str, Case]:
    """Every case, as (op, inputs, options); `variable(value, name)` makes a variable of the adapter's framework."""

    def one_element(x, index: tuple[int, ...], value: float):
        """Ones shaped like `x`, `value` at `index`."""
        shape = tuple(int(size) for size in x.shape)
        hit = ops.equal(ops.arange(int(np.prod(shape))), int(np.ravel_multi_index(index, shape)))
        return ops.reshape(1.0 + (value - 1.0) * ops.cast(hit, x.dtype), shape)

    def log1pexp_times(factor: Callable):
        """The seed's log1pexp (keras.ops.custom_gradient's documentation), its gradient times `factor(x)`."""

        def log1pexp(x):
            e = ops.exp(x)

            def grad(*args, upstream=None):
                if upstream is None:
                    (upstream,) = args
                return upstream * (1.0 - 1.0 / (1.0 + e)) * factor(x)

            return ops.log(1.0 + e), grad

        return log1pexp

    def add_bias(x, b):
        def grad(*args, upstream=None):  # grad-shape points here
            if upstream is None:
                (upstream,) = args
            return upstream, upstream  # the bias's gradient is not summed over the batch

        return x + b, grad

    def mul_sin(x, y):
        def grad(*args, upstream=None):
            if upstream is None:  # TensorFlow: grad(dz, dw); JAX: grad((dz, dw))
                upstream = args if len(args) > 1 else args[0]
            dz, dw = upstream
            return dz * (y + ops.cos(x)), dz * x + dw * 2.0 * y

        return (x * y + ops.sin(x), y * y), grad

    w = variable(np.array([0.5, -1.0, 2.0], np.float32), "w")

    def scale_by_w(factor: float):
        """x * w, reading the variable w; the variable's gradient times `factor`."""

        def scale(x):
            def grad(*args, upstream=None, variables=None):
                if upstream is None:
                    (upstream,) = args
                return upstream * w, [upstream * x * factor]

            return x * w, grad

        return scale

    def softplus(x):
        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            return upstream * ops.sigmoid(x)  # of the input: differentiable on every backend

        return ops.softplus(x), grad

    def softplus_saving_its_sigmoid(x):
        s = ops.sigmoid(x)  # a value of the forward, which Keras's PyTorch backend computes under torch.no_grad

        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            return upstream * s

        return ops.softplus(x), grad

    def softplus_with_a_constant_gradient(x):
        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            return upstream * ops.stop_gradient(ops.sigmoid(x))  # the derivative of sigmoid(x) is lost

        return ops.softplus(x), grad

    def square_times(factor: Callable):
        def square(x):
            def grad(*args, upstream=None):
                if upstream is None:
                    (upstream,) = args
                return upstream * 2.0 * x * factor(x)

            return x * x, grad

        return square

    def right(x):
        return 1.0

    seed_x = np.array([-5.0, 0.0, 100.0], np.float32)
    x5 = np.array([-2.0, -1.0, 0.5, 1.0, 3.0], np.float32)
    two = (np.array([0.5, -1.0, 2.0], np.float32), np.array([1.5, 0.25, -3.0], np.float32))
    big = np.random.default_rng(0).standard_normal((10, 30)).astype(np.float32)
    projected = {"full_threshold": 50}
    return {
        "correct": Case(log1pexp_times(right), (seed_x,)),
        "constant factor": Case(log1pexp_times(lambda x: 1.5), (x5,)),
        "one wrong element": Case(log1pexp_times(lambda x: one_element(x, WRONG_ELEMENT, 1.1)), (x5,)),
        "wrong shape": Case(add_bias, (np.ones((4, 3), np.float32), np.zeros(3, np.float32))),
        "several inputs and outputs": Case(mul_sin, two),
        "variable": Case(scale_by_w(1.0), (np.array([1.0, 2.0, 3.0], np.float32),)),
        "wrong variable gradient": Case(scale_by_w(2.0), (np.array([1.0, 2.0, 3.0], np.float32),)),
        "second order": Case(softplus, (two[0],), {"order": 2}),
        "second order through a value of the forward": Case(softplus_saving_its_sigmoid, (two[0],), {"order": 2}),
        "second order through a constant": Case(softplus_with_a_constant_gradient, (two[0],), {"order": 2}),
        "projection": Case(square_times(right), (big,), projected),
        "projection, one wrong element": Case(
            square_times(lambda x: one_element(x, PROJECTED_WRONG_ELEMENT, 1.25)), (big,), projected
        ),
    }


def run_cases(adapter: str) -> dict[str, dict]:
    """Check every case with `adapter`, in this process: the reports as data (`Report.to_dict()`)."""
    import gradmagic

    if adapter.startswith("keras-"):
        import keras

        assert keras.backend.backend() == adapter.removeprefix("keras-"), keras.backend.backend()
        ops, variable, framework = keras.ops, lambda value, name: keras.Variable(value, name=name), "keras"
    else:
        import tensorflow as tf

        assert tf.executing_eagerly() is (adapter == "tensorflow")
        ops, variable, framework = tensorflow_ops(tf), lambda value, name: tf.Variable(value, name=name), "tensorflow"
    return {
        name: gradmagic.check(case.op, *case.args, framework=framework, **case.options).to_dict()
        for name, case in cases(ops, variable).items()
    }


# -- running them: one process per adapter that needs its own ---------------------------------------------------

_TESTS = str(Path(__file__).resolve().parent)
_IN_SUBPROCESS = {
    "tensorflow-graph": ("tensorflow", "import tensorflow as tf\ntf.compat.v1.disable_eager_execution()\n"),
    "keras-jax": ("jax", ""),
    "keras-torch": ("torch", ""),
}


class Runs:
    """Every adapter's reports, by case: the subprocesses start at once, the in-process adapters run on demand."""

    def __init__(self, adapters: set[str]):
        self._processes = {
            adapter: BackendProcess(
                backend,
                f"{prologue}import sys\nsys.path.insert(0, {_TESTS!r})\nfrom test_conformance import run_cases\n"
                f"RESULT = run_cases({adapter!r})\n",
            )
            for adapter, (backend, prologue) in _IN_SUBPROCESS.items()
            if adapter in adapters
        }
        self._reports: dict[str, dict[str, Report] | BaseException] = {}

    def reports(self, adapter: str) -> dict[str, Report]:
        if adapter not in self._reports:
            try:
                data = self._processes[adapter].result() if adapter in self._processes else run_cases(adapter)
                self._reports[adapter] = {name: Report.from_dict(report) for name, report in data.items()}
            except Exception as error:  # every test of this adapter fails with it, not only the first
                self._reports[adapter] = error
        found = self._reports[adapter]
        if isinstance(found, BaseException):
            raise found
        return found

    def close(self) -> None:
        for process in self._processes.values():
            process.close()


@pytest.fixture(scope="module")
def runs(request):
    # Only the adapters of the selected tests (`-k keras-jax` starts one subprocess).
    selected = [item for item in request.session.items if getattr(item, "module", None) is request.module]
    runs = Runs({item.callspec.params["adapter"] for item in selected})
    yield runs
    runs.close()


@pytest.fixture(params=ADAPTERS)
def adapter(request) -> str:
    return request.param


@pytest.fixture
def reports(runs, adapter) -> dict[str, Report]:
    return runs.reports(adapter)


# -- what every adapter must say --------------------------------------------------------------------------------

DESCRIBED_AS = {  # op.framework, op.backend, op.mode
    "tensorflow": ("tensorflow", None, "eager"),
    "tensorflow-graph": ("tensorflow", None, "graph"),
    "keras-tensorflow": ("keras", "tensorflow", "eager"),
    "keras-jax": ("keras", "jax", "eager"),
    "keras-torch": ("keras", "torch", "eager"),
}


def codes(report: Report) -> list[str]:
    return [problem.code for problem in report.problems]


def only(report: Report, code: str):
    """The report's one problem, which must have `code`."""
    assert codes(report) == [code], report
    return report.problems[0]


def line_of(marker: str) -> int:
    """The line of this file that ends with the comment `marker`."""
    lines = Path(__file__).read_text().splitlines()
    (number,) = [number for number, text in enumerate(lines, 1) if text.endswith(f"  # {marker}")]
    return number


def test_every_report_describes_the_op_as_checked_by_its_adapter(reports, adapter):
    assert list(reports) == list(cases(types.SimpleNamespace(), lambda value, name: None))  # every case ran
    for name, report in reports.items():
        assert (report.op.framework, report.op.backend, report.op.mode) == DESCRIBED_AS[adapter], name


def test_correct_op_passes_with_the_custom_gradient_one_at_100(reports):
    report = reports["correct"]
    assert report.ok and report.verdict == "warn", report
    assert report.op.name == "log1pexp"
    # float32: the forward overflows at 100 (a warning) and autodiff of it is NaN there (info), the custom gradient 1.
    assert codes(report) == ["nonfinite-output", "autodiff-nonfinite"]
    assert report.problems[1].location.index == (2,)
    # Finite differences in float64 for float32 inputs, where exp(100) does not overflow.
    assert (report.numerics.mode, report.numerics.dtype, report.numerics.elements) == ("full", "float64", 3)
    (block,) = report.numerics.jacobians
    custom, numerical = (np.reshape(values, block.shape) for values in (block.custom, block.numerical))
    assert custom[2, 2] == pytest.approx(1.0) and numerical[2, 2] == pytest.approx(1.0)
    assert np.diag(custom) == pytest.approx(np.diag(numerical), rel=1e-6)


def test_constant_factor_fails_and_the_message_says_the_factor(reports):
    found = only(reports["constant factor"], "fd-mismatch")
    assert found.severity == "error" and found.location.input == "x"
    assert "at 5 of 25 Jacobian elements" in found.message
    assert found.message.startswith("dx is 1.5 times the finite differences at every element: a constant factor is off")


def test_one_wrong_element_is_located(reports):
    report = reports["one wrong element"]
    found = only(report, "fd-mismatch")
    assert (found.location.input, found.location.index, found.location.output_index) == ("x", WRONG_ELEMENT, (3,))
    assert (
        "at 1 of 25 Jacobian elements. d output[3] / d x[3] at x[3] = 1: custom 0.804164, finite differences 0.731059"
        in (found.message)
    )
    worst = report.numerics.worst[0]
    assert worst.index == WRONG_ELEMENT and worst.custom / worst.numerical == pytest.approx(1.1, rel=1e-6)


def test_unreduced_broadcast_gradient_is_a_shape_error_naming_the_input(reports, adapter):
    report = reports["wrong shape"]
    found = only(report, "grad-shape")
    assert (found.location.input, found.location.line) == ("b", line_of("grad-shape points here"))
    assert "The gradient for input `b` has shape [4, 3] but `b` has shape [3]" in found.message
    advice = "ops.sum(grad, axis=[0])" if adapter in KERAS else "tf.reduce_sum(grad, axis=[0])"
    if adapter == "keras-torch":  # PyTorch sums it back itself: it works there, not elsewhere; the numbers judge it
        assert found.severity == "warning" and report.verdict == "warn"
        assert f"Sum it over the broadcast axes yourself, `{advice}`, which works on every backend" in found.message
        assert report.numerics.mode == "full"
        return
    assert found.severity == "error"
    assert f"sum the gradient over the broadcast axes, `{advice}`" in found.message
    assert report.numerics.mode == "skipped"


def test_several_inputs_and_outputs(reports, adapter):
    report = reports["several inputs and outputs"]
    if adapter == "keras-torch":  # Keras's torch.autograd.Function takes one upstream gradient
        found = only(report, "backend-outputs")
        assert "returns 2 output tensors (`output[0]`, `output[1]`)" in found.message
        return
    assert report.ok and codes(report) == [], report
    names = {role: [row.name for row in report.tensors if row.role == role] for role in ("output", "downstream")}
    assert names == {"output": ["output[0]", "output[1]"], "downstream": ["dx", "dy"]}
    assert report.numerics.mode == "full" and report.numerics.elements == 6
    assert {(block.input, block.output) for block in report.numerics.jacobians} == {
        (x, output) for x in ("x", "y") for output in ("output[0]", "output[1]")
    }


def test_variables(reports, adapter):
    right, wrong = reports["variable"], reports["wrong variable gradient"]
    if adapter in ("keras-jax", "keras-torch"):  # the forward may not close over a variable there (README)
        for report in (right, wrong):
            found = only(report, "closed-over-variable")
            assert found.location.variable == "w" and "Pass it as input" in found.message
            assert report.numerics.mode == "skipped"
        return
    assert right.ok and codes(right) == [], right
    assert [(row.role, row.name) for row in right.tensors if row.role.startswith("variable")] == [
        ("variable", "w"),
        ("variable-gradient", "dw"),
    ]
    assert right.numerics.elements == 6  # x and w perturbed
    found = only(wrong, "fd-mismatch")
    assert found.location.input == "w" and "/ d w[" in found.message
    assert found.message.startswith("dw is 2 times the finite differences at every element")


def test_second_order(reports, adapter):
    assert reports["second order"].ok and codes(reports["second order"]) == [], reports["second order"]
    through_forward = reports["second order through a value of the forward"]
    if adapter == "keras-torch":  # the forward runs under torch.no_grad: `s` has no derivative (README)
        found = only(through_forward, "second-order-mismatch")
        assert found.location.input == "x" and "through the gradient function 0" in found.message
        assert "torch.no_grad" in found.message and "`*args`" in found.message
    else:
        assert through_forward.ok and codes(through_forward) == [], through_forward
    found = only(reports["second order through a constant"], "second-order-mismatch")
    assert found.location.input == "x" and "d dx[2] / d x[2]: through the gradient function 0" in found.message
    for name in ("second order", "second order through a value of the forward", "second order through a constant"):
        assert reports[name].options["order"] == 2 and reports[name].numerics.mode == "full"


def test_projection_mode_passes_a_correct_op_and_locates_one_wrong_element(reports):
    right, wrong = reports["projection"], reports["projection, one wrong element"]
    for report in (right, wrong):
        assert (report.numerics.mode, report.numerics.elements) == ("projection", 300)
        assert report.options["full_threshold"] == 50
        assert not report.numerics.jacobians
    assert right.ok and codes(right) == [], right
    found = only(wrong, "fd-mismatch")
    assert (found.location.input, found.location.index) == ("x", PROJECTED_WRONG_ELEMENT)
    (located,) = wrong.numerics.worst
    assert located.index == PROJECTED_WRONG_ELEMENT
    assert located.custom / located.numerical == pytest.approx(1.25, rel=1e-3)
