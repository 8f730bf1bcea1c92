"""Seeded synthetic traffic for the engine benchmark.

Real chat traffic is long-tailed on both sides: most prompts and answers are short, a few are very long.
Clients also set ``max_tokens`` far above what most answers use, because they cannot know in advance. Here
prompt and answer lengths are drawn from clipped log-normal distributions, prompts are slices of the
held-out corpus bytes (text the models never trained on), and every request carries the same generous cap.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from stage5.engine.sequence import Request


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
