"""Switching stage5's own answers off while a learner's function runs, and learner crashes as one-line failures.

Used on both sides of the kernel boundary (:mod:`.remote` calls it in the kernel; a notebook run by hand calls it in
its own process); it imports nothing of the grading package but :mod:`.checks` and :mod:`.protocol`."""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys
import types
from collections.abc import Iterable, Iterator
from typing import Any

from .checks import GradingError
from .protocol import quote


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
                               "the exercise's Rules put it off limits, so work it out yourself")
    if isinstance(original, property):
        return property(blocked)
    return blocked


@contextlib.contextmanager
def unavailable(*targets: str, namespaces: Iterable[dict[str, Any]] = (), deep: bool = False) -> Iterator[None]:
    """Make the named functions, methods and properties raise :class:`UnavailableError` inside the block.

    Besides the defining module or class, every loaded module's global of the same object (``from stage5.cost
    import max_concurrency``) and each dict in ``namespaces`` (default: the notebook's ``__main__``) is patched,
    and everything is restored on exit. ``deep`` also finds copies a learner stashed before the check (in a list,
    a dict, a closure, a default argument, a class) through the garbage collector's referrers; it costs one pass
    over the heap, so only checks that call a learner's function once in a while use it.
    """
    saved: list[tuple[Any, str, Any, bool]] = []  # (owner, name, original, is_dict)
    try:
        stubs: dict[int, tuple[Any, Any]] = {}  # id(original) -> stub, for functions that modules may hold under other names
        for target in targets:
            owner, name = _resolve(target)
            original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
            stub = _stub(target, original)
            saved.append((owner, name, original, False))
            setattr(owner, name, stub)
            if deep or not isinstance(owner, type):
                stubs[id(original)] = (original, stub)
        if deep and stubs:
            _patch_referrers(stubs, saved)
        if stubs:
            # one pass over every namespace for all targets together (linear in modules + targets)
            spaces = [*namespaces]
            main = sys.modules.get("__main__")
            if main is not None:
                spaces.append(vars(main))
            spaces += [space for module in list(sys.modules.values())
                       if (space := getattr(module, "__dict__", None)) is not None]
            for space in spaces:
                for key, value in list(space.items()):
                    hit = stubs.get(id(value))
                    if hit is not None and hit[0] is value:
                        saved.append((space, key, value, True))
                        space[key] = hit[1]
        yield
    finally:
        for owner, name, original, is_dict in reversed(saved):
            if is_dict:
                owner[name] = original
            else:
                setattr(owner, name, original)


def _patch_referrers(stubs: dict[int, tuple[Any, Any]], saved: list[tuple[Any, Any, Any, bool]]) -> None:
    """Replace every other reference to an original by its stub: in dicts, lists, closure cells, default
    arguments and class attributes (recorded in ``saved`` for restoring).

    Each ``gc.get_referrers`` call walks the whole heap (tens of ms with torch loaded), so the walk is done three
    times in all, whatever the number of references: once for the originals, once for the classes that own the
    dicts found, once for the functions whose defaults are the tuples found. Loaded modules' dicts are left to the
    caller's namespace pass."""
    originals = [original for original, _ in stubs.values()]
    modules = {id(space) for module in list(sys.modules.values())
               if (space := getattr(module, "__dict__", None)) is not None}

    def stub_for(value: Any) -> Any:
        hit = stubs.get(id(value))
        return hit[1] if hit is not None and hit[0] is value else None

    refs = [ref for ref in gc.get_referrers(*originals) if ref is not originals and ref is not stubs]
    dicts = [ref for ref in refs if isinstance(ref, dict) and id(ref) not in modules]
    tuples = [ref for ref in refs if isinstance(ref, tuple)]
    owner_of: dict[int, type] = {}  # id(a class's own dict) -> the class
    if dicts:
        wanted = {id(d) for d in dicts}
        for cls in gc.get_referrers(*dicts):
            if isinstance(cls, type):
                for inner in gc.get_referents(cls):  # a type's referents include its real __dict__
                    if id(inner) in wanted:
                        owner_of[id(inner)] = cls
    for ref in dicts:
        owner = owner_of.get(id(ref))
        for key, value in list(ref.items()):
            if (stub := stub_for(value)) is None:
                continue
            if owner is not None:  # a class attribute: through setattr, so the type's caches stay right
                saved.append((owner, key, value, False))
                setattr(owner, key, stub)
            else:
                saved.append((ref, key, value, True))
                ref[key] = stub
    for ref in refs:
        if isinstance(ref, list):
            for i, value in enumerate(ref):
                if (stub := stub_for(value)) is not None:
                    saved.append((ref, i, value, True))
                    ref[i] = stub
        elif isinstance(ref, types.CellType):
            if (stub := stub_for(ref.cell_contents)) is not None:
                saved.append((ref, "cell_contents", ref.cell_contents, False))
                ref.cell_contents = stub
    if tuples:
        wanted = {id(t) for t in tuples}
        for func in gc.get_referrers(*tuples):
            if isinstance(func, types.FunctionType) and id(func.__defaults__) in wanted:
                ref = func.__defaults__
                saved.append((func, "__defaults__", ref, False))
                func.__defaults__ = tuple(stub_for(v) or v for v in ref)


@contextlib.contextmanager
def _learner_failures(label: str, name: str) -> Iterator[None]:
    """Turn whatever a learner's code raises into a one-line GradingError naming ``label`` (or ``name`` for a
    function that is not written yet), never the hidden test's traceback."""
    try:
        yield
    except UnavailableError as err:
        raise GradingError(f"{label}: {err}") from None
    except GradingError:
        raise  # already a learner-safe failure (a CPU-time limit, a probe's own finding)
    except NotImplementedError:
        raise GradingError(f"{name}: the function is not written yet (it raises NotImplementedError)") from None
    except Exception as err:  # noqa: BLE001 - any learner crash becomes a graded failure
        # the learner's words, quoted and escaped: a class named like a grader message stays the learner's
        raise GradingError(f"{label}: your function raised {_learners_words(err)}") from None


def _learners_words(err: BaseException) -> str:
    """A learner's exception as one quoted, escaped, bounded line: ``"ValueError: the message"``."""
    try:
        message = str(err)
    except Exception:  # noqa: BLE001 - a learner's exception whose __str__ fails
        message = ""
    name = getattr(type(err), "__name__", "an exception")
    return quote(f"{name}: {message}" if message else name)

