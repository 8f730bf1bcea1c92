"""``python -m stage5 bench disagg``: one workload served colocated (without and with chunked prefill) and
disaggregated at the same replica count (:mod:`stage5.engine.disagg`), on this machine's calibration: TTFT and TPOT
percentiles with their sample sizes, goodput at stated targets, and the K/V bytes the hand-off moved. Two mixes: the
course's prompt-heavy one (long prompts, short answers: retrieval-augmented chat) and a short-prompt one, where
disaggregation stops paying."""

from __future__ import annotations

import sys

from stage5.engine.bench_load import LoadSpec, targets
from stage5.engine.disagg import DisaggConfig, serve
from stage5.engine.workload import Lengths, make_arrivals
from stage5.inputs import OneLineParser, arg_int, dumps

# name -> (prompt lengths, answer lengths). The prompt-heavy mix sends 16 prompt tokens per answer token, as the
# course's retrieval mix does (figures.MIXES["rag"]: 4,096 and 256), within the toy's 1,024 positions; the short one
# sends the same answers after short prompts.
MIXES = {
    "prompt_heavy": (Lengths("uniform", low=384, high=768), Lengths("uniform", low=24, high=48)),
    "short_prompt": (Lengths("uniform", low=16, high=64), Lengths("uniform", low=24, high=48)),
}
REQUESTS, REPLICAS, PREFILL_REPLICAS = 96, 4, 2  # 96 answers: a p99 between the two slowest
LOAD = 0.9  # each mix is sent at this share of what the split fleet's slower pool can take (predicted_capacity)
CONFIGS = {"colocated": "colocated", "colocated_chunked": "chunked", "disaggregated": "disaggregated"}


def run_mix(model, cfg, cal, mix: str, n: int = REQUESTS, replicas: int = REPLICAS,
            prefill_replicas: int = PREFILL_REPLICAS, rate: float | None = None, seed: int = 0) -> dict:
    """One mix served three ways; raises if any way answers differently (scheduling must not change tokens)."""
    prompt, output = MIXES[mix]
    config = DisaggConfig(replicas=replicas, prefill_replicas=prefill_replicas)
    capacity = predicted_capacity(cal, prompt, output, config)
    rate = rate or LOAD * min(capacity.values())
    requests = make_arrivals(n, prompt, output, rate=rate, seed=seed)
    ttft_target, tpot_target = targets(cal, LoadSpec(n=n, prompt=prompt, output=output))
    out, answers = {}, None
    for name, mode in CONFIGS.items():
        result = serve(model, cfg, cal, requests, DisaggConfig(mode=mode, replicas=replicas,
                                                               prefill_replicas=prefill_replicas))
        if answers is not None and result.outputs != answers:
            raise RuntimeError(f"{name} answered differently from colocated: scheduling must not change tokens")
        answers = result.outputs
        out[name] = result.summary(ttft_target, tpot_target)
    base, split = out["colocated"], out["disaggregated"]
    return {"prompt": vars(prompt), "output": vars(output), "rate": rate, "requests": n,
            "predicted_capacity": capacity,
            "replicas": replicas, "prefill_replicas": prefill_replicas,
            "targets": {"ttft_s": ttft_target, "tpot_s": tpot_target}, "fleets": out,
            "tpot_p99_cut": base["tpot_p99"] / split["tpot_p99"],
            "tpot_p99_cut_vs_chunked": out["colocated_chunked"]["tpot_p99"] / split["tpot_p99"],
            "ttft_p99_ratio": split["ttft_p99"] / base["ttft_p99"],
            "goodput_ratio": split["goodput"] / base["goodput"] if base["goodput"] else None}


def _mean(lengths: Lengths) -> float:
    return (lengths.low + lengths.high) / 2 if lengths.kind == "uniform" else float(lengths.longest)


def predicted_capacity(cal, prompt: Lengths, output: Lengths, config: DisaggConfig) -> dict[str, float]:
    """Requests per second each pool of the split fleet can take, from the step model (the roofline toy on ``cal``)
    at the mix's mean lengths: prefill replicas / one prefill; decode replicas x a full batch / (answer x its step)."""
    from stage5.engine.roofline_toy import ROOFLINE_TOY
    from stage5.step_model import predict_step

    p, o = _mean(prompt), _mean(output)
    prefill = float(predict_step(cal, ROOFLINE_TOY, 1, p, tokens_per_seq=p).time_s)
    step = float(predict_step(cal, ROOFLINE_TOY, config.max_batch, p + o / 2).time_s)
    return {"prefill": config.prefill_replicas / prefill,
            "decode": config.decode_replicas * config.max_batch / (o * step)}


def report(model, cfg, cal, n: int = REQUESTS, replicas: int = REPLICAS, prefill_replicas: int = PREFILL_REPLICAS,
           seed: int = 0) -> dict:
    """The report ``bench disagg --json`` prints: every mix of :data:`MIXES`."""
    return {"mixes": {m: run_mix(model, cfg, cal, m, n, replicas, prefill_replicas, seed=seed) for m in MIXES},
            "calibration": {"machine": cal.machine, "bandwidth": cal.bandwidth}}


def _table(rep: dict) -> str:
    lines = []
    for mix, r in rep["mixes"].items():
        lines.append(f"\n{mix}: {r['requests']} requests at {r['rate']:g}/s, {r['replicas']} replicas "
                     f"(disaggregated: {r['prefill_replicas']} prefill); targets TTFT {r['targets']['ttft_s']:.3f} s, "
                     f"TPOT {r['targets']['tpot_s']:.3f} s")
        lines.append(f"{'fleet':<20}{'TTFT p50':>10}{'TTFT p99':>10}{'TPOT p50':>10}{'TPOT p99':>10}{'goodput':>9}"
                     f"{'MB moved':>10}")
        for name, f in r["fleets"].items():
            lines.append(f"{name:<20}{f['ttft_p50']:9.3f}s{f['ttft_p99']:9.3f}s{f['tpot_p50']:9.3f}s"
                         f"{f['tpot_p99']:9.3f}s{f['goodput']:8.2f}/s{f['bytes_moved'] / 1e6:10.1f}")
        lines.append(f"p99 TPOT cut by disaggregation: {r['tpot_p99_cut']:.1f}x against colocated, "
                     f"{r['tpot_p99_cut_vs_chunked']:.1f}x against chunked")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m stage5 bench disagg", description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=arg_int(4, 1000, why="every request is served by the toy engine here"),
                        default=REQUESTS, help="requests per mix (default %(default)s)")
    parser.add_argument("--replicas", type=arg_int(2, 16, why="every replica runs on this CPU"), default=REPLICAS)
    parser.add_argument("--prefill", type=arg_int(1, 15), default=PREFILL_REPLICAS,
                        help="prefill replicas of the disaggregated fleet (default %(default)s)")
    parser.add_argument("--seed", type=arg_int(0), default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args(argv)
    if args.prefill >= args.replicas:
        parser.error(f"--prefill {args.prefill} leaves no decode replica of {args.replicas}; accepted: fewer than "
                     "--replicas")
    from stage5.calibrate import calibrate, use_course_threads
    from stage5.engine.fleet import load_tiny
    from stage5.engine.roofline_toy import ROOFLINE_TOY

    use_course_threads()
    model, cfg = load_tiny()
    print(f"serving {len(MIXES)} mixes of {args.requests} requests three ways on {args.replicas} replicas",
          file=sys.stderr, flush=True)
    rep = report(model, cfg, calibrate(ROOFLINE_TOY), args.requests, args.replicas, args.prefill, args.seed)
    print(dumps(rep, indent=2) if args.json else _table(rep))
    return 0


