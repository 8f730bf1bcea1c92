"""The serving run's clock: what TTFT, TPOT and goodput are measured on.

* :class:`WallClock` - each step lasts what it measured on this CPU (``time.perf_counter``). When nothing is
  running and the next request has not arrived, the clock jumps to its arrival instead of sleeping: the
  server would sit idle for that long either way.
* :class:`CpuClock` - each step lasts its wall time, less what it spent waiting for a core: the calibration
  and the benchmarks that set a measurement beside the step model time steps on it, so that other work on a
  busy machine does not pass for the cost of the step.
* :class:`VirtualClock` - each step lasts what the calibrated step model predicts for it
  (:func:`stage5.step_model.predict_step`: that step's sequences, tokens fed and K/V read) on a model config
  of your choice. The schedule depends only on token counts, so virtual latencies are deterministic: the same
  run gives the same numbers on a busy machine, and tests can assert them. The config timed need not be the
  one that runs: the cheap trained model can produce the tokens while the clock prices every step as the
  roofline toy (or any ``ModelConfig``) on this machine.
"""

from __future__ import annotations

import math
import time

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


class CpuClock(WallClock):
    """A step lasts the smaller of its wall time and the CPU time this thread used during it.

    On a quiet core the two agree. When other work takes the core away mid-step, the wall time grows by the
    wait and the CPU time does not. The step's start is the engine's last look at the clock before the step
    (it reads ``now`` as the step begins), so the bookkeeping between steps is not counted. Where the OS counts
    a thread's CPU time coarsely (Windows: in ticks of about 15 ms), this is the wall clock."""

    name = "cpu"
    FINE = time.get_clock_info("thread_time").resolution <= 1e-6 and not time.get_clock_info(
        "thread_time").implementation.startswith("GetThreadTimes")

    def __init__(self) -> None:
        self._mark = time.thread_time()
        super().__init__()

    @property
    def now(self) -> float:
        self._mark = time.thread_time()  # a step starts after the engine's last look at the clock
        return self._now

    @now.setter
    def now(self, value: float) -> None:
        self._now = value

    def step(self, batch: int, tokens: int, context: int, wall_s: float) -> float:
        used = time.thread_time() - self._mark
        return self.advance(min(wall_s, used) if self.FINE else wall_s)


class VirtualClock(WallClock):
    name = "virtual"

    def __init__(self, cal: Calibration, cfg: ModelConfig):
        super().__init__()
        self.cal, self.cfg = cal, cfg

    def step(self, batch: int, tokens: int, context: int, wall_s: float) -> float:
        from stage5.step_model import predict_step

        duration = float(predict_step(self.cal, self.cfg, batch, context / batch, tokens_per_seq=tokens / batch).time_s)
        return self.advance(duration)
