"""Why each failed check failed, in words an instructor can read in summary.csv (the hints the feedback page shows).

A hint is taken only from text the course wrote or the grader recorded, never from what a learner's kernel chose to
print, since a learner's exception can say anything ("=HYPERLINK(...)", "passed"):

* the grader's own verdict on the cell (``sandboxed_execute.GRADER_ERRORS``: a hidden check's ``GradingError``, or
  the grader stopping the cell), which is one line already;
* else the cell's error, when its text is one of the string constants of the cell's source (the test cell is the
  gradebook's, restored before grading): a visible ``assert ..., "hint"`` that failed;
* else, for the refusal of a function the exercise puts off limits (``UnavailableError``, raised in the kernel by the
  grading view's stand-ins), the course's own sentence for it, naming no function (the kernel's message could);
* else only the exception's class name, when it is a plain identifier ("failed (NameError)").
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from sandboxed_execute import GRADER_ERRORS

HINT_CHARS = 300  # a CSV cell stays readable; the feedback page has the whole text
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")
OFF_LIMITS = ("failed (UnavailableError): it called a function the exercise's Rules put off limits, which computes "
              "this answer for you; write the computation yourself")


def _constants(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= HINT_CHARS else text[: HINT_CHARS - 1] + "…"


def cell_hint(cell: dict) -> str:
    """The reason one graded cell failed, from the grader's record or the course's own words (module docstring)."""
    records = [r for r in cell.get("metadata", {}).get(GRADER_ERRORS, []) if isinstance(r, dict)]
    verdicts = [r for r in records if r.get("ename") == "GradingError"] or records
    if verdicts:
        return _short(verdicts[0].get("evalue", "") or verdicts[0].get("ename", "failed"))
    source = "".join(cell.get("source", ""))
    errors = [o for o in cell.get("outputs", []) if isinstance(o, dict) and o.get("output_type") == "error"]
    if not errors:
        return "failed (no error shown: the cell did not run to its checks)"
    ename, evalue = str(errors[-1].get("ename", "")), str(errors[-1].get("evalue", ""))
    if evalue.strip() and evalue in _constants(source):
        return _short(evalue)
    if ename == "UnavailableError":
        return OFF_LIMITS
    return f"failed ({ename})" if _NAME.fullmatch(ename) else "failed"


def hints(folder: Path, failed: list[str]) -> list[str]:
    """``"grade_id: why"`` for each of ``failed`` in the autograded notebooks of ``folder``, in that order."""
    cells: dict[str, dict] = {}
    for path in sorted(Path(folder).glob("*.ipynb")):
        try:
            nb = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for cell in nb.get("cells", []):
            gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") if isinstance(cell, dict) else None
            if isinstance(gid, str) and gid not in cells:
                cells[gid] = cell
    return [f"{gid}: {cell_hint(cells[gid]) if gid in cells else 'failed'}" for gid in failed]
