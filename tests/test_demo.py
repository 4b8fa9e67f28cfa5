"""demo.ipynb runs top to bottom in a fresh Jupyter kernel and shows what its text promises; the executed notebook
holds each report's data and static HTML (no widget: nbclient names no cell), and stays small."""

import html

import nbformat
from conftest import ROOT
from nbclient import NotebookClient

from gradmagic.report import WATCH_MIME_TYPE

REPORT = "application/vnd.gradmagic.report+json"


def test_demo_notebook_runs_and_shows_the_checks(tmp_path):
    notebook = nbformat.read(ROOT / "demo.ipynb", as_version=4)
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()

    def shown(cell) -> str:  # whitespace folded: the text report wraps its lines
        return " ".join(
            "".join(
                output.get("text", "") + output.get("data", {}).get("text/plain", "") for output in cell.outputs
            ).split()
        )

    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    outputs = [(cell.source.splitlines()[0], shown(cell)) for cell in code]
    assert not [o for cell in code for o in cell.outputs if o.output_type == "error"]
    assert not [text for _, text in outputs if "AutoGraph" in text]
    expected = [
        ("def naive_log1pexp(x):", ["numpy=nan"]),
        (
            "%%custom_gradient --sweep --check x=tf.constant([-5., 0., 100.])",
            [
                "log1pexp(x) passes with warnings",
                "autodiff gives nan, the custom gradient 1 and finite differences 1",
                "Checked at x=tf.constant([-5., 0., 100.]) (float32 [3], -5 to 100) from the cell's --check; "
                "options given: sweep=True (--sweep).",
            ],
        ),
        ("with tf.GradientTape() as tape:", ["numpy=1.0>"]),
        ("@tf.function(jit_compile=True)", ["1. ]"]),
        (
            "%%custom_gradient --check x=tf.constant(2.0) --check y=tf.constant(3.0)",
            ["return-structure", "`return (z, w), grad`"],
        ),
        (
            "%%custom_gradient --check x=tf.ones([2, 3]) --check b=tf.zeros([3])",
            ["grad-shape", "`tf.reduce_sum(grad, axis=[0])`"],
        ),
        (
            "%%custom_gradient --check x=tf.constant(2.0) --check y=tf.constant(3.0)",
            ["fd-mismatch", "dy is zero at y = 3 where the finite differences give 6: a term is missing"],
        ),
        (
            "%%custom_gradient non_diff_op(x) --check x=tf.constant([-1.0, 0.0, 1.0])",
            ["passes with warnings", "nondifferentiable-point (x[1])"],
        ),
        (
            "%gradgraph log1pexp x=tf.constant([-5., 0., 100.])",
            ["gradient graph: 3 forward and 4 backward ops; the backward keeps 12 B alive (1 saved tensor)"],
        ),
        (
            "%gradcheck log1pexp x=tf.random.stateless_normal([1_000_000], seed=[1, 2])",
            ["log1pexp(x) passes (0 errors, 0 warnings)", "(projection mode)"],
        ),
        ("%%custom_gradient --sweep --check x=tf.linspace(-2., 2., 5)", ["square(x) passes (0 errors, 0 warnings)"]),
        (
            "%%custom_gradient --check x=tf.constant([1., 2., 3.])",
            ["scaled_square(x) passes", "variable-gradient dscale float32[]"],
        ),
        (
            "%%custom_gradient --check x=tf.random.stateless_normal([1_000_000], seed=[1, 2])",
            ["softplus_one_wrong(x) fails", "fd-mismatch (x[123457]; Cell In["],
        ),
        ("import gradmagic", ["test_complex_op failed:", "complex_op(x, y) fails"]),
        (
            "%%custom_gradient --surrogate --sweep --check x=tf.constant([-1.7, -0.3, 0.2, 0.6, 1.4])",
            ["quantise(x) surrogate gradient (declared)", "surrogate-differs", "(straight-through estimator)"],
        ),
        (
            "%%custom_gradient --surrogate --check y=tf.constant([3., -4.])",
            ["clip_gradients(y) surrogate gradient (declared)", "(gradient clipping)"],
        ),
        (
            "%%custom_gradient --check x=tf.constant([0.5, -2.0, 3.0])",
            ["reverse_gradient(x) fails", "This looks like gradient reversal", "--surrogate"],
        ),
        (
            "%%register_gradient Sign --surrogate --check x=tf.constant([-1.5, -0.2, 0.4, 2.0])",
            ["Sign(x) surrogate gradient (declared)", "(straight-through estimator)", "registered as `STE` for Sign"],
        ),
        ("@tf.function", ["numpy=1.0>"]),  # the registered gradient, applied inside a tf.function
        (
            "%%register_gradient PyFunc --check x=tf.constant([1., 2., 3.])",
            ["py_square(x) fails", "dx is 0.5 times the finite differences at every element"],
        ),
        (
            "%gradcheck product a=tf.ones([2, 3]) b=tf.ones([3, 2])",
            ["override-unused", "no op of type Matmul was built under it", "(did you mean `MatMul`?)"],
        ),
        (
            "%%gradwatch",
            [
                "watch of 2 custom-gradient ops fails",
                "first non-finite gradient: row_norm",
                "from a finite upstream gradient",
                "dx is 1.5 times the finite differences",
                "2 (2 under XLA, 3 replayed uncompiled)",
            ],
        ),
    ]
    keras_cells = [out for line, out in outputs if line.startswith("%%custom_gradient --keras --backends all")]
    assert len(keras_cells) == 2
    assert "keras_log1pexp(x) fails" in keras_cells[0] and "backend-signature" in keras_cells[0]
    assert "PyTorch fails backend-signature" in keras_cells[0] and "JAX passes" in keras_cells[0]
    assert "keras_log1pexp(x) passes" in keras_cells[1] and "PyTorch passes" in keras_cells[1]
    reports = [o for cell in code for o in cell.outputs if REPORT in o.get("data", {})]
    assert len(reports) >= 12
    for output in reports:  # the report's data, and what shows without a kernel
        assert {REPORT, "text/html", "text/plain"} == set(output["data"])
        assert "<script" not in output["data"]["text/html"].lower()
    (watched,) = [o for cell in code for o in cell.outputs if WATCH_MIME_TYPE in o.get("data", {})]
    assert {WATCH_MIME_TYPE, "text/html", "text/plain"} == set(watched["data"])  # the report alone, no History
    assert [len(cell.outputs) for cell in code if cell.source.startswith("%%gradwatch")] == [1]
    assert "widgets" not in notebook.metadata, "nbclient names no cell: no widget, no widget state to save"
    swept = [o for o in reports if o["data"][REPORT]["sweep"]]
    assert len(swept) == 3  # the cells with --sweep
    graph_cell = next(cell for cell in code if cell.source.startswith("%gradgraph"))
    assert {"image/svg+xml", "text/plain"} == set(graph_cell.outputs[0]["data"])
    # 945 KB before the %%gradwatch section; its watch holds two ops' whole reports (about 130 KB)
    assert len(nbformat.writes(notebook).encode()) < 1_100_000, "the executed demo stays under 1.1 MB"
    # The first report shows its point without a click: what the custom gradient fixes, under the verdict, outside
    # every folded section of the static view.
    first = next(o for o in reports if "log1pexp" in o["data"]["text/plain"])
    fixes = first["data"][REPORT]["words"]["fixes"]
    assert "autodiff gives nan, the custom gradient 1" in fixes
    static = first["data"]["text/html"]
    assert static.index(html.escape(fixes)) < static.index("<details")
    for first_line, texts in expected:
        assert any(line == first_line and all(t in out for t in texts) for line, out in outputs), (first_line, texts)
