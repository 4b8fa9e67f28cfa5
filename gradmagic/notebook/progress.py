"""A progress bar in the running cell for checks that take a while."""

from __future__ import annotations

import time

from gradmagic.notebook.kernel import kernel
from gradmagic.render import PROGRESS_AFTER


class ProgressBar:
    """A progress callback for `check` that shows a bar in the running cell once a check passes `PROGRESS_AFTER`."""

    def __init__(self):
        self.started = time.perf_counter()
        self.bar = self.handle = None

    def __call__(self, fraction: float, phase: str) -> None:
        if self.bar is None:
            if time.perf_counter() - self.started < PROGRESS_AFTER:
                return
            from gradmagic.notebook.display import front_end_of

            if front_end_of(kernel()) is None:  # a console or nbclient: no widget to draw a bar
                return
            import ipywidgets
            from IPython.display import display

            self.bar = ipywidgets.FloatProgress(min=0, max=1, description="checking")
            self.handle = display(self.bar, display_id=True)
        self.bar.value = fraction
        self.bar.description = phase

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> bool:
        if self.bar is not None:  # the bar's output becomes empty (no MIME type: nothing shown); the report follows
            self.handle.update({}, raw=True)
            for model in (self.bar, self.bar.layout, self.bar.style):
                model.close()
        return False
