"""Display glue for Jupyter: what a Report shows as (`display.py`), the contexts its widget re-checks in
(`contexts.py`), one widget per notebook cell (`cell_widgets.py`), the progress bar of long checks
(`progress.py`), and the running shell and kernel (`kernel.py`)."""
