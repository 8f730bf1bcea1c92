"""The instructors' page (book/instructors.ipynb) and the sizing it glues from stage5.deploy.

The page is built with the book (tests/test_book.py); these checks are the cheap ones: it is in the table of
contents, every figure in its prose is glued (the book's rule for chapters, applied here), every glued name is
defined, and the sizing arithmetic follows the measurement.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from stage5.deploy import MEASUREMENT_FILE, cores_to_autograde, load_measurement, memory_per_learner_gib
from tests.test_book import _ALLOWED

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "book" / "instructors.ipynb"


def _cells(kind: str) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(PAGE.read_text())["cells"] if c["cell_type"] == kind]


def test_page_is_in_the_table_of_contents():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [ch["file"] for part in toc["parts"] for ch in part["chapters"]]
    assert "book/instructors" in files


def test_no_hand_typed_numbers_in_the_prose():
    for text in _cells("markdown"):
        text = re.sub(r"\{glue:text\}`[^`]*`", " ", text)
        stray = re.findall(r"\d[\d,.]*", _ALLOWED.sub(" ", text))
        assert not stray, f"hand-typed numbers {stray}: glue them from stage5.deploy"


def test_every_glued_name_is_defined():
    used = set(re.findall(r"\{glue:text\}`([\w]+)", "\n".join(_cells("markdown"))))
    defined = set(re.findall(r'glue\("(\w+)"', "\n".join(_cells("code"))))
    assert used and used <= defined, f"glued in prose but never computed: {sorted(used - defined)}"


def test_the_measurement_is_committed_and_plausible():
    m = load_measurement()
    assert m.assignment == "ex02" and m.submissions >= 1
    assert 0 < m.cpu_s_per_submission and 0 < m.kernel_peak_rss_mib
    assert MEASUREMENT_FILE.is_file()


def test_cores_follow_cpu_time_per_submission():
    m = load_measurement()
    hour_of_work = replace(m, cpu_s_per_submission=3600.0)
    assert cores_to_autograde(10, hour_of_work) == 10
    assert cores_to_autograde(10, hour_of_work, hours=2) == 5
    assert cores_to_autograde(11, hour_of_work, hours=2) == 6  # rounds up: the class must finish in time
    sizes = [cores_to_autograde(n, m) for n in (1, 10, 100, 1000, 10_000)]
    assert sizes == sorted(sizes) and sizes[0] == 1
    with pytest.raises(ValueError, match="at least one learner"):
        cores_to_autograde(0, m)


def test_memory_guarantee_covers_the_measured_peak():
    m = replace(load_measurement(), kernel_peak_rss_mib=300.0)
    assert memory_per_learner_gib(m, headroom=1.0) == 0.5  # 300 MiB rounds up to a quarter GiB
    assert memory_per_learner_gib(m) * 2**30 >= 300 * 2**20 * 2.0


def test_missing_measurement_says_how_to_make_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="hub/measure_class.py"):
        load_measurement(tmp_path / "none.json")
