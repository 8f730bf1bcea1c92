"""Who runs in the next step: the one scheduler every engine shares (nano-vllm's ``scheduler.py`` shape).

It owns three queues of :class:`Sequence`: ``pending`` (sent later than now), ``waiting`` (arrived, not
admitted) and ``running``. Each step it

1. **arrives** every request whose ``arrival`` has come;
2. **makes room** (paged allocators): every running sequence gets space for its newest token, and when the
   pool is short the newest running sequence is **preempted** by recompute - its blocks go back, it returns
   to the front of ``waiting`` keeping its tokens, and a later prefill rebuilds its K/V;
3. **admits** waiting sequences, oldest first, while the batch has a seat, the admission policy says they
   fit, and (with a token budget) the step has tokens left. Static scheduling admits only when nothing runs;
4. **plans** how many tokens each running sequence feeds. Without a budget each feeds everything it has not
   stored. With ``token_budget`` (vLLM's ``max_num_batched_tokens``) decodes go first, one token each, and
   prompts take what is left, oldest first, so a long prompt is fed in chunks over several steps beside the
   running decodes (chunked prefill, Sarathi-Serve's "stall-free" batching).

After the step the engine calls :meth:`retire` for each finished sequence. The admission policy is the only
thing an engine brings: the plain engine asks its allocator (room for the prompt plus a spare block per
running sequence); the speculative engine reserves a request's whole length up front, so it never preempts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from stage5.engine import checks
from stage5.engine.sequence import Request, Sequence

Policy = Callable[[Sequence, list[Sequence]], bool]  # can this waiting sequence join these running ones?


class Scheduler:
    """Queues, admission, preemption and retirement for one run over ``alloc`` (any allocator)."""

    def __init__(self, alloc, max_batch: int, static: bool = False, token_budget: int | None = None,
                 policy: Policy | None = None):
        checks.positive_ints(max_batch=max_batch)
        if token_budget is not None:
            checks.positive_ints(token_budget=token_budget)
        self.alloc, self.max_batch, self.static, self.token_budget = alloc, max_batch, static, token_budget
        self.policy: Policy = policy or (lambda seq, running: alloc.can_admit(seq, len(running)))
        self.pending: deque[Sequence] = deque()
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.preemptions = 0
        self._ids: set[int] = set()  # every request id of the run so far

    def submit(self, requests: list[Request], check: Callable[[Request], None]) -> None:
        """Queue ``requests`` by arrival time (ties keep their order) after every check passed: unique ids,
        and whatever ``check`` asks of each request (that it fits the pool and the model's positions)."""
        checks.unique_ids(requests)
        for request in requests:
            check(request)
        self.pending = deque(Sequence(r) for r in sorted(requests, key=lambda r: r.arrival))
        self.waiting.clear()
        self.running.clear()
        self.preemptions = 0
        self._ids = {r.id for r in requests}

    def add(self, request: Request, check: Callable[[Request], None]) -> None:
        """Queue one more request during a run (a fleet's router sends them one at a time, in arrival order):
        its id must be new to the run and its arrival no earlier than the last one queued, so ``pending`` stays
        in arrival order."""
        checks.unique_ids([request])
        if request.id in self._ids:
            raise ValueError(f"request id {request.id} appears more than once; accepted: unique ids")
        if self.pending and request.arrival < self.pending[-1].request.arrival:
            raise ValueError(f"request {request.id} arrives at {request.arrival!r} s, before request "
                             f"{self.pending[-1].id} already queued at {self.pending[-1].request.arrival!r} s; "
                             "accepted: requests added in arrival order")
        check(request)
        self._ids.add(request.id)
        self.pending.append(Sequence(request))

    # ------------------------------------------------------------------------------------------ queues
    @property
    def done(self) -> bool:
        return not (self.pending or self.waiting or self.running)

    @property
    def idle(self) -> bool:
        """Nothing to run now: the next request has not been sent yet."""
        return not (self.waiting or self.running)

    @property
    def next_arrival(self) -> float:
        return self.pending[0].request.arrival

    def arrive(self, now: float) -> None:
        while self.pending and self.pending[0].request.arrival <= now:
            self.waiting.append(self.pending.popleft())

    # ------------------------------------------------------------------------------------- each step
    def make_room(self) -> None:
        """Ensure every running sequence can store its newest token, preempting the newest when short."""
        for seq in list(self.running):
            if seq not in self.running:
                continue  # it was preempted to make room for an older one
            while not self.alloc.can_grow(seq):
                victim = self.running[-1]
                self.preempt(victim)
                if victim is seq:
                    break
            else:
                self.alloc.grow(seq)

    def preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.alloc.release(seq)
        seq.num_cached = 0
        self.waiting.appendleft(seq)
        self.preemptions += 1

    def _budget_left(self) -> float:
        if self.token_budget is None:
            return float("inf")
        return self.token_budget - sum(len(s.tokens) - s.num_cached for s in self.running)

    def admit(self) -> list[Sequence]:
        """Move waiting sequences into the batch, oldest first, while a seat, the policy and the budget allow."""
        if self.static and self.running:
            return []
        admitted = []
        while (self.waiting and len(self.running) < self.max_batch and self._budget_left() > 0
               and self.policy(self.waiting[0], self.running)):
            seq = self.waiting.popleft()
            seq.num_cached = 0
            self.alloc.admit(seq)  # a prefix-caching allocator raises num_cached to the tokens it found
            self.running.append(seq)
            admitted.append(seq)
        return admitted

    def plan(self) -> tuple[list[Sequence], list[int]]:
        """The sequences that feed tokens this step (in running order) and how many each feeds."""
        want = {id(s): len(s.tokens) - s.num_cached for s in self.running}
        if self.token_budget is None:
            grant = want
        else:  # decodes first, then prompt chunks oldest first, until the budget is spent
            grant, left = {}, self.token_budget
            for seq in sorted(self.running, key=lambda s: want[id(s)] > 1):
                grant[id(seq)] = take = min(want[id(seq)], left)
                left -= take
        batch = [s for s in self.running if grant[id(s)] > 0]
        return batch, [grant[id(s)] for s in batch]

    def retire(self, seqs: Iterable[Sequence], before_release: Callable[[Sequence], None] | None = None
               ) -> list[Sequence]:
        """Finished sequences leave the batch and give their memory back; returns them. ``before_release`` sees each
        while its blocks are still its own (a prefill replica copies the K/V out to hand it on)."""
        done = [s for s in seqs if s.finished]
        for seq in done:
            self.running.remove(seq)
            if before_release is not None:
                before_release(seq)
            self.alloc.release(seq)
        return done

    def adopt(self, seq: Sequence) -> bool:
        """Seat a sequence whose prompt was prefilled elsewhere (its K/V arrives with it): blocks for every token it
        holds, straight into ``running``, if a seat and the admission policy allow; returns whether it was seated.
        The caller writes the K/V into the blocks and sets ``num_cached``."""
        if len(self.running) >= self.max_batch or not self.policy(seq, self.running):
            return False
        checks.unique_ids([seq.request])
        if seq.id in self._ids:
            raise ValueError(f"request id {seq.id} appears more than once; accepted: unique ids")
        self._ids.add(seq.id)
        self.alloc.admit(seq)
        self.running.append(seq)
        return True
