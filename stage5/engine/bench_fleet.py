"""``python -m stage5 bench fleet``: the toy fleet's comparison (:func:`stage5.engine.fleet.compare`) on this
machine's calibration, as a table or as JSON."""

from __future__ import annotations

import sys

from stage5 import fleet
from stage5.engine.fleet import BENCH_REPLICAS, LOAD_BOUNDS, compare, load_tiny
from stage5.inputs import OneLineParser, arg_int, arg_real, dumps


def _table(report: dict) -> str:
    lines = [f"{'routing':<32}{'hit rate':>9}{'predicted':>10}{'computed':>10}{'TTFT p50':>10}{'TTFT p99':>10}"
             f"{'imbalance':>10}{'most/replica':>13}"]

    def row(name: str, r: dict, predicted: float | None = None) -> str:
        pred = f"{predicted:10.1%}" if predicted is not None else f"{'':>10}"
        return (f"{name:<32}{r['hit_rate']:9.1%}{pred}{r['prefill_tokens_computed']:10d}{r['ttft_p50']:9.3f}s"
                f"{r['ttft_p99']:9.3f}s{r['imbalance']:10.2f}{r['max_requests_per_replica']:13d}")

    lines.append(row("one replica, the fleet's memory", report["single_replica"]))
    for p, r in report["policies"].items():
        lines.append(row(f"{fleet.POLICY_LABELS[p]} x {report['replicas']}", r, r["predicted_hit_rate"]))
    for r in report["load_bounds"]:
        bound = "no bound" if r["load_bound"] is None else f"bound {r['load_bound']:g}"
        lines.append(row(f"prefix-aware, {bound}", r))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m stage5 bench fleet", description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=arg_int(1, 64, why="the toy fleet runs every replica on this CPU"),
                        default=BENCH_REPLICAS, help="replicas behind the router (default %(default)s)")
    parser.add_argument("--sessions", type=arg_int(1, 2000, why="each session is served by the toy engine here"),
                        default=fleet.MultiTenant.sessions, help="conversations (default %(default)s)")
    parser.add_argument("--tenants", type=arg_int(1, 64, why="each tenant's system prompt is cut from the held-out "
                                                  "corpus"), default=fleet.MultiTenant.tenants)
    parser.add_argument("--rate", type=arg_real(1e-3, 1e4), default=fleet.MultiTenant.rate,
                        help="new sessions per second on the virtual clock (default %(default)s)")
    parser.add_argument("--seed", type=arg_int(0), default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args(argv)
    from stage5.calibrate import calibrate, use_course_threads
    from stage5.engine.roofline_toy import ROOFLINE_TOY

    use_course_threads()
    spec = fleet.MultiTenant(tenants=args.tenants, sessions=args.sessions, rate=args.rate, seed=args.seed)
    model, cfg = load_tiny()
    print(f"serving {spec.requests} requests ({spec.sessions} sessions) through one replica with the fleet's memory, then "
          f"{args.replicas} replicas under {len(fleet.POLICIES)} policies and {len(LOAD_BOUNDS) - 1} load bounds",
          file=sys.stderr, flush=True)
    report = compare(model, cfg, calibrate(ROOFLINE_TOY), spec, args.replicas)
    if args.json:
        print(dumps(report, indent=2))
        return 0
    s = report["summary"]
    print(f"{spec.requests} requests: {spec.tenants} tenants' {spec.system_len}-token system prompts, "
          f"{spec.sessions} sessions of {spec.turns[0]}-{spec.turns[1]} turns; steps timed as the roofline toy on "
          "this machine's calibration (virtual clock)\n")
    print(_table(report))
    print(f"\nprefix-aware routing computes {s['prefill_cut_prefix_over_round_robin']:.1f}x fewer prompt tokens than "
          f"round-robin over {args.replicas} replicas")
    return 0
