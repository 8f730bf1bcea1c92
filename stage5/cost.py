"""The cost model: roofline, decode and prefill time, KV memory, concurrency, speculation, quantization, $.

Every function takes plain numbers or numpy arrays for the swept quantities (batch, context, ...) and
broadcasts, so a chapter can sweep 100,000 deployments in one call.

Units: seconds, bytes, FLOPs, FLOP/s, bytes/s. Memory budgets are reported in binary GiB (2**30 bytes);
weights in decimal GB (1e9 bytes) where the source quotes them so.

What it assumes (each flatters the result): FLOPs per token are 2 x active parameters (attention-score FLOPs,
4 x context x layers x q_heads x head_dim per token, are left out; they add under 10% for Llama 3 70B at
4K context); tensor parallelism scales perfectly across ``num_gpus`` with no communication cost; a fixed MFU
(model FLOP utilisation) regardless of batch; perfect batching with no queueing. One assumption runs the other
way: KV bytes are priced full-length on every layer, so a model with a sliding window (Mistral-7B v0.1, Gemma-2)
is charged more KV memory and traffic past its window than it uses (``ModelConfig.kv_bytes_per_sequence`` has
the windowed figure).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stage5 import inputs
from stage5.hardware import GiB, Hardware, get_gpu
from stage5.models import ModelConfig, get_model

ArrayLike = float | int | np.ndarray

DEFAULT_PRICE_PER_GPU_HOUR = 3.0  # USD; the anchor the source text takes from nanochat's stated rental price
DEFAULT_MFU = 0.5  # an estimate: well-tuned large matmuls reach 50-70% of dense peak; decode kernels less
RESERVE_PER_GPU_GiB = 8.0  # activations and workspace; 4 GPUs x 8 = the 32 GiB the source text leaves aside


class InfeasibleDeployment(ValueError):
    """A deployment that cannot run: the message names the resource that ran out and by how much."""


@dataclass(frozen=True)
class Deployment:
    """A model served on ``num_gpus`` identical accelerators with tensor parallelism.

    ``weight_bytes`` is bytes per parameter (2 = BF16, 1 = FP8/INT8, 0.5 = INT4) and ``kv_bytes`` bytes per
    cached element, chosen separately. ``mfu`` is the fraction of dense peak FLOP/s actually reached.
    ``reserve_GiB`` (default 8 GiB per GPU) is held back for activations and workspace.
    """

    model: ModelConfig
    gpu: Hardware
    num_gpus: int = 1
    weight_bytes: float = 2.0
    kv_bytes: float = 2.0
    mfu: float = DEFAULT_MFU
    reserve_GiB: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.num_gpus, (int, np.integer)) or isinstance(self.num_gpus, bool) or self.num_gpus < 1:
            raise ValueError(f"num_gpus must be a positive integer, got {self.num_gpus!r}")
        for name in ("weight_bytes", "kv_bytes"):
            inputs.positive(getattr(self, name), name)
        inputs.positive(self.mfu, "mfu (a fraction of peak FLOP/s)", maximum=1.0)
        if self.reserve_GiB is not None:
            inputs.real(self.reserve_GiB, "reserve_GiB", low=0.0, accepted="None or a finite number of GiB >= 0")

    @classmethod
    def of(cls, model: str | ModelConfig, gpu: str | Hardware, num_gpus: int = 1, **kw: float) -> Deployment:
        """Build from registry names: ``Deployment.of("llama3-70b", "H100", 4)``."""
        return cls(get_model(model), get_gpu(gpu), num_gpus, **kw)

    # --------------------------------------------------------------------------------- aggregates
    @property
    def bandwidth(self) -> float:
        """Aggregate memory bandwidth, bytes/s (perfect tensor-parallel scaling: optimistic)."""
        return self.gpu.bandwidth * self.num_gpus

    @property
    def flops(self) -> float:
        """Achieved aggregate FLOP/s: dense peak for the weight format x MFU x GPUs."""
        return self.gpu.flops(self.weight_bytes) * self.mfu * self.num_gpus

    @property
    def memory_bytes(self) -> float:
        return self.gpu.memory_bytes * self.num_gpus

    @property
    def reserve_bytes(self) -> float:
        per_gpu = RESERVE_PER_GPU_GiB if self.reserve_GiB is None else self.reserve_GiB / self.num_gpus
        return per_gpu * GiB * self.num_gpus

    @property
    def weight_total_bytes(self) -> float:
        return self.model.weight_bytes(self.weight_bytes)

    @property
    def kv_bytes_per_token(self) -> float:
        return self.model.kv_bytes_per_token(self.kv_bytes)


# ------------------------------------------------------------------------------------------ roofline
def ridge_point(gpu: Hardware, bytes_per_param: float = 2.0) -> float:
    """FLOPs per byte at which a kernel turns compute-bound: peak FLOP/s / bandwidth."""
    return gpu.flops(bytes_per_param) / gpu.bandwidth


def decode_intensity(batch: ArrayLike, bytes_per_param: float = 2.0) -> np.ndarray:
    """Decode intensity from weights alone: 2 B N FLOPs over N x bytes_per_param bytes = 2B / bp.

    The parameter count cancels: in BF16 the intensity is the batch size.
    """
    return 2.0 * np.asarray(batch, dtype=float) / bytes_per_param


def weight_bytes_read(dep: Deployment, batch: ArrayLike = 1) -> np.ndarray:
    """Weight bytes one decode step reads. Dense: all of them. MoE: shared weights plus the experts that at
    least one of the ``batch`` tokens is routed to, assuming uniform routing (E (1 - (1 - k/E)^B) experts)."""
    m = dep.model
    b = np.asarray(batch, dtype=float)
    if m.num_experts == 1:
        return np.broadcast_to(dep.weight_total_bytes, b.shape).astype(float)
    expert = m._expert_params() * m.moe_layers  # one routed expert, summed over the MoE layers
    shared = m.num_params - m.num_experts * expert
    touched = m.num_experts * (1 - (1 - m.experts_per_token / m.num_experts) ** b)
    return (shared + touched * expert) * dep.weight_bytes


def decode_intensity_with_kv(dep: Deployment, batch: ArrayLike, context: ArrayLike) -> np.ndarray:
    """Decode intensity with KV reads: 2 B N_active / (weight bytes + B x S x KV bytes per token).

    Saturates at 2 N / (S x KV bytes per token) as the batch grows: more sequences bring their own bytes.
    """
    b = np.asarray(batch, dtype=float)
    s = np.asarray(context, dtype=float)
    flops = 2.0 * dep.model.active_params * b
    return flops / (weight_bytes_read(dep, b) + b * s * dep.kv_bytes_per_token)


@dataclass(frozen=True)
class StepTime:
    """One forward step: both roofline terms and the larger of the two (seconds)."""

    memory_s: np.ndarray
    compute_s: np.ndarray

    @property
    def time_s(self) -> np.ndarray:
        return np.maximum(self.memory_s, self.compute_s)

    @property
    def compute_bound(self) -> np.ndarray:
        return self.compute_s > self.memory_s

    @property
    def bound(self) -> np.ndarray | str:
        """'compute' or 'memory' (an array of them for array inputs)."""
        out = np.where(self.compute_bound, "compute", "memory")
        return str(out) if out.ndim == 0 else out


def kv_traffic_bytes(dep: Deployment, batch: ArrayLike, context: ArrayLike) -> np.ndarray:
    """KV-cache bytes one decode step reads: batch x context x KV bytes per token."""
    return np.asarray(batch, dtype=float) * np.asarray(context, dtype=float) * dep.kv_bytes_per_token


def decode_step(dep: Deployment, batch: ArrayLike = 1, context: ArrayLike = 0,
                tokens_per_seq: ArrayLike = 1) -> StepTime:
    """Time of one decode step for ``batch`` sequences of ``context`` cached tokens each.

    memory = (weights read + KV read) / bandwidth; compute = 2 x active params x batch x tokens_per_seq /
    achieved FLOP/s. ``tokens_per_seq`` > 1 scores several tokens per sequence in one pass (speculative
    verification): the same bytes, that many times the arithmetic.
    """
    b = _positive(batch, "batch")
    s = _non_negative(context, "context")
    mem = (weight_bytes_read(dep, b) + kv_traffic_bytes(dep, b, s)) / dep.bandwidth
    comp = 2.0 * dep.model.active_params * b * np.asarray(tokens_per_seq, dtype=float) / dep.flops
    return StepTime(np.asarray(mem), np.asarray(comp))


def decode_floor_s(dep: Deployment) -> float:
    """Batch-1 decode time with an empty cache: every weight byte read once (the bandwidth floor)."""
    return float(decode_step(dep, 1, 0).time_s)


def tpot_s(dep: Deployment, batch: ArrayLike, context: ArrayLike) -> np.ndarray:
    """Time per output token: each running sequence gains one token per decode step."""
    return decode_step(dep, batch, context).time_s


def prefill_step(dep: Deployment, prompt_tokens: ArrayLike, batch: ArrayLike = 1) -> StepTime:
    """Prefill of ``batch`` prompts of ``prompt_tokens`` each in one pass: the weights are read once and used
    for every prompt token, so it is compute-bound beyond a few hundred tokens."""
    p = _positive(prompt_tokens, "prompt_tokens")
    b = _positive(batch, "batch")
    tokens = p * b
    mem = (weight_bytes_read(dep, tokens) + tokens * dep.kv_bytes_per_token) / dep.bandwidth
    comp = 2.0 * dep.model.active_params * tokens / dep.flops
    return StepTime(np.asarray(mem), np.asarray(comp))


def ttft_s(dep: Deployment, prompt_tokens: ArrayLike, prefix_hit: ArrayLike = 0.0) -> np.ndarray:
    """Time to first token with no queueing: the prefill of the part of the prompt not found in the prefix
    cache (at least one token is always computed, so logits exist)."""
    p = _positive(prompt_tokens, "prompt_tokens")
    computed = np.maximum(1.0, np.round(p * (1 - _fraction(prefix_hit, "prefix_hit"))))
    return prefill_step(dep, computed).time_s


# ------------------------------------------------------------------------------------ memory
def kv_budget_bytes(dep: Deployment) -> float:
    """Memory left for the KV cache: all GPU memory minus weights minus the activation reserve.

    Raises :class:`InfeasibleDeployment` when the weights and reserve do not fit.
    """
    budget = dep.memory_bytes - dep.weight_total_bytes - dep.reserve_bytes
    if budget <= 0:
        raise InfeasibleDeployment(
            f"{dep.model.name} does not fit on {dep.num_gpus} x {dep.gpu.name}: weights "
            f"{dep.weight_total_bytes / GiB:.1f} GiB + reserve {dep.reserve_bytes / GiB:.1f} GiB exceed memory "
            f"{dep.memory_bytes / GiB:.1f} GiB by {-budget / GiB:.1f} GiB. Add GPUs, quantize the weights "
            f"(weight_bytes=1 or 0.5) or pick a smaller model.")
    return budget


def kv_bytes_per_sequence(dep: Deployment, context: ArrayLike) -> np.ndarray:
    return np.asarray(context, dtype=float) * dep.kv_bytes_per_token


def max_concurrency(dep: Deployment, context: ArrayLike) -> np.ndarray:
    """Sequences of ``context`` tokens whose KV cache fits at once (floor); 0 if not even one fits."""
    s = _positive(context, "context")
    return np.floor(kv_budget_bytes(dep) / kv_bytes_per_sequence(dep, s)).astype(np.int64)


# ------------------------------------------------------------------------------------ throughput and $
def decode_throughput(dep: Deployment, batch: ArrayLike, context: ArrayLike) -> np.ndarray:
    """Output tokens per second across the whole deployment during steady decode."""
    return np.asarray(batch, dtype=float) / tpot_s(dep, batch, context)


def cost_per_million_tokens(dep: Deployment, batch: ArrayLike, context: ArrayLike,
                            price_per_gpu_hour: float = DEFAULT_PRICE_PER_GPU_HOUR) -> np.ndarray:
    """USD per million output tokens in steady decode: GPU-hours bought / tokens produced."""
    dollars_per_s = price_per_gpu_hour * dep.num_gpus / 3600.0
    return dollars_per_s / decode_throughput(dep, batch, context) * 1e6


def request_gpu_seconds(dep: Deployment, prompt_tokens: ArrayLike, output_tokens: ArrayLike,
                        batch: ArrayLike = 1, prefix_hit: ArrayLike = 0.0) -> np.ndarray:
    """Deployment-seconds one request costs when ``batch`` requests share each step: its (uncached) prefill
    plus its share of ``output_tokens`` decode steps at the mean context (prompt + half the output)."""
    p = _positive(prompt_tokens, "prompt_tokens")
    o = _positive(output_tokens, "output_tokens")
    b = _positive(batch, "batch")
    computed = np.maximum(1.0, np.round(p * (1 - _fraction(prefix_hit, "prefix_hit"))))
    prefill = prefill_step(dep, computed).time_s
    decode = o * tpot_s(dep, b, p + o / 2) / b
    return prefill + decode


# ------------------------------------------------------------------------------------ speculation
def expected_tokens_per_verification(alpha: ArrayLike, k: ArrayLike) -> np.ndarray:
    """Expected tokens per target pass with acceptance rate alpha and k drafted tokens:
    (1 - alpha^(k+1)) / (1 - alpha), which is k + 1 at alpha = 1 (all accepted plus the bonus token)."""
    a = np.asarray(alpha, dtype=float)
    kk = np.asarray(k, dtype=float)
    if np.any(~((a >= 0) & (a <= 1))):  # written so that NaN fails too
        raise ValueError(f"alpha is an acceptance probability in [0, 1], got {alpha!r}")
    if np.any(~((kk >= 0) & np.isfinite(kk))) or np.any(kk != np.round(kk)):
        raise ValueError(f"k (drafted tokens) must be a non-negative whole number, got {k!r}")
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (1 - a ** (kk + 1)) / (1 - a)
    return np.where(a == 1.0, kk + 1, out)


def speculative_speedup(dep: Deployment, batch: ArrayLike, context: ArrayLike, alpha: ArrayLike, k: ArrayLike,
                        draft_cost: float = 0.05) -> np.ndarray:
    """Speculative decoding's speedup over plain decode at the same batch.

    One round: k draft steps (each ``draft_cost`` x a target decode step) plus one target pass that scores
    k + 1 positions per sequence - about the same bytes, (k + 1) x the arithmetic. The round yields
    ``expected_tokens_per_verification`` tokens per sequence. Once the verification pass turns compute-bound
    the speedup shrinks, and near the ridge it falls below 1. The draft model's own KV cache is not counted.
    """
    inputs.real(draft_cost, "draft_cost (a draft step's time over a target step's)", low=0.0)
    plain = decode_step(dep, batch, context).time_s
    verify = decode_step(dep, batch, context, tokens_per_seq=np.asarray(k, dtype=float) + 1).time_s
    round_s = verify + np.asarray(k, dtype=float) * draft_cost * plain
    return expected_tokens_per_verification(alpha, k) * plain / round_s


# ------------------------------------------------------------------------------------ helpers
def _positive(x: ArrayLike, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if np.any(~np.isfinite(a)) or np.any(a <= 0):
        raise ValueError(f"{name} must be positive and finite, got {x!r}")
    return a


def _non_negative(x: ArrayLike, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if np.any(~np.isfinite(a)) or np.any(a < 0):
        raise ValueError(f"{name} must be non-negative and finite, got {x!r}")
    return a


def _fraction(x: ArrayLike, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if np.any(~((a >= 0) & (a <= 1))):  # written so that NaN fails too
        raise ValueError(f"{name} must be a fraction in [0, 1], got {x!r}")
    return a
