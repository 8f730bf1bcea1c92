"""Scaling out: tensor parallelism's step time term by term, and how batching changes what a mixture-of-experts
model reads. Everything here is priced by :mod:`stage5.cost`; this module only sweeps it and names the results.

Tensor parallelism (Megatron-LM style) splits every weight matrix over ``n`` GPUs: each GPU reads 1/n of the
weights and of the KV cache and does 1/n of the arithmetic, so the per-GPU roofline (and its ridge) is the
single GPU's, but every layer ends in two all-reduces whose time does not shrink with ``n``
(:func:`stage5.cost.allreduce_s`, estimate mode only).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from stage5 import cost
from stage5.hardware import Hardware
from stage5.models import ModelConfig


@dataclass(frozen=True)
class TPBreakdown:
    """Decode step time at each GPU count, term by term (seconds; arrays over ``gpus``).

    ``weights_s`` and ``kv_s``: the weight and KV-cache reads at the achieved bandwidth; ``compute_s``: the
    arithmetic; ``allreduce_s``: the two all-reduces per layer; ``tpot_s``: the step, as the cost model adds them.
    """

    gpus: np.ndarray
    weights_s: np.ndarray
    kv_s: np.ndarray
    compute_s: np.ndarray
    allreduce_s: np.ndarray
    tpot_s: np.ndarray

    @property
    def best_gpus(self) -> int:
        """The GPU count with the lowest TPOT: past it, adding GPUs makes each token slower."""
        return int(self.gpus[int(np.argmin(self.tpot_s))])


def tp_breakdown(model: str | ModelConfig, gpu: str | Hardware, gpus: Sequence[int], batch: float = 1,
                 context: float = 0, weight_bytes: float = 2.0, kv_bytes: float = 2.0,
                 estimate: cost.Estimate | None = None) -> TPBreakdown:
    """Price one decode step of ``batch`` sequences of ``context`` tokens on each count in ``gpus``, in estimate
    mode (``estimate`` defaults to :class:`stage5.cost.Estimate`). Counts must be positive integers; the cost
    model does not check that they divide the model's heads, nor that they fit in one NVLink domain."""
    counts = np.asarray(gpus)
    if counts.ndim != 1 or counts.size == 0 or np.any(counts < 1) or np.any(counts != np.round(counts)):
        raise ValueError(f"gpus must be a non-empty list of positive whole GPU counts, got {gpus!r}")
    est = estimate or cost.Estimate()
    rows = []
    for n in counts:
        dep = cost.Deployment.of(model, gpu, int(n), weight_bytes=weight_bytes, kv_bytes=kv_bytes, estimate=est)
        bw = cost.achieved_bandwidth(dep)
        step = cost.decode_step(dep, batch, context)
        rows.append((float(cost.weight_bytes_read(dep, batch)) / bw,
                     float(cost.kv_traffic_bytes(dep, batch, context)) / bw,
                     float(step.compute_s), float(cost.allreduce_s(dep, batch)), float(step.time_s)))
    w, kv, comp, ar, t = (np.array(col) for col in zip(*rows, strict=True))
    return TPBreakdown(counts.astype(int), w, kv, comp, ar, t)


def per_gpu_ridge(dep: cost.Deployment) -> float:
    """The ridge each GPU of ``dep`` works against, FLOPs per byte: its share of the FLOP/s over its share of
    the bandwidth. The GPU count cancels, so splitting a model does not move the batch at which decode turns
    compute-bound."""
    return (dep.flops / dep.num_gpus) / (dep.bandwidth / dep.num_gpus)


def compute_bound_batch(dep: cost.Deployment, context: float = 0, max_batch: int = 1 << 16) -> int:
    """The smallest batch at which a decode step of ``dep`` is compute-bound (compute time above the memory
    time), searched up to ``max_batch``; raises ValueError if the step stays memory-bound up to there."""
    batches = np.arange(1, max_batch + 1)
    bound = cost.decode_step(replace(dep, estimate=None), batches, context).compute_bound
    if not bound.any():
        raise ValueError(f"{dep.model.name} stays memory-bound up to batch {max_batch} at context {context}")
    return int(batches[int(np.argmax(bound))])


def batch_for_expert_coverage(model: ModelConfig, fraction: float) -> int:
    """The smallest batch at which a decode step is expected to touch ``fraction`` (0 < f < 1) of each MoE
    layer's experts (:func:`stage5.cost.experts_touched`, uniform routing)."""
    if model.num_experts == 1:
        raise ValueError(f"{model.name} is dense: it has no routed experts to cover")
    if not 0 < fraction < 1:
        raise ValueError(f"fraction is a share of the experts, 0 < fraction < 1, got {fraction!r}")
    # (1 - k/E)^B <= 1 - fraction, solved for B
    miss = 1 - model.experts_per_token / model.num_experts
    return int(np.ceil(np.log(1 - fraction) / np.log(miss)))
