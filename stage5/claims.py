"""Sentences whose words come from a measurement, so a page cannot print a claim its own numbers contradict.

A chapter that times the toy engine must not write "faster" into its prose: on another machine, or under
load, the measurement may say "slower". These helpers turn measured numbers into the comparison words
("faster" / "slower", "crosses 1 between batch 16 and batch 32"), and the chapters glue the words.
They are pure functions of the numbers, which is what lets the tests feed them fast and slow timings.
"""

from __future__ import annotations

from collections.abc import Sequence

from stage5 import inputs

# Wall-clock ratios within this band of 1 are reported as "about the same": a busy machine moves timings
# by a few percent between runs, so a 1.02x "speedup" is not evidence of anything.
NOISE = 0.05


def compare(ratio: float, better: str = "faster", worse: str = "slower", same: str = "about as fast") -> str:
    """``better`` when ``ratio`` (new over old, higher is better) is clearly above 1, ``worse`` when clearly
    below, ``same`` within :data:`NOISE` of 1."""
    ratio = inputs.real(ratio, "ratio (new over old)", low=0.0)
    if ratio > 1 + NOISE:
        return better
    if ratio < 1 - NOISE:
        return worse
    return same


def times(ratio: float, better: str = "faster", worse: str = "slower", same: str = "about as fast") -> str:
    """'1.8× faster', '1.3× slower' or 'about as fast (1.02×)': a speed ratio in words, never below 1×.
    Other words for other quantities, e.g. ``times(r, "shorter", "longer", "about the same")`` for a latency."""
    ratio = inputs.positive(ratio, "ratio (new over old)")
    word = compare(ratio, better, worse, same)
    if word == better:
        return f"{ratio:.1f}× {better}"
    if word == worse:
        return f"{1 / ratio:.1f}× {worse}"
    return f"{same} ({ratio:.2f}×)"


def crossing(batches: Sequence[int], values: Sequence[float], level: float = 1.0) -> str:
    """Where a curve measured at ``batches`` first falls below ``level``, in words.

    'crosses 1 between batch 16 and batch 32', 'is below 1 already at batch 1', or 'stays above 1 at every
    batch measured, up to 32'.
    """
    below = [b for b, v in zip(batches, values, strict=True) if v < level]
    if not below:
        return f"stays above {level:g} at every batch measured, up to {batches[-1]}"
    first = below[0]
    if first == batches[0]:
        return f"is below {level:g} already at batch {first}"
    previous = batches[list(batches).index(first) - 1]
    return f"crosses {level:g} between batch {previous} and batch {first}"


def first_below(batches: Sequence[int], values: Sequence[float], level: float = 1.0) -> int | None:
    return next((b for b, v in zip(batches, values, strict=True) if v < level), None)


def agreement(ratios: Sequence[float], band: tuple[float, float] = (0.75, 1.33)) -> str:
    """How predictions (as predicted / measured ratios) compare with the measurement, in words."""
    lo, hi = min(ratios), max(ratios)
    span = f"{lo:.2f} to {hi:.2f}" if f"{lo:.2f}" != f"{hi:.2f}" else f"{lo:.2f}"
    if band[0] <= lo and hi <= band[1]:
        return f"within the band of 0.75 to 1.33 at every batch (predicted over measured: {span})"
    if hi < band[0]:
        return (f"too low at every batch (predicted over measured: {span}): the machine ran slower while it was "
                "measured than while it was calibrated, or the model misses a cost")
    if lo > band[1]:
        return (f"too high at every batch (predicted over measured: {span}): the machine ran faster while it was "
                "measured than while it was calibrated, or the model misses a cost")
    return f"off at some batches (predicted over measured: {span})"


def bound_at_batch_one(memory_share: float, threshold: float = 0.7) -> str:
    """Whether the measured batch-1 step is memory-bound, from the weight-streaming term's share of it."""
    if memory_share >= threshold:
        return "memory-bound: streaming the weights is most of the step"
    return (f"not clearly memory-bound on this build: streaming the weights is under {threshold:.0%} of the "
            "measured step")


def describe_roofline(report: dict) -> dict[str, str]:
    """The sentences chapters 2 and 4 glue around a ``bench roofline`` report (see
    :func:`stage5.engine.bench_roofline.roofline_report`)."""
    batches, measured = report["batches"], report["measured_ms"]
    gain = batches[-1] * measured[0] / measured[-1]
    return {
        "agreement": agreement(report["ratio"]),
        "bound_b1": bound_at_batch_one(report["memory_share_b1"]),
        "throughput_gain": f"{gain:.1f}×",
        "batching_verdict": compare(gain, "more", "fewer", "about the same number of"),
    }


def describe_spec(batches: Sequence[int], measured: Sequence[float], predicted: Sequence[float],
                  curve: tuple[Sequence[int], Sequence[float]] | None = None) -> dict[str, str]:
    """The sentences chapter 7 glues around speculative speedups measured and predicted at ``batches``. ``curve``
    is the prediction on a finer grid of batches (``(batches, speedups)``), which places its break-even; without it
    the prediction at ``batches`` is used."""
    fine_batches, fine = curve if curve is not None else (batches, predicted)
    return {
        "measured_crossing": crossing(batches, measured),
        "predicted_crossing": crossing(batches, predicted),
        "predicted_trend": _predicted_trend(fine_batches, fine),
        "small_batch": times(measured[0]),
        "large_batch": times(measured[-1]),
        "verdict": _spec_verdict(measured, fine),
    }


def _predicted_trend(batches: Sequence[int], values: Sequence[float]) -> str:
    """What a predicted speedup curve does as the batch grows, in words: a gain that falls below 1 (the collapse,
    with its break-even batch), a gain that shrinks but stays above 1, a speedup that does not fall, or no gain at
    any batch. Only the first has a break-even to quote."""
    values = [inputs.positive(v, "predicted speedup") for v in values]
    first, last, top = values[0], values[-1], max(values)
    start, end = batches[0], batches[-1]
    span = f"{first:.2f}× at batch {start}, {last:.2f}× at batch {end}"
    if top <= 1 + NOISE:
        trend = "and it does not fall as the batch grows" if last >= first else "and less as the batch grows"
        return f"predicts no clear gain at any batch ({span}) {trend}: there is no collapse to predict on this build"
    if last >= first * (1 - NOISE):
        return f"predicts a speedup that does not fall as the batch grows ({span}): no collapse on this build"
    below = first_below(batches, values)
    if below is None:
        return f"predicts a gain that shrinks as the batch grows but stays above 1 ({span})"
    return f"predicts the collapse: a gain at small batch that is gone from about batch {below} ({span})"


def _spec_verdict(measured: Sequence[float], predicted: Sequence[float]) -> str:
    def collapses(values: Sequence[float]) -> bool:
        return values[0] > 1 + NOISE and values[-1] < 1 - NOISE

    if collapses(measured):
        return ("speculation helped at small batch and hurt at large batch, as predicted" if collapses(predicted)
                else "speculation helped at small batch and hurt at large batch, which the prediction did not foresee")
    if collapses(predicted):
        return ("this build did not show the collapse the prediction expects: the measured speedups above say where "
                "it stopped short")
    return ("neither the prediction nor the measurement shows the collapse on this build: the speedups above say "
            "what each did instead")


def describe_knee(rates: Sequence[float], ttft_p99: Sequence[float], throughput: Sequence[float],
                  saturation: float) -> dict[str, str]:
    """The sentences chapter 4 glues around its load sweep: how p99 TTFT and throughput answered the last step
    up in rate, and what that says about where the sweep ended relative to ``saturation`` (requests per
    second). Every word comes from the numbers, so a fast desktop and a slow laptop each print what they saw."""
    rate_rise = rates[-1] / rates[-2]
    ttft_rise = ttft_p99[-1] / ttft_p99[-2]
    tput_rise = throughput[-1] / throughput[-2]
    steep = ttft_rise > rate_rise * (1 + NOISE)
    flat = tput_rise < rate_rise * (1 - NOISE)
    past = rates[-1] > saturation * (1 + NOISE)
    where = (f"The last rate, {rates[-1]:.2g} per second, is {rates[-1] / saturation:.1f}× the predicted "
             f"saturation of {saturation:.2g}")
    if steep and flat:
        verdict = ("latency climbed faster than the rate while throughput fell behind it: past saturation, "
                   "requests arrive faster than they leave and every newcomer waits for the queue ahead of it")
    elif flat:
        verdict = ("throughput fell behind the rate, but p99 TTFT did not yet climb faster than the rate: "
                   "the queue was still short when the last of these requests arrived")
    elif steep:
        verdict = ("p99 TTFT climbed faster than the rate while throughput still kept pace: the tail felt the "
                   "queue before the mean did")
    else:
        verdict = ("latency and throughput both kept pace with the rate: this sweep did not reach the knee, "
                   "and a higher rate would be needed to show it")
    return {
        "ttft_vs_rate": compare(ttft_rise / rate_rise, "much faster than", "slower than", "in step with"),
        "tput_vs_rate": compare(tput_rise / rate_rise, "more than", "far less than", "in step with"),
        "where": where + (", past it." if past else ", not past it."),
        "verdict": verdict,
    }


def describe_chunking(arithmetic_bound: bool, itl_gain: float, tpot_gain: float, ttft_ratio: float,
                      throughput_cost: float) -> dict[str, str]:
    """Chapter 4's chunked-prefill sentences: what the ridge predicts for a step of the token budget
    (``arithmetic_bound``: its compute term exceeds its memory term on this machine's calibration), and the
    measured gains in words (gains above one are cuts; ``ttft_ratio`` is chunked over plain median TTFT;
    ``throughput_cost`` is the fraction of throughput lost, negative for a gain)."""
    if arithmetic_bound:
        expect = ("a step of that many tokens is bound by arithmetic here, so it pays for every prompt token in "
                  "full whichever step carries it: chunking should spread the stall over several steps rather "
                  "than remove it, shrinking the worst gap between tokens more than the mean gap (TPOT)")
    else:
        expect = ("a step of that many tokens is still bound by the weight read here, so a chunk rides mostly "
                  "inside it: chunking should shrink the stall without paying it back elsewhere, cutting the "
                  "worst gap and the mean gap (TPOT) alike")
    return {
        "expect": expect,
        "itl_words": compare(itl_gain, "cut", "raised", "barely moved"),
        "tpot_words": compare(tpot_gain, "cut", "raised", "barely moved"),
        "tpot_vs_itl": compare(itl_gain / tpot_gain if tpot_gain else float("inf"), "far less than", "more than",
                               "about as much as"),
        "ttft_words": times(1 / ttft_ratio if ttft_ratio else 1.0, "shorter", "longer", "about as long"),
        # the sweep runs on a virtual clock, so a small difference is real, only too small to call a change
        "throughput_words": compare(1 - throughput_cost, f"{100 * abs(throughput_cost):.0f}% higher",
                                    f"{100 * abs(throughput_cost):.0f}% lower",
                                    f"about the same ({100 * abs(throughput_cost):.0f}% apart)"),
    }


def describe_stall_reach(share: float, percentile: float = 99) -> str:
    """Whether a long prompt's stalls could reach a percentile of the gaps between tokens: ``share`` is the
    fraction of all gaps that ended at a stalling step. A percentile sees them only if more than the
    ``100 - percentile`` per cent of gaps beyond it are stalls; otherwise it reads an ordinary step."""
    beyond = 100 - percentile
    said = f"{100 * share:.2f}% of all gaps between tokens ended at a step that fed a long prompt whole"
    if 100 * share > beyond:
        return f"{said}, more than the {beyond:g}% beyond p{percentile:g}, so p{percentile:g} ITL was such a stall"
    return (f"{said}, no more than the {beyond:g}% beyond p{percentile:g}, so p{percentile:g} ITL fell short of the "
            "stalls and only the worst gap shows them")


def describe_tail(count: int, percentile: float = 99) -> str:
    """Where percentile ``percentile`` of ``count`` values sits, in words: numpy's default (linear) interpolation
    places it between two neighbouring values counted from the largest, so a tail quantile of a small sample is
    close to its maximum ("between the slowest and the second-slowest of 40")."""
    n = inputs.integer(count, "count (values the percentile is taken over)", minimum=1, maximum=10**12)
    q = inputs.real(percentile, "percentile", low=0.0, high=100.0)
    position = q / 100 * (n - 1)
    low = n - 1 - int(position)  # 0: the largest value
    ordinal = ["slowest", "second-slowest", "third-slowest", "fourth-slowest", "fifth-slowest"]
    if n == 1:
        return "the only value"

    def rank(k: int) -> str:
        return ordinal[k] if k < len(ordinal) else f"{k + 1}th-slowest"

    if position == int(position):
        return f"the {rank(low)} of {n:,}"
    return f"between the {rank(low - 1)} and the {rank(low)} of {n:,}"


def describe_share(shares: Sequence[float], threshold: float = 0.7) -> dict[str, str]:
    """Chapter 2's batch-1 verdict from weight-streaming shares measured round by round (each round the stream
    and the step back to back): the median, the spread, and the words, which never claim more than the rounds
    show."""
    import statistics

    ordered = sorted(shares)
    median, lo, hi = statistics.median(ordered), ordered[0], ordered[-1]
    if lo >= threshold:
        bound = "memory-bound: streaming the weights was most of the step in every round"
    elif median >= threshold:
        bound = ("memory-bound in most rounds: streaming the weights was most of the median step, though not of "
                 "every round's")
    else:
        bound = bound_at_batch_one(median, threshold)
    # a share is two timings, each taken once: on a busy machine a round's stream can take longer than its step
    over = sum(s > 1 for s in ordered)
    if over:
        spread_note = (f"{over} of the {len(ordered)} rounds read above 100%: there the stream alone took longer "
                       "than the step, because the machine's load changed between the two timings; the median is "
                       "the figure to read")
    else:
        spread_note = "in every round the stream took less time than the whole step"
    return {"median_pct": f"{100 * median:.0f}%", "spread": f"{100 * lo:.0f}% to {100 * hi:.0f}%",
            "rounds": str(len(ordered)), "bound": bound, "spread_note": spread_note}
