"""The serving engine: every allocator x scheduler gives each request exactly what it would get alone."""

from __future__ import annotations

import random

import pytest
import torch

from stage5.engine.engine import Engine
from stage5.engine.kv import ContiguousAllocator, PagedAllocator
from stage5.engine.model import Transformer, generate
from stage5.engine.sequence import Request, Sequence
from stage5.models import ModelConfig

torch.set_num_threads(1)

CFG = ModelConfig(name="tiny", vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, intermediate_size=48, max_position_embeddings=512)
COMBOS = [(a, s) for a in ("contiguous", "paged") for s in ("static", "continuous")]
BLOCK = 8


def make_model(dtype: torch.dtype) -> Transformer:
    torch.manual_seed(0)
    model = Transformer(CFG).to(dtype).eval()
    for p in model.parameters():
        p.data.normal_(0, 0.3)
    return model


def make_requests(n: int = 12, seed: int = 0) -> list[Request]:
    rng = random.Random(seed)
    requests = [Request(i, tuple(rng.randrange(64) for _ in range(rng.randint(1, 30))), 40, rng.randint(1, 40))
                for i in range(n)]
    # prompt + output - 1 = 2 * BLOCK tokens of K/V: this one exactly fills its last block
    requests.append(Request(n, tuple(range(10)), 40, 2 * BLOCK - 9))
    return requests


def check_bookkeeping(engine: Engine):
    """An ``on_step`` hook checking the allocator's bookkeeping after every step, for the sequences that ran
    and are still running: one that sampled a token holds exactly the blocks for the ``num_cached`` tokens it
    stored; one that fed only part of its prompt (chunked prefill) holds the blocks for its whole prompt."""

    def check(step):
        for seq in step.running:
            if seq.id not in step.ids:
                continue
            if isinstance(engine.alloc, PagedAllocator):
                held = seq.num_cached if seq.id in step.sampled else len(seq.tokens)
                assert len(seq.block_table) == -(-held // BLOCK), (seq.id, seq.block_table, held)
                assert all(engine.alloc.ref_count[b] == 1 for b in seq.block_table)
            else:
                assert engine.alloc.reserved(seq) == seq.request.max_len
        tables = [b for s in step.running for b in s.block_table]
        assert len(tables) == len(set(tables)), "a block is in two tables"
        if isinstance(engine.alloc, PagedAllocator):
            assert len(tables) + len(engine.alloc.free_blocks) == engine.alloc.num_blocks

    return check


def assert_pool_empty(engine: Engine) -> None:
    if isinstance(engine.alloc, PagedAllocator):
        assert sorted(engine.alloc.free_blocks) == list(range(engine.alloc.num_blocks))
        assert not any(engine.alloc.ref_count)
    else:
        assert engine.alloc.runs == {} and engine.alloc.num_free_slots == engine.alloc.num_slots


@pytest.mark.parametrize("allocator,scheduler", COMBOS)
@pytest.mark.parametrize("num_blocks", [40, 9])  # roomy, and tight enough to force preemption when paged
def test_every_engine_matches_reference_exactly(model64, requests, reference, allocator, scheduler, num_blocks):
    engine = Engine(model64, CFG, allocator=allocator, scheduler=scheduler, num_blocks=num_blocks,
                    block_size=BLOCK, max_batch=6)
    assert engine.pool.nbytes == num_blocks * BLOCK * CFG.kv_bytes_per_token(bytes_per_element=8)
    result = engine.run(requests, on_step=check_bookkeeping(engine))
    for r in requests:
        assert result.outputs[r.id] == reference[r.id], f"request {r.id}"
    assert result.output_tokens == sum(r.output_len for r in requests)
    assert_pool_empty(engine)
    if allocator == "paged" and num_blocks == 9:
        assert result.preemptions > 0
    if allocator == "contiguous":
        assert result.preemptions == 0


@pytest.mark.parametrize("allocator,scheduler", COMBOS)
def test_float32_logits_match_reference(requests, allocator, scheduler):
    model = make_model(torch.float32)
    result = Engine(model, CFG, allocator=allocator, scheduler=scheduler, num_blocks=20, block_size=BLOCK,
                    max_batch=6, record_logits=True).run(requests)
    matched = 0
    for r in requests[:6]:
        ref_out, ref_logits = generate(model, list(r.prompt), r.output_len, return_logits=True)
        for got_tok, ref_tok, got, ref in zip(result.outputs[r.id], ref_out, result.logits[r.id], ref_logits,
                                                  strict=True):
            torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
            if got_tok != ref_tok:
                break  # a near-tie flipped; later positions see different text
            matched += 1
    assert matched >= 0.9 * sum(r.output_len for r in requests[:6])


def test_impossible_request_is_refused_with_sizes(model64):
    engine = Engine(model64, CFG, allocator="paged", num_blocks=4, block_size=BLOCK)
    with pytest.raises(ValueError, match=r"needs up to 42 K/V slots .* holds 32 \(4 blocks of 8\)"):
        engine.run([Request(0, tuple(range(2)), 40, 3)])
    with pytest.raises(ValueError, match="max_tokens"):
        Request(1, (1, 2), 0)


def test_paged_allocator_block_tables():
    alloc = PagedAllocator(num_blocks=4, block_size=4)
    seq = Sequence(Request(0, (1, 2, 3, 4), 10))
    alloc.admit(seq)
    assert len(seq.block_table) == 1  # four tokens fill one block exactly
    seq.tokens.append(5)
    assert alloc.can_grow(seq)
    alloc.grow(seq)
    assert len(seq.block_table) == 2 and len(alloc.free_blocks) == 2
    first, second = seq.block_table
    slots = alloc.slots(seq, torch.arange(5))
    assert slots.tolist() == [first * 4, first * 4 + 1, first * 4 + 2, first * 4 + 3, second * 4]
    other = Sequence(Request(1, tuple(range(8)), 1))
    alloc.admit(other)
    assert not alloc.num_free and alloc.can_grow(seq)  # the second block still has room
    seq.tokens += [6, 7, 8, 9]
    assert not alloc.can_grow(seq)
    alloc.release(seq)
    alloc.release(other)
    assert len(alloc.free_blocks) == 4 and not any(alloc.ref_count)


def test_contiguous_allocator_first_fit_fragments():
    alloc = ContiguousAllocator(num_slots=30)
    seqs = [Sequence(Request(i, (1,) * 2, 8)) for i in range(3)]  # 10 slots each
    for s in seqs:
        alloc.admit(s)
    assert [s.start for s in seqs] == [0, 10, 20]
    alloc.release(seqs[0])
    alloc.release(seqs[2])
    big = Sequence(Request(9, (1,) * 5, 10))  # 15 slots: 20 are free, but in two runs of 10
    assert alloc.num_free_slots == 20 and not alloc.can_admit(big)
    small = Sequence(Request(8, (1,), 5))
    alloc.admit(small)
    assert small.start == 0  # first fit


def test_static_waits_for_whole_batch_continuous_refills(model64, requests):
    def joins(trace):
        """Steps where a sequence joins a batch that is still running."""
        return sum(bool(set(ids) & set(prev)) and not set(ids) <= set(prev)
                   for (_, ids), (_, prev) in zip(trace[1:], trace[:-1], strict=True))

    static = Engine(model64, CFG, "contiguous", "static", num_blocks=40, block_size=BLOCK, max_batch=4).run(requests)
    cont = Engine(model64, CFG, "contiguous", "continuous", num_blocks=40, block_size=BLOCK, max_batch=4).run(requests)
    assert joins(static.trace) == 0
    # static: once a batch starts, none of its members run alongside a later admission
    for i, (kind, ids) in enumerate(static.trace):
        if kind == "prefill" and i:
            assert not set(ids) & set(static.trace[i - 1][1])
    assert joins(cont.trace) > 0
    assert cont.steps < static.steps
    assert cont.tokens_per_step > static.tokens_per_step


def test_paging_raises_utilization_and_batch(model64, requests):
    runs = {a: Engine(model64, CFG, a, "continuous", num_blocks=20, block_size=BLOCK, max_batch=12).run(requests)
            for a in ("contiguous", "paged")}
    assert runs["paged"].kv_utilization > 0.75 > runs["contiguous"].kv_utilization
    assert runs["paged"].peak_running > runs["contiguous"].peak_running
