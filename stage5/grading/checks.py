"""Numeric checks whose failure messages name the likely misconception and never the expected value."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

GB_PER_GiB = 2**30 / 10**9  # 1.0737...: a GiB is about 7% larger than a GB

#: Ratios (learner / expected) worth naming in any numeric check about bytes or time.
#: Each names the slip and the direction, not the factor: a learner told "8x too large" can divide by 8 without
#: finding the mistake.
UNIT_MISCONCEPTIONS: dict[float, str] = {
    GB_PER_GiB: "slightly too large: did you mix decimal GB (1e9 bytes) and binary GiB (2**30 bytes)?",
    1 / GB_PER_GiB: "slightly too small: did you mix decimal GB (1e9 bytes) and binary GiB (2**30 bytes)?",
    1e3: "too large by a unit prefix: is it in the unit asked for (ms where s is asked, or bytes where kB)?",
    1e-3: "too small by a unit prefix: is it in the unit asked for (s where ms is asked, or kB where bytes)?",
    1e6: "too large by two unit prefixes: is it in the unit asked for (bytes where MB is asked, or us where s)?",
    1e-6: "too small by two unit prefixes: is it in the unit asked for (MB where bytes is asked, or s where us)?",
    8.0: "too large: did you count bits instead of bytes?",
}


#: A hint names a slip only when the answer lands this close (relative) to what that slip gives, or closer where the
#: check itself is tighter. The checks accept 2%, but a value 2% from a slip's is as likely another slip (a value
#: rounded early, a wrong constant) as that one: a KV size rounded early to 9.2% high sits 1.7% from the 7.4% of a
#: GB/GiB mix, and being told "did you mix GB and GiB?" sends a learner after a mistake they did not make.
HINT_REL_TOL = 0.005


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
    ``got / expected`` against ``misconceptions`` (course-specific first, then unit slips), each only where ``got``
    lands within :data:`HINT_REL_TOL` of it (or ``rel_tol``, if tighter); otherwise only the direction and a rough
    size of the error are given.
    """
    # a slip is named only within HINT_REL_TOL of what it gives; otherwise the message says less (a direction)
    hint_tol = min(rel_tol, HINT_REL_TOL)
    # the nearest known wrong answer names the slip: two misconceptions can land close to each other (8 GiB left
    # out, or counted once instead of per GPU), and the learner's exact figure tells them apart
    matches = sorted((abs(got - float(value)), hint) for value, hint in wrong_answers
                     if _close(got, float(value), hint_tol, 0.0))
    hints = []
    for gap, hint in matches:
        if math.isclose(gap, matches[0][0], rel_tol=1e-9, abs_tol=1e-12 * max(1.0, abs(got))) and hint not in hints:
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
        if r > 0 and _close(ratio, r, hint_tol, 0.0) and hint not in hints:
            hints.append(hint)
    if hints:
        return "; or ".join(hints)
    if ratio <= 0:
        return "has the wrong sign" if ratio < 0 else "is zero"
    direction = "too large" if ratio > 1 else "too small"
    size = abs(math.log10(ratio))
    # the factor itself is not named: it would let a learner scale the answer without finding the slip
    if size >= 1:
        return f"{direction}, by far: re-derive the units of each quantity and check which quantities you used"
    if size >= math.log10(1.5):
        return f"{direction}: re-derive the formula, term by term (which quantities, counted how many times)"
    off = f" (off by more than {rel_tol:.1%})" if rel_tol >= 0.001 else ""
    return f"{direction}{off}: re-check the inputs and unit conversions"


def label(got: Any) -> Any:
    """A label as a reader would accept it: ``"Batching"``, ``" prefix caching"`` and ``"prefix-caching"`` all
    read as ``"batching"`` / ``"prefix_caching"``; anything that is not a string is returned unchanged."""
    if not isinstance(got, str):
        return got
    return "_".join(got.strip().lower().replace("-", " ").split())


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



def _add(hints: dict[float, str], ratio: float, text: str) -> None:
    for r in hints:
        if math.isclose(r, ratio, rel_tol=1e-9):
            hints[r] = f"{hints[r]}; or {text}"
            return
    hints[ratio] = text


def kv_misconceptions(config: Any) -> dict[float, str]:
    """Ratio hints for a KV-cache size of ``config`` (a :class:`stage5.models.ModelConfig`): query heads
    instead of key-value heads, the missing factor 2 for K and V, FP32 bytes, hidden_size/num_heads in place
    of head_dim, a forgotten layer count, bits instead of bytes."""
    hints: dict[float, str] = {}
    _add(hints, 0.5, "too small: did you forget the factor 2 for keys and values?")
    _add(hints, 2.0, "too large: did you count 4 bytes per element (FP32) instead of the stated width?")
    if config.num_heads != config.num_kv_heads:
        g = config.num_heads / config.num_kv_heads
        _add(hints, g, "too large: did you use query heads (num_heads) instead of key-value heads (num_kv_heads)?")
    per_head = config.hidden_size / config.num_heads
    if not math.isclose(per_head, config.head_dim):
        _add(hints, per_head / config.head_dim,
             "the per-head width is off: use config.head_dim rather than hidden_size / num_heads")
    _add(hints, 1 / config.num_layers, "far too small: did you forget to multiply by the number of layers?")
    # bits for bytes is 8x, as are query heads on a model with 8 query heads per KV head (Qwen2.5 72B): name both
    _add(hints, 8.0, UNIT_MISCONCEPTIONS[8.0])
    return hints

