"""Renderers: a Report to text (terminals, assertions) and to sanitiser-safe HTML. They read; they never check."""

VERDICT_WORDS = {"pass": "passes", "warn": "passes with warnings", "fail": "fails"}


def where(location, op_filename: str | None = None) -> str:
    """`Cell In[3], line 4` / `x[2]` / `output[0]` from a problem's location, or ''."""
    if location is None:
        return ""
    parts = []
    if location.input:
        parts.append(f"{location.input}{list(location.index) if location.index is not None else ''}")
    elif location.variable:
        parts.append(f"variable {location.variable}{list(location.index) if location.index is not None else ''}")
    if location.output:
        parts.append(f"{location.output}{list(location.output_index) if location.output_index is not None else ''}")
    if location.line is not None:
        source = location.filename or op_filename
        parts.append(f"{source}, line {location.line}" if source else f"line {location.line}")
    return "; ".join(parts)
