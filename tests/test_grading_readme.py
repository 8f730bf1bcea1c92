"""The README's instructor steps, followed as written, end to end: collect into grader/inbox (created by the first
`make grade`), `make grade`, mark the written answer by hand, `make grade` again, then return the feedback.

`make grade` is `grader/grade.py`'s main() with the working folder moved to a temporary one; the hand-marking is
what Formgrader does, through nbgrader's Gradebook API.
"""

from __future__ import annotations

import re
import shutil

import pytest
from grading_harness import REPO, grade, workflow
from nbgrader.api import Gradebook

WRITTEN = "c1_written"  # ex01's written answer, 2 points, marked by hand


def _instructor_steps() -> list[str]:
    """The first column of the README's instructor table, in order."""
    section = REPO.joinpath("README.md").read_text().split("## For instructors", 1)[1].split("\n## ", 1)[0]
    return [row.split("|")[1].strip() for row in section.splitlines()
            if row.startswith("|") and not row.startswith("|---") and "step" not in row.split("|")[1]]


def test_steps_are_in_the_order_an_instructor_takes_them():
    steps = _instructor_steps()
    order = [next(i for i, s in enumerate(steps) if s.startswith(word)) for word in
             ("release", "collect", "autograde", "mark the written answer", "grade again", "return feedback")]
    assert order == sorted(order), steps


def test_readme_instructor_steps_end_to_end(tmp_path, capfd):
    work = tmp_path / "grader"
    # the inbox is there in a clone (grader/inbox/.gitkeep); `make grade` before anything is in it says so
    assert (REPO / "grader" / "inbox" / ".gitkeep").is_file()
    (work / "inbox").mkdir(parents=True)
    (work / "inbox" / ".gitkeep").touch()
    assert grade.main(["--work", str(work)]) == 2
    assert "no submissions" in capfd.readouterr().err
    shutil.copyfile(REPO / "tests" / "submissions" / "ex01" / "ada lovelace_123_ex01.ipynb",
                    work / "inbox" / "ada_ex01.ipynb")
    assert grade.main(["--work", str(work)]) == 0
    first = capfd.readouterr()
    assert re.search(r"^ada\s+ex01\s+20\.0 / 20 \(\+2 to mark by hand\)\s+ok$", first.out, re.M), first.out
    for noise in ("SAWarning", "TCP", "Traceback"):
        assert noise not in first.out + first.err, f"{noise} in make grade's output"
    # Formgrader: 2/2 for the written answer
    with Gradebook(f"sqlite:///{work / 'gradebook.db'}") as gb:
        grade_row = gb.find_grade(WRITTEN, "ex01", "ex01", "ada")
        grade_row.manual_score = 2
        gb.db.commit()
    assert grade.main(["--work", str(work)]) == 0
    again = capfd.readouterr()
    assert re.search(r"^ada\s+ex01\s+22\.0 / 22\s+ok$", again.out, re.M), again.out
    assert "1 unchanged since the last run" in again.out
    summary = (work / "summary.csv").read_text().splitlines()
    assert summary[1].startswith("ada,ex01,22,20,0,ok"), summary
    # the feedback to return includes the hand-given marks
    feedback = (work / "feedback" / "ada" / "ex01" / "ex01.html").read_text()
    assert re.search(r"22(\.0)? / 22(\.0)?", feedback)

    # a late submission, and the batch crashes after autograding it: nothing graded is lost
    shutil.copyfile(REPO / "tests" / "submissions" / "ex01" / "heads_ex01.ipynb", work / "inbox" / "heads_ex01.ipynb")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(workflow.Course, "feedback", _crash)
        with pytest.raises(KeyboardInterrupt):
            grade.main(["--work", str(work)])
    capfd.readouterr()
    assert grade.main(["--work", str(work)]) == 0
    resumed = capfd.readouterr().out
    assert "2 unchanged since the last run" in resumed, resumed
    assert re.search(r"^heads\s+ex01\s+8\.0 / 20 \(\+2 to mark by hand\)\s+ok", resumed, re.M), resumed


def _crash(*args, **kwargs):
    raise KeyboardInterrupt("the instructor's laptop went to sleep")


def test_a_failure_not_the_learners_is_retried_then_reported_not_scored(tmp_path, monkeypatch):
    calls = []

    def kernel_would_not_start(config, assignment, student):
        calls.append(student)
        return False, "RuntimeError: Kernel died before replying to kernel_info", 1.0

    monkeypatch.setattr(workflow, "_autograde_one", kernel_would_not_start)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    shutil.copyfile(REPO / "tests" / "submissions" / "ex01" / "heads_ex01.ipynb", inbox / "heads_ex01.ipynb")
    (r,) = workflow.Course(tmp_path / "work").grade(inbox, "ex01", feedback=False)
    assert calls == ["heads", "heads"]  # tried twice
    assert r.status == "not graded: retry" and "kernel_info" in r.line() and "0.0" not in r.line()
    summary = (tmp_path / "work" / "summary.csv").read_text()
    assert "heads,ex01,,20,2,not graded: retry" in summary


def test_readme_says_what_the_sandbox_refuses_and_what_the_review_flags_per_exercise():
    """Issue 48: the grading section names every call the seccomp filter refuses and has one row per exercise of
    the review's off-limits table, naming each module that exercise adds."""
    import review

    from stage5.grading import seccomp

    text = REPO.joinpath("README.md").read_text().split("## For instructors", 1)[1].split("\n## ", 1)[0]
    for name in seccomp.REFUSED:  # the three io_uring calls are named together
        assert ("io_uring" if name.startswith("io_uring_") else f"`{name}`") in text, name
    for words in ("CLONE_NEW", "personality", "NETLINK_ROUTE", "--disable-userns", "stage5/grading/view.py"):
        assert words in text, words
    rows = {row.split("|")[1].strip(): row for row in text.splitlines() if row.startswith("| ")}
    for exercise, rules in review.OFF_LIMITS.items():
        assert exercise in rows, exercise
        for module in set(rules.modules) - set(review.REFERENCE_MODULES):
            assert f"`{module}`" in rows[exercise], (exercise, module)
    # what each exercise's grading kernel lacks (stage5/grading/view.py), named per exercise, each class by name
    from stage5.grading import view

    paragraph = next(p for p in text.split("\n- ") if "stage5/grading/view.py" in p)
    for exercise in view.BLOCKED:
        assert f"{exercise}:" in paragraph, exercise
    for cls in ("Engine", "PagedAllocator", "ContiguousAllocator", "Scheduler", "KVPool"):
        assert f"`{cls}`" in paragraph, cls
