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
from .remote import register_probes

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
    :func:`stage5.exercise_support.small_workload`) or ``["request", id, prompt, max_tokens, stop_after]``."""
    from stage5.engine.sequence import Request
    from stage5.exercise_support import small_workload

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
    return {"starts": starts, "free": cache.num_free_slots, "fit11": cache.find_space(11),
            "fit10": cache.find_space(10), "slots": _ints(label, cache.slots(seqs[2], torch.tensor([0, 9])))}


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
    for seq in seqs:
        cache.release(seq)
    return {"snapshots": snapshots, "refused": refused, "emptied": all(not s.block_table for s in seqs),
            "pool": _pool(cache)}


def _probe_serving(label: str, func: Any, cls: Any, workload: list[list[Any]], allocator: str, num_blocks: int,
                   block_size: int, max_batch: int, continuous: bool | None, model_seed: int = 0) -> dict[str, Any]:
    """One run of the learner's loop on a hidden workload, as plain data."""
    from stage5 import exercise_support

    model = exercise_support.tiny_model(model_seed)
    requests = requests_of(workload)
    cache = cls(num_blocks * block_size) if allocator == "contiguous" else cls(num_blocks, block_size)
    kwargs = {} if continuous is None else {"continuous": continuous}
    exercise_support.Meter.last = None
    with _time_limit(label, SERVING_CPU_SECONDS):
        result = func(model, requests, cache, max_batch=max_batch, **kwargs)
    meter = exercise_support.Meter.last
    outputs = getattr(result, "outputs", None)
    if not isinstance(outputs, Mapping) or meter is None:
        raise GradingError(f"{label}: expected the RunResult that meter.result(requests) returns")
    return {"outputs": {str(k): [int(t) for t in v] for k, v in outputs.items()},
            "trace": [[kind, [int(i) for i in ids]] for kind, ids in result.trace],
            "lengths": [list(x) for x in meter.lengths], "preemptions": int(result.preemptions),
            "kv_utilization": float(result.kv_utilization), "pool": _pool(cache),
            "num_slots": int(getattr(cache, "num_slots", num_blocks * block_size))}


DRIVERS: dict[str, Callable[..., Any]] = {"contiguous": _probe_contiguous, "allocator": _probe_allocator,
                                          "tables": _probe_tables, "serving": _probe_serving}


def drive(driver: str, label: str, objects: list[Any], spec: Mapping[str, Any]) -> Any:
    """Run one probe (kernel side); the caller switches the reference off and turns crashes into failures."""
    return DRIVERS[driver](label, *objects, **spec)


# ------------------------------------------------------------------------------------ grader side
class LocalKernel:
    """The learner's namespace in this very process (a notebook run by hand, or a test): same interface as
    :class:`stage5.grading.remote.Kernel`."""

    def __init__(self, space: Mapping[str, Any]):
        self.space = space

    def drive(self, label: str, driver: str, names: list[str], spec: Mapping[str, Any],
              blocked: tuple[str, ...] = SERVING_BLOCKED) -> Any:
        from .blocking import _learner_failures, unavailable

        missing = [n for n in names if n not in self.space]
        if missing:
            raise GradingError(f"{label}: {missing[0]} is not defined: run the cell that defines it")
        with unavailable(*blocked, deep=True), _learner_failures(label, label):
            return drive(driver, label, [self.space[n] for n in names], dict(spec))


def kernel_of(space: Mapping[str, Any]) -> Any:
    """The kernel a hidden test drives: the grader puts its channel in the namespace as ``_kernel``; a notebook
    run by hand gets its own namespace."""
    return space.get("_kernel") or LocalKernel(space)


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


def check_allocator(label: str, kernel: Any) -> None:
    obs = kernel.drive(label, "allocator", ["BlockAllocator"], {})
    if sorted(obs["got"]) != list(range(5)) or obs["free_after_5"] != 0:
        raise GradingError(f"{label}: five allocations from five blocks must hand out each block once")
    if obs["empty"] != "RuntimeError":
        raise GradingError(f"{label}: allocate() on an empty free list should raise RuntimeError, "
                           + ("but it returned" if obs["empty"] == "ok" else f"not {obs['empty']}"))
    if obs["shared"] != [0, 1]:
        raise GradingError(f"{label}: a block with three owners must stay in use until the third free()")
    if obs["freed"] != [3, [0, 0, 0]]:
        raise GradingError(f"{label}: a freed block must return to the free list with a count of 0")
    if obs["double_free"] != "ValueError":
        raise GradingError(f"{label}: freeing a block that is already free should raise ValueError (a double free)"
                           + ("" if obs["double_free"] == "ok" else f", not {obs['double_free']}"))
    if obs["free_at_end"] != 3:
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
                    max_batch: int, model_seed: int = 0) -> Any:
    """The course engine's :class:`RunResult` for a hidden workload, cached per workload and build in the grader's
    process (a class's submissions share the same reference runs)."""
    from stage5.engine.engine import Engine
    from stage5.exercise_support import tiny_model

    key = (repr(workload), allocator, scheduler, num_blocks, block_size, max_batch, model_seed)
    if key not in _REFERENCE_RUNS:
        model = _MODELS.setdefault(model_seed, tiny_model(model_seed))
        _REFERENCE_RUNS[key] = Engine(model, model.cfg, allocator, scheduler, num_blocks=num_blocks,
                                      block_size=block_size, max_batch=max_batch).run(requests_of(workload))
    return _REFERENCE_RUNS[key]


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


def _schedule_hint(got: Mapping[str, Any], ref: Any, requests: list[Any], t: int, block_size: int,
                   allocator: str) -> str:
    """Why step ``t`` (0-based) of the learner's run differs from the reference's."""
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
                return (f"{step}: you preempted an older sequence than the rule says: the victim is the newest running "
                        "sequence (the last one admitted), so the oldest keep their place")
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
            return f"{step}: the batch is in a different order: keep `running` in the order sequences were admitted"
        if gtrace[t][0] != rtrace[t][0]:
            return f"{step}: meter.step's `admitted` flag is wrong: it is true only in a step that admitted someone"
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


def check_serving(label: str, kernel: Any, function: str, cache: str, workload: list[list[Any]], allocator: str,
                  num_blocks: int, block_size: int, max_batch: int, continuous: bool | None) -> dict[str, Any]:
    """Run the learner's loop ``function`` with their ``cache`` class on a hidden workload, in their kernel, and
    compare the run with the reference engine's exactly: tokens, pool left empty, who ran in every step, every
    sequence's length, preemptions and K/V utilisation. Returns the learner's observations."""
    spec = {"workload": workload, "allocator": allocator, "num_blocks": num_blocks, "block_size": block_size,
            "max_batch": max_batch, "continuous": continuous}
    got = kernel.drive(label, "serving", [function, cache], spec)
    scheduler = "static" if not continuous else "continuous"
    ref = reference_trace(workload, allocator, scheduler, num_blocks, block_size, max_batch)
    requests = requests_of(workload)
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
    if got["preemptions"] != ref.preemptions:
        raise GradingError(f"{label}: the schedule is right but meter.preempted() was called "
                           f"{'too often' if got['preemptions'] > ref.preemptions else 'too rarely'}: once per "
                           "preempted sequence")
    if abs(got["kv_utilization"] - ref.kv_utilization) > 1e-9:
        raise GradingError(f"{label}: the schedule matches the reference's but K/V utilisation is "
                           f"{'higher' if got['kv_utilization'] > ref.kv_utilization else 'lower'}: call meter.step "
                           "after forward_step (it reads num_cached), and let reserved() count what the cache holds "
                           "for the sequence")
    return got


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
            if trace is None:
                raise GradingError(f"{label}: results[({cache!r}, {scheduler!r})] should be the RunResult of serve()")
            if [(k, list(ids)) for k, ids in trace] != [(k, list(ids)) for k, ids in ref.trace]:
                more = len(trace) > len(ref.trace)
                raise GradingError(f"{label}: your {cache}/{scheduler} run does not follow that build's schedule (it "
                                   f"took {'more' if more else 'fewer or as many'} steps than it should): serve it "
                                   f"with {'ContiguousCache' if cache == 'contiguous' else 'PagedCache'} and "
                                   f"continuous={scheduler == 'continuous'}")


# --- attention through the block table
#: The reference attention backend, switched off while the learner's own is probed.
ATTENTION_BLOCKED: tuple[str, ...] = SERVING_BLOCKED + tuple(
    f"stage5.engine.kv.KVPool.{m}" for m in ("plan", "attend", "_group"))


def _attention_case(seed: int) -> tuple[Any, ...]:
    """A step mixing a scattered prefill, a decode over cached tokens and a short prefill after cached ones:
    (cached slots and their K/V, new slots, context slots, q, k, v), all from ``seed``."""
    import torch

    from stage5.exercise_support import TINY

    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(40, generator=g)
    cached = [perm[0:0], perm[5:12], perm[13:16]]  # sequence 0 has nothing cached yet
    new = [perm[30:35], perm[12:13], perm[35:37]]
    context = [torch.cat([c, n]) for c, n in zip(cached, new, strict=True)]
    n = sum(len(x) for x in new)
    old = torch.cat(cached)
    old_kv = torch.randn(2, len(old), TINY.num_kv_heads, TINY.head_dim, generator=g, dtype=torch.float64)
    q = torch.randn(n, TINY.num_heads, TINY.head_dim, generator=g, dtype=torch.float64)
    k, v = (torch.randn(n, TINY.num_kv_heads, TINY.head_dim, generator=g, dtype=torch.float64) for _ in range(2))
    return old, old_kv, new, context, q, k, v


def _probe_attention(label: str, cls: Any, seed: int) -> dict[str, Any]:
    import torch

    from stage5.exercise_support import TINY

    old, old_kv, new, context, q, k, v = _attention_case(seed)
    store = cls(TINY, 40, torch.float64)
    store.data[1, :, old] = old_kv
    store.plan(new, context)
    out = store.attend(1, q, k, v)
    written = torch.cat(new)
    return {"out": torch.as_tensor(out).tolist(),
            "stored": bool(torch.equal(store.data[1, 0, written], k) and torch.equal(store.data[1, 1, written], v))}


DRIVERS["attention"] = _probe_attention
register_probes(DRIVERS, SERVING_BLOCKED)  # what Kernel.drive may run in the kernel


def _attention_variants(seed: int) -> dict[str, Any]:
    """The reference output for a case, and what common slips give instead."""
    import torch
    import torch.nn.functional as F

    from stage5.engine.kv import KVPool
    from stage5.exercise_support import TINY

    old, old_kv, new, context, q, k, v = _attention_case(seed)
    pool = KVPool(TINY, 40, torch.float64)
    pool.data[1, :, old] = old_kv
    pool.plan(new, context)
    outs = {"right": pool.attend(1, q, k, v)}
    store = pool.data[1]
    group = TINY.num_heads // TINY.num_kv_heads

    def manual(causal: bool = True, interleave: bool = True, scale: bool = True) -> Any:
        rows, start = [], 0
        for nw, ctx in zip(new, context, strict=True):
            keys, values = store[0, ctx], store[1, ctx]
            if interleave:
                keys, values = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
            else:
                keys, values = keys.repeat(1, group, 1), values.repeat(1, group, 1)
            s = torch.einsum("qhd,khd->hqk", q[start:start + len(nw)], keys) / (TINY.head_dim ** 0.5 if scale else 1)
            if causal:
                first = len(ctx) - len(nw)
                s = s.masked_fill(torch.arange(len(ctx))[None, :] > first + torch.arange(len(nw))[:, None],
                                  float("-inf"))
            rows.append(torch.einsum("hqk,khd->qhd", F.softmax(s, -1), values))
            start += len(nw)
        return torch.cat(rows)

    outs["not causal"] = manual(causal=False)
    outs["heads"] = manual(interleave=False)
    outs["scale"] = manual(scale=False)
    return outs


def check_attention(label: str, kernel: Any, seeds: tuple[int, ...] = (0, 1)) -> None:
    """The learner's ``PagedKV`` on hidden steps against the course's attention backend (float64, to 1e-9)."""
    import torch

    hints = {"not causal": "a new token attends to positions after its own: a token at position p sees only "
                           "positions 0 .. p of its sequence (mask the rest)",
             "heads": "query head h must read key-value head h // (heads // kv_heads): consecutive query heads "
                      "share one key-value head (repeat_interleave, not repeat)",
             "scale": "the scores are not scaled: divide q . k by sqrt(head_dim)"}
    for seed in seeds:
        got = kernel.drive(label, "attention", ["PagedKV"], {"seed": seed}, blocked=ATTENTION_BLOCKED)
        outs = _attention_variants(seed)
        right = outs["right"]
        try:
            out = torch.tensor(got["out"], dtype=torch.float64)
        except (TypeError, ValueError):
            raise GradingError(f"{label}: attend() should return a tensor of [tokens, heads, head_dim]") from None
        if tuple(out.shape) != tuple(right.shape):
            raise GradingError(f"{label}: attend() returned shape {tuple(out.shape)}; it should return one "
                               "[heads, head_dim] row per new token, in the order of q")
        if not got["stored"]:
            raise GradingError(f"{label}: attend() must store each new token's key and value at its new slot "
                               "(data[layer, 0 or 1, slot])")
        if torch.allclose(out, right, rtol=1e-9, atol=1e-12):
            continue
        for name, alt in outs.items():
            if name != "right" and torch.allclose(out, alt, rtol=1e-9, atol=1e-12):
                raise GradingError(f"{label}: {hints[name]}")
        raise GradingError(f"{label}: the attention output differs from the course's: read each sequence's context "
                           "through its own context slots, causally, one key-value head per group of query heads")
