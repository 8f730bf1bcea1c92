"""ex04's hidden tests catch every rule the exercise states: each mutant of the solution (one rule broken the way a
learner might break it) loses marks in the cell that grades that rule; the solution gets full marks; the release
none.

In-process: the notebook's cells run here in order, each graded cell whole (its visible and hidden tests, the hidden
ones driving the learner's functions through :class:`stage5.grading.ex04.LocalKernel` with the reference routing
switched off, as in the grader's kernel). The grader's own run through the sandbox is tests/test_grading_ex04.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# (what the mutant breaks, the answer cell, the solution's text, what replaces it, the cells it must fail)
MUTANTS = [
    ("ignores the load bound", "route_answer", 'if replica["load"] > least + load_bound:', "if False:",
     {"p2_bound", "p3_fleet"}),
    ("routes by a hash of the whole prompt", "route_answer", "n = len(replicas)\n",
     "n = len(replicas)\n    return hash(tuple(prompt_blocks)) % n\n", {"p2_prefix", "p2_bound", "p2_ties", "p3_fleet"}),
    ("reads the previous replica's blocks", "route_answer", 'held_blocks(prompt_blocks, replica["blocks"])',
     'held_blocks(prompt_blocks, replicas[i - 1]["blocks"])', {"p2_prefix", "p3_fleet"}),
    ("reads replica 0's blocks for every replica", "route_answer", 'held_blocks(prompt_blocks, replica["blocks"])',
     'held_blocks(prompt_blocks, replicas[0]["blocks"])', {"p2_prefix", "p3_fleet"}),
    ("ties go to the lowest index, not in turn", "route_answer", "i = (last_pick + step) % n", "i = step - 1",
     {"p2_ties", "p3_fleet"}),
    ("the turn starts at the last pick, not after it", "route_answer", "i = (last_pick + step) % n",
     "i = (last_pick + step - 1) % n", {"p2_ties", "p3_fleet"}),
    ("ties on the prefix ignore the load", "route_answer", 'replica["load"])', "0)", {"p2_ties", "p3_fleet"}),
    ("the lightest load first, the prefix only as a tie-break", "route_answer",
     'key = (-held_blocks(prompt_blocks, replica["blocks"]), replica["load"])',
     'key = (replica["load"], -held_blocks(prompt_blocks, replica["blocks"]))', {"p2_prefix", "p3_fleet"}),
    ("the bound excludes its edge", "route_answer", 'if replica["load"] > least + load_bound:',
     'if replica["load"] >= least + load_bound:', {"p2_bound", "p3_fleet"}),
    ("the bound above replica 0's load, not the least", "route_answer",
     'least = min(r["load"] for r in replicas)', 'least = replicas[0]["load"]', {"p2_bound", "p3_fleet"}),
    ("the turn counted among the replicas in bounds only", "route_answer",
     '    for step in range(1, n + 1):  # in turn after last_pick, so the first of equals wins\n'
     '        i = (last_pick + step) % n\n        replica = replicas[i]\n'
     '        if replica["load"] > least + load_bound:\n            continue\n',
     '    eligible = [j for j in range(n) if replicas[j]["load"] <= least + load_bound]\n'
     '    for i in sorted(eligible, key=lambda j: (j - last_pick - 1) % len(eligible)):\n'
     '        replica = replicas[i]\n', {"p2_ties", "p3_fleet"}),
    ("blocks counted past the first missing one", "held_answer", "            break", "            continue",
     {"p1_held", "p2_prefix"}),
]


# Graded through the sandbox instead, as fixtures (tests/submissions/make_fixtures_ex04.py): the grader's own run,
# tests/test_grading_ex04.py, checks the cells they fail.
SANDBOXED = {"ignores the load bound", "routes by a hash of the whole prompt", "reads the previous replica's blocks",
             "ties go to the lowest index, not in turn"}


def _notebook(folder: str) -> list[dict]:
    nb = json.loads((REPO / folder / "ex04" / "ex04.ipynb").read_text())
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def _grade(cells: list[dict], answers: dict[str, str] | None = None, space: dict | None = None
           ) -> tuple[int, set[str]]:
    """Run the notebook's code cells in order in one namespace (``space``, or a new one; cells replaced by
    ``answers``, keyed by grade id, or by cell id for a cell without one): (points of the graded cells that pass, the graded cells that fail)."""
    space = {"__name__": "__main__"} if space is None else space
    points, failed = 0, set()
    for cell in cells:
        meta = cell["metadata"].get("nbgrader", {})
        source = (answers or {}).get(meta.get("grade_id", cell.get("id")), "".join(cell["source"]))
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(source, meta.get("grade_id", "cell"), "exec"), space)  # noqa: S102
        except Exception:  # noqa: BLE001 - a failing cell, as nbgrader sees it
            if meta.get("grade"):
                failed.add(meta["grade_id"])
            continue
        if meta.get("grade"):
            points += meta["points"]
    return points, failed


@pytest.fixture(scope="module")
def solution() -> list[dict]:
    return _notebook("solutions")


@pytest.fixture(scope="module")
def measured(solution) -> dict:
    """The solution's measurement: a mutant's run of it is not graded (only the hidden fleets are), so each mutant
    reuses it instead of serving the workload again."""
    space: dict = {"__name__": "__main__"}
    _grade(solution, space=space)
    return space["results"]


def _answer(cells: list[dict], gid: str) -> str:
    return next("".join(c["source"]) for c in cells if c["metadata"].get("nbgrader", {}).get("grade_id") == gid)


def test_the_solution_gets_full_marks_and_the_release_none(solution, measured):
    full = sum(c["metadata"]["nbgrader"].get("points", 0) for c in solution if "nbgrader" in c["metadata"])
    assert _grade(solution, {"measurement": ""}, {"results": measured}) == (full, set())
    points, failed = _grade(_notebook("exercises"))
    assert points == 0 and len(failed) == 6


@pytest.mark.parametrize("mutant", [m for m in MUTANTS if m[0] not in SANDBOXED],
                         ids=[m[0] for m in MUTANTS if m[0] not in SANDBOXED])
def test_each_broken_rule_loses_marks_where_that_rule_is_graded(solution, measured, mutant):
    _, gid, old, new, must_fail = mutant
    source = _answer(solution, gid)
    assert source.count(old) == 1, old
    _, failed = _grade(solution, {gid: source.replace(old, new), "measurement": ""}, {"results": measured})
    assert must_fail <= failed, failed


def test_numpy_integers_are_answers_in_process_as_through_the_sandbox(solution, measured):
    """The sandbox's protocol carries a numpy integer as the int it stands for; the in-process kernel (these tests,
    an instructor's run) must read it alike, or the two would grade one notebook differently."""
    held, route = _answer(solution, "held_answer"), _answer(solution, "route_answer")
    answers = {"held_answer": held.replace("    return held\n", "    import numpy\n    return numpy.int64(held)\n"),
               "route_answer": route.replace("    return best[1]\n",
                                             "    import numpy\n    return numpy.int64(best[1])\n"),
               "measurement": ""}
    assert answers["held_answer"] != held and answers["route_answer"] != route
    full = sum(c["metadata"]["nbgrader"].get("points", 0) for c in solution if "nbgrader" in c["metadata"])
    assert _grade(solution, answers, {"results": measured}) == (full, set())


def test_the_hidden_fleets_are_what_the_exercise_says():
    """The notebook promises hidden fleets with a pool small enough to preempt, a load bound and the tightest one."""
    from stage5.engine.fleet import route_by_prefix
    from stage5.grading import ex04

    tight = ex04._serve(*ex04.FLEET_RUNS[0], route_by_prefix)
    assert tight.preemptions > 0 and "load_bound" not in ex04.FLEET_RUNS[0][1]
    assert sorted(config.get("load_bound", math.inf) for _, config in ex04.FLEET_RUNS) == [0.0, 1.0, math.inf]
