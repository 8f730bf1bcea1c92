"""The repository's own rules: clean notebooks, a table of contents that matches book/, ruff."""

import json
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SKIP = {".venv", "_build", ".ipynb_checkpoints", "grader", ".jupyter_cache"}


def _notebooks():
    return [p for p in ROOT.rglob("*.ipynb") if not SKIP & set(p.relative_to(ROOT).parts)]


def test_every_notebook_is_stored_without_outputs():
    dirty = []
    for path in _notebooks():
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count")):
                dirty.append(str(path.relative_to(ROOT)))
                break
    assert not dirty, f"notebooks stored with outputs (clear them): {dirty}"


def _toc_files(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("root", "file"):
                yield value
            else:
                yield from _toc_files(value)
    elif isinstance(node, list):
        for item in node:
            yield from _toc_files(item)


def _resolve(entry):
    for suffix in ("", ".md", ".ipynb"):
        if (ROOT / f"{entry}{suffix}").is_file():
            return ROOT / f"{entry}{suffix}"
    return None


def test_toc_names_only_existing_files_and_every_chapter():
    yaml = pytest.importorskip("yaml")
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    entries = list(_toc_files(toc))
    missing = [e for e in entries if _resolve(e) is None]
    assert not missing, f"_toc.yml names files that do not exist: {missing}"
    listed = {_resolve(e) for e in entries}
    chapters = {p for p in (ROOT / "book").glob("*") if p.suffix in (".md", ".ipynb")}
    assert not chapters - listed, f"chapters in book/ missing from _toc.yml: {sorted(chapters - listed)}"


def test_ruff_passes():
    ruff = shutil.which("ruff") or str(pathlib.Path(sys.executable).parent / "ruff")
    result = subprocess.run([ruff, "check", str(ROOT)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_requirements_pin_torch_and_the_book_toolchain():
    # requirements.txt (what make installs) includes requirements-book.txt (what the book build needs)
    req = (ROOT / "requirements.txt").read_text() + (ROOT / "requirements-book.txt").read_text()
    assert "-r requirements-book.txt" in req
    for pin in ("jupyter-book==1.0.4.post1", "nbgrader==0.9.6", "torch==2.13.0", "-e ."):
        assert pin in req
