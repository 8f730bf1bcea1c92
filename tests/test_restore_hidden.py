"""Autograde restores hidden tests without a false "checksum has changed!" warning, and still warns on edits.

nbgrader's OverwriteCells warns for every test cell with hidden tests, edited or not (the gradebook's source cell
holds them, the released cell never did). tests/test_hub.py checks the whole term's log; this checks the rule on
every test cell of every exercise, with the source cells nbgrader's gradebook would hold.
"""

from __future__ import annotations

import copy
import logging
import sys
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from nbgrader import utils
from nbgrader.preprocessors import ClearHiddenTests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "grader"))
from restore_hidden import RestoreHiddenTests  # noqa: E402

ASSIGNMENTS = sorted(p.name for p in (REPO / "solutions").iterdir() if p.is_dir())


class Gradebook:
    """The two look-ups OverwriteCells makes, answered from the source notebook (as generate_assignment saved it)."""

    def __init__(self, source: nbformat.NotebookNode):
        self.cells = {c.metadata.nbgrader["grade_id"]: c for c in source.cells if "nbgrader" in c.metadata}

    def find_source_cell(self, grade_id, notebook_id, assignment_id):
        cell = self.cells[grade_id]
        meta = cell.metadata.nbgrader
        return SimpleNamespace(source=cell.source, cell_type=cell.cell_type, locked=bool(meta.get("locked")),
                               checksum=utils.compute_checksum(cell))

    def find_graded_cell(self, grade_id, notebook_id, assignment_id):
        return SimpleNamespace(max_score=self.cells[grade_id].metadata.nbgrader["points"])


def hidden_test_cells(assignment: str):
    path = REPO / "solutions" / assignment / f"{assignment}.ipynb"
    source = nbformat.read(path, as_version=4)
    cells = [c for c in source.cells if "BEGIN HIDDEN TESTS" in c.source and c.metadata.get("nbgrader", {}).get("locked")]
    return source, cells


def restore(source, submitted_cell, caplog):
    pre = RestoreHiddenTests()
    pre.gradebook, pre.notebook_id, pre.assignment_id = Gradebook(source), "nb", "a"
    with caplog.at_level(logging.WARNING):
        cell, _ = pre.preprocess_cell(submitted_cell, {}, 0)
    return cell


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_an_unedited_test_cell_gets_its_hidden_tests_back_silently(assignment, caplog):
    source, cells = hidden_test_cells(assignment)
    if not cells:
        pytest.skip(f"{assignment} has no hidden tests")
    for original in cells:
        released = copy.deepcopy(original)
        ClearHiddenTests()._remove_hidden_test_region(released)
        assert released.source != original.source
        restored = restore(source, released, caplog)
        assert restored.source == original.source
    assert "has changed" not in caplog.text


def test_an_edited_test_cell_is_still_reported_and_restored(caplog):
    source, cells = hidden_test_cells("ex01")
    edited = copy.deepcopy(cells[0])
    ClearHiddenTests()._remove_hidden_test_region(edited)
    edited.source += "\nassert True  # a learner's edit"
    restored = restore(source, edited, caplog)
    assert restored.source == cells[0].source
    assert "Attribute 'checksum' for cell" in caplog.text and "has changed" in caplog.text
