"""Measure what one learner costs a hub: ``.venv/bin/python hub/measure_class.py [--copies 4]``.

Grades ``--copies`` copies of the solved ex02 fixture (the toy-engine exercise, the heaviest to autograde) with
the course's own workflow (grader/workflow.py, as ``make grade`` and grader/bench_grading.py run it) and records:

* CPU seconds per submission: user + system time of this process and of the kernels it ran (``getrusage``),
  so the figure does not grow when other work shares the machine, unlike the wall-clock time kept beside it;
* the peak resident memory of one kernel running the exercise: what a learner's kernel needs for the toy engine.

The result goes to stage5/data/class_capacity.json, from which book/instructors.ipynb derives (stage5.deploy)
the memory per learner and the cores a class needs to autograde ex02 in an hour. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "grader"))

from workflow import Course  # noqa: E402

from stage5.deploy import MEASUREMENT_FILE  # noqa: E402

ASSIGNMENT = "ex02"
SOLVED = REPO / "tests" / "submissions" / ASSIGNMENT / f"solved_{ASSIGNMENT}.ipynb"


def _cpu_s() -> tuple[float, float]:
    """(this process, its children): the children's part adds the sandboxes, which are killed rather than
    waited for and so are missing from RUSAGE_CHILDREN (sandboxed_execute.USAGE counts them)."""
    from sandboxed_execute import USAGE

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime + USAGE["cpu_s"]


def _peak_kernel_mib() -> float:
    from sandboxed_execute import USAGE

    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux: unsandboxed kernels
    return max(kids, USAGE["peak_rss_bytes"] / 2**20)


def measure(copies: int) -> dict:
    if copies < 1:
        raise ValueError(f"--copies must be at least 1, got {copies}")
    with tempfile.TemporaryDirectory() as tmp:
        course = Course(Path(tmp) / "work")
        course.release(ASSIGNMENT, Path(tmp) / "release")  # record the assignment first: not a per-learner cost
        inbox = Path(tmp) / "inbox"
        inbox.mkdir()
        for i in range(copies):
            shutil.copyfile(SOLVED, inbox / f"learner{i:03d}_{ASSIGNMENT}.ipynb")
        load = os.getloadavg()[0]
        self0, kids0 = _cpu_s()
        t0 = time.perf_counter()
        results = course.grade(inbox, ASSIGNMENT, feedback=True)
        wall = time.perf_counter() - t0
        self1, kids1 = _cpu_s()
    wrong = [r.line() for r in results if r.score != r.auto_max]
    if wrong:
        raise RuntimeError("the solved fixture did not get full marks:\n" + "\n".join(wrong))
    return {
        "assignment": ASSIGNMENT,
        "submissions": len(results),
        "cpu_s_per_submission": round((self1 - self0 + kids1 - kids0) / len(results), 2),
        "wall_s_per_submission": round(wall / len(results), 2),
        # the largest process that ran in a sandbox (a kernel), from its VmHWM
        "kernel_peak_rss_mib": round(_peak_kernel_mib(), 1),
        "machine": {"cpus": os.cpu_count(), "load_average_1min_at_start": round(load, 2),
                    "processor": platform.processor() or platform.machine(), "python": platform.python_version()},
        "measured_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--out", default=str(MEASUREMENT_FILE))
    args = parser.parse_args(argv)
    record = measure(args.copies)
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
