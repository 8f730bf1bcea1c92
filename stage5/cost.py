"""The cost model: roofline, decode and prefill time, KV memory, concurrency, speculation, quantization, $.

Every function takes plain numbers or numpy arrays for the swept quantities (batch, context, ...) and
broadcasts, so a chapter can sweep 100,000 deployments in one call.

Units: seconds, bytes, FLOPs, FLOP/s, bytes/s. Memory budgets are reported in binary GiB (2**30 bytes);
weights in decimal GB (1e9 bytes) where the source quotes them so.

Three modes share these formulas (:data:`MODES`). They differ only in how fast the hardware is assumed to run
and which terms are charged.

``floor`` (:func:`floor_deployment`): the physics at the datasheet's peak, with no efficiency factor. Bytes /
peak bandwidth and FLOPs / peak FLOP/s (an MFU of 1, at the fastest tensor format a kernel can use for the
deployment's precision, whatever its accumulation: :func:`tensor_format`), overlapped perfectly (the step takes the larger), with
prefill's causal attention FLOPs counted and only the input-embedding rows a step looks up read; communication
between GPUs is free (charging the link bytes over the link bandwidth could only raise it). Nothing in it can
run faster on the hardware; ``python -m stage5 validate`` checks that no published measurement beats it.

``simple`` (a :class:`Deployment` with ``estimate=None``, the default): the simple estimate, the source text's
derivation with one efficiency factor, the MFU (default 0.5, :data:`DEFAULT_MFU`), and the course's one step
formula: a decode step costs KV bytes / bandwidth + max(weight bytes / bandwidth, FLOPs / (peak x MFU)) at the
datasheet's bandwidth. Attention is its own kernel, bound by bandwidth at every batch, so its KV reads add to
the weight matmuls instead of hiding under them (chapter 2; Austin et al., "How to Scale Your Model", 2025, the
inference chapter); the source text's max(all bytes / bandwidth, FLOPs / FLOP/s) survives only in the floor,
where letting everything overlap is what makes it a bound, and in the roofline pictures (one intensity per
step). A prefill step is max(bytes / bandwidth, FLOPs / FLOP/s): its KV writes stream beside the matmuls.
FLOPs are 2 x active parameters per token, plus prefill's causal attention FLOPs (:func:`attention_flops`, the
floor's own term: they add under 10% for Llama 3 70B at 4K context, but outgrow the linear layers' past a few tens
of thousands of tokens, and left out they priced a long prefill below its own floor, issue 52); tensor parallelism
scales perfectly across ``num_gpus`` with no communication cost; one MFU regardless of batch; perfect batching with
no queueing. It is an estimate, not a bound: at 50% MFU a real prefill can beat it. It never prices a step below
the floor: every term is the floor's or larger (all the weights read, FP32 accumulation, MFU <= 1, attention's KV
reads added), which tests/test_floor.py checks over the registry.

``estimate`` (``Deployment(..., estimate=Estimate())``): the simple estimate plus the terms a real server pays,
each a named field of :class:`Estimate` with its source, and each can be switched off alone
(:meth:`Estimate.without`).

A sliding window (Mistral-7B v0.1, Gemma-2's alternate layers) caps the cache and the KV reads of those layers at
the window in every mode (:func:`kv_bytes_per_sequence`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from stage5 import fitted, inputs
from stage5.hardware import MATMULS, TENSOR_FORMATS, GiB, Hardware, get_gpu
from stage5.models import ModelConfig, get_model

ArrayLike = float | int | np.ndarray

DEFAULT_PRICE_PER_GPU_HOUR = 3.0  # USD; the anchor the source text takes from nanochat's stated rental price
DEFAULT_MFU = 0.5  # an estimate: well-tuned large matmuls reach 50-70% of dense peak; decode kernels less
# The course's anchor deployment, the source text's worked example: Llama 3 70B in BF16 on four H100 SXM GPUs.
ANCHOR_MODEL, ANCHOR_GPU, ANCHOR_GPUS = "llama3-70b", "H100-SXM", 4
# The memory held back from the KV cache (activations, workspace), by policy (Deployment.memory_policy):
# "fixed": the source text's 8 GiB per GPU (32 GiB on four H100s), the course's default, which the exercises state;
# "card": vLLM's rule, the engine fills ``gpu_memory_utilization`` of each card, default 0.9
#     (vllm/engine/arg_utils.py, EngineArgs.gpu_memory_utilization; "Engine Arguments" in vLLM's docs): on an
#     80 GiB card the same 8 GiB, on a 24 GiB L4 only 2.4 GiB;
# "free": TensorRT-LLM's rule, the KV cache takes ``kv_cache_free_gpu_mem_fraction`` of the memory left after the
#     weights, default 0.9 (TensorRT-LLM's KvCacheConfig, free_gpu_memory_fraction).
RESERVE_PER_GPU_GiB = 8.0
GPU_MEMORY_UTILIZATION = 0.9
MEMORY_POLICIES = ("fixed", "card", "free")


# ------------------------------------------------------------------------------------------ estimate mode
# GPU families: the fitted efficiencies (stage5.fitted) are per family, read from the architecture each datasheet names
# (stage5.hardware). A family with no fit source keeps the priors (PRIOR_BANDWIDTH_FRACTION, a GEMM scale of 1) and
# stage5.validate's band says so.
GPU_FAMILY: dict[str, str] = {
    "H100-SXM": "hopper", "H100-PCIe": "hopper", "H100-NVL": "hopper", "H200": "hopper", "GH200": "hopper",
    "A100-40GB": "ampere", "A100-80GB": "ampere", "A10G": "ampere",
    "L40S": "ada", "L4": "ada", "RTX-4090": "ada",
    "MI300X": "cdna3", "MI325X": "cdna3", "MI250X": "cdna2",
    "B200": "blackwell", "GB200-NVL72": "blackwell", "T4": "turing",
}
# The prior achieved bandwidth, before any fit: a production decode of a 70B model in BF16 on 8 x H100, profiled with
# Nsight Compute, reached about 60% of peak bandwidth over all its kernels (mikamirai.com, "GPU Memory Bandwidth: What
# Your Profiler Isn't Telling You", 2026). A family without a fit source keeps it.
PRIOR_BANDWIDTH_FRACTION = 0.60


def gpu_family(gpu: Hardware) -> str:
    """The family whose fitted efficiencies ``gpu`` takes (:data:`GPU_FAMILY`; "other" for a GPU not listed). A
    hypothetical variant of a registry chip (:func:`stage5.expert_parallel.hypothetical_domain` names it "<chip>
    (NVLink domain of n)") keeps its chip's family, so a comparison that holds the chip fixed holds its efficiencies
    fixed too."""
    return GPU_FAMILY.get(gpu.name, GPU_FAMILY.get(gpu.name.split(" (")[0], "other"))


def fitted_bandwidth_fraction(gpu: Hardware) -> float:
    """Achieved over datasheet bandwidth for ``gpu``: its family's fitted share (:mod:`stage5.fitted`), or the prior."""
    return fitted.BANDWIDTH_FRACTION.get(gpu_family(gpu), PRIOR_BANDWIDTH_FRACTION)


def fitted_allreduce_scale(gpu: Hardware) -> float:
    """The fitted speed of the tensor-parallel all-reduces on ``gpu``'s family, as a multiple of the modelled one
    (:func:`allreduce_one_s` at the links' measured efficiency): the estimate divides their time by it (1 where no fit
    source ran tensor parallelism on that family)."""
    return fitted.ALLREDUCE_SCALE.get(gpu_family(gpu), 1.0)


def fitted_gemm_scale(gpu: Hardware) -> float:
    """The fitted multiplier on the benchmark GEMM efficiency for ``gpu``'s family (1 where no source fitted it)."""
    return fitted.GEMM_SCALE.get(gpu_family(gpu), 1.0)


@dataclass(frozen=True)
class Engine:
    """An engine profile: how an engine runs a forward pass, and what that costs beyond the kernels' own time.

    ``kernels_per_layer``: kernels the host launches one by one per layer (0 where CUDA graphs or a C++ runtime issue
    the pass), counted from the engine's code; each costs :data:`stage5.fitted.LAUNCH_S` of host time. Launches are
    asynchronous, so that time overlaps the GPU's: a pass takes the longer (:attr:`StepTime.host_s`).
    ``step_class``: the fitted fixed time per step the GPU waits for (scheduling, sampling, output processing:
    :data:`stage5.fitted.STEP_S`), or None; ``extra_step_s``: a cited fixed time added on top (not fitted).
    ``band_class``: which error band prints with it ("graphs", "eager", or "unknown": the widest). ``source``: where
    each figure comes from."""

    name: str
    examples: str
    kernels_per_layer: float
    step_class: str | None
    band_class: str
    source: str
    extra_step_s: float = 0.0

    @property
    def host_s_per_layer(self) -> float:
        """Host time to launch one layer's kernels: kernels per layer x the fitted launch cost."""
        return self.kernels_per_layer * fitted.LAUNCH_S

    @property
    def step_s(self) -> float:
        """Fixed time per step the GPU waits: the class's fitted figure plus any cited one."""
        return (fitted.STEP_S[self.step_class] if self.step_class else 0.0) + self.extra_step_s


ENGINES: dict[str, Engine] = {e.name: e for e in (
    Engine("graphs", "a CUDA-graphs or C++-runtime engine whose kind or version is not stated (vLLM's performance CI "
           "build 9515)", 0, "python-graphs", "graphs",
           "priced as the faster class of graphs engine (CUDA graphs launched from Python, output processing "
           "overlapped): its fixed step time fitted (stage5.fitted.STEP_S)"),
    Engine("cpp-runtime", "TensorRT-LLM (NIM's backend), LMDeploy's TurboMind, FasterTransformer: a C++ runtime "
           "issues every kernel", 0, "cpp-runtime", "graphs",
           "fixed time per step fitted on the fit sources run by such engines (stage5.fitted.STEP_S)"),
    Engine("python-graphs", "gpt-fast compiled (torch.compile, mode reduce-overhead: CUDA graphs), vLLM 0.6 and later "
           "(CUDA graphs; output processing overlapped with the next step, vllm-project/vllm#7049)", 0,
           "python-graphs", "graphs", "fixed time per step fitted (stage5.fitted.STEP_S)"),
    # vllm-project/vllm#6854 (RFC, 2024-07-26): in vLLM's 0.5 engine each decode step leaves "about 4ms of GPU bubble"
    # while the CPU transfers the sampled tokens, detokenises, builds the next step's inputs and schedules. The
    # asynchronous output processor (vllm-project/vllm#7049, merged 2024-08-27, in v0.6.0) overlaps part of it.
    Engine("vllm-sync", "vLLM before 0.6 (output processing on the critical path)", 0, "python-graphs", "graphs",
           "the fitted graphs step time plus vLLM's own profile of its 0.5 scheduler: about 4 ms of GPU bubble per "
           "decode step (vllm-project/vllm#6854), cited, not fitted", extra_step_s=4e-3),
    # Counted from transformers' modeling_llama.py (LlamaDecoderLayer, eager attention path): two RMSNorms of 8 kernels
    # each (cast to FP32, pow, mean, add eps, rsqrt, multiply, cast back, weight), q/k/v projections (3), rotary on
    # q and k (5 each: two products, neg and cat of rotate_half, add), the cache's two torch.cat, repeat_kv's two
    # copies, attention (1) and its transpose copy (1), o_proj (1), two residual adds, the MLP's gate, up, SiLU,
    # product and down (5): 42.
    Engine("eager", "Hugging Face transformers, unfused (TinyChat's FP16 baseline): one launch per kernel from Python",
           42, None, "eager", "42 kernels a layer counted from transformers' LlamaDecoderLayer; the launch cost "
           "fitted (stage5.fitted.LAUNCH_S)"),
    # Counted from llm-awq's tinychat/modules: fused_attn.py (QuantLlamaAttentionFused's decode branch: the fused QKV
    # GEMV, one single_query_attention kernel doing rotary, cache write and attention, o_proj: 3), fused_norm.py (one
    # kernel per RMSNorm: 2), fused_mlp.py (QuantLlamaMLP: gate and up GEMVs, SiLU, product, down_proj: 5), and the
    # two residual adds: 12.
    Engine("fused-eager", "TinyChat (AWQ W4A16): fused modules, still one launch per kernel from Python", 12, None,
           "eager", "12 kernels a layer counted from llm-awq's tinychat/modules (fused_attn.py, fused_norm.py, "
           "fused_mlp.py); the launch cost fitted on the unfused engine (stage5.fitted.LAUNCH_S)"),
    Engine("unknown", "an engine the registry does not know", 0, None, "unknown",
           "no host cost charged (its GPU work alone); printed with the widest band of any engine class"),
)}

# The best-shape matmul rate a benchmark reached on each GPU, as a share of the dense peak: Bekman's Maximum
# Achievable Matmul FLOPS table (github.com/stas00/ml-engineering, compute/accelerator/README.md at b9e2972, "Maximum
# Achievable Matmul FLOPS comparison table", mamf-finder v2: BF16 A100 SXM 86.9%, GH200 83.6%, H100 SXM 80.3%,
# MI325X 60.4%, MI300X 51.4% (ROCm 6.3, PyTorch TunableOp); FP8 GH200 77.6%, H100 SXM 70.9%; its older v1 table gives
# MI250X 76.7% of one GCD's peak). A GPU without its own row takes its architecture's (Hopper: H100 SXM; Ampere: A100
# SXM), or, for Ada, Blackwell and Turing parts, the H100 SXM's, for want of a measurement. INT8 and FP4 take the FP8
# share where there is one.
MAMF_EFFICIENCY: dict[str, dict[str, float]] = {
    "H100-SXM": {"16-bit": 0.803, "fp8": 0.709}, "GH200": {"16-bit": 0.836, "fp8": 0.776},
    "A100-80GB": {"16-bit": 0.869}, "A100-40GB": {"16-bit": 0.869}, "MI300X": {"16-bit": 0.514},
    "MI325X": {"16-bit": 0.604}, "MI250X": {"16-bit": 0.767},
}
MAMF_DEFAULT = "H100-SXM"
# The share of that best-shape rate an LLM's GEMMs reach once compute-bound: DeepGEMM's dense FP8 GEMMs
# (github.com/deepseek-ai/DeepGEMM README, "Normal GEMMs for dense models", at 55ab91f, 2025-03-25, on H800 SXM5,
# whose FP8 peak and bandwidth are the H100 SXM's 1,979 TFLOPS and 3.35 TB/s), every DeepSeek-V3 shape of its table
# as {tokens M: ((N, K, TFLOPS), ...)}. At 4,096 tokens they are compute-bound: 751 to 1,426 TFLOPS, median 1,146.5,
# 57.9% of peak, 0.817 of the H100's best-shape 70.9%. At 64 and 128 tokens they are bound by the weight reads (the
# table's own bandwidth column: 1.5-2.7 TB/s), so there the estimate prices bytes at the achieved bandwidth and the FLOP
# rate rises with the tokens as the roofline says (:func:`gemm_s`); those rows set nothing and check the shape.
DEEPGEMM_H800: dict[int, tuple[tuple[int, int, float], ...]] = {
    64: ((2112, 7168, 206.0), (24576, 1536, 289.0), (32768, 512, 219.0), (7168, 16384, 336.0), (4096, 7168, 287.0),
         (7168, 2048, 295.0)),
    128: ((2112, 7168, 352.0), (24576, 1536, 535.0), (32768, 512, 358.0), (7168, 16384, 645.0), (4096, 7168, 533.0),
          (7168, 2048, 510.0)),
    4096: ((2112, 7168, 1009.0), (24576, 1536, 1125.0), (32768, 512, 751.0), (7168, 16384, 1426.0),
           (4096, 7168, 1265.0), (7168, 2048, 1168.0)),
}
LLM_SHAPE_SHARE = (float(np.median([t for _, _, t in DEEPGEMM_H800[4096]])) / 1979.0
                   / MAMF_EFFICIENCY[MAMF_DEFAULT]["fp8"])


def gemm_efficiency(gpu: Hardware, fmt: str) -> float:
    """Achieved over dense peak FLOP/s of an LLM's compute-bound GEMMs on ``gpu`` in tensor format ``fmt`` (a key
    of :data:`stage5.hardware.TENSOR_FORMATS`): :data:`MAMF_EFFICIENCY` x :data:`LLM_SHAPE_SHARE`."""
    if fmt not in TENSOR_FORMATS:
        raise ValueError(f"unknown tensor format {fmt!r}; accepted: {', '.join(TENSOR_FORMATS)}")
    shares = MAMF_EFFICIENCY.get(gpu.name, MAMF_EFFICIENCY[MAMF_DEFAULT])
    share = shares["16-bit"] if fmt in MATMULS["16-bit"] else shares.get("fp8", shares["16-bit"])
    return share * LLM_SHAPE_SHARE


def fitted_gemm_efficiency(gpu: Hardware, fmt: str) -> float:
    """The estimate's GEMM efficiency: the benchmark figure (:func:`gemm_efficiency`, a matmul benchmark's best-shape
    rate x a share derived from DeepGEMM's FP8 shapes on an H800, not a measurement of LLM serving) x the scale fitted
    for the chip's family (:func:`fitted_gemm_scale`), at most 1."""
    return min(1.0, gemm_efficiency(gpu, fmt) * fitted_gemm_scale(gpu))


def gemm_s(gpu: Hardware, tokens: ArrayLike, n: int, k: int, fmt: str = "bf16/fp32",
           bandwidth_fraction: float = 0.60) -> np.ndarray:
    """The estimate's time for one GEMM of ``tokens`` x ``k`` activations by ``k`` x ``n`` weights in tensor format
    ``fmt``: its bytes (inputs at the format's width, a 16-bit output) at the achieved bandwidth, or its FLOPs at the
    measured :func:`gemm_efficiency`, whichever is longer. Its achieved FLOP rate rises with the tokens, bound by the
    weight reads below the ridge and by the arithmetic above it: the prefill efficiency curve."""
    m = _positive(tokens, "tokens")
    n, k = inputs.positive_int(n, "n (the weights' output width)"), inputs.positive_int(k, "k (the inner width)")
    bandwidth_fraction = inputs.real(bandwidth_fraction, "bandwidth_fraction", low=0.0, high=1.0, low_open=True)
    width = 2.0 if fmt in MATMULS["16-bit"] else (0.5 if fmt == "fp4/fp32" else 1.0)
    peak = gpu.peak(fmt)
    if peak is None:
        raise ValueError(f"{gpu.name} has no {fmt} tensor cores; accepted: {', '.join(f for f, _ in gpu.peaks)}")
    moved = (m * k + k * n) * width + m * n * 2.0
    return np.maximum(moved / (gpu.bandwidth * bandwidth_fraction), 2.0 * m * n * k / (peak * gemm_efficiency(gpu, fmt)))


@dataclass(frozen=True)
class Estimate:
    """The terms a real server pays on top of the simple estimate. Every default comes from a source other than the
    published measurements it is checked against (:mod:`stage5.published`).

    ``bandwidth_fraction``: achieved memory bandwidth over the datasheet's. ``None`` (the default): the share
        fitted for the GPU's family on the fit sources (:func:`fitted_bandwidth_fraction`, :mod:`stage5.fitted`; a
        family no fit source ran keeps the prior :data:`PRIOR_BANDWIDTH_FRACTION`, 0.60, from an Nsight Compute
        profile of a production decode); a number fixes one share for every chip.
    ``prefill_mfu``, ``decode_mfu``: achieved over peak FLOP/s of the big matmuls. ``None`` (the default): the
        chip's GEMM efficiency (:func:`fitted_gemm_efficiency`: a matmul benchmark's best-shape rate on that GPU,
        times a share derived from DeepGEMM's FP8 shapes on an H800, times the scale fitted for its family); a
        number fixes one MFU for every chip (``python -m stage5 validate --fitted`` does).
    ``additive_attention``: attention is its own kernel, bound by bandwidth at every batch, so its KV reads add
        to the step instead of overlapping the weight matmuls: KV / bandwidth + max(weights / bandwidth,
        linear FLOPs / FLOP/s) (Austin et al., "How to Scale Your Model", 2025, the inference chapter). The simple
        estimate composes its step the same way; switched off, the KV reads overlap as in the floor.
    ``allreduce``: tensor parallelism's two all-reduces per layer (Megatron-LM: after attention and after the
        MLP), each by the algorithm an engine picks for its size (:func:`allreduce_one_s`: one-shot or two-shot
        inside an NVLink domain, NCCL's ring otherwise, the network past one server). Link bandwidths and
        latencies are in :class:`stage5.hardware.Hardware`.
    ``server_nics``: an all-reduce across servers carries its bytes over all of a server's NICs at once (NCCL runs
        several rings, each through a different NIC: :func:`network_bus_bandwidth`, at the bus bandwidth an NCCL
        maintainer reported); switched off, the model as it was before: one NIC per ring, at NVLink's measured
        efficiency. The term was corrected after FasterTransformer's rows past one server (:mod:`stage5.published`)
        showed the one-NIC ring too slow, so that source counts as in sample; its efficiency is a measurement from
        elsewhere.
    ``prefill_attention``: the causal attention FLOPs of prefill, quadratic in the prompt (the floor,
        :func:`floor_deployment`, and the simple estimate count them too; the source text leaves them out).
    ``mixed_step``: under load, decode shares each step with other requests' prefill chunks (chunked prefill,
        Agrawal et al., "Sarathi-Serve", OSDI 2024): ``concurrency - 1`` requests each bring ``prompt / output``
        prompt tokens per output token, up to ``step_token_budget`` tokens per step.
    ``step_token_budget``: tokens one step may carry. 8,192: vLLM's default ``max_num_batched_tokens`` for its
        OpenAI-compatible server on GPUs with 70 GiB or more (vllm/engine/arg_utils.py, EngineArgs batch defaults).
    ``embedding_lookup``: a step reads only the input-embedding rows its tokens look up, not the whole table
        (an embedding is a gather: PyTorch's ``nn.Embedding``, vLLM's ``VocabParallelEmbedding``); a table tied to
        the output head is still read whole by the head. Physics, not an efficiency: the floor
        (:func:`floor_deployment`) counts it too. The simple estimate charges the whole table, as the source does.
    ``engine``: the engine profile, a key of :data:`ENGINES` (kernels it launches per layer from Python, its fixed
        time per step, its band class; "unknown" for an engine the registry does not know). An input, not a term:
        say which engine is priced.
    ``allreduce_scale``: the all-reduces' speed as a multiple of the modelled one (their time is divided by it).
        ``None`` (the default): fitted for the GPU's family on the fit sources (:func:`fitted_allreduce_scale`).
    ``accumulation``: what its 16-bit and FP8 GEMMs accumulate in, "fp32" (PyTorch's cuBLAS calls, cuBLASLt's FP8)
        or "fp16" (TinyChat's W4A16 GEMM, llama.cpp's cuBLAS path before 2025): on a GeForce card FP16
        accumulation runs at twice the rate (:func:`tensor_format`).
    """

    bandwidth_fraction: float | None = None
    prefill_mfu: float | None = None
    decode_mfu: float | None = None
    additive_attention: bool = True
    allreduce: bool = True
    prefill_attention: bool = True
    mixed_step: bool = True
    step_token_budget: int = 8192
    embedding_lookup: bool = True
    server_nics: bool = True
    engine: str = "graphs"
    accumulation: str = "fp32"
    allreduce_scale: float | None = None

    def __post_init__(self) -> None:
        if self.allreduce_scale is not None and not (isinstance(self.allreduce_scale, float | int)
                                                     and 0 < self.allreduce_scale <= 10):
            raise ValueError(f"allreduce_scale is a speed multiple in (0, 10] or None (fitted for each chip's family), "
                             f"got {self.allreduce_scale!r}")
        for name in ("bandwidth_fraction", "prefill_mfu", "decode_mfu"):
            value = getattr(self, name)
            if value is None:
                continue  # fitted for each chip's family (stage5.fitted)
            if not (isinstance(value, float | int) and 0 < value <= 1):
                raise ValueError(f"{name} is a fraction (0 < x <= 1) or None (fitted for each chip's family), "
                                 f"got {value!r}")
        if self.engine not in ENGINES:
            raise ValueError(f"unknown engine {self.engine!r}; accepted: {', '.join(ENGINES)}")
        if self.accumulation not in ("fp32", "fp16"):
            raise ValueError(f"accumulation is 'fp32' or 'fp16', got {self.accumulation!r}")
        if self.step_token_budget < 1:
            raise ValueError(f"step_token_budget must be a positive number of tokens, got {self.step_token_budget!r}")

    def without(self, *terms: str) -> Estimate:
        """This estimate with the named terms switched off: a switch becomes False, a fraction becomes 1 (the
        datasheet's bandwidth, or peak FLOP/s). Unknown names list the terms there are."""
        _check_terms(terms)
        return replace(self, **{t: (False if isinstance(getattr(self, t), bool) else 1.0) for t in terms})

    @classmethod
    def only(cls, *terms: str, mfu: float = DEFAULT_MFU) -> Estimate:
        """Only the named terms at their defaults: the other switches off, the datasheet's bandwidth, and ``mfu``
        for any MFU not named. ``Estimate.only()`` is the source text's own step, max(weights + KV, FLOPs), with
        attention's KV reads overlapped; ``Estimate.only("additive_attention")`` prices decode as the simple
        estimate does. No engine costs are charged (the "unknown" profile)."""
        base = cls()
        off = cls(bandwidth_fraction=1.0, prefill_mfu=mfu, decode_mfu=mfu, additive_attention=False, allreduce=False,
                  prefill_attention=False, mixed_step=False, embedding_lookup=False, server_nics=False,
                  engine="unknown")  # no engine costs: the course's own step
        _check_terms(terms)
        return replace(off, **{t: getattr(base, t) for t in terms})


TERMS = ("bandwidth_fraction", "prefill_mfu", "decode_mfu", "additive_attention", "allreduce", "prefill_attention",
         "mixed_step", "embedding_lookup", "server_nics")  # the switchable terms, in the order a chapter adds them


def _check_terms(terms: tuple[str, ...]) -> None:
    unknown = set(terms) - set(TERMS)
    if unknown:
        raise ValueError(f"unknown estimate terms {sorted(unknown)}; accepted: {sorted(TERMS)}")


# The floor's terms (:func:`floor_deployment`): physics only, at peak. Prefill's attention FLOPs and the embedding
# gather are what the hardware must do; every efficiency is 1; attention's KV reads overlap the weight matmuls.
FLOOR = Estimate(bandwidth_fraction=1.0, prefill_mfu=1.0, decode_mfu=1.0, additive_attention=False, allreduce=False,
                 prefill_attention=True, mixed_step=False, embedding_lookup=True)


class InfeasibleDeployment(ValueError):
    """A deployment that cannot run: the message names the resource that ran out and by how much."""


# ------------------------------------------------------------------------------------ tensor-parallel rules
def _kv_heads(model: ModelConfig) -> int:
    """Key/value heads a tensor-parallel engine splits: MLA's one latent counts as one head (every GPU keeps it)."""
    return 1 if model.is_mla else model.num_kv_heads


def tp_allowed(model: ModelConfig, n: int) -> bool:
    """Whether ``n``-way tensor parallelism is allowed, by vLLM's rule (vllm/model_executor/models/llama.py,
    LlamaAttention.__init__, vLLM 0.5; the same in later versions): ``n`` divides the query heads, and divides the
    KV heads when there are at least ``n`` of them, or is a multiple of them when there are fewer (the KV heads are
    then replicated)."""
    n = inputs.positive_int(n, "n (tensor-parallel GPUs)")
    kv = _kv_heads(model)
    return model.num_heads % n == 0 and (kv % n == 0 if kv >= n else n % kv == 0)


def tp_degrees(model: ModelConfig) -> list[int]:
    """Every tensor-parallel degree :func:`tp_allowed` accepts for ``model``."""
    return [n for n in range(1, model.num_heads + 1) if tp_allowed(model, n)]


def check_tp(model: ModelConfig, n: int) -> None:
    """Raise :class:`InfeasibleDeployment` naming the rule and the allowed degrees if ``n`` is not allowed."""
    n = inputs.positive_int(n, "n (tensor-parallel GPUs)")
    if not tp_allowed(model, n):
        raise InfeasibleDeployment(
            f"{model.name} cannot be split {n} ways by tensor parallelism: the degree must divide the "
            f"{model.num_heads} query heads and divide the {_kv_heads(model)} KV heads (or be a multiple of them, "
            f"which replicates them), as vLLM requires; allowed: {', '.join(map(str, tp_degrees(model)))}")


def kv_replication(model: ModelConfig, n: int) -> float:
    """How many copies of each KV head ``n``-way tensor parallelism keeps: 1 up to the number of KV heads, then
    n / KV heads (each GPU holds at least one head, vLLM's ``max(1, kv_heads // tp)``), so the KV bytes each GPU
    holds and reads stop falling once n passes the KV heads."""
    n = inputs.positive_int(n, "n (tensor-parallel GPUs)")
    return max(1.0, n / _kv_heads(model))


@dataclass(frozen=True)
class Deployment:
    """A model served on ``num_gpus`` identical accelerators with tensor parallelism.

    ``weight_bytes`` is bytes per parameter (2 = BF16, 1 = FP8/INT8, 0.5 = INT4) and ``kv_bytes`` bytes per
    cached element, chosen separately. ``mfu`` is the fraction of dense peak FLOP/s actually reached.
    The reserve held back for activations and workspace follows ``memory_policy`` (:data:`MEMORY_POLICIES`):
    ``"fixed"`` (default) 8 GiB per GPU, the source text's; ``"card"`` (vLLM) ``1 - memory_utilization`` of
    every card; ``"free"`` (TensorRT-LLM) ``1 - memory_utilization`` of what the weights leave. ``reserve_GiB``
    (total over the GPUs) overrides all three. ``num_gpus`` must be a tensor-parallel degree the model allows
    (:func:`tp_allowed`). ``estimate``: ``None`` prices the simple estimate (the source text's formulas at ``mfu``);
    an :class:`Estimate` adds the terms a real server pays (its MFUs replace ``mfu``). :func:`floor_deployment`
    turns any deployment into its floor. ``matmul``: the precision the matmuls run at (a key of
    :data:`stage5.hardware.MATMULS`: "16-bit", "fp8", "int8", "fp4"); ``None`` goes by the weight width, 1 byte
    FP8 and anything else 16-bit (:func:`matmul_precision`). ``head_bytes``: bytes per weight of the lookup
    tables (input embedding, output head, learned positions: :attr:`ModelConfig.table_params`); ``None`` keeps them
    at 16 bits, or at the body's width where that is wider (:attr:`table_bytes`), as engines do: vLLM's FP8 mode
    quantizes the linear layers "except for the final lm_head" and leaves the embedding (not a Linear) alone, and
    GPTQ and AWQ checkpoints quantize only the transformer blocks' linear layers.
    """

    model: ModelConfig
    gpu: Hardware
    num_gpus: int = 1
    weight_bytes: float = 2.0
    kv_bytes: float = 2.0
    mfu: float = DEFAULT_MFU
    reserve_GiB: float | None = None
    estimate: Estimate | None = None
    memory_utilization: float = GPU_MEMORY_UTILIZATION
    memory_policy: str = "fixed"
    matmul: str | None = None
    head_bytes: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.num_gpus, (int, np.integer)) or isinstance(self.num_gpus, bool) or self.num_gpus < 1:
            raise ValueError(f"num_gpus must be a positive integer, got {self.num_gpus!r}")
        for name in ("weight_bytes", "kv_bytes"):
            inputs.positive(getattr(self, name), name)
        if self.head_bytes is not None:
            inputs.positive(self.head_bytes, "head_bytes (bytes per weight of the embedding and output head)")
        inputs.positive(self.mfu, "mfu (a fraction of peak FLOP/s)", maximum=1.0)
        if self.reserve_GiB is not None:
            inputs.real(self.reserve_GiB, "reserve_GiB", low=0.0, accepted="None or a finite number of GiB >= 0")
        inputs.positive(self.memory_utilization, "memory_utilization (a share of GPU memory)", maximum=1.0)
        if self.memory_policy not in MEMORY_POLICIES:
            raise ValueError(f"memory_policy {self.memory_policy!r} is not known; accepted: {', '.join(MEMORY_POLICIES)}")
        if self.matmul is not None and self.matmul not in MATMULS:
            raise ValueError(f"matmul {self.matmul!r} is not a matmul precision; accepted: None (by the weight width) "
                             f"or one of {', '.join(MATMULS)}")
        check_tp(self.model, int(self.num_gpus))

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
        """Achieved aggregate FLOP/s: the dense peak the mode prices the matmuls at (:func:`tensor_format`) x MFU x
        GPUs."""
        return tensor_format(self)[1] * self.mfu * self.num_gpus

    @property
    def memory_bytes(self) -> float:
        return self.gpu.memory_bytes * self.num_gpus

    @property
    def reserve_bytes(self) -> float:
        """Bytes held back from the KV cache over all GPUs (see the class docstring)."""
        if self.reserve_GiB is not None:
            return self.reserve_GiB * GiB
        if self.memory_policy == "fixed":
            return RESERVE_PER_GPU_GiB * GiB * self.num_gpus
        spare = 1 - self.memory_utilization
        if self.memory_policy == "card":
            return spare * self.memory_bytes
        return spare * max(0.0, self.memory_bytes - self.weight_total_bytes)

    @property
    def table_bytes(self) -> float:
        """Bytes per weight of the lookup tables: ``head_bytes``, or 16 bits (2 bytes) unless the body is wider."""
        return self.head_bytes if self.head_bytes is not None else max(2.0, self.weight_bytes)

    @property
    def weight_total_bytes(self) -> float:
        return self.model.weight_bytes(self.weight_bytes, self.table_bytes)

    @property
    def kv_bytes_per_token(self) -> float:
        """KV bytes one token occupies over all GPUs, replicated heads included (:func:`kv_replication`)."""
        return self.model.kv_bytes_per_token(self.kv_bytes) * kv_replication(self.model, self.num_gpus)


def floor_deployment(dep: Deployment) -> Deployment:
    """The floor of ``dep``: the physics at the datasheet's peak, with no efficiency factor. Peak bandwidth and
    peak FLOP/s (MFU 1), bytes and FLOPs overlapped perfectly (a step takes the larger, attention's KV reads
    included), prefill's causal attention FLOPs counted and only the looked-up embedding rows read; no all-reduce,
    no mixed steps. No server can beat it."""
    return replace(dep, mfu=1.0, estimate=FLOOR)


def estimate_deployment(dep: Deployment, estimate: Estimate | None = None) -> Deployment:
    """``dep`` priced in estimate mode (default terms unless ``estimate`` is given)."""
    return replace(dep, estimate=estimate or Estimate())


def simple_deployment(dep: Deployment, mfu: float = DEFAULT_MFU) -> Deployment:
    """``dep`` priced by the simple estimate at ``mfu`` (the source text's formulas, attention's KV reads added)."""
    return replace(dep, mfu=mfu, estimate=None)


def is_floor(dep: Deployment) -> bool:
    """Whether ``dep`` is priced as the floor (:func:`floor_deployment`)."""
    return dep.estimate == FLOOR and dep.mfu == 1.0


def mode_of(dep: Deployment) -> str:
    """The name (one of :data:`MODES`) of the mode ``dep`` is priced in."""
    if dep.estimate is None:
        return "simple"
    return "floor" if is_floor(dep) else "estimate"


def matmul_precision(dep: Deployment) -> str:
    """The precision ``dep``'s matmuls run at: ``dep.matmul``, or by the weight width when it is None (1 byte: FP8
    weights and activations, W8A8; anything else: 16 bits, the weight-only formats dequantizing to it)."""
    if dep.matmul is not None:
        return dep.matmul
    return "fp8" if dep.weight_bytes == 1.0 else "16-bit"


def tensor_format(dep: Deployment) -> tuple[str, float]:
    """(tensor format, dense peak FLOP/s per GPU) the mode prices ``dep``'s matmuls at (:data:`TENSOR_FORMATS`).

    The floor takes the fastest format a kernel can run the deployment's matmuls in, whatever the accumulation
    (:meth:`stage5.hardware.Hardware.matmul_rate` with ``fastest``): on an RTX 4090, FP16 with FP16 accumulation at
    twice the FP32-accumulation rate. The simple estimate and the estimate assume FP32 accumulation, which is what
    PyTorch's and cuBLASLt's GEMMs use, and say so (:data:`MODE_MEANINGS`); an estimate of an engine that
    accumulates in FP16 (``Estimate.accumulation``) takes that rate where the chip has it."""
    fp16_accumulation = dep.estimate is not None and dep.estimate.accumulation == "fp16"
    return dep.gpu.matmul_rate(matmul_precision(dep), fastest=is_floor(dep),
                               accumulation="fp16" if fp16_accumulation else "fp32")


# The modes, in the order a reader meets them: the simple estimate (chapters 1-8, the CLI's default), the full
# estimate (chapter 9), and the floor (the physics at peak, no efficiency factor: a lower bound).
MODES = ("simple", "estimate", "floor")
MODE_NAMES = {"simple": "simple estimate", "estimate": "estimate", "floor": "floor"}
# What each mode prices, in the words the book pastes wherever it defines a mode (the glossary, chapters 9 and 10,
# the appendix: tests/test_mode_meanings.py checks each pastes these), so that no page can define one differently.
MODE_MEANINGS = {
    "simple": (f"The course's formulas with one efficiency factor, an assumed MFU ({DEFAULT_MFU:.0%} unless stated), "
               "at the datasheet's bandwidth and the FP32-accumulation peak of the deployment's tensor format. A "
               "decode step takes KV bytes / bandwidth + max(weight bytes / bandwidth, FLOPs / (peak FLOP/s × MFU)): "
               "attention is a kernel of its own, so its KV reads add to the weight matmuls. Every weight is read, "
               "the whole embedding table included (kept at 16 bits with the output head, as engines keep them); "
               "prefill's causal attention FLOPs are counted, as in the floor; batching is perfect and tensor "
               "parallelism free. An estimate, not a bound, and never below the floor."),
    "estimate": ("The simple estimate with the costs a real server pays, each a term that can be switched off alone: "
                 "an achieved share of the datasheet's bandwidth and a scale on each chip's benchmark GEMM efficiency "
                 "in place of the MFU, both fitted by GPU family on the sources marked for fitting (or, where one is "
                 "given, an MFU per phase); the engine's profile: the kernels it launches one by one from Python "
                 "times a fitted launch cost, and its fixed time per step, and FP16 accumulation where it uses it; the tensor-parallel all-reduces, their speed "
                 "scaled by a factor fitted per GPU family, over every network card of a server past one; other "
                 "requests' prefill chunks riding in each decode step; and only the embedding rows a step's tokens "
                 "look up read. Attention's KV reads add, and prefill's causal attention FLOPs count, as in the simple "
                 "estimate (each a term too, so a chapter can switch it off)."),
    "floor": ("The physics at the datasheet's peak, with no efficiency factor: a step takes the larger of its bytes "
              "over the datasheet's bandwidth (the weights, only the embedding rows its tokens look up, and the KV "
              "cache) and its FLOPs over the peak of the fastest tensor format a kernel can use for the deployment's "
              "precision, FP16 accumulation included (prefill's causal attention included), every kernel overlapped "
              "and communication between GPUs free. No server runs faster."),
}


def with_mode(dep: Deployment, mode: str) -> Deployment:
    """``dep`` in one of :data:`MODES`: "simple" (the course's formulas at ``dep.mfu``, or the default MFU when
    ``dep`` is a floor), "estimate"
    (:func:`estimate_deployment`, keeping ``dep.estimate`` if it has one) or "floor" (:func:`floor_deployment`)."""
    if mode == "simple":  # a floor's MFU of 1 is the floor's, not the deployment's: back to the default
        return replace(dep, estimate=None, mfu=DEFAULT_MFU if is_floor(dep) else dep.mfu)
    if mode == "estimate":
        return estimate_deployment(dep, None if is_floor(dep) else dep.estimate)
    if mode == "floor":
        return floor_deployment(dep)
    raise ValueError(f"unknown mode {mode!r}; accepted: {', '.join(MODES)}")


# ------------------------------------------------------------------------------------------ roofline
def ridge_point(gpu: Hardware, bytes_per_param: float = 2.0) -> float:
    """FLOPs per byte at which a kernel turns compute-bound: peak FLOP/s / bandwidth."""
    inputs.bytes_per_number(bytes_per_param, "bytes_per_param")
    return gpu.flops(bytes_per_param) / gpu.bandwidth


def decode_intensity(batch: ArrayLike, bytes_per_param: float = 2.0) -> np.ndarray:
    """Decode intensity from weights alone: 2 B N FLOPs over N x bytes_per_param bytes = 2B / bp.

    The parameter count cancels: in BF16 the intensity is the batch size.
    """
    _positive(batch, "batch")
    inputs.bytes_per_number(bytes_per_param, "bytes_per_param")
    return 2.0 * np.asarray(batch, dtype=float) / bytes_per_param


def experts_touched(num_experts: int, experts_per_token: int, tokens: ArrayLike) -> np.ndarray:
    """Expected distinct experts of one MoE layer that at least one of ``tokens`` tokens is routed to, assuming
    uniform, independent routing: each expert is missed by one token with probability 1 - k/E, so
    E (1 - (1 - k/E)^B). Real routers are skewed, which touches fewer experts at small batch."""
    inputs.positive_int(num_experts, "num_experts")
    inputs.positive_int(experts_per_token, "experts_per_token", maximum=num_experts)
    _non_negative(tokens, "tokens")
    b = np.asarray(tokens, dtype=float)
    return num_experts * (1 - (1 - experts_per_token / num_experts) ** b)


def embedding_rows_saved(model: ModelConfig, tokens: ArrayLike) -> np.ndarray:
    """Input-embedding parameters a step carrying ``tokens`` tokens does *not* read: the lookup fetches one row
    per token (at most ``tokens`` distinct rows, at most the vocabulary), not the table. Zero when the table is
    tied to the output head, which multiplies by all of it every step."""
    t = _non_negative(tokens, "tokens")
    if model.tie_embeddings:
        return np.zeros_like(t)
    return (model.vocab_size - np.minimum(t, model.vocab_size)) * model.hidden_size


def weight_bytes_read(dep: Deployment, batch: ArrayLike = 1) -> np.ndarray:
    """Weight bytes one step carrying ``batch`` tokens reads, the lookup tables at their own width
    (:attr:`Deployment.table_bytes`). Dense: all of them (the simple estimate), or, with
    the estimate's ``embedding_lookup`` term (estimate mode and the floor), all but the input-embedding rows
    no token looks up (:func:`embedding_rows_saved`). MoE: only the experts that at least one of the tokens is
    routed to (:func:`experts_touched`, uniform routing)."""
    _positive(batch, "batch")
    m = dep.model
    b = np.asarray(batch, dtype=float)
    lookup = dep.estimate is not None and dep.estimate.embedding_lookup
    unread = embedding_rows_saved(m, b) if lookup else np.zeros_like(b)
    tables = (m.table_params - unread) * dep.table_bytes  # embedding, head and positions, at their own width
    if m.num_experts == 1:
        return (m.num_params - m.table_params) * dep.weight_bytes + tables
    expert = m._expert_params() * m.moe_layers  # one routed expert, summed over the MoE layers
    shared = m.num_params - m.num_experts * expert
    touched = experts_touched(m.num_experts, m.experts_per_token, b)
    return (shared - m.table_params + touched * expert) * dep.weight_bytes + tables


def decode_intensity_with_kv(dep: Deployment, batch: ArrayLike, context: ArrayLike) -> np.ndarray:
    """Decode intensity with KV reads: 2 B N_active / (weight bytes + B x S x KV bytes per token).

    Saturates at 2 N / (S x KV bytes per token) as the batch grows: more sequences bring their own bytes.
    """
    _positive(batch, "batch")
    _non_negative(context, "context")
    b = np.asarray(batch, dtype=float)
    s = np.asarray(context, dtype=float)
    flops = 2.0 * dep.model.active_params * b
    return flops / (weight_bytes_read(dep, b) + b * kv_bytes_per_sequence(dep, s))


@dataclass(frozen=True)
class StepTime:
    """One forward step: both roofline terms and the larger of the two (seconds), plus ``extra_s``, time that
    overlaps neither: the attention kernel's KV reads in a decode step (the simple estimate and the estimate) and
    the all-reduces (the estimate); 0 in the floor, where everything overlaps. ``memory_s`` is then the weight
    reads alone, so ``bound`` says whether the weight matmuls wait on memory or on arithmetic. ``host_s``: the host's
    time to launch the pass (estimate mode, :func:`host_s`), which the GPU's work hides unless it is longer. ``fixed_s``:
    the engine's fixed time per step that the GPU waits for (:func:`step_overhead_s`), added."""

    memory_s: np.ndarray
    compute_s: np.ndarray
    extra_s: np.ndarray | float = 0.0
    host_s: np.ndarray | float = 0.0
    fixed_s: float = 0.0

    @property
    def time_s(self) -> np.ndarray:
        """The GPU's time, or the host's time to launch the pass where that is longer (an eager engine's small
        steps: :data:`ENGINES`), plus the engine's fixed time per step."""
        return np.maximum(np.maximum(self.memory_s, self.compute_s) + self.extra_s, self.host_s) + self.fixed_s

    @property
    def compute_bound(self) -> np.ndarray:
        return self.compute_s > self.memory_s

    @property
    def bound(self) -> np.ndarray | str:
        """'compute' or 'memory' (an array of them for array inputs)."""
        out = np.where(self.compute_bound, "compute", "memory")
        return str(out) if out.ndim == 0 else out


def achieved_bandwidth(dep: Deployment) -> float:
    """Aggregate bandwidth the step is priced at: the datasheet's (floor, simple estimate), or its achieved
    fraction (estimate)."""
    if dep.estimate is None:
        return dep.bandwidth
    share = dep.estimate.bandwidth_fraction
    return dep.bandwidth * (fitted_bandwidth_fraction(dep.gpu) if share is None else share)


def achieved_flops(dep: Deployment, phase: str) -> float:
    """Aggregate FLOP/s of ``phase`` ("prefill" or "decode"): peak x ``dep.mfu`` (simple estimate) or x the
    estimate's MFU for that phase (1 in the floor; ``None``: the chip's :func:`fitted_gemm_efficiency`)."""
    if dep.estimate is None:
        return dep.flops
    fmt, peak = tensor_format(dep)
    mfu = dep.estimate.prefill_mfu if phase == "prefill" else dep.estimate.decode_mfu
    return peak * (fitted_gemm_efficiency(dep.gpu, fmt) if mfu is None else mfu) * dep.num_gpus


# The engine's own all-reduce inside one NVLink domain, as vLLM runs it (csrc/custom_all_reduce.cuh,
# CustomAllreduce::allreduce, and vllm/distributed/device_communicators/custom_all_reduce.py): only on 2, 4, 6 or 8
# fully connected GPUs and for messages up to 8 MiB (``max_size``); one-shot (every GPU reads every other's
# message and reduces it) on 2 GPUs, below 512 KiB on up to 4 and below 256 KiB on up to 8; two-shot
# (reduce-scatter, then all-gather) above. Larger messages, other GPU counts and PCIe go to NCCL's ring.
CUSTOM_ALLREDUCE_GPUS = (2, 4, 6, 8)
CUSTOM_ALLREDUCE_MAX_BYTES = 8 * 2**20
ONE_SHOT_BELOW_BYTES = ((4, 512 * 2**10), (8, 256 * 2**10))  # (up to this many GPUs, messages below this size)
ALLREDUCE_ALGORITHMS = ("one-shot", "two-shot", "ring", "ring across nodes")


def allreduce_algorithm(gpu: Hardware, n: int, message_bytes: float) -> str:
    """Which all-reduce an engine runs for ``message_bytes`` over ``n`` GPUs (:data:`ALLREDUCE_ALGORITHMS`)."""
    n = inputs.positive_int(n, "n (GPUs)")
    message_bytes = inputs.real(message_bytes, "message_bytes", low=0.0)
    if n > gpu.gpus_per_node:
        return "ring across nodes"
    if n <= gpu.nvlink_domain and n in CUSTOM_ALLREDUCE_GPUS and message_bytes <= CUSTOM_ALLREDUCE_MAX_BYTES:
        if n == 2 or any(n <= k and message_bytes < limit for k, limit in ONE_SHOT_BELOW_BYTES):
            return "one-shot"
        return "two-shot"
    return "ring"


def allreduce_one_s(gpu: Hardware, n: int, message_bytes: ArrayLike, server_nics: bool = True) -> np.ndarray:
    """Time of one all-reduce of ``message_bytes`` over ``n`` GPUs, by the algorithm :func:`allreduce_algorithm`
    picks for each message.

    one-shot: a fixed latency (``gpu.allreduce_latency_s``, flat in n) + each GPU reads the n - 1 other messages
    over its links. two-shot: two such latencies + 2(n-1)/n of the message each way. ring (NCCL): its launch
    latency + 2(n-1) steps of the link's per-hop latency + 2(n-1)/n of the message over each link. Across nodes,
    NCCL's tuning model (src/graph/tuning.cc) charges 2 x nodes of the 2(n-1) steps at the network's latency
    (``node_link_latency_s``) and the rest at the link's. NCCL runs several rings (channels) at once, each leaving
    the server through a different NIC, so the network carries the message at all of a server's NICs together
    (one per GPU, at the measured ``node_link_efficiency``); NVLink caps it where it is the slower.
    ``server_nics=False`` prices the model before that correction (:attr:`Estimate.server_nics`). Link bandwidths
    are per direction, times the measured ``link_efficiency``.
    """
    n = inputs.positive_int(n, "n (GPUs)")
    inputs.reals(message_bytes, "message_bytes", low=0.0)
    m = np.asarray(message_bytes, dtype=float)
    if n == 1:
        return np.zeros_like(m)
    link = gpu.link_bandwidth * gpu.link_efficiency
    share = 2 * (n - 1) / n
    nodes = -(-n // gpu.gpus_per_node)
    times = {
        "one-shot": gpu.allreduce_latency_s + (n - 1) * m / link,
        "two-shot": 2 * gpu.allreduce_latency_s + share * m / link,
        "ring": gpu.collective_latency_s + 2 * (n - 1) * gpu.link_latency_s + share * m / link,
        "ring across nodes": (gpu.collective_latency_s + (2 * (n - 1) - 2 * nodes) * gpu.link_latency_s
                              + 2 * nodes * gpu.node_link_latency_s
                              + share * m / network_bus_bandwidth(gpu, n, server_nics)),
    }
    algo = np.vectorize(lambda x: allreduce_algorithm(gpu, n, float(x)), otypes=[object])(m)
    out = np.zeros_like(m)
    for name, t in times.items():
        out = np.where(algo == name, t, out)
    return out


def network_efficiency(gpu: Hardware, server_nics: bool = True) -> float:
    """Share of a NIC's bandwidth reached: the measured ``node_link_efficiency``; with ``server_nics=False``,
    NVLink's ``link_efficiency``, as the model priced the network before the correction
    (:attr:`Estimate.server_nics`)."""
    return gpu.node_link_efficiency if server_nics else gpu.link_efficiency


def network_bus_bandwidth(gpu: Hardware, n: int, server_nics: bool = True) -> float:
    """Bus bandwidth of NCCL's ring over ``n`` GPUs that span servers: each server's NICs (one per GPU taking part;
    one per ring with ``server_nics=False``) at :func:`network_efficiency`, or NVLink at ``link_efficiency`` where
    that is the slower. (NCCL may run a tree instead on few servers, which can do better; the ring is what is
    priced.)"""
    n = inputs.positive_int(n, "n (GPUs)")
    nics = min(n, gpu.gpus_per_node) if server_nics else 1
    return min(gpu.link_bandwidth * gpu.link_efficiency,
               nics * gpu.node_link_bandwidth * network_efficiency(gpu, server_nics))


def allreduce_s(dep: Deployment, tokens: ArrayLike) -> np.ndarray:
    """Tensor-parallel all-reduce time of one step carrying ``tokens`` tokens (estimate mode; 0 otherwise): two
    all-reduces per layer (after attention, after the MLP; Megatron-LM) of tokens x hidden x 2 bytes (16-bit
    activations), each priced by :func:`allreduce_one_s`."""
    _non_negative(tokens, "tokens")
    n = dep.num_gpus
    x = np.asarray(tokens, dtype=float)
    if dep.estimate is None or not dep.estimate.allreduce or n == 1:
        return np.zeros_like(x)
    message = x * dep.model.hidden_size * 2.0
    scale = dep.estimate.allreduce_scale
    scale = fitted_allreduce_scale(dep.gpu) if scale is None else scale
    return 2 * dep.model.num_layers * allreduce_one_s(dep.gpu, n, message, dep.estimate.server_nics) / scale


def attention_flops(model: ModelConfig, new_tokens: ArrayLike, cached: ArrayLike = 0) -> np.ndarray:
    """Causal attention FLOPs of ``new_tokens`` tokens appended after ``cached`` ones: each new token scores
    every earlier token and itself, QK^T and PV at 2 FLOPs per multiply-add, over all query heads and layers:
    4 x layers x q_heads x head_dim x (new x cached + new (new + 1) / 2). Quadratic in a prompt."""
    _non_negative(new_tokens, "new_tokens")
    _non_negative(cached, "cached")
    c = np.asarray(new_tokens, dtype=float)
    s = np.asarray(cached, dtype=float)
    pairs = c * s + c * (c + 1) / 2
    return 4.0 * model.num_layers * model.num_heads * model.head_dim * pairs


def kv_traffic_bytes(dep: Deployment, batch: ArrayLike, context: ArrayLike) -> np.ndarray:
    """KV-cache bytes one decode step reads: batch x context x KV bytes per token."""
    _positive(batch, "batch")
    _non_negative(context, "context")
    return np.asarray(batch, dtype=float) * kv_bytes_per_sequence(dep, context)


def host_s(dep: Deployment) -> float:
    """The host's time to launch one forward pass: the layers x the engine's host time per layer
    (:data:`ENGINES`), in estimate mode; 0 in the floor and the simple estimate."""
    if dep.estimate is None or is_floor(dep):
        return 0.0
    return dep.model.num_layers * ENGINES[dep.estimate.engine].host_s_per_layer


def step_overhead_s(dep: Deployment) -> float:
    """The engine's fixed time per step that the GPU waits for (:attr:`Engine.step_s`), in estimate mode; 0 in the
    floor and the simple estimate."""
    if dep.estimate is None or is_floor(dep):
        return 0.0
    return ENGINES[dep.estimate.engine].step_s


def decode_step(dep: Deployment, batch: ArrayLike = 1, context: ArrayLike = 0,
                tokens_per_seq: ArrayLike = 1) -> StepTime:
    """Time of one decode step for ``batch`` sequences of ``context`` cached tokens each.

    The course's one step formula (chapter 2): KV read / bandwidth + max(weights read / bandwidth, 2 x active
    params x batch x tokens_per_seq / FLOP/s). Attention is its own kernel, memory-bound at every batch, so its
    KV reads add to the weight matmuls instead of hiding under their arithmetic. ``tokens_per_seq`` > 1 scores
    several tokens per sequence in one pass (speculative verification): the same bytes, that many times the
    arithmetic. In estimate mode the bandwidth and FLOP/s are the achieved ones and the all-reduces add too.
    The floor alone (and an :class:`Estimate` with ``additive_attention`` off) lets everything overlap,
    max((weights + KV) / bandwidth, FLOPs / FLOP/s): at peak, no kernel schedule beats that.
    """
    _positive(tokens_per_seq, "tokens_per_seq")
    b = _positive(batch, "batch")
    s = _non_negative(context, "context")
    t = np.asarray(tokens_per_seq, dtype=float)
    bw = achieved_bandwidth(dep)
    weights = weight_bytes_read(dep, b) / bw
    kv = kv_traffic_bytes(dep, b, s) / bw
    comp = 2.0 * dep.model.active_params * b * t / achieved_flops(dep, "decode")
    est = dep.estimate
    if est is not None and not est.additive_attention:
        step = StepTime(np.asarray(weights + kv), np.asarray(comp))
    else:
        step = StepTime(np.asarray(weights), np.asarray(comp), np.asarray(kv))
    return replace(step, extra_s=step.extra_s + allreduce_s(dep, b * t), host_s=host_s(dep),
                   fixed_s=step_overhead_s(dep))


def decode_floor_s(dep: Deployment) -> float:
    """The batch-1 decode floor with an empty cache, under chapter 1's premise that a step reads every weight
    (the premise the exercises state too): the weight bytes at the datasheet's bandwidth, whatever mode ``dep``
    is in (at batch 1 the arithmetic is far shorter). :func:`floor_deployment` drops that premise and reads only
    the embedding rows a token looks up, so its batch-1 step is lower by the input-embedding table's share of
    the bytes (none for a table tied to the output head)."""
    return float(decode_step(replace(dep, mfu=1.0, estimate=None), 1, 0).time_s)


def tpot_s(dep: Deployment, batch: ArrayLike, context: ArrayLike) -> np.ndarray:
    """Time per output token: each running sequence gains one token per decode step."""
    return decode_step(dep, batch, context).time_s


def counts_prefill_attention(dep: Deployment) -> bool:
    """Whether ``dep``'s mode charges prefill's causal attention FLOPs: the floor and the simple estimate always
    (left out, a long prompt's simple estimate fell below its floor: issue 52), an :class:`Estimate` unless its
    ``prefill_attention`` term is switched off."""
    return dep.estimate is None or dep.estimate.prefill_attention


def prefill_step(dep: Deployment, prompt_tokens: ArrayLike, batch: ArrayLike = 1, cached: ArrayLike = 0) -> StepTime:
    """Prefill of ``batch`` prompts of ``prompt_tokens`` new tokens each in one pass, each after ``cached`` tokens
    already in the KV cache (a prefix-cache hit): the weights are read once and used for every prompt token, so
    it is compute-bound beyond a few hundred tokens. The arithmetic counts the linear layers (2 x active params
    per token) and causal attention (:func:`attention_flops`: each new token scores the cached ones and the new
    ones before it, quadratic in the prompt) unless an estimate switches that term off; the bytes count the
    weights, the new tokens' KV writes and one read of the cached tokens' KV."""
    p = _positive(prompt_tokens, "prompt_tokens")
    b = _positive(batch, "batch")
    s = _non_negative(cached, "cached (tokens already in the KV cache)")
    tokens = p * b
    kv = (tokens + b * s) * dep.kv_bytes_per_token
    mem = (weight_bytes_read(dep, tokens) + kv) / achieved_bandwidth(dep)
    flops = 2.0 * dep.model.active_params * tokens
    if counts_prefill_attention(dep):
        flops = flops + b * attention_flops(dep.model, p, s)
    comp = flops / achieved_flops(dep, "prefill")
    return StepTime(np.asarray(mem), np.asarray(comp), allreduce_s(dep, tokens), host_s(dep), step_overhead_s(dep))


def mixed_step(dep: Deployment, batch: ArrayLike, context: ArrayLike, chunk: ArrayLike,
               chunk_offset: ArrayLike = 0) -> StepTime:
    """One step that decodes ``batch`` sequences of ``context`` tokens and prefills a ``chunk`` of prompt tokens
    beside them (chunked prefill, as in Sarathi-Serve). The weights are read once for both jobs; the chunk adds
    its arithmetic (linear layers, and attention over ``chunk_offset`` earlier prompt tokens where the mode
    counts it), its KV writes and, in estimate mode, its tokens to the all-reduces."""
    c = _non_negative(chunk, "chunk")
    dec = decode_step(dep, batch, context)
    flops = 2.0 * dep.model.active_params * c
    if counts_prefill_attention(dep):
        flops = flops + attention_flops(dep.model, c, chunk_offset)
    b = np.asarray(batch, dtype=float)
    return StepTime(np.asarray(dec.memory_s + c * dep.kv_bytes_per_token / achieved_bandwidth(dep)),
                    np.asarray(dec.compute_s + flops / achieved_flops(dep, "prefill")),
                    dec.extra_s + allreduce_s(dep, b + c) - allreduce_s(dep, b), dec.host_s, dec.fixed_s)


def mixed_tpot_s(dep: Deployment, concurrency: ArrayLike, prompt: ArrayLike, output: ArrayLike,
                 prefix_hit: ArrayLike = 0.0) -> np.ndarray:
    """Inter-token latency of ``concurrency`` requests of ``prompt`` + ``output`` tokens in steady state, at the
    mean context (prompt + output / 2).

    Floor, simple estimate, or estimate with ``mixed_step`` off: a pure decode step. Estimate: each step also
    carries a chunk
    (:func:`mixed_step`) of the other ``concurrency - 1`` requests' prefills, ``prompt x (1 - prefix_hit) /
    output`` computed prompt tokens per output token each (the cached prefix is not prefilled), at most the
    step's token budget less the decode tokens; the chunk's tokens sit on average half the computed part in,
    after the cached prefix.
    """
    c = _positive(concurrency, "concurrency")
    p = _positive(prompt, "prompt")
    o = _positive(output, "output")
    hit = _fraction(prefix_hit, "prefix_hit")
    est = dep.estimate
    if est is None or not est.mixed_step:
        return decode_step(dep, c, p + o / 2).time_s
    computed = p * (1 - hit)
    chunk = np.clip((c - 1) * computed / o, 0, np.maximum(est.step_token_budget - c, 0))
    return mixed_step(dep, c, p + o / 2, chunk, p * hit + computed / 2).time_s


def ttft_s(dep: Deployment, prompt_tokens: ArrayLike, prefix_hit: ArrayLike = 0.0) -> np.ndarray:
    """Time to first token with no queueing: the prefill of the part of the prompt not found in the prefix
    cache (at least one token is always computed, so logits exist), its attention over the cached part too."""
    p = _positive(prompt_tokens, "prompt_tokens")
    computed = np.maximum(1.0, np.round(p * (1 - _fraction(prefix_hit, "prefix_hit"))))
    return prefill_step(dep, computed, cached=p - computed).time_s


# ------------------------------------------------------------------------------------ memory
def kv_budget_bytes(dep: Deployment) -> float:
    """Memory left for the KV cache: all GPU memory minus weights minus the activation reserve.

    Raises :class:`InfeasibleDeployment` when the weights and reserve do not fit.
    """
    budget = dep.memory_bytes - dep.weight_total_bytes - dep.reserve_bytes
    if budget <= 0:
        where = (f"the weights alone ({dep.weight_total_bytes / GiB:.1f} GiB) exceed the GPUs' memory "
                 f"({dep.memory_bytes / GiB:.1f} GiB); with the reserve ({dep.reserve_bytes / GiB:.1f} GiB, "
                 f"{_reserve_rule(dep)}) they are short by {-budget / GiB:.1f} GiB"
                 if dep.weight_total_bytes >= dep.memory_bytes else
                 f"no memory is left for the KV cache: weights {dep.weight_total_bytes / GiB:.1f} GiB + reserve "
                 f"{dep.reserve_bytes / GiB:.1f} GiB ({_reserve_rule(dep)}) exceed memory "
                 f"{dep.memory_bytes / GiB:.1f} GiB by {-budget / GiB:.1f} GiB")
        raise InfeasibleDeployment(
            f"{dep.model.name} does not fit on {dep.num_gpus} x {dep.gpu.name}: {where}. Add GPUs, quantize the "
            f"weights (weight_bytes=1 or 0.5) or pick a smaller model.")
    return budget


def _reserve_rule(dep: Deployment) -> str:
    if dep.reserve_GiB is not None:
        return "reserve_GiB as given"
    if dep.memory_policy == "fixed":
        return f"{RESERVE_PER_GPU_GiB:g} GiB per GPU"
    share = f"{1 - dep.memory_utilization:.0%}"
    return (f"{share} of the cards, memory_utilization {dep.memory_utilization:g}" if dep.memory_policy == "card"
            else f"{share} of the memory the weights leave, memory_utilization {dep.memory_utilization:g}")


def check_batch_fits(dep: Deployment, batch: int, context: ArrayLike) -> None:
    """Raise :class:`InfeasibleDeployment` saying which resource ran out if ``batch`` sequences of ``context``
    tokens do not all fit: the weights and reserve (:func:`kv_budget_bytes`) or the KV-cache budget."""
    batch = inputs.positive_int(batch, "batch (sequences)")
    budget = kv_budget_bytes(dep)
    per_seq = np.asarray(kv_bytes_per_sequence(dep, context), dtype=float).reshape(-1)
    if per_seq.size not in (1, batch):
        raise inputs.InputError(f"context must be one number or one per sequence ({batch:,}), got {per_seq.size:,}")
    need = float(per_seq.sum()) if per_seq.size == batch else float(per_seq[0]) * batch  # no array of batch
    if need > budget:
        raise InfeasibleDeployment(
            f"KV-cache memory ran out: {int(batch)} sequences of {context} tokens need {need / GiB:.1f} GiB of KV "
            f"cache; {dep.num_gpus} x {dep.gpu.name} leave {budget / GiB:.1f} GiB after the weights and the reserve "
            f"({_reserve_rule(dep)}). Lower the batch or context, quantize the cache, or add GPUs.")


def kv_bytes_per_sequence(dep: Deployment, context: ArrayLike) -> np.ndarray:
    """KV bytes one sequence of ``context`` tokens holds over all GPUs: context x bytes per token, except that
    layers with a sliding window (Mistral-7B v0.1, Gemma-2's alternate layers) stop growing at the window; heads
    replicated by tensor parallelism (:func:`kv_replication`) count once per copy."""
    _non_negative(context, "context")
    one = dep.model.kv_bytes_per_sequence(np.asarray(context, dtype=float), dep.kv_bytes)
    return np.asarray(one) * kv_replication(dep.model, dep.num_gpus)


def max_concurrency(dep: Deployment, context: ArrayLike) -> np.ndarray:
    """Sequences of ``context`` tokens whose KV cache fits at once (perfect packing, the same in every mode); 0 if
    not even one fits."""
    s = _positive(context, "context")
    fit = np.floor(kv_budget_bytes(dep) / kv_bytes_per_sequence(dep, s))
    if np.any(fit > inputs.MAX_COUNT):  # checked before the int64 cast, which would wrap to a negative count
        raise inputs.InputError(f"{float(np.max(fit)):.3g} sequences would fit on {dep.num_gpus:,} GPUs, past 2**53 "
                                f"(beyond that a count is not exact); accepted: at most {inputs.MAX_GPUS} GPUs")
    return fit.astype(np.int64)


# ------------------------------------------------------------------------------------ throughput and $
def decode_throughput(dep: Deployment, batch: ArrayLike, context: ArrayLike) -> np.ndarray:
    """Output tokens per second across the whole deployment during steady decode."""
    return np.asarray(batch, dtype=float) / tpot_s(dep, batch, context)


@dataclass(frozen=True)
class CostTerms:
    """Cost per output token in steady decode as a product: price x seconds per step / tokens per step.

    ``price_per_s``: dollars per second for the whole deployment (GPUs x $/GPU-hour / 3600).
    ``step_s``: seconds one decode step takes (:func:`decode_step`).
    ``tokens_per_step``: output tokens one step yields (batch x tokens per sequence per step).
    """

    price_per_s: float
    step_s: float
    tokens_per_step: float

    @property
    def dollars_per_token(self) -> float:
        return self.price_per_s * self.step_s / self.tokens_per_step

    @property
    def dollars_per_million(self) -> float:
        return 1e6 * self.dollars_per_token


def price_per_s(dep: Deployment, price_per_gpu_hour: float = DEFAULT_PRICE_PER_GPU_HOUR) -> float:
    """Dollars per second the whole deployment costs."""
    inputs.price(price_per_gpu_hour)
    return price_per_gpu_hour * dep.num_gpus / 3600.0


def cost_terms(dep: Deployment, batch: float, context: float, tokens_per_seq: float = 1.0,
               price_per_gpu_hour: float = DEFAULT_PRICE_PER_GPU_HOUR) -> CostTerms:
    """The three terms for ``batch`` sequences of ``context`` tokens (``tokens_per_seq`` > 1: speculation)."""
    _positive(batch, "batch")
    _non_negative(context, "context")
    _positive(tokens_per_seq, "tokens_per_seq")
    inputs.price(price_per_gpu_hour)
    step = float(decode_step(dep, batch, context).time_s)
    return CostTerms(price_per_s(dep, price_per_gpu_hour), step, float(batch) * tokens_per_seq)


def cost_per_million_tokens(dep: Deployment, batch: ArrayLike, context: ArrayLike,
                            price_per_gpu_hour: float = DEFAULT_PRICE_PER_GPU_HOUR) -> np.ndarray:
    """USD per million output tokens in steady decode (:class:`CostTerms`, vectorised over batch and context)."""
    inputs.price(price_per_gpu_hour)
    terms = CostTerms(price_per_s(dep, price_per_gpu_hour), tpot_s(dep, batch, context),
                      np.asarray(batch, dtype=float))
    return terms.dollars_per_million


def request_gpu_seconds(dep: Deployment, prompt_tokens: ArrayLike, output_tokens: ArrayLike,
                        batch: ArrayLike = 1, prefix_hit: ArrayLike = 0.0) -> np.ndarray:
    """Deployment-seconds one request costs when ``batch`` requests share each step: the prefill of its uncached
    part (its attention over the cached part included) plus its share of ``output_tokens`` decode steps at the mean
    context (prompt + half the output)."""
    p = _positive(prompt_tokens, "prompt_tokens")
    o = _positive(output_tokens, "output_tokens")
    b = _positive(batch, "batch")
    computed = np.maximum(1.0, np.round(p * (1 - _fraction(prefix_hit, "prefix_hit"))))
    prefill = prefill_step(dep, computed, cached=p - computed).time_s
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
                        draft_cost: float = 0.05, tree_width: int = 1) -> np.ndarray:
    """Speculative decoding's speedup over plain decode at the same batch.

    One round: k draft steps (each ``draft_cost`` x a target decode step) plus one target pass that scores
    k + 1 positions per sequence - about the same bytes, (k + 1) x the arithmetic. The round yields
    ``expected_tokens_per_verification`` tokens per sequence. Once the verification pass turns compute-bound
    the speedup shrinks, and near the ridge it falls below 1. The draft model's own KV cache is not counted.
    With ``tree_width`` above 1 the pass verifies a token tree instead of a chain (:func:`tree_verification`):
    more tokens accepted per round, bought with more positions scored.
    """
    inputs.real(draft_cost, "draft_cost (a draft step's time over a target step's)", low=0.0)
    tokens, scored = tree_verification(alpha, k, tree_width)
    plain = decode_step(dep, batch, context).time_s
    verify = decode_step(dep, batch, context, tokens_per_seq=scored).time_s
    round_s = verify + np.asarray(k, dtype=float) * draft_cost * plain
    return tokens * plain / round_s


def tree_verification(alpha: ArrayLike, depth: ArrayLike, width: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(expected tokens per round, positions the target scores per sequence) for a full token tree of ``width``
    candidates at every node and ``depth`` levels of drafts, verified in one pass (EAGLE-2's dynamic trees
    are pruned versions of it). A level is accepted when any of its ``width`` candidates matches, taken as
    independent draws at ``alpha`` each: 1 - (1 - alpha)^width, an optimistic bound (a drafter's top candidates
    are correlated). Width 1 is the chain: k + 1 positions scored."""
    w = inputs.positive_int(width, "tree_width (candidates per node)", maximum=64)
    a = np.asarray(alpha, dtype=float)
    if np.any(~((a >= 0) & (a <= 1))):  # written so that NaN fails too
        raise ValueError(f"alpha is an acceptance probability in [0, 1], got {alpha!r}")
    kk = np.asarray(depth, dtype=float)
    if np.any(~((kk >= 0) & (kk <= 64))) or np.any(kk != np.round(kk)):
        raise ValueError(f"depth (drafted tokens per branch) must be a whole number from 0 to 64, got {depth!r}")
    level = 1 - (1 - a) ** w
    scored = kk + 1 if w == 1 else (float(w) ** (kk + 1) - 1) / (w - 1)
    return expected_tokens_per_verification(level, depth), np.asarray(scored, dtype=float)


def one_layer_draft_cost(model: str | ModelConfig) -> float:
    """A one-layer draft head's decode step over the target's, both memory-bound (time in proportion to the weights
    read): one of the target's decoder layers plus its output head, against the whole body plus the head. EAGLE's
    draft is a decoder layer that reuses the target's output head; DeepSeek-V3's multi-token-prediction module is
    one more block with a shared head."""
    m = get_model(model)
    head = m.vocab_size * m.hidden_size
    body = m.active_params - m.table_params
    return (body / m.num_layers + head) / (body + head)


def speculation_breakeven_batch(dep: Deployment, context: float, alpha: float, k: int, draft_cost: float = 0.05,
                                max_batch: int | None = None) -> int | None:
    """The smallest batch at which speculation (``alpha``, ``k``) is slower than plain decode for sequences of
    ``context`` tokens, searched up to ``max_batch`` (default: the most such sequences that fit,
    :func:`max_concurrency`); None when it still pays at every batch up to there.

    The break-even moves out as the context grows: attention's KV reads, memory-bound at every batch, cost the
    verification pass exactly what they cost plain decode, while only the weight matmuls do (k + 1) x the
    arithmetic. The longer the sequences, the larger the share of the step both pay alike; past
    :func:`speculation_any_batch_context` speculation pays at every batch.
    """
    s = inputs.real(context, "context (tokens per sequence)", low=0.0, low_open=True)
    kk = inputs.non_negative_int(k, "k (drafted tokens per round)")
    limit = int(max_concurrency(dep, s)) if max_batch is None else inputs.positive_int(max_batch, "max_batch")
    if limit < 1:
        return None
    b = np.arange(1, limit + 1)
    slower = speculative_speedup(dep, b, s, alpha, kk, draft_cost) < 1
    return int(b[np.argmax(slower)]) if slower.any() else None


def speculation_any_batch_context(dep: Deployment, alpha: float, k: int, draft_cost: float = 0.05) -> float | None:
    """The context (tokens per sequence) past which speculation pays at every batch, priced as the simple
    estimate prices decode (``dep``'s MFU, the datasheet's bandwidth; no sliding window); None when no context is
    long enough (a round's draft steps cost more than its extra tokens: tokens per round <= 1 + k x draft_cost).

    At a large batch both passes are compute-bound in the weight matmuls and the weight reads vanish per
    sequence, so a sequence costs plain decode K + C (its KV reads, K = S x KV bytes per token / bandwidth, plus
    C = 2 x active params / FLOP/s) and a round K + (k + 1) C + k x draft_cost x (K + C), for tau tokens
    (:func:`expected_tokens_per_verification`). The speedup there, tau (K + C) / that, is the lowest it gets
    (it falls with the batch); it is 1 at K / C = (k + 1 + k d - tau) / (tau - 1 - k d)."""
    tau = float(expected_tokens_per_verification(alpha, k))
    kd = inputs.non_negative_int(k, "k (drafted tokens per round)") * inputs.real(
        draft_cost, "draft_cost (a draft step's time over a target step's)", low=0.0)
    if tau <= 1 + kd:
        return None
    simple = replace(dep, estimate=None)
    c = 2.0 * dep.model.active_params / achieved_flops(simple, "decode")
    kv_s = c * (k + 1 + kd - tau) / (tau - 1 - kd)
    return max(0.0, kv_s * achieved_bandwidth(simple) / dep.kv_bytes_per_token)


# ------------------------------------------------------------------------------------ helpers
def _positive(x: ArrayLike, name: str) -> np.ndarray:
    """A count of tokens or sequences, at least 1 (a batch of 1e-320 sequences would price as infinity)."""
    return inputs.counts(x, name, minimum=1.0)


def _non_negative(x: ArrayLike, name: str) -> np.ndarray:
    return inputs.counts(x, name, minimum=0.0)


def _fraction(x: ArrayLike, name: str) -> np.ndarray:
    return inputs.reals(x, name, low=0.0, high=1.0, accepted="a fraction in [0, 1] (or an array of them)")


# Every public function above refuses a wrong record (a string where a Deployment goes) in one sentence.
inputs.check_object_arguments(globals())
