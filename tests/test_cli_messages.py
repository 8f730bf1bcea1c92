"""`nbgrader validate` on a notebook it cannot read says so in one line (grader/cli_messages.py), not a traceback."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "grader"))
from cli_messages import OneLineValidateErrors  # noqa: E402


def test_validate_on_a_truncated_notebook_is_one_line(tmp_path):
    text = (REPO / "exercises" / "ex01" / "ex01.ipynb").read_text()
    cut = tmp_path / "ex01.ipynb"
    cut.write_text(text[: len(text) // 3])  # a download cut short
    nbgrader = Path(sys.executable).with_name("nbgrader")
    proc = subprocess.run([str(nbgrader), "validate", str(cut)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    out = proc.stdout + proc.stderr
    errors = [line for line in out.splitlines() if "ERROR" in line]
    assert proc.returncode != 0 and "Traceback" not in out, out
    assert len(errors) == 1 and "cannot validate" in errors[0] and "not valid JSON" in errors[0], out


def test_the_filter_passes_other_messages_and_names_an_unknown_error():
    f = OneLineValidateErrors()

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("ValidateApp", logging.ERROR, __file__, 1, msg, (), None)

    info = record("Validating 'x.ipynb'")
    assert f.filter(info) and info.getMessage() == "Validating 'x.ipynb'"
    assert not f.filter(record("Traceback (most recent call last):\n  File ...\nzipfile.BadZipFile: bad"))
    fatal = record("nbgrader encountered a fatal error while trying to validate 'x.ipynb'")
    assert f.filter(fatal) and fatal.getMessage().startswith("cannot validate 'x.ipynb': BadZipFile while reading")


def test_a_long_step_says_it_is_still_running_and_keeps_its_exit_status():
    """scripts/with_progress.py, which `make` wraps around the install and the book build."""
    script = str(REPO / "scripts" / "with_progress.py")
    slow = subprocess.run([sys.executable, script, "waiting", "--every", "0.1", "--", sys.executable, "-c",
                           "import time; time.sleep(3)"], capture_output=True, text=True, timeout=120)
    assert slow.returncode == 0 and "... still waiting (" in slow.stdout and "waiting: done in" in slow.stdout
    failed = subprocess.run([sys.executable, script, "failing", "--", sys.executable, "-c", "raise SystemExit(3)"],
                            capture_output=True, text=True, timeout=120)
    assert failed.returncode == 3 and "failing: failed after" in failed.stdout and "exit status 3" in failed.stdout
    makefile = (REPO / "Makefile").read_text()
    assert 'with_progress.py "installing requirements"' in makefile and 'with_progress.py "building the book"' in makefile
