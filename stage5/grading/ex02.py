"""Exercise 2 (a toy serving loop): the learner's caches and loops run in their kernel, the grader compares.

Kernel side, :func:`drive` runs one trusted probe on the learner's classes and functions (looked up by name) and
returns only observations as plain data: the starts a contiguous cache chose, the ids an allocator handed out,
block tables and slots step by step, or a whole run's trace (who ran in each step, each sequence's length, the
preemptions, the tokens, what was left in the pool). Grader side, the ``check_*`` functions compare those
observations with the rule or with :class:`stage5.engine.engine.Engine` on the same workload. Scheduling is
deterministic, so a run is compared exactly, step by step, and the first step that differs names the rule broken.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .checks import GradingError
from .remote import LocalKernel, kernel_of, register_probes  # noqa: F401 - re-exported

#: The reference engine and allocators, switched off while a learner's code runs (every method, so a learner's
#: class that subclasses one of them gains nothing either).
SERVING_BLOCKED: tuple[str, ...] = tuple(
    [f"stage5.engine.kv.{cls}.{m}" for cls in ("PagedAllocator", "ContiguousAllocator")
     for m in ("can_admit", "admit", "can_grow", "grow", "release", "slots", "reserved")]
    + [f"stage5.engine.kv.PagedAllocator.{m}" for m in ("allocate", "share", "free")]
    + ["stage5.engine.kv.ContiguousAllocator._first_fit"]
    + [f"stage5.engine.engine.Engine.{m}" for m in ("run", "_admit", "_make_room", "_forward")]
    # the one scheduler both engines share would do Part 3 for the learner
    + [f"stage5.engine.scheduler.Scheduler.{m}" for m in ("admit", "make_room", "preempt", "plan", "retire")])
# CPU seconds a learner's loop may use on one hidden workload (the reference needs well under one): CPU time, not
# wall-clock, so a loop graded on a busy machine gets the same budget as on a quiet one.
SERVING_CPU_SECONDS = 8.0


# ------------------------------------------------------------------------------------ kernel side
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


def requests_of(workload: list[list[Any]]) -> list[Any]:
    """A hidden workload from its plain-data description: ``["small", n, seed, max_tokens]`` (seeded requests,
    :func:`stage5.engine.workload.small_workload`) or ``["request", id, prompt, max_tokens, stop_after]``."""
    from stage5.engine.sequence import Request
    from stage5.engine.workload import small_workload

    out: list[Any] = []
    for item in workload:
        if item[0] == "small":
            out += small_workload(int(item[1]), seed=int(item[2]), max_tokens=int(item[3]))
        else:
            out.append(Request(int(item[1]), tuple(int(t) for t in item[2]), int(item[3]), item[4]))
    return out


def _ints(label: str, value: Any) -> list[int]:
    import torch

    try:
        return [int(v) for v in torch.as_tensor(value).reshape(-1).tolist()]
    except (TypeError, ValueError, RuntimeError):
        raise GradingError(f"{label}: slots() should return a 1-D tensor or a list of ints, got "
                           f"{type(value).__name__}") from None


def _pool(cache: Any) -> dict[str, Any]:
    """What is still taken in a cache after a run: free and total blocks (or slots), and whether any reference
    count is above 0 (a list, a dict or a Counter of counts: only the counts are read, never the keys)."""
    blocks = getattr(cache, "blocks", None)
    if blocks is None:
        return {"free": int(cache.num_free_slots), "total": int(cache.num_slots), "counted": False}
    counts = getattr(blocks, "ref_count", [])
    values = counts.values() if isinstance(counts, Mapping) else counts
    return {"free": int(blocks.num_free), "total": int(blocks.num_blocks), "counted": any(int(c) > 0 for c in values)}


def refusing(cls: Any, refusals: list[list[int]]) -> Any:
    """``cls`` (a paged cache class: the learner's, or the course's allocator for the reference run) whose
    ``can_grow`` says no at chosen moments, as if the memory were briefly taken elsewhere: for each ``[id, n]`` of
    ``refusals``, sequence ``id`` holding ``n`` tokens cannot grow until the loop releases a sequence. A refusal is
    in force from the first time the loop asks; each release ends the releasing sequence's own refusal (it no longer
    grows) and then the one in force longest (the memory given back goes to whoever waited first). Every other
    answer is ``cls``'s own, so a victim that fits again is admitted again in the same step. The answers follow
    what the loop does, not how often or how early it asks: a loop that asks every sequence before it preempts
    anyone gets the same schedule as one that asks each in turn."""

    class Refusing(cls):  # type: ignore[misc, valid-type]
        def can_grow(self, seq: Any) -> bool:
            key = (int(seq.id), len(seq.tokens))
            if key in self._refusals and key not in self._lifted:
                if key not in self._in_force:
                    self._in_force.append(key)
                return False
            return super().can_grow(seq)

        def release(self, seq: Any) -> None:
            for key in [k for k in self._in_force if k[0] == int(seq.id)]:
                self._in_force.remove(key)
                self._lifted.add(key)
            if self._in_force:
                self._lifted.add(self._in_force.pop(0))
            super().release(seq)

    Refusing.__name__, Refusing.__qualname__ = cls.__name__, cls.__qualname__  # messages name the learner's class
    Refusing._refusals = frozenset((int(i), int(n)) for i, n in refusals)

    def build(*args: Any) -> Any:
        cache = Refusing(*args)
        cache._in_force, cache._lifted = [], set()
        return cache
    return build


def _probe_contiguous(label: str, cls: Any) -> dict[str, Any]:
    import torch

    from stage5.engine.sequence import Request, Sequence

    cache = cls(40)
    seqs = [Sequence(Request(i, (1, 2, 3), 7)) for i in range(4)]
    for seq in seqs:
        cache.admit(seq)
    starts = [seq.start for seq in seqs]
    cache.release(seqs[1])
    cache.release(seqs[3])
    obs = {"starts": starts, "free": cache.num_free_slots, "fit11": cache.find_space(11),
           "fit10": cache.find_space(10), "slots": _ints(label, cache.slots(seqs[2], torch.tensor([0, 9]))),
           # positions that do not start at 0: a run from the middle, and one token that is not the newest
           "window": [_ints(label, cache.slots(seqs[2], torch.tensor(p))) for p in ([3, 4, 5], [6])]}
    # gaps of 15 slots (0..14) and 10 slots (25..34): first fit puts a 10-slot run at 0, best fit at 25
    cache = cls(50)
    seqs = [Sequence(Request(10 + i, (1, 2, 3), n - 3)) for i, n in enumerate((15, 10, 10, 15))]
    for seq in seqs:
        cache.admit(seq)
    cache.release(seqs[0])
    cache.release(seqs[2])
    late = Sequence(Request(20, (1, 2), 8))
    obs["first_fit"] = [cache.find_space(10), _outcome(lambda: cache.admit(late)), late.start]
    return obs


def _outcome(call: Callable[[], Any]) -> str:
    """'ok' or the name of the exception the call raised (probing that misuse is loud)."""
    try:
        call()
    except Exception as err:  # noqa: BLE001 - the exception's type is the observation
        return type(err).__name__
    return "ok"


def _probe_allocator(label: str, cls: Any) -> dict[str, Any]:
    alloc = cls(5)
    got = [int(alloc.allocate()) for _ in range(5)]
    obs: dict[str, Any] = {"got": got, "free_after_5": alloc.num_free, "empty": _outcome(alloc.allocate)}
    if sorted(got) != list(range(5)):
        return obs
    obs["share_free"] = _outcome(lambda: (alloc.free(got[4]), alloc.share(got[4])))
    obs["after_share_free"] = alloc.num_free
    alloc.share(got[2])
    alloc.share(got[2])
    alloc.free(got[2])
    alloc.free(got[2])
    obs["shared"] = [alloc.num_free, int(alloc.ref_count[got[2]])]
    alloc.free(got[2])
    for block in got[:2]:
        alloc.free(block)
    obs["freed"] = [alloc.num_free, [int(alloc.ref_count[b]) for b in got[:3]]]
    obs["double_free"] = _outcome(lambda: alloc.free(got[0]))
    obs["free_at_end"] = alloc.num_free
    return obs


def _probe_tables(label: str, cls: Any, num_blocks: int, block_size: int) -> dict[str, Any]:
    """Sequences whose prompts end just before, at and just after a block boundary, grown token by token across
    several boundaries, then released: their tables and slots after every change."""
    import torch

    from stage5.engine.sequence import Request, Sequence

    cache = cls(num_blocks, block_size)
    seqs = [Sequence(Request(900 + i, tuple(range(1, p + 1)), 3 * block_size)) for i, p in
            enumerate((block_size - 1, block_size, block_size + 1, 2 * block_size))]
    snapshots, refused = [], 0

    def snap(seq: Sequence) -> None:
        n = len(seq.tokens)
        snapshots.append([seq.id, n, [int(b) for b in seq.block_table],
                          _ints(label, cache.slots(seq, torch.arange(n)))])

    for seq in seqs:
        cache.admit(seq)
        snap(seq)
    for _ in range(2 * block_size + 1):
        for seq in seqs:
            seq.tokens.append(7)
            refused += not cache.can_grow(seq)
            cache.grow(seq)
            snap(seq)
    windows = []  # positions that do not start at 0: from the middle of the first block on, one token in the
    for seq in seqs:  # middle, one that is not the newest, and some out of order
        n = len(seq.tokens)
        for positions in (list(range(block_size - 1, n)), [1], [block_size], [n - 2, 0, block_size + 1]):
            windows.append([seq.id, n, positions, _ints(label, cache.slots(seq, torch.tensor(positions)))])
    for seq in seqs:
        cache.release(seq)
    return {"snapshots": snapshots, "windows": windows, "refused": refused, "emptied": all(not s.block_table for s in seqs),
            "pool": _pool(cache)}


def _probe_serving(label: str, func: Any, cls: Any, workload: list[list[Any]], allocator: str, num_blocks: int,
                   block_size: int, max_batch: int, continuous: bool | None, model_seed: int = 0,
                   stuck: bool = False, refusals: list[list[int]] | None = None) -> dict[str, Any]:
    """One run of the learner's loop on a hidden workload, as plain data (and, with ``stuck``, what the loop does
    with a request its pool can never hold: :func:`_probe_stuck`; with ``refusals``, through the learner's cache
    made to say no at chosen moments: :func:`refusing`)."""
    if stuck:
        return {**_probe_serving(label, func, cls, workload, allocator, num_blocks, block_size, max_batch,
                                 continuous, model_seed, refusals=refusals),
                "stuck": _probe_stuck(label, func, cls, allocator, continuous)}
    from stage5.engine.checkpoints import tiny_model
    from stage5.loop_kit import Meter

    model = tiny_model(model_seed)
    requests = requests_of(workload)
    if refusals:
        if not isinstance(cls, type):
            raise GradingError(f"{label}: the cache should be the class the skeleton defines, not a "
                               f"{type(cls).__name__}: this check extends your class so that can_grow says no at "
                               "chosen moments")
        cls = refusing(cls, refusals)
    cache = cls(num_blocks * block_size) if allocator == "contiguous" else cls(num_blocks, block_size)
    kwargs = {} if continuous is None else {"continuous": continuous}
    Meter.last = None
    try:
        with _time_limit(label, SERVING_CPU_SECONDS):
            result = func(model, requests, cache, max_batch=max_batch, **kwargs)
    except Exception as err:  # noqa: BLE001 - the learner's own exception: where it happened is the observation
        meter = Meter.last
        if isinstance(err, GradingError) or meter is None or type(err).__name__ in (
                "UnavailableError", "NotImplementedError"):
            raise
        # the steps before the crash, so the grader can name the first rule the run broke
        return {"crashed": f"{type(err).__name__}: {err}"[:300],
                "trace": [[kind, [int(i) for i in ids]] for kind, ids in meter.trace],
                "lengths": [list(x) for x in meter.lengths], "preempted_by": [int(n) for n in meter.preempted_by]}
    meter = Meter.last
    outputs = getattr(result, "outputs", None)
    if not isinstance(outputs, Mapping) or meter is None:
        raise GradingError(f"{label}: expected the RunResult that meter.result(requests) returns")
    return {"outputs": {str(k): [int(t) for t in v] for k, v in outputs.items()},
            "trace": [[kind, [int(i) for i in ids]] for kind, ids in result.trace],
            "lengths": [list(x) for x in meter.lengths], "preemptions": int(result.preemptions),
            "preempted_by": [int(n) for n in meter.preempted_by],
            "kv_utilization": float(result.kv_utilization), "pool": _pool(cache),
            "num_slots": int(getattr(cache, "num_slots", num_blocks * block_size))}


#: CPU seconds a loop may spin on a request that can never be admitted before it counts as stuck.
STUCK_CPU_SECONDS = 2.0


def _probe_stuck(label: str, func: Any, cls: Any, allocator: str, continuous: bool | None) -> str:
    """The learner's loop given a request its pool can never hold (after one it can): the name of the exception it
    raised, 'ok' if it returned, 'spins' if it was still going after STUCK_CPU_SECONDS of CPU time."""
    from stage5.engine.checkpoints import tiny_model
    from stage5.engine.sequence import Request

    model = tiny_model(0)
    # 4 blocks of 4 slots (16): request 1's prompt alone needs 5 blocks, 20 slots
    cache = cls(16) if allocator == "contiguous" else cls(4, 4)
    requests = [Request(0, (1, 2, 3), 2, 2), Request(1, tuple(range(1, 21)), 2, 2)]
    kwargs = {} if continuous is None else {"continuous": continuous}
    try:
        with _time_limit(label, STUCK_CPU_SECONDS):
            func(model, requests, cache, max_batch=4, **kwargs)
    except GradingError:
        return "spins"
    except Exception as err:  # noqa: BLE001 - the exception's type is the observation
        if type(err).__name__ in ("UnavailableError", "NotImplementedError"):
            raise  # the reference was borrowed, or nothing is written yet: reported as such
        return type(err).__name__
    return "ok"


DRIVERS: dict[str, Callable[..., Any]] = {"contiguous": _probe_contiguous, "allocator": _probe_allocator,
                                          "tables": _probe_tables, "serving": _probe_serving, "stuck": _probe_stuck}


def drive(driver: str, label: str, objects: list[Any], spec: Mapping[str, Any]) -> Any:
    """Run one probe (kernel side); the caller switches the reference off and turns crashes into failures."""
    return DRIVERS[driver](label, *objects, **spec)


# ------------------------------------------------------------------------------------ grader side
def check_contiguous(label: str, kernel: Any) -> None:
    obs = kernel.drive(label, "contiguous", ["ContiguousCache"], {})
    if obs["starts"] != [0, 10, 20, 30]:
        raise GradingError(f"{label}: each run must hold prompt + max_tokens slots, placed first fit (at the lowest "
                           "free slot where it fits)")
    if obs["free"] != 20 or obs["fit11"] is not None:
        raise GradingError(f"{label}: with two separate 10-slot gaps, no run of 11 fits (that is external "
                           "fragmentation); find_space must look for one unbroken gap")
    if obs["fit10"] != 10:
        raise GradingError(f"{label}: find_space must return the lowest gap that is long enough")
    if obs["slots"] != [20, 29]:
        raise GradingError(f"{label}: slots() must add the position to the run's first slot")
    if obs["window"] != [[23, 24, 25], [26]]:
        raise GradingError(f"{label}: slots(seq, positions) for positions that do not start at 0 (3, 4, 5 of a run "
                           "starting at slot 20, then 6 alone) must give seq.start + each position asked, in order: "
                           "not the first slots of the run, and not the newest token's")
    if obs["first_fit"] != [0, "ok", 0]:
        raise GradingError(f"{label}: with a 15-slot gap at slot 0 and a 10-slot gap further on, a 10-slot run goes "
                           "at 0: first fit takes the lowest gap that is long enough, not the tightest (best fit)")


def check_allocator(label: str, kernel: Any) -> None:
    obs = kernel.drive(label, "allocator", ["BlockAllocator"], {})
    if sorted(obs["got"]) != list(range(5)) or obs["free_after_5"] != 0:
        raise GradingError(f"{label}: five allocations from five blocks must hand out each block once")
    if obs["empty"] != "RuntimeError":
        raise GradingError(f"{label}: allocate() on an empty free list should raise RuntimeError, "
                           + ("but it returned" if obs["empty"] == "ok" else f"not {obs['empty']}"))
    if obs["share_free"] != "ValueError" or obs["after_share_free"] != 1:
        raise GradingError(f"{label}: share() of a block that is free (count 0) should raise ValueError and leave the "
                           "block on the free list: only a block in use can gain an owner"
                           + ("" if obs["share_free"] in ("ok", "ValueError") else f" (it raised {obs['share_free']})"))
    if obs["shared"][0] != 1:
        raise GradingError(f"{label}: a block with three owners (allocate, then share twice) must stay in use until "
                           "the third free(): after two of them it is still off the free list")
    if obs["shared"][1] != 1:
        raise GradingError(f"{label}: the block stays in use as it should, but ref_count[block] should count its "
                           "owners: 1 after allocate(), one more per share(), one fewer per free() (here 1 owner "
                           "is left)")
    if obs["freed"][0] != 4:
        raise GradingError(f"{label}: a block whose last owner frees it must go back on the free list")
    if obs["freed"][1] != [0, 0, 0]:
        raise GradingError(f"{label}: a free block has a count of 0 (ref_count counts its owners)")
    if obs["double_free"] != "ValueError":
        raise GradingError(f"{label}: freeing a block that is already free should raise ValueError (a double free)"
                           + ("" if obs["double_free"] == "ok" else f", not {obs['double_free']}"))
    if obs["free_at_end"] != 4:
        raise GradingError(f"{label}: a double free must not put a block on the free list twice")


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


def _leak_message(label: str, pool: Mapping[str, Any]) -> str | None:
    if pool["free"] != pool["total"]:
        return (f"{label}: leaked blocks: after every request finished, part of the pool is still taken; release() "
                "must give back every block (or the run) of a finished or preempted sequence")
    if pool["counted"]:
        return (f"{label}: every block is back on the free list but some reference count is still above 0: free() "
                "must count each owner down")
    return None


def check_block_tables(label: str, kernel: Any, block_size: int = 4, num_blocks: int = 32) -> None:
    obs = kernel.drive(label, "tables", ["PagedCache"], {"num_blocks": num_blocks, "block_size": block_size})
    cap_tokens = {900 + i: p + 3 * block_size for i, p in
                  enumerate((block_size - 1, block_size, block_size + 1, 2 * block_size))}
    for seq_id, n, table, slots in obs["snapshots"]:
        need = -(-n // block_size)
        if len(table) != need:
            raise GradingError(f"{label}: {_table_hint(len(table), need, -(-cap_tokens[seq_id] // block_size), n % block_size == 0)}")
        want = [table[p // block_size] * block_size + p % block_size for p in range(n)]
        if slots != want:
            raise GradingError(f"{label}: slots() does not follow the block table: block_table[i] holds the tokens "
                               "i*B .. (i+1)*B - 1 in order, and block b owns the slots b*B .. b*B + B - 1 "
                               "(B = block_size)")
    for seq_id, n, positions, slots in obs["windows"]:
        table = next(t for i, _, t, _ in reversed(obs["snapshots"]) if i == seq_id)
        want = [table[p // block_size] * block_size + p % block_size for p in positions]
        if slots != want:
            shown = ", ".join(map(str, positions[:3])) + (", ..." if len(positions) > 3 else "")
            raise GradingError(f"{label}: slots(seq, positions) for positions that do not start at 0 (here "
                               f"{shown} of a sequence of {n} tokens, blocks of {block_size}) must follow the block "
                               "table for each position asked, in the order asked: position p is slot "
                               "block_table[p // B] * B + p % B, whether it is the newest token or not")
    final: dict[int, list[int]] = {}
    for seq_id, _, table, _ in obs["snapshots"]:
        final[seq_id] = table
    used = [b for t in final.values() for b in t]
    if len(set(used)) != len(used):
        raise GradingError(f"{label}: two sequences were given the same block")
    if obs["refused"]:
        raise GradingError(f"{label}: can_grow() said no while the pool had free blocks")
    if not obs["emptied"]:
        raise GradingError(f"{label}: release() must leave the sequence with an empty block table")
    leak = _leak_message(label, obs["pool"])
    if leak:
        raise GradingError(leak)


# --- comparing a run with the reference, step by step
_REFERENCE_RUNS: dict[tuple[Any, ...], Any] = {}
_MODELS: dict[int, Any] = {}


def reference_trace(workload: list[list[Any]], allocator: str, scheduler: str, num_blocks: int, block_size: int,
                    max_batch: int, model_seed: int = 0, refusals: list[list[int]] | None = None) -> Any:
    """The course engine's run for a workload (its :class:`RunResult`, or for a visible check's workload the run
    shipped with the release, :mod:`.ex02_visible`), cached per workload and build in this process (a class's
    submissions share the same reference runs). ``refusals``: through the engine's own paged allocator made to say
    no at the same moments as the learner's cache (:func:`refusing`)."""
    from .blocking import UnavailableError
    from .ex02_visible import is_shipped, shipped_run

    args = (workload, allocator, scheduler, num_blocks, block_size, max_batch, model_seed, refusals)
    key = (repr(workload), allocator, scheduler, num_blocks, block_size, max_batch, model_seed, repr(refusals))
    if key not in _REFERENCE_RUNS:
        if is_shipped(*args):
            from stage5.engine.checkpoints import tiny_model
            from stage5.engine.model import generate

            model = _MODELS.setdefault(model_seed, tiny_model(model_seed))
            # the engine's tokens equal generate() serving each request alone (tests/test_engine.py)
            run = shipped_run({r.id: generate(model, list(r.prompt), r.output_len) for r in requests_of(workload)},
                              *args)
        else:
            try:
                run = engine_run(*args)
            except UnavailableError:  # a grading kernel's course package has no engine (.view)
                raise GradingError("check_schedule: the course engine is not in the grading kernel, and this "
                                   "workload is not one of the release's own checks: only those run while the "
                                   "exercise is graded") from None
        _REFERENCE_RUNS[key] = run
    return _REFERENCE_RUNS[key]


def engine_run(workload: list[list[Any]], allocator: str, scheduler: str, num_blocks: int, block_size: int,
               max_batch: int, model_seed: int = 0, refusals: list[list[int]] | None = None) -> Any:
    """The course engine's :class:`RunResult` for a workload, run now (see :func:`reference_trace`)."""
    from stage5.engine.checkpoints import tiny_model
    from stage5.engine.engine import Engine
    from stage5.engine.kv import PagedAllocator
    from stage5.engine.scheduler import Scheduler

    model = _MODELS.setdefault(model_seed, tiny_model(model_seed))
    engine = Engine(model, model.cfg, allocator, scheduler, num_blocks=num_blocks, block_size=block_size,
                    max_batch=max_batch)
    if refusals:
        if allocator != "paged":
            raise ValueError("refusals are for a paged cache (a contiguous one always has room to grow)")
        engine.alloc = refusing(PagedAllocator, refusals)(num_blocks, block_size)
        engine.scheduler = Scheduler(engine.alloc, max_batch, static=scheduler == "static")
    return engine.run(requests_of(workload))


def _events(trace: list[tuple[str, list[int]]]) -> tuple[list[set[int]], list[set[int]], list[set[int]]]:
    """Per step: who joined, who left finished and who left preempted (a sequence's last exit is its finish)."""
    last = {}
    for t, (_, ids) in enumerate(trace):
        for i in ids:
            last[i] = t
    joined, finished, preempted = [], [], []
    for t, (_, ids) in enumerate(trace):
        before = set(trace[t - 1][1]) if t else set()
        now = set(ids)
        joined.append(now - before)
        left = before - now
        finished.append({i for i in left if last[i] == t - 1})
        preempted.append(left - finished[-1])
    return joined, finished, preempted


def _reference_lengths(ref: Any, requests: list[Any]) -> list[list[int]]:
    prompt = {r.id: len(r.prompt) for r in requests}
    produced: dict[int, int] = {}
    out = []
    for _, ids in ref.trace:
        out.append([prompt[i] + produced.get(i, 0) for i in ids])
        for i in ids:
            produced[i] = produced.get(i, 0) + 1
    return out


def _per_step(cumulative: list[int]) -> list[int]:
    return [n - (cumulative[i - 1] if i else 0) for i, n in enumerate(cumulative)]


def _readmission_hint(got: Mapping[str, Any], ref: Any, t: int) -> str | None:
    """Step ``t`` of the reference preempted and readmitted a victim in the same step (which shows in the trace
    only as a prefill step): why the learner's step differs, or None if it is not that."""
    log = getattr(ref, "steps_log", None)
    if not log or t >= len(log) or t >= len(got["trace"]) or "preempted_by" not in got:
        return None
    before = list(log[t - 1].ids) if t else []
    back = [i for i in log[t].admitted if i in before]  # victims of this very step, admitted again
    if not back:
        return None
    step, names = f"step {t + 1}", ", ".join(map(str, back))
    r_pre, g_pre = _per_step([r.preemptions for r in log])[t], _per_step(got["preempted_by"])[t]
    kind, ids = got["trace"][t][0], list(got["trace"][t][1])
    if g_pre != r_pre:
        return None  # the preemptions themselves differ: the general hints name that
    if set(ids) == set(log[t].ids) and ids != list(log[t].ids):
        kept = [i for i in before if i not in back]  # the survivors keep their order; the readmitted follow them
        if ids[:len(kept)] != kept:
            return (f"{step}: you preempted a different sequence than the rule says (it came back in the same step, "
                    "at the end of the batch): the victim is the newest running sequence, the one admitted last; "
                    "request ids are labels, not ages")
        return (f"{step}: the victims of this step came back in the wrong order: each victim goes to the front of the "
                "queue as it is preempted, so the oldest of them leads and is admitted again first")
    if set(ids) == set(log[t].ids) and kind != log[t].kind:
        return (f"{step}: sequence {names} was preempted and admitted again in this same step, so the step "
                "admitted someone: meter.step's `admitted` is true in every step that admitted anyone, a victim "
                "readmitted in its own step included (its whole history is recomputed in a prefill), even when the "
                "batch is no larger than before")
    if set(ids) - set(log[t].ids) and not set(back) <= set(ids):
        return (f"{step}: a newer request was admitted while sequence {names}, preempted in this very step, was "
                "waiting: a victim goes back to the front of the queue, so nothing overtakes it")
    if not set(back) & set(ids) and not set(ids) - set(log[t].ids):
        return (f"{step}: sequence {names} was preempted in this step and then fit again (can_admit said yes), but "
                "your loop did not admit it: admission comes after making room in every step, and a victim of this "
                "very step is admitted again like any other head of the queue")
    return None


def _schedule_hint(got: Mapping[str, Any], ref: Any, requests: list[Any], t: int, block_size: int,
                   allocator: str) -> str:
    """Why step ``t`` (0-based) of the learner's run differs from the reference's."""
    readmitted = _readmission_hint(got, ref, t)
    if readmitted:
        return readmitted
    gtrace = [(k, list(ids)) for k, ids in got["trace"]]
    rtrace = [(k, list(ids)) for k, ids in ref.trace]
    g_join, _, g_pre = _events(gtrace)
    r_join, _, r_pre = _events(rtrace)
    step = f"step {t + 1}"
    before = gtrace[t - 1][1] if t else []
    lengths = got["lengths"]
    longest: dict[int, int] = {}
    for (_, ids), lens in zip(gtrace, lengths, strict=False):
        for i, n in zip(ids, lens, strict=False):
            if n < longest.get(i, 0):
                return (f"sequence {i} came back shorter than it was: a preempted sequence keeps the tokens it has "
                        "produced (it is not restarted from scratch); readmitted, its whole history is recomputed in "
                        "one prefill")
            longest[i] = n
    if t < len(gtrace) and t < len(rtrace):
        if g_pre[t] and r_pre[t] and g_pre[t] != r_pre[t]:
            order = [i for i in before if i not in (g_pre[t] | r_pre[t])]
            if min(before.index(i) for i in g_pre[t]) < min(before.index(i) for i in r_pre[t]) or not order:
                ids_note = (" (request ids are labels, not ages: the highest id is not the newest)"
                            if max(g_pre[t]) == max(before) != max(r_pre[t]) else "")
                return (f"{step}: you preempted an older sequence than the rule says: the victim is the newest running "
                        f"sequence (the last one admitted), so the oldest keep their place{ids_note}")
            return f"{step}: a different sequence was preempted: the victim is the newest running sequence"
        if g_pre[t] and not r_pre[t]:
            growing = [n for i, n in zip(before, lengths[t - 1], strict=False) if i not in g_pre[t]]
            if allocator == "paged" and not any(n % block_size == 0 for n in growing + list(lengths[t - 1])):
                return (f"{step}: you preempted although no running sequence needed a new block: a sequence needs "
                        "a free block only when its tokens fill its table (can_grow), not whenever the pool is empty")
            return (f"{step}: you preempted where the reference had room: preempt only when a running sequence "
                    "cannot grow")
        if r_pre[t] and not g_pre[t]:
            return (f"{step}: the pool ran dry here but nothing was preempted: when a running sequence cannot grow, "
                    "preempt the newest running one and call meter.preempted()")
        if g_join[t] != r_join[t]:
            # victims preempted before this step (the runs agree until now) and not running since
            victims: set[int] = set()
            for s in range(t + 1):
                victims |= r_pre[s]
                if s < t:
                    victims -= r_join[s]
            overtook = g_join[t] - r_join[t] - victims
            if overtook and (victims - g_join[t]):
                return (f"{step}: a newer request was admitted while a preempted sequence was still waiting: the "
                        "victim goes back to the front of the queue, so nothing overtakes it")
            if len(g_join[t]) < len(r_join[t]):
                if len(g_join[t]) == 1:
                    return (f"{step}: you admitted one waiting request where more fit: admit in order while fewer "
                            "than max_batch run and the cache can admit the next one")
                return (f"{step}: you admitted fewer waiting requests than fit: admit in order while fewer than "
                        "max_batch run and the cache can admit the next one")
            if len(g_join[t]) > len(r_join[t]):
                return (f"{step}: you admitted more requests than fit: the cache must keep room for what the "
                        "running sequences need next (can_admit)")
            return f"{step}: you admitted different requests: admit oldest first, in the order of the queue"
        if gtrace[t][1] != rtrace[t][1]:
            ids_note = (": a readmitted sequence joins the end, like any admission, whatever its id (request ids are "
                        "labels, not ages)" if gtrace[t][1] == sorted(gtrace[t][1]) else "")
            return (f"{step}: the batch is in a different order: keep `running` in the order sequences were "
                    f"admitted{ids_note}")
        if gtrace[t][0] != rtrace[t][0]:
            return (f"{step}: meter.step's `admitted` flag is wrong: it is true exactly in the steps that admitted "
                    "someone")
    ref_lengths = _reference_lengths(ref, requests)
    if t < len(lengths) and t < len(ref_lengths) and lengths[t] != ref_lengths[t]:
        shorter = [i for i, (a, b) in enumerate(zip(lengths[t], ref_lengths[t], strict=False)) if a < b]
        if shorter:
            return (f"{step}: a preempted sequence restarted from scratch: it keeps the tokens it has produced, and "
                    "when it is readmitted its whole history is recomputed in one prefill")
        return f"{step}: a sequence holds a different number of tokens than it should"
    if len(gtrace) != len(rtrace):
        return (f"your run took {'more' if len(gtrace) > len(rtrace) else 'fewer'} steps than the reference's: "
                "check when sequences join, leave and are preempted")
    return "the schedule differs from the reference's"


#: The rule a learner's own exception most likely means, by a phrase of its message (the solution's own wording,
#: and the allocator's); the step and the first rule the run broke before it come first.
CRASH_RULES: tuple[tuple[str, str], ...] = (
    ("no free block", "grow() or admit() took a block the pool did not have: call grow(seq) only when "
                      "can_grow(seq) is true (else preempt the newest running sequence first), and admit only what "
                      "can_admit(head, len(running)) allows"),
    ("already free", "a block was freed twice: a sequence gives its memory back once, when it finishes or is "
                     "preempted (release() leaves its table empty)"),
    ("nothing running", "your loop found nothing running and nothing admissible while the reference still had work: "
                        "check that finished and preempted sequences give their memory back and that victims go back "
                        "to the waiting queue"),
)


def _crash_hint(got: Mapping[str, Any], ref: Any, requests: list[Any], block_size: int, allocator: str) -> str:
    """The learner's loop raised: name the first step whose schedule already broke a rule, else the step where it
    raised and the rule its exception most likely means."""
    crash = got["crashed"]
    gtrace = [(k, list(ids)) for k, ids in got["trace"]]
    rtrace = [(k, list(ids)) for k, ids in ref.trace]
    ref_lengths = _reference_lengths(ref, requests)
    diff = next((t for t in range(len(gtrace))
                 if t >= len(rtrace) or gtrace[t] != rtrace[t] or got["lengths"][t] != ref_lengths[t]), None)
    if diff is not None:
        return f"{_schedule_hint(got, ref, requests, diff, block_size, allocator)} (your loop then raised {crash})"
    rule = next((text for phrase, text in CRASH_RULES if phrase in crash.lower()), None)
    where = f"in step {len(gtrace) + 1}, after {len(gtrace)} steps that follow the rules"
    if rule is None:
        return f"your loop raised {crash} {where}"
    return f"your loop raised {crash} {where}: {rule}"


def check_serving(label: str, kernel: Any, function: str, cache: str, workload: list[list[Any]], allocator: str,
                  num_blocks: int, block_size: int, max_batch: int, continuous: bool | None,
                  stuck: bool = False, refusals: list[list[int]] | None = None,
                  model_seed: int = 0) -> dict[str, Any]:
    """Run the learner's loop ``function`` with their ``cache`` class on a hidden workload, in their kernel, and
    compare the run with the reference engine's exactly: tokens, pool left empty, who ran in every step, every
    sequence's length, preemptions and K/V utilisation. ``refusals``: the cache says no to ``can_grow`` at those
    moments (:func:`refusing`), on both sides. ``model_seed``: the tiny model the loop is given (not the notebook's
    ``model`` unless 0: a loop that ignores its ``model`` argument gives other tokens). Returns the learner's
    observations."""
    spec = {"workload": workload, "allocator": allocator, "num_blocks": num_blocks, "block_size": block_size,
            "max_batch": max_batch, "continuous": continuous, "stuck": stuck}
    if refusals:
        spec["refusals"] = refusals
    if model_seed:
        spec["model_seed"] = model_seed
    got = kernel.drive(label, "serving", [function, cache], spec)
    scheduler = "static" if not continuous else "continuous"
    ref = reference_trace(workload, allocator, scheduler, num_blocks, block_size, max_batch, model_seed=model_seed,
                          refusals=refusals)
    requests = requests_of(workload)
    if "crashed" in got:
        raise GradingError(f"{label}: {_crash_hint(got, ref, requests, block_size, allocator)}")
    for r in requests:
        tokens = got["outputs"].get(str(r.id))
        if tokens is None:
            raise GradingError(f"{label}: request {r.id} has no output: every request must finish "
                               "(meter.finished(seq))")
        want = ref.outputs[r.id]  # the engine's tokens equal generate() alone (tests/test_engine.py)
        if tokens != want:
            if len(tokens) != len(want):
                raise GradingError(f"{label}: request {r.id} produced the wrong number of tokens: stop a sequence as "
                                   "soon as seq.finished is true, and not before")
            first = next(i for i, (a, b) in enumerate(zip(tokens, want, strict=False)) if a != b)
            raise GradingError(f"{label}: request {r.id}'s tokens differ from generating it alone, from new token "
                               f"{first} on: some K/V was written to or read from the wrong slot (check slots() at a "
                               "block boundary, and that a preempted sequence restarts with num_cached = 0)")
    if got["num_slots"] != num_blocks * block_size:
        raise GradingError(f"{label}: your cache holds {got['num_slots']} slots, "
                           f"{'more' if got['num_slots'] > num_blocks * block_size else 'fewer'} than the pool it was "
                           f"given ({num_blocks} x {block_size}): size it from its arguments")
    leak = _leak_message(label, got["pool"])
    if leak:
        raise GradingError(leak)
    gtrace = [(k, list(ids)) for k, ids in got["trace"]]
    rtrace = [(k, list(ids)) for k, ids in ref.trace]
    ref_lengths = _reference_lengths(ref, requests)
    diff = next((t for t in range(max(len(gtrace), len(rtrace)))
                 if t >= len(gtrace) or t >= len(rtrace) or gtrace[t] != rtrace[t]
                 or got["lengths"][t] != ref_lengths[t]), None)
    if diff is not None:
        raise GradingError(f"{label}: {_schedule_hint(got, ref, requests, diff, block_size, allocator)}")
    log = getattr(ref, "steps_log", None)
    if log and got.get("preempted_by") and len(got["preempted_by"]) == len(log):
        mine, rules = _per_step(got["preempted_by"]), _per_step([r.preemptions for r in log])
        t = next((i for i, (a, b) in enumerate(zip(mine, rules, strict=True)) if a != b), None)
        if t is not None and refusals:
            raise GradingError(f"{label}: step {t + 1}: meter.preempted() was called {mine[t]} time(s) where the rules "
                               f"preempt {rules[t]} (a victim that fits again comes back in the same step, so only "
                               "the count shows it): make room oldest first, preempt the newest running sequence only "
                               "while the one asking cannot grow, and count each victim once")
    if got["preemptions"] != ref.preemptions:
        raise GradingError(f"{label}: the schedule is right but meter.preempted() was called "
                           f"{'too often' if got['preemptions'] > ref.preemptions else 'too rarely'}: once per "
                           "preempted sequence")
    if abs(got["kv_utilization"] - ref.kv_utilization) > 1e-9:
        raise GradingError(f"{label}: the schedule matches the reference's but K/V utilisation is "
                           f"{'higher' if got['kv_utilization'] > ref.kv_utilization else 'lower'}: call meter.step "
                           "after forward_step (it reads num_cached), and let reserved() count what the cache holds "
                           "for the sequence")
    if stuck:
        _stuck_verdict(label, got.get("stuck"))
    return got


def check_stuck(label: str, kernel: Any, function: str, cache: str, allocator: str,
                continuous: bool | None = None) -> None:
    """Nothing running and nothing admissible is an error: the loop ``function`` given a request its pool can never
    hold must raise RuntimeError, not spin, return or fail some other way. (``check_serving(..., stuck=True)``
    checks the same in the drive of a serving run.)"""
    spec = {"allocator": allocator, "continuous": continuous}
    _stuck_verdict(label, kernel.drive(label, "stuck", [function, cache], spec))


def _stuck_verdict(label: str, got: Any) -> None:
    if got == "RuntimeError":
        return
    what = {"spins": f"was still looping after {STUCK_CPU_SECONDS:g} s of CPU time",
            "ok": "returned"}.get(got, f"raised {got}")
    raise GradingError(f"{label}: given a request whose prompt alone needs more memory than the whole pool, your loop "
                       f"{what}: when nothing is running and the head of the queue cannot be admitted, raise "
                       "RuntimeError (the rule \"nothing running and nothing admissible is an error\")")


def check_continuous(label: str, got: Mapping[str, Any]) -> None:
    """A continuous scheduler admits waiting sequences while others are still running."""
    trace = [set(ids) for _, ids in got["trace"]]
    if not any(now - before and now & before for before, now in zip(trace, trace[1:], strict=False)):
        raise GradingError(f"{label}: your \"continuous\" scheduler still waits for the batch to finish: no "
                           "sequence ever joined while others were running; admit waiting requests every step "
                           "whenever the cache has room")


def check_results(label: str, results: Any, workload: list[list[Any]], num_blocks: int, block_size: int,
                  max_batch: int) -> None:
    """The learner's own 2 x 2 table (``results[(cache, scheduler)]``, RunResults) against the reference runs:
    each build's schedule exactly; the message names the build and the direction of the difference."""
    if not isinstance(results, Mapping):
        raise GradingError(f"{label}: results should be a dict of RunResults")
    for cache in ("contiguous", "paged"):
        for scheduler in ("static", "continuous"):
            got = results.get((cache, scheduler))
            ref = reference_trace(workload, cache, scheduler, num_blocks, block_size, max_batch)
            trace = getattr(got, "trace", None)
            if got is None:
                raise GradingError(f"{label}: results has no ({cache!r}, {scheduler!r}) entry: if the measurement cell "
                                   "stopped with an error, that error is the cause (fix it and run the cell again); "
                                   "else store each build's RunResult under its (cache, scheduler) key")
            if trace is None:
                raise GradingError(f"{label}: results[({cache!r}, {scheduler!r})] should be the RunResult of serve()")
            if [(k, list(ids)) for k, ids in trace] != [(k, list(ids)) for k, ids in ref.trace]:
                more = len(trace) > len(ref.trace)
                build = (f"ContiguousCache(NUM_BLOCKS * BLOCK_SIZE) = ContiguousCache({num_blocks * block_size})"
                         if cache == "contiguous" else
                         f"PagedCache(NUM_BLOCKS, BLOCK_SIZE) = PagedCache({num_blocks}, {block_size}) (blocks of "
                         f"{block_size} slots)")
                raise GradingError(f"{label}: your {cache}/{scheduler} run does not follow that build's schedule (it "
                                   f"took {'more' if more else 'fewer or as many'} steps than it should): serve "
                                   f"WORKLOAD with {build}, continuous={scheduler == 'continuous'} and "
                                   f"max_batch=MAX_BATCH = {max_batch}")


# --- attention through the block table
#: The reference attention backend, switched off while the learner's own is probed.
ATTENTION_BLOCKED: tuple[str, ...] = SERVING_BLOCKED + tuple(
    f"stage5.engine.kv.KVPool.{m}" for m in ("plan", "attend", "_group"))

#: The hidden attention steps: shapes where every plausible wrong head mapping gives another answer (6 query heads
#: over 3 or 2 key-value heads, 12 over 3: ``h // kv_heads`` and ``h % kv_heads`` both differ from
#: ``h // (heads // kv_heads)``), several step shapes (sequences of (cached, new) tokens), slots scattered at random
#: or laid out in blocks of several sizes, float64 and float32.
ATTENTION_CASES: tuple[dict[str, Any], ...] = (
    {"seed": 1, "heads": 6, "kv_heads": 3, "head_dim": 8, "block_size": 0, "dtype": "float64",
     "steps": [[0, 9], [12, 1], [5, 3], [1, 1]]},
    {"seed": 2, "heads": 6, "kv_heads": 2, "head_dim": 4, "block_size": 2, "dtype": "float64",
     "steps": [[2, 1], [0, 3], [9, 1]]},
    {"seed": 3, "heads": 12, "kv_heads": 3, "head_dim": 8, "block_size": 16, "dtype": "float32",
     "steps": [[0, 17], [20, 1], [3, 4]]},
)


def _attention_config(case: Mapping[str, Any]) -> Any:
    from stage5.models import ModelConfig

    return ModelConfig(name="attention-probe", vocab_size=16, hidden_size=case["heads"] * case["head_dim"],
                       num_layers=2, num_heads=case["heads"], num_kv_heads=case["kv_heads"],
                       head_dim=case["head_dim"], intermediate_size=8)


def _attention_case(case: Mapping[str, Any]) -> tuple[Any, ...]:
    """One step of ``case``: (pool size, cached slots and their K/V, new slots, context slots, q, k, v). Each
    sequence's slots are scattered over the pool at random, or come from the blocks of a random block table."""
    import torch

    g = torch.Generator().manual_seed(int(case["seed"]))
    dtype = getattr(torch, case["dtype"])
    bs = int(case["block_size"])
    lengths = [c + n for c, n in case["steps"]]
    if bs:
        blocks = [-(-n // bs) for n in lengths]
        num_slots = (sum(blocks) + 3) * bs
        order = torch.randperm(num_slots // bs, generator=g).tolist()
        slots, used = [], 0
        for n, b in zip(lengths, blocks, strict=True):
            table = order[used:used + b]
            used += b
            slots.append(torch.tensor([table[p // bs] * bs + p % bs for p in range(n)], dtype=torch.long))
    else:
        num_slots = sum(lengths) + 7
        perm = torch.randperm(num_slots, generator=g)
        starts = [sum(lengths[:i]) for i in range(len(lengths))]
        slots = [perm[s:s + n] for s, n in zip(starts, lengths, strict=True)]
    cached = [s[:c] for s, (c, _) in zip(slots, case["steps"], strict=True)]
    new = [s[c:] for s, (c, _) in zip(slots, case["steps"], strict=True)]
    old = torch.cat(cached)
    h, kv, d = int(case["heads"]), int(case["kv_heads"]), int(case["head_dim"])
    old_kv = torch.randn(2, len(old), kv, d, generator=g, dtype=torch.float64).to(dtype)
    n = sum(len(x) for x in new)
    q = torch.randn(n, h, d, generator=g, dtype=torch.float64).to(dtype)
    k, v = (torch.randn(n, kv, d, generator=g, dtype=torch.float64).to(dtype) for _ in range(2))
    return num_slots, old, old_kv, new, slots, q, k, v


def _probe_attention(label: str, cls: Any, case: Mapping[str, Any]) -> dict[str, Any]:
    """The learner's ``PagedKV`` on one hidden step, then on each of its sequences alone (a fresh store each)."""
    import torch

    cfg = _attention_config(case)
    num_slots, old, old_kv, new, context, q, k, v = _attention_case(case)
    dtype = getattr(torch, case["dtype"])

    def run(news: list[Any], contexts: list[Any], rows: slice) -> tuple[Any, bool]:
        store = cls(cfg, num_slots, dtype)
        store.data[1, :, old] = old_kv
        store.plan(news, contexts)
        # copies: attend may change its inputs in place (the text allows it), and q, k, v are read again below
        out = store.attend(1, q[rows].clone(), k[rows].clone(), v[rows].clone())
        written = torch.cat(news)
        stored = bool(torch.equal(store.data[1, 0, written], k[rows]) and torch.equal(store.data[1, 1, written], v[rows]))
        return out, stored

    out, stored = run(new, context, slice(None))
    alone, start = [], 0
    for nw, ctx in zip(new, context, strict=True):
        one, _ = run([nw], [ctx], slice(start, start + len(nw)))
        alone.append(torch.as_tensor(one).to(torch.float64).tolist())
        start += len(nw)
    return {"out": torch.as_tensor(out).to(torch.float64).tolist(), "stored": stored,
            "dtype": str(out.dtype).removeprefix("torch.") if isinstance(out, torch.Tensor) else type(out).__name__,
            "alone": alone}


DRIVERS["attention"] = _probe_attention
register_probes(DRIVERS, SERVING_BLOCKED)  # what Kernel.drive may run in the kernel


_VARIANTS: dict[str, dict[str, Any]] = {}


def _attention_variants(case: Mapping[str, Any]) -> dict[str, Any]:
    """The right output for a hidden step (float64), and what each common slip gives instead (computed once per
    case in the grader's process: a class's submissions share them)."""
    key = repr(sorted(case.items()))
    if key not in _VARIANTS:
        _VARIANTS[key] = _compute_variants(case)
    return _VARIANTS[key]


def _compute_variants(case: Mapping[str, Any]) -> dict[str, Any]:
    import torch

    num_slots, old, old_kv, new, context, q, k, v = _attention_case(case)
    h, kv = int(case["heads"]), int(case["kv_heads"])
    store = torch.zeros(2, num_slots, kv, int(case["head_dim"]), dtype=torch.float64)
    store[:, old] = old_kv.to(torch.float64)
    written = torch.cat(new)
    store[0, written], store[1, written] = k.to(torch.float64), v.to(torch.float64)
    q64 = q.to(torch.float64)
    right_heads = torch.arange(h) // (h // kv)

    def manual(heads: Any = right_heads, scale: float = 0.5, shift: int = 0, first_zero: bool = False,
               causal: bool = True, flattened: bool = False) -> Any:
        rows, start = [], 0
        groups = [(torch.cat(new), torch.cat(context))] if flattened else list(zip(new, context, strict=True))
        for nw, ctx in groups:
            keys, values = store[0, ctx][:, heads], store[1, ctx][:, heads]
            s = torch.einsum("qhd,khd->hqk", q64[start:start + len(nw)], keys) / float(case["head_dim"]) ** scale
            first = 0 if first_zero else len(ctx) - len(nw)
            if causal:
                hide = torch.arange(len(ctx))[None, :] > first + shift + torch.arange(len(nw))[:, None]
                s = s.masked_fill(hide, float("-inf"))
            rows.append(torch.einsum("hqk,khd->qhd", s.softmax(-1), values))
            start += len(nw)
        return torch.cat(rows)

    outs = {"right": manual(), "not causal": manual(causal=False), "mask hides itself": manual(shift=-1),
            "mask sees ahead": manual(shift=1), "mask from 0": manual(first_zero=True),
            "heads repeat": manual(heads=torch.arange(h) % kv), "scale head_dim": manual(scale=1.0),
            "no scale": manual(scale=0.0), "across sequences": manual(flattened=True)}
    wrong_div = torch.arange(h) // kv
    if int(wrong_div.max()) < kv:
        outs["heads divide"] = manual(heads=wrong_div)
    return outs


#: What each slip in the learner's attention is told (the rule it breaks), by the variant it matches.
ATTENTION_HINTS: dict[str, str] = {
    "not causal": "a new token attends to positions after its own: a token at position p sees only positions "
                  "0 .. p of its sequence (mask the rest)",
    "mask hides itself": "the causal mask is off by one: a token at position p sees positions 0 .. p, its own "
                         "included (<=, not <)",
    "mask sees ahead": "the causal mask is off by one: a token at position p sees positions 0 .. p, not p + 1",
    "mask from 0": "the mask puts the new tokens at the start of the context: they are its tail, so the first new "
                   "token sits at position len(context) - len(new) (a decode sees every cached token)",
    "heads repeat": "query head h must read key-value head h // (heads // kv_heads): consecutive query heads share "
                    "one key-value head (repeat_interleave, not repeat)",
    "heads divide": "query head h must read key-value head h // (heads // kv_heads), the group size, not "
                    "h // kv_heads",
    "scale head_dim": "the scores are divided by head_dim: scale q . k by 1 / sqrt(head_dim)",
    "no scale": "the scores are not scaled: divide q . k by sqrt(head_dim)",
    "across sequences": "tokens attend across sequences: each sequence's new tokens read only that sequence's own "
                        "context slots (one attention per sequence of the step)",
    "precision": "the output is close but not exact: compute in the dtype of q (float64 here), not float32",
    "batched": "each sequence alone gives the right output but the step together does not: keep each sequence's "
               "new tokens with its own context, in the order of plan()",
}


def check_attention(label: str, kernel: Any, cases: tuple[Mapping[str, Any], ...] = ATTENTION_CASES) -> None:
    """The learner's ``PagedKV`` on hidden steps against the course's attention (float64 to 1e-9; a float32 step to
    float32's precision); a wrong output is matched against the common slips, each named by the rule it breaks."""
    import torch

    for case in cases:
        got = kernel.drive(label, "attention", ["PagedKV"], {"case": dict(case)}, blocked=ATTENTION_BLOCKED)
        outs = _attention_variants(case)
        right = outs["right"]
        where = (f" (on a step with {case['heads']} query heads over {case['kv_heads']} key-value heads, "
                 f"{case['dtype']})")
        try:
            out = torch.tensor(got["out"], dtype=torch.float64)
        except (TypeError, ValueError):
            raise GradingError(f"{label}: attend() should return a tensor of [tokens, heads, head_dim]") from None
        if tuple(out.shape) != tuple(right.shape):
            raise GradingError(f"{label}: attend() returned shape {tuple(out.shape)}{where}; it should return one "
                               "[heads, head_dim] row per new token, in the order of q")
        if got["dtype"] != case["dtype"]:
            raise GradingError(f"{label}: attend() returned {got['dtype']} for {case['dtype']} queries: return the "
                               "dtype of q (create the store with the dtype it is given)")
        if not got["stored"]:
            raise GradingError(f"{label}: attend() must store each new token's key and value at its new slot "
                               "(data[layer, 0 or 1, slot])")
        exact = case["dtype"] == "float64"
        rtol, atol = (1e-9, 1e-12) if exact else (1e-4, 1e-5)
        if torch.allclose(out, right, rtol=rtol, atol=atol):
            continue
        for name, alt in outs.items():
            if name != "right" and not torch.allclose(alt, right, rtol=1e-4, atol=1e-5, equal_nan=True) \
                    and torch.allclose(out, alt, rtol=1e-4, atol=1e-5, equal_nan=True):
                raise GradingError(f"{label}: {ATTENTION_HINTS[name]}{where}")
        if exact and torch.allclose(out, right, rtol=1e-3, atol=1e-4):
            raise GradingError(f"{label}: {ATTENTION_HINTS['precision']}")
        try:
            alone = torch.cat([torch.tensor(a, dtype=torch.float64) for a in got["alone"]])
        except (TypeError, ValueError, RuntimeError, KeyError):
            alone = None  # each sequence alone did not give one row per token either
        if alone is not None and alone.shape == right.shape and torch.allclose(alone, right, rtol=rtol, atol=atol):
            raise GradingError(f"{label}: {ATTENTION_HINTS['batched']}{where}")
        raise GradingError(f"{label}: the attention output differs from the course's{where}: read each sequence's "
                           "context through its own context slots, causally, one key-value head per group of "
                           "query heads")


# --- the rules, in one place
#: Each skeleton docstring of exercise 2, word for word (tests/test_ex02_mutants.py compares them with the
#: solution's and the release's): every docstring states its rule exactly as the hidden checks apply it, including
#: what they leave free.
RULES: dict[str, str] = {
    "ContiguousCache.find_space":
        "The lowest slot where `length` free slots start in a row (first fit: the lowest gap that is long enough, "
        "even when a tighter one lies further on), or None if no gap is long enough. A gap of exactly `length` "
        "slots fits, at the end of the pool too.",
    "ContiguousCache.admit":
        "Reserve `seq.request.max_len` slots (prompt + max_tokens) in one run starting at find_space's slot, and "
        "set seq.start to that slot. The loops call admit only after can_admit said yes.",
    "ContiguousCache.release":
        "Give the run back: its slots are free for the next admission. (The loops never release a sequence that "
        "holds no run; what that would do is not graded.)",
    "ContiguousCache.slots":
        "The slots holding tokens `positions` (a 1-D tensor) of `seq`: seq.start + position, one per position.",
    "PagedKV.attend":
        "Store k and v at this step's new slots, then return, in the dtype of q, each new token's attention over "
        "its own sequence's context only: a token at position p sees positions 0 .. p (causal), the scores are "
        "scaled by 1 / sqrt(head_dim), and query head h reads key-value head h // (heads // kv_heads). It may change "
        "q, k and v in place: nothing reads them after the call.",
    "serve_static":
        "Serve `requests` in order, one batch at a time: a batch is admitted only when nothing is running (from "
        "the head of the queue, never skipping it, while fewer than max_batch run and cache.can_admit(head, "
        "len(running))), and runs until every member has finished. Nothing running and nothing admissible: "
        "RuntimeError. Returns meter.result(requests).",
    "BlockAllocator":
        "Fixed-size blocks handed out from a free list, each with a reference count: its number of owners (above "
        "1: shared). Block ids are 0 .. num_blocks - 1; the caches never pass another id, and what one would do "
        "is not graded.",
    "BlockAllocator.allocate":
        "Take a free block off the free list (any one: the order blocks are reused in is up to you), set its count "
        "to 1 and return its id; RuntimeError if none is free.",
    "BlockAllocator.share":
        "One more owner for a block in use (count 1 or more): its count goes up by 1. ValueError if the block is "
        "free (count 0), which then stays on the free list.",
    "BlockAllocator.free":
        "One owner fewer: the count goes down by 1, and at 0 the block goes back on the free list. ValueError if "
        "the block is already free (count 0).",
    "PagedCache.blocks_for": "How many blocks `num_tokens` tokens occupy: ceil(num_tokens / block_size).",
    "PagedCache.can_admit":
        "True exactly when blocks_for(len(seq.tokens)) + running blocks are free: the blocks all of seq.tokens "
        "need (the prompt, or a preempted sequence's whole history) plus one spare block for each of the "
        "`running` sequences.",
    "PagedCache.admit":
        "Give seq a table of blocks_for(len(seq.tokens)) newly allocated blocks: room for the tokens the coming "
        "prefill writes, and nothing more.",
    "PagedCache.can_grow":
        "True exactly when grow(seq) can succeed: the table already has blocks_for(len(seq.tokens)) blocks (every "
        "token, the newest included, has a slot), or at least one block is free.",
    "PagedCache.grow":
        "If the table has fewer than blocks_for(len(seq.tokens)) blocks, append one newly allocated block at its "
        "end; otherwise change nothing.",
    "PagedCache.release":
        "Free every block of the table (one owner fewer each) and leave the table empty; a sequence whose table "
        "is already empty gives back nothing.",
    "PagedCache.slots":
        "The slots holding tokens `positions` (a 1-D tensor: any of seq's positions, in any order) of `seq`, "
        "through its block table: position p is slot block_table[p // block_size] * block_size + p % block_size.",
    "serve":
        "The iteration-level loop. Every step: make room for the running sequences, oldest first (when one cannot "
        "grow, preempt the newest running sequence (the one admitted last), again and again until it can or was "
        "itself the victim; each victim goes to the front of the queue as it is preempted, so after a step with "
        "several victims the oldest of them leads); then admit (continuous: every step; static: only when nothing runs) from the head "
        "of the queue, never skipping it, while fewer than max_batch run and cache.can_admit(head, "
        "len(running)), a victim of this very step included; run one forward, append the new tokens, retire the "
        "finished ones. Nothing running and nothing admissible: RuntimeError.",
}
