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

from stage5.calibrate import Calibration
from stage5.models import ModelConfig


class WallClock:
    name = "wall"

    def __init__(self) -> None:
        self.now = 0.0

    def wait_until(self, t: float) -> None:
        self.now = max(self.now, t)

    def step(self, batch: int, tokens: int, context: int, wall_s: float) -> float:
        """Advance by one step; returns its duration."""
        self.now += wall_s
        return wall_s


class VirtualClock(WallClock):
    name = "virtual"

    def __init__(self, cal: Calibration, cfg: ModelConfig):
        super().__init__()
        self.cal, self.cfg = cal, cfg

    def step(self, batch: int, tokens: int, context: int, wall_s: float) -> float:
        from stage5.step_model import predict_step

        duration = float(predict_step(self.cal, self.cfg, batch, context / batch, tokens_per_seq=tokens / batch).time_s)
        self.now += duration
        return duration
