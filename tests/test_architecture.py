"""The shape of the house, read from the source with `ast`: one way through, each layer importing only below it.

    source -> frameworks (adapters) -> checking (engine) -> Report (plain data) -> render
    with the magics, the public API (api.py, portability.py) and the display glue (notebook/) on top.

Every import counts, those inside functions too. A failure names the module, the import and the rule it breaks.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from gradmagic.frameworks.names import KERAS_BACKENDS, PACKAGES, backend_name

PACKAGE = Path(__file__).resolve().parents[1] / "gradmagic"
#: Frameworks, imported only inside gradmagic/frameworks/: the packages of its table of names, and what they bring.
FRAMEWORKS = {package.module for package in PACKAGES.values()} | {"jaxlib", "ml_dtypes"}
#: Public attributes of the frameworks' objects that tell what a callable is to its framework (Keras's
#: torch.autograd.Function, TensorFlow's decorators): named only inside gradmagic/frameworks/, as are the private
#: attributes frameworks/ itself reads or writes on objects not its own (`private_attributes_touched`).
FRAMEWORK_ATTRIBUTES = {"forward_fn", "decorated_target", "decorator_name"}
#: Where a framework is found without an import statement: by name in `sys.modules`, or imported by its name.
IMPORTERS = {"import_module", "find_spec", "__import__"}
#: A framework's phrase in a message: its ops and modules (`tf.cond`), its name (`Keras`).
FRAMEWORK_PHRASE = re.compile(r"\b(?:tf|keras|jax|torch)\.\w[\w.]*|\b(?:TensorFlow|Keras|JAX|PyTorch)\b")
#: Framework phrases the engine's messages still spell, each to move into the adapter's `wording` (issue 29): the
#: list only shrinks. A new phrase in gradmagic/checking/ fails the test, and so does one gone but still listed.
ENGINE_PHRASES = {
    ("gradmagic.checking.compiled", "TensorFlow"),  # gradient clipping: TensorFlow's own clip_gradients example
    ("gradmagic.checking.compiled", "tf.clip_by_norm"),
    ("gradmagic.checking.surrogate", "TensorFlow"),  # the same sentence again
    ("gradmagic.checking.surrogate", "tf.clip_by_norm"),
    ("gradmagic.checking.numbers", "TensorFlow"),  # complex inputs: TensorFlow's conjugate convention
    ("gradmagic.checking.structure", "TensorFlow"),  # the same for complex-unchecked; the portable form's backends
    ("gradmagic.checking.structure", "JAX"),  # backend-signature: works on TensorFlow, JAX and PyTorch
    ("gradmagic.checking.structure", "PyTorch"),
    ("gradmagic.checking.structure", "Keras"),  # closed-over-variable: "the trainable Keras variable"
    ("gradmagic.checking.options", "Keras"),  # --backends: "Keras's backends", "unknown Keras backend"
    ("gradmagic.checking.options", "keras.ops.custom_gradient"),
}
#: What each layer may import of gradmagic (besides itself).
LAYERS = {
    "gradmagic.report": {"gradmagic.errors"},
    "gradmagic.render": {"gradmagic.report"},
    "gradmagic.checking": {"gradmagic.frameworks", "gradmagic.report", "gradmagic.errors"},
    "gradmagic.frameworks": {"gradmagic.errors"},
    # The pytest plugin sits on the watch: it reads its settings, runs a watch, and renders and writes its report.
    "gradmagic.suite": {
        "gradmagic.watching",
        "gradmagic.report",
        "gradmagic.render",
        "gradmagic.checking.options",
        "gradmagic.errors",
    },
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


def _is_docstring(node: ast.AST, parent: ast.AST) -> bool:
    body = getattr(parent, "body", None)
    return isinstance(body, list) and bool(body) and body[0] is node and isinstance(parent, _DOCUMENTED)


_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _strings(tree: ast.AST) -> list[ast.Constant]:
    """The string constants of a module, its docstrings left out."""
    docstrings = {
        id(child.value)
        for parent in ast.walk(tree)
        for child in ast.iter_child_nodes(parent)
        if isinstance(child, ast.Expr) and _is_docstring(child, parent)
    }
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def _private(name: str) -> bool:
    return re.fullmatch(r"_[A-Za-z]\w*", name) is not None and not name.endswith("__")


def _of_others(node: ast.Attribute, modules: set[str]) -> bool:
    """Whether an attribute is one of another object's (not `self`'s, `cls`'s or an imported module's)."""
    return not (isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"} | modules)


def _imported_modules(tree: ast.AST) -> set[str]:
    return {
        (alias.asname or alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }


def private_attributes_touched(source: str) -> set[str]:
    """The private attributes (`_name`) a module reads or writes on objects not its own: `op._d`, or by name in a
    string, `getattr(op, "_tf_decorator")`."""
    tree = ast.parse(source)
    modules = _imported_modules(tree)
    touched = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and _private(node.attr) and _of_others(node, modules)
    }
    return touched | {node.value for node in _strings(tree) if _private(node.value)}


def _sys_modules(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "modules" and getattr(node.value, "id", None) == "sys"


def _looked_up(node: ast.AST) -> ast.AST | None:
    """What a node looks up in `sys.modules` (`sys.modules[X]`, `.get(X)`, `X in sys.modules`) or imports by name
    (`importlib.import_module(X)`, `find_spec(X)`), else None."""
    if isinstance(node, ast.Subscript) and _sys_modules(node.value):
        return node.slice
    if isinstance(node, ast.Compare) and any(_sys_modules(c) for c in node.comparators):
        return node.left
    if isinstance(node, ast.Call) and node.args:
        function = node.func
        if isinstance(function, ast.Attribute) and _sys_modules(function.value):
            return node.args[0]
        name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
        if name in IMPORTERS:
            return node.args[0]
    return None


def framework_knowledge(source: str, attributes: set[str]) -> list[tuple[int, str]]:
    """Where a module reaches into a framework without an import statement: an attribute of `attributes` of another
    object, read or named in a string, or a framework looked up in `sys.modules` or imported by its name."""
    tree = ast.parse(source)
    modules = _imported_modules(tree)
    found = [
        (node.lineno, f".{node.attr}")
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in attributes and _of_others(node, modules)
    ]
    found += [(node.lineno, repr(node.value)) for node in _strings(tree) if node.value in attributes]
    for node in ast.walk(tree):
        looked_up = _looked_up(node)
        if isinstance(looked_up, ast.Constant) and str(looked_up.value).split(".")[0] in FRAMEWORKS:
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_the_framework_rule_sees_attributes_and_lookups_that_no_import_shows():
    source = """import importlib, sys
def resolve(op):
    keras = sys.modules.get("keras")
    tf = sys.modules["tensorflow"]
    if "jax" in sys.modules and importlib.util.find_spec("torch.nn"):
        inner = getattr(op, "_tf_decorator", None)
        return op.forward_fn, self.forward_fn, op._d, sys.modules.get("IPython"), op.name
"""
    assert private_attributes_touched(source) == {"_tf_decorator", "_d"}
    found = framework_knowledge(source, FRAMEWORK_ATTRIBUTES | private_attributes_touched(source))
    assert [line for line, _ in found] == [3, 4, 5, 5, 6, 7, 7], found


def test_framework_knowledge_stays_in_frameworks_where_no_import_shows_it_either():
    inside = [name for name in MODULES if within(name, "gradmagic.frameworks")]
    private = set().union(*(private_attributes_touched(MODULES[name].read_text()) for name in inside))
    assert {"_tf_decorator", "_gradmagic_function", "_function_cache"} <= private, sorted(private)
    found = [
        f"{name} line {line}: {what}"
        for name in MODULES
        if name not in inside
        for line, what in framework_knowledge(MODULES[name].read_text(), FRAMEWORK_ATTRIBUTES | private)
    ]
    assert not found, (
        "outside gradmagic/frameworks/, no attribute of a framework's objects (or of the adapters' own marks on an op) "
        "is read and no framework is looked up by name: make it a function of gradmagic.frameworks\n" + "\n".join(found)
    )


def test_the_engine_spells_no_framework_phrase_but_those_listed_to_move():
    found = {
        (name, phrase)
        for name in MODULES
        if within(name, "gradmagic.checking")
        for node in _strings(ast.parse(MODULES[name].read_text()))
        for phrase in FRAMEWORK_PHRASE.findall(node.value)
    }
    assert found <= ENGINE_PHRASES, (
        f"framework phrases belong in the adapter's wording: {sorted(found - ENGINE_PHRASES)}"
    )
    assert ENGINE_PHRASES <= found, f"moved to the wording, no longer to list: {sorted(ENGINE_PHRASES - found)}"


def test_the_views_name_keras_backends_as_the_one_table_does():
    # render/ imports only the Report, so it keeps its own copy of the names: pinned to frameworks/names.py here.
    from gradmagic.render import BACKEND_NAMES

    assert BACKEND_NAMES == {backend: backend_name(backend) for backend in KERAS_BACKENDS}
    assert backend_name("jax") == "JAX" and backend_name("mxnet") == "mxnet" and backend_name(None) == ""
