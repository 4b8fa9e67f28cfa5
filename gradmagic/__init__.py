"""gradmagic: write, check and explain custom gradients in Jupyter.

In IPython or Jupyter::

    %load_ext gradmagic

then a ``%%custom_gradient`` cell turns its code into a ``tf.custom_gradient``
op bound in the notebook and checked (see ``%custom_gradient?``). In Python::

    report = gradmagic.check(op, x)        # a Report: report.ok, report.problems, report.to_dict()
    gradmagic.widget(report)               # its live view (one anywidget; what a Report displays as in Jupyter)
    gradmagic.assert_gradient(op, x)       # for test suites
    gradmagic.gradient_graph(op, x)        # the forward and backward as traced, saved tensors marked

    with gradmagic.watch() as watch:       # every custom-gradient op the block reaches, checked at its real inputs
        model.fit(x, y)
    watch.report                           # a WatchReport: .ok, .problems, .ops, .first_nonfinite_gradient

Loading the extension imports no framework: TensorFlow is imported the first
time a magic needs it.
"""

import sys

__version__ = "0.1.0"

__all__ = [
    "check",
    "watch",
    "widget",
    "assert_gradient",
    "gradient_graph",
    "CheckOptions",
    "Report",
    "WatchReport",
    "load_ipython_extension",
    "unload_ipython_extension",
]

_LAZY = {
    "check": "gradmagic.api",
    "assert_gradient": "gradmagic.api",
    "gradient_graph": "gradmagic.api",
    "widget": "gradmagic.notebook.display",
    "CheckOptions": "gradmagic.checking.options",
    "Report": "gradmagic.report",
    "WatchReport": "gradmagic.report",
    "watch": "gradmagic.watching",
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
    from gradmagic.magics import GradientMagics
    from gradmagic.notebook.cell_widgets import cell_starts

    if GradientMagics.__name__ not in ipython.magics_manager.registry:
        ipython.register_magics(GradientMagics)
        ipython.events.register("pre_run_cell", cell_starts)
    _register_display(ipython)


def unload_ipython_extension(ipython):
    """Remove gradmagic's magics (``%unload_ext gradmagic``)."""
    from gradmagic.magics import GradientMagics
    from gradmagic.notebook.cell_widgets import cell_starts

    GradientMagics.unregister(ipython)
    if cell_starts in ipython.events.callbacks["pre_run_cell"]:
        ipython.events.unregister("pre_run_cell", cell_starts)


def _register_display(shell) -> None:
    """Reports and gradient graphs display through `gradmagic.notebook.display` in `shell`, imported when the first
    one shows (the Report itself is plain data: how it shows is IPython's formatters' business)."""
    formatter = getattr(getattr(shell, "display_formatter", None), "mimebundle_formatter", None)
    if formatter is not None:
        formatter.for_type_by_name("gradmagic.report", "Report", _report_bundle)
        formatter.for_type_by_name("gradmagic.report", "Graph", _graph_bundle)
        formatter.for_type_by_name("gradmagic.report", "WatchReport", _watch_bundle)


def _report_bundle(report):
    from gradmagic.notebook.display import report_bundle

    return report_bundle(report)


def _watch_bundle(report):
    from gradmagic.notebook.display import watch_bundle

    return watch_bundle(report)


def _graph_bundle(graph):
    from gradmagic.notebook.display import graph_bundle

    return graph_bundle(graph)


# In a running IPython (a notebook that imports gradmagic without loading the extension), Reports show there too.
if "IPython" in sys.modules:
    _register_display(sys.modules["IPython"].get_ipython())
