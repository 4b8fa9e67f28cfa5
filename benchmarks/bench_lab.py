"""The report's view in a real JupyterLab and headless Chromium: the size of what the browser loads (the JupyterLab
extension; the live widget's view, which the extension registers on the page or the kernel sends once per page; and
the stub each widget's model carries), and the time from a report's arrival in the
browser to its first paint, for a report whose gradient graph has about 200 nodes: drawn from the saved data by the
extension, and live by the kernel's widget (the same view, with its controls).

Anchor, in the same run and page: JupyterLab's own rendering of the same report's `text/html` fallback (its
sanitiser, the inline SVG images) when the extension's MIME type is left out of the bundle. Arrival is when the
kernel's message reaches the page's WebSocket; the paint is the first frame after the report's element is in
the page (a requestAnimationFrame, then a task); the graph's section is folded, and its drawing waits until the
section is opened (timed apart: open to paint). Target: no slower than 187 ms (the renderer before issue 19).

    .venv/bin/python benchmarks/bench_lab.py
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
STATE = Path(tempfile.mkdtemp(prefix="gradmagic-bench-lab-"))
for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "IPYTHONDIR", "MPLCONFIGDIR"):
    os.environ[name] = str(STATE / name.lower())
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"

from jupyterlab_server import JupyterLab, launch_chromium, open_notebook, run_cell, write_notebook  # noqa: E402

RUNS = 10
NODES = 200

#: Recorded in the page: when a kernel message carrying the marker arrives, and when the element is painted.
TIMING_SCRIPT = """
(() => {
  window.__arrivals = [];
  window.__paints = [];
  const decoder = new TextDecoder();
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      this.addEventListener('message', event => {
        const now = performance.now();
        const text = typeof event.data === 'string' ? event.data : decoder.decode(event.data);
        if (text.includes('gradmagic-bench-run')) window.__arrivals.push(now);
      });
    }
  };
  new MutationObserver(records => {
    for (const record of records) for (const node of record.addedNodes) {
      if (!(node instanceof Element)) continue;
      const report = node.matches('.jp-gradmagic-report, .gradmagic-report') ? node
        : node.querySelector('.jp-gradmagic-report, .gradmagic-report');
      if (report && !report.dataset.benchSeen) {
        report.dataset.benchSeen = '1';
        requestAnimationFrame(() => setTimeout(() => window.__paints.push(performance.now())));
      }
    }
  }).observe(document, { childList: true, subtree: true });
})();
"""

CELL = f"""
import sys, json
sys.path.insert(0, {str(ROOT / "tests")!r})
import report_fixtures
from IPython.display import display
from gradmagic.render.html import render_html
from gradmagic.render.text import render_text
from gradmagic.render.words import report_data
report = report_fixtures.graph_of_about({NODES})
data, html, text = report_data(report), render_html(report), render_text(report)
nodes = len(report.graph.nodes)
def show(run, extension=True):
    bundle = {{"text/html": html, "text/plain": text + f" gradmagic-bench-run {{run}}"}}
    if extension:
        bundle["application/vnd.gradmagic.report+json"] = data
    display(bundle, raw=True)
def live(run):
    import gradmagic
    shown = gradmagic.widget(report)
    view = {{"version_major": 2, "version_minor": 1, "model_id": shown.model_id}}
    display(
        {{"application/vnd.jupyter.widget-view+json": view, "text/plain": f"gradmagic-bench-run {{run}}"}}, raw=True
    )
"""


#: Milliseconds from a click on a folded section's summary to the next frame painted.
OPEN_SCRIPT = """
async summary => {
  const start = performance.now();
  summary.click();
  await new Promise(done => requestAnimationFrame(() => setTimeout(done)));
  return performance.now() - start;
}
"""


def measure(page, code: str, count: int) -> list[float]:
    """Milliseconds from arrival to paint for each of the `count` reports `code` displays."""
    page.evaluate("() => { window.__arrivals = []; window.__paints = []; }")
    cell = page.locator(".jp-Notebook .jp-Cell").nth(1)
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Control+a")
    page.keyboard.type(code)
    page.keyboard.press("Shift+Enter")
    page.wait_for_function(f"() => window.__paints.length >= {count}", timeout=120_000)
    arrivals, paints = page.evaluate("() => [window.__arrivals, window.__paints]")
    return [paint - arrival for arrival, paint in zip(arrivals, paints)]


def main() -> None:
    from playwright.sync_api import sync_playwright

    built = ROOT / "gradmagic" / "labextension"
    size = sum(f.stat().st_size for f in built.rglob("*") if f.is_file())
    scripts = sum(f.stat().st_size for f in (built / "static").glob("*.js"))
    widget = {
        name: (ROOT / "gradmagic" / "static" / name).stat().st_size for name in ("widget.js", "widget.css", "stub.js")
    }
    root = STATE / "notebooks"
    root.mkdir()
    write_notebook(root / "bench.ipynb", [CELL, ""])
    with JupyterLab(root, STATE / "server") as lab, sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.add_init_script(TIMING_SCRIPT)
        open_notebook(page, lab, "bench.ipynb")
        run_cell(page, 0, 1)
        measure(page, "show(-1); show(-2, extension=False); live(-3)", 3)  # warm every renderer
        extension = measure(page, "; ".join(f"show({i})" for i in range(RUNS)), RUNS)
        summaries = page.locator(".jp-gradmagic-graph-section > summary")
        opening = [  # the graph is drawn when its section opens: click to paint, for the reports in the page
            page.evaluate(OPEN_SCRIPT, summaries.nth(k).element_handle()) for k in range(min(RUNS, summaries.count()))
        ]
        drawn = page.locator(".jp-gradmagic-graph").first.get_attribute("data-node-count")
        anchor = measure(page, "; ".join(f"show({i}, extension=False)" for i in range(RUNS)), RUNS)
        widget_runs = measure(page, "; ".join(f"live({i})" for i in range(RUNS)), RUNS)
        browser.close()
    nodes = int(drawn)
    ext, html, live = (statistics.median(runs) for runs in (extension, anchor, widget_runs))
    print(f"built extension: {size / 1024:.1f} KiB in all, {scripts / 1024:.1f} KiB of JavaScript")
    print(f"live widget's view (once per page): {widget['widget.js'] / 1024:.1f} KiB of JavaScript, "
          f"{widget['widget.css'] / 1024:.1f} KiB of CSS; in each widget's model, its stub: "
          f"{widget['stub.js'] / 1024:.1f} KiB")
    print(f"report with a {nodes}-node gradient graph, arrival to first paint, median of {RUNS} (min-max):")
    print(f"  saved report, the extension's view:      {ext:7.1f} ms ({min(extension):.1f}-{max(extension):.1f})")
    print(f"  live report, the widget's view:          {live:7.1f} ms ({min(widget_runs):.1f}-{max(widget_runs):.1f})")
    print(f"  anchor: JupyterLab's text/html fallback: {html:7.1f} ms ({min(anchor):.1f}-{max(anchor):.1f})")
    graph = statistics.median(opening)
    print(f"  opening the folded graph, click to paint: {graph:6.1f} ms ({min(opening):.1f}-{max(opening):.1f})")
    print(f"  ratio saved view / anchor: {ext / html:.2f}x; target: the views no slower than 187 ms")
    print(json.dumps({"size_bytes": size, "widget_bytes": widget, "nodes": nodes, "renderer_ms": ext, "live_ms": live,
                      "html_ms": html, "open_graph_ms": graph}))


if __name__ == "__main__":
    main()
