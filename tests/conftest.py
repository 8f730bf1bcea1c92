"""Fixtures shared by the engine, prefix-caching and speculative-decoding tests."""

import os

import pytest
import torch
from hypothesis import settings

from stage5.engine.model import generate
from tests.test_engine import make_model, make_requests

# CI explores the same examples on every run, so a submission cannot fail on an input no earlier run tried;
# locally each run draws new ones (set CI=true to replay CI's). Each test keeps its own example count.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


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
