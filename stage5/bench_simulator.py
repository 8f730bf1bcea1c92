"""How long one simulator update takes on the Python side: recompute, redraw the four plots, refill the widgets.

``python -m stage5.bench_simulator`` drives the widget without a display through a fixed sweep of control
changes (each one update, as a learner's edit would be) and prints the median, 95th percentile and worst
time. It measures the kernel's share of the latency only; the browser's rendering comes on top (measure that
in JupyterLab with the browser's performance tools). Not a test: timings depend on the machine and its load.
"""

from __future__ import annotations

import statistics
import time

from stage5.inputs import OneLineParser, arg_rounds, dumps, run_command
from stage5.simulator import Simulator

# A learner's session in miniature: every kind of control, including the slow paths (a format change, a big
# batch near the KV wall, speculation on).
SWEEP: list[dict[str, object]] = [
    {"concurrency": c} for c in (1, 2, 4, 8, 16, 32, 64, 128, 256, 400)
] + [{"k": k} for k in (0, 2, 4, 8)] + [{"alpha": a} for a in (0.5, 0.7, 0.9)] + [
    {"weights": "fp8"}, {"kv": "fp8"}, {"weights": "int4"}, {"weights": "bf16", "kv": "bf16"},
    {"prompt": 4096}, {"prompt": 1024}, {"prefix_hit": 0.5}, {"gpu": "H200"}, {"num_gpus": 2},
    {"gpu": "H100-SXM", "num_gpus": 4}, {"model": "llama3-8b", "num_gpus": 1}, {"model": "llama3-70b", "num_gpus": 4},
    {"replicas": 8}, {"routing": "round_robin"}, {"history_share": 0.5}, {"kv_tier": "ssd"}, {"kv_tier": "hbm"},
]


def run(repeats: int = 3) -> dict[str, float]:
    sim = Simulator()
    sim.widget()  # builds the plots, as in a notebook
    times = []
    for _ in range(repeats):
        for change in SWEEP:
            t0 = time.perf_counter()
            sim.set(**change)  # one update per value set
            times.append((time.perf_counter() - t0) * 1e3 / len(change))
    times.sort()
    return {"updates": len(times), "median_ms": statistics.median(times),
            "p95_ms": times[int(0.95 * (len(times) - 1))], "max_ms": times[-1]}


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m stage5.bench_simulator", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=arg_rounds(), default=3, help="passes over the sweep, 1 to 1,000 (default 3)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    report = run(args.repeats)
    print(dumps(report) if args.json else "\n".join(f"{k}: {v:,.1f}" for k, v in report.items()))
    return 0


if __name__ == "__main__":
    run_command(main)
