"""Forgiving name lookup with close-match suggestions, shared by the model and GPU registries."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable


class UnknownNameError(ValueError):
    """A registry name that is not known; the message lists the close matches and the accepted names."""


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9.]", "", name.lower())


def resolve(name: str, known: Iterable[str], kind: str, aliases: dict[str, str] | None = None) -> str:
    """Return the registry key for ``name``; raise :class:`UnknownNameError` naming close matches."""
    known = list(known)
    table = {_key(k): k for k in known}
    for alias, target in (aliases or {}).items():
        table.setdefault(_key(alias), target)
    if not isinstance(name, str) or not name.strip():
        raise UnknownNameError(f"{kind} name must be a non-empty string; accepted: {', '.join(known)}")
    hit = table.get(_key(name))
    if hit is not None:
        return hit
    close = difflib.get_close_matches(_key(name), list(table), n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(dict.fromkeys(table[c] for c in close))}?" if close else ""
    raise UnknownNameError(f"unknown {kind} {name!r}.{hint} Accepted: {', '.join(known)}.")
