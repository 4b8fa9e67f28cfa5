"""The Report contract: JSON Schema, round trip, non-finite numbers, and renderers that escape user text."""

import dataclasses
import json
import re

import jsonschema
import numpy as np
import pytest
import report_fixtures
import tensorflow as tf

import gradmagic
from gradmagic.notebook.display import report_bundle
from gradmagic.render.html import render_html
from gradmagic.render.text import render_text
from gradmagic.render.words import report_data
from gradmagic.report import MIME_TYPE, SCHEMA_VERSION, Report, schema


@pytest.fixture(scope="module")
def reports() -> dict[str, Report]:
    return report_fixtures.reports()


@pytest.mark.parametrize(
    "name",
    [
        "log1pexp",
        "unreduced_bias",
        "projection",
        "hostile",
        "big_graph",
        "scoped_graph",
        "straight_through",
        "gradient_reversal",
    ],
)
def test_reports_validate_against_the_shipped_schema_and_round_trip(reports, name):
    data = json.loads(json.dumps(reports[name].to_dict(), allow_nan=False))  # strict JSON
    jsonschema.validate(data, schema())
    assert data["version"] == SCHEMA_VERSION and data["$schema"] == schema()["$id"]
    again = Report.from_dict(data)
    assert again.to_dict() == data
    assert (again.ok, again.verdict, again.codes()) == (reports[name].ok, reports[name].verdict, reports[name].codes())


def test_non_finite_numbers_travel_as_strings_and_come_back(reports):
    data = reports["log1pexp"].to_dict()
    autodiff = [e["autodiff"] for e in data["numerics"]["worst"] if e["index"] == [2] and e["output_index"] == [2]]
    assert autodiff == ["NaN"]
    element = next(e for e in Report.from_dict(data).numerics.worst if e.index == (2,) and e.output_index == (2,))
    assert np.isnan(element.autodiff)


def test_a_newer_major_version_is_refused(reports):
    data = reports["unreduced_bias"].to_dict()
    with pytest.raises(ValueError, match="not readable"):
        Report.from_dict({**data, "version": "2.0"})


def test_text_rendering_reads_well(reports):
    text = render_text(reports["unreduced_bias"])
    assert text.startswith("add_bias(x, b) fails (1 error, 0 warnings) [tensorflow")
    assert "error   grad-shape (b;" in text and "MISMATCH: expected float32[3]" in text
    assert str(reports["unreduced_bias"]) == "add_bias(x, b): fail (grad-shape)"


def test_user_text_is_escaped_in_html():
    def sneaky(x):
        raise ValueError("<script>alert('x')</script> & <b>bold</b>")

    report = gradmagic.check(sneaky, tf.constant(1.0))
    html = render_html(report)
    assert "<script>" not in html and "<b>bold</b>" not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in html
    bundle, metadata = report_bundle(report)  # no kernel here: no widget
    assert set(bundle) == {MIME_TYPE, "text/plain", "text/html"} and bundle["text/html"] == html and not metadata
    assert MIME_TYPE == "application/vnd.gradmagic.report+json" and bundle[MIME_TYPE] == report_data(report)


def test_the_verdict_names_each_backend_and_never_passes_over_one_not_checked():
    from gradmagic.render import headline

    report = report_fixtures.reports()["keras_backends"]
    assert headline(report) == "fails on PyTorch; passes on TensorFlow, JAX"
    unchecked = dataclasses.replace(
        report,
        problems=(),
        backends=tuple(
            b if b.backend == "tensorflow" else dataclasses.replace(b, verdict="unavailable", problems=())
            for b in report.backends
        ),
    )
    assert unchecked.verdict == "pass"
    assert headline(unchecked) == "passes on TensorFlow; not checked on JAX, PyTorch"
    assert render_text(unchecked).startswith("keras_log1pexp(x) passes on TensorFlow; not checked on JAX, PyTorch")
    assert "passes on TensorFlow; not checked on JAX, PyTorch" in render_html(unchecked)


#: A count of one with its noun in the plural: "1 elements", "1 backward ops", "1 of its 1 calls".
ONE_PLURAL = re.compile(
    r"(?<![\d.,])1 (?:(?:forward|backward|random|saved|gradient|custom-gradient) )?"
    r"(?:element|op|call|point|direction|error|warning|tensor|entrie)s\b"
)


def test_every_count_of_one_is_singular_in_text_and_html(reports):
    from gradmagic.render import counted

    assert [counted(1, "element"), counted(4096, "element"), counted(1, "entry", "entries")] == [
        "1 element",
        "4,096 elements",
        "1 entry",
    ]
    for name, report in reports.items():
        shown = render_text(report) + re.sub(r"<[^>]+>", " ", render_html(report))
        assert not ONE_PLURAL.search(shown), (name, ONE_PLURAL.search(shown))
    from gradmagic.render import key_figures
    from gradmagic.render.graph import graph_summary

    scalar = gradmagic.check(tf.custom_gradient(lambda x: (tf.sin(x), lambda dy: dy * 2.0)), tf.constant(1.0))
    assert key_figures(scalar).startswith("full mode · 1 element in float64 ·")
    assert "1 forward and 1 backward op;" in graph_summary(scalar.graph), graph_summary(scalar.graph)


def test_a_wrong_element_never_reads_like_the_right_one_in_the_worst_elements_table():
    from gradmagic.render import comparison_cells, shown_elements

    @tf.custom_gradient
    def soft_root(x):  # off by a relative 1e-4 to 5e-4: `0.25 | 0.25` at 4 significant digits
        def grad(upstream):
            return upstream * 0.5 / tf.sqrt(x + 1e-3)

        return tf.sqrt(x), grad

    report = gradmagic.check(soft_root, tf.constant([[0.5, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]))
    rows = [comparison_cells(element) for element in shown_elements(report.numerics)]
    assert rows and report.verdict == "fail"
    for custom, numerical, _autodiff, _error in rows:
        assert custom != numerical, rows
    html = render_html(report)
    assert all(f">{custom}<" in html and f">{numerical}<" in html for custom, numerical, _, _ in rows)


def test_the_static_html_shows_every_word_the_lab_view_reads(reports):
    """The words are made once (`report_words`): the static HTML is written with the very words the data carries to
    the JupyterLab view and the live widget."""
    from html import unescape

    from gradmagic.render import HEADLINE_INFOS
    from gradmagic.render.words import report_words

    for name, report in reports.items():
        words = report_words(report)
        shown = unescape(render_html(report))
        # Every problem's place, but the info said under the verdict (`words.fixes`: its message names the place).
        places = [
            place
            for problem, place in zip(report.problems, words.places)
            if place and not (words.fixes and problem.code in HEADLINE_INFOS)
        ]
        expected = [words.verdict.upper(), words.figures, words.numerics, *places]
        expected += [word for word in (words.checked_at, words.fixes) if word]
        expected += [word for word in (words.surrogate, words.kinks, words.timings) if word]
        expected += [words.sweep or words.no_sweep, words.graph or words.no_graph]
        expected += [cell for row in words.worst for cell in row.cells] + [words.worst_title] * bool(words.worst)
        expected += [cell for row in words.shapes + words.backends for cell in row if cell]
        expected += [words.headline] if report.backends else []
        missing = [word for word in expected if word not in shown]
        assert not missing, (name, missing)
        assert report_data(report)["words"]["figures"] == words.figures


def test_a_declared_surrogate_that_matches_the_derivative_names_no_pattern(reports):
    from gradmagic.render.words import report_words
    from gradmagic.report import Surrogate

    report = dataclasses.replace(reports["log1pexp"], surrogate=Surrogate(declared=True))
    line = "Declared surrogate gradient: its difference from the true derivative informs, it does not fail."
    assert report_words(report).surrogate == line and line in render_html(report)
