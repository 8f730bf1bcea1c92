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
``sweep[b]``) inside the value glued as ``A``, taken whole (``static.steps``, not ``static``). An item with a
computed index is any item (``runs[n]`` reads as ``runs[*]``), and a loop variable reads as an item of what it
loops over (``run`` in ``for name, run in runs.items()`` is ``runs[*]``), so a chart that draws
``runs[n].peak_running`` for every engine carries an answer glued from ``run.peak_running``. A call that draws
data (``bar``, ``plot``, ``scatter``...) shows whatever its arguments carry, not only the text it writes.
ALL_CAPS names are the chapters' stated inputs (a prompt length, a batch) and never count as carriers.

That reads one chapter's code. The same number can also reach the reader through another expression, or from an
earlier chapter: the executed book is checked for that below (``test_no_answer_is_shown_earlier_in_the_book``),
by value.
"""

from __future__ import annotations

import ast
import inspect
import json
import math
import re
from dataclasses import dataclass
from html.parser import HTMLParser
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
# Calls that draw their arguments' values: whatever those carry is on the page, as a bar, a point or a line.
DRAW_CALLS = {"plot", "bar", "barh", "scatter", "loglog", "semilogx", "semilogy", "step", "stairs", "fill_between",
              "fill_betweenx", "errorbar", "hist", "imshow", "pie", "stackplot", "axhline", "axvline", "hlines",
              "vlines", "annotate", "text"}
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


def _loop_aliases(tree: ast.AST) -> dict[str, str]:
    """What each loop variable of a cell stands for: an item of what it loops over (``run`` in ``for name, run in
    runs.items()`` is ``runs[*]``; ``x`` in ``for x, y in zip(xs, ys)`` is ``xs[*]``)."""
    def source(it: ast.expr) -> list[ast.expr | None]:
        """The iterables behind each element of an iteration's target (None where unknown)."""
        if isinstance(it, ast.Call):
            name = ast.unparse(it.func).split(".")[-1]
            if name == "items" and isinstance(it.func, ast.Attribute):
                return [None, it.func.value]
            if name == "values" and isinstance(it.func, ast.Attribute):
                return [it.func.value]
            if name == "zip":
                return list(it.args)
            if name == "enumerate" and it.args:
                return [None, it.args[0]]
            if name in ("list", "sorted", "reversed", "tuple") and it.args:
                return source(it.args[0])
            return [None]
        if isinstance(it, ast.Subscript) and isinstance(it.slice, ast.Slice):  # xs[::-1]
            return source(it.value)
        return [it]

    aliases = {}
    loops = [(n.target, n.iter) for n in ast.walk(tree) if isinstance(n, (ast.For, ast.comprehension))]
    for target, it in loops:
        names = target.elts if isinstance(target, ast.Tuple) else [target]
        srcs = source(it)
        if len(names) != len(srcs):
            srcs = [it] if len(names) == 1 else [None] * len(names)
        for name, src in zip(names, srcs, strict=True):
            if isinstance(name, ast.Name) and src is not None:
                aliases[name.id] = _normalised(src, {}) + "[*]"
    return aliases


def _normalised(node: ast.expr, aliases: dict[str, str]) -> str:
    """An expression's text with loop variables resolved and computed indices read as any item."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        return f"{_normalised(node.value, aliases)}.{node.attr}"
    if isinstance(node, ast.Subscript):
        index = ast.unparse(node.slice) if isinstance(node.slice, ast.Constant) else "*"
        return f"{_normalised(node.value, aliases)}[{index}]"
    return ast.unparse(node)


# Calls whose value is their argument's, converted or gathered: what the argument carries, they carry. Any other call
# computes a new value from its arguments: a glued answer carries its sources, but a figure that passes the same
# deployment to another cost-model function draws a different number.
PASS_THROUGH = {"float", "int", "round", "abs", "list", "tuple", "sorted", "reversed", "min", "max", "sum", "len",
                "np.asarray", "np.array", "np.round", "np.mean", "np.median", "statistics.mean", "statistics.median"}


def _carried(expr: ast.AST, aliases: dict[str, str] | None = None, sources: bool = True) -> set[str]:
    """Variables, attributes and items inside an expression, each taken whole (``a.b.c``, not ``a.b``), as
    normalised text (:func:`_normalised`), minus called functions and ALL_CAPS inputs. ``sources=False`` also
    leaves out the arguments of calls that compute a new value (not in :data:`PASS_THROUGH`): what a figure shows
    is its data, not the inputs the data was computed from."""
    aliases = aliases or {}
    funcs = {ast.unparse(n.func) for n in ast.walk(expr) if isinstance(n, ast.Call)}
    computed = set() if sources else {
        id(c) for n in ast.walk(expr) if isinstance(n, ast.Call) and ast.unparse(n.func) not in PASS_THROUGH
        for a in [*n.args, *(k.value for k in n.keywords)] for c in ast.walk(a)}
    found = [n for n in ast.walk(expr) if isinstance(n, (ast.Name, ast.Attribute, ast.Subscript))
             and not isinstance(n.ctx, ast.Store) and id(n) not in computed]
    inner = {id(c) for n in found for c in ast.walk(n) if c is not n
             and not (isinstance(n, ast.Subscript) and any(c is x for x in ast.walk(n.slice)))}
    out = set()
    for n in found:
        text = ast.unparse(n)
        root = text.split(".")[0].split("[")[0]
        if id(n) in inner or text in funcs or root.isupper() or any(f.startswith(text + ".") for f in funcs):
            continue
        out.add(_normalised(n, aliases))
    return out


def _glues(tree: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "glue"]


def _carriers(cells: list[dict], answer: str) -> set[str]:
    carriers = set()
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        tree = ast.parse(_source(cell))
        aliases = _loop_aliases(tree)
        for call in _glues(tree):
            pattern = _id_pattern(call.args[0]) if call.args else None
            if pattern and pattern.fullmatch(answer) and len(call.args) > 1:
                carriers |= _carried(call.args[1], aliases)
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
    aliases = _loop_aliases(tree)
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
        used = set()
        if short in writers or short in DRAW_CALLS:  # draws its inputs, or titles its figure from them
            used = set().union(*(_carried(a, aliases, sources=False) for a in args)) if args else set()
        if short in TEXT_CALLS:
            texts = [n for a in args for n in ast.walk(a) if isinstance(n, ast.JoinedStr)]
            texts += [n for a in args for n in ast.walk(a)
                      if isinstance(n, ast.Call) and ast.unparse(n.func).endswith(".format")]
            used |= set().union(*(_carried(t, aliases, sources=False) for t in texts)) if texts else set()
            named = {a for t in args for n in ast.walk(t) if isinstance(n, ast.Constant)
                     for a in answers if n.value == a}
            found += [f"{func}(...) names the answer {a!r}" for a in named]
        elif short not in writers and short not in DRAW_CALLS:
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


# ------------------------------------------------------------------ earlier in the book, by value
#
# A reader meets the book in its table of contents' order. An answer is given away just as surely by an earlier
# chapter that shows the same number under another name (chapter 2's worked example at "125 sequences" answers
# chapter 3's "how many fit"), or by a table an earlier cell printed, as by the prose right above the prompt. The
# executed book holds every glued value (``<chapter>.glue.json`` beside each executed notebook), so the check is by
# value: an answer may not equal a number displayed anywhere before its prompt. Two kinds of equality are not a
# giveaway, and are let through: a small whole number (under 10: a count of GPUs, heads or steps meets its twin by
# chance), and a number the prompt itself states (an answer the reader is meant to see equals a given, as "the
# batch that reaches the ridge" equals the ridge). Tables are read as printed text, so there the rule compares the
# answer as the reveal prints it, and only where that is distinctive (three significant digits, and at least 10).
TOC = ROOT / "_toc.yml"
GLUE_ROLE = re.compile(r"\{glue(?::\w+)?\}`([^`]+)`")
NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")
SMALL_COUNT = 10


def _book_order() -> list[str]:
    """Every page of the book, by name (``01_two_phases``), in the order a reader meets them."""
    import yaml

    toc = yaml.safe_load(TOC.read_text())
    files = [toc["root"], *(c["file"] for part in toc.get("parts", []) for c in part.get("chapters", []))]
    return [Path(f).name for f in files]


def _refs(text: str, doc: str) -> list[tuple[str, str, str]]:
    """(page the value comes from, glue id, format spec) of every glued value a piece of prose pastes."""
    out = []
    for body in GLUE_ROLE.findall(text):
        src = doc
        if "::" in body:
            src, body = body.split("::", 1)
            src = Path(src).stem
        gid, _, spec = body.partition(":")
        out.append((src, gid, spec))
    return out


def _glued_values(executed: Path, doc: str) -> dict[str, float]:
    """The numeric values a page glued, from the executed book's ``<page>.glue.json``."""
    path = executed / f"{doc}.glue.json"
    values = {}
    for gid, out in (json.loads(path.read_text()).items() if path.exists() else ()):
        try:
            values[gid] = float(out.get("data", {}).get("text/plain"))
        except (TypeError, ValueError):
            pass  # a glued sentence or figure, not a number
    return values


def _printed_text(cell: dict) -> str:
    """The text an executed code cell puts on the page (printed lines, tables), hidden cells and quiet glue aside."""
    if cell["cell_type"] != "code" or HIDDEN & set(cell.get("metadata", {}).get("tags", [])):
        return ""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", "") if isinstance(out.get("text"), str) else "".join(out.get("text", [])))
        for mime, data in out.get("data", {}).items():
            text = data if isinstance(data, str) else "".join(data)
            if mime.startswith("text/html"):
                parts.append(_html_text(text))
            elif mime.startswith(("text/markdown", "text/plain")):
                parts.append(text)
    return "\n".join(parts)


class _TextOnly(HTMLParser):
    """The text of an HTML output a reader sees: its text nodes (an SVG's <text> labels included), never the markup's
    attributes (a polyline's coordinates, a width) nor a style or script."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        self._skip += tag in ("style", "script")

    def handle_endtag(self, tag):
        self._skip -= tag in ("style", "script") and self._skip > 0

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)


def _html_text(markup: str) -> str:
    parser = _TextOnly()
    parser.feed(markup)
    parser.close()
    return " ".join(parser.parts)


def _shown(v: float, spec: str) -> str:
    try:
        return format(v, spec).replace(",", "")
    except (TypeError, ValueError):
        return format(v, "").replace(",", "")


def _distinctive(shown: str, v: float, same_page: bool = True) -> bool:
    """Whether a number equal to ``shown`` gives the answer away: three significant digits (glued or printed on the
    answer's own page), four for a number printed on another page. A printed table elsewhere (chapter 9's hundreds of validation points, in ms to one
    decimal) holds most three-digit numbers; a measured answer that moves from build to build meets one by chance."""
    digits = shown.replace(".", "").replace("-", "").lstrip("0")
    return abs(v) >= SMALL_COUNT and len(digits) >= (3 if same_page else 4)


def _earlier_problems(pages: dict[str, list[dict]], values: dict[str, dict[str, float]], order: list[str],
                      name: str) -> list[str]:
    """Every answer of page ``name`` that a page before it, or an earlier part of the same page, already shows."""
    cells = pages[name]
    problems = []
    for prompt in _prompts(cells):
        head = f"{name}, prompt in cell {prompt.cell} ({prompt.text.splitlines()[-1][:60]!r})"
        givens = [values.get(src, {}).get(gid) for src, gid, _ in _refs(prompt.text, name)]
        givens = [g for g in givens if g is not None]
        specs = {gid: spec for src, gid, spec in _refs(prompt.reveal, name) if src == name}
        earlier = []  # (where, prose or printed text)
        for doc in order[:order.index(name) + 1]:
            for i, cell in enumerate(pages.get(doc, [])):
                if doc == name and i > prompt.cell:
                    break
                text = _source(cell)
                if cell["cell_type"] == "markdown":
                    earlier.append((f"{doc}, cell {i}", "prose", text[:prompt.offset] if (doc, i) == (name, prompt.cell)
                                    else text, doc))
                elif (doc, i) != (name, prompt.cell):
                    earlier.append((f"{doc}, cell {i}", "printed", _printed_text(cell), doc))
        for answer in sorted(_answers(prompt)):
            v = values.get(name, {}).get(answer)
            if v is None or (v == round(v) and abs(v) < SMALL_COUNT) or any(
                    math.isclose(v, g, rel_tol=1e-9) for g in givens):
                continue
            shown = _shown(v, specs.get(answer, ""))
            if not _distinctive(shown, v):
                # a two-digit count meets another by chance: chapter 7's break-even batch, measured on the reader's
                # CPU, was 31 on one build, as many as the 16K-token sequences that fit on 4 H100s
                continue
            for where, kind, text, doc in earlier:
                if kind == "prose":
                    same = sorted({f"{src}::{gid}" for src, gid, _ in _refs(text, doc)
                                   if (w := values.get(src, {}).get(gid)) is not None and math.isclose(v, w, rel_tol=1e-9)})
                    problems += [f"{head}: {where} already shows {answer!r} ({shown}) as {ref!r}" for ref in same]
                elif (doc == name or _distinctive(shown, v, same_page=False)) and shown in {
                        n.replace(",", "") for n in NUMBER.findall(text)}:
                    problems.append(f"{head}: {where} prints {shown}, the answer {answer!r}")
    return problems


def _executed_pages(html: Path) -> tuple[dict[str, list[dict]], dict[str, dict[str, float]], list[str]]:
    executed = html.parent / "jupyter_execute" / "book"
    order = _book_order()
    pages, values = {}, {}
    for doc in order:
        nb, md = executed / f"{doc}.ipynb", ROOT / "book" / f"{doc}.md"
        if nb.exists():
            pages[doc] = json.loads(nb.read_text())["cells"]
        elif md.exists():
            pages[doc] = [_md(md.read_text())]
        values[doc] = _glued_values(executed, doc)
    return pages, values, order


# (chapter, answer, earlier glue) -> why the earlier number, though equal, does not show the answer. Each entry must
# still be found (a stale one fails), and only a number of another kind, on another page, belongs here.
COINCIDENCES = {
    ("08_quantization", "max_seqs_4k_fp8_w_kv", "04_batching::out_second"):
        "a count of sequences that fit in memory (chapter 8) and the length in tokens of the toy workload's "
        "second-longest answer (chapter 4): equal by chance, and nothing on either page connects them",
}


def _coincidence(problem: str, name: str) -> tuple[str, str, str] | None:
    return next((key for key in COINCIDENCES if key[0] == name and f"shows {key[1]!r}" in problem
                 and problem.endswith(f"as {key[2]!r}")), None)


@pytest.mark.parametrize("name", CHAPTERS)
def test_no_answer_is_shown_earlier_in_the_book(name, built_book):
    """No answer of a chapter's prompts equals a number the reader has already been shown: in an earlier chapter, or
    earlier in the same chapter under another name, in prose or in a printed table."""
    html, _ = built_book
    pages, values, order = _executed_pages(html)
    assert name in order, f"{name} is not in _toc.yml"
    problems = _earlier_problems(pages, values, order, name)
    marked = {p: _coincidence(p, name) for p in problems}
    stale = [key for key in COINCIDENCES if key[0] == name and key not in marked.values()]
    assert not stale, f"listed as coincidences but no longer equal: {stale}: remove them from COINCIDENCES"
    problems = [p for p, key in marked.items() if key is None]
    assert not problems, "\n".join(problems)


def test_a_figure_s_markup_is_not_what_it_shows():
    """Numbers in an HTML output's markup (an SVG polyline's coordinates, a width) are not shown to the reader; its
    text, an SVG axis label included, is."""
    svg = ('<svg width="455"><polyline points="754.8,176.4 761.6,175.6"/><text x="5">54.8 %</text></svg>'
           '<style>td { width: 352px }</style><table><tr><td>7,157</td></tr></table>')
    cell = _code("show()", outputs=[{"output_type": "display_data", "data": {"text/html": svg}}])
    numbers = set(NUMBER.findall(_printed_text(cell)))
    assert numbers == {"54.8", "7,157"}, numbers


def test_the_earlier_rule_catches_a_number_shown_before_under_another_name():
    """The checker itself, on a small book: an answer shown before, in prose under another id or in a printed
    table, is found; a small count, a number the prompt gives, and a number shown only after the prompt are not."""
    reveal = ":::{dropdown} Reveal: how many\n**{glue:text}`fit:,.0f`** fit, and **{glue:text}`steps:.0f`** steps.\n:::\n"
    prompt = ":::{admonition} Commit to a prediction\n:class: tip\nHow many fit?\n:::\n"
    table = {"output_type": "display_data", "data": {"text/markdown": "| context | fit |\n|---|---|\n| 4K | 7,157 |"}}

    def problems(first: list[dict], second: list[dict], other: float = 12.0, given: float = 50.0) -> list[str]:
        pages = {"one": first, "two": second}
        values = {"one": {"batch": 7157.0, "other": other}, "two": {"fit": 7157.0, "steps": 3.0, "given": given}}
        return _earlier_problems(pages, values, ["one", "two"], "two")

    plain = [_md("A batch of {glue:text}`other:.0f`.")]
    assert problems([_md("The worked example runs {glue:text}`batch:,.0f` sequences.")], [_md(prompt + reveal)])
    assert problems(plain, [_md("Earlier: {glue:text}`one::batch:,.0f`.\n" + prompt + reveal)])
    assert problems([_code("show_table()", outputs=[table])], [_md(prompt + reveal)])
    assert not problems(plain, [_md(prompt + reveal)])
    assert not problems(plain, [_md(prompt + reveal + "Afterwards: {glue:text}`one::batch:,.0f`.")])
    # the three steps equal a small count shown before; the answer equals a number the prompt itself gives
    assert not problems([_md("Three: {glue:text}`other:.0f`")], [_md(prompt + reveal)], other=3.0)
    assert not problems([_md("{glue:text}`batch:,.0f`")],
                        [_md(prompt.replace("fit?", "fit in {glue:text}`given:.0f`?") + reveal)], given=7157.0)
    # a printed three-digit number: found earlier on the answer's page, not in another page's table
    small_reveal = reveal.replace("`fit:,.0f`", "`fit:.1f`")
    three = {"output_type": "display_data", "data": {"text/markdown": "| point | ms |\n|---|---|\n| p512 | 55.0 |"}}
    found = _earlier_problems({"one": [_code("t()", outputs=[three])], "two": [_md(prompt + small_reveal)]},
                              {"one": {}, "two": {"fit": 55.0, "steps": 3.0}}, ["one", "two"], "two")
    assert not found
    found = _earlier_problems({"two": [_code("t()", outputs=[three]), _md(prompt + small_reveal)]},
                              {"two": {"fit": 55.0, "steps": 3.0}}, ["two"], "two")
    assert found
    # a glued count of two digits is not distinctive, on any page; one of three is, on the answer's own page
    prose = [_md("A peak of {glue:text}`peak:.0f` sequences."), _md(prompt + reveal)]
    assert not _earlier_problems({"two": prose}, {"two": {"peak": 31.0, "fit": 31.0, "steps": 3.0}}, ["two"], "two")
    assert _earlier_problems({"two": prose}, {"two": {"peak": 312.0, "fit": 312.0, "steps": 3.0}}, ["two"], "two")
