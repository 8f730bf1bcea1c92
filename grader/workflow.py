"""The instructor workflow, in-process: release, collect, autograde, feedback, export, summary.

Everything goes through ``nbgrader.apps.NbGraderAPI`` (no command-line start-up per step); each notebook's kernel
runs in a sandbox (``sandboxed_execute.py``) and hidden checks run here (``host_checks.py``). One bad submission
never stops the batch: a notebook that is not JSON is recorded with a score of 0 and a reason; a cell that loops
forever is interrupted after its CPU-time budget; a deleted or edited test cell is restored from the gradebook and
noted; a submission that cannot be graded for a reason not the learner's is retried once, then recorded as
"not graded: retry". Each graded submission is recorded at once, so a re-run resumes and grades only what is new.
"""

from __future__ import annotations

import csv
import hashlib
import html
import json
import multiprocessing
import re
import shutil
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

import failed_hints
import intake
from code_guard import CodeGuard
from collect import (
    Learner,
    claim_note,
    printable,
    sort_inbox,
    student_id,  # noqa: F401  (the id rule, imported from here by tests and tools)
    timestamp_text,
)
from feedback_page import VENDOR, VENDORED_SCRIPTS, invalid_page
from intake import INVALID, RESTORED, InvalidSubmission, prepare  # noqa: F401 (RESTORED, for the tests)
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.apps import NbGraderAPI
from nbgrader.plugins.export import CsvExportPlugin
from nbgrader_setup import REPO, make_config
from review import review_folder
from sandboxed_execute import GRADER_ERRORS
from sqlalchemy.exc import SAWarning
from traitlets.config import Config

ATTEMPTS = 2  # a failure that is not the learner's (kernel start, the machine) is retried once, then reported
NOT_GRADED = "not graded: retry"
CLASH = "clash"  # two different files claim one learner: neither is graded until the instructor removes one
REFUSED = "refused"  # a learner's zip holds another learner's notebook: nothing in it is graded
UNGRADED = (NOT_GRADED, CLASH, REFUSED)  # statuses with no score (not a 0)

# nbgrader 0.9.6 with SQLAlchemy 2.0 warns about its own session handling on every autograde: not the instructor's
# concern, and it buries the one line per learner that make grade prints.
warnings.filterwarnings("ignore", category=SAWarning)


class UnknownAssignment(ValueError):
    """An assignment id the course does not have (the message names the ones it has)."""


@dataclass
class Result:
    """One student's outcome for one assignment."""

    student: str
    assignment: str
    source: str = ""
    status: str = "ok"  # ok | invalid | error | not graded: retry
    reasons: list[str] = field(default_factory=list)
    score: float = 0.0
    max_score: float = 0.0
    auto_max: float = 0.0
    manual_pending: float = 0.0
    failed: list[str] = field(default_factory=list)
    seconds: float = 0.0
    sha256: str = ""  # of the submitted file: a re-run skips a submission already graded in this form
    reused: bool = False  # graded by an earlier run, not this one
    review: list[str] = field(default_factory=list)  # cells for the instructor to read (grader/review.py); no score
    stopped: list[str] = field(default_factory=list)  # what the grader stopped or refused at its boundary
    hints: list[str] = field(default_factory=list)  # why each failed check failed (grader/failed_hints.py), CSV only

    @property
    def out_of(self) -> float:
        """The points this score is out of: everything but what is still to be marked by hand."""
        return self.max_score - self.manual_pending if self.max_score else self.auto_max

    def line(self) -> str:
        pending = f" (+{self.manual_pending:g} to mark by hand)" if self.manual_pending else ""
        score = "    -" if self.status in UNGRADED else f"{self.score:5.1f}"
        text = f"{self.student:<24} {self.assignment}  {score} / {self.out_of:g}{pending}  {self.status}"
        if self.failed:
            text += f"; failed: {', '.join(self.failed)}"
        if self.reasons:
            text += f"; {'; '.join(self.reasons)}"
        return printable(text)  # one line on any terminal, whatever a file name held


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
        self.skipped: list[tuple[str, str]] = []  # (file, why) the last collect did not take
        self.notices: list[str] = []  # things the instructor should know that are no learner's result

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
    def assignments(self) -> list[str]:
        """The course's assignment ids: the folders of the source directory (``solutions/``) holding a notebook."""
        source = self.root / self.config.CourseDirectory.source_directory
        return sorted(p.name for p in source.iterdir() if p.is_dir() and any(p.glob("*.ipynb"))) \
            if source.is_dir() else []

    def check_assignment(self, assignment: str) -> None:
        """Raise UnknownAssignment (one line, naming the ones that exist) unless ``assignment`` is the course's."""
        known = self.assignments()
        if assignment not in known:
            raise UnknownAssignment(f"no such assignment: {assignment!r} (the course has {', '.join(known)})")

    def collect(self, inbox: str | Path, assignment: str, release_nb: Path, regrade: bool = False,
                roster: dict[str, Learner] | None = None) -> list[Result]:
        """Copy each learner's notebook for ``assignment`` from ``inbox`` (``.ipynb`` files, in folders or ``.zip``
        archives) into the submitted folder, with its submission time (nbgrader's ``timestamp.txt``), and record the
        learner in the gradebook (named from ``roster``, else with the id as last name). Which file is whose:
        ``collect.py``. Clashes and refused zips become results that are not graded; files not for ``assignment``
        are listed in ``self.skipped``.

        A submission graded by an earlier run, byte for byte the same, is reused as it was (unless ``regrade``):
        a re-run grades only what is new, and a batch that crashed resumes where it stopped."""
        inbox = Path(inbox)
        found = sort_inbox(inbox, assignment, self.assignments())
        self.skipped = list(found.skipped)
        results = []
        with tempfile.TemporaryDirectory() as tmp:
            for student, submission in sorted(found.learners.items()):
                if submission.problem:  # a corrupt or encrypted zip member: listed, scored like any invalid file
                    results.append(Result(student, assignment, source=submission.label, status="invalid",
                                          reasons=[submission.problem]))
                    continue
                path = submission.materialise(Path(tmp), intake.MAX_SUBMISSION_BYTES)
                earlier = None if regrade else self._earlier(student, assignment, path)
                try:
                    r = earlier or self._take(student, path, submission.label, assignment, release_nb)
                except Exception as err:  # noqa: BLE001 - one file never stops the class
                    r = Result(student, assignment, source=submission.label, status="invalid",
                               reasons=[f"{INVALID}: could not be read ({type(err).__name__})"])
                if student in found.copies:
                    r.reasons.append(f"identical copies not used: {', '.join(found.copies[student])}")
                if (claim := claim_note(submission)) and claim not in r.reasons:
                    r.reasons.append(claim)  # the learner's own date, beside the arrival recorded
                results.append(r)
        for student, claims in found.clashes.items():
            results.append(Result(student, assignment, source=" | ".join(f.label for f in claims), status=CLASH,
                                  reasons=[f"{len(claims)} different files claim {student}: "
                                           f"{', '.join(f.label for f in claims)}; neither is graded: remove (or "
                                           "rename) the wrong one in the inbox and grade again"]))
        for student, why in found.refused.items():
            results.append(Result(student, assignment, status=REFUSED, reasons=why))
        results.sort(key=lambda r: r.student)
        with Gradebook(self.db_url) as gb:
            for r in results:
                if r.status in (CLASH, REFUSED):
                    continue  # not in the gradebook until the instructor chooses: grades.csv would show a 0
                learner = (roster or {}).get(r.student)
                try:
                    known = gb.find_student(r.student)
                except MissingEntry:
                    known = None
                # no e-mail yet: "" (Formgrader prints a missing one as "None"); one typed in Formgrader is kept
                email = {} if known is not None and known.email is not None else {"email": ""}
                if learner:
                    gb.update_or_create_student(r.student, first_name=learner.first_name,
                                                last_name=learner.last_name, **email)
                elif known is None or (known.first_name is None and known.last_name is None):
                    gb.update_or_create_student(r.student, first_name="", last_name=r.student, **email)
        return results

    def _record(self, student: str, assignment: str) -> Path:
        return self.work / "graded" / assignment / f"{student}.json"

    def _earlier(self, student: str, assignment: str, path: Path) -> Result | None:
        """The result an earlier run recorded for exactly this file, if its autograded notebook is still there."""
        record = self._record(student, assignment)
        autograded = Path(self.config.CourseDirectory.autograded_directory) / student / assignment
        if path.stat().st_size > intake.MAX_SUBMISSION_BYTES or not record.exists() or not autograded.exists():
            return None
        try:
            r = Result(**json.loads(record.read_text()))
        except (ValueError, TypeError):
            return None
        if r.sha256 != _sha256(path) or r.status not in ("ok", "invalid"):
            return None
        r.reused, r.failed = True, []
        return r

    def _save_record(self, r: Result) -> None:
        record = self._record(r.student, r.assignment)
        record.parent.mkdir(parents=True, exist_ok=True)
        tmp = record.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(r)))
        tmp.replace(record)  # atomic: a crash leaves the old record or the new one

    def _take(self, student: str, path: Path, label: str, assignment: str, release_nb: Path) -> Result:
        r = Result(student, assignment, source=label)
        dest = Path(self.config.CourseDirectory.submitted_directory) / student / assignment
        shutil.rmtree(dest, ignore_errors=True)
        for step in ("autograded_directory", "feedback_directory"):
            shutil.rmtree(Path(getattr(self.config.CourseDirectory, step)) / student / assignment, ignore_errors=True)
        if path.stat().st_size <= intake.MAX_SUBMISSION_BYTES:
            r.sha256 = _sha256(path)
        try:
            nb, notes = prepare(path, json.loads(release_nb.read_text()))
        except InvalidSubmission as err:
            r.status, r.reasons = "invalid", [str(err)]
            return r
        r.reasons += notes
        dest.mkdir(parents=True, exist_ok=True)
        intake.write_notebook(dest / release_nb.name, nb)  # whole or not at all
        (dest / "timestamp.txt").write_text(timestamp_text(path.stat().st_mtime))  # Formgrader's time
        return r

    # -------------------------------------------------------------------------------- grade
    def autograde(self, results: list[Result], jobs: int = 1) -> None:
        """Autograde every collected submission, ``jobs`` at a time, each in its own sandbox. A failure that is not
        the learner's is retried once, then reported as "not graded: retry" (never as a score of 0). Each result
        is recorded as soon as it is graded, so a batch that crashes loses nothing already graded."""
        todo = [r for r in results if r.status == "ok" and not r.reused]
        errors: dict[str, str] = {}
        guard = CodeGuard()  # the course code before any submission runs: each one must leave it as it was
        for _ in range(ATTEMPTS):
            again = []
            for r, (ok, error, seconds) in self._autograde_each(todo, jobs):
                guard.check(f"after grading {r.student}")
                r.seconds += seconds
                if ok:
                    notes, r.stopped = self._execution_problems(r)
                    r.reasons += notes
                    self._save_record(r)
                else:
                    errors[r.student] = error
                    again.append(r)
            todo = again
        for r in todo:
            r.status = NOT_GRADED
            r.reasons.append(f"tried {ATTEMPTS} times: {_last_line(errors[r.student])}")

    def _autograde_each(self, todo: list[Result], jobs: int):
        """(result, (success, error, seconds)) for each of ``todo``, in worker processes when ``jobs`` > 1."""
        if jobs <= 1 or len(todo) <= 1:
            for r in todo:
                yield r, _autograde_one(self.config, r.assignment, r.student)
            return
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork")) as pool:
            futures = {pool.submit(_autograde_one, self.config, r.assignment, r.student): r for r in todo}
            try:
                for future in as_completed(futures):
                    try:
                        result = future.result()
                    except Exception as err:  # noqa: BLE001 - a worker that died is retried like any other failure
                        result = (False, f"{type(err).__name__}: {err}", 0.0)
                    yield futures[future], result
            finally:  # the caller stopped (the course code changed): start nothing more
                pool.shutdown(wait=False, cancel_futures=True)

    def _execution_problems(self, r: Result) -> tuple[list[str], list[str]]:
        """One line per cell that the grader stopped or the kernel died in, naming the cell and the reason, and the
        lines of those the grader stopped or refused at its boundary (``stopped`` in its record). The reasons are
        the grader's own record (sandboxed_execute.GRADER_ERRORS), never an output's ename and text, which a
        learner's exception can spell ("KernelDied: =HYPERLINK(...)")."""
        notes, stopped = [], []
        folder = Path(self.config.CourseDirectory.autograded_directory) / r.student / r.assignment
        for nb_path in folder.glob("*.ipynb"):
            nb = json.loads(nb_path.read_text())
            for index, cell in enumerate(nb["cells"]):
                meta = cell.get("metadata", {})
                gid = _cell_name(meta.get("nbgrader", {}).get("grade_id"), index)
                for err in meta.get(GRADER_ERRORS, []):
                    if err.get("stopped"):
                        stopped.append(f"{gid}: {err.get('evalue', '')}")
                    if err.get("ename") == "CellCPUTimeout":
                        over = _CPU_OVER.search(str(err.get("evalue", "")))
                        notes.append(f"{gid} timed out: {over.group(0) if over else 'used more than its CPU time'}")
                    elif err.get("ename") in ("KernelDied", "NotebookTimeout", "CellWallTimeout"):
                        notes.append(err.get("evalue", ""))
                for out in cell.get("outputs", []):
                    if out.get("output_type") != "error":
                        continue
                    if out.get("ename") == "MemoryError":
                        notes.append(f"{gid} ran out of memory (MemoryError: over the sandbox's limit)")
                if any(o.get("output_type") == "stream" and "output truncated" in "".join(o.get("text", ""))
                       for o in cell.get("outputs", [])):
                    notes.append("very large output truncated")
        return list(dict.fromkeys(notes)), list(dict.fromkeys(stopped))

    def feedback(self, results: list[Result]) -> None:
        """Feedback for every graded learner, kept ones too: marks given by hand since the last run appear. A
        submission refused as invalid gets a page saying why and what to do (feedback_page.invalid_page)."""
        api = self.api()
        for r in results:
            if r.status == "invalid":
                page = self._feedback_path(r.student, r.assignment)
                page.parent.mkdir(parents=True, exist_ok=True)
                page.write_text(invalid_page(r.assignment, r.source, r.reasons), encoding="utf-8")
            if r.status != "ok":
                continue
            out = api.generate_feedback(r.assignment, r.student, force=True)
            if not out["success"]:
                r.reasons.append(f"no feedback: {_last_line(out.get('error', ''))}")

    def _feedback_path(self, student: str, assignment: str) -> Path:
        return Path(self.config.CourseDirectory.feedback_directory) / student / assignment / f"{assignment}.html"

    def feedback_text(self, student: str, assignment: str) -> str:
        """The text a learner reads in their feedback file (HTML tags removed), for checking what it reveals. The
        course's own inlined scripts (MathJax, byte for byte from assets/vendor) are left out: megabytes of the
        course's code, not anything a submission or the grader's environment put there."""
        page = self._feedback_path(student, assignment).read_text()
        for name in VENDORED_SCRIPTS:
            if (VENDOR / name).is_file():
                page = page.replace((VENDOR / name).read_text(encoding="utf-8"), "")
        return html.unescape(re.sub(r"<[^>]+>", "", page))

    def scores(self, results: list[Result]) -> None:
        """Fill score, maxima, marks still to give by hand and failed checks from the gradebook (hand-given marks
        included: run this again after marking in Formgrader)."""
        with Gradebook(self.db_url) as gb:
            for r in results:
                assignment = gb.find_assignment(r.assignment)
                r.max_score = assignment.max_score
                manual_cells = {(nb.name, g.name): g.max_score for nb in assignment.notebooks for g in nb.grade_cells
                                if g.cell_type == "markdown"}
                r.auto_max = r.max_score - sum(manual_cells.values())
                r.manual_pending = sum(manual_cells.values())
                r.failed, r.hints = [], []
                if r.status != "ok":
                    continue
                try:
                    sub = gb.find_submission(r.assignment, r.student)
                except MissingEntry:
                    continue
                r.score = sub.score
                blank = []
                for nb in sub.notebooks:
                    for grade in nb.grades:
                        if grade.cell.cell_type == "markdown":
                            # pending only while nobody has scored it: nbgrader scores an answer left as released
                            # 0 by itself, and Formgrader and the feedback page then count it 0 / N, so do we
                            if grade.manual_score is not None or grade.auto_score is not None:
                                r.manual_pending -= grade.max_score
                            if grade.manual_score is None and grade.auto_score is not None:
                                blank.append(f"{grade.name}: answer left as released, scored 0 without marking")
                            continue
                        if (grade.score or 0) < grade.max_score:
                            r.failed.append(grade.name)
                r.hints = failed_hints.hints(Path(self.config.CourseDirectory.autograded_directory) / r.student
                                             / r.assignment, r.failed) + blank

    def export(self, results: list[Result], out_dir: Path | None = None,
               assignment: str | None = None) -> tuple[Path, Path]:
        """nbgrader's CSV export (grades.csv) and a summary (summary.csv) with reasons and failed checks, one row
        per learner and assignment: the rows of this run's assignment are replaced, other assignments' kept."""
        out_dir = Path(out_dir) if out_dir else self.work
        grades = out_dir / "grades.csv"
        with Gradebook(self.db_url) as gb:
            CsvExportPlugin(to=str(grades)).export(gb)
        _neutralise_csv(grades)
        summary = out_dir / "summary.csv"
        header = ["student", "assignment", "score", "auto_max", "manual_pending", "status", "failed_checks",
                  "reasons", "source", "seconds", "review"]
        kept = self._summary_rows_of_others(summary, header, {assignment} | {r.assignment for r in results})
        with summary.open("w", newline="") as fh:
            w = SafeCsvWriter(fh)
            w.writerow(header)
            w.writerows(kept)
            for r in results:
                score = "" if r.status in UNGRADED else f"{r.score:g}"  # not a 0: nothing was graded
                w.writerow([r.student, r.assignment, score, f"{r.auto_max:g}", f"{r.manual_pending:g}",
                            r.status, " ".join(r.failed), "; ".join(r.reasons + r.hints), r.source, f"{r.seconds:.1f}",
                            " | ".join(r.review)])
        return grades, summary

    def _summary_rows_of_others(self, summary: Path, header: list[str], runs: set[str | None]) -> list[list[str]]:
        """The rows summary.csv holds for assignments other than ``runs``, as they were. A file this cannot read
        (edited by hand into another shape) is kept as summary.csv.old and said so in ``self.notices``."""
        if not summary.exists():
            return []
        try:
            with summary.open(newline="", encoding="utf-8") as fh:
                rows = list(csv.DictReader(fh))
            if rows and "assignment" not in rows[0]:
                raise ValueError("no assignment column")
        except (ValueError, csv.Error, UnicodeDecodeError) as err:
            shutil.copyfile(summary, summary.with_suffix(".csv.old"))
            self.notices.append(f"{summary} was unreadable ({type(err).__name__}): kept as "
                                f"{summary.with_suffix('.csv.old').name}; rewritten with this run's rows only")
            return []
        return [[row.get(h) or "" for h in header] for row in rows if row.get("assignment") not in runs]

    # -------------------------------------------------------------------------------- all of it
    def grade(self, inbox: str | Path, assignment: str, feedback: bool = True, jobs: int = 1,
              regrade: bool = False, roster: dict[str, Learner] | None = None) -> list[Result]:
        """Record the assignment, collect ``inbox``, autograde (``jobs`` at a time), write feedback and export.
        Submissions graded by an earlier run in the same form are reused unless ``regrade``; learners are named
        from ``roster`` (``collect.read_roster``) when given. Returns the results."""
        self.check_assignment(assignment)
        release = self.release(assignment, self.work / "release")
        notebooks = sorted(release.glob("*.ipynb"))
        if len(notebooks) != 1:
            raise RuntimeError(f"{assignment}: expected one notebook in the release, found {len(notebooks)}")
        results = self.collect(inbox, assignment, notebooks[0], regrade=regrade, roster=roster)
        for r in results:  # what blocking cannot stop, flagged for the instructor (changes no score)
            if r.status == "ok" and not r.reused:
                r.review = review_folder(Path(self.config.CourseDirectory.submitted_directory) / r.student
                                         / assignment, notebooks[0])
        self.autograde(results, jobs=jobs)
        if feedback:
            self.feedback(results)
        self.scores(results)
        for r in results:
            if r.status == "invalid" and not r.reused:
                self._save_record(r)
        self.export(results, assignment=assignment)
        return results


# ------------------------------------------------------------------------------------ CSV
# What makes a spreadsheet read a cell as a formula (OWASP); the tab and carriage return OWASP also lists never start
# a cell here, since csv_safe escapes every control character first.
FORMULA_START = ("=", "+", "-", "@")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")  # a plain decimal number, nothing else


def csv_safe(value: object) -> str:
    """``value`` as a CSV cell a spreadsheet shows as text: one that starts like a formula gets a leading ``'``
    (OWASP's rule for CSV injection). A number stays a number, negative ones included: a score or a penalty is
    the grader's own figure, never learner text."""
    text = "" if value is None else printable(str(value))  # control characters escaped: one line per row
    if text.startswith(FORMULA_START) and not _NUMBER.fullmatch(text):
        return "'" + text
    return text


class SafeCsvWriter:
    """``csv.writer`` whose every cell goes through :func:`csv_safe`."""

    def __init__(self, fh) -> None:
        self._w = csv.writer(fh)

    def writerow(self, row) -> None:
        self._w.writerow([csv_safe(v) for v in row])

    def writerows(self, rows) -> None:
        for row in rows:
            self.writerow(row)


def _neutralise_csv(path: Path) -> None:
    """Rewrite a CSV written by someone else (nbgrader's export) with every cell through :func:`csv_safe`."""
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as fh:
        w = SafeCsvWriter(fh)
        for row in rows:
            w.writerow(row)
    tmp.replace(path)


# ------------------------------------------------------------------------------------ helpers
def _autograde_one(config: Config, assignment: str, student: str) -> tuple[bool, str, float]:
    """nbgrader's autograde of one submission (run in a worker process when grading in parallel)."""
    warnings.filterwarnings("ignore", category=SAWarning)
    t0 = time.perf_counter()
    try:
        out = NbGraderAPI(config=Config(config)).autograde(assignment, student, force=True, create=True)
    except Exception as err:  # noqa: BLE001 - reported and retried by the caller
        return False, f"{type(err).__name__}: {err}", time.perf_counter() - t0
    return bool(out["success"]), str(out.get("error") or out.get("log") or ""), time.perf_counter() - t0


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# what sandboxed_execute.cpu_timeout_text says after the cell's label (the label itself may hold spaces: "cell 32")
_CPU_OVER = re.compile(r"used more than [0-9.]+ s of CPU time and was (?:stopped|interrupted)$")


def _cell_name(grade_id: object, index: int) -> str:
    """A cell as a note names it: its grade_id when that is only letters, digits, ``_``, ``-`` and ``.``, else its
    position ("cell 32", counted from 1 as the sandbox counts it)."""
    ok = isinstance(grade_id, str) and re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", grade_id)
    return grade_id if ok else f"cell {index + 1}"


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "unknown error"
