"""ex03's hidden deployments catch every rule of the stated cost model: each one-line mutant of the reference
solution's ``diagnose`` (a rule broken the way a learner might break it) fails at least one hidden B check.

In-process and fast: the solution's setup and ``diagnose`` cells run here, each mutant is the same source with one
line changed, and the hidden checks are the ones the grader runs (``check_diagnosis`` on the solution's
``_cases``), with the reference functions switched off as while grading.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from stage5.grading import DIAGNOSIS_BLOCKED, FUNCTION_GAIN_FACTOR, check_diagnosis, unavailable

REPO = Path(__file__).resolve().parent.parent
SOLUTION = REPO / "solutions" / "ex03" / "ex03.ipynb"

# (what the mutant breaks, the solution's text, what replaces it)
MUTANTS = [
    ("TPOT SLO ignored by the batching lever", 'if step(batch, ctx)[0] <= dep["tpot_slo_s"]:', "if True:"),
    ("TPOT SLO fixed at 50 ms, not the deployment's", 'dep["tpot_slo_s"]:', "0.05:"),
    ("KV memory does not cap the batching lever", "fit = math.floor(kv_memory / ((prompt + output) * kv(kb)))",
     "fit = 20_000"),
    ("no 8 GiB reserve per GPU", "RESERVE_GIB_PER_GPU * GiB", "0"),
    ("reserve held back once, not per GPU", "n * (g.memory_bytes - RESERVE_GIB_PER_GPU * GiB)",
     "n * g.memory_bytes - RESERVE_GIB_PER_GPU * GiB"),
    ("fit sized at the mean context, not prompt + output", "((prompt + output) * kv(kb))", "(ctx * kv(kb))"),
    ("decode step at the full context, not the mean", "ctx = prompt + output / 2", "ctx = prompt + output"),
    ("decode step reads no KV cache", "attention = batch * context * kv(c) / (g.bandwidth * n)", "attention = 0"),
    ("KV reads hidden under the arithmetic (the source's max form)", "return attention + max(weights, compute)",
     "return max(attention + weights, compute)"),
    ("KV without the factor 2 for keys and values", "return 2 * m.num_layers", "return m.num_layers"),
    ("bandwidth of one GPU, not num_gpus", "weights = wbytes(w) / (g.bandwidth * n)",
     "weights = wbytes(w) / g.bandwidth"),
    ("the embedding and output head quantized with the rest", "return (N - T) * w + 2 * T", "return N * w"),
    ("FP8 weights keep the BF16 FLOP/s", "peak = g.flops_fp8 if (w == 1 and g.flops_fp8) else g.flops_bf16",
     "peak = g.flops_bf16"),
    ("a multiply-add counted as 1 FLOP", "compute = 2 * N * batch", "compute = N * batch"),
    ("quantization lever quantizes the weights only", "metric(w=1, c=1)", "metric(w=1)"),
    ("quantization lever quantizes the KV cache only", "metric(w=1, c=1)", "metric(c=1)"),
    ("prefix caching computes the whole prompt", "max(1, round(prompt * (1 - hit)))", "prompt"),
    ("speculative verify pass as cheap as a normal step", 'verify = step(conc, ctx, tokens_per_seq=dep["k"] + 1)[0]',
     "verify = plain"),
    ("speculative draft steps free", ' + k * dep["draft_cost"] * plain', ""),
    ("speculative draft step costed as draft_cost x the verify pass", 'k * dep["draft_cost"] * plain',
     'k * dep["draft_cost"] * verify'),
    ("speculative draft cost fixed at the default", 'k * dep["draft_cost"] * plain', "k * 0.05 * plain"),
    ("speculative draft length fixed at the default", 'a, k = dep["alpha"], dep["k"]', 'a, k = dep["alpha"], 4'),
    ("latency divided among the batch like cost", "return pre + output * t / speedup",
     "return pre + output * t / (batch * speedup)"),
    ("cost not shared among the batch", "return pre + output * t / (batch * speedup)", "return pre + output * t / speedup"),
    ("phase compares prefill with the whole decode, not one request's share", "output * plain / conc",
     "output * plain"),
]

# Mutants no hidden check can see, and why: each changes no label and a gain by far less than the 5% tolerance.
EQUIVALENT = [
    # a prefill is memory-bound only for prompts of a few hundred tokens, whose KV writes are a rounding error
    # next to the weights (0.02% of a gain on the hidden set); long prompts are compute-bound
    ("prefill reads no KV cache", "(wbytes(w) + tokens * kv(c))", "(wbytes(w))"),
]


def _cells() -> dict[str, str]:
    nb = json.loads(SOLUTION.read_text())
    return {c["metadata"].get("nbgrader", {}).get("grade_id", ""): "".join(c["source"]) for c in nb["cells"]}


def _hidden_cases(cells: dict[str, str]) -> dict[str, list]:
    cases = {}
    for gid, src in cells.items():
        if gid.startswith("b") and "_cases = [" in src:
            for node in ast.walk(ast.parse(src)):
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_cases":
                    cases[gid] = ast.literal_eval(node.value)
    return cases


def _diagnose(diagnose_source: str, cells: dict[str, str]):
    ns: dict = {}
    exec(cells["setup"], ns)  # noqa: S102 - the course's own solution notebook
    exec(diagnose_source, ns)  # noqa: S102 - a one-line change of it
    return ns["Deployment"], ns["diagnose"]


def _failures(diagnose_source: str, cells: dict[str, str]) -> dict[str, str]:
    """The hidden B checks a ``diagnose`` built from this source fails (as the grader runs them), each with the
    message of its first failure."""
    deployment, diagnose = _diagnose(diagnose_source, cells)
    failed = {}
    for gid, cases in sorted(_hidden_cases(cells).items()):
        fields = ["phase", "decode_bound"] if gid == "b1_phase_bound" else ["best_lever", "gain"]
        for case in cases:
            dep = deployment(*case[:7], **case[7])
            try:
                with unavailable(*DIAGNOSIS_BLOCKED):
                    got = diagnose(dict(dep))
                check_diagnosis(gid, got, dep, fields=fields,
                                **({} if gid == "b1_phase_bound" else {"gain_factor": FUNCTION_GAIN_FACTOR}))
            except Exception as err:  # noqa: BLE001 - a failed check or a crash both fail it
                failed[gid] = str(err)
                break
    return failed


def _failed_checks(diagnose_source: str, cells: dict[str, str]) -> list[str]:
    """The hidden B checks a ``diagnose`` built from this source fails."""
    return list(_failures(diagnose_source, cells))


@pytest.fixture(scope="module")
def cells():
    return _cells()


def test_the_solution_passes_every_hidden_check(cells):
    assert _failed_checks(cells["diagnose_answer"], cells) == []


@pytest.mark.parametrize(("rule", "old", "new"), MUTANTS, ids=[m[0] for m in MUTANTS])
def test_every_rule_mutant_is_caught(cells, rule, old, new):
    source = cells["diagnose_answer"]
    assert source.count(old) == 1, f"the mutant {rule!r} no longer applies: {old!r} is not in the solution once"
    assert _failed_checks(source.replace(old, new), cells), f"no hidden ex03 check catches: {rule}"


@pytest.mark.parametrize(("rule", "old", "new"), EQUIVALENT, ids=[m[0] for m in EQUIVALENT])
def test_the_equivalent_mutants_change_nothing_graded(cells, rule, old, new):
    """Listed as equivalent: on every hidden deployment the same labels and a gain within 1% of the solution's
    (if a hidden case ever sees one, it belongs in MUTANTS)."""
    source = cells["diagnose_answer"]
    assert source.count(old) == 1, f"the mutant {rule!r} no longer applies"
    deployment, right = _diagnose(source, cells)
    _, mutant = _diagnose(source.replace(old, new), cells)
    for cases in _hidden_cases(cells).values():
        for case in cases:
            dep = dict(deployment(*case[:7], **case[7]))
            want, got = right(dep), mutant(dep)
            assert [got[k] for k in ("phase", "decode_bound", "best_lever")] == \
                [want[k] for k in ("phase", "decode_bound", "best_lever")], (rule, case)
            assert got["gain"] == pytest.approx(want["gain"], rel=0.01), (rule, case)


def test_a_deployments_own_slo_is_named_in_its_feedback_label():
    """A hidden case with a tighter TPOT SLO says so where feedback names the deployment (the default does not)."""
    from stage5.grading import describe_deployment

    dep = dict(model="llama3.2-3b", gpu="L4", num_gpus=1, prompt=128, output=256, concurrency=1, objective="cost")
    assert "SLO" not in describe_deployment(dep) and "SLO" not in describe_deployment({**dep, "tpot_slo_s": 0.05})
    assert describe_deployment({**dep, "tpot_slo_s": 0.025}).endswith("objective cost, TPOT SLO 25 ms")
