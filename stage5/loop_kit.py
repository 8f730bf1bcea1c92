"""What a serving loop written outside the engine is built from and counted by (exercise 2's learner writes one).

* :func:`forward_step` - one forward pass of a batch whose K/V live wherever the loop's cache says
  (``cache.slots(seq, positions)``), written and read by the loop's own attention (a ``PagedKV``);
* :func:`slot_list` - a cache's ``slots()`` answer checked against its contract;
* :class:`Meter` - counts steps, tokens, running sequences and K/V utilisation exactly as
  :class:`stage5.engine.engine.Engine` does, and returns the engine's :class:`RunResult`.

It sits above the engine and below both :mod:`stage5.exercise_support` (the learner's notebook imports these
from there) and :mod:`stage5.grading.ex02` (whose probes read :attr:`Meter.last`): the grader takes them from
here, and only the learner's door imports the grader's checks. A broken contract is reported as a sentence naming the method and what was wrong, never as a tensor-shape
error from deep inside torch.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from stage5.engine.batch import feed
from stage5.engine.engine import RunResult
from stage5.engine.model import Transformer
from stage5.engine.sequence import Request, Sequence


def slot_list(got: Any, count: int, capacity: int, who: str = "cache.slots()") -> torch.Tensor:
    """``got``, the answer of ``cache.slots(seq, positions)`` for ``count`` positions, as a 1-D tensor of ints.

    The contract: a 1-D tensor or a list of ints, one slot per position, each in ``0 .. capacity - 1``, no two the
    same (two tokens of one sequence in one slot would overwrite each other's keys and values). Anything else is a
    ``ValueError`` whose message says which of these was broken.
    """
    if isinstance(got, torch.Tensor):
        slots = got
    else:
        try:
            slots = torch.as_tensor(list(got))
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(f"{who} returned {type(got).__name__}: return a 1-D tensor or a list of ints, one slot "
                             "per position") from None
    if slots.dim() != 1 and not (slots.dim() == 0 and count == 1):
        raise ValueError(f"{who} returned a {slots.dim()}-D tensor of shape {tuple(slots.shape)}: return a 1-D "
                         "tensor or a list of ints, one slot per position")
    if slots.dtype == torch.bool or slots.dtype.is_floating_point or slots.dtype.is_complex:
        raise ValueError(f"{who} returned {slots.dtype} values: slots are ints (a float slot such as 3.0 or 2.5 "
                         "cannot index the K/V store; compute them with integer arithmetic, // and %)")
    slots = slots.reshape(-1).to(torch.long)
    if len(slots) != count:
        raise ValueError(f"{who} returned {len(slots)} slots for {count} positions: one slot per position, in "
                         "order (for a paged cache: does the block table cover every token?)")
    if count and (int(slots.min()) < 0 or int(slots.max()) >= capacity):
        raise ValueError(f"{who} returned slot {int(slots.min()) if int(slots.min()) < 0 else int(slots.max())}, "
                         f"outside the store's {capacity} slots (0 .. {capacity - 1})")
    if len(torch.unique(slots)) != count:
        raise ValueError(f"{who} gave two positions of one sequence the same slot: each token needs a slot of its "
                         "own, or its keys and values overwrite another token's")
    return slots


class _CheckedKV:
    """The learner's K/V store as the model sees it: every ``attend`` answer is checked before torch uses it."""

    def __init__(self, kv: Any, num_heads: int, head_dim: int):
        self.kv, self.num_heads, self.head_dim = kv, num_heads, head_dim

    def plan(self, new_slots: list[torch.Tensor], context_slots: list[torch.Tensor]) -> None:
        self.kv.plan(new_slots, context_slots)

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out = self.kv.attend(layer, q, k, v)
        want = (q.shape[0], self.num_heads, self.head_dim)
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"PagedKV.attend returned {type(out).__name__}: return a tensor of shape [tokens, heads, "
                            f"head_dim] = {list(want)} for this step")
        if tuple(out.shape) != want:
            raise ValueError(f"PagedKV.attend returned shape {list(out.shape)} for a step of {want[0]} new tokens: "
                             f"return one [heads, head_dim] row per new token, {list(want)}, in the order of q")
        if out.dtype != q.dtype:
            raise TypeError(f"PagedKV.attend returned {out.dtype} values for {q.dtype} queries: keep the model's "
                            "dtype (create the store with the dtype it is given)")
        return out


@torch.no_grad()
def forward_step(model: Transformer, kv: Any, batch: list[Sequence], cache: Any) -> list[int]:
    """One forward over ``batch`` through the K/V store ``kv`` (the learner's ``PagedKV``): each sequence feeds the
    tokens whose K/V are not stored yet (the whole prompt after admission, else its newest token). ``kv`` is told
    their slots, ``cache.slots(seq, new positions)``, and each sequence's whole context, ``cache.slots(seq, all
    positions)``. Sets ``seq.num_cached`` and returns the next (greedy) token of each sequence, in order. The
    caller appends them."""
    if not isinstance(batch, list | tuple) or not batch:
        raise ValueError("forward_step needs a non-empty list of running sequences: call it only when at least one "
                         "sequence runs")
    seen: set[int] = set()
    for seq in batch:
        # a learner's loop that skips or repeats a sequence meets these messages, not a tensor-shape error
        if not isinstance(seq, Sequence):
            raise TypeError(f"forward_step's batch holds a {type(seq).__name__}: it is a list of Sequence objects")
        if id(seq) in seen:
            raise ValueError(f"sequence {seq.id} is in the batch twice: each running sequence appears once")
        seen.add(id(seq))
        if seq.finished:
            raise ValueError(f"sequence {seq.id} is in the batch but has already finished: a finished sequence "
                             "leaves `running` (take care when removing from a list you are iterating over)")
        if seq.num_cached >= len(seq.tokens):
            raise ValueError(f"sequence {seq.id} has no new token to feed (num_cached = len(tokens) = "
                             f"{len(seq.tokens)}): append each step's new token before the next step (a loop that "
                             "removes from a list while iterating over it skips the next sequence), and reset "
                             "num_cached to 0 when a sequence is preempted")
    for name in ("plan", "attend"):
        if not callable(getattr(kv, name, None)):
            raise TypeError(f"forward_step's K/V store ({type(kv).__name__}) has no {name}() method: pass the "
                            "PagedKV the loop created")
    data = getattr(kv, "data", None)
    capacity = int(data.shape[2]) if isinstance(data, torch.Tensor) and data.dim() == 5 else int(cache.num_slots)
    taken: dict[int, int] = {}  # slot -> the sequence whose context holds it, to catch two sequences sharing one

    def checked_slots(seq: Sequence, positions: torch.Tensor) -> torch.Tensor:
        slots = slot_list(cache.slots(seq, positions), len(positions), capacity,
                          f"{type(cache).__name__}.slots() for sequence {seq.id}")
        for slot in slots.tolist():
            owner = taken.setdefault(slot, seq.id)
            if owner != seq.id:
                raise ValueError(f"{type(cache).__name__}.slots() gave sequences {owner} and {seq.id} the same slot "
                                 f"{slot}: running sequences never share a slot (check admit and grow)")
        return slots

    checked = _CheckedKV(kv, model.cfg.num_heads, model.cfg.head_dim)
    return feed(model, checked, batch, checked_slots).argmax(dim=-1).tolist()


class Meter:
    """What a serving loop did, counted the way the course's engine counts it.

    Call :meth:`step` once per forward pass (after :func:`forward_step`, before appending the new tokens),
    :meth:`preempted` for each preemption and :meth:`finished` when a sequence leaves; :meth:`result` returns
    a :class:`stage5.engine.engine.RunResult`.
    """

    def __init__(self, allocator: str, scheduler: str):
        self.allocator, self.scheduler = allocator, scheduler
        self.trace: list[tuple[str, tuple[int, ...]]] = []
        self.utilization: list[float] = []
        self.step_context: list[int] = []
        self.outputs: dict[int, list[int]] = {}
        self.produced = self.peak = self.prefills = self.preemptions = 0
        self.lengths: list[tuple[int, ...]] = []  # per step: len(tokens) of each sequence that ran
        self.preempted_by: list[int] = []  # per step: preemptions so far (a victim readmitted in its own step shows)
        self.t0 = time.perf_counter()
        Meter.last = self  # the grader reads the lengths of the latest run from here

    last: Meter | None = None

    def step(self, batch: list[Sequence], cache, admitted: bool) -> None:
        """``batch``: every sequence that ran this step; ``admitted``: did this step admit anyone?"""
        for seq in batch:
            # the counts below read the batch as forward_step left it: every token stored, no new one appended yet
            if not isinstance(seq, Sequence):
                raise TypeError(f"meter.step's batch holds a {type(seq).__name__}: pass the list of Sequence objects "
                                "that forward_step ran")
            if seq.num_cached != len(seq.tokens):
                raise ValueError(f"meter.step saw sequence {seq.id} with {len(seq.tokens)} tokens of which "
                                 f"{seq.num_cached} have K/V stored: call meter.step after forward_step and before "
                                 "appending the step's new tokens, with the batch that ran")
        kind = "prefill" if admitted else "decode"
        self.trace.append((kind, tuple(s.id for s in batch)))
        self.prefills += admitted
        self.peak = max(self.peak, len(batch))
        self.produced += len(batch)
        self.step_context.append(sum(len(s.tokens) for s in batch))
        self.lengths.append(tuple(len(s.tokens) for s in batch))
        self.preempted_by.append(self.preemptions)
        reserved = sum(cache.reserved(s) for s in batch)
        if reserved:
            self.utilization.append(sum(s.num_cached for s in batch) / reserved)

    def preempted(self) -> None:
        self.preemptions += 1

    def finished(self, seq: Sequence) -> None:
        if not getattr(seq, "finished", False):
            raise ValueError(f"meter.finished was called for sequence {getattr(seq, 'id', seq)}, which has not "
                             "finished: report a sequence once, in the step its last token was appended")
        if seq.id in self.outputs:
            raise ValueError(f"meter.finished was called twice for sequence {seq.id}: report each sequence once, "
                             "when it leaves `running`")
        self.outputs[seq.id] = seq.output

    def result(self, requests: list[Request]) -> RunResult:
        missing = [r.id for r in requests if r.id not in self.outputs]
        if missing:
            raise RuntimeError(f"requests {missing[:5]} never finished (call meter.finished(seq) for each)")
        return RunResult(
            allocator=self.allocator, scheduler=self.scheduler, steps=len(self.trace), prefill_steps=self.prefills,
            output_tokens=self.produced,
            kv_utilization=sum(self.utilization) / len(self.utilization) if self.utilization else 0.0,
            peak_running=self.peak, preemptions=self.preemptions, wall_s=time.perf_counter() - self.t0,
            outputs={r.id: self.outputs[r.id] for r in requests}, trace=self.trace,
            step_context=self.step_context, step_s=[])
