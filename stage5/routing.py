"""Routing requests to a cheaper model: the blended saving, and the router as a classifier with two error rates.

The router simulation (:func:`simulate_router`) is a stylised model, stated in full so it can be argued with:

* each request has a difficulty ``d`` drawn from a standard normal; the cheap model's answer is adequate when
  ``d`` is below the quantile that makes ``easy_share`` of requests easy;
* the router sees ``d`` plus normal noise of standard deviation ``router_noise`` and sends a request to the
  cheap model when that score is below a threshold;
* the team sets the threshold from an evaluation of ``eval_size`` labelled requests, graded by a judge whose
  residual (uncorrected) error rate on routed requests is ``judge_error``. The largest degradation the team
  can rule out is the measured rate plus two standard errors plus ``judge_error`` x the routed share.

A threshold is *safe* when that bound stays within the quality ``budget`` and the saving is at least
``min_saving``. The safe band is the range of routed shares that are safe; with a weak evaluation it is empty.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stage5 import cost, inputs
from stage5.hardware import Hardware
from stage5.models import ModelConfig
from stage5.quantization import deployment


def cost_ratio(big: str | ModelConfig, big_gpu: str | Hardware, big_gpus: int, small: str | ModelConfig,
               small_gpu: str | Hardware, small_gpus: int, prompt: int, output: int) -> float:
    """Steady-decode cost per output token of the small deployment over the big one, each at its largest batch
    that fits ``prompt + output``-token sequences, at the mean context (BF16, the cost model's assumptions)."""
    inputs.gpus(big_gpus, "big_gpus")
    inputs.gpus(small_gpus, "small_gpus")
    inputs.counts(prompt, "prompt")
    inputs.counts(output, "output")
    def best(model, gpu, n):
        dep = deployment(model, gpu, n)
        batch = int(cost.max_concurrency(dep, prompt + output))
        return cost.cost_terms(dep, batch, prompt + output / 2).dollars_per_token

    return best(small, small_gpu, small_gpus) / best(big, big_gpu, big_gpus)


def blended_saving(routed_share: cost.ArrayLike, ratio: float) -> np.ndarray:
    """Cost saving when ``routed_share`` of traffic goes to a model costing ``ratio`` x per token:
    1 / ((1 - share) + share x ratio). Equal output lengths on both paths are assumed."""
    r = inputs.reals(routed_share, "routed_share", low=0.0, high=1.0, accepted="a fraction in [0, 1] (or an array)")
    # a model a million times cheaper (or dearer) per token is past any pair the course compares
    ratio = inputs.real(ratio, "ratio (the routed model's cost per token over the big one's)", low=1e-6, high=1e6)
    return 1.0 / ((1.0 - r) + r * ratio)


@dataclass(frozen=True)
class RouterCurve:
    """One router, swept over its threshold. Arrays are indexed by threshold, from routing nothing to all."""

    routed_share: np.ndarray  # fraction of all requests sent to the cheap model
    degraded: np.ndarray  # fraction of all requests that are hard and were sent to the cheap model
    false_cheap: np.ndarray  # P(sent cheap | hard): the error users notice
    false_expensive: np.ndarray  # P(sent to the big model | easy): the error that wastes money
    bound: np.ndarray  # the degradation the team's evaluation can rule out
    saving: np.ndarray  # cost saving over sending everything to the big model
    safe: np.ndarray  # bound within budget and saving at least min_saving

    @property
    def band(self) -> tuple[float, float] | None:
        """(lowest, highest) safe routed share, or None when no threshold is safe."""
        if not self.safe.any():
            return None
        shares = self.routed_share[self.safe]
        return float(shares.min()), float(shares.max())

    @property
    def width(self) -> float:
        """Width of the safe band in fractions of traffic (0 when empty)."""
        band = self.band
        return 0.0 if band is None else band[1] - band[0]


def simulate_router(easy_share: float = 0.8, ratio: float = 0.1, router_noise: float = 0.5,
                    eval_size: float = 1000, judge_error: float = 0.0, budget: float = 0.02,
                    min_saving: float = 1.5, n: int = 100_000, points: int = 201, seed: int = 0) -> RouterCurve:
    """Sweep the router's threshold over ``points`` routed shares; ``eval_size=np.inf`` is a perfect eval."""
    inputs.real(easy_share, "easy_share", low=0.0, high=1.0, low_open=True, high_open=True)
    if not (isinstance(eval_size, (int, float, np.number)) and not isinstance(eval_size, bool)
            and eval_size >= 1):  # NaN fails this too; np.inf is the perfect evaluation
        raise ValueError(f"eval_size must be a number of labelled requests, at least 1 (np.inf: a perfect "
                         f"evaluation), got {eval_size!r}")
    inputs.fraction(judge_error, "judge_error")
    inputs.real(router_noise, "router_noise", low=0.0)
    inputs.positive(ratio, "ratio (cheap model's cost per token over the big one's)")
    inputs.fraction(budget, "budget")
    inputs.real(min_saving, "min_saving", low=0.0)
    n = inputs.integer(n, "n (simulated requests)", minimum=2, maximum=10**7)  # 10 million: a second of numpy
    points = inputs.integer(points, "points", minimum=2, maximum=100_000)
    seed = inputs.non_negative_int(seed, "seed")
    rng = np.random.default_rng(seed)
    difficulty = rng.standard_normal(n)
    hard = difficulty >= np.quantile(difficulty, easy_share)
    score = difficulty + router_noise * rng.standard_normal(n)
    order = np.argsort(score, kind="stable")
    hard_sorted = hard[order]
    # routing the k lowest scores to the cheap model, for k at evenly spaced shares of traffic
    k = np.round(np.linspace(0, 1, points) * n).astype(int)
    hard_routed = np.r_[0, np.cumsum(hard_sorted)][k]
    n_hard = int(hard.sum())
    if not 0 < n_hard < n:
        raise inputs.InputError(f"easy_share={easy_share!r} leaves {n - n_hard} easy and {n_hard} hard requests of "
                                f"{n:,}; accepted: a share that leaves some of each (or a larger n)")
    routed = k / n
    degraded = hard_routed / n
    false_cheap = hard_routed / n_hard
    false_expensive = ((n - n_hard) - (k - hard_routed)) / (n - n_hard)
    se = np.sqrt(degraded * (1 - degraded) / eval_size) if np.isfinite(eval_size) else np.zeros(points)
    bound = degraded + 2 * se + judge_error * routed
    saving = blended_saving(routed, ratio)
    safe = (bound <= budget) & (saving >= min_saving)
    return RouterCurve(routed, degraded, false_cheap, false_expensive, bound, saving, safe)


# Every public function above refuses a wrong record (a string where a Deployment goes) in one sentence.
inputs.check_object_arguments(globals())
