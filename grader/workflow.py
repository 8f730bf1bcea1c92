"""The instructor workflow, in-process: release, collect, autograde, feedback, export, summary.

Everything goes through ``nbgrader.apps.NbGraderAPI`` (no command-line start-up per step). One bad submission
never stops the batch: a notebook that is not JSON is recorded with a score of 0 and a reason; a cell that loops
forever is interrupted after the per-cell timeout; a deleted or edited test cell is restored from the
gradebook and noted; a submission nbgrader cannot grade at all is recorded with its error's last line.
"""

from __future__ import annotations

import csv
import html
import json
import re
import shutil
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.apps import NbGraderAPI
from nbgrader.plugins.export import CsvExportPlugin
from nbgrader_setup import REPO, make_config
from traitlets.config import Config

MAX_SUBMISSION_BYTES = 50 * 2**20  # a submitted file larger than this is not opened


@dataclass
class Result:
    """One student's outcome for one assignment."""

    student: str
    assignment: str
    source: str = ""
    status: str = "ok"  # ok | invalid | error
    reasons: list[str] = field(default_factory=list)
    score: float = 0.0
    max_score: float = 0.0
    auto_max: float = 0.0
    manual_pending: float = 0.0
    failed: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def line(self) -> str:
        pending = f" (+{self.manual_pending:g} to mark by hand)" if self.manual_pending else ""
        text = f"{self.student:<24} {self.assignment}  {self.score:5.1f} / {self.auto_max:g}{pending}  {self.status}"
        if self.failed:
            text += f"; failed: {', '.join(self.failed)}"
        if self.reasons:
            text += f"; {'; '.join(self.reasons)}"
        return text


class Course:
    """The nbgrader course with its working state under ``work_dir`` (``grader/`` by default)."""

    def __init__(self, work_dir: str | Path | None = None, root: str | Path = REPO, config: Config | None = None,
                 **kw):
        self.root = Path(root).resolve()
        self.work = Path(work_dir).resolve() if work_dir else self.root / "grader"
        self.work.mkdir(parents=True, exist_ok=True)
        self.config = make_config(self.work, self.root, **kw)
        if config is not None:
            self.config.merge(config)
        self.db_url = self.config.CourseDirectory.db_url

    def api(self, **overrides: str) -> NbGraderAPI:
        c = Config(self.config)
        for key, value in overrides.items():
            setattr(c.CourseDirectory, key, value)
        return NbGraderAPI(config=c)

    # -------------------------------------------------------------------------------- release
    def release(self, assignment: str, release_dir: str | Path | None = None) -> Path:
        """``generate_assignment``: write the student version (default ``exercises/``) and record the
        assignment's cells in the gradebook. Returns the release folder of the assignment."""
        rel = str(Path(release_dir).resolve()) if release_dir else self.config.CourseDirectory.release_directory
        result = self.api(release_directory=rel).generate_assignment(assignment, force=True, create=True)
        if not result["success"]:
            raise RuntimeError(f"generate_assignment {assignment} failed:\n{result.get('error') or result.get('log')}")
        return (self.root / rel) / assignment

    # -------------------------------------------------------------------------------- collect
    def collect(self, inbox: str | Path, assignment: str, release_nb: Path) -> list[Result]:
        """Copy every notebook found in ``inbox`` (``.ipynb`` files, in folders or ``.zip`` archives) into the
        submitted folder, one student per file; the student id comes from the file (or folder) name."""
        inbox = Path(inbox)
        found: dict[str, tuple[Path, str]] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for path, label in _notebook_files(inbox, Path(tmp)):
                student = student_id(label, assignment)
                if not student:
                    continue
                if student in found and found[student][0].stat().st_mtime > path.stat().st_mtime:
                    continue
                found[student] = (path, label)
            results = [self._take(student, path, label, assignment, release_nb)
                       for student, (path, label) in sorted(found.items())]
        with Gradebook(self.db_url) as gb:
            for r in results:
                gb.update_or_create_student(r.student)
        return results

    def _take(self, student: str, path: Path, label: str, assignment: str, release_nb: Path) -> Result:
        r = Result(student, assignment, source=label)
        dest = Path(self.config.CourseDirectory.submitted_directory) / student / assignment
        shutil.rmtree(dest, ignore_errors=True)
        for step in ("autograded_directory", "feedback_directory"):
            shutil.rmtree(Path(getattr(self.config.CourseDirectory, step)) / student / assignment, ignore_errors=True)
        if path.stat().st_size > MAX_SUBMISSION_BYTES:
            r.status, r.reasons = "invalid", [f"file is {path.stat().st_size / 2**20:.0f} MiB, over the limit"]
            return r
        try:
            nb = json.loads(path.read_bytes())
            if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
                raise ValueError("no list of cells")
        except (ValueError, UnicodeDecodeError) as err:
            r.status, r.reasons = "invalid", [f"not a valid notebook ({type(err).__name__})"]
            return r
        r.reasons += _tampering(nb, json.loads(release_nb.read_text()))
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest / release_nb.name)
        return r

    # -------------------------------------------------------------------------------- grade
    def autograde(self, results: list[Result]) -> None:
        api = self.api()
        for r in results:
            if r.status != "ok":
                continue
            t0 = time.perf_counter()
            out = api.autograde(r.assignment, r.student, force=True, create=True)
            r.seconds = time.perf_counter() - t0
            if not out["success"]:
                r.status = "error"
                r.reasons.append(f"could not be graded: {_last_line(out.get('error', ''))}")
                continue
            r.reasons += self._execution_problems(r)

    def _execution_problems(self, r: Result) -> list[str]:
        notes = []
        folder = Path(self.config.CourseDirectory.autograded_directory) / r.student / r.assignment
        for nb_path in folder.glob("*.ipynb"):
            nb = json.loads(nb_path.read_text())
            for cell in nb["cells"]:
                for out in cell.get("outputs", []):
                    if out.get("output_type") != "error":
                        continue
                    gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "a cell")
                    if out.get("ename") == "CellTimeoutError":
                        notes.append(f"{gid} timed out ({self.config.Execute.timeout} s) and was interrupted")
                    elif out.get("ename") == "DeadKernelError":
                        notes.append(f"the kernel died in {gid}")
                if any(o.get("output_type") == "stream" and "output truncated" in "".join(o.get("text", ""))
                       for o in cell.get("outputs", [])):
                    notes.append("very large output truncated")
        return list(dict.fromkeys(notes))

    def feedback(self, results: list[Result]) -> None:
        api = self.api()
        for r in results:
            if r.status != "ok":
                continue
            out = api.generate_feedback(r.assignment, r.student, force=True)
            if not out["success"]:
                r.reasons.append(f"no feedback: {_last_line(out.get('error', ''))}")

    def feedback_text(self, student: str, assignment: str) -> str:
        """The text a learner reads in their feedback file (HTML tags removed), for checking what it reveals."""
        path = Path(self.config.CourseDirectory.feedback_directory) / student / assignment / f"{assignment}.html"
        return html.unescape(re.sub(r"<[^>]+>", "", path.read_text()))

    def scores(self, results: list[Result]) -> None:
        """Fill score, maxima and failed checks from the gradebook."""
        with Gradebook(self.db_url) as gb:
            for r in results:
                assignment = gb.find_assignment(r.assignment)
                r.max_score = assignment.max_score
                r.auto_max = sum(g.max_score for nb in assignment.notebooks for g in nb.grade_cells
                                 if not (g.cell_type == "markdown"))
                r.manual_pending = r.max_score - r.auto_max
                if r.status != "ok":
                    continue
                try:
                    sub = gb.find_submission(r.assignment, r.student)
                except MissingEntry:
                    continue
                r.score = sub.score
                for nb in sub.notebooks:
                    for grade in nb.grades:
                        if grade.cell.cell_type == "markdown":
                            continue
                        if (grade.score or 0) < grade.max_score:
                            r.failed.append(grade.name)

    def export(self, results: list[Result], out_dir: Path | None = None) -> tuple[Path, Path]:
        """nbgrader's CSV export (grades.csv) and a summary (summary.csv) with reasons and failed checks."""
        out_dir = Path(out_dir) if out_dir else self.work
        grades = out_dir / "grades.csv"
        with Gradebook(self.db_url) as gb:
            CsvExportPlugin(to=str(grades)).export(gb)
        summary = out_dir / "summary.csv"
        with summary.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["student", "assignment", "score", "auto_max", "manual_pending", "status", "failed_checks",
                        "reasons", "source", "seconds"])
            for r in results:
                w.writerow([r.student, r.assignment, f"{r.score:g}", f"{r.auto_max:g}", f"{r.manual_pending:g}",
                            r.status, " ".join(r.failed), "; ".join(r.reasons), r.source, f"{r.seconds:.1f}"])
        return grades, summary

    # -------------------------------------------------------------------------------- all of it
    def grade(self, inbox: str | Path, assignment: str, feedback: bool = True) -> list[Result]:
        """Record the assignment, collect ``inbox``, autograde, write feedback and export. Returns the results."""
        release = self.release(assignment, self.work / "release")
        notebooks = sorted(release.glob("*.ipynb"))
        if len(notebooks) != 1:
            raise RuntimeError(f"{assignment}: expected one notebook in the release, found {len(notebooks)}")
        results = self.collect(inbox, assignment, notebooks[0])
        self.autograde(results)
        if feedback:
            self.feedback(results)
        self.scores(results)
        self.export(results)
        return results


# ------------------------------------------------------------------------------------ helpers
def student_id(label: str, assignment: str) -> str:
    """A gradebook id from a file name: the assignment id and LMS decorations removed, lower case.

    ``ex01_alice.ipynb``, ``Alice-ex01.ipynb`` and ``alice/ex01.ipynb`` all give ``alice``; characters other
    than letters, digits, ``_`` and ``-`` become ``_``.
    """
    parts = Path(label).parts
    stem = Path(parts[-1]).stem
    stem = re.sub(r"\s*\(\d+\)$", "", stem)  # "alice_ex01 (1)" from a second download
    name = re.sub(re.escape(assignment), " ", stem, flags=re.IGNORECASE)
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", name.strip()).strip("_-").lower()
    if not name and len(parts) > 1:  # folder per student: alice/ex01.ipynb
        name = re.sub(r"[^A-Za-z0-9_-]+", "_", parts[-2]).strip("_-").lower()
    return name


def _notebook_files(inbox: Path, tmp: Path):
    """(path, label) for every .ipynb under ``inbox``, including inside .zip files (extracted under ``tmp``)."""
    if not inbox.exists():
        return
    for path in sorted(inbox.rglob("*")):
        rel = path.relative_to(inbox)
        if any(part.startswith(".") or part == "__MACOSX" for part in rel.parts):
            continue
        if path.suffix == ".ipynb" and path.is_file():
            yield path, str(rel)
        elif path.suffix == ".zip" and path.is_file():
            try:
                with zipfile.ZipFile(path) as zf:
                    for i, info in enumerate(zf.infolist()):
                        member = Path(info.filename)
                        if member.suffix != ".ipynb" or info.is_dir() or "__MACOSX" in member.parts \
                                or member.name.startswith("."):
                            continue
                        if info.file_size > MAX_SUBMISSION_BYTES:
                            continue
                        target = tmp / f"{path.stem}_{i}" / member.name
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(zf.read(info))
                        yield target, str(member)
            except zipfile.BadZipFile:
                continue


def _grade_cells(nb: dict) -> dict[str, str]:
    cells = {}
    for cell in nb.get("cells", []):
        meta = (cell.get("metadata") or {}).get("nbgrader") or {}
        if meta.get("grade_id") and (meta.get("locked") or meta.get("grade")) and not meta.get("solution"):
            src = cell.get("source", "")
            cells[meta["grade_id"]] = "".join(src) if isinstance(src, list) else str(src)
    return cells


def _tampering(submitted: dict, release: dict) -> list[str]:
    """Notes on test (locked) cells that were deleted or edited; autograde restores them from the gradebook."""
    mine, theirs = _grade_cells(release), _grade_cells(submitted)
    notes = []
    for gid, src in mine.items():
        if gid not in theirs:
            notes.append(f"test cell {gid} was deleted (restored for grading)")
        elif theirs[gid].strip() != src.strip():
            notes.append(f"test cell {gid} was edited (restored for grading)")
    return notes


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "unknown error"
