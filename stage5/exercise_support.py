"""Scaffolding for exercise 2 (build a toy serving loop): everything the learner does not write.

* :func:`tiny_model` - a small random-weight Llama-style model in float64 (fast on a CPU, exact greedy tokens;
  from :mod:`stage5.engine.checkpoints`);
* :func:`small_workload` - seeded long-tailed requests sized for it (byte tokens, a generous ``max_tokens`` cap;
  from :mod:`stage5.engine.workload`);
* :func:`forward_step` - one forward pass of a batch whose K/V live wherever the learner's cache says
  (``cache.slots(seq, positions)``), written and read by the learner's own attention (their ``PagedKV``);
* :class:`Meter` - counts steps, tokens, running sequences and K/V utilisation exactly as
  :class:`stage5.engine.engine.Engine` does, and returns the engine's :class:`RunResult`;
* :func:`slot_list` - a cache's ``slots()`` answer checked against its contract, for forward_step and the tests
  (these three from :mod:`stage5.loop_kit`, which the grader's probes share);
* :func:`check_attention` - a learner's attention on a visible step, naming the slip when it differs;
* :func:`check_schedule` - a loop's run compared with the rules step by step, naming the first rule broken;
* :func:`show_table` - prints a 2x2 of results.

Learner code is checked at each of these doors, so a broken contract is reported as a sentence naming the method
and what was wrong, never as a tensor-shape error from deep inside torch. This module sits on top: it imports the
engine, :mod:`stage5.loop_kit` and :mod:`stage5.grading.ex02`'s checks, and nothing of the course imports it.
"""

from __future__ import annotations

from typing import Any

from stage5.engine.checkpoints import tiny_model  # noqa: F401 - the released notebook imports these from here
from stage5.engine.engine import RunResult
from stage5.engine.sequence import Request
from stage5.engine.workload import small_workload  # noqa: F401
from stage5.loop_kit import Meter, forward_step, slot_list  # noqa: F401

#: The visible attention step check_attention() grades (the hidden ones use other shapes, lengths and dtypes).
VISIBLE_ATTENTION_CASE = {"seed": 10, "heads": 4, "kv_heads": 2, "head_dim": 8, "block_size": 4, "dtype": "float64",
                          "steps": [[0, 3], [2, 1], [4, 2]]}


def check_attention(kv_class: Any) -> None:
    """Your ``PagedKV`` on one visible step (three sequences, one of them prefilling, slots from block tables),
    compared with the course's attention exactly as the hidden tests do: a wrong output is matched against the
    common slips (the causal mask, the scale, the head mapping, float32, attending across sequences) and an
    AssertionError names the one it matches and its rule, never the expected numbers."""
    from stage5.grading.ex02 import LocalKernel
    from stage5.grading.ex02 import check_attention as compare

    compare("your attention", LocalKernel({"PagedKV": kv_class}), cases=(VISIBLE_ATTENTION_CASE,))


def check_schedule(loop: Any, cache_class: Any, requests: list[Request], num_blocks: int, block_size: int,
                   max_batch: int, continuous: bool | None = True) -> None:
    """Serve ``requests`` with your ``loop`` and a fresh ``cache_class(num_blocks, block_size)`` (a
    ``ContiguousCache`` gets the same slots) and compare the run with the rules step by step, exactly as the hidden
    tests do: on the first step that breaks a rule, an AssertionError names the step and the rule (never the
    expected schedule). ``continuous=None`` calls the loop without that argument (``serve_static``)."""
    from stage5.grading.ex02 import LocalKernel, check_serving

    allocator = "contiguous" if getattr(cache_class, "__name__", "") == "ContiguousCache" else "paged"
    workload = [["request", r.id, list(r.prompt), r.max_tokens, r.stop_after] for r in requests]
    check_serving("your schedule", LocalKernel({"loop": loop, "cache": cache_class}), "loop", "cache", workload,
                  allocator, num_blocks, block_size, max_batch, continuous)


def show_table(results: dict[tuple[str, str], RunResult]) -> None:
    """Print one row per (cache, scheduler) result."""
    print(f"{'cache':<11} {'scheduler':<11} {'steps':>6} {'tokens/step':>11} {'KV util':>8} {'peak run':>8} "
          f"{'preempt':>7} {'tokens/s':>9}")
    for (cache, scheduler), r in results.items():
        print(f"{cache:<11} {scheduler:<11} {r.steps:>6} {r.tokens_per_step:>11.2f} {r.kv_utilization:>8.1%} "
              f"{r.peak_running:>8} {r.preemptions:>7} {r.tokens_per_s:>9.0f}")
