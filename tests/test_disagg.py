"""Disaggregated serving's cost model (stage5.disagg): the hand-off by hand, the layer-by-layer overlap against a
simulated pipeline, the M/D/1 bound against its own mean, the P:D split against a brute-force search, the colocated
fixed points against their equations, and the doors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from stage5 import cost, disagg
from stage5 import long_context as lc
from stage5.hardware import GB, get_gpu

ANCHOR = cost.Deployment.of("llama3-70b", "H100-SXM", 4)


def one_line(excinfo) -> str:
    text = str(excinfo.value)
    assert text and "\n" not in text
    return text


# ------------------------------------------------------------------------------------------ the hand-off
def test_handoff_bytes_and_time_by_hand():
    # Llama 3 70B: 80 layers x 8 KV heads x 128 dims x (K and V) x 2 bytes = 327,680 bytes per token
    assert float(disagg.handoff_bytes(ANCHOR, 4096)) == 4096 * 80 * 8 * 128 * 2 * 2 == 1_342_177_280
    # four GPUs, each over its own 400 Gb/s port (50 GB/s): 1.342 GB / 200 GB/s
    assert float(disagg.handoff_s(ANCHOR, 4096, "rdma")) == pytest.approx(1_342_177_280 / 200e9)
    # NVLink on an H100 SXM: 900 GB/s both ways, 450 GB/s per direction per GPU
    assert float(disagg.handoff_s(ANCHOR, 4096, "nvlink")) == pytest.approx(1_342_177_280 / (4 * 450e9))
    # host PCIe Gen5 x16 (64 GB/s a direction) and a Gen4 x4 drive
    assert disagg.link_bandwidth("pcie", ANCHOR.gpu) == 64 * GB
    assert disagg.link_bandwidth("ssd", ANCHOR.gpu) == pytest.approx(4 * 16e9 * 128 / 130 / 8)
    # tensor parallelism past the KV heads replicates them: Llama 3 8B has 8, so at TP 16 ... it is refused;
    # at TP 8 each GPU holds one head, no copy, and the bytes equal the single-GPU deployment's
    small = cost.Deployment.of("llama3-8b", "H100-SXM", 1)
    wide = cost.Deployment.of("llama3-8b", "H100-SXM", 8)
    assert float(disagg.handoff_bytes(small, 1000)) == float(disagg.handoff_bytes(wide, 1000)) == 1000 * 131072
    assert float(disagg.handoff_s(wide, 1000)) == pytest.approx(float(disagg.handoff_s(small, 1000)) / 8)


def test_a_sliding_window_hands_over_only_the_window():
    mistral = cost.Deployment.of("mistral-7b", "H100-SXM", 1)
    window = mistral.model.sliding_window
    assert window and float(disagg.handoff_bytes(mistral, 4 * window)) == float(disagg.handoff_bytes(mistral, window))
    assert float(lc.kv_transfer_s(mistral, 4 * window, 50e9)) == pytest.approx(
        float(disagg.handoff_bytes(mistral, window)) / 50e9)


def pipeline_exposed(t_p: float, t_x: float, layers: int) -> float:
    """Layer i's K/V exists after (i + 1) t_p / L; the link sends one layer at a time, t_x / L each."""
    free = 0.0
    for i in range(layers):
        free = max(free, (i + 1) * t_p / layers) + t_x / layers
    return free - t_p


@pytest.mark.parametrize("t_p, t_x, layers", [(1.0, 0.5, 4), (1.0, 2.0, 4), (0.3, 0.3, 80), (2.0, 0.01, 1),
                                              (0.05, 1.7, 32), (1.0, 1.0, 2)])
def test_streamed_exposure_is_the_pipeline_simulated(t_p, t_x, layers):
    assert float(disagg.exposed_s(t_p, t_x, layers)) == pytest.approx(pipeline_exposed(t_p, t_x, layers))
    assert float(disagg.exposed_s(t_p, t_x, layers, streamed=False)) == t_x


def test_exposure_by_hand_and_the_hiding_bandwidth():
    assert float(disagg.exposed_s(1.0, 0.5, 4)) == pytest.approx(0.125)  # hidden but the last layer's share
    assert float(disagg.exposed_s(1.0, 2.0, 4)) == pytest.approx(1.25)  # link-bound: 2 - 0.75
    # at the hiding bandwidth the transfer takes exactly the prefill, so one layer's share is left
    bw = float(disagg.hiding_bandwidth(ANCHOR, 4096))
    t_p = float(cost.prefill_step(ANCHOR, 4096).time_s)
    assert float(lc.kv_transfer_s(ANCHOR, 4096, bw)) == pytest.approx(t_p)
    assert float(disagg.exposed_s(t_p, t_p, 80)) == pytest.approx(t_p / 80)


# ------------------------------------------------------------------------------------------ pool rates
@pytest.mark.parametrize("service, target", [(0.3, 0.6), (0.1, 1.0), (1.0, 1.01)])
def test_md1_bound_meets_its_target_exactly(service, target):
    rate = disagg.md1_max_rate(service, target)
    assert 0 < rate * service < 1
    assert float(disagg.md1_mean_s(rate, service)) == pytest.approx(target)
    assert float(disagg.md1_mean_s(rate * 1.01, service)) > target


def test_md1_bound_is_zero_when_one_service_misses_the_target():
    assert disagg.md1_max_rate(0.5, 0.4) == 0.0
    assert float(disagg.md1_mean_s(2.0, 0.5)) == np.inf


def test_decode_batch_is_the_largest_meeting_tpot_and_memory():
    mix, targets = disagg.Mix(4096, 256), disagg.Targets(1.0, 0.015)
    pool = disagg.Pool(ANCHOR, 1, 256)
    b = disagg.decode_batch(pool, mix, targets)
    assert 1 <= b < int(cost.max_concurrency(ANCHOR, 4096 + 256))  # the target binds, not the memory
    assert float(cost.tpot_s(ANCHOR, b, 4096 + 128)) <= 0.015 < float(cost.tpot_s(ANCHOR, b + 1, 4096 + 128))
    assert disagg.decode_batch(pool, mix, disagg.Targets(1.0, 0.005)) == 0  # below one step: no batch
    assert disagg.decode_rate(pool, mix, disagg.Targets(1.0, 0.005)) == 0.0
    # memory caps it: at a 100K context few sequences fit
    long = disagg.Mix(100_000, 256)
    assert disagg.decode_batch(pool, long, disagg.Targets(1.0, 1.0)) == int(cost.max_concurrency(ANCHOR, 100_256))


def brute_split(gpus, prefill, decode, mix, targets, link="rdma"):
    r_p = disagg.prefill_rate(prefill, mix, targets, link)
    r_d = disagg.decode_rate(decode, mix, targets)
    g_p, g_d = prefill.dep.num_gpus, decode.dep.num_gpus
    best = None
    for n_p, n_d in itertools.product(range(1, gpus + 1), range(1, gpus + 1)):
        if n_p * g_p + n_d * g_d <= gpus:
            key = (min(n_p * r_p, n_d * r_d), -(n_p * g_p + n_d * g_d))
            best = key if best is None or key > best else best
    return best


CASES = [(4096, 256, 1.0, 0.03), (512, 256, 0.3, 0.03), (128, 512, 0.2, 0.025), (2048, 64, 0.5, 0.05),
         (8192, 32, 3.0, 0.04)]


@pytest.mark.parametrize("prompt, output, ttft, tpot", CASES)
@pytest.mark.parametrize("tp_p, tp_d", [(1, 1), (2, 1), (1, 4), (2, 2)])
def test_best_split_matches_brute_force(prompt, output, ttft, tpot, tp_p, tp_d):
    prefill = disagg.Pool(cost.Deployment.of("llama3-8b", "H100-SXM", tp_p), 1, 1)
    decode = disagg.Pool(cost.Deployment.of("llama3-8b", "H100-SXM", tp_d), 1, 128)
    mix, targets = disagg.Mix(prompt, output), disagg.Targets(ttft, tpot)
    for gpus in (tp_p + tp_d, 7, 12, 24):
        if gpus < tp_p + tp_d:
            continue
        split = disagg.best_split(gpus, prefill, decode, mix, targets)
        served, neg = brute_split(gpus, prefill, decode, mix, targets)
        assert split.rate == pytest.approx(served, rel=1e-12) and split.gpus == -neg


def test_phase_split_balances_the_best_large_fleet():
    prefill, decode = disagg.Pool(ANCHOR, 1, 1), disagg.Pool(ANCHOR, 1, 256)
    mix, targets = disagg.Mix(4096, 256), disagg.Targets(1.0, 0.03)
    share = disagg.phase_split(prefill, decode, mix, targets)
    split = disagg.best_split(4000, prefill, decode, mix, targets)
    assert split.prefill_replicas / (split.prefill_replicas + split.decode_replicas) == pytest.approx(share, abs=0.01)


# ------------------------------------------------------------------------------------------ colocated
def test_colocated_fixed_points_satisfy_their_equations():
    mix, targets = disagg.Mix(4096, 256), disagg.Targets(1.0, 0.03)
    pool = disagg.Pool(ANCHOR, 1, 256)
    ctx = 4096 + 128
    d1 = float(cost.prefill_step(ANCHOR, 4096).time_s)
    plain = disagg.colocated_rate(pool, mix, targets, "plain")
    b = plain.rate * 256 * plain.tpot_s
    assert plain.batch == pytest.approx(b)
    assert plain.tpot_s == pytest.approx(float(cost.tpot_s(ANCHOR, b, ctx)) / (1 - plain.rate * d1), rel=1e-6)
    assert plain.ttft_s == pytest.approx(float(disagg.md1_mean_s(plain.rate, d1)))
    chunked = disagg.colocated_rate(pool, mix, targets, "chunked")
    b = chunked.rate * 256 * chunked.tpot_s
    chunk = chunked.rate * 4096 * chunked.tpot_s
    assert chunked.tpot_s == pytest.approx(float(cost.mixed_step(ANCHOR, b, ctx, chunk, 2048).time_s), rel=1e-6)
    for c in (plain, chunked):
        assert c.ttft_s <= 1.0 and c.tpot_s <= 0.03 and c.rate > 0


@pytest.mark.parametrize("batch", [1.0, 37.5, 192.0])
@pytest.mark.parametrize("chunks", [1, 2, 3])
def test_chunked_prefill_time_is_continuous_at_multiples_of_the_chunk(batch, chunks):
    """A prompt one token past a multiple of the chunk adds one step carrying that token, not another full chunk;
    one token short of it costs what the multiple costs, less that token's work."""
    budget, ctx = 8192, 4096 + 128
    c = budget - batch
    at = float(disagg.chunked_prefill_s(ANCHOR, batch, chunks * c, ctx, budget))
    one_token_step = float(cost.mixed_step(ANCHOR, batch, ctx, 1, chunks * c / 2).time_s)
    full_step = float(cost.mixed_step(ANCHOR, batch, ctx, c, chunks * c / 2).time_s)
    assert at == pytest.approx(chunks * full_step, rel=1e-9)
    after = float(disagg.chunked_prefill_s(ANCHOR, batch, chunks * c + 1, ctx, budget))
    assert at < after <= at + 1.01 * one_token_step < at + 0.5 * full_step
    before = float(disagg.chunked_prefill_s(ANCHOR, batch, chunks * c - 1, ctx, budget))
    assert before < at and at - before < 1e-3 * at


def test_chunked_colocation_does_not_collapse_past_one_chunk():
    """A prompt a little longer than one step's budget still fits its TTFT target on a chunked replica: the rate
    moves with the prompt's work, not by a step's worth (it once fell fivefold between 8,000 and 8,192 tokens)."""
    est = cost.with_mode(ANCHOR, "estimate")
    pool, targets = disagg.Pool(est, 1, 256), disagg.Targets(2.0, 0.04)
    below = disagg.colocated_rate(pool, disagg.Mix(8000, 256), targets, "chunked").rate
    above = disagg.colocated_rate(pool, disagg.Mix(8192, 256), targets, "chunked").rate
    assert 0.85 * below < above < below


def test_prefill_stalls_cost_plain_colocation_its_tpot():
    """Long prompts and a tight TPOT target: the stalls hold a colocated replica (plain or chunked) below what the
    same GPUs serve split into pools; short prompts: colocation wins (chunked, the prefill hides under the decodes'
    reads)."""
    est = cost.with_mode(ANCHOR, "estimate")
    long = disagg.compare(64, est, disagg.Mix(8192, 256), disagg.Targets(2.0, 0.025))
    assert long.disaggregated_per_gpu > max(long.colocated_per_gpu.values())
    short = disagg.compare(64, est, disagg.Mix(128, 256), disagg.Targets(0.3, 0.05))
    assert short.winner.startswith("colocated")
    assert short.colocated_per_gpu["chunked"] > 1.2 * short.disaggregated_per_gpu


def test_no_winner_is_named_when_no_design_meets_the_targets():
    est = cost.with_mode(ANCHOR, "estimate")
    c = disagg.compare(64, est, disagg.Mix(8192, 256), disagg.Targets(2.0, 0.001))  # a 1 ms TPOT: below any step
    assert c.disaggregated_per_gpu == 0 and max(c.colocated_per_gpu.values()) == 0
    assert c.winner.startswith("none")


def test_a_slow_link_eats_the_ttft_budget():
    prefill = disagg.Pool(ANCHOR, 1, 1)
    t_p = float(cost.prefill_step(ANCHOR, 32768).time_s)
    mix, targets = disagg.Mix(32768, 256), disagg.Targets(1.3 * t_p, 0.05)
    fast = disagg.prefill_rate(prefill, mix, targets, "nvlink")
    slow = disagg.prefill_rate(prefill, mix, targets, "ssd", streamed=False)
    assert 0 < slow < 0.9 * fast


def test_a_small_fleet_wastes_the_unmatched_pool():
    prefill, decode = disagg.Pool(ANCHOR, 1, 1), disagg.Pool(ANCHOR, 1, 256)
    mix, targets = disagg.Mix(2048, 256), disagg.Targets(0.5, 0.04)
    small = disagg.best_split(8, prefill, decode, mix, targets)
    large = disagg.best_split(400, prefill, decode, mix, targets)
    assert small.prefill_replicas == small.decode_replicas == 1
    assert small.goodput_per_gpu < 0.8 * large.goodput_per_gpu


# ------------------------------------------------------------------------------------------ the doors
@pytest.mark.parametrize("make, says", [
    (lambda: disagg.Pool(ANCHOR, 0, 8), "replicas"),
    (lambda: disagg.Pool(ANCHOR, 2, 0), "batch"),
    (lambda: disagg.Pool("llama3-70b", 1, 1), "Deployment"),
    (lambda: disagg.Pool(cost.Deployment.of("llama3-70b", "L4", 1), 1, 1), "does not fit"),
    (lambda: disagg.link_bandwidth("nvlink", get_gpu("L4")), "no NVLink"),
    (lambda: disagg.link_bandwidth("carrier pigeon", get_gpu("H100-SXM")), "link"),
    (lambda: disagg.best_split(5, disagg.Pool(ANCHOR), disagg.Pool(ANCHOR), disagg.Mix(100, 10),
                               disagg.Targets(1, 1)), "at least 8 GPUs"),
    (lambda: disagg.best_split(16, disagg.Pool(ANCHOR), disagg.Pool(cost.Deployment.of("llama3-8b", "H100-SXM", 4)),
                               disagg.Mix(100, 10), disagg.Targets(1, 1)), "one model"),
    (lambda: disagg.compare(6, ANCHOR, disagg.Mix(100, 10), disagg.Targets(1, 1)), "two replicas"),
    (lambda: disagg.Mix(float("nan"), 10), "prompt"),
    (lambda: disagg.Mix(100, 0.5), "output"),
    (lambda: disagg.Targets(0, 1), "ttft_s"),
    (lambda: disagg.colocated_rate(disagg.Pool(ANCHOR), disagg.Mix(100, 10), disagg.Targets(1, 1), "both"),
     "mode"),
    (lambda: disagg.handoff_s(ANCHOR, -5), "prompt"),
    (lambda: disagg.exposed_s(1.0, 1.0, 0), "layers"),
])
def test_impossible_pools_and_inputs_are_refused_in_one_line(make, says):
    with pytest.raises(ValueError) as excinfo:
        make()
    assert says in one_line(excinfo)


HOSTILE = [None, "x", True, float("nan"), float("inf"), -1, 0, 1e-320, 1e300, [1, 2]]
DOORS = {
    "handoff_bytes": lambda v: disagg.handoff_bytes(ANCHOR, v),
    "handoff_s": lambda v: disagg.handoff_s(ANCHOR, v),
    "handoff_s link": lambda v: disagg.handoff_s(ANCHOR, 100, v),
    "exposed_s prefill": lambda v: disagg.exposed_s(v, 1.0, 4),
    "exposed_s transfer": lambda v: disagg.exposed_s(1.0, v, 4),
    "exposed_s layers": lambda v: disagg.exposed_s(1.0, 1.0, v),
    "exposed_s streamed": lambda v: disagg.exposed_s(1.0, 1.0, 4, v),
    "md1_mean_s rate": lambda v: disagg.md1_mean_s(v, 0.5),
    "md1_mean_s service": lambda v: disagg.md1_mean_s(1.0, v),
    "md1_max_rate service": lambda v: disagg.md1_max_rate(v, 1.0),
    "md1_max_rate target": lambda v: disagg.md1_max_rate(0.5, v),
    "hiding_bandwidth": lambda v: disagg.hiding_bandwidth(ANCHOR, v),
    "Pool": lambda v: disagg.Pool(ANCHOR, v, 1),
    "Mix": lambda v: disagg.Mix(v, 10),
    "Targets": lambda v: disagg.Targets(v, 1),
    "best_split": lambda v: disagg.best_split(v, disagg.Pool(ANCHOR), disagg.Pool(ANCHOR, 1, 8), disagg.Mix(100, 10),
                                              disagg.Targets(1, 1)),
    "link_bandwidth": lambda v: disagg.link_bandwidth("rdma", v),
}


@pytest.mark.parametrize("door", DOORS)
def test_hostile_values_answer_without_nan_or_refuse_in_one_line(door):
    for value in HOSTILE:
        try:
            out = DOORS[door](value)
        except (ValueError, TypeError) as err:
            assert str(err) and "\n" not in str(err), (door, value)
            continue
        if isinstance(out, (float, np.ndarray)):
            assert not np.any(np.isnan(np.asarray(out, dtype=float))), (door, value)
