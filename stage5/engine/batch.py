"""Batch preparation, written once: feed each sequence's next uncached tokens through the model in one pass.

Every serving loop in the course (:class:`~stage5.engine.engine.Engine`, the speculative engine's
:class:`~stage5.engine.speculative.PagedRunner`, and exercise 2's ``forward_step``) calls :func:`feed`. It
only needs to know where a sequence's tokens live: ``slots(seq, positions)`` gives the K/V pool slot of each
position, whatever allocator hands them out.

A sequence feeds the tokens from ``num_cached`` on - all of them by default, or the first ``counts[i]`` of
them when a step's token budget splits a long prompt into chunks (chunked prefill). Attention is causal over
positions, so feeding a prompt in pieces gives exactly the K/V and logits of feeding it at once.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence as Seq

import torch

from stage5.engine.kv import KVPool
from stage5.engine.model import Transformer
from stage5.engine.sequence import Sequence

Slots = Callable[[Sequence, torch.Tensor], torch.Tensor]


def feed(model: Transformer, pool: KVPool, batch: Seq[Sequence], slots: Slots, counts: Seq[int] | None = None,
         last_only: bool = True) -> torch.Tensor | list[torch.Tensor]:
    """One forward pass over ``batch``; each sequence feeds ``counts[i]`` tokens (default: all uncached ones).

    Advances every ``seq.num_cached`` by what it fed. Returns the logits of each sequence's last fed token
    ([len(batch), V]) when ``last_only``, else one [fed tokens, V] tensor per sequence.
    """
    if counts is None:
        counts = [len(seq.tokens) - seq.num_cached for seq in batch]
    tokens, positions, new_slots, ctx_slots = [], [], [], []
    for seq, n in zip(batch, counts, strict=True):
        end = seq.num_cached + n
        if n < 1 or end > len(seq.tokens):
            raise ValueError(f"sequence {seq.id}: cannot feed {n} tokens from position {seq.num_cached} of "
                             f"{len(seq.tokens)}; accepted: 1 .. {len(seq.tokens) - seq.num_cached}")
        new = torch.arange(seq.num_cached, end)
        tokens.append(torch.tensor(seq.tokens[seq.num_cached:end], dtype=torch.long))
        positions.append(new)
        new_slots.append(torch.as_tensor(slots(seq, new), dtype=torch.long))
        ctx_slots.append(torch.as_tensor(slots(seq, torch.arange(end)), dtype=torch.long))
    pool.plan(new_slots, ctx_slots)
    select = torch.cumsum(torch.tensor(list(counts)), 0) - 1 if last_only else None
    logits = model(torch.cat(tokens), torch.cat(positions), pool, select=select)
    for seq, n in zip(batch, counts, strict=True):
        seq.num_cached += n
    return logits if last_only else list(logits.split(list(counts)))
