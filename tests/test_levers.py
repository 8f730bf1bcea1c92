"""The levers: cost terms, the reference diagnosis ex03 builds on, the ranking, and the router simulation."""

import numpy as np
import pytest

from stage5 import cost, levers, routing
from stage5.quantization import deployment

ARGS = ("llama3-70b", "H100-SXM", 4)


def test_cost_terms_multiply_to_the_cost_model():
    dep = deployment(*ARGS)
    t = levers.cost_terms(dep, 64, 1152)
    assert t.dollars_per_million == pytest.approx(float(cost.cost_per_million_tokens(dep, 64, 1152)))


def test_diagnosis_of_a_chat_deployment():
    d = levers.diagnose_reference(*ARGS, 1024, 256, 16, "cost")
    assert set(d.gains) == set(levers.LEVERS)
    assert d.best_lever == "batching" and d.phase == "decode" and d.decode_bound == "memory"
    assert d.batching_target == d.max_concurrency == 400
    # FP8 halves every byte and FLOP the simple estimate charges but the 16-bit embedding and head (3% of the weights)
    assert 1.95 < d.gains["quantization"] < 2.0
    assert 1 < d.gains["speculative"] < d.gains["batching"]


def test_latency_objective_penalises_batching_and_favours_speculation():
    d = levers.diagnose_reference(*ARGS, 1024, 256, 16, "latency")
    assert d.gains["batching"] < 1
    assert d.best_lever == "speculative"


def test_prefill_heavy_deployment_is_prefill_bound():
    d = levers.diagnose_reference(*ARGS, 8192, 128, 8)
    assert d.phase == "prefill" and d.prefill_share > 0.5
    assert d.gains["prefix_caching"] > d.gains["speculative"]


def test_slo_caps_the_batching_lever():
    d = levers.diagnose_reference(*ARGS, 1024, 256, 16, tpot_slo_s=0.02)
    dep = deployment(*ARGS)
    assert float(cost.tpot_s(dep, d.batching_target, 1152)) <= 0.02 < float(cost.tpot_s(dep, d.batching_target + 1,
                                                                                         1152))


def test_no_lever_gain_when_already_applied():
    d = levers.diagnose_reference(*ARGS, 1024, 256, 16, weights="fp8", kv="fp8", prefix_hit=0.0, k=0)
    assert d.gains["quantization"] == d.gains["prefix_caching"] == d.gains["speculative"] == pytest.approx(1.0)


def test_infeasible_and_invalid_inputs_raise():
    with pytest.raises(cost.InfeasibleDeployment):
        levers.diagnose_reference(*ARGS, 4096, 256, 1000)
    with pytest.raises(cost.InfeasibleDeployment):
        levers.diagnose_reference("llama3-70b", "H100-SXM", 1, 1024, 256, 1)
    with pytest.raises(ValueError):
        levers.diagnose_reference(*ARGS, 1024, 256, 16, "throughput")


def test_ranking_order():
    r = levers.lever_ranking()
    assert r["batching"] > r["routing"] > r["quantization"] > r["kernels"] > 1
    # the source's 5-10x for batching is what its max(weights + KV, FLOPs) step gives; with attention's KV reads
    # added (the course's step, chapter 2) the extra sequences' reads no longer hide, and the lever is smaller
    source = levers.lever_ranking(estimate=cost.Estimate.only(mfu=cost.DEFAULT_MFU))
    assert 5 <= source["batching"] <= 10
    assert 3 <= r["batching"] < source["batching"]


def test_blended_saving_bounds():
    assert float(routing.blended_saving(0, 0.2)) == 1
    assert float(routing.blended_saving(1, 0.2)) == pytest.approx(5)
    with pytest.raises(ValueError):
        routing.blended_saving(1.5, 0.2)


def test_a_better_evaluation_widens_the_safe_band():
    widths = [routing.simulate_router(ratio=0.2, eval_size=n, judge_error=e).width
              for n, e in ((np.inf, 0), (2000, 0.005), (200, 0.03))]
    assert widths[0] > widths[1] > widths[2] >= 0
    curve = routing.simulate_router(ratio=0.2)
    assert np.all(np.diff(curve.false_cheap) >= 0) and np.all(np.diff(curve.false_expensive) <= 0)
