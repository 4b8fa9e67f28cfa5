"""Cost of gradmagic's magics, measured against their anchors in one run.

1. `%load_ext gradmagic`, cold, each time in a fresh Python (anchor: IPython's
   own `%load_ext autoreload` in the same processes). Target: under 0.1 s.
2. A `%%custom_gradient` cell (both forms, no check) against the same function
   decorated by hand with `@tf.custom_gradient` in a plain cell, both run
   through IPython's `run_cell`, interleaved. Target: overhead under 20 ms.

Run: .venv/bin/python benchmarks/bench_magic.py
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile

LOAD_REPEATS = 7
CELL_REPEATS = 200

SHELL = """
import time
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config
config = Config()
config.HistoryManager.hist_file = ":memory:"
shell = InteractiveShell.instance(config=config)
"""

LOAD_EXT = (
    SHELL
    + """
import json, sys
timings = {}
for extension in ("autoreload", "gradmagic"):
    start = time.perf_counter()
    shell.run_line_magic("load_ext", extension)
    timings[extension] = time.perf_counter() - start
timings["tensorflow imported"] = "tensorflow" in sys.modules
print(json.dumps(timings))
"""
)

FUNCTION = """def log1pexp(x):
    e = tf.exp(x)
    def grad(upstream):
        return upstream * (1 - 1 / (1 + e))
    return tf.math.log(1 + e), grad
"""
BODY = """e = tf.exp(x)
def grad(upstream):
    return upstream * (1 - 1 / (1 + e))
return tf.math.log(1 + e), grad
"""
CELLS = {
    "@tf.custom_gradient by hand (anchor)": "@tf.custom_gradient\n" + FUNCTION,
    "%%custom_gradient, definition form": "%%custom_gradient --quiet\n" + FUNCTION,
    "%%custom_gradient, body form": "%%custom_gradient log1pexp(x) --quiet\n" + BODY,
}

CELL_RUNS = (
    SHELL
    + f"""
import json
shell.run_line_magic("load_ext", "gradmagic")
shell.run_cell("import tensorflow as tf")
cells = {CELLS!r}
for cell in cells.values():  # warm up: first runs import and cache
    assert shell.run_cell(cell, store_history=True).success
times = {{name: [] for name in cells}}
for _ in range({CELL_REPEATS}):
    for name, cell in cells.items():
        start = time.perf_counter()
        result = shell.run_cell(cell, store_history=True)
        times[name].append(time.perf_counter() - start)
        assert result.success
print(json.dumps(times))
"""
)


def run_python(code: str, env: dict) -> dict:
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> None:
    with tempfile.TemporaryDirectory() as config_dir:
        env = {**os.environ, "IPYTHONDIR": config_dir, "MPLCONFIGDIR": config_dir, "TF_CPP_MIN_LOG_LEVEL": "2"}

        loads = [run_python(LOAD_EXT, env) for _ in range(LOAD_REPEATS)]
        gradmagic_load = statistics.median(load["gradmagic"] for load in loads)
        anchor_load = statistics.median(load["autoreload"] for load in loads)
        print(f"%load_ext, cold, median of {LOAD_REPEATS} fresh processes")
        print(f"  %load_ext autoreload (anchor)  {anchor_load * 1e3:8.2f} ms")
        print(
            f"  %load_ext gradmagic            {gradmagic_load * 1e3:8.2f} ms   "
            f"ratio {gradmagic_load / anchor_load:5.2f}   target < 100 ms: "
            f"{'met' if gradmagic_load < 0.1 else 'MISSED'}"
        )
        print(f"  TensorFlow imported by %load_ext: {any(load['tensorflow imported'] for load in loads)}")

        times = run_python(CELL_RUNS, env)
        anchor_name = next(iter(CELLS))
        anchor = statistics.median(times[anchor_name])
        print(f"\nOne cell through IPython's run_cell, median of {CELL_REPEATS}, interleaved")
        for name, samples in times.items():
            median = statistics.median(samples)
            line = f"  {name:38s} {median * 1e3:8.3f} ms"
            if name != anchor_name:
                overhead = median - anchor
                line += (
                    f"   ratio {median / anchor:5.2f}   overhead {overhead * 1e3:6.3f} ms   target < 20 ms: "
                    f"{'met' if overhead < 0.02 else 'MISSED'}"
                )
            print(line)


if __name__ == "__main__":
    main()
