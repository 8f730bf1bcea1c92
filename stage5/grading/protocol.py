"""What crosses between a learner's kernel and the grader: data, never code.

A value crosses as JSON of plain types (None, booleans, numbers, strings, lists) and four tagged forms:

* ``{"__float__": "inf" | "-inf" | "nan"}`` - a float JSON cannot spell;
* ``{"__dict__": [[key, value], ...]}`` - a dict (keys: strings, numbers, booleans, None, or lists of those, which
  come back as tuples);
* ``{"__type__": name, "fields": {...}}`` - one of the course's value types in :data:`VALUE_TYPES`, a closed list
  that the reader looks ``name`` up in; it rebuilds the type from the fields that list names, each checked against
  the type's annotation;
* ``{"__opaque__": type name}`` - anything else (an object, not data), read back as :class:`Opaque`.

The reader (:func:`decode`, :func:`loads`) never resolves, imports, calls or evaluates a name it was sent: a type
name is only a key into :data:`VALUE_TYPES`. What it reads is bounded in size, depth and length, and in
the work of reading it (no integer whose hash could collide by design); anything else is a :class:`ProtocolError`,
which is a failed check (a :class:`~stage5.grading.checks.GradingError`).

This module is the bottom of ``stage5.grading``'s kernel-to-grader path: it imports only :mod:`.checks`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
import typing
import unicodedata
from collections.abc import Callable
from typing import Any

from .checks import GradingError

MAX_REPLY_CHARS = 1_000_000  # a learner's answer (as JSON text) larger than this is refused
MAX_DEPTH = 32  # containers inside containers (a RunResult in a dict of results needs 6)
MAX_ITEMS = 2_000_000  # values in one answer, containers included
MAX_STRING = 100_000  # characters in one string
MAX_NAME = 80  # characters of a type name kept in an Opaque
# Integers must lie strictly inside +-(2**61 - 1), Python's hash modulus on 64-bit machines: inside it distinct
# integers hash apart (but -1 and -2), so keys chosen to collide (multiples of 2**61 - 1) cannot make building a
# dict quadratic, in the reader or in a check. Far beyond any count of tokens or bytes the course asks for.
MAX_INT = 2**61 - 1
NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


class ProtocolError(GradingError):
    """What a kernel sent is not data this protocol reads (the message is the grader's own words)."""


# ------------------------------------------------------------------------------------ the course's value types
def _model_config() -> type:
    from stage5.models import ModelConfig

    return ModelConfig


def _hardware() -> type:
    from stage5.hardware import Hardware

    return Hardware


def _run_result() -> type:
    from stage5.engine.metrics import RunResult

    return RunResult


@dataclasses.dataclass(frozen=True)
class ValueType:
    """One course type that may cross: where it is defined (to recognise it when sending), how the reader gets the
    class (its own import, never one a kernel names) and the fields it leaves out (they take their defaults)."""

    module: str
    qualname: str
    load: Callable[[], type]
    left_out: frozenset[str] = frozenset()


#: Every course type that crosses today: model configs and GPUs are arguments of ex01's functions (grader to
#: kernel), a RunResult is ex02's measured table (kernel to grader; its live sequences, logits and per-request
#: times stay behind). Everything else crosses as :class:`Opaque`.
VALUE_TYPES: dict[str, ValueType] = {
    "ModelConfig": ValueType("stage5.models", "ModelConfig", _model_config),
    "Hardware": ValueType("stage5.hardware", "Hardware", _hardware),
    "RunResult": ValueType("stage5.engine.metrics", "RunResult", _run_result,
                           frozenset({"logits", "requests", "steps_log"})),
}


@dataclasses.dataclass(frozen=True)
class _Spec:
    cls: type
    hints: dict[str, Any]  # field -> annotation, for the fields that cross
    required: frozenset[str]


@functools.cache
def _spec(name: str) -> _Spec:
    vt = VALUE_TYPES[name]
    cls = vt.load()
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init and f.name not in vt.left_out]
    for f in fields:
        _conform(None, hints[f.name], "", check_only=True)  # every annotation that crosses is one _conform reads
    required = frozenset(f.name for f in fields
                         if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
    return _Spec(cls, {f.name: hints[f.name] for f in fields}, required)


def _conform(value: Any, hint: Any, where: str, check_only: bool = False) -> Any:
    """``value`` (already plain data) as the annotation ``hint`` says, or ProtocolError. With ``check_only``, only
    checks that ``hint`` is one of the annotations this reads (int, float, str, bool, None, unions of those, list,
    tuple and dict of them)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if check_only:
            for a in args:
                _conform(None, a, where, True)
            return None
        for a in args:
            try:
                return _conform(value, a, where)
            except ProtocolError:
                continue
        raise ProtocolError(f"{where} has the wrong type")
    if hint in (int, float, str, bool, type(None)):
        if check_only:
            return None
        if hint is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if type(value) is not hint:
            raise ProtocolError(f"{where} should be {'None' if hint is type(None) else hint.__name__}")
        return value
    if origin in (list, tuple) and args:
        if check_only:
            for a in args:
                if a is not Ellipsis:
                    _conform(None, a, where, True)
            return None
        if not isinstance(value, (list, tuple)):
            raise ProtocolError(f"{where} should be a list")
        if origin is list:
            return [_conform(v, args[0], where) for v in value]
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_conform(v, args[0], where) for v in value)
        if len(value) != len(args):
            raise ProtocolError(f"{where} should have {len(args)} items")
        return tuple(_conform(v, a, where) for v, a in zip(value, args, strict=True))
    if origin is dict and args:
        if check_only:
            _conform(None, args[0], where, True)
            _conform(None, args[1], where, True)
            return None
        if not isinstance(value, dict):
            raise ProtocolError(f"{where} should be a dict")
        return {_conform(k, args[0], where): _conform(v, args[1], where) for k, v in value.items()}
    raise TypeError(f"stage5.grading.protocol cannot carry a field annotated {hint!r}: leave it out")


# ------------------------------------------------------------------------------------ writing (both sides)
def encode(value: Any) -> Any:
    """JSON-ready form of an answer or an argument: plain data, the course's value types, else Opaque."""
    return _encode(value, 0)


def _encode(value: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        return {"__opaque__": "too deeply nested"}
    if value is None or isinstance(value, (bool, str)):
        return value if not isinstance(value, str) else str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        value = float(value)
        return value if math.isfinite(value) else {"__float__": repr(value)}
    if isinstance(value, (list, tuple)):
        return [_encode(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {"__dict__": [[_encode(k, depth + 1), _encode(v, depth + 1)] for k, v in value.items()]}
    cls = type(value)
    vt = VALUE_TYPES.get(cls.__name__)
    if vt is not None and (cls.__module__, cls.__qualname__) == (vt.module, vt.qualname):
        return {"__type__": cls.__name__,
                "fields": {f.name: _encode(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)
                           if f.init and f.name not in vt.left_out}}
    for cast in (int, float):  # numpy and torch scalars
        if hasattr(value, "__index__" if cast is int else "__float__") and getattr(value, "ndim", 0) == 0:
            try:
                return _encode(cast(value), depth)
            except (TypeError, ValueError):
                pass
    return {"__opaque__": cls.__name__[:MAX_NAME]}


def dumps(value: Any) -> str:
    """``value`` as JSON text (NaN and infinities written as the protocol spells them)."""
    return json.dumps(value, allow_nan=False)


# ------------------------------------------------------------------------------------ reading (both sides)
class Opaque:
    """An answer that could not be sent over (an object, not data): checks reject it by its type name."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<{self.type_name}>"


def loads(text: Any, limit: int = MAX_REPLY_CHARS) -> Any:
    """Parse a kernel's reply (JSON text of at most ``limit`` characters); ProtocolError if it is not."""
    if not isinstance(text, str):
        raise ProtocolError("the kernel's answer is not text")
    if len(text) > limit:
        raise ProtocolError(f"the kernel's answer is longer than {limit:,} characters")
    try:
        return json.loads(text)
    except (ValueError, RecursionError, MemoryError):
        raise ProtocolError("the kernel's answer is not JSON this grader reads") from None


def decode(value: Any) -> Any:
    """Plain data (and the course's value types) from what :func:`encode` wrote; ProtocolError for anything else.
    Never imports, calls or evaluates a name from ``value``."""
    return _decode(value, 0, [MAX_ITEMS])


def _decode(value: Any, depth: int, budget: list[int]) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise ProtocolError(f"the answer holds more than {MAX_ITEMS:,} values")
    if depth > MAX_DEPTH:
        raise ProtocolError(f"the answer is nested more than {MAX_DEPTH} deep")
    if value is None or type(value) is bool:
        return value
    if type(value) is int:
        if not -MAX_INT < value < MAX_INT:
            raise ProtocolError("the answer holds an integer larger than 2**61 in size")
        return value
    if type(value) is float:
        return value
    if type(value) is str:
        if len(value) > MAX_STRING:
            raise ProtocolError(f"the answer holds a string longer than {MAX_STRING:,} characters")
        return value
    if type(value) is list:
        return [_decode(v, depth + 1, budget) for v in value]
    if type(value) is not dict:
        raise ProtocolError("the answer holds something that is not JSON data")
    keys = set(value)
    if keys == {"__float__"}:
        text = value["__float__"]
        if type(text) is not str or text not in NON_FINITE:
            raise ProtocolError("the answer holds a float this grader does not read")
        return NON_FINITE[text]
    if keys == {"__dict__"}:
        pairs = value["__dict__"]
        if type(pairs) is not list or not all(type(p) is list and len(p) == 2 for p in pairs):
            raise ProtocolError("the answer holds a dict this grader does not read")
        out = {}
        for k, v in pairs:
            out[_key(_decode(k, depth + 1, budget))] = _decode(v, depth + 1, budget)
        return out
    if keys == {"__type__", "fields"}:
        return _build(value["__type__"], value["fields"], depth, budget)
    if keys == {"__opaque__"}:
        name = value["__opaque__"]
        return Opaque(quote(name, MAX_NAME, marks="") if type(name) is str else "object")
    raise ProtocolError("the answer holds a value this grader does not read")


def _key(key: Any) -> Any:
    """A dict key as data: strings, numbers, booleans, None, and tuples of those (a list key comes back a tuple)."""
    if key is None or type(key) in (bool, int, float, str):
        return key
    if type(key) is list:
        return tuple(_key(k) for k in key)
    raise ProtocolError("the answer holds a dict key that is not a string, number or tuple")


def _build(name: Any, fields: Any, depth: int, budget: list[int]) -> Any:
    """One of :data:`VALUE_TYPES` from its fields, each checked against the field's annotation."""
    if type(name) is not str or name not in VALUE_TYPES:
        raise ProtocolError("the answer holds an object of a type the grader does not accept "
                            f"({quote(name if type(name) is str else type(name).__name__, MAX_NAME)})")
    if type(fields) is not dict or not all(type(k) is str for k in fields):
        raise ProtocolError(f"the answer holds a {name} without its fields")
    spec = _spec(name)
    unknown, missing = set(fields) - set(spec.hints), spec.required - set(fields)
    if unknown or missing:
        raise ProtocolError(f"the answer holds a {name} with fields that are not its own")
    kwargs = {k: _conform(_decode(v, depth + 1, budget), spec.hints[k], f"{name}.{k}") for k, v in fields.items()}
    try:
        return spec.cls(**kwargs)
    except Exception:  # noqa: BLE001 - the type's own validation refused the values
        raise ProtocolError(f"the answer holds a {name} whose fields are not valid") from None


# ------------------------------------------------------------------------------------ a learner's words
def quote(text: Any, limit: int = 200, marks: str = '"') -> str:
    """``text`` as one inert line: control, format and separator characters escaped, at most ``limit``
    characters (then "..."), in ``marks`` - how a learner's own words (an exception's name or message, a type
    name) appear inside the grader's messages."""
    try:
        text = str(text)
    except Exception:  # noqa: BLE001 - a learner's object whose __str__ fails
        text = "?"
    out = []
    for ch in text[: 4 * limit]:
        if ch == "\\" or ch in marks:
            out.append("\\" + ch)
        elif unicodedata.category(ch)[0] in "CZ" and ch != " ":
            out.append(ch.encode("unicode_escape").decode("ascii") if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}")
        else:
            out.append(ch)
    body = "".join(out)
    if len(body) > limit:
        body = body[: limit - 3] + "..."
    return f"{marks}{body}{marks}"


def one_line(text: Any, limit: int = 500) -> str:
    """A kernel's message as one inert line of at most ``limit`` characters (no quotes added)."""
    return quote(text, limit, marks="")
