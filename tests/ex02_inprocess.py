"""Exercise 2's hidden checks run in this process on a (possibly mutated) copy of the reference solution.

No nbgrader and no kernel: the solution's setup and answer cells are executed in one namespace, and each test cell's
hidden block then runs in that namespace, where ``kernel_of(globals())`` finds no ``_kernel`` and drives the
learner's classes through :class:`stage5.grading.ex02.LocalKernel` (the same probes and comparisons a graded
submission gets, without the process boundary). Used by the mutation test (tests/test_ex02_mutants.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS[^\n]*\n(.*?)^[ \t]*### END HIDDEN TESTS[^\n]*\n?", re.M | re.S)


@cache
def cells() -> tuple[tuple[str, str, dict[str, Any]], ...]:
    """(grade_id, source, nbgrader metadata) of every code cell of the ex02 solution, in order."""
    nb = json.loads((REPO / "solutions" / "ex02" / "ex02.ipynb").read_text())
    out = []
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            meta = cell["metadata"].get("nbgrader", {})
            out.append((meta.get("grade_id", ""), "".join(cell["source"]), meta))
    return tuple(out)


def answer(gid: str) -> str:
    return next(src for g, src, _ in cells() if g == gid)


def hidden_blocks() -> dict[str, str]:
    """The hidden block of each test cell, by grade_id, in notebook order."""
    out = {}
    for gid, src, meta in cells():
        match = HIDDEN.search(src) if meta.get("grade") else None
        if match:
            out[gid] = match.group(1)
    return out


def namespace(sources: dict[str, str] | None = None, measure: bool = False) -> dict[str, Any]:
    """The learner's namespace after running the setup, given and answer cells (``sources`` replaces some answer
    cells' code). The measurement (``measure_answer``, four full runs) only when ``measure``."""
    ns: dict[str, Any] = {"__name__": "__ex02__"}
    for gid, src, meta in cells():
        if meta.get("grade") or not gid or (gid == "measure_answer" and not measure):
            continue
        code = (sources or {}).get(gid, src)
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, f"<ex02 {gid}>", "exec"), ns)  # noqa: S102 - the course's own solution
    return ns


class InProcessKernel:
    """:class:`stage5.grading.ex02.LocalKernel` for the course's own code: the same probes, with the reference
    switched off the shallow way (a mutant does not hide references to it, so the deep search of every referrer,
    most of a probe's CPU time in a test process, buys nothing here)."""

    def __init__(self, space: dict[str, Any]):
        self.space = space

    def drive(self, label: str, driver: str, names: list[str], spec: dict[str, Any], blocked: Any = None) -> Any:
        from stage5.grading import SERVING_BLOCKED, GradingError, _learner_failures, unavailable
        from stage5.grading.ex02 import drive

        missing = [n for n in names if n not in self.space]
        if missing:
            raise GradingError(f"{label}: {missing[0]} is not defined: run the cell that defines it")
        with unavailable(*(blocked or SERVING_BLOCKED)), _learner_failures(label, label):
            return drive(driver, label, [self.space[n] for n in names], dict(spec))


def run_hidden(ns: dict[str, Any], gid: str) -> str | None:
    """None when the hidden block of test cell ``gid`` passes, else ``Name: message`` of its first failure."""
    code = hidden_blocks()[gid]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, f"<hidden {gid}>", "exec"), {**ns, "_kernel": InProcessKernel(ns)})  # noqa: S102
    except Exception as err:  # noqa: BLE001 - the failure is the observation
        return f"{type(err).__name__}: {err}"
    return None


def first_failure(sources: dict[str, str], order: list[str] | None = None) -> tuple[str, str] | None:
    """(grade_id, message) of the first hidden check that fails on the solution with ``sources`` swapped in,
    trying the cells in ``order`` first (the ones nearest the change are cheapest to fail), or None."""
    try:
        ns = namespace(sources)
    except Exception as err:  # noqa: BLE001 - a mutant that does not even define its names is caught
        return ("definition", f"{type(err).__name__}: {err}")
    gids = list(hidden_blocks())
    gids = [g for g in (order or []) if g in gids] + [g for g in gids if g not in (order or [])]
    for gid in gids:
        if gid == "p4_table":
            try:
                ns = namespace(sources, measure=True)
            except Exception as err:  # noqa: BLE001 - the learner's measurement crashed: p4 fails
                return (gid, f"{type(err).__name__}: {err}")
        failure = run_hidden(ns, gid)
        if failure:
            return gid, failure
    return None


def graded_failures(sources: dict[str, str]) -> dict[str, str]:
    """Each test cell that fails (its visible part or its hidden block) on the solution with ``sources`` swapped in,
    with its message: what nbgrader would mark, for choosing a fixture's expectations."""
    out: dict[str, str] = {}
    ns: dict[str, Any] = {"__name__": "__ex02__"}
    for gid, src, meta in cells():
        code = (sources or {}).get(gid, src)
        if meta.get("grade"):
            match = HIDDEN.search(code)
            visible = code[:match.start()] + code[match.end():] if match else code
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(compile(visible, f"<visible {gid}>", "exec"), ns)  # noqa: S102
            except Exception as err:  # noqa: BLE001
                out[gid] = f"visible {type(err).__name__}: {err}"
                continue
            if match:
                failure = run_hidden(ns, gid)
                if failure:
                    out[gid] = failure
        elif code.strip():
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(compile(code, f"<ex02 {gid}>", "exec"), ns)  # noqa: S102
            except Exception as err:  # noqa: BLE001
                out[f"cell {gid}"] = f"{type(err).__name__}: {err}"
    return out
