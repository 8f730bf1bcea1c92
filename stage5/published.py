"""Figures quoted from papers and from the course's source text, each with where it was published.

These are the only numbers in the book that ``stage5`` does not compute: other people's measurements (or the
source text's rules of thumb), quoted so the cost model can be compared with them. Each is named once here;
:mod:`stage5.figures` exposes them as named figures and the chapters glue them from there, so a quote and
the prose around it cannot drift apart. Ranges are stored as ``(low, high)`` tuples.
"""

from __future__ import annotations

# Kwon et al., "Efficient Memory Management for Large Language Model Serving with PagedAttention" (SOSP 2023,
# cite key kwon2023pagedattention), introduction and figure 2: in existing systems (Orca, FasterTransformer)
# only this share of KV-cache memory holds actual token states, in percent.
PAGED_ATTENTION_KV_USED_PCT = (20.4, 38.2)
# Same paper, abstract and evaluation (section 6): vLLM's throughput over FasterTransformer and Orca at the
# same latency.
PAGED_ATTENTION_THROUGHPUT_GAIN = (2.0, 4.0)

# Leviathan, Kalman and Matias, "Fast Inference from Transformers via Speculative Decoding" (ICML 2023, cite
# key leviathan2023speculative), abstract and the T5-XXL experiments: speedup over the standard
# implementation, with identical outputs.
SPECULATIVE_SPEEDUP_T5XXL = (2.0, 3.0)

# Chen et al., "Accelerating Large Language Model Decoding with Speculative Sampling" (arXiv:2302.01318, cite key
# chen2023speculative), abstract: speculative sampling on Chinchilla 70B in a distributed setup.
SPECULATIVE_SAMPLING_SPEEDUP_CHINCHILLA = (2.0, 2.5)
# Sadhukhan et al., "MagicDec" (arXiv:2408.11049v3, cite key sadhukhan2024magicdec), abstract: speculative decoding
# still speeds up long-context serving at these batch sizes (8 x A100), up to 1.84x for Llama 3.1 8B. (Later
# versions report up to 2.51x for Llama 3.1 8B, on various hardware and tasks; the course quotes version 3.)
MAGICDEC_BATCH = (32, 256)
MAGICDEC_SPEEDUP_LLAMA31_8B = 1.84
# Self-speculative decoding, the target drafting for itself. Zhang et al., "Draft & Verify" (ACL 2024, cite key
# zhang2024draftverify, doi 10.18653/v1/2024.acl-long.607), abstract: skipping intermediate layers to draft, no
# training, up to 1.99x on LLaMA-2 and its variants (arXiv:2309.08168v1, before the ACL version, said 1.73x).
# Elhoushi et al., "LayerSkip" (ACL 2024, cite key elhoushi2024layerskip), abstract: early exit after training with
# layer dropout and an early-exit loss, up to 2.16x (CNN/DM summarization).
DRAFT_VERIFY_SPEEDUP = 1.99
LAYERSKIP_SPEEDUP = 2.16

# Drafters that come with the model or grow their own trees (chapter 7). DeepSeek-AI, "DeepSeek-V3 Technical Report"
# (arXiv:2412.19437v2, cite key deepseekv3), section 5.4.3: the multi-token-prediction module used as a drafter,
# "the acceptance rate of the second token prediction ranges between 85% and 90%", "delivering 1.8 times TPS".
DEEPSEEK_MTP_ACCEPTANCE_PCT = (85.0, 90.0)
DEEPSEEK_MTP_TPS_GAIN = 1.8
# SafeAILab/EAGLE README (cite keys li2024eagle2, li2025eagle3): speedup over vanilla decoding, Vicuna 13B on
# 2 x RTX 3090 in FP16: EAGLE-2 "4x", EAGLE-3 "5.6".
EAGLE2_SPEEDUP = 4.0
EAGLE3_SPEEDUP = 5.6
# Dao, Haziza, Massa and Sizov, "Flash-Decoding for long-context inference" (2023, cite key dao2023flashdecoding):
# "up to 8x faster generation for very long sequences" (CodeLlama 34B).
FLASH_DECODING_SPEEDUP = 8.0

# Large mixtures of experts as served (chapter 13). DeepSeek-V3 technical report, section 3.4.2 (decoding): the
# minimum deployment unit is "40 nodes with 320 GPUs"; attention "TP4 with SP, combined with DP80"; the MoE part
# "EP320", one expert per GPU; the batch per expert is "usually within 256 tokens", and "the bottleneck is memory
# access rather than computation".
DEEPSEEK_DECODE_GPUS = 320
DEEPSEEK_DECODE_ATTENTION_TP = 4
DEEPSEEK_DECODE_ATTENTION_DP = 80
DEEPSEEK_EXPERT_BATCH = 256

# The NVIDIA Dynamo release whose design notes chapter 14 quotes (docs.nvidia.com/dynamo/archive/0.2.0/architecture/
# disagg_serving.html): the sentence that a short prefill is often better done locally is absent from later releases.
DYNAMO_DISAGG_NOTES_RELEASE = "0.2.0"
# FlashMLA, "A Deep-Dive Into the New Flash MLA Kernel" (2025-04-22, cite key flashmla2025): on an H800 SXM5 (3.35
# TB/s, 990 TFLOPs at peak) clock throttling leaves "~865 TFlops", so the kernel is compute-bound once query heads
# x query tokens >= 128; the kernel reaches "up to 660 TFlops".
FLASHMLA_PRACTICAL_TFLOPS = 865.0
FLASHMLA_REACHED_TFLOPS = 660.0

# Kurtic et al., "Give Me BF16 or Give Me Death?" (2024, cite key kurtic2024bf16), abstract and the
# W8A8-INT results: accuracy loss of carefully tuned INT8 weights and activations, in percent.
INT8_ACCURACY_LOSS_PCT = (1.0, 3.0)

# The course's source text, inference-economics module (the ranking of levers): orders of magnitude, not
# measurements. Batching: from a naive server to a well-tuned current stack.
SOURCE_BATCHING_GAIN = (5.0, 10.0)
# Routing: depends entirely on the traffic mix (the source's example has 80% of requests easy).
SOURCE_ROUTING_GAIN = (3.0, 5.0)

# Li and Liu (DeepSeek), "A Deep-Dive Into the New Flash MLA Kernel" (FlashMLA's docs/20250422-new-kernel-deep-dive.md,
# cite key flashmla2025): absorbed MLA decoding does about 2 h_q s_q FLOPs per byte of cached latent in BF16, so on
# an H800 SXM5 (3.35 TB/s, ~865 TFLOP/s once throttled) the kernel is compute-bound once query heads x query tokens
# per request reaches 128; DeepSeek-V3's decode runs without tensor parallelism, so every GPU has all 128 query
# heads (num_attention_heads in DeepSeek-V2's and V3's config.json) and the kernel is compute-bound.
FLASHMLA_COMPUTE_BOUND_HEADS_X_TOKENS = 128
DEEPSEEK_V3_QUERY_HEADS = 128

# karpathy/nanochat README (cite key karpathy2025nanochat): the GPU count of the node whose rental price is
# the course's default $ per GPU-hour (stage5.cost.DEFAULT_PRICE_PER_GPU_HOUR).
NANOCHAT_NODE_GPUS = 8

# {figure id: (value, unit, description)} for stage5.figures; a range becomes "<id>_lo" and "<id>_hi".
RANGES = {
    "pagedattention_kv_used_pct": (PAGED_ATTENTION_KV_USED_PCT, "%",
                                   "KV memory holding token states in Orca, FasterTransformer (Kwon 2023)"),
    "pagedattention_throughput_gain": (PAGED_ATTENTION_THROUGHPUT_GAIN, "x",
                                       "vLLM throughput over FasterTransformer and Orca (Kwon et al. 2023)"),
    "speculative_speedup_t5xxl": (SPECULATIVE_SPEEDUP_T5XXL, "x",
                                  "speculative decoding speedup on T5-XXL (Leviathan et al. 2023)"),
    "speculative_sampling_speedup_chinchilla": (SPECULATIVE_SAMPLING_SPEEDUP_CHINCHILLA, "x",
                                                "speculative sampling speedup on Chinchilla 70B (Chen et al. 2023)"),
    "magicdec_batch": (MAGICDEC_BATCH, "sequences", "batch sizes at which MagicDec reports long-context speedups"),
    "deepseek_mtp_acceptance_pct": (DEEPSEEK_MTP_ACCEPTANCE_PCT, "%",
                                    "second-token acceptance of DeepSeek-V3's MTP drafter (DeepSeek-AI 2024)"),
    "int8_accuracy_loss_pct": (INT8_ACCURACY_LOSS_PCT, "%",
                               "accuracy loss of well-tuned W8A8-INT (Kurtic et al. 2024)"),
    "source_batching_gain": (SOURCE_BATCHING_GAIN, "x", "the source text's batching lever, naive to tuned"),
    "source_routing_gain": (SOURCE_ROUTING_GAIN, "x", "the source text's routing lever, traffic-dependent"),
}
SINGLE = {
    "nanochat_node_gpus": (NANOCHAT_NODE_GPUS, "GPUs", "GPUs in the node whose price nanochat states"),
    "flashmla_compute_bound_heads_x_tokens": (FLASHMLA_COMPUTE_BOUND_HEADS_X_TOKENS, "heads x tokens",
                                              "query heads x query tokens past which MLA decode is compute-bound "
                                              "on an H800 (DeepSeek, FlashMLA)"),
    "deepseek_v3_query_heads": (DEEPSEEK_V3_QUERY_HEADS, "heads", "query heads of DeepSeek-V2 and V3 (config.json)"),
    "magicdec_speedup_llama31_8b": (MAGICDEC_SPEEDUP_LLAMA31_8B, "x",
                                    "MagicDec's best speedup for Llama 3.1 8B at batch 32-256 (Sadhukhan et al.)"),
    "draft_verify_speedup": (DRAFT_VERIFY_SPEEDUP, "x", "self-speculative decoding by layer skipping (Zhang et al.)"),
    "layerskip_speedup": (LAYERSKIP_SPEEDUP, "x", "self-speculative decoding by early exit, best task (Elhoushi et al.)"),
    "deepseek_mtp_tps_gain": (DEEPSEEK_MTP_TPS_GAIN, "x", "DeepSeek-V3's decode speedup with its MTP drafter"),
    "eagle2_speedup": (EAGLE2_SPEEDUP, "x", "EAGLE-2 over vanilla decoding, Vicuna 13B (EAGLE README)"),
    "eagle3_speedup": (EAGLE3_SPEEDUP, "x", "EAGLE-3 over vanilla decoding, Vicuna 13B (EAGLE README)"),
    "flash_decoding_speedup": (FLASH_DECODING_SPEEDUP, "x", "Flash-Decoding's best generation speedup, long sequences"),
    "deepseek_decode_gpus": (DEEPSEEK_DECODE_GPUS, "GPUs", "DeepSeek-V3's minimum decoding deployment unit"),
    "deepseek_decode_attention_tp": (DEEPSEEK_DECODE_ATTENTION_TP, "GPUs", "its attention's tensor-parallel degree"),
    "deepseek_decode_attention_dp": (DEEPSEEK_DECODE_ATTENTION_DP, "groups", "its attention's data-parallel degree"),
    "deepseek_expert_batch": (DEEPSEEK_EXPERT_BATCH, "tokens", "DeepSeek-V3's usual decode batch per expert, at most"),
    "flashmla_practical_tflops": (FLASHMLA_PRACTICAL_TFLOPS, "TFLOP/s", "H800 peak after clock throttling (FlashMLA)"),
    "flashmla_reached_tflops": (FLASHMLA_REACHED_TFLOPS, "TFLOP/s", "FlashMLA's compute-bound throughput, H800"),
}


# ======================================================================================= measured serving points
# Published measurements of real servers, for `python -m stage5 validate` (stage5.validate). Each figure was read
# in the source named beside it; none is used to set any default of the cost model's estimate mode.
from dataclasses import dataclass, replace  # noqa: E402

from stage5.models import ModelConfig, get_model  # noqa: E402


@dataclass(frozen=True)
class ServingPoint:
    """One published measurement. Times in ms; ``tpot_ms`` is the time per output token (TPOT or inter-token
    latency), ``ttft_ms`` the time to first token where it is checked (None where the source gives none, and
    above concurrency 1, where other requests' prefills and queueing enter it). ``published_ttft_ms`` is the
    row's TTFT as published at any concurrency, kept to show where requests queued. ``batch_ms``: the wall time
    of one static batch of ``concurrency`` requests, prefill and every output step (from a throughput figure:
    batch x output / tokens per second). ``source_key`` names the entry of :data:`SOURCES`."""

    id: str
    model: str | ModelConfig
    gpu: str
    num_gpus: int
    weights: str  # weight format, a key of stage5.quantization.WEIGHT_FORMATS
    kv: str  # KV-cache format, a key of stage5.quantization.KV_FORMATS
    concurrency: int
    prompt: int
    output: int
    tpot_ms: float | None
    ttft_ms: float | None
    source: str
    published_ttft_ms: float | None = None
    batch_ms: float | None = None
    source_key: str = ""
    kv_pool: tuple[int, int] | None = None  # the engine's KV pool where the setup fixes it: (blocks, tokens per block)
    closed_loop: bool = False  # batch_ms from clients that each send the next request when the last ends
    cached: int = 0  # prompt tokens already in the engine's KV cache (a multi-round chat's history), not prefilled
    variant: str = ""  # a second engine or release within the source: its rows are never paired with the others'
    head: str = ""  # the lookup tables' weight format where the engine quantizes the output head too ("": 16 bits)

    @property
    def static(self) -> bool:
        """A static batch: all requests start together and none waits (no queueing rule applies). A closed loop
        (``closed_loop``) reports a throughput too, but its requests are scheduled by the engine and can wait."""
        return self.batch_ms is not None and not self.closed_loop


@dataclass(frozen=True)
class Source:
    """Where a set of points was published, how it was run, and which side of the split it is on: ``split`` is
    "fit" (the estimate's free constants are fitted on its rows: :mod:`stage5.fitted`) or "held_out" (the fit never
    sees it; every source added after a fit is held out until the next fit). The choice is documented at
    :data:`SPLIT_REASONS`. ``memory_policy`` and ``max_running`` are the engine's, for the queueing rule
    (:func:`stage5.validate.queued`): a request beyond them waits. ``profile`` and ``accumulation`` say how the engine
    runs (:class:`stage5.cost.Estimate` ``engine`` and ``accumulation``): facts about the engine, read from its
    documentation or code, not fitted. ``same_setup_as``: another source measured with the same engine on the same
    machines (one README's two tables): not independent of it, so out of sample the two count as one source
    (:func:`setup_of`): a band counts them once, and leave-one-source-out leaves both out."""

    key: str
    engine: str
    address: str
    version: str
    setup: str
    split: str = "held_out"
    memory_policy: str = "fixed"
    max_running: int | None = None
    profile: str = "unknown"  # the engine profile, a key of stage5.cost.ENGINES
    accumulation: str = "fp32"  # what its GEMMs accumulate in (stage5.cost.Estimate.accumulation)
    added_in: int = 29  # the issue that added the source; those added after the constants were last fixed are fresh
    same_setup_as: str = ""  # a source run on the same engine and machines: out of sample, the two count as one

    def __post_init__(self) -> None:
        if self.split not in SPLIT:
            raise ValueError(f"source {self.key!r}: split {self.split!r} is not known; accepted: {', '.join(SPLIT)}")

    @property
    def in_sample(self) -> bool:
        """Whether the estimate's constants were fitted on this source (``split == "fit"``)."""
        return self.split == "fit"


SPLIT = ("fit", "held_out")
# Why each source sits where it does (issue 47's first fit). Fit: one source per GPU family and engine class the free
# constants need, the ones with the most settings varied: NIM (Hopper, a C++ runtime), gpt-fast (Ampere, CUDA graphs,
# TP 1-8), LMDeploy and FasterTransformer (Ampere, C++ runtimes, batch and length sweeps, past one server), dstack
# (the one MI300X source: without it MI300X keeps the priors), TinyChat's FP16 baseline (the one unfused eager
# engine: it sets the launch cost). Held out: TensorRT-LLM 0.6's own tables, vLLM's CI, TinyChat's fused engine and
# its TensorRT-LLM comparison, and every source added later: the engines and chips priced from what the fit learned
# elsewhere.
SPLIT_REASONS = {
    "nim": "fit: Hopper FP8, a C++ runtime, five length pairs x concurrency",
    "gpt-fast": "fit: Ampere BF16, CUDA graphs from Python, tensor parallelism 1-8 at batch 1",
    "lmdeploy-a100": "fit: Ampere, a C++ runtime, batch and length sweeps, closed-loop clients",
    "ft-530b": "fit: Ampere past one server, a C++ runtime",
    "dstack-mi300x": "fit: the only MI300X source (held out, MI300X would keep the priors)",
    "tinychat-fp16": "fit: the only unfused eager engine (sets the launch cost per kernel)",
    "trtllm-0.6": "held out: TensorRT-LLM's own tables on three chips",
    "vllm-ci": "held out: vLLM on H200, a chip no fit source ran",
    "tinychat": "held out: fused eager engine, priced with the launch cost the unfused one set",
    "tinychat-trtllm": "held out: TensorRT-LLM W4A16 on an RTX 4090",
    "qwen-hf": "held out: added after the first fit (issue 47)",
    "qwen-vllm": "held out: added after the first fit (issue 47)",
    "trtllm-h200-0.5": "held out: added after the first fit (issue 47); TensorRT-LLM static batches on H200",
    "trtllm-h200-0.7a": "held out: added after the first fit (issue 47); TensorRT-LLM static batches on H200",
    "mlc-llm": "held out: added after the first fit (issue 47); a compiled engine with CUDA graphs on a GeForce card",
    "gpt-fast-quant": "not fitted on, added after the first fit (issue 47), but not among the held-out sources: the "
                      "fit source gpt-fast's engine and machine with 8-bit and 4-bit weights, scored only by the fit "
                      "without gpt-fast",
}


def setup_of(key: str) -> str:
    """The independent setup a source belongs to: its ``same_setup_as`` source, or itself."""
    return SOURCES[key].same_setup_as or key


def seen_by_fit(key: str) -> bool:
    """Whether the fit saw this source's setup (:func:`setup_of`): it, or a source measured with its engine on its
    machines, is marked ``fit``. Held-out figures count only sources whose setup it never saw."""
    return any(s.in_sample for k, s in SOURCES.items() if setup_of(k) == setup_of(key))


def _llama2(name: str, hidden: int, layers: int, heads: int, kv_heads: int, ffn: int) -> ModelConfig:
    # Llama 2 is not in the course registry; gpt-fast's model.py (transformer_configs, "7B" and "70B") gives the
    # shapes it measured: vocab 32,000, head_dim = hidden / heads, FFN 11,008 (7B) and 28,672 (70B), untied.
    return ModelConfig(name=name, vocab_size=32000, hidden_size=hidden, num_layers=layers, num_heads=heads,
                       num_kv_heads=kv_heads, head_dim=hidden // heads, intermediate_size=ffn, max_position_embeddings=4096)


LLAMA2_7B = _llama2("llama2-7b", 4096, 32, 32, 32, 11008)
LLAMA2_70B = _llama2("llama2-70b", 8192, 80, 64, 8, 28672)

# gpt-fast README (github.com/pytorch-labs/gpt-fast, section "Benchmarks" > "Tensor Parallelism"): 8 x A100-80GB
# power-limited to 330 W, batch 1, a 5-token prompt; tokens/s per user, so TPOT = 1000 / tokens/s. Output length
# is not stated; 200 tokens is assumed (at batch 1 with 5 prompt tokens the cached context barely moves the time).
_GPT_FAST = "gpt-fast README, table 'Tensor Parallelism' (A100-80GB, 330 W, batch 1)"
_GPT_FAST_TOKS = {(LLAMA2_7B, 1): 104.9, (LLAMA2_7B, 2): 168.84, (LLAMA2_7B, 4): 254.02, (LLAMA2_7B, 8): 328.43,
                  (LLAMA2_70B, 2): 21.32, (LLAMA2_70B, 4): 38.01, (LLAMA2_70B, 8): 62.50}

# The same README (at 0f925b5), its other two A100 tables at batch 1, weight-only formats (added after the first fit,
# issue 47: held out): "Benchmarks" (one A100) and "Tensor Parallelism + Quantization" (Llama-2-70B on 8), rows
# "8-bit" and "4-bit (G=32)". quantize.py: 8-bit is WeightOnlyInt8Linear (int8 weights, a BF16 scale per output
# channel: W8A16), 4-bit is WeightOnlyInt4Linear (4-bit weights, a BF16 scale and zero per 32: "int4-g32-zp"); both
# replace every nn.Linear, the output head included, and leave the embedding (an nn.Embedding) at 16 bits. Priced
# with ServingPoint.head, which sets the width of every lookup table (Deployment.head_bytes), the embedding too: that
# changes only the memory the weights take, since a step reads just the embedding rows it looks up. The "Base"
# rows repeat the Tensor Parallelism table's (the fit source's) and are not added again. {(model, GPUs, format):
# tokens/s}.
_GPT_FAST_QUANT_TOKS = {(LLAMA2_7B, 1, "w8a16"): 155.58, (LLAMA2_7B, 1, "int4-g32-zp"): 196.80,
                        (LLAMA2_70B, 1, "w8a16"): 19.13, (LLAMA2_70B, 1, "int4-g32-zp"): 25.25,
                        (LLAMA2_70B, 8, "w8a16"): 80.44, (LLAMA2_70B, 8, "int4-g32-zp"): 90.77}
_GPT_FAST_QUANT_LABEL = {"w8a16": "8-bit", "int4-g32-zp": "4-bit (G=32)"}

# NVIDIA NIM LLM benchmarking guide, "Performance" page (docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance),
# NIM 1.8.0, measured with AIPerf: section "Llama-3.3-70b-instruct Results" (2 x H100 80G, fp8 TP2) and section
# "Llama-3.1-8b-instruct Results" (1 x H100 80G, fp8 TP1).
_NIM = "NVIDIA NIM benchmarking, NIM 1.8.0"
# Llama 3.3 70B and Llama 3.1 8B have the layer sizes of the registry's Llama 3 70B and 8B; their config.json
# files (meta-llama/Llama-3.3-70B-Instruct, meta-llama/Llama-3.1-8B-Instruct) add RoPE scaling and raise
# max_position_embeddings to 131,072, which the 20,000-token prompts below need.
LLAMA33_70B = replace(get_model("llama3-70b"), name="llama3.3-70b", max_position_embeddings=131072)
LLAMA31_8B = replace(get_model("llama3-8b"), name="llama3.1-8b", max_position_embeddings=131072)
# Every row of both sections' tables, transcribed whole: {(prompt, output): ((concurrency, TTFT ms, ITL ms), ...)}.
# No row is chosen here; stage5.validate sets aside the rows whose requests cannot all be in the KV cache at once.
NIM_70B_TABLES = {
    (5000, 500): ((1, 406.77, 18.58), (5, 546.7, 21.83), (25, 688.69, 38.75), (50, 834.51, 59.73),
                  (100, 7996.25, 92.91), (150, 34794.22, 92.86), (200, 61680.22, 93.06), (250, 88605.32, 93.2)),
    (500, 2000): ((1, 47.77, 18.91), (5, 126.53, 19.04), (25, 147.63, 21.69), (50, 181.64, 23.97),
                  (100, 229.77, 29.98), (150, 296.74, 37.85), (200, 4867.89, 40.72)),
    (200, 200): ((1, 31.22, 18.8), (5, 88.7, 18.83), (25, 138.98, 20.61), (50, 156.28, 23.33),
                 (100, 176.8, 29.87), (150, 195.51, 37.75), (200, 253.36, 42.95), (250, 264.22, 48.16)),
    (1000, 1000): ((1, 82.46, 18.67), (5, 145.62, 19.07), (25, 250.49, 22.45), (50, 278.62, 25.87),
                   (100, 334.23, 34.21), (150, 428.54, 44.44), (200, 558.23, 50.66), (250, 3499.83, 56.3)),
    (20000, 2000): ((1, 1833.01, 19.58), (5, 2910.33, 25.24), (25, 18781.26, 48.26), (50, 123969.71, 49.22),
                    (100, 333564.85, 49.81), (150, 543226.4, 50.01), (200, 753417.03, 50.06),
                    (250, 963222.96, 50.13)),
}
NIM_8B_TABLES = {
    (200, 200): ((1, 10.26, 4.63), (5, 16.81, 4.58), (25, 36.34, 5.19), (50, 67.41, 5.91), (100, 119.97, 7.57),
                 (150, 346.53, 9.81), (200, 465.18, 12.65), (250, 605.6, 16.14)),
    (500, 2000): ((1, 13.84, 4.56), (5, 30.88, 4.81), (25, 97.07, 5.82), (50, 135.26, 7.06), (100, 239.92, 9.51),
                  (150, 376.95, 13.34), (200, 1664.34, 14.96), (250, 6550.46, 16.97)),
    (1000, 1000): ((1, 19.03, 4.53), (5, 55.87, 4.8), (25, 268.42, 5.84), (50, 414.87, 7.26), (100, 615.16, 10.04),
                   (150, 885.53, 14.14), (200, 1258.79, 16.02), (250, 1885.04, 19.68)),
    (5000, 500): ((1, 77.45, 4.62), (5, 279.92, 5.42), (25, 724.14, 9.67), (50, 817.73, 16.47), (100, 915.15, 29.67),
                  (150, 1080.0, 43.35), (200, 4361.35, 50.41), (250, 11717.42, 50.53)),
    (20000, 2000): ((1, 403.2, 5.06), (5, 1141.22, 7.39), (25, 2371.46, 19.35), (50, 11071.41, 30.73),
                    (100, 78187.07, 31.08), (150, 145290.54, 31.31), (200, 211735.71, 31.46),
                    (250, 278580.85, 31.62)),
}
# The page names the weight precision (fp8) but not the KV cache's. It is taken as FP8, because the tables
# themselves rule out BF16: the 70B model serves 200 concurrent 1,000 + 1,000-token requests, and the 8B model
# 150 concurrent 5,000 + 500-token ones, with no jump in TTFT, which a BF16 cache has no room for
# (tests/test_validate.py checks this against stage5.cost.max_concurrency). An inference, not a quote.
NIM_KV = "fp8"
NIM_KV_EVIDENCE = (("llama3.3-70b", 1000, 1000, 200), ("llama3.1-8b", 5000, 500, 150))  # model, prompt, output, concurrency
_NIM_DEPLOYMENTS = ((LLAMA33_70B, 2, NIM_70B_TABLES, "Llama-3.3-70b-instruct, 2 x H100 fp8 TP2"),
                    (LLAMA31_8B, 1, NIM_8B_TABLES, "Llama-3.1-8b-instruct, 1 x H100 fp8 TP1"))

# ------------------------------------------------------------------------------------ held-out sources
# Added for issue 29 after the estimate's terms were fixed; none of their rows set or tuned anything, except
# FasterTransformer's (below): the network term of the all-reduce (:func:`stage5.cost.network_bus_bandwidth`) was
# corrected after its rows showed the estimate too slow at large batches, so that source counts as in sample.

# TensorRT-LLM's performance page at v0.6.1 (github.com/NVIDIA/TensorRT-LLM, docs/source/performance.md at the
# v0.6.1 docs: "Peak Throughput" tables, updated for v0.6.1 on H100 and A100, v0.5 on L40S; "Low Latency" tables
# from v0.5). Static batches run by gptSessionBenchmark: every request of the batch starts together, is prefilled,
# then decoded to the output length; FP8 weights and an FP8 KV cache on H100 and L40S (the page's build flags
# --enable_fp8 --fp8_kv_cache), FP16 on A100 (the page: remove those flags on A100). Every row of every table.
# "LLaMA 7B"/"LLaMA 70B" are Llama 2 (the page's engine-building notes: "Llama2-7b, and Llama2-70b").
GPTJ_6B = ModelConfig(
    # EleutherAI/gpt-j-6b config.json: vocab 50,400, n_embd 4,096, n_layer 28, n_head 16 (head 256), MLP 4 x 4,096
    # with GELU and biases, one LayerNorm per layer (attention and MLP in parallel), rotary, untied output head.
    name="gpt-j-6b", vocab_size=50400, hidden_size=4096, num_layers=28, num_heads=16, num_kv_heads=16, head_dim=256,
    intermediate_size=16384, gated_mlp=False, norm="layernorm", linear_bias=True, norms_per_layer=1,
    max_position_embeddings=2048)
FALCON_180B = ModelConfig(
    # tiiuae/falcon-180B config.json: vocab 65,024, hidden 14,848, 80 layers, 232 query heads of 64, 8 KV heads
    # (new_decoder_architecture), MLP 4 x hidden with GELU, no biases, two LayerNorms per layer, output head tied
    # to the embedding (FalconForCausalLM ties lm_head).
    name="falcon-180b", vocab_size=65024, hidden_size=14848, num_layers=80, num_heads=232, num_kv_heads=8, head_dim=64,
    intermediate_size=59392, gated_mlp=False, norm="layernorm", tie_embeddings=True, max_position_embeddings=2048)
_TRT_MODELS = {"GPT-J 6B": GPTJ_6B, "LLaMA 7B": LLAMA2_7B, "LLaMA 70B": LLAMA2_70B, "Falcon 180B": FALCON_180B}
# {(gpu, weights/kv, per GPU?): ((model, batch, tp, input, output, output tokens/s), ...)}
TRTLLM_THROUGHPUT = {
    ("H100-SXM", "fp8", True): (  # "Throughput (out tok/s/GPU)"
        ("GPT-J 6B", 1024, 1, 128, 128, 26150), ("GPT-J 6B", 120, 1, 128, 2048, 8011),
        ("GPT-J 6B", 64, 1, 2048, 128, 2551), ("GPT-J 6B", 64, 1, 2048, 2048, 3327),
        ("LLaMA 7B", 768, 1, 128, 128, 19694), ("LLaMA 7B", 112, 1, 128, 2048, 6818),
        ("LLaMA 7B", 80, 1, 2048, 128, 2244), ("LLaMA 7B", 48, 1, 2048, 2048, 2740),
        ("LLaMA 70B", 1024, 2, 128, 128, 2657), ("LLaMA 70B", 480, 4, 128, 2048, 1486),
        ("LLaMA 70B", 96, 2, 2048, 128, 306), ("LLaMA 70B", 64, 2, 2048, 2048, 547),
        ("Falcon 180B", 1024, 4, 128, 128, 987), ("Falcon 180B", 1024, 8, 128, 2048, 724),
        ("Falcon 180B", 64, 4, 2048, 128, 112), ("Falcon 180B", 64, 4, 2048, 2048, 264)),
    ("L40S", "fp8", False): (  # "Throughput (out tok/s)", v0.5
        ("GPT-J 6B", 64, 1, 128, 128, 3630), ("GPT-J 6B", 64, 1, 128, 2048, 1859),
        ("GPT-J 6B", 32, 1, 2048, 128, 616), ("GPT-J 6B", 32, 1, 2048, 2048, 757),
        ("LLaMA 7B", 64, 1, 128, 128, 3240), ("LLaMA 7B", 64, 1, 128, 2048, 1622),
        ("LLaMA 7B", 32, 1, 2048, 128, 581), ("LLaMA 7B", 16, 1, 2048, 2048, 531)),
    # FP16 (priced as 16-bit: same bytes and rate as BF16). The v0.6.1 page heads this table "Throughput (out
    # tok/s)", without the H100 table's "/GPU"; a later revision of the same page (commit 77d24b5f, the same
    # numbers, "updated for v0.6.1") heads it "Throughput (out tok/s/GPU)", as it does the L40S table (all TP 1, so
    # unaffected). Read per GPU: the TP 2-8 rows' batch times are the printed ones divided by their TP. (Noticed
    # because those rows sat 3-30x below the estimate; the reading follows the page, not the estimate.)
    ("A100-80GB", "bf16", True): (
        ("GPT-J 6B", 512, 1, 128, 128, 6374), ("GPT-J 6B", 120, 2, 128, 2048, 2192),
        ("GPT-J 6B", 60, 1, 2048, 128, 670), ("GPT-J 6B", 64, 2, 2048, 2048, 903),
        ("LLaMA 7B", 384, 1, 128, 128, 5586), ("LLaMA 7B", 60, 1, 128, 2048, 1928),
        ("LLaMA 7B", 52, 1, 2048, 128, 591), ("LLaMA 7B", 64, 2, 2048, 2048, 782),
        ("LLaMA 70B", 1280, 4, 128, 128, 670), ("LLaMA 70B", 240, 4, 128, 2048, 525),
        ("LLaMA 70B", 120, 4, 2048, 128, 79),
        ("Falcon 180B", 1024, 8, 128, 128, 232), ("Falcon 180B", 128, 8, 128, 2048, 180)),
}
# "Low Latency": batch 1, first-token latency in ms, {(gpu, format): ((model, tp, input, ms), ...)}.
TRTLLM_FIRST_TOKEN = {
    ("H100-SXM", "fp8"): (("GPT-J 6B", 1, 128, 7), ("GPT-J 6B", 1, 2048, 29), ("LLaMA 7B", 1, 128, 7),
                          ("LLaMA 7B", 1, 2048, 36), ("LLaMA 70B", 4, 128, 26), ("LLaMA 70B", 4, 2048, 109),
                          ("Falcon 180B", 8, 128, 27), ("Falcon 180B", 8, 2048, 205)),
    ("L40S", "fp8"): (("GPT-J 6B", 1, 128, 12), ("GPT-J 6B", 1, 2048, 71), ("LLaMA 7B", 1, 128, 14),
                      ("LLaMA 7B", 1, 2048, 73)),
    ("A100-80GB", "bf16"): (("GPT-J 6B", 1, 128, 12), ("GPT-J 6B", 1, 2048, 129), ("LLaMA 7B", 1, 128, 16),
                            ("LLaMA 7B", 1, 2048, 133), ("LLaMA 70B", 4, 128, 47), ("LLaMA 70B", 4, 2048, 377),
                            ("Falcon 180B", 8, 128, 61), ("Falcon 180B", 8, 2048, 509)),
}

# vLLM's performance CI (buildkite.com/vllm/performance-benchmark/builds/9515), "Latency tests": input 32 tokens,
# output 128, batch fixed at 8, mean end-to-end latency of the batch (benchmarks/benchmark_latency.py), BF16,
# on H200. Every row of the table.
VLLM_CI_LATENCY = ((LLAMA31_8B, 1, 833.421), (get_model("llama3-70b"), 4, 2077.53), (get_model("mixtral-8x7b"), 2, 1917.44))

# dstack, "Benchmarking Llama 3.1 405B on 8x AMD MI300X GPUs" (2024-10-09; raw output github.com/dstackai/benchmarks,
# amd/inference/vllm/data/serving_benchmarks_vllm_80.txt): vLLM 0.6.3.dev116 on ROCm 6.1, Llama-3.1-405B-Instruct
# in BF16 on eight MI300X, tensor parallel over the eight, benchmark_serving.py sending every request at once
# (num-prompts = concurrency), 80-token prompts. Every block of the file: (requests, generated tokens, mean TTFT
# ms, mean TPOT ms); the output length is the block's generated tokens / requests.
LLAMA31_405B = replace(get_model("llama3.1-405b"), name="llama3.1-405b")
DSTACK_MI300X = ((1, 85, 314.58, 50.19), (2, 127, 372.80, 51.59), (4, 288, 397.54, 54.18), (8, 484, 646.20, 55.48),
                 (16, 936, 1034.69, 63.38), (32, 1857, 1546.00, 87.10), (64, 3842, 2698.98, 230.16),
                 (128, 7588, 5161.26, 298.29), (256, 15376, 11787.27, 389.49), (512, 30400, 27060.36, 419.23),
                 (1024, 60121, 58452.87, 435.60), (2048, 119667, 128150.28, 461.09),
                 (4096, 238678, 279193.20, 487.04))

# LMDeploy's "Benchmark on A100 (FP16)" page (github.com/InternLM/lmdeploy, docs/en/benchmark/a100_fp16.md as added
# in commit ebe90bc9, 2023-12-06, "Report the inference benchmark of models with different size (#794)"; the page
# names the version tested, v0.1.0a1): section "Static Inference Benchmark", one table per model, TurboMind engine,
# FP16 (priced as 16-bit, as the A100 rows above), A100-80G, CUDA 11.8. Every row of the four tables.
# How a row was measured (benchmark/profile_generation.py at that commit): `batch` client threads each send six
# requests one after another (test_round 6, after a warm-up round), every request the same random prompt of
# prompt_tokens ids and exactly output_tokens outputs (ignore_eos); "throughput(out tok/s)" is all output tokens
# over the wall time, so one round of `batch` requests takes batch x output / throughput (the throughput metric);
# FTL(ave) is the mean first-token latency. The engine schedules the clients' requests continuously, so they can
# wait: its KV pool is fixed by the page's scripts (benchmark/benchmark_{7b,13b,20b,70b}.sh, `cache_max_entry_count`
# 1000, 500, 700 and 4000, a count of blocks when >= 1 in v0.1.0a1's BlockManager, of cache_block_seq_len 128
# tokens, the converter's default). Not used: the per-token latency percentiles (profile_generation.py sets the
# latency of every token after the first of a streamed chunk to 0, so they are not step times), mem(GB), FTL min
# and max, and the page's "Request Throughput Benchmark" (ShareGPT prompts of varying lengths, not one length the
# model can price).
LLAMA2_13B = _llama2("llama2-13b", 5120, 40, 40, 40, 13824)  # gpt-fast model.py "13B": FFN find_multiple(2*4*5120/3, 256)

# MLC LLM's llm-perf-bench README (github.com/mlc-ai/llm-perf-bench at 0274600; added after the first fit, issue 47:
# held out), table "Int4-quantized, Single GPU": "decoding for 256 tokens with a prompt \"What is the meaning of
# life?\"", batch 1, MLC LLM at commit 8e94910 built with --use-cuda-graph, q4f16_1 weights. q4f16_1 (mlc-llm
# mlc_llm/quantization/__init__.py at 0d4779b, the mlc_llm.build era the README runs): 4-bit symmetric weights with an
# FP16 scale per 32 ("int4-g32"), the embedding table and the final layer quantized the same way. The prompt is taken
# as 8 tokens (its 7 Llama 2 tokens and BOS): a chat template around it would add a few dozen, which at batch 1
# moves the KV reads of a 7B model by well under 1%. {model: tokens/s on one RTX 4090}.
MLC_4090_TOKS = {LLAMA2_7B: 204.8, LLAMA2_13B: 113.5}
MLC_PROMPT, MLC_OUTPUT = 8, 256

INTERNLM_20B = ModelConfig(
    # internlm/internlm-chat-20b config.json (InternLMForCausalLM): vocab 103,168, hidden 5,120, 60 layers, 40 heads of
    # 128, 40 KV heads, SwiGLU FFN 13,824, "bias": false, RMSNorm, rotary, untied. The 4,096-token context is the
    # base model's max_position_embeddings, which the page's 2,048 + 2,048 rows need.
    name="internlm-20b", vocab_size=103168, hidden_size=5120, num_layers=60, num_heads=40, num_kv_heads=40,
    head_dim=128, intermediate_size=13824, max_position_embeddings=4096)
# {(model, tp, KV pool blocks): ((batch, prompt, output, out tokens/s, FTL ave s), ...)}
LMDEPLOY_A100 = {
    (LLAMA2_7B, 1, 1000): (
        (1, 1, 128, 100.02, 0.011), (1, 128, 128, 102.21, 0.022), (1, 128, 2048, 98.92, 0.022),
        (1, 2048, 128, 86.1, 0.139), (1, 2048, 2048, 93.78, 0.14),
        (16, 1, 128, 1504.72, 0.021), (16, 128, 128, 1272.47, 0.129), (16, 128, 2048, 1010.62, 0.13),
        (16, 2048, 128, 348.87, 2.897), (16, 2048, 2048, 601.63, 2.678),
        (32, 1, 128, 2136.73, 0.079), (32, 128, 128, 2125.47, 0.214), (32, 128, 2048, 1462.12, 0.2),
        (32, 2048, 128, 450.43, 4.288), (32, 2048, 2048, 733.34, 4.118),
        (64, 1, 128, 4154.81, 0.042), (64, 128, 128, 3024.07, 0.44), (64, 128, 2048, 1852.06, 0.535),
        (64, 2048, 128, 493.46, 6.59), (64, 2048, 2048, 755.65, 39.105)),
    (LLAMA2_13B, 1, 500): (
        (1, 1, 128, 57.49, 0.018), (1, 128, 128, 56.58, 0.04), (1, 128, 2048, 55.29, 0.04),
        (1, 2048, 128, 48.99, 0.242), (1, 2048, 2048, 52.12, 0.243),
        (16, 1, 128, 869.45, 0.036), (16, 128, 128, 757.3, 0.252), (16, 128, 2048, 605.88, 0.253),
        (16, 2048, 128, 257.92, 3.442), (16, 2048, 2048, 366.67, 3.122),
        (32, 1, 128, 1667.5, 0.034), (32, 128, 128, 1301.27, 0.461), (32, 128, 2048, 860.14, 0.833),
        (32, 2048, 128, 291.54, 5.315), (32, 2048, 2048, 389.64, 38.725),
        (64, 1, 128, 3049.16, 0.044), (64, 128, 128, 2033.22, 0.703), (64, 128, 2048, 998.86, 7.805),
        (64, 2048, 128, 286.32, 19.69), (64, 2048, 2048, 387.86, 190.453)),
    (INTERNLM_20B, 2, 700): (
        (1, 1, 128, 61.14, 0.018), (1, 128, 128, 60.03, 0.042), (1, 128, 2048, 58.26, 0.042),
        (1, 2048, 128, 51.93, 0.217), (1, 2048, 2048, 56.36, 0.217),
        (16, 1, 128, 903.01, 0.034), (16, 128, 128, 794.13, 0.227), (16, 128, 2048, 669.87, 0.227),
        (16, 2048, 128, 288.60, 3.09), (16, 2048, 2048, 441.46, 3.172),
        (32, 1, 128, 1673.64, 0.037), (32, 128, 128, 1347.57, 0.351), (32, 128, 2048, 1025.62, 0.391),
        (32, 2048, 128, 352.45, 6.062), (32, 2048, 2048, 514.60, 10.36),
        (64, 1, 128, 2954.34, 0.05), (64, 128, 128, 2122.92, 0.591), (64, 128, 2048, 1276.61, 2.529),
        (64, 2048, 128, 350.82, 12.382), (64, 2048, 2048, 512.37, 111.149)),
    (LLAMA2_70B, 4, 4000): (
        (1, 1, 128, 33.94, 0.031), (1, 128, 128, 33.63, 0.074), (1, 128, 2048, 32.38, 0.074),
        (1, 2048, 128, 28.32, 0.402), (1, 2048, 2048, 31.9, 0.405),
        (16, 1, 128, 468.52, 0.071), (16, 128, 128, 439.77, 0.437), (16, 128, 2048, 482.99, 0.403),
        (16, 2048, 128, 189.34, 5.776), (16, 2048, 2048, 399.42, 5.773),
        (32, 1, 128, 906.03, 0.098), (32, 128, 128, 746.36, 0.749), (32, 128, 2048, 853.56, 0.732),
        (32, 2048, 128, 232.6, 11.834), (32, 2048, 2048, 636.23, 11.711),
        (64, 1, 128, 1425.79, 0.213), (64, 128, 128, 1159.84, 1.292), (64, 128, 2048, 1391.8, 1.173),
        (64, 2048, 128, 270.47, 17.402), (64, 2048, 2048, 930.46, 21.29)),
}
LMDEPLOY_BLOCK_TOKENS = 128

# FasterTransformer's GPT guide (github.com/NVIDIA/FasterTransformer, docs/gpt_guide.md, section "Performance" >
# "Performance of Megatron-530B", added in v5.0, commit a44c381, 2022-04-15): end-to-end latency of a static batch
# (prefill, then every output token) on an A100 SuperPOD, "8xA100-80GBs ... linked by NVSwitch" per node and nodes
# "linked by Infiniband, 8x200Gb/s NICs", FP16, sampling top_p 0.9. The one published table in the course past one
# NVLink domain: tensor parallelism over 16 GPUs (two nodes) and 32 (four). Every row of the table; its third column
# (TP 8 x PP 3, three nodes) is not priced (:data:`NOT_PRICED`): FasterTransformer picks the microbatch size itself
# ("adjust the micro batch size automatically", same guide, "Optimization"), and the page does not say which.
MEGATRON_530B = ModelConfig(
    # The section's settings: head_num 128, size_per_head 160 (hidden 20,480), num_layers 105, vocab 51,200; the
    # checkpoint's layout (docs/models/megatron-530b-model.md: a TP-16 shard holds qkv 3,840 x 20,480 = three
    # 128-head projections / 16, so every head has its own K and V; MLP dense_h_to_4h 5,120 = 4 x 20,480 / 16; biases
    # on every projection; LayerNorm with bias before attention and MLP; a learned 2,048-position table; the output
    # head is the word embedding, Megatron's GPT ties them). GELU MLP, not gated.
    name="megatron-530b", vocab_size=51200, hidden_size=20480, num_layers=105, num_heads=128, num_kv_heads=128,
    head_dim=160, intermediate_size=81920, gated_mlp=False, norm="layernorm", qkv_bias=True, linear_bias=True,
    tie_embeddings=True, learned_positions=2048, max_position_embeddings=2048)
# {(input, output): ((batch, ms at TP 16, ms at TP 32, ms at TP 8 x PP 3), ...)}; None where the page says OOM.
FT_530B = {
    (20, 8): ((1, 565, 431, 842), (2, 598, 455, 860), (4, 616, 493, 867), (8, 660, 523, 929), (16, 730, 575, 1049),
              (32, 865, 672, 1283), (64, 1191, 942, 1722), (128, 1862, 1431, 2124), (256, 3341, 2483, 3140)),
    (60, 20): ((1, 1379, 1037, 2085), (2, 1515, 1110, 2122), (4, 1512, 1198, 2184), (8, 1631, 1295, 2367),
               (16, 1868, 1454, 2753), (32, 2361, 1804, 3543), (64, 3383, 2646, 4117), (128, 5406, 4099, 5319),
               (256, None, 7203, 8318)),
    (128, 8): ((1, 585, 451, 866), (2, 667, 508, 932), (4, 765, 606, 1097), (8, 990, 766, 1434), (16, 1377, 1074, 2104),
               (32, 2251, 1741, 2623), (64, 4002, 3114, 3578), (128, None, 5784, 5512), (256, None, 11232, 9614)),
}
_FT = "FasterTransformer gpt_guide.md, table 'Performance of Megatron-530B'"

# ------------------------------------------------------------------------------------ added for issue 39
# Added after the estimate's constants were fixed (commit 5a08bc3: the peaks by format, the engine profiles and the
# measured GEMM efficiency), so nothing in the estimate was set or chosen while looking at them: the fresh sources of
# stage5.validate.FRESH_AFTER.
#
# TinyChat's README (github.com/mit-han-lab/llm-awq, tinychat/README.md at d6e797a, 2025-07-17, "Speed Benchmarks"):
# an FP16 baseline ("the default implementation from Huggingface") against TinyChat's AWQ W4A16 engine (4-bit weights,
# an FP16 scale and zero point per 128, llm-awq's q_group_size default; "FP16 accumulation when applicable" in its
# W4A16 GEMM), both PyTorch launching each kernel from Python, one request at a time. "A100" is not said to be the 40GB
# or the 80GB part; it is priced as the 80GB (the faster memory, so the floor stays a floor). Every table the course
# can price, whole:
# decoding latency per token, "only 4 context tokens" (exLLaMA's setting); tinychat/benchmark.py then decodes 256
# tokens: {gpu: ((model, FP16 ms or None for OOM, INT4 ms), ...)}.
VICUNA_7B = LLAMA2_7B.with_name("vicuna-7b")  # lmsys/vicuna-7b: a Llama 2 7B fine-tune, the same shapes
TINYCHAT_DECODE = {
    "RTX-4090": ((get_model("llama3-8b"), 17.07, 6.39), (LLAMA2_7B, 15.50, 5.28), (LLAMA2_13B, None, 9.19),
                 (VICUNA_7B, 15.81, 5.33)),
    "A100-80GB": ((get_model("llama3-8b"), 12.37, 6.29), (LLAMA2_7B, 10.77, 5.71), (LLAMA2_13B, 19.08, 7.90),
                  (VICUNA_7B, 10.54, 5.87)),
}
TINYCHAT_DECODE_CONTEXT, TINYCHAT_DECODE_TOKENS = 4, 256
# Prefilling speed, RTX 4090: time to first token in seconds by prompt length, FP16 and TinyChat (the 2.0 release).
TINYCHAT_PREFILL_TOKENS = (256, 512, 1024, 2048, 3072, 4096)
TINYCHAT_PREFILL_4090 = {
    get_model("llama3-8b"): ((0.031, 0.055, 0.109, 0.211, 0.336, 0.446), (0.021, 0.033, 0.064, 0.131, 0.200, 0.275)),
    LLAMA2_7B: ((0.029, 0.058, 0.100, 0.211, 0.329, 0.441), (0.018, 0.031, 0.060, 0.124, 0.193, 0.265)),
}
# "Comparison with Other Systems": TTFT of 4-bit weight-only Llama 3 8B on an RTX 4090, seconds. TensorRT-LLM (an
# AWQ W4A16 build, CUDA graphs and a C++ runtime) and TinyChat's legacy release are priced as W4A16 with groups of
# 128; MLC, llama.cpp and ExLlama V2 are not (:data:`NOT_PRICED`), and TinyChat 2.0's row repeats the prefill table.
TINYCHAT_OTHERS_TOKENS = (256, 512, 1024, 2048, 4096)
TINYCHAT_OTHERS_4090 = {"TensorRT-LLM": (0.027, 0.051, 0.100, 0.204, 0.421),
                        "TinyChat (Legacy)": (0.031, 0.051, 0.101, 0.219, 0.461)}
TINYCHAT_UNPRICED_SYSTEMS = ("MLC", "llama.cpp", "ExLlama v2", "TinyChat 2.0")
# "Context Streaming": TTFT in ms of a 32-token question after a history of h tokens, Llama 3 8B on an RTX 4090. The
# FP16 baseline and the legacy release prefill history and question again; TinyChat 2.0 keeps the history's KV cache.
TINYCHAT_QUESTION = 32
TINYCHAT_HISTORY = (16, 32, 64, 128, 256, 512, 1024)
TINYCHAT_STREAMING_4090 = {"FP16": (21.49, 21.38, 23.51, 40.82, 47.15, 75.41, 162.27),
                           "TinyChat (Legacy)": (15.20, 14.89, 17.61, 29.66, 44.11, 72.50, 163.90),
                           "TinyChat 2.0": (14.30, 14.05, 14.05, 14.43, 14.38, 14.35, 14.49)}
_TINYCHAT = "TinyChat README (llm-awq tinychat/README.md at d6e797a)"
_TINYCHAT_TAGS = {"TensorRT-LLM": "trtllm", "TinyChat (Legacy)": "legacy", "TinyChat 2.0": "v2", "FP16": "fp16"}

# ------------------------------------------------------------------------------------ added for issue 47
# Added after the first fit with a split (stage5.fitted): held out. Qwen team, "Qwen2.5 Speed Benchmark"
# (github.com/QwenLM/Qwen2.5, docs/source/benchmark/speed_benchmark.rst at 010c37c3): batch 1, generating 2,048 tokens
# after inputs of 1, 6,144, 14,336 and 30,720 tokens, speed in tokens/s, on one A100 80GB; Hugging Face transformers
# 4.46.0 (PyTorch 2.3.1, Flash Attention 2.5.8) and vLLM 0.6.3 (gpu_memory_utilization 0.9, max_model_len 32,768,
# enforce_eager False: CUDA graphs). One request from prompt to its last token, so priced as a static batch of one:
# 2,048 tokens / speed. Only Qwen2.5-0.5B-Instruct's BF16 rows are priced here: its shapes are checked (below); the
# quantized rows use GPTQ/AWQ kernels whose formats the course prices differently, and the larger models' shapes were
# not checked for this issue.
QWEN25_05B = ModelConfig(
    # Qwen/Qwen2.5-0.5B-Instruct config.json: vocab 151,936, hidden 896, 24 layers, 14 query heads of 64, 2 KV heads,
    # SwiGLU FFN 4,864, bias on q, k and v, RMSNorm, output head tied to the embedding, 32,768 positions.
    name="qwen2.5-0.5b", vocab_size=151936, hidden_size=896, num_layers=24, num_heads=14, num_kv_heads=2,
    head_dim=64, intermediate_size=4864, qkv_bias=True, tie_embeddings=True, max_position_embeddings=32768)
QWEN_SPEED_OUTPUT = 2048
# {engine: ((input tokens, tokens/s), ...)}, BF16
QWEN_SPEED_05B = {"transformers": ((1, 47.40), (6144, 47.45), (14336, 47.11), (30720, 47.16)),
                  "vllm": ((1, 311.55), (6144, 304.79), (14336, 290.28), (30720, 264.51))}
_QWEN_TABLES = {"transformers": "Transformer", "vllm": "vLLM"}
_QWEN = "Qwen2.5 Speed Benchmark (QwenLM/Qwen2.5 docs/source/benchmark/speed_benchmark.rst at 010c37c3)"

# Also added for issue 47, after the first fit: held out. Two TensorRT-LLM blog posts with H200 tables (a chip no fit
# source ran), static batches in the C++ runtime. Every number below is read from the posts' tables and footnotes.
# (The third post of that series, docs/source/blogs/H100vsA100.md, is not added: it says its tables' full data is the
# performance page the trtllm-0.6 source already quotes.)
# github.com/NVIDIA/TensorRT-LLM docs/source/blogs/H200launch.md (at 1555478c), table "H200 FP8 Max throughput":
# "TensorRT-LLM v0.5.0, TensorRT v9.1.0.4 | H200, H100 FP8", batch = "Largest batch supported on given TP configuration
# by power of 2", output tokens/s per GPU. "llama_13b" is Llama 2 13B (the post's title: "Llama2-13B"); "llama_70b" is
# Llama 2 70B, as the 0.6.1 performance page's "LLaMA 70B" is (above) and as the follow-up post names it
# ("Llama2-70B"). Every row of the table, the two 70B 2,048-in/128-out rows at TP 1 (batches 64 and 32) as printed:
# {(model, batch, tp, input, output, output tokens/s per GPU), ...}.
TRTLLM_H200_05 = ((LLAMA2_13B, 1024, 1, 128, 128, 11819), (LLAMA2_13B, 128, 1, 128, 2048, 4750),
                  (LLAMA2_13B, 64, 1, 2048, 128, 1349), (LLAMA2_70B, 512, 1, 128, 128, 3014),
                  (LLAMA2_70B, 512, 2, 128, 2048, 1654), (LLAMA2_70B, 64, 1, 2048, 128, 341),
                  (LLAMA2_70B, 32, 1, 2048, 128, 303))
_TRT_H200_05 = "TensorRT-LLM blog H200launch.md (at 1555478c), table 'H200 FP8 Max throughput'"
# github.com/NVIDIA/TensorRT-LLM docs/source/blogs/Falcon180B-H200.md (at 3c44cb97), section "Llama-70B on H200 up to
# 6.7x A100", its table and footnote: "TensorRT-LLM v0.7a | Llama2-70B | 1xH200 = TP1, 8xH200 = max TP/PP/DP config |
# FP8 | BS: (in order) 960, 960, 192, 560, 96, 640", throughput "out_tps=output_seqlen*batch_size/total_latency/tp"
# (a static batch's wall time), input 128 on every row (the table's merged cells). Priced: the three 1 x H200 rows;
# the three 8 x H200 rows are not (:data:`NOT_PRICED`: the split over tensor, pipeline and data parallelism is not
# stated), nor the post's Falcon-180B and v0.6a-vs-v0.7a figures (numbers only in images).
# {(batch, output, output tokens/s per GPU), ...}, TP 1, 128 in.
TRTLLM_H200_07A = ((960, 128, 3803), (192, 2048, 2941), (96, 4096, 1946))
TRTLLM_H200_07A_8GPU = ((960, 128, 3803), (560, 2048, 3163), (640, 4096, 2263))
_TRT_H200_07A = ("TensorRT-LLM blog Falcon180B-H200.md (at 3c44cb97), section 'Llama-70B on H200 up to 6.7x A100', "
                 "its table")
# Neither post names the KV cache's format. It is taken as FP8, the way NIM_KV is, because the tables rule out BF16:
# with a BF16 cache these batches could not all be held at once on an H200, with an FP8 cache they can
# (tests/test_validate.py checks it against stage5.cost.max_concurrency); the 0.6.1 performance page's FP8 builds
# also pass --fp8_kv_cache. An inference, not a quote.
TRTLLM_H200_KV = "fp8"
TRTLLM_H200_KV_EVIDENCE = ((LLAMA2_13B, 1, 128, 128, 1024), (LLAMA2_13B, 1, 128, 2048, 128),
                           (LLAMA2_70B, 2, 128, 2048, 512), (LLAMA2_70B, 1, 128, 128, 960),
                           (LLAMA2_70B, 1, 128, 2048, 192), (LLAMA2_70B, 1, 128, 4096, 96))  # model, tp, in, out, batch

# Published rows the report cannot price, with the reason: (source key, row, reason).
NOT_PRICED: tuple[tuple[str, str, str], ...] = (
    *(("ft-530b", f"TP 8 x PP 3, batch {b}, {i} in, {o} out: {pp} ms", "pipeline parallel with an unstated microbatch "
       "size (validate prices tensor parallelism only)") for (i, o), t in FT_530B.items() for b, _, _, pp in t),
    *(("ft-530b", f"TP {tp}, batch {b}, {i} in, {o} out: OOM", "no measurement (out of memory)")
      for (i, o), t in FT_530B.items() for b, m16, m32, _ in t for tp, ms in ((16, m16), (32, m32)) if ms is None),
    *(("tinychat-fp16", f"decoding, {gpu}, {m.name}: OOM", "no measurement (out of memory)")
      for gpu, t in TINYCHAT_DECODE.items() for m, fp16, _ in t if fp16 is None),
    *(("tinychat", f"comparison with other systems, {name}", "a 4-bit weight format the README does not name (each "
       "engine has its own)" if name != "TinyChat 2.0" else "the prefill table's TinyChat row again, rounded apart")
      for name in TINYCHAT_UNPRICED_SYSTEMS),
    ("tinychat", "every Jetson Orin table", "no registry entry for the Jetson Orin"),
    ("tinychat", "every VILA and NVILA row", "vision-language models: their image tokens are not priced"),
    *((key, "every GPTQ-Int8, GPTQ-Int4 and AWQ row", "GPTQ/AWQ kernels, not checked for this issue")
      for key in ("qwen-hf", "qwen-vllm")),
    *((key, "every row of Qwen2.5 1.5B to 72B", "model shapes not checked for this issue")
      for key in ("qwen-hf", "qwen-vllm")),
    *(("trtllm-h200-0.7a", f"8 x H200, batch {b}, 128 in, {o} out: {toks:,} output tokens/s per GPU",
       "'max TP/PP/DP config': the split over tensor, pipeline and data parallelism is not stated")
      for b, o, toks in TRTLLM_H200_07A_8GPU),
    ("trtllm-h200-0.7a", "Falcon-180B INT4 AWQ on one H200, and v0.6a against v0.7a", "numbers only in images"),
    ("mlc-llm", "table 'Int4-quantized, Single GPU': the RTX 3090 Ti rows", "no registry entry for the RTX 3090 Ti"),
    ("mlc-llm", "table 'Int4-quantized, Single GPU': the Exllama column", "GPTQ checkpoints whose group size and "
     "act-order setting the README does not state"),
    ("mlc-llm", "table 'Int4-quantized, Single GPU': the Llama.cpp column", "Q4_K_M, a mix of 4- and 6-bit k-quant "
     "blocks the registry does not price"),
    ("gpt-fast-quant", "table 'AMD': Llama-2-7B Base and 8-bit on one GCD of an MI250X", "one GCD, half a module: "
     "the registry's MI250X is the whole module"),
    ("gpt-fast-quant", "'Speculative Sampling': Llama-70B int4 verifier, Llama-7B int4 draft, 48.4 tok/s",
     "speculative decoding: its acceptance rate is not stated"),
)

SOURCES: dict[str, Source] = {s.key: s for s in (
    Source("nim", "NVIDIA NIM 1.8.0 (TensorRT-LLM)", "docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance",
           "NIM 1.8.0, AIPerf", "Llama 3.3 70B FP8 on 2 x H100 (TP2), Llama 3.1 8B FP8 on 1 x H100; five prompt/output "
           "pairs x concurrency 1-250", split="fit", profile="cpp-runtime"),
    Source("gpt-fast", "gpt-fast (PyTorch)", "github.com/pytorch-labs/gpt-fast README, 'Tensor Parallelism'",
           "README table", "Llama 2 7B/70B BF16 on A100-80GB (330 W), TP 1-8, batch 1, 5-token prompt",
           split="fit", profile="python-graphs"),
    Source("trtllm-0.6", "TensorRT-LLM 0.6.1 (static batches)", "github.com/NVIDIA/TensorRT-LLM docs/source/performance.md",
           "v0.6.1 (L40S and first-token tables: v0.5)", "GPT-J 6B, Llama 2 7B/70B, Falcon 180B; FP8 on H100 and L40S, "
           "FP16 on A100 (throughput per GPU, as the page's later revision heads every table); batch 1-1,280, TP 1-8, "
           "128/2,048 in and out; gptSessionBenchmark", memory_policy="free", profile="cpp-runtime"),
    Source("vllm-ci", "vLLM (performance CI)", "buildkite.com/vllm/performance-benchmark/builds/9515", "CI build 9515",
           "Llama 3.1 8B TP1, Llama 3 70B TP4, Mixtral 8x7B TP2, BF16 on H200; batch 8, 32 in, 128 out",
           memory_policy="card", max_running=256, profile="graphs"),
    Source("dstack-mi300x", "vLLM 0.6.3 on ROCm (dstack)", "dstack.ai/blog/amd-mi300x-inference-benchmark; "
           "github.com/dstackai/benchmarks amd/inference/vllm/data/serving_benchmarks_vllm_80.txt",
           "vLLM 0.6.3.dev116, ROCm 6.1", "Llama 3.1 405B BF16 on 8 x MI300X (TP8), 80-token prompts, 1-4,096 "
           "requests sent at once", split="fit", memory_policy="card", max_running=256, profile="python-graphs"),
    Source("lmdeploy-a100", "LMDeploy v0.1.0a1 (TurboMind)", "github.com/InternLM/lmdeploy docs/en/benchmark/a100_fp16.md "
           "(commit ebe90bc9)", "v0.1.0a1, CUDA 11.8", "Llama 2 7B/13B, InternLM 20B (TP2), Llama 2 70B (TP4), FP16 on "
           "A100-80GB; 1-64 clients in a closed loop, prompts 1/128/2,048, outputs 128/2,048; profile_generation.py",
           split="fit", profile="cpp-runtime"),
    Source("ft-530b", "FasterTransformer v5.0 (static batches)", "github.com/NVIDIA/FasterTransformer docs/gpt_guide.md "
           "(commit a44c381)", "v5.0", "Megatron-530B FP16 on 16 and 32 A100-80GB (TP over two and four nodes, "
           "InfiniBand 8 x 200 Gb/s per node); batch 1-256, 20/60/128 in, 8/20 out", split="fit",
           profile="cpp-runtime"),
    Source("gpt-fast-quant", "gpt-fast (PyTorch), weight-only int8 and int4", "github.com/pytorch-labs/gpt-fast "
           "README, 'Benchmarks' and 'Tensor Parallelism + Quantization' (commit 0f925b5)", "README table",
           "Llama 2 7B/70B with 8-bit (per channel) or 4-bit (groups of 32) weights on A100-80GB (330 W), TP 1 and "
           "8, batch 1, 5-token prompt", profile="python-graphs", added_in=47, same_setup_as="gpt-fast"),
    Source("mlc-llm", "MLC LLM (TVM, CUDA graphs), in its llm-perf-bench", "github.com/mlc-ai/llm-perf-bench README "
           "(commit 0274600)", "MLC LLM 8e94910, TVM e5ca38d", "Llama 2 7B and 13B with 4-bit weights (q4f16_1: an "
           "FP16 scale per 32, the embedding and output head quantized too) on one RTX 4090, batch 1, 256 tokens "
           "after a short prompt; FP16 activations and compute", profile="graphs", accumulation="fp16", added_in=47),
    Source("tinychat-fp16", "FP16 baseline in TinyChat's benchmarks (Hugging Face's implementation)",
           "github.com/mit-han-lab/llm-awq tinychat/README.md (commit d6e797a)", "README of 2025-07-17",
           "Llama 3 8B, Llama 2 7B/13B, Vicuna 7B in FP16 on one RTX 4090 or A100, batch 1: decode latency with 4 "
           "context tokens, TTFT of 256-4,096-token prompts and of a 32-token question after a history",
           split="fit", profile="eager", added_in=39),
    Source("tinychat", "TinyChat (AWQ W4A16, PyTorch)", "github.com/mit-han-lab/llm-awq tinychat/README.md "
           "(commit d6e797a)", "TinyChat 2.0 and the legacy release, README of 2025-07-17",
           "the same models with 4-bit AWQ weights (groups of 128) on one RTX 4090 or A100, batch 1; TinyChat 2.0 "
           "keeps a chat's history in the KV cache", profile="fused-eager", accumulation="fp16",
           added_in=39),
    Source("tinychat-trtllm", "TensorRT-LLM (W4A16), in TinyChat's comparison", "github.com/mit-han-lab/llm-awq "
           "tinychat/README.md (commit d6e797a), 'Comparison with Other Systems'", "README of 2025-07-17",
           "Llama 3 8B with 4-bit weight-only quantization on one RTX 4090: TTFT of 256-4,096-token prompts",
           profile="cpp-runtime", added_in=39),
    Source("qwen-hf", "Hugging Face transformers 4.46.0, in Qwen's speed benchmark", "github.com/QwenLM/Qwen2.5 "
           "docs/source/benchmark/speed_benchmark.rst (commit 010c37c3)", "transformers 4.46.0, Flash Attention 2.5.8",
           "Qwen2.5-0.5B-Instruct BF16 on one A100 80GB, batch 1, 2,048 tokens after 1-30,720 input tokens",
           profile="eager", added_in=47),
    Source("qwen-vllm", "vLLM 0.6.3, in Qwen's speed benchmark", "github.com/QwenLM/Qwen2.5 "
           "docs/source/benchmark/speed_benchmark.rst (commit 010c37c3)", "vLLM 0.6.3 (CUDA graphs)",
           "Qwen2.5-0.5B-Instruct BF16 on one A100 80GB, batch 1, 2,048 tokens after 1-30,720 input tokens",
           profile="python-graphs", added_in=47),
    Source("trtllm-h200-0.5", "TensorRT-LLM 0.5.0 (static batches), H200 launch post", "github.com/NVIDIA/TensorRT-LLM "
           "docs/source/blogs/H200launch.md (commit 1555478c)", "v0.5.0, TensorRT 9.1.0.4",
           "Llama 2 13B (TP1) and 70B (TP1, TP2), FP8 on H200 (KV cache FP8 by inference); batch 32-1,024, "
           "128/2,048 in and out", memory_policy="free", profile="cpp-runtime", added_in=47),
    Source("trtllm-h200-0.7a", "TensorRT-LLM 0.7a (static batches), Falcon-180B/H200 post", "github.com/NVIDIA/"
           "TensorRT-LLM docs/source/blogs/Falcon180B-H200.md (commit 3c44cb97)", "v0.7a (preliminary)",
           "Llama 2 70B FP8 on one H200 (KV cache FP8 by inference), batch 96-960, 128 in, 128/2,048/4,096 out",
           memory_policy="free", profile="cpp-runtime", added_in=47),
)}
# vLLM's EngineArgs default max_num_seqs is 256 (vllm/engine/arg_utils.py, v0.5-0.6): past it requests wait.

SERVING_POINTS: tuple[ServingPoint, ...] = (
    *(ServingPoint(f"gptfast-{m.name}-tp{n}", m, "A100-80GB", n, "bf16", "bf16", 1, 5, 200, 1000 / toks, None,
                   f"{_GPT_FAST}: {m.name}, {n} GPU(s), {toks} tokens/s", source_key="gpt-fast")
      for (m, n), toks in _GPT_FAST_TOKS.items()),
    *(ServingPoint(f"mlc-{m.name}-RTX-4090-int4-g32", m, "RTX-4090", 1, "int4-g32", "bf16", 1, MLC_PROMPT, MLC_OUTPUT,
                   1000 / toks, None, f"MLC llm-perf-bench README, table 'Int4-quantized, Single GPU': {m.name} on RTX "
                   f"4090, MLC LLM {toks} tok/sec", source_key="mlc-llm", head="int4-g32")
      for m, toks in MLC_4090_TOKS.items()),
    *(ServingPoint(f"gptfast-{m.name}-{fmt}-tp{n}", m, "A100-80GB", n, fmt, "bf16", 1, 5, 200, 1000 / toks, None,
                   f"gpt-fast README, table '{'Benchmarks' if n == 1 else 'Tensor Parallelism + Quantization'}' (A100-80GB, "
                   f"330 W, batch 1): {m.name} {_GPT_FAST_QUANT_LABEL[fmt]}, {n} GPU(s), {toks} tokens/s",
                   source_key="gpt-fast-quant", head=fmt)
      for (m, n, fmt), toks in _GPT_FAST_QUANT_TOKS.items()),
    *(ServingPoint(f"nim-{model.name}-fp8-tp{n}-p{p}-o{o}-c{c}", model, "H100-SXM", n, "fp8", NIM_KV, c, p, o, itl,
                   ttft if c == 1 else None, f"{_NIM}, {section}, table '{p} Input Tokens / {o} Output Tokens', "
                   f"concurrency {c}", ttft, source_key="nim")
      for model, n, tables, section in _NIM_DEPLOYMENTS
      for (p, o), table in tables.items() for c, ttft, itl in table),
    *(ServingPoint(f"trtllm-{_TRT_MODELS[m].name}-{gpu}-{fmt}-tp{tp}-b{b}-p{i}-o{o}", _TRT_MODELS[m], gpu, tp, fmt,
                   fmt, b, i, o, None, None, f"TensorRT-LLM 0.6.1 performance.md, table 'Peak Throughput', {gpu}: {m}, "
                   f"batch {b}, TP {tp}, {i} in, {o} out, {toks:,} output tokens/s{' per GPU' if per_gpu else ''}",
                   batch_ms=1e3 * b * o / (toks * (tp if per_gpu else 1)), source_key="trtllm-0.6")
      for (gpu, fmt, per_gpu), table in TRTLLM_THROUGHPUT.items() for m, b, tp, i, o, toks in table),
    *(ServingPoint(f"trtllm-{_TRT_MODELS[m].name}-{gpu}-{fmt}-tp{tp}-first-p{i}", _TRT_MODELS[m], gpu, tp, fmt, fmt, 1,
                   i, 1, None, float(ms), f"TensorRT-LLM 0.6.1 performance.md, table 'Low Latency', {gpu}: {m}, TP {tp}, "
                   f"{i} in, first-token latency {ms} ms", source_key="trtllm-0.6")
      for (gpu, fmt), table in TRTLLM_FIRST_TOKEN.items() for m, tp, i, ms in table),
    *(ServingPoint(f"vllmci-{m.name}-H200-tp{n}-b8", m, "H200", n, "bf16", "bf16", 8, 32, 128, None, None,
                   f"vLLM performance CI build 9515, table 'Latency tests': {m.name} TP{n} on H200, mean {ms} ms",
                   batch_ms=ms, source_key="vllm-ci")
      for m, n, ms in VLLM_CI_LATENCY),
    *(ServingPoint(f"dstack-{LLAMA31_405B.name}-MI300X-tp8-c{c}", LLAMA31_405B, "MI300X", 8, "bf16", "bf16", c, 80,
                   max(1, round(gen / c)), tpot, ttft if c == 1 else None,
                   f"dstack serving_benchmarks_vllm_80.txt, table of serving results, {c} requests: mean TPOT {tpot} ms, "
                   f"mean TTFT {ttft} ms", ttft, source_key="dstack-mi300x")
      for c, gen, ttft, tpot in DSTACK_MI300X),
    *(ServingPoint(f"lmdeploy-{m.name}-A100-80GB-bf16-tp{tp}-b{b}-p{i}-o{o}", m, "A100-80GB", tp, "bf16", "bf16", b, i,
                   o, None, 1e3 * ftl if b == 1 else None, f"LMDeploy a100_fp16.md, table 'Static Inference Benchmark', "
                   f"{m.name}: batch {b}, TP {tp}, {i} in, {o} out, {toks} output tokens/s, FTL(ave) {ftl} s",
                   1e3 * ftl, batch_ms=1e3 * b * o / toks, source_key="lmdeploy-a100",
                   kv_pool=(blocks, LMDEPLOY_BLOCK_TOKENS), closed_loop=True)
      for (m, tp, blocks), table in LMDEPLOY_A100.items() for b, i, o, toks, ftl in table),
    *(ServingPoint(f"ft-{MEGATRON_530B.name}-A100-80GB-bf16-tp{tp}-b{b}-p{i}-o{o}", MEGATRON_530B, "A100-80GB", tp,
                   "bf16", "bf16", b, i, o, None, None, f"{_FT}: batch {b}, {i} in, {o} out, TP {tp}, latency {ms} ms",
                   batch_ms=float(ms), source_key="ft-530b")
      for (i, o), table in FT_530B.items() for b, m16, m32, _ in table for tp, ms in ((16, m16), (32, m32))
      if ms is not None),
    *(ServingPoint(f"tinychat-{m.name}-{gpu}-{fmt}-decode", m, gpu, 1, fmt, "bf16", 1, TINYCHAT_DECODE_CONTEXT,
                   TINYCHAT_DECODE_TOKENS, ms, None, f"{_TINYCHAT}, table 'Decoding Speed', {gpu}: {m.name} {label} "
                   f"latency {ms} ms", source_key=key)
      for gpu, table in TINYCHAT_DECODE.items() for m, fp16, int4 in table
      for fmt, ms, label, key in (("bf16", fp16, "FP16", "tinychat-fp16"), ("int4", int4, "INT4", "tinychat"))
      if ms is not None),
    *(ServingPoint(f"tinychat-{m.name}-RTX-4090-{fmt}-prefill-p{p}", m, "RTX-4090", 1, fmt, "bf16", 1, p, 1, None,
                   1e3 * sec, f"{_TINYCHAT}, table 'Prefilling Speed', RTX 4090: {m.name} {label}, {p} tokens: {sec} s",
                   1e3 * sec, source_key=key)
      for m, (fp16, tiny) in TINYCHAT_PREFILL_4090.items()
      for fmt, times, label, key in (("bf16", fp16, "FP16", "tinychat-fp16"), ("int4", tiny, "TinyChat", "tinychat"))
      for p, sec in zip(TINYCHAT_PREFILL_TOKENS, times, strict=True)),
    *(ServingPoint(f"tinychat-{_TINYCHAT_TAGS[name]}-llama3-8b-RTX-4090-int4-prefill-p{p}", get_model("llama3-8b"), "RTX-4090", 1, "int4", "bf16", 1, p, 1, None,
                   1e3 * sec, f"{_TINYCHAT}, table 'Comparison with Other Systems': {name}, {p} tokens: {sec} s", 1e3 * sec,
                   source_key="tinychat-trtllm" if name == "TensorRT-LLM" else "tinychat",
                   variant="legacy" if "Legacy" in name else "")
      for name, times in TINYCHAT_OTHERS_4090.items() for p, sec in zip(TINYCHAT_OTHERS_TOKENS, times, strict=True)),
    *(ServingPoint(f"qwen-{engine}-qwen2.5-0.5b-A100-80GB-bf16-p{p}", QWEN25_05B, "A100-80GB", 1, "bf16", "bf16", 1,
                   p, QWEN_SPEED_OUTPUT, None, None, f"{_QWEN}, table '0.5B ({_QWEN_TABLES[engine]})': BF16, input {p}, "
                   f"{toks} tokens/s", batch_ms=1e3 * QWEN_SPEED_OUTPUT / toks,
                   source_key="qwen-hf" if engine == "transformers" else "qwen-vllm")
      for engine, table in QWEN_SPEED_05B.items() for p, toks in table),
    *(ServingPoint(f"trtllm05-{m.name}-H200-fp8-tp{tp}-b{b}-p{i}-o{o}", m, "H200", tp, "fp8", TRTLLM_H200_KV, b, i, o,
                   None, None, f"{_TRT_H200_05}: {m.name}, batch {b}, TP {tp}, {i} in, {o} out, {toks:,} output "
                   f"tokens/s per GPU", batch_ms=1e3 * b * o / (toks * tp), source_key="trtllm-h200-0.5")
      for m, b, tp, i, o, toks in TRTLLM_H200_05),
    *(ServingPoint(f"trtllm07a-{LLAMA2_70B.name}-H200-fp8-tp1-b{b}-p128-o{o}", LLAMA2_70B, "H200", 1, "fp8",
                   TRTLLM_H200_KV, b, 128, o, None, None, f"{_TRT_H200_07A}: 1 x H200, batch {b}, 128 in, {o} out, "
                   f"{toks:,} output tokens/s per GPU", batch_ms=1e3 * b * o / toks, source_key="trtllm-h200-0.7a")
      for b, o, toks in TRTLLM_H200_07A),
    *(ServingPoint(f"tinychat-{_TINYCHAT_TAGS[name]}-llama3-8b-RTX-4090-history{h}", get_model("llama3-8b"), "RTX-4090", 1, "bf16" if name == "FP16" else "int4", "bf16",
                   1, h + TINYCHAT_QUESTION, 1, None, ms, f"{_TINYCHAT}, table 'Context Streaming', RTX 4090: {name}, "
                   f"history {h}, question {TINYCHAT_QUESTION}: {ms} ms", ms,
                   source_key="tinychat-fp16" if name == "FP16" else "tinychat", cached=h if name == "TinyChat 2.0" else 0,
                   variant="legacy" if "Legacy" in name else "")
      for name, times in TINYCHAT_STREAMING_4090.items() for h, ms in zip(TINYCHAT_HISTORY, times, strict=True)),
)
