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
import re
from collections.abc import Callable, Mapping
from typing import Any

from nbclient.exceptions import DeadKernelError
from nbformat import NotebookNode

from stage5.grading.checks import GradingError
from stage5.grading.protocol import MAX_REPLY_CHARS, ProtocolError, decode, loads, one_line
from stage5.grading.remote import Kernel, RemoteFunction

HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS[^\n]*\n(.*?)^[ \t]*### END HIDDEN TESTS[^\n]*\n?", re.M | re.S)
VERDICT_CHARS = 1500  # a verdict longer than this is cut (the checks' own messages are far shorter)
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


def instructor_cells(resources: Any) -> dict[str, str] | None:
    """{grade_id: source} of the notebook's locked cells as the gradebook holds them (the instructor's code), from
    nbgrader's ``resources`` during autograde; None outside autograde (no gradebook to ask)."""
    info = (resources or {}).get("nbgrader") or {}
    if not all(info.get(k) for k in ("db_url", "assignment", "notebook")):
        return None
    from nbgrader.api import Gradebook

    with Gradebook(info["db_url"]) as gb:
        notebook = gb.find_notebook(info["notebook"], info["assignment"])
        return {c.name: c.source for c in notebook.source_cells if c.locked and c.cell_type == "code"}


class HostChecks:
    """The grader's side of one notebook's hidden tests. ``ask(expression)`` evaluates an expression in the
    learner's kernel and returns its value as a string (raising DeadKernelError when the kernel is gone).

    ``instructor`` ({grade_id: source}, :func:`instructor_cells`) is what the gradebook holds: only a cell whose
    source is exactly that is run here (its setup code, its hidden block), so a cell a learner added or marked
    up never runs in the grader. None (a notebook checked outside autograde) trusts the cells' metadata."""

    def __init__(self, cells: list[NotebookNode], ask: Callable[[str], str],
                 instructor: Mapping[str, str] | None = None):
        self.cells, self.ask, self.instructor = cells, ask, instructor
        self._trusted: dict[str, Any] | None = None
        self.refused = False  # the last run refused a reply it could not read as data (the grader's boundary)

    def is_instructors(self, cell: NotebookNode) -> bool:
        """Is ``cell`` a locked cell of the instructor's, unchanged?"""
        meta = _meta(cell)
        if cell.get("cell_type") != "code" or not meta.get("locked"):
            return False
        if self.instructor is None:
            return True
        gid = meta.get("grade_id")
        return isinstance(gid, str) and self.instructor.get(gid) == cell.get("source")

    def split(self, cell: NotebookNode) -> tuple[str, str] | None:
        """:func:`split_hidden` for a test cell of the instructor's; None for any other cell."""
        return split_hidden(cell) if self.is_instructors(cell) else None

    def trusted_namespace(self) -> dict[str, Any]:
        """The instructor's own cells (setup, given data), run once in the grader."""
        if self._trusted is None:
            ns: dict[str, Any] = {"__name__": "__hidden_tests__"}
            for cell in self.cells:
                meta = _meta(cell)
                if self.is_instructors(cell) and not meta.get("grade") and not meta.get("solution"):
                    with contextlib.redirect_stdout(io.StringIO()):
                        exec(compile(cell.source, f"<instructor cell {meta.get('grade_id')}>", "exec"), ns)  # noqa: S102
            self._trusted = ns
        return self._trusted

    def run(self, hidden: str) -> str | None:
        """None when the hidden checks pass, else the one-line ``Name: message`` of the first failure, in the
        grader's words. Nothing the kernel sends escapes as an exception (a reply too deep, too long, not JSON,
        not data: a failed check); only DeadKernelError does, so the caller restarts the kernel."""
        ns = dict(self.trusted_namespace())  # the instructor's code: its failure is the grader's, not a verdict
        self.refused = False
        try:
            return self._run(hidden, ns)
        except DeadKernelError:
            raise
        except ProtocolError as err:  # a reply that is not data: the check fails, and the grader says it refused
            self.refused = True
            return f"GradingError: {one_line(err, VERDICT_CHARS)}"
        except GradingError as err:
            return f"GradingError: {one_line(err, VERDICT_CHARS)}"
        except BaseException as err:  # noqa: BLE001 - RecursionError, MemoryError, SyntaxError, ... from a reply
            if isinstance(err, (KeyboardInterrupt, SystemExit)):
                raise
            return f"GradingError: the grader could not check this answer ({type(err).__name__} in the grader)"

    def _run(self, hidden: str, ns: dict[str, Any]) -> str | None:
        ns["_kernel"] = Kernel(self._call)
        wanted = sorted(_free_names(hidden) - set(ns))
        if wanted:
            expr = f"__import__('stage5.grading.remote', fromlist=['values']).values({wanted!r})"
            try:
                answers = loads(self._asked(expr), limit=4 * MAX_REPLY_CHARS)
                if not isinstance(answers, dict):
                    raise ProtocolError("not a dict")
            except ProtocolError:
                raise ProtocolError("your notebook's kernel did not hand over its answers") from None
            for name in wanted:
                got = answers.get(name)
                got = got if isinstance(got, dict) else {}
                if got.get("function") is True:
                    ns[name] = RemoteFunction(name, self._call)
                elif "value" in got:
                    try:
                        ns[name] = decode(got["value"])
                    except ProtocolError as err:
                        raise ProtocolError(f"{name} could not be read: {err}") from None
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(hidden, "<hidden test>", "exec"), ns)  # noqa: S102 - the instructor's own code
        except (DeadKernelError, ProtocolError):
            raise
        except GradingError as err:
            return f"GradingError: {one_line(err, VERDICT_CHARS)}"
        except Exception as err:  # noqa: BLE001 - every failure becomes the cell's one-line error
            # the exception is the grader's (the hidden test's own or a check's); its text may quote a learner's
            # value, so it is kept to one inert line
            return f"{type(err).__name__}: {one_line(err, VERDICT_CHARS)}"
        return None

    def _asked(self, expression: str) -> str:
        """``ask``, with anything but a dead kernel (a reply the grader could not even parse) as no answer."""
        try:
            return self.ask(expression)
        except DeadKernelError:
            raise
        except (Exception, RecursionError, MemoryError):  # noqa: BLE001 - e.g. SyntaxError from 5,000 brackets
            raise ProtocolError("no answer") from None

    def _call(self, request: str) -> str:
        expr = f"__import__('stage5.grading.remote', fromlist=['serve']).serve({request!r})"
        return self._asked(expr)
