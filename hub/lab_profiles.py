"""Which nbgrader tools a JupyterLab shows, per kind of user: one config folder per profile.

``make lab`` gives learners a lab without the instructor tools (the Formgrader menu, the Create Assignment
sidebar, the course and assignment lists, whose exchange a learner on one machine does not have);
``make lab-instructor`` gives instructors all of them. On the local hub the same folders reach each server
through ``JUPYTER_CONFIG_PATH``. Nothing is written to the virtual environment or to ``~/.jupyter``: the
folder is passed per command (``JUPYTER_CONFIG_DIR=.jupyter/learner jupyter lab``).

The files are the ones ``jupyter labextension disable/lock --level=user`` writes (``labconfig/page_config.json``,
JupyterLab 4.1+ locks a disabled plugin so the learner cannot re-enable it from the Plugin Manager) and the
``ServerApp.jpserver_extensions`` switches of ``jupyter_server_config.json``, written here directly because
``jupyter server extension disable`` refuses nbgrader 0.9.6's sub-modules ("could not be found").

    python hub/lab_profiles.py learner .jupyter/learner
    python hub/lab_profiles.py instructor .jupyter/instructor   # also creates the course's exchange folder
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

# nbgrader 0.9.6's JupyterLab plugins and server extensions (``jupyter labextension list``,
# ``jupyter server extension list``).
FORMGRADER = ("@jupyter/nbgrader:formgrader", "nbgrader.server_extensions.formgrader")
CREATE_ASSIGNMENT = ("@jupyter/nbgrader:create-assignment", None)
COURSE_LIST = ("@jupyter/nbgrader:course-list", "nbgrader.server_extensions.course_list")
ASSIGNMENT_LIST = ("@jupyter/nbgrader:assignment-list", "nbgrader.server_extensions.assignment_list")
# JupyterLab 4's news and update check (schema @jupyterlab/apputils-extension/notification.json): "false" is
# "Never" (the default "none" asks in a pop-up at first start).
NEWS_PLUGIN = "@jupyterlab/apputils-extension:notification"
NEWS_OFF = {"fetchNews": "false", "checkForUpdates": False}


@dataclass(frozen=True)
class LabProfile:
    """A kind of user and the nbgrader tools their lab hides (the Validate button always stays)."""

    name: str
    hidden: tuple[tuple[str, str | None], ...]
    description: str

    @property
    def plugins(self) -> list[str]:
        return [plugin for plugin, _ in self.hidden]

    @property
    def server_extensions(self) -> list[str]:
        return [ext for _, ext in self.hidden if ext]


PROFILES = {p.name: p for p in (
    LabProfile("learner", (FORMGRADER, CREATE_ASSIGNMENT, COURSE_LIST, ASSIGNMENT_LIST),
               "a learner on their own machine: exercises open from exercises/, no exchange"),
    LabProfile("instructor", (), "an instructor on one machine: Formgrader, Create Assignment, the exchange"),
    LabProfile("hub-learner", (FORMGRADER, CREATE_ASSIGNMENT, COURSE_LIST),
               "a learner on the hub: the Assignments list fetches and submits through the exchange"),
    LabProfile("hub-instructor", (FORMGRADER, CREATE_ASSIGNMENT),
               "an instructor's own server on the hub: Formgrader runs as the course's hub service"),
)}


def write_profile(name: str, config_dir: str | Path) -> Path:
    """Write the profile's config into ``config_dir`` (created; earlier nbgrader switches replaced)."""
    if name not in PROFILES:
        raise ValueError(f"unknown lab profile {name!r}; known: {', '.join(PROFILES)}")
    profile = PROFILES[name]
    folder = Path(config_dir)
    (folder / "labconfig").mkdir(parents=True, exist_ok=True)
    page = folder / "labconfig" / "page_config.json"
    cfg = json.loads(page.read_text()) if page.exists() else {}
    for key in ("disabledExtensions", "lockedExtensions"):
        switches = {k: v for k, v in cfg.get(key, {}).items() if not k.startswith("@jupyter/nbgrader:")}
        switches.update({plugin: True for plugin in profile.plugins})
        cfg[key] = switches
    page.write_text(json.dumps(cfg, indent=2) + "\n")
    # No "Jupyter news" prompt and no update check: every account would be asked at first start, and neither
    # request can succeed on a class machine without internet. JupyterLab reads default setting overrides
    # from labconfig/default_setting_overrides.json on the config path (jupyterlab_server's settings_utils).
    defaults = folder / "labconfig" / "default_setting_overrides.json"
    overrides = json.loads(defaults.read_text()) if defaults.exists() else {}
    overrides.setdefault(NEWS_PLUGIN, {}).update(NEWS_OFF)
    defaults.write_text(json.dumps(overrides, indent=2) + "\n")
    server = folder / "jupyter_server_config.json"
    scfg = json.loads(server.read_text()) if server.exists() else {}
    switches = scfg.setdefault("ServerApp", {}).setdefault("jpserver_extensions", {})
    for ext in [e for _, e in (FORMGRADER, COURSE_LIST, ASSIGNMENT_LIST) if e]:
        switches[ext] = ext not in profile.server_extensions
    server.write_text(json.dumps(scfg, indent=2) + "\n")
    return folder


def prepare_exchange(config=None) -> Path:
    """Create the exchange folder the course's nbgrader config names (``grader/exchange`` on one machine).

    Formgrader lists the exchange when it starts; a missing folder makes it warn that the exchange "does not
    exist and could not be created" and turns release and collect off. On one machine the instructor is the
    only account, so the folder needs no shared permissions.
    """
    if config is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "grader"))
        from nbgrader_setup import make_config

        config = make_config()
    root = Path(config.Exchange.root)
    root.mkdir(parents=True, exist_ok=True)
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile", help=f"one of: {', '.join(PROFILES)}")
    parser.add_argument("config_dir")
    args = parser.parse_args(argv)
    try:
        folder = write_profile(args.profile, args.config_dir)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{args.profile} lab config in {folder}: {PROFILES[args.profile].description}")
    if args.profile == "instructor":
        print(f"exchange for Formgrader's release and collect: {prepare_exchange()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
