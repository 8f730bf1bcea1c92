"""Expert parallelism, the all-to-all and its straggler, MLA under data-parallel attention: small cases by hand."""

from dataclasses import replace

import numpy as np
import pytest

from stage5 import cost
from stage5 import expert_parallel as ep
from stage5.hardware import GB, get_gpu
from stage5.inputs import InputError
from stage5.models import ModelConfig, get_model

# A toy MoE small enough to compute by hand: 8 experts, 2 per token, hidden 1024, experts of 3 x 1024 x 512.
TOY = ModelConfig(name="toy-moe", vocab_size=1000, hidden_size=1024, num_layers=2, num_heads=8, num_kv_heads=8,
                  head_dim=128, intermediate_size=512, num_experts=8, experts_per_token=2)
EXPERT = 3 * 1024 * 512
# A GPU with round figures: 1 TB/s, 100 TFLOP/s (16-bit and 8-bit), 400 GB/s NVLink and 50 GB/s NICs at full
# efficiency, 4 GPUs a server.
ROUND = replace(get_gpu("H100-SXM"), name="round", bandwidth=1e12,
                peaks=tuple((fmt, 100e12) for fmt, _ in get_gpu("H100-SXM").peaks),
                link_bandwidth=400 * GB, link_efficiency=1.0, node_link_bandwidth=50 * GB,
                node_link_efficiency=1.0, gpus_per_node=4, nvlink_domain=4, link_latency_s=0.0,
                node_link_latency_s=0.0)
PEAK = cost.Estimate.only(mfu=1.0)  # datasheet bandwidth, MFU 1: every term by hand


def test_alltoall_bytes_per_token_by_hand():
    # k h (d + c) (e - 1) / e = 2 x 1024 x (1 + 2) x 3/4
    assert ep.alltoall_bytes_per_token(TOY, 4, dispatch_bytes=1.0, combine_bytes=2.0) == 2 * 1024 * 3 * 3 / 4
    assert ep.alltoall_bytes_per_token(TOY, 1) == 0.0  # one GPU: nothing leaves it
    # DeepSeek-V3 over 64 GPUs, FP8 dispatch with a scale per 128 values, BF16 combine
    ds = get_model("deepseek-v3")
    assert ep.alltoall_bytes_per_token(ds, 64) == pytest.approx(8 * 7168 * (1 + 4 / 128 + 2) * 63 / 64)


def test_alltoall_time_inside_and_across_servers_by_hand():
    tokens = 100
    copy = 1024 * 3.0  # bytes per copy, dispatch and combine
    # EP4 in one 4-GPU server: 3/4 of the 200 copies over NVLink, none over the network
    inside = ep.alltoall(TOY, ROUND, 4, tokens, 1.0, 2.0)
    assert inside.nvlink_bytes == pytest.approx(200 * 3 / 4 * copy) and inside.network_bytes == 0
    assert inside.time_s == pytest.approx(200 * 3 / 4 * copy / 400e9)
    # EP8 over two servers: 3/8 stay in the server (other GPUs), 4/8 cross the network, which is slower
    across = ep.alltoall(TOY, ROUND, 8, tokens, 1.0, 2.0)
    assert across.nvlink_bytes == pytest.approx(200 * 3 / 8 * copy)
    assert across.network_bytes == pytest.approx(200 * 4 / 8 * copy)
    assert across.time_s == pytest.approx(200 * 4 / 8 * copy / 50e9)
    # a domain as large as the EP group keeps it all on NVLink
    rack = ep.alltoall(TOY, ep.hypothetical_domain(ROUND, 8), 8, tokens, 1.0, 2.0)
    assert rack.network_bytes == 0 and rack.time_s < across.time_s


def test_ep_experts_step_by_hand():
    """Two GPUs, four experts each; GPU 0's experts get 10, 0, 0, 0 tokens, GPU 1's 5 each."""
    loads = np.array([10, 0, 0, 0, 5, 5, 5, 5])
    step = ep.ep_experts(TOY, ROUND, 2, loads, weight_bytes=1.0, estimate=PEAK)
    gpu0 = max(1 * EXPERT / 1e12, 2 * EXPERT * 10 / 100e12)  # one expert read, ten tokens
    gpu1 = max(4 * EXPERT / 1e12, 2 * EXPERT * 20 / 100e12)  # four experts read, twenty tokens
    np.testing.assert_allclose(step.gpu_s, [gpu0, gpu1])
    assert step.time_s == pytest.approx(gpu1) and step.straggler == pytest.approx(gpu1 / ((gpu0 + gpu1) / 2))
    assert list(step.tokens) == [10, 20]


def test_the_busiest_expert_is_the_straggler_once_compute_bound():
    """Enough tokens that an expert's arithmetic outweighs its weights: piling them on one GPU's experts slows the
    layer under EP by the pile's share, while TP does every token's share on every GPU."""
    ridge = ep.expert_ridge_tokens(ROUND, 1.0)  # b x ridge / 2 = 1 x 100 / 2 = 50 tokens
    assert ridge == pytest.approx(50)
    even = np.full(8, 400.0)
    piled = np.array([700, 700, 700, 700, 100, 100, 100, 100], dtype=float)  # same 3,200 tokens
    ep_even = ep.ep_experts(TOY, ROUND, 2, even, estimate=PEAK).time_s
    ep_piled = ep.ep_experts(TOY, ROUND, 2, piled, estimate=PEAK).time_s
    assert ep_even == pytest.approx(2 * EXPERT * 1600 / 100e12)
    assert ep_piled == pytest.approx(2 * EXPERT * 2800 / 100e12)  # GPU 0's 2,800 tokens set the step
    tp_even = ep.tp_experts(TOY, ROUND, 2, even, estimate=PEAK)
    tp_piled = ep.tp_experts(TOY, ROUND, 2, piled, estimate=PEAK)
    assert tp_even == tp_piled == pytest.approx(2 * EXPERT * 3200 / 2 / 100e12)


def test_skew_reads_fewer_experts_under_tp_at_small_batch():
    ds = get_model("deepseek-v3")
    uniform, skewed = ep.zipf_routing(ds, 16, 0.0), ep.zipf_routing(ds, 16, 1.0)
    # uniform routing is the cost model's experts_touched
    assert uniform.touched.sum() == pytest.approx(float(cost.experts_touched(256, 8, 16)))
    assert skewed.touched.sum() < uniform.touched.sum()
    assert uniform.loads.sum() == pytest.approx(16 * 8) == skewed.loads.sum()
    assert ep.tp_experts(ds, "H100-SXM", 8, skewed) < ep.tp_experts(ds, "H100-SXM", 8, uniform)
    # no expert is picked more often than once per token
    assert ep.zipf_routing(ds, 10, 4.0).loads.max() <= 10 + 1e-9


def test_mla_intensity_by_hand():
    ds = get_model("deepseek-v3")
    dk, dv = 512 + 64, 512
    assert ep.mla_attention_intensity(ds) == pytest.approx(2 * 128 * (dk + dv) / (2 * dk))
    assert ep.mla_attention_intensity(ds, 16) == pytest.approx(ep.mla_attention_intensity(ds) / 8)
    assert ep.mla_attention_intensity(ds, query_tokens=2, kv_bytes=1) == pytest.approx(4 * ep.mla_attention_intensity(ds))
    assert ep.gqa_attention_intensity("llama3-70b") == 2 * 8 / 2


def test_data_parallel_attention_stores_each_latent_once():
    ds = get_model("deepseek-v3")
    tp = ep.mla_attention(ds, "H200", 8, 64, 8192, "tp")
    dp = ep.mla_attention(ds, "H200", 8, 64, 8192, "dp")
    per_seq = 8192 * (512 + 64) * 2 * 61
    assert tp.bytes_per_gpu == 64 * per_seq and dp.bytes_per_gpu == 8 * per_seq  # every latent vs its own
    assert tp.flops_per_gpu == dp.flops_per_gpu  # 1/8 of the heads for all, or all heads for 1/8
    assert tp.copies == 8 and dp.copies == 1
    cap_tp, cap_dp = (ep.mla_capacity(ds, "H200", 8, 8192, lay) for lay in ("tp", "dp"))
    assert 1 < cap_dp / cap_tp < 8  # less than 8x: data-parallel attention copies the attention weights


def test_weight_split_adds_up():
    for name in ("deepseek-v3", "mixtral-8x7b", "llama3-8b"):
        w = ep.weight_split(name)
        assert sum(w.values()) == pytest.approx(get_model(name).num_params)
        assert min(w.values()) >= 0


@pytest.mark.parametrize("call, match", [
    (lambda: ep.alltoall_bytes_per_token("llama3-70b", 8), "dense"),
    (lambda: ep.alltoall(TOY, ROUND, 3, 10), "cannot be split evenly over 3"),
    (lambda: ep.alltoall(TOY, ROUND, 16, 10), "ep"),
    (lambda: ep.ep_experts(TOY, ROUND, 2, np.ones(7)), "one value per routed expert"),
    (lambda: ep.ep_experts(TOY, ROUND, 2, -np.ones(8)), "loads"),
    (lambda: ep.mla_attention_intensity("llama3-70b"), "latent attention"),
    (lambda: ep.mla_attention("deepseek-v3", "H200", 8, 60, 8192, "dp"), "multiple of the GPU count"),
    (lambda: ep.mla_attention("deepseek-v3", "H200", 8, 64, 8192, "sp"), "layout must be one of tp, dp"),
    (lambda: ep.zipf_routing("deepseek-v3", 10, -1.0), "skew"),
    (lambda: ep.hypothetical_domain("H100", 0), "gpus"),
])
def test_impossible_layouts_are_refused_in_one_line(call, match):
    with pytest.raises(ValueError, match=match) as err:
        call()
    assert "\n" not in str(err.value)


def test_a_layout_that_does_not_fit_is_refused():
    with pytest.raises(cost.InfeasibleDeployment, match="does not fit"):
        ep.mla_capacity("deepseek-v3", "H100-SXM", 4, 8192, "dp", weight_bytes=2.0)


def test_inputerror_is_a_valueerror():
    assert issubclass(InputError, ValueError)
