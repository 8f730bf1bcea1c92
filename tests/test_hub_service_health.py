"""The hub's service health check survives a service that is stopping (hub/service_health.py)."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("jupyterhub", reason="JupyterHub is installed by `make test` (requirements-hub.txt)")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub"))
import service_health  # noqa: E402
from jupyterhub.app import JupyterHub  # noqa: E402


def _app_with_a_stopping_service():
    # what Service.stop leaves while the service's process is still stopping: a URL, no server row
    stopping = SimpleNamespace(url="http://127.0.0.1:1", orm=SimpleNamespace(server=None), timeout=1, kind="managed")
    no_url = SimpleNamespace(url="", orm=SimpleNamespace(server=None), timeout=1, kind="external")
    return SimpleNamespace(_service_map={"formgrader": stopping, "driver": no_url}, log=logging.getLogger("hub"))


def test_jupyterhubs_own_check_fails_on_a_stopping_service():
    """The upstream bug the guard exists for; if an upgrade fixes it, this fails and the guard can go."""
    original = JupyterHub.__dict__["check_services_health"]
    if original is service_health.check_live_services:
        pytest.skip("another test in this process installed the guard")
    with pytest.raises(AttributeError, match="proto"):
        asyncio.run(original(_app_with_a_stopping_service()))


def test_the_guarded_check_skips_a_stopping_service_and_still_warns_about_an_unreachable_one(caplog):
    app = _app_with_a_stopping_service()
    asyncio.run(service_health.check_live_services(app))  # no AttributeError
    assert not caplog.records
    # a running service's row, at a port nothing listens on: the hub's warning, as before
    from jupyterhub import orm

    row = orm.Server(proto="http", ip="127.0.0.1", port=9, base_url="/services/c/", cookie_name="c")
    app._service_map["formgrader"].orm.server = row
    app._service_map["formgrader"].timeout = 0.2
    with caplog.at_level(logging.WARNING, logger="hub"):
        asyncio.run(service_health.check_live_services(app))
    assert [r.getMessage() for r in caplog.records] == ["Cannot connect to managed service formgrader at "
                                                        "http://127.0.0.1:1"]
