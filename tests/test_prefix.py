"""Prefix caching: shared blocks, exact outputs, the last prompt token always computed, LRU eviction."""

from __future__ import annotations

import random

import pytest
import torch

from stage5.engine import prefix
from stage5.engine.engine import Engine
from stage5.engine.model import generate
from stage5.engine.prefix import PrefixCachingAllocator
from stage5.engine.sequence import Request, Sequence
from tests.test_engine import CFG, make_model

torch.set_num_threads(1)

BLOCK = 8
SYSTEM = tuple(range(1, 3 * BLOCK + 1))  # three full blocks every request shares


def shared_requests(n: int = 8, seed: int = 1, stamp_first: bool = False) -> list[Request]:
    rng = random.Random(seed)
    requests = []
    for i in range(n):
        stamp = (40 + i % 20, 60)  # a per-request field
        user = tuple(rng.randrange(64) for _ in range(rng.randint(2, 12)))
        prompt = stamp + SYSTEM + user if stamp_first else SYSTEM + stamp + user
        requests.append(Request(i, prompt, 20, rng.randint(1, 20)))
    return requests


def assert_all_free(engine: Engine) -> None:
    alloc = engine.alloc
    assert sorted(alloc.free_blocks) == list(range(alloc.num_blocks)) and not any(alloc.ref_count)


@pytest.mark.parametrize("num_blocks", [40, 8])  # roomy, and tight enough to preempt and evict
def test_outputs_identical_with_and_without_caching(model64, num_blocks):
    requests = shared_requests(10) + shared_requests(4, seed=2, stamp_first=True)
    requests = [Request(i, r.prompt, r.max_tokens, r.stop_after) for i, r in enumerate(requests)]
    runs = {c: Engine(model64, CFG, "paged", "continuous", num_blocks=num_blocks, block_size=BLOCK, max_batch=6,
                      prefix_caching=c) for c in (False, True)}
    results = {c: e.run(requests) for c, e in runs.items()}
    assert results[True].outputs == results[False].outputs
    for r in requests[:4]:
        assert results[True].outputs[r.id] == generate(model64, list(r.prompt), r.output_len)
    assert results[True].prefill_tokens_skipped > 0 and results[False].prefill_tokens_skipped == 0
    assert results[True].prefill_tokens_computed < results[False].prefill_tokens_computed
    for engine in runs.values():
        assert_all_free(engine)
    if num_blocks == 8:
        assert runs[True].alloc.evictions > 0


def test_hit_rate_counts_shared_blocks_exactly(model64):
    n = 6
    cached = Engine(model64, CFG, num_blocks=64, block_size=BLOCK, prefix_caching=True).run(shared_requests(n))
    prompt_tokens = sum(len(r.prompt) for r in shared_requests(n))
    # the first request computes the three system blocks; the other n - 1 (admitted in the same step) share them
    assert cached.prefill_tokens_skipped == (n - 1) * len(SYSTEM)
    assert cached.prefill_tokens_computed == prompt_tokens - (n - 1) * len(SYSTEM)
    assert cached.hit_rate == pytest.approx((n - 1) * len(SYSTEM) / prompt_tokens)
    plain = Engine(model64, CFG, num_blocks=64, block_size=BLOCK).run(shared_requests(n))
    assert plain.hit_rate == 0 and plain.prefill_tokens_computed == prompt_tokens
    assert cached.steps == plain.steps and cached.mean_ttft_steps == plain.mean_ttft_steps == 1


def test_timestamp_first_silently_misses(model64, capsys):
    result = Engine(model64, CFG, num_blocks=64, block_size=BLOCK, prefix_caching=True).run(
        shared_requests(6, stamp_first=True))
    assert result.hit_rate == 0 and result.prefill_tokens_skipped == 0
    out = capsys.readouterr()
    assert out.out == out.err == ""  # nothing errors, nothing is logged


@pytest.mark.parametrize("length", [3 * BLOCK, 3 * BLOCK + 3])
def test_whole_prompt_hit_still_computes_last_token(model64, length):
    prompt = tuple(range(5, 5 + length))
    first, again = Request(0, prompt, 4), Request(1, prompt, 4)
    engine = Engine(model64, CFG, num_blocks=16, block_size=BLOCK, max_batch=1, prefix_caching=True)
    result = engine.run([first, again])
    computed_again = length - (length - 1) // BLOCK * BLOCK  # at least the last token, up to one block
    assert result.prefill_tokens_skipped == length - computed_again >= 2 * BLOCK
    assert result.prefill_tokens_computed == length + computed_again
    assert result.outputs[0] == result.outputs[1] == generate(model64, list(prompt), 4)
    assert_all_free(engine)


def test_freed_blocks_stay_cached_and_are_evicted_least_recently_used_first():
    alloc = PrefixCachingAllocator(num_blocks=4, block_size=2)  # free list [0, 1, 2, 3]
    a = Sequence(Request(0, (1, 2, 3, 4, 5), 1))
    alloc.admit(a)  # blocks 0 = [1 2] and 1 = [3 4] registered; 2 = [5] is partial, private
    assert a.block_table == [0, 1, 2] and alloc.num_cached_blocks == 2 and a.num_cached == 0
    alloc.release(a)
    assert list(alloc.free_blocks) == [3, 2, 1, 0] and alloc.num_cached_blocks == 2  # free, yet still cached
    b = Sequence(Request(1, (1, 2, 3, 4, 9), 1))
    alloc.admit(b)
    assert b.block_table == [0, 1, 3] and b.num_cached == 4  # revived as they were: nothing reset
    assert alloc.evictions == 0 and list(alloc.free_blocks) == [2]
    c = Sequence(Request(2, (1, 2, 7, 7), 1))
    alloc.admit(c)  # shares block 0 and takes block 2, which held nothing registered
    assert c.block_table == [0, 2] and alloc.ref_count[0] == 2 and alloc.evictions == 0
    alloc.release(c)
    alloc.release(b)
    assert list(alloc.free_blocks) == [2, 3, 1, 0]  # least recently used at the front, the shared head last
    d = Sequence(Request(3, (9,) * 8, 1))
    alloc.admit(d)  # needs every block: the three cached ones are evicted and their hashes forgotten
    assert alloc.evictions == 3 and alloc.match(Sequence(Request(4, (1, 2, 3, 4, 5), 1))) == []


def test_lru_order_prefers_evicting_the_oldest_freed_block():
    alloc = PrefixCachingAllocator(num_blocks=4, block_size=2)
    old = Sequence(Request(0, (1, 2, 0), 1))
    new = Sequence(Request(1, (3, 4, 0), 1))
    alloc.admit(old)
    alloc.admit(new)  # uses the last block too; the partial blocks are never registered
    alloc.release(old)
    alloc.release(new)  # [1 2] was freed before [3 4]
    fresh = Sequence(Request(2, (5, 6, 7), 1))
    alloc.admit(fresh)  # needs two blocks: the never-cached ones go first, then the oldest cached one
    assert alloc.match(Sequence(Request(3, (1, 2, 0), 1))) == []
    assert len(alloc.match(Sequence(Request(4, (3, 4, 0), 1)))) == 1


def test_hash_collision_is_caught_by_the_token_check(model64, monkeypatch):
    monkeypatch.setattr(prefix, "block_hash", lambda parent, tokens: 7)  # every block collides
    requests = shared_requests(5)
    engine = Engine(model64, CFG, num_blocks=64, block_size=BLOCK, prefix_caching=True)
    result = engine.run(requests)
    for r in requests[:3]:
        assert result.outputs[r.id] == generate(model64, list(r.prompt), r.output_len)
    assert_all_free(engine)


def test_prefix_caching_needs_paged():
    with pytest.raises(ValueError, match="paged"):
        Engine(make_model(torch.float32), CFG, allocator="contiguous", prefix_caching=True)
