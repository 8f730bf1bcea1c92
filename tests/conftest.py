"""Fixtures shared by several test modules: the engine's tiny models and requests, a private calibration cache, and
the one book build of a session."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import settings

from stage5.engine.model import generate
from tests.test_engine import make_model, make_requests

BOOK_ROOT = Path(__file__).resolve().parents[1]

# CI explores the same examples on every run, so a submission cannot fail on an input no earlier run tried;
# locally each run draws new ones (set CI=true to replay CI's). Each test keeps its own example count.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


# ------------------------------------------------------------------ sharing the work between xdist's workers
# `make test` runs two workers (pytest -n 2). xdist's own grouping (--dist loadgroup) reads item._nodeid, which
# pytest 9 no longer uses, so the course names its units here: the files that read the one book build run on one
# worker (the book is built once), and every other file stays whole (a module's graded class is set up once).
BOOK_FILES = ("tests/test_book.py", "tests/test_book_robustness.py", "tests/test_predictions.py", "tests/test_formulas.py",
              "tests/test_mode_meanings.py")
# Longest units first, so neither worker is left with one at the end (a scheduling hint; any order is correct).
LONG_FIRST = ("book", "tests/test_grading_ex02.py", "tests/test_grading_load.py", "tests/test_grading_ex03.py",
              "tests/test_grading_ex04.py",
              "tests/test_grading.py", "tests/test_grading_hostile.py", "tests/test_hub.py")


def _unit(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return "book" if path in BOOK_FILES else path


def pytest_xdist_make_scheduler(config, log):  # noqa: ANN001, ANN201 - xdist's hook
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    return ByUnit(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    strays = [item.nodeid for item in items
              if "built_book" in getattr(item, "fixturenames", ()) and _unit(item.nodeid) != "book"]
    if strays:
        raise pytest.UsageError(f"{strays[0]} uses the book build: add its file to BOOK_FILES in tests/conftest.py")
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker sorts alike (xdist checks they collected the same)
        rank = {unit: i for i, unit in enumerate(LONG_FIRST)}
        items.sort(key=lambda item: rank.get(_unit(item.nodeid), len(rank)))


@pytest.fixture(scope="module")
def model64():
    """The tiny random model in float64, so greedy ties cannot flip between batch shapes."""
    return make_model(torch.float64)


@pytest.fixture(scope="module")
def requests():
    return make_requests()


@pytest.fixture(scope="module")
def reference(model64, requests):
    """What each request produces alone through the reference generate(): the oracle."""
    return {r.id: generate(model64, list(r.prompt), r.output_len) for r in requests}


@pytest.fixture(autouse=True, scope="session")
def _private_calibration_cache(tmp_path_factory):
    """Tests that calibrate this machine do it into their own folder, never into the user's cache."""
    patch = pytest.MonkeyPatch()
    patch.setenv("STAGE5_CACHE_DIR", str(tmp_path_factory.mktemp("stage5-cache")))
    yield
    patch.undo()


@pytest.fixture(scope="session")
def built_book(tmp_path_factory) -> tuple[Path, str]:
    """Build the book once per session, clean, executing every chapter; return (html folder, build log). The
    executed notebooks are beside the html folder, in ``jupyter_execute`` (tests/test_predictions.py reads them)."""
    out = tmp_path_factory.mktemp("book")
    jb = Path(sys.executable).with_name("jupyter-book")
    # No --keep-going: a failed or timed-out cell must fail the build. The chapters calibrate this machine
    # afresh into a private cache, so the build never reads a calibration taken under other conditions.
    cmd = [str(jb) if jb.exists() else "jupyter-book", "build", str(BOOK_ROOT), "--path-output", str(out),
           "--warningiserror"]
    env = {**os.environ, "STAGE5_CACHE_DIR": str(out / "stage5-cache")}
    # The timeout only stops a hung build; the cells' own limit is execute.timeout in _config.yml.
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=BOOK_ROOT, env=env)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"jupyter-book build failed:\n{log[-6000:]}"
    return out / "_build" / "html", log
