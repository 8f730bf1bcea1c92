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

# Kurtic et al., "Give Me BF16 or Give Me Death?" (2024, cite key kurtic2024bf16), abstract and the
# W8A8-INT results: accuracy loss of carefully tuned INT8 weights and activations, in percent.
INT8_ACCURACY_LOSS_PCT = (1.0, 3.0)

# The course's source text, inference-economics module (the ranking of levers): orders of magnitude, not
# measurements. Batching: from a naive server to a well-tuned current stack.
SOURCE_BATCHING_GAIN = (5.0, 10.0)
# Routing: depends entirely on the traffic mix (the source's example has 80% of requests easy).
SOURCE_ROUTING_GAIN = (3.0, 5.0)

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
    "int8_accuracy_loss_pct": (INT8_ACCURACY_LOSS_PCT, "%",
                               "accuracy loss of well-tuned W8A8-INT (Kurtic et al. 2024)"),
    "source_batching_gain": (SOURCE_BATCHING_GAIN, "x", "the source text's batching lever, naive to tuned"),
    "source_routing_gain": (SOURCE_ROUTING_GAIN, "x", "the source text's routing lever, traffic-dependent"),
}
SINGLE = {
    "nanochat_node_gpus": (NANOCHAT_NODE_GPUS, "GPUs", "GPUs in the node whose price nanochat states"),
}


# ======================================================================================= measured serving points
# Published measurements of real servers, for `python -m stage5 validate` (stage5.validate). Each figure was read
# in the source named beside it; none is used to set any default of the cost model's estimate mode.
from dataclasses import dataclass  # noqa: E402

from stage5.models import ModelConfig  # noqa: E402


@dataclass(frozen=True)
class ServingPoint:
    """One published measurement. Times in ms; ``tpot_ms`` is the time per output token (TPOT or inter-token
    latency), ``ttft_ms`` the time to first token (None where the source gives none)."""

    id: str
    model: str | ModelConfig
    gpu: str
    num_gpus: int
    weights: str  # weight format, a key of stage5.quantization.WEIGHT_FORMATS
    kv: str  # KV-cache format, a key of stage5.quantization.KV_FORMATS
    concurrency: int
    prompt: int
    output: int
    tpot_ms: float
    ttft_ms: float | None
    source: str


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

# NVIDIA NIM LLM benchmarking guide, "Performance" page (docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance),
# section "Llama-3.3-70b-instruct Results", NIM 1.8.0, 2 x H100 80G, fp8 TP2. Llama 3.3 70B has Llama 3 70B's
# architecture. The page names the weight precision only; the KV cache is taken as BF16 (the larger, so the
# floor stays a floor).
_NIM = "NVIDIA NIM benchmarking, Llama-3.3-70b-instruct, NIM 1.8.0, 2 x H100 fp8 TP2"
# (prompt, output, concurrency): (TTFT ms, ITL ms), rows of the tables "5000 Input Tokens / 500 Output Tokens"
# and "500 Input Tokens / 2000 Output Tokens". Rows at concurrency 100 and above are left out: their TTFT
# (8 to 89 s) shows requests queueing, so fewer than that many were decoding at once.
_NIM_ROWS = {(5000, 500, 1): (406.77, 18.58), (5000, 500, 5): (546.7, 21.83), (5000, 500, 25): (688.69, 38.75),
             (5000, 500, 50): (834.51, 59.73), (500, 2000, 1): (47.77, 18.91)}

SERVING_POINTS: tuple[ServingPoint, ...] = (
    *(ServingPoint(f"gptfast-{m.name}-tp{n}", m, "A100-80GB", n, "bf16", "bf16", 1, 5, 200, 1000 / toks, None,
                   f"{_GPT_FAST}: {m.name}, {n} GPU(s), {toks} tokens/s")
      for (m, n), toks in _GPT_FAST_TOKS.items()),
    *(ServingPoint(f"nim-llama3.3-70b-fp8-tp2-p{p}-o{o}-c{c}", "llama3-70b", "H100-SXM", 2, "fp8", "bf16", c, p, o,
                   itl, ttft if c == 1 else None,
                   f"{_NIM}, table '{p} Input Tokens / {o} Output Tokens', concurrency {c}")
      for (p, o, c), (ttft, itl) in _NIM_ROWS.items()),
)
