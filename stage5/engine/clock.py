"""The serving run's clock: what TTFT, TPOT and goodput are measured on.

* :class:`WallClock` - each step lasts what it measured on this CPU (``time.perf_counter``). When nothing is
  running and the next request has not arrived, the clock jumps to its arrival instead of sleeping: the
  server would sit idle for that long either way.
* :class:`VirtualClock` - each step lasts what the calibrated step model predicts for it
  (:func:`stage5.step_model.predict_step`: that step's sequences, tokens fed and K/V read) on a model config
  of your choice. The schedule depends only on token counts, so virtual latencies are deterministic: the same
  run gives the same numbers on a busy machine, and tests can assert them. The config timed need not be the
  one that runs: the cheap trained model can produce the tokens while the clock prices every step as the
  roofline toy (or any ``ModelConfig``) on this machine.
"""

from __future__ import annotations

import math

from stage5.calibration import Calibration
from stage5.inputs import InputError
from stage5.models import ModelConfig


class WallClock:
    name = "wall"

    def __init__(self) -> None:
        self.now = 0.0

    def wait_until(self, t: float) -> None:
        if not math.isfinite(t):
            raise InputError(f"a request arrives at {t!r} s on the clock; accepted: a finite time")
        self.now = max(self.now, t)

    def advance(self, duration: float) -> float:
        """Move the clock on by ``duration`` seconds, refusing a step that would vanish.

        Float64 holds about 16 significant digits: on a clock that reads 1e300 s (an arrival at a rate of
        1e-300 requests/s) a millisecond step adds nothing, and every latency would come out as zero.
        """
        if not (math.isfinite(duration) and duration >= 0):
            raise InputError(f"a step lasting {duration!r} s; accepted: a finite duration >= 0 (check the calibration)")
        later = self.now + duration
        if duration > 0 and later == self.now:
            raise InputError(f"a step of {duration:.3g} s vanishes on a clock reading {self.now:.3g} s (float64 "
                             "keeps 16 digits); accepted: arrival times that keep the run within about 1e9 s")
        self.now = later
        return duration

    def step(self, batch: int, tokens: int, context: int, wall_s: float) -> float:
        """Advance by one step; returns its duration."""
        return self.advance(wall_s)


class VirtualClock(WallClock):
    name = "virtual"

    def __init__(self, cal: Calibration, cfg: ModelConfig):
        super().__init__()
        self.cal, self.cfg = cal, cfg

    def step(self, batch: int, tokens: int, context: int, wall_s: float) -> float:
        from stage5.step_model import predict_step

        duration = float(predict_step(self.cal, self.cfg, batch, context / batch, tokens_per_seq=tokens / batch).time_s)
        return self.advance(duration)
