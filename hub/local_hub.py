"""A JupyterHub for the course on one machine: accounts, the nbgrader exchange, Formgrader as a hub service.

FOR LOCAL TRIALS ONLY, NOT FOR PRODUCTION: every account shares one password (JupyterHub's
SharedPasswordAuthenticator), the hub listens on the loopback interface only, and the trial accounts can read
the repository checkout (solutions included). For a class, use The Littlest JupyterHub or Zero to JupyterHub
(book/instructors.md).

What it sets up (as root: LocalProcessSpawner runs each server as the user's own Unix account):

* Unix accounts: an instructor, two learners and ``<prefix>grader``, the account the course's Formgrader runs
  as (nbgrader's "one class, multiple graders" layout: a shared grader account behind a hub service);
* the exchange, a folder every account can write to (nbgrader: ``mkdir -p EXCHANGE; chmod ugo+rw EXCHANGE``),
  with the sticky bit so that no learner can rename or delete a folder another account made there;
* a copy of the course (nbgrader_config.py, grader/*.py, solutions/, exercises/) in the grader account's home,
  used as is: ``STAGE5_EXCHANGE`` points its exchange at the shared folder;
* per-account lab configs (hub/lab_profiles.py): learners get the Assignments list and no instructor tools;
* where the checkout lies in a folder others may not enter (mode 0700), an ACL entry per account on that folder
  that lets it pass through (hub/access.py), taken back with ``--remove-accounts``.

``python hub/local_hub.py`` (``make hub``) starts it on http://127.0.0.1:8000 and stops it on Ctrl-C;
``--remove-accounts`` deletes the accounts and their homes afterwards. tests/test_hub.py drives a term through it.
"""

from __future__ import annotations

import argparse
import grp
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "grader"))
sys.path.insert(0, str(HERE))

from access import AccessError, grant, revoke  # noqa: E402
from lab_profiles import write_profile  # noqa: E402
from nbgrader_setup import COURSE_ID, EXCHANGE_ENV  # noqa: E402

PROXY = HERE / "node_modules" / ".bin" / "configurable-http-proxy"  # `npm ci --prefix hub` (hub/package.json)
COURSE_FILES = ("nbgrader_config.py", "solutions", "exercises", "assets/vendor/mathjax")  # mathjax: feedback_page.py


@dataclass
class HubSite:
    """Everything one hub needs; written to ``state_dir/site.json`` for hub/jupyterhub_config.py to read."""

    state_dir: Path
    exchange: Path
    port: int = 8000
    prefix: str = "stage5-"
    learners: tuple[str, ...] = ("learner1", "learner2")
    password: str = field(default_factory=lambda: secrets.token_urlsafe(12))
    driver_token: str = ""  # an API token for a test driver (a hub service); empty: no such service
    runtime_python: str = ""  # a Python every account can run (see runtime_python())
    ports: dict[str, int] = field(default_factory=dict)  # hub, proxy API and Formgrader service, loopback

    @property
    def instructor(self) -> str:
        return f"{self.prefix}instructor"

    @property
    def grader(self) -> str:
        return f"{self.prefix}grader"

    @property
    def learner_names(self) -> list[str]:
        return [f"{self.prefix}{name}" for name in self.learners]

    @property
    def accounts(self) -> list[str]:
        return [self.instructor, *self.learner_names, self.grader]

    @property
    def course_dir(self) -> Path:
        return Path(pwd.getpwnam(self.grader).pw_dir) / COURSE_ID

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def private_dir(self) -> Path:
        """Root's part of the state: the hub's database, cookie secret and this site file."""
        return self.state_dir / "private"

    def config_dir(self, profile: str) -> Path:
        return self.state_dir / "jupyter" / profile

    def save(self) -> Path:
        self.private_dir.mkdir(exist_ok=True)
        self.private_dir.chmod(0o700)
        path = self.private_dir / "site.json"  # holds the shared password and the driver token
        data = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}
        data.update(instructor=self.instructor, grader=self.grader, learner_names=self.learner_names,
                    course_dir=str(self.course_dir), course_id=COURSE_ID, exchange_env=EXCHANGE_ENV, proxy=str(PROXY),
                    config_dirs={p: str(self.config_dir(p)) for p in ("hub-learner", "hub-instructor",
                                                                      "instructor", "nbgrader")},
                    jupyter_path=str(Path(sys.prefix) / "share" / "jupyter"),
                    # the course environment's own config (which server extensions are on: JupyterLab, nbgrader)
                    env_config=str(Path(sys.prefix) / "etc" / "jupyter"),
                    library_path=runtime_library_path(self.runtime_python) if self.runtime_python else "")
        path.write_text(json.dumps(data, indent=2))
        return path


# ------------------------------------------------------------------------------------------ checks
def missing_requirements() -> list[str]:
    """What this machine lacks to run the hub (empty when it can)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (LocalProcessSpawner starts each server as the user's Unix account)")
    for tool in ("useradd", "userdel", "runuser", "node"):
        if shutil.which(tool) is None:
            missing.append(f"the `{tool}` command")
    if not PROXY.exists():
        missing.append(f"configurable-http-proxy ({PROXY}; run `npm ci --prefix hub`)")
    try:
        import jupyterhub  # noqa: F401
    except ImportError:
        missing.append("the jupyterhub package (pip install -r requirements-hub.txt)")
    return missing


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------ set-up
def _runs_as(user: str, python: str) -> str:
    """Why ``user`` cannot run ``python`` with the course's packages (empty when they can)."""
    env = dict(os.environ, LD_LIBRARY_PATH=runtime_library_path(python))
    proc = subprocess.run(["runuser", "-u", user, "--", python, "-c", "import nbgrader, soupsieve, stage5"],
                          capture_output=True, text=True, env=env, cwd="/")
    return "" if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["failed"])[-1]


def runtime_python(site: HubSite) -> str:
    """A Python that every account can run, with the course's packages.

    The course's virtual environment works when its interpreter is readable by all. Where it is not (pyenv
    installs Python under root's home, mode 700), the same interpreter and standard library are copied into
    the state folder (about 140 MB, no download) and its site-packages chain to the course environment's.
    A system Python of the same minor version is no substitute: Debian 12's 3.11.2 has a regex bug (possessive
    quantifiers) that breaks soupsieve, and with it nbgrader's HTML feedback.
    """
    probe = site.grader
    if not _runs_as(probe, sys.executable):
        return sys.executable
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    base, rt = Path(sys.base_prefix), site.state_dir / "python"
    python = rt / "bin" / version
    if not python.exists():
        shutil.copytree(base / "lib" / version, rt / "lib" / version, symlinks=True,
                        ignore=shutil.ignore_patterns("site-packages", "test", "idlelib", "tkinter", "turtledemo"))
        for lib in (base / "lib").glob("libpython*.so*"):
            shutil.copy2(lib, rt / "lib" / lib.name, follow_symlinks=False)
        (rt / "bin").mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(sys.executable).resolve(), python)
    packages = rt / "lib" / version / "site-packages"
    packages.mkdir(exist_ok=True)
    course_packages = Path(sys.prefix) / "lib" / version / "site-packages"
    (packages / "stage5_course_env.pth").write_text(f"import site; site.addsitedir({str(course_packages)!r})\n")
    # console scripts nbgrader calls by name (alembic, when it creates a gradebook), pointed at this Python
    for script in Path(sys.executable).parent.iterdir():
        first = script.read_bytes().split(b"\n", 1)[0] if script.is_file() else b""
        if first.startswith(b"#!") and b"python" in first:
            body = script.read_text().split("\n", 1)[1]
            (rt / "bin" / script.name).write_text(f"#!{python}\n{body}")
            (rt / "bin" / script.name).chmod(0o755)
    subprocess.run(["chmod", "-R", "a+rX", str(rt)], check=True)
    why = _runs_as(probe, str(python))
    if why:
        raise RuntimeError(f"{probe} cannot run {python} with the course's packages: {why}")
    return str(python)


def runtime_library_path(python: str) -> str:
    """LD_LIBRARY_PATH for a copied interpreter (its libpython lies beside it), kept in front of the caller's."""
    lib = str(Path(python).parent.parent / "lib")
    rest = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p and p != lib]
    return os.pathsep.join([lib, *rest])


def create_accounts(site: HubSite) -> None:
    """Create the Unix accounts that do not exist yet (home folders readable by their owner only)."""
    for user in site.accounts:
        try:
            pwd.getpwnam(user)
        except KeyError:
            # a group of that name may be left from an interrupted clean-up: reuse it as the primary group
            group = ["--gid", user] if _group_exists(user) else ["--user-group"]
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", *group, user], check=True)
        home = Path(pwd.getpwnam(user).pw_dir)
        home.chmod(0o700)


def course_folders() -> list[Path]:
    """What the accounts must reach: the checkout, and the course's environment where it lies inside it (one
    elsewhere, such as a pyenv under root's home, is copied instead: see runtime_python())."""
    prefix = Path(sys.prefix).resolve()
    return [REPO, *([prefix] if REPO in prefix.parents else [])]


def let_accounts_in(site: HubSite) -> None:
    """Let the accounts pass through the private folders above the checkout (hub/access.py); a folder that cannot
    take an ACL is one line saying what to change (AccessError)."""
    grant(course_folders(), [pwd.getpwnam(user).pw_uid for user in site.accounts])


def remove_accounts(site: HubSite) -> None:
    """Delete the accounts and their homes (their files in the exchange go with the exchange folder), after
    taking back the ACL entries that let them through the checkout's folders."""
    uids = []
    for user in site.accounts:
        try:
            uids.append(pwd.getpwnam(user).pw_uid)
        except KeyError:
            continue
    revoke(course_folders(), uids)
    for user in site.accounts:
        try:
            pwd.getpwnam(user)
        except KeyError:
            continue
        subprocess.run(["pkill", "-KILL", "-u", user], capture_output=True)
        subprocess.run(["userdel", "--remove", user], capture_output=True)
    for user in site.accounts:
        if _group_exists(user):
            subprocess.run(["groupdel", user], capture_output=True)


def _group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


def prepare_exchange(site: HubSite) -> None:
    site.exchange.mkdir(parents=True, exist_ok=True)
    site.exchange.chmod(0o1777)  # nbgrader: ugo+rw; the sticky bit keeps accounts off each other's folders


# grader/'s working state (git-ignored): never copied into a course folder
GRADER_STATE = ("submitted", "autograded", "feedback", "inbox", "exchange", "release", "*.db", "*.csv",
                "__pycache__", ".ipynb_checkpoints")


def copy_course(dest: Path) -> Path:
    """Copy what nbgrader needs to run the course (its config, grader/ without working state, solutions/,
    exercises/) into ``dest``; the copy's nbgrader_config.py then names ``dest`` as the course root."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "grader", dest / "grader", ignore=shutil.ignore_patterns(*GRADER_STATE))
    for name in COURSE_FILES:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        else:
            shutil.copy2(src, dest / name)
    return dest


def prepare_course(site: HubSite) -> Path:
    """Copy the course into the grader account's home, owned by it (the gradebook and submissions go there)."""
    dest = site.course_dir
    if dest.exists():
        shutil.rmtree(dest)
    copy_course(dest)
    add_learners(site, dest)
    subprocess.run(["chown", "-R", f"{site.grader}:{site.grader}", str(dest)], check=True)
    return dest


def add_learners(site: HubSite, course: Path) -> None:
    """Put the learners in the course's gradebook, named by their account (as `make grade` names them by id):
    students that nbgrader's collect creates have no name, and Formgrader lists them as "None, None"."""
    from nbgrader.api import Gradebook
    from nbgrader_setup import make_config

    db_url = make_config(course / "grader", course).CourseDirectory.db_url
    with Gradebook(db_url) as gb:
        for name in site.learner_names:
            gb.update_or_create_student(name, first_name="", last_name=name, email="")  # not "None" in Formgrader


def prepare_configs(site: HubSite) -> None:
    """Lab profiles per account, and the nbgrader config every account reads (course id, exchange)."""
    for profile in ("hub-learner", "hub-instructor", "instructor"):
        write_profile(profile, site.config_dir(profile))
    nbgrader = site.config_dir("nbgrader")
    nbgrader.mkdir(parents=True, exist_ok=True)
    (nbgrader / "nbgrader_config.py").write_text(
        "# Written by hub/local_hub.py: the course every account on this hub takes, and its exchange.\n"
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
        f"c.Exchange.root = {str(site.exchange)!r}\n")


def prepare(site: HubSite) -> Path:
    """Everything before the hub starts; returns the site file."""
    site.state_dir.mkdir(parents=True, exist_ok=True)
    site.state_dir.chmod(0o755)
    create_accounts(site)
    let_accounts_in(site)
    prepare_exchange(site)
    prepare_course(site)
    prepare_configs(site)
    site.runtime_python = runtime_python(site)
    for name in ("hub_api", "proxy_api", "formgrader"):
        site.ports.setdefault(name, free_port())
    subprocess.run(["chmod", "-R", "a+rX", str(site.state_dir / "jupyter")], check=True)
    return site.save()


# ------------------------------------------------------------------------------------------ run
def start(site: HubSite, log_path: Path | None = None) -> subprocess.Popen:
    """Start JupyterHub (and through it the proxy and the Formgrader service); wait until its API answers."""
    site_file = prepare(site)
    env = dict(os.environ, STAGE5_HUB_SITE=str(site_file))
    out = open(log_path, "ab") if log_path else None  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(HERE / "jupyterhub_config.py")],
                            cwd=site.private_dir, env=env, stdout=out, stderr=subprocess.STDOUT if out else None,
                            start_new_session=True)
    start_s = time.monotonic()
    deadline, said = start_s + 120, start_s
    # Ask the hub itself first, then through the proxy: asked through the proxy before the hub has added its route,
    # every probe was a red "[ConfigProxy] error: 404 GET /hub/api/" line on a healthy start.
    probes = [f"http://127.0.0.1:{site.ports['hub_api']}/hub/api/", f"{site.url}/hub/api/"]
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"jupyterhub exited with {proc.returncode}; see {log_path or 'its output'}")
            try:
                with urllib.request.urlopen(probes[0], timeout=5) as resp:
                    if resp.status == 200:
                        probes.pop(0)
                        if not probes:
                            return proc
                        continue
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() - said >= 15:
                said = time.monotonic()
                print(f"  ... still starting ({said - start_s:.0f} s)", flush=True)
            time.sleep(0.5)
    except BaseException:  # Ctrl-C or a service manager's SIGTERM while starting: leave nothing running
        stop(proc)
        raise
    stop(proc)
    raise RuntimeError(f"jupyterhub did not answer on {site.url} within 120 s")


def stop(proc: subprocess.Popen, timeout: float = 90) -> None:
    """Stop the hub: SIGTERM lets it stop the servers and services it spawned (each may take its spawner's
    interrupt and term timeouts); after ``timeout`` (systemd's default stop timeout), its process group is killed."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def stop_on_signals() -> None:
    """Make a service manager's SIGTERM (and a closed terminal's SIGHUP) stop the hub as Ctrl-C does. Python's
    default for SIGTERM ends this process at once, leaving JupyterHub (its own session) and its servers running."""

    def interrupt(signum: int, _frame) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--state", default=str(REPO / ".hub"), help="hub database, logs, configs (default .hub/)")
    parser.add_argument("--exchange", default="/srv/nbgrader/exchange")
    parser.add_argument("--remove-accounts", action="store_true", help="delete the trial accounts on exit")
    args = parser.parse_args(argv)
    missing = missing_requirements()
    if missing:
        print("cannot start the local hub; missing: " + "; ".join(missing), file=sys.stderr)
        return 1
    site = HubSite(state_dir=Path(args.state).resolve(), exchange=Path(args.exchange), port=args.port)
    stop_on_signals()
    proc = None
    try:  # Ctrl-C or a signal, at any point, stops the hub this started (start() cleans up its own half-start)
        print("starting JupyterHub, its proxy and the Formgrader service (under a minute on a quiet machine; the "
              "first start also creates the trial accounts) ...", flush=True)
        try:
            proc = start(site)
        except AccessError as err:
            print(f"cannot start the local hub: {err}", file=sys.stderr)
            return 1
        print(f"\nJupyterHub for {COURSE_ID} on {site.url}  (local trial, NOT for production)\n"
              f"  instructor: {site.instructor}   learners: {', '.join(site.learner_names)}\n"
              f"  shared password for every account: {site.password}\n"
              f"  Formgrader: {site.url}/services/{COURSE_ID}/formgrader (instructor only)\n"
              f"  exchange: {site.exchange}\nCtrl-C (or SIGTERM) stops the hub.", flush=True)
        proc.wait()
    except KeyboardInterrupt:
        print("stopping the hub and every server it started ...", flush=True)
    finally:
        if proc is not None:
            stop(proc)
        if args.remove_accounts:
            remove_accounts(site)
    return 0


if __name__ == "__main__":
    sys.exit(main())
