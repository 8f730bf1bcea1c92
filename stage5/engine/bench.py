"""``python -m stage5 bench``: one seeded workload through all four engines at the same K/V budget.

The four engines are the product of two changes - contiguous vs paged K/V allocation, static vs continuous
scheduling - so the table shows what each change buys alone and together. Every column except the two
timed ones (``tokens_per_s``, ``wall_s``) is deterministic for a given seed.

It serves the roofline-sized toy by default (``--model target`` for the small trained model). Beside the
measurements it prints the predicted decode step on this machine (:func:`stage5.step_model.predict_step` from
the calibration cached by ``python -m stage5 calibrate``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import torch

from stage5.engine.engine import Engine, RunResult
from stage5.engine.sequence import Request
from stage5.engine.workload import WorkloadSpec, make_workload
from stage5.inputs import OneLineParser, arg_int, arg_requests, arg_threads, dumps

COMBINATIONS = [("contiguous", "static"), ("contiguous", "continuous"), ("paged", "static"), ("paged", "continuous")]
COLUMNS = ["tokens_per_s", "tokens_per_step", "kv_utilization", "peak_running", "steps", "wall_s"]
DEFAULT_BLOCKS = 128
DEFAULT_BLOCK_SIZE = 16
DEFAULT_MAX_BATCH = 64


def progress_to_stderr(done: int, total: int, name: str, result: RunResult, elapsed_s: float) -> None:
    """One line per finished engine on stderr (stdout stays the table or the JSON), with the time left
    estimated from the engines run so far (the first, contiguous+static, is the slowest, so it errs long)."""
    left = elapsed_s / done * (total - done)
    tail = f"; about {left:.0f} s left (estimated from the engines so far)" if done < total else "; done"
    print(f"[{done}/{total}] {name}: {result.metrics()['steps']} steps in {result.wall_s:.1f} s{tail}",
          file=sys.stderr, flush=True)


def run_all(model, cfg, requests, num_blocks: int, block_size: int, max_batch: int,
            progress: Callable[[int, int, str, RunResult, float], None] | None = None) -> dict[str, RunResult]:
    """Serve ``requests`` through each combination; check they all produce the same tokens. ``progress`` is
    called after each engine with (engines done, engines in all, name, its result, seconds so far)."""
    results = {}
    start = time.perf_counter()
    for i, (allocator, scheduler) in enumerate(COMBINATIONS, 1):
        engine = Engine(model, cfg, allocator=allocator, scheduler=scheduler, num_blocks=num_blocks,
                        block_size=block_size, max_batch=max_batch)
        name = f"{allocator}_{scheduler}"
        results[name] = engine.run(requests)
        if progress is not None:
            progress(i, len(COMBINATIONS), name, results[name], time.perf_counter() - start)
    first = next(iter(results.values())).outputs
    for name, result in results.items():
        if result.outputs != first:  # greedy, same model: only batching differs, so outputs should agree
            print(f"warning: {name} produced different tokens from {COMBINATIONS[0]} "
                  "(float32 near-ties can flip under different batch shapes)", file=sys.stderr)
    return results


def predicted_decode(cfg, result: RunResult) -> dict[str, float]:
    """Mean batch and context of the run's decode steps, the predicted time for that step, and the measured one.

    The prediction is :func:`stage5.step_model.predict_step` from this machine's cached calibration for ``cfg``.
    """
    decode = [i for i, (kind, _) in enumerate(result.trace) if kind == "decode"]
    if not decode:
        return {}
    batch = sum(len(result.trace[i][1]) for i in decode) / len(decode)
    context = sum(result.step_context[i] for i in decode) / len(decode) / batch
    measured = sorted(result.step_s[i] for i in decode)[len(decode) // 2]
    from stage5.calibrate import calibrate
    from stage5.step_model import predict_step

    step = predict_step(calibrate(cfg), cfg, batch, context)
    return {"batch": batch, "context": context, "predicted_s": float(step.time_s),
            "memory_s": float(step.memory_s), "compute_s": float(step.compute_s), "measured_median_s": measured}


def _table(results: dict[str, RunResult]) -> str:
    lines = [f"{'engine':<24}" + "".join(f"{c:>17}" for c in COLUMNS)]
    for name, result in results.items():
        m = result.metrics()
        cells = [f"{m['tokens_per_s']:17.1f}", f"{m['tokens_per_step']:17.2f}", f"{m['kv_utilization']:17.1%}",
                 f"{m['peak_running']:17d}", f"{m['steps']:17d}", f"{m['wall_s']:17.2f}"]
        lines.append(f"{name:<24}" + "".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "book":
        from stage5.engine.bench_book import main as book_main

        return book_main(argv[1:])
    if argv and argv[0] == "prefix":
        from stage5.engine.bench_prefix import main as prefix_main

        return prefix_main(argv[1:])
    if argv and argv[0] == "spec":
        from stage5.engine.bench_spec import main as spec_main

        return spec_main(argv[1:])
    if argv and argv[0] == "load":
        from stage5.engine.bench_load import main as load_main

        return load_main(argv[1:])
    if argv and argv[0] == "fleet":
        from stage5.engine.bench_fleet import main as fleet_main

        return fleet_main(argv[1:])
    if argv and argv[0] == "disagg":
        from stage5.engine.bench_disagg import main as disagg_main

        return disagg_main(argv[1:])
    if argv and argv[0] == "roofline":
        from stage5.engine.bench_roofline import main as roofline_main

        return roofline_main(argv[1:])
    parser = OneLineParser(prog="python -m stage5 bench", description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=arg_requests(), default=WorkloadSpec.n, help="number of requests")
    parser.add_argument("--seed", type=arg_int(0), default=0, help="workload seed (>= 0)")
    parser.add_argument("--blocks", type=arg_int(1, 2**20, why="a million blocks of 16 tokens is 128 GiB of the "
                                                     "roofline toy's float32 K/V, past a desktop's memory"),
                        default=DEFAULT_BLOCKS, help="K/V pool size in blocks, at most 1,048,576")
    parser.add_argument("--block-size", type=arg_int(1, 4096, why="vLLM's blocks hold 16 to 128 tokens"),
                        default=DEFAULT_BLOCK_SIZE, help="tokens per block")
    parser.add_argument("--max-batch", type=arg_int(1, 4096, why="the workload has at most thousands of requests"),
                        default=DEFAULT_MAX_BATCH, help="most sequences in one step")
    parser.add_argument("--threads", type=arg_threads(), default=1,
                        help="torch CPU threads (default 1: on a shared machine, more threads than free cores "
                             "make small steps wildly slower and the timings meaningless)")
    parser.add_argument("--model", choices=("roofline", "target"), default="roofline",
                        help="roofline: the timing toy (random weights, memory-bound at batch 1); target: the "
                             "small trained model (its weights fit in cache, so its steps are mostly overhead)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    if args.model == "roofline":
        from stage5.engine.roofline_toy import load_roofline_toy as load
    else:
        from stage5.engine.checkpoints import load_target as load

    model, cfg = load()
    requests = make_workload(args.requests, args.seed)
    longest = max(r.max_len for r in requests)
    if args.blocks * args.block_size < longest:  # the engines would refuse it; say which flag to change
        parser.error(f"--blocks {args.blocks} x --block-size {args.block_size} = {args.blocks * args.block_size} "
                     f"K/V slots cannot hold the workload's longest request ({longest} tokens); accepted: at least "
                     f"{-(-longest // args.block_size)} blocks of {args.block_size}")
    warmup = Request(id=0, prompt=requests[0].prompt[:16], max_tokens=8)
    Engine(model, cfg, num_blocks=2, block_size=16).run([warmup])  # let torch settle before anything is timed
    print(f"serving {args.requests} requests through {len(COMBINATIONS)} engines; progress follows here, on "
          "stderr", file=sys.stderr, flush=True)
    results = run_all(model, cfg, requests, args.blocks, args.block_size, args.max_batch,
                      progress=progress_to_stderr)
    slots = args.blocks * args.block_size
    workload = {**WorkloadSpec(n=args.requests, seed=args.seed).describe(), "model": cfg.name,
                "num_blocks": args.blocks, "block_size": args.block_size, "kv_slots": slots,
                "kv_bytes": int(slots * cfg.kv_bytes_per_token(4)), "max_batch": args.max_batch,
                "prompt_tokens": sum(len(r.prompt) for r in requests),
                "output_tokens": sum(r.output_len for r in requests)}
    if args.json:
        engines = {name: {k: r.metrics()[k] for k in COLUMNS} for name, r in results.items()}
        print(dumps({"workload": workload, "engines": engines}, indent=2))
        return 0

    print(f"{args.requests} requests (seed {args.seed}): {workload['prompt_tokens']} prompt tokens, "
          f"{workload['output_tokens']} output tokens, max_tokens cap {workload['max_tokens']}")
    print(f"model {cfg.name} ({cfg.num_params:,} params, {cfg.weight_bytes(4) / 1e6:.0f} MB float32); K/V budget {slots} token slots = "
          f"{args.blocks} blocks x {args.block_size} = {workload['kv_bytes'] / 2**20:.1f} MiB, same for every engine\n")
    print(_table(results))
    base, best = results["contiguous_static"], results["paged_continuous"]
    print(f"\npaged+continuous / contiguous+static: {best.tokens_per_s / base.tokens_per_s:.1f}x tokens/s, "
          f"{best.tokens_per_step / base.tokens_per_step:.1f}x tokens/step")
    for name in ("contiguous_continuous", "paged_static"):
        print(f"  {name} alone: {results[name].tokens_per_s / base.tokens_per_s:.1f}x tokens/s, "
              f"{results[name].tokens_per_step / base.tokens_per_step:.1f}x tokens/step")
    from stage5.calibrate import calibrate
    from stage5.step_model import predict_run_s

    cal = calibrate(cfg)
    print(f"  predicted from this machine's calibration: {predict_run_s(cal, cfg, base) / predict_run_s(cal, cfg, best):.1f}x "
          "tokens/s for paged+continuous over contiguous+static")
    print("preemptions:", ", ".join(f"{n} {r.preemptions}" for n, r in results.items()))
    print("\ndecode step, predicted from this machine's calibration vs measured:")
    for name in ("contiguous_static", "paged_continuous"):
        p = predicted_decode(cfg, results[name])
        if p:
            print(f"  {name:<22} batch {p['batch']:5.1f}, context {p['context']:6.1f}: predicted "
                  f"{p['predicted_s'] * 1e3:6.2f} ms (weights {p['memory_s'] * 1e3:.2f}, matmuls "
                  f"{p['compute_s'] * 1e3:.2f}), measured median {p['measured_median_s'] * 1e3:6.2f} ms")
    return 0


if __name__ == "__main__":
    from stage5.inputs import run_command

    run_command(main)
