"""Time the grading of a class: ``.venv/bin/python grader/bench_grading.py [--students 30] [--assignment ex02]
[--jobs 2]``.

Builds a class of N copies of the assignment's solved fixture (tests/submissions/<assignment>/) in a temporary
folder, runs the whole workflow (record, collect, autograde in sandboxes, feedback, export) with its own gradebook,
and prints the total and per-submission times. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from workflow import Course  # noqa: E402

FIXTURES = HERE.parent / "tests" / "submissions"
SOLVED = {"ex01": "ada lovelace_123_ex01.ipynb", "ex02": "solved_ex02.ipynb", "ex03": "solved_ex03.ipynb",
          "ex04": "solved_ex04.ipynb",
          "clearing": "solved_clearing.ipynb"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--assignment", default="ex01", choices=sorted(SOLVED))
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--no-feedback", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        inbox = Path(tmp) / "inbox"
        inbox.mkdir()
        for i in range(args.students):
            shutil.copyfile(FIXTURES / args.assignment / SOLVED[args.assignment],
                            inbox / f"student{i:03d}_{args.assignment}.ipynb")
        t0 = time.perf_counter()
        results = Course(Path(tmp) / "work").grade(inbox, args.assignment, feedback=not args.no_feedback,
                                                   jobs=args.jobs)
        total = time.perf_counter() - t0
    autograde = [r.seconds for r in results]
    bad = [r.line() for r in results if r.score != r.auto_max]
    print(f"{len(results)} submissions graded in {total:.1f} s ({total / len(results):.1f} s each, all steps); "
          f"autograde alone {sum(autograde) / len(autograde):.1f} s mean, {max(autograde):.1f} s max")
    if bad:
        print("unexpected scores:\n" + "\n".join(bad))


if __name__ == "__main__":
    main()
