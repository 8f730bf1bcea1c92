"""`make lab` and `make lab-instructor`: what each JupyterLab shows, checked on a running lab.

A learner's lab must not offer Formgrader or Create Assignment (server extensions off, JupyterLab plugins
disabled and locked); an instructor's lab must offer Formgrader without its "exchange does not exist" warning.
Each lab runs in a copy of the course in a temporary folder, so no gradebook or exchange appears in the repo.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "hub"))
sys.path.insert(0, str(REPO / "grader"))

from lab_profiles import NEWS_OFF, NEWS_PLUGIN, PROFILES, main, prepare_exchange, write_profile  # noqa: E402
from learner_copy import working_copy  # noqa: E402
from local_hub import copy_course  # noqa: E402
from nbgrader_setup import EXCHANGE_ENV, make_config  # noqa: E402

TOKEN = "stage5-lab-test"
EXCHANGE_WARNING = "does not exist and could"
INSTRUCTOR_ONLY = ["@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment"]


def _get(url: str) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"token {TOKEN}"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")


def _with_lab(config_dir: Path, root: Path, env: dict[str, str], check, args: tuple[str, ...] = ()) -> None:
    """Start JupyterLab as `make lab` does (JUPYTER_CONFIG_DIR), run ``check(base_url)``, stop it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [str(Path(sys.executable).with_name("jupyter")), "lab", "--allow-root", "--no-browser",
           f"--port={port}", "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={TOKEN}", *args]
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(config_dir), **env)
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while _status(f"{base}/api/status") != 200:
            assert proc.poll() is None and time.monotonic() < deadline, "jupyter lab did not start"
            time.sleep(0.3)
        check(base)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _status(url: str) -> int:
    try:
        return _get(url)[0]
    except (urllib.error.URLError, ConnectionError):
        return 0


def _page_config(html: str) -> dict:
    match = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', html, re.S)
    assert match, "no page config in /lab"
    return json.loads(match.group(1))


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                          capture_output=True, text=True).stdout


def test_learner_lab_has_no_instructor_tools(tmp_path):
    """Started as `make lab` starts it (the learner profile, opened on the working copy) in a git checkout of the
    course: no instructor tool, and an answer saved through the lab leaves `git status` clean."""
    config = write_profile("learner", tmp_path / "cfg")
    root = copy_course(tmp_path / "course")
    (root / ".gitignore").write_bytes((REPO / ".gitignore").read_bytes())
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "course")
    copied, _ = working_copy(root / "my-work", root)
    assert root / "my-work" / "exercises" / "ex01" / "ex01.ipynb" in copied
    assert "--ServerApp.root_dir=\"$(WORK)\"" in (REPO / "Makefile").read_text()  # what `make lab` opens

    def check(base):
        # the learner types an answer and saves (the contents API is what the lab's Save calls)
        status, body = _get(f"{base}/api/contents/exercises/ex01/ex01.ipynb")
        assert status == 200, body
        nb = json.loads(body)["content"]
        cell = next(c for c in nb["cells"] if c["cell_type"] == "code" and "YOUR CODE HERE" in c["source"])
        cell["source"] = "answer = 42  # the learner's edit"
        req = urllib.request.Request(f"{base}/api/contents/exercises/ex01/ex01.ipynb", method="PUT",
                                     data=json.dumps({"type": "notebook", "format": "json", "content": nb}).encode(),
                                     headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            assert resp.status == 200
        assert "the learner's edit" in (root / "my-work" / "exercises" / "ex01" / "ex01.ipynb").read_text()
        assert _git(root, "status", "--porcelain", "--untracked-files=all") == "", "the saved answer shows in git"
        assert _get(f"{base}/formgrader/")[0] == 404, "Formgrader is served to learners"
        assert _get(f"{base}/assignments?course_id=x")[0] == 404, "the exchange's Assignments list is served"
        page = _page_config(_get(f"{base}/lab")[1])
        for plugin in INSTRUCTOR_ONLY:
            assert plugin in page["disabledExtensions"], f"{plugin} is not disabled"
            assert plugin in page.get("lockedExtensions", page["disabledExtensions"])
        assert "@jupyter/nbgrader:validate-assignment" not in page["disabledExtensions"]
        # no "Jupyter news" pop-up: the news and update checks default to off (the lab's own settings API)
        status, body = _get(f"{base}/lab/api/settings/{NEWS_PLUGIN}")
        assert status == 200, body
        schema = json.loads(body)["schema"]["properties"]
        assert {k: schema[k]["default"] for k in NEWS_OFF} == NEWS_OFF

    _with_lab(config, root, {}, check, ("--ServerApp.root_dir=my-work",))
    # a second `make lab` keeps the answer and copies only what the release added since
    (root / "exercises" / "ex09").mkdir()
    (root / "exercises" / "ex09" / "ex09.ipynb").write_text("{}")
    copied, kept = working_copy(root / "my-work", root)
    assert copied == [root / "my-work" / "exercises" / "ex09" / "ex09.ipynb"]
    assert "the learner's edit" in (root / "my-work" / "exercises" / "ex01" / "ex01.ipynb").read_text()


def test_instructor_lab_has_formgrader_and_its_exchange(tmp_path):
    config = write_profile("instructor", tmp_path / "cfg")
    root = copy_course(tmp_path / "course")
    env = {EXCHANGE_ENV: str(tmp_path / "exchange")}
    os.environ[EXCHANGE_ENV] = env[EXCHANGE_ENV]
    try:
        course = make_config(root / "grader", root)
        from nbgrader.apps import NbGraderAPI

        assert not NbGraderAPI(config=course).exchange_is_functional  # what Formgrader warned about
        assert prepare_exchange(course) == tmp_path / "exchange"
        assert NbGraderAPI(config=course).exchange_is_functional
    finally:
        del os.environ[EXCHANGE_ENV]

    def check(base):
        status, html = _get(f"{base}/formgrader/")
        assert status == 200 and "Manage Assignments" in html
        assert EXCHANGE_WARNING not in html, "Formgrader still warns that the exchange is missing"
        page = _page_config(_get(f"{base}/lab")[1])
        assert not set(INSTRUCTOR_ONLY) & set(page.get("disabledExtensions") or [])

    _with_lab(config, root, env, check)


def test_profiles_keep_other_settings_and_refuse_unknown_names(tmp_path, capsys):
    page = tmp_path / "labconfig" / "page_config.json"
    page.parent.mkdir()
    page.write_text(json.dumps({"disabledExtensions": {"some-other:plugin": True}}))
    write_profile("hub-learner", tmp_path)
    disabled = json.loads(page.read_text())["disabledExtensions"]
    assert disabled["some-other:plugin"] and set(PROFILES["hub-learner"].plugins) <= set(disabled)
    write_profile("instructor", tmp_path)  # switching profiles clears nbgrader's switches only
    assert json.loads(page.read_text())["disabledExtensions"] == {"some-other:plugin": True}
    assert main(["teacher", str(tmp_path)]) == 2
    assert "known: learner, instructor" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown lab profile"):
        write_profile("admin", tmp_path)


# ------------------------------------------------------------------------------------------ the hub's signals
STOPPED_BY_SIGTERM = """
import subprocess, sys
sys.path.insert(0, {hub!r}); sys.path.insert(0, {grader!r})
import local_hub
children = []
def fake_start(site, log_path=None):  # a stand-in for JupyterHub: a process in its own session, as the real one
    children.append(subprocess.Popen(["sleep", "600"], start_new_session=True, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL))
    return children[0]
local_hub.start = fake_start
local_hub.missing_requirements = lambda: []
code = local_hub.main(["--state", {state!r}])
print("child exit:", children[0].poll(), flush=True)
sys.exit(code)
"""


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_the_hub_stops_cleanly_on_a_service_managers_signal(tmp_path, signame):
    """`make hub` under a service manager gets SIGTERM, not Ctrl-C: it must stop JupyterHub (which runs in its own
    session) and exit 0 without a traceback, instead of dying and leaving the hub running."""
    import signal

    script = STOPPED_BY_SIGTERM.format(hub=str(REPO / "hub"), grader=str(REPO / "grader"), state=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    banner = proc.stdout.readline()
    while "stops the hub" not in banner:
        assert banner, "local_hub.py ended before it printed its banner"
        banner = proc.stdout.readline()
    proc.send_signal(getattr(signal, signame))
    try:
        out, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired as late:
        proc.kill()
        raise AssertionError(f"local_hub.py did not stop on {signame}: {late.output}") from None
    assert proc.returncode == 0, out
    assert "Traceback" not in out, out
    assert "stopping the hub" in out
    assert "child exit: -9" in out or "child exit: -15" in out, out  # the stand-in hub was stopped
