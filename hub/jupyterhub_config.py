# JupyterHub 6.1 configuration for the course's LOCAL TRIAL hub (hub/local_hub.py, `make hub`).
# NOT FOR PRODUCTION: one shared password for every account, loopback only. Settings come from the site file
# that hub/local_hub.py writes ($STAGE5_HUB_SITE). Option names checked against JupyterHub 6.1.1 and nbgrader
# 0.9.6 ("Using nbgrader with JupyterHub", demos/demo_one_class_multiple_graders/jupyterhub_config.py).
import json
import os
import sys

c = get_config()  # noqa: F821
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import service_health  # noqa: E402

service_health.install()  # a stopping service no longer logs a traceback at shutdown (see its docstring)
site = json.loads(open(os.environ["STAGE5_HUB_SITE"]).read())
course = site["course_id"]
ports = site["ports"]
dirs = site["config_dirs"]
# The runtime Python's own scripts first (nbgrader runs `alembic` by name), then the system's: the hub's PATH
# may name root's environments, which the accounts cannot execute.
PATH = os.pathsep.join([os.path.dirname(site["runtime_python"]), "/usr/local/bin", "/usr/bin", "/bin"])

c.JupyterHub.bind_url = f"http://127.0.0.1:{site['port']}"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = ports["hub_api"]
# in root's private folder (mode 700): the accounts can read the rest of the state folder
c.JupyterHub.db_url = f"sqlite:///{site['state_dir']}/private/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = f"{site['state_dir']}/private/jupyterhub_cookie_secret"
c.JupyterHub.cleanup_servers = True  # stopping the hub stops every learner's server
c.ConfigurableHTTPProxy.command = [site["proxy"]]
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{ports['proxy_api']}"

# A shared password, for trying the course on one machine only.
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = site["password"]
c.Authenticator.allowed_users = set(site["learner_names"]) | {site["instructor"]}

# Each learner's server runs as their own Unix account, in their home, from a Python every account can run.
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [site["runtime_python"], "-m", "jupyterhub.singleuser"]
c.Spawner.default_url = "/lab"
c.Spawner.http_timeout = 120
c.Spawner.start_timeout = 120


def _config_path(spawner) -> str:
    """Learners get the Assignments list and no instructor tools; the instructor also the course list."""
    profile = "hub-instructor" if spawner.user.name == site["instructor"] else "hub-learner"
    return os.pathsep.join([dirs[profile], dirs["nbgrader"], site["env_config"]])


c.Spawner.environment = {
    "JUPYTER_CONFIG_PATH": _config_path,
    # the lab's assets and nbgrader's extensions live in the course environment's share/jupyter (and which
    # server extensions are on, in its etc/jupyter, last on the config path above)
    "JUPYTER_PATH": site["jupyter_path"],
    "LD_LIBRARY_PATH": site["library_path"],  # a copied interpreter finds its libpython there
    "PATH": PATH,
}

# Formgrader for the course as a hub-managed service, run as the grader account from the course folder.
# nbgrader: the service is named after the course and instructors reach it through a formgrade-<course> group.
grader_env = {
    "JUPYTERHUB_DEFAULT_URL": "/formgrader",
    "JUPYTER_CONFIG_PATH": os.pathsep.join([dirs["instructor"], site["env_config"]]),
    "JUPYTER_PATH": site["jupyter_path"],
    "LD_LIBRARY_PATH": site["library_path"],
    "PATH": PATH,
}
# read by grader/nbgrader_setup.py, so the course config is used as is with the shared exchange
grader_env[site["exchange_env"]] = site["exchange"]
c.JupyterHub.services = [
    {
        "name": course,
        "url": f"http://127.0.0.1:{ports['formgrader']}",
        "command": [site["runtime_python"], "-m", "jupyterhub.singleuser"],
        "user": site["grader"],
        "cwd": site["course_dir"],
        "environment": grader_env,
        "oauth_no_confirm": True,
    },
]
c.JupyterHub.load_groups = {f"formgrade-{course}": {"users": [site["instructor"]]}}
roles = [
    {
        "name": f"formgrade-{course}",
        "groups": [f"formgrade-{course}"],
        "scopes": [f"access:services!service={course}", "list:services", f"read:services!service={course}"],
    },
    # the course-list extension in the instructor's own server asks the hub for the services it may open
    {"name": "server", "scopes": ["inherit"]},
]
if site.get("driver_token"):
    # tests/test_hub.py: a service token that may create the trial accounts' tokens and start their servers
    c.JupyterHub.services.append({"name": "term-driver", "api_token": site["driver_token"]})
    roles.append({"name": "term-driver", "services": ["term-driver"],
                  "scopes": ["admin:users", "admin:servers", "tokens", "list:services"]})
c.JupyterHub.load_roles = roles
