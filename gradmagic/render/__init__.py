"""Renderers: a Report to text, sanitiser-safe HTML, PNG figures and an ipywidgets view. They read; they never check."""

from gradmagic.report import element_label

#: A check running longer than this (seconds) shows a progress bar.
PROGRESS_AFTER = 0.5
VERDICT_WORDS = {"pass": "passes", "warn": "passes with warnings", "fail": "fails"}
#: Colours of verdicts and severities (GitHub's palette: readable on light and dark backgrounds).
COLOURS = {
    "pass": "#1a7f37",
    "warn": "#9a6700",
    "fail": "#cf222e",
    "error": "#cf222e",
    "warning": "#9a6700",
    "info": "#0969da",
}


def where(location, op_filename: str | None = None) -> str:
    """`Cell In[3], line 4` / `x[2]` / `output[0]` from a problem's location, or ''."""
    if location is None:
        return ""
    parts = []
    if location.input:
        parts.append(element_label(location.input, location.index))
    elif location.variable:
        parts.append(f"variable {element_label(location.variable, location.index)}")
    if location.output:
        parts.append(element_label(location.output, location.output_index))
    if location.line is not None:
        source = location.filename or op_filename
        parts.append(f"{source}, line {location.line}" if source else f"line {location.line}")
    return "; ".join(parts)
