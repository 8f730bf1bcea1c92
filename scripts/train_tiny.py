"""Train one of the toy byte-level models on the shipped CPython stdlib corpus, on the CPU.

    nice python scripts/train_tiny.py --model target --minutes 25 --seed 0 --bf16   # the shipped target
    nice python scripts/train_tiny.py --model draft --minutes 5 --seed 0

Training runs for a wall-clock budget (the learning-rate schedule is laid out over that budget), then the
model is scored on the held-out tail of the corpus and saved to ``stage5/checkpoints/<model>.pt`` with a
summary of the run. One thread by default, so it shares a small machine politely.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stage5.engine.checkpoints import CONFIGS, corpus_split, save  # noqa: E402
from stage5.engine.model import Transformer, generate  # noqa: E402


def windows(data: torch.Tensor, starts: torch.Tensor, length: int) -> torch.Tensor:
    return torch.stack([data[s:s + length + 1] for s in starts.tolist()])


@torch.no_grad()
def nats_per_byte(model: Transformer, data: torch.Tensor, length: int, batch: int = 16) -> float:
    """Mean next-byte cross-entropy over non-overlapping windows covering ``data``."""
    starts = torch.arange(0, len(data) - length - 1, length)
    total, count = 0.0, 0
    for i in range(0, len(starts), batch):
        xy = windows(data, starts[i:i + batch], length)
        logits = model.score(xy[:, :-1])
        total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), xy[:, 1:].reshape(-1), reduction="sum"))
        count += xy[:, 1:].numel()
    return total / count


def main() -> None:
    parser = argparse.ArgumentParser(description="Train a toy byte-level model on the stdlib corpus.")
    parser.add_argument("--model", choices=sorted(CONFIGS), required=True)
    parser.add_argument("--minutes", type=float, default=15.0, help="wall-clock training budget")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=256, help="training window in bytes")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast for the matmuls")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = CONFIGS[args.model]
    model = Transformer(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == cfg.num_params, (n_params, cfg.num_params)
    train_bytes, held_bytes = corpus_split()
    train = torch.frombuffer(bytearray(train_bytes), dtype=torch.uint8).long()
    held = torch.frombuffer(bytearray(held_bytes), dtype=torch.uint8).long()
    print(f"{cfg.name}: {n_params:,} params; train {len(train):,} bytes, held-out {len(held):,} bytes", flush=True)

    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    budget = args.minutes * 60
    warmup = 0.03
    t0 = time.perf_counter()
    step, smooth, seen = 0, None, 0
    while True:
        progress = (time.perf_counter() - t0) / budget
        if progress >= 1:
            break
        scale = progress / warmup if progress < warmup else 0.5 * (1 + math.cos(math.pi * (progress - warmup) / (1 - warmup)))
        for group in opt.param_groups:
            group["lr"] = args.lr * max(scale, 0.02)
        xy = windows(train, torch.randint(0, len(train) - args.length - 1, (args.batch,)), args.length)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            logits = model.score(xy[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, cfg.vocab_size), xy[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        seen += xy[:, 1:].numel()
        value = loss.item()
        smooth = value if smooth is None else 0.98 * smooth + 0.02 * value
        if step % 100 == 0:
            print(f"step {step:6d}  {time.perf_counter() - t0:7.1f}s  loss {smooth:.3f}  lr {opt.param_groups[0]['lr']:.2e}",
                  flush=True)
    minutes = (time.perf_counter() - t0) / 60
    model.eval()
    held_loss = nats_per_byte(model, held, args.length)
    sample_prompt = list(b"def ")
    sample = bytes(sample_prompt + generate(model, sample_prompt, 200)).decode("utf-8", "replace")
    meta = {"params": n_params, "steps": step, "bytes_seen": seen, "train_minutes": round(minutes, 2),
            "train_loss_nats_per_byte": round(smooth, 4), "held_out_nats_per_byte": round(held_loss, 4),
            "seed": args.seed, "batch": args.batch, "length": args.length, "lr": args.lr, "bf16": args.bf16,
            "threads": args.threads, "corpus": "stage5/data/cpython_stdlib.txt.gz (last 5% held out)"}
    path = save(args.model, model, meta)
    print(meta)
    print("greedy sample:\n" + sample)
    print(f"saved {path} ({path.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
