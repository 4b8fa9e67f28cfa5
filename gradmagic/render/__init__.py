"""Renderers: a Report to text, sanitiser-safe HTML with SVG figures, and its live widget. They read; they never
check.

The words the views share are made here, once: `words.report_words` puts them together, the static HTML is written
with them, and the JupyterLab view and the live widget (`labextension/src/reportview.ts`) show them as the report's
data carries them (`words.report_data`), never wording them again.
"""

import math
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from gradmagic.report import Report, Resolution, element_label

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


def counted(count: int, word: str, plural: str | None = None) -> str:
    """`1 element`, `3 elements`, `4,096 elements`: a count and its noun, singular for exactly one (the views' words
    for counts; `counted` in `labextension/src/schema.ts` says the same)."""
    return f"{count:,} {word if count == 1 else plural or word + 's'}"


#: The order backends' verdicts are named in a headline: what fails first.
HEADLINE_ORDER = ("fail", "warn", "surrogate", "pass", "unchecked", "unavailable")


def headline(report: Report) -> str:
    """The verdict in words, with each Keras backend it was checked on: `passes`, or `passes on TensorFlow; not
    checked on JAX, PyTorch`, never a bare "passes" over backends that were not checked."""
    if not report.backends:
        return VERDICT_WORDS[report.verdict]
    merged: dict[str, list[str]] = {}
    for verdict in HEADLINE_ORDER:
        names = [BACKEND_NAMES.get(r.backend, r.backend) for r in report.backends if r.verdict == verdict]
        if names:
            merged.setdefault(VERDICT_WORDS[verdict], []).extend(names)
    return "; ".join(f"{words} on {', '.join(names)}" for words, names in merged.items())


def format_number(value, digits: int = 4) -> str:
    """A number for display, as the JupyterLab view writes it: `digits` significant digits (4 by default), or
    `digits - 2` decimals and an exponent out of [1e-3, 1e5); `nan`, `inf`, `-inf`; `—` for none."""
    if value is None:
        return "—"
    value = float(value)
    if not math.isfinite(value):
        return "nan" if value != value else ("inf" if value > 0 else "-inf")
    sign = "-" if value < 0 else ""
    exact = Decimal(abs(value))  # JavaScript rounds the exact value half up (Python's format rounds half even)
    if value == 0 or 1e-3 <= abs(value) < 1e5:
        rounded_digits = exact.quantize(Decimal(1).scaleb(exact.adjusted() - (digits - 1)), rounding=ROUND_HALF_UP)
        rounded = float(rounded_digits)
        text = str(int(rounded)) if rounded == int(rounded) else repr(rounded)
        return sign + text if rounded else "0"
    quantum = Decimal(1).scaleb(-(digits - 2))
    mantissa = exact.scaleb(-exact.adjusted()).quantize(quantum, rounding=ROUND_HALF_UP)
    exponent = exact.adjusted() + (1 if mantissa >= 10 else 0)
    if mantissa >= 10:
        mantissa = (mantissa / 10).quantize(quantum, rounding=ROUND_HALF_UP)
    return f"{sign}{mantissa}e{exponent:+d}"


#: The most significant digits a table shows to tell two values apart.
MOST_DIGITS = 10


def digits_to_tell(first, second) -> int:
    """The significant digits (4 at least, MOST_DIGITS at most) at which `first` and `second` read differently, so
    that a wrong element's custom gradient and finite differences never print alike (`0.25 | 0.25`); 4 when they
    are equal or one is not a finite number. `digitsToTell` in `labextension/src/schema.ts` says the same."""
    if first is None or second is None or not (math.isfinite(first) and math.isfinite(second)) or first == second:
        return 4
    for digits in range(4, MOST_DIGITS + 1):
        if format_number(first, digits) != format_number(second, digits):
            return digits
    return MOST_DIGITS


def is_beyond(element) -> bool:
    """Whether a listed element is beyond the tolerance (or its error is not a finite number)."""
    return element.error is not None and not element.error <= 1


def element_name(element) -> str:
    """`x[2]`, or `d output[2] / d x[2]` where the element has an output: the first cell of the elements' table."""
    label = element_label(element.input, element.index)
    if element.output is None:
        return label
    return f"d {element_label(element.output, element.output_index)} / d {label}"


def comparison_cells(element) -> list[str]:
    """A worst element's custom gradient, finite differences and autodiff, and its error of the tolerance: the cells
    of the table every view shows. An element beyond the tolerance shows the digits that tell the first two apart;
    one within it, 4 (the digits beyond are noise)."""
    digits = digits_to_tell(element.custom, element.numerical) if is_beyond(element) else 4
    values = (element.custom, element.numerical, element.autodiff)
    return [format_number(value, digits) for value in values] + [format_number(element.error)]


def key_figures(report: Report) -> str:
    """The key figures after the verdict: `full mode · 3 elements in float64 · worst error 0.021 of tolerance · sees
    0.001 % off · 24 ms` (a whole gradient that far off fails, in every input: `numerics.resolution`)."""
    numerics = report.numerics
    if numerics.mode == "skipped":
        parts = [f"numbers not compared: {numerics.skipped_because or 'no reason given'}"]
    else:
        parts = [f"{numerics.mode} mode", f"{counted(numerics.elements, 'element')} in {numerics.dtype}"]
        if numerics.max_error is not None:
            parts.append(f"worst error {format_number(numerics.max_error)} of tolerance")
        if numerics.mode == "projection":
            parts.append(counted(numerics.probes, "random direction"))
        resolved = [entry.relative for entry in numerics.resolution.inputs] if numerics.resolution else []
        if resolved and None not in resolved:  # the coarsest input's: what every input's gradient was seen to
            parts.append(f"sees {percent(max(resolved))} off")
    parts.append(f"{report.timings.get('total', 0) * 1e3:.0f} ms")
    return " · ".join(parts)


def worst_title(report: Report) -> str:
    """The title of the elements' table: the worst (full mode) or the located ones (projection mode)."""
    if report.numerics.mode == "full":
        return "Worst elements"
    return "Located elements (custom Jᵀu against finite differences)"


def kinks_line(report: Report) -> str | None:
    """Where the check found the forward not differentiable, left out of the comparison; None where nowhere."""
    kinks = [p for p in report.problems if p.code == "nondifferentiable-point" and p.location is not None]
    if not kinks:
        return None
    return f"Not differentiable at {', '.join(where(p.location) for p in kinks)}: left out of the comparison."


def numerics_summary(report: Report) -> str:
    """How the finite differences ran and what they found, in a sentence."""
    numerics = report.numerics
    if numerics.mode == "skipped":
        return f"Finite differences were not compared: {numerics.skipped_because or 'no reason given'}."
    detail = f"{counted(numerics.elements, 'element')} in {numerics.dtype}"
    if numerics.max_error is not None:
        detail += f", worst error {format_number(numerics.max_error)} of the tolerance"
    if numerics.mode == "projection":
        detail += (
            f", {counted(numerics.probes, 'random direction')}, measured noise floor "
            f"{format_number(numerics.noise_floor)}"
        )
    elif numerics.rtol is not None:
        detail += (
            f"; tolerance rtol {format_number(numerics.rtol)}, atol {format_number(numerics.atol)}, "
            f"step {format_number(numerics.eps)} × max(|x|, 1)"
        )
    resolution = resolution_sentence(numerics.resolution)
    return f"Finite differences ({numerics.mode} mode): {detail}." + (f" {resolution}" if resolution else "")


def resolution_sentence(resolution: Resolution | None) -> str | None:
    """What the comparison could resolve, in a sentence: "It would have seen a gradient 0.0038 % off in x, 0.0042 %
    in w; in float32: `w` is a float32 variable." None without a resolution."""
    if resolution is None:
        return None
    seen = [(entry.input, percent(entry.relative)) for entry in resolution.inputs if entry.relative is not None]
    why = f"in {resolution.dtype} ({resolution.why})"
    if not seen:
        return f"Compared {why}."
    figures = {figure for _, figure in seen}
    if len(figures) == 1 and len(seen) > 1:
        where = f"{seen[0][1]} off in any of its inputs"
    else:
        where = ", ".join(f"{figure} {'off in' if k == 0 else 'in'} {name}" for k, (name, figure) in enumerate(seen))
    return f"It would have seen a whole gradient {where}; {why}."


def percent(relative: float) -> str:
    """A relative error as a percentage of two significant digits: "0.0038 %", "12 %"."""
    return f"{float(f'{relative * 100:.2g}'):g} %"


def no_sweep_reason(report: Report, live: bool = False) -> str:
    """Why a report has no sweep, in a sentence (`live`: said in the live view, where its Sweep button is)."""
    if report.numerics.mode != "full":
        return (
            "No sweep: the sweep is drawn in full mode (up to full_threshold elements); this op was checked in "
            "projection mode."
            if report.numerics.mode == "projection"
            else "No sweep: the finite differences were not compared."
        )
    if report.options.get("sweep") is not True:
        return (
            "The sweep is computed when asked: Sweep draws the output and its derivatives along one element."
            if live
            else "No sweep: it is computed when asked (the live report's Sweep, or sweep=True)."
        )
    for problem in report.problems:  # the checker says why it could not draw one
        if problem.code == "sweep-unavailable":
            return problem.message
    return (
        "No sweep: it needs a scalar input or an op element-wise in an input (output[i] depending on input[i] alone)."
    )


def no_graph_reason(report: Report) -> str:
    """Why a report has no gradient graph, in a sentence."""
    for problem in report.problems:
        if problem.code == "graph-unavailable":
            return problem.message
    if report.options.get("graph") is False:
        return "No gradient graph: it was left out (--no-graph, graph=False)."
    error = next((p for p in report.problems if p.severity == "error"), None)
    if error is not None:
        return f"No gradient graph: the check stopped at {error.code} before tracing it."
    return "No gradient graph: the op was not traced."


def sweep_summary(sweep) -> str:
    """`output[2] and its derivative along x[2] (the op is element-wise in it) from -2.475 to 2.175, 201 points; the
    other inputs at the example point.`"""
    kind = "the op is element-wise in it" if sweep.elementwise else "a scalar input"
    return (
        f"{element_label(sweep.output, tuple(sweep.output_index) or None)} and its derivative along "
        f"{element_label(sweep.input, tuple(sweep.index) or None)} ({kind}) from {format_number(sweep.points[0])} "
        f"to {format_number(sweep.points[-1])}, {counted(len(sweep.points), 'point')}; the other inputs at the example "
        "point."
    )


#: Elements the table lists when none is beyond the tolerance.
LISTED_WHEN_PASSING = 3


def shown_elements(numerics) -> list:
    """The elements the table lists: those beyond the tolerance, or when none is, the first few (the closest calls);
    the entries of structural zeros a full Jacobian ranks after them say nothing."""
    beyond = [e for e in numerics.worst if is_beyond(e)]
    return beyond or list(numerics.worst[:LISTED_WHEN_PASSING])


def framework_label(op) -> str:
    """`Keras 3 on JAX (keras 3.15.1, jax 0.10.2)` or `tensorflow 2.21.0`: what ran the op."""
    if op.backend:
        return f"Keras 3 on {BACKEND_NAMES.get(op.backend, op.backend)} ({op.framework_version})"
    return f"{op.framework} {op.framework_version}"


def backend_rows(report) -> list[tuple[str, str, str, str, str]]:
    """The portability table: backend, verdict, problem codes (or why not checked), versions, time."""
    rows = []
    for result in report.backends:
        here = " (this kernel)" if result.backend == report.op.backend else ""
        codes = ", ".join(dict.fromkeys(p.code for p in result.problems if p.severity != "info"))
        detail = (result.note or "") if result.verdict == "unavailable" else codes or "no problem"
        rows.append(
            (
                BACKEND_NAMES.get(result.backend, result.backend) + here,
                VERDICT_WORDS[result.verdict],
                detail,
                result.version or "",
                seconds(result.seconds),
            )
        )
    return rows


def seconds(value: float) -> str:
    """`269 ms`, `1.4 s`."""
    return f"{value:.1f} s" if value >= 1 else f"{value * 1e3:.0f} ms"


def format_shape(shape) -> str:
    """`[2, 3]`, `[?, 3]` for a dimension not known, `scalar` for rank 0."""
    return f"[{', '.join('?' if d is None else str(d) for d in shape)}]" if shape else "scalar"


#: Infos a view shows under the verdict (`fixes_line`) rather than among the folded notes.
HEADLINE_INFOS = ("autodiff-nonfinite",)


def fixes_line(report: Report) -> str | None:
    """What the custom gradient fixes (the point of writing one): where the framework's own gradient is NaN/Inf and
    the custom one finite; None where it fixes nothing the check saw."""
    return next((problem.message for problem in report.problems if problem.code in HEADLINE_INFOS), None)


def checked_line(report: Report) -> str | None:
    """What the check ran at, in a sentence: each input (its expression, dtype, shape and range), where the inputs
    came from ("by Re-check, not the cell's --check"), and the options given and how. None for data saved before
    schema 1.9 (no inputs recorded)."""
    if not report.inputs:
        return None
    described = []
    for entry in report.inputs:
        kind = "None" if entry.shape is None else f"{entry.dtype} {format_shape(entry.shape)}"
        if entry.minimum is not None and entry.maximum is not None:
            same = entry.minimum == entry.maximum
            values = (
                format_number(entry.minimum)
                if same
                else f"{format_number(entry.minimum)} to {format_number(entry.maximum)}"
            )
            kind += f", {'every value ' if same and entry.shape else ''}{values}"
        named = f"{entry.name}={entry.expression}" if entry.expression else entry.name
        described.append(f"{named} ({kind})")
    said = f"Checked at {'; '.join(described)}"
    if report.inputs_from:
        said += f" {'by' if report.inputs_from.startswith('Re-check') else 'from'} {report.inputs_from}"
    sources = report.options.get("sources") or {}
    options = report.options
    given = [
        f"{name}={option_value(options.get(name))}" + (f" ({label})" if label != name else "")
        for name, label in sources.items()
        if name in options
    ]
    return said + (f"; options given: {', '.join(given)}." if given else ".")


def option_value(value: Any) -> str:
    """An option's value as the report says it, the same read back from JSON: a tuple as a list."""
    if isinstance(value, (list, tuple)):
        return f"[{', '.join(option_value(item) for item in value)}]"
    return repr(value)


def shape_row(row) -> tuple[str, str, str, str, str]:
    """A row of the shapes table: role, name, dtype and shape, the expected ones, and whether they match."""
    shape = "None" if row.shape is None else f"{row.dtype} {format_shape(row.shape)}"
    expected = "" if row.expected_shape is None else f"{row.expected_dtype} {format_shape(row.expected_shape)}"
    mark = ("✓" if row.matches else "✗ mismatch") if expected else ""
    return row.role, row.name, shape, expected, mark


#: The phases of a check whose times the report's last line gives.
TIMED_PHASES = ("structure", "graph", "tf_function", "numerics", "backends")


def timings_line(report: Report) -> str | None:
    """`tensorflow 2.21.0, eager: structure 3 ms · graph 17 ms · numerics 4 ms`; None where no phase was timed."""
    phases = [phase for phase in TIMED_PHASES if phase in report.timings]
    if not phases:
        return None
    text = " · ".join(f"{phase.replace('_', '.')} {report.timings[phase] * 1e3:.0f} ms" for phase in phases)
    return f"{framework_label(report.op)}, {report.op.mode}: {text}"


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
