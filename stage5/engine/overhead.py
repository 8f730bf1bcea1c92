"""The fixed cost of an engine step, measured by a hollow run: the engine's op graph with matrices shrunk to
almost nothing. It sits beside the engine because it runs it; :mod:`stage5.calibrate` records the result in
the machine's :class:`~stage5.calibration.Calibration`, which the engine's clock reads."""

from __future__ import annotations

from dataclasses import replace

from stage5.calibration import low_quantile
from stage5.engine.clock import CpuClock
from stage5.engine.engine import Engine
from stage5.engine.roofline_toy import build
from stage5.engine.sequence import Request


def hollow_config(cfg):
    """``cfg`` with every matrix shrunk to almost nothing and the op graph kept: same layers, heads, vocab."""
    return replace(cfg, name=f"{cfg.name}-hollow", hidden_size=4 * cfg.num_heads, head_dim=4,
                   intermediate_size=4 * cfg.num_heads)


OVERHEAD_BATCHES, OVERHEAD_ROUNDS = (1, 64), 5


def hollow_step_times(model, batches: tuple[int, ...], rounds: int, new_tokens: int = 8) -> dict[int, list[float]]:
    """Decode step seconds of the hollow ``model`` per batch size, batch sizes interleaved round by round, each
    step timed on a :class:`~stage5.engine.clock.CpuClock` (time spent waiting for a core left out)."""
    times: dict[int, list[float]] = {b: [] for b in batches}
    for _ in range(rounds):
        for b in batches:
            requests = [Request(i, (1 + i % 7, 2, 3, 4), new_tokens) for i in range(b)]
            result = Engine(model, model.cfg, num_blocks=b * 2 + 2, block_size=16, max_batch=b).run(
                requests, clock=CpuClock())
            times[b] += [r.end_s - r.start_s for r in result.steps_log if r.kind == "decode"]  # on the CPU clock
    return times


def measure_overhead(cfg, batches: tuple[int, int] = OVERHEAD_BATCHES, rounds: int = OVERHEAD_ROUNDS
                     ) -> tuple[float, float]:
    """(seconds per step, seconds per sequence per step) of a decode step whose matrices cost nothing.

    Serves ``batch`` short requests on a hollow copy of ``cfg`` through the paged, continuous engine and fits
    the low quantile of the decode step times (:func:`~stage5.calibration.low_quantile`) as a + b * batch from
    two batch sizes, interleaved round by round.
    """
    times = hollow_step_times(build(hollow_config(cfg)), batches, rounds)
    lo, hi = (low_quantile(times[b]) for b in batches)
    per_seq = max(0.0, (hi - lo) / (batches[1] - batches[0]))
    return max(0.0, lo - per_seq * batches[0]), per_seq
