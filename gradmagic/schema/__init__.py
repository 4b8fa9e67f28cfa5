"""The Report's JSON Schemas and the JupyterLab extension's TypeScript types, made from the dataclasses of
`gradmagic/report.py`, the data model's one source.

    python -m gradmagic.schema           writes gradmagic/schema/*.schema.json and labextension/src/schema.ts
    python -m gradmagic.schema --check   exits with 1, naming them, when a file differs from what it would write

A dataclass is a JSON object: its fields (and the properties it names in `DERIVED`) are its properties, required
unless `added_in` a minor version (a derived property: named in `DERIVED_ADDED`), typed by their hints
(`Annotated[..., JsonSchema(...)]` adds keywords), described by its docstring and the fields' comments. A public
alias of `report.py` (`Verdict`, `Shape`, `AnyFloat`) is a named definition. `tests/test_schema.py` fails when a
shipped file differs from what this makes now.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import io
import json
import textwrap
import tokenize
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from gradmagic import report
from gradmagic.report import JsonSchema, Report, WatchReport, type_hints

#: Where the schemas are written, and where the extension's types are (in a source checkout).
SCHEMA_FOLDER = Path(__file__).resolve().parent
TYPESCRIPT = SCHEMA_FOLDER.parents[1] / "labextension" / "src" / "schema.ts"
COMMAND = "python -m gradmagic.schema"
DRAFT = "https://json-schema.org/draft/2020-12/schema"
NON_FINITE = 'Non-finite numbers are written as the strings "NaN", "Infinity" and "-Infinity".'


@dataclass(frozen=True)
class Root:
    """A schema of its own: the dataclass at its root, its file, title and version constant, and what it adds."""

    cls: type
    file: str
    title: str
    version: str  # the name of its version constant in report.py, whose comment says what each minor version added
    mime_type: str  # the name of its MIME type constant in report.py
    note: str = ""


ROOTS = (
    Root(Report, "report.schema.json", "gradmagic Report", "SCHEMA_VERSION", "MIME_TYPE"),
    Root(
        WatchReport,
        "watch.schema.json",
        "gradmagic WatchReport",
        "WATCH_SCHEMA_VERSION",
        "WATCH_MIME_TYPE",
        "Each op's report follows the Report's schema (urn:gradmagic:schema:report, bundled under $defs.report by "
        "gradmagic.report.watch_schema()).",
    ),
)


def _sentence(text: str) -> str:
    """`text` on one line, begun with a capital and ended with a full stop."""
    text = " ".join(inspect.cleandoc(text).split())
    if not text:
        return text
    return text[0].upper() + text[1:] + ("" if text[-1] in ".?!" else ".")


@functools.cache
def comments() -> dict[tuple[str | None, str], str]:
    """What `report.py` says of each name in comments, by (class or None, name): the `#:` lines above its statement
    and the `#` comment after it."""
    source = inspect.getsource(report)
    lines = source.splitlines()
    said: dict[int, tuple[str, bool]] = {}  # line: (comment, alone on its line)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            said[token.start[0]] = (token.string, not lines[token.start[0] - 1][: token.start[1]].strip())

    def of(node: ast.stmt) -> str:
        above, line = [], node.lineno - 1
        while line in said and said[line][1] and said[line][0].startswith("#:"):
            above.insert(0, said[line][0][2:].strip())
            line -= 1
        after = [
            said[line][0].lstrip("#").strip()
            for line in range(node.lineno, node.end_lineno + 1)
            if line in said and not said[line][1]
        ]
        return " ".join(above + after)

    found: dict[tuple[str | None, str], str] = {}
    for node in ast.parse(source).body:
        body = node.body if isinstance(node, ast.ClassDef) else [node]
        for statement in body:
            target = getattr(statement, "target", None) or next(iter(getattr(statement, "targets", [])), None)
            if isinstance(target, ast.Name) and of(statement):
                found[(node.name if isinstance(node, ast.ClassDef) else None, target.id)] = _sentence(of(statement))
    return found


@functools.cache
def aliases() -> dict[str, Any]:
    """The public type aliases of `report.py`, by name: each a named definition of the schemas."""
    return {
        name: value
        for name, value in vars(report).items()
        if name[0].isupper() and typing.get_origin(value) is not None
    }


class _Schema:
    """One schema's definitions, filled as types are met; classes and aliases that belong to `outside` (another
    schema, by its id) are referred to there."""

    def __init__(self, outside: tuple[str, set[str]] | None = None):
        self.defs: dict[str, Any] = {}
        self.outside = outside

    def ref(self, name: str, make) -> dict[str, Any]:
        if self.outside is not None and name in self.outside[1]:
            return {"$ref": f"{self.outside[0]}#/$defs/{name}"}
        if name not in self.defs:
            self.defs[name] = None  # taken, while it is made (a class may refer to itself)
            self.defs[name] = make()
        return {"$ref": f"#/$defs/{name}"}

    def of(self, hint: Any, named: bool = True) -> dict[str, Any]:
        """The schema of a type hint: a reference to its definition where it is one of the aliases (and `named`)."""
        for name, alias in aliases().items():
            if named and hint == alias:
                return self.ref(name, lambda: self.alias(name, alias))
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if hint is type(None):
            return {"type": "null"}
        if hint in _PRIMITIVES:
            return {"type": _PRIMITIVES[hint]}
        if hint is Any:
            return {}
        if origin is Literal:
            return {"enum": list(args)}
        if origin is Annotated:
            keywords = next(meta for meta in hint.__metadata__ if isinstance(meta, JsonSchema))
            return dict(keywords) if "oneOf" in keywords else {**self.of(args[0]), **keywords}
        if origin in (typing.Union, types.UnionType):
            return self.union([self.of(arg) for arg in args])
        if origin in (tuple, list) and (origin is list or args[-1] is Ellipsis):
            return {"type": "array", "items": self.of(args[0])}
        if origin is tuple:
            items = [self.of(arg) for arg in args]
            if any(item != items[0] for item in items):
                return {"type": "array", "prefixItems": items, "items": False}
            return {"type": "array", "items": items[0], "minItems": len(items), "maxItems": len(items)}
        if origin is dict:
            return (
                {"type": "object"} if args[1] is Any else {"type": "object", "additionalProperties": self.of(args[1])}
            )
        if dataclasses.is_dataclass(hint):
            if hint is Report and self.outside is not None:
                return {"$ref": self.outside[0]}
            return self.ref(hint.__name__, lambda: self.object(hint))
        raise TypeError(f"report.py: no JSON Schema for the type {hint!r}")

    @staticmethod
    def union(options: list[dict[str, Any]]) -> dict[str, Any]:
        """`A | None` as one type of several (`"type": ["string", "null"]`) where A is a plain type, else `oneOf`."""
        plain = [option for option in options if set(option) <= {"type", "minimum"}]
        if len(plain) == len(options) and all(isinstance(option["type"], str) for option in options):
            merged: dict[str, Any] = {}
            for option in options:
                merged.update(option)
            return {**merged, "type": [option["type"] for option in options]}
        return {"oneOf": options}

    def alias(self, name: str, alias: Any) -> dict[str, Any]:
        made = self.of(alias, named=False)
        said = comments().get((None, name))
        return {**made, "description": said} if said else made

    def object(self, cls: type) -> dict[str, Any]:
        """A dataclass as a JSON object: its `DERIVED` properties, then its fields."""
        hints = type_hints(cls)
        properties: dict[str, Any] = {}
        required: list[str] = []
        for name in getattr(cls, "DERIVED", ()):
            said = _sentence(getattr(cls, name).__doc__ or "")
            added = getattr(cls, "DERIVED_ADDED", {}).get(name)
            if added:
                said = f"{said.rstrip('.')}. Added in {added}."
            properties[name] = self.described(self.of(hints[name]), said)
            if not added:
                required.append(name)
        for item in dataclasses.fields(cls):
            added = item.metadata.get("added in")
            said = comments().get((cls.__name__, item.name), "")
            if added:
                said = f"{said.rstrip('.')}{'. ' if said else ''}Added in {added}."
            properties[item.name] = self.described(self.of(hints[item.name]), said)
            if not added:
                required.append(item.name)
        made: dict[str, Any] = {"type": "object"}
        if cls.__doc__ and not cls.__doc__.startswith(f"{cls.__name__}("):  # not dataclass's own signature
            made["description"] = _sentence(cls.__doc__)
        return {**made, "required": required, "properties": properties}

    @staticmethod
    def described(schema: dict[str, Any], description: str) -> dict[str, Any]:
        return {**schema, "description": description} if description else schema


_PRIMITIVES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def json_schema(root: Root) -> dict[str, Any]:
    """The JSON Schema of `root`'s data."""
    outside = None
    if root.cls is not Report:
        report_schema = json_schema(ROOTS[0])
        outside = (Report.ID, set(report_schema["$defs"]))
    made = _Schema(outside)
    header = {
        "$schema": {"const": root.cls.ID},
        "version": {"type": "string", "pattern": rf"^{root.cls.VERSION.split('.')[0]}\.[0-9]+$"},
    }
    body = made.object(root.cls)
    words, added = root.cls.WORDS
    body["properties"]["words"] = made.described(
        made.of(words),
        f"The words every view shows, worded once in Python (gradmagic.render.words); absent from data `to_dict()` "
        f"wrote, and from data saved before {added}, where a view words what it can itself. Added in {added}.",
    )
    history = comments().get((None, root.version), "")
    description = " ".join(
        part
        for part in (
            body.pop("description", ""),
            root.note,
            f"Version {root.cls.VERSION}. {history}",
            "Minor versions only add fields: readers must ignore fields they do not know and check the major version.",
            NON_FINITE,
        )
        if part
    )
    return {
        "$schema": DRAFT,
        "$id": root.cls.ID,
        "title": root.title,
        "description": description,
        "type": "object",
        "required": ["$schema", "version", *body["required"]],
        "properties": {**header, **body["properties"]},
        "$defs": made.defs,
    }


def json_text(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


# The TypeScript types.


def _ts_name(name: str) -> str:
    """A definition's TypeScript name: `IProblem` for an object (the extension's naming rule), the alias's own."""
    return f"I{name}" if name[0].isupper() and name in _objects() else name


@functools.cache
def _objects() -> frozenset[str]:
    return frozenset(name for root in ROOTS for name, made in json_schema(root)["$defs"].items() if _is_object(made))


def _is_object(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "object" and "properties" in schema


def _ts_type(schema: dict[str, Any]) -> str:
    """The TypeScript type of a schema."""
    if "$ref" in schema:
        target = schema["$ref"]
        return "IReport" if "#" not in target else _ts_name(target.rsplit("/", 1)[1])
    if "const" in schema:
        return _ts_literal(schema["const"])
    if "enum" in schema:
        return " | ".join(_ts_literal(value) for value in schema["enum"])
    if "oneOf" in schema:
        return " | ".join(_ts_type(option) for option in schema["oneOf"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(_ts_type({**schema, "type": one}) for one in kind)
    if kind == "array":
        if "prefixItems" in schema:
            return f"[{', '.join(_ts_type(item) for item in schema['prefixItems'])}]"
        item = _ts_type(schema["items"])
        if schema.get("minItems") is not None and schema.get("minItems") == schema.get("maxItems"):
            return f"[{', '.join([item] * schema['minItems'])}]"
        return f"({item})[]" if " | " in item else f"{item}[]"
    if kind == "object":
        values = schema.get("additionalProperties")
        return f"Record<string, {_ts_type(values) if values else 'unknown'}>"
    return {"string": "string", "integer": "number", "number": "number", "boolean": "boolean", "null": "null"}.get(
        kind, "unknown"
    )


def _ts_literal(value: Any) -> str:
    return (
        "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"
        if isinstance(value, str)
        else json.dumps(value)
    )


def _ts_doc(text: str, indent: str) -> list[str]:
    if not text:
        return []
    text = text.replace("*/", "*\\/")
    lines = textwrap.wrap(text, 117 - len(indent), break_long_words=False, break_on_hyphens=False)
    if len(lines) == 1 and len(lines[0]) <= 111 - len(indent):
        return [f"{indent}/** {lines[0]} */"]
    return [f"{indent}/**", *(f"{indent} * {line}" for line in lines), f"{indent} */"]


def typescript() -> str:
    """`labextension/src/schema.ts`: the data's types, from the schemas, and the constants a reader checks."""
    out = [
        "/**",
        " * The types of the data gradmagic's kernel side sends the views: a Report, as `gradmagic.render.words."
        "report_data`",
        " * writes it (`Report.to_dict()` and its `words`), and a watch's report. GENERATED from the dataclasses of",
        f" * gradmagic/report.py through gradmagic/schema/*.schema.json by `{COMMAND}`: edit those, then run it.",
        " */",
        "",
    ]
    for root in ROOTS:
        name = root.cls.__name__
        out += _ts_doc(f"The MIME type under which a {name} travels from the kernel.", "")
        out.append(f"export const {root.mime_type} = {_ts_literal(getattr(report, root.mime_type))};")
        out += _ts_doc(f"The {name} schema's version this extension was built with; it reads its major version.", "")
        out.append(f"export const {root.version} = {_ts_literal(root.cls.VERSION)};")
        out.append("")
    seen: set[str] = set()
    for root in ROOTS:
        schema = json_schema(root)
        definitions = {**schema["$defs"], root.cls.__name__: schema}
        for name, made in definitions.items():
            if name in seen:
                continue
            seen.add(name)
            out += _ts_definition(name, made)
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def _ts_definition(name: str, schema: dict[str, Any]) -> list[str]:
    root = next((root.cls for root in ROOTS if root.cls.__name__ == name), None)
    doc = _ts_doc(_sentence(root.__doc__) if root else schema.get("description", ""), "")
    if not _is_object(schema):
        return doc + [f"export type {name} = {_ts_type(schema)};"]
    lines = doc + [f"export interface I{name} {{"]
    required = set(schema.get("required", ()))
    for key, value in schema["properties"].items():
        lines += _ts_doc(value.get("description", ""), "  ")
        lines.append(f"  {key}{'' if key in required else '?'}: {_ts_type(value)};")
    return lines + ["}"]


def files() -> dict[Path, str]:
    """Every file this makes, and its text."""
    made = {SCHEMA_FOLDER / root.file: json_text(json_schema(root)) for root in ROOTS}
    made[TYPESCRIPT] = typescript()
    return made


def stale() -> list[Path]:
    """The files that differ from what this makes now."""
    return [path for path, text in files().items() if not path.is_file() or path.read_text() != text]
