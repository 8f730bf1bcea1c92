"""JupyterHub's periodic service health check, without the traceback it logs when a service stops under it.

JupyterHub 6.1.1's shutdown (``JupyterHub.cleanup`` -> ``Service.stop``, jupyterhub/services/service.py) deletes a
managed service's server row and only then waits for its process to stop, which on a busy machine takes tens of
seconds. The periodic ``check_services_health`` that runs in that window reads ``service.orm.server.proto`` and
fails with ``AttributeError: 'NoneType' object has no attribute 'proto'`` (the same trace is reported in
opendatahub-io/odh-manifests#684). The check below skips a service whose server is gone and is otherwise the same.
"""

from __future__ import annotations


async def check_live_services(app) -> None:  # noqa: ANN001 - a jupyterhub.app.JupyterHub
    from jupyterhub.objects import Server
    from jupyterhub.utils import AnyTimeoutError

    for name, service in app._service_map.items():
        if not service.url:
            continue
        server = service.orm.server
        if server is None:  # stopping: its row is already deleted
            continue
        try:
            await Server.from_orm(server).wait_up(timeout=service.timeout, http=True)
        except AnyTimeoutError:
            app.log.warning("Cannot connect to %s service %s at %s", service.kind, name, service.url)


def install() -> None:
    from jupyterhub.app import JupyterHub

    JupyterHub.check_services_health = check_live_services
