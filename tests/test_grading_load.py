"""A busy machine fails no one: the solved fixture of every assignment scores full marks while three CPU-bound
processes compete for the two cores (the limits follow CPU time, not the wall clock)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from grading_harness import check_result, grade_classes

# assignment: (fixture file, student, autograded points, points to mark by hand)
SOLVED = {"ex01": ("ada lovelace_123_ex01.ipynb", "ada_lovelace_123", 20, 2),
          "ex02": ("solved_ex02.ipynb", "solved", 16, 4),
          "ex03": ("solved_ex03.ipynb", "solved", 16, 3),
          "clearing": ("solved_clearing.ipynb", "solved", 17, 0)}  # written answers as released: scored 0
COMPETITORS = 3


@pytest.fixture(scope="module")
def graded_under_load(tmp_path_factory):
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(COMPETITORS)]
    try:
        return grade_classes(tmp_path_factory.mktemp("load"), {a: a for a in SOLVED},
                             only={a: [v[0]] for a, v in SOLVED.items()})
    finally:
        for p in burners:
            p.kill()
            p.wait()


@pytest.mark.parametrize("assignment", sorted(SOLVED))
def test_solved_scores_full_marks_on_a_busy_machine(graded_under_load, assignment):
    _, results = graded_under_load
    _, student, auto_max, manual = SOLVED[assignment]
    check_result(results[(assignment, student)], auto_max, set(), auto_max, manual)
    assert not results[(assignment, student)].reasons, results[(assignment, student)].line()
