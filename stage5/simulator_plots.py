"""The simulator as a picture: four small plots that follow its controls.

1. the roofline of the chosen GPU (at the weight format's matmul rate), with the ridge and the deployment's
   decode point;
2. TPOT and decode throughput against batch, with the current batch and the KV-capacity wall;
3. dollars per million output tokens as it stands and with each lever alone, split into prefill and decode;
4. speculative decoding's speedup against batch for the current alpha and k, with where it crosses 1.

:func:`plot_data` computes everything from the cost model (a pure function, tested); :func:`figure_svg`
draws it as SVG text (:mod:`stage5.svg_chart`, a few milliseconds where matplotlib needs hundreds on a slow
CPU), and :class:`LivePlots` shows it in an ``ipywidgets.HTML``, which behaves the same in JupyterLab,
classic Notebook and Colab with ipywidgets 7 or 8 and needs no front-end extension.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from stage5 import cost, levers
from stage5.models import chosen_model
from stage5.quantization import deployment
from stage5.svg_chart import Panel, Scale, svg_panels


@dataclass(frozen=True)
class PlotData:
    """What the four panels show, in the units they show it."""

    # roofline
    gpu: str
    peak_tflops: float
    bandwidth_tbs: float
    ridge: float
    intensity: float
    # TPOT and throughput against batch
    batch: np.ndarray
    tpot_ms: np.ndarray
    tokens_per_s: np.ndarray
    concurrency: int
    kv_wall: int
    # cost per million output tokens: {bar label: (prefill $, decode $)}, from "no lever" (as set, without
    # speculation or prefix hits: the levers' common baseline) to each lever alone
    bars: dict[str, tuple[float, float]]
    usd_as_set: float  # the simulator's figure, speculation and prefix hits included
    # speculation
    spec_k: int
    spec_alpha: float
    spec_speedup: np.ndarray
    spec_crossing: float  # first batch where the speedup falls below 1; NaN if it never does (or k = 0)


def _batch_axis(top: float) -> np.ndarray:
    return np.unique(np.geomspace(1, max(2.0, top), 48).round().astype(int))


def plot_data(inputs, outputs) -> PlotData:
    """The four panels' data for one simulator state (``SimInputs``, ``SimOutputs`` with ``ok`` True)."""
    x = inputs
    dep = deployment(chosen_model(x.model, x.config_json), x.gpu, int(x.num_gpus), x.weights, x.kv)
    p, o, c = int(x.prompt), int(x.output), int(x.concurrency)
    ctx = p + o / 2
    wall = int(outputs.max_concurrency)
    batch = _batch_axis(1.5 * max(wall, c))
    tpot = np.asarray(cost.tpot_s(dep, batch, ctx), dtype=float)
    k = int(x.k)  # k = 0: speculation off, nothing to draw (and no answer to a prediction given away)
    spec = (np.asarray(cost.speculative_speedup(dep, batch, ctx, x.alpha, k, x.draft_cost, x.tree_width), dtype=float)
            if k > 0 else np.full(batch.shape, np.nan))
    below = np.flatnonzero(spec < 1)
    return PlotData(
        gpu=dep.gpu.name, peak_tflops=dep.gpu.flops(dep.weight_bytes) / 1e12,
        bandwidth_tbs=dep.gpu.bandwidth / 1e12, ridge=outputs.ridge, intensity=outputs.intensity,
        batch=batch, tpot_ms=1e3 * tpot, tokens_per_s=batch / tpot, concurrency=c, kv_wall=wall,
        bars=lever_bars(dep, x, outputs), usd_as_set=outputs.usd_per_million, spec_k=k, spec_alpha=float(x.alpha), spec_speedup=spec,
        spec_crossing=float(batch[below[0]]) if below.size else math.nan)


def lever_bars(dep: cost.Deployment, x, outputs) -> dict[str, tuple[float, float]]:
    """(prefill, decode) dollars per million output tokens with no lever (the deployment as set, without
    speculation or prefix hits) and with each lever of :func:`stage5.levers.diagnose_reference` applied alone (the
    prefix cache at the hit the fleet keeps, ``outputs.fleet_hit``)
    (its rules, re-applied here to split the bill; the tests check the totals against its gains)."""
    p, o, c = int(x.prompt), int(x.output), int(x.concurrency)
    ctx = p + o / 2
    scale = x.price_per_gpu_hour * dep.num_gpus / 3600.0 * 1e6 / o  # deployment-seconds per request -> $/M

    def dollars(d: cost.Deployment, conc: float, hit: float = 0.0, speed: float = 1.0) -> tuple[float, float]:
        pre, dec = levers.request_seconds(d, p, o, conc, hit, speed)
        return scale * pre, scale * dec

    target = max(c, levers.max_batch_within_slo(dep, ctx, outputs.max_concurrency, levers.DEFAULT_TPOT_SLO_S))
    quant = deployment(dep.model, x.gpu, int(x.num_gpus), "fp8" if dep.weight_bytes > 1 else x.weights,
                       "fp8" if dep.kv_bytes > 1 else x.kv)
    speed = (float(cost.speculative_speedup(dep, c, ctx, x.alpha, int(x.k), x.draft_cost, x.tree_width)) if x.k > 0
             else 1.0)
    hit = outputs.fleet_hit  # the prefix hit the fleet's routing keeps (x.prefix_hit on one replica)
    return {"no lever": dollars(dep, c), "batching": dollars(dep, target), "prefix cache": dollars(dep, c, hit),
            "FP8 w+KV": dollars(quant, c), "speculation": dollars(dep, c, speed=speed)}


def figure_svg(d: PlotData) -> str:
    """The four panels as HTML: one SVG each, two to a row in a wide column, one to a row on a phone."""
    pw, ph = 330, 170
    lefts, tops = (70, 530), (40, 320)
    # 1. roofline
    xs = Scale(0.5, max(4 * d.ridge, 2 * d.intensity, 10), log=True)
    roof = Panel(lefts[0], tops[0], pw, ph, xs, Scale(xs.lo * d.bandwidth_tbs, 2 * d.peak_tflops, log=True),
                 title=f"{d.gpu} roofline: ridge {d.ridge:,.0f}, decode at {d.intensity:,.1f}",
                 xlabel="arithmetic intensity (FLOP/byte)", ylabel="attainable TFLOP/s")
    grid = np.geomspace(xs.lo, xs.hi, 64)
    roof.line(grid, np.minimum(d.peak_tflops, grid * d.bandwidth_tbs), colour="dark")
    roof.vline(d.ridge)
    roof.point(d.intensity, min(d.peak_tflops, d.intensity * d.bandwidth_tbs))
    roof.note("ridge", float(xs.frac(d.ridge)) + 0.02, 0.95, colour="grey")
    # 2. TPOT and throughput against batch
    bx = Scale(float(d.batch[0]), float(d.batch[-1]), log=True)
    lat = Panel(lefts[1], tops[0], pw, ph, bx, Scale(0, 1.08 * float(np.max(d.tpot_ms))),
                title=f"batch {d.concurrency:,}; KV memory wall (grey) at {d.kv_wall:,}",
                xlabel="batch (sequences)", ylabel="TPOT (ms)", ylabel_colour="C0",
                ys2=Scale(0, 1.08 * float(np.max(d.tokens_per_s))), ylabel2="decode tokens/s",
                ylabel2_colour="C1")
    lat.xspan(max(d.kv_wall, bx.lo), bx.hi)
    lat.line(d.batch, d.tpot_ms, colour="C0")
    lat.line(d.batch, d.tokens_per_s, colour="C1", right=True)
    lat.vline(d.concurrency, colour="C3", dash="")
    # 3. the bill, a bar per lever
    names = list(d.bars)
    totals = [sum(v) for v in d.bars.values()]
    bill = Panel(lefts[0], tops[1], pw, ph, Scale(-0.5, len(names) - 0.5), Scale(0, 1.12 * max(totals)),
                 title=f"${d.usd_as_set:,.2f} per million tokens as set; bars: each lever alone",
                 ylabel="$ per million output tokens", xlabel="red: prefill, blue: decode",
                 xticks=list(enumerate(names)))
    for i, (pre, dec) in enumerate(d.bars.values()):
        bill.bar(i, 0, pre, "C3")
        bill.bar(i, pre, dec, "C0")
    # 4. speculation against batch
    where = f"below 1 from batch {d.spec_crossing:,.0f}" if not math.isnan(d.spec_crossing) else "never below 1"
    top = float(np.nanmax(d.spec_speedup)) if d.spec_k > 0 else 1.0
    spec = Panel(lefts[1], tops[1], pw, ph, bx, Scale(0, 1.1 * max(1.0, top)),
                 title=(f"speculation, α = {d.spec_alpha:.2f}, k = {d.spec_k}: {where}" if d.spec_k > 0
                        else "speculation off (k = 0)"), xlabel="batch (sequences)",
                 ylabel="speedup over plain decode (×)")
    if d.spec_k == 0:
        spec.note("set k above 0 to draw the speedup", 0.5, 0.4, anchor="middle")
    spec.hline(1.0)
    spec.line(d.batch, d.spec_speedup, colour="C2")
    spec.vline(d.concurrency, colour="C3", dash="")
    if not math.isnan(d.spec_crossing):
        spec.vline(d.spec_crossing, colour="C3")
    return svg_panels([roof, lat, bill, spec])


class LivePlots:
    """The four panels in an ``ipywidgets.HTML``; :meth:`update` redraws them for a new simulator state."""

    def __init__(self) -> None:
        import ipywidgets as w

        self.widget = w.HTML()

    def update(self, inputs, outputs, hidden: bool = False) -> None:
        """Redraw for a simulator state; a hidden or failed state shows no numbers."""
        if hidden:
            self.widget.value = "<p><i>Plots hidden too: reveal your prediction first.</i></p>"
        elif not outputs.ok:
            self.widget.value = ""
        else:
            self.widget.value = figure_svg(plot_data(inputs, outputs))
