"""Checks both engines run before serving anything, so a bad request fails up front with a clear message
instead of mid-run inside torch (an index out of range) or the scheduler (an empty free list)."""

from __future__ import annotations

from collections.abc import Iterable

from stage5.engine.sequence import Request
from stage5.models import ModelConfig


def unique_ids(requests: Iterable[Request]) -> None:
    """Request ids key the outputs and the per-request state; a repeated id would mix two requests."""
    seen: set[int] = set()
    for r in requests:
        if not isinstance(r, Request):
            raise TypeError(f"expected Request objects, got {type(r).__name__}")
        if r.id in seen:
            raise ValueError(f"request id {r.id} appears more than once; accepted: unique ids")
        seen.add(r.id)


def fits_model(request: Request, cfg: ModelConfig, what: str = "the model") -> None:
    """Token ids inside the vocabulary, and every position the request can reach inside the model's range.

    A request of ``max_len`` tokens feeds positions 0 .. max_len - 2 (its last token is sampled, never fed),
    so it needs ``max_len - 1`` positions.
    """
    bad = [t for t in request.prompt if not 0 <= t < cfg.vocab_size]
    if bad:
        raise ValueError(f"request {request.id}: token id {bad[0]} is outside {what}'s vocabulary "
                         f"(accepted: 0 .. {cfg.vocab_size - 1})")
    if request.max_len - 1 > cfg.max_position_embeddings:
        raise ValueError(f"request {request.id} may reach {request.max_len} tokens ({len(request.prompt)} prompt + "
                         f"{request.max_tokens} max_tokens), needing {request.max_len - 1} positions; {what}'s "
                         f"max_position_embeddings is {cfg.max_position_embeddings}")


def positive_ints(**values: object) -> None:
    """Engine sizes (blocks, block size, batch) are whole numbers >= 1; ``True`` or 2.5 is refused."""
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
