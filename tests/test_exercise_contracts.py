"""The doors learner code passes through in ex02 and ex03 state the broken contract in a sentence.

ex02's ``forward_step``, ``slot_list`` and ``Meter`` are fed caches, attention and loops that break one rule each;
the error must name the method and what was wrong, never a torch internals message. ex03's visible ``check_format``
accepts what its hidden check accepts. And ex02's introduction states its solution's size truthfully.
"""

from __future__ import annotations

import json
import re
from collections import deque
from pathlib import Path

import pytest
import torch

from stage5.engine.kv import ContiguousAllocator, KVPool, PagedAllocator
from stage5.engine.sequence import Request, Sequence
from stage5.exercise_support import Meter, forward_step, slot_list, tiny_model

REPO = Path(__file__).resolve().parents[1]
TORCH_INTERNALS = ("reshape", "0 elements", "Index put", "index_put", "out of bounds", "size mismatch")


@pytest.fixture(scope="module")
def model():
    return tiny_model()


def _admitted(cache, *prompts: tuple[int, ...]) -> list[Sequence]:
    seqs = [Sequence(Request(i, p, 8)) for i, p in enumerate(prompts)]
    for seq in seqs:
        cache.admit(seq)
    return seqs


class _Slots(ContiguousAllocator):
    """A contiguous cache whose slots() answers with ``answer(seq, positions)``."""

    def __init__(self, num_slots: int, answer):
        super().__init__(num_slots)
        self.answer = answer

    def slots(self, seq, positions):
        return self.answer(seq, positions)


@pytest.mark.parametrize("answer, words", [
    (lambda seq, pos: seq.start + pos[:-1], "returned 2 slots for 3 positions"),
    (lambda seq, pos: seq.start + pos + 1000, "outside the store's"),
    (lambda seq, pos: torch.zeros_like(pos) + seq.start, "the same slot"),
    (lambda seq, pos: (seq.start + pos).double(), "slots are ints"),
    (lambda seq, pos: [float(seq.start + p) for p in pos.tolist()], "slots are ints"),
    (lambda seq, pos: None, "returned NoneType"),
    (lambda seq, pos: (seq.start + pos)[None, :].repeat(2, 1), "2-D tensor"),
])
def test_a_broken_slots_answer_is_named(model, answer, words):
    cache = _Slots(64, answer)
    seq, = _admitted(cache, (1, 2, 3))
    pool = KVPool(model.cfg, cache.num_slots, torch.float64)
    with pytest.raises((ValueError, TypeError)) as err:
        forward_step(model, pool, [seq], cache)
    text = str(err.value)
    assert "_Slots.slots() for sequence 0" in text and words in text, text
    assert not any(w in text for w in TORCH_INTERNALS), text


@pytest.mark.parametrize("as_list", [False, True])
def test_slots_may_be_a_tensor_or_a_list(model, as_list):
    """Both return types the text allows give the very tokens the course's own cache gives."""
    cache = _Slots(64, lambda seq, pos: [seq.start + p for p in pos.tolist()] if as_list else seq.start + pos)
    ref = ContiguousAllocator(64)
    seq, = _admitted(cache, (5, 6, 7))
    twin, = _admitted(ref, (5, 6, 7))
    got = forward_step(model, KVPool(model.cfg, 64, torch.float64), [seq], cache)
    want = forward_step(model, KVPool(model.cfg, 64, torch.float64), [twin], ref)
    assert got == want and seq.num_cached == 3
    assert slot_list([4, 5], 2, 8).tolist() == [4, 5] and slot_list(torch.tensor(3), 1, 8).tolist() == [3]


def test_two_sequences_sharing_a_slot_is_named(model):
    cache = _Slots(64, lambda seq, pos: pos)  # every sequence's run starts at slot 0
    seqs = _admitted(cache, (1, 2), (3, 4))
    with pytest.raises(ValueError, match="gave sequences 0 and 1 the same slot 0"):
        forward_step(model, KVPool(model.cfg, 64, torch.float64), seqs, cache)


class _BadAttention(KVPool):
    def __init__(self, cfg, num_slots, dtype, answer):
        super().__init__(cfg, num_slots, dtype)
        self.answer = answer

    def attend(self, layer, q, k, v):
        return self.answer(super().attend(layer, q, k, v))


@pytest.mark.parametrize("answer, words", [
    (lambda out: out[:, :1], "PagedKV.attend returned shape"),
    (lambda out: out.reshape(len(out), -1), "PagedKV.attend returned shape"),
    (lambda out: out.tolist(), "PagedKV.attend returned list"),
    (lambda out: out.float(), "PagedKV.attend returned torch.float32 values"),
])
def test_a_broken_attention_answer_is_named(model, answer, words):
    cache = PagedAllocator(8, 4)
    seq, = _admitted(cache, (1, 2, 3, 4, 5))
    with pytest.raises((ValueError, TypeError)) as err:
        forward_step(model, _BadAttention(model.cfg, cache.num_slots, torch.float64, answer), [seq], cache)
    assert words in str(err.value) and not any(w in str(err.value) for w in TORCH_INTERNALS), str(err.value)


def _static_loop(model, requests, cache, *, remove_while_iterating=False, meter_first=False):
    """The static loop of ex02 P1c, optionally with one of two slips learners make."""
    meter = Meter("paged", "static")
    pool = KVPool(model.cfg, cache.num_slots, torch.float64)
    waiting, running = deque(Sequence(r) for r in requests), []
    while waiting or running:
        for seq in running:
            cache.grow(seq)
        admitted = False
        if not running:
            while waiting and cache.can_admit(waiting[0], len(running)):
                cache.admit(waiting[0])
                running.append(waiting.popleft())
                admitted = True
        batch = list(running)
        if meter_first:
            meter.step(batch, cache, admitted)
        tokens = forward_step(model, pool, batch, cache)
        if not meter_first:
            meter.step(batch, cache, admitted)
        for seq, token in zip(running if remove_while_iterating else batch, tokens, strict=False):
            seq.tokens.append(token)
            if seq.finished:
                running.remove(seq)
                cache.release(seq)
                meter.finished(seq)
    return meter.result(requests)


def _requests() -> list[Request]:  # the first two stop together, so removing one while iterating skips the other
    return [Request(0, (1, 2, 3), 8, 2), Request(1, (4, 5), 8, 2), Request(2, (6, 7, 8, 9), 8, 5)]


def test_the_right_loop_runs(model):
    assert _static_loop(model, _requests(), PagedAllocator(16, 4)).steps == 5


def test_removing_from_running_while_iterating_is_named(model):
    with pytest.raises(ValueError) as err:
        _static_loop(model, _requests(), PagedAllocator(16, 4), remove_while_iterating=True)
    text = str(err.value)
    assert "has no new token to feed" in text and "while iterating" in text, text
    assert not any(w in text for w in TORCH_INTERNALS), text


def test_metering_before_the_forward_pass_is_named(model):
    with pytest.raises(ValueError, match="call meter.step after forward_step and before appending"):
        _static_loop(model, _requests(), PagedAllocator(16, 4), meter_first=True)


def test_meter_finished_needs_a_finished_sequence():
    meter, seq = Meter("paged", "static"), Sequence(Request(0, (1, 2), 8, 2))
    with pytest.raises(ValueError, match="has not finished"):
        meter.finished(seq)
    seq.tokens += [3, 4]
    meter.finished(seq)
    with pytest.raises(ValueError, match="called twice"):
        meter.finished(seq)


# ------------------------------------------------------------------------------------------------ ex03
GOOD = {"phase": "decode", "decode_bound": "memory", "best_lever": "batching", "gain": 6.5}


@pytest.mark.parametrize("change", [{}, {"best_lever": "Batching"}, {"best_lever": " prefix-caching "},
                                    {"phase": "Decode"}, {"decode_bound": "MEMORY"}, {"gain": 39}, {"gain": 39.0},
                                    {"gain": "6.5"}])
def test_ex03_format_accepts_what_the_hidden_check_reads(change):
    from stage5.grading import check_format, label

    diagnosis = {**GOOD, **change}
    check_format(diagnosis)
    # the hidden check reads the same labels: each one normalises to a value the reference can produce
    assert label(diagnosis["best_lever"]) in ("batching", "prefix_caching", "quantization", "speculative")


@pytest.mark.parametrize("change, words", [
    ({"best_lever": "paging"}, "best_lever is one of"), ({"phase": 1}, "phase is one of"),
    ({"gain": 0}, "gain is a positive number"), ({"gain": "big"}, "expected a number"),
    ({"gain": True}, "got a bool"),
])
def test_ex03_format_rejects_what_the_hidden_check_rejects(change, words):
    from stage5.grading import GradingError, check_format

    with pytest.raises(GradingError, match=words):
        check_format({**GOOD, **change})
    with pytest.raises(GradingError, match="lacks gain"):
        check_format({k: v for k, v in GOOD.items() if k != "gain"})


def test_ex03_release_uses_the_shared_check_format():
    setup = next(c for c in json.loads((REPO / "exercises/ex03/ex03.ipynb").read_text())["cells"]
                 if c["cell_type"] == "code")
    assert "from stage5.grading import check_format" in "".join(setup["source"])


# ------------------------------------------------------------------------------------------------ ex02 budget
def test_ex02_introduction_states_the_solution_size():
    """The introduction's "about N lines" is within 15% of the non-blank lines inside the solution regions."""
    nb = json.loads((REPO / "solutions" / "ex02" / "ex02.ipynb").read_text())
    counted, inside = 0, False
    for cell in nb["cells"]:
        for line in "".join(cell["source"]).splitlines():
            if "### BEGIN SOLUTION" in line or "### END SOLUTION" in line:
                inside = "BEGIN" in line
            elif inside and line.strip():
                counted += 1
    intro = "".join(nb["cells"][0]["source"])
    stated = [int(n) for n in re.findall(r"about (\d+) lines", intro)]
    assert stated, "the introduction should say 'about N lines'"
    assert "two hours" in intro
    for n in stated:
        assert abs(n - counted) <= 0.15 * counted, f"the introduction says about {n} lines; the solution has {counted}"
