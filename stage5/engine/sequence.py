"""A request as the client sends it, and a sequence as the engine tracks it."""

from __future__ import annotations

from dataclasses import dataclass, field


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Request:
    """``prompt`` token ids; ``max_tokens`` is the client's cap on new tokens.

    ``stop_after`` stands in for the model choosing to stop: the request ends after that many new tokens,
    as if a stop token had been sampled there. The scheduler never reads it; it only learns that a sequence
    ended when it does. ``None`` means run to the cap.

    ``arrival`` is when the client sends it, in seconds on the serving run's clock (0: queued at the start).
    """

    id: int
    prompt: tuple[int, ...]
    max_tokens: int
    stop_after: int | None = None
    arrival: float = 0.0

    def __post_init__(self) -> None:
        # Checked here so no engine meets a fractional cap (2.5 would produce 3 tokens) or a non-integer token.
        if not _is_int(self.id):
            raise ValueError(f"request id must be an integer, got {self.id!r}")
        if not isinstance(self.prompt, tuple) or not self.prompt:
            raise ValueError(f"request {self.id}: prompt must be a non-empty tuple of token ids, got {self.prompt!r}")
        bad = [t for t in self.prompt if not _is_int(t) or t < 0]
        if bad:
            raise ValueError(f"request {self.id}: token ids are integers >= 0, got {bad[0]!r}")
        if not _is_int(self.max_tokens) or self.max_tokens < 1:
            raise ValueError(f"request {self.id}: max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        if self.stop_after is not None and not _is_int(self.stop_after):
            raise ValueError(f"request {self.id}: stop_after must be None or an integer, got {self.stop_after!r}")
        if self.stop_after is not None and not 1 <= self.stop_after <= self.max_tokens:
            raise ValueError(f"request {self.id}: stop_after={self.stop_after} must lie in 1..max_tokens "
                             f"({self.max_tokens})")
        if (not isinstance(self.arrival, (int, float)) or isinstance(self.arrival, bool)
                or not 0 <= self.arrival < float("inf")):
            raise ValueError(f"request {self.id}: arrival must be a finite number of seconds >= 0, got {self.arrival!r}")

    @property
    def max_len(self) -> int:
        """The most tokens this request can ever hold: prompt plus its cap."""
        return len(self.prompt) + self.max_tokens

    @property
    def output_len(self) -> int:
        return self.max_tokens if self.stop_after is None else self.stop_after


@dataclass(eq=False)
class Sequence:
    """A request in flight. ``tokens`` = prompt + generated so far; K/V is stored for the first ``num_cached``.

    Between steps ``num_cached == len(tokens) - 1``: the newest token has been sampled but not yet fed back.
    After a preemption ``num_cached`` drops to 0 and the next prefill recomputes everything.
    """

    request: Request
    tokens: list[int] = field(default_factory=list)
    num_cached: int = 0
    block_table: list[int] = field(default_factory=list)  # paged allocator: physical block ids, in order
    start: int | None = None  # contiguous allocator: first slot of this sequence's run
    block_hashes: list[int] = field(default_factory=list)  # prefix caching: chained hashes of its full blocks

    def __post_init__(self) -> None:
        if not self.tokens:
            self.tokens = list(self.request.prompt)

    @property
    def id(self) -> int:
        return self.request.id

    @property
    def output(self) -> list[int]:
        return self.tokens[len(self.request.prompt):]

    @property
    def finished(self) -> bool:
        return len(self.output) >= self.request.output_len
