"""Who is graded on which file: one id per learner, clashes refused, a learner's zip holds only their notebook,
Unicode names keep distinct ids, a shared inbox grades only the assignment asked for, and Formgrader sees each
learner's name and submission time (grader/collect.py, grader/workflow.py's collect, grader/grade.py).

One shared inbox is graded twice, for ex01 then ex03, with one gradebook (module fixture ``graded``): five learners
are graded (ex01 and ex03, the fast exercises), every other file in it is a clash, a refused zip or another
assignment's file. The rules themselves are checked on inboxes that are only sorted, never graded.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re
import shutil
import string
import subprocess
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import pytest
from grading_harness import JOBS, REPO, Course, collect, grade, workflow
from hypothesis import given
from hypothesis import strategies as st
from nbgrader.api import Gradebook

EX01 = REPO / "tests" / "submissions" / "ex01"
HEADS, SOLVED, BLANK = EX01 / "heads_ex01.ipynb", EX01 / "ada lovelace_123_ex01.ipynb", EX01 / "blank_ex01.ipynb"
ASSIGNMENTS = ["clearing", "ex01", "ex02", "ex03"]
BOB_TIME = datetime(2026, 3, 14, 9, 26, 53, tzinfo=timezone.utc)  # bob's file's mtime: his submission time
FRANK_ZIP_TIME = (2026, 3, 15, 10, 0, 0)  # the date of frank's notebook in his zip (read as local time): his claim
FRANK_ARRIVAL = datetime(2026, 3, 20, 8, 0, 0, tzinfo=timezone.utc)  # his zip's mtime in the inbox: his submission time


def _copy(src: Path, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    return dest


def _zip(dest: Path, members: dict[str, Path], date_time=(2026, 1, 1, 0, 0, 0)) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w") as zf:
        for name, src in members.items():
            zf.writestr(zipfile.ZipInfo(name, date_time), src.read_bytes())
    return dest


def _shared_inbox(inbox: Path) -> None:
    """Honest learners (bob, 张伟, Ωmega, frank's zip; zed for ex03) among every way of taking an identity."""
    _copy(HEADS, inbox / "alice" / "alice_ex01.ipynb")  # folder vs file: alice's own ...
    _copy(BLANK, inbox / "mallory" / "alice_ex01.ipynb")  # ... and mallory's blank file named for alice
    _copy(HEADS, inbox / "Carol_ex01.ipynb")  # case and punctuation variants of one learner
    _copy(BLANK, inbox / "carol-ex01.ipynb")
    _copy(HEADS, inbox / "dan_ex01.ipynb")  # a loose file and a zip member for one learner
    _zip(inbox / "dan_ex01.zip", {"dan_ex01.ipynb": BLANK})
    _zip(inbox / "eve_ex01.zip", {"bob_ex01.ipynb": SOLVED})  # eve's zip holding a notebook named for bob
    bob = _copy(HEADS, inbox / "bob_ex01.ipynb")  # bob's own: 8/20, not the 20 of eve's file
    os.utime(bob, (BOB_TIME.timestamp(), BOB_TIME.timestamp()))
    _copy(HEADS, inbox / "张伟_ex01.ipynb")
    _copy(SOLVED, inbox / "Ωmega_ex01.ipynb")
    frank = _zip(inbox / "frank_ex01.zip", {"ex01.ipynb": BLANK}, FRANK_ZIP_TIME)  # a zip holding its owner's notebook
    os.utime(frank, (FRANK_ARRIVAL.timestamp(), FRANK_ARRIVAL.timestamp()))
    _copy(REPO / "tests" / "submissions" / "clearing" / "blank_clearing.ipynb", inbox / "learner_clearing.ipynb")
    _copy(REPO / "tests" / "submissions" / "ex03" / "blank_ex03.ipynb", inbox / "zed_ex03.ipynb")
    (inbox / "notes.pdf").write_bytes(b"%PDF-1.4")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """ex01 through `make grade` (grade.main, its output and exit status kept), then ex03 through the workflow,
    from one shared inbox into one gradebook."""
    root = tmp_path_factory.mktemp("identities")
    inbox = root / "inbox"
    _shared_inbox(inbox)
    roster = root / "roster.csv"
    roster.write_text("id,first_name,last_name\n张伟,伟,张\nfrank,Frank,Lloyd Wright\n", encoding="utf-8")
    seen = {}
    grade_ = workflow.Course.grade

    def keep(course, *args, **kwargs):
        seen["course"], seen["results"] = course, grade_(course, *args, **kwargs)
        return seen["results"]

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        mp.setattr(workflow.Course, "grade", keep)
        status = grade.main(["--work", str(root / "work"), "--inbox", str(inbox), "--roster", str(roster),
                             "--jobs", str(JOBS)])
    course = seen["course"]
    results = {"ex01": {r.student: r for r in seen["results"]}, ("ex01", "skipped"): dict(course.skipped),
               "make grade": (status, out.getvalue(), err.getvalue())}
    results["ex03"] = {r.student: r for r in course.grade(inbox, "ex03", jobs=JOBS,
                                                          roster=collect.read_roster(roster))}
    results["ex03", "skipped"] = dict(course.skipped)
    return course, results


def test_make_grade_lists_what_it_did_not_grade_and_exits_1(graded):
    status, out, err = graded[1]["make grade"]
    assert status == 1, (out, err)
    assert "skipped  learner_clearing.ipynb: named for clearing, not ex01" in out
    assert "skipped  zed_ex03.ipynb: named for ex03, not ex01" in out
    assert re.search(r"^alice\s+ex01\s+- / 20 \(\+2 to mark by hand\)\s+clash; 2 different files claim alice", out,
                     re.M), out
    assert re.search(r"^bob\s+ex01\s+8\.0 / 20", out, re.M), out
    assert "not in the roster (named by their id): bob, ωmega" in out
    assert "in the roster, nothing handed in" not in out
    assert "4 learner(s) NOT graded (clash, refused): alice, carol, dan, eve" in err


GRADED_EX01 = {"bob": 8, "张伟": 8, "ωmega": 20, "frank": 0}


def test_honest_learners_are_graded_on_their_own_files(graded):
    _, results = graded
    ex01 = results["ex01"]
    for student, score in GRADED_EX01.items():
        assert ex01[student].status == "ok" and ex01[student].score == score, ex01[student].line()
    assert ex01["bob"].source == "bob_ex01.ipynb"
    assert ex01["frank"].source == "frank_ex01.zip:ex01.ipynb"
    assert any("the zip dates it 2026-03-1" in why for why in ex01["frank"].reasons), ex01["frank"].reasons
    assert results["ex03"]["zed"].status == "ok" and results["ex03"]["zed"].score == 0


@pytest.mark.parametrize("student, files", [
    ("alice", ["alice/alice_ex01.ipynb", "mallory/alice_ex01.ipynb"]),
    ("carol", ["Carol_ex01.ipynb", "carol-ex01.ipynb"]),
    ("dan", ["dan_ex01.ipynb", "dan_ex01.zip:dan_ex01.ipynb"]),
])
def test_a_clash_is_listed_and_neither_file_is_graded(graded, student, files):
    course, results = graded
    r = results["ex01"][student]
    assert r.status == "clash" and r.score == 0, r.line()
    line = r.line()
    assert all(f in line for f in files) and "neither is graded" in line and "remove" in line
    assert f"{student:<24} ex01      -" in line  # no score, not a 0
    assert not (Path(course.config.CourseDirectory.submitted_directory) / student).exists()
    assert not (Path(course.config.CourseDirectory.autograded_directory) / student).exists()


def test_a_zip_holding_another_learners_notebook_is_refused(graded):
    course, results = graded
    r = results["ex01"]["eve"]
    assert r.status == "refused" and "eve_ex01.zip" in r.line() and "bob_ex01.ipynb" in r.line(), r.line()
    assert results["ex01"]["bob"].score == 8  # graded on his own file, not on the solved one in eve's zip


def test_clashed_and_refused_learners_stay_out_of_the_gradebook(graded):
    course, _ = graded
    with Gradebook(course.db_url) as gb:
        students = {s.id for s in gb.students}
    assert students == set(GRADED_EX01) | {"zed"}  # no alice, carol, dan, eve, and no phantom "learner"


def test_unicode_names_keep_distinct_ids_through_nbgrader(graded):
    course, results = graded
    assert {"张伟", "ωmega"} <= set(results["ex01"])
    for student in ("张伟", "ωmega"):
        assert (Path(course.config.CourseDirectory.feedback_directory) / student / "ex01" / "ex01.html").is_file()


def test_files_for_other_assignments_are_skipped_and_listed(graded):
    _, results = graded
    skipped_ex01 = results["ex01", "skipped"]
    assert skipped_ex01["learner_clearing.ipynb"] == "named for clearing, not ex01"
    assert skipped_ex01["zed_ex03.ipynb"] == "named for ex03, not ex01"
    assert "not a notebook" in skipped_ex01["notes.pdf"]
    assert set(results["ex03"]) == {"zed"}  # none of the ex01 files, their clashes included
    assert results["ex03", "skipped"]["bob_ex01.ipynb"] == "named for ex01, not ex03"


def test_summary_keeps_each_assignments_rows(graded):
    course, results = graded
    with (course.work / "summary.csv").open(newline="") as fh:
        rows = {(r["assignment"], r["student"]): r for r in csv.DictReader(fh)}
    assert set(rows) == {("ex01", s) for s in results["ex01"]} | {("ex03", "zed")}
    assert rows["ex01", "bob"]["score"] == "8" and rows["ex01", "alice"]["status"] == "clash"
    assert rows["ex01", "alice"]["score"] == ""  # not a 0: nothing was graded


def test_formgrader_sees_names_and_submission_times(graded):
    course, _ = graded
    api = course.api()
    subs = {s["student"]: s for s in api.get_submissions("ex01")}
    assert set(subs) == set(GRADED_EX01)
    assert (subs["bob"]["first_name"], subs["bob"]["last_name"]) == ("", "bob")  # the id as last name
    assert (subs["张伟"]["first_name"], subs["张伟"]["last_name"]) == ("伟", "张")  # from the roster
    assert (subs["frank"]["first_name"], subs["frank"]["last_name"]) == ("Frank", "Lloyd Wright")
    # no e-mail in the roster: an empty cell in Formgrader's Students table, not "None" (its JS prints null so)
    emails = {s["id"]: s["email"] for s in api.get_students()}
    assert all(emails[s] == "" for s in GRADED_EX01), emails
    bob_time = datetime.fromisoformat(subs["bob"]["timestamp"])
    assert bob_time == BOB_TIME.replace(tzinfo=None)  # nbgrader keeps UTC, naive
    frank_time = datetime.fromisoformat(subs["frank"]["timestamp"])
    assert frank_time == FRANK_ARRIVAL.replace(tzinfo=None)  # when his zip arrived, not the date inside it (issue 48)
    assert all(s["timestamp"] for s in subs.values())
    # Formgrader counts a submission autograded only when timestamp.txt and the gradebook agree
    assert api.get_autograded_students("ex01") == set(GRADED_EX01)


# ------------------------------------------------------------------------------------------------ the rules, sorted only
def _sorted(inbox: Path, assignment: str = "ex01"):
    return collect.sort_inbox(inbox, assignment, ASSIGNMENTS)


def test_identical_copies_are_one_submission(tmp_path):
    _copy(HEADS, tmp_path / "alice_ex01.ipynb")
    _copy(HEADS, tmp_path / "alice_ex01 (1).ipynb")
    _zip(tmp_path / "lms.zip", {"alice/ex01.ipynb": HEADS})
    found = _sorted(tmp_path)
    assert not found.clashes and found.learners["alice"].label == "alice_ex01.ipynb"
    assert sorted(found.copies["alice"]) == ["alice_ex01 (1).ipynb", "lms.zip:alice/ex01.ipynb"]


def test_a_second_download_that_differs_is_a_clash(tmp_path):
    _copy(HEADS, tmp_path / "alice_ex01.ipynb")
    _copy(BLANK, tmp_path / "alice_ex01 (1).ipynb")
    assert set(_sorted(tmp_path).clashes) == {"alice"} and not _sorted(tmp_path).learners


def test_clashes_do_not_depend_on_modification_times(tmp_path):
    older, newer = _copy(HEADS, tmp_path / "alice" / "ex01.ipynb"), _copy(BLANK, tmp_path / "ALICE_ex01.ipynb")
    for first, second in ((older, newer), (newer, older)):
        os.utime(first, (1_000_000_000, 1_000_000_000))
        os.utime(second, (1_700_000_000, 1_700_000_000))
        found = _sorted(tmp_path)
        assert set(found.clashes) == {"alice"} and not found.learners


def test_zips_a_learners_own_and_an_lms_bulk_download(tmp_path):
    _zip(tmp_path / "eve_ex01.zip", {"ex01.ipynb": HEADS, "notes/scratch.txt": HEADS})  # eve's own notebook
    _zip(tmp_path / "grace-EX01.zip", {"submission/notebook.ipynb": HEADS})  # a name that names no one: grace's
    _zip(tmp_path / "submissions.zip", {"heidi_ex01.ipynb": HEADS, "ivan/ex01.ipynb": BLANK})  # bulk download
    _zip(tmp_path / "mallory_ex01.zip", {"mallory_ex01.ipynb": BLANK, "judy/ex01.ipynb": BLANK})  # holds judy's
    _copy(HEADS, tmp_path / "judy_ex01.ipynb")
    found = _sorted(tmp_path)
    assert {s: f.label for s, f in found.learners.items()} == {
        "eve": "eve_ex01.zip:ex01.ipynb", "grace": "grace-EX01.zip:submission/notebook.ipynb",
        "heidi": "submissions.zip:heidi_ex01.ipynb", "ivan": "submissions.zip:ivan/ex01.ipynb",
        "judy": "judy_ex01.ipynb"}
    assert list(found.refused) == ["mallory"] and "judy/ex01.ipynb" in found.refused["mallory"][0]
    assert ("eve_ex01.zip:notes/scratch.txt", "not a notebook (.ipynb)") in found.skipped


def test_a_refused_zip_blocks_its_owner_everywhere(tmp_path):
    _zip(tmp_path / "eve_ex01.zip", {"bob_ex01.ipynb": SOLVED})
    _copy(HEADS, tmp_path / "eve" / "ex01.ipynb")
    found = _sorted(tmp_path)
    assert "eve" not in found.learners and "eve/ex01.ipynb" in " ".join(found.refused["eve"])
    assert "bob" not in found.learners  # eve's file never stands for bob


def test_only_files_named_for_the_assignment_are_collected(tmp_path):
    for name in ("alice_ex01.ipynb", "ex01/bob.ipynb", "carol/ex01.ipynb", "dave.ipynb", "erin_ex03.ipynb",
                 "ex01/frank_clearing.ipynb", "clearing_smith_ex01.ipynb", "ex01.ipynb", "gina_ex011.ipynb"):
        _copy(HEADS, tmp_path / name)
    (tmp_path / ".gitkeep").touch()
    _copy(HEADS, tmp_path / ".ipynb_checkpoints" / "alice_ex01-checkpoint.ipynb")
    (tmp_path / "link_ex01.ipynb").symlink_to(tmp_path / "alice_ex01.ipynb")
    with zipfile.ZipFile(tmp_path / "broken_ex01.zip", "w") as zf:
        zf.writestr("x", "y")
    (tmp_path / "broken_ex01.zip").write_bytes((tmp_path / "broken_ex01.zip").read_bytes()[:30])
    found = _sorted(tmp_path)
    assert set(found.learners) == {"alice", "bob", "carol", "clearing_smith"}
    skipped = dict(found.skipped)
    assert skipped["dave.ipynb"].startswith("not named for ex01")
    assert skipped["erin_ex03.ipynb"] == "named for ex03, not ex01"
    assert skipped["ex01/frank_clearing.ipynb"] == "named for clearing, not ex01"
    assert skipped["ex01.ipynb"].startswith("no learner's name")
    assert skipped["gina_ex011.ipynb"].startswith("not named for ex01")  # ex011 is not ex01
    assert "link" in skipped["link_ex01.ipynb"] and "zip" in skipped["broken_ex01.zip"]
    assert not any(label.startswith(".") for label, _ in found.skipped)


@pytest.mark.parametrize("a, b", [("Ωmega", "omega"), ("Ωmega", "mega"), ("张伟", "王芳"), ("Zoë", "Zoe"),
                                  ("Łukasz", "Lukasz"), ("x" * 80 + "a", "x" * 80 + "b")])
def test_non_ascii_names_give_distinct_ids(a, b):
    ia, ib = collect.student_id(f"{a}_ex01.ipynb", "ex01"), collect.student_id(f"{b}_ex01.ipynb", "ex01")
    assert ia and ib and ia != ib and len(ia) <= 64 and len(ib) <= 64


@pytest.mark.parametrize("label, sid", [
    ("Ωmega_ex01.ipynb", "ωmega"), ("张伟_ex01.ipynb", "张伟"), ("Jose\u0301_ex01.ipynb", "josé"),  # NFD as macOS
    ("JOSÉ-ex01.ipynb", "josé"), ("mary-jane.smith_ex01.ipynb", "mary_jane_smith"),
    ("Mary Jane Smith_ex01.ipynb", "mary_jane_smith"), ("ＡＬＩＣＥ_ex01.ipynb", "alice"),  # full-width
])
def test_ids_are_unicode_slugs(label, sid):
    assert collect.student_id(label, "ex01") == sid


@given(st.text(max_size=300))
def test_every_id_is_one_nbgrader_accepts(text):
    """nbgrader 0.9.6 puts the id in folder names and in a file glob (CourseDirectory.student_id) and its exchange
    splits on "+": a slug is never empty-but-used, never a glob, a path or a list, and is the same every time."""
    sid = collect.slug(text)
    assert sid == collect.slug(text) and len(sid) <= 64
    assert not set(sid) & set("/\\*?[]+,.\x00" + string.whitespace)


# ------------------------------------------------------------------------------------------------ the command's doors
def _main(tmp_path: Path, *args: str) -> int:
    return grade.main(["--work", str(tmp_path / "work"), *args])


def _one_line_error(capsys) -> str:
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err, (out, err)
    return err


def test_unknown_assignment_is_one_line_exit_2(tmp_path, capsys):
    assert _main(tmp_path, "--assignment", "ex99") == 2
    err = _one_line_error(capsys)
    assert "no such assignment: 'ex99'" in err and "clearing, ex01, ex02, ex03" in err
    assert _main(tmp_path, "release", "--assignment", "../solutions") == 2
    _one_line_error(capsys)


def test_missing_and_empty_inbox_are_one_line_exit_2(tmp_path, capsys):
    assert _main(tmp_path, "--inbox", str(tmp_path / "nowhere")) == 2
    assert "no inbox folder" in _one_line_error(capsys)
    assert not (tmp_path / "nowhere").exists()  # a mistyped path is not created
    (tmp_path / "inbox").mkdir()
    (tmp_path / "inbox" / ".gitkeep").touch()  # as in a clone
    assert _main(tmp_path, "--inbox", str(tmp_path / "inbox")) == 2
    assert "no submissions in" in _one_line_error(capsys)


def test_an_inbox_with_nothing_for_the_assignment_lists_what_it_skipped(tmp_path, capsys):
    _copy(HEADS, tmp_path / "inbox" / "alice_clearing.ipynb")
    assert _main(tmp_path, "--inbox", str(tmp_path / "inbox")) == 2
    out, err = capsys.readouterr()
    assert "skipped  alice_clearing.ipynb: named for clearing, not ex01" in out
    assert err.count("\n") == 1 and "nothing to grade for ex01" in err


def test_the_inbox_is_in_a_clone_and_holds_no_learner_files():
    tracked = subprocess.run(["git", "ls-files", "grader/inbox"], cwd=REPO, capture_output=True, text=True)
    assert tracked.stdout.split() == ["grader/inbox/.gitkeep"]
    ignored = subprocess.run(["git", "check-ignore", "-q", "grader/inbox/alice_ex01.ipynb"], cwd=REPO)
    assert ignored.returncode == 0, "learners' files in grader/inbox must never be committed"


@pytest.mark.parametrize("content, words", [
    (None, "no such file"),
    (b"\xff\xfeid,first_name,last_name\n", "not UTF-8"),
    (b"", "empty"),
    (b"student,first,last\nalice,Alice,A\n", "must name the columns id,first_name,last_name"),
    (b"id,first_name,last_name\n", "no learners"),
    (b"id,first_name,last_name\nalice,Alice\n", "line 2: 2 fields"),
    (b"id,first_name,last_name\nalice,Alice,A\nALICE,Al,A\n", "line 3: the id 'ALICE' is learner 'alice' again"),
    (b"id,first_name,last_name\n!!,Alice,A\n", "line 2: the id '!!' has no letter or digit"),
    (b"id,first_name,last_name\nalice,\"Al\nice\",A\n", "line 2: first_name must be one line"),
])
def test_a_bad_roster_is_one_line_exit_2(tmp_path, capsys, content, words):
    roster = tmp_path / "roster.csv"
    if content is not None:
        roster.write_bytes(content)
    assert _main(tmp_path, "--roster", str(roster)) == 2
    assert words in _one_line_error(capsys)


def test_a_roster_is_read_by_id_as_file_names_give_it(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("\ufeffID, First_Name ,last_name,email\nAlice Smith,Alice,Smith,a@x\nΩmega,Ω,Mega,o@x\n",
                      encoding="utf-8")
    learners = collect.read_roster(roster)
    assert set(learners) == {collect.student_id("Alice Smith_ex01.ipynb", "ex01"),
                             collect.student_id("Ωmega_ex01.ipynb", "ex01")}
    assert (learners["alice_smith"].first_name, learners["alice_smith"].last_name) == ("Alice", "Smith")


def test_workflow_refuses_an_unknown_assignment(tmp_path):
    with pytest.raises(workflow.UnknownAssignment, match="no such assignment"):
        Course(tmp_path / "work").grade(tmp_path, "ex99")


def test_an_unreadable_zip_member_is_that_learners_invalid_file(tmp_path):
    inbox = tmp_path / "inbox"
    _copy(HEADS, inbox / "honest_ex01.ipynb")
    broken = _zip(inbox / "kim_ex01.zip", {"kim_ex01.ipynb": HEADS})
    with zipfile.ZipFile(broken) as zf:
        info = zf.getinfo("kim_ex01.ipynb")
    data = bytearray(broken.read_bytes())
    data[info.header_offset + 30 + len(info.filename) + 100] ^= 0xFF  # inside the stored bytes: the CRC fails
    broken.write_bytes(bytes(data))
    course = Course(tmp_path / "work")
    results = {r.student: r for r in course.collect(inbox, "ex01", REPO / "exercises" / "ex01" / "ex01.ipynb")}
    assert results["kim"].status == "invalid" and "could not be read from the zip (BadZipFile" in results["kim"].line()
    assert results["honest"].status == "ok"  # collected, ready to grade
    assert (Path(course.config.CourseDirectory.submitted_directory) / "honest" / "ex01" / "timestamp.txt").is_file()
