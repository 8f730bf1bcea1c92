"""What blocking cannot stop, detection shows: flags on learner cells that lean on the course's own answers.

While a learner's function is checked, the grader switches the course's reference functions off in the kernel
(:mod:`stage5.grading.blocking`), and for exercises 1 and 3 they do not exist in the kernel at all
(:mod:`stage5.grading.view`), but that cannot be complete: the course's source is public, so a learner can load
a private copy of ``stage5.cost`` from its file, stash a reference before the check, or paste the code. This module
reads a submission (it runs nothing) and lists, for the instructor, every cell the learner wrote that

* imports or uses a reference module (:data:`REFERENCE_MODULES`, and what the exercise's Rules put off limits:
  :data:`OFF_LIMITS`) beyond what the exercise's own cells import, or calls one of their answer-computing functions
  and methods on a given object (``config.kv_bytes_per_token``), by name or through ``getattr`` with a name built
  from pieces;
* reaches for the grader's own switch (``sys.modules``, ``stage5.grading``, ``unavailable``) or for anything by a
  name the review cannot read (``getattr`` with a name built at run time, ``importlib``, ``__import__``,
  ``__builtins__``, ``operator.attrgetter``);
* loads code from source (``importlib.util.spec_from_file_location``, ``SourceFileLoader``, ``runpy``, ``exec``
  or ``compile`` of a file, ``%run``), or names a reference module's file;
* reproduces a long run of a reference module's tokens (:data:`RUN_TOKENS` in a row, names kept, literals
  ignored), the way a pasted copy would.

Each flag names the cell and line and quotes the line. Flags are for the instructor to read; they change no score.
"""

from __future__ import annotations

import ast
import functools
import io
import json
import re
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import stage5
from stage5.grading.ex03 import DIAGNOSIS_BLOCKED
from stage5.grading.ex04 import ROUTING_BLOCKED

STAGE5 = Path(stage5.__file__).resolve().parent
REFERENCE_MODULES = ("stage5.cost", "stage5.models", "stage5.engine.kv", "stage5.engine.scheduler",
                     "stage5.engine.engine")
RUN_TOKENS = 80  # tokens in a row shared with a reference module that count as a copy: 6 to 8 lines of code (the
# course's own ex02 solution shares at most 51 with stage5.engine.kv, writing the same first-fit loop)
MAX_FLAGS = 20  # per submission: the first ones name the pattern
LOADERS = {"spec_from_file_location", "module_from_spec", "SourceFileLoader", "SourcelessFileLoader",
           "load_source", "run_path", "run_module", "exec_module", "import_module", "__import__", "exec",
           "compile", "reload", "load_module", "find_spec", "spec_from_loader", "get_source", "getsource"}
MAGICS = re.compile(r"^\s*(%+\s*(run|load|loadpy|load_ext|aimport)\b|!.*stage5)", re.M)
# the answer-computing functions and methods of stage5.cost and stage5.models, however they are reached. Not
# ModelConfig.weight_bytes: ex01's rules give it to the learner (parameters x bytes, the 16-bit tables apart).
REFERENCE_CALLS = frozenset({"kv_bytes_per_token", "kv_bytes_per_sequence", "weight_total_bytes",
                             "kv_budget_bytes", "kv_traffic_bytes", "max_concurrency", "decode_floor_s",
                             "decode_step", "tpot_s", "prefill_step", "ttft_s", "mixed_step", "mixed_tpot_s",
                             "weight_bytes_read", "decode_intensity", "decode_intensity_with_kv", "ridge_point",
                             "experts_touched", "cost_per_million_tokens", "decode_throughput", "cost_terms",
                             "estimate_deployment", "floor_deployment", "attention_flops", "request_gpu_seconds",
                             "speculative_speedup", "expected_tokens_per_verification",
                             "speculation_any_batch_context", "speculation_breakeven_batch"})

# The machinery that switches the answers off in the kernel: a learner's code has no business naming it (one
# assignment to ``sys.modules["stage5.grading.remote"].unavailable`` switched the blocking off, issue 48).
GRADER_PACKAGE = "stage5.grading"
GRADER_INTERNALS = frozenset({"unavailable", "_learner_failures", "_patch_referrers", "_stub", "_resolve", "PROBES",
                              "register_probes", "DIAGNOSIS_BLOCKED", "SERVING_BLOCKED", "ATTENTION_BLOCKED"})
# ways to reach a module, a function or an attribute by a name the review cannot read
INDIRECT = frozenset({"attrgetter", "methodcaller", "__getattribute__", "__builtins__", "__import__"})
ATTR_BY_NAME = frozenset({"getattr", "setattr", "delattr", "hasattr"})


@dataclass(frozen=True)
class OffLimits:
    """What one exercise's Rules put off limits: modules (or a module's function, ``stage5.simulator.simulate``)
    and answer-computing functions and methods however they are reached; ``allowed``: what its Rules give back."""

    modules: tuple[str, ...]
    calls: frozenset[str] = frozenset()
    allowed: frozenset[str] = frozenset()


#: Per exercise (the release notebook's name), as its Rules state them (tests/test_grading_review.py reads each
#: exercise's text against this table). Always on top: :data:`REFERENCE_MODULES` and :data:`REFERENCE_CALLS`.
OFF_LIMITS: dict[str, OffLimits] = {
    "ex01": OffLimits(("stage5.cost",), frozenset({"kv_bytes_per_token"})),
    "ex02": OffLimits(("stage5.engine.kv", "stage5.engine.scheduler", "stage5.engine.engine"),
                      frozenset({"Engine", "PagedAllocator", "ContiguousAllocator", "Scheduler"})),
    "ex03": OffLimits(("stage5.levers", "stage5.simulator.simulate", "stage5.cost", "stage5.quantization"),
                      frozenset(t.rsplit(".", 1)[-1] for t in DIAGNOSIS_BLOCKED) | {"simulate"},
                      allowed=frozenset({"kv_bytes_per_token"})),  # "you wrote it in exercise 1"
    "ex04": OffLimits(("stage5.engine.fleet",), frozenset(t.rsplit(".", 1)[-1] for t in ROUTING_BLOCKED) - {"choose"}
                      | {"Router"}),  # Router.choose by its class: "choose" alone names too much
    "clearing": OffLimits(("stage5.cost", "stage5.levers", "stage5.scaling", "stage5.long_context",
                           "stage5.simulator")),
}


def off_limits(exercise: str | None) -> tuple[tuple[str, ...], frozenset[str]]:
    """(modules, calls) the review flags for ``exercise`` (None or unknown: the course-wide ones)."""
    rules = OFF_LIMITS.get(exercise or "")
    if rules is None:
        return REFERENCE_MODULES, REFERENCE_CALLS
    return (tuple(dict.fromkeys(REFERENCE_MODULES + rules.modules)),
            (REFERENCE_CALLS | rules.calls) - rules.allowed)


def _module_file(module: str) -> Path:
    return STAGE5.joinpath(*module.split(".")[1:]).with_suffix(".py")


def _is_reference(module: str, modules: tuple[str, ...] = REFERENCE_MODULES) -> bool:
    return any(module == m or module.startswith(m + ".") for m in modules)


def _tokens(source: str) -> list[tuple[str, int]]:
    """(token, line) of ``source``: names, operators and keywords kept; strings and numbers as one symbol each;
    comments and layout dropped. Unreadable source gives the tokens read so far."""
    out: list[tuple[str, int]] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in (tokenize.NAME, tokenize.OP):
                out.append((tok.string, tok.start[0]))
            elif tok.type in (tokenize.STRING, tokenize.NUMBER):
                out.append(("S" if tok.type == tokenize.STRING else "N", tok.start[0]))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return out


@functools.cache
def _reference_runs(modules: tuple[str, ...] = REFERENCE_MODULES) -> dict[int, str]:
    """hash of every RUN_TOKENS-token window of the reference modules -> the module it is from."""
    index: dict[int, str] = {}
    for module in modules:
        if not _module_file(module).is_file():  # a function of a module (stage5.simulator.simulate)
            continue
        words = [t for t, _ in _tokens(_module_file(module).read_text())]
        for i in range(len(words) - RUN_TOKENS + 1):
            index.setdefault(hash(tuple(words[i:i + RUN_TOKENS])), module)
    return index


def _copied_runs(source: str, modules: tuple[str, ...] = REFERENCE_MODULES) -> list[tuple[int, int, str, int]]:
    """(first line, last line, module, tokens) of every run of at least RUN_TOKENS tokens shared with a module."""
    toks = _tokens(source)
    words = [t for t, _ in toks]
    index, runs, i = _reference_runs(modules), [], 0
    while i <= len(words) - RUN_TOKENS:
        module = index.get(hash(tuple(words[i:i + RUN_TOKENS])))
        if module is None:
            i += 1
            continue
        j = i + 1
        while j <= len(words) - RUN_TOKENS and index.get(hash(tuple(words[j:j + RUN_TOKENS]))) == module:
            j += 1
        end = j + RUN_TOKENS - 2  # the last token of the last matching window
        runs.append((toks[i][1], toks[end][1], module, end - i + 1))
        i = end + 1
    return runs


def _dotted(node: ast.AST) -> str:
    """``a.b.c`` for a chain of attributes on a name, else ''."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def _given(release: dict) -> tuple[set[str], set[str]]:
    """What the exercise's own cells import ({module.name}) and the attributes they use: a learner using those is
    doing what the exercise gives them."""
    imported, attrs = set(), set()
    for cell in _code_cells(release):
        if _nbgrader(cell).get("solution"):
            continue
        tree = _parse(cell["source"])
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.ImportFrom) and node.module:
                imported |= {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Attribute):
                attrs.add(node.attr)
    return imported, attrs


def _parse(source: str) -> ast.AST | None:
    clean = re.sub(r"^(\s*)[%!].*$", r"\1pass", source, flags=re.M)  # IPython magics and shell lines
    try:
        return ast.parse(clean)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _code_cells(nb: dict) -> list[dict]:
    """The code cells of ``nb`` with their source as one string and their place in the notebook (``index``)."""
    out = []
    cells = nb.get("cells", []) if isinstance(nb, dict) else []
    for index, cell in enumerate(cells if isinstance(cells, list) else []):
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            src = cell.get("source", "")
            src = "".join(s for s in src if isinstance(s, str)) if isinstance(src, list) else str(src)
            out.append({**cell, "source": src, "index": index})
    return out


def _nbgrader(cell: dict) -> dict:
    meta = cell.get("metadata")
    meta = meta.get("nbgrader") if isinstance(meta, dict) else None
    return meta if isinstance(meta, dict) else {}


def _cell_label(cell: dict, index: int) -> str:
    gid = _nbgrader(cell).get("grade_id")
    ok = isinstance(gid, str) and re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", gid)
    return gid if ok else f"cell {index + 1}"


def _quote_line(source: str, line: int) -> str:
    lines = source.splitlines()
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text[:77] + "..." if len(text) > 80 else text


def _folded(node: ast.AST) -> str | None:
    """The text of a string built from literals (``"kv_bytes_per_" + "token"``, an f-string of literals)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _folded(node.left), _folded(node.right)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.JoinedStr):
        parts = [_folded(v) for v in node.values]
        return "".join(parts) if all(p is not None for p in parts) else None  # type: ignore[arg-type]
    return None


def _flags_in(source: str, given_imports: set[str], given_attrs: set[str],
              modules: tuple[str, ...] = REFERENCE_MODULES, calls: frozenset[str] = REFERENCE_CALLS
              ) -> list[tuple[int, str]]:
    """(line, why) for one learner cell; ``modules`` and ``calls``: what the exercise puts off limits."""
    flags: list[tuple[int, str]] = []
    for m in MAGICS.finditer(source):
        flags.append((source.count("\n", 0, m.start()) + 1, "runs or loads code with an IPython magic"))
    tree = _parse(source)
    parents = {id(c): n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)} if tree else {}
    files = "|".join(re.escape("/".join(m.split(".")[1:])) for m in modules)
    for node in ast.walk(tree) if tree else ():
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            for a in node.names:
                if _is_reference(a.name, modules) or any(m.startswith(a.name + ".") for m in modules if a.asname):
                    flags.append((line, f"imports {a.name}, a reference implementation"))
                if _is_reference(a.name, (GRADER_PACKAGE,)):
                    flags.append((line, f"imports {a.name}, the grader's own code"))
                if a.name.split(".")[0] in ("importlib", "builtins", "imp", "runpy"):
                    flags.append((line, f"imports {a.name}, which loads modules from source or by name"))
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if (_is_reference(node.module, modules) or _is_reference(full, modules)) and full not in given_imports:
                    flags.append((line, f"imports {full} from a reference implementation"))
                if _is_reference(full, (GRADER_PACKAGE,)) and full not in given_imports:
                    flags.append((line, f"imports {full}, the grader's own code"))
                if node.module.split(".")[0] in ("importlib", "runpy", "imp", "builtins"):
                    flags.append((line, f"imports {full}, which loads modules from source or by name"))
                if node.module == "sys" and a.name == "modules":
                    flags.append((line, "imports sys.modules, every loaded module by name"))
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            longest = not isinstance(parents.get(id(node)), ast.Attribute)  # a.b.c counts once, at its longest
            if dotted.startswith("stage5.") and _is_reference(dotted, modules) and longest:
                flags.append((line, f"uses {dotted}, a reference implementation"))
            elif dotted.startswith(GRADER_PACKAGE + ".") and longest:
                flags.append((line, f"uses {dotted}, the grader's own code"))
            elif node.attr in calls and node.attr not in given_attrs:
                flags.append((line, f"uses .{node.attr}, the course's own answer"))
            elif node.attr in GRADER_INTERNALS:
                flags.append((line, f"uses .{node.attr}, the grader's switch for the course's answers"))
            elif node.attr == "modules" and dotted == "sys.modules":
                flags.append((line, "reaches a module through sys.modules"))
            elif node.attr in INDIRECT:
                flags.append((line, f"uses {dotted or node.attr}, which reaches attributes or modules by name"))
            elif node.attr in LOADERS and node.attr not in ("compile",):
                flags.append((line, f"calls {dotted or node.attr}, which loads code"))
        elif isinstance(node, ast.Name) and node.id in INDIRECT:
            flags.append((line, f"uses {node.id}, which reaches attributes or modules by name"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in LOADERS:
            flags.append((line, f"calls {node.func.id}(), which runs or loads code"))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ATTR_BY_NAME
                and len(node.args) >= 2):
            name = _folded(node.args[1])
            if name is None:
                flags.append((line, f"calls {node.func.id}() with a name built at run time"))
            elif name in calls and name not in given_attrs:
                flags.append((line, f"reaches .{name}, the course's own answer, through {node.func.id}()"))
            elif name in GRADER_INTERNALS:
                flags.append((line, f"reaches .{name}, the grader's switch, through {node.func.id}()"))
        text = _folded(node) if isinstance(node, (ast.Constant, ast.BinOp, ast.JoinedStr)) else None
        if text is not None and not isinstance(parents.get(id(node)), (ast.BinOp, ast.JoinedStr)):
            text = text.replace("\\", "/")
            if any(m in text for m in modules) or (files and re.search(rf"stage5/({files})\.py", text)):
                flags.append((line, "names a reference module or its file in a string"))
            elif GRADER_PACKAGE in text or "stage5/grading" in text:
                flags.append((line, "names the grader's own code in a string"))
            elif text in calls and text not in given_attrs and not isinstance(node, ast.Constant):
                flags.append((line, f"builds the name {text}, the course's own answer, from pieces"))
    for first, last, module, n in _copied_runs(source, modules):
        flags.append((first, f"lines {first}-{last} repeat {n} tokens in a row of {module}'s source"))
    return flags


def review_notebook(submitted: dict, release: dict, exercise: str | None = None) -> list[str]:
    """One line per flag, ``<cell> line <n>: <why>: <the line>``, for every code cell of ``submitted`` the learner
    wrote: not one of ``release``'s cells as released, nor a locked cell (restored from the release before
    running). ``exercise`` (the release's name) picks its :data:`OFF_LIMITS` row."""
    modules, calls = off_limits(exercise)
    released = {c["source"].strip() for c in _code_cells(release)}
    locked = {_nbgrader(c).get("grade_id") for c in _code_cells(release) if _nbgrader(c).get("locked")}
    given_imports, given_attrs = _given(release)
    out: list[str] = []
    for cell in _code_cells(submitted):
        source = cell["source"]
        gid = _nbgrader(cell).get("grade_id")
        if source.strip() in released or not source.strip() or (isinstance(gid, str) and gid in locked):
            continue
        found = _flags_in(source, given_imports, given_attrs, modules, calls)
        for line, why in sorted(set(found)):
            out.append(f"{_cell_label(cell, cell['index'])} line {line}: {why}: {_quote_line(source, line)}")
    if len(out) > MAX_FLAGS:
        out = out[:MAX_FLAGS] + [f"and {len(out) - MAX_FLAGS} more"]
    return out


def review_folder(folder: Path, release_nb: Path) -> list[str]:
    """Flags for every notebook in a submission's folder (unreadable notebooks give none: collection reports
    those)."""
    try:
        release = json.loads(release_nb.read_text())
    except (OSError, ValueError):
        return []
    out: list[str] = []
    for path in sorted(folder.glob("*.ipynb")):
        try:
            out += review_notebook(json.loads(path.read_text()), release, release_nb.stem)
        except (OSError, ValueError, RecursionError, MemoryError):
            continue
    return out


def review_sources(sources: Iterable[str], release: dict | None = None, exercise: str | None = None) -> list[str]:
    """Flags for bare cell sources (a quick look at code outside a notebook)."""
    nb = {"cells": [{"cell_type": "code", "source": s, "metadata": {}} for s in sources]}
    return review_notebook(nb, release or {"cells": []}, exercise)
