"""The display never breaks: no user text is read as markup or control characters in any view (text, HTML, the
report's data and the live widget, the gradient graph's SVG, a watch's report, the magics' errors), very long text
is cut with a note, and a view that fails leaves the report's text and the reason, never a traceback."""

import json

import pytest
from IPython.core.error import UsageError

import gradmagic
from gradmagic.notebook import display
from gradmagic.report import TEXT_LIMIT, display_text

#: What a user's text may hold: mathtext, HTML, an ANSI colour, a NUL, a bidirectional override.
NASTY = "$x$ <b>bold</b> \x1b[31mred\x1b[0m nul\x00end \u202eevil"
#: Characters no view may receive as they are.
UNSHOWN = ("\x1b", "\x00", "\u202e")


def strings(value) -> list[str]:
    """Every string in a view: itself, or those its JSON data holds, keys and values."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in strings(key) + strings(item)]
    if isinstance(value, (list, tuple)):
        return [text for item in value for text in strings(item)]
    return []


def literal(value) -> bool:
    """Whether no string in `value` holds a character no view shows as it is."""
    return not any(character in text for text in strings(value) for character in UNSHOWN)


def all_text(bundle: dict) -> dict[str, str]:
    """Each view of a MIME bundle as the text that reaches the front-end."""
    return {kind: value if isinstance(value, str) else json.dumps(value) for kind, value in bundle.items()}


def assert_shown_literally(bundle: dict) -> None:
    for kind, value in bundle.items():
        assert literal(value), kind
    html = bundle.get("text/html")
    if html is not None:
        assert "<b>bold" not in html and "&lt;b&gt;bold&lt;/b&gt;" in html
        assert "tex2jax_ignore mathjax_ignore" in html  # MathJax leaves the `$x$` alone
    assert "\\x1b[31mred\\x1b[0m nul\\x00end \\u202eevil" in bundle["text/plain"]  # written out, not applied


@pytest.fixture
def nasty_nb(nb):
    nb.ns["NASTY"] = NASTY
    nb.ok("class Odd:\n    def __repr__(self):\n        return NASTY\nweights = tf.Variable([1., 2.], name='w$x$_b')")
    return nb


def test_user_text_in_an_error_a_default_and_a_name_is_shown_literally_in_every_view(nasty_nb):
    nb = nasty_nb
    nb.ok(
        "%%custom_gradient --check x=tf.constant([1., 2.])\ndef raises(x, scale=Odd()):\n"
        '    """$x$ <b>doc</b> \\x1b[31m \\x00"""\n    raise ValueError(NASTY)\n    return x, lambda dy: dy\n'
    )
    report = nb.ns["_"]
    assert report.op.signature.startswith("(x, scale=$x$ <b>bold</b> \\x1b[31mred")
    assert "raised ValueError: $x$ <b>bold</b> \\x1b[31mred" in report.problems[0].message
    data, _ = display.report_bundle(report)
    assert_shown_literally(data)
    shown = display.widget(report)
    try:
        assert literal(shown.report)
        assert shown.report["problems"][0]["message"] == report.problems[0].message
    finally:
        shown.close()


def test_a_variable_name_is_literal_in_the_report_and_the_graphs_svg(nasty_nb):
    nb = nasty_nb
    nb.ok(
        "%%custom_gradient --check x=tf.constant([1., 2.])\ndef scaled(x, tag=Odd()):\n    y = x * weights\n"
        "    def grad(dy, variables=None):\n        return dy * weights, [dy * x]\n    return y, grad\n"
    )
    report = nb.ns["_"]
    assert report.ok, report
    assert "w$x$_b" in [row.name for row in report.tensors]
    data, _ = display.report_bundle(report)
    assert_shown_literally(data)
    graph = display.graph_bundle(report.graph)
    assert "w$x$_b" in graph["image/svg+xml"] and literal(graph)


def test_a_watch_report_shows_an_ops_name_literally(nasty_nb):
    nb = nasty_nb
    nb.ok(
        "def raw(x):\n    return x * 2, lambda dy: dy * 2\nraw.__name__ = raw.__qualname__ = NASTY\n"
        "op = tf.custom_gradient(raw)"
    )
    nb.ok(
        "%%gradwatch watched\nx = tf.constant([1., 2.])\nwith tf.GradientTape() as tape:\n    tape.watch(x)\n"
        "    y = op(x)\ntape.gradient(y, x)"
    )
    bundle, _ = display.watch_bundle(nb.ns["watched"])
    assert_shown_literally(bundle)
    assert "$x$ &lt;b&gt;bold" in bundle["text/html"]


def test_a_very_long_error_is_cut_with_a_note_in_every_view(nb):
    nb.ns["LONG"] = "A" * 100_000
    nb.ok(
        "%%custom_gradient --check x=tf.constant([1., 2.])\ndef floods(x):\n    raise ValueError(LONG)\n"
        "    return x, lambda dy: dy\n"
    )
    message = nb.ns["_"].problems[0].message
    assert TEXT_LIMIT - 40 <= len(message) <= TEXT_LIMIT and message.endswith(" characters more)")
    data, _ = display.report_bundle(nb.ns["_"])
    assert all(len(text) < 20_000 for text in all_text(data).values())
    assert "characters more)" in data["text/plain"] and "characters more)" in data["text/html"]


def test_the_magics_errors_show_the_users_text_literally_and_cut(nb):
    nb.ns["NASTY"] = NASTY
    nb.ok("%%custom_gradient --no-check\ndef twice(x):\n    return 2 * x, lambda dy: 2 * dy\n")
    nb.ok("def boom(text):\n    raise ValueError(text)")
    run = nb.fails("%gradcheck twice x=boom(NASTY)", UsageError)
    assert "raised ValueError: $x$ <b>bold</b> \\x1b[31mred\\x1b[0m nul\\x00end" in run.stderr
    assert literal(run.stderr)
    run = nb.fails("%gradcheck twice x=boom('B' * 100_000)", UsageError)
    assert "characters more)" in run.stderr and len(run.stderr) < 5_000


def test_a_nul_in_the_cell_is_a_syntax_error_naming_the_cell(nb):
    run = nb.fails("%%custom_gradient\ndef op(x):\n    return x, lambda dy: dy  # \x00\n", UsageError)
    assert f"SyntaxError in Cell In[{nb.last_cell_number}]" in run.stderr and "null bytes" in run.stderr
    assert "None" not in run.stderr and "op" not in nb.ns


def test_a_failed_recheck_shows_its_error_literally_in_the_widget(nb):
    nb.ns["NASTY"] = NASTY
    nb.ok("def boom():\n    raise ValueError(NASTY * 1000)")
    nb.ok("%%custom_gradient --check x=tf.constant([1., 2.])\ndef twice(x):\n    return 2 * x, lambda dy: 2 * dy\n")
    shown = display.widget(nb.ns["_"])
    try:
        assert shown.controls["available"]
        shown._on_message(shown, {"action": "recheck", "inputs": "x=boom()"}, [])  # what the Re-check button sends
        status = shown.status
        assert status["error"] and "$x$ <b>bold</b> \\x1b[31mred" in status["message"]
        assert literal(status["message"])
        assert len(status["message"]) <= TEXT_LIMIT and status["message"].endswith("characters more)")
    finally:
        shown.close()


def test_a_view_that_fails_leaves_the_reports_text_and_the_reason(nb):
    """A Report built by hand (or read back) with a value no view can format: the cell still shows it."""
    nb.ok(
        "from gradmagic.report import Report, OpDescription, Numerics\n"
        "op = OpDescription(name='made', signature='(x)', framework='tensorflow', framework_version='2', "
        "origin='plain')\nodd = Report(op=op, numerics=Numerics(mode='full', elements='many', dtype='float32'))"
    )
    run = nb.ok("odd")
    assert "made(x): pass" in run.stdout
    assert "(gradmagic could not show this report's text: ValueError: " in run.stdout
    assert "its text is above" in run.stdout
    assert "Traceback" not in run.shown
    bundle, metadata = display.report_bundle(nb.ns["odd"])
    assert list(bundle) == ["text/plain"] and metadata == {}


def test_display_text_is_literal_cut_and_idempotent():
    shown = display_text(NASTY)
    assert shown == "$x$ <b>bold</b> \\x1b[31mred\\x1b[0m nul\\x00end \\u202eevil"
    assert display_text(shown) == shown
    assert display_text("line\r\nnext\ttab") == "line\nnext\ttab"
    cut = display_text("x" * 50_000, 1_000)
    assert len(cut) <= 1_000 and cut.endswith("x … (49,040 characters more)")
    assert display_text(cut, 1_000) == cut
    assert gradmagic.report.Problem("c", "error", NASTY).message == shown  # every Report's strings, however made
