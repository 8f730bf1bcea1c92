"""The book build cannot publish a page with empty glue, and it can be built with the machine kept busy."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _recipe(target: str) -> str:
    """The recipe lines of one Makefile target."""
    text = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n?)+)", text, re.MULTILINE)
    assert match, f"no {target} target in the Makefile"
    return match.group(1)


def test_a_failed_or_timed_out_cell_fails_the_build():
    for target in ("book", "book-under-load"):
        recipe = _recipe(target)
        assert "jupyter-book build" in recipe and "--warningiserror" in recipe and "--keep-going" not in recipe
    assert '"--keep-going"' not in (ROOT / "tests" / "conftest.py").read_text().split("def built_book")[1][:1500]
    execute = yaml.safe_load((ROOT / "_config.yml").read_text())["execute"]
    assert execute["allow_errors"] is False


def test_book_under_load_runs_three_competitors_and_passes_the_status_through():
    assert "with_cpu_load.py 3 --" in _recipe("book-under-load")
    script = ROOT / "scripts" / "with_cpu_load.py"
    proc = subprocess.run([sys.executable, str(script), "3", "--", sys.executable, "-c",
                           "import os; print(len(os.popen('ps -o pid= --ppid ' + str(os.getppid())).read().split()))"
                           "; raise SystemExit(3)"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3
    assert int(proc.stdout.strip()) == 4  # three busy loops beside the command itself
    assert "3 CPU-bound processes" in proc.stderr
