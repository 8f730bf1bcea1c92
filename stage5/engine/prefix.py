"""Prefix caching: a paged allocator that remembers which full blocks hold which tokens.

Keys and values of a token depend only on the tokens before it and on its position, so two requests that
begin with the same tokens would compute identical K/V for that shared beginning. This allocator lets the
second request point its block table at the first one's physical blocks instead of computing them again.

* A block is recognised by a **chained hash**: ``hash(parent block's hash, this block's token ids)``. The
  chain makes a block's identity depend on everything before it, so only a match from position 0 counts.
  A hash match is confirmed by comparing the stored token ids, so a collision can never serve wrong K/V.
* Only **full** blocks are registered; a half-filled last block is private to its sequence.
* A hit raises the block's **reference count**; nothing is copied.
* When a count falls to zero the block goes to the back of the free list *with its contents still
  registered*. Free blocks are handed out from the front, so the block unused for the longest time is the
  one whose cached contents are forgotten first (least recently used eviction). Reviving a cached free block
  takes it out of the free list without touching its contents (nano-vllm's lesson: a hit on a freed block
  must not reset it).
* The match stops one token short of the whole prompt: the engine still needs the logits of the last
  prompt token to pick the first new one, so that token is always computed (nano-vllm issue #144).
"""

from __future__ import annotations

from stage5.engine.kv import PagedAllocator
from stage5.engine.sequence import Sequence


def block_hash(parent: int | None, tokens: tuple[int, ...]) -> int:
    """The chained identity of one full block: its own token ids and its parent's hash."""
    return hash((parent, tokens))


def block_chain(tokens, block_size: int) -> list[tuple[int, tuple[int, ...]]]:
    """(chained hash, token ids) of each full block a cache could serve for a prompt of ``tokens``: every full
    block before the one holding the last token, which is always computed."""
    chain, parent = [], None
    for i in range((len(tokens) - 1) // block_size):
        block = tuple(tokens[i * block_size:(i + 1) * block_size])
        parent = block_hash(parent, block)
        chain.append((parent, block))
    return chain


class PrefixCachingAllocator(PagedAllocator):
    """A :class:`PagedAllocator` whose full blocks can be found again by their tokens and shared."""

    def __init__(self, num_blocks: int, block_size: int):
        super().__init__(num_blocks, block_size)
        self.cached: dict[int, int] = {}  # chained hash -> physical block
        self.block_key: list[int | None] = [None] * num_blocks  # physical block -> its hash, if registered
        self.block_tokens: list[tuple[int, ...] | None] = [None] * num_blocks
        self.evictions = 0

    # -------------------------------------------------------------------------------- lookup
    def match(self, seq: Sequence) -> list[int]:
        """Physical blocks already holding ``seq``'s leading full blocks, stopping at the first miss.

        The block holding the last token is never matched, so at least that token is computed.
        """
        hits = []
        for key, tokens in block_chain(seq.tokens, self.block_size):
            block = self.cached.get(key)
            if block is None or self.block_tokens[block] != tokens:
                break
            hits.append(block)
        return hits

    # -------------------------------------------------------------------------------- admission
    def can_admit(self, seq: Sequence, running: int = 0) -> bool:
        hits = self.match(seq)
        revived = sum(self.ref_count[b] == 0 for b in hits)  # cached but free: they leave the free list
        fresh = self.blocks_for(len(seq.tokens)) - len(hits)
        return fresh + revived + running <= self.num_free

    def admit(self, seq: Sequence) -> None:
        """Share every matching block, take fresh ones for the rest, and mark the shared tokens as cached."""
        assert not seq.block_table
        hits = self.match(seq)
        for block in hits:
            self.share(block)  # a free one is revived as it is: its K/V are exactly what we need
        fresh = [self.allocate() for _ in range(self.blocks_for(len(seq.tokens)) - len(hits))]
        seq.block_table = hits + fresh
        seq.num_cached = len(hits) * self.block_size
        seq.block_hashes = [self.block_key[b] for b in hits]
        self.register_full_blocks(seq, len(seq.tokens))  # the coming prefill fills these

    def allocate(self) -> int:
        """A fresh block from the front of the free list; whatever it cached is forgotten (evicted)."""
        block = super().allocate()
        key = self.block_key[block]
        if key is not None:
            del self.cached[key]
            self.block_key[block] = self.block_tokens[block] = None
            self.evictions += 1
        return block

    # -------------------------------------------------------------------------------- registration
    def register_full_blocks(self, seq: Sequence, num_tokens: int) -> None:
        """Register each block of ``seq`` that the first ``num_tokens`` tokens fill completely.

        Called at admission for the blocks the prefill is about to write (the pool writes a step's K/V
        before any sequence reads, so a request admitted in the same step may already share them), and
        after every step for blocks that decoding has just filled.
        """
        size = self.block_size
        for i in range(len(seq.block_hashes), num_tokens // size):
            tokens = tuple(seq.tokens[i * size:(i + 1) * size])
            key = block_hash(seq.block_hashes[-1] if seq.block_hashes else None, tokens)
            block = seq.block_table[i]
            if self.block_key[block] is None and key not in self.cached:
                self.cached[key] = block
                self.block_key[block], self.block_tokens[block] = key, tokens
            seq.block_hashes.append(key)

    def release(self, seq: Sequence) -> None:
        super().release(seq)  # tail blocks are freed first, so a shared head is the last to be evicted
        seq.block_hashes = []

    @property
    def num_cached_blocks(self) -> int:
        return len(self.cached)
