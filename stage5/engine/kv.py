"""Where K/V live: one preallocated pool tensor, and two ways of handing out its slots.

The pool holds ``num_slots = num_blocks * block_size`` token slots, each storing every layer's key and value
for one token, so its size in bytes is ``num_slots * cfg.kv_bytes_per_token(itemsize)`` whichever allocator
carves it up:

* :class:`ContiguousAllocator` gives each admitted sequence one unbroken run of slots long enough for its
  prompt plus its whole ``max_tokens`` cap, found first-fit. Reserved-but-unused tail slots are wasted, and the
  gaps between runs can be too short to use (external fragmentation).
* :class:`PagedAllocator` gives out fixed-size blocks one at a time as a sequence grows. A sequence's
  ``block_table`` maps its logical block i to a physical block; only its last block can be part empty.

Both answer the same question - which slot holds token ``pos`` of sequence ``seq`` - so one attention path
(:class:`KVPool`) serves both: it writes the step's new K/V to their slots and gathers each sequence's
context back through the slot map.
"""

from __future__ import annotations

from collections import deque

import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

from stage5.engine.checks import allocator_fits, pool_fits
from stage5.engine.sequence import Sequence
from stage5.models import ModelConfig


class PagedAllocator:
    """Fixed-size blocks with a free list and reference counts (a count above 1 means shared).

    The block vocabulary is the one exercise 2 teaches: :meth:`allocate` a fresh block, :meth:`share` one
    more owner of a block, :meth:`free` one owner's claim, :attr:`num_free` blocks left.
    """

    def __init__(self, num_blocks: int, block_size: int):
        allocator_fits(num_blocks, block_size)
        self.num_blocks, self.block_size = num_blocks, block_size
        self.free_blocks: deque[int] = deque(range(num_blocks))
        self.ref_count = [0] * num_blocks

    @property
    def num_slots(self) -> int:
        return self.num_blocks * self.block_size

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    @property
    def num_free(self) -> int:
        return len(self.free_blocks)

    def allocate(self) -> int:
        """A fresh block from the front of the free list, owned once."""
        block = self.free_blocks.popleft()
        assert self.ref_count[block] == 0, f"block {block} was on the free list while in use"
        self.ref_count[block] = 1
        return block

    def share(self, block: int) -> None:
        """One more owner of ``block``; a free block (kept for its cached contents) leaves the free list as is."""
        if self.ref_count[block] == 0:
            self.free_blocks.remove(block)
        self.ref_count[block] += 1

    def free(self, block: int) -> None:
        """Drop one owner's claim; the block returns to the back of the free list when nobody owns it."""
        self.ref_count[block] -= 1
        assert self.ref_count[block] >= 0, f"block {block} released more often than taken"
        if self.ref_count[block] == 0:
            self.free_blocks.append(block)

    def can_admit(self, seq: Sequence, running: int = 0) -> bool:
        """Room for the prompt, plus one spare block per running sequence so they can keep growing.

        Without that headroom the pool fills to the brim at every admission and the very next decode step
        has to preempt someone, whose prompt is then computed twice.
        """
        return self.blocks_for(len(seq.tokens)) + running <= self.num_free

    def admit(self, seq: Sequence) -> None:
        """Blocks for every token the coming prefill writes; nothing for tokens not yet generated."""
        assert not seq.block_table
        seq.block_table = [self.allocate() for _ in range(self.blocks_for(len(seq.tokens)))]

    def can_grow(self, seq: Sequence) -> bool:
        """Is there room to store K/V for all of ``seq.tokens`` (the next decode step's need)?"""
        return self.blocks_for(len(seq.tokens)) <= len(seq.block_table) or self.num_free > 0

    def grow(self, seq: Sequence) -> None:
        if self.blocks_for(len(seq.tokens)) > len(seq.block_table):
            seq.block_table.append(self.allocate())

    def release(self, seq: Sequence) -> None:
        for block in reversed(seq.block_table):
            self.free(block)
        seq.block_table = []

    def slots(self, seq: Sequence, positions: torch.Tensor) -> torch.Tensor:
        table = torch.tensor(seq.block_table, dtype=torch.long)
        return table[positions // self.block_size] * self.block_size + positions % self.block_size

    def reserved(self, seq: Sequence) -> int:
        return len(seq.block_table) * self.block_size

    @property
    def num_free_slots(self) -> int:
        return self.num_free * self.block_size


class ContiguousAllocator:
    """One run of ``prompt + max_tokens`` slots per sequence, placed first-fit, reserved at admission."""

    def __init__(self, num_slots: int):
        allocator_fits(num_slots, per_block=False)  # no per-slot bookkeeping, but the same bounds on the count
        self.num_slots = num_slots
        self.runs: dict[int, tuple[int, int]] = {}  # sequence id -> (start, length)

    def _first_fit(self, length: int) -> int | None:
        cursor = 0
        for start, used in sorted(self.runs.values()):
            if start - cursor >= length:
                return cursor
            cursor = start + used
        return cursor if self.num_slots - cursor >= length else None

    def can_admit(self, seq: Sequence, running: int = 0) -> bool:
        return self._first_fit(seq.request.max_len) is not None

    def admit(self, seq: Sequence) -> None:
        start = self._first_fit(seq.request.max_len)
        assert start is not None and seq.id not in self.runs
        self.runs[seq.id] = (start, seq.request.max_len)
        seq.start = start

    def can_grow(self, seq: Sequence) -> bool:
        return True  # the whole cap was reserved up front

    def grow(self, seq: Sequence) -> None:
        assert len(seq.tokens) <= self.runs[seq.id][1]

    def release(self, seq: Sequence) -> None:
        del self.runs[seq.id]
        seq.start = None

    def slots(self, seq: Sequence, positions: torch.Tensor) -> torch.Tensor:
        return seq.start + positions

    def reserved(self, seq: Sequence) -> int:
        return self.runs[seq.id][1] if seq.id in self.runs else 0

    @property
    def num_free_slots(self) -> int:
        return self.num_slots - sum(length for _, length in self.runs.values())


class KVPool:
    """The K/V storage tensor plus the attention backend that reads and writes it for one step at a time.

    ``data[layer, 0 or 1, slot]`` is the key or value of one token: [kv_heads, head_dim].
    Before each forward, :meth:`plan` is told which sequences run and where their tokens live.
    """

    def __init__(self, cfg: ModelConfig, num_slots: int, dtype: torch.dtype):
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
        pool_fits(cfg, num_slots, dtype.itemsize)
        self.cfg = cfg
        self.data = torch.zeros(cfg.num_layers, 2, num_slots, cfg.num_kv_heads, cfg.head_dim, dtype=dtype)

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size()

    def plan(self, new_slots: list[torch.Tensor], context_slots: list[torch.Tensor]) -> None:
        """Per running sequence: the slots its new tokens go to, and the slots of its whole context.

        The new tokens are the tail of the context. Sequences feeding one token (decodes) and sequences
        feeding several (prefills) are laid out as two separate padded groups, so a long prompt in the
        same step does not pad every decode's single query up to the prompt's length. Everything here is
        done once per step, so the per-layer work in :meth:`attend` is a fixed handful of tensor ops.
        """
        self.write = torch.cat(new_slots)
        n_new = torch.tensor([len(s) for s in new_slots])
        offsets = torch.cumsum(n_new, 0) - n_new
        single = n_new == 1
        self.groups = [self._group([new_slots[i] for i in g], [context_slots[i] for i in g], n_new[g], offsets[g])
                       for g in (single.nonzero().flatten().tolist(), (~single).nonzero().flatten().tolist()) if g]
        # A step of decodes only, in flat order: the queries need no gathering and the output no scattering.
        self.direct = (len(self.groups) == 1 and bool(single.all()))

    def _group(self, new_slots, context_slots, n_new: torch.Tensor, offsets: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n_ctx = torch.tensor([len(s) for s in context_slots])
        q_max = int(n_new.max())
        read = pad_sequence(context_slots, batch_first=True)  # [batch, k_max]; padding reads slot 0, masked
        i = torch.arange(q_max)
        q_valid = i[None, :] < n_new[:, None]  # [batch, q_max]
        q_index = torch.where(q_valid, offsets[:, None] + i[None, :], 0)
        first = n_ctx - n_new  # position of each sequence's first new token
        # query i (at position first + i) may see keys 0 .. first + i; padding rows see key 0 only, so that
        # softmax stays finite
        mask = torch.arange(read.shape[1])[None, None, :] <= (first[:, None] + i[None, :])[:, :, None]
        mask &= q_valid[:, :, None]
        mask[:, :, 0] |= ~q_valid
        # one copy of the mask per query head sharing a KV head (see the folding in attend)
        group = self.cfg.num_heads // self.cfg.num_kv_heads
        return read, q_index, q_valid, mask[:, None].repeat(1, 1, group, 1)

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        store = self.data[layer]  # [2, slots, kv_heads, dim]
        store[:, self.write] = torch.stack([k, v])
        n, heads, dim = q.shape
        out = None if self.direct else torch.empty_like(q)
        for read, q_index, q_valid, mask in self.groups:
            kv = store[:, read].transpose(2, 3)  # keys and values in one gather: [2, batch, kv_heads, k_max, dim]
            batch, kv_heads = kv.shape[1], kv.shape[2]
            group = heads // kv_heads
            # Grouped-query attention without copying K/V: the `group` query heads sharing a KV head are
            # stacked along the query axis, so each KV head is read once for all of them.
            if self.direct:
                folded = q.view(batch, kv_heads, group, dim)
            else:
                folded = q[q_index].transpose(1, 2).reshape(batch, kv_heads, group * q_index.shape[1], dim)
            result = F.scaled_dot_product_attention(folded, kv[0], kv[1], attn_mask=mask)
            if self.direct:
                return result.reshape(n, heads, dim)
            result = result.reshape(batch, heads, q_index.shape[1], dim).transpose(1, 2)
            out[q_index[q_valid]] = result[q_valid]
        return out
