"""A mutation test of exercise 2's hidden checks: every rule the exercise states is graded.

Each mutant in tests/ex02_mutants.py breaks one rule of the reference solution with a one-line change (a swapped
order, an off-by-one, the wrong victim, the wrong end of the queue, a missing free, best fit, the wrong head
mapping, ...). The hidden checks run in this process (tests/ex02_inprocess.py: the same probes and comparisons a
graded submission gets, without nbgrader or a kernel), and every mutant that changes behaviour must fail one of
them. The mutants the rules leave free (which free block is reused first, ...) must change nothing graded.

A second, cheaper test keeps the workload search: for each scheduling rule, one of the hidden serving workloads
shows the rule broken in the schedule itself (tests/ex02_tracesim.py), so no future change of a workload can make
a rule invisible again without this test failing.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import ex02_inprocess as inprocess
import ex02_tracesim as tracesim
import pytest
from ex02_mutants import EQUIVALENT, MUTANTS

#: The hidden checks nearest each answer cell: a mutant there is tried on them first (the cheapest way to fail).
NEAREST = {"contiguous_answer": ["p1_contiguous_cache", "p1_static_loop", "p3_continuous"],
           "paged_kv_answer": ["p1_attention"],
           "static_answer": ["p1_static_loop", "p2_paged_static"],
           "allocator_answer": ["p2_block_allocator"],
           "paged_answer": ["p2_block_tables", "p2_paged_static", "p3_preemption"],
           "serve_answer": ["p3_preemption", "p3_continuous"], "measure_answer": ["p4_table"]}
#: Scheduling rules the hidden serving workloads must show in the schedule itself (who runs, how long, preemptions),
#: not only through a probe or the tokens.
SCHEDULE_CELLS = ("contiguous_answer", "static_answer", "paged_answer", "serve_answer")
BY_PROBE_OR_TOKENS = {
    "contiguous tail off by one", "contiguous slots off by one", "paged release keeps the table",
    "paged slots ignore the table", "paged blocks_for off by one", "serve victim keeps num_cached",
    "static spins when stuck", "serve spins when stuck",  # check_stuck probes these directly
    "static serves the notebook's model", "serve serves the notebook's model",  # the tokens show these
}


def mutated(name: str) -> dict[str, str]:
    _, gid, replacements, _ = next(m for m in MUTANTS if m[0] == name)
    src = inprocess.answer(gid)
    for old, new in replacements:
        assert src.count(old) == 1, f"{name}: {old!r} is not in {gid} exactly once"
        src = src.replace(old, new)
    return {gid: src}


def test_mutants_are_one_rule_each():
    names = [m[0] for m in MUTANTS]
    assert len(names) == len(set(names)) and EQUIVALENT <= set(names)
    for name in names:
        mutated(name)  # each replacement applies exactly once


def test_every_behaviour_changing_mutant_fails_a_hidden_check(capsys):
    caught, missed = [], []
    for name, gid, _, rule in MUTANTS:
        if name in EQUIVALENT:
            continue
        failure = inprocess.first_failure(mutated(name), NEAREST[gid])
        (caught if failure else missed).append((name, rule, failure))
    with capsys.disabled():
        print(f"\nex02 mutation score: {len(caught)}/{len(caught) + len(missed)} behaviour-changing mutants caught "
              f"({len(EQUIVALENT)} equivalent left out)")
        for name, _rule, failure in caught:
            print(f"  caught  {name:45s} by {failure[0]}: {failure[1][:110]}")
        for name, rule, _ in missed:
            print(f"  MISSED  {name:45s} ({rule})")
    assert not missed, f"mutants no hidden check catches: {[(n, r) for n, r, _ in missed]}"


def _hidden_serving_runs() -> list[tuple[Any, ...]]:
    """The serving runs the hidden blocks ask for (function, cache, workload, allocator, blocks, size, batch,
    continuous, refusals), recorded by running those blocks with check_serving replaced by a recorder."""
    import stage5.grading as grading

    runs: list[tuple[Any, ...]] = []

    def record(label, kernel, function, cache, workload, allocator, num_blocks, block_size, max_batch, continuous,
               stuck=False, refusals=None, model_seed=0):  # the schedule does not depend on the model
        runs.append((function, cache, workload, allocator, num_blocks, block_size, max_batch, continuous, refusals))
        return {"trace": []}

    patch = pytest.MonkeyPatch()
    patch.setattr(grading, "check_serving", record)
    patch.setattr(grading, "check_continuous", lambda *a, **k: None)
    patch.setattr(grading, "check_stuck", lambda *a, **k: None)
    try:
        for gid in ("p1_static_loop", "p2_paged_static", "p3_continuous", "p3_preemption"):
            with contextlib.redirect_stdout(io.StringIO()):
                exec(inprocess.hidden_blocks()[gid], {"__name__": "__hidden__"})  # noqa: S102 - our own checks
    finally:
        patch.undo()
    return runs


@pytest.fixture(scope="module")
def runs_and_reference():
    runs = _hidden_serving_runs()
    base = inprocess.namespace()
    return runs, base, [tracesim.simulate(base, *run) for run in runs]


@pytest.mark.parametrize("name", [m[0] for m in MUTANTS if m[1] in SCHEDULE_CELLS and m[0] not in EQUIVALENT
                                  and m[0] not in BY_PROBE_OR_TOKENS])
def test_each_scheduling_rule_is_visible_in_a_hidden_schedule(runs_and_reference, name):
    runs, _, reference = runs_and_reference
    ns = inprocess.namespace(mutated(name))
    assert any(tracesim.simulate(ns, *run) != ref for run, ref in zip(runs, reference, strict=True)), \
        f"no hidden serving workload shows {name!r} in its schedule: add one (search seeds and pool sizes)"


@pytest.mark.parametrize("name", sorted(EQUIVALENT))
def test_equivalent_mutants_change_no_schedule(runs_and_reference, name):
    """What the rules leave free changes nothing the hidden runs compare (a careful reading is never marked
    wrong)."""
    runs, _, reference = runs_and_reference
    ns = inprocess.namespace(mutated(name))
    assert [tracesim.simulate(ns, *run) for run in runs] == reference


def test_reusing_the_newest_free_block_gets_full_marks():
    """The allocator may hand out any free block: one that reuses the last freed first passes every hidden check."""
    assert inprocess.first_failure(mutated("allocator returns blocks to the front")) is None


def test_attention_that_changes_its_inputs_in_place_gets_full_marks():
    """The text lets attend() change q, k and v in place (scaling q, say): the visible test and the hidden check give
    it copies, so such an attention passes both."""
    import torch

    sources = mutated("attention scales q in place")
    ns = inprocess.namespace(sources)
    src = next(s for g, s, _ in inprocess.cells() if g == "p1_attention")
    visible = inprocess.HIDDEN.sub("", src)
    assert "_kv.attend(0, _q.clone(), _k.clone(), _v.clone())" in visible
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(visible, "<visible p1_attention>", "exec"), dict(ns))  # noqa: S102 - our own test cell
    assert inprocess.run_hidden(ns, "p1_attention") is None
    cfg = ns["model"].cfg  # and the variant does change its input: without the copies it would fail
    kv = ns["PagedKV"](cfg, 4, torch.float64)
    kv.plan([torch.tensor([0])], [torch.tensor([0])])
    q = torch.ones(1, cfg.num_heads, cfg.head_dim, dtype=torch.float64)
    kv.attend(0, q, *(torch.ones(1, cfg.num_kv_heads, cfg.head_dim, dtype=torch.float64) for _ in range(2)))
    assert not torch.equal(q, torch.ones_like(q))


@pytest.mark.parametrize("where", ["solutions", "exercises"])
def test_docstrings_state_the_rules_word_for_word(where):
    """Every skeleton docstring of the rule table (stage5.grading.ex02.RULES) says exactly what the table says, in the
    solution and in the learner's release; the hidden checks apply those rules."""
    import ast
    import json

    from stage5.grading.ex02 import RULES

    nb = json.loads((inprocess.REPO / where / "ex02" / "ex02.ipynb").read_text())
    found: dict[str, str] = {}
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                found[node.name] = ast.get_docstring(node) or ""
                for sub in node.body:
                    if isinstance(sub, ast.FunctionDef):
                        found[f"{node.name}.{sub.name}"] = ast.get_docstring(sub) or ""
            elif isinstance(node, ast.FunctionDef):
                found[node.name] = ast.get_docstring(node) or ""
    for key, rule in RULES.items():
        assert key in found, f"{where}: no {key} in exercise 2"
        assert " ".join(found[key].split()) == " ".join(rule.split()), f"{where}: {key}'s docstring is not the rule"
