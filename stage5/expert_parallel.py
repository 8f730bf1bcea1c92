"""Large mixtures of experts as they are served now: expert parallelism and its all-to-all, the busiest expert
as the straggler, and data-parallel attention for multi-head latent attention (MLA). Priced with
:mod:`stage5.cost`'s bandwidths and FLOP rates; this module adds the layouts.

**Expert parallelism (EP).** Each of ``ep`` GPUs holds ``E / ep`` whole routed experts of every MoE layer. Before a
layer's experts run, each token's hidden state is sent to the GPUs holding its ``k`` experts (*dispatch*), and
the experts' outputs come back to be summed (*combine*): an all-to-all each way, per MoE layer. DeepSeek-V3
dispatches in FP8 (with a scale per 128 values, as DeepEP does) and combines in BF16 (DeepSeek-V3 technical
report, section 3.3.2). Under uniform routing a copy stays on the sending GPU with probability 1/ep, stays inside
its NVLink domain with probability (d - 1)/ep (``d``: the GPUs the domain holds, at most ``ep``), and crosses the
network otherwise; the two links run at once, so a layer's all-to-all takes the longer of the two transfers.
(DeepSeek's training kernels send a token once per node and forward it over NVLink, which saves network bytes
when several of its experts share a node; the decode kernels send every copy directly, as priced here.)

**The straggler.** Every GPU waits for the slowest one before the combine. A GPU's share of a layer is a roofline
of its own: the weights of its experts that received any token, against the arithmetic of the tokens they
received. Skewed routing piles tokens onto a few experts: under EP the GPU holding them has more arithmetic and
the step waits for it; under tensor parallelism every GPU holds a slice of every expert and does the same share of
each, so skew only means fewer distinct experts read, which is cheaper. The same skew that slows EP down speeds
TP up. In decode a GPU's experts see few tokens and mostly wait on their weights, so the straggler shows only once
its tokens make it compute-bound.

**MLA and data-parallel attention.** MLA caches one latent per token shared by all query heads (chapter 12).
Tensor parallelism splits heads, so each of ``n`` GPUs must hold every sequence's whole latent: the cache is stored
``n`` times (:func:`stage5.cost.kv_replication`) and each GPU reads all of it for ``1/n`` of the heads. With
data-parallel attention each GPU runs attention for its own sequences with every head, stores only their latents,
and hands its tokens to the experts through the all-to-all. With all ``H`` heads on one GPU, one latent read
serves ``H`` heads: FLOPs per byte of cache are ``2 H (d_k + d_v) / (b d_k)``, about ``4H / b`` since ``d_v``
is close to ``d_k`` (``2H`` in BF16; DeepSeek's FlashMLA write-up). For DeepSeek-V3's 128 heads in BF16 that is
about 242, just below an H100's ridge (about 295 at its datasheet peak) and above an H200's (about 206), and above
the ridge either chip has at the FLOP rate its kernels reach in practice: MLA decode attention is compute-bound in
practice where GQA's is firmly memory-bound.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from stage5 import cost, inputs
from stage5.hardware import Hardware, get_gpu
from stage5.models import ModelConfig, get_model

FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128  # FP8 values plus one float32 scale per 128 of them (DeepEP's FP8 dispatch)
BF16_COMBINE_BYTES = 2.0


def _moe(model: str | ModelConfig) -> ModelConfig:
    m = get_model(model)
    if m.num_experts == 1:
        raise inputs.InputError(f"{m.name} is dense: it has no routed experts to place on GPUs; accepted: a "
                                "mixture-of-experts model (mixtral-8x7b, deepseek-v2-lite, deepseek-v3)")
    return m


def check_ep(model: ModelConfig, ep: int) -> int:
    """An EP degree must divide the routed experts, so every GPU holds the same number of whole experts."""
    ep = inputs.positive_int(ep, "ep (GPUs the experts are spread over)", maximum=model.num_experts)
    if model.num_experts % ep:
        divisors = [d for d in range(1, model.num_experts + 1) if model.num_experts % d == 0]
        raise inputs.InputError(f"{model.name}'s {model.num_experts} routed experts cannot be split evenly over {ep} "
                                f"GPUs; accepted: {', '.join(map(str, divisors))}")
    return ep


# ------------------------------------------------------------------------------------------ the all-to-all
def alltoall_bytes_per_token(model: str | ModelConfig, ep: int, dispatch_bytes: float = FP8_DISPATCH_BYTES,
                             combine_bytes: float = BF16_COMBINE_BYTES) -> float:
    """Bytes one token's hidden state moves between GPUs in one MoE layer, dispatch and combine together: ``k``
    copies of ``hidden`` values, of which (ep - 1)/ep leave the GPU (uniform routing)."""
    m = _moe(model)
    ep = check_ep(m, ep)
    d = inputs.bytes_per_number(dispatch_bytes, "dispatch_bytes")
    c = inputs.bytes_per_number(combine_bytes, "combine_bytes")
    return m.experts_per_token * m.hidden_size * (d + c) * (ep - 1) / ep


@dataclass(frozen=True)
class AllToAll:
    """One MoE layer's dispatch and combine for ``tokens`` tokens on each GPU (seconds; bytes per GPU)."""

    nvlink_bytes: float
    network_bytes: float
    nvlink_s: float
    network_s: float
    latency_s: float

    @property
    def time_s(self) -> float:
        return max(self.nvlink_s, self.network_s) + self.latency_s


def alltoall(model: str | ModelConfig, gpu: str | Hardware, ep: int, tokens: float,
             dispatch_bytes: float = FP8_DISPATCH_BYTES, combine_bytes: float = BF16_COMBINE_BYTES) -> AllToAll:
    """Price one MoE layer's all-to-all for ``tokens`` tokens per GPU over ``ep`` GPUs of ``gpu``: NVLink inside
    the domain at its measured efficiency, one network port per GPU outside it (the NIC's measured efficiency,
    :class:`stage5.hardware.Hardware`), plus one link latency for each of dispatch and combine (the network's once
    any copy leaves the domain). Uniform routing."""
    m = _moe(model)
    hw = get_gpu(gpu)
    ep = check_ep(m, ep)
    t = inputs.real(tokens, "tokens (per GPU)", low=0.0)
    per_copy = m.hidden_size * (inputs.bytes_per_number(dispatch_bytes, "dispatch_bytes")
                                + inputs.bytes_per_number(combine_bytes, "combine_bytes"))
    domain = min(ep, hw.gpus_per_node)  # the GPUs one server (or one NVLink rack) joins by its own link
    copies = t * m.experts_per_token
    nvlink = copies * (domain - 1) / ep * per_copy
    network = copies * (ep - domain) / ep * per_copy
    nvlink_s = nvlink / (hw.link_bandwidth * hw.link_efficiency)
    network_s = network / (hw.node_link_bandwidth * cost.network_efficiency(hw))
    latency = 2 * (hw.node_link_latency_s if ep > domain else hw.link_latency_s) if ep > 1 else 0.0
    return AllToAll(nvlink, network, nvlink_s, network_s, latency)


# ------------------------------------------------------------------------------------------ experts and their load
@dataclass(frozen=True)
class Routing:
    """One MoE layer's routing in one step: the tokens each routed expert receives (expected values) and the
    probability that each receives at least one (its weights are read only then)."""

    loads: np.ndarray
    touched: np.ndarray

    def __post_init__(self) -> None:
        # checked where a routing enters (issue 52: a probability of 5 was taken); frozen, so set through object
        loads = inputs.reals(self.loads, "loads (tokens per expert)", low=0.0)
        touched = inputs.reals(self.touched, "touched (the probability each expert receives a token)", low=0.0,
                               high=1.0, accepted="probabilities in [0, 1]")
        if loads.shape != touched.shape:
            raise inputs.InputError(f"loads and touched must give one value per expert each, got shapes "
                                    f"{loads.shape} and {touched.shape}")
        object.__setattr__(self, "loads", loads)
        object.__setattr__(self, "touched", touched)

    @classmethod
    def exact(cls, loads: object) -> Routing:
        """Known token counts: an expert is read when it received any."""
        load = inputs.reals(loads, "loads (tokens per expert)", low=0.0)
        return cls(load, (load > 0).astype(float))


def zipf_routing(model: str | ModelConfig, tokens: float, skew: float = 0.0, seed: int = 0) -> Routing:
    """``tokens`` tokens each picking ``k`` distinct experts, expert popularity falling as 1 / rank^skew (0:
    uniform), the ranks shuffled over the experts with ``seed`` (popularity has nothing to do with where an expert
    sits). Expert ``i`` is picked by a token with probability q_i (the shares, summing to k, capped at 1 with the
    excess spread over the rest), so it receives T q_i tokens and is read with probability 1 - (1 - q_i)^T; with
    no skew that is :func:`stage5.cost.experts_touched`'s uniform routing."""
    m = _moe(model)
    t = inputs.real(tokens, "tokens", low=0.0)
    s = inputs.real(skew, "skew (Zipf exponent of expert popularity)", low=0.0, high=8.0)
    e, k = m.num_experts, m.experts_per_token
    share = 1.0 / np.arange(1, e + 1) ** s
    share = k * share / share.sum()  # expected picks per token, summing to k
    for _ in range(e):  # cap at one pick per token, hand the excess to the uncapped experts
        over = share > 1
        if not over.any():
            break
        excess = (share[over] - 1).sum()
        share[over] = 1.0
        share[~over] += excess * share[~over] / share[~over].sum()
    q = share[np.random.default_rng(inputs.non_negative_int(seed, "seed")).permutation(e)]
    return Routing(t * q, 1.0 - (1.0 - q) ** t)


def _routing(model: ModelConfig, routing: Routing | object) -> Routing:
    r = routing if isinstance(routing, Routing) else Routing.exact(routing)
    if r.loads.shape != (model.num_experts,) or r.touched.shape != (model.num_experts,):
        raise inputs.InputError(f"routing must give one value per routed expert ({model.num_experts}), got shape "
                                f"{r.loads.shape}")
    return r


def _one_gpu(model: ModelConfig, gpu: Hardware, weight_bytes: float, estimate: cost.Estimate | None) -> cost.Deployment:
    """One GPU of a larger deployment, priced as the cost model prices a deployment (its achieved bandwidth and
    FLOP/s); not a deployment that must hold the model."""
    return cost.Deployment(model, gpu, 1, weight_bytes=weight_bytes, estimate=estimate)


@dataclass(frozen=True)
class ExpertStep:
    """One MoE layer's routed experts, per GPU (seconds): the busiest GPU sets the layer's time."""

    gpu_s: np.ndarray  # each GPU's roofline time for its experts
    tokens: np.ndarray  # tokens each GPU's experts received (copies)

    @property
    def time_s(self) -> float:
        return float(self.gpu_s.max())

    @property
    def straggler(self) -> float:
        """The slowest GPU over the mean: how much the step waits for one GPU."""
        return float(self.gpu_s.max() / self.gpu_s.mean())


def ep_experts(model: str | ModelConfig, gpu: str | Hardware, ep: int, routing: Routing | object,
               weight_bytes: float = 1.0, estimate: cost.Estimate | None = None) -> ExpertStep:
    """Routed-expert time of one MoE layer under EP: GPU ``g`` holds experts ``g E/ep .. (g+1) E/ep - 1``; it reads
    the weights of those that receive a token and does 2 x expert params FLOPs per token it receives, at the
    bandwidth and FLOP/s the cost model prices one GPU at (``estimate``: None, the simple estimate at its MFU; an
    :class:`stage5.cost.Estimate` for its terms). Each GPU is its own roofline, the larger of bytes and FLOPs.
    ``routing``: a :class:`Routing`, or token counts per expert."""
    m = _moe(model)
    hw = get_gpu(gpu)
    ep = check_ep(m, ep)
    r = _routing(m, routing)
    weight_bytes = inputs.bytes_per_number(weight_bytes, "weight_bytes (bytes per weight)")
    one = _one_gpu(m, hw, weight_bytes, estimate)
    expert = m._expert_params()
    touched = r.touched.reshape(ep, m.num_experts // ep).sum(axis=1)
    tokens = r.loads.reshape(ep, m.num_experts // ep).sum(axis=1)
    mem = touched * expert * weight_bytes / cost.achieved_bandwidth(one)
    comp = 2.0 * expert * tokens / cost.achieved_flops(one, "decode")
    return ExpertStep(np.maximum(mem, comp), tokens)


def tp_experts(model: str | ModelConfig, gpu: str | Hardware, tp: int, routing: Routing | object,
               weight_bytes: float = 1.0, estimate: cost.Estimate | None = None) -> float:
    """The same layer's routed experts under ``tp``-way tensor parallelism: every GPU holds 1/tp of every expert,
    reads 1/tp of each touched one and does 1/tp of every token's arithmetic, so all GPUs finish together. Skew
    changes only how many experts are touched."""
    m = _moe(model)
    hw = get_gpu(gpu)
    n = inputs.positive_int(tp, "tp")
    r = _routing(m, routing)
    weight_bytes = inputs.bytes_per_number(weight_bytes, "weight_bytes (bytes per weight)")
    one = _one_gpu(m, hw, weight_bytes, estimate)
    expert = m._expert_params()
    mem = r.touched.sum() * expert * weight_bytes / n / cost.achieved_bandwidth(one)
    comp = 2.0 * expert * r.loads.sum() / n / cost.achieved_flops(one, "decode")
    return float(max(mem, comp))


def expert_ridge_tokens(gpu: str | Hardware, weight_bytes: float = 1.0) -> float:
    """Tokens one expert must receive before its matmuls stop waiting on its weights: 2 P t / F = P b / BW gives
    t = b x ridge / 2 (the ridge at the weights' format)."""
    hw = get_gpu(gpu)
    return inputs.bytes_per_number(weight_bytes, "weight_bytes") * cost.ridge_point(hw, weight_bytes) / 2


# ------------------------------------------------------------------------------------------ MLA decode attention
def mla_attention_intensity(model: str | ModelConfig, heads_per_gpu: int | None = None, query_tokens: int = 1,
                            kv_bytes: float = 2.0) -> float:
    """FLOPs per byte of cache read by MLA decode attention with the key and value up-projections absorbed:
    ``heads`` query heads (default all; tensor parallelism leaves H / tp per GPU) each score ``query_tokens`` new
    tokens against the latent and rotary key (``d_k`` = kv_lora_rank + qk_rope_head_dim values) and sum the latents
    (``d_v`` = kv_lora_rank): 2 h s (d_k + d_v) FLOPs per cached token, over d_k x ``kv_bytes`` bytes."""
    m = get_model(model)
    if not m.is_mla:
        raise inputs.InputError(f"{m.name} does not use latent attention (MLA); accepted: deepseek-v2-lite, "
                                "deepseek-v3")
    h = m.num_heads if heads_per_gpu is None else inputs.positive_int(heads_per_gpu, "heads_per_gpu",
                                                                        maximum=m.num_heads)
    s = inputs.positive_int(query_tokens, "query_tokens")
    b = inputs.bytes_per_number(kv_bytes, "kv_bytes")
    dk, dv = m.kv_lora_rank + m.qk_rope_head_dim, m.kv_lora_rank
    return 2.0 * h * s * (dk + dv) / (b * dk)


def gqa_attention_intensity(model: str | ModelConfig, query_tokens: int = 1, kv_bytes: float = 2.0) -> float:
    """The same for grouped-query attention: each KV head's key and value (2 d values) serve its g = H / KV query
    heads, 4 g s d FLOPs per cached token: 2 g s / b."""
    m = get_model(model)
    if m.is_mla:
        raise inputs.InputError(f"{m.name} uses latent attention; use mla_attention_intensity")
    return 2.0 * m.gqa_ratio * inputs.positive_int(query_tokens, "query_tokens") / inputs.bytes_per_number(
        kv_bytes, "kv_bytes")


@dataclass(frozen=True)
class AttentionLayout:
    """MLA decode attention on ``gpus`` GPUs, tensor-parallel (``"tp"``) or data-parallel (``"dp"``): per GPU, the
    cache bytes it reads and the FLOPs it does for a batch of ``batch`` sequences in all, and the sequences the
    layout can hold."""

    layout: str
    gpus: int
    bytes_per_gpu: float
    flops_per_gpu: float
    memory_s: float
    compute_s: float
    copies: float  # how many GPUs store each sequence's latent

    @property
    def time_s(self) -> float:
        return max(self.memory_s, self.compute_s)


def mla_attention(model: str | ModelConfig, gpu: str | Hardware, gpus: int, batch: int, context: float,
                  layout: str, kv_bytes: float = 2.0, estimate: cost.Estimate | None = None) -> AttentionLayout:
    """One decode step's attention over the cache (all layers) for ``batch`` sequences of ``context`` tokens on
    ``gpus`` GPUs. ``"tp"``: every GPU reads every sequence's latent for H / gpus heads. ``"dp"``: each GPU reads
    its own batch / gpus sequences' latents for all H heads. Each GPU is a roofline of its own at the cost
    model's bandwidth and FLOP/s for one GPU."""
    m = get_model(model)
    if not m.is_mla:
        raise inputs.InputError(f"{m.name} does not use latent attention (MLA); accepted: deepseek-v2-lite, "
                                "deepseek-v3")
    hw = get_gpu(gpu)
    n = inputs.gpus(gpus, "gpus")
    b = inputs.positive_int(batch, "batch")
    s = inputs.positive(context, "context")
    lay = inputs.choice(layout, "layout", ("tp", "dp"))
    if lay == "tp":
        cost.check_tp(m, n)
    elif b % n:
        raise inputs.InputError(f"data-parallel attention splits the batch over the GPUs: {b} sequences over {n} GPUs "
                                "is uneven; accepted: a batch that is a multiple of the GPU count")
    heads, seqs = (m.num_heads // n, b) if lay == "tp" else (m.num_heads, b // n)
    dk, dv = m.kv_lora_rank + m.qk_rope_head_dim, m.kv_lora_rank
    kb = inputs.bytes_per_number(kv_bytes, "kv_bytes")
    read = seqs * s * dk * kb * m.num_layers
    flops = 2.0 * heads * seqs * s * (dk + dv) * m.num_layers
    one = _one_gpu(m, hw, 2.0, estimate)
    return AttentionLayout(lay, n, read, flops, read / cost.achieved_bandwidth(one),
                           flops / cost.achieved_flops(one, "decode"), float(n if lay == "tp" else 1))


def weight_split(model: str | ModelConfig) -> dict[str, float]:
    """Parameters by where a layout puts them: ``attention`` (every layer's attention and norms), ``routed``
    (all routed experts), ``shared`` (shared experts and the dense layers' MLPs), ``embedding`` (input table and
    output head, with the routers' small gate matrices)."""
    m = get_model(model)
    attention = m.num_layers * (m._attention_params() + m.norms_per_layer * m._norm_params())
    routed = m.moe_layers * m.num_experts * m._expert_params() if m.num_experts > 1 else 0
    shared = (m.moe_layers * (m._expert_params(m.shared_expert_size) if m.shared_expert_size else 0)
              + m.dense_layers * m._expert_params(m.dense_intermediate_size))
    if m.num_experts == 1:
        shared = m.num_layers * m._expert_params()
    rest = m.num_params - attention - routed - shared
    return {"attention": float(attention), "routed": float(routed), "shared": float(shared), "embedding": float(rest)}


def mla_capacity(model: str | ModelConfig, gpu: str | Hardware, gpus: int, context: float, layout: str,
                 weight_bytes: float = 1.0, kv_bytes: float = 2.0) -> int:
    """Sequences of ``context`` tokens whose latents fit on ``gpus`` GPUs serving the model with its routed
    experts spread over the GPUs (EP) and attention ``"tp"`` (attention weights split, every latent on every GPU)
    or ``"dp"`` (attention weights on every GPU, each latent on one). Shared experts, dense MLPs and the
    embedding and head are split across the GPUs in both (a simplification that favours neither). Each GPU keeps
    the cost model's reserve (:data:`stage5.cost.RESERVE_PER_GPU_GiB`)."""
    m = get_model(model)
    hw = get_gpu(gpu)
    n = inputs.gpus(gpus, "gpus")
    s = float(inputs.counts(context, "context (tokens per sequence)"))  # at least one token: never a denormal
    lay = inputs.choice(layout, "layout", ("tp", "dp"))
    weight_bytes = inputs.bytes_per_number(weight_bytes, "weight_bytes (bytes per weight)")
    kv_bytes = inputs.bytes_per_number(kv_bytes, "kv_bytes (bytes per cached element)")
    if lay == "tp":
        cost.check_tp(m, n)
    w = weight_split(m)
    attention = w["attention"] if lay == "dp" else w["attention"] / n
    per_gpu = (attention + (w["routed"] + w["shared"] + w["embedding"]) / n) * weight_bytes
    reserve = cost.RESERVE_PER_GPU_GiB * 2**30
    budget = hw.memory_bytes - reserve - per_gpu
    if budget <= 0:
        raise cost.InfeasibleDeployment(
            f"{m.name} in {weight_bytes:g}-byte weights does not fit on {n} x {hw.name} with {lay} attention: each GPU "
            f"holds {per_gpu / 2**30:.0f} GiB of weights and keeps {reserve / 2**30:.0f} GiB back, past its "
            f"{hw.memory_bytes / 2**30:.0f} GiB. Add GPUs or quantize the weights.")
    one = float(m.kv_bytes_per_sequence(s, kv_bytes))
    per = budget // one
    return int(per * n if lay == "dp" else per)


def hypothetical_domain(gpu: str | Hardware, gpus: int) -> Hardware:
    """``gpu`` with its NVLink domain (and server) widened to ``gpus`` GPUs, every other figure unchanged: what a
    rack-scale NVLink domain alone changes, with the chips held fixed. Not a product: a controlled comparison."""
    hw = get_gpu(gpu)
    n = inputs.gpus(gpus, "gpus")
    return replace(hw, name=f"{hw.name} (NVLink domain of {n})", nvlink_domain=n, gpus_per_node=n)


# Every public function above refuses a wrong record (a string where a Deployment goes) in one sentence.
inputs.check_object_arguments(globals())
