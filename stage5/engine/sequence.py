"""A request as the client sends it, and a sequence as the engine tracks it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Request:
    """``prompt`` token ids; ``max_tokens`` is the client's cap on new tokens.

    ``stop_after`` stands in for the model choosing to stop: the request ends after that many new tokens,
    as if a stop token had been sampled there. The scheduler never reads it; it only learns that a sequence
    ended when it does. ``None`` means run to the cap.
    """

    id: int
    prompt: tuple[int, ...]
    max_tokens: int
    stop_after: int | None = None

    def __post_init__(self) -> None:
        if not self.prompt:
            raise ValueError(f"request {self.id}: empty prompt")
        if self.max_tokens < 1:
            raise ValueError(f"request {self.id}: max_tokens must be at least 1, got {self.max_tokens}")
        if self.stop_after is not None and not 1 <= self.stop_after <= self.max_tokens:
            raise ValueError(f"request {self.id}: stop_after={self.stop_after} must lie in 1..max_tokens "
                             f"({self.max_tokens})")

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
