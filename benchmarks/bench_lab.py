"""The JupyterLab extension in a real JupyterLab and headless Chromium: its size, and the time from a report's
arrival in the browser to its first paint, for a report whose gradient graph has about 200 nodes.

Anchor, in the same run and page: JupyterLab's own rendering of the same report's `text/html` fallback (its
sanitiser, the inline PNGs) when the extension's MIME type is left out of the bundle. Arrival is when the
kernel's message reaches the page's WebSocket; the paint is the first frame after the report's element is in
the page (a requestAnimationFrame, then a task). Target: under 0.5 s for the extension's renderer.

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
report = report_fixtures.graph_of_about({NODES})
data, html, text = report.to_dict(), render_html(report), render_text(report)
nodes = len(report.graph.nodes)
def show(run, extension=True):
    bundle = {{"text/html": html, "text/plain": text + f" gradmagic-bench-run {{run}}"}}
    if extension:
        bundle["application/vnd.gradmagic.report+json"] = data
    display(bundle, raw=True)
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
    root = STATE / "notebooks"
    root.mkdir()
    write_notebook(root / "bench.ipynb", [CELL, ""])
    with JupyterLab(root, STATE / "server") as lab, sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.add_init_script(TIMING_SCRIPT)
        open_notebook(page, lab, "bench.ipynb")
        run_cell(page, 0, 1)
        measure(page, "show(-1); show(-2, extension=False)", 2)  # warm both renderers
        extension = measure(page, "; ".join(f"show({i})" for i in range(RUNS)), RUNS)
        drawn = page.locator(".jp-gradmagic-graph").first.get_attribute("data-node-count")
        anchor = measure(page, "; ".join(f"show({i}, extension=False)" for i in range(RUNS)), RUNS)
        browser.close()
    nodes = int(drawn)
    ext, html = statistics.median(extension), statistics.median(anchor)
    print(f"built extension: {size / 1024:.1f} KiB in all, {scripts / 1024:.1f} KiB of JavaScript")
    print(f"report with a {nodes}-node gradient graph, arrival to first paint, median of {RUNS} (min-max):")
    print(f"  gradmagic renderer (interactive graph): {ext:7.1f} ms ({min(extension):.1f}-{max(extension):.1f})")
    print(f"  anchor: JupyterLab's text/html fallback: {html:7.1f} ms ({min(anchor):.1f}-{max(anchor):.1f})")
    print(f"  ratio renderer / anchor: {ext / html:.2f}x; target: renderer under 500 ms")
    print(json.dumps({"size_bytes": size, "nodes": nodes, "renderer_ms": ext, "html_ms": html}))


if __name__ == "__main__":
    main()
