"""Chapters 11 and 12's formulas: tensor parallelism, experts touched, long-context crossovers, moving a cache,
draft costs. Each is checked against the physics it encodes, not against its own output."""

from itertools import combinations, product

import numpy as np
import pytest

from stage5 import cost, drafters, scaling
from stage5 import long_context as lc
from stage5.hardware import get_gpu
from stage5.models import get_model
from stage5.names import UnknownNameError

GPUS = [1, 2, 4, 8, 16, 32]


# ------------------------------------------------------------------------------------ tensor parallelism
def test_per_gpu_ridge_and_compute_bound_batch_do_not_move_with_gpu_count():
    one, eight = (cost.Deployment.of("llama3-8b", "H100-SXM", n) for n in (1, 8))
    gpu = get_gpu("H100-SXM")
    assert scaling.per_gpu_ridge(one) == pytest.approx(gpu.flops() * one.mfu / gpu.bandwidth)
    assert scaling.per_gpu_ridge(eight) == pytest.approx(scaling.per_gpu_ridge(one))
    b = scaling.compute_bound_batch(one)
    assert scaling.compute_bound_batch(eight) == b
    assert cost.decode_step(one, b).compute_bound and not cost.decode_step(one, b - 1).compute_bound


def test_compute_bound_batch_says_when_it_never_turns():
    with pytest.raises(ValueError, match="memory-bound"):
        scaling.compute_bound_batch(cost.Deployment.of("llama3-8b", "H100-SXM"), context=1e6, max_batch=64)


def test_tp_breakdown_divides_reads_by_n_and_adds_allreduces():
    bd = scaling.tp_breakdown("llama3-8b", "H100-SXM", GPUS, batch=1, context=1024)
    n = np.array(GPUS)
    assert bd.weights_s * n == pytest.approx(np.full(len(GPUS), bd.weights_s[0]))
    # KV reads split over the 8 KV heads, then stop falling: past 8 GPUs each holds one replicated head
    kv_heads = get_model("llama3-8b").num_kv_heads
    assert bd.kv_s * np.minimum(n, kv_heads) == pytest.approx(np.full(len(GPUS), bd.kv_s[0]))
    assert bd.allreduce_s[0] == 0 and np.all(np.diff(bd.allreduce_s) > 0)
    # estimate mode adds the KV kernel, the all-reduces and the engine's fixed step time to the larger roofline term
    assert bd.engine_s == pytest.approx(np.full(len(GPUS), cost.ENGINES["graphs"].step_s)) and bd.engine_s[0] > 0
    assert bd.tpot_s == pytest.approx(np.maximum(bd.weights_s, bd.compute_s) + bd.kv_s + bd.allreduce_s + bd.engine_s)
    assert bd.best_gpus == GPUS[int(np.argmin(bd.tpot_s))]
    assert 1 < bd.best_gpus < GPUS[-1]  # the all-reduces turn the curve up inside the sweep


def test_without_the_allreduce_more_gpus_always_help():
    bd = scaling.tp_breakdown("llama3-8b", "H100-SXM", GPUS, estimate=cost.Estimate().without("allreduce"))
    assert np.all(np.diff(bd.tpot_s) < 0) and bd.best_gpus == GPUS[-1]


@pytest.mark.parametrize("gpus", [[], [0, 2], [1.5], [[1, 2]]])
def test_tp_breakdown_refuses_bad_counts(gpus):
    with pytest.raises(ValueError, match="positive whole GPU counts"):
        scaling.tp_breakdown("llama3-8b", "H100-SXM", gpus)


# ------------------------------------------------------------------------------------ experts
def test_experts_touched_matches_exhaustive_enumeration():
    e, k = 6, 2
    subsets = list(combinations(range(e), k))
    for b in (1, 2, 3):
        exact = np.mean([len(set().union(*picks)) for picks in product(subsets, repeat=b)])
        assert float(cost.experts_touched(e, k, b)) == pytest.approx(exact)


def test_expert_coverage_batch_is_the_first_to_reach_the_fraction():
    mix = get_model("mixtral-8x7b")
    b = scaling.batch_for_expert_coverage(mix, 0.99)
    touched = cost.experts_touched(mix.num_experts, mix.experts_per_token, [b - 1, b])
    assert touched[0] < 0.99 * mix.num_experts <= touched[1]
    with pytest.raises(ValueError, match="dense"):
        scaling.batch_for_expert_coverage(get_model("llama3-8b"), 0.9)
    with pytest.raises(ValueError, match="0 < fraction < 1"):
        scaling.batch_for_expert_coverage(mix, 1.0)


def test_moe_weight_reads_grow_from_active_to_total():
    dep = cost.Deployment.of("mixtral-8x7b", "H100-SXM", 2)
    reads = cost.weight_bytes_read(dep, [1, 10_000])
    assert reads[0] == pytest.approx(dep.model.active_params * 2)
    assert reads[1] == pytest.approx(dep.weight_total_bytes)


# ------------------------------------------------------------------------------------ long context
@pytest.mark.parametrize("batch", [1, 16])
def test_kv_reads_equal_weight_reads_at_the_crossover(batch):
    dep = cost.Deployment.of("llama3-8b", "H100-SXM")
    s = lc.kv_weight_crossover_context(dep, batch)
    assert float(cost.kv_traffic_bytes(dep, batch, s)) == pytest.approx(float(cost.weight_bytes_read(dep, batch)))


def test_attention_equals_linear_flops_at_the_crossover_prompt():
    m = get_model("llama3-70b")
    p = lc.attention_linear_crossover_prompt(m)
    assert float(cost.attention_flops(m, p)) == pytest.approx(2 * m.active_params * p)
    assert float(cost.attention_flops(m, 2 * p)) > 2 * 2 * m.active_params * p


def test_score_traffic_is_quadratic_and_kv_linear():
    m = get_model("llama3-8b")
    assert float(lc.score_matrix_bytes(m, 8192) / lc.score_matrix_bytes(m, 4096)) == pytest.approx(4)


def test_swap_moves_the_cache_twice_over_every_gpu_link():
    one, four = (cost.Deployment.of("llama3-70b", "H100-SXM", n) for n in (1, 4))
    link = lc.host_link(one.gpu)
    assert float(lc.swap_s(one, 4096)) == pytest.approx(2 * 4096 * one.kv_bytes_per_token / link)
    assert float(lc.swap_s(four, 4096)) == pytest.approx(float(lc.swap_s(one, 4096)) / 4)
    assert float(lc.recompute_s(one, 4096)) == pytest.approx(float(cost.prefill_step(one, 4096).time_s))


def test_kv_transfer_and_host_links_refuse_what_they_do_not_know():
    dep = cost.Deployment.of("llama3-8b", "B200")
    with pytest.raises(UnknownNameError, match="host-link"):
        lc.host_link(dep.gpu)
    with pytest.raises(ValueError, match="positive bandwidth"):
        lc.kv_transfer_s(dep, 1024, link_bytes_per_s=0)
    assert float(lc.kv_transfer_s(dep, 1024, 1e9)) == pytest.approx(1024 * dep.kv_bytes_per_token / 1e9)


def test_prefix_hits_shrink_the_chunks_a_decode_step_carries():
    est = cost.Deployment.of("llama3-8b", "H100-SXM", estimate=cost.Estimate())
    tpot = cost.mixed_tpot_s(est, 16, 8192, 64, np.array([0.0, 0.5, 0.9, 1.0]))
    assert np.all(np.diff(tpot) < 0)
    assert tpot[-1] == pytest.approx(float(cost.decode_step(est, 16, 8192 + 32).time_s))
    for mode in ("simple", "floor"):  # no mixed steps: the prefix hit leaves their decode step alone
        dep = cost.with_mode(cost.Deployment.of("llama3-8b", "H100-SXM"), mode)
        assert float(cost.mixed_tpot_s(dep, 16, 8192, 64, 0.9)) == float(cost.mixed_tpot_s(dep, 16, 8192, 64))


# ------------------------------------------------------------------------------------ drafters
def test_draft_costs_follow_bytes():
    target, draft = get_model("llama3-8b"), get_model("llama3.2-1b")
    # at batch 1 and no context both floors are weight reads, so the cost is the ratio of parameter counts
    assert drafters.draft_model_cost(target, draft, "H100-SXM") == pytest.approx(draft.num_params / target.num_params)
    # EAGLE's decoder layer is larger than a Medusa head's hidden x hidden block; both read one output head
    assert drafters.eagle_cost(target) > drafters.medusa_cost(target) > target.vocab_size * target.hidden_size / target.active_params
    assert drafters.NGRAM_COST == 0
