"""Hidden checks outside the learner's kernel: the kernel only hands over serialized answers.

The grader runs a hidden test's code in its own (trusted) process, where ``stage5``, ``math`` and the checks are
the real ones. The learner's names that the test reads come from the kernel as JSON (numbers, strings, lists,
dicts); a learner's *function* arrives as a :class:`RemoteFunction`, and :func:`~stage5.grading.call_learner` or
:func:`~stage5.grading.call_diagnose` given one sends the arguments (JSON, stage5 dataclasses rebuilt by name) to
the kernel, which calls the function there with the reference answers switched off and sends back only the
result. Expected values are computed in the grader and never enter the kernel, so patching anything inside the
kernel cannot change them, and the hidden test's source never reaches the kernel either.

Kernel side: :func:`values` and :func:`serve` (called by the grader through ``user_expressions``).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import sys
from collections.abc import Callable, Iterable
from typing import Any

from .checks import GradingError

MAX_REPLY_CHARS = 1_000_000  # a learner's answer larger than this is refused


# ------------------------------------------------------------------------------------ encoding (both sides)
def encode(value: Any) -> Any:
    """JSON-ready form of an answer or an argument: plain data, and stage5 dataclasses by class name."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else {"__float__": repr(value)}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {"__dict__": [[encode(k), encode(v)] for k, v in value.items()]}
    if dataclasses.is_dataclass(value) and type(value).__module__.startswith("stage5."):
        cls = type(value)
        return {"__stage5__": f"{cls.__module__}:{cls.__qualname__}",
                "fields": {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}}
    for cast in (int, float):  # numpy and torch scalars
        if hasattr(value, "__index__" if cast is int else "__float__") and getattr(value, "ndim", 0) == 0:
            try:
                return encode(cast(value))
            except (TypeError, ValueError):
                pass
    return {"__opaque__": type(value).__name__}


class Opaque:
    """An answer that could not be sent over (an object, not data): checks reject it by its type name."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<{self.type_name}>"


def decode(value: Any) -> Any:
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "__float__" in value:
        return float(value["__float__"])
    if "__dict__" in value:
        return {_hashable(decode(k)): decode(v) for k, v in value["__dict__"]}
    if "__stage5__" in value:
        module, _, name = str(value["__stage5__"]).partition(":")
        if not module.startswith("stage5."):
            raise ValueError(f"refusing to build {module}:{name}")
        cls: Any = importlib.import_module(module)
        for part in name.split("."):
            cls = getattr(cls, part)
        return cls(**{k: decode(v) for k, v in value["fields"].items()})
    if "__opaque__" in value:
        return Opaque(str(value["__opaque__"]))
    raise ValueError(f"unknown encoded value {sorted(value)}")


def _hashable(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key


# ------------------------------------------------------------------------------------ kernel side
def _main() -> dict[str, Any]:
    main = sys.modules.get("__main__")
    return vars(main) if main is not None else {}


def values(names: Iterable[str]) -> str:
    """The learner's values of ``names`` in the notebook, as JSON: data, ``{"function": true}`` or missing."""
    space, out = _main(), {}
    for name in names:
        if name not in space:
            out[name] = {"missing": True}
        elif callable(space[name]) and not isinstance(space[name], type):
            out[name] = {"function": True}
        else:
            out[name] = {"value": encode(space[name])}
    return json.dumps(out)


def serve(request: str) -> str:
    """Call the learner's function named in ``request`` once per entry of its ``calls`` (each a label and the
    arguments), with the listed stage5 functions unavailable throughout; the reply lists ``{"value": ...}`` or
    ``{"error": learner-safe message}`` per call, stopping at the first error."""
    from .blocking import _learner_failures, unavailable

    req = json.loads(request)
    if "driver" in req:
        return _drive(req)
    func = _main().get(req["function"])
    replies: list[dict[str, Any]] = []
    try:
        if not callable(func):
            raise GradingError(f"{req['calls'][0]['label']}: expected a function, got {type(func).__name__}")
        with unavailable(*req["blocked"], deep=True):
            for call in req["calls"]:
                with _learner_failures(call["label"], call["label"]):
                    replies.append({"value": encode(func(*decode(call["args"])))})
    except GradingError as err:
        replies.append({"error": str(err)})
    text = json.dumps(replies)
    if len(text) > MAX_REPLY_CHARS:
        return json.dumps([{"error": f"{req['calls'][0]['label']}: the answer is too large"}])
    return text


def _drive(req: dict[str, Any]) -> str:
    """Run a trusted probe of exercise 2 on the learner's objects named in ``req`` (kernel side); the reply is
    ``{"value": observations}`` or ``{"error": learner-safe message}``."""
    from .blocking import _learner_failures, unavailable
    from .ex02 import drive

    label, space = str(req["label"]), _main()
    try:
        missing = [n for n in req["names"] if n not in space]
        if missing:
            raise GradingError(f"{label}: {missing[0]} is not defined: run the cell that defines it")
        with unavailable(*req["blocked"], deep=True), _learner_failures(label, label):
            reply = {"value": encode(drive(req["driver"], label, [space[n] for n in req["names"]],
                                           decode(req["spec"])))}
    except GradingError as err:
        reply = {"error": str(err)}
    text = json.dumps(reply)
    return text if len(text) <= MAX_REPLY_CHARS else json.dumps({"error": f"{label}: the answer is too large"})


# ------------------------------------------------------------------------------------ grader side
class Kernel:
    """The learner's kernel as a hidden test sees it in the grader (``_kernel`` in its namespace): ``drive`` runs
    one of exercise 2's probes there on the learner's objects, named, and returns the observations as data."""

    def __init__(self, channel: Callable[[str], str]):
        self.channel = channel

    def drive(self, label: str, driver: str, names: list[str], spec: dict[str, Any],
              blocked: Iterable[str] | None = None) -> Any:
        from .ex02 import SERVING_BLOCKED

        request = json.dumps({"driver": driver, "label": label, "names": list(names), "spec": encode(spec),
                              "blocked": list(SERVING_BLOCKED if blocked is None else blocked)})
        try:
            reply = json.loads(self.channel(request))
        except (ValueError, TypeError):
            raise GradingError(f"{label}: your notebook's kernel did not answer") from None
        if not isinstance(reply, dict):
            raise GradingError(f"{label}: your notebook's kernel did not answer")
        if "error" in reply:
            raise GradingError(str(reply["error"]))
        try:
            return decode(reply["value"])
        except (ValueError, TypeError, KeyError):
            raise GradingError(f"{label}: the kernel's answer could not be read") from None



class RemoteFunction:
    """A learner's function that lives in the sandboxed kernel; ``call`` is a round trip through ``channel``
    (a callable that sends one request string and returns the reply string)."""

    def __init__(self, name: str, channel: Callable[[str], str]):
        self.name, self.channel = name, channel

    def __repr__(self) -> str:
        return f"<learner function {self.name}>"

    def call(self, label: str, args: tuple[Any, ...], blocked: Iterable[str]) -> Any:
        """The learner's function on ``args``, called in the kernel."""
        return self.call_many([(label, args)], blocked)[0]

    def call_many(self, calls: list[tuple[str, tuple[Any, ...]]], blocked: Iterable[str]) -> list[Any]:
        """One round trip for several calls (labels name each in a failure); raises at the first failure."""
        request = json.dumps({"function": self.name, "blocked": list(blocked),
                              "calls": [{"label": label, "args": encode(list(args))} for label, args in calls]})
        first = calls[0][0]
        try:
            replies = json.loads(self.channel(request))
        except (ValueError, TypeError):
            raise GradingError(f"{first}: your notebook's kernel did not answer") from None
        if not isinstance(replies, list) or not all(isinstance(r, dict) for r in replies):
            raise GradingError(f"{first}: your notebook's kernel did not answer")
        out = []
        for (label, _), reply in zip(calls, replies, strict=False):
            if "error" in reply:
                raise GradingError(str(reply["error"]))
            try:
                out.append(decode(reply["value"]))
            except (ValueError, TypeError, KeyError):
                raise GradingError(f"{label}: your function returned something that is not plain data") from None
        if len(out) != len(calls):
            raise GradingError(f"{first}: your notebook's kernel did not answer every call")
        return out
