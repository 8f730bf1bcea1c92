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
