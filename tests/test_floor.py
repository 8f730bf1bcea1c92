"""The floor is a floor: for every GPU of the registry and every weight format, at or below the estimate and the simple
estimate, and at or below every published measurement (stage5.published)."""

import itertools
from dataclasses import replace

import numpy as np
import pytest

from stage5 import cost, validate
from stage5.hardware import GPUS, Hardware
from stage5.quantization import WEIGHT_FORMATS, deployment

# A grid a kernel could meet: a dense model with an untied head, a small one with a tied head, a mixture of experts.
MODELS = ("llama3-8b", "llama3.2-1b", "mixtral-8x7b")
BATCHES = np.array([1, 8, 64, 512])
CONTEXTS = np.array([0, 512, 8192])
PROMPTS = np.array([1, 32, 512, 4096])


def _deployments():
    for gpu, weights, model in itertools.product(GPUS, WEIGHT_FORMATS, MODELS):
        try:
            dep = deployment(model, gpu, 1, weights)
            cost.kv_budget_bytes(dep)
        except cost.InfeasibleDeployment:
            continue  # the weights do not fit this GPU: nothing to price
        yield gpu, weights, model, dep


CASES = list(_deployments())


def test_the_grid_covers_every_gpu_and_format():
    assert {g for g, *_ in CASES} == set(GPUS)
    assert {w for _, w, *_ in CASES} == set(WEIGHT_FORMATS)


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_for_every_gpu_and_format_the_floor_is_at_or_below_both_estimates(gpu):
    b, s = np.meshgrid(BATCHES, CONTEXTS)
    for _, weights, model, dep in (c for c in CASES if c[0] == gpu):
        floor = cost.floor_deployment(dep)
        for other in (cost.estimate_deployment(dep), cost.simple_deployment(dep)):
            where = f"{model} {weights} on {gpu}, {cost.mode_of(other)}"
            assert np.all(cost.decode_step(floor, b, s).time_s <= cost.decode_step(other, b, s).time_s + 1e-15), where
            assert np.all(cost.prefill_step(floor, PROMPTS).time_s <= cost.prefill_step(other, PROMPTS).time_s), where
            assert np.all(cost.mixed_tpot_s(floor, 64, PROMPTS, 128) <= cost.mixed_tpot_s(other, 64, PROMPTS, 128)), where
        # the floor's matmul rate is the fastest the chip has for the format's precision, never below the estimate's
        assert cost.tensor_format(floor)[1] >= cost.tensor_format(cost.estimate_deployment(dep))[1]


def test_the_floor_is_at_or_below_every_published_row():
    rows = validate.rows()
    late = [(r.id, r.metric, round(r.floor_ratio, 3)) for r in rows if r.floor > r.measured]
    assert not late, late


def test_the_4090_floor_prices_fp16_accumulation():
    dep = deployment("llama3-8b", "RTX-4090", 1, "bf16")
    assert cost.tensor_format(cost.floor_deployment(dep)) == ("fp16/fp16", 330.3e12)
    assert cost.tensor_format(cost.estimate_deployment(dep)) == ("bf16/fp32", 165.2e12)
    # without FP16 accumulation in the table, the floor's arithmetic would take twice as long
    fp32_only = Hardware("4090, FP32 accumulation only", (("bf16/fp32", 165.2e12),), dep.gpu.bandwidth,
                         dep.gpu.memory_bytes, "test")
    fast = cost.prefill_step(cost.floor_deployment(dep), 8192).compute_s
    slow = cost.prefill_step(cost.floor_deployment(replace(dep, gpu=fp32_only)), 8192).compute_s
    assert float(slow) == pytest.approx(2 * float(fast), rel=1e-3)
