"""``python -m stage5 validate``: the floor and the estimate against published serving measurements.

Each point of :data:`stage5.published.SERVING_POINTS` is priced twice, by the floor (the physics at the
datasheet's peak, no efficiency factor: :func:`stage5.cost.floor_deployment`) and by the estimate (:class:`stage5.cost.Estimate` at its
defaults, none of which is set from these points). The metrics are the time per output token at the point's
concurrency (``tpot_ms``: :func:`stage5.cost.mixed_tpot_s`, at the mean context), the time to first token where
published at concurrency 1 (``ttft_ms``: :func:`stage5.cost.ttft_s`), and the wall time of a static batch
(``batch_ms``: :func:`batch_s`, the throughput metric: batch x output tokens / tokens per second).

A published row whose requests cannot all run at once (:func:`queued`) is set aside: the server ran fewer
requests than the row's concurrency and queued the rest, which neither mode prices (their TTFT jumps by seconds
to minutes). The rule uses the cost model's memory budget under the engine's own policy and the engine's cap on
running requests, not the measured latencies.

Shares are reported per source, per metric and per GPU, and source-balanced (the mean of the per-source shares,
so a source with 79 rows weighs as much as one with 3), in-sample (the sources the estimate's terms were chosen
or corrected while looking at: :attr:`stage5.published.Source.in_sample`, :data:`CHOSEN_AFTER_LOOKING`) and held
out separately.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

from stage5 import cost
from stage5.inputs import OneLineParser, dumps
from stage5.published import NOT_PRICED, SERVING_POINTS, SOURCES, ServingPoint, seen_by_fit, setup_of
from stage5.quantization import deployment, weight_format

WITHIN = (0.8, 1.25)  # the tight band, as estimate / measured: within 25%
WIDE = (1 / 1.5, 1.5)  # the wide band: within x1.5
# Issue 29's targets, source-balanced: within 25% on at least 75% of points, within x1.5 on at least 90%.
TARGET_SHARE = 0.75
TARGET_WIDE_SHARE = 0.9
METRICS = {"tpot_ms": "TPOT/ITL", "ttft_ms": "TTFT", "batch_ms": "throughput"}
# Estimate terms chosen or corrected after looking at a source's rows, with the sources looked at. Those sources
# count as in sample (:attr:`stage5.published.Source.in_sample`); the report gives the shares without each term.
CHOSEN_AFTER_LOOKING = {"server_nics": ("ft-530b",)}
# The estimate's constants were last fixed for issue 39 (commit 5a08bc3: peaks by format, engine profiles, measured
# GEMM efficiency). Sources added in or after it (:attr:`stage5.published.Source.added_in`) were never looked at while
# a constant was set: the fresh sources, on which issue 39's targets are judged.
FRESH_AFTER = 39
# Issue 39's targets, each on the fresh sources and source-balanced: lever ratios within 25% on 80% of pairs, TPOT
# within x1.5 on 90% of points, TTFT within x1.5 on 70%; and the floor at or below every point of every source.
TARGET_RATIO_SHARE = 0.8
TARGET_TPOT_WIDE = 0.9
TARGET_TTFT_WIDE = 0.7
# What a lever ratio compares: two points of one setup (one source, or sources measured with one engine on the same
# machines) and one engine release that differ in exactly one of these groups of settings and agree on the rest. A
# format includes the output head's (gpt-fast quantizes it with the body).
LEVERS = {"batch": ("concurrency",), "format": ("weights", "kv", "head"), "lengths": ("prompt", "output", "cached"),
          "model": ("model",), "gpus": ("num_gpus",), "gpu": ("gpu",)}


@dataclass(frozen=True)
class Row:
    id: str
    metric: str  # a key of METRICS
    measured: float
    floor: float
    estimate: float
    source: str = ""
    gpu: str = ""

    @property
    def floor_ratio(self) -> float:
        return self.floor / self.measured

    @property
    def estimate_ratio(self) -> float:
        return self.estimate / self.measured

    def as_dict(self) -> dict[str, float | str]:
        return {"id": self.id, "metric": self.metric, "measured": self.measured, "floor": self.floor,
                "estimate": self.estimate, "floor_ratio": self.floor_ratio, "estimate_ratio": self.estimate_ratio,
                "source": self.source, "gpu": self.gpu}


def batch_s(dep: cost.Deployment, batch: int, prompt: int, output: int) -> float:
    """Wall time of a static batch: ``batch`` prompts prefilled in one pass, then ``output - 1`` decode steps
    (prefill yields the first token) at the mean context, prompt + output / 2. The mean context is exact for the
    KV term, which grows linearly; for the floor it can only lower the sum (a step's time is convex in the
    context), so the floor stays a floor."""
    prefill = float(cost.prefill_step(dep, prompt, batch).time_s)
    return prefill + (output - 1) * float(cost.decode_step(dep, batch, prompt + output / 2).time_s)


def predict_ms(point: ServingPoint, metric: str, mode: str, estimate: cost.Estimate | None = None,
               engine: str | None = None) -> float:
    """One point's ``metric`` (a key of :data:`METRICS`) in ``mode`` ("floor" or "estimate"), in ms; ``engine``
    overrides the source's launch profile (:func:`point_estimate`)."""
    dep = _deployment(point)
    return _priced_ms(cost.floor_deployment(dep) if mode == "floor"
                      else cost.estimate_deployment(dep, point_estimate(point, estimate, engine)), point, metric)


def point_estimate(point: ServingPoint, estimate: cost.Estimate | None = None,
                   engine: str | None = None) -> cost.Estimate:
    """``estimate`` (default: the default terms) with the engine the point's source ran: its launch profile (or
    ``engine``) and its GEMMs' accumulation (:attr:`stage5.published.Source.profile`), inputs, not constants."""
    source = SOURCES.get(point.source_key)
    est = estimate or cost.Estimate()
    if source is None:
        return est if engine is None else replace(est, engine=engine)
    return replace(est, engine=engine or source.profile, accumulation=source.accumulation)


def _priced_ms(dep: cost.Deployment, point: ServingPoint, metric: str) -> float:
    if metric == "tpot_ms":
        return 1e3 * float(cost.mixed_tpot_s(dep, point.concurrency, point.prompt, point.output))
    if metric == "ttft_ms":  # a prompt whose first tokens are cached prefills only the rest
        return 1e3 * float(cost.ttft_s(dep, point.prompt, point.cached / point.prompt))
    if metric == "batch_ms":
        return 1e3 * batch_s(dep, point.concurrency, point.prompt, point.output)
    raise ValueError(f"unknown metric {metric!r}; accepted: {', '.join(METRICS)}")


def _deployment(point: ServingPoint) -> cost.Deployment:
    source = SOURCES.get(point.source_key)
    policy = source.memory_policy if source else "fixed"
    head = {"head_bytes": weight_format(point.head).bytes} if point.head else {}
    return deployment(point.model, point.gpu, point.num_gpus, point.weights, point.kv, memory_policy=policy, **head)


def queued(point: ServingPoint) -> bool:
    """Whether some of the point's requests must wait: its concurrency exceeds the engine's cap on running
    requests (vLLM's ``max_num_seqs``) or the sequences of prompt + output tokens whose KV cache fits at once
    (:func:`stage5.cost.max_concurrency`, under the engine's memory policy). TensorRT-LLM, NIM's backend, admits a
    request only when its whole prompt and answer are sure to fit (its default capacity policy,
    GUARANTEED_NO_EVICT: TensorRT-LLM performance-tuning guide, "Useful Runtime Options", section "Capacity
    Scheduler Policy"), so the whole length is what counts. A static batch never queues: it ran as published.
    Where the source's setup fixes the engine's KV pool (:attr:`ServingPoint.kv_pool`, in blocks), that pool counts
    instead of the cost model's budget, in whole blocks per sequence."""
    if point.static:
        return False
    source = SOURCES.get(point.source_key)
    if source and source.max_running is not None and point.concurrency > source.max_running:
        return True
    if point.kv_pool is not None:
        blocks, block_tokens = point.kv_pool
        return point.concurrency > blocks // -(-(point.prompt + point.output) // block_tokens)
    return point.concurrency > int(cost.max_concurrency(_deployment(point), point.prompt + point.output))


def memory_disagrees(point: ServingPoint) -> bool:
    """A static batch the engine ran whose KV cache the cost model's memory budget (engine's policy) says does not
    fit: evidence against the memory model, reported, not hidden."""
    if not point.static:
        return False
    try:
        return point.concurrency > int(cost.max_concurrency(_deployment(point), point.prompt + point.output))
    except cost.InfeasibleDeployment:
        return True


def excluded() -> list[ServingPoint]:
    """The published rows :func:`rows` sets aside because their requests queue."""
    return [p for p in SERVING_POINTS if queued(p)]


def priced_metrics() -> list[tuple[ServingPoint, str]]:
    """(point, metric) for every published latency whose requests all run at once (not :func:`queued`): the rows
    :func:`rows` prices, in its order."""
    return [(p, m) for p in SERVING_POINTS if not queued(p) for m in METRICS if getattr(p, m) is not None]


def rows(estimate: cost.Estimate | None = None, engine: str | None = None) -> list[Row]:
    """Every row of :func:`priced_metrics` with both predictions (``estimate``: the estimate's terms, default
    ones; ``engine``: one launch profile for every source instead of each source's own)."""
    return [Row(p.id, m, getattr(p, m), predict_ms(p, m, "floor"), predict_ms(p, m, "estimate", estimate, engine),
                p.source_key, p.gpu) for p, m in priced_metrics()]


def in_band(ratio: float) -> bool:
    """Whether an estimate / measured ratio lies in :data:`WITHIN` (within 25%)."""
    return WITHIN[0] <= ratio <= WITHIN[1]


def in_wide_band(ratio: float) -> bool:
    """Whether an estimate / measured ratio lies in :data:`WIDE` (within x1.5)."""
    return WIDE[0] <= ratio <= WIDE[1]


def _shares(table: list[Row]) -> dict[str, float]:
    ratios = [r.estimate_ratio for r in table]
    if not ratios:
        return {"points": 0}
    return {"points": len(ratios), "within_25pct": float(np.mean([in_band(x) for x in ratios])),
            "within_1.5x": float(np.mean([in_wide_band(x) for x in ratios])),
            "median_ratio": float(np.median(ratios)),
            "floor_is_lower_bound": bool(all(r.floor <= r.measured for r in table))}


def _grouped(table: list[Row], key) -> dict[str, dict[str, float]]:
    groups: dict[str, list[Row]] = {}
    for r in table:
        groups.setdefault(key(r), []).append(r)
    return {k: _shares(v) for k, v in sorted(groups.items())}


def balanced(by_source: dict[str, dict[str, float]]) -> dict[str, float]:
    """Source-balanced shares: the mean over sources of each source's share (sources without points left out)."""
    scored = [s for s in by_source.values() if s.get("points")]
    return {k: float(np.mean([s[k] for s in scored])) if scored else float("nan")
            for k in ("within_25pct", "within_1.5x")}


def is_fresh(source_key: str) -> bool:
    """Whether a source was added after the estimate's constants were last fixed (:data:`FRESH_AFTER`)."""
    return SOURCES[source_key].added_in >= FRESH_AFTER


SPLITS = {"in_sample": lambda k: SOURCES[k].in_sample, "held_out": lambda k: not seen_by_fit(k),
          "fresh": is_fresh}


def shares(table: list[Row]) -> dict[str, object]:
    """Shares of ``table`` per source (with each source's shares per metric), per metric and per GPU,
    source-balanced, and for each split of the sources (:data:`SPLITS`: in sample, held out, and the fresh sources
    added after the constants were fixed), with the split's source-balanced shares per metric."""
    by_source = _grouped(table, lambda r: r.source)
    for name, entry in by_source.items():
        entry["by_metric"] = _grouped([r for r in table if r.source == name], lambda r: METRICS[r.metric])
    split = {}
    for name, belongs in SPLITS.items():
        part = [r for r in table if belongs(r.source)]
        part_sources = _grouped(part, lambda r: r.source)
        per_metric = {label: balanced(_grouped([r for r in part if r.metric == m], lambda r: r.source))
                      for m, label in METRICS.items() if any(r.metric == m for r in part)}
        split[name] = {"sources": sorted(part_sources), **_shares(part), "source_balanced": balanced(part_sources),
                       "by_metric": per_metric}
    return {"by_source": by_source, "by_metric": _grouped(table, lambda r: METRICS[r.metric]),
            "by_gpu": _grouped(table, lambda r: r.gpu), "source_balanced": balanced(by_source), **split}


# ------------------------------------------------------------------------------------ lever ratios
@dataclass(frozen=True)
class Pair:
    """Two points of one setup (:func:`pairs`) that differ in one lever: the measured and the estimated ratio of their metric."""

    source: str
    lever: str  # a key of LEVERS
    metric: str
    a: str
    b: str
    measured: float  # measured a / measured b
    estimate: float  # estimate a / estimate b

    @property
    def error(self) -> float:
        """The estimated ratio over the measured one: 1 when the estimate gets the lever's effect exactly."""
        return self.estimate / self.measured


def _settings(point: ServingPoint) -> dict[str, tuple]:
    model = point.model if isinstance(point.model, str) else point.model.name
    values = {"model": model, **{f: getattr(point, f) for fs in LEVERS.values() for f in fs if f != "model"}}
    return {lever: tuple(values[f] for f in fields) for lever, fields in LEVERS.items()}


def _setup(source: str) -> str:
    return setup_of(source) if source in SOURCES else source


def _pair_source(a: str, b: str) -> str:
    """The source a pair is counted under: its rows' source, or, for a pair across two sources of one setup, the one
    not fitted on."""
    if a == b:
        return a
    held = [k for k in (a, b) if not SOURCES[k].in_sample]
    return held[0] if held else min(a, b)


def pairs(table: list[Row], points: dict[str, ServingPoint] | None = None) -> list[Pair]:
    """Every pair of rows of one setup (a source, or the sources measured with one engine on the same machines:
    :func:`stage5.published.setup_of`), one engine release (:attr:`ServingPoint.variant`) and one metric whose points
    differ in exactly one lever (:data:`LEVERS`), in the table's order; a pair across two sources of a setup is counted
    under the held-out one (:func:`_pair_source`). ``points``: the rows' points by id (default:
    :data:`stage5.published.SERVING_POINTS`)."""
    points = points if points is not None else {p.id: p for p in SERVING_POINTS}
    groups: dict[tuple, list[Row]] = {}
    for r in table:
        groups.setdefault((_setup(r.source), points[r.id].variant, r.metric), []).append(r)
    out = []
    for (_, _, metric), rows_ in groups.items():
        settings = [_settings(points[r.id]) for r in rows_]
        for i in range(len(rows_)):
            for j in range(i + 1, len(rows_)):
                differ = [lever for lever in LEVERS if settings[i][lever] != settings[j][lever]]
                if len(differ) == 1:
                    a, b = rows_[i], rows_[j]
                    out.append(Pair(_pair_source(a.source, b.source), differ[0], metric, a.id, b.id,
                                    a.measured / b.measured, a.estimate / b.estimate))
    return out


def _pair_shares(group: list[Pair]) -> dict[str, float]:
    return {"pairs": len(group), "within_25pct": float(np.mean([in_band(p.error) for p in group])) if group
            else float("nan")}


def ratio_shares(table: list[Row]) -> dict[str, object]:
    """Lever ratios scored like the absolute figures: the share of pairs (:func:`pairs`) whose estimated ratio is
    within 25% of the measured one, per lever, per source (and per lever within it), source-balanced, and for each
    split of the sources (:data:`SPLITS`)."""
    every = pairs(table)

    def summarise(group: list[Pair]) -> dict[str, object]:
        by_source = {}
        for k in sorted({p.source for p in group}):
            mine = [p for p in group if p.source == k]
            by_source[k] = {**_pair_shares(mine), "by_lever": {lv: _pair_shares([p for p in mine if p.lever == lv])
                                                                for lv in LEVERS if any(p.lever == lv for p in mine)}}
        return {**_pair_shares(group),
                "source_balanced": float(np.mean([s["within_25pct"] for s in by_source.values()])) if by_source
                else float("nan"),
                "by_lever": {lv: _pair_shares([p for p in group if p.lever == lv]) for lv in LEVERS
                             if any(p.lever == lv for p in group)},
                "by_source": by_source}

    out = summarise(every)
    for name, belongs in SPLITS.items():
        out[name] = summarise([p for p in every if belongs(p.source)])
    return out


# ------------------------------------------------------------------------------------ helpers
def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    order = np.argsort(values)
    v, w = values[order], weights[order]
    cum = (np.cumsum(w) - 0.5 * w) / w.sum()
    return float(np.interp(q, cum, v))


def by_concurrency(report: dict[str, object], bands: dict[str, tuple[int, int]]) -> dict[str, tuple[int, float, float]]:
    """For each named band of concurrency ``(low, high)``, inclusive: the report's points in it, the percentage
    whose estimate is :func:`in_band`, and the median estimate / measured."""
    concurrency = {p.id: p.concurrency for p in SERVING_POINTS}
    out = {}
    for name, (lo, hi) in bands.items():
        ratios = [p["estimate_ratio"] for p in report["points"] if lo <= concurrency[p["id"]] <= hi]
        out[name] = (len(ratios), 100 * sum(map(in_band, ratios)) / len(ratios), float(np.median(ratios)))
    return out


def summary(estimate: cost.Estimate | None = None) -> dict[str, object]:
    """The validate report: every row; the pooled share of estimates within :data:`WITHIN`; whether the floor is
    at or below every measurement; the shares per source, metric and GPU, source-balanced, in-sample and held
    out (:func:`shares`); the sources with their address, version and setup; the rows set aside; the published
    rows no mode prices, with the reason (:data:`stage5.published.NOT_PRICED`)."""
    table = rows(estimate)
    within = float(np.mean([in_band(r.estimate_ratio) for r in table]))
    return {"points": [r.as_dict() for r in table], "estimate_within_25pct": within,
            "floor_is_lower_bound": bool(all(r.floor <= r.measured for r in table)),
            "shares": shares(table),
            "sources": {k: {"engine": s.engine, "address": s.address, "version": s.version, "setup": s.setup,
                            "in_sample": s.in_sample, "split": s.split, "fresh": is_fresh(k), "profile": s.profile,
                            "accumulation": s.accumulation} for k, s in SOURCES.items()},
            "set_aside_queued": [p.id for p in excluded()],
            "not_priced": [{"source": k, "row": row, "reason": why} for k, row, why in NOT_PRICED],
            "static_batches_memory_model_rejects": [p.id for p in SERVING_POINTS if memory_disagrees(p)],
            "chosen_after_looking": after_looking(),
            "fresh_sources": sorted(k for k in SOURCES if is_fresh(k)),
            "ratios": ratio_shares(table), "below_floor": below_floor(table)}


# A published row below the floor is below the physics: the hardware cannot run that fast, so the row is a source
# error or a setting the source does not state (a cached prompt, a smaller model). validate flags such a row with the
# reason instead of failing on it; none of the current sources has one.
BELOW_FLOOR_REASON = ("published time below the floor (the datasheet's peak bandwidth and FLOP/s, every kernel "
                      "overlapped): physically impossible as described, so a source error or an unstated setting")


def below_floor(table: list[Row] | None = None) -> list[dict[str, object]]:
    """The rows whose measurement sits below their floor, each with the floor / measured ratio and the reason."""
    table = rows() if table is None else table
    return [{"id": r.id, "metric": r.metric, "source": r.source, "measured": r.measured, "floor": r.floor,
             "floor_ratio": r.floor_ratio, "reason": BELOW_FLOOR_REASON} for r in table if r.floor > r.measured]


def after_looking() -> dict[str, dict[str, object]]:
    """For each term in :data:`CHOSEN_AFTER_LOOKING`: the sources looked at, and the source-balanced shares and
    those sources' shares with the term switched off (the report's own shares are the ones with it)."""
    out = {}
    for term, looked_at in CHOSEN_AFTER_LOOKING.items():
        without = shares(rows(cost.Estimate().without(term)))
        out[term] = {"looked_at": list(looked_at), "source_balanced_without": without["source_balanced"],
                     "looked_at_without": {k: without["by_source"][k] for k in looked_at}}
    return out


def term_shares() -> dict[str, float]:
    """Source-balanced share within 25% with all default terms, and with each term switched off alone."""
    def balanced_share(est: cost.Estimate) -> float:
        return float(shares(rows(est))["source_balanced"]["within_25pct"])

    out = {"all terms": balanced_share(cost.Estimate())}
    for term in cost.TERMS:
        out[f"without {term}"] = balanced_share(cost.Estimate().without(term))
    return out


# ------------------------------------------------------------------------------------ what fitting would buy
# The estimate's constants may not be set from these rows (issue 29). To show what that rule costs, they are fitted
# anyway: each group of rows gets the bandwidth fraction, the MFU (prefill and decode alike) and, where a fit says
# so, a fixed time per engine step, chosen from this grid to maximise the source-balanced shares. In sample by
# construction, and a lower bound on what fitting reaches (adding points to the grid can only find more); not a
# prediction for any other deployment. The grid is wide on purpose: its edges were moved out until no choice sat on
# one or they reached what physics allows (a fraction of at most 1); when it was set, widening it further
# (bandwidth from 5%, MFU from 2%, up to 256 ms per step) changed no share.
FIT_BANDWIDTH = tuple(round(0.10 + 0.05 * i, 2) for i in range(19))  # 0.10 to 1.00
FIT_MFU = tuple(round(0.05 + 0.05 * i, 2) for i in range(20))  # 0.05 to 1.00
FIT_STEP_MS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
# (label, what the rows are grouped by, whether a fixed time per step is fitted too)
FITS = (("one set for every row", "all", False), ("one set per GPU", "gpu", False),
        ("one set per GPU, with a time per step", "gpu", True),
        ("one set per source, with a time per step", "source", True))
_EPS = 1e-9  # shares are sums of fractions: compare them with this slack


@dataclass(frozen=True)
class Fit:
    """What constants fitted on the rows reach, as source-balanced shares.

    ``within_25pct``, ``within_wide``: the best share in each band, each fitted on its own (in general by two
    different sets of constants). ``frontier``: the pairs (within 25%, within x1.5) that one set of constants reaches
    and no other set beats in both, best within 25% first. ``tight_constants``: for each group, the range of each
    constant over the choices that give that group its best within-25% count (ties are common where a group has few
    rows): ((bandwidth fraction low, high), (MFU low, high), (ms per step low, high)). ``tight_hits``: for each
    group, its share of rows within 25% at that best count, each row weighted as in the source-balanced share (0: no
    choice puts any of its rows there, and the ranges are the whole grid).
    """

    label: str
    group_by: str  # "all", "gpu" or "source"
    step_time: bool
    within_25pct: float
    within_wide: float
    frontier: tuple[tuple[float, float], ...]
    tight_constants: dict[str, tuple[tuple[float, float], tuple[float, float], tuple[float, float]]]
    tight_hits: dict[str, float]

    def reaches(self, within_25pct: float, within_wide: float) -> bool:
        """Whether one set of constants reaches both shares at once."""
        return any(a >= within_25pct - _EPS and b >= within_wide - _EPS for a, b in self.frontier)


def _pareto(pairs: np.ndarray) -> np.ndarray:
    """The rows of ``pairs`` (n x 2) that no other row matches or beats in both columns, first column descending."""
    pairs = np.unique(np.round(pairs, 12), axis=0)
    keep, best = [], -np.inf
    for a, b in pairs[np.lexsort((-pairs[:, 1], -pairs[:, 0]))]:
        if b > best + _EPS:
            keep.append((a, b))
            best = b
    return np.array(keep)


def fitted_shares(bandwidths: tuple[float, ...] = FIT_BANDWIDTH, mfus: tuple[float, ...] = FIT_MFU,
                    step_ms: tuple[float, ...] = FIT_STEP_MS,
                    fits: tuple[tuple[str, str, bool], ...] = FITS) -> list[Fit]:
    """For each of ``fits``, what the rows reach when every group of them gets its own constants from the grid.

    A source-balanced share is a sum over rows, each weighted one over (sources x rows of its source), so it is a
    sum over groups: the best share in one band takes each group's best weighted count, and the shares one set of
    constants reaches in both bands at once are the sums of one choice per group (their Pareto frontier, built group
    by group). The time per step adds once per step the model prices: one for a TPOT or a TTFT (:func:`ttft_s`
    prices a prompt as one prefill step, whatever its length), ``output`` for a static batch (its prefill and
    ``output - 1`` decode steps, as :func:`batch_s` prices it). It stands in for the engine's launch time, so the
    fit charges no host time of its own (every row priced as a "graphs" engine)."""
    if not (bandwidths and mfus and step_ms):
        raise ValueError("fitted_shares needs at least one bandwidth fraction, one MFU and one time per step")
    if not all(np.isfinite(o) and o >= 0 for o in step_ms):
        raise ValueError(f"a time per step is a finite number of ms, 0 or more; got {list(step_ms)}")
    unknown = {g for _, g, _ in fits} - {"all", "gpu", "source"}
    if unknown:
        raise ValueError(f"fits group rows by 'all', 'gpu' or 'source'; got {sorted(unknown)}")
    if 0 not in step_ms and not all(step_time for _, _, step_time in fits):
        raise ValueError(f"a fit without a time per step needs 0 among the times per step; got {list(step_ms)}")
    priced = priced_metrics()
    base = [_deployment(p) for p, _ in priced]
    measured = np.array([getattr(p, m) for p, m in priced])
    steps = np.array([p.output if m == "batch_ms" else 1 for p, m in priced])
    keys = {"all": np.full(len(priced), "every row"), "gpu": np.array([p.gpu for p, _ in priced]),
            "source": np.array([p.source_key for p, _ in priced])}
    _, inverse, counts = np.unique(keys["source"], return_inverse=True, return_counts=True)
    weight = 1 / (len(counts) * counts[inverse])
    grid = [(b, u) for b in bandwidths for u in mfus]
    est = np.array([[_priced_ms(cost.estimate_deployment(d, point_estimate(p, cost.Estimate(
                         bandwidth_fraction=b, prefill_mfu=u, decode_mfu=u), engine="graphs")), p, m)
                     for d, (p, m) in zip(base, priced, strict=True)] for b, u in grid])
    candidates = np.array([(b, u, o) for (b, u) in grid for o in step_ms])
    ratio = (est[:, None, :] + np.asarray(step_ms)[None, :, None] * steps) / measured
    ratio = ratio.reshape(len(candidates), len(priced))
    tight = ((ratio >= WITHIN[0]) & (ratio <= WITHIN[1])) * weight
    wide = ((ratio >= WIDE[0]) & (ratio <= WIDE[1])) * weight
    out = []
    for label, group_by, step_time in fits:
        allowed = candidates[:, 2] == 0 if not step_time else np.ones(len(candidates), dtype=bool)
        chosen, tight_ok, wide_ok = candidates[allowed], tight[allowed], wide[allowed]
        frontier, ranges, hits = np.zeros((1, 2)), {}, {}
        for group in np.unique(keys[group_by]):
            rows_in = keys[group_by] == group
            scores = np.column_stack([tight_ok[:, rows_in].sum(1), wide_ok[:, rows_in].sum(1)])
            frontier = _pareto((frontier[:, None, :] + _pareto(scores)[None, :, :]).reshape(-1, 2))
            best = chosen[scores[:, 0] >= scores[:, 0].max() - _EPS]
            ranges[str(group)] = tuple((float(best[:, i].min()), float(best[:, i].max())) for i in range(3))
            hits[str(group)] = float(scores[:, 0].max() / weight[rows_in].sum())
        out.append(Fit(label, group_by, step_time, float(frontier[:, 0].max()), float(frontier[:, 1].max()),
                       tuple((float(a), float(b)) for a, b in frontier), ranges, hits))
    return out


def plot_predicted_vs_measured(report: dict[str, object] | None = None, ax=None):
    """Predicted against measured for both modes on log-log axes, with the y = x line and the 0.8-1.25 band (every
    metric: a static batch's wall time is in seconds' range, a TPOT in milliseconds')."""
    import matplotlib.pyplot as plt

    report = report or summary()
    if ax is None:
        _, ax = plt.subplots(figsize=(5.6, 5.2))
    pts = report["points"]
    measured = np.array([p["measured"] for p in pts])
    lo, hi = measured.min() / 3, measured.max() * 3
    line = np.array([lo, hi])
    ax.fill_between(line, WITHIN[0] * line, WITHIN[1] * line, color="0.9", label="within 0.8-1.25x")
    ax.plot(line, line, color="k", lw=0.8, label="y = x")
    for mode, colour in (("floor", "C0"), ("estimate", "C3")):
        for metric, marker, fill in (("tpot_ms", "o", True), ("ttft_ms", "o", False), ("batch_ms", "s", True)):
            sel = [p for p in pts if p["metric"] == metric]
            ax.scatter([p["measured"] for p in sel], [p[mode] for p in sel], color=colour if fill else "none",
                       edgecolors=colour, marker=marker if mode == "estimate" else "v", s=14,
                       label=f"{mode}, {METRICS[metric]}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured (ms)")
    ax.set_ylabel("predicted (ms)")
    ax.legend(fontsize=7, loc="upper left")
    return ax


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m stage5 validate", description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--fitted", action="store_true",
                        help="print instead what constants fitted on these rows would reach, in sample (slower: "
                             f"every row is priced {len(FIT_BANDWIDTH) * len(FIT_MFU)} times)")
    args = parser.parse_args(argv)
    if args.fitted and args.json:
        print(dumps([asdict(fit) for fit in fitted_shares()], indent=1))
        return 0
    if args.fitted:
        print("constants fitted on the published rows themselves (in sample by construction; the best on this grid, "
              "so fitting reaches at least these), source-balanced:")
        print("  (best within 25% and best within x1.5 are each fitted alone; 'one set' says whether one set of "
              "constants reaches both targets)")
        for fit in fitted_shares():
            both = "met" if fit.reaches(TARGET_SHARE, TARGET_WIDE_SHARE) else "no"
            print(f"  {fit.label:<42} best within 25%: {fit.within_25pct:>6.1%}  best within x1.5: "
                  f"{fit.within_wide:>6.1%}  both targets, one set: {both}")
        return 0
    report = summary()
    if args.json:
        print(dumps(report, indent=1))
        return 0
    print(f"{'point':<44} {'metric':<8} {'measured':>9} {'floor':>9} {'estimate':>9} {'f/m':>6} {'e/m':>6}")
    for r in report["points"]:
        print(f"{r['id']:<44} {r['metric']:<8} {r['measured']:>9.2f} {r['floor']:>9.2f} {r['estimate']:>9.2f} "
              f"{r['floor_ratio']:>6.2f} {r['estimate_ratio']:>6.2f}")
    print(f"estimate within 0.8-1.25 of the measurement: {report['estimate_within_25pct']:.0%} of points; "
          f"floor at or below every measurement: {report['floor_is_lower_bound']}")
    sh = report["shares"]
    for group in ("by_source", "by_metric", "by_gpu"):
        print(group.replace("_", " ") + ":")
        for name, g in sh[group].items():
            print(f"  {name:<16} {g['points']:>4} points  within 25%: {g['within_25pct']:>4.0%}  "
                  f"within x1.5: {g['within_1.5x']:>4.0%}  median e/m {g['median_ratio']:.2f}")
    for name in ("source_balanced",):
        print(f"source-balanced: within 25% {sh[name]['within_25pct']:.0%}, within x1.5 {sh[name]['within_1.5x']:.0%}")
    for name in ("in_sample", "held_out"):
        part = sh[name]
        print(f"{name.replace('_', ' ')} ({', '.join(part['sources'])}): source-balanced within 25% "
              f"{part['source_balanced']['within_25pct']:.0%}, within x1.5 {part['source_balanced']['within_1.5x']:.0%}")
    print(f"fresh (added after the constants were fixed, issue {FRESH_AFTER}: {', '.join(sh['fresh']['sources'])}): "
          f"source-balanced within 25% {sh['fresh']['source_balanced']['within_25pct']:.0%}, within x1.5 "
          f"{sh['fresh']['source_balanced']['within_1.5x']:.0%}")
    for name in SPLITS:
        per = ", ".join(f"{m} {v['within_25pct']:.0%} / {v['within_1.5x']:.0%}" for m, v in sh[name]["by_metric"].items())
        print(f"  {name.replace('_', ' ')} by regime (within 25% / within x1.5): {per}")
    for term, got in report["chosen_after_looking"].items():
        off = got["source_balanced_without"]
        print(f"chosen after looking at {', '.join(got['looked_at'])}: {term}; without it, source-balanced within 25% "
              f"{off['within_25pct']:.0%}, within x1.5 {off['within_1.5x']:.0%}")
    ratios = report["ratios"]
    print(f"lever ratios (pairs of one setup differing in one lever), estimated within 25% of measured: "
          f"{ratios['within_25pct']:.0%} of {ratios['pairs']} pairs, source-balanced {ratios['source_balanced']:.0%}")
    for lever, got in ratios["by_lever"].items():
        print(f"  {lever:<8} {got['pairs']:>5} pairs  within 25%: {got['within_25pct']:>4.0%}")
    for name in SPLITS:
        part = ratios[name]
        print(f"  {name.replace('_', ' ')}: source-balanced {part['source_balanced']:.0%} of {part['pairs']} pairs")
    for source, got in ratios["by_source"].items():
        print(f"  {source:<16} {got['pairs']:>5} pairs  within 25%: {got['within_25pct']:>4.0%}")
    for flag in report["below_floor"]:
        print(f"below the floor: {flag['id']} ({flag['metric']}), floor / measured {flag['floor_ratio']:.2f}: "
              f"{flag['reason']}")
    return 0
