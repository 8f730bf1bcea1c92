"""A term of the course on a real JupyterHub, driven through its REST API and nbgrader's exchange.

One hub (hub/local_hub.py: JupyterHub 6.1, configurable-http-proxy, LocalProcessSpawner, Formgrader as a hub
service) is started on a free loopback port with its own Unix accounts, exchange and state folder. Then:
the instructor generates and releases ex01 through Formgrader's API; two learners start their servers, fetch
ex01 through their Assignments list (nbgrader's server extension), one saves a solved notebook and the other a
blank one, and both submit; the instructor collects, autogrades, generates and releases feedback; each learner
fetches their feedback. The scores must equal what ``grader/grade.py`` gives for the same notebooks.

Needs root, node and the hub requirements (``make test`` installs them); elsewhere it skips and says why, except
in CI, where a missing requirement fails. About 1.5 min on 2 busy cores (load average 5), most of it starting
the hub and three Jupyter servers. ``pytest -m "not hub"`` leaves it out.
"""

from __future__ import annotations

import html as html_text
import json
import os
import pwd
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "hub"))
sys.path.insert(0, str(REPO / "grader"))

import local_hub  # noqa: E402
from nbgrader_setup import COURSE_ID  # noqa: E402

requests = pytest.importorskip("requests")
pytestmark = pytest.mark.hub

ASSIGNMENT = "ex01"
SUBMISSIONS = REPO / "tests" / "submissions" / ASSIGNMENT
# what each learner hands in: the solved fixture and the untouched release
SOLVED = next(p for p in (SUBMISSIONS / "solved_ex01.ipynb", SUBMISSIONS / "ada lovelace_123_ex01.ipynb") if p.exists())
HANDED_IN = {"learner1": SOLVED, "learner2": SUBMISSIONS / "blank_ex01.ipynb"}
TIMEOUT_S = 180  # per wait for a server; generous for a loaded machine, never a pass/fail on speed


class Hub:
    """A small client: the hub API with the driver's token, servers and services with each account's token."""

    def __init__(self, site: local_hub.HubSite):
        self.site = site
        self.http = requests.Session()
        self.tokens: dict[str, str] = {}
        self.timings: dict[str, float] = {}

    def _auth(self, user: str | None) -> dict[str, str]:
        return {"Authorization": f"token {self.tokens[user] if user else self.site.driver_token}"}

    def api(self, method: str, path: str, user: str | None = None, **kw):
        return self.http.request(method, f"{self.site.url}/hub/api{path}", headers=self._auth(user), timeout=60, **kw)

    def token_for(self, user: str) -> None:
        r = self.api("POST", f"/users/{user}/tokens", json={"note": "test_hub", "expires_in": 3600})
        assert r.status_code == 201, r.text
        self.tokens[user] = r.json()["token"]

    def start_server(self, user: str) -> None:
        r = self.api("POST", f"/users/{user}/server", user=user)
        assert r.status_code in (201, 202), r.text
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            server = self.api("GET", f"/users/{user}", user=user).json()["servers"].get("", {})
            if server.get("ready"):
                return
            time.sleep(0.5)
        raise AssertionError(f"{user}'s server was not ready within {TIMEOUT_S} s")

    def server(self, method: str, user: str, path: str, as_user: str | None = None, **kw):
        return self.http.request(method, f"{self.site.url}/user/{user}/{path}", headers=self._auth(as_user or user),
                                 timeout=120, allow_redirects=False, **kw)

    def assignments(self, user: str, action: str) -> dict:
        """A learner's Assignments-list action (fetch, submit, fetch_feedback), as the JupyterLab sidebar sends it."""
        r = self.server("POST", user, f"assignments/{action}",
                        data={"course_id": COURSE_ID, "assignment_id": ASSIGNMENT})
        assert r.status_code == 200, r.text
        return r.json()

    def formgrader(self, method: str, path: str, user: str) -> requests.Response:
        return self.http.request(method, f"{self.site.url}/services/{COURSE_ID}/formgrader/api/{path}",
                                 headers=self._auth(user), timeout=300, allow_redirects=False)

    def formgrader_ok(self, path: str, user: str) -> dict:
        r = self.formgrader("POST", path, user)
        assert r.status_code == 200, r.text[:500]
        out = r.json()
        assert out["success"], f"Formgrader {path}: {out.get('log', '')[-2500:]}"
        return out


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    missing = local_hub.missing_requirements()
    if missing:
        message = "the local JupyterHub cannot run here: " + "; ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(message + " (CI must run this test: make test installs its requirements)")
        pytest.skip(message)
    # not under pytest's tmp_path: its parents are private to root, and the accounts must reach the state folder
    tmp = Path(tempfile.mkdtemp(prefix="stage5-hub-test-"))
    tmp.chmod(0o755)
    site = local_hub.HubSite(state_dir=tmp / "state", exchange=tmp / "exchange", port=local_hub.free_port(),
                             prefix="s5t-", driver_token=secrets.token_hex(24))
    local_hub.remove_accounts(site)  # left over from an interrupted run
    log = tmp / "jupyterhub.log"
    t0 = time.perf_counter()
    proc = None
    try:
        proc = local_hub.start(site, log)
        client = Hub(site)
        client.proc, client.log = proc, log
        client.timings["start"] = time.perf_counter() - t0
        yield client
    except Exception:
        print(log.read_text()[-6000:] if log.exists() else "no hub log")
        raise
    finally:
        if proc is not None:
            local_hub.stop(proc)
        local_hub.remove_accounts(site)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def term(hub):
    """Run the term once; return the formgrader's scores and each learner's fetched feedback."""
    site = hub.site
    learners = dict(zip(HANDED_IN, site.learner_names, strict=True))
    t0 = time.perf_counter()
    for user in [site.instructor, *learners.values()]:
        hub.token_for(user)
    hub.formgrader_ok(f"assignment/{ASSIGNMENT}/assign", site.instructor)
    hub.formgrader_ok(f"assignment/{ASSIGNMENT}/release", site.instructor)
    for user in learners.values():
        hub.start_server(user)
    hub.timings["servers"] = time.perf_counter() - t0
    fetched = {}
    for key, user in learners.items():
        fetched[user] = hub.assignments(user, "fetch")
        nb = json.loads(HANDED_IN[key].read_text())
        r = hub.server("PUT", user, f"api/contents/{ASSIGNMENT}/{ASSIGNMENT}.ipynb",
                       json={"type": "notebook", "format": "json", "content": nb})
        assert r.status_code in (200, 201), r.text
        submitted = hub.assignments(user, "submit")
        assert submitted["success"], submitted
    t1 = time.perf_counter()
    hub.formgrader_ok(f"assignment/{ASSIGNMENT}/collect", site.instructor)
    for user in learners.values():
        hub.formgrader_ok(f"submission/{ASSIGNMENT}/{user}/autograde", site.instructor)
    hub.formgrader_ok(f"assignment/{ASSIGNMENT}/generate_feedback", site.instructor)
    hub.formgrader_ok(f"assignment/{ASSIGNMENT}/release_feedback", site.instructor)
    hub.timings["grading"] = time.perf_counter() - t1
    r = hub.formgrader("GET", f"submissions/{ASSIGNMENT}", site.instructor)
    assert r.status_code == 200, r.text[:500]
    scores = {s["student"]: (s["score"], s["max_score"]) for s in r.json()}
    submissions = r.json()
    feedback = {}
    for user in learners.values():
        assert hub.assignments(user, "fetch_feedback")["success"]
        listing = hub.server("GET", user, f"api/contents/{ASSIGNMENT}/feedback").json()
        runs = [item["path"] for item in listing.get("content", []) if item["type"] == "directory"]
        assert len(runs) == 1, f"{user}: expected one feedback folder, found {listing}"
        page = hub.server("GET", user, f"api/contents/{runs[0]}/{ASSIGNMENT}.html")
        assert page.status_code == 200, page.text[:300]
        feedback[user] = page.json()["content"]
    hub.timings["term"] = time.perf_counter() - t0
    print(f"\nhub timings (s): {json.dumps({k: round(v, 1) for k, v in hub.timings.items()})}")
    return {"learners": learners, "fetched": fetched, "scores": scores, "feedback": feedback,
            "submissions": submissions}


@pytest.fixture(scope="module")
def reference(tmp_path_factory, term):
    """The same two notebooks graded by grader/grade.py's workflow, outside the hub."""
    from workflow import Course, student_id

    tmp = tmp_path_factory.mktemp("reference")
    inbox = tmp / "inbox"
    inbox.mkdir()
    for key, user in term["learners"].items():
        shutil.copyfile(HANDED_IN[key], inbox / f"{user}_{ASSIGNMENT}.ipynb")
    graded = {r.student: r for r in Course(tmp / "work").grade(inbox, ASSIGNMENT, feedback=False)}
    # make grade's ids are slugs of the file names (an account's "-" becomes "_"): map them back to the accounts
    return {user: graded[student_id(f"{user}_{ASSIGNMENT}.ipynb", ASSIGNMENT)] for user in term["learners"].values()}


def test_learners_fetch_the_release(term):
    for user, out in term["fetched"].items():
        fetched = [a for a in out["value"] if a["status"] == "fetched" and a["assignment_id"] == ASSIGNMENT]
        assert out["success"] and fetched, f"{user}: {out}"
        assert [n["path"] for n in fetched[0]["notebooks"]] == [f"{ASSIGNMENT}/{ASSIGNMENT}.ipynb"]


def test_every_submission_is_collected_and_graded(term):
    assert set(term["scores"]) == set(term["learners"].values())
    assert all(score is not None for score, _ in term["scores"].values())


def test_formgrader_lists_learners_by_id_with_submission_times(term):
    listed = {s["student"]: s for s in term["submissions"]}
    assert set(listed) == set(term["learners"].values())
    for user, s in listed.items():
        assert s["timestamp"] and s["display_timestamp"], f"Formgrader shows no submission time for {user}: {s}"


def test_hub_grades_equal_make_grade(term, reference):
    for user, (score, max_score) in term["scores"].items():
        r = reference[user]
        assert r.status == "ok", r.line()
        assert score == r.score and max_score == r.max_score, f"{user}: hub {score}/{max_score}, make grade {r.line()}"
    solved, blank = (term["scores"][term["learners"][k]][0] for k in ("learner1", "learner2"))
    assert solved > blank, "the solved notebook must outscore the blank one"


def test_feedback_reaches_each_learner_through_the_exchange(term):
    for user, html in term["feedback"].items():
        score, max_score = term["scores"][user]
        assert f"{score:g}" in html and f"{max_score:g}" in html, f"{user}'s feedback does not show their score"
        assert "BEGIN HIDDEN TESTS" not in html
    # Formgrader's "generate feedback" uses the course's page too: the solved learner's written answer, not marked
    # yet, is "to be marked", not "Score: 0.0"; the blank one's (scored 0 by nbgrader itself) is not
    solved, blank = (term["learners"][key] for key in ("learner1", "learner2"))
    assert "To be marked by your instructor (2.0 points)" in term["feedback"][solved]
    assert "to be marked by your instructor" not in term["feedback"][blank].lower()


def test_formgrader_is_for_the_instructor_only(hub, term):
    site = hub.site
    assert hub.formgrader("GET", "status", site.instructor).status_code == 200
    for user in site.learner_names:
        assert hub.formgrader("GET", "status", user).status_code == 403, f"{user} reached Formgrader"


def test_learners_lab_has_the_assignments_list_and_no_instructor_tools(hub, term):
    user = hub.site.learner_names[0]
    r = hub.server("GET", user, "lab")
    assert r.status_code == 200, f"{user}'s JupyterLab: {r.status_code}"
    page = json.loads(re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                                r.text, re.S).group(1))
    disabled = page.get("disabledExtensions") or []
    assert "@jupyter/nbgrader:formgrader" in disabled and "@jupyter/nbgrader:create-assignment" in disabled
    assert "@jupyter/nbgrader:assignment-list" not in disabled
    assert hub.server("GET", user, "formgrader").status_code == 404, "Formgrader runs in a learner's server"


def test_a_learner_cannot_reach_another_learners_server(hub, term):
    first, second = hub.site.learner_names
    r = hub.server("GET", first, "api/contents/", as_user=second)
    assert r.status_code in (302, 403), f"{second} read {first}'s files: {r.status_code}"


def test_a_learner_cannot_list_the_submissions(hub, term):
    """The exchange's inbound folder is write-only for learners (nbgrader creates it 733)."""
    inbound = hub.site.exchange / COURSE_ID / "inbound"
    assert any(inbound.iterdir()), "no submission reached the inbound folder"
    proc = subprocess.run(["runuser", "-u", hub.site.learner_names[0], "--", "ls", str(inbound)],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "Permission denied" in proc.stderr, proc.stdout


def test_a_learner_cannot_read_the_hubs_secrets(hub, term):
    """The shared password, the driver's token and the hub's database stay in root's private folder."""
    for secret in ("site.json", "jupyterhub.sqlite", "jupyterhub_cookie_secret"):
        assert (hub.site.private_dir / secret).exists(), secret
        proc = subprocess.run(["runuser", "-u", hub.site.learner_names[0], "--", "cat",
                               str(hub.site.private_dir / secret)], capture_output=True, text=True)
        assert proc.returncode != 0 and "Permission denied" in proc.stderr, secret


def test_formgrader_names_each_learner_by_account(hub, term):
    """Formgrader's student list shows each learner's account, never "None, None" (hub/local_hub.py adds the
    learners to the gradebook before the term)."""
    r = hub.formgrader("GET", "students", hub.site.instructor)
    assert r.status_code == 200, r.text[:300]
    names = {s["id"]: (s["last_name"], s["first_name"]) for s in r.json()}
    assert {name: names.get(name) for name in hub.site.learner_names} == {
        name: (name, "") for name in hub.site.learner_names}


def test_grading_unedited_cells_logs_no_checksum_warning(hub, term):
    """nbgrader warns "checksum ... has changed!" when a grade cell differs from the released one: on notebooks
    whose grade cells nobody edited, such a warning would teach instructors to ignore the real ones."""
    changed = [line for line in hub.log.read_text(errors="replace").splitlines() if "has changed" in line]
    assert not changed, "\n".join(changed[:5])


# ----------------------------------------------------------------------------- a hostile learner on the hub
def _as(user: str, *argv: str) -> None:
    proc = subprocess.run(["runuser", "-u", user, "--", *argv], capture_output=True, text=True)
    assert proc.returncode == 0, f"{user}: {' '.join(argv)}: {proc.stderr}"


def _owned_by(folder: Path, user: str) -> list[Path]:
    uid = pwd.getpwnam(user).pw_uid
    return sorted((p for p in folder.iterdir() if p.lstat().st_uid == uid), key=lambda p: p.name)


@pytest.fixture(scope="module")
def attack(hub, term):
    """After the term: learner2 creates a folder in the inbound folder under learner1's name (a blank notebook,
    stamped later than learner1's own), then submits again and swaps its own notebook for a link to the grader
    account's copy of learner1's collected notebook. The instructor collects, autogrades and releases feedback
    again."""
    site = hub.site
    victim, attacker = (term["learners"][k] for k in ("learner1", "learner2"))
    inbound = site.exchange / COURSE_ID / "inbound"
    collected = site.course_dir / "grader" / "submitted" / victim / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    before = {"notebook": collected.read_bytes(), "scores": dict(term["scores"])}
    forged = inbound / f"{victim}+{ASSIGNMENT}+2099-01-01 00:00:00.000000 UTC+forged"
    blank = Path(tempfile.mkdtemp(prefix="stage5-attack-"))
    blank.chmod(0o755)
    shutil.copyfile(HANDED_IN["learner2"], blank / f"{ASSIGNMENT}.ipynb")
    (blank / f"{ASSIGNMENT}.ipynb").chmod(0o644)
    _as(attacker, "mkdir", str(forged))
    _as(attacker, "cp", str(blank / f"{ASSIGNMENT}.ipynb"), str(forged / f"{ASSIGNMENT}.ipynb"))
    _as(attacker, "sh", "-c", f"echo '2099-01-01 00:00:00.000000 UTC' > '{forged}/timestamp.txt'")
    earlier = _owned_by(inbound, attacker)
    assert hub.assignments(attacker, "submit")["success"]
    own = [p for p in _owned_by(inbound, attacker) if p not in earlier and p.name.startswith(f"{attacker}+")]
    assert len(own) == 1, own
    _as(attacker, "ln", "-sf", str(collected), str(own[0] / f"{ASSIGNMENT}.ipynb"))
    log = hub.formgrader_ok(f"assignment/{ASSIGNMENT}/collect", site.instructor).get("log", "")
    for user in term["learners"].values():
        hub.formgrader_ok(f"submission/{ASSIGNMENT}/{user}/autograde", site.instructor)
    hub.formgrader_ok(f"assignment/{ASSIGNMENT}/generate_feedback", site.instructor)
    hub.formgrader_ok(f"assignment/{ASSIGNMENT}/release_feedback", site.instructor)
    r = hub.formgrader("GET", f"submissions/{ASSIGNMENT}", site.instructor)
    scores = {s["student"]: (s["score"], s["max_score"]) for s in r.json()}
    feedback = site.course_dir / "grader" / "feedback"
    shutil.rmtree(blank, ignore_errors=True)
    return {"victim": victim, "attacker": attacker, "before": before, "log": log, "scores": scores,
            "collected": collected, "forged": forged.name, "own": own[0].name,
            "feedback": {u: _page_text((feedback / u / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text())
                         for u in term["learners"].values()}}


def _page_text(page: str) -> str:
    """What a reader sees of a feedback page: its text without tags (highlighting splits code into spans)."""
    return html_text.unescape(re.sub(r"<[^>]+>", "", page))


def test_a_folder_under_another_learners_name_is_refused_and_the_victim_keeps_their_work(attack, term):
    victim = attack["victim"]
    assert attack["collected"].read_bytes() == attack["before"]["notebook"], "the victim's submission was replaced"
    assert attack["scores"][victim] == attack["before"]["scores"][victim]
    assert f"refused {attack['forged']}: the submission folder belongs to another account " \
           f"({attack['attacker']})" in attack["log"], attack["log"][-3000:]
    score, max_score = attack["scores"][victim]
    assert f"{score:g}" in attack["feedback"][victim]


def test_a_link_in_a_learners_own_submission_is_refused(attack, term):
    attacker, victim = attack["attacker"], attack["victim"]
    assert f"refused {attack['own']}: {ASSIGNMENT}.ipynb is a link" in attack["log"], attack["log"][-3000:]
    assert attack["scores"][attacker] == attack["before"]["scores"][attacker]  # their earlier, blank submission
    blank = HANDED_IN["learner2"].read_text()
    solved = json.loads(SOLVED.read_text())
    answers = ["".join(c["source"]) for c in solved["cells"]
               if c["metadata"].get("nbgrader", {}).get("solution") and c["cell_type"] == "code"]
    theirs = [line for a in answers for line in a.splitlines() if len(line) > 12 and json.dumps(line)[1:-1] not in blank]
    assert theirs, "no line of the solved answers to look for"
    assert not [line for line in theirs if line in attack["feedback"][attacker]], "the victim's work reached the attacker"
    assert attack["scores"][victim][0] > attack["scores"][attacker][0]


def test_the_hub_stops_cleanly_on_sigterm(hub, term):
    """What a service manager sends: the hub stops its servers and services and logs no traceback doing it.
    (Runs last: it stops the hub the other tests use.)"""
    start = len(hub.log.read_text(errors="replace"))
    local_hub.stop(hub.proc)
    shutdown = hub.log.read_text(errors="replace")[start:]
    assert hub.proc.returncode == 0, f"jupyterhub exited with {hub.proc.returncode} on SIGTERM: {shutdown[-3000:]}"
    assert "Traceback" not in shutdown and "Error" not in shutdown.replace("ConfigProxy", ""), shutdown[-3000:]

