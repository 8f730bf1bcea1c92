"""The course code the grading process runs, fingerprinted: no submission may change what the grader runs next.

Learner code runs in a sandbox that mounts the course read-only, but where the sandbox is missing (or broken) a
notebook can write to ``stage5/`` or ``grader/``, and the grading process imports parts of ``stage5`` lazily (the
reference engine, the cost model) and runs the hidden checks from it for every later learner. So the grader takes
a fingerprint of both folders before any submission runs and compares it after each one; a change stops the batch
with one line naming the files, instead of grading the rest of the class with code a learner wrote.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import stage5

GRADER = Path(__file__).resolve().parent
STAGE5 = Path(stage5.__file__).resolve().parent


class CourseCodeChanged(RuntimeError):
    """The course code changed while grading (the message is one line, for the instructor)."""


def fingerprint(stage5_dir: Path = STAGE5, grader_dir: Path = GRADER) -> dict[str, str]:
    """sha256 of every file of the ``stage5`` package and of the grader's own modules (``grader/*.py``: the rest of
    ``grader/`` is the instructor's working state, which grading writes), by path."""
    files = [p for p in sorted(stage5_dir.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    files += sorted(grader_dir.glob("*.py"))
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


class CodeGuard:
    """A fingerprint of the course code taken now; :meth:`check` raises :class:`CourseCodeChanged` if it moved."""

    def __init__(self, stage5_dir: Path = STAGE5, grader_dir: Path = GRADER):
        self.dirs = (stage5_dir, grader_dir)
        self.before = fingerprint(*self.dirs)

    def check(self, when: str) -> None:
        now = fingerprint(*self.dirs)
        changed = sorted(p for p in self.before.keys() | now.keys() if self.before.get(p) != now.get(p))
        if changed:
            names = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
            raise CourseCodeChanged(f"grading stopped {when}: the course code changed ({names}); a submission may "
                                    "have written to it. Restore stage5/ and grader/ (git status shows what "
                                    "changed), make sure bubblewrap works, and grade again")
