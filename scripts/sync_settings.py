"""Write every file that names the course's repository, release or hub from ``course.toml``.

    python scripts/sync_settings.py          # rewrite what is out of date, list what changed
    python scripts/sync_settings.py --check  # change nothing; exit 1 and list what is out of date

It owns the setup block at the top of the first code cell of every notebook in ``book/`` and ``solutions/``
(the rest of that cell is left alone), ``repository.url`` and ``launch_buttons.jupyterhub_url`` in
``_config.yml``, ``__version__`` in ``stage5/__init__.py`` and the page ``book/exercises.md``. The released
notebooks in ``exercises/`` get their setup block from ``solutions/`` through nbgrader
(``grader/grade.py release``), so ``--check`` compares them but never writes them: ``make sync`` runs both.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = ROOT / "course.toml"
ASSIGNMENTS = ("ex01", "ex02", "ex03", "ex04", "clearing")  # in the order the book lists them
COLAB = "https://colab.research.google.com"
BINDER = "https://mybinder.org"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # PyTorch's own index of CPU-only builds
END = "# ---- end of the generated setup ----"
END_ENGINE = "# ---- end of the generated engine setup ----"
END_GLUE = "# ---- end of the generated glue ----"
# A notebook that touches the toy engine (or times torch) needs torch; the cost-model ones must not.
NEEDS_TORCH = re.compile(r"\btorch\b|stage5\.(engine|exercise_support|calibrate)\b")
# The generated blocks, whatever release or address they were generated for (so a change of either is found),
# and the hand-written setup every notebook had before this script existed (so an old copy is replaced).
GENERATED = re.compile(rf"\A# Setup, generated .*?{re.escape(END)}\n*(# The toy engine .*?{re.escape(END_ENGINE)}\n*)?"
                       rf"(# The book build .*?{re.escape(END_GLUE)}\n*)?", re.S)
# The glue fallback each book notebook once carried by hand (it printed values glued with display=False too).
LEGACY_GLUE = re.compile(r"try:\n    from myst_nb import glue  # the book build pastes glued values into the prose\n"
                         r"except ImportError:  # elsewhere, print them so the prose's numbers are visible\n"
                         r"    def glue\(name, value, display=True\):\n        print\([^\n]*\)\n*")
# A notebook that glues values into its prose (the generated fallback itself aside).
NEEDS_GLUE = re.compile(r"^\s*glue\(", re.M)
LEGACY = re.compile(r'\A# Setup\. .*?find_spec\("stage5"\) is None:\n[^\n]*\n\n*', re.S)


@dataclass(frozen=True)
class Settings:
    """What course.toml sets: where the repository lives, which release learners install, which hub."""

    repo_url: str
    branch: str
    version: str
    jupyterhub_url: str
    published: bool = True  # False: the repository is not public yet, so nothing links to it

    @property
    def owner_repo(self) -> str:
        return self.repo_url.removeprefix("https://github.com/")

    @property
    def tag(self) -> str:
        return f"v{self.version}"

    @property
    def wheel_name(self) -> str:
        return f"stage5-{self.version}-py3-none-any.whl"

    @property
    def wheel_url(self) -> str:
        return f"{self.repo_url}/releases/download/{self.tag}/{self.wheel_name}"

    def colab_url(self, path: str) -> str:
        return f"{COLAB}/github/{self.owner_repo}/blob/{self.tag}/{path}"

    def binder_url(self, path: str) -> str:
        return f"{BINDER}/v2/gh/{self.owner_repo}/{self.tag}?urlpath=lab/tree/{path}"


def load(path: Path = SETTINGS) -> Settings:
    """Read and check course.toml; a bad value is named with what is accepted."""
    data = tomllib.loads(path.read_text())
    published = data["repository"].get("published")
    if not isinstance(published, bool):
        raise ValueError(f"{path.name}: repository.published {published!r} is neither true (the repository and its "
                         "release are public: launch buttons and links on) nor false (no launch button, no link)")
    s = Settings(repo_url=data["repository"]["url"].rstrip("/"), branch=data["repository"]["branch"],
                 version=data["release"]["version"], jupyterhub_url=data["launch"]["jupyterhub_url"].rstrip("/"),
                 published=published)
    if not re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", s.repo_url):
        raise ValueError(f"{path.name}: repository.url {s.repo_url!r} is not https://github.com/OWNER/REPO "
                         "(Colab and Binder open notebooks from GitHub only)")
    if not re.fullmatch(r"\d+\.\d+\.\d+", s.version):
        raise ValueError(f"{path.name}: release.version {s.version!r} is not MAJOR.MINOR.PATCH, e.g. 0.2.0")
    if s.jupyterhub_url and not s.jupyterhub_url.startswith("https://"):
        raise ValueError(f"{path.name}: launch.jupyterhub_url {s.jupyterhub_url!r} is neither empty (no button) "
                         "nor an https:// address")
    if s.jupyterhub_url and not s.published:
        raise ValueError(f"{path.name}: launch.jupyterhub_url is set but repository.published is false (the hub "
                         "pulls each chapter from the repository): set published = true, or leave the hub empty")
    return s


# ------------------------------------------------------------------------------------------ setup cells
def setup_block(s: Settings) -> str:
    """The code every notebook starts with. It installs the pinned release only where stage5 is missing, and
    on failure stops the notebook with one line (IPython prints ``_render_traceback_`` instead of a traceback;
    an input transformer makes each later cell stop with the same line rather than a NameError)."""
    return f'''# Setup, generated from course.toml by scripts/sync_settings.py: edit those, not this block.
# Where the course package stage5 is installed (the book build, `make lab`, Binder) this only checks; elsewhere
# (Colab, a bare Jupyter) it first installs release {s.version}. If that fails you get one line saying why.
import importlib
import importlib.util
import subprocess
import sys

STAGE5_RELEASE = "{s.version}"
STAGE5_WHEEL = "{s.wheel_url}"


class Stage5SetupError(RuntimeError):
    def _render_traceback_(self):  # IPython prints this one line instead of a traceback
        return [f"Stage5SetupError: {{self}}"]


# Why pip failed, from its own words (old and new pip phrase them differently): the first pattern that matches wins.
STAGE5_PIP_CAUSES = [
    (r"Failed to resolve|Name or service not known|name resolution|NewConnectionError|Connection refused|"
     r"Network is unreachable|Failed to connect|Max retries exceeded|connection-failed",
     "no network: this runtime could not reach the download server"),
    (r"HTTP error 404|404 Client Error", "no such release: the download address answered 404 (not found)"),
    (r"No matching distribution found for (\\S+)|not a supported wheel|requires a different Python",
     "no matching wheel for this Python and platform"),
]


def stage5_pip_install(what, *args, expect="about 15 s on Colab"):
    """pip install quietly, with a line every 20 s while it runs; on failure stop this notebook with one line that
    says why and what to do."""
    import os as stage5_os  # named apart, so they never clash with the notebook's own imports
    import re as stage5_re
    import time as stage5_time

    # Jupyter kernels set FORCE_COLOR and CLICOLOR_FORCE, which make pip colour its errors: switch colour off.
    env = {{k: v for k, v in stage5_os.environ.items() if k not in ("FORCE_COLOR", "CLICOLOR_FORCE", "PY_COLORS")}}
    env.update(NO_COLOR="1", TERM="dumb")
    print(f"installing {{what}} and its dependencies ({{expect}}) ...", flush=True)
    start = stage5_time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "pip", "install", "-q", "--no-color", "--disable-pip-version-check",
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    while True:  # communicate() may be retried after a timeout without losing output
        try:
            out, err = proc.communicate(timeout=20)
            break
        except subprocess.TimeoutExpired:
            print(f"  ... still installing {{what}} ({{stage5_time.monotonic() - start:.0f}} s)", flush=True)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if done.returncode == 0:
        importlib.invalidate_caches()
        print(f"installed {{what}} in {{stage5_time.monotonic() - start:.0f}} s", flush=True)
        return
    text = stage5_re.sub(r"\\x1b\\[[0-9;?]*[A-Za-z]", "", done.stderr + done.stdout)
    lines = [line.strip(" ×╰─>") for line in text.splitlines() if line.strip(" ×╰─>")] or ["pip failed"]
    why = next((line for line in reversed(lines) if line.lower().startswith(("error", "×"))), lines[-1])
    for pattern, cause in STAGE5_PIP_CAUSES:
        found = stage5_re.search(pattern, text)
        if found:
            why = cause + (f" for {{found.group(1)}}" if found.groups() and found.group(1) else "")
            break
    error = Stage5SetupError(f"could not install {{what}} ({{why}}). Check that this runtime can reach the "
                             "internet and that the release exists, then restart the kernel and run this cell again.")
    try:
        from IPython import get_ipython
        shell = get_ipython()
    except ImportError:  # plain Python: the exception alone stops the script
        shell = None
    if shell is not None:  # each later cell stops with the same line instead of failing on a missing name
        shell.input_transformers_post.append(lambda _lines: [f"raise Stage5SetupError({{str(error)!r}})\\n"])
    raise error


if importlib.util.find_spec("stage5") is None:
    stage5_pip_install(f"stage5 {{STAGE5_RELEASE}}", f"stage5 @ {{STAGE5_WHEEL}}")
{END}'''


def engine_block() -> str:
    """Added after the setup block in notebooks that run torch: PyTorch's CPU build, never a CUDA download."""
    return f'''# The toy engine needs torch (Colab has it). Elsewhere this installs PyTorch's CPU build: no CUDA download.
if importlib.util.find_spec("torch") is None:
    stage5_pip_install("torch (CPU build)", "torch>=2.2", "--index-url", "{TORCH_CPU_INDEX}",
                       expect="about 200 MB to download: a minute or more")
{END_ENGINE}'''


def glue_block() -> str:
    """Added after the setup in notebooks that glue values into their prose. Outside the book build (Colab, a bare
    Jupyter) myst-nb is missing: a value glued for display is printed; one glued with ``display=False`` (an answer
    a prediction box asks for, a number the prose shows later) prints nothing and is kept in ``GLUED``."""
    return f'''# The book build pastes glued values into the prose (myst-nb). Elsewhere a value glued for display is printed,
# and one glued with display=False prints nothing (it may answer a prediction further down): it waits in GLUED.
GLUED = {{}}
try:
    from myst_nb import glue
except ImportError:
    def glue(name, value, display=True):
        GLUED[name] = value
        if display:
            print(f"{{name}} = {{value:,.4g}}" if isinstance(value, (int, float)) else f"{{name}} = {{value}}")
{END_GLUE}'''


def _code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def needs_torch(nb: dict) -> bool:
    return any(NEEDS_TORCH.search("".join(c["source"])) for c in _code_cells(nb))


def needs_glue(nb: dict) -> bool:
    cells = _code_cells(nb)
    if not cells:
        return False
    first = split_setup("".join(cells[0]["source"]))[1]
    return any(NEEDS_GLUE.search(text) for text in [first, *("".join(c["source"]) for c in cells[1:])])


def split_setup(source: str) -> tuple[str, str]:
    """(the generated or legacy setup at the top of a cell, the author's code after it)."""
    m = GENERATED.match(source) or LEGACY.match(source)
    return (m.group(0), source[m.end():]) if m else ("", source)


def expected_head(s: Settings, torch: bool, glue: bool = False) -> str:
    return "\n\n".join([setup_block(s), *([engine_block()] if torch else []), *([glue_block()] if glue else [])])


def with_setup(nb: dict, s: Settings, torch: bool) -> dict:
    """The notebook with its first code cell's setup replaced by the generated one (a new dict)."""
    nb = json.loads(json.dumps(nb))
    glue = needs_glue(nb)
    cell = _code_cells(nb)[0]
    _, rest = split_setup("".join(cell["source"]))
    if LEGACY_GLUE.search(rest):
        rest = LEGACY_GLUE.sub("", rest).rstrip("\n")
    text = expected_head(s, torch, glue) + ("\n\n" + rest.lstrip("\n") if rest.strip() else "")
    cell["source"] = text.splitlines(keepends=True)
    return nb


def first_cell_ok(nb: dict, s: Settings, torch: bool) -> bool:
    head, rest = split_setup("".join(_code_cells(nb)[0]["source"]))
    return head.rstrip("\n") == expected_head(s, torch, needs_glue(nb)) and not LEGACY_GLUE.search(rest)


def dump_notebook(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"  # nbformat's own layout, so diffs stay small


# ------------------------------------------------------------------------------------------ other files
def render_config(text: str, s: Settings) -> str:
    """_config.yml's repository, launch buttons and repository buttons from course.toml. Until the repository is
    published, every one of them is off and no address is written: a link to it would be dead."""
    hub = f'"{s.jupyterhub_url}"' if s.jupyterhub_url else '""'
    on = s.published
    for key, value in (("url", s.repo_url if on else '""'), ("branch", s.branch), ("jupyterhub_url", hub),
                       ("colab_url", COLAB if on else '""'), ("binderhub_url", BINDER if on else '""'),
                       ("use_repository_button", str(on).lower()), ("use_issues_button", str(on).lower())):
        text, n = re.subn(rf"^(  {key}: )\S*", lambda m, v=value: m.group(1) + v, text, count=1, flags=re.M)
        if n != 1:
            raise ValueError(f"_config.yml has no '  {key}:' line to set")
    return text


def render_init(text: str, s: Settings) -> str:
    text, n = re.subn(r'^__version__ = "[^"]*"', f'__version__ = "{s.version}"', text, count=1, flags=re.M)
    if n != 1:
        raise ValueError('stage5/__init__.py has no __version__ = "..." line to set')
    return text


def _title(nb: dict) -> str:
    first = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
    return "".join(first["source"]).splitlines()[0].lstrip("# ").strip()


def render_exercises_page(s: Settings) -> str:
    """book/exercises.md: each released exercise (exercises/, never solutions/) with its download link, and its
    Colab and Binder links once the repository is published (before that they would be dead)."""
    if s.published:
        intro = (f"Each exercise is a notebook you work in Colab, in Binder or in your own Jupyter. Its first cell "
                 f"installs the course package `stage5` (release {s.version}) when it is missing. The visible "
                 "tests tell you whether you are on track; hidden tests grade the notebook you hand in. Colab and "
                 f"Binder open the notebook as tagged for release {s.version} (`{s.tag}`); the download is the "
                 "same notebook as it stands in this book.")
        outro = ("Binder builds the course's environment (with PyTorch's CPU build) from the repository at that "
                 "tag, which takes a few minutes the first time. Colab keeps its own torch and widgets. Hand the "
                 "notebook in as your instructor asks.")
    else:
        intro = ("Each exercise is a notebook you run on your own machine. The course's repository and its "
                 "release are not published yet, so this page offers no Colab or Binder link and a notebook's "
                 "first cell cannot download the course package `stage5`: run the notebooks where `stage5` is "
                 "installed. The visible tests tell you whether you are on track; hidden tests grade the notebook "
                 "you hand in.")
        local = ("**Running them locally.** In a copy of the course's files, with Python 3.11, `make lab` "
                 "installs everything into `.venv` (a few minutes the first time, with a line for each step), "
                 "copies the released exercises once into `my-work/` and opens JupyterLab there: your answers "
                 "are saved in `my-work/`, never in the release. In a Jupyter of your own, install the package "
                 "first (`pip install -e .` in the course folder; exercises 2 and 4 also need PyTorch's CPU build), "
                 "then open a downloaded notebook.")
        intro = intro + "\n\n" + local
        outro = "Hand the notebook in as your instructor asks."
    lines = ["# Exercises", "", "<!-- generated from course.toml by scripts/sync_settings.py: edit those, "
             "not this page -->", ""]
    for paragraph in intro.split("\n\n"):
        lines += [textwrap.fill(paragraph, 110), ""]
    for name in ASSIGNMENTS:
        path = f"exercises/{name}/{name}.ipynb"
        nb = json.loads((ROOT / path).read_text())
        launch = [f"[Open in Colab]({s.colab_url(path)}) ·", f"[Open in Binder]({s.binder_url(path)}) ·"]
        lines += [f"## {_title(nb)}", "", *(launch if s.published else []),
                  f"{{download}}`Download {name}.ipynb <../{path}>`", ""]
    lines.append(textwrap.fill(outro, 110))
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ the plan
def notebook_paths() -> list[Path]:
    return sorted([*ROOT.glob("book/*.ipynb"), *ROOT.glob("solutions/*/*.ipynb")])


def planned(s: Settings) -> dict[Path, str]:
    """Every file this script writes, with the content it should have."""
    out: dict[Path, str] = {}
    for path in notebook_paths():
        nb = json.loads(path.read_text())
        out[path] = dump_notebook(with_setup(nb, s, needs_torch(nb)))
    out[ROOT / "_config.yml"] = render_config((ROOT / "_config.yml").read_text(), s)
    out[ROOT / "stage5" / "__init__.py"] = render_init((ROOT / "stage5" / "__init__.py").read_text(), s)
    out[ROOT / "book" / "exercises.md"] = render_exercises_page(s)
    return out


def stale_releases(s: Settings) -> list[Path]:
    """Released notebooks whose setup differs from their solution's generated one (nbgrader copies it)."""
    stale = []
    for name in ASSIGNMENTS:
        solution = json.loads((ROOT / "solutions" / name / f"{name}.ipynb").read_text())
        release = ROOT / "exercises" / name / f"{name}.ipynb"
        if not first_cell_ok(json.loads(release.read_text()), s, needs_torch(solution)):
            stale.append(release)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if anything is out of date")
    args = parser.parse_args(argv)
    s = load()
    changed = [p for p, text in planned(s).items() if not p.exists() or p.read_text() != text]
    rel = [str(p.relative_to(ROOT)) for p in changed]
    if args.check:
        releases = [str(p.relative_to(ROOT)) for p in stale_releases(s)]
        if rel or releases:
            print("out of date with course.toml: " + ", ".join(rel + releases) + "\nrun `make sync` "
                  "(scripts/sync_settings.py, then grader/grade.py release for each exercise)", file=sys.stderr)
            return 1
        return 0
    for path, text in planned(s).items():
        if path in changed:
            path.write_text(text)
    print("updated: " + (", ".join(rel) if rel else "nothing"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
