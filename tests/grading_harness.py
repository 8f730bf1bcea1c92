"""The one harness every grading test uses: grade a folder of fixture submissions once, then check the results.

A test module grades its class in a module-scoped fixture (:func:`grade_classes`) and asserts with the helpers
below, so the release check, the score check and the feedback checks are written once for every assignment.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "grader"))

import collect  # noqa: E402  (grader/collect.py: whose file is which)
import grade  # noqa: E402  (grader/grade.py: what `make grade` runs)
import intake  # noqa: E402  (grader/intake.py: what a submitted notebook must be)
import workflow  # noqa: E402
from workflow import Course, Result  # noqa: E402

FIXTURES = REPO / "tests" / "submissions"
JOBS = 2  # submissions graded at once: CI has two cores

__all__ = ["REPO", "Course", "collect", "grade", "intake", "workflow", "Result", "check_feedback_has", "check_release_is_fresh", "check_result", "copy_fixtures", "grade_classes",
           "release_setup_source"]


def copy_fixtures(name: str, dest: Path, only: list[str] | None = None) -> Path:
    """A copy of tests/submissions/<name> (or of the files named in ``only``) to grade: grading never reads the
    committed fixtures in place."""
    if only is None:
        shutil.copytree(FIXTURES / name, dest)
    else:
        dest.mkdir(parents=True)
        for file in only:
            shutil.copyfile(FIXTURES / name / file, dest / file)
    return dest


def grade_classes(root: Path, assignments: dict[str, str], jobs: int = JOBS, only: dict[str, list[str]] | None = None,
                  **config) -> tuple[Course, dict[tuple[str, str], Result]]:
    """Grade each fixture folder (``{assignment: folder under tests/submissions}``, or only the files
    ``only[assignment]`` in it) with one gradebook under ``root``; results keyed by (assignment, student)."""
    course = Course(root / "work", **config)
    results = {}
    for assignment, folder in assignments.items():
        inbox = copy_fixtures(folder, root / f"inbox_{assignment}", (only or {}).get(assignment))
        for r in course.grade(inbox, assignment, jobs=jobs):
            results[(assignment, r.student)] = r
    return course, results


def check_result(r: Result, score: float, failed: set[str], auto_max: float, manual: float) -> None:
    """Graded, with this score, these failed checks and these maxima (autograded, still to mark by hand)."""
    assert (r.auto_max, r.manual_pending) == (auto_max, manual), r.line()
    assert r.status in ("ok", "invalid") and r.score == score, r.line()
    assert set(r.failed) == failed, r.line()


def check_feedback_has(course: Course, student: str, assignment: str, words: list[str]) -> None:
    text = course.feedback_text(student, assignment)
    for w in words:
        assert w in text, f"{student}: feedback lacks {w!r}"


def check_release_is_fresh(course: Course, assignment: str) -> None:
    """grade() regenerates the release from solutions/; the committed exercises/ must be identical."""
    fresh = json.loads((course.work / "release" / assignment / f"{assignment}.ipynb").read_text())
    committed = json.loads((REPO / "exercises" / assignment / f"{assignment}.ipynb").read_text())
    assert fresh == committed, (f"exercises/{assignment} is stale: run "
                                f"`.venv/bin/python grader/grade.py release --assignment {assignment}`")


def release_setup_source(assignment: str) -> str:
    """The first code cell (the setup cell) of an assignment's committed release."""
    nb = json.loads((REPO / "exercises" / assignment / f"{assignment}.ipynb").read_text())
    return "".join(next(c for c in nb["cells"] if c["cell_type"] == "code")["source"])
