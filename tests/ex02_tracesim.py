"""Exercise 2's serving loops on a hidden workload without the model: a stand-in ``forward_step`` stores nothing and
returns token 0 for everyone, so a run costs microseconds. The schedule (who runs in each step, how many tokens
each holds, the preemptions) does not depend on the tokens (every hidden request stops after a set number), so
this is the trace the grader compares, at a thousandth of the cost: the workload search and the check that each
rule stays visible (tests/test_ex02_mutants.py) use it."""

from __future__ import annotations

from typing import Any

from stage5.grading.ex02 import refusing, requests_of


def _fake_forward(model: Any, kv: Any, batch: list[Any], cache: Any) -> list[int]:
    for seq in batch:
        cache.slots(seq, __import__("torch").arange(len(seq.tokens)))  # the table must cover every token
        seq.num_cached = len(seq.tokens)
    return [0] * len(batch)


def simulate(ns: dict[str, Any], function: str, cache: str, workload: list[list[Any]], allocator: str,
             num_blocks: int, block_size: int, max_batch: int, continuous: bool | None,
             refusals: list[list[int]] | None = None) -> Any:
    """(trace, lengths, preemptions per step, blocks left taken) of the solution's (or a mutant's) loop, or the
    name of the exception it raised; ``refusals`` as in :func:`stage5.grading.ex02.refusing`."""
    func = ns[function]
    func.__globals__["forward_step"] = _fake_forward
    cls = refusing(ns[cache], refusals) if refusals else ns[cache]
    c = cls(num_blocks * block_size) if allocator == "contiguous" else cls(num_blocks, block_size)
    meter_cls = ns["Meter"]
    kwargs = {} if continuous is None else {"continuous": continuous}
    try:
        result = func(ns["model"], requests_of(workload), c, max_batch=max_batch, **kwargs)
    except Exception as err:  # noqa: BLE001
        return type(err).__name__
    finally:
        func.__globals__["forward_step"] = ns["forward_step"]
    meter = meter_cls.last
    left = (c.blocks.num_blocks - c.blocks.num_free) if hasattr(c, "blocks") else (c.num_slots - c.num_free_slots)
    return (tuple((k, tuple(i)) for k, i in result.trace), tuple(meter.lengths), tuple(meter.preempted_by), left)
