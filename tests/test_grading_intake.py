"""What the grader does with a submitted file before any kernel runs, without grading: files that are not notebooks
become one "invalid submission" line, tampered nbgrader metadata is rebuilt on the release's grading cells, and
every CSV cell is inert. (The same cases graded in a class run: test_grading_boundary.py.)"""

from __future__ import annotations

import copy
import json

import pytest
from grading_harness import REPO, intake, workflow

RELEASE = json.loads((REPO / "exercises" / "ex01" / "ex01.ipynb").read_text())
HEADS = json.loads((REPO / "tests" / "submissions" / "ex01" / "heads_ex01.ipynb").read_text())


def _meta(nb: dict, gid: str) -> dict:
    return next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == gid)["metadata"][
        "nbgrader"]


def _cell(nb: dict, gid: str) -> dict:
    return next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == gid)


def _new_grade_cell(nb):
    bonus = copy.deepcopy(_cell(nb, "a1_floor"))
    bonus["metadata"]["nbgrader"].update(grade_id="bonus", points=50)
    bonus["source"] = "pass"
    nb["cells"].insert(7, bonus)


def _duplicate(nb):
    dup = copy.deepcopy(_cell(nb, "a1_floor_answer"))
    dup["source"] = "floor_ms_llama8b_l4 = 0.0"
    nb["cells"].insert(3, dup)


def _strip(nb):
    for c in nb["cells"]:
        c["metadata"].pop("nbgrader", None)


TAMPER = {
    "a new grade cell": _new_grade_cell,
    "a locked answer cell": lambda nb: _meta(nb, "a3_kv_answer").update(locked=True),
    "solution on a test cell": lambda nb: _meta(nb, "a1_floor").update(solution=True),
    "grade false on a test cell": lambda nb: _meta(nb, "a2_ridge").update(grade=False),
    "points changed": lambda nb: _meta(nb, "b1_kv_function").update(points=30),
    "a duplicate grade_id": _duplicate,
    "an answer cell renamed": lambda nb: _meta(nb, "a4_budget_answer").update(grade_id="mine"),
    "all metadata stripped": _strip,
}


def _grading_cells(nb: dict) -> list[tuple]:
    return [(c["cell_type"], json.dumps(c["metadata"]["nbgrader"], sort_keys=True),
             intake._source(c) if not c["metadata"]["nbgrader"].get("solution") else None)
            for c in nb["cells"] if c["metadata"].get("nbgrader")]


def _answers(nb: dict) -> dict[str, str]:
    return {c["metadata"]["nbgrader"]["grade_id"]: intake._source(c) for c in nb["cells"]
            if c["metadata"].get("nbgrader", {}).get("solution")}


def test_an_honest_notebook_is_left_alone():
    assert not intake.metadata_changed(HEADS, RELEASE)


@pytest.mark.parametrize("kind", sorted(TAMPER))
def test_tampered_metadata_is_rebuilt_on_the_release_cells(kind):
    nb = copy.deepcopy(HEADS)
    TAMPER[kind](nb)
    assert intake.metadata_changed(nb, RELEASE)
    restored = intake.restore_grading_cells(nb, RELEASE)
    # every grading cell is the release's (metadata, and source for tests), in the release's order
    assert _grading_cells(restored) == _grading_cells(RELEASE)
    # and every answer is the learner's own (the duplicate's forged answer is kept only as a plain cell)
    assert _answers(restored) == _answers(HEADS)
    assert not intake.metadata_changed(restored, RELEASE)
    assert intake.tampering(restored, RELEASE) == []
    ids = [c.get("id") for c in restored["cells"] if "id" in c]
    assert len(ids) == len(set(ids))


def _write(tmp_path, value, raw: str | None = None):
    path = tmp_path / "x_ex01.ipynb"
    path.write_text(raw if raw is not None else json.dumps(value))
    return path


@pytest.mark.parametrize(("value", "words"), [
    ({"nbformat": 4, "metadata": {}, "cells": [1, "x", None]}, "cell 1 is not an object"),
    ({"nbformat": 3, "metadata": {}, "cells": []}, "nbformat 3"),
    ({"nbformat": 4, "metadata": {}, "cells": [{"cell_type": "code", "source": 5}]}, "source is not text"),
    ({"nbformat": 4, "metadata": {}, "cells": [{"cell_type": "widget", "source": ""}]}, "no valid cell_type"),
    ({"nbformat": 4, "metadata": {}, "cells": [{"cell_type": "code", "source": "", "metadata": {"nbgrader": 1}}]},
     "metadata is not an object"),
    ({"nbformat": 4, "metadata": {}, "cells": [{"cell_type": "code", "source": "", "outputs": [7]}]},
     "outputs are not a list of objects"),
    ({"nbformat": 4, "metadata": {}, "cells": [{"cell_type": "raw", "source": ""}] * 2001}, "2001 cells"),
    ([1, 2], "no list of cells"),
])
def test_a_file_that_is_not_a_notebook_is_one_line(tmp_path, value, words):
    with pytest.raises(intake.InvalidSubmission, match=words) as err:
        intake.read_notebook(_write(tmp_path, value))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("cell", "safe"), [
    ("=HYPERLINK(\"http://x\")", "'=HYPERLINK(\"http://x\")"), ("+1+1", "'+1+1"), ("-1+1", "'-1+1"),
    ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "\\x09x"), ("\rx", "\\x0dx"), ("-inf", "'-inf"), ("\t1", "\\x091"),
    ("-2.5", "-2.5"), ("-1e3", "-1e3"), ("8", "8"), ("alice", "alice"), ("", ""),
])
def test_csv_cells_are_inert(cell, safe):
    assert workflow.csv_safe(cell) == safe


def test_exported_grades_are_rewritten_inert(tmp_path):
    path = tmp_path / "grades.csv"
    path.write_text("student_id,score\n=cmd|'/c calc'!A0,-1\n@x,3\n")
    workflow._neutralise_csv(path)
    assert path.read_text().splitlines() == ["student_id,score", "'=cmd|'/c calc'!A0,-1", "'@x,3"]


@pytest.mark.parametrize(("grade_id", "name"), [(None, "cell 32"), ("a2_ridge_answer", "a2_ridge_answer"),
                                                ("=HYPERLINK(x) y", "cell 32")])
@pytest.mark.parametrize("stopped", [False, True])
def test_a_cpu_timeout_names_its_cell(tmp_path, grade_id, name, stopped):
    """The reason names the cell that ran out of CPU time: its grade id, or its position when it has none (or one
    a note must not quote), never a fragment of the sandbox's label ("32 used more than ...")."""
    import sandboxed_execute

    course = workflow.Course(tmp_path / "work")
    folder = tmp_path / "work" / "autograded" / "someone" / "ex01"
    folder.mkdir(parents=True)
    cells = [{"cell_type": "code", "metadata": {}, "source": "", "outputs": []} for _ in range(40)]
    label = grade_id or "cell 32"  # what sandboxed_execute._grade_label gives this cell
    if grade_id:
        cells[31]["metadata"]["nbgrader"] = {"grade_id": grade_id}
    cells[31]["metadata"][sandboxed_execute.GRADER_ERRORS] = [
        {"ename": "CellCPUTimeout", "evalue": sandboxed_execute.cpu_timeout_text(label, 10, stopped)}]
    (folder / "ex01.ipynb").write_text(json.dumps({"cells": cells}))
    notes, _ = course._execution_problems(workflow.Result("someone", "ex01"))
    how = "stopped" if stopped else "interrupted"
    assert notes == [f"{name} timed out: used more than 10 s of CPU time and was {how}"]
