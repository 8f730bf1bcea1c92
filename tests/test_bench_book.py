"""`python -m stage5 bench book` (stage5/engine/bench_book.py), on a two-notebook book made here: the README's build
times come from it, so it must count a chapter's CPU time, name its slowest cell and report a failing chapter."""

from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import pytest

from stage5.engine.bench_book import main

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0:\n    pass"


def _book(tmp_path):
    book = tmp_path / "book"
    book.mkdir()
    cells = [nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell(BURN)]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), book / "01_burns.ipynb")
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("raise ValueError('boom')")]),
                   book / "02_fails.ipynb")
    return book


def test_bench_book_times_each_chapter_and_reports_a_failure(tmp_path, capsys):
    book = _book(tmp_path)
    assert main(["--book", str(book), "--json"]) == 1  # a chapter failed, as it would fail the build
    report = json.loads(capsys.readouterr().out)
    burns, fails = report["chapters"]
    assert (burns["chapter"], fails["chapter"]) == ("01_burns", "02_fails")
    assert burns["error"] is None and burns["cpu_s"] >= 1.0, burns  # the kernel's CPU time is counted
    assert burns["slowest_cells"][0]["cell"] == 1 and burns["slowest_cells"][0]["first_line"] == "import time"
    assert fails["error"] == "ValueError: boom", fails  # one line, no terminal colours
    assert report["total"]["cpu_s"] == round(burns["cpu_s"] + fails["cpu_s"], 2)
    assert report["cpus"] >= 1 and "load_before" in report and "load_after" in report
    assert sorted(p.name for p in book.iterdir()) == ["01_burns.ipynb", "02_fails.ipynb"]  # nothing written


def test_bench_book_refuses_bad_arguments_in_one_line(tmp_path, capsys):
    book = _book(tmp_path)
    for args, words in ((["--book", str(book), "--chapters", "03_nope"], "no chapter 03_nope"),
                        (["--book", str(book), "--timeout", "0"], "positive number of seconds")):
        with pytest.raises(SystemExit) as stop:
            main(args)
        err = capsys.readouterr().err
        assert stop.value.code == 2 and words in err and len(err.strip().splitlines()) == 1, (args, err)
    # and through the command line
    proc = subprocess.run([sys.executable, "-m", "stage5", "bench", "book", "--book", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "is not a folder" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
