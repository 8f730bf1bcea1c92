"""Speculative decoding on the paged K/V pool: a cheap drafter guesses, the target checks all guesses at once.

One **round** per running sequence: the drafter proposes up to ``k`` tokens; the target feeds its pending
token plus every proposal in **one forward pass** over the paged cache, which yields k + 1 rows of logits;
the acceptance rule walks the proposals left to right and keeps a prefix of them, then adds one token of
its own (a corrected draw where it rejected, a free bonus token where it accepted everything). K/V written
for rejected proposals is simply forgotten: ``num_cached`` stops before them and blocks past the kept
tokens go back to the free list.

The rule (:func:`accept_or_resample`) keeps the output distribution exactly the target's:

* accept drafted token x with probability min(1, p(x) / q(x));
* on rejection draw from max(p - q, 0), renormalised;
* after k acceptances draw the bonus token from p.

Greedy mode (``temperature=0``) is the limit of the same rule with one-hot distributions: keep proposals
while they equal the target's argmax, then emit the target's argmax.

Two drafters: :class:`DraftModelDrafter` runs the small trained model with its own paged cache;
:class:`PromptLookupDrafter` copies what followed the latest earlier occurrence of the last few tokens in
the prompt and output so far (no second model at all).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch

from stage5.engine import checks
from stage5.engine.batch import feed
from stage5.engine.kv import KVPool, PagedAllocator
from stage5.engine.model import Transformer, probs
from stage5.engine.scheduler import Scheduler
from stage5.engine.sequence import Request, Sequence
from stage5.models import ModelConfig

Rule = Callable[[torch.Tensor, torch.Tensor, int, torch.Generator], tuple[bool, int]]


# ---------------------------------------------------------------------------------- the acceptance rule
def accept_or_resample(p_target: torch.Tensor, p_draft: torch.Tensor, draft_token: int,
                       generator: torch.Generator) -> tuple[bool, int]:
    """The modified rejection rule for one drafted token. Returns (accepted, token to emit).

    ``p_target`` and ``p_draft`` are probability vectors over the vocabulary at the same position.
    """
    ratio = p_target[draft_token] / p_draft[draft_token]
    if torch.rand((), generator=generator, dtype=p_target.dtype) < torch.clamp(ratio, max=1.0):
        return True, draft_token
    residual = torch.clamp(p_target - p_draft, min=0.0)
    if float(residual.sum()) <= 0:  # p == q: rejection has probability 0; guard against rounding
        residual = p_target
    return False, int(torch.multinomial(residual / residual.sum(), 1, generator=generator))


def verify(p_target: torch.Tensor, p_draft: torch.Tensor, draft_tokens: list[int], generator: torch.Generator,
           rule: Rule = accept_or_resample) -> list[int]:
    """One round: ``p_target`` [k + 1, V] and ``p_draft`` [k, V] rows for ``draft_tokens`` (k of them).

    Returns the accepted proposals followed by exactly one token from the target side.
    """
    out = []
    for i, token in enumerate(draft_tokens):
        accepted, emitted = rule(p_target[i], p_draft[i], token, generator)
        out.append(emitted)
        if not accepted:
            return out
    out.append(int(torch.multinomial(p_target[len(draft_tokens)], 1, generator=generator)))
    return out


def verify_greedy(target_argmax: list[int], draft_tokens: list[int]) -> list[int]:
    """Greedy round: keep proposals while they match the target's argmax, then the target's own choice."""
    out = []
    for token, best in zip(draft_tokens, target_argmax, strict=False):
        if token != best:
            break
        out.append(token)
    return out + [target_argmax[len(out)]]


# ---------------------------------------------------------------------------------- a paged model runner
class PagedRunner:
    """A model with its own paged pool: feed each sequence's uncached tokens, get logits for all of them."""

    def __init__(self, model: Transformer, cfg: ModelConfig, num_blocks: int, block_size: int):
        self.model, self.cfg = model, cfg
        checks.allocator_fits(num_blocks, block_size, per_block=False)
        checks.pool_fits(cfg, num_blocks * block_size, next(model.parameters()).dtype.itemsize,
                         (num_blocks, block_size))
        self.alloc = PagedAllocator(num_blocks, block_size)
        self.pool = KVPool(cfg, num_blocks * block_size, next(model.parameters()).dtype)

    def ensure_blocks(self, seq: Sequence) -> None:
        """Blocks for every token in ``seq.tokens`` (admission is the caller's job: it checked the budget)."""
        while len(seq.block_table) < self.alloc.blocks_for(len(seq.tokens)):
            seq.block_table.append(self.alloc.allocate())

    def truncate(self, seq: Sequence, keep_tokens: int, keep_cached: int) -> None:
        """Drop tokens past ``keep_tokens``, forget K/V past ``keep_cached``, free blocks no longer needed."""
        del seq.tokens[keep_tokens:]
        seq.num_cached = min(seq.num_cached, keep_cached)
        while len(seq.block_table) > self.alloc.blocks_for(len(seq.tokens)):
            self.alloc.free(seq.block_table.pop())

    def forward(self, batch: list[Sequence]) -> list[torch.Tensor]:
        """One pass over every sequence's tokens past ``num_cached``; returns [new tokens, V] logits each."""
        for seq in batch:
            self.ensure_blocks(seq)
        return feed(self.model, self.pool, batch, self.alloc.slots, last_only=False)


# ---------------------------------------------------------------------------------- drafters
class Drafter(Protocol):
    def propose(self, seqs: list[Sequence], ks: list[int], temperature: float,
                generator: torch.Generator) -> list[tuple[list[int], torch.Tensor | None]]:
        """Per sequence up to ``ks[i]`` tokens, and their draft distributions [n, V] (None: deterministic)."""
        ...

    def release(self, seq: Sequence) -> None: ...


class PromptLookupDrafter:
    """Propose what followed the latest earlier occurrence of the last n tokens (n from ``max_ngram`` down)."""

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def lookup(self, tokens: list[int], k: int) -> list[int]:
        if max(tokens) < 256:  # byte-sized ids: let bytes.rfind do the scanning
            text = bytes(tokens)
            for n in range(min(self.max_ngram, len(tokens) - 1), self.min_ngram - 1, -1):
                start = text.rfind(text[-n:], 0, len(text) - 1)  # an occurrence ending before the last token
                if start >= 0:
                    return tokens[start + n:start + n + k]
            return []
        for n in range(min(self.max_ngram, len(tokens) - 1), self.min_ngram - 1, -1):
            tail = tokens[-n:]
            for start in range(len(tokens) - n - 1, -1, -1):
                if tokens[start:start + n] == tail:
                    return tokens[start + n:start + n + k]
        return []

    def propose(self, seqs, ks, temperature, generator):
        return [(self.lookup(seq.tokens, k) if k else [], None) for seq, k in zip(seqs, ks, strict=True)]

    def release(self, seq: Sequence) -> None:
        pass


class DraftModelDrafter:
    """The small model, decoding k steps ahead with its own paged cache (one shadow sequence per request)."""

    def __init__(self, model: Transformer, cfg: ModelConfig, num_blocks: int = 256, block_size: int = 16):
        self.runner = PagedRunner(model, cfg, num_blocks, block_size)
        self.shadows: dict[int, Sequence] = {}

    def _sync(self, seq: Sequence) -> Sequence:
        """Bring the shadow in line with the accepted tokens; K/V past the common prefix is forgotten."""
        shadow = self.shadows.setdefault(seq.id, Sequence(seq.request))
        same = 0
        for a, b in zip(shadow.tokens, seq.tokens, strict=False):
            if a != b:
                break
            same += 1
        # keep K/V for the common prefix, but always feed at least the newest token: its logits are the next guess
        self.runner.truncate(shadow, same, min(same, len(seq.tokens) - 1))
        shadow.tokens.extend(seq.tokens[same:])
        return shadow

    def propose(self, seqs, ks, temperature, generator):
        shadows = [self._sync(seq) for seq in seqs]
        drafted: list[list[int]] = [[] for _ in seqs]
        dists: list[list[torch.Tensor]] = [[] for _ in seqs]
        for step in range(max(ks, default=0)):
            active = [i for i, k in enumerate(ks) if k > step]
            rows = self.runner.forward([shadows[i] for i in active])
            for i, logits in zip(active, rows, strict=True):
                last = logits[-1]
                if temperature > 0:
                    q = probs(last, temperature)
                    token = int(torch.multinomial(q, 1, generator=generator))
                    dists[i].append(q)
                else:
                    token = int(torch.argmax(last))
                drafted[i].append(token)
                shadows[i].tokens.append(token)
        return [(d, torch.stack(q) if q else None) for d, q in zip(drafted, dists, strict=True)]

    def release(self, seq: Sequence) -> None:
        shadow = self.shadows.pop(seq.id, None)
        if shadow is not None:
            self.runner.alloc.release(shadow)


# ---------------------------------------------------------------------------------- the engine
@dataclass
class SpecResult:
    """What a speculative run measured. Everything but ``wall_s`` and ``tokens_per_s`` is deterministic."""

    k: int
    drafter: str
    steps: int  # target forward passes (a prefill joins the same pass as other sequences' verification)
    verifications: int  # sequence-rounds that verified at least one proposal
    drafted: int  # proposals the target examined
    accepted: int
    full_rounds: int  # rounds with all k proposals (the cost model's setting)
    full_round_tokens: int  # tokens those rounds produced
    output_tokens: int
    wall_s: float
    outputs: dict[int, list[int]]
    rounds: list[tuple[int, int]] = field(repr=False, default_factory=list)  # (proposed, accepted) per round

    @property
    def alpha(self) -> float:
        """Acceptance rate per examined proposal; a proposal after a rejection is never examined."""
        tested = self.accepted + sum(1 for proposed, acc in self.rounds if acc < proposed)
        return self.accepted / tested if tested else 0.0

    @property
    def tokens_per_verification(self) -> float:
        """Mean tokens per round among rounds that drafted the full k (what (1 - a^(k+1)) / (1 - a) predicts)."""
        return self.full_round_tokens / self.full_rounds if self.full_rounds else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.wall_s if self.wall_s > 0 else 0.0


class SpeculativeEngine:
    """Continuous batching with speculative rounds, on the shared :class:`~stage5.engine.scheduler.Scheduler`.

    It brings two things of its own: an admission policy that budgets blocks for a request's whole ``max_len``
    (so a round never runs out of room and nothing is preempted), and the round itself (propose, verify,
    truncate). Admitted requests get their prefill inside the same forward pass as the others' verification.
    Every request is served from time 0 (arrival times are for :class:`~stage5.engine.engine.Engine`)."""

    def __init__(self, model: Transformer, cfg: ModelConfig, drafter: Drafter, k: int = 4,
                 temperature: float = 0.0, seed: int = 0, num_blocks: int = 256, block_size: int = 16,
                 max_batch: int = 64, rule: Rule = accept_or_resample):
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise ValueError(f"k (drafted tokens per round) must be an integer >= 0, got {k!r}")
        if (not isinstance(temperature, (int, float)) or isinstance(temperature, bool)
                or not 0 <= temperature < float("inf")):
            raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {temperature!r}")
        checks.positive_ints(num_blocks=num_blocks, block_size=block_size, max_batch=max_batch)
        if model.cfg != cfg:
            raise ValueError(f"model was built for {model.cfg.name}, not {cfg.name}")
        draft_cfg = getattr(getattr(drafter, "runner", None), "cfg", None)
        if draft_cfg is not None and draft_cfg.vocab_size != cfg.vocab_size:
            raise ValueError(f"the draft model's vocabulary ({draft_cfg.vocab_size} tokens) differs from the "
                             f"target's ({cfg.vocab_size}); accepted: a draft model over the same vocabulary")
        self.runner = PagedRunner(model, cfg, num_blocks, block_size)
        self.alloc = self.runner.alloc
        self.drafter, self.k, self.temperature, self.seed = drafter, k, temperature, seed
        self.max_batch, self.rule = max_batch, rule

    def _budget(self, seq: Sequence) -> int:
        return self.alloc.blocks_for(seq.request.max_len)

    def _draft_alloc(self) -> PagedAllocator | None:
        """The draft model's own block pool, if the drafter has one."""
        runner = getattr(self.drafter, "runner", None)
        return runner.alloc if isinstance(runner, PagedRunner) else None

    def _can_admit(self, seq: Sequence, running: list[Sequence]) -> bool:
        promised = sum(self._budget(s) - len(s.block_table) for s in running)
        if len(running) >= self.max_batch or self._budget(seq) + promised > self.alloc.num_free:
            return False
        draft = self._draft_alloc()
        if draft is None:
            return True
        # The draft pool is budgeted too: each running sequence's shadow may grow to its whole max_len.
        return sum(draft.blocks_for(s.request.max_len) for s in [*running, seq]) <= draft.num_blocks

    def check(self, requests: list[Request]) -> None:
        """Everything :meth:`run` needs, checked before the first step: unique ids, each request fits both
        pools and both models' positions, token ids inside the vocabulary."""
        checks.unique_ids(requests)
        for r in requests:
            self.check_request(r)

    def check_request(self, r: Request) -> None:
        if r.arrival:
            raise ValueError(f"request {r.id} arrives at {r.arrival} s; the speculative engine serves every request "
                             "from time 0 (accepted: arrival=0; serve arrivals with Engine)")
        draft = self._draft_alloc()
        checks.fits_model(r, self.runner.cfg, "the target model")
        if self.alloc.blocks_for(r.max_len) > self.alloc.num_blocks:
            raise ValueError(f"request {r.id} needs {r.max_len} K/V slots; the pool holds {self.alloc.num_slots}")
        if draft is not None:
            checks.fits_model(r, self.drafter.runner.cfg, "the draft model")
            if draft.blocks_for(r.max_len) > draft.num_blocks:
                raise ValueError(f"request {r.id} needs {r.max_len} K/V slots in the draft model's pool, which "
                                 f"holds {draft.num_slots}; give DraftModelDrafter more num_blocks")

    def _emit(self, seq: Sequence, logits: torch.Tensor, drafts: list[int], q: torch.Tensor | None,
              generator: torch.Generator) -> list[int]:
        if self.temperature <= 0:
            return verify_greedy(logits.argmax(dim=-1).tolist(), drafts)
        p = probs(logits, self.temperature)
        if q is None:  # a deterministic drafter: its distribution is one-hot on each proposal
            q = torch.zeros(len(drafts), p.shape[-1], dtype=p.dtype)
            q[torch.arange(len(drafts)), torch.tensor(drafts, dtype=torch.long)] = 1.0
        return verify(p, q, drafts, generator, self.rule)

    @torch.no_grad()
    def run(self, requests: list[Request]) -> SpecResult:
        sched = Scheduler(self.alloc, self.max_batch, policy=self._can_admit)
        sched.submit(requests, self.check_request)  # unique ids, then each request's fit and positions
        sched.arrive(0.0)
        generator = torch.Generator().manual_seed(self.seed)
        outputs: dict[int, list[int]] = {}
        rounds: list[tuple[int, int]] = []
        steps = produced = full_rounds = full_tokens = 0
        t0 = time.perf_counter()
        while not sched.done:
            old = list(sched.running)
            new = sched.admit()
            if not sched.running:
                raise RuntimeError("no request could be admitted")
            ks = [min(self.k, s.request.output_len - len(s.output) - 1) for s in old]
            proposals = self.drafter.propose(old, ks, self.temperature, generator) if old else []
            base = {s.id: len(s.tokens) for s in old}
            for seq, (drafts, _) in zip(old, proposals, strict=True):
                seq.tokens.extend(drafts)
            rows = self.runner.forward(old + new)  # verification and prefill: one pass over the paged cache
            steps += 1
            for seq, logits, (drafts, q) in zip(old, rows[:len(old)], proposals, strict=True):
                emitted = self._emit(seq, logits, drafts, q, generator)
                kept = base[seq.id] + len(emitted) - 1  # pending token + accepted proposals have valid K/V
                self.runner.truncate(seq, kept, kept)  # rejected proposals' slots are forgotten, spare blocks freed
                seq.tokens.append(emitted[-1])
                if drafts:
                    rounds.append((len(drafts), len(emitted) - 1))
                if len(drafts) == self.k and self.k:
                    full_rounds += 1
                    full_tokens += len(emitted)
                produced += len(emitted)
            for seq, logits in zip(new, rows[len(old):], strict=True):
                last = logits[-1]
                token = (int(torch.argmax(last)) if self.temperature <= 0 else
                         int(torch.multinomial(probs(last, self.temperature), 1, generator=generator)))
                seq.tokens.append(token)
                produced += 1
            for seq in sched.retire(list(sched.running)):
                self.drafter.release(seq)
                outputs[seq.id] = seq.output
        wall = time.perf_counter() - t0
        drafter = "draft" if isinstance(self.drafter, DraftModelDrafter) else (
            "prompt_lookup" if isinstance(self.drafter, PromptLookupDrafter) else type(self.drafter).__name__)
        return SpecResult(k=self.k, drafter=drafter, steps=steps, verifications=len(rounds),
                          drafted=sum(p for p, _ in rounds), accepted=sum(a for _, a in rounds),
                          full_rounds=full_rounds, full_round_tokens=full_tokens, output_tokens=produced,
                          wall_s=wall, outputs={r.id: outputs[r.id] for r in requests}, rounds=rounds)
