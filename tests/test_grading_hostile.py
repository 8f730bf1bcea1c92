"""Learners who attack the grader, graded in one batch with honest ones (tests/submissions/hostile, built by
tests/submissions/make_fixtures_hostile.py).

No attack may earn more than its answers do, the honest learners' grades must not move, nothing outside the
sandbox may change (the course's files, the gradebook, other learners' files) and no process may outlive grading.
Runs only where the bubblewrap sandbox works: the attacks are real.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3

import psutil
import pytest
from grading_harness import REPO, Course, copy_fixtures

from stage5.grading.sandbox import isolation

pytestmark = pytest.mark.skipif(isolation()[0] != "bwrap", reason=f"no sandbox here: {isolation()[1]}")

HEADS_FAILED = {"a3_kv", "a5_concurrency", "a7_intensity_kv", "b1_kv_function", "b3_concurrency_function"}
# student: (score out of 20 that its answers earn, failed checks, words its line in the summary must contain)
EXPECTED = {
    "heads": (8, HEADS_FAILED, []),  # honest
    "ada_lovelace_123": (20, set(), []),  # honest
    "poison": (8, HEADS_FAILED, []),
    "destroy": (8, HEADS_FAILED, []),
    "leak": (8, HEADS_FAILED, []),
    "background": (8, HEADS_FAILED, []),
    "patcher": (8, HEADS_FAILED, []),
    "snapshot": (14, {"b1_kv_function", "b3_concurrency_function"}, []),  # B3 calls its B1
    "kill": (19, {"a2_ridge"}, ["the kernel died in a2_ridge_answer", "killed"]),
    "memory": (18, {"a1_floor"}, ["a1_floor_answer ran out of memory"]),
    "cpu_in_c": (19, {"a2_ridge"}, ["a2_ridge_answer timed out", "CPU time"]),
    "exit": (19, {"a2_ridge"}, ["the kernel died in a2_ridge_answer", "exit()"]),
    "bad_unicode": (20, set(), ["invalid Unicode"]),
}
CPU_S = 3  # a small per-cell CPU budget keeps the attacks that burn CPU cheap; honest cells need well under 1 s


def _fingerprint(*roots):
    """sha256 of every file under ``roots``: what must not change while learners' code runs."""
    digest = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digest


COURSE_FILES = [REPO / "stage5", REPO / "solutions", REPO / "exercises", REPO / "grader", REPO / "tests" / "submissions"]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    inbox = copy_fixtures("hostile", root / "inbox")
    for honest in ("heads_ex01.ipynb", "ada lovelace_123_ex01.ipynb"):
        shutil.copyfile(REPO / "tests" / "submissions" / "ex01" / honest, inbox / honest)
    course = Course(root / "work", cell_timeout_s=CPU_S)
    before = _fingerprint(*COURSE_FILES, inbox)
    results = {r.student: r for r in course.grade(inbox, "ex01", jobs=2)}
    survivors = [p.info for p in psutil.process_iter(["pid", "cmdline"])
                 if "sleep 7777" in " ".join(p.info["cmdline"] or [])]
    return course, results, before, _fingerprint(*COURSE_FILES, inbox), survivors


def test_every_learner_is_graded(graded):
    assert set(graded[1]) == set(EXPECTED)


@pytest.mark.parametrize("student", sorted(EXPECTED))
def test_no_attack_earns_more_than_its_answers(graded, student):
    r = graded[1][student]
    score, failed, words = EXPECTED[student]
    assert r.status == "ok" and r.score == score, r.line()
    assert set(r.failed) == failed, r.line()
    for w in words:
        assert w in r.line(), r.line()


def test_nothing_outside_the_sandbox_changed(graded):
    course, results, before, after, survivors = graded
    assert before == after, sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not survivors, f"processes outlived grading: {survivors}"
    db = course.work / "gradebook.db"
    with sqlite3.connect(db) as con:
        students = {s for (s,) in con.execute("select id from student")}
    assert students == set(EXPECTED)
    summary = (course.work / "summary.csv").read_text()
    assert "hostile_background" not in summary and summary.count("\n") == len(EXPECTED) + 1


def test_feedback_leaks_nothing(graded):
    course = graded[0]
    text = course.feedback_text("leak", "ex01")
    for secret in ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS", "_check(", "ada_lovelace", "heads_ex01", "gradebook",
                   "NETWORK REACHABLE"):
        assert secret not in text
    assert "could not read" in text and "no network" in text  # the attack ran, and failed
    assert "could not poison" in course.feedback_text("poison", "ex01")
    assert "could not destroy" in course.feedback_text("destroy", "ex01")
