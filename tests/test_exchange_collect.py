"""Formgrader's collect from nbgrader's exchange (grader/exchange_collect.py), without a hub: an exchange folder on
this machine, submissions made by hand as a hub's accounts would make them, and nbgrader's API collecting them with
the course's config. The same attacks through a real hub are in tests/test_hub.py."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import pytest
from grading_harness import REPO, intake
from nbgrader.apps import NbGraderAPI
from test_grading_boundary import _tampered_mixed
from traitlets.config import Config

ASSIGNMENT = "ex01"
HEADS = REPO / "tests" / "submissions" / ASSIGNMENT / "heads_ex01.ipynb"
ME = pwd.getpwuid(os.getuid()).pw_name
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="files owned by another account need root to make")


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    from workflow import Course

    root = tmp_path_factory.mktemp("exchange")
    exchange = root / "exchange"
    config = Config()
    config.Exchange.root = str(exchange)
    c = Course(root / "work", config=config)
    c.release(ASSIGNMENT, c.work / "release")
    inbound = exchange / c.config.CourseDirectory.course_id / "inbound"
    inbound.mkdir(parents=True)
    return c, inbound


def _submit(inbound: Path, learner: str, stamp: str, notebook: dict | None = None) -> Path:
    folder = inbound / f"{learner}+{ASSIGNMENT}+2026-12-0{stamp} 10:00:00.000000 UTC+r{stamp}"
    folder.mkdir()
    (folder / f"{ASSIGNMENT}.ipynb").write_text(json.dumps(notebook or json.loads(HEADS.read_text())))
    (folder / "timestamp.txt").write_text(f"2026-12-0{stamp} 10:00:00.000000 UTC")
    return folder


def _collect(course) -> str:
    c, _ = course
    config = Config(c.config)
    config.CourseDirectory.release_directory = str(c.work / "release")
    out = NbGraderAPI(config=config).collect(ASSIGNMENT)
    assert out["success"], out.get("error") or out.get("log")
    return out["log"]


def _collected(course, learner: str) -> Path:
    c, _ = course
    return Path(c.config.CourseDirectory.submitted_directory) / learner / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"


def test_a_folder_and_its_plain_files_are_collected_and_taken_in_like_make_grade(course):
    _, inbound = course
    _submit(inbound, ME, "1", _tampered_mixed(json.loads(HEADS.read_text())))
    log = _collect(course)
    got = json.loads(_collected(course, ME).read_text())
    release = json.loads((course[0].work / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text())
    assert not intake.metadata_changed(got, release)  # graded on the release's grading cells
    assert intake.RESTORED in log


@root_only
def test_a_folder_under_another_name_a_link_a_fifo_and_a_foreign_file_are_refused(course, tmp_path):
    _, inbound = course
    nobody = pwd.getpwnam("nobody")
    forged = _submit(inbound, ME, "5")  # stamped later than the real one; owned by another account
    os.chown(forged, nobody.pw_uid, nobody.pw_gid)
    secret = tmp_path / "secret.ipynb"
    secret.write_text(json.dumps({"secret": "another learner's work"}))
    linked = _submit(inbound, ME, "6")
    (linked / f"{ASSIGNMENT}.ipynb").unlink()
    (linked / f"{ASSIGNMENT}.ipynb").symlink_to(secret)
    fifo = _submit(inbound, ME, "7")
    os.mkfifo(fifo / "wait.fifo")
    foreign = _submit(inbound, ME, "8")
    os.chown(foreign / f"{ASSIGNMENT}.ipynb", nobody.pw_uid, nobody.pw_gid)
    ghost = _submit(inbound, "no-such-account-s5", "4")
    log = _collect(course)
    assert f"refused {forged.name}: the submission folder belongs to another account (nobody)" in log, log
    assert f"refused {linked.name}: {ASSIGNMENT}.ipynb is a link" in log, log
    assert f"refused {fifo.name}: wait.fifo is not a plain file" in log, log
    assert f"refused {foreign.name}: {ASSIGNMENT}.ipynb belongs to another account (nobody)" in log, log
    assert f"refused {ghost.name}: no account named no-such-account-s5" in log, log
    text = _collected(course, ME).read_text()
    assert "another learner's work" not in text and "secret" not in text  # the first, honest folder stays


def test_a_name_with_control_characters_is_logged_escaped(course):
    _, inbound = course
    odd = inbound / f"ev\x1b[2Jil\n+{ASSIGNMENT}+2026-12-09 10:00:00.000000 UTC+x"
    odd.mkdir()
    log = _collect(course)
    assert "\x1b" not in log and "ev\\x1b[2Jil\\x0a" in log


def test_the_submission_time_is_the_arrival_not_the_learners_claim(course):
    """Issue 48, found case 4 (the hub's door): a hand-in whose inbound folder is renamed to a date years back and
    whose timestamp.txt is edited to match is recorded at its arrival (the exchange's clock), the claim kept
    beside it and logged."""
    from datetime import datetime

    from exchange_collect import CLAIMED, arrival

    _, inbound = course
    submitted = _submit(inbound, ME, "9")
    folder = submitted.with_name(f"{ME}+{ASSIGNMENT}+2001-01-01 00:00:00.000000 UTC+r9")
    submitted.rename(folder)
    (folder / "timestamp.txt").write_text("2001-01-01 00:00:00.000000 UTC")
    arrived = arrival(folder)
    log = _collect(course)
    stamp = _collected(course, ME).parent / "timestamp.txt"
    recorded = datetime.strptime(stamp.read_text().strip(), "%Y-%m-%d %H:%M:%S.%f UTC")
    assert abs((recorded - arrived).total_seconds()) < 1, (recorded, arrived)
    assert recorded.year > 2001
    claimed = (stamp.parent / CLAIMED).read_text()
    assert claimed.count("2001-01-01 00:00:00") == 2, claimed  # the name's and timestamp.txt's
    assert "by the exchange's clock" in log and "2001-01-01 00:00:00" in log
