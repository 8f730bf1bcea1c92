"""Seeded synthetic traffic for the engine benchmark.

Real chat traffic is long-tailed on both sides: most prompts and answers are short, a few are very long.
Clients also set ``max_tokens`` far above what most answers use, because they cannot know in advance. Here
prompt and answer lengths are drawn from clipped log-normal distributions, prompts are slices of the
held-out corpus bytes (text the models never trained on), and every request carries the same generous cap.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from stage5.engine.sequence import Request
from stage5.inputs import (
    MAX_REQUEST_TOKENS,
    MAX_WORKLOAD_REQUESTS,
    InputError,
    fraction,
    integer,
    positive,
    real,
    workload_size,
)
from stage5.inputs import seed as inputs_seed


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class WorkloadSpec:
    n: int = 64
    seed: int = 0
    prompt_median: float = 40.0
    prompt_sigma: float = 0.6
    prompt_range: tuple[int, int] = (8, 256)
    output_median: float = 56.0
    output_sigma: float = 0.9
    output_range: tuple[int, int] = (4, 640)
    max_tokens: int = 768  # the cap each client asks for; every actual length is below it

    def describe(self) -> dict:
        return asdict(self)


def _lognormal(rng: np.random.Generator, n: int, median: float, sigma: float, bounds: tuple[int, int]) -> list[int]:
    draws = np.exp(rng.normal(np.log(median), sigma, n))
    return np.clip(np.rint(draws), bounds[0], bounds[1]).astype(int).tolist()


def make_workload(n: int = 64, seed: int = 0, text: bytes | None = None, **overrides) -> list[Request]:
    """``n`` requests, reproducible from ``seed``. ``text`` defaults to the held-out corpus bytes."""
    spec = WorkloadSpec(n=n, seed=seed, **overrides)
    for name in ("prompt_range", "output_range"):
        bounds = getattr(spec, name)
        if not isinstance(bounds, (tuple, list)) or len(bounds) != 2:
            raise InputError(f"{name} must be a (shortest, longest) pair of token counts, got {bounds!r}")
        integer(bounds[0], f"{name}[0] (tokens)", minimum=1, maximum=bounds[1] if _is_int(bounds[1]) else None)
    workload_size(n, {"prompt_range[1]": spec.prompt_range[1], "max_tokens": spec.max_tokens})
    seed = inputs_seed(seed)
    for name in ("prompt_median", "output_median"):
        positive(getattr(spec, name), name)
    for name in ("prompt_sigma", "output_sigma"):
        real(getattr(spec, name), name, low=0.0, high=10.0, accepted="a spread in [0, 10] (log-normal sigma)")
    if spec.output_range[1] > spec.max_tokens:
        raise ValueError(f"longest actual output ({spec.output_range[1]}) exceeds the cap ({spec.max_tokens})")
    if text is None:
        from stage5.engine.checkpoints import corpus_split

        text = corpus_split()[1]
    rng = np.random.default_rng(seed)
    prompt_lens = _lognormal(rng, n, spec.prompt_median, spec.prompt_sigma, spec.prompt_range)
    output_lens = _lognormal(rng, n, spec.output_median, spec.output_sigma, spec.output_range)
    if len(text) <= max(prompt_lens):
        raise ValueError(f"text of {len(text)} bytes is too short for a {max(prompt_lens)}-byte prompt")
    requests = []
    for i, (p, o) in enumerate(zip(prompt_lens, output_lens, strict=True)):
        start = int(rng.integers(0, len(text) - p))
        requests.append(Request(id=i, prompt=tuple(text[start:start + p]), max_tokens=spec.max_tokens, stop_after=o))
    return requests


def small_workload(n: int = 24, seed: int = 0, max_tokens: int = 192) -> list[Request]:
    """``n`` requests sized for :func:`stage5.engine.checkpoints.tiny_model`: prompts around 24 bytes, answers
    around 24 tokens with a long tail, a cap of ``max_tokens``."""
    return make_workload(n=n, seed=seed, prompt_median=24, prompt_range=(4, 96), output_median=24,
                         output_range=(2, min(160, max_tokens)), max_tokens=max_tokens)


# ------------------------------------------------------------------------------------------------------------
# Traffic that arrives over time, for serving under load (``python -m stage5 bench load``).

@dataclass(frozen=True)
class Lengths:
    """A distribution of token counts.

    * ``Lengths("fixed", value=64)``;
    * ``Lengths("uniform", low=16, high=64)`` (both ends included);
    * ``Lengths("long_tail", low=16, high=64, long_share=0.1, long_low=400, long_high=800)``: many short
      lengths, uniform in ``low..high``, and a share ``long_share`` of long ones, uniform in
      ``long_low..long_high`` - a few long prompts among many short ones.
    """

    kind: str
    value: int = 0
    low: int = 0
    high: int = 0
    long_share: float = 0.0
    long_low: int = 0
    long_high: int = 0

    def __post_init__(self) -> None:
        for name in ("value", "low", "high", "long_low", "long_high"):
            integer(getattr(self, name), f"Lengths.{name} (tokens)", minimum=0, maximum=MAX_REQUEST_TOKENS)
        fraction(self.long_share, "Lengths.long_share")
        if not isinstance(self.kind, str) or self.kind not in ("fixed", "uniform", "long_tail"):
            raise ValueError(f"length distribution {self.kind!r} is unknown; accepted: fixed, uniform, long_tail")
        if self.kind == "fixed" and self.value < 1:
            raise ValueError(f"a fixed length must be >= 1, got {self.value}")
        if self.kind != "fixed" and not 1 <= self.low <= self.high:
            raise ValueError(f"lengths need 1 <= low <= high, got low={self.low}, high={self.high}")
        if self.kind == "long_tail" and not (0 <= self.long_share <= 1 and 1 <= self.long_low <= self.long_high):
            raise ValueError(f"a long tail needs 0 <= long_share <= 1 and 1 <= long_low <= long_high, got "
                             f"{self.long_share}, {self.long_low}, {self.long_high}")

    @property
    def longest(self) -> int:
        return {"fixed": self.value, "uniform": self.high, "long_tail": max(self.high, self.long_high)}[self.kind]

    def draw(self, rng: np.random.Generator, n: int) -> list[int]:
        if self.kind == "fixed":
            return [self.value] * n
        short = rng.integers(self.low, self.high + 1, n)
        if self.kind == "uniform":
            return short.tolist()
        long = rng.integers(self.long_low, self.long_high + 1, n)
        return np.where(rng.random(n) < self.long_share, long, short).tolist()


def poisson_arrivals(n: int, rate: float, seed: int = 0) -> list[float]:
    """``n`` arrival times (seconds) of a Poisson process at ``rate`` requests/s: exponential gaps, first at 0."""
    n = integer(n, "n (requests)", minimum=1, maximum=MAX_WORKLOAD_REQUESTS)
    rate = positive(rate, "rate")  # requests per second
    if 1.0 / rate == math.inf:  # a denormal rate: its mean gap overflows to infinity
        raise InputError(f"rate must be a finite number of requests per second > 0 whose mean gap is finite, got {rate!r}")
    gaps = np.random.default_rng(inputs_seed(seed)).exponential(1.0 / rate, n)
    gaps[0] = 0.0
    return np.cumsum(gaps).tolist()


def make_arrivals(n: int, prompt: Lengths, output: Lengths, rate: float | None = None,
                  timestamps: list[float] | None = None, seed: int = 0, max_tokens: int | None = None,
                  text: bytes | None = None) -> list[Request]:
    """``n`` requests sent at the times of a Poisson process at ``rate`` or at ``timestamps`` (one of the two),
    prompts sliced from ``text`` (default: the held-out corpus) with lengths from ``prompt``, answers of
    lengths from ``output`` under a cap of ``max_tokens`` (default: the longest answer ``output`` can draw).
    The same seed gives the same requests at every rate, so a sweep compares like with like."""
    if not isinstance(prompt, Lengths) or not isinstance(output, Lengths):
        raise InputError(f"prompt and output must be Lengths, got {type(prompt).__name__} and {type(output).__name__}")
    n, _ = workload_size(n, {"the longest prompt": prompt.longest, "the longest output": output.longest})
    if max_tokens is not None:
        workload_size(n, {"max_tokens": max_tokens, "the longest prompt": prompt.longest})
    if (rate is None) == (timestamps is None):
        raise ValueError("give exactly one of rate (a Poisson process) or timestamps (one per request)")
    if timestamps is not None and (not isinstance(timestamps, (list, tuple)) or len(timestamps) != n):
        raise InputError(f"timestamps must be a list of one arrival time per request ({n}), got {timestamps!r:.80}")
    times = (poisson_arrivals(n, rate, seed) if rate is not None
             else [real(t, "timestamps", low=0.0, accepted="finite seconds >= 0") for t in timestamps])
    cap = max_tokens or output.longest
    if output.longest > cap:
        raise ValueError(f"longest answer ({output.longest}) exceeds the cap max_tokens={cap}")
    if text is None:
        from stage5.engine.checkpoints import corpus_split

        text = corpus_split()[1]
    if len(text) <= prompt.longest:
        raise ValueError(f"text of {len(text)} bytes is too short for a {prompt.longest}-byte prompt")
    rng = np.random.default_rng(seed + 1)  # lengths and prompts do not depend on the rate
    prompts, outputs = prompt.draw(rng, n), output.draw(rng, n)
    starts = rng.integers(0, len(text) - prompt.longest, n)
    return [Request(id=i, prompt=tuple(text[s:s + p]), max_tokens=cap, stop_after=o, arrival=t)
            for i, (p, o, s, t) in enumerate(zip(prompts, outputs, starts.tolist(), times, strict=True))]
