"""The documentation says what the code does: every option of each magic and of `gradmagic.check`, every `%config`
default, the schema versions, and the README's links."""

import dataclasses
import re
from pathlib import Path

import pytest

from gradmagic import report
from gradmagic.checking.options import CheckOptions
from gradmagic.magics import GradientMagics

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def flags_of(magic: str) -> set[str]:
    parser = getattr(GradientMagics, magic).parser
    return {flag for action in parser._actions for flag in action.option_strings if flag not in ("-h", "--help")}


def documented_flags(text: str) -> set[str]:
    """The `--flags` named inside code spans."""
    return {
        flag for span in re.findall(r"`([^`\n]+)`", text) for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", span)
    }


@pytest.mark.parametrize(
    "magic, page",
    [
        ("custom_gradient", "magics.md"),
        ("register_gradient", "magics.md"),
        ("gradcheck", "magics.md"),
        ("gradgraph", "magics.md"),
        ("gradwatch", "watch.md"),
    ],
)
def test_every_option_of_each_magic_is_documented(magic, page):
    missing = flags_of(magic) - documented_flags((DOCS / page).read_text())
    assert not missing, f"%{magic} options missing from docs/{page}: {sorted(missing)}"


def test_every_option_the_magics_documentation_names_exists():
    magics = ("custom_gradient", "register_gradient", "gradcheck", "gradgraph", "gradwatch")
    known = set().union(*(flags_of(magic) for magic in magics))
    for page in ("magics.md", "watch.md"):
        unknown = documented_flags((DOCS / page).read_text()) - known
        assert not unknown, f"docs/{page} names options no magic has: {sorted(unknown)}"


def test_the_config_defaults_listed_are_the_magics_configurable_traits():
    text = (DOCS / "magics.md").read_text()
    sentence = re.search(r"settable with `%config GradientMagics\.<name>`: (.*?)\.\n", text, re.S).group(1)
    listed = set(re.findall(r"`([a-z_]+)`", sentence))
    assert listed == set(GradientMagics.class_traits(config=True))


def test_every_option_of_check_is_in_the_options_table():
    text = (DOCS / "python-api.md").read_text()
    table = {
        name for row in re.findall(r"^\| (`[a-z0-9_`, ]+`) \|", text, re.M) for name in re.findall(r"`(\w+)`", row)
    }
    fields = {field.name for field in dataclasses.fields(CheckOptions)}
    assert table == fields, f"documented but not options: {table - fields}; options not documented: {fields - table}"


def test_the_schema_versions_documented_are_the_codes():
    assert f'"version": "{report.SCHEMA_VERSION}"' in (DOCS / "report.md").read_text()
    assert f"version {report.WATCH_SCHEMA_VERSION}" in (DOCS / "watch.md").read_text()


def test_the_readme_starts_with_the_two_commands_and_links_every_page_of_the_reference():
    readme = (ROOT / "README.md").read_text()
    first = re.search(r"```bash\n(.*?)```", readme, re.S).group(1).splitlines()
    assert [line.split("#")[0].strip() for line in first] == ["./dev demo", "./dev test"]
    linked = set(re.findall(r"\]\((docs/[\w./-]+\.md)", readme))
    assert all((ROOT / link).exists() for link in linked), linked
    assert {f"docs/{page.name}" for page in DOCS.glob("*.md")} <= linked


def test_links_between_the_pages_of_the_reference_resolve():
    for page in DOCS.glob("*.md"):
        for link in re.findall(r"\]\(([\w./-]+\.md)(?:#[\w-]+)?\)", page.read_text()):
            assert (DOCS / link).exists(), f"{page.name} links to {link}"
