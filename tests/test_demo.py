"""demo.ipynb runs top to bottom in a real Jupyter kernel and shows what its text promises."""

import nbformat
from nbclient import NotebookClient

from conftest import ROOT


def test_demo_notebook_runs_and_fixes_the_nan_gradient(tmp_path):
    notebook = nbformat.read(ROOT / "demo.ipynb", as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()

    def shown(cell) -> str:
        return "".join(
            output.get("text", "") + output.get("data", {}).get("text/plain", "") for output in cell.outputs
        )

    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert not [o for cell in code for o in cell.outputs if o.output_type == "error"]
    outputs = [(cell.source.splitlines()[0], shown(cell)) for cell in code]
    expected = [
        ("def naive_log1pexp(x):", "numpy=nan"),
        ("%%custom_gradient --check x=tf.constant([-5., 0., 100.])", "log1pexp(x) is now a tf.custom_gradient op"),
        ("with tf.GradientTape() as tape:", "numpy=1.0>"),
        ("@tf.function(jit_compile=True)", "1.        ]"),
        ("%%custom_gradient scaled_log1pexp(x, *, scale=1.0) --check x=tf.constant([0., 100.])",
         "scaled_log1pexp(x, *, scale=1.0) is now a tf.custom_gradient op"),
        ("with tf.GradientTape() as tape:", "numpy=2.0>"),
        ("%gradcheck log1pexp x=tf.linspace(-3., 3., 7)", "log1pexp(x=float32[7]) returns float32[7]."),
    ]
    for first_line, text in expected:
        assert any(line == first_line and text in out for line, out in outputs), (first_line, text, outputs)
