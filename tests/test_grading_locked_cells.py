"""Issue 48, found case 3: locked cells (tests, setup, given data) come from the release, never from the submission.

A deleted, edited, duplicated or moved locked cell is put back from the release, in its place, before anything
runs, and the learner's line says so (and says nothing when nothing was changed). Checked in-process on
:func:`intake.prepare`, the step both doors (``make grade``, the hub's collect) run before grading: for every
exercise, every locked cell, each change leaves the notebook the grader runs as it was, so the grade cannot move.
One end-to-end case runs the issue's exercise 3 attack (its ``deployments`` cell deleted, the learner's own
deployments defined in an answer cell) through the sandboxed kernel and the grader's hidden checks."""

from __future__ import annotations

import copy
import json

import pytest
from grading_harness import REPO, intake

EXERCISES = ("ex01", "ex02", "ex03", "ex04", "clearing")
RELEASES = {ex: json.loads((REPO / "exercises" / ex / f"{ex}.ipynb").read_text()) for ex in EXERCISES}
# a learner who answered (exercise 1), else the release as handed out: the locked cells are the same
SUBMITTED = {**RELEASES, "ex01": json.loads((REPO / "tests" / "submissions" / "ex01" / "heads_ex01.ipynb").read_text())}
LOCKED = [(ex, m["grade_id"]) for ex in EXERCISES for c in RELEASES[ex]["cells"]
          if (m := c["metadata"].get("nbgrader", {})).get("locked") and not m.get("solution")]


def _index(nb: dict, gid: str) -> int:
    return next(i for i, c in enumerate(nb["cells"]) if intake._nbgrader_meta(c).get("grade_id") == gid)


def _delete(nb: dict, gid: str) -> None:
    del nb["cells"][_index(nb, gid)]


def _edit(nb: dict, gid: str) -> None:
    nb["cells"][_index(nb, gid)]["source"] = "chat_70b = rag_8b = assistant_7b = WORKLOAD = None  # mine"


def _duplicate(nb: dict, gid: str) -> None:
    i = _index(nb, gid)
    nb["cells"].insert(i + 1, copy.deepcopy(nb["cells"][i]))


def _move(nb: dict, gid: str) -> None:
    """Before the graded cell above it (after the one below, for the first)."""
    i = _index(nb, gid)
    graded = [k for k, c in enumerate(nb["cells"]) if intake._nbgrader_meta(c).get("grade_id") and k != i]
    above = [k for k in graded if k < i]
    cell = nb["cells"].pop(i)
    to = above[-1] if above else next(k for k in graded if k > i)  # (indices past i moved up by one)
    nb["cells"].insert(to, cell)


CHANGES = {"deleted": _delete, "edited": _edit, "duplicated": _duplicate, "moved": _move}


def _prepare(tmp_path, nb: dict, release: dict) -> tuple[dict, list[str]]:
    path = tmp_path / "x.ipynb"
    path.write_text(json.dumps(nb))
    return intake.prepare(path, release)


def _graded_cells(nb: dict) -> list[tuple]:
    """What grading reads: every cell with nbgrader metadata (its type, metadata and source), in order."""
    return [(c["cell_type"], json.dumps(intake._nbgrader_meta(c), sort_keys=True), intake._source(c))
            for c in nb["cells"] if intake._nbgrader_meta(c)]


def _code(nb: dict) -> list[str]:
    return [intake._source(c) for c in nb["cells"] if c["cell_type"] == "code"]


@pytest.mark.parametrize("exercise", EXERCISES)
def test_an_untouched_notebook_has_nothing_restored(tmp_path, exercise):
    nb, notes = _prepare(tmp_path, SUBMITTED[exercise], RELEASES[exercise])
    assert not [n for n in notes if "restored" in n or "was " in n], notes
    assert _code(nb) == _code(SUBMITTED[exercise])


def test_every_exercise_has_the_locked_cells_the_issue_names():
    assert {("ex01", "setup"), ("ex02", "setup"), ("ex02", "workload"), ("ex03", "setup"),
            ("ex03", "deployments")} <= set(LOCKED)


@pytest.mark.parametrize(("exercise", "gid"), LOCKED)
def test_a_changed_locked_cell_is_restored_in_its_place(tmp_path, exercise, gid):
    release, honest = RELEASES[exercise], SUBMITTED[exercise]
    want, _ = _prepare(tmp_path, honest, release)
    for change, apply in CHANGES.items():
        nb = copy.deepcopy(honest)
        apply(nb, gid)
        got, notes = _prepare(tmp_path, nb, release)
        assert _graded_cells(got) == _graded_cells(want), (gid, change)
        # (moved below the graded cell after it, the first locked cell reads as that cell moved up: either way
        # the note names a move, and every graded cell is back in the release's order)
        assert any(f"{gid} was {change}: restored from the release" in n for n in notes) or (
            change == "moved" and any("was moved: " in n for n in notes)), (gid, change, notes)
        assert not intake.locked_changes(got, release)
        if change == "deleted":  # nothing else changed: the notebook that runs is the honest one, cell for cell
            assert _code(got) == _code(want), gid


def test_exercise_3_deployments_deleted_and_redefined_in_an_answer(tmp_path):
    """The issue's attack: the learner's own deployments stand in for the exercise's. After preparation the
    release's ``deployments`` cell runs before every answer cell (and in the grader's trusted namespace)."""
    release = RELEASES["ex03"]
    nb = copy.deepcopy(release)
    _delete(nb, "deployments")
    first_answer = next(c for c in nb["cells"] if intake._nbgrader_meta(c).get("solution")
                        and c["cell_type"] == "code")
    first_answer["source"] = ("chat_70b = rag_8b = assistant_7b = None  # the learner's own deployments\n"
                              + intake._source(first_answer))
    got, notes = _prepare(tmp_path, nb, release)
    order = [intake._nbgrader_meta(c).get("grade_id") for c in got["cells"]]
    assert order.index("deployments") < order.index(intake._nbgrader_meta(first_answer)["grade_id"])
    assert intake._source(got["cells"][order.index("deployments")]) == intake._source(
        release["cells"][_index(release, "deployments")])
    assert "locked cell deployments was deleted: restored from the release, in its place" in notes


@pytest.mark.skipif(__import__("stage5.grading.sandbox", fromlist=["isolation"]).isolation()[0] != "bwrap",
                    reason="the end-to-end case runs the notebook in the sandbox")
def test_exercise_3_attack_end_to_end(tmp_path, monkeypatch):
    """The issue's attack through the grader: ``deployments`` deleted, the learner's own deployment (one 8B model,
    short prompts, one user) under all three names, and the diagnosis that is right for it as the three
    predictions. Taken in by :func:`intake.prepare`, the hidden tests put back as nbgrader's OverwriteCells does,
    and run by :class:`SandboxedExecute`: A1-A3 are judged on the exercise's deployments and fail. (Before the
    restore, the grader fetched the deployments from the kernel and all three passed.)"""
    import nbformat
    from sandboxed_execute import SandboxedExecute

    from stage5.grading.ex03 import reference_diagnosis

    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")  # the release's measured-engine cell skips itself
    release = RELEASES["ex03"]
    solution = json.loads((REPO / "solutions" / "ex03" / "ex03.ipynb").read_text())
    own = {"model": "llama3-8b", "gpu": "H100-SXM", "num_gpus": 1, "prompt": 128, "output": 1024,
           "concurrency": 1, "objective": "cost"}
    ref = reference_diagnosis(own)
    prediction = {"phase": ref.phase, "decode_bound": ref.decode_bound, "best_lever": ref.best_lever,
                  "gain": round(ref.gains[ref.best_lever], 2)}
    nb = copy.deepcopy(release)
    _delete(nb, "deployments")
    answers = {"a1_prediction_answer": "chat_70b = rag_8b = assistant_7b = Deployment(" + ", ".join(
        f"{k}={v!r}" for k, v in own.items()) + f")\nprediction_chat = {prediction!r}\n",
        "a2_prediction_answer": f"prediction_rag = {prediction!r}\n",
        "a3_prediction_answer": f"prediction_assistant = {prediction!r}\n"}
    for cell in nb["cells"]:
        cell["source"] = answers.get(intake._nbgrader_meta(cell).get("grade_id"), cell["source"])
    got, notes = _prepare(tmp_path, nb, release)
    assert "locked cell deployments was deleted: restored from the release, in its place" in notes
    hidden = {intake._nbgrader_meta(c).get("grade_id"): intake._source(c) for c in solution["cells"]
              if intake._nbgrader_meta(c).get("grade")}
    tests = ("a1_prediction", "a2_prediction", "a3_prediction")
    last = max(_index(got, t) for t in tests)
    got["cells"] = got["cells"][:last + 1]  # Part A is enough: the rest costs CPU and proves nothing here
    for cell in got["cells"]:
        gid = intake._nbgrader_meta(cell).get("grade_id")
        if gid in hidden:
            cell["source"] = hidden[gid]
    out, _ = SandboxedExecute(cell_cpu_s=30).preprocess(nbformat.reads(json.dumps(got), as_version=4),
                                                        {"metadata": {"path": "."}})
    for test in tests:
        errors = [o for o in out.cells[_index(got, test)].outputs if o.get("output_type") == "error"]
        assert errors and errors[0]["ename"] == "GradingError", (test, errors)
