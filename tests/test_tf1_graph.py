"""TensorFlow 1's graph mode (seed 000): tf.custom_gradient in a tf.compat.v1 graph, with tf.gradients and sessions.

Eager execution, once disabled, cannot be enabled again in the same process,
and the rest of the suite needs it: each test runs a notebook (a real IPython
shell) or a script in a fresh Python where the first thing it does is
`tf.compat.v1.disable_eager_execution()` (or `disable_v2_behavior()`), and
hands back what the user would see: reports as data, values, booleans.
"""

import json
import textwrap

import numpy as np
import pytest
from conftest import codes, problem, run_python

from gradmagic.render.text import render_text
from gradmagic.report import Report

_RESULT = "@@gradmagic-result@@"

# A notebook driven cell by cell in the subprocess; `cell` returns the cell's value (a Report for checking cells).
_NOTEBOOK = """
import json
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

shell = InteractiveShell.instance(colors="nocolor")
RESULT = {}

def cell(source):
    with capture_output(display=False) as captured:
        result = shell.run_cell(source, store_history=True)
    error = result.error_before_exec or result.error_in_exec
    if error is not None:
        raise AssertionError(f"cell failed: {error!r}\\n{source}\\n{captured.stdout}{captured.stderr}")
    return result.result

def report(source):
    return cell(source).to_dict()

cell("import numpy as np\\nimport tensorflow as tf\\ntf.compat.v1.{disable}()")
cell("%load_ext gradmagic")
"""


def in_notebook(*cells: str, disable: str = "disable_eager_execution", timeout: float = 240) -> dict:
    """Run `cells` (code calling `cell(...)` and `report(...)`, filling RESULT) after a notebook's first cell
    disabled eager execution; RESULT, as JSON data."""
    code = _NOTEBOOK.replace("{disable}", disable) + "".join(textwrap.dedent(part) for part in cells)
    output = run_python(code + f"\nprint({_RESULT!r} + json.dumps(RESULT))", timeout=timeout)
    return json.loads(output.rsplit(_RESULT, 1)[1])


def in_script(*parts: str, disable: str = "disable_eager_execution", timeout: float = 240) -> dict:
    """Run the code `parts` (filling RESULT) in a Python whose first statement disables eager execution; RESULT."""
    prologue = f"import json\nimport numpy as np\nimport tensorflow as tf\ntf.compat.v1.{disable}()\nimport gradmagic\n"
    code = prologue + "".join(textwrap.dedent(part) for part in parts)
    output = run_python(code + f"\nprint({_RESULT!r} + json.dumps(RESULT))", timeout)
    return json.loads(output.rsplit(_RESULT, 1)[1])


# The seed's example, as its page writes it (`tf.log` is `tf.compat.v1.log` in TensorFlow 2).
SEED_CELL = """%%custom_gradient --check x=tf.constant([-5., 0., 100.])
def log1pexp(x):
    e = tf.exp(x)
    def grad(dy):
        return dy * (1 - 1 / (1 + e))
    return tf.compat.v1.log(1 + e), grad
"""

# A real Session, counting its runs; the check makes its own sessions with tf.compat.v1.Session.
COUNTING_SESSION = """
class CountingSession(tf.compat.v1.Session):
    runs = 0

    def run(self, *args, **kwargs):
        CountingSession.runs += 1
        return super().run(*args, **kwargs)

tf.compat.v1.Session = CountingSession

def runs_by_phase(op, x):
    marks = []
    report = gradmagic.check(op, x, progress=lambda fraction, phase: marks.append((phase, CountingSession.runs)))
    phases = {}
    for (phase, start), (_, end) in zip(marks, marks[1:]):
        phases[phase] = phases.get(phase, 0) + end - start
    return report, phases
"""


def test_seed_log1pexp_in_a_notebook_with_eager_execution_disabled():
    result = in_notebook(
        f"""
        cell("graph = tf.compat.v1.get_default_graph()\\nsess = tf.compat.v1.InteractiveSession()")
        RESULT["seed"] = report({SEED_CELL!r})
        cell("before = [op.name for op in graph.get_operations()]")
        RESULT["gradcheck"] = report("%gradcheck log1pexp")
        RESULT["python"] = report("import gradmagic\\ngradmagic.check(log1pexp, np.array([-5., 0., 100.], np.float32))")
        RESULT["unchanged"] = cell(
            "[op.name for op in graph.get_operations()] == before and not graph.finalized "
            "and tf.compat.v1.get_default_session() is sess"
        )
        # The user's own graph: the seed's tf.gradients at x = 100, through the op and through the plain forward.
        RESULT["gradients"] = [
            float(v)
            for v in cell(
                "x = tf.constant(100.)\\n"
                "dy = tf.gradients(log1pexp(x), x)\\n"
                "naive = tf.gradients(tf.compat.v1.log(1 + tf.exp(x)), x)\\n"
                "sess.run(dy + naive)"
            )
        ]
        """
    )
    for key in ("seed", "gradcheck", "python"):
        report = Report.from_dict(result[key])
        assert report.ok, report
        assert (report.op.name, report.op.mode) == ("log1pexp", "graph")
        # As in eager mode: the forward overflows at 100 (float32), TensorFlow's own gradient is NaN there, and the
        # custom gradient is 1, as are finite differences.
        assert codes(report) == ["nonfinite-output", "autodiff-nonfinite"]
        assert "tf.gradients" in problem(report, "autodiff-nonfinite").message
        (block,) = report.numerics.jacobians
        assert report.numerics.mode == "full"
        assert np.diag(np.reshape(block.custom, block.shape))[2] == pytest.approx(1.0)
        assert np.diag(np.reshape(block.numerical, block.shape))[2] == pytest.approx(1.0)
        assert report.graph is not None and report.graph.saved_tensors == 1
    assert Report.from_dict(result["seed"]).op.filename.startswith("Cell In[")
    text = render_text(Report.from_dict(result["seed"]))
    assert "[tensorflow 2." in text and ", graph, " in text
    assert result["unchanged"] is True
    assert result["gradients"][0] == 1.0 and np.isnan(result["gradients"][1])


def test_finite_differences_take_as_many_session_runs_as_the_eager_path_takes_compiled_calls():
    result = in_script(
        COUNTING_SESSION,
        """
        # Linear, so that no element's curvature asks for the (data-dependent) non-differentiability probe.
        @tf.custom_gradient
        def triple(x):
            def grad(dy):
                return 3 * dy
            return 3 * x, grad

        RESULT = {}
        for size in (3, 60):
            report, phases = runs_by_phase(triple, np.linspace(-5, 5, size).astype(np.float32))
            RESULT[size] = {"ok": report.ok, "mode": report.numerics.mode, "elements": report.numerics.elements,
                            "phases": phases}
        report, RESULT["again"] = runs_by_phase(triple, np.linspace(5, 6, 60).astype(np.float32))
        """,
    )
    for size in ("3", "60"):
        assert result[size]["ok"] and result[size]["mode"] == "full"
    assert result["60"]["elements"] == 60
    # Per phase, whatever the size: the structure checks run the forward and the gradient function (2, as the eager
    # path calls them); the op's own precision: tf.gradients through the op at the trial upstream with the Jacobians
    # (1) and at the linearity probes (1), as the eager path's compiled calls; the finite differences: whether the
    # forward keeps float64 (1), the precision it really computes in, measured (1), then all 2N+1 evaluations with the
    # custom and autodiff Jacobians in float64 (1). The sweep is off by default.
    expected = {"structure": 2, "tf.compat.v1 Session": 2, "graph": 0, "finite differences": 3}
    assert result["3"]["phases"] == expected
    assert result["60"]["phases"] == expected
    # Checked again at other values of the same shape: what was built is run again, and whether the forward keeps
    # float64, and its precision, are known.
    assert result["again"] == {**expected, "finite differences": 2}


VARIABLES = """
cell('''
with tf.compat.v1.variable_scope("dense", use_resource=True):
    w = tf.compat.v1.get_variable("w", [3], initializer=tf.constant_initializer([1.0, 2.0, 3.0]))
sess = tf.compat.v1.InteractiveSession()
sess.run(tf.compat.v1.global_variables_initializer())
sess.run(w.assign([0.5, -1.0, 2.0]))
graph = tf.compat.v1.get_default_graph()
handle = w.handle
''')
"""


def test_variables_of_a_variable_scope_are_found_perturbed_and_left_as_they_were():
    result = in_notebook(
        VARIABLES,
        """
        cell("import gradmagic\\nbefore = [op.name for op in graph.get_operations()]")
        RESULT["right"] = report('''%%custom_gradient --check x=np.array([1.0, 2.0, 3.0], np.float32)
        def scale(x):
            def grad(dy, variables=None):
                return dy * w, [dy * x]
            return x * w, grad
        ''')
        RESULT["wrong"] = report('''%%custom_gradient --check x=np.array([1.0, 2.0, 3.0], np.float32)
        def scale_wrong(x):
            def grad(dy, variables=None):
                return dy * w, [2 * dy * x]
            return x * w, grad
        ''')
        cell('''
        def stop_at_numbers(fraction, phase):
            if phase == "finite differences":
                raise KeyboardInterrupt
        try:
            gradmagic.check(scale, np.array([1.0, 2.0, 3.0], np.float32), progress=stop_at_numbers)
        except KeyboardInterrupt:
            interrupted = True
        ''')
        RESULT["interrupted"] = cell("interrupted")
        RESULT["unchanged"] = cell(
            "[op.name for op in graph.get_operations()] == before and not graph.finalized and w.handle is handle"
        )
        RESULT["values"] = cell("sess.run(w).tolist()")
        # Checked again after the user changed the variable: the check sees the new value.
        cell("sess.run(w.assign([3.0, 1.0, -1.0]))")
        RESULT["changed"] = report("%gradcheck scale")
        cell("sess.run(w.assign([0.5, -1.0, 2.0]))")
        # The variable still works in the user's graph, through the op and tf.gradients.
        RESULT["variable gradient"] = cell(
            "sess.run(tf.gradients(scale(tf.constant([1.0, 2.0, 3.0])), w)[0]).tolist()"
        )
        """,
    )
    right = Report.from_dict(result["right"])
    assert right.ok and not right.problems, right
    assert right.op.mode == "graph"
    assert [(row.role, row.name) for row in right.tensors if "variable" in row.role] == [
        ("variable", "dense/w"),
        ("variable-gradient", "ddense/w"),
    ]
    # The Jacobian is taken at the session's value of the variable, not at its initializer's.
    (block,) = [b for b in right.numerics.jacobians if b.input == "x"]
    assert np.diag(np.reshape(block.custom, block.shape)).tolist() == [0.5, -1.0, 2.0]
    assert right.numerics.elements == 6  # x and dense/w perturbed

    wrong = Report.from_dict(result["wrong"])
    mismatch = problem(wrong, "fd-mismatch")
    assert codes(wrong) == ["fd-mismatch"]
    assert mismatch.location.input == "dense/w"
    assert "2 times the finite differences" in mismatch.message

    assert result["interrupted"] is True
    changed = Report.from_dict(result["changed"])
    (block,) = [b for b in changed.numerics.jacobians if b.input == "x"]
    assert changed.ok and np.diag(np.reshape(block.custom, block.shape)).tolist() == [3.0, 1.0, -1.0]
    assert result["unchanged"] is True
    assert result["values"] == [0.5, -1.0, 2.0]
    assert result["variable gradient"] == [1.0, 2.0, 3.0]


def test_the_seed_form_get_variable_inside_the_op_takes_the_users_values_by_name():
    result = in_notebook(
        """
        cell("sess = tf.compat.v1.InteractiveSession()\\ngraph = tf.compat.v1.get_default_graph()")
        RESULT["first"] = report('''%%custom_gradient --check x=np.array([1.0, 2.0, 3.0], np.float32)
        def layer(x):
            with tf.compat.v1.variable_scope("layer", use_resource=True):
                v = tf.compat.v1.get_variable("v", [3], initializer=tf.constant_initializer([0.5, 1.5, 2.5]))
            def grad(dy, variables=None):
                return dy * v, [dy * x]
            return x * v, grad
        ''')
        RESULT["no variable in the user's graph"] = cell("graph.get_collection('variables') == []")
        # The user builds the op in their graph, initialises and changes its variable, and checks it again.
        cell('''
        x = tf.constant([1.0, 2.0, 3.0])
        y = layer(x)
        (v,) = graph.get_collection("variables")
        sess.run(tf.compat.v1.global_variables_initializer())
        sess.run(v.assign([4.0, 5.0, 6.0]))
        before = [op.name for op in graph.get_operations()]
        ''')
        RESULT["again"] = report("%gradcheck layer")
        RESULT["unchanged"] = cell("[op.name for op in graph.get_operations()] == before")
        RESULT["gradients"] = cell("[g.tolist() for g in sess.run(tf.gradients(y, [x, v]))]")
        """
    )
    for key, values in (("first", [0.5, 1.5, 2.5]), ("again", [4.0, 5.0, 6.0])):
        report = Report.from_dict(result[key])
        assert report.ok and not report.problems, report
        assert [row.name for row in report.tensors if row.role == "variable"] == ["layer/v"]
        (block,) = [b for b in report.numerics.jacobians if b.input == "x"]
        assert np.diag(np.reshape(block.custom, block.shape)).tolist() == values
    assert result["no variable in the user's graph"] is True  # the check made its variable in its own graph
    assert result["unchanged"] is True
    assert result["gradients"] == [[4.0, 5.0, 6.0], [1.0, 2.0, 3.0]]


def test_a_variable_scope_without_resource_variables_gets_the_seeds_requirement():
    result = in_notebook(
        """
        RESULT["report"] = report('''%%custom_gradient --check x=np.array([1.0, 2.0], np.float32)
        def legacy(x):
            with tf.compat.v1.variable_scope("legacy", use_resource=False):
                v = tf.compat.v1.get_variable("v", [2], initializer=tf.ones_initializer())
            def grad(dy, variables=None):
                return dy * v, [dy * x]
            return x * v, grad
        ''')
        # What TensorFlow itself does with it, in the user's graph.
        cell('''
        try:
            legacy(tf.constant([1.0, 2.0]))
        except TypeError as error:
            raised = str(error)
        ''')
        RESULT["tensorflow"] = cell("raised")
        """
    )
    report = Report.from_dict(result["report"])
    found = problem(report, "non-resource-variable")
    assert codes(report) == ["non-resource-variable"] and found.severity == "error"
    assert "the enclosing variable scope must be using ResourceVariables" in found.message
    assert "get_variable(..., use_resource=True)" in found.message
    assert "variable_scope(..., use_resource=True)" in found.message
    assert "`legacy/v`" in found.message
    assert (found.location.line, found.location.filename[:8]) == (4, "Cell In[")
    assert "must be `ResourceVariable`s" in result["tensorflow"] and "must be `ResourceVariable`s" in found.message


def test_structure_mistakes_are_explained_in_graph_mode():
    result = in_notebook(
        """
        cell('''
        with tf.compat.v1.variable_scope("dense", use_resource=True):
            w = tf.compat.v1.get_variable("w", [2], initializer=tf.ones_initializer())
        unfed = tf.compat.v1.placeholder(tf.float32, [2], name="unfed")
        offset = tf.constant(2.0)
        ''')
        RESULT["three values"] = report('''%%custom_gradient --check x=np.array([1.0, 2.0], np.float32)
        def two_outputs(x):
            def grad(dz, dw):
                return 2 * dz + 3 * dw
            return x * 2, x * 3, grad
        ''')
        RESULT["no variables kwarg"] = report('''%%custom_gradient --check x=np.array([1.0, 2.0], np.float32)
        def scale(x):
            def grad(dy):
                return dy * w
            return x * w, grad
        ''')
        RESULT["too few gradients"] = report('''%%custom_gradient --check a=np.float32(2.0) --check b=np.float32(3.0)
        def product(a, b):
            def grad(dy):
                return dy * b
            return a * b, grad
        ''')
        RESULT["vector cond"] = report('''%%custom_gradient --check x=np.array([1.0, -2.0], np.float32)
        def absolute(x):
            y = tf.cond(x > 0, lambda: x, lambda: -x)
            def grad(dy):
                return dy * tf.sign(x)
            return y, grad
        ''')
        RESULT["alive"] = cell("1 + 1")
        RESULT["scalar cond"] = report("%gradcheck absolute x=np.float32(-2.0)")
        RESULT["placeholder"] = report("%gradcheck absolute x=unfed")
        RESULT["closed-over tensor"] = report('''%%custom_gradient --check x=np.array([1.0, 2.0], np.float32)
        def shifted(x):
            def grad(dy):
                return dy
            return x + offset, grad
        ''')
        RESULT["run-time error"] = report('''%%custom_gradient --check x=np.array([1.0, 2.0], np.float32)
        def checked(x):
            def grad(dy):
                return tf.debugging.check_numerics(dy / 0.0, "the gradient overflows")
            return x * 1.0, grad
        ''')
        """
    )
    reports = {key: Report.from_dict(value) for key, value in result.items() if isinstance(value, dict)}
    three = problem(reports["three values"], "return-structure")
    assert "return (x * 2, x * 3), grad" in three.message and three.location.line == 5
    kwarg = problem(reports["no variables kwarg"], "missing-variables-kwarg")
    assert kwarg.location.variable == "dense/w" and "def grad(upstream, variables=None):" in kwarg.message
    assert codes(reports["too few gradients"]) == ["grad-count"]
    # TensorFlow 2.21 aborts the whole process when it runs this graph: the check says so instead of running it.
    cond = problem(reports["vector cond"], "forward-error")
    assert cond.location.line == 3
    assert "predicate of shape [2]" in cond.message and "tf.where(condition, a, b)" in cond.message
    assert "aborts the whole Python process" in cond.message
    assert result["alive"] == 2
    assert Report.from_dict(result["scalar cond"]).ok  # a scalar predicate is fine, in a graph with no vector one
    placeholder = problem(reports["placeholder"], "input-type")
    assert "`unfed:0` is a tf.compat.v1.placeholder" in placeholder.message
    closed = problem(reports["closed-over tensor"], "closed-over-tensor")
    assert "Const:0" in closed.message and closed.location.line == 5
    run_time = problem(reports["run-time error"], "grad-error")
    assert "the gradient overflows : Tensor had Inf values" in run_time.message
    assert run_time.location.line == 4
    for name, report in reports.items():
        assert report.op.mode == "graph" and (name == "scalar cond" or not report.ok)


def test_tensorflow_1_defaults_reference_variables_and_v1_control_flow():
    result = in_script(
        """
        @tf.custom_gradient
        def dense(x):
            v = tf.compat.v1.get_variable("v", [2], initializer=tf.ones_initializer())
            def grad(dy, variables=None):
                return dy * v, [dy * x]
            return x * v, grad

        @tf.custom_gradient
        def dense_resource(x):
            v = tf.compat.v1.get_variable("r", [2], initializer=tf.ones_initializer(), use_resource=True)
            def grad(dy, variables=None):
                return dy * v, [dy * x]
            return x * v, grad

        outside = tf.compat.v1.get_variable("outside", [2], initializer=tf.ones_initializer())

        @tf.custom_gradient
        def closed_over(x):
            def grad(dy, variables=None):
                return dy * outside, [dy * x]
            return x * outside, grad

        @tf.custom_gradient
        def absolute(x):
            y = tf.cond(x > 0, lambda: x, lambda: -x)
            def grad(dy):
                return dy * tf.sign(x)
            return y, grad

        x = np.array([1.0, -2.0], np.float32)
        ops = [("default", dense), ("resource", dense_resource), ("closed over", closed_over), ("cond", absolute)]
        RESULT = {name: gradmagic.check(op, x).to_dict() for name, op in ops}
        RESULT["outside"] = type(outside).__name__
        """,
        disable="disable_v2_behavior",
    )
    assert codes(Report.from_dict(result["default"])) == ["non-resource-variable"]
    assert result["outside"] == "RefVariable"
    closed_over = problem(Report.from_dict(result["closed over"]), "non-resource-variable")
    assert "`outside`, a reference variable" in closed_over.message
    resource = Report.from_dict(result["resource"])
    assert resource.ok and not resource.problems, resource
    cond = problem(Report.from_dict(result["cond"]), "forward-error")
    assert "Shape must be rank 0 but is rank 1" in cond.message and "tf.where(condition, a, b)" in cond.message


def test_projection_mode_locates_a_wrong_element_of_an_input_and_of_a_variable():
    result = in_script(
        """
        with tf.compat.v1.variable_scope("big", use_resource=True):
            w = tf.compat.v1.get_variable(
                "w", [3000], tf.float64, initializer=tf.constant_initializer(np.linspace(-2, 2, 3000))
            )
        sess = tf.compat.v1.InteractiveSession()
        sess.run(tf.compat.v1.global_variables_initializer())

        def softplus(wrong_element):
            @tf.custom_gradient
            def op(x):
                def grad(dy):
                    factor = tf.where(tf.equal(tf.range(tf.size(x)), wrong_element), 1.1, 1.0)
                    return dy * tf.sigmoid(x) * tf.cast(factor, x.dtype)
                return tf.math.softplus(x), grad
            return op

        def scaled_tanh(wrong_element):
            @tf.custom_gradient
            def op(x):
                y = tf.tanh(x * w)
                def grad(dy, variables=None):
                    d = dy * (1 - y * y)
                    factor = tf.where(tf.equal(tf.range(3000), wrong_element), 1.2, 1.0)
                    return d * w, [d * x * tf.cast(factor, tf.float64)]
                return y, grad
            return op

        x = np.linspace(-3, 3, 5000).astype(np.float32)
        z = np.linspace(-1, 1, 3000)
        RESULT = {
            "right": gradmagic.check(softplus(-1), x).to_dict(),
            "wrong": gradmagic.check(softplus(1234), x).to_dict(),
            "variable right": gradmagic.check(scaled_tanh(-1), z).to_dict(),
            "variable wrong": gradmagic.check(scaled_tanh(777), z).to_dict(),
        }
        """
    )
    reports = {key: Report.from_dict(value) for key, value in result.items()}
    for report in reports.values():
        assert report.numerics.mode == "projection" and report.op.mode == "graph"
    assert reports["right"].ok and not reports["right"].problems
    assert reports["variable right"].ok and not reports["variable right"].problems
    assert [(p.code, p.location.input, p.location.index) for p in reports["wrong"].problems] == [
        ("fd-mismatch", "x", (1234,))
    ]
    assert [(p.code, p.location.input, p.location.index) for p in reports["variable wrong"].problems] == [
        ("fd-mismatch", "big/w", (777,))
    ]


def test_keras_is_refused_in_graph_mode_with_a_reason():
    # The second-order check in graph mode is a case of test_conformance.py.
    result = in_script(
        """
        import gradmagic.errors
        try:
            gradmagic.check(lambda x: (x, lambda dy: dy), np.array([0.5, -1.0], np.float32), framework="keras")
        except gradmagic.errors.GradmagicError as error:
            RESULT = str(error)
        """
    )
    assert result.startswith("Keras 3 needs TensorFlow's eager execution, which is disabled here")


def test_inside_a_graph_context_of_an_eager_process_the_check_runs_in_graph_mode(nb):
    nb.ok(
        "import gradmagic\n"
        "@tf.custom_gradient\n"
        "def log1pexp(x):\n"
        "    e = tf.exp(x)\n"
        "    def grad(dy):\n"
        "        return dy * (1 - 1 / (1 + e))\n"
        "    return tf.math.log(1 + e), grad\n"
        "with tf.Graph().as_default() as graph:\n"
        "    in_graph = gradmagic.check(log1pexp, np.array([-5., 0., 5.], np.float32))\n"
        "    operations = len(graph.get_operations())\n"
        "eagerly = gradmagic.check(log1pexp, np.array([-5., 0., 5.], np.float32))"
    )
    in_graph, eagerly = nb.ns["in_graph"], nb.ns["eagerly"]
    assert (in_graph.op.mode, eagerly.op.mode) == ("graph", "eager")
    assert in_graph.ok and not in_graph.problems and eagerly.ok
    assert nb.ns["operations"] == 0
    # The same Jacobians up to float32 rounding (the eager path takes a small op's eagerly, graph mode in a
    # session, where Grappler may fold its arithmetic), both far inside the tolerance.
    (graph_block,), (eager_block,) = in_graph.numerics.jacobians, eagerly.numerics.jacobians
    np.testing.assert_allclose(graph_block.custom, eager_block.custom, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(graph_block.numerical, eager_block.numerical, rtol=1e-6, atol=1e-7)
    assert in_graph.numerics.max_error < 1e-3 and eagerly.numerics.max_error < 1e-3


def test_an_op_of_thousands_of_ops_is_traced_on_its_first_check_in_graph_mode():
    # The eager path puts off tracing an op whose forward runs thousands of ops; in graph mode that run builds a graph
    # already, and putting off its gradient graph dropped it from a correct op's first report for nothing.
    result = in_script(
        """
        @tf.custom_gradient
        def slow_square(x):
            y = x
            for _ in range(1_200):
                y = tf.identity(y)
            return y * x, lambda dy: 2 * x * dy

        report = gradmagic.check(slow_square, np.array([1.0, 2.0], np.float32))
        RESULT = dict(codes=report.codes(), graph=report.graph is not None, mode=report.op.mode)
        """
    )
    assert result == {"codes": [], "graph": True, "mode": "graph"}
