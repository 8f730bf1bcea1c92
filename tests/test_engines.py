"""The engine as an input of the estimate (cost.ENGINES) and the measured GEMM efficiency that replaced one MFU for
every chip (cost.gemm_efficiency, cost.gemm_s)."""

import numpy as np
import pytest

from stage5 import cost
from stage5.hardware import get_gpu
from stage5.quantization import deployment


def _est(model, gpu, n=1, weights="bf16", **terms):
    return cost.estimate_deployment(deployment(model, gpu, n, weights), cost.Estimate(**terms))


def test_a_graphs_engine_launches_nothing_from_python_and_an_eager_one_its_counted_kernels_at_the_fitted_cost():
    from stage5 import fitted

    graphs, eager = _est("llama3-8b", "H100"), _est("llama3-8b", "H100", engine="eager")
    assert cost.host_s(graphs) == 0.0
    # 42 kernels a layer counted from transformers' LlamaDecoderLayer, at the fitted launch cost; Llama 3 8B: 32 layers
    assert cost.host_s(eager) == pytest.approx(32 * 42 * fitted.LAUNCH_S)
    assert cost.host_s(_est("llama3.2-1b", "H100", engine="eager")) == pytest.approx(16 * 42 * fitted.LAUNCH_S)
    assert cost.host_s(_est("llama3-8b", "H100", engine="fused-eager")) == pytest.approx(32 * 12 * fitted.LAUNCH_S)
    # the graphs engine pays its class's fitted fixed time per step instead, added to the GPU's
    assert cost.step_overhead_s(graphs) == fitted.STEP_S["python-graphs"] > 0
    # the floor and the simple estimate charge no engine costs, whatever the engine
    for dep in (cost.floor_deployment(eager), cost.simple_deployment(eager)):
        assert cost.host_s(dep) == 0 and cost.step_overhead_s(dep) == 0


def test_the_host_time_overlaps_the_gpus_work():
    eager, none = _est("llama3-8b", "H100", engine="eager"), _est("llama3-8b", "H100", engine="unknown")
    # a long prefill keeps the GPU busy longer than the host needs to launch it: the launches hide
    long = 32768
    assert float(cost.prefill_step(eager, long).time_s) == pytest.approx(float(cost.prefill_step(none, long).time_s))
    assert float(cost.prefill_step(none, long).time_s) > cost.host_s(eager)
    # a step shorter than the launches takes the host's time: a decode step of a small model on a slow host
    slow = cost.estimate_deployment(eager, cost.Estimate(engine="eager", bandwidth_fraction=1.0))
    gpu_time = float(cost.decode_step(_est("llama3.2-1b", "H100", engine="unknown"), 1, 16).time_s)
    tiny = _est("llama3.2-1b", "H100", engine="eager")
    assert float(cost.decode_step(tiny, 1, 16).time_s) == pytest.approx(max(gpu_time, cost.host_s(tiny)))
    assert float(cost.mixed_tpot_s(slow, 4, 64, 64)) >= cost.host_s(slow)
    assert float(cost.ttft_s(tiny, 4)) >= cost.host_s(tiny)


def test_an_engine_that_accumulates_in_fp16_gets_the_geforce_rate_and_says_so():
    fp32 = _est("llama3-8b", "RTX-4090")
    fp16 = _est("llama3-8b", "RTX-4090", accumulation="fp16")
    assert cost.tensor_format(fp32) == ("bf16/fp32", 165.2e12)
    assert cost.tensor_format(fp16) == ("fp16/fp16", 330.3e12)
    # a datacenter part runs both at one rate
    assert cost.tensor_format(_est("llama3-8b", "H100", accumulation="fp16"))[1] == 989.5e12


def test_unknown_engines_and_accumulations_are_refused_in_one_line():
    with pytest.raises(ValueError, match="unknown engine 'jit'; accepted: graphs, cpp-runtime, python-graphs"):
        cost.Estimate(engine="jit")
    with pytest.raises(ValueError, match="accumulation is 'fp32' or 'fp16'"):
        cost.Estimate(accumulation="tf32")
    with pytest.raises(ValueError, match="or None"):
        cost.Estimate(prefill_mfu=1.5)


def test_gemm_efficiency_is_the_benchmark_best_shape_rate_times_the_llm_shape_share():
    # Bekman's MAMF table: H100 SXM BF16 80.3%, FP8 70.9%; A100 SXM 86.9%; MI300X 51.4%; DeepGEMM's 4,096-token median
    assert cost.LLM_SHAPE_SHARE == pytest.approx(1146.5 / 1979 / 0.709)
    h100, a100, mi300x = (get_gpu(g) for g in ("H100-SXM", "A100-80GB", "MI300X"))
    assert cost.gemm_efficiency(h100, "bf16/fp32") == pytest.approx(0.803 * cost.LLM_SHAPE_SHARE)
    assert cost.gemm_efficiency(h100, "fp8/fp32") == pytest.approx(1146.5 / 1979)
    assert cost.gemm_efficiency(a100, "bf16/fp32") == pytest.approx(0.869 * cost.LLM_SHAPE_SHARE)
    assert cost.gemm_efficiency(mi300x, "bf16/fp32") == pytest.approx(0.514 * cost.LLM_SHAPE_SHARE)
    # a chip without its own row takes the H100's, for want of a measurement
    assert cost.gemm_efficiency(get_gpu("L40S"), "bf16/fp32") == cost.gemm_efficiency(h100, "bf16/fp32")
    # the estimate's default MFUs are these; a number given still fixes one MFU for every chip
    dep = _est("llama3-8b", "MI300X")
    # times the scale fitted for its family (stage5.fitted.GEMM_SCALE), at most 1
    from stage5 import fitted

    assert cost.achieved_flops(dep, "prefill") == pytest.approx(
        1307.4e12 * min(1.0, 0.514 * cost.LLM_SHAPE_SHARE * fitted.GEMM_SCALE["cdna3"]))
    fixed = cost.estimate_deployment(dep, cost.Estimate(prefill_mfu=0.4))
    assert cost.achieved_flops(fixed, "prefill") == pytest.approx(1307.4e12 * 0.4)


def test_the_gemm_curve_reproduces_deepgemms_table_including_the_rows_that_set_nothing():
    """DeepGEMM's 18 FP8 GEMMs on an H800 (the H100's compute and bandwidth): the 4,096-token median set the shape
    share; the 64- and 128-token rows, bound by the weight reads, are priced by the decode profile's 60% bandwidth and
    set nothing. Every row comes out within x1.5."""
    h100 = get_gpu("H100-SXM")
    for tokens, table in cost.DEEPGEMM_H800.items():
        for n, k, tflops in table:
            measured = 2 * tokens * n * k / (tflops * 1e12)
            ratio = float(cost.gemm_s(h100, tokens, n, k, "fp8/fp32")) / measured
            assert 1 / 1.5 <= ratio <= 1.5, (tokens, n, k, ratio)


def test_the_achieved_flop_rate_rises_with_the_tokens_and_saturates_at_the_measured_efficiency():
    h100 = get_gpu("H100-SXM")
    tokens = np.array([1, 8, 64, 256, 1024, 4096, 16384])
    rate = 2 * tokens * 8192 * 8192 / cost.gemm_s(h100, tokens, 8192, 8192)
    assert np.all(np.diff(rate) >= 0) and rate[3] > rate[2] > rate[1] > rate[0]  # rises, then flat at the roof
    assert rate[-1] == pytest.approx(989.5e12 * cost.gemm_efficiency(h100, "bf16/fp32"), rel=0.01)
    assert rate[0] < 0.01 * rate[-1]  # one token: the weight reads, not the arithmetic, set the time
    with pytest.raises(ValueError, match="no fp8/fp32 tensor cores"):
        cost.gemm_s(get_gpu("A100-80GB"), 64, 4096, 4096, "fp8/fp32")
