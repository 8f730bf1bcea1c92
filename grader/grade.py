"""Grade a class: ``python grader/grade.py [--inbox grader/inbox] [--assignment ex01]`` (``make grade``).

Put the learners' notebooks (``.ipynb`` files, one per learner, named after the learner, e.g.
``alice_ex01.ipynb``; folders per learner and ``.zip`` downloads from an LMS work too) in the inbox, then run
this. It records the assignment in the gradebook, collects the notebooks, autogrades them, writes one HTML
feedback file per learner under ``grader/feedback/`` and exports ``grader/grades.csv`` (nbgrader's format) and
``grader/summary.csv`` (score, failed checks and reasons), printing one line per learner.

``python grader/grade.py release [--assignment ex01]`` regenerates the committed release in ``exercises/``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workflow import Course  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="grade", choices=["grade", "release"])
    parser.add_argument("--assignment", default="ex01")
    parser.add_argument("--inbox", default=None, help="folder of submissions (default: grader/inbox)")
    parser.add_argument("--work", default=None, help="working folder for nbgrader state (default: grader/)")
    parser.add_argument("--no-feedback", action="store_true")
    args = parser.parse_args(argv)

    course = Course(args.work)
    if args.command == "release":
        folder = course.release(args.assignment)
        print(f"released {args.assignment} to {folder}")
        return 0
    inbox = Path(args.inbox) if args.inbox else course.work / "inbox"
    if not inbox.exists() or not any(inbox.iterdir()):
        print(f"no submissions in {inbox}: put the learners' .ipynb (or .zip) files there", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    results = course.grade(inbox, args.assignment, feedback=not args.no_feedback)
    for r in results:
        print(r.line())
    print(f"{len(results)} submission(s) in {time.perf_counter() - t0:.0f} s; feedback in "
          f"{course.config.CourseDirectory.feedback_directory}/<student>/{args.assignment}/, "
          f"grades in {course.work / 'grades.csv'} and {course.work / 'summary.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
