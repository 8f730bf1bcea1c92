"""Imports in one direction: every import in stage5/ (module level, inside functions, under TYPE_CHECKING, and
``__import__`` / ``importlib.import_module`` of a constant name) read from the source, never by importing it.

The floors are the ones ``stage5/__init__.py``'s docstring draws, so the picture and the code cannot drift apart.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

import pytest

STAGE5 = Path(__file__).resolve().parents[1] / "stage5"
FLOOR_LINE = re.compile(r"^\s*(\d+)\. ``([^`]+)``", re.M)


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under ``root`` (a package named ``root.name``)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _within(name: str, modules: dict[str, Path]) -> str | None:
    """The module of the package that importing ``name`` runs (its longest dotted prefix that is a module)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``module`` imports anywhere in its file."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    named: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            named += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # ``from pkg import sub`` imports the module pkg.sub; ``from mod import name`` imports mod
            subs = [f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in modules]
            named += subs if len(subs) == len(node.names) else [*subs, source]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if called in ("__import__", "import_module"):
                named.append(node.args[0].value)
    return {m for n in named if (m := _within(n, modules)) is not None} - {module}


def import_graph(root: Path = STAGE5) -> dict[str, set[str]]:
    modules = module_files(root)
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every group of modules that import one another round a circle (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                group.append(w)
            if group:
                found.append(sorted([v, *group]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def floors(docstring: str) -> list[list[str]]:
    """The patterns of each floor, bottom first, as the package docstring lists them (``1. ``a b`` - ...``)."""
    rows = FLOOR_LINE.findall(docstring)
    assert [int(n) for n, _ in rows] == list(range(1, len(rows) + 1)), "floors numbered 1, 2, 3, ... in order"
    return [patterns.split() for _, patterns in rows]


def floor_of(relative: str, plan: list[list[str]]) -> int | None:
    """The floor of a file (``engine/kv.py``): the floor of the most specific pattern that matches it."""
    best: tuple[int, int] | None = None  # (specificity, floor)
    for floor, patterns in enumerate(plan, 1):
        for pattern in patterns:
            glob = pattern + "*" if pattern.endswith("/") else pattern + (".py" if "*" not in pattern else "*.py")
            if fnmatch.fnmatchcase(relative, glob) and (best is None or len(pattern) > best[0]):
                best = (len(pattern), floor)
    return best and best[1]


def upward_imports(root: Path = STAGE5) -> list[str]:
    """Each import that reaches a floor above the importer's, as a sentence."""
    modules = module_files(root)
    plan = floors(ast.get_docstring(ast.parse((root / "__init__.py").read_text())) or "")
    where = {m: floor_of(p.relative_to(root).as_posix(), plan) for m, p in modules.items() if m != root.name}
    unplaced = sorted(m for m, f in where.items() if f is None)
    assert not unplaced, f"place these modules on a floor in {root.name}/__init__.py's docstring: {unplaced}"
    wrong = []
    for module, path in modules.items():
        for target in sorted(imports_of(module, path, modules)):
            if module == root.name:
                wrong.append(f"{root.name}/__init__.py imports {target}: it sits below every floor")
            elif target != root.name and where[target] > where[module]:
                wrong.append(f"{module} (floor {where[module]}) imports {target} (floor {where[target]})")
    return wrong


# ------------------------------------------------------------------------------------ the package itself
def test_no_two_files_of_stage5_import_each_other_round_a_circle():
    assert circles(import_graph()) == []


def test_every_import_goes_down_the_floors_the_package_docstring_draws():
    assert upward_imports() == []


def test_the_engine_imports_no_exercise_or_grading_code():
    graph = import_graph()
    outside = {"stage5.exercise_support", "stage5.loop_kit", "stage5.grading"}
    for module, targets in graph.items():
        if module.startswith("stage5.engine"):
            bad = {t for t in targets if t in outside or t.startswith("stage5.grading.")}
            assert not bad, f"{module} imports {sorted(bad)}: the engine must not know it is exercised or graded"


def test_calibration_imports_the_engine_and_only_the_benches_import_calibrate_back():
    graph = import_graph()
    assert {"stage5.engine.overhead", "stage5.engine.roofline_toy"} <= graph["stage5.calibrate"]
    importers = {m for m, targets in graph.items() if "stage5.calibrate" in targets and m.startswith("stage5.engine")}
    assert importers and all(m.rpartition(".")[2].startswith("bench") for m in importers), importers


def test_the_plots_and_the_grader_call_nothing_back():
    graph = import_graph()
    assert "stage5.simulator" not in graph["stage5.simulator_plots"]
    assert "stage5.exercise_support" not in graph["stage5.grading.ex02"]
    assert "stage5.grading.ex02" in graph["stage5.exercise_support"]  # the learner's door is the top of it


# ------------------------------------------------------------------------------------ the checker can fail
def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_reader_sees_imports_inside_functions_relative_ones_and_import_module(tmp_path):
    root = _package(tmp_path, {
        "a.py": "def f():\n    from pkg.sub import c\n    import pkg.b\n",
        "b.py": "import importlib\n\ndef g():\n    return importlib.import_module('pkg.a'), __import__('pkg.sub.d')\n",
        "sub/__init__.py": "from . import c\n",
        "sub/c.py": "from ..b import g\nfrom .d import X\n",
        "sub/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\nX = 1\n",
    })
    assert import_graph(root) == {"pkg": set(), "pkg.a": {"pkg.sub.c", "pkg.b"}, "pkg.b": {"pkg.a", "pkg.sub.d"},
                                  "pkg.sub": {"pkg.sub.c"}, "pkg.sub.c": {"pkg.b", "pkg.sub.d"},
                                  "pkg.sub.d": {"pkg.a"}}
    assert circles(import_graph(root)) == [["pkg.a", "pkg.b", "pkg.sub.c", "pkg.sub.d"]]


def test_a_circle_through_a_lazy_import_is_found(tmp_path):
    """The simulator's old tie: a module-level import one way, a function-level import back."""
    root = _package(tmp_path, {"sim.py": "from pkg.plots import draw\n",
                               "plots.py": "def draw():\n    from pkg.sim import resolve\n",
                               "cost.py": ""})
    assert circles(import_graph(root)) == [["pkg.plots", "pkg.sim"]]


@pytest.mark.parametrize("docstring, files, wrong", [
    ("1. ``low`` - x\n2. ``eng/`` - y\n3. ``eng/bench*`` - z\n4. ``top`` - w\n",
     {"low.py": "", "eng/__init__.py": "", "eng/core.py": "import pkg.low\n", "eng/bench.py": "import pkg.eng.core\n",
      "top.py": "from pkg.eng import bench\n"}, []),
    ("1. ``low`` - x\n2. ``eng/`` - y\n3. ``eng/bench*`` - z\n4. ``top`` - w\n",
     {"low.py": "", "eng/__init__.py": "", "eng/core.py": "def f():\n    import pkg.top\n",
      "eng/bench.py": "", "top.py": ""}, ["pkg.eng.core (floor 2) imports pkg.top (floor 4)"]),
    ("1. ``low`` - x\n2. ``eng/`` - y\n3. ``eng/bench*`` - z\n4. ``top`` - w\n",
     {"low.py": "", "eng/__init__.py": "", "eng/core.py": "from pkg.eng.bench import run\n",
      "eng/bench.py": "", "top.py": ""}, ["pkg.eng.core (floor 2) imports pkg.eng.bench (floor 3)"]),
])
def test_the_floor_check_names_an_import_that_goes_up(tmp_path, docstring, files, wrong):
    root = _package(tmp_path, files)
    (root / "__init__.py").write_text(f'"""Floors.\n\n{docstring}"""\n')
    assert upward_imports(root) == wrong


def test_a_module_on_no_floor_is_refused(tmp_path):
    root = _package(tmp_path, {"low.py": "", "stray.py": ""})
    (root / "__init__.py").write_text('"""Floors.\n\n1. ``low`` - x\n"""\n')
    with pytest.raises(AssertionError, match="stray"):
        upward_imports(root)


# ------------------------------------------------------------------------------------ names notebooks import
def _notebook_imports() -> list[tuple[str, str, str]]:
    """(notebook, module, name) for every ``from stage5... import name`` in the book's, the release's and the
    solutions' code cells (the names a move must keep where they were)."""
    import json

    found = []
    root = STAGE5.parent
    for nb in sorted([*root.glob("book/*.ipynb"), *root.glob("exercises/*/*.ipynb"), *root.glob("solutions/*/*.ipynb")]):
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            source = "".join(line for line in "".join(cell["source"]).splitlines(keepends=True)
                             if not line.lstrip().startswith(("%", "!")))
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("stage5"):
                    found += [(nb.relative_to(root).as_posix(), node.module, a.name) for a in node.names]
    return found


def test_every_name_a_notebook_imports_from_stage5_is_still_there():
    import importlib

    seen = _notebook_imports()
    assert ("exercises/ex02/ex02.ipynb", "stage5.exercise_support", "tiny_model") in seen  # the reader reads them
    missing = []
    for notebook, module, name in seen:
        owner = importlib.import_module(module)
        if not hasattr(owner, name) and f"{module}.{name}" not in module_files(STAGE5):
            missing.append(f"{notebook}: from {module} import {name}")
    assert not missing, missing
