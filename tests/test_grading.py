"""The instructor workflow end to end: release, collect, autograde, feedback, export (ex01).

One class of fixture submissions (tests/submissions/ex01, plus a truncated file and a zip made here) is graded
once per session with one gradebook; the tests then read the results. Takes about a minute on 2 cores.
"""

from __future__ import annotations

import csv
import json
import zipfile
from pathlib import Path

import pytest
from grading_harness import (
    JOBS,
    REPO,
    Course,
    check_feedback_has,
    check_release_is_fresh,
    check_result,
    copy_fixtures,
)
from workflow import student_id

# student: (auto score out of 20, failed checks, words the feedback must contain, words the summary must contain)
EXPECTED = {
    "ada_lovelace_123": (20, set(), [], []),
    "blank": (0, {"a1_floor", "a2_ridge", "a3_kv", "a4_budget", "a5_concurrency", "a6_intensity",
                  "a7_intensity_kv", "b1_kv_function", "b2_floor_function", "b3_concurrency_function"},
              ["not defined", "NotImplementedError"], []),
    "heads": (8, {"a3_kv", "a5_concurrency", "a7_intensity_kv", "b1_kv_function", "b3_concurrency_function"},
              ["too large: did you use query heads", "query heads"], []),
    "nofactor2": (8, {"a3_kv", "a5_concurrency", "a7_intensity_kv", "b1_kv_function", "b3_concurrency_function"},
                  ["forget the factor 2 for keys and values"], []),
    # A5 is checked exactly, so the budget's unit slip carries into it (and is named there too)
    "gbgib": (13, {"a4_budget", "a5_concurrency", "b3_concurrency_function"}, ["decimal GB and binary GiB"], []),
    "hardcoded": (12, {"b1_kv_function", "b2_floor_function", "b3_concurrency_function"},
                  ["on an unseen model", "on an unseen deployment"], []),
    "delegates": (12, {"b1_kv_function", "b2_floor_function", "b3_concurrency_function"},
                  ["computes this answer for you"], []),
    "roundup": (15, {"a5_concurrency", "b3_concurrency_function"}, ["one too many: round down"], []),
    "flops_floor": (16, {"a1_floor", "b2_floor_function"}, ["the arithmetic time (FLOPs / FLOP/s)"], []),
    "flops_once": (17, {"a6_intensity", "a7_intensity_kv"},
                   ["a multiply-add is 2 FLOPs", "2 FLOPs per parameter per token, not 1"], []),
    "reserve_once": (13, {"a4_budget", "a5_concurrency", "b3_concurrency_function"},
                     ["32 GiB on four", "not 8 GiB once", "reserve_gib_per_gpu on each GPU, not once"], []),
    "kv_no_layers": (12, {"a7_intensity_kv", "b1_kv_function", "b3_concurrency_function"},
                     ["count every layer (multiply by num_layers)", "multiply by the number of layers"], []),
    "weight_bytes": (20, set(), [], []),  # config.weight_bytes() is allowed: the notebook bans only stage5.cost
    "whole_float": (20, set(), [], []),  # 39.0 is a whole number
    # the visible check fails A1 given in seconds and says so; A4 for one GPU is told it is one GPU's share
    "seconds": (18, {"a1_floor"}, ["is it in seconds (A1 asks for milliseconds)"], []),
    "per_gpu": (16, {"a4_budget", "a5_concurrency"}, ["one GPU's share (per GPU)"], []),
    # the slips no visible bound catches without revealing the answer (A3 in bits, A4 in decimal GB): named here
    "bits_gb": (12, {"a3_kv", "a4_budget", "a5_concurrency", "a7_intensity_kv"},
                ["did you count bits instead of bytes", "that is in decimal GB (1e9 bytes): the question asks for "
                 "binary GiB (2**30 bytes)"], []),
    "loop": (19, {"a2_ridge"}, ["used more than 10 s of CPU time"], ["timed out"]),
    "crash": (18, {"a1_floor"}, ["numpy_financial"], []),
    "bigoutput": (20, set(), ["output truncated"], ["output truncated"]),
    "tampered": (13, {"a2_ridge", "a3_kv", "a5_concurrency", "a7_intensity_kv"},
                 ["sparse (or FP8) FLOP/s", "query heads"], ["a2_ridge was deleted", "a3_kv was edited"]),
    "truncated": (0, set(), None, ["not a valid notebook"]),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    inbox = copy_fixtures("ex01", root / "inbox")
    # two learners arrive in an LMS zip, inside folders
    with zipfile.ZipFile(inbox / "lms_download.zip", "w") as zf:
        for name in ("heads_ex01.ipynb", "nofactor2_ex01.ipynb"):
            zf.write(inbox / name, f"submissions/{name}")
            (inbox / name).unlink()
    # a download cut short: not JSON
    text = (REPO / "tests" / "submissions" / "ex01" / "blank_ex01.ipynb").read_text()
    (inbox / "truncated_ex01.ipynb").write_text(text[: len(text) // 3])
    course = Course(root / "work")
    results = {r.student: r for r in course.grade(inbox, "ex01", jobs=JOBS)}
    return course, results


def test_every_student_is_graded(graded):
    _, results = graded
    assert set(results) == set(EXPECTED)


@pytest.mark.parametrize("student", sorted(EXPECTED))
def test_scores_and_failed_checks(graded, student):
    _, results = graded
    score, failed, _, _ = EXPECTED[student]
    # blank leaves C1 as released: nbgrader scores it 0, so nothing is left to mark by hand (one verdict everywhere)
    check_result(results[student], score, failed, auto_max=20, manual=0 if student == "blank" else 2)


@pytest.mark.parametrize("student", sorted(s for s, e in EXPECTED.items() if e[2] is not None))
def test_feedback_names_the_misconception(graded, student):
    check_feedback_has(graded[0], student, "ex01", EXPECTED[student][2])


@pytest.mark.parametrize("student", sorted(EXPECTED))
def test_summary_gives_reasons(graded, student):
    _, results = graded
    line = results[student].line()
    out_of = 22 if student == "blank" else 20  # blank's C1 is scored (0), not left to mark: counted in
    assert line.startswith(student) and f"{results[student].score:5.1f} / {out_of} " in line, line
    assert ("to mark by hand" in line) == (student != "blank"), line
    for words in EXPECTED[student][3]:
        assert words in line


def test_invalid_notebook_is_scored_zero_not_skipped(graded):
    _, results = graded
    assert results["truncated"].status == "invalid"
    assert all(r.status == "ok" for s, r in results.items() if s != "truncated")


def test_an_invalid_submission_gets_a_feedback_page_saying_why(graded):
    course, results = graded
    text = " ".join(course.feedback_text("truncated", "ex01").split())
    assert "your submission could not be graded" in text and "not a valid notebook" in text, text
    assert "truncated_ex01.ipynb" in text and "What to do" in text


# learners whose hints (the feedback's words) are the course's own: a hidden check's verdict or a visible assert's
HINTED = ["heads", "nofactor2", "gbgib", "roundup", "flops_floor", "flops_once", "reserve_once", "kv_no_layers",
          "seconds", "per_gpu", "bits_gb", "hardcoded", "delegates"]


def test_summary_csv_gives_a_reason_for_every_failed_check(graded):
    course, results = graded
    with (course.work / "summary.csv").open(newline="") as fh:
        rows = {row["student"]: row for row in csv.DictReader(fh)}
    for student, r in results.items():
        reasons = rows[student]["reasons"]
        for gid in r.failed:
            assert f"{gid}: " in reasons, f"{student}: no reason for {gid} in {reasons!r}"
        if student in HINTED:
            for words in EXPECTED[student][2]:
                assert " ".join(words.split()) in reasons, f"{student}: {words!r} not in {reasons!r}"
    # what the learner's kernel said is never quoted: blank's NameErrors give the class name only
    assert "a1_floor: failed (NameError)" in rows["blank"]["reasons"], rows["blank"]["reasons"]
    assert "c1_written: answer left as released, scored 0 without marking" in rows["blank"]["reasons"]


def _expected_values():
    from stage5 import cost
    from stage5.hardware import GiB, get_gpu
    from stage5.models import get_model

    q = cost.Deployment.of("qwen2.5-72b", "H200", 4)
    return [cost.decode_floor_s(cost.Deployment.of("llama3-8b", "L4")) * 1e3, cost.ridge_point(get_gpu("L4")),
            get_model("qwen2.5-72b").kv_bytes_per_token(2), cost.kv_budget_bytes(q) / GiB,
            float(cost.decode_intensity_with_kv(q, 64, 8192))]


@pytest.mark.parametrize("student", ["heads", "nofactor2", "gbgib", "blank", "tampered"])
def test_feedback_hides_hidden_tests_and_expected_values(graded, student):
    course, _ = graded
    text = course.feedback_text(student, "ex01")
    for secret in ("BEGIN HIDDEN TESTS", "_check(", "kv_budget_bytes(", "_blocked", "_expected"):
        assert secret not in text
    for value in _expected_values():
        for form in (repr(value), f"{value:.6g}", f"{value:.2f}"):
            assert form not in text, f"{student}: feedback shows the expected value {form}"


def test_autograded_output_is_capped(graded):
    course, _ = graded
    nb = Path(course.config.CourseDirectory.autograded_directory) / "bigoutput" / "ex01" / "ex01.ipynb"
    assert nb.stat().st_size < 2 * 2**20


def test_exports(graded):
    course, results = graded
    with (course.work / "grades.csv").open() as fh:
        rows = {r["student_id"]: r for r in csv.DictReader(fh) if r["assignment"] == "ex01"}
    assert set(rows) == set(EXPECTED)
    assert float(rows["ada_lovelace_123"]["score"]) == 20 and float(rows["truncated"]["score"]) == 0
    with (course.work / "summary.csv").open() as fh:
        summary = {r["student"]: r for r in csv.DictReader(fh)}
    assert summary["loop"]["failed_checks"] == "a2_ridge" and "timed out" in summary["loop"]["reasons"]
    assert summary["truncated"]["status"] == "invalid"


def test_committed_release_matches_solutions(graded):
    check_release_is_fresh(graded[0], "ex01")


def test_release_has_no_answers():
    text = (REPO / "exercises" / "ex01" / "ex01.ipynb").read_text()
    for secret in ("BEGIN SOLUTION", "HIDDEN TESTS", "MARK SCHEME", "check_close", "num_kv_heads * config"):
        assert secret not in text
    nb = json.loads(text)
    graded_cells = [c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade")]
    assert 8 <= len(graded_cells) <= 12
    setup = next(c for c in nb["cells"] if c["cell_type"] == "code")
    assert "https://github.com/stage5-inference/stage5-inference" in "".join(setup["source"])


@pytest.mark.parametrize("label, sid", [
    ("alice_ex01.ipynb", "alice"), ("EX01-Bob.ipynb", "bob"), ("carol/ex01.ipynb", "carol"),
    ("Dan Smith_4411_ex01 (1).ipynb", "dan_smith_4411"), ("ex01.ipynb", ""),
])
def test_student_ids_from_file_names(label, sid):
    assert student_id(label, "ex01") == sid


def test_make_grade_with_empty_inbox_says_so(tmp_path, capsys):
    import grade

    (tmp_path / "inbox").mkdir()
    assert grade.main(["--work", str(tmp_path), "--inbox", str(tmp_path / "inbox")]) == 2
    assert "no submissions" in capsys.readouterr().err


def test_hints_follow_the_nearest_slip(graded):
    """A reserve counted once (8 GiB in all) lands within 2% of a reserve left out: the learner's exact figure
    decides which hint they see, so they are not told they left out what they counted."""
    text = graded[0].feedback_text("reserve_once", "ex01")
    assert "reserved for activations" not in text
