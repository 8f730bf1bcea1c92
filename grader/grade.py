"""Grade a class: ``python grader/grade.py [--inbox grader/inbox] [--assignment ex01] [--roster roster.csv]``
(``make grade``).

Put the learners' notebooks in the inbox (``grader/inbox/``), one per learner, named for the learner and the
assignment: ``alice_ex01.ipynb``, ``alice/ex01.ipynb`` or an LMS's ``.zip``. Only files named for the assignment
being graded are collected; the others are listed as skipped. Two different files for one learner (``alice/…`` and
``mallory/alice_ex01.ipynb``, ``Carol_ex01`` and ``carol-ex01``) are a clash, and a learner's zip holding another
learner's notebook is refused: neither is graded until you remove (or rename) the wrong file and run this again.
The rules are in ``grader/collect.py``.

This records the assignment in the gradebook, collects the notebooks with their submission times, names each
learner (the id as last name, or first and last names from ``--roster``, a CSV with the columns
id,first_name,last_name), autogrades them, writes one HTML feedback file per learner under ``grader/feedback/`` and
exports ``grader/grades.csv`` (nbgrader's format) and ``grader/summary.csv`` (one row per learner and assignment:
score, status, failed checks and reasons), printing one line per learner. Each notebook runs in a disposable
sandbox (``stage5/grading/sandbox.py``); ``--jobs 2`` grades two at a time. Run it again after marking by hand in
Formgrader: submissions already graded are kept (``--regrade`` grades them all again) and the scores are re-read
from the gradebook.

Exit status: 0 when every learner found was graded and nothing was stopped; 1 when some were not graded (a clash,
a refused zip, a failure that was not theirs); 2 for a mistake in the command (an unknown assignment, a missing or
empty inbox, a bad roster); 3 when the course's own code (stage5/, grader/) changed during the run, which stops it
(grader/code_guard.py); 4 when every learner was graded but the grader stopped or refused part of some notebooks
at its boundary (memory, output, a wait, the notebook's total time, an answer it could not read as data), listed
on stderr.

``python grader/grade.py release [--assignment ex01]`` regenerates the committed release in ``exercises/``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from code_guard import CourseCodeChanged  # noqa: E402
from collect import RosterError, entries, printable, read_roster, sort_inbox  # noqa: E402
from workflow import CLASH, REFUSED, UNGRADED, Course, UnknownAssignment  # noqa: E402

from stage5.grading.sandbox import isolation  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="grade", choices=["grade", "release"])
    parser.add_argument("--assignment", default="ex01")
    parser.add_argument("--inbox", default=None, help="folder of submissions (default: grader/inbox)")
    parser.add_argument("--roster", default=None,
                        help="CSV of the learners' names (columns id,first_name,last_name) for Formgrader")
    parser.add_argument("--work", default=None, help="working folder for nbgrader state (default: grader/)")
    parser.add_argument("--no-feedback", action="store_true")
    parser.add_argument("--jobs", type=int, default=1, help="submissions graded at once (one per core is sensible)")
    parser.add_argument("--regrade", action="store_true",
                        help="grade every submission again (by default one graded before, unchanged, is kept)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")

    try:  # --work names a folder: a file there, or a folder that cannot be made, is one line (issue 52)
        if args.work and Path(args.work).exists() and not Path(args.work).is_dir():
            raise NotADirectoryError(f"--work {printable(args.work)} is a file, not a folder: accepted: a folder for "
                                     "nbgrader's state (made if missing)")
        course = Course(args.work)
    except OSError as err:
        return _refuse(str(err) if isinstance(err, NotADirectoryError) and "--work" in str(err) else
                       f"--work {printable(str(args.work))}: cannot use it as the working folder "
                       f"({err.strerror or type(err).__name__}); accepted: a folder this account can write")
    try:
        course.check_assignment(args.assignment)
        roster = read_roster(args.roster) if args.roster else None
    except (UnknownAssignment, RosterError) as err:
        return _refuse(str(err))
    if args.command == "release":
        folder = course.release(args.assignment)
        print(f"released {args.assignment} to {folder}")
        return 0
    inbox = Path(args.inbox) if args.inbox else course.work / "inbox"
    example = f"<learner>_{args.assignment}.ipynb"
    if not inbox.is_dir():
        return _refuse(f"no inbox folder {inbox}: create it and copy the learners' notebooks into it ({example})"
                       if not inbox.exists() else f"the inbox {inbox} is not a folder")
    if not entries(inbox):
        return _refuse(f"no submissions in {inbox}: copy the learners' notebooks there, one per learner, named "
                       f"{example} (or <learner>/{args.assignment}.ipynb, or the LMS's .zip)")
    found = sort_inbox(inbox, args.assignment, course.assignments())
    if found.is_empty():
        for label, why in found.skipped:
            print(printable(f"skipped  {label}: {why}"))
        return _refuse(f"nothing to grade for {args.assignment} in {inbox}: {len(found.skipped)} file(s) there, "
                       f"none named for {args.assignment} ({example})")
    mode, why = isolation()
    if mode != "bwrap":
        print(f"WARNING: grading WITHOUT a sandbox: {why}", file=sys.stderr)
    t0 = time.perf_counter()
    try:
        results = course.grade(inbox, args.assignment, feedback=not args.no_feedback, jobs=args.jobs,
                               regrade=args.regrade, roster=roster)
    except CourseCodeChanged as err:
        print(f"STOPPED: {err}", file=sys.stderr)
        return 3
    for r in results:
        print(r.line())
    for label, why in course.skipped:
        print(printable(f"skipped  {label}: {why}"))
    if roster:
        handed_in = {r.student for r in results}
        strangers = sorted({r.student for r in results if r.status not in (CLASH, REFUSED)} - set(roster))
        if strangers:
            print(f"not in the roster (named by their id): {', '.join(strangers)}")
        absent = sorted(set(roster) - handed_in)
        if absent:
            print(f"in the roster, nothing handed in for {args.assignment}: {', '.join(absent)}")
    for notice in course.notices:
        print(notice, file=sys.stderr)
    reused = sum(r.reused for r in results)
    print(f"{len(results)} submission(s) ({reused} unchanged since the last run, kept) in "
          f"{time.perf_counter() - t0:.0f} s; feedback in "
          f"{course.config.CourseDirectory.feedback_directory}/<student>/{args.assignment}/, "
          f"grades in {course.work / 'grades.csv'} and {course.work / 'summary.csv'}")
    ungraded = [r for r in results if r.status in UNGRADED]
    if ungraded:
        print(f"{len(ungraded)} learner(s) NOT graded ({', '.join(sorted({r.status for r in ungraded}))}): "
              f"{', '.join(r.student for r in ungraded)}; see their lines above", file=sys.stderr)
    stopped = [r for r in results if r.stopped and r.status not in UNGRADED]
    if stopped:
        print(f"{len(stopped)} learner(s) graded with part of their notebook stopped or refused by the grader:",
              file=sys.stderr)
        for r in stopped:
            more = f" (and {len(r.stopped) - 1} more)" if len(r.stopped) > 1 else ""
            print(printable(f"  {r.student}: {r.stopped[0]}{more}"), file=sys.stderr)
    return 1 if ungraded else 4 if stopped else 0


def _refuse(message: str) -> int:
    """A mistake in the command: one line on stderr, exit status 2."""
    print(message, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
