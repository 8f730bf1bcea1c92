"""One class graded by ``make grade``'s own entry point with the third hostile set (issue 38) beside honest learners:
memfd files, an output flood, a cell that ignores the interrupt and waits, a kernel killed to replay the hidden
tests, replies built to make decoding quadratic, and file names that carry terminal escapes and newlines. The
honest learners keep their grades, each attack ends in its safe outcome, and ``grade.py`` exits with status 4,
listing the notebooks whose parts the grader stopped or refused. The notebook-level checks of each bound are in
tests/test_grading_kernel_bounds.py.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import functools
import io
import json
import unicodedata

import pytest
from grading_harness import copy_fixtures, grade, workflow
from test_grading_hostile import HEADS_FAILED
from test_grading_kernel_bounds import COLLIDE, DIE, MEMFD, WAITS

from stage5.grading.sandbox import isolation

pytestmark = pytest.mark.skipif(isolation()[0] != "bwrap", reason=f"no sandbox here: {isolation()[1]}")

CPU_S = 3  # per cell; the wall-clock limit is ten times that
FORGED = "mallory\x1b[2J\x1b]0;grades\x07\nbob      ex01   20.0 of 20  ok\u202e"  # a file name holds anything but "/"
FLOOD_MIB = 64  # the class's flood limit (256 MiB by default): a cell sending more is stopped
FLOOD = "import sys\nfor _ in range(100):\n    print('z' * 2**20)\n    sys.stdout.flush()"
PEEK = "print('\\n'.join(In))\nprint(sorted(globals()))"


def _code(source: str) -> dict:
    return {"cell_type": "code", "metadata": {}, "source": source, "outputs": [], "execution_count": None}


def _with(heads: dict, *cells: str, first: bool = False) -> dict:
    nb = copy.deepcopy(heads)
    extra = [_code(c) for c in cells]
    nb["cells"] = [nb["cells"][0], *extra, *nb["cells"][1:]] if first else nb["cells"] + extra
    return nb


def _config(make_config, *args, **kw):
    config = make_config(*args, cell_timeout_s=CPU_S, **kw)
    config.SandboxedExecute.flood_bytes = FLOOD_MIB * 2**20
    return config


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("boundary38")
    inbox = copy_fixtures("ex01", root / "inbox", ["heads_ex01.ipynb", "ada lovelace_123_ex01.ipynb"])
    heads = json.loads((inbox / "heads_ex01.ipynb").read_text())
    write = {
        "memfd": _with(heads, MEMFD),
        "flood": _with(heads, FLOOD, "print('after the flood')"),
        "waits": _with(heads, WAITS, "print('after the wait')"),
        "peek": _with(heads, DIE, PEEK),
        "collide": _with(heads, COLLIDE, first=True),
        FORGED: heads,
    }
    for name, nb in write.items():
        (inbox / f"{name}_ex01.ipynb").write_text(json.dumps(nb))
    patch = pytest.MonkeyPatch()
    patch.setattr(workflow, "make_config", functools.partial(_config, workflow.make_config))
    work = root / "work"
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = grade.main(["--assignment", "ex01", "--inbox", str(inbox), "--work", str(work), "--jobs", "2"])
    finally:
        patch.undo()
    course = workflow.Course(work)
    with (work / "summary.csv").open(newline="") as fh:
        rows = {row["student"]: row for row in csv.DictReader(fh)}
    return course, (code, out.getvalue(), err.getvalue()), rows


def test_make_grade_exits_4_and_lists_what_it_stopped(graded):
    _, (code, out, err), rows = graded
    assert code == 4, err
    assert "3 learner(s) graded with part of their notebook stopped or refused by the grader:" in err, err
    listed = {line.split(":")[0].strip() for line in err.splitlines() if line.startswith("  ")}
    assert listed == {"flood", "waits", "collide"}, err
    assert all(rows[s]["status"] == "ok" for s in rows), rows
    lines = out.splitlines()
    assert len([line for line in lines if " ex01 " in line]) == len(rows)  # one line per learner, no forged ones
    for line in lines:
        assert not any(unicodedata.category(ch)[0] == "C" for ch in line), line
        assert not line.startswith("bob"), line


@pytest.mark.parametrize(("student", "score"), [("heads", 8), ("ada_lovelace_123", 20), ("memfd", 8), ("flood", 8),
                                                ("waits", 8), ("peek", 8)])
def test_honest_answers_keep_their_score_beside_the_attacks(graded, student, score):
    _, _, rows = graded
    row = rows[student]
    assert row["status"] == "ok" and float(row["score"]) == score, row
    if student in ("heads", "ada_lovelace_123", "memfd"):
        # no stop, death or cap is blamed on them: the reasons are their failed checks' hints and nothing else
        # (summary.csv gives a hint per failed check since issue 53), in the order of failed_checks
        failed, reasons, at = row["failed_checks"].split(), row["reasons"], 0
        assert reasons.startswith(f"{failed[0]}: ") if failed else reasons == "", row  # a stop's reason comes first
        for gid in failed:
            at = reasons.find(f"{gid}: ", at)
            assert at >= 0, (gid, row)
    if score == 8:
        assert set(row["failed_checks"].split()) == HEADS_FAILED, row


def test_each_attack_ends_in_its_safe_outcome(graded):
    course, _, rows = graded
    assert f"sent more than {FLOOD_MIB} MiB of output" in rows["flood"]["reasons"]
    assert "waited more than 30 s (wall-clock) without finishing and was stopped" in rows["waits"]["reasons"]
    assert "memfd refused: PermissionError" in course.feedback_text("memfd", "ex01")
    peek = course.feedback_text("peek", "ex01")
    assert "the kernel died" in rows["peek"]["reasons"] and "BEGIN HIDDEN" not in peek
    for hidden in ("check_close", "kv_misconceptions", "from stage5.grading"):
        assert hidden not in peek.split("print('\\n'.join(In))")[-1], hidden
    collide = rows["collide"]
    assert collide["status"] == "ok" and float(collide["score"]) < 8, collide
    assert "after the flood" in course.feedback_text("flood", "ex01")
    assert "after the wait" in course.feedback_text("waits", "ex01")


def test_a_forged_file_name_reaches_no_csv_as_control_characters(graded):
    _, _, rows = graded
    forged = [row for row in rows.values() if row["source"].startswith("mallory")]
    assert len(forged) == 1 and float(forged[0]["score"]) == 8, forged
    assert "\\x1b[2J" in forged[0]["source"] and "\\x0abob" in forged[0]["source"]
    for row in rows.values():
        for cell in row.values():
            assert not any(unicodedata.category(ch)[0] == "C" or ch in "\u2028\u2029" for ch in cell or ""), cell


def test_what_make_grade_prints_is_one_line_per_learner(tmp_path):
    """The same forged name through ``make grade``'s printing: every printed line is one learner's (or the run's)."""
    inbox = copy_fixtures("ex01", tmp_path / "inbox", ["heads_ex01.ipynb"])
    (inbox / "heads_ex01.ipynb").rename(inbox / f"{FORGED}_ex01.ipynb")
    (inbox / f"{FORGED}.txt").write_text("not a notebook")
    found = grade.sort_inbox(inbox, "ex01", ["ex01"])
    for label, why in found.skipped:
        line = grade.printable(f"skipped  {label}: {why}")
        assert "\n" not in line and "\x1b" not in line and "\u202e" not in line
    r = workflow.Result(next(iter(found.learners)), "ex01", source=found.learners[next(iter(found.learners))].label,
                        reasons=[f"identical copies not used: {FORGED}"])
    assert "\n" not in r.line() and "\x1b" not in r.line() and "\x07" not in r.line()
    assert not any(line.startswith("bob") for line in r.line().splitlines())
