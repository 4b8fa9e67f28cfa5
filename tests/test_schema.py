"""The Report's data model, written once: the JSON Schemas and the extension's TypeScript types are what the
dataclasses of gradmagic/report.py make now, every report validates and reads back, and reports saved by older
versions still read."""

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import report_fixtures

from gradmagic.render.html import render_html
from gradmagic.render.words import report_data, report_words, watch_data
from gradmagic.report import (
    SCHEMA_VERSION,
    WATCH_SCHEMA_VERSION,
    Location,
    Report,
    WatchReport,
    json_data,
    schema,
    watch_schema,
)
from gradmagic.schema import COMMAND, ROOTS, TYPESCRIPT, files, json_schema, stale

SAVED = Path(__file__).resolve().parent / "saved_reports"


def test_the_shipped_schemas_and_typescript_types_are_what_the_dataclasses_make():
    changed = stale()
    assert not changed, (
        f"{', '.join(str(path) for path in changed)} differ from what gradmagic/report.py's dataclasses make: "
        f"run `{COMMAND}` and commit the files it writes"
    )
    assert TYPESCRIPT in files() and len(files()) == 3


def test_the_check_command_says_what_is_stale_and_fails(tmp_path):
    done = subprocess.run([sys.executable, "-m", "gradmagic.schema", "--check"], capture_output=True, text=True)
    assert done.returncode == 0 and not done.stderr, done.stderr
    typescript = TYPESCRIPT.read_text()
    try:
        TYPESCRIPT.write_text(typescript.replace("export interface IReport {", "export interface IReport {\n  x: 1;"))
        done = subprocess.run([sys.executable, "-m", "gradmagic.schema", "--check"], capture_output=True, text=True)
    finally:
        TYPESCRIPT.write_text(typescript)
    assert done.returncode == 1 and "schema.ts differs" in done.stderr and COMMAND in done.stderr


def test_the_schema_carries_the_dataclasses_types_and_their_comments_as_descriptions():
    made = schema()
    assert made == json_schema(ROOTS[0])
    location = made["$defs"]["Location"]
    assert location["properties"]["line"]["description"] == (
        "Line in the user's cell (the magic line is line 1) or file."
    )
    assert set(location["required"]) == {field.name for field in dataclasses.fields(Location)}
    assert made["$defs"]["Verdict"] == {
        "enum": ["pass", "warn", "surrogate", "unchecked", "fail"],
        "description": made["$defs"]["Verdict"]["description"],
    }
    assert "Added in 1.5." in made["$defs"]["Graph"]["properties"]["layout"]["description"]
    assert "layout" not in made["$defs"]["Graph"]["required"]  # older reports lack it
    assert made["properties"]["words"]["$ref"] == "#/$defs/ReportWords" and "words" not in made["required"]
    assert made["$defs"]["AnyFloat"]["oneOf"][1] == {"enum": ["NaN", "Infinity", "-Infinity"]}
    assert made["$defs"]["GraphScope"]["properties"]["members"]["minItems"] == 2


def test_every_fixture_validates_and_reads_back_with_its_words():
    for fixture, report in report_fixtures.reports().items():
        data = json.loads(json.dumps(report_data(report), allow_nan=False))  # strict JSON, as the views get it
        jsonschema.validate(data, schema())
        assert data["version"] == SCHEMA_VERSION and data["words"] == json_data(report_words(report)), fixture
        again = Report.from_dict(data)
        assert report_data(again) == data, fixture
        assert (again.verdict, again.codes()) == (report.verdict, report.codes()), fixture


def test_a_watch_validates_and_reads_back_with_each_reports_words():
    from test_labextension import watch_fixture

    watch = watch_fixture()
    data = json.loads(json.dumps(watch_data(watch), allow_nan=False))
    jsonschema.validate(data, watch_schema())
    assert data["version"] == WATCH_SCHEMA_VERSION
    assert all(entry["report"]["words"]["verdict"] for entry in data["watched"])
    again = WatchReport.from_dict(data)
    assert watch_data(again) == data


@pytest.mark.parametrize("name", ["unreduced_bias-1.7.json", "straight_through-1.7.json"])
def test_a_report_saved_by_schema_1_7_validates_reads_and_renders(name):
    data = json.loads((SAVED / name).read_text())
    assert data["version"] == "1.7" and "words" not in data
    jsonschema.validate(data, schema())
    report = Report.from_dict(data)
    # Read again, it is current data: the fields added since 1.7 take their defaults.
    added = {"numerics": {**data["numerics"], "resolution": None}, "inputs": [], "inputs_from": None}
    assert report.to_dict() == {**data, "version": SCHEMA_VERSION, **added}
    words = report_words(report)
    assert words.verdict in render_html(report).lower() and words.figures.split(" · ")[0] in render_html(report)


def test_a_watch_saved_by_schema_1_0_validates_and_reads():
    data = json.loads((SAVED / "watch-1.0.json").read_text())
    jsonschema.validate(data, watch_schema())
    watch = WatchReport.from_dict(data)
    assert [op.name for op in watch.watched] == ["fine", "doubled", "row_norm"]
    assert watch.to_dict()["watched"][1]["report"]["problems"] == data["watched"][1]["report"]["problems"]


def test_reading_ignores_fields_a_newer_minor_version_adds_and_refuses_a_newer_major_one():
    data = report_data(report_fixtures.reports()["unreduced_bias"])
    newer = {**data, "version": "1.99", "future": {"x": 1}, "op": {**data["op"], "later": True}}
    assert Report.from_dict(newer) == Report.from_dict(data)
    with pytest.raises(ValueError, match="report version '2.0' is not readable by schema 1"):
        Report.from_dict({**data, "version": "2.0"})


def test_every_float_the_schema_allows_non_finite_travels_as_a_string_and_comes_back():
    report = report_fixtures.reports()["log1pexp"]
    numerics = dataclasses.replace(report.numerics, max_error=math.inf, noise_floor=-math.inf)
    data = json.loads(json.dumps(dataclasses.replace(report, numerics=numerics).to_dict(), allow_nan=False))
    assert (data["numerics"]["max_error"], data["numerics"]["noise_floor"]) == ("Infinity", "-Infinity")
    jsonschema.validate(data, schema())
    again = Report.from_dict(data).numerics
    assert (again.max_error, again.noise_floor) == (math.inf, -math.inf)
