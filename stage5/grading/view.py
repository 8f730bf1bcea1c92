"""The course package as a learner's kernel sees it: the functions its exercise puts off limits are not there.

Switching the course's answers off inside the kernel (:mod:`.blocking`) runs in the learner's own interpreter, so
the learner's code can switch it back on (issue 48: one assignment to
``sys.modules["stage5.grading.remote"].unavailable``), or answer the grader's requests itself. So the sandbox
mounts, over each module of the course package that defines one, a copy in which every off-limits function or
method of the exercise being graded (:data:`BLOCKED`) has its body replaced by a raise of
:class:`~stage5.grading.blocking.UnavailableError`: their code is in neither the kernel's memory nor its files,
and nothing the kernel runs can bring it back (a pasted copy is the review column's to flag).

The grader builds the copies (:func:`build`) from the package it imports itself; ``bwrap_command`` binds each one
over its original, read-only. A cell of the release that runs such a function (ex03's comparison with the
simulator, which runs the reference diagnosis) fails under grading with that one line; it earns no points. A
visible check that needs the reference reads it from data computed when the release was made instead (exercise 2's
schedule check: :mod:`.ex02_visible`).
"""

from __future__ import annotations

import ast
import atexit
import functools
import hashlib
import inspect
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from .blocking import _resolve
from .ex02 import ATTENTION_BLOCKED
from .ex03 import DIAGNOSIS_BLOCKED
from .ex04 import ROUTING_BLOCKED

#: Per assignment: what its kernel's course package lacks, as its Rules put it off limits and its hidden tests
#: switch off (exercise 1's lists are its hidden tests'; tests/test_grading_view.py checks they stay covered).
BLOCKED: dict[str, tuple[str, ...]] = {
    "ex01": ("stage5.models.ModelConfig.kv_bytes_per_token", "stage5.cost.Deployment.kv_bytes_per_token",
             "stage5.cost.kv_bytes_per_sequence", "stage5.cost.kv_traffic_bytes", "stage5.cost.kv_budget_bytes",
             "stage5.cost.max_concurrency", "stage5.cost.Deployment.weight_total_bytes",
             "stage5.cost.decode_floor_s", "stage5.cost.decode_step", "stage5.cost.tpot_s",
             "stage5.cost.weight_bytes_read"),
    # the engine, allocators, scheduler and attention backend; the visible schedule check compares with the
    # reference runs shipped as data (.ex02_visible), and generate() stays
    "ex02": ATTENTION_BLOCKED,
    "ex03": DIAGNOSIS_BLOCKED,
    "ex04": ROUTING_BLOCKED,
}


def _definition(target: str) -> tuple[Path, str]:
    """(the file that defines ``target``, its qualified name there): found from the object itself, so a function
    a module re-exports is cut where it is written."""
    owner, name = _resolve(target)
    obj = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    if isinstance(obj, property):
        obj = obj.fget
    obj = inspect.unwrap(obj)
    path = inspect.getsourcefile(obj)
    if path is None:
        raise ValueError(f"no source file for {target}")
    return Path(path).resolve(), obj.__qualname__


def _stub_body(target: str, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    message = (f"your code called {target}, which computes this answer for you; the exercise's Rules put it off "
               "limits, so it is not available while the exercise is graded")
    node.body = ast.parse(f"raise __import__('stage5.grading.blocking', fromlist=['UnavailableError'])"
                          f".UnavailableError({message!r})").body


def stub_source(source: str, targets: dict[str, str]) -> tuple[str, set[str]]:
    """``source`` with the body of each function or method named in ``targets`` (qualified name -> target) made a
    raise; returns the new source and the qualified names found."""
    tree = ast.parse(source)
    found: set[str] = set()

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and prefix + node.name in targets:
                _stub_body(targets[prefix + node.name], node)
                found.add(prefix + node.name)
            elif isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")

    visit(tree.body, "")
    return ast.unparse(tree) + "\n", found


def views(targets: Iterable[str], folder: Path) -> dict[Path, Path]:
    """{original module file: its stubbed copy under ``folder``} for ``targets``; raises ValueError when a target
    is defined nowhere the view can cut (a course bug, found before any learner runs)."""
    by_file: dict[Path, dict[str, str]] = {}
    for target in targets:
        path, qualname = _definition(target)
        by_file.setdefault(path, {})[qualname] = target
    out = {}
    for path, names in sorted(by_file.items()):
        source, found = stub_source(path.read_text(), names)
        if set(names) - found:
            raise ValueError(f"cannot cut {sorted(set(names) - found)} out of {path}")
        copy = folder / hashlib.sha256(str(path).encode()).hexdigest()[:16] / path.name
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(source)
        copy.chmod(0o644)
        copy.parent.chmod(0o755)
        out[path] = copy
    return out


@functools.cache
def build(assignment: str | None) -> dict[Path, Path]:
    """The stubbed module files for ``assignment``'s kernel (none for an assignment with no :data:`BLOCKED` row),
    made once per grading process in a folder of their own."""
    targets = BLOCKED.get(assignment or "")
    if not targets:
        return {}
    folder = Path(tempfile.mkdtemp(prefix=f"stage5-view-{assignment}-"))
    folder.chmod(0o755)  # a kernel dropped to its own uid reads the copies
    atexit.register(shutil.rmtree, folder, True)
    return views(targets, folder)


def hidden_bytecode(originals: Iterable[Path]) -> list[Path]:
    """The cached bytecode of ``originals`` (``__pycache__/<name>.*.pyc``): it holds the real code, so the sandbox
    binds an empty file over each (Python then compiles the stubbed copy instead)."""
    return sorted(p for path in originals for p in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"))
