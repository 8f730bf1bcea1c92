"""One engine replica on its own virtual clock: what a fleet (:mod:`stage5.engine.fleet`) and the two pools of a
disaggregated deployment (:mod:`stage5.engine.disagg`) each run several of, and ask the same questions of: what time
it is there, how many requests it holds, and when it next has something to do."""

from __future__ import annotations

import math

from stage5.engine.clock import VirtualClock
from stage5.engine.engine import Engine


class EngineReplica:
    """An :class:`~stage5.engine.engine.Engine` with its own block pool and a virtual clock priced by the toy roofline.
    ``sent`` counts the requests routed to it."""

    def __init__(self, index: int, model, cfg, cal, *, num_blocks: int, block_size: int, max_batch: int,
                 prefix_caching: bool = False, token_budget: int | None = None):
        from stage5.engine.roofline_toy import ROOFLINE_TOY  # imported here: it imports the engine package

        self.index = index
        self.block_size = block_size
        self.engine = Engine(model, cfg, num_blocks=num_blocks, block_size=block_size, max_batch=max_batch,
                             prefix_caching=prefix_caching, token_budget=token_budget)
        self.engine.start([], VirtualClock(cal, ROOFLINE_TOY))
        self.sent = 0

    @property
    def now(self) -> float:
        return self.engine.clock.now

    @property
    def load(self) -> int:
        """Requests sent here and not finished: queued (not yet arrived or not admitted) and running."""
        s = self.engine.scheduler
        return len(s.pending) + len(s.waiting) + len(s.running)

    @property
    def busy(self) -> bool:
        """Whether it has admitted or admissible work to step now."""
        s = self.engine.scheduler
        return bool(s.waiting or s.running)

    def _upcoming(self) -> list[float]:
        """When work it does not yet have arrives: its next request's arrival."""
        s = self.engine.scheduler
        return [s.pending[0].request.arrival] if s.pending else []

    @property
    def next_time(self) -> float:
        """When it next acts: now if it has work, else the next arrival (:meth:`_upcoming`), else never."""
        if self.busy:
            return self.now
        times = self._upcoming()
        return max(self.now, min(times)) if times else math.inf
