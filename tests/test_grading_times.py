"""Issue 48, found case 4 (``make grade``'s door): the submission time is when the file arrived in the inbox, by the
file system's clock, never a date a learner wrote into a zip. A zip member dated 2001 is recorded at the zip's
arrival, its own date kept beside it as the learner's claim and noted. (The hub's door:
tests/test_exchange_collect.py.)"""

from __future__ import annotations

import json
import os
import time
import zipfile
from datetime import datetime, timezone

from grading_harness import REPO, Course, collect

HEADS = REPO / "tests" / "submissions" / "ex01" / "heads_ex01.ipynb"
ARRIVAL = datetime(2026, 11, 30, 23, 0, 0, tzinfo=timezone.utc).timestamp()  # the zip's mtime in the inbox
BACK_DATED = (2001, 1, 1, 12, 0, 0)  # the date the learner wrote into the zip


def _inbox(tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    zipped = inbox / "mallory_ex01.zip"
    with zipfile.ZipFile(zipped, "w") as zf:
        zf.writestr(zipfile.ZipInfo("mallory_ex01.ipynb", BACK_DATED), HEADS.read_bytes())
    os.utime(zipped, (ARRIVAL, ARRIVAL))
    return inbox


def test_a_back_dated_zip_member_is_timed_by_its_arrival(tmp_path):
    found = collect.sort_inbox(_inbox(tmp_path), "ex01", ["ex01"]).learners["mallory"]
    assert found.mtime == ARRIVAL
    assert time.gmtime(found.claimed).tm_year in (2000, 2001)  # a DOS date, read as this machine's local time
    note = collect.claim_note(found)
    assert "2026-11-30 23:00:00" in note and "the zip dates it 200" in note
    assert os.stat(found.materialise(tmp_path / "tmp", 2**26)).st_mtime == ARRIVAL  # what timestamp.txt records


def test_a_zip_dated_near_its_arrival_gets_no_note(tmp_path):
    inbox = _inbox(tmp_path)
    zipped = inbox / "mallory_ex01.zip"
    here = time.localtime(ARRIVAL - 3600)  # zipped an hour before it was handed in (local time, as zip stores it)
    with zipfile.ZipFile(zipped, "w") as zf:
        zf.writestr(zipfile.ZipInfo("mallory_ex01.ipynb", tuple(here)[:6]), HEADS.read_bytes())
    os.utime(zipped, (ARRIVAL, ARRIVAL))
    assert collect.claim_note(collect.sort_inbox(inbox, "ex01", ["ex01"]).learners["mallory"]) == ""


def test_make_grades_collect_records_the_arrival_in_timestamp_txt(tmp_path):
    course = Course(tmp_path / "work")
    release = REPO / "exercises" / "ex01" / "ex01.ipynb"
    (result,) = course.collect(_inbox(tmp_path), "ex01", release)
    stamp = (tmp_path / "work").rglob("mallory/ex01/timestamp.txt")
    assert next(stamp).read_text().startswith("2026-11-30 23:00:00")
    assert any("the zip dates it 200" in why for why in result.reasons), result.reasons
    assert json.loads(json.dumps(result.reasons))  # plain text
