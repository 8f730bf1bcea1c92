"""Every "Commit to a prediction" box comes before anything on the page that gives its answer away.

Read from the stored notebooks (no execution, so it is cheap). The rule, per prompt:

- its **answers** are the glue ids its Reveal dropdown prints in bold (the reveal's headline numbers), or,
  where the reveal has no bold number, every glue id in the reveal that the prompt itself does not state;
- no **prose** before the prompt may paste an answer id (``{glue:text}`id```, ``{glue:}`id```, ...);
- no **code cell** before the prompt whose output reaches the page (not tagged ``remove-cell`` or
  ``remove-output``) may display an answer: a ``glue`` call there must pass ``display=False``; text it draws
  or prints (titles, labels, annotations, ``print``, ``Markdown``/``HTML``) may not interpolate an expression
  that carries an answer, nor name an answer id; and it may not pass such an expression to a
  ``stage5.plots`` helper that writes numbers into its figure.

An expression *carries* answer ``A`` when it is a variable, attribute or item (``static.steps``,
``sweep[b]``) inside the value glued as ``A``. ALL_CAPS names are the chapters' stated inputs (a prompt
length, a batch) and never count as carriers. What this cannot see: the same number recomputed by a
different expression (a table that calls the cost model again). Reviewers still read for that.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(p.stem for p in (ROOT / "book").glob("[0-9][0-9]_*.ipynb"))

PROMPT = re.compile(r":::\{admonition\} Commit to a prediction\n(.*?)\n:::", re.S)
REVEAL = re.compile(r":::\{dropdown\} Reveal[^\n]*\n(.*?)\n:::", re.S)
GLUE_REF = re.compile(r"\{glue(?::\w+)?\}`([\w.:-]+?)(?::[^`]*)?`")
BOLD = re.compile(r"\*\*(.+?)\*\*", re.S)
# Calls whose string arguments reach the page as text.
TEXT_CALLS = {"set_title", "suptitle", "title", "text", "annotate", "set_xlabel", "set_ylabel", "legend",
              "print", "display", "Markdown", "HTML", "barh", "bar", "plot", "loglog", "semilogx", "semilogy"}
HIDDEN = {"remove-cell", "remove-output"}


@dataclass
class Prompt:
    cell: int
    offset: int
    text: str
    reveal: str
    end: int = 0  # where the prompt's admonition ends in its cell
    reveal_cell: int = 0
    reveal_offset: int = 0  # where the Reveal dropdown starts in its cell


def _cells(name: str) -> list[dict]:
    return json.loads((ROOT / "book" / f"{name}.ipynb").read_text())["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _prompts(cells: list[dict]) -> list[Prompt]:
    """Each prompt with the first Reveal dropdown after it (in the same or a later markdown cell)."""
    md = [(i, _source(c)) for i, c in enumerate(cells) if c["cell_type"] == "markdown"]
    found = []
    for i, text in md:
        for m in PROMPT.finditer(text):
            rest = [(i, m.end(), text[m.end():])] + [(j, 0, t) for j, t in md if j > i]
            hit = next(((j, base, r) for j, base, chunk in rest for r in [REVEAL.search(chunk)] if r), None)
            assert hit is not None, f"cell {i}: a prediction prompt without a Reveal dropdown after it"
            j, base, r = hit
            found.append(Prompt(i, m.start(), m.group(1), r.group(1), m.end(), j, base + r.start()))
    return found


def _answers(p: Prompt) -> set[str]:
    bold = {g for b in BOLD.findall(p.reveal) for g in GLUE_REF.findall(b)}
    return bold or set(GLUE_REF.findall(p.reveal)) - set(GLUE_REF.findall(p.text))


def _id_pattern(node: ast.expr) -> re.Pattern | None:
    """The glue id a first argument names: a literal, or an f-string read as a pattern (loops glue many)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.compile(re.escape(node.value))
    if isinstance(node, ast.JoinedStr):
        parts = [re.escape(v.value) if isinstance(v, ast.Constant) else r"\w+" for v in node.values]
        return re.compile("".join(parts))
    return None


def _carried(expr: ast.AST) -> set[str]:
    """Variables, attributes and items inside an expression, as source text, minus called functions and
    ALL_CAPS inputs."""
    funcs = {ast.unparse(n.func) for n in ast.walk(expr) if isinstance(n, ast.Call)}
    out = set()
    for n in ast.walk(expr):
        if isinstance(n, (ast.Name, ast.Attribute, ast.Subscript)) and not isinstance(n.ctx, ast.Store):
            text = ast.unparse(n)
            root = text.split(".")[0].split("[")[0]
            if text in funcs or root.isupper() or any(f.startswith(text + ".") for f in funcs):
                continue
            out.add(text)
    return out


def _glues(tree: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "glue"]


def _carriers(cells: list[dict], answer: str) -> set[str]:
    carriers = set()
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        for call in _glues(ast.parse(_source(cell))):
            pattern = _id_pattern(call.args[0]) if call.args else None
            if pattern and pattern.fullmatch(answer) and len(call.args) > 1:
                carriers |= _carried(call.args[1])
    return carriers


def _number_writing_plot_helpers() -> set[str]:
    """stage5.plots functions that write numbers derived from their inputs into the figure (f-string text)."""
    from stage5 import plots

    writers = set()
    for name, fn in inspect.getmembers(plots, inspect.isfunction):
        if fn.__module__ != plots.__name__:
            continue
        tree = ast.parse(inspect.getsource(fn))
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            method = ast.unparse(call.func).split(".")[-1]
            if method in {"set_title", "suptitle", "annotate", "text"} and any(
                    isinstance(a, ast.JoinedStr) for a in call.args):
                writers.add(name)
    return writers


def _leaks_in_code(source: str, answers: set[str], carriers: dict[str, set[str]], writers: set[str]) -> list[str]:
    tree = ast.parse(source)
    # A function body runs only when called: the setup cell's stand-in for glue prints nothing on the page.
    tree.body = [s for s in tree.body if not isinstance(s, (ast.FunctionDef, ast.Try))
                 or not any(isinstance(n, ast.FunctionDef) and n.name == "glue" for n in ast.walk(s))]
    found = []
    for call in _glues(tree):
        shown = not any(k.arg == "display" and isinstance(k.value, ast.Constant) and k.value.value is False
                        for k in call.keywords)
        pattern = _id_pattern(call.args[0]) if call.args else None
        if shown and (pattern is None or any(pattern.fullmatch(a) for a in answers)):
            found.append(f"{ast.unparse(call)[:80]} displays its value (pass display=False)")
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        func = ast.unparse(call.func)
        short = func.split(".")[-1]
        args = [*call.args, *(k.value for k in call.keywords)]
        if short in writers:  # a stage5.plots helper that titles its figure from its inputs
            used = set().union(*(_carried(a) for a in args)) if args else set()
        elif short in TEXT_CALLS:
            texts = [n for a in args for n in ast.walk(a) if isinstance(n, ast.JoinedStr)]
            texts += [n for a in args for n in ast.walk(a)
                      if isinstance(n, ast.Call) and ast.unparse(n.func).endswith(".format")]
            used = set().union(*(_carried(t) for t in texts)) if texts else set()
            named = {a for t in args for n in ast.walk(t) if isinstance(n, ast.Constant)
                     for a in answers if n.value == a}
            found += [f"{func}(...) names the answer {a!r}" for a in named]
        else:
            continue
        for a in answers:
            hit = used & carriers[a]
            if hit:
                found.append(f"{func}(...) writes {sorted(hit)}, which carries the answer {a!r}")
    return found


@pytest.mark.parametrize("name", CHAPTERS)
def test_no_answer_before_its_prediction_prompt(name):
    cells = _cells(name)
    writers = _number_writing_plot_helpers()
    problems = []
    for prompt in _prompts(cells):
        answers = _answers(prompt)
        assert answers, f"{name}: the reveal after cell {prompt.cell} glues no number; bold its answer"
        carriers = {a: _carriers(cells, a) for a in answers}
        head = f"{name}, prompt in cell {prompt.cell} ({prompt.text.splitlines()[-1][:60]!r})"
        for i, cell in enumerate(cells[:prompt.cell + 1]):
            text = _source(cell)
            if cell["cell_type"] == "markdown":
                before = text[:prompt.offset] if i == prompt.cell else text
                shown = set(GLUE_REF.findall(before)) & answers
                problems += [f"{head}: prose in cell {i} already shows {a!r}" for a in sorted(shown)]
            elif cell["cell_type"] == "code" and not HIDDEN & set(cell.get("metadata", {}).get("tags", [])):
                problems += [f"{head}: code cell {i}: {p}" for p in _leaks_in_code(text, answers, carriers,
                                                                                    writers)]
    assert not problems, "\n".join(problems)


def test_the_rule_catches_a_title_that_prints_the_answer():
    """The checker itself: a figure title that interpolates the glued answer is found; a given is not."""
    answers = {"static_steps"}
    carriers = {"static_steps": _carried(ast.parse("float(static.steps)").body[0].value)}
    leak = 'ax.set_title(f"static: {static.steps} steps")'
    fine = 'ax.set_title(f"the same {N_REQ} requests")'
    assert _leaks_in_code(leak, answers, carriers, set())
    assert not _leaks_in_code(fine, answers, carriers, set())
    assert _leaks_in_code('glue("static_steps", static.steps)', answers, carriers, set())
    assert _leaks_in_code("slot_timeline(static.trace, 8, steps=static.steps)", answers, carriers,
                          {"slot_timeline"})


# ------------------------------------------------------------------ between a prompt and its reveal
#
# The reader meets a prompt, then its collapsed Reveal. Whatever renders in between is read before the
# reader has committed: a figure, a table, a printed or displayed glued value. So nothing may render there.
# A figure or table that answers the prompt goes inside the Reveal (glued, ``{glue:figure}``) or after it; one
# that does not answer it (a given) belongs before the prompt. The check reads what each code cell renders:
# from its stored outputs when it has any (an executed notebook, e.g. the book build's
# ``_build/jupyter_execute``), otherwise from its source.

GLUE_HIDDEN = "application/papermill.record/"  # myst-nb's mime prefix for a value glued with display=False
# Calls whose value IPython does not print when they end a cell (they return None).
SILENT_LAST = {"tight_layout", "close", "glue", "print", "display", "subplots_adjust", "savefig", "grid",
               "use_course_threads", "set_num_threads", "seed", "manual_seed"}


def _visible_outputs(cell: dict) -> list[str]:
    """What an executed code cell's stored outputs put on the page, one short description each."""
    shown = []
    for out in cell.get("outputs", []):
        kind = out.get("output_type")
        if kind == "stream":
            shown.append(f"printed text {out.get('text', '')[:40]!r}")
        elif kind == "error":
            shown.append(f"an error ({out.get('ename')})")
        elif kind in ("display_data", "execute_result"):
            mimes = [m for m in out.get("data", {}) if not m.startswith(GLUE_HIDDEN)]
            if mimes:
                shown.append("a figure" if any(m.startswith("image/") for m in mimes) else f"a display ({mimes[0]})")
    return shown


def _renders_from_source(source: str) -> list[str]:
    """What a code cell will put on the page when it runs, read from its source (outputs cleared in git)."""
    tree = ast.parse(source)
    tree.body = [s for s in tree.body if not isinstance(s, (ast.FunctionDef, ast.Try))
                 or not any(isinstance(n, ast.FunctionDef) and n.name == "glue" for n in ast.walk(s))]
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    names = [ast.unparse(c.func) for c in calls]
    shown = []
    # matplotlib's inline backend shows every figure still open when the cell ends.
    if any(n.startswith("plt.") and n != "plt.close" for n in names) and "plt.close" not in names:
        shown.append("a figure (open when the cell ends)")
    for call, name in zip(calls, names, strict=True):
        short = name.split(".")[-1]
        if short in ("print", "display"):
            shown.append(f"{name}(...)")
        elif short == "glue" and not any(k.arg == "display" and isinstance(k.value, ast.Constant)
                                         and k.value.value is False for k in call.keywords):
            shown.append(f"{ast.unparse(call)[:60]} (displays its value)")
    last = tree.body[-1] if tree.body else None
    if isinstance(last, ast.Expr) and not source.rstrip().endswith(";"):
        value = last.value
        silent = isinstance(value, ast.Call) and ast.unparse(value.func).split(".")[-1] in SILENT_LAST
        if not silent and not isinstance(value, ast.Constant):
            shown.append(f"the value of its last line ({ast.unparse(value)[:50]})")
    return shown


def _renders(cell: dict) -> list[str]:
    if cell["cell_type"] != "code" or HIDDEN & set(cell.get("metadata", {}).get("tags", [])):
        return []
    if cell.get("outputs"):
        return _visible_outputs(cell)
    return _renders_from_source(_source(cell))


def _between_problems(cells: list[dict], prompt: Prompt, answers: set[str]) -> list[str]:
    """Everything that renders after the prompt and before its Reveal."""
    problems = []
    for i in range(prompt.cell, prompt.reveal_cell + 1):
        cell = cells[i]
        text = _source(cell)
        if cell["cell_type"] == "markdown":
            start = prompt.end if i == prompt.cell else 0
            stop = prompt.reveal_offset if i == prompt.reveal_cell else len(text)
            between = text[start:stop]
            shown = set(GLUE_REF.findall(between)) & answers
            problems += [f"prose in cell {i} shows the answer {a!r}" for a in sorted(shown)]
            if re.search(r"\{glue:(figure|any|md|math)\}|\{glue\}", between):
                problems.append(f"cell {i} pastes a glued figure or table before the reveal")
        elif prompt.cell < i < prompt.reveal_cell:
            problems += [f"code cell {i} renders {what}" for what in _renders(cell)]
    return problems


def _chapter_between_problems(cells: list[dict], name: str) -> list[str]:
    problems = []
    for prompt in _prompts(cells):
        head = f"{name}, prompt in cell {prompt.cell} ({prompt.text.splitlines()[-1][:60]!r})"
        problems += [f"{head}: {p}" for p in _between_problems(cells, prompt, _answers(prompt))]
    return problems


@pytest.mark.parametrize("name", CHAPTERS)
def test_nothing_renders_between_a_prompt_and_its_reveal(name):
    problems = _chapter_between_problems(_cells(name), name)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", CHAPTERS)
def test_executed_chapter_renders_nothing_between_a_prompt_and_its_reveal(name, built_book):
    """The same rule on what actually rendered: the session's book build (tests/conftest.py) keeps the executed
    notebooks beside its html folder."""
    html, _ = built_book
    cells = json.loads((html.parent / "jupyter_execute" / "book" / f"{name}.ipynb").read_text())["cells"]
    problems = _chapter_between_problems(cells, name)
    assert not problems, "\n".join(problems)


def _md(text: str) -> dict:
    return {"cell_type": "markdown", "source": [text], "metadata": {}}


def _code(text: str, tags=(), outputs=None) -> dict:
    cell = {"cell_type": "code", "source": [text], "metadata": {"tags": list(tags)}}
    if outputs is not None:
        cell["outputs"] = outputs
    return cell


PROMPT_MD = ":::{admonition} Commit to a prediction\n:class: tip\nHow many steps?\n:::\n"
REVEAL_MD = ":::{dropdown} Reveal: steps\n**{glue:text}`steps:.0f`** steps.\n:::\n"


def test_the_between_rule_catches_a_figure_a_table_and_a_displayed_value():
    """The checker itself, on small notebooks: each way of showing something before the reveal is found, and
    the same things after the reveal, hidden, glued quietly or closed, are not."""
    def problems(*cells):
        return _chapter_between_problems(list(cells), "t")

    figure = "fig, ax = plt.subplots()\nax.plot(x, y)\nfig.tight_layout()"
    assert problems(_md(PROMPT_MD), _code(figure), _md(REVEAL_MD))
    assert problems(_md(PROMPT_MD), _code('Markdown("| a |\\n|---|\\n| 1 |")'), _md(REVEAL_MD))
    assert problems(_md(PROMPT_MD), _code("glue('x', 3.0)"), _md(REVEAL_MD))
    assert problems(_md(PROMPT_MD), _code("print(run.steps)"), _md(REVEAL_MD))
    assert problems(_md(PROMPT_MD + "It took {glue:text}`steps:.0f` steps.\n"), _md(REVEAL_MD))
    assert problems(_md(PROMPT_MD), _md("```{glue:figure} fig_steps\n```\n" + REVEAL_MD))
    # An executed cell is judged by what it printed or drew, not by its source.
    png = {"output_type": "display_data", "data": {"image/png": "..."}, "metadata": {}}
    assert problems(_md(PROMPT_MD), _code("x = 1", outputs=[png]), _md(REVEAL_MD))
    quiet = {"output_type": "display_data", "data": {GLUE_HIDDEN + "image/png": "..."}, "metadata": {}}
    # Not leaks: after the reveal; hidden cells; quiet glue; a closed figure glued into the reveal.
    assert not problems(_md(PROMPT_MD + "\n" + REVEAL_MD), _code(figure))
    assert not problems(_md(PROMPT_MD), _code(figure, tags=["remove-output"]), _md(REVEAL_MD))
    assert not problems(_md(PROMPT_MD), _code("glue('x', 3.0, display=False)\nfig.tight_layout()"), _md(REVEAL_MD))
    assert not problems(_md(PROMPT_MD), _code(figure + "\nglue('fig_steps', fig, display=False)\nplt.close(fig)"),
                        _md(REVEAL_MD.replace(":::\n", "```{glue:figure} fig_steps\n```\n:::\n")))
    assert not problems(_md(PROMPT_MD), _code("x = 1", outputs=[quiet]), _md(REVEAL_MD))


# ------------------------------------------------------------------ one experiment, one chapter
#
# A measurement a chapter asks the reader to predict is answered once. A later chapter refers back to it
# rather than timing the same experiment again (a reader who sees 5.5x in one chapter and 5.4x in the next
# for the same run learns only that the number moves). The entry points that run a chapter's measurement:
MEASUREMENTS = ("measure_for_chapter", "chapter_sweep", "measure_spec_collapse", "measure_memory_share")


@pytest.mark.parametrize("entry", MEASUREMENTS)
def test_each_measurement_is_run_by_one_chapter_at_most(entry):
    callers = [name for name in CHAPTERS
               if any(c["cell_type"] == "code" and any(isinstance(n, ast.Call) and ast.unparse(n.func).split(".")[-1]
                                                       == entry for n in ast.walk(ast.parse(_source(c))))
                      for c in _cells(name))]
    assert len(callers) <= 1, f"{entry} is run by {callers}: measure once, and refer back from later chapters"
