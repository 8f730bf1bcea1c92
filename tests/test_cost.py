"""The cost model against every figure the source text states, plus properties that must hold for any input."""


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stage5 import cost
from stage5.figures import all_figures, figure
from stage5.hardware import GiB, get_gpu
from stage5.models import get_model

# The source text's values (modules 1-3 and 7). Each is compared with a tolerance that matches how the source
# rounds it; the derived value, not the source's, is what the book prints.
SOURCE = {
    "llama3_70b_weights_GB": (141, 0.005),
    "llama3_70b_weights_GiB": (131.4, 0.001),
    "h100_ridge_flops_per_byte": (295, 0.005),
    "decode_floor_ms_1xH100": (42, 0.01),
    "decode_floor_ms_4xH100": (10.5, 0.01),
    "llama3_70b_kv_bytes_per_token": (327_680, 0),
    "kv_budget_GiB_4xH100": (157, 0.005),
    "max_seqs_1k": (501, 0),
    "max_seqs_4k": (125, 0),
    "max_seqs_32k": (15, 0),
    "max_seqs_128k": (3, 0),
    "kv_traffic_GB_b125_s4096": (168, 0.005),
    "spec_tokens_a07_k4": (2.8, 0.02),
    "spec_speedup_a07_k4": (2.3, 0.01),
    "cost_ratio_128k_vs_1k": (170, 0.02),
}


@pytest.mark.parametrize("fid", sorted(SOURCE))
def test_figure_reproduces_the_source(fid):
    expected, rel = SOURCE[fid]
    assert figure(fid) == pytest.approx(expected, rel=rel, abs=0 if rel else 0.5)


def test_worked_example_is_more_than_five_times_below_the_ridge():
    assert figure("h100_ridge_flops_per_byte") / figure("intensity_b125_s4096") > 5


def test_kv_traffic_exceeds_weight_traffic_in_the_worked_example():
    assert figure("kv_traffic_GB_b125_s4096") > figure("llama3_70b_weights_GB")


def test_the_source_misquote_is_not_what_the_model_derives():
    # Erratum: the quantization section's 180 GB contradicts the worked example's own arithmetic.
    assert abs(figure("kv_traffic_GB_b125_s4096") - figure("source_kv_traffic_GB_misquoted")) > 10


def test_decode_intensity_in_bf16_equals_the_batch():
    b = np.array([1, 7, 64, 295])
    np.testing.assert_array_equal(cost.decode_intensity(b, 2.0), b)
    np.testing.assert_array_equal(cost.decode_intensity(b, 1.0), 2 * b)


def test_doubling_flops_leaves_batch1_decode_unchanged():
    h100 = get_gpu("H100")
    faster = h100.scaled(2.0)
    m = get_model("llama3-8b")
    assert cost.decode_floor_s(cost.Deployment(m, faster)) == cost.decode_floor_s(cost.Deployment(m, h100))


def test_decode_step_returns_both_terms_and_the_bound():
    d = cost.Deployment.of("llama3-8b", "H100")
    step = cost.decode_step(d, np.array([1, 2048]), 0)
    assert step.bound.tolist() == ["memory", "compute"]
    np.testing.assert_allclose(step.time_s, np.maximum(step.memory_s, step.compute_s))


def test_prefill_is_compute_bound_and_decode_is_not():
    d = cost.Deployment.of("llama3-8b", "H100")
    assert cost.prefill_step(d, 2048).bound == "compute"
    assert cost.decode_step(d, 1, 2048).bound == "memory"


def test_prefix_hit_shortens_ttft_but_still_computes_a_token():
    d = cost.Deployment.of("llama3-8b", "H100")
    full, half, all_cached = cost.ttft_s(d, 2000, [0.0, 0.5, 1.0])
    assert full > half > all_cached > 0


def test_max_concurrency_uses_binary_units_and_the_reserve():
    d = cost.Deployment.of("llama3-70b", "H100", 4)
    budget = 4 * 80 * GiB - get_model("llama3-70b").weight_bytes(2) - 32 * GiB
    assert cost.kv_budget_bytes(d) == pytest.approx(budget)
    assert int(cost.max_concurrency(d, 4096)) == int(budget // (4096 * 327_680))


def test_kv_quantization_doubles_concurrency_and_weight_quantization_frees_memory():
    bf16 = cost.Deployment.of("llama3-70b", "H100", 4)
    kv8 = cost.Deployment.of("llama3-70b", "H100", 4, kv_bytes=1.0)
    w8 = cost.Deployment.of("llama3-70b", "H100", 4, weight_bytes=1.0)
    assert int(cost.max_concurrency(kv8, 4096)) in (2 * 125, 2 * 125 + 1)
    assert cost.max_concurrency(w8, 4096) > cost.max_concurrency(bf16, 4096)


def test_cost_per_token_falls_with_batch_and_scales_with_price():
    d = cost.Deployment.of("llama3-8b", "H100")
    c = cost.cost_per_million_tokens(d, np.array([1, 8, 64]), 1024)
    assert np.all(np.diff(c) < 0)
    assert cost.cost_per_million_tokens(d, 8, 1024, 6.0) == pytest.approx(2 * c[1])


def test_expected_tokens_limits():
    assert cost.expected_tokens_per_verification(0.0, 4) == 1.0
    assert cost.expected_tokens_per_verification(1.0, 4) == 5.0


def test_moe_reads_fewer_bytes_at_batch_one_than_it_holds():
    d = cost.Deployment.of("mixtral-8x7b", "H100", 2)
    one, many = cost.weight_bytes_read(d, np.array([1, 512]))
    assert one < d.weight_total_bytes * 0.4
    assert many == pytest.approx(d.weight_total_bytes, rel=1e-6)


# ----------------------------------------------------------------------------------------- bad input
def test_weights_that_do_not_fit_say_by_how_much():
    d = cost.Deployment.of("llama3-70b", "H100", 1)
    with pytest.raises(cost.InfeasibleDeployment, match=r"weights alone \(131.4 GiB\) exceed the GPUs' memory "
                       r"\(80.0 GiB\); with the reserve .* short by 59.4 GiB"):
        cost.max_concurrency(d, 4096)
    # FP8 weights fit the card but not beside a 20% reserve: the message names the resource and the rule
    tight = cost.Deployment.of("llama3-70b", "H100", 1, weight_bytes=1, memory_utilization=0.8, memory_policy="card")
    with pytest.raises(cost.InfeasibleDeployment, match=r"no memory is left for the KV cache: weights 67.7 GiB \+ "
                       r"reserve 16.0 GiB \(20% of the cards, memory_utilization 0.8\) exceed memory 80.0 GiB"):
        cost.max_concurrency(tight, 4096)


@pytest.mark.parametrize("kw", [{"batch": 0}, {"batch": -3}, {"context": -1}, {"batch": np.nan}])
def test_non_positive_batch_or_context_is_rejected(kw):
    d = cost.Deployment.of("llama3-8b", "H100")
    args = {"batch": 1, "context": 10} | kw
    with pytest.raises(ValueError, match="must be"):
        cost.decode_step(d, **args)


def test_bad_deployment_fields_are_rejected():
    with pytest.raises(ValueError, match="num_gpus"):
        cost.Deployment.of("llama3-8b", "H100", 0)
    with pytest.raises(ValueError, match="mfu"):
        cost.Deployment.of("llama3-8b", "H100", mfu=1.5)


# ----------------------------------------------------------------------------------------- properties
models = st.sampled_from(["llama3-8b", "llama3-70b", "qwen2.5-72b", "mixtral-8x7b", "llama3.2-1b"])
gpus = st.sampled_from(["H100", "H200", "A100-80GB", "B200", "L40S", "MI300X"])
batches = st.integers(1, 4096)
contexts = st.integers(0, 131072)


@settings(max_examples=200, deadline=None)
@given(models, gpus, batches, contexts, st.integers(1, 2000))
def test_decode_time_never_falls_as_batch_grows(model, gpu, batch, context, extra):
    d = cost.Deployment.of(model, gpu, 8)
    t = cost.decode_step(d, np.array([batch, batch + extra]), context).time_s
    assert t[1] >= t[0]


@settings(max_examples=200, deadline=None)
@given(models, st.integers(1, 131072))
def test_intensity_with_kv_rises_with_batch_and_saturates_below_its_cap(model, context):
    d = cost.Deployment.of(model, "H100", 8)
    b = 2.0 ** np.arange(0, 24)
    i = cost.decode_intensity_with_kv(d, b, context)
    gains = i[1:] / i[:-1]  # what each doubling of the batch buys
    assert np.all(gains >= 1 - 1e-12) and np.all(gains <= 2 + 1e-12)
    if d.model.num_experts == 1:  # MoE reads more experts as the batch grows, so its gains are not monotone
        assert np.all(np.diff(gains) <= 1e-12)  # each doubling buys less than the one before: saturation
    cap = 2 * d.model.active_params / (context * d.kv_bytes_per_token)
    assert np.all(i < cap)


@settings(max_examples=100, deadline=None)
@given(gpus, st.floats(0.5, 0.95), st.integers(1, 8), st.integers(0, 512))
def test_speculative_speedup_falls_with_batch_and_crosses_one(gpu, alpha, k, context):
    d = cost.Deployment.of("llama3-8b", gpu, 1)
    b = 2.0 ** np.arange(0, 15)
    s = cost.speculative_speedup(d, b, context, alpha, k)
    assert np.all(np.diff(s) <= 1e-9)
    assert s[0] > 1
    # attention's KV reads cost both passes alike, so a large batch makes speculation slower only below the
    # context where its large-batch limit is 1 (cost.speculation_any_batch_context)
    edge = cost.speculation_any_batch_context(d, alpha, k)
    if edge is None or context < 0.5 * edge:
        assert s[-1] < 1
    elif context > 1.01 * edge:
        assert s[-1] > 1


@settings(max_examples=200, deadline=None)
@given(models, gpus, batches, contexts)
def test_halving_weight_bytes_never_more_than_doubles_throughput(model, gpu, batch, context):
    bf16 = cost.Deployment.of(model, gpu, 8, weight_bytes=2.0)
    fp8 = cost.Deployment.of(model, gpu, 8, weight_bytes=1.0)
    ratio = cost.decode_throughput(fp8, batch, context) / cost.decode_throughput(bf16, batch, context)
    # Bytes halve (at most 2x); where compute binds, the gain is the datasheet's FP8/BF16 ratio, which is 2 only
    # to the datasheet's rounding (L40S prints 733 against 362.05).
    limit = max(2.0, bf16.gpu.flops(1.0) / bf16.gpu.flops(2.0))
    assert 1.0 <= ratio <= limit * (1 + 1e-12)


def _python_calls(func, *args) -> int:
    """How many Python-level function calls ``func(*args)`` makes (numpy's work inside one call is not counted)."""
    import sys

    calls = [0]

    def count(frame, event, arg):
        if event == "call":
            calls[0] += 1

    sys.setprofile(count)
    try:
        func(*args)
    finally:
        sys.setprofile(None)
    return calls[0]


def test_a_sweep_of_100k_deployments_is_vectorised():
    """A chapter sweeps 100,000 (batch, context) pairs in one call: the Python work must not grow with the number
    of points (numpy does the loop), and every point must equal the scalar call. How long it takes on this
    machine is a benchmark's business (python -m stage5.bench_simulator), not a test's."""
    d = cost.Deployment.of("llama3-70b", "H100", 4)
    rng = np.random.default_rng(0)
    b = rng.integers(1, 512, 100_000)
    s = rng.integers(1, 131072, 100_000)

    def sweep(bb, ss):
        return cost.cost_per_million_tokens(d, bb, ss), cost.speculative_speedup(d, bb, ss, 0.7, 4)

    assert _python_calls(sweep, b, s) == _python_calls(sweep, b[:10], s[:10])
    price, speed = sweep(b, s)
    for i in rng.integers(0, 100_000, 20):
        one_price, one_speed = sweep(int(b[i]), int(s[i]))
        assert np.isclose(price[i], one_price) and np.isclose(speed[i], one_speed)


def test_figures_are_all_finite_and_named():
    figs = all_figures()
    assert len(figs) >= 20
    for f in figs.values():
        assert np.isfinite(f.value) and f.unit and f.description


def test_a_prefill_chunk_hides_only_in_the_arithmetic_the_weight_read_leaves_idle():
    """chunk_hidden_share is the idle time under the weight read (weights - decode arithmetic) over the chunk's
    arithmetic, recomputed here from the datasheet; free_chunk_tokens is the largest chunk whose mixed step stays
    memory-bound, so one token more tips it; a decode step already compute-bound hides nothing."""
    from stage5.figures import chunk_hidden_share, free_chunk_tokens

    dep = cost.Deployment.of("llama3-70b", "H100-SXM", 4)
    dec = cost.decode_step(dep, 64, 4096)

    def chunk_s(c):  # a chunk's arithmetic in the simple estimate: linear layers and its causal attention
        m = dep.model
        return (2 * m.active_params * c + 4 * m.num_layers * m.num_heads * m.head_dim * c * (c + 1) / 2) / dep.flops

    idle = float(dec.memory_s - dec.compute_s)
    assert chunk_hidden_share(dep, 64, 4096, 256) == pytest.approx(idle / chunk_s(256))
    free = free_chunk_tokens(dep, 64, 4096)
    assert not cost.mixed_step(dep, 64, 4096, free).compute_bound
    assert cost.mixed_step(dep, 64, 4096, free + 1).compute_bound
    assert chunk_hidden_share(dep, 64, 4096, free) == 1.0 and chunk_s(free) <= idle < chunk_s(free + 1)
    full = int(cost.max_concurrency(dep, 1024))
    assert cost.decode_step(dep, full, 1024).compute_bound
    assert free_chunk_tokens(dep, full, 1024) == 0 and chunk_hidden_share(dep, full, 1024, 256) == 0.0


def test_sliding_window_caps_the_cache_and_the_kv_reads():
    """Mistral-7B v0.1 attends over a 4,096-token window on every layer: past it the cache stops growing, so at
    32K tokens the cost model must hold 8x the naive count of sequences and read 8x fewer KV bytes per step."""
    dep = cost.Deployment.of("mistral-7b", "H100-SXM", 1)
    window = dep.model.sliding_window
    assert window == 4096 and dep.model.sliding_layers == dep.model.num_layers
    per_token = dep.kv_bytes_per_token
    assert float(cost.kv_bytes_per_sequence(dep, 1024)) == pytest.approx(1024 * per_token)  # inside the window
    assert float(cost.kv_bytes_per_sequence(dep, 32_768)) == pytest.approx(window * per_token)
    naive = cost.kv_budget_bytes(dep) // (32_768 * per_token)
    assert int(cost.max_concurrency(dep, 32_768)) == int(cost.kv_budget_bytes(dep) // (window * per_token))
    assert int(cost.max_concurrency(dep, 32_768)) >= 8 * naive
    assert float(cost.kv_traffic_bytes(dep, 4, 32_768)) == pytest.approx(4 * window * per_token)
    # a model without a window is unchanged
    llama = cost.Deployment.of("llama3-8b", "H100-SXM", 1)
    assert float(cost.kv_bytes_per_sequence(llama, 8192)) == pytest.approx(8192 * llama.kv_bytes_per_token)


# ------------------------------------------------------------------------------ the floor: physics at peak
# One meaning of "floor": bytes / the datasheet's bandwidth and FLOPs / the datasheet's peak, no efficiency
# factor. Everything with an efficiency (the simple estimate's MFU, the estimate's terms) is an estimate.
def _h100_datasheet():
    """H100 SXM's datasheet numbers, typed here from NVIDIA's H100 datasheet so the test does not read them from
    the registry it checks: 3.35 TB/s HBM3, 1,979 TFLOP/s BF16 with 2:4 sparsity, so 989.5 dense."""
    return 3.35e12, 1979e12 / 2


def test_the_floor_is_bytes_and_flops_at_the_datasheets_peak():
    bw, peak = _h100_datasheet()
    m = get_model("llama3-70b")
    n, b, s, t = 4, 64, 4096, 8192
    floor = cost.floor_deployment(cost.Deployment.of(m, "H100-SXM", n))
    kv_token = 2 * m.num_layers * m.num_kv_heads * m.head_dim * 2  # K and V, BF16
    # decode: the weights less the embedding rows no token looks up, plus every sequence's KV, against the
    # linear layers' FLOPs, overlapped
    weights = (m.num_params - (m.vocab_size - b) * m.hidden_size) * 2
    expect = max((weights + b * s * kv_token) / (n * bw), 2 * m.active_params * b / (n * peak))
    assert float(cost.decode_step(floor, b, s).time_s) == pytest.approx(expect, rel=1e-9)
    # prefill of t tokens: the linear layers plus causal attention (t (t + 1) / 2 query-key pairs), at peak
    attn = 4 * m.num_layers * m.num_heads * m.head_dim * t * (t + 1) / 2
    weights_t = (m.num_params - (m.vocab_size - t) * m.hidden_size) * 2
    expect = max((weights_t + t * kv_token) / (n * bw), (2 * m.active_params * t + attn) / (n * peak))
    assert float(cost.ttft_s(floor, t)) == pytest.approx(expect, rel=1e-9)
    # the batch-1 decode floor of chapter 1 and the exercises: every weight at the datasheet's bandwidth, in
    # any mode, and the floor's own batch-1 step is lower only by the embedding rows it skips
    for mode in cost.MODES:
        dep = cost.with_mode(cost.Deployment.of(m, "H100-SXM", n), mode)
        assert cost.decode_floor_s(dep) == pytest.approx(m.num_params * 2 / (n * bw), rel=1e-9)
    assert float(cost.decode_step(floor, 1, 0).time_s) == pytest.approx(
        (m.num_params - (m.vocab_size - 1) * m.hidden_size) * 2 / (n * bw), rel=1e-9)


def test_the_simple_estimate_is_the_additive_step_with_an_mfu():
    """The simple estimate is the one step formula, attention's KV reads added, at an MFU; the floor lets
    everything overlap at peak. At MFU 1 the simple estimate is the additive term alone, and never below the
    floor."""
    dep = cost.Deployment.of("llama3-70b", "H100-SXM", 4)
    assert cost.mode_of(dep) == "simple" and dep.mfu == cost.DEFAULT_MFU
    assert cost.mode_of(cost.floor_deployment(dep)) == "floor" and cost.floor_deployment(dep).mfu == 1.0
    assert cost.mode_of(cost.estimate_deployment(dep)) == "estimate"
    at_peak = cost.replace(dep, mfu=1.0)
    additive = cost.replace(cost.floor_deployment(dep), estimate=cost.Estimate.only("additive_attention", mfu=1.0))
    for b, s in ((1, 0), (64, 4096), (400, 1152)):
        assert float(cost.tpot_s(at_peak, b, s)) == pytest.approx(float(cost.tpot_s(additive, b, s)), rel=1e-12)
        w = dep.weight_total_bytes / dep.bandwidth
        kv = b * s * dep.kv_bytes_per_token / dep.bandwidth
        c = 2 * dep.model.active_params * b / dep.flops
        assert float(cost.tpot_s(dep, b, s)) == pytest.approx(kv + max(w, c), rel=1e-12)
        assert float(cost.tpot_s(cost.floor_deployment(dep), b, s)) <= float(cost.tpot_s(at_peak, b, s))
    # round trips: a floor turned back into the simple estimate gets the default MFU, not the floor's 1
    assert cost.with_mode(cost.floor_deployment(dep), "simple") == dep
    assert cost.with_mode(cost.with_mode(dep, "estimate"), "floor") == cost.floor_deployment(dep)
    with pytest.raises(ValueError, match="simple, estimate, floor"):
        cost.with_mode(dep, "optimistic")


@settings(max_examples=60, deadline=None)
@given(models, gpus, st.sampled_from([1, 2, 4, 8]), batches, contexts, st.integers(1, 32768), st.integers(1, 4096))
def test_the_floor_is_at_or_below_the_estimate_on_every_path(model, gpu, n, batch, context, prompt, output):
    dep = cost.Deployment.of(model, gpu, n)
    floor, est = cost.floor_deployment(dep), cost.estimate_deployment(dep)
    for fn, args in ((cost.tpot_s, (batch, context)), (cost.ttft_s, (prompt,)),
                     (cost.mixed_tpot_s, (batch, prompt, output)),
                     (cost.request_gpu_seconds, (prompt, output, batch)),
                     (cost.cost_per_million_tokens, (batch, context))):
        assert float(fn(floor, *args)) <= float(fn(est, *args)) * (1 + 1e-12), fn.__name__
    # decode never runs faster in the simple estimate than at the floor: the same formulas at a lower MFU,
    # with more bytes (the whole embedding table)
    assert float(cost.tpot_s(floor, batch, context)) <= float(cost.tpot_s(dep, batch, context)) * (1 + 1e-12)
    assert float(cost.tpot_s(floor, batch, context)) <= float(cost.tpot_s(cost.with_mode(dep, "simple"), batch,
                                                                           context)) * (1 + 1e-12)


def test_the_simple_estimate_stays_above_the_floor_on_long_prefills():
    """Until issue 52 the simple estimate left prefill's attention FLOPs out and at 131,072 tokens priced this
    prefill at half the floor. It counts the floor's attention term now, at half the peak: twice the floor where
    the arithmetic binds."""
    dep = cost.Deployment.of("llama3-70b", "H100-SXM", 4)
    floor = cost.floor_deployment(dep)
    assert float(cost.ttft_s(floor, 1024)) < float(cost.ttft_s(dep, 1024))
    assert float(cost.ttft_s(dep, 131072)) == pytest.approx(2 * float(cost.ttft_s(floor, 131072)), rel=1e-3)
