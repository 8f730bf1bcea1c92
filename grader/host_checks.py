"""Run the hidden part of a test cell in the grader, not in the learner's kernel (see stage5/grading/remote.py).

A test cell's hidden block (between ``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS``) is cut from what the
kernel executes. The grader executes it in a namespace built from the notebook's instructor cells (locked, restored
from the gradebook), with the learner's names it reads fetched from the kernel as data and the learner's functions
as :class:`~stage5.grading.remote.RemoteFunction`. Its verdict is added to the cell as a one-line error.

Exercise 2's blocks drive the learner's caches and loops through ``_kernel`` (a
:class:`~stage5.grading.remote.Kernel`): trusted probes run them in the kernel and hand back traces as data, which
the grader compares with the reference engine's.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import json
import re
from collections.abc import Callable
from typing import Any

from nbclient.exceptions import DeadKernelError
from nbformat import NotebookNode

from stage5.grading.remote import Kernel, RemoteFunction, decode

HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS[^\n]*\n(.*?)^[ \t]*### END HIDDEN TESTS[^\n]*\n?", re.M | re.S)
KERNEL_ONLY: frozenset[str] = frozenset()  # names whose hidden blocks must run in the kernel: none since ex02 hands over traces


def _meta(cell: NotebookNode) -> dict[str, Any]:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def split_hidden(cell: NotebookNode) -> tuple[str, str] | None:
    """(source without the hidden block, hidden code) for a test cell whose hidden block can run in the grader."""
    meta = _meta(cell)
    if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
        return None
    match = HIDDEN.search(cell.source)
    if match is None:
        return None
    hidden = match.group(1)
    try:
        names = {n.id for n in ast.walk(ast.parse(hidden)) if isinstance(n, ast.Name)} | {
            a.name for n in ast.walk(ast.parse(hidden)) if isinstance(n, ast.ImportFrom) for a in n.names}
    except SyntaxError:
        return None
    if names & KERNEL_ONLY:
        return None
    return cell.source[:match.start()] + cell.source[match.end():], hidden


def _free_names(code: str) -> set[str]:
    """Names the code reads that it does not bind itself (over-approximate: the kernel reports missing ones)."""
    tree = ast.parse(code)
    bound, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, (ast.Store, ast.Del)) else read).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return read - bound - set(dir(builtins))


class HostChecks:
    """The grader's side of one notebook's hidden tests. ``ask(expression)`` evaluates an expression in the
    learner's kernel and returns its value as a string (raising DeadKernelError when the kernel is gone)."""

    def __init__(self, cells: list[NotebookNode], ask: Callable[[str], str]):
        self.cells, self.ask = cells, ask
        self._trusted: dict[str, Any] | None = None

    def trusted_namespace(self) -> dict[str, Any]:
        """The instructor's own cells (setup, given data), run once in the grader."""
        if self._trusted is None:
            ns: dict[str, Any] = {"__name__": "__hidden_tests__"}
            for cell in self.cells:
                meta = _meta(cell)
                if cell.cell_type == "code" and meta.get("locked") and not meta.get("grade") \
                        and not meta.get("solution"):
                    with contextlib.redirect_stdout(io.StringIO()):
                        exec(compile(cell.source, f"<instructor cell {meta.get('grade_id')}>", "exec"), ns)  # noqa: S102
            self._trusted = ns
        return self._trusted

    def run(self, hidden: str) -> str | None:
        """None when the hidden checks pass, else the learner-safe ``Name: message`` of the first failure."""
        ns = dict(self.trusted_namespace())
        ns["_kernel"] = Kernel(self._call)
        wanted = sorted(_free_names(hidden) - set(ns))
        if wanted:
            expr = f"__import__('stage5.grading.remote', fromlist=['values']).values({wanted!r})"
            try:
                answers = json.loads(self.ask(expr))
            except (ValueError, TypeError):
                return "GradingError: your notebook's kernel did not hand over its answers"
            for name in wanted:
                got = answers.get(name, {}) if isinstance(answers, dict) else {}
                if got.get("function"):
                    ns[name] = RemoteFunction(name, self._call)
                elif "value" in got:
                    try:
                        ns[name] = decode(got["value"])
                    except (ValueError, TypeError, KeyError):
                        return f"GradingError: {name} could not be read"
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(hidden, "<hidden test>", "exec"), ns)  # noqa: S102 - the instructor's own code
        except DeadKernelError:
            raise
        except Exception as err:  # noqa: BLE001 - every failure becomes the cell's one-line error
            return f"{type(err).__name__}: {err}"
        return None

    def _call(self, request: str) -> str:
        expr = f"__import__('stage5.grading.remote', fromlist=['serve']).serve({request!r})"
        return self.ask(expr)
