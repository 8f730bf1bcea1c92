"""The one setting (course.toml) and the release built from it: every generated file is up to date, the setup
cell pins the release and fails cleanly, and the offline steps of RELEASING.md work (build the wheel and sdist,
install the wheel into a fresh environment without network, use it there without torch)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import sync_settings as sync  # noqa: E402

SETTINGS = sync.load()


# ------------------------------------------------------------------------------------------ generated files
def test_every_generated_file_matches_course_toml():
    stale = [str(p.relative_to(ROOT)) for p, text in sync.planned(SETTINGS).items()
             if not p.exists() or p.read_text() != text]
    stale += [str(p.relative_to(ROOT)) for p in sync.stale_releases(SETTINGS)]
    assert not stale, f"out of date with course.toml: {stale}; run `make sync`"


def test_every_notebook_starts_with_the_pinned_install():
    notebooks = [*sync.notebook_paths(), *ROOT.glob("exercises/*/*.ipynb")]
    assert len(notebooks) >= 18
    for path in notebooks:
        cell = next(c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
        source = "".join(cell["source"])
        assert source.startswith(sync.setup_block(SETTINGS)), path
        assert f'STAGE5_WHEEL = "{SETTINGS.wheel_url}"' in source, path
        assert "git+" not in source, f"{path}: installs a commit, not the release"


def test_the_release_pins_a_tagged_wheel_of_this_version():
    import stage5

    assert stage5.__version__ == SETTINGS.version
    assert SETTINGS.wheel_url == (f"{SETTINGS.repo_url}/releases/download/v{SETTINGS.version}/"
                                  f"stage5-{SETTINGS.version}-py3-none-any.whl")


def test_only_notebooks_that_run_torch_install_it():
    engine = {p.stem for p in sync.notebook_paths() if sync.needs_torch(json.loads(p.read_text()))}
    assert {"04_batching", "05_paged_attention", "ex02"} <= engine
    assert not {"01_two_phases", "03_kv_cache", "09_cost_model", "10_simulator", "ex01"} & engine
    block = sync.engine_block()
    assert "--index-url" in block and sync.TORCH_CPU_INDEX in block  # never the default (CUDA) build


def _glue_without_myst_nb():
    """The generated glue fallback run as on Colab: importing myst_nb fails."""
    import builtins

    real_import = builtins.__import__

    def no_myst(name, *args, **kwargs):
        if name.split(".")[0] == "myst_nb":
            raise ImportError("No module named 'myst_nb'")
        return real_import(name, *args, **kwargs)

    scope = {"__builtins__": {**vars(builtins), "__import__": no_myst}}
    exec(sync.glue_block(), scope)  # noqa: S102  (the block the script writes into every glueing notebook)
    return scope


def test_outside_the_book_a_value_glued_with_display_false_prints_nothing(capsys):
    scope = _glue_without_myst_nb()
    scope["glue"]("answer_pct", 42.5, display=False)
    scope["glue"]("answer_word", "disaggregated", display=False)
    assert capsys.readouterr().out == ""  # a prediction box further down is not answered before its reveal
    assert scope["GLUED"] == {"answer_pct": 42.5, "answer_word": "disaggregated"}
    scope["glue"]("shown", 1234.5)
    assert capsys.readouterr().out == "shown = 1,234\n"


def test_every_glueing_notebook_carries_the_generated_fallback_and_no_hand_copy():
    glueing = [p for p in sync.notebook_paths() if sync.needs_glue(json.loads(p.read_text()))]
    assert {"01_two_phases", "14_disaggregation", "instructors"} <= {p.stem for p in glueing}
    for path in glueing:
        source = "".join(next(c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")["source"])
        assert sync.glue_block() in source, path
        assert source.count("def glue(") == 1, f"{path}: a second, hand-written glue fallback"


def test_launch_settings_in_config_come_from_course_toml():
    yaml = pytest.importorskip("yaml")
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert cfg["repository"]["url"] == (SETTINGS.repo_url if SETTINGS.published else "")
    assert cfg["repository"]["branch"] == SETTINGS.branch
    assert cfg["launch_buttons"]["jupyterhub_url"] == SETTINGS.jupyterhub_url
    assert "example.org" not in (ROOT / "_config.yml").read_text()


def test_an_unpublished_repository_gets_no_button_and_no_link():
    """Until course.toml says the repository is published, its address (and Colab's, Binder's) must not reach
    the book's configuration or the exercises page: every such link would be dead. The page says how to run
    the notebooks locally instead."""
    yaml = pytest.importorskip("yaml")
    draft = sync.Settings(SETTINGS.repo_url, "main", "2.3.4", "", published=False)
    cfg = yaml.safe_load(sync.render_config((ROOT / "_config.yml").read_text(), draft))
    buttons = cfg["launch_buttons"]
    assert cfg["repository"]["url"] == "" and not any(buttons[k] for k in ("colab_url", "binderhub_url",
                                                                           "jupyterhub_url"))
    assert cfg["html"]["use_repository_button"] is False and cfg["html"]["use_issues_button"] is False
    page = sync.render_exercises_page(draft)
    for address in (SETTINGS.repo_url, SETTINGS.owner_repo, "colab.research", "mybinder"):
        assert address not in page
    assert "make lab" in page and "my-work/" in page and page.count("{download}") == len(sync.ASSIGNMENTS)
    if not SETTINGS.published:  # and what is committed now says the same
        assert SETTINGS.repo_url not in (ROOT / "_config.yml").read_text()
        assert SETTINGS.owner_repo not in (ROOT / "book" / "exercises.md").read_text()
    published = sync.Settings(SETTINGS.repo_url, "main", "2.3.4", "", published=True)
    cfg = yaml.safe_load(sync.render_config((ROOT / "_config.yml").read_text(), published))
    assert cfg["repository"]["url"] == SETTINGS.repo_url and cfg["html"]["use_repository_button"] is True
    assert cfg["launch_buttons"]["colab_url"] == sync.COLAB and cfg["launch_buttons"]["binderhub_url"] == sync.BINDER


@pytest.mark.parametrize("published, hub, words", [
    ('"yes"', "", "neither true"),
    ("false", "https://hub.uni.edu", "set published = true"),
])
def test_bad_publication_settings_are_refused(tmp_path, published, hub, words):
    text = (ROOT / "course.toml").read_text()
    text = re.sub(r"^published = \S+", f"published = {published}", text, count=1, flags=re.M)
    text = re.sub(r'^jupyterhub_url = "[^"]*"', f'jupyterhub_url = "{hub}"', text, count=1, flags=re.M)
    (tmp_path / "course.toml").write_text(text)
    with pytest.raises(ValueError, match=re.escape(words)):
        sync.load(tmp_path / "course.toml")


def test_changing_the_setting_changes_every_address(tmp_path):
    other = sync.Settings("https://github.com/someone/course", "main", "2.3.4", "https://hub.uni.edu")
    config = sync.render_config((ROOT / "_config.yml").read_text(), other)
    assert "url: https://github.com/someone/course" in config and 'jupyterhub_url: "https://hub.uni.edu"' in config
    assert 'release 2.3.4' in sync.setup_block(other)
    assert "someone/course/releases/download/v2.3.4/stage5-2.3.4-py3-none-any.whl" in sync.setup_block(other)
    page = sync.render_exercises_page(other)
    assert page.count("blob/v2.3.4/exercises/") == len(sync.ASSIGNMENTS)
    # regenerating over an old block replaces it rather than stacking a second one
    nb = json.loads((ROOT / "solutions" / "ex01" / "ex01.ipynb").read_text())
    again = sync.with_setup(sync.with_setup(nb, other, False), SETTINGS, False)
    assert again == nb


@pytest.mark.parametrize("key, value, words", [
    ("url", "https://gitlab.com/a/b", "https://github.com/OWNER/REPO"),
    ("version", "latest", "MAJOR.MINOR.PATCH"),
    ("jupyterhub_url", "hub.example.org", "https://"),
])
def test_bad_settings_are_refused_with_what_is_accepted(tmp_path, key, value, words):
    text = (ROOT / "course.toml").read_text()
    text = re.sub(rf'^{key} = "[^"]*"', f'{key} = "{value}"', text, count=1, flags=re.M)
    (tmp_path / "course.toml").write_text(text)
    with pytest.raises(ValueError, match=re.escape(words)):
        sync.load(tmp_path / "course.toml")


# ------------------------------------------------------------------------------------------ a failed install
FAILING_SESSION = """
import importlib.util
from IPython.core.interactiveshell import InteractiveShell

real = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name == "stage5" else real(name, *a)  # as on a fresh Colab
shell = InteractiveShell.instance()
first = shell.run_cell(open(CELL).read())
print("---")
later = shell.run_cell("from stage5 import cost\\nprint(cost)")
print("---")
print(type(first.error_in_exec).__name__, type(later.error_in_exec).__name__)
"""


def test_a_failed_install_prints_one_line_and_stops_every_later_cell(tmp_path):
    """What a learner sees when the release cannot be fetched: one line saying why and what to do, then the
    same line from each later cell (no CalledProcessError traceback, no NameError)."""
    missing = tmp_path / "no-such-folder" / SETTINGS.wheel_name
    cell = sync.setup_block(SETTINGS).replace(SETTINGS.wheel_url, missing.as_uri())
    (tmp_path / "cell.py").write_text(cell)
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": ""}
    proc = subprocess.run([sys.executable, "-c", f"CELL = {str(tmp_path / 'cell.py')!r}\n" + FAILING_SESSION],
                          capture_output=True, text=True, timeout=120, env=env)
    first, later, kinds = proc.stdout.strip().split("---\n")
    assert kinds.strip() == "Stage5SetupError Stage5SetupError", proc.stdout + proc.stderr
    assert first.splitlines()[0].startswith(f"installing stage5 {SETTINGS.version} and its dependencies")
    first = "\n".join(first.splitlines()[1:])  # the line that says the install started, then the failure
    for shown in (first, later):
        lines = [line for line in shown.splitlines() if line.strip()]
        assert len(lines) == 1, shown
        assert lines[0].startswith(f"Stage5SetupError: could not install stage5 {SETTINGS.version} (")
        assert "restart the kernel and run this cell again" in lines[0]
    assert "Traceback" not in proc.stdout and "NameError" not in proc.stdout


def test_a_long_install_says_it_is_still_running(capsys):
    """The setup cell's pip run prints a line every 20 s while it lasts (torch's CPU build off Colab took 130 s of
    silence), and the torch notebooks say what to expect, not Colab's 15 s."""
    import subprocess as real
    import types

    ns: dict = {"__name__": "setup_cell"}
    exec(sync.setup_block(SETTINGS).replace('if importlib.util.find_spec("stage5") is None:', "if False:"), ns)

    class SlowPip:  # a pip that has not finished at the first two 20 s waits, then succeeds
        args, returncode, waits = ["pip"], 0, []

        def __init__(self, *a, **kw):
            pass

        def communicate(self, timeout=None):
            SlowPip.waits.append(timeout)
            if len(SlowPip.waits) <= 2:
                raise real.TimeoutExpired("pip", timeout)
            return "", ""

    ns["subprocess"] = types.SimpleNamespace(Popen=SlowPip, PIPE=real.PIPE, TimeoutExpired=real.TimeoutExpired,
                                             CompletedProcess=real.CompletedProcess)
    ns["stage5_pip_install"]("torch (CPU build)", "torch", expect="about 200 MB to download: a minute or more")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "installing torch (CPU build) and its dependencies (about 200 MB to download: a minute or more) ..."
    assert [line.split("(")[0] for line in lines[1:3]] == ["  ... still installing torch "] * 2, lines
    assert lines[3].startswith("installed torch (CPU build) in") and SlowPip.waits == [20, 20, 20]
    assert 'expect="about 200 MB to download: a minute or more"' in sync.engine_block()


# ------------------------------------------------------------------------------------------ the release steps
@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """RELEASING.md's build step (`make dist`) on a copy of the tracked files, offline."""
    pytest.importorskip("build", reason="the `build` package (requirements.txt) builds the release")
    src = tmp_path_factory.mktemp("src")
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).write_bytes((ROOT / name).read_bytes())
    out = tmp_path_factory.mktemp("dist")
    env = {**os.environ, "PIP_NO_INDEX": "1"}
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(src)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not (src / "build").exists(), "the build left a build/ folder in the source tree"
    return out


def test_build_makes_the_wheel_the_setup_cells_name_and_an_sdist(dist):
    names = sorted(p.name for p in dist.iterdir())
    assert names == [SETTINGS.wheel_name, f"stage5-{SETTINGS.version}.tar.gz"]
    with zipfile.ZipFile(dist / SETTINGS.wheel_name) as wheel:
        files = wheel.namelist()
        meta = wheel.read(f"stage5-{SETTINGS.version}.dist-info/METADATA").decode()
    for data in ("stage5/configs/", "stage5/checkpoints/", "stage5/data/", "stage5/engine/engine.py"):
        assert any(f.startswith(data) for f in files), f"{data} is missing from the wheel"
    assert not [f for f in files if f.startswith(("tests/", "book/", "solutions/", "grader/"))]
    requires = [line for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    torch = [line for line in requires if "torch" in line]
    assert torch and all('extra == "engine"' in line for line in torch), requires


def test_the_wheel_installs_offline_into_a_fresh_venv_and_works_without_torch(dist, tmp_path):
    """A fresh environment with no network and no torch: the cost model, the CLI and the simulator work, and
    the engine says what to install."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet",
                           "--target", str(site), str(dist / SETTINGS.wheel_name)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # The wheel's dependencies, from this environment but without torch: links to their top-level packages.
    deps = tmp_path / "deps"
    deps.mkdir()
    for top in _import_closure(["numpy", "matplotlib"]):
        (deps / top.name).symlink_to(top)
    (site / "course_deps.pth").write_text(str(deps) + "\n")
    script = textwrap.dedent("""
        import importlib.util, json, subprocess, sys
        assert importlib.util.find_spec("torch") is None, "torch leaked into the torch-free venv"
        import stage5
        from stage5 import cost, figures
        from stage5.simulator import SimInputs, simulate
        assert stage5.__file__.startswith(sys.prefix), stage5.__file__
        assert simulate(SimInputs()).ok
        out = subprocess.run([sys.executable, "-m", "stage5", "deploy", "--model", "llama3-8b", "--gpu", "H100",
                              "--gpus", "1", "--context", "1024", "--batch", "8"], capture_output=True, text=True)
        assert out.returncode == 0 and "TPOT" in out.stdout, out.stdout + out.stderr
        try:
            import stage5.engine
        except ImportError as err:
            assert "download.pytorch.org/whl/cpu" in str(err), err
        else:
            raise AssertionError("stage5.engine imported without torch")
        print("ok")
    """)
    run = subprocess.run([str(py), "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env={"PATH": os.environ.get("PATH", ""), "MPLBACKEND": "Agg", "HOME": str(tmp_path)})
    assert run.stdout.strip() == "ok", run.stdout + run.stderr


def _import_closure(names: list[str]) -> set[Path]:
    """Top-level import folders and modules of the named distributions and everything they require."""
    from importlib import metadata

    from packaging.requirements import Requirement

    seen: set[str] = set()
    tops: set[Path] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name.lower() in seen:
            continue
        seen.add(name.lower())
        dist = metadata.distribution(name)
        for f in dist.files or []:
            top = f.parts[0]
            if f.parts[0].endswith((".dist-info", ".data")) or top == "..":
                continue
            tops.add(Path(dist.locate_file(top)).resolve())
        for req in dist.requires or []:
            r = Requirement(req)
            if r.marker is None or r.marker.evaluate({"extra": ""}):
                todo.append(r.name)
    assert not any(t.name == "torch" for t in tops)
    return {t for t in tops if t.exists()}


def test_build_leftovers_are_ignored_by_git():
    """`pip wheel .` (setuptools in place) writes build/; `python -m build` writes dist/: neither shows in git."""
    proc = subprocess.run(["git", "check-ignore", "build/lib/x.py", "dist/x.whl", "stage5.egg-info/PKG-INFO"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.stdout.split() == ["build/lib/x.py", "dist/x.whl", "stage5.egg-info/PKG-INFO"]
