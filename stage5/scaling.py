"""Scaling out: tensor parallelism's step time term by term, and how batching changes what a mixture-of-experts
model reads. Everything here is priced by :mod:`stage5.cost`; this module only sweeps it and names the results.

Tensor parallelism (Megatron-LM style) splits every weight matrix over ``n`` GPUs: each GPU reads 1/n of the
weights and does 1/n of the arithmetic, so the per-GPU roofline (and its ridge) is the single GPU's. The KV cache
splits by heads only up to the number of KV heads; past it the heads are replicated and each GPU's KV reads stop
falling (:func:`stage5.cost.kv_replication`). The degree must be one the engine allows
(:func:`stage5.cost.tp_degrees`). Every layer ends in two all-reduces whose time does not shrink with ``n``
(:func:`stage5.cost.allreduce_s`, estimate mode only): flat in ``n`` inside one NVLink domain for small messages,
then priced over the network past one server.

Pipeline parallelism (:func:`pipeline_decode`) gives each of ``pp`` stages a contiguous share of the layers and
passes activations from stage to stage: one message of batch x hidden per boundary instead of two all-reduces per
layer, at the price of a token crossing the stages one after another.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from stage5 import cost, inputs
from stage5.hardware import Hardware, get_gpu
from stage5.models import ModelConfig, get_model


@dataclass(frozen=True)
class TPBreakdown:
    """Decode step time at each GPU count, term by term (seconds; arrays over ``gpus``).

    ``weights_s`` and ``kv_s``: the weight and KV-cache reads at the achieved bandwidth; ``compute_s``: the
    arithmetic; ``allreduce_s``: the two all-reduces per layer; ``engine_s``: the engine's fixed time per step
    (:func:`stage5.cost.step_overhead_s`); ``tpot_s``: the step, as the cost model adds them.
    """

    gpus: np.ndarray
    weights_s: np.ndarray
    kv_s: np.ndarray
    compute_s: np.ndarray
    allreduce_s: np.ndarray
    tpot_s: np.ndarray
    engine_s: np.ndarray | None = None

    @property
    def best_gpus(self) -> int:
        """The GPU count with the lowest TPOT: past it, adding GPUs makes each token slower."""
        return int(self.gpus[int(np.argmin(self.tpot_s))])


def tp_breakdown(model: str | ModelConfig, gpu: str | Hardware, gpus: Sequence[int], batch: float = 1,
                 context: float = 0, weight_bytes: float = 2.0, kv_bytes: float = 2.0,
                 estimate: cost.Estimate | None = None) -> TPBreakdown:
    """Price one decode step of ``batch`` sequences of ``context`` tokens on each count in ``gpus``, in estimate
    mode (``estimate`` defaults to :class:`stage5.cost.Estimate`). Counts must be positive integers and
    tensor-parallel degrees the model allows (:func:`stage5.cost.tp_degrees`; others are refused with the rule).
    Counts past one server (``gpu.gpus_per_node``) pay the network in their all-reduces."""
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
                     float(step.compute_s), float(cost.allreduce_s(dep, batch)), float(step.time_s),
                     cost.step_overhead_s(dep)))
    w, kv, comp, ar, t, fixed = (np.array(col) for col in zip(*rows, strict=True))
    return TPBreakdown(counts.astype(int), w, kv, comp, ar, t, fixed)


def per_gpu_ridge(dep: cost.Deployment) -> float:
    """The ridge each GPU of ``dep`` works against, FLOPs per byte: its share of the FLOP/s over its share of
    the bandwidth. The GPU count cancels, so splitting a model does not move the batch at which decode turns
    compute-bound."""
    return (dep.flops / dep.num_gpus) / (dep.bandwidth / dep.num_gpus)


def compute_bound_batch(dep: cost.Deployment, context: float = 0, max_batch: int = 1 << 16) -> int:
    """The smallest batch at which a decode step of ``dep``, priced by the simple estimate, is compute-bound
    (compute time above the memory time), searched up to ``max_batch``; raises ValueError if the step stays
    memory-bound up to there."""
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


# ------------------------------------------------------------------------------------ pipeline parallelism
@dataclass(frozen=True)
class PipelineDecode:
    """Steady decode with ``tp``-way tensor parallelism inside each of ``pp`` pipeline stages (seconds).

    ``stage_s``: one stage's step for one microbatch; ``p2p_s``: sending one microbatch's activations to the next
    stage; ``tpot_s``: time between one sequence's tokens; ``bubble``: the share of time each stage idles;
    ``throughput``: output tokens per second of the whole deployment.
    """

    tp: int
    pp: int
    microbatches: int
    stage_s: float
    p2p_s: float
    tpot_s: float
    bubble: float
    throughput: float


def _stages(cfg: ModelConfig, pp: object) -> int:
    """``pp`` as a stage count that shares ``cfg``'s layers evenly (each stage holds whole, equal shares)."""
    stages = inputs.positive_int(pp, "pp (pipeline stages)", maximum=cfg.num_layers)
    if cfg.num_layers % stages:
        raise ValueError(f"{cfg.name} has {cfg.num_layers} layers, which pp={stages} stages cannot share evenly; "
                         f"allowed stage counts divide {cfg.num_layers}")
    return stages


def pipeline_max_batch(model: str | ModelConfig, gpu: str | Hardware, tp: int, pp: int, context: float,
                       weight_bytes: float = 2.0, kv_bytes: float = 2.0) -> int:
    """Sequences of ``context`` tokens whose KV cache fits on ``pp`` stages of ``tp`` GPUs: the memory of all
    tp x pp GPUs less their reserve and the weights (as :func:`stage5.cost.kv_budget_bytes` counts them), over the
    cache of one sequence; 0 if nothing is left. A stage holds only its own layers' cache, so a KV head is copied
    only where ``tp`` exceeds the KV heads (:func:`stage5.cost.kv_replication` at ``tp``, not at tp x pp)."""
    tokens = float(inputs.counts(context, "context (tokens)"))
    cfg = get_model(model)
    stages = _stages(cfg, pp)
    one_stage = cost.Deployment(cfg, get_gpu(gpu), tp, weight_bytes=weight_bytes, kv_bytes=kv_bytes)
    budget = stages * (one_stage.memory_bytes - one_stage.reserve_bytes) - one_stage.weight_total_bytes
    one = float(cfg.kv_bytes_per_sequence(tokens, kv_bytes)) * cost.kv_replication(cfg, tp)
    return max(0, int(budget // one))


def pipeline_decode(model: str | ModelConfig, gpu: str | Hardware, tp: int, pp: int, batch: int, context: float,
                    microbatches: int | None = None, weight_bytes: float = 2.0, kv_bytes: float = 2.0,
                    estimate: cost.Estimate | None = None) -> PipelineDecode:
    """Price decode of ``batch`` sequences split into ``microbatches`` (default ``pp``, at most the batch) groups
    flowing through
    ``pp`` stages of ``tp`` GPUs each, in estimate mode.

    A stage holds 1/pp of the layers, so its step is 1/pp of the whole model's step on ``tp`` GPUs at the
    microbatch's size (weights, KV reads, arithmetic and all-reduces all scale with layers; the embedding and the
    output head, which sit in the first and last stage, are spread evenly: a simplification). Between stages one
    message of microbatch x hidden x 2 bytes crosses the inter-node link (stages sit on different servers). A
    microbatch's token needs every stage in turn, and a stage serves the microbatches one after another, so

        TPOT = max(pp x (stage + p2p), microbatches x stage),

    and a stage idles ``1 - microbatches x stage / TPOT`` of the time (the bubble): with fewer microbatches than
    stages the pipeline cannot fill (Austin et al., "How to Scale Your Model", the inference chapter's treatment of
    pipelining). Pipelining never shortens a token's path; it replaces tensor parallelism's per-layer all-reduces
    over the slow link by one point-to-point message per stage boundary.
    """
    for name, value in (("tp", tp), ("pp", pp), ("batch", batch)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    m = min(pp, batch) if microbatches is None else microbatches
    if not isinstance(m, (int, np.integer)) or isinstance(m, bool) or not 1 <= m <= batch:
        raise ValueError(f"microbatches must be a whole number from 1 to the batch ({batch}), got {microbatches!r}")
    cfg = get_model(model)
    _stages(cfg, pp)
    hw = get_gpu(gpu)
    fits = pipeline_max_batch(cfg, hw, tp, pp, context, weight_bytes, kv_bytes)
    where = f"{pp} stage(s) of {tp} x {hw.name}"
    if fits == 0:
        raise cost.InfeasibleDeployment(
            f"{cfg.name} leaves no room for the KV cache of one {context:,.0f}-token sequence on {where} after the "
            f"weights and the reserve. Add stages or GPUs, quantize the weights or the cache, or shorten the context.")
    if batch > fits:
        raise cost.InfeasibleDeployment(
            f"KV-cache memory ran out: {batch} sequences of {context:,.0f} tokens do not fit on {where}, which hold "
            f"at most {fits}. Lower the batch or context, quantize the cache, or add GPUs.")
    est = estimate or cost.Estimate()
    dep = cost.Deployment(cfg, hw, tp, weight_bytes=weight_bytes, kv_bytes=kv_bytes, estimate=est)
    micro = batch / m
    stage = float(cost.decode_step(dep, micro, context).time_s) / pp
    if pp == 1:
        p2p = 0.0
    else:
        message = micro * cfg.hidden_size * 2.0
        p2p = hw.node_link_latency_s + message / (hw.node_link_bandwidth * cost.network_efficiency(hw, est.server_nics))
    tpot = max(pp * (stage + p2p), m * stage)
    return PipelineDecode(tp, pp, m, stage, p2p, tpot, 1 - m * stage / tpot, batch / tpot)


# Every public function above refuses a wrong record (a string where a Deployment goes) in one sentence.
inputs.check_object_arguments(globals())
