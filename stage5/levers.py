"""The levers of serving cost: cost per token as a product of terms, and the gain of each lever for one deployment.

:func:`diagnose_reference` is the reference answer to exercise ex03 ("diagnose a deployment") and feeds the
simulator's lever panel. Everything is exact and deterministic given its inputs.

A request is costed as in :func:`stage5.cost.request_gpu_seconds`: its prefill runs alone on the whole
deployment, and each of its ``output`` decode steps is shared with ``concurrency`` sequences at the mean
context (prompt + output / 2). No queueing, perfect batching, perfect tensor-parallel scaling, a fixed MFU:
all four flatter the absolute numbers, which is why the chapters trust the ratios more.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stage5 import cost, inputs
from stage5.hardware import Hardware
from stage5.models import ModelConfig
from stage5.quantization import deployment
from stage5.routing import blended_saving, cost_ratio

OBJECTIVES = ("cost", "latency")
LEVERS = ("batching", "prefix_caching", "quantization", "speculative")  # also the tie-break order
DEFAULT_TPOT_SLO_S = 0.05  # 50 ms per output token (20 tokens/s per user): the cap on the batching lever


# The cost terms live in stage5.cost; re-exported here, where the chapters and the exercise first meet them.
CostTerms = cost.CostTerms
cost_terms = cost.cost_terms


# ------------------------------------------------------------------------------------------ per request
def _check_request(prompt, output, concurrency, prefix_hit, decode_speedup) -> None:
    for value, name in ((prompt, "prompt"), (output, "output"), (concurrency, "concurrency")):
        inputs.counts(value, name)
    inputs.fraction(prefix_hit, "prefix_hit")
    # speculative decoding gains a few tokens per step; 1,000x (or 1/100) is no lever the course models
    inputs.real(decode_speedup, "decode_speedup", low=0.01, high=1000.0)


def request_seconds(dep: cost.Deployment, prompt: float, output: float, concurrency: float,
                    prefix_hit: float = 0.0, decode_speedup: float = 1.0) -> tuple[float, float]:
    """(prefill seconds, decode seconds) of deployment time one request costs.

    Decode seconds are the request's share: ``output`` steps at the mean context, divided by the
    ``concurrency`` sharing each step and by ``decode_speedup`` (speculative decoding's tokens per step).
    """
    _check_request(prompt, output, concurrency, prefix_hit, decode_speedup)
    prefill = float(cost.ttft_s(dep, prompt, prefix_hit))
    decode = output * float(cost.tpot_s(dep, concurrency, prompt + output / 2)) / (concurrency * decode_speedup)
    return prefill, decode


def dollars_per_million(dep: cost.Deployment, prompt: float, output: float, concurrency: float,
                        prefix_hit: float = 0.0, decode_speedup: float = 1.0,
                        price_per_gpu_hour: float = cost.DEFAULT_PRICE_PER_GPU_HOUR) -> float:
    """Dollars per million output tokens, prefill time included (prompt tokens are not billed separately)."""
    inputs.price(price_per_gpu_hour)
    pre, dec = request_seconds(dep, prompt, output, concurrency, prefix_hit, decode_speedup)
    return cost.CostTerms(cost.price_per_s(dep, price_per_gpu_hour), pre + dec, output).dollars_per_million


def latency_s(dep: cost.Deployment, prompt: float, output: float, concurrency: float,
              prefix_hit: float = 0.0, decode_speedup: float = 1.0) -> float:
    """One request's end-to-end latency with no queueing: TTFT + output x TPOT at the stated concurrency."""
    _check_request(prompt, output, concurrency, prefix_hit, decode_speedup)
    ttft = float(cost.ttft_s(dep, prompt, prefix_hit))
    return ttft + output * float(cost.tpot_s(dep, concurrency, prompt + output / 2)) / decode_speedup


def max_batch_within_slo(dep: cost.Deployment, context: float, limit: int, tpot_slo_s: float | None) -> int:
    """Largest batch in [0, limit] whose TPOT at ``context`` is within the SLO (bisection; TPOT rises with
    batch). ``tpot_slo_s=None``: no SLO, so ``limit``."""
    inputs.non_negative_int(limit, "limit")
    inputs.counts(context, "context", minimum=0.0)
    if tpot_slo_s is not None:
        inputs.positive(tpot_slo_s, "tpot_slo_s")
    if tpot_slo_s is None:
        return int(limit)
    lo, hi = 0, int(limit)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if float(cost.tpot_s(dep, mid, context)) <= tpot_slo_s:
            lo = mid
        else:
            hi = mid - 1
    return lo


# ------------------------------------------------------------------------------------------ diagnosis
@dataclass(frozen=True)
class Diagnosis:
    """What :func:`diagnose_reference` returns. Gains are ratios old / new of the objective's metric, so a gain
    above 1 is an improvement and below 1 a loss; ``metric`` is that metric at the stated deployment
    ($ per million output tokens for "cost", seconds of end-to-end request latency for "latency")."""

    objective: str
    metric: float
    gains: dict[str, float]
    best_lever: str
    prefill_share: float  # share of the request's deployment-seconds spent in prefill
    phase: str  # "prefill" or "decode": whichever has the larger share (decode on a tie)
    decode_bound: str  # "memory" or "compute": the decode step at the stated concurrency and mean context
    max_concurrency: int  # sequences of prompt + output tokens whose KV cache fits
    batching_target: int  # the concurrency the batching lever moves to
    notes: tuple[str, ...] = field(default=())


def diagnose_reference(model: str | ModelConfig, gpu: str | Hardware, num_gpus: int, prompt: int, output: int,
                       concurrency: int, objective: str = "cost", *, weights: str = "bf16", kv: str = "bf16",
                       prefix_hit: float = 0.5, alpha: float = 0.7, k: int = 4, draft_cost: float = 0.05,
                       tpot_slo_s: float | None = DEFAULT_TPOT_SLO_S,
                       price_per_gpu_hour: float = cost.DEFAULT_PRICE_PER_GPU_HOUR,
                       estimate: cost.Estimate | None = None) -> Diagnosis:
    """Diagnose one deployment and rank four levers, each applied alone to the stated deployment.

    The levers:

    batching
        raise concurrency to the largest batch that both fits in KV memory at the full sequence length
        (``prompt + output`` tokens per sequence) and keeps TPOT at the mean context within ``tpot_slo_s``;
        never below the stated concurrency.
    prefix_caching
        skip the prefill of a ``prefix_hit`` fraction of each prompt (decode unchanged; the memory the
        shared blocks would save is not counted).
    quantization
        FP8 weights (W8A8: the chip's FP8 rate where it has one) and an FP8 KV cache, same concurrency; 1.0
        when the deployment is already at 1 byte or less for both.
    speculative
        draft ``k`` tokens with acceptance ``alpha``, each draft step costing ``draft_cost`` x a target step
        (:func:`stage5.cost.speculative_speedup`), same concurrency; decode only.

    ``estimate``: price everything in estimate mode with these terms (default: the simple estimate).

    Raises :class:`stage5.cost.InfeasibleDeployment` if the weights do not fit or ``concurrency`` sequences
    of ``prompt + output`` tokens do not fit, and ``ValueError`` for an unknown objective.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    prompt, output, concurrency = (inputs.positive_int(v, n) for v, n in
                                   ((prompt, "prompt"), (output, "output"), (concurrency, "concurrency")))
    prefix_hit, alpha = inputs.fraction(prefix_hit, "prefix_hit"), inputs.fraction(alpha, "alpha")
    k = inputs.non_negative_int(k, "k (drafted tokens)")
    inputs.real(draft_cost, "draft_cost", low=0.0)
    inputs.positive(price_per_gpu_hour, "price_per_gpu_hour")
    if tpot_slo_s is not None:
        inputs.positive(tpot_slo_s, "tpot_slo_s")
    dep = deployment(model, gpu, num_gpus, weights, kv, estimate=estimate)
    seq, ctx = prompt + output, prompt + output / 2
    fit = int(cost.max_concurrency(dep, seq))
    if concurrency > fit:
        raise cost.InfeasibleDeployment(
            f"{concurrency} sequences of {seq:,} tokens do not fit: the KV budget holds {fit}")

    def metric(d: cost.Deployment, c: float, hit: float = 0.0, speed: float = 1.0) -> float:
        if objective == "cost":
            return dollars_per_million(d, prompt, output, c, hit, speed, price_per_gpu_hour)
        return latency_s(d, prompt, output, c, hit, speed)

    base = metric(dep, concurrency)
    target = max(concurrency, max_batch_within_slo(dep, ctx, fit, tpot_slo_s))
    quant = deployment(model, gpu, num_gpus, "fp8" if dep.weight_bytes > 1 else weights,
                       "fp8" if dep.kv_bytes > 1 else kv, estimate=estimate)
    speed = float(cost.speculative_speedup(dep, concurrency, ctx, alpha, k, draft_cost))
    gains = {
        "batching": base / metric(dep, target),
        "prefix_caching": base / metric(dep, concurrency, hit=prefix_hit),
        "quantization": base / metric(quant, concurrency),
        "speculative": base / metric(dep, concurrency, speed=speed),
    }
    best = max(LEVERS, key=lambda name: (gains[name], -LEVERS.index(name)))
    pre, dec = request_seconds(dep, prompt, output, concurrency)
    notes = []
    if target == concurrency:
        notes.append("batching: already at the largest batch that fits and meets the TPOT SLO")
    if quant == dep:
        notes.append("quantization: weights and KV cache are already 8-bit or narrower")
    return Diagnosis(objective, base, gains, best, pre / (pre + dec), "prefill" if pre > dec else "decode",
                     str(cost.decode_step(dep, concurrency, ctx).bound), fit, target, tuple(notes))


def lever_gains(model: str | ModelConfig, gpu: str | Hardware, num_gpus: int, prompt: int, output: int,
                concurrency: int, objective: str = "cost", **kw: float | str | None) -> dict[str, float]:
    """Just the gains of :func:`diagnose_reference` (same arguments), lever name -> gain."""
    return diagnose_reference(model, gpu, num_gpus, prompt, output, concurrency, objective, **kw).gains


# ------------------------------------------------------------------------------------------ the ranking
NAIVE_OCCUPANCY = 0.5  # static batching: outputs spread evenly up to twice the mean fill half the slots on average
KERNEL_MFU = 0.6  # "better kernels": MFU from the default 0.5 to 0.6 (an estimate; bandwidth use stays ideal)


def naive_batch(dep: cost.Deployment, occupancy: float = NAIVE_OCCUPANCY) -> int:
    """Sequences a naive server keeps busy: contiguous KV reserved for the model's maximum length per slot,
    and static batches that run to completion, so on average only ``occupancy`` of the slots produce."""
    inputs.real(occupancy, "occupancy", low=0.0, high=1.0, low_open=True, accepted="a fraction in (0, 1]")
    slots = int(cost.max_concurrency(dep, dep.model.max_position_embeddings))
    return max(1, int(np.floor(slots * occupancy)))


def lever_ranking(model: str | ModelConfig = cost.ANCHOR_MODEL, gpu: str | Hardware = cost.ANCHOR_GPU,
                  num_gpus: int = cost.ANCHOR_GPUS, prompt: int = 1024, output: int = 256,
                  small_model: str | ModelConfig = "llama3-8b", small_gpus: int = 1, easy_share: float = 0.8,
                  estimate: cost.Estimate | None = None) -> dict[str, float]:
    """Gain in steady-decode cost per output token (:class:`CostTerms`) of each lever, as orders of magnitude.

    Sequences hold ``prompt + output`` tokens of KV and are costed at the mean context (prompt + output / 2).
    batching: naive (:func:`naive_batch`) to the largest batch that fits; routing: ``easy_share`` of traffic
    to ``small_model`` on ``small_gpus`` (:func:`stage5.routing.blended_saving`, both at their largest batch);
    quantization: FP8 weights and KV cache at the well-batched concurrency; kernels: MFU from the default to
    :data:`KERNEL_MFU` at that concurrency. Prefill is outside these terms (see :func:`diagnose_reference`).
    ``estimate``: price every deployment in estimate mode with these terms (default: the simple estimate).
    """
    prompt, output = inputs.positive_int(prompt, "prompt"), inputs.positive_int(output, "output")
    dep = deployment(model, gpu, num_gpus, estimate=estimate)
    inputs.within_context(prompt + output, dep.model.max_position_embeddings, "prompt + output", dep.model.name)
    seq, ctx = prompt + output, prompt + output / 2
    good = int(cost.max_concurrency(dep, seq))
    if good < 1:
        raise cost.InfeasibleDeployment(
            f"not one sequence of {seq:,} tokens fits: it needs {float(cost.kv_bytes_per_sequence(dep, seq)) / 2**30:.1f} GiB of "
            f"KV cache and {cost.kv_budget_bytes(dep) / 2**30:.1f} GiB is free after weights and reserve")

    def usd(d: cost.Deployment, c: float) -> float:
        return cost_terms(d, c, ctx).dollars_per_token

    fp8 = deployment(model, gpu, num_gpus, "fp8", "fp8", estimate=estimate)
    faster = deployment(model, gpu, num_gpus, mfu=KERNEL_MFU, estimate=estimate)
    ratio = cost_ratio(model, gpu, num_gpus, small_model, gpu, small_gpus, prompt, output)
    return {
        "batching": usd(dep, naive_batch(dep)) / usd(dep, good),
        "routing": float(blended_saving(easy_share, ratio)),
        "quantization": usd(dep, good) / usd(fp8, good),
        "kernels": usd(dep, good) / usd(faster, good),
    }


# Every public function above refuses a wrong record (a string where a Deployment goes) in one sentence.
inputs.check_object_arguments(globals())
