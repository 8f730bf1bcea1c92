"""Exercise 2 (a toy serving loop): the learner's caches and loop driven and compared with the course engine."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from .blocking import UnavailableError, unavailable
from .checks import GradingError, _as_number, _close

#: The reference engine and allocators, switched off while a learner's serving loop runs (every method, so a
#: learner's class that subclasses one of them gains nothing either).
SERVING_BLOCKED: tuple[str, ...] = tuple(
    [f"stage5.engine.kv.{cls}.{m}" for cls in ("PagedAllocator", "ContiguousAllocator")
     for m in ("can_admit", "admit", "can_grow", "grow", "release", "slots", "reserved")]
    + ["stage5.engine.kv.PagedAllocator._take", "stage5.engine.kv.PagedAllocator._release",
       "stage5.engine.kv.ContiguousAllocator._first_fit"]
    + [f"stage5.engine.engine.Engine.{m}" for m in ("run", "_admit", "_make_room", "_forward", "_preempt")])
# CPU seconds a learner's loop may use on one hidden workload (the reference needs well under one): CPU time, not
# wall-clock, so a loop graded on a busy machine gets the same budget as on a quiet one.
SERVING_CPU_SECONDS = 8.0


@contextlib.contextmanager
def _time_limit(name: str, seconds: float) -> Iterator[None]:
    """Raise GradingError in the main thread once this process has used ``seconds`` of CPU time (Unix;
    ``ITIMER_PROF`` counts user and system time of all its threads); elsewhere, no limit."""
    import signal
    import threading

    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum: int, frame: Any) -> None:
        raise GradingError(f"{name}: your loop used more than {seconds:g} s of CPU time on a workload the reference "
                           "serves in under a second: does it stop when nothing runs and nothing can be admitted, "
                           "and does every finished sequence give its memory back?")
    previous = signal.signal(signal.SIGPROF, expired)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def run_serving(name: str, func: Callable[..., Any], *args: Any, seconds: float = SERVING_CPU_SECONDS,
                blocked: Iterable[str] = SERVING_BLOCKED, **kwargs: Any) -> Any:
    """Call a learner's serving function (or method) with the reference engine switched off and a CPU-time limit;
    crashes become learner-safe failures that name the check."""
    if not callable(func):
        raise GradingError(f"{name}: expected a function, got {type(func).__name__}")
    with unavailable(*blocked), _time_limit(name, seconds):
        try:
            return func(*args, **kwargs)
        except UnavailableError as err:
            raise GradingError(f"{name}: {str(err).split(',')[0]}, the course's reference, which is switched off "
                               "while your code is graded: write your own") from None
        except GradingError:
            raise
        except NotImplementedError:
            raise GradingError(f"{name}: not written yet (it raises NotImplementedError)") from None
        except Exception as err:  # noqa: BLE001 - any learner crash becomes a graded failure
            raise GradingError(f"{name}: your code raised {type(err).__name__}: {err}") from None


#: Reference runs already computed in this kernel, per (model, workload, build): p4_table and p4_lever ask for the
#: same four runs, and a workload's reference never changes while a notebook is graded.
_REFERENCE_RUNS: dict[tuple[Any, ...], Any] = {}


def reference_run(model: Any, requests: list[Any], allocator: str, scheduler: str, num_blocks: int,
                  block_size: int, max_batch: int) -> Any:
    """The course engine's :class:`RunResult` for the same pool (``num_blocks * block_size`` slots), cached per
    model object, workload and build (a model's weights are not expected to change during grading)."""
    from stage5.engine.engine import Engine

    key = (id(model), tuple(requests), allocator, scheduler, num_blocks, block_size, max_batch)
    cached = _REFERENCE_RUNS.get(key)
    if cached is not None and cached[0] is model:
        return cached[1]
    result = Engine(model, model.cfg, allocator, scheduler, num_blocks=num_blocks, block_size=block_size,
                    max_batch=max_batch).run(requests)
    _REFERENCE_RUNS[key] = (model, result)
    return result


def check_outputs(name: str, result: Any, model: Any, requests: list[Any]) -> None:
    """Every request's tokens equal what the reference ``generate()`` gives it alone (exact, greedy)."""
    from stage5.engine.model import generate

    outputs = getattr(result, "outputs", None)
    if not isinstance(outputs, Mapping):
        raise GradingError(f"{name}: expected the RunResult that meter.result(requests) returns")
    for r in requests:
        got = outputs.get(r.id)
        if got is None:
            raise GradingError(f"{name}: request {r.id} has no output: every request must finish")
        want = generate(model, list(r.prompt), r.output_len)
        if list(got) != want:
            n = len(list(got))
            if n != len(want):
                raise GradingError(f"{name}: request {r.id} produced the wrong number of tokens: stop a sequence "
                                   "as soon as seq.finished is true, and not before")
            first = next(i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b)
            raise GradingError(f"{name}: request {r.id}'s tokens differ from generating it alone, from new token "
                               f"{first} on: some K/V was written to or read from the wrong slot (check slots() "
                               "at a block boundary, and that a preempted sequence restarts with num_cached = 0)")


def check_no_leaks(name: str, cache: Any) -> None:
    """After a run every slot is free again (and, for a paged cache, every reference count is back to 0)."""
    blocks = getattr(cache, "blocks", None)
    if blocks is not None:
        counts = list(getattr(blocks, "ref_count", []))
        if blocks.num_free != blocks.num_blocks or any(counts):
            raise GradingError(f"{name}: leaked blocks: after every request finished, some blocks are still off "
                               "the free list (or their reference count is not back to 0); release() must free "
                               "every block of a finished or preempted sequence")
    elif cache.num_free_slots != cache.num_slots:
        raise GradingError(f"{name}: leaked slots: after every request finished, part of the contiguous pool is "
                           "still reserved; release() must give a finished sequence's run back")


def _table_hint(got: int, need: int, cap: int, exact_fit: bool) -> str:
    if got >= cap > need:
        return ("your \"paged\" cache reserves blocks for the whole max_tokens cap at admission, like the "
                "contiguous one: a block table should hold only the blocks its tokens occupy so far")
    if exact_fit and abs(got - need) == 1:
        return (f"off-by-one at a block boundary: when a sequence's tokens exactly fill its last block, your table "
                f"holds one block {'more' if got > need else 'fewer'} than they need")
    if abs(got - need) == 1:
        return (f"off-by-one at a block boundary: one token past a full block, your table holds one block "
                f"{'more' if got > need else 'fewer'} than the tokens need")
    return "the block table's length does not follow the number of tokens (blocks = ceil(tokens / block_size))"


def check_block_tables(name: str, make_cache: Callable[[int, int], Any], block_size: int = 4,
                       num_blocks: int = 32) -> None:
    """Drive a learner's paged cache by hand: sequences whose prompts end just before, exactly at and just after
    a block boundary, grown token by token across several boundaries, then released. Checks table lengths,
    distinct blocks, the slot mapping and that everything is freed."""
    from stage5.engine.sequence import Request, Sequence

    cache = run_serving(name, make_cache, num_blocks, block_size)
    seqs = [Sequence(Request(900 + i, tuple(range(1, p + 1)), 3 * block_size)) for i, p in
            enumerate((block_size - 1, block_size, block_size + 1, 2 * block_size))]

    def check(seq: Sequence) -> None:
        n = len(seq.tokens)
        need = -(-n // block_size)
        table = list(seq.block_table)
        cap = -(-seq.request.max_len // block_size)
        if len(table) != need:
            raise GradingError(f"{name}: {_table_hint(len(table), need, cap, n % block_size == 0)}")
        import torch

        positions = torch.arange(n)
        slots = run_serving(name, cache.slots, seq, positions)
        want = torch.tensor(table)[positions // block_size] * block_size + positions % block_size
        if torch.as_tensor(slots).tolist() != want.tolist():
            raise GradingError(f"{name}: slots() does not map position p to block_table[p // block_size] * "
                               "block_size + p % block_size")

    for seq in seqs:
        run_serving(name, cache.admit, seq)
        check(seq)
    for _ in range(2 * block_size + 1):
        for seq in seqs:
            seq.tokens.append(7)
            if not run_serving(name, cache.can_grow, seq):
                raise GradingError(f"{name}: can_grow() says no while the pool has free blocks")
            run_serving(name, cache.grow, seq)
            check(seq)
    used = [b for s in seqs for b in s.block_table]
    if len(set(used)) != len(used):
        raise GradingError(f"{name}: two sequences were given the same block")
    for seq in seqs:
        run_serving(name, cache.release, seq)
        if seq.block_table:
            raise GradingError(f"{name}: release() must leave the sequence with an empty block table")
    check_no_leaks(name, cache)


def check_continuous(name: str, result: Any) -> None:
    """A continuous scheduler admits waiting sequences while others are still running."""
    trace = [set(ids) for _, ids in result.trace]
    joined_mid_batch = any(now - before and now & before for before, now in zip(trace, trace[1:], strict=False))
    if not joined_mid_batch:
        raise GradingError(f"{name}: your \"continuous\" scheduler still waits for the batch to finish: no "
                           "sequence ever joined while others were running; admit waiting requests every step "
                           "whenever the cache has room")


def check_metrics(name: str, got: Any, ref: Any, rel_tol: float = 0.1,
                  fields: Iterable[str] = ("tokens_per_step", "peak_running", "kv_utilization")) -> None:
    """The deterministic scheduling metrics of a learner's run against the reference engine's (never wall-clock).
    Messages name the metric and the direction, not the value."""
    hints = {
        "tokens_per_step": "fewer tokens per step than the reference: do finished sequences leave and waiting ones "
                           "join every step, up to max_batch?",
        "peak_running": "a different number of sequences ran at once: admit in order while the cache says yes "
                        "(and fewer than max_batch run)",
        "kv_utilization": "the share of reserved K/V slots actually holding tokens differs: reserve what the "
                          "cache design says (the whole cap for contiguous, only occupied blocks for paged)",
    }
    for field_name in fields:
        want = float(getattr(ref, field_name))
        value = _as_number(f"{name}: {field_name}", getattr(got, field_name, None))
        if not _close(value, want, rel_tol, 0.0):
            direction = "too high" if value > want else "too low"
            hint = hints.get(field_name, "")
            raise GradingError(f"{name}: {field_name} is {direction} (off by more than {rel_tol:.0%}): {hint}")
