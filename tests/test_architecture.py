"""The shape of the house, read from the source with `ast`: one way through, each layer importing only below it.

    source -> frameworks (adapters) -> checking (engine) -> Report (plain data) -> render
    with the magics, the public API (api.py, portability.py) and the display glue (notebook/) on top.

Every import counts, those inside functions too. A failure names the module, the import and the rule it breaks.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from gradmagic.frameworks.names import KERAS_BACKENDS, PACKAGES, backend_name

PACKAGE = Path(__file__).resolve().parents[1] / "gradmagic"
#: Frameworks, imported only inside gradmagic/frameworks/: the packages of its table of names, and what they bring.
FRAMEWORKS = {package.module for package in PACKAGES.values()} | {"jaxlib", "ml_dtypes"}
#: What each layer may import of gradmagic (besides itself).
LAYERS = {
    "gradmagic.report": {"gradmagic.errors"},
    "gradmagic.render": {"gradmagic.report"},
    "gradmagic.checking": {"gradmagic.frameworks", "gradmagic.report", "gradmagic.errors"},
    "gradmagic.frameworks": {"gradmagic.errors"},
}
#: The most methods the adapter interface may have.
ADAPTER_METHODS = 18


@dataclass(frozen=True)
class Import:
    importer: str  # the importing module's dotted name
    module: str  # the imported module's dotted name
    names: tuple[str, ...]  # names taken from it (`from module import a, b`)
    line: int

    def __str__(self) -> str:
        taken = f" ({', '.join(self.names)})" if self.names else ""
        return f"{self.importer} line {self.line} imports {self.module}{taken}"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str) -> list[Import]:
    """Every import statement of a module, at any depth; `from package import module` counts as the module."""
    found = []
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Import):
            found += [Import(name, alias.name, (), node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            submodules = {alias.name: f"{node.module}.{alias.name}" for alias in node.names}
            modules = [module for module in submodules.values() if module in MODULES]
            names = tuple(alias for alias, module in submodules.items() if module not in MODULES)
            found += [Import(name, module, (), node.lineno) for module in modules]
            if names or not modules:
                found.append(Import(name, node.module, names, node.lineno))
    return found


ALL_IMPORTS = [found for name in MODULES for found in imports_of(name)]


def within(module: str, layer: str) -> bool:
    return module == layer or module.startswith(layer + ".")


def test_the_package_has_the_layers_the_rules_name():
    assert all(any(within(name, layer) for name in MODULES) for layer in LAYERS)
    assert {"gradmagic.api", "gradmagic.portability", "gradmagic.magics", "gradmagic.notebook.display"} <= set(MODULES)


def test_no_import_cycle_among_gradmagic_modules():
    graph = {name: set() for name in MODULES}
    for found in ALL_IMPORTS:
        if found.module in MODULES and found.module != found.importer:
            graph[found.importer].add(found.module)
    state: dict[str, str] = {}

    def visit(name: str, path: list[str]) -> None:
        state[name] = "open"
        for imported in sorted(graph[name]):
            if state.get(imported) == "open":
                cycle = path[path.index(imported) :] + [imported] if imported in path else [name, imported]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if imported not in state:
                visit(imported, path + [imported])
        state[name] = "done"

    for name in MODULES:
        if name not in state:
            visit(name, [name])


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_each_layer_imports_only_what_lies_below_it(layer):
    allowed = LAYERS[layer]
    wrong = [
        str(found)
        for found in ALL_IMPORTS
        if within(found.importer, layer)
        and within(found.module, "gradmagic")
        and not within(found.module, layer)
        and not any(within(found.module, below) for below in allowed)
    ]
    assert not wrong, f"{layer} may import only {sorted(allowed)} of gradmagic:\n" + "\n".join(wrong)


def test_the_engine_imports_no_ipython_and_frameworks_only_inside_frameworks():
    engine = [str(f) for f in ALL_IMPORTS if within(f.importer, "gradmagic.checking") and f.module.startswith("IPy")]
    assert not engine, "\n".join(engine)
    outside = [
        str(found)
        for found in ALL_IMPORTS
        if found.module.split(".")[0] in FRAMEWORKS and not within(found.importer, "gradmagic.frameworks")
    ]
    assert not outside, "frameworks are imported only in gradmagic/frameworks/:\n" + "\n".join(outside)


def test_no_private_name_is_imported_from_another_module():
    private = [
        str(found)
        for found in ALL_IMPORTS
        if within(found.module, "gradmagic") and any(name.startswith("_") for name in found.names)
    ]
    assert not private, "what two modules share is public in one of them:\n" + "\n".join(private)


def _classes() -> dict[str, ast.ClassDef]:
    classes = {}
    for name in MODULES:
        if within(name, "gradmagic.frameworks"):
            for node in ast.walk(ast.parse(MODULES[name].read_text())):
                if isinstance(node, ast.ClassDef):
                    classes[f"{name}.{node.name}"] = node
    return classes


def _public_methods(node: ast.ClassDef) -> set[str]:
    return {
        item.name
        for item in node.body
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
        and not item.name.startswith("_")
        and not any(isinstance(d, ast.Name) and d.id == "property" for d in item.decorator_list)
    }


def test_the_adapter_interface_is_small_and_adapters_add_nothing_public_to_it():
    classes = _classes()
    interface = _public_methods(classes["gradmagic.frameworks.base.Adapter"])
    assert len(interface) <= ADAPTER_METHODS, sorted(interface)
    adapters = {
        name: node
        for name, node in classes.items()
        if name.endswith("Adapter") and name != "gradmagic.frameworks.base.Adapter"
    }
    assert len(adapters) >= 5, sorted(adapters)  # TensorFlow eager and graph mode, Keras on TF, JAX, PyTorch
    for name, node in adapters.items():
        extra = _public_methods(node) - interface
        assert not extra, f"{name} has public methods outside the Adapter interface: {sorted(extra)}"


def test_the_views_name_keras_backends_as_the_one_table_does():
    # render/ imports only the Report, so it keeps its own copy of the names: pinned to frameworks/names.py here.
    from gradmagic.render import BACKEND_NAMES

    assert BACKEND_NAMES == {backend: backend_name(backend) for backend in KERAS_BACKENDS}
    assert backend_name("jax") == "JAX" and backend_name("mxnet") == "mxnet" and backend_name(None) == ""
