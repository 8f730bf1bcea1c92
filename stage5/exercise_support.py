"""Scaffolding for exercise 2 (build a toy serving loop): everything the learner does not write.

* :func:`tiny_model` - a small random-weight Llama-style model in float64 (fast on a CPU, exact greedy tokens);
* :func:`small_workload` - seeded long-tailed requests sized for it (byte tokens, a generous ``max_tokens`` cap);
* :func:`make_pool` and :func:`forward_step` - one forward pass of a batch whose K/V live wherever the learner's
  cache says (``cache.slots(seq, positions)``), through :class:`stage5.engine.kv.KVPool`;
* :class:`Meter` - counts steps, tokens, running sequences and K/V utilisation exactly as
  :class:`stage5.engine.engine.Engine` does, and returns the engine's :class:`RunResult`;
* :func:`show_table` - prints a 2x2 of results.
"""

from __future__ import annotations

import time

import torch

from stage5.engine.batch import feed
from stage5.engine.engine import RunResult
from stage5.engine.kv import KVPool
from stage5.engine.model import Transformer
from stage5.engine.sequence import Request, Sequence
from stage5.engine.workload import make_workload
from stage5.models import ModelConfig

TINY = ModelConfig(name="tiny-bytes", vocab_size=256, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                   head_dim=8, intermediate_size=64, max_position_embeddings=1024)


def tiny_model(seed: int = 0, dtype: torch.dtype = torch.float64) -> Transformer:
    """A 35k-parameter byte-level model with random weights: its tokens are noise, but every one is exact."""
    torch.manual_seed(seed)
    model = Transformer(TINY).to(dtype).eval()
    for p in model.parameters():
        p.data.normal_(0, 0.3)
    return model


def small_workload(n: int = 24, seed: int = 0, max_tokens: int = 192) -> list[Request]:
    """``n`` requests: prompts around 24 bytes, answers around 24 tokens with a long tail, a cap of ``max_tokens``."""
    return make_workload(n=n, seed=seed, prompt_median=24, prompt_range=(4, 96), output_median=24,
                         output_range=(2, min(160, max_tokens)), max_tokens=max_tokens)


def make_pool(model: Transformer, cache) -> KVPool:
    """The K/V storage for ``cache.num_slots`` token slots, in the model's dtype."""
    return KVPool(model.cfg, cache.num_slots, next(model.parameters()).dtype)


@torch.no_grad()
def forward_step(model: Transformer, pool: KVPool, batch: list[Sequence], cache) -> list[int]:
    """One forward over ``batch``: each sequence feeds the tokens whose K/V are not stored yet (the whole prompt
    after admission, else its newest token). Their K/V are written to ``cache.slots(seq, new positions)`` and
    attention reads the context back through ``cache.slots(seq, all positions)``. Sets ``seq.num_cached`` and
    returns the next (greedy) token of each sequence, in order. The caller appends them."""
    if not batch:
        raise ValueError("forward_step got an empty batch: call it only when at least one sequence runs")
    for seq in batch:
        # a learner's loop that skips or repeats a sequence meets these messages, not a tensor-shape error
        if seq.finished:
            raise ValueError(f"sequence {seq.id} is in the batch but has already finished: a finished sequence "
                             "leaves `running` (take care when removing from a list you are iterating over)")
        if seq.num_cached >= len(seq.tokens):
            raise ValueError(f"sequence {seq.id} has no new token to feed (num_cached = len(tokens) = "
                             f"{len(seq.tokens)}): append each step's new token before the next step, and reset "
                             "num_cached to 0 when a sequence is preempted")

    def checked_slots(seq: Sequence, positions: torch.Tensor) -> torch.Tensor:
        return _slots(cache, seq, positions, pool)

    return feed(model, pool, batch, checked_slots).argmax(dim=-1).tolist()


def _slots(cache, seq: Sequence, positions: torch.Tensor, pool: KVPool) -> torch.Tensor:
    """``cache.slots(seq, positions)`` as a tensor of ints (a list is fine), checked before torch indexes with it."""
    got = cache.slots(seq, positions)
    try:
        slots = torch.as_tensor(got, dtype=torch.long).reshape(-1)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"cache.slots(seq, positions) returned {type(got).__name__}: return a 1-D tensor or a list "
                         "of ints, one slot per position") from None
    if len(slots) != len(positions):
        raise ValueError(f"cache.slots() returned {len(slots)} slots for {len(positions)} positions of sequence "
                         f"{seq.id}: one slot per position (is its block table long enough?)")
    capacity = pool.data.shape[2]  # (layers, K/V, slots, heads, head_dim)
    if len(slots) and (int(slots.min()) < 0 or int(slots.max()) >= capacity):
        raise ValueError(f"cache.slots() gave sequence {seq.id} a slot outside the pool of {capacity} slots")
    return slots


class Meter:
    """What a serving loop did, counted the way the course's engine counts it.

    Call :meth:`step` once per forward pass (after :func:`forward_step`, before appending the new tokens),
    :meth:`preempted` for each preemption and :meth:`finished` when a sequence leaves; :meth:`result` returns
    a :class:`stage5.engine.engine.RunResult`.
    """

    def __init__(self, allocator: str, scheduler: str):
        self.allocator, self.scheduler = allocator, scheduler
        self.trace: list[tuple[str, tuple[int, ...]]] = []
        self.utilization: list[float] = []
        self.step_context: list[int] = []
        self.outputs: dict[int, list[int]] = {}
        self.produced = self.peak = self.prefills = self.preemptions = 0
        self.lengths: list[tuple[int, ...]] = []  # per step: len(tokens) of each sequence that ran
        self.t0 = time.perf_counter()
        Meter.last = self  # the grader reads the lengths of the latest run from here

    last: Meter | None = None

    def step(self, batch: list[Sequence], cache, admitted: bool) -> None:
        """``batch``: every sequence that ran this step; ``admitted``: did this step admit anyone?"""
        kind = "prefill" if admitted else "decode"
        self.trace.append((kind, tuple(s.id for s in batch)))
        self.prefills += admitted
        self.peak = max(self.peak, len(batch))
        self.produced += len(batch)
        self.step_context.append(sum(len(s.tokens) for s in batch))
        self.lengths.append(tuple(len(s.tokens) for s in batch))
        reserved = sum(cache.reserved(s) for s in batch)
        if reserved:
            self.utilization.append(sum(s.num_cached for s in batch) / reserved)

    def preempted(self) -> None:
        self.preemptions += 1

    def finished(self, seq: Sequence) -> None:
        self.outputs[seq.id] = seq.output

    def result(self, requests: list[Request]) -> RunResult:
        missing = [r.id for r in requests if r.id not in self.outputs]
        if missing:
            raise RuntimeError(f"requests {missing[:5]} never finished (call meter.finished(seq) for each)")
        return RunResult(
            allocator=self.allocator, scheduler=self.scheduler, steps=len(self.trace), prefill_steps=self.prefills,
            output_tokens=self.produced,
            kv_utilization=sum(self.utilization) / len(self.utilization) if self.utilization else 0.0,
            peak_running=self.peak, preemptions=self.preemptions, wall_s=time.perf_counter() - self.t0,
            outputs={r.id: self.outputs[r.id] for r in requests}, trace=self.trace,
            step_context=self.step_context, step_s=[])


def show_table(results: dict[tuple[str, str], RunResult]) -> None:
    """Print one row per (cache, scheduler) result."""
    print(f"{'cache':<11} {'scheduler':<11} {'steps':>6} {'tokens/step':>11} {'KV util':>8} {'peak run':>8} "
          f"{'preempt':>7} {'tokens/s':>9}")
    for (cache, scheduler), r in results.items():
        print(f"{cache:<11} {scheduler:<11} {r.steps:>6} {r.tokens_per_step:>11.2f} {r.kv_utilization:>8.1%} "
              f"{r.peak_running:>8} {r.preemptions:>7} {r.tokens_per_s:>9.0f}")
