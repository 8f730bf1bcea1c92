"""``python -m stage5 bench load``: serving under load - latency against request rate, from light to past saturation.

One seeded long-tailed workload (many short prompts, a few long ones) is sent at each rate of a sweep as a
Poisson process, the same requests at every rate, through three engines at the same K/V budget:

* ``contiguous_static`` - a whole-length reservation per request, batches run to completion;
* ``paged_continuous`` - blocks on demand, requests join and leave at every step;
* ``paged_continuous_chunked`` - the same with a per-step token budget, so a long prompt is fed in chunks
  beside the running decodes instead of stalling them (chunked prefill).

**Which model and which clock.** Answer lengths are set by each request (``stop_after``), so the schedule
depends only on token counts, never on which tokens come out: any model gives the same schedule. By default
the tokens come from exercise 2's tiny model (``--model tiny``: the fastest, so a sweep of fifteen runs
takes about a minute), and the latencies are on the *virtual clock*: each step lasts what this machine's
calibrated step model predicts for the roofline toy (:data:`~stage5.engine.roofline_toy.ROOFLINE_TOY`, the
model whose steps stream their weights from memory, as a server's do) for that step's sequences, tokens and
K/V. Every virtual number is therefore deterministic for a given calibration, even on a busy machine, which
would otherwise change the schedule itself. The wall-clock versions (``wall_*``) serve the same requests at
the same rates with every step lasting what it measured; with the tiny model the steps are far shorter than
the roofline toy's, so they show a lightly loaded server (``--model roofline`` makes the wall clock measure
what the virtual one predicts, at many times the run time; ``--no-wall`` skips them).

Goodput counts the requests per second that meet both a TTFT and a TPOT target (DistServe). The targets
follow this machine: TPOT within ``TPOT_TARGET_STEPS`` batch-1 decode steps, TTFT within ``TTFT_TARGET_X``
times the longest prompt's prefill, both predicted for the roofline toy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from stage5.engine.clock import VirtualClock, WallClock
from stage5.engine.engine import Engine, RunResult
from stage5.engine.workload import Lengths, make_arrivals
from stage5.inputs import OneLineParser, arg_int, arg_requests, dumps

ENGINES = {  # name -> (allocator, scheduler, chunked)
    "contiguous_static": ("contiguous", "static", False),
    "paged_continuous": ("paged", "continuous", False),
    "paged_continuous_chunked": ("paged", "continuous", True),
}
KEYS = ("throughput", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "itl_p99", "itl_max", "goodput")
TPOT_TARGET_STEPS = 6.0  # TPOT target: this many predicted batch-1 decode steps of the roofline toy
TTFT_TARGET_X = 3.0  # TTFT target: this many times the predicted prefill of the longest prompt


@dataclass(frozen=True)
class LoadSpec:
    """The workload and the server; every default is what ``bench load`` runs."""

    n: int = 64
    seed: int = 0
    rates: tuple[float, ...] = (1.0, 2.0, 4.0, 6.0, 8.0)  # requests per second, on the virtual clock
    prompt: Lengths = field(default_factory=lambda: Lengths("long_tail", low=16, high=64, long_share=0.1,
                                                            long_low=512, long_high=768))
    output: Lengths = field(default_factory=lambda: Lengths("uniform", low=16, high=128))
    max_tokens: int = 256  # clients ask for more than most answers use
    num_blocks: int = 160
    block_size: int = 16
    max_batch: int = 32
    token_budget: int = 64  # the chunked engine's tokens per step (vLLM's max_num_batched_tokens)


def targets(cal, spec: LoadSpec) -> tuple[float, float]:
    """(TTFT target, TPOT target) in seconds on the virtual clock of ``cal`` for the roofline toy."""
    from stage5.engine.roofline_toy import ROOFLINE_TOY
    from stage5.step_model import predict_step

    decode = float(predict_step(cal, ROOFLINE_TOY, 1, 0).time_s)
    longest = spec.prompt.longest
    prefill = float(predict_step(cal, ROOFLINE_TOY, 1, longest, tokens_per_seq=longest).time_s)
    return TTFT_TARGET_X * prefill, TPOT_TARGET_STEPS * decode


def serve(model, cfg, spec: LoadSpec, name: str, rate: float, clock) -> RunResult:
    allocator, scheduler, chunked = ENGINES[name]
    requests = make_arrivals(spec.n, spec.prompt, spec.output, rate=rate, seed=spec.seed, max_tokens=spec.max_tokens)
    engine = Engine(model, cfg, allocator=allocator, scheduler=scheduler, num_blocks=spec.num_blocks,
                    block_size=spec.block_size, max_batch=spec.max_batch,
                    token_budget=spec.token_budget if chunked else None)
    return engine.run(requests, clock=clock)


def sweep(model, cfg, cal, spec: LoadSpec, wall: bool = True) -> dict:
    """Every engine at every rate: the report ``bench load --json`` prints."""
    from stage5.engine.roofline_toy import ROOFLINE_TOY

    ttft_target, tpot_target = targets(cal, spec)
    engines: dict[str, dict[str, list[float]]] = {}
    outputs = None
    for name in ENGINES:
        rows: dict[str, list[float]] = {k: [] for k in (*KEYS, "preemptions", "stalled_gap_share")}
        for rate in spec.rates:
            run = serve(model, cfg, spec, name, rate, VirtualClock(cal, ROOFLINE_TOY))
            outputs = outputs or run.outputs
            if run.outputs != outputs:
                raise RuntimeError(f"{name} at rate {rate} produced different tokens: scheduling must not change them")
            lat = latency(run, ttft_target, tpot_target)
            for k in KEYS:
                rows[k].append(lat[k])
            rows["preemptions"].append(run.preemptions)
            rows["stalled_gap_share"].append(stalled_gap_share(run, spec.token_budget))
            if wall:
                lat = latency(serve(model, cfg, spec, name, rate, WallClock()), ttft_target, tpot_target)
                for k in KEYS:
                    rows.setdefault(f"wall_{k}", []).append(lat[k])
        engines[name] = rows
    return {"rates": list(spec.rates), "engines": engines, "targets": {"ttft_s": ttft_target, "tpot_s": tpot_target},
            "summary": summarize(list(spec.rates), engines, mean_output(spec))}


def latency(run: RunResult, ttft_target: float, tpot_target: float) -> dict[str, float]:
    """The run's latency summary plus ``itl_max``, the single longest gap between two tokens of one answer."""
    gaps = [g for t in run.requests.values() for g in t.gaps]
    return {**run.latency(ttft_target, tpot_target), "itl_max": max(gaps, default=0.0)}


def stalled_gap_share(run: RunResult, budget: int) -> float:
    """Share of all gaps between tokens (the population ITL percentiles are taken over) that ended at a step in
    which one sequence fed more than ``budget`` tokens: a prompt the chunked engine would have split, stalling
    every decode beside it. p99 ITL sees such stalls only when this share exceeds 1%."""
    seen: set[int] = set()
    stalled = 0
    for step in run.steps_log:
        over = any(n > budget for n in step.fed)
        for i in step.sampled:
            stalled += over and i in seen  # a later token of a request: the step ended one of its gaps
            seen.add(i)
    gaps = sum(len(t.gaps) for t in run.requests.values())
    return stalled / gaps if gaps else 0.0


def mean_output(spec: LoadSpec) -> float:
    requests = make_arrivals(spec.n, spec.prompt, spec.output, rate=1.0, seed=spec.seed, max_tokens=spec.max_tokens)
    return sum(r.output_len for r in requests) / len(requests)


def summarize(rates: list[float], engines: dict, mean_output: float) -> dict[str, float]:
    """The issue's comparisons, read off the sweep.

    Saturation is the most requests per second paged+continuous completes (its best throughput over the
    mean answer length). Chunked prefill is compared at every swept rate from half of that up, and the rate
    where its p99 TPOT gains least is reported (the conservative choice), with p99 ITL, the worst gap
    (``itl_max``) and the share of the plain engine's gaps that a long prompt stalled beside it.
    """
    base, chunk = engines["paged_continuous"], engines["paged_continuous_chunked"]
    sat_rate = max(base["throughput"]) / mean_output
    past_half = [i for i, r in enumerate(rates) if r >= sat_rate / 2] or [len(rates) - 1]

    def gain(key: str, i: int) -> float:
        return base[key][i] / chunk[key][i] if chunk[key][i] else 0.0

    worst = min(past_half, key=lambda i: gain("tpot_p99", i))
    return {"saturation_rate": sat_rate,
            "chunked_rate": rates[worst],
            "chunked_tpot_p99_gain": gain("tpot_p99", worst),
            "chunked_tpot_p99_gain_best": max(gain("tpot_p99", i) for i in past_half),
            "chunked_itl_p99_gain": gain("itl_p99", worst),
            "chunked_itl_max_gain": gain("itl_max", worst),
            "plain_stalled_gap_share": base["stalled_gap_share"][worst],
            "chunked_ttft_p50_cost": chunk["ttft_p50"][worst] / base["ttft_p50"][worst] if base["ttft_p50"][worst] else 0.0,
            "chunked_throughput_cost": 1 - chunk["throughput"][worst] / base["throughput"][worst],
            "paged_goodput_over_static": max(base["goodput"]) / max(max(engines["contiguous_static"]["goodput"]), 1e-12)}


def _table(report: dict) -> str:
    lines = [f"{'engine':<26}{'rate/s':>7}{'tok/s':>9}{'TTFT p50':>10}{'TTFT p99':>10}{'TPOT p50':>10}"
             f"{'TPOT p99':>10}{'ITL p99':>10}{'goodput':>9}{'preempt':>8}"]
    for name, rows in report["engines"].items():
        for i, rate in enumerate(report["rates"]):
            lines.append(f"{name:<26}{rate:7.1f}{rows['throughput'][i]:9.0f}{rows['ttft_p50'][i]:9.2f}s"
                         f"{rows['ttft_p99'][i]:9.2f}s{1e3 * rows['tpot_p50'][i]:8.0f}ms{1e3 * rows['tpot_p99'][i]:8.0f}ms"
                         f"{1e3 * rows['itl_p99'][i]:8.0f}ms{rows['goodput'][i]:9.2f}{rows['preemptions'][i]:8.0f}")
    return "\n".join(lines)


# Request rates a CPU sweep can mean: below one request per 1,000 s (17 minutes) the run is all idle clock and
# a step would vanish against arrival times (float64 keeps 16 digits); above a million per second requests
# arrive closer together than the toy's fastest step, so every rate there is the same saturated server.
MIN_RATE, MAX_RATE, MAX_RATES = 1e-3, 1e6, 32


def rate_list(text: str) -> tuple[float, ...]:
    """'1,2,4' -> (1.0, 2.0, 4.0); every rate a finite number in [MIN_RATE, MAX_RATE], in increasing order."""
    import argparse

    accepted = (f"accepted: up to {MAX_RATES} increasing request rates per second in [{MIN_RATE:g}, {MAX_RATE:g}] "
                "(a slower rate leaves the clock idle, a faster one only saturates the server), e.g. 1,2,4")
    try:
        rates = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a comma-separated list of numbers; {accepted}") from None
    if (not rates or len(rates) > MAX_RATES or any(not MIN_RATE <= r <= MAX_RATE for r in rates)
            or list(rates) != sorted(set(rates))):
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: {accepted}")
    return rates


def load_model(name: str):
    """(model, cfg) for ``--model``."""
    if name == "tiny":
        from stage5.engine.checkpoints import tiny_model

        model = tiny_model(dtype=torch.float32)
        return model, model.cfg
    if name == "target":
        from stage5.engine.checkpoints import load_target

        return load_target()
    from stage5.engine.roofline_toy import load_roofline_toy

    return load_roofline_toy()


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m stage5 bench load", description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=arg_requests(), default=LoadSpec.n, help="requests per run")
    parser.add_argument("--seed", type=arg_int(0), default=0, help="workload seed (>= 0)")
    parser.add_argument("--rates", type=rate_list, default=LoadSpec.rates,
                        help="comma-separated request rates per second (default: %(default)s)")
    parser.add_argument("--model", choices=("tiny", "target", "roofline"), default="tiny",
                        help="the model that produces the tokens (the schedule and the virtual clock do not depend on "
                             "it): tiny, the exercise model (fastest); target, the trained model; roofline, the toy "
                             "the virtual clock times (slow, but then the wall clock measures what it predicts)")
    parser.add_argument("--no-wall", action="store_true", help="skip the wall-clock runs (halves the time)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args(argv)
    from stage5.calibrate import calibrate, use_course_threads
    from stage5.engine.roofline_toy import ROOFLINE_TOY

    use_course_threads()
    model, cfg = load_model(args.model)
    spec = LoadSpec(n=args.requests, seed=args.seed, rates=args.rates)
    report = sweep(model, cfg, calibrate(ROOFLINE_TOY), spec, wall=not args.no_wall)
    report["workload"] = {"n": spec.n, "seed": spec.seed, "prompt": spec.prompt.__dict__,
                          "output": spec.output.__dict__, "max_tokens": spec.max_tokens, "model": cfg.name,
                          "timed_as": ROOFLINE_TOY.name, "num_blocks": spec.num_blocks, "block_size": spec.block_size,
                          "max_batch": spec.max_batch, "token_budget": spec.token_budget}
    if args.json:
        print(dumps(report, indent=2))
        return 0
    s, t = report["summary"], report["targets"]
    print(f"{spec.n} requests (seed {spec.seed}), tokens from {cfg.name}, steps timed as {ROOFLINE_TOY.name} on this "
          f"machine's calibration (virtual clock); targets TTFT <= {t['ttft_s']:.2f} s, TPOT <= {1e3 * t['tpot_s']:.0f} ms\n")
    print(_table(report))
    print(f"\nsaturation near {s['saturation_rate']:.1f} requests/s; at {s['chunked_rate']:g}/s chunked prefill cuts p99 "
          f"TPOT {s['chunked_tpot_p99_gain']:.2f}x and p99 ITL {s['chunked_itl_p99_gain']:.1f}x at "
          f"{100 * s['chunked_throughput_cost']:.0f}% throughput cost; "
          f"paged+continuous goodput {s['paged_goodput_over_static']:.1f}x contiguous+static")
    return 0


if __name__ == "__main__":
    from stage5.inputs import run_command

    run_command(main)


def predicted_saturation(model, cfg, cal, spec: LoadSpec) -> float:
    """Requests per second the paged, continuous engine completes when every request of ``spec`` is waiting
    at once, on the virtual clock of ``cal``: the most it can serve on this machine, predicted before any
    rate is swept. Deterministic for a given calibration."""
    from stage5.engine.roofline_toy import ROOFLINE_TOY

    burst = LoadSpec(**{**spec.__dict__, "rates": (1e6,)})  # a million per second: every request waiting
    run = serve(model, cfg, burst, "paged_continuous", 1e6, VirtualClock(cal, ROOFLINE_TOY))
    return run.latency()["request_rate"]


def chapter_sweep(n: int = 40, relative: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0)) -> tuple[dict, LoadSpec, object]:
    """The sweep chapter 4 runs during the build: ``n`` requests (seconds of CPU with the tiny model), virtual
    clock only, at rates set relative to this machine's predicted saturation (:func:`predicted_saturation`),
    so "twice saturation" is twice saturation on a fast desktop and on a slow laptop. Returns (report, spec,
    calibration); ``report["predicted_saturation"]`` is the rate the multiples are of."""
    from stage5.calibrate import calibrate, use_course_threads
    from stage5.engine.roofline_toy import ROOFLINE_TOY

    use_course_threads()
    model, cfg = load_model("tiny")
    cal = calibrate(ROOFLINE_TOY)
    saturation = predicted_saturation(model, cfg, cal, LoadSpec(n=n))
    spec = LoadSpec(n=n, rates=tuple(x * saturation for x in relative))
    report = sweep(model, cfg, cal, spec, wall=False)
    report["predicted_saturation"] = saturation
    report["relative_rates"] = list(relative)
    return report, spec, cal


def predicted_chunking(cal, spec: LoadSpec) -> dict[str, float]:
    """Chapter 4's prediction for chunked prefill, made before the sweep from the step model and the very
    workload and budget the sweep serves (the requests ``spec`` draws, not the bounds of its distribution).

    * ``stall_s``: a step feeding the longest prompt actually drawn whole; ``chunk_s``: a step feeding
      ``spec.token_budget`` tokens, what the chunked engine runs instead. Their ratio, ``gain``, is the
      predicted cut in the worst gap between tokens (``itl_max``); both ignore the decodes running beside.
    * p99 ITL is taken over every gap of every answer (``gaps`` in all), so a stall reaches it only if more
      than one gap in a hundred ends at one: the ``long_prompts`` (longer than the budget) must each stall
      more than ``decoders_needed`` running sequences on average. Otherwise p99 sees ordinary steps.
    """
    from stage5.engine.roofline_toy import ROOFLINE_TOY
    from stage5.step_model import predict_step

    requests = make_arrivals(spec.n, spec.prompt, spec.output, rate=1.0, seed=spec.seed, max_tokens=spec.max_tokens)
    budget, longest = spec.token_budget, max(len(r.prompt) for r in requests)
    stall = float(predict_step(cal, ROOFLINE_TOY, 1, longest, tokens_per_seq=longest).time_s)
    chunk = float(predict_step(cal, ROOFLINE_TOY, 1, budget, tokens_per_seq=budget).time_s)
    long_prompts = sum(len(r.prompt) > budget for r in requests)
    gaps = sum(r.output_len - 1 for r in requests)
    return {"longest_prompt": longest, "budget": budget, "stall_s": stall, "chunk_s": chunk, "gain": stall / chunk,
            "chunk_steps": -(-longest // budget), "long_prompts": long_prompts, "gaps": gaps,
            "decoders_needed": gaps / 100 / long_prompts if long_prompts else float("inf")}
