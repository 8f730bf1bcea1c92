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

The queues, admission, preemption and retirement live in :mod:`stage5.engine.scheduler` (shared with the
speculative engine), batch preparation in :mod:`stage5.engine.batch`, and everything counted in
:mod:`stage5.engine.metrics`. This file wires them into one loop: :meth:`Engine.run` is :meth:`~Engine.start`,
:meth:`~Engine.step` until :attr:`~Engine.done`, then :meth:`~Engine.finish`; a fleet of engines
(:mod:`stage5.engine.fleet`) calls those parts itself, and :meth:`~Engine.add` a request while the run is under
way. Options of :meth:`Engine.run`:

* ``token_budget`` - at most this many tokens per step; longer prompts are fed in chunks (chunked prefill);
* ``clock`` - what latencies are measured on (:mod:`stage5.engine.clock`): wall time, or the step model's
  virtual time; requests arrive at their ``arrival`` times on it;
* ``on_step`` - called with each step's :class:`~stage5.engine.metrics.StepRecord`, to observe a run.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from stage5.engine import checks
from stage5.engine.batch import feed
from stage5.engine.clock import WallClock
from stage5.engine.kv import ContiguousAllocator, KVPool, PagedAllocator
from stage5.engine.metrics import Recorder, RunResult, StepRecord
from stage5.engine.model import Transformer
from stage5.engine.prefix import PrefixCachingAllocator
from stage5.engine.scheduler import Scheduler
from stage5.engine.sequence import Request, Sequence
from stage5.models import ModelConfig

__all__ = ["Engine", "RunResult", "StepRecord"]


class Engine:
    """Serve a list of :class:`Request` with ``model`` and a K/V pool of ``num_blocks * block_size`` slots."""

    def __init__(self, model: Transformer, cfg: ModelConfig, allocator: str = "paged",
                 scheduler: str = "continuous", num_blocks: int = 256, block_size: int = 16,
                 max_batch: int = 64, record_logits: bool = False, prefix_caching: bool = False,
                 token_budget: int | None = None):
        if allocator not in ("paged", "contiguous"):
            raise ValueError(f"allocator must be 'paged' or 'contiguous', got {allocator!r}")
        if scheduler not in ("continuous", "static"):
            raise ValueError(f"scheduler must be 'continuous' or 'static', got {scheduler!r}")
        if prefix_caching and allocator != "paged":
            raise ValueError("prefix caching shares paged blocks; it needs allocator='paged'")
        if prefix_caching and token_budget is not None:
            # admission registers a prompt's blocks for sharing before a chunked prefill has written them all
            raise ValueError("prefix caching with a token budget (chunked prefill) is not supported; accepted: "
                             "one of prefix_caching=True or token_budget")
        if model.cfg != cfg:
            raise ValueError(f"model was built for {model.cfg.name}, not {cfg.name}")
        checks.positive_ints(num_blocks=num_blocks, block_size=block_size, max_batch=max_batch)
        if token_budget is not None:
            checks.positive_ints(token_budget=token_budget)
        self.model, self.cfg = model, cfg
        self.allocator_name, self.scheduler_name = allocator, scheduler
        self.max_batch, self.record_logits = max_batch, record_logits
        self.block_size, self.prefix_caching, self.token_budget = block_size, prefix_caching, token_budget
        num_slots = num_blocks * block_size
        checks.allocator_fits(num_blocks, block_size, per_block=False)  # the counts; the pool is the larger part
        checks.pool_fits(cfg, num_slots, next(model.parameters()).dtype.itemsize, (num_blocks, block_size))
        if prefix_caching:
            self.alloc = PrefixCachingAllocator(num_blocks, block_size)
        elif allocator == "paged":
            self.alloc = PagedAllocator(num_blocks, block_size)
        else:
            self.alloc = ContiguousAllocator(num_slots)
        self.pool = KVPool(cfg, num_slots, next(model.parameters()).dtype)
        self.scheduler = Scheduler(self.alloc, max_batch, static=scheduler == "static", token_budget=token_budget)
        # called with each finished sequence while its K/V blocks are still its own (a disaggregated fleet's prefill
        # replica copies them out here: stage5.engine.disagg)
        self.on_retire: Callable[[Sequence], None] | None = None

    # The queues live in the scheduler; these names let a reader (or a chapter) look at them on the engine.
    @property
    def waiting(self):
        return self.scheduler.waiting

    @property
    def running(self) -> list[Sequence]:
        return self.scheduler.running

    # ---------------------------------------------------------------------------------- one step's parts
    def _make_room(self) -> None:
        self.scheduler.make_room()

    def _admit(self) -> list[Sequence]:
        return self.scheduler.admit()

    def _forward(self, batch: list[Sequence], counts: list[int] | None = None) -> torch.Tensor:
        """Feed ``batch`` (``counts`` tokens each, default all uncached); the logits of each last fed token."""
        logits = feed(self.model, self.pool, batch, self.alloc.slots, counts)
        if self.prefix_caching:
            for seq in batch:
                self.alloc.register_full_blocks(seq, seq.num_cached)
        return logits

    def check_fits(self, request: Request) -> None:
        if request.max_len > self.alloc.num_slots:
            raise ValueError(
                f"request {request.id} needs up to {request.max_len} K/V slots ({len(request.prompt)} prompt + "
                f"{request.max_tokens} max_tokens) but the whole pool holds {self.alloc.num_slots} "
                f"({self.alloc.num_slots // self.block_size} blocks of {self.block_size})")
        checks.fits_model(request, self.cfg)

    # ------------------------------------------------------------------------------ one run, step by step
    def start(self, requests: list[Request] = (), clock: WallClock | None = None) -> None:
        """Begin a run: queue ``requests`` (each joins at its ``arrival`` on ``clock``) and reset the clock to 0.
        The K/V pool and, with prefix caching, its cached blocks persist from earlier runs of this engine."""
        sched = self.scheduler
        self._requests = list(requests)
        sched.submit(self._requests, self.check_fits)
        self.clock = clock or WallClock()
        self.clock.now = 0.0
        self.recorder = Recorder(self._requests, self.record_logits)
        self._t0 = time.perf_counter()

    def add(self, request: Request) -> None:
        """Send one more request into the run under way (what a fleet's router does): it is checked as
        :meth:`start` checks them and joins the queue at its ``arrival``, which may not be earlier than the
        requests already queued behind the clock."""
        self.scheduler.add(request, self.check_fits)
        self._requests.append(request)
        self.recorder.add(request)

    def adopt(self, request: Request, first_token: int, kv: torch.Tensor, now: float) -> bool:
        """Take over a request whose prompt another engine prefilled (a disaggregated fleet's decode replica):
        ``kv`` holds its prompt's K/V, ``[layers, 2, prompt tokens, kv_heads, head_dim]``, and ``first_token`` the
        token that prefill sampled. Its blocks are allocated here and the K/V written into them (the block table is
        this pool's own), and it joins the running batch at ``now``; returns False, changing nothing, when no seat or
        no room is free. A preempted adopted sequence is recomputed here, as any other."""
        seq = Sequence(request)
        seq.tokens.append(first_token)
        expected = (self.cfg.num_layers, 2, len(request.prompt), self.cfg.num_kv_heads, self.cfg.head_dim)
        if tuple(kv.shape) != expected:
            raise ValueError(f"request {request.id}: K/V of shape {tuple(kv.shape)}, expected {expected}")
        self.check_fits(request)
        if not self.scheduler.adopt(seq):
            return False
        slots = self.alloc.slots(seq, torch.arange(len(request.prompt)))
        self.pool.data[:, :, slots] = kv.to(self.pool.data.dtype)
        seq.num_cached = len(request.prompt)
        self._requests.append(request)
        self.recorder.add(request)
        self.recorder.times[request.id].admitted = now
        return True

    @property
    def done(self) -> bool:
        """Nothing queued, waiting or running."""
        return self.scheduler.done

    @torch.no_grad()
    def step(self, on_step: Callable[[StepRecord], None] | None = None) -> StepRecord | None:
        """One iteration of the serving loop: requests whose time has come arrive; then either the clock jumps
        to the next arrival (nothing to run; returns None) or one step runs and its record is returned."""
        sched, clock, rec = self.scheduler, self.clock, self.recorder
        sched.arrive(clock.now)
        if sched.idle:  # nothing to do until the next request is sent
            clock.wait_until(sched.next_arrival)
            return None
        t_step, start = time.perf_counter(), clock.now
        self._make_room()  # sequences already running get space for their newest token first
        admitted = self._admit()
        rec.admitted(admitted, start)
        batch, counts = sched.plan()
        if not batch:  # cannot happen while check_fits holds; fail loudly rather than spin
            raise RuntimeError("scheduler made no progress: nothing admitted and nothing running")
        # a prompt chunk (num_cached short of the pending token) makes this a prefill step as well
        kind = "prefill" if admitted or any(s.num_cached < len(s.tokens) - 1 for s in batch) else "decode"
        context = sum(s.num_cached + n for s, n in zip(batch, counts, strict=True))
        logits = self._forward(batch, counts)
        sampled = [(s, row) for s, row in zip(batch, logits, strict=True) if s.num_cached == len(s.tokens)]
        next_tokens = torch.stack([row for _, row in sampled]).argmax(dim=-1).tolist() if sampled else []
        wall = time.perf_counter() - t_step
        clock.step(len(batch), sum(counts), context, wall)
        for (seq, row), token in zip(sampled, next_tokens, strict=True):
            seq.tokens.append(token)
            rec.sampled(seq, row, clock.now, len(rec.log) + 1)
        rec.occupancy(sched.running, self.alloc)
        finished = sched.retire((s for s, _ in sampled), self.on_retire)
        for seq in finished:
            rec.finished(seq, clock.now)
        record = StepRecord(
            index=len(rec.log) + 1, kind=kind, ids=tuple(s.id for s in batch), fed=tuple(counts),
            context=context, admitted=tuple(s.id for s in admitted), sampled=tuple(s.id for s, _ in sampled),
            finished=tuple(s.id for s in finished), preemptions=sched.preemptions, start_s=start,
            end_s=clock.now, wall_s=wall, running=tuple(sched.running), waiting=tuple(sched.waiting))
        rec.step(record)
        if on_step is not None:
            on_step(record)
        return record

    def finish(self) -> RunResult:
        """The run's result (call once :attr:`done`)."""
        return self.recorder.result(self._requests, self.allocator_name, self.scheduler_name,
                                    self.scheduler.preemptions, time.perf_counter() - self._t0, self.clock.name,
                                    self.prefix_caching)

    def run(self, requests: list[Request], clock: WallClock | None = None,
            on_step: Callable[[StepRecord], None] | None = None) -> RunResult:
        """Serve ``requests`` to completion; each joins the queue at its ``arrival`` on ``clock`` (default:
        wall time, steps as measured). ``on_step`` sees every step's record after the step."""
        self.start(requests, clock)
        while not self.done:
            self.step(on_step)
        return self.finish()
