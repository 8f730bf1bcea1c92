"""Speculative decoding: greedy output equals the target's; sampled output follows the target distribution."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
import torch

from stage5.engine.checkpoints import checkpoint_path, corpus_split, load_draft, load_target
from stage5.engine.model import Transformer
from stage5.engine.sequence import Request
from stage5.engine.speculative import (
    DraftModelDrafter,
    PromptLookupDrafter,
    SpeculativeEngine,
    accept_or_resample,
    verify,
)
from tests.test_engine import CFG

torch.set_num_threads(1)

BLOCK = 8
DRAFT_CFG = replace(CFG, name="tiny-draft", hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1,
                    intermediate_size=24)


@pytest.fixture(scope="module")
def draft64():
    torch.manual_seed(5)
    model = Transformer(DRAFT_CFG).double().eval()
    for p in model.parameters():
        p.data.normal_(0, 0.3)
    return model


def drafters(model64, draft64):
    return {"same_model": DraftModelDrafter(model64, CFG, 40, BLOCK),
            "weak_model": DraftModelDrafter(draft64, DRAFT_CFG, 40, BLOCK),
            "prompt_lookup": PromptLookupDrafter()}


@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_speculation_equals_target_greedy(model64, draft64, requests, reference, k):
    for name, drafter in drafters(model64, draft64).items():
        engine = SpeculativeEngine(model64, CFG, drafter, k=k, num_blocks=40, block_size=BLOCK, max_batch=6)
        forward = engine.runner.forward

        def checked(batch, forward=forward, engine=engine):
            tables = [b for s in batch for b in s.block_table]
            assert len(tables) == len(set(tables)), "a block is in two tables"
            return forward(batch)

        engine.runner.forward = checked
        result = engine.run(requests)
        for r in requests:
            assert result.outputs[r.id] == reference[r.id], (name, k, r.id)
        assert result.output_tokens == sum(r.output_len for r in requests)
        # no leaks: every block of the target's pool, and of the draft model's, is back on its free list
        assert sorted(engine.alloc.free_blocks) == list(range(40)) and not any(engine.alloc.ref_count)
        if isinstance(drafter, DraftModelDrafter):
            assert len(drafter.runner.alloc.free_blocks) == 40 and not drafter.shadows
        if name == "same_model":
            assert result.alpha == 1.0 and result.tokens_per_verification == k + 1
            assert result.steps < sum(r.output_len for r in requests)


def test_rejected_slots_are_released(model64, draft64):
    engine = SpeculativeEngine(model64, CFG, DraftModelDrafter(draft64, DRAFT_CFG, 40, BLOCK), k=6,
                               num_blocks=40, block_size=BLOCK, max_batch=1)
    truncate = engine.runner.truncate
    freed = []

    def watched(seq, keep_tokens, keep_cached):
        before = len(seq.block_table)
        truncate(seq, keep_tokens, keep_cached)
        assert len(seq.block_table) == -(-keep_tokens // BLOCK)  # exactly the blocks the kept tokens need
        freed.append(before - len(seq.block_table))

    engine.runner.truncate = watched
    result = engine.run([Request(0, (1, 2, 3, 4, 5, 6, 7), 40)])
    assert result.alpha < 0.5 and sum(freed) > 0  # the weak drafter is rejected often; whole blocks come back


# ------------------------------------------------------------------------------ statistics
def wrong_resample_from_target(p, q, x, g):
    """Bug: on rejection draw from p itself instead of the residual max(p - q, 0)."""
    accepted, token = accept_or_resample(p, q, x, g)
    return (True, x) if accepted else (False, int(torch.multinomial(p, 1, generator=g)))


def wrong_accept_with_p(p, q, x, g):
    """Bug: accept with probability p(x), ignoring the draft's own probability."""
    if torch.rand((), generator=g, dtype=p.dtype) < p[x]:
        return True, x
    residual = torch.clamp(p - q, min=0)
    return False, int(torch.multinomial(residual / residual.sum(), 1, generator=g))


def wrong_inverted_ratio(p, q, x, g):
    """Bug: accept with min(1, q(x) / p(x))."""
    if torch.rand((), generator=g, dtype=p.dtype) < torch.clamp(q[x] / p[x], max=1):
        return True, x
    residual = torch.clamp(p - q, min=0)
    return False, int(torch.multinomial(residual / residual.sum(), 1, generator=g))


def ratio_without_min(p, q, x, g):
    """Accept when u < p(x) / q(x) with no min: u < 1 always, so this is the correct rule in disguise."""
    if torch.rand((), generator=g, dtype=p.dtype) < p[x] / q[x]:
        return True, x
    residual = torch.clamp(p - q, min=0)
    return False, int(torch.multinomial(residual / residual.sum(), 1, generator=g))


# a 3-token Markov chain for the target and a quite different one for the drafter
P = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.2, 0.6], [0.1, 0.7, 0.2]], dtype=torch.float64)
Q = torch.tensor([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1], [0.3, 0.3, 0.4]], dtype=torch.float64)
LENGTH, K, SAMPLES, SEED = 3, 2, 3000, 0


def speculative_chain(rule, samples: int = SAMPLES, seed: int = SEED) -> torch.Tensor:
    """Empirical distribution over the 27 three-token continuations of state 0, drawn speculatively."""
    g = torch.Generator().manual_seed(seed)
    counts = torch.zeros(3 ** LENGTH, dtype=torch.float64)
    for _ in range(samples):
        out = [0]
        while len(out) < LENGTH + 1:
            drafts, prev = [], out[-1]
            for _ in range(K):
                prev = int(torch.multinomial(Q[prev], 1, generator=g))
                drafts.append(prev)
            context = [out[-1]] + drafts
            out += verify(P[context], Q[context[:-1]], drafts, g, rule)
        a, b, c = out[1:LENGTH + 1]
        counts[9 * a + 3 * b + c] += 1
    return counts / samples


def chain_truth() -> torch.Tensor:
    truth = torch.zeros(27, dtype=torch.float64)
    for a, b, c in itertools.product(range(3), repeat=3):
        truth[9 * a + 3 * b + c] = P[0, a] * P[a, b] * P[b, c]
    return truth


def tv(p: torch.Tensor, q: torch.Tensor) -> float:
    return float((p - q).abs().sum() / 2)


TV_LIMIT = 0.1  # the right rule gives 0.026-0.040 at 3000 samples (seeds 0-2); the wrong ones 0.21-0.61


def test_right_rule_reproduces_target_and_wrong_rules_fail_on_a_synthetic_chain():
    truth = chain_truth()
    assert tv(speculative_chain(accept_or_resample), truth) < TV_LIMIT
    for wrong in (wrong_resample_from_target, wrong_accept_with_p, wrong_inverted_ratio):
        assert tv(speculative_chain(wrong), truth) > TV_LIMIT, wrong.__name__
    # dropping the min changes nothing: a uniform draw is below 1 anyway
    assert torch.equal(speculative_chain(ratio_without_min, 300), speculative_chain(accept_or_resample, 300))


def wrong_rule_outputs(p: torch.Tensor, q: torch.Tensor) -> list[torch.Tensor]:
    """What the two wrong rules produce in exact arithmetic (one drafted token x ~ q)."""
    residual = torch.clamp(p - q, min=0)
    residual = residual / residual.sum()
    overlap = torch.minimum(p, q)
    return [overlap + (1 - overlap.sum()) * p, q * p + (1 - (q * p).sum()) * residual]


@pytest.mark.skipif(not checkpoint_path("draft").exists(), reason="checkpoints not trained")
def test_rule_on_the_trained_pair_at_temperature_one():
    target, _ = load_target()
    draft, _ = load_draft()
    held_out = corpus_split()[1]
    contexts = torch.stack([torch.tensor(list(held_out[i:i + 48])) for i in range(0, 8000, 100)])
    with torch.no_grad():
        ps = torch.softmax(target.score(contexts)[:, -1].double(), -1)
        qs = torch.softmax(draft.score(contexts)[:, -1].double(), -1)
    # the context where the wrong rules are furthest from the target is where a test has most power
    gaps = [min(tv(w, p) for w in wrong_rule_outputs(p, q)) for p, q in zip(ps, qs, strict=True)]
    best = max(range(len(gaps)), key=gaps.__getitem__)
    p, q, limit = ps[best], qs[best], gaps[best] / 2
    assert limit > 0.06
    support = torch.nonzero(p + q > 0.02).flatten()  # bins with visible mass; the rest pooled into one

    def pool(dist):
        return torch.cat([dist[support], dist.sum(0, keepdim=True) - dist[support].sum(0, keepdim=True)])

    def histogram(rule, n=3000):
        g = torch.Generator().manual_seed(1)
        tokens = [rule(p, q, int(torch.multinomial(q, 1, generator=g)), g)[1] for _ in range(n)]
        return pool(torch.bincount(torch.tensor(tokens), minlength=p.numel()).double() / n)

    assert tv(histogram(accept_or_resample), pool(p)) < limit
    for wrong in (wrong_resample_from_target, wrong_accept_with_p):
        assert tv(histogram(wrong), pool(p)) > limit, wrong.__name__


@pytest.mark.skipif(not checkpoint_path("draft").exists(), reason="checkpoints not trained")
def test_speculative_engine_samples_from_the_target_on_the_trained_pair():
    """Through the whole engine at temperature 1: the token decided by draft-then-verify follows the target.

    With k = 1 and max_tokens = 3, the first new token comes from the prefill pass and the second from one
    draft-and-verify round, so the second token given the first is exactly what the rule decides. The prompt
    is the held-out context where a wrong rule would move that distribution furthest, and the same engine run
    with a wrong rule must fail the same check.
    """
    target, tcfg = load_target()
    draft, dcfg = load_draft()
    held_out = corpus_split()[1]
    best = None
    with torch.no_grad():
        for i in range(0, 6000, 150):
            ctx = list(held_out[i:i + 40])
            first = int(target.score(torch.tensor([ctx]))[0, -1].argmax())
            ctx2 = torch.tensor([ctx + [first]])
            p = torch.softmax(target.score(ctx2)[0, -1].double(), -1)
            q = torch.softmax(draft.score(ctx2)[0, -1].double(), -1)
            p_first = float(torch.softmax(target.score(torch.tensor([ctx]))[0, -1].double(), -1)[first])
            gap = min(tv(w, p) for w in wrong_rule_outputs(p, q))
            if p_first > 0.5 and (best is None or gap > best[0]):
                best = (gap, ctx, first, p)
    gap, ctx, first, p = best
    limit = gap / 2
    assert limit > 0.05
    support = torch.nonzero(p > 0.02).flatten()

    def pooled(dist: torch.Tensor) -> torch.Tensor:
        return torch.cat([dist[support], (1 - dist[support].sum()).reshape(1)])

    def second_tokens(rule, n=1200) -> torch.Tensor:
        engine = SpeculativeEngine(target, tcfg, DraftModelDrafter(draft, dcfg, num_blocks=512), k=1,
                                   temperature=1.0, seed=3, num_blocks=512, max_batch=96, rule=rule)
        result = engine.run([Request(i, tuple(ctx), 3) for i in range(n)])
        seconds = [out[1] for out in result.outputs.values() if out[0] == first]
        assert len(seconds) > n // 3
        return pooled(torch.bincount(torch.tensor(seconds), minlength=p.numel()).double() / len(seconds))

    assert tv(second_tokens(accept_or_resample), pooled(p)) < limit
    assert tv(second_tokens(wrong_resample_from_target), pooled(p)) > limit


def test_a_tiny_temperature_gives_the_greedy_limit_not_nan():
    """softmax(logits / T) overflows for a tiny T; the shared helper must return its limit, all mass on the
    largest logit, so a sampling engine given T = 1e-310 behaves greedily instead of crashing on NaN."""
    from stage5.engine.model import probs

    logits = torch.tensor([[1.0, 3.0, -2.0], [0.5, 0.5, 0.0]])
    p = probs(logits, 1e-310)  # 3 / 1e-310 overflows float64
    assert torch.isfinite(p).all()
    assert p[0].tolist() == [0.0, 1.0, 0.0] and p[1].tolist() == [0.5, 0.5, 0.0]
    assert torch.allclose(probs(logits, 1.0), torch.softmax(logits.double(), dim=-1))


# ------------------------------------------------------------------------------------------ the cost model's verdict
def test_the_break_even_batch_moves_out_with_context_while_the_full_batch_moves_in():
    """Chapter 7 and the clearing test's Q6: on the anchor deployment speculation slows a full batch of short
    sequences and speeds up a full batch of long ones."""
    from stage5 import cost

    dep = cost.Deployment.of("llama3-70b", "H100-SXM", 4)
    breakeven = {s: cost.speculation_breakeven_batch(dep, s, 0.7, 4, max_batch=4096) for s in (1280, 4096, 16384)}
    full = {s: int(cost.max_concurrency(dep, s)) for s in breakeven}
    assert breakeven[1280] < full[1280] and breakeven[4096] > full[4096] and breakeven[16384] is None
    assert full[1280] > full[4096] > full[16384]
    # searched only up to what fits (the default), a full batch at 4K and 16K never reaches break-even
    assert cost.speculation_breakeven_batch(dep, 4096, 0.7, 4) is None
    assert cost.speculation_breakeven_batch(dep, 1280, 0.7, 4) == breakeven[1280]
    for s, b in breakeven.items():
        at_full = float(cost.speculative_speedup(dep, full[s], s, 0.7, 4))
        assert (at_full < 1) == (b is not None and b <= full[s]), s
        if b is not None:  # the first slower batch: one fewer still paid
            assert cost.speculative_speedup(dep, b, s, 0.7, 4) < 1 <= cost.speculative_speedup(dep, b - 1, s, 0.7, 4)


def test_speculation_pays_at_any_batch_past_the_context_the_additive_step_gives():
    """The docstring's argument: attention's KV reads cost both passes alike, so past the context where, at a large
    batch, a round's extra arithmetic and draft steps cost less than its extra tokens, speculation never stops
    paying; below it, a large enough batch always makes it slower."""
    import numpy as np

    from stage5 import cost

    dep = cost.Deployment.of("llama3-70b", "H100-SXM", 4)
    k, alpha, d = 4, 0.7, 0.05
    edge = cost.speculation_any_batch_context(dep, alpha, k, d)
    # computed apart: per sequence, K = S x KV bytes / bandwidth and C = 2N / (peak x MFU)
    tau = (1 - alpha ** (k + 1)) / (1 - alpha)
    c = 2 * dep.model.active_params / (dep.gpu.flops_bf16 * dep.mfu * dep.num_gpus)
    ratio = (k + 1 + k * d - tau) / (tau - 1 - k * d)
    assert edge == pytest.approx(ratio * c * dep.gpu.bandwidth * dep.num_gpus / dep.kv_bytes_per_token, rel=1e-12)
    # at that context the speedup tends to 1 as the batch grows, and it falls with the batch
    assert float(cost.speculative_speedup(dep, 10**8, edge, alpha, k, d)) == pytest.approx(1.0, abs=1e-3)
    previous = 0
    for s in np.geomspace(512, 4 * edge, 12).astype(int):
        b = cost.speculation_breakeven_batch(dep, int(s), alpha, k, d, max_batch=20_000)
        if s > 1.01 * edge:
            assert b is None, s
        if b is not None:
            assert b >= previous, "a longer context cannot bring the break-even batch in"
            previous = b
    assert cost.speculation_breakeven_batch(dep, int(edge / 4), alpha, k, d, max_batch=20_000) is not None
    # drafts that cost more than the tokens they add never pay at a large batch, whatever the context
    assert cost.speculation_any_batch_context(dep, 0.1, 4, 0.5) is None


@pytest.mark.parametrize("kwargs", [dict(context=0), dict(context=float("nan")), dict(k=-1), dict(k=2.5),
                                    dict(max_batch=0), dict(alpha=1.5)])
def test_the_break_even_batch_refuses_bad_input_with_one_line(kwargs):
    from stage5 import cost

    dep = cost.Deployment.of("llama3-70b", "H100-SXM", 4)
    args = dict(context=1280, alpha=0.7, k=4) | kwargs
    with pytest.raises(ValueError) as err:
        cost.speculation_breakeven_batch(dep, **args)
    assert "\n" not in str(err.value)


def test_the_clearing_tests_q6_answer_agrees_with_the_cost_model():
    """Q6 is marked by hand against its mark scheme: the numbers the scheme calls correct must be the course's."""
    import json
    import re
    from pathlib import Path

    from stage5 import cost

    nb = json.loads((Path(__file__).resolve().parents[1] / "solutions" / "clearing" / "clearing.ipynb").read_text())
    scheme = next("".join(c["source"]) for c in nb["cells"]
                  if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "q6_written")
    dep = cost.Deployment.of("llama3-70b", "H100-SXM", 4)
    full = {s: int(cost.max_concurrency(dep, s)) for s in (1280, 4096, 16384)}
    speed = {s: float(cost.speculative_speedup(dep, b, s, 0.7, 4)) for s, b in full.items()}
    said = f"{speed[1280]:.2f}x at the {full[1280]} that fit"
    assert said in scheme, said
    assert f"full batch ({full[16384]})" in scheme and f"~{speed[16384]:.1f}x" in scheme
    assert f"~{speed[4096]:.1f}x at a full 4K batch of {full[4096]}" in scheme
    assert speed[1280] < 1 < speed[4096] < speed[16384]
    about = int(re.search(r"below 1x from about batch (\d+) at 1,280 tokens", scheme).group(1))
    assert abs(about - cost.speculation_breakeven_batch(dep, 1280, 0.7, 4)) <= 0.05 * about
    assert f"{float(cost.expected_tokens_per_verification(0.7, 4)):.1f} tokens" in scheme
    edge = cost.speculation_any_batch_context(dep, 0.7, 4)
    assert f"past about {round(edge, -2):,.0f} tokens it never comes" in scheme and 4096 < edge < 16384
    ceiling = 2 * dep.model.active_params / (4096 * dep.kv_bytes_per_token)
    assert f"ceiling ~{ceiling:.0f} FLOPs per byte, under the ridge" in scheme and ceiling < dep.flops / dep.bandwidth


def test_tree_verification_is_the_chain_at_width_one_and_a_full_tree_above():
    from stage5.cost import expected_tokens_per_verification, tree_verification

    tokens, scored = tree_verification(0.7, 4, 1)
    assert float(scored) == 5 and float(tokens) == float(expected_tokens_per_verification(0.7, 4))
    tokens2, scored2 = tree_verification(0.7, 4, 2)
    assert float(scored2) == 31  # 1 + 2 + 4 + 8 + 16 positions
    assert math.isclose(float(tokens2), float(expected_tokens_per_verification(1 - 0.3**2, 4)))
    assert float(tokens2) > float(tokens)  # more accepted per round, for six times the positions scored


def test_a_tree_wins_at_batch_one_and_loses_first_on_a_busy_server():
    from stage5 import cost

    dep = cost.Deployment.of("llama3-70b", "H100-SXM", 4)
    chain_1, tree_1 = (float(cost.speculative_speedup(dep, 1, 1280, 0.7, 4, tree_width=w)) for w in (1, 2))
    chain_b, tree_b = (float(cost.speculative_speedup(dep, 128, 1280, 0.7, 4, tree_width=w)) for w in (1, 2))
    assert tree_1 > chain_1 > 1 and tree_b < chain_b
    # width 1 is the formula the chapter derives: tokens x plain step / (verify k + 1 + k draft steps)
    plain = cost.decode_step(dep, 64, 1280).time_s
    verify = cost.decode_step(dep, 64, 1280, tokens_per_seq=5).time_s
    want = float(cost.expected_tokens_per_verification(0.7, 4)) * plain / (verify + 4 * 0.05 * plain)
    assert math.isclose(float(cost.speculative_speedup(dep, 64, 1280, 0.7, 4)), want)


def test_a_one_layer_draft_costs_its_layer_and_the_head():
    from stage5 import cost

    big, small = cost.one_layer_draft_cost("llama3-70b"), cost.one_layer_draft_cost("llama3-8b")
    assert 0.02 < big < 0.04  # one of 80 layers plus a 128K-row head, against 70B parameters
    assert small > big  # fewer layers, and the same head is a larger share of a smaller model
