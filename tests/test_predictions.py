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
            rest = [text[m.end():]] + [t for j, t in md if j > i]
            reveal = next((r.group(1) for chunk in rest for r in [REVEAL.search(chunk)] if r), None)
            assert reveal is not None, f"cell {i}: a prediction prompt without a Reveal dropdown after it"
            found.append(Prompt(i, m.start(), m.group(1), reveal))
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
