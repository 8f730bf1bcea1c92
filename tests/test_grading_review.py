"""The instructor's "review" column (grader/review.py): learner cells that import or call the course's reference
implementations, load code from source, or paste long runs of the course's source are flagged with their lines;
the course's own solutions are not; flags change no score."""

from __future__ import annotations

import ast
import json
import sys

import pytest
from grading_harness import REPO

sys.path.insert(0, str(REPO / "grader"))
import review  # noqa: E402

ASSIGNMENTS = ["clearing", "ex01", "ex02", "ex03", "ex04"]


def _release(assignment: str) -> dict:
    return json.loads((REPO / "exercises" / assignment / f"{assignment}.ipynb").read_text())


def _answer(release: dict, grade_id: str, source: str) -> dict:
    """``release`` with the answer cell ``grade_id`` written as ``source``."""
    nb = json.loads(json.dumps(release))
    cell = next(c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)
    cell["source"] = source
    return nb


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_courses_own_solutions_raise_no_flag(assignment):
    solution = json.loads((REPO / "solutions" / assignment / f"{assignment}.ipynb").read_text())
    assert review.review_notebook(solution, _release(assignment)) == []


def _reference_function(module: str, name: str) -> str:
    """The source of one function of a reference module, as a learner would paste it."""
    path = review._module_file(module)
    src = path.read_text()
    node = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef) and n.name == name)
    return ast.get_source_segment(src, node)


CHEATS = {
    "import": ("import stage5.cost as c\nfloor_ms_llama8b_l4 = 1.0\n", 1, "imports stage5.cost"),
    "from import": ("x = 1\nfrom stage5 import cost\n", 2, "imports stage5.cost"),
    "from engine import": ("from stage5.engine.kv import PagedAllocator\n", 1, "stage5.engine.kv.PagedAllocator"),
    "dotted use": ("import stage5\ny = stage5.cost.decode_floor_s(d)\n", 2, "uses stage5.cost.decode_floor_s"),
    "method on a given object": ("floor_ms_llama8b_l4 = llama8b.kv_bytes_per_token(2)\n", 1, ".kv_bytes_per_token"),
    "spec_from_file_location": ("import importlib.util as u\ns = u.spec_from_file_location('c', p)\n", 2,
                                "spec_from_file_location"),
    "importlib.util import": ("from importlib.util import spec_from_file_location\n", 1, "loads modules from source"),
    "exec of a file": ("exec(open('/usr/lib/stage5/cost.py').read())\n", 1, "exec()"),
    "runpy": ("import runpy\nns = runpy.run_path(p)\n", 2, "run_path"),
    "SourceFileLoader": ("from importlib.machinery import SourceFileLoader\nm = SourceFileLoader('c', p)\n", 1,
                         "SourceFileLoader"),
    "the file by name": ("p = 'site-packages/stage5/cost.py'\n", 1, "names a reference module"),
    "run magic": ("x = 1\n%run -i somewhere/cost.py\n", 2, "IPython magic"),
    "import_module": ("import importlib\nc = importlib.import_module('stage5.' + 'cost')\n", 2, "import_module"),
}


@pytest.mark.parametrize("case", sorted(CHEATS))
def test_each_way_of_leaning_on_the_reference_is_flagged_with_its_line(case):
    source, line, words = CHEATS[case]
    nb = _answer(_release("ex01"), "a1_floor_answer", source)
    flags = review.review_notebook(nb, _release("ex01"))
    assert any(f.startswith(f"a1_floor_answer line {line}: ") and words in f for f in flags), flags


def test_a_pasted_copy_of_the_reference_is_flagged_by_token_similarity():
    pasted = _reference_function("stage5.cost", "decode_step").replace("def decode_step", "def my_step")
    src = "import math\n\n" + pasted + "\n\nmax_seqs_qwen72b_32k = 3\n"
    flags = review.review_notebook(_answer(_release("ex01"), "a5_concurrency_answer", src), _release("ex01"))
    assert any("repeat" in f and "stage5.cost's source" in f and f.startswith("a5_concurrency_answer line 3")
               for f in flags), flags
    # the same function written in one's own words is not a copy
    own = ("def my_capacity(dep, context):\n    per_seq = context * dep.model.num_layers * 2\n"
           "    return max(0, int(dep.budget // per_seq))\n")
    assert review.review_notebook(_answer(_release("ex01"), "a5_concurrency_answer", own), _release("ex01")) == []


def test_a_cell_the_learner_added_is_read_too_and_what_the_exercise_imports_is_not_flagged():
    release = _release("ex01")
    nb = json.loads(json.dumps(release))
    nb["cells"].insert(3, {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                           "source": "from stage5 import cost as _c\n"})
    flags = review.review_notebook(nb, release)
    assert flags and flags[0].startswith("cell 4 line 1: imports stage5.cost")
    setup = "".join(next(c for c in release["cells"] if c["cell_type"] == "code")["source"])
    given = [ln for ln in setup.splitlines() if ln.startswith("from stage5.models import")]
    assert given, "the ex01 setup imports from stage5.models"
    assert review.review_notebook(_answer(release, "a1_floor_answer", given[0] + "\n"), release) == []


def test_a_learner_label_or_line_cannot_inject_into_the_summary():
    release = _release("ex01")
    nb = _answer(release, "a1_floor_answer", "import stage5.cost  # \t\x1b[31m =HYPERLINK(1)\n")
    cell = next(c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")
                == "a1_floor_answer")
    cell["metadata"]["nbgrader"]["grade_id"] = "=HYPERLINK(\"x\")"
    flags = review.review_notebook(nb, release)
    assert flags and all(f.startswith("cell ") and "\x1b" not in f and "\t" not in f and "\n" not in f
                         for f in flags), flags


@pytest.mark.parametrize("cells", [
    [1, "x", None],
    [{"cell_type": "code", "source": ["import stage5.cost\n", 3, None], "metadata": None}],
    [{"cell_type": "code", "source": "(" * 5000, "metadata": {}}],
    [{"cell_type": "code", "source": "def f(:\n  import stage5.cost", "metadata": {"nbgrader": "x"}}],
    [{"cell_type": "code", "source": "import stage5.cost", "metadata": {"nbgrader": {"grade_id": ["a"]}}}],
])
def test_malformed_notebooks_are_reviewed_without_crashing(cells):
    flags = review.review_notebook({"cells": cells}, _release("ex01"))
    assert isinstance(flags, list)
    assert review.review_notebook([1, 2], _release("ex01")) == []


def test_the_review_of_a_folder_skips_unreadable_files(tmp_path):
    (tmp_path / "ex01.ipynb").write_text(json.dumps(_answer(_release("ex01"), "a1_floor_answer",
                                                            "import stage5.cost\n")))
    (tmp_path / "broken.ipynb").write_text("{not json")
    release = tmp_path / "release.ipynb"
    release.write_text(json.dumps(_release("ex01")))
    flags = review.review_folder(tmp_path, release)
    assert len(flags) == 1 and "imports stage5.cost" in flags[0]
