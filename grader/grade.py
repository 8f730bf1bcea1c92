"""Grade a class: ``python grader/grade.py [--inbox grader/inbox] [--assignment ex01]`` (``make grade``).

Put the learners' notebooks (``.ipynb`` files, one per learner, named after the learner, e.g.
``alice_ex01.ipynb``; folders per learner and ``.zip`` downloads from an LMS work too) in the inbox, then run
this. It records the assignment in the gradebook, collects the notebooks, autogrades them, writes one HTML
feedback file per learner under ``grader/feedback/`` and exports ``grader/grades.csv`` (nbgrader's format) and
``grader/summary.csv`` (score, failed checks and reasons), printing one line per learner. Each notebook runs in a
disposable sandbox (``stage5/grading/sandbox.py``); ``--jobs 2`` grades two at a time. Run it again after marking
by hand in Formgrader: submissions already graded are kept (``--regrade`` grades them all again) and the scores
are re-read from the gradebook.

``python grader/grade.py release [--assignment ex01]`` regenerates the committed release in ``exercises/``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from code_guard import CourseCodeChanged  # noqa: E402
from workflow import Course  # noqa: E402

from stage5.grading.sandbox import isolation  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="grade", choices=["grade", "release"])
    parser.add_argument("--assignment", default="ex01")
    parser.add_argument("--inbox", default=None, help="folder of submissions (default: grader/inbox)")
    parser.add_argument("--work", default=None, help="working folder for nbgrader state (default: grader/)")
    parser.add_argument("--no-feedback", action="store_true")
    parser.add_argument("--jobs", type=int, default=1, help="submissions graded at once (one per core is sensible)")
    parser.add_argument("--regrade", action="store_true",
                        help="grade every submission again (by default one graded before, unchanged, is kept)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")

    course = Course(args.work)
    if args.command == "release":
        folder = course.release(args.assignment)
        print(f"released {args.assignment} to {folder}")
        return 0
    inbox = Path(args.inbox) if args.inbox else course.work / "inbox"
    inbox.mkdir(parents=True, exist_ok=True)
    if not any(inbox.iterdir()):
        print(f"no submissions in {inbox}: put the learners' .ipynb (or .zip) files there", file=sys.stderr)
        return 1
    mode, why = isolation()
    if mode != "bwrap":
        print(f"WARNING: grading WITHOUT a sandbox: {why}", file=sys.stderr)
    t0 = time.perf_counter()
    try:
        results = course.grade(inbox, args.assignment, feedback=not args.no_feedback, jobs=args.jobs,
                               regrade=args.regrade)
    except CourseCodeChanged as err:
        print(f"STOPPED: {err}", file=sys.stderr)
        return 3
    for r in results:
        print(r.line())
    reused = sum(r.reused for r in results)
    print(f"{len(results)} submission(s) ({reused} unchanged since the last run, kept) in "
          f"{time.perf_counter() - t0:.0f} s; feedback in "
          f"{course.config.CourseDirectory.feedback_directory}/<student>/{args.assignment}/, "
          f"grades in {course.work / 'grades.csv'} and {course.work / 'summary.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
