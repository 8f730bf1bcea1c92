"""Fixtures shared by the engine, prefix-caching and speculative-decoding tests."""

import pytest
import torch

from stage5.engine.model import generate
from tests.test_engine import make_model, make_requests


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
