"""Renderers: a Report to text, sanitiser-safe HTML, PNG figures and an ipywidgets view. They read; they never check."""

from gradmagic.report import element_label

#: A check running longer than this (seconds) shows a progress bar.
PROGRESS_AFTER = 0.5
VERDICT_WORDS = {
    "pass": "passes",
    "warn": "passes with warnings",
    "surrogate": "surrogate gradient (declared)",
    "unchecked": "not checked",
    "fail": "fails",
    "unavailable": "not checked",
}
#: Keras backends as users name them.
BACKEND_NAMES = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}
#: Colours of verdicts and severities (GitHub's palette: readable on light and dark backgrounds).
COLOURS = {
    "pass": "#1a7f37",
    "warn": "#9a6700",
    "surrogate": "#8250df",
    "unchecked": "#57606a",
    "fail": "#cf222e",
    "error": "#cf222e",
    "warning": "#9a6700",
    "info": "#0969da",
    "unavailable": "#57606a",
}


def framework_label(op) -> str:
    """`Keras 3 on JAX (keras 3.15.1, jax 0.10.2)` or `tensorflow 2.21.0`: what ran the op."""
    if op.backend:
        return f"Keras 3 on {BACKEND_NAMES.get(op.backend, op.backend)} ({op.framework_version})"
    return f"{op.framework} {op.framework_version}"


def backend_rows(report) -> list[tuple[str, str, str, str, str]]:
    """The portability table: backend, verdict, version, problem codes (or why not checked), seconds."""
    rows = []
    for result in report.backends:
        here = " (this kernel)" if result.backend == report.op.backend else ""
        codes = ", ".join(dict.fromkeys(p.code for p in result.problems if p.severity != "info")) or (
            result.note or "no problem"
        )
        seconds = f"{result.seconds:.1f} s" if result.seconds >= 1 else f"{result.seconds * 1e3:.0f} ms"
        rows.append(
            (
                BACKEND_NAMES.get(result.backend, result.backend) + here,
                result.verdict,
                result.version or "",
                codes if result.verdict != "unavailable" else result.note or "",
                seconds,
            )
        )
    return rows


def surrogate_line(report) -> str | None:
    """What the report says of a surrogate gradient: declared (and its pattern), or recognised in a failure."""
    surrogate = report.surrogate
    if surrogate is None:
        return None
    if surrogate.declared:
        if surrogate.pattern is None:
            return "Declared surrogate gradient: its difference from the true derivative informs, it does not fail."
        return f"Declared surrogate gradient ({surrogate.pattern}): {surrogate.reason}."
    return (
        f"Looks like an intended surrogate ({surrogate.pattern}): {surrogate.reason}. "
        "Declare it with --surrogate if so."
    )


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
