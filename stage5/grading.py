"""Helpers for the hidden tests of the course exercises (imported by test cells at grading time).

Two ideas, kept general so every exercise can reuse them:

* :func:`check_close` compares a learner's number with the value ``stage5`` computes and, when they differ,
  raises an ``AssertionError`` whose message names the check and guesses the misconception from the ratio
  (or from a list of known wrong answers) -- and never contains the expected number itself.
* :func:`unavailable` temporarily replaces named ``stage5`` functions (and methods) with stubs that raise, so
  a learner's function that merely forwards to the course's own answer fails instead of passing.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

GB_PER_GiB = 2**30 / 10**9  # 1.0737...: a GiB is about 7% larger than a GB

#: Ratios (learner / expected) worth naming in any numeric check about bytes or time.
UNIT_MISCONCEPTIONS: dict[float, str] = {
    GB_PER_GiB: "about 7% too large: did you mix decimal GB (1e9 bytes) and binary GiB (2**30 bytes)?",
    1 / GB_PER_GiB: "about 7% too small: did you mix decimal GB (1e9 bytes) and binary GiB (2**30 bytes)?",
    1e3: "1000x too large: check the unit asked for (ms vs s, or kB vs bytes)",
    1e-3: "1000x too small: check the unit asked for (ms vs s, or kB vs bytes)",
    1e6: "a million times too large: check the unit asked for",
    1e-6: "a million times too small: check the unit asked for",
    8.0: "8x too large: did you count bits instead of bytes?",
}


class GradingError(AssertionError):
    """A failed hidden check: the message is safe to show a learner."""


def _as_number(name: str, got: Any) -> float:
    if isinstance(got, bool):
        raise GradingError(f"{name}: expected a number, got a bool ({got!r})")
    try:
        value = float(got)
    except (TypeError, ValueError):
        raise GradingError(f"{name}: expected a number, got {type(got).__name__}") from None
    if not math.isfinite(value):
        raise GradingError(f"{name}: expected a finite number, got {value!r}")
    return value


def _close(a: float, b: float, rel_tol: float, abs_tol: float) -> bool:
    return math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)


def diagnose(got: float, expected: float, rel_tol: float = 0.02,
             misconceptions: Mapping[float, str] | None = None,
             wrong_answers: Iterable[tuple[float, str]] = ()) -> str:
    """A learner-safe description of how ``got`` differs from ``expected`` (without stating ``expected``).

    Known wrong answers are tried first (exact alternatives computed under a misconception), then the ratio
    ``got / expected`` against ``misconceptions`` (course-specific first, then unit slips); otherwise only the
    direction and a rough size of the error are given.
    """
    hints = []
    for value, hint in wrong_answers:
        if _close(got, float(value), rel_tol, 0.0) and hint not in hints:
            hints.append(hint)
    if hints:
        return "; or ".join(hints)
    if expected == 0:
        return "should be zero" if got != 0 else ""
    ratio = got / expected
    table = dict(UNIT_MISCONCEPTIONS)
    table.update(misconceptions or {})
    # course-specific hints first, unit slips after; several may share a ratio
    ordered = list((misconceptions or {}).items()) + [kv for kv in table.items()
                                                      if kv[0] not in (misconceptions or {})]
    for r, hint in ordered:
        if r > 0 and _close(ratio, r, rel_tol, 0.0) and hint not in hints:
            hints.append(hint)
    if hints:
        return "; or ".join(hints)
    if ratio <= 0:
        return "has the wrong sign" if ratio < 0 else "is zero"
    direction = "too large" if ratio > 1 else "too small"
    size = abs(math.log10(ratio))
    if size >= 1:
        return f"{direction} by roughly {10 ** round(size):,}x: check units and which quantities you used"
    if size >= math.log10(1.5):
        return f"{direction} by a large factor (under 10x): re-check the formula"
    return f"{direction} (off by more than {rel_tol:.0%}): re-check the inputs and unit conversions"


def check_close(name: str, got: Any, expected: float, rel_tol: float = 0.02, abs_tol: float = 0.0,
                misconceptions: Mapping[float, str] | None = None,
                wrong_answers: Iterable[tuple[float, str]] = ()) -> None:
    """Pass when ``got`` is within ``rel_tol`` (or ``abs_tol``) of ``expected``; else raise :class:`GradingError`.

    ``misconceptions`` maps a ratio got/expected to a hint ("about 8x too large: query heads instead of
    key-value heads?"); ``wrong_answers`` lists (value, hint) pairs computed under a misconception. The
    message names the check and the hint, never the expected value.
    """
    value = _as_number(name, got)
    expected = float(expected)
    if _close(value, expected, rel_tol, abs_tol):
        return
    raise GradingError(f"{name}: {diagnose(value, expected, rel_tol, misconceptions, wrong_answers)}")


# ------------------------------------------------------------------------------------ making answers unavailable
class UnavailableError(GradingError):
    """Raised by a stage5 function that a learner's code may not call during a check."""


def _resolve(target: str) -> tuple[Any, str]:
    """'pkg.mod.func' or 'pkg.mod.Class.attr' -> (owner object, attribute name)."""
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:-1]:
            owner = getattr(owner, attr)
        return owner, parts[-1]
    raise ValueError(f"cannot resolve {target!r}")


def _stub(target: str, original: Any) -> Any:
    def blocked(*args: Any, **kwargs: Any) -> Any:
        raise UnavailableError(f"your code called {target}, which computes this answer for you; "
                               "work it out from the config's fields instead")
    if isinstance(original, property):
        return property(blocked)
    return blocked


@contextlib.contextmanager
def unavailable(*targets: str, namespaces: Iterable[dict[str, Any]] = ()) -> Iterator[None]:
    """Make the named functions, methods and properties raise :class:`UnavailableError` inside the block.

    Besides the defining module or class, every loaded module's global of the same object (``from stage5.cost
    import max_concurrency``) and each dict in ``namespaces`` (default: the notebook's ``__main__``) is patched,
    and everything is restored on exit.
    """
    saved: list[tuple[Any, str, Any, bool]] = []  # (owner, name, original, is_dict)
    spaces = list(namespaces)
    main = sys.modules.get("__main__")
    if main is not None:
        spaces.append(vars(main))
    try:
        for target in targets:
            owner, name = _resolve(target)
            original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
            stub = _stub(target, original)
            saved.append((owner, name, original, False))
            setattr(owner, name, stub)
            if isinstance(owner, type):
                continue
            for module in list(sys.modules.values()):
                space = getattr(module, "__dict__", None)
                if space is not None and module is not owner:
                    spaces.append(space)
            for space in spaces:
                for key, value in list(space.items()):
                    if value is original:
                        saved.append((space, key, original, True))
                        space[key] = stub
        yield
    finally:
        for owner, name, original, is_dict in reversed(saved):
            if is_dict:
                owner[name] = original
            else:
                setattr(owner, name, original)


def call_learner(name: str, func: Callable[..., Any], *args: Any, blocked: Iterable[str] = (), **kwargs: Any) -> Any:
    """Call a learner's function with ``blocked`` stage5 functions unavailable; turn any crash into a short,
    learner-safe failure that names the check (no traceback of the hidden test)."""
    if not callable(func):
        raise GradingError(f"{name}: expected a function, got {type(func).__name__}")
    with unavailable(*blocked), _learner_failures(name, name):
        return func(*args, **kwargs)


@contextlib.contextmanager
def _learner_failures(label: str, name: str) -> Iterator[None]:
    """Turn whatever a learner's code raises into a one-line GradingError naming ``label`` (or ``name`` for a
    function that is not written yet), never the hidden test's traceback."""
    try:
        yield
    except UnavailableError as err:
        raise GradingError(f"{label}: {err}") from None
    except NotImplementedError:
        raise GradingError(f"{name}: the function is not written yet (it raises NotImplementedError)") from None
    except Exception as err:  # noqa: BLE001 - any learner crash becomes a graded failure
        raise GradingError(f"{label}: your function raised {type(err).__name__}: {err}") from None


# ------------------------------------------------------------------------------------ reusable hint tables
def _add(hints: dict[float, str], ratio: float, text: str) -> None:
    for r in hints:
        if math.isclose(r, ratio, rel_tol=1e-9):
            hints[r] = f"{hints[r]}; or {text}"
            return
    hints[ratio] = text


def kv_misconceptions(config: Any) -> dict[float, str]:
    """Ratio hints for a KV-cache size of ``config`` (a :class:`stage5.models.ModelConfig`): query heads
    instead of key-value heads, the missing factor 2 for K and V, FP32 bytes, hidden_size/num_heads in place
    of head_dim, a forgotten layer count."""
    hints: dict[float, str] = {}
    _add(hints, 0.5, "half the right size: did you forget the factor 2 for keys and values?")
    _add(hints, 2.0, "twice the right size: did you count 4 bytes per element (FP32) instead of the stated width?")
    if config.num_heads != config.num_kv_heads:
        g = config.num_heads / config.num_kv_heads
        _add(hints, g, f"about {g:g}x too large: did you use query heads (num_heads) instead of key-value heads "
                       "(num_kv_heads)?")
    per_head = config.hidden_size / config.num_heads
    if not math.isclose(per_head, config.head_dim):
        _add(hints, per_head / config.head_dim,
             "the per-head width is off: use config.head_dim rather than hidden_size / num_heads")
    _add(hints, 1 / config.num_layers, "far too small: did you forget to multiply by the number of layers?")
    return hints


# ------------------------------------------------------------------------------------ ex03: diagnosing a deployment
#: What a learner's ``diagnose`` may not call while it is checked: the reference itself and every cost-model
#: function that would do the step-time, prefill, concurrency or speculation arithmetic for it. The registries
#: (get_model, get_gpu), ModelConfig's fields and Hardware's datasheet numbers stay available.
DIAGNOSIS_BLOCKED: tuple[str, ...] = (
    "stage5.levers.diagnose_reference", "stage5.levers.lever_gains", "stage5.levers.request_seconds",
    "stage5.levers.dollars_per_million", "stage5.levers.latency_s", "stage5.levers.max_batch_within_slo",
    "stage5.levers.cost_terms", "stage5.simulator.simulate",
    "stage5.cost.decode_step", "stage5.cost.tpot_s", "stage5.cost.prefill_step", "stage5.cost.ttft_s",
    "stage5.cost.request_gpu_seconds", "stage5.cost.speculative_speedup",
    "stage5.cost.expected_tokens_per_verification", "stage5.cost.max_concurrency", "stage5.cost.kv_budget_bytes",
    "stage5.cost.cost_per_million_tokens", "stage5.cost.decode_throughput", "stage5.cost.cost_terms",
    "stage5.cost.mixed_tpot_s",
    "stage5.quantization.end_to_end_gain", "stage5.quantization.decode_step_gain",
)
DIAGNOSIS_FIELDS = ("phase", "decode_bound", "best_lever", "gain")
GAIN_FACTOR = 2.0  # a predicted gain passes when within this factor of the reference's


def reference_diagnosis(dep: Mapping[str, Any]) -> Any:
    """:func:`stage5.levers.diagnose_reference` for a learner-style deployment dict (ex03's ``Deployment``)."""
    from stage5 import levers

    return levers.diagnose_reference(
        dep["model"], dep["gpu"], dep["num_gpus"], dep["prompt"], dep["output"], dep["concurrency"],
        dep["objective"], weights=dep.get("weights", "bf16"), kv=dep.get("kv", "bf16"),
        prefix_hit=dep.get("prefix_hit", 0.5), alpha=dep.get("alpha", 0.7), k=dep.get("k", 4),
        draft_cost=dep.get("draft_cost", 0.05), tpot_slo_s=dep.get("tpot_slo_s", levers.DEFAULT_TPOT_SLO_S))


def describe_deployment(dep: Mapping[str, Any]) -> str:
    """A short learner-facing label for a deployment (it names the inputs, which the learner may see)."""
    return (f"{dep['model']} on {dep['num_gpus']} x {dep['gpu']}, prompt {dep['prompt']:,}, output {dep['output']:,}, "
            f"concurrency {dep['concurrency']}, {dep.get('weights', 'bf16')} weights, {dep.get('kv', 'bf16')} KV, "
            f"objective {dep['objective']}")


def _lever_hint(got: str, ref: Any, dep: Mapping[str, Any]) -> str:
    """Why the named lever is not the best one here, without naming the one that is."""
    gains = ref.gains
    if got not in gains:
        return f"best_lever should be one of {', '.join(sorted(gains))}"
    if got == "speculative":
        if gains["speculative"] < 1.05:
            return ("speculative decoding gains little or loses here: verifying k+1 tokens per sequence multiplies "
                    "the arithmetic, and at this concurrency the verify pass is no longer free")
        return "speculative decoding helps here, but another lever helps clearly more"
    if got == "prefix_caching":
        if ref.prefill_share < 0.5:
            return ("prefix caching only removes prefill work, and most of this request's cost is decode: "
                    "a long prompt alone does not make it the first lever")
        return "prefix caching helps here, but another lever helps clearly more"
    if got == "quantization":
        return ("FP8 halves the bytes of whatever is quantized, but not the time of a compute-bound step or of a "
                "part already in 8 bits: count the weight and KV traffic (and the FLOPs) before and after")
    if dep["objective"] == "latency":
        return "under the latency objective a larger batch makes every step slower for each user"
    return ("batching is limited here: by the KV memory at the full sequence length and by the TPOT limit; "
            "check how far concurrency can actually rise and what each step then costs")


def check_diagnosis(name: str, got: Any, dep: Mapping[str, Any], fields: Iterable[str] = DIAGNOSIS_FIELDS,
                    gain_factor: float = GAIN_FACTOR) -> None:
    """Compare a learner's diagnosis dict with the reference for ``dep``: ``phase``, ``decode_bound`` and
    ``best_lever`` exactly, ``gain`` (of the best lever) within ``gain_factor``. The message names the
    deployment and the misconception, never the expected value."""
    label = f"{name} ({describe_deployment(dep)})"
    if not isinstance(got, Mapping):
        raise GradingError(f"{label}: expected a dict with keys {', '.join(DIAGNOSIS_FIELDS)}, "
                           f"got {type(got).__name__}")
    fields = list(fields)
    missing = [f for f in fields if f not in got]
    if missing:
        raise GradingError(f"{label}: the dict lacks {', '.join(missing)}")
    ref = reference_diagnosis(dep)
    if "phase" in fields and got["phase"] != ref.phase:
        raise GradingError(f"{label}: phase is wrong: compare the prefill seconds of one request with its share of "
                           "decode (output x step time / concurrency), KV reads included in the step")
    if "decode_bound" in fields and got["decode_bound"] != ref.decode_bound:
        hint = ("you may have left out the KV-cache reads (batch x context x KV bytes per token)"
                if got["decode_bound"] == "compute" else
                "compare the step's FLOPs at the achieved FLOP/s (MFU, and the FP8 rate for 8-bit weights) with "
                "its bytes at the bandwidth")
        raise GradingError(f"{label}: decode_bound is wrong: {hint}")
    if "best_lever" in fields and got["best_lever"] != ref.best_lever:
        raise GradingError(f"{label}: best_lever is wrong: {_lever_hint(str(got['best_lever']), ref, dep)}")
    if "gain" in fields:
        value = _as_number(f"{label}: gain", got["gain"])
        want = ref.gains[ref.best_lever]
        if not (want / gain_factor <= value <= want * gain_factor):
            direction = "too large" if value > want else "too small"
            raise GradingError(f"{label}: the gain is {direction} by more than {gain_factor:g}x: "
                               + ("did you leave out the KV reads, which grow with the batch?"
                                  if direction == "too large" and ref.best_lever == "batching" else
                                  "re-check the step time before and after the lever"))


def call_diagnose(name: str, func: Callable[..., Any], deps: Iterable[Mapping[str, Any]],
                  blocked: Iterable[str] = DIAGNOSIS_BLOCKED) -> list[Any]:
    """Call a learner's ``diagnose`` on each deployment (a fresh copy of each dict) with ``blocked`` stage5
    functions unavailable throughout; crashes become learner-safe failures naming the deployment."""
    if not callable(func):
        raise GradingError(f"{name}: expected a function, got {type(func).__name__}")
    out = []
    with unavailable(*blocked):
        for dep in deps:
            with _learner_failures(f"{name} ({describe_deployment(dep)})", name):
                out.append(func(dict(dep)))
    return out


# ------------------------------------------------------------------------------------ ex02: a toy serving loop
#: The reference engine and allocators, switched off while a learner's serving loop runs (every method, so a
#: learner's class that subclasses one of them gains nothing either).
SERVING_BLOCKED: tuple[str, ...] = tuple(
    [f"stage5.engine.kv.{cls}.{m}" for cls in ("PagedAllocator", "ContiguousAllocator")
     for m in ("can_admit", "admit", "can_grow", "grow", "release", "slots", "reserved")]
    + ["stage5.engine.kv.PagedAllocator._take", "stage5.engine.kv.PagedAllocator._release",
       "stage5.engine.kv.ContiguousAllocator._first_fit"]
    + [f"stage5.engine.engine.Engine.{m}" for m in ("run", "_admit", "_make_room", "_forward", "_preempt")])
SERVING_RUN_SECONDS = 8.0  # a learner's loop that runs longer than this (on a workload the reference does in <1 s)


@contextlib.contextmanager
def _time_limit(name: str, seconds: float) -> Iterator[None]:
    """Raise GradingError in the main thread after ``seconds`` (Unix); elsewhere, no limit."""
    import signal
    import threading

    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum: int, frame: Any) -> None:
        raise GradingError(f"{name}: your loop did not finish within {seconds:g} s on a workload the reference "
                           "serves in under a second: does it stop when nothing runs and nothing can be admitted, "
                           "and does every finished sequence give its memory back?")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_serving(name: str, func: Callable[..., Any], *args: Any, seconds: float = SERVING_RUN_SECONDS,
                blocked: Iterable[str] = SERVING_BLOCKED, **kwargs: Any) -> Any:
    """Call a learner's serving function (or method) with the reference engine switched off and a time limit;
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


def reference_run(model: Any, requests: list[Any], allocator: str, scheduler: str, num_blocks: int,
                  block_size: int, max_batch: int) -> Any:
    """The course engine's :class:`RunResult` for the same pool (``num_blocks * block_size`` slots)."""
    from stage5.engine.engine import Engine

    return Engine(model, model.cfg, allocator, scheduler, num_blocks=num_blocks, block_size=block_size,
                  max_batch=max_batch).run(requests)


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
