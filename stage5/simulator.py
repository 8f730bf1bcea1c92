"""The deployment simulator: a pure function over the cost model, and a thin ipywidgets layer on top.

:func:`simulate` maps :class:`SimInputs` to :class:`SimOutputs` in a few milliseconds and never raises for a
bad deployment: it returns ``ok=False`` and the reason. :class:`Simulator` wires widgets to it; it can be
built and driven without a display (the tests do), and its prediction box records a guess before the
learner reveals the value and reports the error.

What it assumes in its default ``simple`` mode (the simple estimate), each of which flatters its numbers: perfect
batching with no queueing, perfect tensor-parallel scaling, a fixed MFU, no scheduling or sampling overhead. Its
``estimate`` mode adds the terms of :class:`stage5.cost.Estimate` (achieved bandwidth, per-phase MFU,
tensor-parallel all-reduces, other requests' prefill chunks sharing the decode steps); its ``floor`` mode prices
the physics at the datasheet's peak, which no server beats. The four plots always show the simple estimate. What
it leaves out: arrival
variance and queueing, preemption, chunked-prefill interleaving, MoE routing imbalance, and the draft
model's own KV cache and weights under speculative decoding.

The fleet's levers (chapter 13): ``replicas`` copies of the deployment behind a router, ``routing`` (round-robin,
least-loaded or prefix-aware) and ``history_share``, the part of the one-replica prefix hit that is the
conversation's own history; a prompt-blind router finds that part one time in ``replicas``
(:func:`stage5.fleet.routed_hit_rate`), and every number above is priced at the hit rate the fleet keeps.
``kv_tier`` says where cached prefixes wait: in HBM, or in host memory, a local SSD or another machine
(:mod:`stage5.kv_tiers`), from which a hit is reloaded before the prefill, or recomputed when that is faster. The
tier changes TTFT only: the transfer is taken to overlap other requests' work, so the bill is unchanged.
"""

from __future__ import annotations

import html
import math
import time
from dataclasses import dataclass, field, replace

from stage5 import cost, fleet, kv_tiers, levers
from stage5 import inputs as check
from stage5.hardware import gpu_names
from stage5.models import PASTED, ModelConfig, chosen_model, model_names
from stage5.quantization import KV_FORMATS, WEIGHT_FORMATS, deployment


@dataclass(frozen=True)
class SimInputs:
    """Everything the learner can set. ``k = 0`` turns speculation off; ``prefix_hit`` is the fraction of each
    prompt found in the prefix cache. ``model == PASTED`` reads the model from ``config_json``. ``mode`` is one of
    :data:`stage5.cost.MODES`."""

    model: str = cost.ANCHOR_MODEL
    config_json: str = ""
    gpu: str = cost.ANCHOR_GPU
    num_gpus: int = cost.ANCHOR_GPUS
    weights: str = "bf16"
    kv: str = "bf16"
    prompt: int = 1024
    output: int = 256
    concurrency: int = 64
    alpha: float = 0.7
    k: int = 0
    draft_cost: float = 0.05  # a draft step's time over a target decode step's (chapter 7: ~0.03 for a one-layer head)
    tree_width: int = 1  # candidates per node of the verified token tree; 1 verifies a chain (chapter 7)
    prefix_hit: float = 0.0
    price_per_gpu_hour: float = cost.DEFAULT_PRICE_PER_GPU_HOUR
    objective: str = "cost"
    mode: str = "simple"  # the cost model's mode, one of stage5.cost.MODES (simple estimate, estimate, floor)
    replicas: int = 1  # copies of the deployment behind the router (chapter 13)
    routing: str = "prefix_aware"  # one of stage5.fleet.POLICIES
    history_share: float = 0.0  # the share of prefix_hit that is the conversation's own history
    kv_tier: str = "hbm"  # where cached prefixes wait: "hbm" or one of stage5.kv_tiers.TIERS


@dataclass(frozen=True)
class SimOutputs:
    """The simulator's answer. Times in ms, throughput in output tokens/s for the whole deployment, cost in
    dollars per million output tokens (prefill time included: in ``estimate`` mode inside TPOT, whose steps carry
    the other requests' prefill chunks; otherwise as separate prefill steps). NaN fields when ``ok`` is False."""

    ok: bool
    error: str = ""
    model: str = ""
    ttft_ms: float = math.nan
    tpot_ms: float = math.nan
    throughput: float = math.nan
    usd_per_million: float = math.nan
    binding: str = ""
    max_concurrency: int = 0
    intensity: float = math.nan
    ridge: float = math.nan
    decode_bound: str = ""
    phase: str = ""
    prefill_share: float = math.nan
    spec_speedup: float = 1.0
    gains: dict[str, float] = field(default_factory=dict)
    best_lever: str = ""
    fleet_hit: float = math.nan  # the prefix hit the fleet keeps (prefix_hit on one replica)
    fleet_throughput: float = math.nan  # output tokens/s across all replicas
    tier_reload_ms: float = 0.0  # TTFT spent bringing cached prefixes back from kv_tier (0 in HBM)
    elapsed_ms: float = 0.0


def check_inputs(x: SimInputs, model: ModelConfig) -> None:
    """Every field checked at the door: the error names the field, the value and what is accepted."""
    check.positive_int(x.num_gpus, "num_gpus", maximum=1024)
    check.choice(x.weights, "weights", tuple(WEIGHT_FORMATS))
    check.choice(x.kv, "kv", tuple(KV_FORMATS))
    for name in ("prompt", "output", "concurrency"):
        check.positive_int(getattr(x, name), name)
    check.within_context(int(x.prompt) + int(x.output), model.max_position_embeddings, "prompt + output",
                         model.name)
    check.fraction(x.alpha, "alpha")
    check.non_negative_int(x.k, "k (drafted tokens)", maximum=64)
    check.fraction(x.draft_cost, "draft_cost (a draft step's time over a target step's)")
    check.positive_int(x.tree_width, "tree_width (candidates per node of the verified tree)", maximum=4)
    check.fraction(x.prefix_hit, "prefix_hit")
    check.positive(x.price_per_gpu_hour, "price_per_gpu_hour")
    check.choice(x.objective, "objective", levers.OBJECTIVES)
    check.choice(x.mode, "mode", cost.MODES)
    fleet.check_replicas(x.replicas)
    fleet.check_policy(x.routing)
    check.fraction(x.history_share, "history_share")
    check.choice(x.kv_tier, "kv_tier", KV_TIERS)


def simulate(inputs: SimInputs) -> SimOutputs:
    """Evaluate one deployment; an impossible one comes back with ``ok=False`` and the reason."""
    t0 = time.perf_counter()
    try:
        out = _simulate(inputs)
    except (ValueError, TypeError, KeyError) as err:  # InfeasibleDeployment and InputError are ValueErrors
        out = SimOutputs(ok=False, error=str(err))
    except Exception as err:  # documented never to raise: an unforeseen failure still comes back as a reason
        out = SimOutputs(ok=False, error=f"could not evaluate these inputs ({type(err).__name__}: {err})")
    if out.ok and not all(math.isfinite(v) for v in _numbers(out)):
        out = SimOutputs(ok=False, error="these inputs produced a non-finite result; nothing is shown rather "
                                         "than a wrong number")
    return replace(out, elapsed_ms=1e3 * (time.perf_counter() - t0))


def _numbers(out: SimOutputs) -> list[float]:
    return [out.ttft_ms, out.tpot_ms, out.throughput, out.usd_per_million, out.intensity, out.ridge,
            out.prefill_share, out.spec_speedup, out.fleet_hit, out.fleet_throughput, out.tier_reload_ms,
            *out.gains.values()]


def _simulate(x: SimInputs) -> SimOutputs:
    if not isinstance(x, SimInputs):
        raise TypeError(f"simulate takes a SimInputs, got {type(x).__name__}")
    model = chosen_model(x.model, x.config_json)
    check_inputs(x, model)
    dep = cost.with_mode(deployment(model, x.gpu, int(x.num_gpus), x.weights, x.kv), x.mode)
    p, o, c = int(x.prompt), int(x.output), int(x.concurrency)
    ctx = p + o / 2
    hit = fleet.routed_hit_rate(x.prefix_hit, x.history_share, int(x.replicas), x.routing)
    diag = levers.diagnose_reference(model, x.gpu, int(x.num_gpus), p, o, c, x.objective, weights=x.weights,
                                     kv=x.kv, prefix_hit=hit, alpha=x.alpha, k=int(x.k),
                                     price_per_gpu_hour=x.price_per_gpu_hour, estimate=dep.estimate)
    speed = (float(cost.speculative_speedup(dep, c, ctx, x.alpha, x.k, x.draft_cost, x.tree_width)) if x.k > 0
             else 1.0)
    tpot = float(cost.mixed_tpot_s(dep, c, p, o, hit)) / speed  # the cached prefix is not prefilled
    if dep.estimate is not None and dep.estimate.mixed_step:
        # Every decode step carries the other requests' prefill chunks (cost.mixed_tpot_s), so prefill time is
        # inside TPOT: the deployment emits its c sequences' tokens once per TPOT, and a request costs o x TPOT / c.
        request_s = o * tpot / c
    else:  # prefill as its own steps beside pure decode steps (levers.request_seconds)
        request_s = sum(levers.request_seconds(dep, p, o, c, hit, speed))
    ttft = float(cost.ttft_s(dep, p, hit))
    reload = 0.0
    if x.kv_tier != "hbm" and hit > 0:  # the cached part comes back from the tier, or is recomputed if faster
        cached = p - max(1, round(p * (1 - hit)))
        if cached > 0:
            reload = min(float(kv_tiers.reload_s(dep, cached, x.kv_tier)), float(cost.ttft_s(dep, p)) - ttft)
    binding = "KV memory capacity" if c == diag.max_concurrency else (
        "compute" if diag.decode_bound == "compute" else "memory bandwidth")
    return SimOutputs(
        ok=True, model=model.name,
        ttft_ms=1e3 * (ttft + reload),
        tpot_ms=1e3 * tpot,
        throughput=o / request_s,
        usd_per_million=cost.CostTerms(cost.price_per_s(dep, x.price_per_gpu_hour), request_s, o).dollars_per_million,
        binding=binding, max_concurrency=diag.max_concurrency,
        intensity=float(cost.decode_intensity_with_kv(dep, c, ctx)),
        ridge=cost.ridge_point(dep.gpu, dep.weight_bytes),
        decode_bound=diag.decode_bound, phase=diag.phase, prefill_share=diag.prefill_share,
        spec_speedup=speed, gains=dict(diag.gains), best_lever=diag.best_lever, fleet_hit=hit,
        fleet_throughput=int(x.replicas) * o / request_s, tier_reload_ms=1e3 * reload)


# ------------------------------------------------------------------------------------------ rendering
PREDICTABLE = {"TTFT (ms)": "ttft_ms", "TPOT (ms)": "tpot_ms", "throughput (output tokens/s)": "throughput",
               "$ per million output tokens": "usd_per_million", "max concurrency": "max_concurrency",
               "fleet throughput (output tokens/s)": "fleet_throughput"}
KV_TIERS = ("hbm", *kv_tiers.TIERS)
KV_TIER_LABELS = {"hbm": "HBM (no tier)", **kv_tiers.TIER_LABELS}
LEVER_LABELS = {"batching": "batching (up to the memory / 50 ms TPOT limit)", "prefix_caching": "prefix caching",
                "quantization": "FP8 weights + FP8 KV", "speculative": "speculative decoding"}


def to_html(out: SimOutputs, inputs: SimInputs | None = None) -> str:
    """The outputs as a small HTML table (what the book shows as the saved state)."""
    if not out.ok:
        return f'<p style="color:#b00"><b>Cannot run this deployment:</b> {html.escape(out.error)}</p>'
    rows = [
        ("TTFT", f"{out.ttft_ms:,.1f} ms"),
        ("TPOT", f"{out.tpot_ms:,.2f} ms" + (f" (speculation {out.spec_speedup:.2f}x)" if out.spec_speedup != 1
                                            else "")),
        ("throughput", f"{out.throughput:,.0f} output tokens/s"),
        ("cost", f"${out.usd_per_million:,.3f} per million output tokens"),
        ("binding resource", out.binding),
        ("max concurrency", f"{out.max_concurrency:,} sequences"),
        ("roofline point", f"{out.intensity:,.1f} FLOP/byte against a ridge of {out.ridge:,.0f} "
                           f"({min(1.0, out.intensity / out.ridge):.1%} of peak FLOP/s reachable)"),
        ("request time", f"{out.prefill_share:.0%} prefill, {1 - out.prefill_share:.0%} decode "
                         f"({out.phase}-bound; decode {out.decode_bound}-bound)"),
    ]
    if inputs is not None and (inputs.replicas > 1 or inputs.history_share or inputs.kv_tier != "hbm"):
        where = (f"; cached prefixes reloaded from {KV_TIER_LABELS[inputs.kv_tier]} ({out.tier_reload_ms:,.1f} ms of the "
                 "TTFT)" if inputs.kv_tier != "hbm" else "")
        rows.append(("fleet", f"{inputs.replicas:,} replica(s), {fleet.POLICY_LABELS[inputs.routing]} routing: "
                              f"{out.fleet_hit:.0%} of prompt tokens cached ({inputs.prefix_hit:.0%} on one replica); "
                              f"{out.fleet_throughput:,.0f} output tokens/s in all{where}"))
    objective = inputs.objective if inputs else "cost"
    if inputs is not None and inputs.mode == "estimate":  # an estimate is shown with the error its validation gives
        from stage5.fit import band_sentence
        floor = simulate(replace(inputs, mode="floor"))  # the band's low edge in ms never reaches below it
        rows += [(f"{label} error band", band_sentence(metric, gpu=inputs.gpu, batch=batch,  # a TTFT: one prompt
                                                       estimate_ms=getattr(out, metric),
                                                       floor_ms=getattr(floor, metric) if floor.ok else None))
                 for metric, label, batch in (("tpot_ms", "TPOT", inputs.concurrency), ("ttft_ms", "TTFT", 1))]
    rows += [(f"gain: {LEVER_LABELS[k]}", f"{v:.2f}x" + (" (best)" if k == out.best_lever else ""))
             for k, v in out.gains.items()]
    body = "".join(f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td></tr>" for a, b in rows)
    title = html.escape(f"{out.model}; lever gains for objective '{objective}'")
    return f'<table class="stage5-sim"><caption>{title}</caption>{body}</table>'


# ------------------------------------------------------------------------------------------ widgets
class Simulator:
    """ipywidgets front end. ``Simulator().widget()`` returns the whole interface; ``set(**values)`` changes
    inputs programmatically; ``record_guess(quantity, value)`` and ``reveal()`` drive the prediction box."""

    def __init__(self, inputs: SimInputs | None = None) -> None:
        import ipywidgets as w

        x = inputs or SimInputs()
        style = {"description_width": "150px"}
        # 360 px wide where there is room, the column's width on a phone (390 px screens leave about 350)
        lay = w.Layout(width="100%", max_width="360px")

        def box(cls, value, description, **kw):
            return cls(value=value, description=description, style=style, layout=lay, **kw)

        self.controls = {
            "model": box(w.Dropdown, x.model, "model", options=[*model_names(), PASTED]),
            "config_json": w.Textarea(value=x.config_json, placeholder="paste a config.json here",
                                      description="config.json", style=style, layout=w.Layout(width="100%", max_width="360px")),
            "gpu": box(w.Dropdown, x.gpu, "GPU", options=gpu_names()),
            "num_gpus": box(w.BoundedIntText, x.num_gpus, "GPUs", min=1, max=64),
            "weights": box(w.Dropdown, x.weights, "weights",
                           options=[(f.label, k) for k, f in WEIGHT_FORMATS.items()]),
            "kv": box(w.Dropdown, x.kv, "KV cache", options=list(KV_FORMATS)),
            "prompt": box(w.BoundedIntText, x.prompt, "prompt tokens", min=1, max=1_048_576),
            "output": box(w.BoundedIntText, x.output, "output tokens", min=1, max=1_048_576),
            "concurrency": box(w.BoundedIntText, x.concurrency, "concurrency", min=1, max=1_000_000),
            "alpha": box(w.FloatSlider, x.alpha, "speculative α", min=0.0, max=1.0, step=0.05),
            "k": box(w.IntSlider, x.k, "drafted k (0 = off)", min=0, max=12),
            "draft_cost": box(w.FloatSlider, x.draft_cost, "draft step / target step", min=0.0, max=0.5, step=0.01),
            "tree_width": box(w.IntSlider, x.tree_width, "tree width (1 = chain)", min=1, max=4),
            "prefix_hit": box(w.FloatSlider, x.prefix_hit, "prefix-hit fraction", min=0.0, max=1.0, step=0.05),
            "price_per_gpu_hour": box(w.BoundedFloatText, x.price_per_gpu_hour, "$ per GPU-hour", min=0.01,
                                      max=1000.0),
            "objective": box(w.ToggleButtons, x.objective, "levers judged by", options=list(levers.OBJECTIVES)),
            "mode": box(w.ToggleButtons, x.mode, "cost model", options=list(cost.MODES)),
            "replicas": box(w.BoundedIntText, x.replicas, "replicas", min=1, max=fleet.MAX_REPLICAS),
            "routing": box(w.ToggleButtons, x.routing, "routing",
                           options=[(fleet.POLICY_LABELS[p], p) for p in fleet.POLICIES]),
            "history_share": box(w.FloatSlider, x.history_share, "hit that is history", min=0.0, max=1.0,
                                 step=0.05),
            "kv_tier": box(w.Dropdown, x.kv_tier, "cached prefixes in", options=[(KV_TIER_LABELS[t], t)
                                                                                 for t in KV_TIERS]),
        }
        self.result = w.HTML()
        self.timing = w.HTML()
        self.quantity = box(w.Dropdown, "TPOT (ms)", "predict", options=list(PREDICTABLE))
        self.guess_box = box(w.FloatText, 0.0, "my guess")
        self.record_button = w.Button(description="record guess")
        self.reveal_button = w.Button(description="reveal")
        self.feedback = w.HTML()
        self.hide = w.Checkbox(value=False, description="hide results until I reveal")
        self.guess: tuple[str, float, SimInputs] | None = None
        self.revealed_for: SimInputs | None = None  # the inputs of the last reveal: shown even when hiding
        self.outputs = simulate(x)
        for control in self.controls.values():
            control.observe(self._changed, names="value")
        self.hide.observe(self._changed, names="value")
        self.record_button.on_click(lambda _: self.record_guess(self.quantity.value, self.guess_box.value))
        self.reveal_button.on_click(lambda _: self.reveal())
        self._widget = None
        self.plots = None  # stage5.simulator_plots.LivePlots, made by widget(): headless use needs no drawing
        self.update()

    # ---------------------------------------------------------------- state
    @property
    def inputs(self) -> SimInputs:
        return SimInputs(**{name: c.value for name, c in self.controls.items()})

    def set(self, **values: object) -> SimOutputs:
        """Set inputs by name (each change recomputes, as a learner's edit would); returns the new outputs."""
        unknown = set(values) - set(self.controls)
        if unknown:
            raise KeyError(f"unknown inputs {sorted(unknown)}; accepted: {sorted(self.controls)}")
        from traitlets import TraitError

        for name, value in values.items():
            self._check(name, value)
        for name, value in values.items():
            try:
                self.controls[name].value = value
            except TraitError as err:  # anything the checks above missed: still one sentence, never a traceback
                raise ValueError(f"{name} cannot be {value!r}: {str(err).splitlines()[0]}") from None
        return self.outputs

    def _check(self, name: str, value: object) -> None:
        """Refuse what a control cannot show: a bounded box or slider would clamp it silently (prompt=-5 shown
        as 1), a drop-down would raise a trait error. One sentence, naming the input and what is accepted."""
        import numbers

        control = self.controls[name]
        options = getattr(control, "_options_values", None)
        if options is not None:
            if not isinstance(value, str) or value not in options:
                raise ValueError(f"{name} must be one of {', '.join(map(str, options))}; got {value!r}")
            return
        if isinstance(control.value, str):
            if not isinstance(value, str):
                raise ValueError(f"{name} must be text, got {type(value).__name__}")
            return
        whole = isinstance(control.value, int)
        if (not isinstance(value, numbers.Real) or isinstance(value, bool)
                or (whole and not float(value).is_integer()) or not math.isfinite(float(value))):
            kind = "an integer" if whole else "a finite number"
            raise ValueError(f"{name} must be {kind}, got {value!r}")
        low, high = getattr(control, "min", None), getattr(control, "max", None)
        if low is not None and not low <= value <= high:
            raise ValueError(f"{name} must be in [{low:,}, {high:,}] (the control's range, which would otherwise "
                             f"clamp it), got {value!r}")

    @property
    def hidden(self) -> bool:
        """With "hide" ticked, results stay hidden until a guess for these very inputs is revealed."""
        return bool(self.hide.value) and self.revealed_for != self.inputs

    def update(self) -> SimOutputs:
        t0 = time.perf_counter()
        self.outputs = simulate(self.inputs)
        hidden = self.hidden
        self.result.value = ("<p><i>Results hidden: reveal your prediction first.</i></p>" if hidden
                             else to_html(self.outputs, self.inputs))
        if self.plots is not None:
            self.plots.update(self.inputs, self.outputs, hidden)
        self.timing.value = (f"<small>updated in {1e3 * (time.perf_counter() - t0):.1f} ms (the model: "
                             f"{self.outputs.elapsed_ms:.1f} ms)</small>")
        return self.outputs

    def _changed(self, _change: object) -> None:
        self.update()

    # ---------------------------------------------------------------- the prediction box
    def record_guess(self, quantity: str, value: float) -> str:
        """Record a guess for one of :data:`PREDICTABLE` against the current inputs."""
        check.choice(quantity, "quantity", tuple(PREDICTABLE))
        value = check.real(value, "guess", accepted="a finite number (your prediction, in the quantity's unit)")
        self.guess = (quantity, value, self.inputs)
        self.revealed_for = None
        self.feedback.value = (f"Recorded: {html.escape(quantity)} = {float(value):,.4g}. "
                               "Now press reveal.")
        self.update()
        return self.feedback.value

    def reveal(self) -> dict[str, float] | None:
        """Compare the recorded guess with the simulator's value for the inputs it was made against."""
        if self.guess is None:
            self.feedback.value = "Record a guess first."
            return None
        quantity, value, at = self.guess
        out = simulate(at)
        self.guess = None
        self.revealed_for = at
        if not out.ok:  # nothing to compare with: say what does not fit, never "the model says nan"
            self.feedback.value = (f"{html.escape(quantity)}: you said {value:,.4g}, but these inputs cannot run, so "
                                   f"there is no value to compare with: {html.escape(out.error)}")
            self.update()
            return None
        actual = float(getattr(out, PREDICTABLE[quantity]))
        error = value - actual
        rel = error / actual  # every predictable quantity of a deployment that runs is positive
        self.feedback.value = (f"{html.escape(quantity)}: you said {value:,.4g}, the model says {actual:,.4g}; "
                               f"error {error:+,.4g} ({rel:+.0%}).")
        self.update()
        return {"guess": value, "actual": actual, "error": error, "relative_error": rel}

    # ---------------------------------------------------------------- layout
    def widget(self):
        import ipywidgets as w

        if self._widget is None:
            from stage5.simulator_plots import LivePlots

            self.plots = LivePlots()
            self.update()
            c = self.controls
            # three columns of controls side by side where they fit, one under another on a narrow screen
            column = w.Layout(width="360px", max_width="100%")
            left = w.VBox([c["model"], c["config_json"], c["gpu"], c["num_gpus"], c["weights"], c["kv"],
                           c["price_per_gpu_hour"], c["mode"]], layout=column)
            mid = w.VBox([c["prompt"], c["output"], c["concurrency"], c["alpha"], c["k"], c["prefix_hit"],
                          c["objective"]], layout=column)
            right = w.VBox([w.HTML("<b>the fleet</b>"), c["replicas"], c["routing"], c["history_share"],
                            c["kv_tier"]], layout=column)
            predict = w.VBox([w.HTML("<b>Commit to a prediction</b>"), self.quantity, self.guess_box,
                              w.HBox([self.record_button, self.reveal_button]), self.hide, self.feedback])
            controls = w.HBox([left, mid, right], layout=w.Layout(flex_flow="row wrap"))
            self._widget = w.VBox([controls, predict, self.result, self.plots.widget, self.timing])
        return self._widget
