"""What a submitted notebook must be before it is graded, the same on both doors: ``make grade``'s inbox
(``workflow.py``) and Formgrader's collect from a hub's exchange (``exchange_collect.py``).

:func:`prepare` reads a submitted file and returns the notebook to grade with the notes the learner's line gets:

* a file over :data:`MAX_SUBMISSION_BYTES`, not JSON, not nbformat 4, or whose cells are not objects (or number over
  :data:`MAX_CELLS`) is :class:`InvalidSubmission`, one line;
* lone surrogates (which no kernel message or UTF-8 file can carry), in values and in keys alike, are replaced by
  U+FFFD, and counted (issue 52: one in a metadata key left a 0-byte copy of the learner's notebook);
* changed nbgrader metadata (a grading cell added, duplicated, renamed, with other flags or points, or an answer
  cell's metadata gone) is graded on the release's grading cells with the learner's answers (:data:`RESTORED`);
* locked cells (tests, setup, given data) that were deleted, edited, duplicated or moved are put back from the
  release in their place, before anything runs, and noted (:func:`locked_changes`).
"""

from __future__ import annotations

import copy
import difflib
import json
import os
from pathlib import Path

MAX_SUBMISSION_BYTES = 50 * 2**20  # a submitted file larger than this is not opened
MAX_CELLS = 2000  # a notebook with more cells than this is not graded (the exercises have under 100)
INVALID = "invalid submission"
RESTORED = "your notebook's grading cells were changed; they were restored"


def prepare(path: Path, release: dict) -> tuple[dict, list[str]]:
    """(the notebook in ``path`` ready to grade against ``release`` (the released notebook, parsed), the notes for
    the learner's line); :class:`InvalidSubmission` (one line, starting "invalid submission: ") when it is no
    notebook the grader can run."""
    size = path.stat().st_size
    if size > MAX_SUBMISSION_BYTES:
        raise InvalidSubmission(f"{INVALID}: file is {size / 2**20:.0f} MiB, over the limit")
    try:
        nb, replaced = scrub_unicode(read_notebook(path))
    except InvalidSubmission as err:
        raise InvalidSubmission(f"{INVALID}: {err}") from None
    except (ValueError, UnicodeDecodeError, RecursionError, MemoryError) as err:
        raise InvalidSubmission(f"{INVALID}: not a valid notebook ({type(err).__name__})") from None
    notes = [f"{replaced} invalid Unicode character(s) replaced by U+FFFD"] if replaced else []
    changed, locked = metadata_changed(nb, release), locked_changes(nb, release)
    if changed or locked:
        nb = restore_grading_cells(nb, release)
        notes += [RESTORED] if changed else []
        # said only once it is true: each locked cell now stands once, as released, in the release's order
        if locked_changes(nb, release):
            raise InvalidSubmission(f"{INVALID}: its locked cells could not be restored from the release")
        notes += locked
    return nb, notes


class InvalidSubmission(ValueError):
    """A submitted file that is not a notebook the grader can run; the message is one line for the summary."""


def read_notebook(path: Path) -> dict:
    """The notebook in ``path`` as parsed JSON, with its structure checked as far as grading relies on it (nbformat
    4's: a list of cell objects, each with a known type, text source and object metadata); else InvalidSubmission."""
    nb = json.loads(path.read_bytes())
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise InvalidSubmission("not a valid notebook (no list of cells)")
    if nb.get("nbformat") != 4:
        raise InvalidSubmission(f"not a valid notebook (nbformat {json.dumps(nb.get('nbformat'))[:20]}, expected 4)")
    if not isinstance(nb.get("metadata", {}), dict):
        raise InvalidSubmission("not a valid notebook (its metadata is not an object)")
    if len(nb["cells"]) > MAX_CELLS:
        raise InvalidSubmission(f"{len(nb['cells'])} cells, over the limit of {MAX_CELLS}")
    for i, cell in enumerate(nb["cells"], 1):
        if not isinstance(cell, dict):
            raise InvalidSubmission(f"not a valid notebook (cell {i} is not an object)")
        if cell.get("cell_type") not in ("code", "markdown", "raw"):
            raise InvalidSubmission(f"not a valid notebook (cell {i} has no valid cell_type)")
        src = cell.get("source", "")
        if not isinstance(src, str) and not (isinstance(src, list) and all(isinstance(x, str) for x in src)):
            raise InvalidSubmission(f"not a valid notebook (cell {i}'s source is not text)")
        if not isinstance(cell.get("metadata", {}), dict) or not isinstance(_nbgrader_meta(cell, raw=True), dict):
            raise InvalidSubmission(f"not a valid notebook (cell {i}'s metadata is not an object)")
        outputs = cell.get("outputs", [])
        if not isinstance(outputs, list) or not all(isinstance(o, dict) for o in outputs):
            raise InvalidSubmission(f"not a valid notebook (cell {i}'s outputs are not a list of objects)")
    return nb


def _nbgrader_meta(cell: dict, raw: bool = False):
    """A cell's nbgrader metadata ({} when it has none); ``raw``: as found, even when not an object."""
    meta = cell.get("metadata") if isinstance(cell, dict) else None
    found = meta.get("nbgrader", {}) if isinstance(meta, dict) else {}
    return found if raw else (found if isinstance(found, dict) else {})


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


_FLAGS = ("grade", "solution", "locked", "points", "task")


def _flags(cell: dict) -> tuple:
    meta = _nbgrader_meta(cell)
    return (cell.get("cell_type"), *(meta.get(k) or False for k in _FLAGS))


def metadata_changed(submitted: dict, release: dict) -> bool:
    """Whether a submission's nbgrader metadata differs from the release's: a grading cell added, duplicated,
    renamed or with its flags or points changed, or an answer cell's metadata gone. (A deleted or edited test cell
    is :func:`locked_changes`'s case.)"""
    ours = {m["grade_id"]: _flags(c) for c in release["cells"] if (m := _nbgrader_meta(c)).get("grade_id")}
    seen: set[str] = set()
    for cell in submitted["cells"]:
        meta = _nbgrader_meta(cell)
        if not meta:
            continue
        gid = meta.get("grade_id")
        if gid not in ours or gid in seen or _flags(cell) != ours[gid]:
            return True
        seen.add(gid)
    answers = {gid for gid, flags in ours.items() if flags[2]}  # flags[2]: solution
    return bool(answers - seen)


def restore_grading_cells(submitted: dict, release: dict) -> dict:
    """The submission rebuilt on the release's grading cells: every cell with nbgrader metadata comes from the
    release (test and locked cells whole, answer cells with the learner's source), found by grade_id where the
    learner kept it and by position among the cells around it where not; the learner's other cells are kept as
    plain cells (any nbgrader metadata removed), in place."""
    ours = release["cells"]
    ids = {_nbgrader_meta(c).get("grade_id") for c in ours} - {None}

    def keys(cells: list[dict]) -> list[tuple]:
        used: set[str] = set()
        out = []
        for c in cells:
            gid = _nbgrader_meta(c).get("grade_id")
            if gid in ids and gid not in used:
                used.add(gid)
                out.append(("id", gid))
            else:
                out.append(("src", c.get("cell_type"), _source(c)))
        return out

    theirs = submitted["cells"]
    cells: list[dict] = []
    extra = 0

    def plain(cell: dict) -> dict:
        nonlocal extra
        extra += 1
        cell = copy.deepcopy(cell)
        cell.get("metadata", {}).pop("nbgrader", None)
        if "id" in cell:
            cell["id"] = f"learner-{extra}"  # never the id of a restored cell
        return cell

    def restored(rel: dict, sub: dict | None) -> dict:
        cell = copy.deepcopy(rel)
        meta = _nbgrader_meta(rel)
        if sub is not None and sub.get("cell_type") == rel["cell_type"]:
            if meta.get("solution"):
                cell["source"] = sub.get("source", "")  # the learner's answer, on the release's metadata
            elif not meta:
                return plain(sub)  # an ordinary cell the learner may edit
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
        return cell

    matcher = difflib.SequenceMatcher(None, keys(ours), keys(theirs), autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        rel_block, sub_block = ours[i1:i2], theirs[j1:j2]
        if tag == "equal" or (tag == "replace" and len(rel_block) == len(sub_block)):
            cells += [restored(r, s) for r, s in zip(rel_block, sub_block, strict=True)]
            continue
        # unequal blocks: each answer cell takes the learner's next cell of its type; cells left over are kept
        taken: set[int] = set()
        for rel in rel_block:
            sub = None
            if _nbgrader_meta(rel).get("solution"):
                sub = next((s for k, s in enumerate(sub_block) if k not in taken
                            and s.get("cell_type") == rel["cell_type"]), None)
                taken |= {k for k, s in enumerate(sub_block) if s is sub}
            cells.append(restored(rel, sub))
        restored_sources = {_source(r) for r in rel_block}
        cells += [plain(s) for k, s in enumerate(sub_block)
                  if k not in taken and _source(s) not in restored_sources]
    out = {k: copy.deepcopy(v) for k, v in submitted.items() if k != "cells"}
    out["cells"] = cells
    out["nbformat"], out["nbformat_minor"] = release["nbformat"], release["nbformat_minor"]
    return out


def _locked(nb: dict) -> list[tuple[str, dict]]:
    """(grade_id, cell) of ``nb``'s locked cells that are not answers (tests, setup, given data), in order."""
    out = []
    for cell in nb.get("cells", []):
        meta = _nbgrader_meta(cell)
        gid = meta.get("grade_id")
        if isinstance(gid, str) and (meta.get("locked") or meta.get("grade")) and not meta.get("solution"):
            out.append((gid, cell))
    return out


def locked_changes(submitted: dict, release: dict) -> list[str]:
    """One note per locked cell of the release (test, setup or given-data cell) that ``submitted`` deleted,
    edited, duplicated or moved (past another graded cell): such cells come from the release, never from the submission (a deleted
    ``deployments`` cell would otherwise let the learner's own definitions stand in for the exercise's), and
    one per answer cell moved out of the release's order (which one moved is the longest run in the release's
    order kept). Empty when every locked cell stands once, unchanged, and the graded cells are in the release's
    order."""
    mine = _locked(release)
    theirs: dict[str, list[dict]] = {}
    for gid, cell in _locked(submitted):
        theirs.setdefault(gid, []).append(cell)
    # in place: the order among the release's graded cells (locked and answer cells) is the release's
    graded = [gid for c in release.get("cells", []) if isinstance(gid := _nbgrader_meta(c).get("grade_id"), str)]
    order = [gid for c in submitted.get("cells", []) if (gid := _nbgrader_meta(c).get("grade_id")) in set(graded)]
    in_order = set(_in_order(graded, list(dict.fromkeys(order))))
    notes = []
    for gid, cell in mine:
        kind = "test cell" if _nbgrader_meta(cell).get("grade") else "locked cell"
        found = theirs.get(gid, [])
        if not found:
            why = "was deleted"
        elif any(_source(c).strip() != _source(cell).strip() or c.get("cell_type") != cell.get("cell_type")
                 for c in found):
            why = "was edited"
        elif len(found) > 1:
            why = "was duplicated"
        elif gid not in in_order:
            why = "was moved"
        else:
            continue
        notes.append(f"{kind} {gid} {why}: restored from the release, in its place")
    mine_ids = dict(mine)
    for gid in dict.fromkeys(order):  # answer cells out of the release's order: graded in the release's place
        if gid not in in_order and gid not in mine_ids:
            notes.append(f"answer cell {gid} was moved: graded in its place in the release")
    return notes


def _in_order(ours: list[str], theirs: list[str]) -> list[str]:
    """The ids of ``theirs`` that keep the release's order (the longest run in common); the rest were moved."""
    matcher = difflib.SequenceMatcher(None, ours, theirs, autojunk=False)
    return [gid for block in matcher.get_matching_blocks() for gid in ours[block.a:block.a + block.size]]


def tampering(submitted: dict, release: dict) -> list[str]:
    """Notes on locked cells (tests, setup, given data) deleted, edited, duplicated or moved; :func:`prepare`
    restores them from the release before anything runs (alias of :func:`locked_changes`)."""
    return locked_changes(submitted, release)


def scrub_unicode(value, count: list[int] | None = None):
    """``value`` (parsed JSON) with lone surrogates, which no kernel message or file can carry, replaced by U+FFFD in
    every string, an object's keys included; returns (clean value, number replaced). Two keys that clean to the
    same text are both kept, the later one suffixed, so nothing the learner wrote is dropped."""
    top = count is None
    count = [0] if top else count
    if isinstance(value, str):
        out = _scrub_text(value, count)
    elif isinstance(value, list):
        out = [scrub_unicode(v, count) for v in value]
    elif isinstance(value, dict):
        out = {}
        for k, v in value.items():
            key = _scrub_text(k, count)
            if key != k:
                while key in value or key in out:  # a cleaned key never lands on another key's value
                    key += "\ufffd"
            out[key] = scrub_unicode(v, count)
    else:
        out = value
    return (out, count[0]) if top else out


def _scrub_text(text: str, count: list[int]) -> str:
    if not any("\ud800" <= ch <= "\udfff" for ch in text):
        return text
    count[0] += sum("\ud800" <= ch <= "\udfff" for ch in text)
    return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in text)  # one U+FFFD for each


def write_notebook(path: Path, nb: dict) -> None:
    """Write ``nb`` to ``path`` as a learner's file is written everywhere in the grader: to a new file beside it,
    which replaces ``path`` only once it is whole (``os.replace`` is atomic), so a failure (a character no file can
    hold, a full disk) leaves the file that was there, never a truncated one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.intake-tmp")
    try:
        tmp.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
