"""Fitting the estimate's free constants with a split, scoring them out of sample, and the calibrated error band.

The estimate's free constants (:mod:`stage5.fitted`: achieved bandwidth, a GEMM-efficiency scale and an all-reduce
speed scale per GPU family,
the launch cost per kernel of eager engines, the fixed time per step of each graphs-engine class) are fitted on the
published sources marked ``fit`` (:attr:`stage5.published.Source.split`) and frozen in :mod:`stage5.fitted`;
``python -m stage5 validate --refit`` recomputes them (:func:`fit_constants`) and prints them beside the frozen ones.

Every accuracy reported is out of sample: leave-one-source-out over all sources (:func:`loso_estimates`: a fit
source is scored by a refit without it; a source measured on a fit source's engine and machines, its setup
(:func:`stage5.published.setup_of`), by a refit without that source; any other source by the frozen fit, which never
saw it), and the held-out sources alone, those whose setup the fit never saw (:func:`fit_report`). The fit report's
shares and every band weigh each setup alike.

The error band printed with an estimate (:func:`band`) is a prediction interval for the measured / estimate of a
source it has not seen, built from the leave-one-source-out rows of its regime (metric; batch 1 or batched; engine
class) by :func:`between_sources_band`: the sources' spread between them as well as within them, each source weighing
alike, from at least :data:`MIN_BAND_SOURCES` sources of the GPU's family, or, saying so, of every family; with fewer
there is no band. Its calibration (claimed coverage against the share of an unseen source's rows it holds, judged by
nested leave-one-source-out: the band for a source is built as if that source had never been published) is in
:func:`calibration`, beside the rule used before (:func:`rows_band`) for comparison.

How a row is fitted fast: each priced row is split once into its steps, each step's bytes and FLOPs priced at unit
efficiency (:func:`decompose`), so a step under any constants is max(weights / f, FLOPs / e) + KV / f + all-reduce / r,
or the host's launch time where longer, plus the fixed step time: the estimate's own step formula
(:class:`stage5.cost.StepTime`), checked against :func:`stage5.validate.rows` by tests/test_fit.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from stage5 import cost, fitted
from stage5.inputs import OneLineParser, dumps
from stage5.published import SOURCES, ServingPoint, seen_by_fit, setup_of
from stage5.validate import (
    METRICS,
    WIDE,
    WITHIN,
    _deployment,
    _weighted_quantile,
    point_estimate,
    priced_metrics,
)

MIN_BAND_SOURCES = 3  # a band rests on at least this many sources, or there is none
BAND_COVERAGE = 0.8
CLAIMS = (0.5, 0.6, 0.7, 0.8, 0.9)  # the claimed coverages the calibration plot checks
# The prior launch cost per kernel, before any fit: gpt-fast's eager baseline, "heavily CPU overhead bound" at 25.5
# tokens/s on Llama 2 7B (PyTorch blog, "Accelerating Generative AI with PyTorch II: GPT, Fast", 2023), over its 32
# layers of the 42 kernels an unfused Llama layer launches (stage5.cost.ENGINES["eager"]).
PRIOR_LAUNCH_S = 1 / 25.5 / 32 / 42
# The grids coordinate descent searches (deterministic: the first minimum in grid order wins).
FIT_GRIDS = {
    "bw": tuple(round(0.20 + 0.01 * i, 2) for i in range(81)),  # 0.20 to 1.00 of the datasheet's bandwidth
    "gemm": tuple(round(0.10 + 0.01 * i, 2) for i in range(151)),  # 0.10 to 1.60 x the benchmark efficiency
    "ar": tuple(round(0.10 + 0.01 * i, 2) for i in range(141)),  # 0.10 to 1.50 x the link efficiency
    "launch": tuple(round(0.5e-6 * i, 8) for i in range(121)),  # 0 to 60 us per kernel
    "step": tuple(round(5e-5 * i, 6) for i in range(201)),  # 0 to 10 ms per step
}
MAX_SWEEPS = 50


# ------------------------------------------------------------------------------------ the rows, decomposed
@dataclass(frozen=True)
class Decomposed:
    """Every priced row (:func:`stage5.validate.priced_metrics`) as steps priced at unit efficiency. Per step:
    ``row`` (its row's index), ``count`` (how many such steps the row takes), ``m`` (weight and other streamed bytes /
    bandwidth), ``c`` (FLOPs / peak), ``k`` (attention's KV reads / bandwidth, added), ``a`` (all-reduces), ``e0``
    (the benchmark GEMM efficiency of its chip and format), ``family``, ``kernels`` (kernels launched from Python per
    pass), ``step_class`` and ``extra_step`` (the profile's cited fixed time). Per row: ``measured``, ``source``,
    ``setup`` (:func:`stage5.published.setup_of`: the independent source it counts as out of sample), ``metric``,
    ``batch1``, ``band_class``, ``row_family``."""

    row: np.ndarray
    count: np.ndarray
    m: np.ndarray
    c: np.ndarray
    k: np.ndarray
    a: np.ndarray
    e0: np.ndarray
    family: np.ndarray
    kernels: np.ndarray
    step_class: np.ndarray
    extra_step: np.ndarray
    measured: np.ndarray
    source: np.ndarray
    setup: np.ndarray
    metric: np.ndarray
    batch1: np.ndarray
    band_class: np.ndarray
    row_family: np.ndarray
    ids: tuple[str, ...]


def _steps(dep: cost.Deployment, point: ServingPoint, metric: str) -> list[tuple[float, cost.StepTime]]:
    """(count, step) for one row, as :func:`stage5.validate._priced_ms` prices it (the same calls)."""
    if metric == "tpot_ms":  # stage5.cost.mixed_tpot_s, step by step
        c, p, o = point.concurrency, point.prompt, point.output
        if not dep.estimate.mixed_step:
            return [(1, cost.decode_step(dep, c, p + o / 2))]
        chunk = np.clip((c - 1) * p / o, 0, np.maximum(dep.estimate.step_token_budget - c, 0))
        return [(1, cost.mixed_step(dep, c, p + o / 2, chunk, p / 2))]
    if metric == "ttft_ms":  # stage5.cost.ttft_s
        hit = point.cached / point.prompt
        computed = max(1.0, float(np.round(point.prompt * (1 - hit))))
        return [(1, cost.prefill_step(dep, computed, cached=point.prompt - computed))]
    prompt, output, batch = point.prompt, point.output, point.concurrency  # stage5.validate.batch_s
    return [(1, cost.prefill_step(dep, prompt, batch)),
            (output - 1, cost.decode_step(dep, batch, prompt + output / 2))]


@lru_cache(maxsize=1)
def decompose() -> Decomposed:
    """Every priced row's steps at unit efficiency (computed once per process)."""
    cols: dict[str, list] = {k: [] for k in ("row", "count", "m", "c", "k", "a", "e0", "family", "kernels",
                                             "step_class", "extra_step")}
    per_row: dict[str, list] = {k: [] for k in ("measured", "source", "setup", "metric", "batch1", "band_class",
                                                "row_family", "ids")}
    for i, (point, metric) in enumerate(priced_metrics()):
        est = point_estimate(point)
        unit = replace(est, bandwidth_fraction=1.0, prefill_mfu=1.0, decode_mfu=1.0, engine="unknown",
                       allreduce_scale=1.0)
        dep = cost.estimate_deployment(_deployment(point), unit)
        no_ar = cost.estimate_deployment(dep, replace(unit, allreduce=False))
        profile = cost.ENGINES[est.engine]
        e0 = cost.gemm_efficiency(dep.gpu, cost.tensor_format(dep)[0])
        for (n, step), (_, bare) in zip(_steps(dep, point, metric), _steps(no_ar, point, metric), strict=True):
            k = float(bare.extra_s)
            for key, value in (("row", i), ("count", n), ("m", float(step.memory_s)), ("c", float(step.compute_s)),
                               ("k", k), ("a", float(step.extra_s) - k), ("e0", e0),
                               ("family", cost.gpu_family(dep.gpu)),
                               ("kernels", dep.model.num_layers * profile.kernels_per_layer),
                               ("step_class", profile.step_class or ""), ("extra_step", profile.extra_step_s)):
                cols[key].append(value)
        source = SOURCES[point.source_key]
        for key, value in (("measured", getattr(point, metric)), ("source", point.source_key),
                           ("setup", setup_of(point.source_key)), ("metric", metric),
                           ("batch1", point.concurrency == 1), ("band_class", cost.ENGINES[source.profile].band_class),
                           ("row_family", cost.gpu_family(dep.gpu)), ("ids", point.id)):
            per_row[key].append(value)
    return Decomposed(**{k: np.asarray(v) for k, v in cols.items()},
                      **{k: np.asarray(v) for k, v in per_row.items() if k != "ids"}, ids=tuple(per_row["ids"]))


# ------------------------------------------------------------------------------------ constants and the estimate
def frozen() -> dict[str, float]:
    """The frozen constants (:mod:`stage5.fitted`) as one flat dict: "bw:<family>", "gemm:<family>", "launch",
    "step:<class>"."""
    return {**{f"bw:{k}": v for k, v in fitted.BANDWIDTH_FRACTION.items()},
            **{f"gemm:{k}": v for k, v in fitted.GEMM_SCALE.items()},
            **{f"ar:{k}": v for k, v in fitted.ALLREDUCE_SCALE.items()}, "launch": fitted.LAUNCH_S,
            **{f"step:{k}": v for k, v in fitted.STEP_S.items()}}


def _prior(name: str) -> float:
    kind = name.split(":")[0]
    return {"bw": cost.PRIOR_BANDWIDTH_FRACTION, "gemm": 1.0, "ar": 1.0, "launch": PRIOR_LAUNCH_S, "step": 0.0}[kind]


def _value(params: dict[str, float], name: str) -> float:
    return params.get(name, _prior(name))


def _vectors(params: dict[str, float], d: Decomposed) -> dict[str, np.ndarray | float]:
    """Each step's bandwidth share, GEMM scale and fixed step time under ``params``, and the launch cost."""
    fam = {x: (_value(params, f"bw:{x}"), _value(params, f"gemm:{x}"), _value(params, f"ar:{x}"))
           for x in set(d.family)}
    steps = {x: _value(params, f"step:{x}") if x else 0.0 for x in set(d.step_class)}
    return {"f": np.array([fam[x][0] for x in d.family]), "g": np.array([fam[x][1] for x in d.family]),
            "r": np.array([fam[x][2] for x in d.family]),
            "s": np.array([steps[x] for x in d.step_class]) + d.extra_step, "launch": _value(params, "launch")}


def _rows_ms(v: dict[str, np.ndarray | float], d: Decomposed) -> np.ndarray:
    """Row estimates in ms from per-step vectors (each may carry a leading grid axis)."""
    e = np.minimum(1.0, d.e0 * v["g"])
    t = np.maximum(np.maximum(d.m / v["f"], d.c / e) + d.k / v["f"] + d.a / v["r"], d.kernels * v["launch"]) + v["s"]
    t = np.atleast_2d(t * d.count)
    out = np.zeros((t.shape[0], len(d.measured)))
    np.add.at(out.T, d.row, t.T)
    return 1e3 * out


def estimates(params: dict[str, float], d: Decomposed | None = None) -> np.ndarray:
    """Every row's estimate in ms under ``params`` (constants not named take their priors)."""
    d = d or decompose()
    return _rows_ms(_vectors(params, d), d)[0]


def _objective_rows(d: Decomposed, sources: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The rows of ``sources`` and each row's weight: 1 / (sources x rows of its source)."""
    keep = np.isin(d.source, sources)
    _, inverse, counts = np.unique(d.source[keep], return_inverse=True, return_counts=True)
    return keep, 1.0 / (len(counts) * counts[inverse])


def objective(params: dict[str, float], sources: tuple[str, ...], d: Decomposed | None = None) -> float:
    """The fit's objective: the source-balanced mean of |log(measured / estimate)| over ``sources``' rows."""
    d = d or decompose()
    keep, w = _objective_rows(d, sources)
    return float(np.sum(w * np.abs(np.log(d.measured[keep] / estimates(params, d)[keep]))))


def free_constants(sources: tuple[str, ...], d: Decomposed | None = None) -> list[str]:
    """The constants ``sources``' rows can set, in the fit's order: each family's bandwidth then GEMM scale, the
    launch cost, each step class. A constant no row of theirs touches keeps its prior."""
    d = d or decompose()
    steps = np.isin(d.source[d.row], sources)
    families = sorted(set(d.family[steps]))
    names = [n for fam in families for n in (f"bw:{fam}", f"gemm:{fam}")]
    names += [f"ar:{fam}" for fam in sorted(set(d.family[steps & (d.a > 0)]))]
    if np.any(d.kernels[steps] > 0):
        names.append("launch")
    names += [f"step:{c}" for c in sorted(set(d.step_class[steps]) - {""})]
    return names


def fit_constants(sources: tuple[str, ...] | None = None, d: Decomposed | None = None) -> dict[str, float]:
    """Coordinate descent on :func:`objective` over :data:`FIT_GRIDS`, from the priors, fitting only what
    ``sources`` (default: the ``fit`` sources) can set; each sweep sets each constant in turn to the first grid value
    that minimises the objective, until a sweep changes nothing. Deterministic."""
    d = d or decompose()
    sources = tuple(sorted(k for k, s in SOURCES.items() if s.split == "fit")) if sources is None else sources
    keep, w = _objective_rows(d, sources)
    names = free_constants(sources, d)
    params = {n: _prior(n) for n in names}
    for _ in range(MAX_SWEEPS):
        changed = False
        for name in names:
            kind, _, which = name.partition(":")
            grid = np.asarray(FIT_GRIDS[kind])
            v = _vectors(params, d)
            if kind == "launch":
                v["launch"] = grid[:, None]
            else:  # the grid replaces this constant on the steps it applies to
                key, mine = {"bw": ("f", d.family), "gemm": ("g", d.family), "ar": ("r", d.family),
                             "step": ("s", d.step_class)}[kind]
                base = v[key] - (params[name] if kind == "step" else 0.0) * (mine == which)
                v[key] = np.where(mine == which, grid[:, None] + (base if kind == "step" else 0.0), base)
            est = _rows_ms(v, d)[:, keep]
            scores = np.sum(w * np.abs(np.log(d.measured[keep] / est)), axis=1)
            best = float(grid[int(np.argmin(scores))])
            if best != params[name]:
                params[name], changed = best, True
        if not changed:
            break
    return params


def fit_sources() -> tuple[str, ...]:
    """The sources marked ``fit``, sorted."""
    return tuple(sorted(k for k, s in SOURCES.items() if s.split == "fit"))


# ------------------------------------------------------------------------------------ out of sample
@lru_cache(maxsize=1)
def loso_estimates() -> tuple[np.ndarray, dict[str, dict[str, float]]]:
    """Leave-one-source-out: each row's estimate in ms from constants its source never set, nor any source of its
    setup (:func:`stage5.published.setup_of`): a refit without those of them the fit uses, else the frozen fit; and
    the constants used for each source."""
    d = decompose()
    out = estimates(frozen(), d)
    used = {}
    for k in sorted(SOURCES):
        left_out = _fit_sources_of_setup(k)
        used[k] = dict(_constants_without(left_out)) if left_out else frozen()
        if left_out:
            mine = d.source == k
            out[mine] = _fit_without(left_out)[mine]
    return out, used


def _shares(ratio: np.ndarray, source: np.ndarray) -> dict[str, float]:
    """Pooled and source-balanced shares of estimate / measured ``ratio`` within 25% and x1.5."""
    if not len(ratio):
        return {"points": 0, "sources": 0}
    tight = (ratio >= WITHIN[0]) & (ratio <= WITHIN[1])
    wide = (ratio >= WIDE[0]) & (ratio <= WIDE[1])
    keys = sorted(set(source))
    return {"points": int(len(ratio)), "sources": len(keys), "within_25pct": float(tight.mean()),
            "within_1.5x": float(wide.mean()), "median_ratio": float(np.median(ratio)),
            "balanced_within_25pct": float(np.mean([tight[source == k].mean() for k in keys])),
            "balanced_within_1.5x": float(np.mean([wide[source == k].mean() for k in keys]))}


def _regime(d: Decomposed, i: int) -> tuple[str, str, str]:
    return str(d.metric[i]), "batch 1" if d.batch1[i] else "batched", str(d.band_class[i])


@lru_cache(maxsize=256)
def student_t_quantile(p: float, dof: int) -> float:
    """The ``p`` quantile (0.5 <= p < 1) of Student's t with ``dof`` degrees of freedom, by integrating its density
    (numpy only; to within 1e-6 of the tabled values, checked by tests/test_fit.py)."""
    if not 0.5 <= p < 1 or dof < 1:
        raise ValueError(f"need 0.5 <= p < 1 and at least one degree of freedom, got p={p!r}, dof={dof!r}")
    scale = math.exp(math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2)) / math.sqrt(dof * math.pi)
    x = np.linspace(0.0, 400.0, 800_001)
    density = scale * (1 + x * x / dof) ** (-(dof + 1) / 2)
    cdf = 0.5 + np.concatenate(([0.0], np.cumsum((density[1:] + density[:-1]) / 2 * np.diff(x))))
    return float(np.interp(p, cdf, x))


def rows_band(ratios: np.ndarray, sources: np.ndarray, coverage: float) -> tuple[float, float] | None:
    """The rule used before issue 47's correction, kept for comparison: the source-weighted (1 -+ coverage) / 2
    quantiles of the rows' measured / estimate, or None with too few sources. It measures how rows spread around
    the sources already published, not where a new source lands: with three to five sources that disagree more than
    each one's rows spread, it missed an unseen source's rows far more often than it claimed."""
    keys = sorted(set(sources))
    if len(keys) < MIN_BAND_SOURCES:
        return None
    counts = {k: int(np.sum(sources == k)) for k in keys}
    w = np.array([1.0 / counts[k] for k in sources])
    return (_weighted_quantile(ratios, w, (1 - coverage) / 2), _weighted_quantile(ratios, w, (1 + coverage) / 2))


def between_sources_band(ratios: np.ndarray, sources: np.ndarray, coverage: float) -> tuple[float, float] | None:
    """The band for a row of a source not among ``sources``, or None with fewer than :data:`MIN_BAND_SOURCES`.

    Why this rule (fixed before any held-out coverage was looked at): a new source's log(measured / estimate) is its
    source's offset plus its row's scatter around it. The n sources' median log ratios estimate the offsets' mean
    (m, each source alike) and spread (s_b, sample standard deviation); the rows' deviations from their source's
    median give the scatter within a source (s_w, the mean over sources of each one's mean square). A new source's
    row then falls within m -+ t_{(1+c)/2, n-1} sqrt(s_b^2 (1 + 1/n) + s_w^2) on about a share c of cases if offsets
    and scatter are normal in the log: the prediction interval for a new study of a random-effects meta-analysis
    (Higgins, Thompson and Spiegelhalter, JRSS A 172, 2009, doi:10.1111/j.1467-985X.2008.00552.x), with the sources
    as the studies, n - 1 degrees of freedom (s_b is estimated from the n offsets themselves) and the scatter within
    a source added, since a row lands, not a source's average. It widens with the disagreement between sources and
    with how few there are, which the quantiles of the pooled rows (:func:`rows_band`) leave out. With so few
    sources it can still miss more often than it claims: :func:`calibration` measures how often."""
    terms = band_terms(ratios, sources, coverage)
    if terms is None:
        return None
    half = terms["t"] * math.sqrt(terms["between"] ** 2 * (1 + 1 / terms["n"]) + terms["within"] ** 2)
    return math.exp(terms["centre"] - half), math.exp(terms["centre"] + half)


def band_terms(ratios: np.ndarray, sources: np.ndarray, coverage: float) -> dict[str, float] | None:
    """The terms of :func:`between_sources_band`: ``n`` sources, ``centre`` m (the mean of the sources' median
    log ratios), ``between`` s_b and ``within`` s_w (natural-log units) and ``t``, Student's (1 + coverage) / 2
    quantile at n - 1 degrees of freedom; None with fewer than :data:`MIN_BAND_SOURCES` sources."""
    keys = sorted(set(sources))
    n = len(keys)
    if n < MIN_BAND_SOURCES:
        return None
    logs = np.log(ratios)
    medians = np.array([np.median(logs[sources == k]) for k in keys])
    within = float(np.mean([np.mean((logs[sources == k] - m) ** 2) for k, m in zip(keys, medians, strict=True)]))
    return {"n": float(n), "centre": float(np.mean(medians)), "between": float(np.std(medians, ddof=1)),
            "within": math.sqrt(within), "t": student_t_quantile((1 + coverage) / 2, n - 1)}


BAND_RULES = {"between sources": between_sources_band, "rows": rows_band}
BAND_RULE = "between sources"  # the rule every printed band uses; the other is reported beside it


@dataclass(frozen=True)
class Band:
    """An error band: measured / estimate expected between ``low`` and ``high`` on ``coverage`` of an unseen
    source's rows (:func:`between_sources_band`), with the sources, points and GPU families it rests on, and whether
    it is pooled over families (``pooled``)."""

    metric: str
    batch: str
    engine_class: str
    family: str
    low: float
    high: float
    coverage: float
    sources: tuple[str, ...]
    points: int
    pooled: bool
    families: tuple[str, ...]
    terms: tuple[tuple[str, float], ...] = ()  # band_terms of the rows it rests on (none for the unknown engine's)


def _band_rows(d: Decomposed, ratio: np.ndarray, metric: str, batch: str, engine_class: str,
               exclude: str | None = None, only: tuple[str, ...] | None = None) -> np.ndarray:
    """The rows of one regime; ``exclude``: leave out a source and every source of its setup."""
    sel = (d.metric == metric) & (d.batch1 == (batch == "batch 1")) & (d.band_class == engine_class)
    if exclude is not None:
        sel &= d.setup != setup_of(exclude)
    if only is not None:
        sel &= np.isin(d.source, only)
    return sel


def band(metric: str, batch: int, engine: str = "graphs", gpu: str | None = None,
         coverage: float = BAND_COVERAGE) -> Band | None:
    """The calibrated band for an estimate of ``metric`` at ``batch`` by engine profile ``engine`` on ``gpu``: from
    the leave-one-source-out rows of the same regime, of the GPU's family if at least :data:`MIN_BAND_SOURCES` of
    its sources have such rows, else of every family (``pooled``), else None. An "unknown" engine takes the widest
    band any engine class has for the metric and batch."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; accepted: {', '.join(METRICS)}")
    if engine not in cost.ENGINES:
        raise ValueError(f"unknown engine {engine!r}; accepted: {', '.join(cost.ENGINES)}")
    if not 0 < coverage < 1:
        raise ValueError(f"coverage is a share strictly between 0 and 1, got {coverage!r}")
    return _band(metric, "batch 1" if batch == 1 else "batched", cost.ENGINES[engine].band_class,
                 cost.gpu_family(cost.get_gpu(gpu)) if gpu else "", coverage)


def _setups(d: Decomposed, rows: np.ndarray) -> tuple[str, ...]:
    """The independent sources ``rows`` come from, one name each: a setup's sources joined by "+"."""
    return tuple("+".join(sorted({str(k) for k in d.source[rows & (d.setup == g)]}))
                 for g in sorted({str(x) for x in d.setup[rows]}))


@lru_cache(maxsize=256)
def _band(metric: str, batch: str, engine_class: str, family: str, coverage: float) -> Band | None:
    d = decompose()
    ratio = d.measured / loso_estimates()[0]
    if engine_class == "unknown":
        known = [b for c in sorted({e.band_class for e in cost.ENGINES.values()} - {"unknown"})
                 if (b := _band(metric, batch, c, family, coverage)) is not None]
        if not known:
            return None
        lo, hi = min(b.low for b in known), max(b.high for b in known)
        return Band(metric, batch, "unknown", family, lo, hi, coverage,
                    tuple(sorted({s for b in known for s in b.sources})), sum(b.points for b in known),
                    any(b.pooled for b in known), tuple(sorted({f for b in known for f in b.families})))
    sel = _band_rows(d, ratio, metric, batch, engine_class)
    same = sel & (d.row_family == family)
    for rows, pooled in ((same, False), (sel, True)):
        got = BAND_RULES[BAND_RULE](ratio[rows], d.setup[rows], coverage)
        if got is not None:
            terms = band_terms(ratio[rows], d.setup[rows], coverage) if BAND_RULE == "between sources" else None
            return Band(metric, batch, engine_class, family, got[0], got[1], coverage, _setups(d, rows),
                        int(rows.sum()), pooled,
                        tuple(sorted(str(x) for x in set(d.row_family[rows]))), tuple((terms or {}).items()))
    return None


def band_sentence(metric: str, engine: str = "graphs", gpu: str | None = None, batch: int = 1,
                  estimate_ms: float | None = None, floor_ms: float | None = None) -> str:
    """The sentence an estimate of ``metric`` is printed with: its calibrated band and what it rests on (sources and
    points), or why there is none (:func:`band`). Given the estimate (and its floor, in ms), it ends with the band in
    ms, its low edge raised to the floor where the band reaches below it: no server runs faster than the floor."""
    b = band(metric, batch, engine, gpu)
    label = METRICS[metric].split("/")[0]
    regime = f"{label} at {'batch 1' if batch == 1 else 'batches above 1'}, {cost.ENGINES[engine].band_class} engines"
    if b is None:
        return (f"no error band: fewer than {MIN_BAND_SOURCES} published sources measured {regime} (out of sample), "
                "so the course cannot say how far such an estimate strays")
    family = cost.gpu_family(cost.get_gpu(gpu)) if gpu else ""
    where = (f"pooled over GPU families ({', '.join(b.families)}): fewer than {MIN_BAND_SOURCES} sources in this "
             f"regime ran a GPU of the {family} family" if b.pooled and family else
             f"pooled over GPU families ({', '.join(b.families)})" if b.pooled else f"{family} GPUs only")
    unknown = " (an engine the registry does not know: the widest band of any engine class)" if engine == "unknown" \
        else ""
    out = (f"measured {label} is expected at {b.low:.2f}-{b.high:.2f}x such estimates on {b.coverage:.0%} of an "
           f"unseen source's points: a band from {len(b.sources)} sources ({', '.join(b.sources)}) and {b.points} "
           "published points, each source weighed alike, every estimate made without its own source, widened by the "
           f"spread between the sources; {where}{unknown}")
    if estimate_ms is None:
        return out
    low, high = band_ms(b, estimate_ms, floor_ms)
    raised = floor_ms is not None and low == floor_ms and b.low * estimate_ms < floor_ms
    return out + f"; for this estimate {low:.2f}-{high:.2f} ms" + (" (the low edge raised to the floor)" if raised else "")


def band_ms(b: Band, estimate_ms: float, floor_ms: float | None = None) -> tuple[float, float]:
    """Band ``b`` around an estimate of ``estimate_ms``, in ms, the low edge never below ``floor_ms``."""
    if not (np.isfinite(estimate_ms) and estimate_ms > 0) or (floor_ms is not None and not np.isfinite(floor_ms)):
        raise ValueError(f"an estimate is a positive finite time in ms, got {estimate_ms!r} (floor {floor_ms!r})")
    low = b.low * estimate_ms
    return (low if floor_ms is None else max(low, floor_ms)), b.high * estimate_ms


def _fit_sources_of_setup(source: str) -> tuple[str, ...]:
    """The fit sources of ``source``'s setup (:func:`stage5.published.setup_of`), sorted: what leaving it out removes
    from the fit."""
    return tuple(sorted(k for k in fit_sources() if setup_of(k) == setup_of(source)))


@lru_cache(maxsize=64)
def _constants_without(excluded: tuple[str, ...]) -> dict[str, float]:
    """The constants of a refit on the fit sources less ``excluded`` (sorted), each refit done once per process
    (leave-one-source-out and nested calibration ask for the same ones). Shared: read it, never change it."""
    return fit_constants(tuple(s for s in fit_sources() if s not in excluded), decompose())


@lru_cache(maxsize=64)
def _fit_without(excluded: tuple[str, ...]) -> np.ndarray:
    """Every row's estimate from a refit on the fit sources less ``excluded`` (sorted)."""
    return estimates(_constants_without(excluded), decompose())


@lru_cache(maxsize=64)
def ratios_without(source: str) -> np.ndarray:
    """Every row's measured / estimate as the leave-one-source-out report would give it had ``source`` and its setup
    (:func:`stage5.published.setup_of`) never been published: each other fit source by a refit without it and the
    setup's fit sources, each held-out source by the fit without the setup's fit sources. The setup's own rows keep
    their leave-one-source-out ratio. For a source whose setup no fit source shares that is the leave-one-source-out
    ratio everywhere (no fit saw it)."""
    d = decompose()
    gone = _fit_sources_of_setup(source)
    if not gone:
        return d.measured / loso_estimates()[0]
    est = _fit_without(gone).copy()
    for other in fit_sources():
        if other not in gone:
            mine = d.source == other
            est[mine] = _fit_without(tuple(sorted({*gone, other})))[mine]
    mine = d.setup == setup_of(source)  # its setup's own rows keep their leave-one-source-out ratio
    est[mine] = loso_estimates()[0][mine]
    return d.measured / est


def calibration(claims: tuple[float, ...] = CLAIMS, sources: tuple[str, ...] | None = None,
                band_sources: tuple[str, ...] | None = None, rule: str = BAND_RULE,
                nested: bool = True) -> dict[str, dict[str, float]]:
    """For each claimed coverage: the share of an unseen source's rows its band holds, source-balanced, with the
    sources and rows it was judged on. Each source of ``sources`` (default: all) is scored by bands built by
    ``rule`` (:data:`BAND_RULES`) without it from the rows of ``band_sources`` (default: all others) of its own
    regime, pooled over GPU families; ``nested`` (the default) builds them from :func:`ratios_without` it, so not
    even the fit behind the other sources' ratios saw it. A source whose regime has fewer than
    :data:`MIN_BAND_SOURCES` others has no band and is not counted; None where no source is."""
    if rule not in BAND_RULES:
        raise ValueError(f"unknown band rule {rule!r}; accepted: {', '.join(BAND_RULES)}")
    d = decompose()
    own = d.measured / loso_estimates()[0]
    sources = tuple(sorted(SOURCES)) if sources is None else sources
    out = {}
    for claim in claims:
        held, scored, rows = [], [], 0
        for k in sources:
            ratio = ratios_without(k) if nested else own
            mine = np.flatnonzero(d.source == k)
            inside, n = 0, 0
            for regime in sorted({_regime(d, i) for i in mine}):
                sel = _band_rows(d, ratio, *regime, exclude=k, only=band_sources)
                got = BAND_RULES[rule](ratio[sel], d.setup[sel], claim)
                if got is None:
                    continue
                part = mine[[(_regime(d, i) == regime) for i in mine]]
                inside += int(np.sum((own[part] >= got[0]) & (own[part] <= got[1])))
                n += len(part)
            if n:
                held.append(inside / n)
                scored.append(k)
                rows += n
        out[f"{claim:.2f}"] = {"claimed": claim, "held": float(np.mean(held)) if held else None,
                               "sources": scored, "points": rows}
    return out


def loso_rows():
    """:func:`stage5.validate.rows` with each row's estimate replaced by its leave-one-source-out one."""
    from stage5 import validate

    loso = loso_estimates()[0]
    return [replace(r, estimate=float(e)) for r, e in zip(validate.rows(), loso, strict=True)]


def split_report(fit_set: tuple[str, ...]) -> dict[str, object]:
    """What a fit on ``fit_set`` scores on every source whose setup it did not see (pooled and source-balanced
    shares): the held-out figures a different split would report."""
    d = decompose()
    est = estimates(fit_constants(fit_set, d), d)
    held = ~np.isin(d.setup, [setup_of(k) for k in fit_set])  # sources whose setup the fit did not see
    return _shares((est / d.measured)[held], d.source[held])


def fit_report() -> dict[str, object]:
    """The fit and its out-of-sample scores: the frozen constants and a fresh refit (equal within rounding), the
    fit and held-out sources, leave-one-source-out shares over all sources, the held-out sources' shares under the
    frozen fit, per regime; the bands; their calibration over all sources (nested leave-one-source-out) and on the
    held-out sources (bands built from the fit sources only), for the rule printed and every rule compared."""
    d = decompose()
    loso, used = loso_estimates()
    frozen_est = estimates(frozen(), d)
    fit_set = fit_sources()
    held = tuple(sorted(k for k in SOURCES if not seen_by_fit(k)))  # no fit source shares its setup
    held_rows = np.isin(d.source, held)
    regimes = sorted({_regime(d, i) for i in range(len(d.measured))})
    bands = {}
    for metric, batch, engine_class in regimes:
        if engine_class == "unknown":
            continue
        profile = next(n for n, e in cost.ENGINES.items() if e.band_class == engine_class)
        b = band(metric, 1 if batch == "batch 1" else 2, profile)
        bands[f"{METRICS[metric]}, {batch}, {engine_class}"] = (
            None if b is None else {"low": b.low, "high": b.high, "coverage": b.coverage, "sources": list(b.sources),
                                    "points": b.points, "families": list(b.families)})
    return {
        "fit_date": fitted.FIT_DATE, "fitted_on": list(fitted.FITTED_ON), "fit_sources": list(fit_set),
        "held_out_sources": list(held), "objective": "source-balanced mean |log(measured / estimate)|",
        "frozen": frozen(), "objective_value": objective(frozen(), fit_set, d),
        "leave_one_source_out": {**_shares(loso / d.measured, d.setup), "by_metric": {
            METRICS[m]: _shares((loso / d.measured)[d.metric == m], d.setup[d.metric == m]) for m in METRICS},
            "by_source": {k: _shares((loso / d.measured)[d.source == k], d.source[d.source == k])
                          for k in sorted(SOURCES)}},
        "held_out": {**_shares((frozen_est / d.measured)[held_rows], d.source[held_rows]), "by_metric": {
            METRICS[m]: _shares((frozen_est / d.measured)[held_rows & (d.metric == m)],
                                d.source[held_rows & (d.metric == m)]) for m in METRICS}},
        "bands": bands, "band_rule": BAND_RULE,
        # the rule printed, judged by nested leave-one-source-out, then on the held-out sources with bands from the
        # fit sources alone; and the same two figures for every other rule compared (BAND_RULES), so the choice is
        # shown, not hidden
        "band_calibration": calibration(),
        "band_coverage_held_out": calibration(sources=held, band_sources=fit_set),
        "band_rules_compared": {rule: {"calibration": calibration(rule=rule),
                                       "held_out": calibration(sources=held, band_sources=fit_set, rule=rule)}
                                for rule in BAND_RULES},
        "constants_without": {k: v for k, v in used.items() if k in fit_set},
        "lever_ratios_leave_one_source_out": _ratio_summary(),
    }


def _ratio_summary() -> dict[str, float]:
    """Lever ratios priced leave one source out: pooled, and balanced over setups (each setup's pairs pooled)."""
    from stage5 import validate

    by_setup: dict[str, list[bool]] = {}
    for p in validate.pairs(loso_rows()):
        by_setup.setdefault(setup_of(p.source), []).append(validate.in_band(p.error))
    every = [hit for hits in by_setup.values() for hit in hits]
    return {"pairs": len(every), "within_25pct": float(np.mean(every)),
            "source_balanced": float(np.mean([np.mean(hits) for hits in by_setup.values()]))}


def _sample(levels: dict[str, dict]) -> str:
    """' (n sources, m points)': what a calibration figure was judged on (the same at every claim)."""
    v = next(iter(levels.values()))
    return f" ({len(v['sources'])} sources, {v['points']} points)"


def format_constants(params: dict[str, float]) -> list[str]:
    """One line per constant, in the units :mod:`stage5.fitted` stores them."""
    out = []
    for name, value in sorted(params.items()):
        unit = {"bw": "of the datasheet's bandwidth", "gemm": "x the benchmark GEMM efficiency",
                "ar": "x the all-reduce's link efficiency (time / this)",
                "launch": "s per kernel launched from Python", "step": "s per step"}[name.split(":")[0]]
        out.append(f"  {name:<22} {value:.6g} {unit}")
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m stage5 validate``: the validate report (:func:`stage5.validate.main`) with the fit's out-of-sample
    report and bands; ``--refit`` recomputes the frozen constants and prints both."""
    from stage5 import validate

    parser = OneLineParser(prog="python -m stage5 validate", description=validate.__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--fitted", action="store_true", help="print what constants fitted on every row would reach "
                        "(in sample by construction)")
    parser.add_argument("--refit", action="store_true", help="refit the estimate's constants on the fit sources and "
                        "print them beside the frozen ones (stage5.fitted)")
    args = parser.parse_args(argv)
    if args.fitted:
        return validate.main(["--fitted"] + (["--json"] if args.json else []))
    if args.refit:
        got = fit_constants()
        if args.json:
            print(dumps({"refit": got, "frozen": frozen(), "fit_sources": list(fit_sources())}, indent=1))
            return 0
        print(f"refit on the fit sources ({', '.join(fit_sources())}), objective "
              f"{objective(got, fit_sources()):.4f}:")
        print("\n".join(format_constants(got)))
        print(f"frozen in stage5/fitted.py ({fitted.FIT_DATE}, fitted on {', '.join(fitted.FITTED_ON)}), objective "
              f"{objective(frozen(), fit_sources()):.4f}:")
        print("\n".join(format_constants(frozen())))
        return 0
    if args.json:
        print(dumps({**validate.summary(), "fit": fit_report()}, indent=1))
        return 0
    validate.main([])
    rep = fit_report()
    print(f"fit ({rep['fit_date']}) on {', '.join(rep['fit_sources'])}; held out: {', '.join(rep['held_out_sources'])}")
    for name, part in (("leave-one-source-out, all sources", rep["leave_one_source_out"]),
                       ("held-out sources, frozen fit", rep["held_out"])):
        print(f"{name}: {part['points']} points, within 25% {part['within_25pct']:.0%} (source-balanced "
              f"{part['balanced_within_25pct']:.0%}), within x1.5 {part['within_1.5x']:.0%} (source-balanced "
              f"{part['balanced_within_1.5x']:.0%})")
    print(f"error bands (measured / estimate expected for an unseen source; rule: {rep['band_rule']}):")
    for regime, b in rep["bands"].items():
        print(f"  {regime}: " + ("no band (fewer than three sources)" if b is None else
                                 f"{b['low']:.2f}-{b['high']:.2f}x on {b['coverage']:.0%}, {b['points']} points from "
                                 f"{', '.join(b['sources'])}"))
    for name, key in (("every source", "band_calibration"), ("held-out sources, bands from the fit sources",
                                                               "band_coverage_held_out")):
        print(f"band calibration, {name}: " + ", ".join(
            f"claimed {v['claimed']:.0%} held " + ("no source" if v["held"] is None else f"{v['held']:.0%}")
            for v in rep[key].values()) + _sample(rep[key]))
    for rule, got in rep["band_rules_compared"].items():
        if rule != rep["band_rule"]:
            print(f"  (rule '{rule}', compared: claimed 80% held "
                  + "; ".join(f"{'no source' if v['held'] is None else format(v['held'], '.0%')} {what}"
                              + _sample({"x": v}) for what, v in (("of every source", got["calibration"]["0.80"]),
                                                                  ("of the held-out", got["held_out"]["0.80"])))
                  + ")")
    return 0
