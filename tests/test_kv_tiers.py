"""KV-cache tiers: reload against recompute, the break-even bandwidth, the capacity each tier adds."""

import numpy as np
import pytest

from stage5 import cost, kv_tiers
from stage5 import long_context as lc
from stage5.hardware import GB, GiB, get_gpu
from stage5.inputs import InputError
from stage5.names import UnknownNameError

EST = cost.Estimate()


def dep(model="llama3-70b", gpu="H100-SXM", n=4, estimate=EST):
    return cost.Deployment.of(model, gpu, n, estimate=estimate)


def test_tiers_by_hand():
    h100 = get_gpu("H100-SXM")
    assert kv_tiers.tier("cpu", h100).bandwidth == 64 * GB  # PCIe Gen5 x16, one direction
    assert kv_tiers.tier("cpu", h100).capacity == 256 * GiB  # 2 TiB over eight GPUs
    assert kv_tiers.tier("ssd", h100).bandwidth == pytest.approx(7.877e9, rel=1e-3)  # Gen4 x4, 128b/130b
    assert kv_tiers.tier("remote", h100).bandwidth == 50 * GB
    assert kv_tiers.tier("remote", h100, remote_nodes=3).capacity == 3 * 256 * GiB


def test_reload_is_chapter_12s_transfer_at_the_tiers_bandwidth():
    d = dep()
    for t in kv_tiers.TIERS:
        bw = kv_tiers.tier(t, d.gpu).bandwidth
        assert kv_tiers.reload_s(d, 4096, t) == pytest.approx(4096 * d.kv_bytes_per_token / (bw * d.num_gpus))
        assert kv_tiers.reload_s(d, 4096, t) == pytest.approx(lc.kv_transfer_s(d, 4096, bw))
    # the remote tier is exactly the disaggregated prefill-to-decode transfer (the same port)
    assert kv_tiers.reload_s(d, 4096, "remote") == pytest.approx(lc.kv_transfer_s(d, 4096))


@pytest.mark.parametrize("model, gpu, n", [("llama3-70b", "H100-SXM", 4), ("llama3-8b", "H100-SXM", 1),
                                           ("gpt2", "H100-SXM", 1), ("mixtral-8x7b", "H100-SXM", 2)])
def test_breakeven_bandwidth_makes_reload_and_recompute_equal(model, gpu, n):
    d = dep(model, gpu, n)
    prefixes = np.array([64, 512, 4096, 32768])
    b = kv_tiers.breakeven_bandwidth(d, prefixes)
    reload = prefixes * d.kv_bytes_per_token / (b * d.num_gpus)
    np.testing.assert_allclose(reload, lc.recompute_s(d, prefixes), rtol=1e-12)
    # a link 10% faster reloads sooner, 10% slower later
    faster = lc.kv_transfer_s(d, prefixes, float(b[2]) * 1.1)
    assert faster[2] < lc.recompute_s(d, prefixes)[2]


def test_breakeven_limit_is_k_f_over_2n():
    """With attention's FLOPs left out (the source text's prefill, Estimate.only's) a long prefill is 2 N p / F, so
    B* -> k F / (2 N n) exactly; the simple estimate counts attention (issue 52), and its B* is p k / (n t(p)) with
    t(p) = (2 N p + attention FLOPs) / F."""
    d = dep(estimate=cost.Estimate.only("additive_attention"))
    p = 1 << 15
    assert float(cost.prefill_step(d, p).compute_bound)
    f = d.gpu.flops(d.weight_bytes) * d.mfu * d.num_gpus
    expected = d.kv_bytes_per_token * f / (2 * d.model.active_params * d.num_gpus)
    assert kv_tiers.breakeven_bandwidth_limit(d) == pytest.approx(expected)
    assert float(kv_tiers.breakeven_bandwidth(d, p)) == pytest.approx(expected, rel=1e-9)
    simple = dep(estimate=None)
    t = (2 * simple.model.active_params * p + float(cost.attention_flops(simple.model, p))) / f
    assert float(kv_tiers.breakeven_bandwidth(simple, p)) == pytest.approx(
        p * simple.kv_bytes_per_token / (simple.num_gpus * t), rel=1e-9)
    # with prefill attention counted the recompute is dearer, so the break-even falls below the limit
    assert float(kv_tiers.breakeven_bandwidth(dep(), p)) < kv_tiers.breakeven_bandwidth_limit(dep())


def test_which_side_of_the_breakeven():
    """Llama 3 70B (much arithmetic per cached byte) reloads from every tier; GPT-2 (full MHA cache, few
    parameters) should recompute rather than read the SSD."""
    assert all(kv_tiers.speedup(dep(), 8192, t) > 1 for t in kv_tiers.TIERS)
    small = dep("gpt2", "H100-SXM", 1)
    assert float(kv_tiers.speedup(small, small.model.max_position_embeddings, "ssd")) < 1
    assert kv_tiers.breakeven_bandwidth_limit(small) > kv_tiers.tier("ssd", small.gpu).bandwidth


def test_capacity_by_hand():
    d = dep()
    per_seq = float(cost.kv_bytes_per_sequence(d, 8192))
    assert kv_tiers.capacity_sequences(d, 8192, "cpu") == int(256 * GiB * 4 // per_seq)
    assert kv_tiers.capacity_sequences(d, 8192, "ssd") == int(3.84e12 * 4 // per_seq)
    assert kv_tiers.capacity_sequences(d, 8192) == int(cost.max_concurrency(d, 8192))
    assert kv_tiers.capacity_sequences(d, 8192, "ssd") > kv_tiers.capacity_sequences(d, 8192, "cpu") > \
        kv_tiers.capacity_sequences(d, 8192)


def test_refusals():
    with pytest.raises(InputError, match="tier must be one of cpu, ssd, remote"):
        kv_tiers.tier("tape", get_gpu("H100"))
    with pytest.raises(UnknownNameError, match="host-memory and drive figures"):
        kv_tiers.tier("cpu", get_gpu("L4"))  # no cited server for it: refused, not priced as a DGX
    with pytest.raises(InputError, match="remote_nodes"):
        kv_tiers.tier("remote", get_gpu("H100"), remote_nodes=0)
    with pytest.raises(InputError, match="prefix"):
        kv_tiers.breakeven_bandwidth(dep(), 0)
