"""``python -m stage5 validate``: the cost model's two modes against published serving measurements.

Each point of :data:`stage5.published.SERVING_POINTS` is priced twice, by the floor (the course's formulas at
MFU 1: :func:`stage5.cost.floor_deployment`) and by the estimate (:class:`stage5.cost.Estimate` at its
defaults, none of which is set from these points). The latency metrics are the time per output token at the
point's concurrency (:func:`stage5.cost.mixed_tpot_s`, at the mean context) and, where published at
concurrency 1, the time to first token (:func:`stage5.cost.ttft_s`).

A published row whose requests cannot all hold their prompt and answer in the KV cache at once
(:func:`queued`) is set aside: the server ran fewer requests than the row's concurrency and queued the rest,
which neither mode prices (their TTFT jumps by seconds to minutes). The rule uses the cost model's own memory
budget, not the measured latencies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stage5 import cost
from stage5.inputs import OneLineParser, dumps
from stage5.published import SERVING_POINTS, ServingPoint
from stage5.quantization import deployment

WITHIN = (0.8, 1.25)  # the band the estimate should land in, as estimate / measured
TARGET_SHARE = 0.8  # issue 17: the estimate should land in WITHIN on at least this share of the points


@dataclass(frozen=True)
class Row:
    id: str
    metric: str  # "tpot_ms" or "ttft_ms"
    measured: float
    floor: float
    estimate: float

    @property
    def floor_ratio(self) -> float:
        return self.floor / self.measured

    @property
    def estimate_ratio(self) -> float:
        return self.estimate / self.measured

    def as_dict(self) -> dict[str, float | str]:
        return {"id": self.id, "metric": self.metric, "measured": self.measured, "floor": self.floor,
                "estimate": self.estimate, "floor_ratio": self.floor_ratio, "estimate_ratio": self.estimate_ratio}


def predict_ms(point: ServingPoint, metric: str, mode: str, estimate: cost.Estimate | None = None) -> float:
    """One point's ``metric`` ("tpot_ms" or "ttft_ms") in ``mode`` ("floor" or "estimate"), in ms."""
    dep = _deployment(point)
    dep = cost.floor_deployment(dep) if mode == "floor" else cost.estimate_deployment(dep, estimate)
    if metric == "tpot_ms":
        return 1e3 * float(cost.mixed_tpot_s(dep, point.concurrency, point.prompt, point.output))
    if metric == "ttft_ms":
        return 1e3 * float(cost.ttft_s(dep, point.prompt))
    raise ValueError(f"unknown metric {metric!r}; accepted: tpot_ms, ttft_ms")


def _deployment(point: ServingPoint) -> cost.Deployment:
    return deployment(point.model, point.gpu, point.num_gpus, point.weights, point.kv)


def queued(point: ServingPoint) -> bool:
    """Whether some of the point's requests must wait: its concurrency exceeds the sequences of prompt + output
    tokens whose KV cache fits at once (:func:`stage5.cost.max_concurrency`). TensorRT-LLM, NIM's backend,
    admits a request only when its whole prompt and answer are sure to fit (its default capacity policy,
    GUARANTEED_NO_EVICT: TensorRT-LLM performance-tuning guide, "Useful Runtime Options", section "Capacity
    Scheduler Policy"), so the whole length is what counts."""
    return point.concurrency > int(cost.max_concurrency(_deployment(point), point.prompt + point.output))


def excluded() -> list[ServingPoint]:
    """The published rows :func:`rows` sets aside because their requests queue."""
    return [p for p in SERVING_POINTS if queued(p)]


def rows(estimate: cost.Estimate | None = None) -> list[Row]:
    """Every published latency whose requests all run at once (not :func:`queued`), with both predictions
    (``estimate``: the estimate's terms, default ones)."""
    out = []
    for p in SERVING_POINTS:
        if queued(p):
            continue
        for metric in ("tpot_ms", "ttft_ms"):
            measured = getattr(p, metric)
            if measured is not None:
                out.append(Row(p.id, metric, measured, predict_ms(p, metric, "floor"),
                               predict_ms(p, metric, "estimate", estimate)))
    return out


def in_band(ratio: float) -> bool:
    """Whether an estimate / measured ratio lies in :data:`WITHIN`."""
    return WITHIN[0] <= ratio <= WITHIN[1]


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
    """The validate report: every row, the share of estimates within :data:`WITHIN` and whether the floor is
    at or below every measurement."""
    table = rows(estimate)
    within = float(np.mean([in_band(r.estimate_ratio) for r in table]))
    return {"points": [r.as_dict() for r in table], "estimate_within_25pct": within,
            "floor_is_lower_bound": bool(all(r.floor <= r.measured for r in table))}


def term_shares() -> dict[str, float]:
    """Share of points within 25% with all default terms, and with each term switched off alone."""
    shares = {"all terms": float(summary()["estimate_within_25pct"])}
    for term in cost.TERMS:
        shares[f"without {term}"] = float(summary(cost.Estimate().without(term))["estimate_within_25pct"])
    return shares


def plot_predicted_vs_measured(report: dict[str, object] | None = None, ax=None):
    """Predicted against measured for both modes on log-log axes, with the y = x line and the 0.8-1.25 band."""
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
    for mode, colour, marker in (("floor", "C0", "v"), ("estimate", "C3", "o")):
        for metric, fill in (("tpot_ms", True), ("ttft_ms", False)):
            sel = [p for p in pts if p["metric"] == metric]
            ax.scatter([p["measured"] for p in sel], [p[mode] for p in sel], color=colour if fill else "none",
                       edgecolors=colour, marker=marker, label=f"{mode}, {metric.split('_')[0].upper()}")
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
    args = parser.parse_args(argv)
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
    return 0
