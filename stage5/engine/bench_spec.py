"""``python -m stage5 bench spec``: acceptance and speedup of speculative decoding on the trained pair.

Part one: acceptance rate alpha and tokens per verification for k = 1..8 with both drafters (greedy), next
to the cost model's (1 - alpha^(k+1)) / (1 - alpha). Part two: wall-clock speedup over the plain paged engine
at batch 1, 2, 4, ... until it drops below 1, next to ``stage5.cost.speculative_speedup`` for this machine
(bandwidth and FLOP/s from ``stage5.calibrate``).
"""

from __future__ import annotations

import torch

from stage5.engine.engine import Engine
from stage5.engine.sequence import Request
from stage5.engine.speculative import DraftModelDrafter, PromptLookupDrafter, SpeculativeEngine
from stage5.inputs import OneLineParser, arg_int, arg_requests, arg_threads, dumps, integer, workload_size


def spec_workload(n: int, prompt_len: int = 64, output_len: int = 96, stride: int = 997) -> list[Request]:
    """``n`` held-out code snippets of ``prompt_len`` bytes, each answered with ``output_len`` greedy tokens."""
    from stage5.engine.checkpoints import corpus_split

    n, lengths = workload_size(n, {"prompt_len": prompt_len, "output_len": output_len})
    prompt_len, output_len = lengths["prompt_len"], lengths["output_len"]
    stride = integer(stride, "stride (bytes between snippets)", minimum=1)
    text = corpus_split()[1]
    if (n - 1) * stride + prompt_len > len(text):
        raise ValueError(f"{n} snippets of {prompt_len} bytes, {stride} bytes apart, run past the held-out text's "
                         f"{len(text):,} bytes; accepted: fewer, shorter or closer snippets")
    return [Request(i, tuple(text[i * stride:i * stride + prompt_len]), output_len) for i in range(n)]


def make_drafter(name: str, num_blocks: int = 512, block_size: int = 16):
    if name == "prompt_lookup":
        return PromptLookupDrafter()
    from stage5.engine.checkpoints import load_draft

    draft, draft_cfg = load_draft()
    return DraftModelDrafter(draft, draft_cfg, num_blocks, block_size)


def acceptance(model, cfg, requests, ks=range(1, 9), drafters=("draft", "prompt_lookup")) -> list[dict]:
    from stage5.cost import expected_tokens_per_verification

    rows = []
    for drafter in drafters:
        for k in ks:
            r = SpeculativeEngine(model, cfg, make_drafter(drafter), k=k, num_blocks=512).run(requests)
            rows.append({"k": k, "drafter": drafter, "alpha": r.alpha,
                         "tokens_per_verification": r.tokens_per_verification,
                         "predicted_tokens_per_verification": float(expected_tokens_per_verification(r.alpha, k))})
    return rows


def speedup(model, cfg, k: int = 4, batches=(1, 2, 4, 8, 16, 32, 64), output_len: int = 64) -> list[dict]:
    """Measured and predicted speedup per batch size; stops after the first batch measured below 1."""
    from stage5.calibrate import toy_deployment
    from stage5.cost import decode_step, speculative_speedup
    from stage5.engine.checkpoints import load_draft

    dep = toy_deployment(cfg)
    draft_dep = toy_deployment(load_draft()[1])
    rows = []
    for batch in batches:
        requests = spec_workload(batch, prompt_len=32, output_len=output_len)
        plain = Engine(model, cfg, num_blocks=512, max_batch=batch).run(requests)
        spec = SpeculativeEngine(model, cfg, make_drafter("draft"), k=k, num_blocks=512, max_batch=batch).run(requests)
        context = 32 + output_len / 2
        draft_cost = float(decode_step(draft_dep, batch, context).time_s / decode_step(dep, batch, context).time_s)
        predicted = float(speculative_speedup(dep, batch, context, spec.alpha, k, draft_cost=draft_cost))
        rows.append({"batch": batch, "k": k, "measured": plain.wall_s / spec.wall_s, "predicted": predicted,
                     "alpha": spec.alpha, "plain_s": plain.wall_s, "spec_s": spec.wall_s,
                     "plain_steps": plain.steps, "spec_steps": spec.steps, "draft_cost": draft_cost})
        if rows[-1]["measured"] < 1:
            break
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m stage5 bench spec", description=__doc__.splitlines()[0])
    draft = "speculative decoding drafts a handful of tokens (vLLM's num_speculative_tokens is typically 1-8)"
    parser.add_argument("--requests", type=arg_requests(), default=4, help="requests for the acceptance table")
    parser.add_argument("--k", type=arg_int(0, 64, why=draft), default=None,
                        help="k for the speedup table (0 to 64; default 4, or --max-k where that is smaller)")
    parser.add_argument("--max-k", type=arg_int(1, 64, why=draft), default=8)
    parser.add_argument("--max-batch", type=arg_int(1, 4096, why="the speedup table's batches stop at 128"),
                        default=64)
    parser.add_argument("--threads", type=arg_threads(), default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.k is None:
        args.k = min(4, args.max_k)
    if args.k > args.max_k:  # the speedup table's k is read against the acceptance table's rows, 1 .. --max-k
        parser.error(f"--k {args.k} is past --max-k {args.max_k}: the speedup table's k must be one the acceptance "
                     "table measures; accepted: 0 (no drafting) to --max-k")
    torch.set_num_threads(args.threads)
    from stage5.engine.checkpoints import load_target

    model, cfg = load_target()
    Engine(model, cfg, num_blocks=2).run([Request(0, tuple(range(16)), 8)])  # warm up before timing
    rows = acceptance(model, cfg, spec_workload(args.requests), ks=range(1, args.max_k + 1))
    batches = [b for b in (1, 2, 4, 8, 16, 32, 64, 128) if b <= args.max_batch]
    speed = speedup(model, cfg, k=args.k, batches=batches)
    if args.json:
        print(dumps({"acceptance": rows, "speedup": speed}, indent=2))
        return 0
    print(f"acceptance, greedy, {args.requests} held-out code prompts of 64 bytes, 96 new tokens each")
    print(f"{'drafter':<15}{'k':>3}{'alpha':>8}{'tokens/verif':>14}{'model':>8}")
    for r in rows:
        print(f"{r['drafter']:<15}{r['k']:>3}{r['alpha']:8.3f}{r['tokens_per_verification']:14.2f}"
              f"{r['predicted_tokens_per_verification']:8.2f}")
    print(f"\nspeedup over plain paged decoding, draft model, k={args.k}, 32-byte prompts, 64 new tokens")
    print(f"{'batch':>5}{'alpha':>8}{'measured':>10}{'predicted':>11}{'plain s':>9}{'spec s':>8}{'steps':>11}")
    for r in speed:
        print(f"{r['batch']:5d}{r['alpha']:8.3f}{r['measured']:10.2f}{r['predicted']:11.2f}{r['plain_s']:9.2f}"
              f"{r['spec_s']:8.2f}{r['plain_steps']:5d}/{r['spec_steps']:<5d}")
    return 0
