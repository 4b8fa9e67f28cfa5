"""The IPython extension: light to load, idempotent, unloadable, and clear when no framework is installed."""

import json
from importlib import metadata

from conftest import run_python
from IPython.core.error import UsageError

SHELL = """
import json, sys
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config
config = Config()
config.HistoryManager.hist_file = ":memory:"
shell = InteractiveShell.instance(colors="nocolor", config=config)
"""


def test_load_ext_imports_no_framework():
    out = run_python(
        SHELL
        + """
shell.run_line_magic("load_ext", "gradmagic")
heavy = [name for name in ("tensorflow", "keras", "jax", "torch", "matplotlib", "ipywidgets") if name in sys.modules]
print(json.dumps({"heavy": heavy, "magics": sorted(shell.magics_manager.magics["cell"])}))
"""
    )
    loaded = json.loads(out)
    assert loaded["heavy"] == []
    assert "custom_gradient" in loaded["magics"]


def test_framework_is_imported_on_first_use():
    out = run_python(
        SHELL
        + """
shell.run_line_magic("load_ext", "gradmagic")
before = "tensorflow" in sys.modules
shell.run_cell("%%custom_gradient\\ndef f(x):\\n    return x, lambda dy: dy")
print(json.dumps([before, "tensorflow" in sys.modules, callable(shell.user_ns["f"])]))
"""
    )
    assert json.loads(out.splitlines()[-1]) == [False, True, True]


def test_missing_framework_says_what_to_install():
    # `None` in sys.modules makes `import tensorflow` fail exactly as if it were not installed.
    out = run_python(
        SHELL
        + """
sys.modules["tensorflow"] = None
shell.run_line_magic("load_ext", "gradmagic")
result = shell.run_cell("%%custom_gradient\\ndef f(x):\\n    return x, lambda dy: dy")
print(json.dumps({"error": type(result.error_in_exec).__name__, "message": str(result.error_in_exec),
                  "bound": "f" in shell.user_ns}))
"""
    )
    outcome = json.loads(out)
    assert outcome["error"] == "UsageError" and not outcome["bound"]
    assert "gradmagic needs TensorFlow" in outcome["message"]
    assert "%pip install 'gradmagic[tensorflow]'" in outcome["message"]
    assert "gradmagic[tensorflow-cpu]" in outcome["message"]


def test_loading_twice_is_harmless_and_unloading_removes_the_magics(nb):
    from gradmagic.magics import GradientMagics

    def instances():
        return [c for c in nb.shell.configurables if isinstance(c, GradientMagics)]

    assert len(instances()) == 1
    import gradmagic

    gradmagic.load_ipython_extension(nb.shell)
    nb.ok("%reload_ext gradmagic")
    assert len(instances()) == 1

    nb.ok("%unload_ext gradmagic")
    assert instances() == []
    assert "custom_gradient" not in nb.shell.magics_manager.magics["cell"]
    assert "gradcheck" not in nb.shell.magics_manager.magics["line"]
    nb.fails("%gradcheck f x=1", UsageError)

    nb.ok("%load_ext gradmagic")
    nb.ok("%%custom_gradient\ndef f(x):\n    return x, lambda dy: dy")


def test_tensorflow_is_an_extra_not_a_core_dependency():
    requirements = metadata.requires("gradmagic")
    core = [r for r in requirements if "extra ==" not in r]
    assert not any(r.startswith(("tensorflow", "keras", "jax", "torch")) for r in core), core
    assert {"anywidget", "ipython", "ipywidgets", "numpy"} <= {r.split(">")[0].split("=")[0] for r in core}
    extras = metadata.metadata("gradmagic").get_all("Provides-Extra")
    assert {"tensorflow", "tensorflow-cpu", "test"} <= set(extras)
