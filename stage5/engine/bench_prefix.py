"""``python -m stage5 bench prefix``: where prefix caching pays, where it cannot, and how to defeat it silently.

Workload one: many requests share a long fixed system prompt, each followed by a per-request field (a
timestamp) and a distinct user turn. It is served three ways: without caching; with caching and the shared
part first; with caching and the timestamp moved to the very top, which breaks every block's chained hash.
Workload two: short prompts and long answers, where prefill was never the bill, so caching saves little.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from stage5.engine.engine import Engine, RunResult
from stage5.engine.sequence import Request
from stage5.inputs import (
    InputError,
    OneLineParser,
    arg_int,
    arg_real,
    arg_threads,
    dumps,
    integer,
    workload_size,
)
from stage5.inputs import seed as inputs_seed

COLUMNS = ["hit_rate", "prefill_tokens_computed", "prefill_tokens_skipped", "mean_ttft_steps", "mean_ttft_s",
           "tokens_per_s", "steps", "wall_s"]
SERVINGS = {"no_cache": (False, False), "cache_shared_first": (True, False), "cache_timestamp_first": (True, True)}


def prefix_workload(n: int, system_len: int, user_len: tuple[int, int], output_len: int, seed: int = 0,
                    timestamp_first: bool = False, text: bytes | None = None) -> list[Request]:
    """``n`` requests: a fixed system prompt, a per-request timestamp, a user turn cut from held-out text."""
    if not isinstance(user_len, (tuple, list)) or len(user_len) != 2:
        raise InputError(f"user_len must be a (shortest, longest) pair of token counts, got {user_len!r}")
    n, lengths = workload_size(n, {"system_len": system_len, "user_len": user_len[1], "output_len": output_len})
    low = integer(user_len[0], "user_len[0] (tokens)", minimum=1, maximum=lengths["user_len"])
    system_len, high, output_len = lengths["system_len"], lengths["user_len"], lengths["output_len"]
    user_len = (low, high)
    if text is None:
        from stage5.engine.checkpoints import corpus_split

        text = corpus_split()[1]
    if not isinstance(text, bytes) or len(text) <= system_len + high:
        raise InputError(f"text must be bytes longer than system_len + the longest user turn ({system_len + high:,}), "
                         f"got {type(text).__name__} of {len(text) if isinstance(text, bytes) else 0:,}")
    rng = np.random.default_rng(inputs_seed(seed))
    system = text[:system_len]
    requests = []
    for i in range(n):
        stamp = f"t={1741942800 + 37 * i}\n".encode()  # a unix timestamp: shorter than one block
        length = int(rng.integers(user_len[0], user_len[1] + 1))
        start = int(rng.integers(system_len, len(text) - length))
        user = text[start:start + length]
        prompt = stamp + system + user if timestamp_first else system + stamp + user
        requests.append(Request(i, tuple(prompt), output_len))
    return requests


WORKLOADS = {
    "shared_system_prompt": dict(n=24, system_len=512, user_len=(16, 48), output_len=16),
    "short_prompt_long_answer": dict(n=12, system_len=32, user_len=(8, 24), output_len=192),
}


def run_prefix(model, cfg, workload: dict, num_blocks: int = 1024, block_size: int = 16,
               max_batch: int = 32, seed: int = 0) -> dict[str, RunResult]:
    """Serve ``workload`` (a dict like the entries of ``WORKLOADS``) three ways; outputs must agree."""
    results = {}
    for name, (caching, stamp_first) in SERVINGS.items():
        requests = prefix_workload(seed=seed, timestamp_first=stamp_first, **workload)
        engine = Engine(model, cfg, num_blocks=num_blocks, block_size=block_size, max_batch=max_batch,
                        prefix_caching=caching)
        results[name] = engine.run(requests)
    if results["cache_shared_first"].outputs != results["no_cache"].outputs:
        print("warning: caching changed some greedy tokens (float32 near-ties under different batch shapes)",
              file=sys.stderr)
    return results


def _table(results: dict[str, RunResult]) -> str:
    lines = [f"{'serving':<24}{'hit rate':>9}{'computed':>10}{'skipped':>9}{'TTFT steps':>11}{'TTFT s':>9}"
             f"{'tok/s':>9}{'steps':>7}{'wall s':>8}"]
    for name, r in results.items():
        lines.append(f"{name:<24}{r.hit_rate:9.1%}{r.prefill_tokens_computed:10d}{r.prefill_tokens_skipped:9d}"
                     f"{r.mean_ttft_steps:11.2f}{r.mean_ttft_s:9.3f}{r.tokens_per_s:9.1f}{r.steps:7d}"
                     f"{r.wall_s:8.2f}")
    base, best = results["no_cache"], results["cache_shared_first"]
    lines.append(f"cache_shared_first / no_cache: TTFT {base.mean_ttft_s / best.mean_ttft_s:.2f}x faster, "
                 f"throughput {best.tokens_per_s / base.tokens_per_s:.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m stage5 bench prefix", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=arg_int(0), default=0)
    parser.add_argument("--scale", type=arg_real(0.01, 100.0, low_open=False,
                                                 why="at 0.01 every workload is down to its minimum of two requests"),
                        default=1.0, help="multiply the number of requests, 0.01 to 100")
    parser.add_argument("--threads", type=arg_threads(), default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from stage5.engine.checkpoints import load_target

    model, cfg = load_target()
    Engine(model, cfg, num_blocks=2).run([Request(0, tuple(range(16)), 8)])  # warm up before timing
    report = {}
    for name, spec in WORKLOADS.items():
        spec = {**spec, "n": max(2, round(spec["n"] * args.scale))}
        report[name] = run_prefix(model, cfg, spec, seed=args.seed)
    if args.json:
        print(dumps({"workloads": {w: {s: r.prefix_metrics() for s, r in res.items()}
                                        for w, res in report.items()}}, indent=2))
        return 0
    for name, results in report.items():
        spec = WORKLOADS[name]
        print(f"\n{name}: {spec['n']} requests, system prompt {spec['system_len']} bytes, user turn "
              f"{spec['user_len'][0]}-{spec['user_len'][1]}, answer {spec['output_len']} tokens")
        print(_table(results))
    return 0
