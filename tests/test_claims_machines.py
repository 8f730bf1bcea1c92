"""The timing chapters' measured sentences hold on any machine.

Chapters 2 and 4 to 7 print words that rest on this machine's calibration and on timings taken while the book
builds ("memory-bound", "past saturation", "cut", "longer"). Here the sentence makers of ``stage5.claims`` are
fed three machines: a reference calibration, a fast one (5x its bandwidth, 3x its matmul rate) and a slow one
(1/3 of each), with measurements that agree with the prediction, run slower or run faster than it. Every claim
is checked against the numbers it is printed beside, so no machine can get a sentence its numbers contradict.
Pure functions only: no notebook is executed and no timing is taken.
"""

from __future__ import annotations

import dataclasses

import pytest

from stage5 import claims
from stage5.calibrate import Calibration
from stage5.engine.bench_roofline import roofline_report
from stage5.engine.roofline_toy import ROOFLINE_TOY
from stage5.step_model import predict_step

# A laptop-like reference: ~10 GB/s streamed, float32 matmul rates that grow with the rows, ~0.4 ms per step.
REFERENCE = Calibration(machine="reference", threads=1, bandwidth=10e9, rows=(1, 2, 4, 8, 16, 32, 64),
                        rates=(4e9, 7e9, 12e9, 20e9, 30e9, 38e9, 40e9), overhead_step_s=4e-4,
                        overhead_seq_s=2e-5, model=ROOFLINE_TOY.name)


def scaled(cal: Calibration, bandwidth: float, rate: float) -> Calibration:
    return dataclasses.replace(cal, machine=f"{cal.machine} x({bandwidth:g}, {rate:g})",
                               bandwidth=cal.bandwidth * bandwidth, rates=tuple(r * rate for r in cal.rates))


MACHINES = {"reference": REFERENCE, "fast": scaled(REFERENCE, 5, 3), "slow": scaled(REFERENCE, 1 / 3, 1 / 3)}
# How the build's timings relate to the prediction: as predicted, the machine busier than when calibrated
# (slower), quieter (faster), and a batch-1 step inflated by a busy neighbour.
MEASURED = {"as predicted": lambda b: 1.0, "busier": lambda b: 1.8, "quieter": lambda b: 0.55,
            "noisy batch 1": lambda b: 1.6 if b == 1 else 1.0}
BATCHES = (1, 2, 4, 8, 16, 32)


def _report(cal: Calibration, slowdown) -> dict:
    context = {b: 6.0 for b in BATCHES}
    measured = {b: float(predict_step(cal, ROOFLINE_TOY, b, context[b]).time_s) * slowdown(b) for b in BATCHES}
    return roofline_report(cal, ROOFLINE_TOY, measured, context)


@pytest.mark.parametrize("timing", MEASURED)
@pytest.mark.parametrize("machine", MACHINES)
def test_roofline_sentences_match_their_numbers(machine, timing):
    """Chapter 2's reveal: agreement, the batch-1 bound and the throughput gain, as printed."""
    report = _report(MACHINES[machine], MEASURED[timing])
    words = claims.describe_roofline(report)
    ratios = report["ratio"]
    inside = all(0.75 <= r <= 1.33 for r in ratios)
    assert words["agreement"].startswith("within the band") == inside, (words["agreement"], ratios)
    assert words["agreement"].startswith("too low") == (max(ratios) < 0.75)
    assert words["agreement"].startswith("too high") == (min(ratios) > 1.33)
    assert f"{min(ratios):.2f}" in words["agreement"] and f"{max(ratios):.2f}" in words["agreement"]
    memory_bound = report["memory_share_b1"] >= 0.7
    assert words["bound_b1"].startswith("memory-bound") == memory_bound, report["memory_share_b1"]
    gain = BATCHES[-1] * report["measured_ms"][0] / report["measured_ms"][-1]
    assert words["throughput_gain"] == f"{gain:.1f}×"
    assert words["batching_verdict"] == ("more" if gain > 1.05 else "fewer" if gain < 0.95 else
                                         "about the same number of")


@pytest.mark.parametrize("machine", MACHINES)
def test_the_three_machines_differ_where_the_chapters_say_they_might(machine):
    """The fast machine's ridge moves (3x the rate over 5x the bandwidth), so the roofline toy's token budget
    step may change sides of it: the chunking sentence must follow the calibration, not a typed assumption."""
    cal = MACHINES[machine]
    step = predict_step(cal, ROOFLINE_TOY, 1, 64, tokens_per_seq=64)
    arithmetic = float(step.compute_s) > float(step.memory_s)
    expect = claims.describe_chunking(arithmetic, 2.0, 1.1, 1.2, 0.02)["expect"]
    assert ("bound by arithmetic" in expect) == arithmetic
    assert ("bound by the weight read" in expect) == (not arithmetic)


@pytest.mark.parametrize("itl, tpot, ttft, cost", [(3.0, 1.02, 1.3, 0.02), (1.0, 1.0, 1.0, 0.0),
                                                   (0.8, 0.9, 0.7, -0.1), (1.5, 1.4, 0.96, 0.2)])
def test_chunking_words_match_their_numbers(itl, tpot, ttft, cost):
    words = claims.describe_chunking(True, itl, tpot, ttft, cost)
    for key, gain in (("itl_words", itl), ("tpot_words", tpot)):
        assert words[key] == ("cut" if gain > 1.05 else "raised" if gain < 0.95 else "barely moved")
    if ttft > 1.05:
        assert words["ttft_words"] == f"{ttft:.1f}× longer"
    elif ttft < 0.95:
        assert words["ttft_words"] == f"{1 / ttft:.1f}× shorter"
    else:
        assert words["ttft_words"].startswith("about as long")
    if abs(cost) > 0.05:
        assert words["throughput_words"].startswith(f"{100 * abs(cost):.0f}% ")
    else:
        assert words["throughput_words"] == f"about the same ({100 * abs(cost):.0f}% apart)"
    assert ("lower" in words["throughput_words"]) == (cost > 0.05)
    assert ("higher" in words["throughput_words"]) == (cost < -0.05)
    assert "because" not in " ".join(words.values())


@pytest.mark.parametrize("share", [0.0, 0.0034, 0.0098, 0.01, 0.0129, 0.2])
def test_stall_reach_words_follow_the_share(share):
    """p99 of the gaps between tokens reads a stall only when more than 1% of the gaps ended at one; the words
    say which, and print the share at enough digits that 0.98% never reads as "1.0%, no more than 1%"."""
    words = claims.describe_stall_reach(share)
    assert words.startswith(f"{100 * share:.2f}% of all gaps")
    assert ("so p99 ITL was such a stall" in words) == (share > 0.01)
    assert ("only the worst gap shows them" in words) == (share <= 0.01)
    assert "because" not in words


def _fluid_queue(cal: Calibration, relative=(0.25, 0.5, 1.0, 2.0), n=40, mean_out=72, longest=768):
    """A deterministic queue for the roofline toy on ``cal``: saturation from the predicted cost of a request
    at a full batch, p99 TTFT from the backlog the last arrivals find, throughput capped at saturation."""
    prefill = float(predict_step(cal, ROOFLINE_TOY, 1, longest, tokens_per_seq=longest).time_s)
    full = float(predict_step(cal, ROOFLINE_TOY, 32, 100).time_s)
    per_request = 0.1 * prefill + mean_out * full / 32
    saturation = 1 / per_request
    rates = [x * saturation for x in relative]
    ttft, tput = [], []
    for lam in rates:
        rho = lam / saturation
        backlog = max(0.0, n * (1 / saturation - 1 / lam))
        ttft.append(prefill * (1 + rho / (2 * max(1e-9, 1 - rho))) if rho < 1 else prefill * 10 + backlog)
        tput.append(min(lam, saturation) * mean_out)
    return rates, ttft, tput, saturation


@pytest.mark.parametrize("machine", MACHINES)
def test_knee_sentences_match_their_numbers(machine):
    """Chapter 4's knee on each machine: rates are multiples of that machine's saturation, so the last one is
    past it everywhere, and the verdict follows the printed rises."""
    rates, ttft, tput, saturation = _fluid_queue(MACHINES[machine])
    words = claims.describe_knee(rates, ttft, tput, saturation)
    assert words["where"].endswith(", past it.")
    assert f"{rates[-1] / saturation:.1f}×" in words["where"]
    rate_rise, ttft_rise, tput_rise = rates[-1] / rates[-2], ttft[-1] / ttft[-2], tput[-1] / tput[-2]
    steep, flat = ttft_rise > rate_rise * 1.05, tput_rise < rate_rise * 0.95
    assert words["verdict"].startswith("latency climbed faster") == (steep and flat)
    assert words["ttft_vs_rate"] == ("much faster than" if steep else
                                     "slower than" if ttft_rise < rate_rise * 0.95 else "in step with")
    assert words["tput_vs_rate"] == ("far less than" if flat else
                                     "more than" if tput_rise > rate_rise * 1.05 else "in step with")


@pytest.mark.parametrize("rates, ttft, tput, sat, verdict", [
    ((1, 2), (1.0, 1.9), (10, 20), 4.0, "latency and throughput both kept pace"),  # far below the knee
    ((1, 2), (1.0, 6.0), (10, 11), 1.0, "latency climbed faster"),
    ((1, 2), (1.0, 2.0), (10, 12), 1.0, "throughput fell behind the rate, but"),
    ((1, 2), (1.0, 5.0), (10, 20), 1.5, "p99 TTFT climbed faster than the rate while throughput still kept pace"),
])
def test_knee_verdict_for_every_shape_of_result(rates, ttft, tput, sat, verdict):
    words = claims.describe_knee(rates, ttft, tput, sat)
    assert words["verdict"].startswith(verdict)
    past = rates[-1] > sat * 1.05
    assert words["where"].endswith(", past it.") == past
    assert words["where"].endswith(", not past it.") == (not past)


@pytest.mark.parametrize("shares", [(0.8, 0.85, 0.9), (0.6, 0.75, 0.8, 0.9, 0.72), (0.5, 0.6, 0.68), (0.2,),
                                    (0.42, 1.04, 1.99), (0.9, 1.2, 0.95)])
def test_batch_one_share_words_match_the_rounds(shares):
    """Chapter 2's verdict from shares measured round by round: "every round" only when every round says it."""
    words = claims.describe_share(shares)
    median = sorted(shares)[len(shares) // 2] if len(shares) % 2 else None
    assert words["spread"] == f"{100 * min(shares):.0f}% to {100 * max(shares):.0f}%"
    assert words["rounds"] == str(len(shares))
    assert ("in every round" in words["bound"]) == (min(shares) >= 0.7)
    if median is not None:
        assert words["median_pct"] == f"{100 * median:.0f}%"
        assert words["bound"].startswith("not clearly") == (median < 0.7)
    # a share over 100% (the stream timed slower than the step) is explained, never shown without a word
    over = sum(s > 1 for s in shares)
    assert ("above 100%" in words["spread_note"]) == (over > 0)
    if over:
        assert words["spread_note"].startswith(f"{over} of the {len(shares)} rounds")


def test_share_is_measured_round_by_round_on_a_small_model():
    """measure_memory_share times the stream and the step back to back: one positive share per round."""
    import math

    import torch

    from stage5.engine.bench_roofline import measure_memory_share
    from stage5.engine.checkpoints import tiny_model

    torch.set_num_threads(1)
    model = tiny_model(dtype=torch.float32)
    shares = measure_memory_share(model, model.cfg, rounds=3, new_tokens=2, passes=1)
    assert len(shares) == 3 and all(math.isfinite(s) and s > 0 for s in shares), shares
