"""The serving loop: one engine, two pluggable parts, so each change can be measured on its own.

* ``allocator="contiguous" | "paged"`` - how the K/V pool is carved up (see :mod:`stage5.engine.kv`);
* ``scheduler="static" | "continuous"`` - when waiting requests may join the running batch;
* ``prefix_caching=True`` (paged only) - full blocks are shared between requests whose prompts begin with
  the same tokens (see :mod:`stage5.engine.prefix`); admission then feeds only the uncached tail.

**A step is one forward pass of the model over every running sequence.** Each sequence feeds the tokens
whose K/V it has not stored yet - its whole prompt if it was admitted this step, otherwise just its newest
token - and gains exactly one new token (greedy). So a step can mix prefills and decodes in one pass
(Orca's selective batching: only attention is computed per sequence, every matmul runs on all tokens
together). A step that admits someone is traced as "prefill", any other as "decode".

Static scheduling admits a batch only when nothing is running, then runs it until every member has
finished. Continuous scheduling re-decides after every step: finished sequences leave at once and waiting
ones join the very next step whenever the allocator can place them.

If a paged sequence needs a fresh block and the free list is empty, the newest running sequence is
preempted by recompute: its blocks go back to the pool, it returns to the front of the queue keeping the
tokens it has produced, and its K/V is rebuilt by a prefill when it is readmitted. A request whose prompt
plus ``max_tokens`` cannot fit in the whole pool is refused up front, so the loop cannot wait forever.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import torch

from stage5.engine import checks
from stage5.engine.kv import ContiguousAllocator, KVPool, PagedAllocator
from stage5.engine.model import Transformer
from stage5.engine.prefix import PrefixCachingAllocator
from stage5.engine.sequence import Request, Sequence
from stage5.models import ModelConfig


@dataclass
class RunResult:
    """Everything a run measured. All fields but ``wall_s`` and ``tokens_per_s`` are deterministic."""

    allocator: str
    scheduler: str
    steps: int
    prefill_steps: int
    output_tokens: int
    kv_utilization: float  # mean over steps of (K/V tokens stored) / (slots reserved)
    peak_running: int
    preemptions: int
    wall_s: float
    outputs: dict[int, list[int]]  # request id -> generated token ids
    trace: list[tuple[str, tuple[int, ...]]] = field(repr=False)  # per step: ("prefill"|"decode", ids that ran)
    step_context: list[int] = field(repr=False)  # per step: K/V tokens the batch attended over
    step_s: list[float] = field(repr=False)  # per step: seconds (not deterministic)
    logits: dict[int, list[torch.Tensor]] | None = field(default=None, repr=False)
    prefix_caching: bool = False
    prefill_tokens_computed: int = 0  # tokens fed at admissions (recomputes after preemption included)
    prefill_tokens_skipped: int = 0  # tokens found in the prefix cache at admissions
    ttft_steps: dict[int, int] = field(default_factory=dict, repr=False)  # id -> step (1-based) of 1st token
    ttft_s: dict[int, float] = field(default_factory=dict, repr=False)  # id -> seconds from start to 1st token
    step_tokens: list[int] = field(default_factory=list, repr=False)  # per step: tokens fed through the model

    @property
    def hit_rate(self) -> float:
        """Share of the prompt tokens fed at admissions that the prefix cache already held."""
        total = self.prefill_tokens_computed + self.prefill_tokens_skipped
        return self.prefill_tokens_skipped / total if total else 0.0

    @property
    def mean_ttft_steps(self) -> float:
        return sum(self.ttft_steps.values()) / len(self.ttft_steps) if self.ttft_steps else 0.0

    @property
    def mean_ttft_s(self) -> float:
        return sum(self.ttft_s.values()) / len(self.ttft_s) if self.ttft_s else 0.0

    def prefix_metrics(self) -> dict[str, float | int]:
        """The numbers ``bench prefix`` reports (all deterministic except the ``_s`` ones)."""
        return {"hit_rate": self.hit_rate, "prefill_tokens_computed": self.prefill_tokens_computed,
                "prefill_tokens_skipped": self.prefill_tokens_skipped, "mean_ttft_steps": self.mean_ttft_steps,
                "mean_ttft_s": self.mean_ttft_s, "tokens_per_s": self.tokens_per_s, "steps": self.steps,
                "wall_s": self.wall_s}

    @property
    def tokens_per_step(self) -> float:
        return self.output_tokens / self.steps if self.steps else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.wall_s if self.wall_s > 0 else 0.0

    def metrics(self) -> dict[str, float | int]:
        return {"tokens_per_s": self.tokens_per_s, "tokens_per_step": self.tokens_per_step,
                "kv_utilization": self.kv_utilization, "peak_running": self.peak_running, "steps": self.steps,
                "wall_s": self.wall_s, "output_tokens": self.output_tokens, "prefill_steps": self.prefill_steps,
                "preemptions": self.preemptions}


class Engine:
    """Serve a list of :class:`Request` with ``model`` and a K/V pool of ``num_blocks * block_size`` slots."""

    def __init__(self, model: Transformer, cfg: ModelConfig, allocator: str = "paged",
                 scheduler: str = "continuous", num_blocks: int = 256, block_size: int = 16,
                 max_batch: int = 64, record_logits: bool = False, prefix_caching: bool = False):
        if allocator not in ("paged", "contiguous"):
            raise ValueError(f"allocator must be 'paged' or 'contiguous', got {allocator!r}")
        if scheduler not in ("continuous", "static"):
            raise ValueError(f"scheduler must be 'continuous' or 'static', got {scheduler!r}")
        if prefix_caching and allocator != "paged":
            raise ValueError("prefix caching shares paged blocks; it needs allocator='paged'")
        if model.cfg != cfg:
            raise ValueError(f"model was built for {model.cfg.name}, not {cfg.name}")
        checks.positive_ints(num_blocks=num_blocks, block_size=block_size, max_batch=max_batch)
        self.model, self.cfg = model, cfg
        self.allocator_name, self.scheduler_name = allocator, scheduler
        self.max_batch, self.record_logits = max_batch, record_logits
        self.block_size, self.prefix_caching = block_size, prefix_caching
        num_slots = num_blocks * block_size
        if prefix_caching:
            self.alloc = PrefixCachingAllocator(num_blocks, block_size)
        elif allocator == "paged":
            self.alloc = PagedAllocator(num_blocks, block_size)
        else:
            self.alloc = ContiguousAllocator(num_slots)
        self.pool = KVPool(cfg, num_slots, next(model.parameters()).dtype)

    # ---------------------------------------------------------------------------------- scheduling
    def _admit(self) -> list[Sequence]:
        """Move waiting sequences into the batch, oldest first, while the allocator can place them."""
        if self.scheduler_name == "static" and self.running:
            return []
        admitted = []
        while (self.waiting and len(self.running) < self.max_batch
               and self.alloc.can_admit(self.waiting[0], len(self.running))):
            seq = self.waiting.popleft()
            seq.num_cached = 0
            self.alloc.admit(seq)  # a prefix-caching allocator raises num_cached to the tokens it found
            self.prefill_skipped += seq.num_cached
            self.prefill_computed += len(seq.tokens) - seq.num_cached
            self.running.append(seq)
            admitted.append(seq)
        return admitted

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.alloc.release(seq)
        seq.num_cached = 0
        self.waiting.appendleft(seq)
        self.preemptions += 1

    def _make_room(self) -> None:
        """Ensure every running sequence can store its newest token, preempting the newest when short."""
        for seq in list(self.running):
            if seq not in self.running:
                continue  # it was preempted to make room for an older one
            while not self.alloc.can_grow(seq):
                victim = self.running[-1]
                self._preempt(victim)
                if victim is seq:
                    break
            else:
                self.alloc.grow(seq)

    # ------------------------------------------------------------------------------------ one step
    def _forward(self, batch: list[Sequence]) -> list[int]:
        tokens, positions, new_slots, ctx_slots, last = [], [], [], [], []
        for seq in batch:
            new = torch.arange(seq.num_cached, len(seq.tokens))
            tokens.append(torch.tensor(seq.tokens[seq.num_cached:], dtype=torch.long))
            positions.append(new)
            new_slots.append(self.alloc.slots(seq, new))
            ctx_slots.append(self.alloc.slots(seq, torch.arange(len(seq.tokens))))
            last.append(sum(len(t) for t in tokens) - 1)
        self.pool.plan(new_slots, ctx_slots)
        logits = self.model(torch.cat(tokens), torch.cat(positions), self.pool, select=torch.tensor(last))
        for seq, row in zip(batch, logits, strict=True):
            seq.num_cached = len(seq.tokens)
            if self.prefix_caching:
                self.alloc.register_full_blocks(seq, seq.num_cached)
            if self.record_logits:
                self.logits.setdefault(seq.id, []).append(row.clone())
        return logits.argmax(dim=-1).tolist()

    def check_fits(self, request: Request) -> None:
        if request.max_len > self.alloc.num_slots:
            raise ValueError(
                f"request {request.id} needs up to {request.max_len} K/V slots ({len(request.prompt)} prompt + "
                f"{request.max_tokens} max_tokens) but the whole pool holds {self.alloc.num_slots} "
                f"({self.alloc.num_slots // self.block_size} blocks of {self.block_size})")
        checks.fits_model(request, self.cfg)

    @torch.no_grad()
    def run(self, requests: list[Request]) -> RunResult:
        """Serve ``requests`` (all queued at time 0, in order) to completion."""
        checks.unique_ids(requests)
        for request in requests:
            self.check_fits(request)
        self.waiting: deque[Sequence] = deque(Sequence(r) for r in requests)
        self.running: list[Sequence] = []
        self.preemptions, self.logits = 0, {}
        self.prefill_computed = self.prefill_skipped = 0
        ttft_steps: dict[int, int] = {}
        ttft_s: dict[int, float] = {}
        outputs: dict[int, list[int]] = {}
        trace: list[tuple[str, tuple[int, ...]]] = []
        utilization: list[float] = []
        produced = peak = prefills = 0
        step_context: list[int] = []
        step_s: list[float] = []
        step_tokens: list[int] = []
        t0 = time.perf_counter()
        while self.waiting or self.running:
            t_step = time.perf_counter()
            self._make_room()  # sequences already running get space for their newest token first
            kind = "prefill" if self._admit() else "decode"
            batch = list(self.running)
            if not batch:  # cannot happen while check_fits holds; fail loudly rather than spin
                raise RuntimeError("scheduler made no progress: nothing admitted and nothing running")
            step_tokens.append(sum(len(s.tokens) - s.num_cached for s in batch))
            next_tokens = self._forward(batch)
            step_s.append(time.perf_counter() - t_step)
            step_context.append(sum(len(s.tokens) for s in batch))
            prefills += kind == "prefill"
            trace.append((kind, tuple(s.id for s in batch)))
            peak = max(peak, len(self.running))
            reserved = sum(self.alloc.reserved(s) for s in self.running)
            if reserved:
                utilization.append(sum(s.num_cached for s in self.running) / reserved)
            for seq, token in zip(batch, next_tokens, strict=True):
                seq.tokens.append(token)
                produced += 1
                if seq.id not in ttft_steps:
                    ttft_steps[seq.id], ttft_s[seq.id] = len(trace), time.perf_counter() - t0
                if seq.finished:
                    self.running.remove(seq)
                    self.alloc.release(seq)
                    outputs[seq.id] = seq.output
        wall = time.perf_counter() - t0
        return RunResult(
            allocator=self.allocator_name, scheduler=self.scheduler_name, steps=len(trace), prefill_steps=prefills,
            output_tokens=produced, kv_utilization=sum(utilization) / len(utilization) if utilization else 0.0,
            peak_running=peak, preemptions=self.preemptions, wall_s=wall,
            outputs={r.id: outputs[r.id] for r in requests}, trace=trace,
            step_context=step_context, step_s=step_s,
            logits=self.logits if self.record_logits else None, prefix_caching=self.prefix_caching,
            prefill_tokens_computed=self.prefill_computed, prefill_tokens_skipped=self.prefill_skipped,
            ttft_steps=ttft_steps, ttft_s=ttft_s, step_tokens=step_tokens)
