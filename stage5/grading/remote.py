"""Hidden checks outside the learner's kernel: the kernel only hands over answers, as data.

The grader runs a hidden test's code in its own (trusted) process, where ``stage5``, ``math`` and the checks are
the real ones. The learner's names that the test reads come from the kernel as data (:mod:`.protocol`); a
learner's *function* arrives as a :class:`RemoteFunction`, and :func:`call_learner` or
:func:`~stage5.grading.call_diagnose` given one sends the arguments to the kernel, which calls the function there
with the reference answers switched off and sends back only the result. Expected values are computed in the grader
and never enter the kernel, so patching anything inside the kernel cannot change them, and the hidden test's source
never reaches the kernel either. Whatever the kernel answers is read as data only: a reply that is not the data
:mod:`.protocol` reads, or an error message, becomes a failed check in the grader's words.

Kernel side: :func:`values` and :func:`serve` (called by the grader through ``user_expressions``), and the trusted
probes an exercise registers (:func:`register_probes`, exercise 2's). Grader side: :class:`RemoteFunction`,
:class:`Kernel`. Imports go one way: :mod:`.protocol` and :mod:`.blocking` below, the exercises above.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .blocking import _learner_failures, unavailable
from .checks import GradingError
from .protocol import (
    MAX_REPLY_CHARS,
    Opaque,
    ProtocolError,
    decode,
    dumps,
    encode,
    loads,
    one_line,
)

__all__ = ["MAX_REPLY_CHARS", "PROBES", "Kernel", "LocalKernel", "Opaque", "RemoteFunction", "call_learner", "decode", "encode",
           "kernel_of", "register_probes", "serve", "values"]

#: Trusted probes the grader may run in the kernel on a learner's objects, registered by the exercise that defines
#: them: name -> (probe(label, *objects, **spec), what is switched off while it runs unless the request says).
PROBES: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {}


def register_probes(probes: Mapping[str, Callable[..., Any]], blocked: Iterable[str]) -> None:
    """Make ``probes`` available to :class:`Kernel.drive` (an exercise registers its own when imported)."""
    for name, probe in probes.items():
        PROBES[name] = (probe, tuple(blocked))


# ------------------------------------------------------------------------------------ kernel side
def _main() -> dict[str, Any]:
    main = sys.modules.get("__main__")
    return vars(main) if main is not None else {}


def _reply(value: Any, label: str) -> str:
    text = dumps(value)
    return text if len(text) <= MAX_REPLY_CHARS else dumps({"error": f"{label}: the answer is too large"})


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
    return dumps(out)


def serve(request: str) -> str:
    """Call the learner's function named in ``request`` once per entry of its ``calls`` (each a label and the
    arguments), with the listed stage5 functions unavailable throughout; the reply lists ``{"value": ...}`` or
    ``{"error": learner-safe message}`` per call, stopping at the first error. A request naming a ``driver``
    runs that registered probe instead (:func:`_drive`)."""
    req = loads(request)
    if "driver" in req:
        return _drive(req)
    func = _main().get(req["function"])
    replies: list[dict[str, Any]] = []
    first = str(req["calls"][0]["label"])
    try:
        if not callable(func):
            raise GradingError(f"{first}: expected a function, got {type(func).__name__}")
        with unavailable(*req["blocked"], deep=True):
            for call in req["calls"]:
                with _learner_failures(call["label"], call["label"]):
                    replies.append({"value": encode(func(*decode(call["args"])))})
    except GradingError as err:
        replies.append({"error": str(err)})
    text = dumps(replies)
    return text if len(text) <= MAX_REPLY_CHARS else dumps([{"error": f"{first}: the answer is too large"}])


def _drive(req: dict[str, Any], space: Mapping[str, Any] | None = None) -> str:
    """Run a registered probe on the learner's objects named in ``req`` (kernel side; ``space`` is the notebook's
    namespace, ``__main__``'s by default); the reply is ``{"value": observations}`` or ``{"error": learner-safe
    message}``."""
    label = str(req["label"])
    space = _main() if space is None else space
    try:
        if req["driver"] not in PROBES:
            raise GradingError(f"{label}: this kernel has no probe {req['driver']!r} (is stage5 up to date?)")
        probe, default_blocked = PROBES[req["driver"]]
        blocked = default_blocked if req.get("blocked") is None else req["blocked"]
        missing = [n for n in req["names"] if n not in space]
        if missing:
            raise GradingError(f"{label}: {missing[0]} is not defined: run the cell that defines it")
        with unavailable(*blocked, deep=True), _learner_failures(label, label):
            reply = {"value": encode(probe(label, *[space[n] for n in req["names"]], **decode(req["spec"])))}
    except GradingError as err:
        reply = {"error": str(err)}
    return _reply(reply, label)


# ------------------------------------------------------------------------------------ grader side
def _kernel_error(message: Any) -> GradingError:
    """A failure the kernel reported: its text is the kernel's, so it is kept to one inert, bounded line."""
    return GradingError(one_line(message))


class Kernel:
    """The learner's kernel as a hidden test sees it in the grader (``_kernel`` in its namespace): ``drive`` runs
    one of the registered probes there on the learner's objects, named, and returns the observations as data."""

    def __init__(self, channel: Callable[[str], str]):
        self.channel = channel

    def drive(self, label: str, driver: str, names: list[str], spec: Mapping[str, Any],
              blocked: Iterable[str] | None = None) -> Any:
        request = dumps(_drive_request(label, driver, names, spec, blocked))
        return _read_drive_reply(label, lambda: self.channel(request))


class LocalKernel:
    """The learner's namespace in this very process (a notebook run by hand, or a test): :class:`Kernel`'s
    interface, the probe run here as :func:`_drive` runs it in the kernel and its answer read back the same way,
    through the protocol, so a notebook is graded alike in either (a numpy integer arrives as an int in both)."""

    def __init__(self, space: Mapping[str, Any]):
        self.space = space

    def drive(self, label: str, driver: str, names: list[str], spec: Mapping[str, Any],
              blocked: Iterable[str] | None = None) -> Any:
        request = dumps(_drive_request(label, driver, names, spec, blocked))
        return _read_drive_reply(label, lambda: _drive(loads(request), self.space))


def kernel_of(space: Mapping[str, Any]) -> Any:
    """The kernel a hidden test drives: the grader puts its channel in the namespace as ``_kernel``; a notebook
    run by hand gets its own namespace."""
    return space.get("_kernel") or LocalKernel(space)


def _drive_request(label: str, driver: str, names: list[str], spec: Mapping[str, Any],
                   blocked: Iterable[str] | None) -> dict[str, Any]:
    return {"driver": driver, "label": label, "names": list(names), "spec": encode(dict(spec)),
            "blocked": None if blocked is None else list(blocked)}


def _read_drive_reply(label: str, send: Callable[[], str]) -> Any:
    """The observations in the reply ``send`` returns, or the kernel's failure as a GradingError."""
    try:
        reply = loads(send())
    except ProtocolError:
        raise ProtocolError(f"{label}: your notebook's kernel did not answer") from None
    if not isinstance(reply, dict) or not ({"error"} <= reply.keys() or {"value"} <= reply.keys()):
        raise ProtocolError(f"{label}: your notebook's kernel did not answer")
    if "error" in reply:
        raise _kernel_error(reply["error"])
    try:
        return decode(reply["value"])
    except ProtocolError as err:
        raise ProtocolError(f"{label}: the kernel's answer could not be read: {err}") from None


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
        request = dumps({"function": self.name, "blocked": list(blocked),
                         "calls": [{"label": label, "args": encode(list(args))} for label, args in calls]})
        first = calls[0][0]
        try:
            replies = loads(self.channel(request))
        except ProtocolError:
            raise ProtocolError(f"{first}: your notebook's kernel did not answer") from None
        if not isinstance(replies, list) or not all(isinstance(r, dict) for r in replies):
            raise ProtocolError(f"{first}: your notebook's kernel did not answer")
        out = []
        for (label, _), reply in zip(calls, replies, strict=False):
            if "error" in reply:
                raise _kernel_error(reply["error"])
            if "value" not in reply:
                raise ProtocolError(f"{label}: your notebook's kernel did not answer")
            try:
                out.append(decode(reply["value"]))
            except ProtocolError as err:
                raise ProtocolError(f"{label}: your function returned something that is not plain data: {err}") \
                    from None
        if len(out) != len(calls):
            raise ProtocolError(f"{first}: your notebook's kernel did not answer every call")
        return out


def call_learner(name: str, func: Callable[..., Any], *args: Any, blocked: Iterable[str] = (), **kwargs: Any) -> Any:
    """Call a learner's function with ``blocked`` stage5 functions unavailable; turn any crash into a short,
    learner-safe failure that names the check (no traceback of the hidden test). Given a :class:`RemoteFunction`
    (in the grader), the call happens in the learner's kernel."""
    if isinstance(func, RemoteFunction):
        if kwargs:
            raise TypeError("a learner's function in the kernel takes positional arguments only")
        return func.call(name, args, blocked)
    if not callable(func):
        raise GradingError(f"{name}: expected a function, got {type(func).__name__}")
    with unavailable(*blocked, deep=True), _learner_failures(name, name):
        return func(*args, **kwargs)
