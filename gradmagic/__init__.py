"""gradmagic: write, check and explain custom gradients in Jupyter.

In IPython or Jupyter::

    %load_ext gradmagic

then a ``%%custom_gradient`` cell turns its code into a ``tf.custom_gradient``
op bound in the notebook and checked (see ``%custom_gradient?``). In Python::

    report = gradmagic.check(op, x)        # a Report: report.ok, report.problems, report.to_dict()
    gradmagic.widget(report)               # its ipywidgets view (what a Report displays as in Jupyter)
    gradmagic.assert_gradient(op, x)       # for test suites
    gradmagic.gradient_graph(op, x)        # the forward and backward as traced, saved tensors marked

Loading the extension imports no framework: TensorFlow is imported the first
time a magic needs it.
"""

__version__ = "0.1.0"

__all__ = [
    "check",
    "widget",
    "assert_gradient",
    "gradient_graph",
    "CheckOptions",
    "Report",
    "load_ipython_extension",
    "unload_ipython_extension",
]

_LAZY = {
    "check": "gradmagic.live",
    "widget": "gradmagic.live",
    "assert_gradient": "gradmagic.checking",
    "gradient_graph": "gradmagic.checking",
    "CheckOptions": "gradmagic.checking",
    "Report": "gradmagic.report",
}


def __getattr__(name):
    # The public API is imported on first use, so `import gradmagic` and `%load_ext` stay light.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gradmagic' has no attribute {name!r}")


def _jupyter_labextension_paths():
    """Where the built JupyterLab extension lies (read by `jupyter labextension develop`)."""
    return [{"src": "labextension", "dest": "gradmagic"}]


def load_ipython_extension(ipython):
    """Register gradmagic's magics (``%load_ext gradmagic``); loading twice is harmless."""
    from gradmagic.live import cell_starts
    from gradmagic.magics import GradientMagics

    if GradientMagics.__name__ not in ipython.magics_manager.registry:
        ipython.register_magics(GradientMagics)
        ipython.events.register("pre_run_cell", cell_starts)


def unload_ipython_extension(ipython):
    """Remove gradmagic's magics (``%unload_ext gradmagic``)."""
    from gradmagic.live import cell_starts
    from gradmagic.magics import GradientMagics

    GradientMagics.unregister(ipython)
    if cell_starts in ipython.events.callbacks["pre_run_cell"]:
        ipython.events.unregister("pre_run_cell", cell_starts)
