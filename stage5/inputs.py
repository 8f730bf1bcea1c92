"""Checks at the doors: each number a user types, pastes or passes is checked once, where it enters.

Every check names the field, the value it got and what is accepted, and raises :class:`InputError` (a
``ValueError``), so a caller that already reports ``ValueError`` as a one-line error needs no change. Nothing
here coerces silently: ``True`` is not the integer 1, ``"3"`` is not 3, and 4096.9 is not 4096.
"""

from __future__ import annotations

import argparse
import math
import numbers
import re
from collections.abc import Callable
from typing import Any, NoReturn

# Counts above 2**53 are no longer exact as floats, and every count here ends up in float arithmetic.
MAX_COUNT = 2**53


class InputError(ValueError):
    """A value that is the wrong type, out of range or not finite; the message says what is accepted."""


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def integer(value: Any, name: str, *, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as an int in [minimum, maximum]; a float is accepted only if it is a whole number (4096.0)."""
    accepted = f"an integer >= {minimum}" + (f" and <= {maximum:,}" if maximum is not None else "")
    if not _is_number(value):
        raise InputError(f"{name} must be {accepted}, got {value!r} ({type(value).__name__})")
    if isinstance(value, numbers.Integral):
        as_int = int(value)
    else:
        as_float = float(value)
        if not math.isfinite(as_float) or not as_float.is_integer():
            raise InputError(f"{name} must be {accepted}, got {value!r}")
        as_int = int(as_float)
    if as_int < minimum or (maximum is not None and as_int > maximum):
        raise InputError(f"{name} must be {accepted}, got {value!r}")
    if as_int > MAX_COUNT:
        raise InputError(f"{name} must be {accepted} and at most 2**53 (beyond that a count is not exact), "
                         f"got {value!r}")
    return as_int


def positive_int(value: Any, name: str, maximum: int | None = None) -> int:
    return integer(value, name, minimum=1, maximum=maximum)


def non_negative_int(value: Any, name: str, maximum: int | None = None) -> int:
    return integer(value, name, minimum=0, maximum=maximum)


def real(value: Any, name: str, *, low: float = -math.inf, high: float = math.inf, low_open: bool = False,
         high_open: bool = False, accepted: str | None = None) -> float:
    """``value`` as a finite float within the stated bounds (open or closed at each end)."""
    lo, hi = "(" if low_open else "[", ")" if high_open else "]"
    if math.isinf(high) and not math.isinf(low):
        what = accepted or f"a finite number {'>' if low_open else '>='} {low:g}"
    else:
        what = accepted or f"a finite number in {lo}{low:g}, {high:g}{hi}"
    if not _is_number(value):
        raise InputError(f"{name} must be {what}, got {value!r} ({type(value).__name__})")
    x = float(value)
    too_low = x <= low if low_open else x < low
    too_high = x >= high if high_open else x > high
    if not math.isfinite(x) or too_low or too_high:
        raise InputError(f"{name} must be {what}, got {value!r}")
    return x


def positive(value: Any, name: str, maximum: float = math.inf) -> float:
    """A finite number > 0 (and <= ``maximum``)."""
    bound = "" if math.isinf(maximum) else f" and <= {maximum:g}"
    return real(value, name, low=0.0, low_open=True, high=maximum,
                accepted=f"a finite number > 0{bound}")


def fraction(value: Any, name: str) -> float:
    """A finite number in [0, 1]."""
    return real(value, name, low=0.0, high=1.0, accepted="a fraction in [0, 1]")


def boolean(value: Any, name: str) -> bool:
    """A real bool: the string "false" or the number 0 is refused rather than guessed at."""
    if not isinstance(value, bool):
        raise InputError(f"{name} must be true or false, got {value!r} ({type(value).__name__})")
    return value


def choice(value: Any, name: str, options: list[str] | tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in options:
        raise InputError(f"{name} must be one of {', '.join(options)}; got {value!r}")
    return value


def within_context(tokens: int, limit: int, what: str, model: str) -> None:
    """Refuse a sequence longer than the model's maximum position (``max_position_embeddings``)."""
    if tokens > limit:
        raise InputError(f"{what} is {tokens:,} tokens, past {model}'s maximum context of {limit:,} tokens "
                         "(max_position_embeddings); accepted: at most that many")


# ------------------------------------------------------------------------------------------ command lines
class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument prints one line (``error: ...``) instead of the usage block, exit status 2."""

    def error(self, message: str) -> NoReturn:
        message = re.sub(r"^argument ([^:]+): ", r"\1 ", message)  # "--batch must be ...", not "argument --batch: ..."
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def arg_int(minimum: int = 1) -> Callable[[str], int]:
    """An argparse ``type`` for integers >= ``minimum`` whose error says what is accepted."""
    accepted = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {accepted}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {accepted}, got {text!r}")
        return value
    return parse


def arg_real(low: float = 0.0, high: float = math.inf, low_open: bool = True) -> Callable[[str], float]:
    """An argparse ``type`` for finite numbers in (low, high] (or [low, high] with ``low_open=False``)."""
    lo = "(" if low_open else "["
    accepted = (f"a finite number {'>' if low_open else '>='} {low:g}" if math.isinf(high)
                else f"a finite number in {lo}{low:g}, {high:g}]")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {accepted}, got {text!r}") from None
        too_low = value <= low if low_open else value < low
        if not math.isfinite(value) or too_low or value > high:
            raise argparse.ArgumentTypeError(f"must be {accepted}, got {text!r}")
        return value
    return parse
