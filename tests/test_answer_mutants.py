"""ex01's and the clearing test's hidden checks catch every slip the answers can make: each one-operator or
one-number mutant of the reference solution that changes a graded answer fails at least one graded cell.

In-process and fast. The mutants are generated, not chosen: in every answer cell's solution, each number is
doubled and halved, each ``* / + - **`` is swapped for its counterpart, each side of a sum or difference is
dropped, a ``max(0, x)`` or ``min(a, x)`` becomes ``x``, and ``math.floor`` becomes ``math.ceil``. A mutant
that leaves every graded answer within the checks' tolerance changes nothing a learner is graded on, and is
listed as such; every other mutant must fail a check.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import io
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
SOLUTION = re.compile(r"(?ms)^([ \t]*)### BEGIN SOLUTION\n(.*?)^[ \t]*### END SOLUTION\n?")
SWAP = {ast.Mult: ast.Div, ast.Div: ast.Mult, ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Pow: ast.Mult,
        ast.FloorDiv: ast.Div}
TOLERANCE = 1e-3  # tighter than any check's tolerance: a mutant within it changes no grade


def _cells(assignment: str) -> list[tuple[str, str, dict[str, Any]]]:
    nb = json.loads((REPO / "solutions" / assignment / f"{assignment}.ipynb").read_text())
    return [(c["metadata"].get("nbgrader", {}).get("grade_id", ""), "".join(c["source"]),
             c["metadata"].get("nbgrader", {})) for c in nb["cells"] if c["cell_type"] == "code"]


class _Mutator(ast.NodeTransformer):
    """Applies the ``target``-th mutation site's ``variant`` (counting sites in walk order) and nothing else;
    ``variants`` is how many that site has (a number: doubled or halved; a sum or difference: the operator
    swapped, or either side dropped; anything else: one)."""

    def __init__(self, target: int, variant: int):
        self.site, self.target, self.variant, self.variants, self.what = -1, target, variant, 1, ""

    def _hit(self, variants: int = 1) -> bool:
        self.site += 1
        if self.site == self.target:
            self.variants = variants
            return True
        return False

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, (int, float)) and not isinstance(node.value, bool) and node.value not in (0, 1):
            if self._hit(variants=2):
                factor = (2, 0.5)[self.variant]
                self.what = f"{node.value!r} -> {node.value * factor!r}"
                return ast.copy_location(ast.Constant(node.value * factor), node)
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if type(node.op) in SWAP and self._hit(variants=3 if isinstance(node.op, (ast.Add, ast.Sub)) else 1):
            if self.variant in (1, 2):
                kept = node.left if self.variant == 1 else node.right
                self.what = f"{ast.unparse(node)} -> {ast.unparse(kept)}"
                return kept
            new = ast.BinOp(node.left, SWAP[type(node.op)](), node.right)
            self.what = f"{ast.unparse(node)} -> {ast.unparse(new)}"
            return ast.copy_location(new, node)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if (isinstance(node.func, ast.Name) and node.func.id in ("max", "min") and len(node.args) == 2
                and not node.keywords and self._hit()):
            kept = node.args[1]
            self.what = f"{ast.unparse(node)} -> {ast.unparse(kept)}"
            return kept
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if node.attr == "floor" and isinstance(node.value, ast.Name) and node.value.id == "math" and self._hit():
            self.what = "math.floor -> math.ceil"
            return ast.copy_location(ast.Attribute(node.value, "ceil", node.ctx), node)
        return self.generic_visit(node)


def _mutants(source: str) -> list[tuple[str, str]]:
    """(what changed, mutated solution text) for every site and variant of one solution block."""
    out = []
    for target in range(10_000):
        variant, variants = 0, 1
        while variant < variants:
            m = _Mutator(target, variant)
            tree = m.visit(copy.deepcopy(ast.parse(source)))
            if not m.what:  # no site numbered ``target``: every site is done
                return out
            out.append((m.what, ast.unparse(tree)))
            variant, variants = variant + 1, m.variants
    raise AssertionError("more than 10,000 mutation sites in one solution block")


def _solution_blocks(cells) -> list[tuple[str, str, str, str]]:
    """(grade_id, indent, block text, cell source) of every answer cell's solution block."""
    out = []
    for gid, src, meta in cells:
        match = SOLUTION.search(src) if meta.get("solution") and not meta.get("grade") else None
        if match and match.group(2).strip():
            out.append((gid, match.group(1), match.group(2), src))
    return out


def _indent(block: str, indent: str) -> str:
    return "".join(indent + line if line.strip() else line for line in block.splitlines(keepends=True))


def _dedent(block: str, indent: str) -> str:
    return "".join(line[len(indent):] if line.startswith(indent) else line for line in block.splitlines(keepends=True))


class _Recorder:
    """A learner's function as the graded cells call it: every call's arguments and result are kept."""

    def __init__(self, func):
        self.func, self.calls = func, []

    def __call__(self, *args, **kwargs):
        result = self.func(*args, **kwargs)
        self.calls.append((args, kwargs, result))
        return result


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=1e-12)
    return a == b


def _exec(ns: dict[str, Any], cid: str, code: str) -> bool:
    """Run one cell in ``ns``; False when it raised."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            exec(compile(code, f"<{cid}>", "exec"), ns)  # noqa: S102 - the course's own solution, or one mutant
        except Exception:  # noqa: BLE001 - a failing cell is what is counted
            return False
    return True


def _reference(cells) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """For each answer cell: the namespace just before it, and what it defines (values; functions wrapped in a
    :class:`_Recorder`, so the graded cells' calls with the reference are kept)."""
    ns: dict[str, Any] = {"__name__": "__answers__"}
    out = {}
    answers = {gid for gid, _, _, _ in _solution_blocks(cells)}
    for cid, src, _ in cells:
        before = dict(ns)
        assert _exec(ns, cid, src), f"the reference solution fails in {cid}"
        if cid in answers:
            defined = {}
            for name, value in list(ns.items()):
                if name.startswith("_") or before.get(name) is value:
                    continue
                ns[name] = defined[name] = _Recorder(value) if callable(value) else value
            out[cid] = (before, defined)
    return out


def _fails_a_check(ns: dict[str, Any], cells) -> bool:
    failed = False
    for cid, code, meta in cells:
        ok = _exec(ns, cid, code)
        failed |= not ok and bool(meta.get("grade"))
    return failed


def _verdicts(assignment: str) -> tuple[list[str], list[str], list[str]]:
    """(caught, changes-nothing-graded, survivors), each a list of 'cell: change' lines. A mutant runs from the
    namespace the reference had before its cell: first its cell and the graded cells up to the next answer, then,
    if none failed, every later cell too (a later check may use the answer)."""
    cells = _cells(assignment)
    ref = _reference(cells)
    order = [cid for cid, _, _ in cells]
    caught, inert, survivors = [], [], []
    for gid, indent, block, src in _solution_blocks(cells):
        before, defined = ref[gid]
        start = order.index(gid)
        following = cells[start + 1:]
        own = []
        for cell in following:
            if cell[0] in ref:
                break
            own.append(cell)
        for what, mutated in _mutants(_dedent(block, indent)):
            line = f"{gid}: {what}"
            ns = dict(before)
            _exec(ns, gid, src.replace(block, _indent(mutated + "\n", indent), 1))  # a crash fails its checks
            got = {name: ns.get(name) for name in defined}
            # only graded cells count, as in grading: first this answer's own, then every later one
            if _fails_a_check(ns, own) or _fails_a_check(ns, following[len(own):]):
                caught.append(line)
                continue
            changed = False
            for name, value in defined.items():
                if isinstance(value, _Recorder):
                    changed |= any(not _same(result, got[name](*args, **kwargs)) for args, kwargs, result in value.calls)
                else:
                    changed |= not _same(value, got[name])
            (survivors if changed else inert).append(line)
    return caught, inert, survivors


@pytest.mark.parametrize("assignment", ["ex01", "clearing"])
def test_every_answer_changing_mutant_fails_a_graded_cell(assignment):
    caught, inert, survivors = _verdicts(assignment)
    print(f"{assignment}: {len(caught)} mutants caught, {len(inert)} change no graded answer:")
    print("\n".join(f"  caught  {line}" for line in caught))
    print("\n".join(f"  inert   {line}" for line in inert))
    assert len(caught) >= 20, caught
    assert not survivors, f"{len(survivors)} answer-changing mutants pass every check: " + "; ".join(survivors)


#: Rules a one-operator change cannot break, each broken the way a learner might (a parameter ignored or fixed at
#: the value most hidden cases use): (what it breaks, answer cell, the solution's text, what replaces it).
RULE_MUTANTS = [
    ("B1 bytes_per_element fixed at 2", "b1_kv_function_answer", "head_dim * bytes_per_element", "head_dim * 2"),
    ("B2 embedding and head at 2 bytes at every width", "b2_floor_function_answer",
     "table_bytes=max(2, bytes_per_param)", "table_bytes=2"),
    ("B3 embedding and head at 2 bytes at every width", "b3_concurrency_function_answer",
     "table_bytes=max(2, weight_bytes)", "table_bytes=2"),
    ("B3 reserve fixed at 8 GiB, the argument ignored", "b3_concurrency_function_answer",
     "reserve_gib_per_gpu * GiB", "8 * GiB"),
    ("B3 KV width fixed at 2 bytes", "b3_concurrency_function_answer", "kv_bytes_per_token(config, kv_bytes)",
     "kv_bytes_per_token(config, 2)"),
]


@pytest.mark.parametrize(("rule", "gid", "old", "new"), RULE_MUTANTS, ids=[m[0] for m in RULE_MUTANTS])
def test_every_parameter_mutant_fails_a_graded_cell(rule, gid, old, new):
    cells = _cells("ex01")
    src = next(s for g, s, _ in cells if g == gid)
    assert src.count(old) == 1, f"the mutant {rule!r} no longer applies: {old!r} is not in {gid} once"
    mutated = [(g, s.replace(old, new) if g == gid else s, m) for g, s, m in cells]
    assert _fails_a_check({"__name__": "__answers__"}, mutated), f"no graded ex01 cell catches: {rule}"
