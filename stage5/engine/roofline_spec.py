"""Speculative decoding on the roofline toy, where the time of a verification pass is physics, not overhead.

Random weights agree with any drafter only by chance, so here the acceptance rate is *set*, not measured:
:class:`SetAcceptanceDrafter` proposes the target's own next token with probability ``alpha`` (known from a
plain run of the same requests) and a wrong one otherwise. Its drafting still costs what a real drafter's
does: it runs a small model of the same op graph (:data:`stage5.engine.roofline_toy.ROOFLINE_DRAFT`) k steps
ahead and throws the guesses away. The trained pair is where the course measures a real alpha.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass

from stage5.engine.sequence import Request, Sequence
from stage5.engine.speculative import DraftModelDrafter
from stage5.inputs import workload_size


class SetAcceptanceDrafter:
    """Propose the target's greedy continuation, each token right with probability ``alpha``.

    ``answers`` maps request id to the target's greedy output (from a plain run). ``cost`` is a real drafter
    whose proposals are computed, timed as part of the round, and discarded.
    """

    def __init__(self, answers: dict[int, list[int]], alpha: float, vocab_size: int, seed: int = 0,
                 cost: DraftModelDrafter | None = None):
        if not 0 <= alpha <= 1:
            raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
        self.answers, self.alpha, self.vocab = answers, alpha, vocab_size
        self.rng, self.cost = random.Random(seed), cost

    def propose(self, seqs, ks, temperature, generator):
        if temperature > 0:
            raise ValueError("SetAcceptanceDrafter proposes the target's greedy tokens; use temperature=0")
        if self.cost is not None:
            self.cost.propose(seqs, ks, temperature, generator)  # the drafting work, guesses discarded
        out = []
        for seq, k in zip(seqs, ks, strict=True):
            answer, at = self.answers[seq.id], len(seq.output)
            proposals = []
            for j in range(k):
                right = answer[at + j] if at + j < len(answer) else 0
                proposals.append(right if self.rng.random() < self.alpha else (right + 1) % self.vocab)
            out.append((proposals, None))
        return out

    def release(self, seq: Sequence) -> None:
        if self.cost is not None:
            self.cost.release(seq)


@dataclass
class SpecPoint:
    """One batch size: wall times (medians over rounds), forward passes, and the acceptance reached."""

    batch: int
    plain_s: float
    spec_s: float
    plain_steps: int
    spec_steps: int
    alpha: float
    same_outputs: bool

    @property
    def speedup(self) -> float:
        return self.plain_s / self.spec_s


def spec_requests(batch: int, prompt_len: int, new_tokens: int) -> list[Request]:
    """``batch`` requests of ``prompt_len`` tokens, each answered with ``new_tokens``."""
    batch, lengths = workload_size(batch, {"prompt_len": prompt_len, "new_tokens": new_tokens}, "batch")
    prompt_len, new_tokens = lengths["prompt_len"], lengths["new_tokens"]
    return [Request(i, tuple((11 * i + 3 * j) % 251 for j in range(prompt_len)), new_tokens) for i in range(batch)]


def measure_spec_collapse(model, cfg, draft, draft_cfg, batches, alpha: float, k: int, prompt_len: int = 4,
                          new_tokens: int = 12, rounds: int = 2, seed: int = 0) -> dict[int, SpecPoint]:
    """Plain paged decoding against speculation at a set ``alpha``, per batch size, interleaved over ``rounds``."""
    from stage5.engine.engine import Engine
    from stage5.engine.speculative import SpeculativeEngine

    blocks = max(batches) * (-(-(prompt_len + new_tokens + k + 1) // 16) + 1)
    walls: dict[int, tuple[list[float], list[float]]] = {b: ([], []) for b in batches}
    last: dict[int, tuple] = {}
    for r in range(rounds):
        for b in (batches if r % 2 == 0 else batches[::-1]):
            requests = spec_requests(b, prompt_len, new_tokens)
            plain = Engine(model, cfg, num_blocks=blocks, max_batch=b).run(requests)
            drafter = SetAcceptanceDrafter(plain.outputs, alpha, cfg.vocab_size, seed + b,
                                           DraftModelDrafter(draft, draft_cfg, blocks, 16))
            spec = SpeculativeEngine(model, cfg, drafter, k=k, num_blocks=blocks, max_batch=b).run(requests)
            walls[b][0].append(plain.wall_s)
            walls[b][1].append(spec.wall_s)
            last[b] = (plain, spec)
    return {b: SpecPoint(b, statistics.median(walls[b][0]), statistics.median(walls[b][1]), last[b][0].steps,
                         last[b][1].steps, last[b][1].alpha, last[b][0].outputs == last[b][1].outputs)
            for b in batches}
