"""A learner whose kernel answers the grader with code instead of data, graded through the real grader path
(grader/workflow.py, bubblewrap active) next to an honest learner.

The kernel's ``values`` and ``serve`` are replaced (in the learner's own kernel, where they run) by functions that
send the payload that once ran a shell command as the grader: ``{"__stage5__": "stage5.grading.sandbox:os.system",
"fields": {"command": "touch <marker>"}}``. The grader must read it as a failed check and run nothing; the learner
also raises exceptions named like the grader's own messages and plants a copy of the grader's record in a cell's
metadata, which must not reach the summary; a cell that imports the reference cost model is flagged for review.
The honest learner keeps their grade.
"""

from __future__ import annotations

import csv
import json
import shutil

import pytest
from grading_harness import REPO, Course

from stage5.grading.sandbox import isolation

pytestmark = pytest.mark.skipif(isolation()[0] != "bwrap", reason=f"no sandbox here: {isolation()[1]}")

HEADS_FAILED = {"a3_kv", "a5_concurrency", "a7_intensity_kv", "b1_kv_function", "b3_concurrency_function"}
FORGED = '=HYPERLINK("http://e.vil","click")'

PAYLOAD = """
import json as _json
import stage5.grading.remote as _remote
_P = {{"__stage5__": "stage5.grading.sandbox:os.system", "fields": {{"command": "touch {marker}"}}}}
_remote.values = lambda names: _json.dumps({{n: {{"value": _P}} for n in names}})
_remote.serve = lambda request: _json.dumps([{{"value": _P}}] * 40)
"""


def _code(source: str, **metadata) -> dict:
    return {"cell_type": "code", "execution_count": None, "metadata": metadata, "outputs": [], "source": source}


def _hostile(marker) -> dict:
    nb = json.loads((REPO / "tests" / "submissions" / "ex01" / "ada lovelace_123_ex01.ipynb").read_text())
    cells = nb["cells"]
    answer = next(c for c in cells if c["metadata"].get("nbgrader", {}).get("grade_id") == "a1_floor_answer")
    answer["source"] = "".join(answer["source"]) + "\nfrom stage5 import cost as _ref_cost\n" + \
        PAYLOAD.format(marker=marker)
    cells.append(_code(f"raise type('KernelDied', (Exception,), {{}})({FORGED!r})\n"))
    cells.append(_code(f"raise type('CellCPUTimeout', (Exception,), {{}})('x ' + {FORGED!r})\n"))
    cells.append(_code("x = 1\n", stage5_grader_errors=[{"ename": "KernelDied", "evalue": FORGED}]))
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile_values")
    marker = root / "the_grader_ran_this"
    inbox = root / "inbox"
    inbox.mkdir()
    shutil.copyfile(REPO / "tests" / "submissions" / "ex01" / "heads_ex01.ipynb", inbox / "heads_ex01.ipynb")
    (inbox / "mallory_ex01.ipynb").write_text(json.dumps(_hostile(marker)))
    course = Course(root / "work", cell_timeout_s=3)
    results = {r.student: r for r in course.grade(inbox, "ex01", jobs=2)}
    with (course.work / "summary.csv").open() as fh:
        summary = {row["student"]: row for row in csv.DictReader(fh)}
    return course, results, summary, marker


def test_the_payload_runs_nothing_on_the_host_and_is_a_failed_check(graded):
    course, results, _, marker = graded
    assert not marker.exists(), "the grader ran the kernel's command"
    r = results["mallory"]
    assert r.status == "ok" and r.score == 0, r.line()  # every hidden check read the payload, none passed
    text = course.feedback_text("mallory", "ex01")
    assert "could not be read" in text


def test_the_honest_neighbour_keeps_their_grade(graded):
    r = graded[1]["heads"]
    assert r.status == "ok" and r.score == 8 and set(r.failed) == HEADS_FAILED, r.line()
    assert graded[2]["heads"]["review"] == ""


def test_exceptions_named_like_grader_messages_forge_no_reason(graded):
    _, results, summary, _ = graded
    line = results["mallory"].line()
    assert "HYPERLINK" not in line and "e.vil" not in line, line
    assert "HYPERLINK" not in summary["mallory"]["reasons"], summary["mallory"]
    assert "died" not in summary["mallory"]["reasons"] and "timed out" not in summary["mallory"]["reasons"]


def test_the_reference_import_is_flagged_for_review_and_changes_no_score(graded):
    review = graded[2]["mallory"]["review"]
    assert "a1_floor_answer line" in review and "imports stage5.cost" in review, review
    assert "HYPERLINK" not in review
