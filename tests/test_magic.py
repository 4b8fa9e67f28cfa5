"""%%custom_gradient's two forms, its options and config, and %gradcheck, in a real IPython shell."""

import inspect
import linecache
import re

import numpy as np
import pytest
from IPython.core.error import UsageError

from gradmagic import source
from gradmagic.op import info_of

SQUARE = """def square(x):
    def grad(dy):
        return dy * 2 * x
    return x * x, grad
"""


def gradient_of(nb, call: str, wrt: str = "x", in_function: bool = False) -> np.ndarray:
    """The gradient of sum(call) with respect to `wrt`, taken in the notebook."""
    nb.ok(
        f"""
def _gradient({wrt}):
    with tf.GradientTape() as tape:
        tape.watch({wrt})
        y = tf.reduce_sum({call})
    return tape.gradient(y, {wrt})
_take = tf.function(_gradient) if {in_function} else _gradient
"""
    )
    return nb.ns["_take"](nb.ns[wrt]).numpy()


def test_definition_form_binds_a_custom_gradient_op_under_the_function_name(nb):
    run = nb.ok("%%custom_gradient\n" + SQUARE)
    op = nb.ns["square"]
    assert info_of(op).form == "definition"
    assert op.__name__ == "square" and str(inspect.signature(op)) == "(x)"
    assert "square(x) is now a tf.custom_gradient op" in run.stdout
    nb.ok("x = tf.constant([1., 2.])")
    np.testing.assert_allclose(gradient_of(nb, "square(x)"), [2.0, 4.0])


def test_custom_rule_is_used_not_autodiff(nb):
    # The rule deliberately differs from the derivative: only a custom gradient gives 7.
    nb.ok("%%custom_gradient\ndef seven(x):\n    return tf.identity(x), lambda dy: 7. * dy")
    nb.ok("x = tf.constant([1., 2.])")
    np.testing.assert_allclose(gradient_of(nb, "seven(x)"), [7.0, 7.0])
    np.testing.assert_allclose(gradient_of(nb, "seven(x)", in_function=True), [7.0, 7.0])


def test_definition_form_runs_helpers_and_imports_in_the_user_namespace(nb):
    nb.ok(
        """%%custom_gradient
import math
SCALE = math.sqrt(4.0)

def scaled(x):
    def grad(dy):
        return dy * SCALE
    return x * SCALE, grad

AFTER = "statements after the def run too"
"""
    )
    assert nb.ns["SCALE"] == 2.0 and "math" in nb.ns and nb.ns["AFTER"].startswith("statements")
    nb.ok("x = tf.constant([1., 2.])")
    np.testing.assert_allclose(gradient_of(nb, "scaled(x)"), [2.0, 2.0])


def test_several_defs_need_a_name_and_the_error_lists_them(nb):
    cell = "%%custom_gradient{}\ndef first(x):\n    return x\n\ndef second(x):\n    return 2 * x\n"
    run = nb.fails(cell.format(""), UsageError)
    assert "2 functions (first, second)" in run.stderr and "%%custom_gradient second" in run.stderr
    assert "second" not in nb.ns

    # A helper beside the op: the op is the one that returns a gradient function, named or not.
    helped = "%%custom_gradient{}\ndef helper(x):\n    return 2 * x\n\n" + SQUARE
    for line in ("", " square"):
        nb.ok(helped.format(line))
        assert info_of(nb.ns["square"]) is not None
        assert info_of(nb.ns["helper"]) is None and nb.ns["helper"](3) == 6


def test_naming_a_def_the_cell_does_not_have(nb):
    run = nb.fails("%%custom_gradient cube\n" + SQUARE, UsageError)
    assert "no function named `cube`; it defines square" in run.stderr


def test_cell_without_def_and_without_signature_says_what_to_write(nb):
    run = nb.fails("%%custom_gradient\ny = x * x\nreturn y, lambda dy: 2 * x * dy", UsageError)
    assert "defines no function" in run.stderr and "%%custom_gradient name(x)" in run.stderr


def test_already_decorated_def_is_bound_as_written(nb):
    run = nb.ok("%%custom_gradient\n@tf.custom_gradient\n" + SQUARE)
    assert "`square` is decorated in the cell (`@tf.custom_gradient`, cell line 2): bound as written" in run.stdout


def test_body_form(nb):
    nb.ok(
        """%%custom_gradient square(x)
def grad(dy):
    return dy * 2 * x
return x * x, grad
"""
    )
    assert info_of(nb.ns["square"]).form == "body"
    nb.ok("x = tf.constant([3.])")
    np.testing.assert_allclose(gradient_of(nb, "square(x)"), [6.0])
    np.testing.assert_allclose(gradient_of(nb, "square(x)", in_function=True), [6.0])


def test_body_form_signature_with_defaults_and_keyword_only_parameters(nb):
    nb.ok("DEFAULT_SCALE = 3.0")
    nb.ok(
        """%%custom_gradient affine(x, scale=DEFAULT_SCALE, *, shift=0.0)
def grad(dy):
    return dy * scale
return scale * x + shift, grad
"""
    )
    nb.ok("DEFAULT_SCALE = 100.0  # defaults were evaluated when the cell ran, as in Python")
    nb.ok("x = tf.constant([1., 2.])")
    nb.ok("y_default, y_shifted = affine(x), affine(x, 2.0, shift=1.0)")
    np.testing.assert_allclose(nb.ns["y_default"], [3.0, 6.0])
    np.testing.assert_allclose(nb.ns["y_shifted"], [3.0, 5.0])
    np.testing.assert_allclose(gradient_of(nb, "affine(x, shift=1.0)"), [3.0, 3.0])
    # Inside tf.function, tf.custom_gradient alone refuses keyword arguments; gradmagic's op does not.
    np.testing.assert_allclose(gradient_of(nb, "affine(x, shift=1.0)", in_function=True), [3.0, 3.0])
    nb.fails("affine(x, 2.0, 1.0)", TypeError)


def test_body_form_with_var_positional_parameter(nb):
    nb.ok(
        """%%custom_gradient total(*xs) --check xs=(tf.constant(1.), tf.constant(2.), tf.constant(3.))
def grad(dy):
    return tuple(dy * (i + 1) for i in range(len(xs)))
return tf.add_n(xs), grad
"""
    )
    nb.ok(
        """a, b = tf.constant(1.), tf.constant(2.)
with tf.GradientTape() as tape:
    tape.watch([a, b])
    y = total(a, b)
grads = [g.numpy() for g in tape.gradient(y, [a, b])]
"""
    )
    assert nb.ns["grads"] == [1.0, 2.0]


def test_signature_may_have_spaces_and_a_space_before_the_parenthesis(nb):
    nb.ok(
        "%%custom_gradient square (x, power = 2) --check x=tf.constant([1., 2.])\n"
        "return x ** power, lambda dy: dy * power * x ** (power - 1)"
    )
    assert str(inspect.signature(nb.ns["square"])) == "(x, power=2)"


def test_check_displays_the_report_and_keeps_it_as_the_cell_value(nb):
    run = nb.ok("%%custom_gradient --check x=tf.constant([-5., 0., 100.])\n" + SQUARE)
    assert "square(x) passes (0 errors, 0 warnings)" in run.stdout
    report = nb.ns["_"]
    assert report.ok and report.op.origin == "magic" and report.numerics.mode == "full"
    assert ("downstream", "dx", (3,), "float32") in [(r.role, r.name, r.shape, r.dtype) for r in report.tensors]


def test_failing_check_still_binds_the_op_and_shows_the_problem(nb):
    run = nb.ok(
        "%%custom_gradient --check x=tf.constant([1., 2.])\ndef square(x):\n    return x * x, lambda dy: dy * 3 * x"
    )
    assert "square(x) fails" in run.stdout and "fd-mismatch" in run.stdout
    assert info_of(nb.ns["square"]) is not None


def test_quiet_hides_a_passing_report_but_not_a_failing_one(nb):
    assert nb.ok("%%custom_gradient --quiet --check x=tf.constant([1.])\n" + SQUARE).stdout == ""
    run = nb.ok(
        "%%custom_gradient --quiet --check x=tf.constant([1.])\ndef square(x):\n    return x * x, lambda dy: dy"
    )
    assert "square(x) fails" in run.stdout


def test_tolerances_from_the_line_and_from_config(nb):
    # 1.001 times the derivative: caught by float64 defaults, accepted with rtol=1e-2.
    cell = (
        "%%custom_gradient {}--check x=tf.constant([1., 2.])\n"
        "def square(x):\n    return x * x, lambda dy: dy * 2.002 * x"
    )
    assert "square(x) fails" in nb.ok(cell.format("")).stdout
    assert "square(x) passes" in nb.ok(cell.format("--rtol 1e-2 ")).stdout
    nb.ok("%config GradientMagics.rtol = 1e-2")
    try:
        assert "square(x) passes" in nb.ok(cell.format("")).stdout
    finally:
        nb.ok("%config GradientMagics.rtol = None")
    assert nb.ns["_"].options["rtol"] == 1e-2


def test_check_expression_may_contain_spaces_brackets_strings_and_braces(nb):
    nb.ok(
        """%%custom_gradient --check x=tf.constant([[1., 2.], [3., 4.]]) --check options={'mode': 'a b'}
def pick(x, options):
    def grad(dy):
        return dy, None
    return x * 2, grad
"""
    )
    assert [str(e) for e in info_of(nb.ns["pick"]).example_inputs] == [
        "x=tf.constant([[1., 2.], [3., 4.]])",
        "options={'mode': 'a b'}",
    ]


def test_order_two_from_the_line(nb):
    cell = (
        "%%custom_gradient {}--check x=tf.constant([1., 2.])\ndef frozen(x):\n"
        "    slope = tf.stop_gradient(3 * x * x)\n    return x ** 3, lambda dy: dy * slope"
    )
    assert "frozen(x) passes" in nb.ok(cell.format("")).stdout
    run = nb.ok(cell.format("--order 2 "))
    assert "frozen(x) fails" in run.stdout and "second-order-mismatch" in run.stdout
    assert "argument --order: invalid choice: 3" in nb.fails(cell.format("--order 3 "), UsageError).stderr


def test_no_check_skips_the_check_but_keeps_the_inputs_for_gradcheck(nb):
    run = nb.ok("%%custom_gradient --no-check --check x=tf.constant([2.])\n" + SQUARE)
    assert "is now a tf.custom_gradient op" in run.stdout and "passes" not in run.stdout
    run = nb.ok("%gradcheck square")
    assert "square(x) passes" in run.stdout and "float32[1]" in run.stdout


def test_quiet_option_and_config(nb):
    assert nb.ok("%%custom_gradient --quiet\n" + SQUARE).stdout == ""
    nb.ok("%config GradientMagics.quiet = True")
    try:
        assert nb.ok("%%custom_gradient --check x=tf.constant(1.)\n" + SQUARE).stdout == ""
    finally:
        nb.ok("%config GradientMagics.quiet = False")


def test_check_config_off_skips_checks(nb):
    nb.ok("%config GradientMagics.check = False")
    try:
        run = nb.ok("%%custom_gradient --check x=tf.constant(1.)\ndef broken(x):\n    return undefined_name, None")
    finally:
        nb.ok("%config GradientMagics.check = True")
    assert "is now a tf.custom_gradient op" in run.stdout and "forward-error" not in run.stdout
    assert info_of(nb.ns["broken"]) is not None


def test_config_lists_the_traits_with_their_help(nb):
    run = nb.ok("%config GradientMagics")
    for trait in ("check", "quiet", "framework", "rtol", "atol", "eps", "full_threshold", "probes", "seed", "order"):
        assert f"GradientMagics.{trait}" in run.stdout
    assert "example inputs given with --check" in run.stdout


def test_help_documents_the_line_syntax_with_an_example(nb):
    help_text = nb.shell.object_inspect_mime("%custom_gradient")["text/plain"]
    for expected in (
        "--check ARG=EXPR",
        "--no-check",
        "--quiet",
        "--rtol X",
        "NAME(PARAMS)",
        "%%custom_gradient log1pexp(x) --check x=tf.constant([-5., 0., 100.])",
    ):
        assert expected in help_text
    assert "%gradcheck OP ARG=EXPR" in nb.shell.object_inspect_mime("%gradcheck")["text/plain"]
    # The check options, in this order, on both magics; the Keras backends named from frameworks/names.py.
    options = ["--rtol", "--atol", "--eps", "--order", "--graph", "--no-graph", "--backends", "--surrogate", "--sweep"]
    for magic in ("%custom_gradient", "%gradcheck"):
        help_text = nb.shell.object_inspect_mime(magic)["text/plain"]
        assert [flag for flag in re.findall(r"^  (--[\w-]+)", help_text, re.M) if flag in options] == options
        words = " ".join(help_text.split())
        assert "Keras backends (tensorflow, jax, torch; 'all': every one installed)" in words
        assert "(default: %config GradientMagics.sweep)" in words


def test_a_cell_is_its_magic_line_then_its_body_as_linecache_holds_it(nb):
    nb.ok("%%custom_gradient square --check x=tf.constant([1., 2.])\n" + SQUARE)
    filename = info_of(nb.ns["square"]).filename
    cell = source.Cell.of("".join(linecache.getlines(filename)), filename)
    assert (cell.magic_line, cell.body) == ("%%custom_gradient square --check x=tf.constant([1., 2.])", SQUARE)
    assert cell.text == "".join(linecache.getlines(filename))
    numbered = cell.numbered().split("\n")  # the body, each line at its line number in the cell
    assert numbered[0] == "" and all(numbered[n - 1] == linecache.getline(filename, n)[:-1] for n in range(2, 6))


def test_line_form_explains_it_is_a_cell_magic(nb):
    run = nb.fails("%custom_gradient square", UsageError)
    assert "is a cell magic" in run.stderr


def test_gradcheck_checks_a_hand_decorated_op(nb):
    nb.ok("@tf.custom_gradient\n" + SQUARE)
    nb.ok("report = %gradcheck square x=tf.ones([2, 3])")
    report = nb.ns["report"]
    assert report.ok and report.op.origin == "decorated" and report.op.name == "square"
    assert report.numerics.elements == 6


def test_gradcheck_errors(nb):
    assert "`nothing` is not an op of the notebook (NameError" in nb.fails("%gradcheck nothing x=1", UsageError).stderr
    nb.ok("@tf.custom_gradient\n" + SQUARE)
    assert "Give example inputs" in nb.fails("%gradcheck square", UsageError).stderr
    assert "has no parameter `y`" in nb.fails("%gradcheck square y=1.", UsageError).stderr
    run = nb.ok("%gradcheck square x=tf.constant('a')")
    assert "square(x) fails" in run.stdout and "forward-error" in run.stdout


def test_redefining_replaces_the_op(nb):
    nb.ok("%%custom_gradient\n" + SQUARE)
    first = nb.ns["square"]
    nb.ok("%%custom_gradient square(x)\nreturn x * x, lambda dy: dy * 2 * x")
    assert nb.ns["square"] is not first and info_of(nb.ns["square"]).form == "body"


@pytest.mark.parametrize(
    "line, message",
    [
        ("--bogus", "unrecognized arguments: --bogus"),
        ("--check", "argument --check: expected one argument"),
        ("--check x", "`x` is not an example input: write ARG=EXPR"),
        ("--check x=(1,", "a bracket or a quote is not closed"),
        ("--check x=1 --check x=2", "`x` is given twice"),
        ("--check x=1+", "is not a valid Python expression"),
        ("--check z=1", "`square(x)` has no parameter `z` (in `z=1`); its parameters are: x."),
        ("--check x=undefined_thing", "Evaluating the example input `x=undefined_thing` raised NameError"),
    ],
)
def test_bad_magic_lines_are_usage_errors_naming_the_cause(nb, line, message):
    nb.ok("square = 'previous value'")
    run = nb.fails(f"%%custom_gradient {line}\n" + SQUARE, UsageError)
    assert message in run.stderr
    assert nb.ns["square"] == "previous value"
    nb.ok("assert 1 + 1 == 2")  # the kernel stays usable


def test_missing_required_input_is_named(nb):
    run = nb.fails(
        "%%custom_gradient --check x=1.\ndef f(x, y):\n    return x * y, lambda d: (d * y, d * x)", UsageError
    )
    assert "No example input for `y` of `f(x, y)`: add `--check y=EXPR`" in run.stderr
