"""Every number the book prints, computed from the cost model and named.

Chapters glue these by id (``glue(id, figure(id))``); ``python -m stage5 figures`` prints them all and
``--json`` prints ``{id: value}``. The anchor deployment is the source text's: Llama 3 70B in BF16 on
H100 SXM GPUs, with an 8 GiB-per-GPU activation reserve.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from stage5 import cost
from stage5.hardware import GB, GiB, get_gpu
from stage5.inputs import OneLineParser, dumps
from stage5.models import get_model


@dataclass(frozen=True)
class Figure:
    id: str
    value: float
    unit: str
    description: str


_MAKERS: list[tuple[str, str, str, Callable[[], float]]] = []


def _fig(fid: str, unit: str, description: str) -> Callable[[Callable[[], float]], Callable[[], float]]:
    def register(fn: Callable[[], float]) -> Callable[[], float]:
        _MAKERS.append((fid, unit, description, fn))
        return fn
    return register


def _one() -> cost.Deployment:
    return cost.Deployment.of("llama3-70b", "H100-SXM", 1)


def _four(**kw: float) -> cost.Deployment:
    return cost.Deployment.of(cost.ANCHOR_MODEL, cost.ANCHOR_GPU, cost.ANCHOR_GPUS, **kw)


CONTEXTS = {"1k": 1024, "4k": 4096, "32k": 32768, "128k": 131072}
WORKED_BATCH, WORKED_CONTEXT = 125, 4096  # the source text's worked example (module 2)



# ======================================================================================= the source text's figures
# Every figure the source text states (chapters 2-3, and chapter 7's speculation example); tests/test_cost.py
# checks each against the source.
# --------------------------------------------------------------------------------------- the model
_fig("llama3_70b_params", "parameters", "Llama 3 70B parameter count from its config.json")(
    lambda: get_model("llama3-70b").num_params)
_fig("llama3_70b_weights_GB", "GB", "Llama 3 70B BF16 weights, decimal GB")(
    lambda: get_model("llama3-70b").weight_bytes(2) / GB)
_fig("llama3_70b_weights_GiB", "GiB", "Llama 3 70B BF16 weights, binary GiB")(
    lambda: get_model("llama3-70b").weight_bytes(2) / GiB)
_fig("llama3_70b_kv_bytes_per_token", "bytes", "KV cache per token, BF16: 2 x layers x kv_heads x head_dim x 2")(
    lambda: get_model("llama3-70b").kv_bytes_per_token(2))
_fig("llama3_70b_kv_KiB_per_token", "KiB", "KV cache per token, BF16, in KiB")(
    lambda: get_model("llama3-70b").kv_bytes_per_token(2) / 1024)
_fig("llama3_70b_gqa_ratio", "x", "query heads per KV head in Llama 3 70B (KV saving of GQA over MHA)")(
    lambda: get_model("llama3-70b").gqa_ratio)

# --------------------------------------------------------------------------------------- the hardware
_fig("h100_bf16_TFLOPs", "TFLOP/s", "H100 SXM dense BF16 peak")(lambda: get_gpu("H100-SXM").flops_bf16 / 1e12)
_fig("h100_bandwidth_TBs", "TB/s", "H100 SXM HBM3 bandwidth")(lambda: get_gpu("H100-SXM").bandwidth / 1e12)
_fig("h100_ridge_flops_per_byte", "FLOP/byte", "H100 SXM ridge point, dense BF16")(
    lambda: cost.ridge_point(get_gpu("H100-SXM")))
_fig("batch1_fraction_of_ridge_pct", "%", "BF16 batch-1 decode intensity as a share of the H100 ridge")(
    lambda: 100 * float(cost.decode_intensity(1)) / cost.ridge_point(get_gpu("H100-SXM")))

# --------------------------------------------------------------------------------------- decode floors
_fig("decode_floor_ms_1xH100", "ms", "batch-1 decode floor, Llama 3 70B BF16, one H100 (weights / bandwidth)")(
    lambda: 1e3 * cost.decode_floor_s(_one()))
_fig("decode_floor_ms_4xH100", "ms", "batch-1 decode floor on four H100s (perfect tensor-parallel scaling)")(
    lambda: 1e3 * cost.decode_floor_s(_four()))

# --------------------------------------------------------------------------------------- memory
_fig("memory_GiB_4xH100", "GiB", "memory on four H100s")(lambda: _four().memory_bytes / GiB)
_fig("reserve_GiB_4xH100", "GiB", "activation and workspace reserve on four H100s")(
    lambda: _four().reserve_bytes / GiB)
_fig("kv_budget_GiB_4xH100", "GiB", "KV budget on four H100s after weights and the reserve")(
    lambda: cost.kv_budget_bytes(_four()) / GiB)
for _label, _ctx in CONTEXTS.items():
    _fig(f"kv_GiB_per_seq_{_label}", "GiB", f"KV cache of one {_ctx:,}-token sequence")(
        lambda c=_ctx: float(cost.kv_bytes_per_sequence(_four(), c)) / GiB)
    _fig(f"max_seqs_{_label}", "sequences", f"max concurrent {_ctx:,}-token sequences on 4xH100")(
        lambda c=_ctx: int(cost.max_concurrency(_four(), c)))
_fig("cost_ratio_128k_vs_1k", "x", "per-user cost at 128K context over 1K (ratio of max concurrency)")(
    lambda: int(cost.max_concurrency(_four(), 1024)) / int(cost.max_concurrency(_four(), 131072)))

# --------------------------------------------------------------------------------------- the worked example
_fig("kv_traffic_GB_b125_s4096", "GB", "KV bytes read per decode step, batch 125 x 4,096 tokens (decimal GB)")(
    lambda: float(cost.kv_traffic_bytes(_four(), WORKED_BATCH, WORKED_CONTEXT)) / GB)
_fig("intensity_b125_s4096", "FLOP/byte", "decode intensity with KV traffic, batch 125 x 4,096 tokens")(
    lambda: float(cost.decode_intensity_with_kv(_four(), WORKED_BATCH, WORKED_CONTEXT)))
_fig("ridge_over_intensity_b125_s4096", "x", "how far below the ridge the worked example sits")(
    lambda: cost.ridge_point(get_gpu("H100-SXM"))
    / float(cost.decode_intensity_with_kv(_four(), WORKED_BATCH, WORKED_CONTEXT)))
_fig("intensity_cap_s4096", "FLOP/byte", "intensity limit at 4,096 tokens as batch grows without bound")(
    lambda: 2 * get_model("llama3-70b").active_params / (WORKED_CONTEXT * _four().kv_bytes_per_token))
_fig("source_kv_traffic_GB_misquoted", "GB", "the KV traffic the source's quantization section quotes (erratum)")(
    lambda: 180.0)

# --------------------------------------------------------------------------------------- speculation
_fig("spec_tokens_a07_k4", "tokens", "expected tokens per verification, alpha 0.7, k 4")(
    lambda: float(cost.expected_tokens_per_verification(0.7, 4)))
_fig("spec_speedup_a07_k4", "x", "batch-1 speculative speedup, alpha 0.7, k 4, draft 5% of target per token")(
    lambda: float(cost.speculative_speedup(_one(), 1, 0, 0.7, 4, draft_cost=0.05)))


# ======================================================================================= book chapters 1-3
# Added for the book's first three chapters (two phases, roofline, KV cache). Same anchor deployment.
PROMPT, CHUNK, DECODE_BATCH = 4096, 256, 64  # the long prompt, the prefill chunk and the decode batch of ch. 1


def _double_flops() -> cost.Deployment:
    return cost.Deployment(get_model("llama3-70b"), get_gpu("H100-SXM").scaled(2.0), 1)


def _chunked_step_s(dep: cost.Deployment, batch: int, context: int, chunk: int) -> float:
    from stage5.plots import mixed_step_s  # matplotlib is imported only inside the drawing helpers
    return mixed_step_s(dep, batch, context, chunk)


def chunk_hidden_share(dep: cost.Deployment, batch: int, context: int, chunk: int) -> float:
    """Share of a ``chunk``-token prefill chunk's arithmetic that hides inside a decode step of ``batch`` sequences.

    The step's weight read leaves the arithmetic units idle for (weight reads - decode arithmetic); a chunk riding
    in the step (:func:`stage5.cost.mixed_step`) fills that idle time first, and only the rest of its arithmetic
    lengthens the step. 1 when the whole chunk fits."""
    dec = cost.decode_step(dep, batch, context)
    work = float(cost.mixed_step(dep, batch, context, chunk).compute_s - dec.compute_s)
    idle = max(0.0, float(dec.memory_s - dec.compute_s))
    return 1.0 if work <= 0 else min(1.0, idle / work)


def free_chunk_tokens(dep: cost.Deployment, batch: int, context: int, limit: int = 2**20) -> int:
    """The largest chunk (tokens) whose arithmetic hides entirely inside the decode step's weight read: the mixed
    step stays memory-bound, so the chunk costs only the writing of its keys and values. The step's arithmetic
    grows with the chunk, so the first compute-bound chunk is found by bisection (0 when the decode step alone is
    compute-bound; ``limit`` when even that many tokens fit)."""
    def fits(c: int) -> bool:
        return not bool(cost.mixed_step(dep, batch, context, c).compute_bound)

    if not fits(0):
        return 0
    if fits(limit):
        return limit
    lo, hi = 0, limit  # fits(lo), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


_fig("ttft_ms_4xH100_p4096", "ms", "prefill of one 4,096-token prompt on 4xH100 at the default MFU (TTFT, no queue)")(
    lambda: 1e3 * float(cost.ttft_s(_four(), PROMPT)))
_fig("prefill_intensity_p4096", "FLOP/byte", "prefill intensity of one 4,096-token prompt (weights + KV writes)")(
    lambda: 2 * get_model("llama3-70b").active_params * PROMPT
    / (float(cost.weight_bytes_read(_four(), PROMPT)) + PROMPT * _four().kv_bytes_per_token))
_fig("decode_step_ms_b64_s4096", "ms", "decode step, batch 64 x 4,096-token contexts, 4xH100")(
    lambda: 1e3 * float(cost.tpot_s(_four(), DECODE_BATCH, PROMPT)))
_fig("stall_steps_b64_p4096", "steps", "decode steps' worth of time one unchunked 4,096-token prefill stalls the batch")(
    lambda: float(cost.ttft_s(_four(), PROMPT)) / float(cost.tpot_s(_four(), DECODE_BATCH, PROMPT)))
_fig("chunked_step_ms_b64_s4096_c256", "ms", "decode step of batch 64 carrying a 256-token prefill chunk, 4xH100")(
    lambda: 1e3 * _chunked_step_s(_four(), DECODE_BATCH, PROMPT, CHUNK))
_fig("chunked_ttft_ms_p4096_c256", "ms", "TTFT of the 4,096-token prompt prefilled in 256-token chunks beside batch 64")(
    lambda: 1e3 * (PROMPT // CHUNK) * _chunked_step_s(_four(), DECODE_BATCH, PROMPT, CHUNK))
_fig("chunk_hidden_pct_b64_s4096_c256", "%", "share of a 256-token chunk's arithmetic that hides in the decode step "
     "of batch 64 x 4,096 tokens, 4xH100")(lambda: 100 * chunk_hidden_share(_four(), DECODE_BATCH, PROMPT, CHUNK))
_fig("free_chunk_b64_s4096", "tokens", "largest prefill chunk whose arithmetic hides entirely in that decode step")(
    lambda: float(free_chunk_tokens(_four(), DECODE_BATCH, PROMPT)))
_fig("decode_floor_ms_1xH100_double_flops", "ms", "batch-1 decode floor on a hypothetical H100 with twice the FLOP/s")(
    lambda: 1e3 * cost.decode_floor_s(_double_flops()))
_fig("prefill_speedup_double_flops", "x", "prefill (4,096 tokens, one GPU) speedup from doubling FLOP/s")(
    lambda: float(cost.ttft_s(_one(), PROMPT)) / float(cost.ttft_s(_double_flops(), PROMPT)))
_fig("kv_equals_weights_batch_s4096", "sequences", "batch at which KV reads equal weight reads, 4,096-token contexts")(
    lambda: _four().weight_total_bytes / (WORKED_CONTEXT * _four().kv_bytes_per_token))
_fig("llama3_70b_kv_KiB_per_token_mha", "KiB", "KV per token if Llama 3 70B had one KV head per query head (MHA)")(
    lambda: get_model("llama3-70b").kv_bytes_per_token(2) * get_model("llama3-70b").gqa_ratio / 1024)
_fig("max_seqs_4k_mha", "sequences", "max concurrent 4,096-token sequences on 4xH100 without GQA (MHA)")(
    lambda: int(cost.max_concurrency(cost.Deployment(_mha(), get_gpu("H100-SXM"), 4), 4096)))
_fig("max_seqs_4k_fp8_kv", "sequences", "max concurrent 4,096-token sequences on 4xH100 with an FP8 KV cache")(
    lambda: int(cost.max_concurrency(_four(kv_bytes=1.0), 4096)))
_fig("max_seqs_128k_fp8_kv", "sequences", "max concurrent 131,072-token sequences on 4xH100 with an FP8 KV cache")(
    lambda: int(cost.max_concurrency(_four(kv_bytes=1.0), 131072)))
_fig("window_saving_128k_w4k", "x", "KV saving of a 4,096-token sliding window on a 131,072-token sequence")(
    lambda: float(cost.kv_bytes_per_sequence(_four(), 131072) / cost.kv_bytes_per_sequence(_four(), 4096)))


def _mha():
    from dataclasses import replace
    m = get_model("llama3-70b")
    return replace(m, name="llama3-70b-mha", num_kv_heads=m.num_heads)


# ======================================================================================= chapter 2: additive attention
# The additive attention term, at the lever ranking's well-batched deployment (the largest batch of
# 1,024 + 256-token sequences, at their mean context).
ADDITIVE_PROMPT, ADDITIVE_OUTPUT = 1024, 256


def _source_max() -> cost.Estimate:
    """The source text's step, max(weights + KV, FLOPs), at the simple estimate's MFU and bandwidth: the form the
    course replaced with the additive one (the simple estimate, ``estimate=None``)."""
    return cost.Estimate.only(mfu=cost.DEFAULT_MFU)


def _additive_batch() -> int:
    return int(cost.max_concurrency(_four(), ADDITIVE_PROMPT + ADDITIVE_OUTPUT))


def _additive_step_ms(estimate: cost.Estimate | None) -> float:
    dep = cost.replace(_four(), estimate=estimate)
    return 1e3 * float(cost.tpot_s(dep, _additive_batch(), ADDITIVE_PROMPT + ADDITIVE_OUTPUT / 2))


def _batching_gain(estimate: cost.Estimate | None) -> float:
    from stage5.levers import lever_ranking
    return lever_ranking(prompt=ADDITIVE_PROMPT, output=ADDITIVE_OUTPUT, estimate=estimate)["batching"]


_fig("additive_batch", "sequences", "largest batch of 1,280-token sequences on 4xH100 (the well-batched deployment)")(
    lambda: float(_additive_batch()))
_fig("additive_step_ms_max", "ms", "decode step at that batch, max(weights + KV, FLOPs): the source's formula")(
    lambda: _additive_step_ms(_source_max()))
_fig("additive_step_ms_add", "ms", "the same step, KV + max(weights, FLOPs): the simple estimate's")(
    lambda: _additive_step_ms(None))
_fig("additive_batching_gain_max", "x", "batching lever (naive to largest batch) with the max() step")(
    lambda: _batching_gain(_source_max()))
_fig("additive_batching_gain_add", "x", "batching lever with the additive attention term (the simple estimate)")(
    lambda: _batching_gain(None))


# ======================================================================================= book chapters 4-5
# Batching and PagedAttention, on the anchor deployment. The toy engine's measurements are not here: the
# chapters run the engine during the build and glue what it measured.
BATCH_CONTEXT, BATCH_DEMO, STRAGGLER_BATCH = 1024, 64, 32  # chapter 4's context, example batch, straggler batch
PAGED_PROMPT, PAGED_OUTPUT, PAGED_BLOCK = 1024, 512, 16  # chapter 5's request shape and block size


def _batch_step_s(batch: int) -> float:
    return float(cost.decode_step(_four(), batch, BATCH_CONTEXT).time_s)


_fig("batching_step_ms_b1_s1024", "ms", "decode step at batch 1, 1,024-token context, 4xH100")(
    lambda: 1e3 * _batch_step_s(1))
_fig("batching_step_ms_b64_s1024", "ms", "decode step at batch 64, 1,024-token contexts, 4xH100")(
    lambda: 1e3 * _batch_step_s(BATCH_DEMO))
_fig("batching_throughput_gain_b64_s1024", "x", "decode throughput at batch 64 over batch 1, 1,024-token contexts")(
    lambda: BATCH_DEMO * _batch_step_s(1) / _batch_step_s(BATCH_DEMO))
_fig("batching_tpot_rise_pct_b64_s1024", "%", "TPOT increase from batch 1 to batch 64, 1,024-token contexts")(
    lambda: 100 * (_batch_step_s(BATCH_DEMO) / _batch_step_s(1) - 1))
_fig("batching_weight_GB_per_token_b64", "GB", "weight bytes read per output token at batch 64 (decimal GB)")(
    lambda: get_model("llama3-70b").weight_bytes(2) / GB / BATCH_DEMO)
_fig("batching_compute_bound_batch_s1024", "sequences",
     "smallest batch at which the decode step turns compute-bound, 1,024-token contexts, default MFU")(
    lambda: float(next(b for b in range(1, 4096) if bool(cost.decode_step(_four(), b, BATCH_CONTEXT).compute_bound))))
_fig("straggler_utilisation_pct", "%", "slot utilisation of a batch of 32 with one sequence left running")(
    lambda: 100 / STRAGGLER_BATCH)
_fig("contiguous_seqs_4xH100_cap8192", "sequences",
     "sequences on 4xH100 when each reserves Llama 3 70B's full 8,192-token context contiguously")(
    lambda: int(cost.max_concurrency(_four(), get_model("llama3-70b").max_position_embeddings)))
_fig("paged_seqs_4xH100_s1536", "sequences", "1,536-token sequences on 4xH100 when each holds only what it uses")(
    lambda: int(cost.max_concurrency(_four(), PAGED_PROMPT + PAGED_OUTPUT)))
_fig("paged_concurrency_gain_s1536_cap8192", "x", "paged over contiguous-at-the-cap concurrency, 1,536-token sequences")(
    lambda: int(cost.max_concurrency(_four(), PAGED_PROMPT + PAGED_OUTPUT))
    / int(cost.max_concurrency(_four(), get_model("llama3-70b").max_position_embeddings)))
_fig("paged_last_block_waste_pct_b16_s1536", "%",
     "worst-case paged waste: an empty last block's 15 slots over a 1,536-token sequence, 16-token blocks")(
    lambda: 100 * (PAGED_BLOCK - 1) / (PAGED_PROMPT + PAGED_OUTPUT))


# ======================================================================================= book chapters 6-7
# Prefix caching and speculative decoding, on the anchor deployment (four H100s, BF16).
PREFIX_CASES = {"sys": (2000, 500), "gen": (100, 2000)}  # (prompt, answer): a long shared system prompt; a long answer
PREFIX_CONCURRENCY = 64  # sequences sharing each decode step in chapter 6's comparison
SPEC_ALPHA, SPEC_K = 0.7, 4  # the acceptance rate and draft length of the source's speculation example
SPEC_BATCH, SPEC_CONTEXT = 256, 1280  # chapter 10's loaded server: batch 256, full 1,024 + 256-token sequences


def _prefix_request_s(case: str, hit: float) -> tuple[float, float]:
    from stage5.levers import request_seconds
    prompt, answer = PREFIX_CASES[case]
    return request_seconds(_four(), prompt, answer, PREFIX_CONCURRENCY, prefix_hit=hit)


for _case, (_p, _o) in PREFIX_CASES.items():
    _fig(f"prefix_{_case}_prefill_share_pct", "%",
         f"prefill's share of a request's deployment time, {_p:,}-token prompt, {_o:,}-token answer, batch 64")(
        lambda c=_case: 100 * _prefix_request_s(c, 0.0)[0] / sum(_prefix_request_s(c, 0.0)))
    _fig(f"prefix_{_case}_saving_x", "x",
         f"request cost without / with the whole {_p:,}-token prompt cached, {_o:,}-token answer, batch 64")(
        lambda c=_case: sum(_prefix_request_s(c, 0.0)) / sum(_prefix_request_s(c, 1.0)))
    _fig(f"prefix_{_case}_ttft_ms", "ms", f"TTFT of a {_p:,}-token prompt, uncached, 4xH100")(
        lambda c=_case: 1e3 * _prefix_request_s(c, 0.0)[0])
    _fig(f"prefix_{_case}_ttft_cached_ms", "ms", f"TTFT of a {_p:,}-token prompt found in the prefix cache, 4xH100")(
        lambda c=_case: 1e3 * _prefix_request_s(c, 1.0)[0])


def _spec_breakeven(dep: cost.Deployment, context: int = SPEC_CONTEXT) -> float:
    # searched past what fits, to 4,096 sequences: where the trend would cross, not only whether a full batch does
    b = cost.speculation_breakeven_batch(dep, context, SPEC_ALPHA, SPEC_K, max_batch=4096)
    if b is None:
        raise ValueError(f"speculation still pays at 4,096 sequences of {context:,} tokens: no break-even to print")
    return float(b)


_fig("spec_breakeven_batch_4xH100_s1280", "sequences",
     "first batch at which speculation (alpha 0.7, k 4) is slower than plain decode, 4xH100, 1,280-token contexts")(
    lambda: _spec_breakeven(_four()))
_fig("spec_speedup_4xH100_b1_s1280", "x", "speculative speedup (alpha 0.7, k 4) at batch 1, 1,280-token context, 4xH100")(
    lambda: float(cost.speculative_speedup(_four(), 1, SPEC_CONTEXT, SPEC_ALPHA, SPEC_K)))
_fig("spec_speedup_4xH100_b64_s1280", "x", "speculative speedup (alpha 0.7, k 4) at batch 64, 1,280-token contexts, 4xH100")(
    lambda: float(cost.speculative_speedup(_four(), 64, SPEC_CONTEXT, SPEC_ALPHA, SPEC_K)))

# Speculation on a full server at longer contexts (chapter 7): the break-even batch moves out as the batch that fits
# moves in, so a full batch of long sequences still gains (MagicDec, arXiv 2408.11049, measures the same trend).
SPEC_CONTEXTS = (SPEC_CONTEXT, 4096, 16384)
for _s in SPEC_CONTEXTS:
    _fig(f"spec_full_batch_s{_s}", "sequences", f"most {_s:,}-token sequences that fit on 4xH100 (BF16): the full batch")(
        lambda s=_s: float(cost.max_concurrency(_four(), s)))
    _fig(f"spec_speedup_full_s{_s}", "x",
         f"speculative speedup (alpha 0.7, k 4) at the full batch of {_s:,}-token sequences, 4xH100")(
        lambda s=_s: float(cost.speculative_speedup(_four(), cost.max_concurrency(_four(), s), s, SPEC_ALPHA, SPEC_K)))
_fig("spec_breakeven_batch_4xH100_s4096", "sequences",
     "first batch at which speculation (alpha 0.7, k 4) is slower than plain decode, 4xH100, 4,096-token contexts")(
    lambda: _spec_breakeven(_four(), 4096))


# ======================================================================================= book chapters 8-10
# Quantization, the levers, the simulator. Same anchor deployment; helpers imported lazily.
def _q(weights: str = "bf16", kv: str = "bf16") -> cost.Deployment:
    from stage5.quantization import deployment
    return deployment(cost.ANCHOR_MODEL, cost.ANCHOR_GPU, cost.ANCHOR_GPUS, weights, kv)


def _qgain(case: str, prompt: int, output: int, weights: str = "fp8") -> float:
    from stage5.quantization import end_to_end_gain
    return float(end_to_end_gain(cost.ANCHOR_MODEL, cost.ANCHOR_GPU, cost.ANCHOR_GPUS, prompt, output, QUANT_BATCH,
                                 weights, case))


QUANT_BATCH = 64  # the batch at which chapter 8 compares formats
MIXES = {"chat": (1024, 256), "rag": (4096, 256), "gen": (256, 2048)}  # (prompt, output) tokens

_fig("fp8_weights_GB", "GB", "Llama 3 70B weights in FP8, decimal GB")(lambda: _q("fp8").weight_total_bytes / GB)
_fig("int4_weights_GB", "GB", "Llama 3 70B weights in INT4, decimal GB")(lambda: _q("int4").weight_total_bytes / GB)
_fig("fp8_decode_floor_ms_4xH100", "ms", "batch-1 decode floor on 4xH100 with FP8 weights")(
    lambda: 1e3 * cost.decode_floor_s(_q("fp8")))
_fig("int4_decode_floor_ms_4xH100", "ms", "batch-1 decode floor on 4xH100 with INT4 (W4A16) weights")(
    lambda: 1e3 * cost.decode_floor_s(_q("int4")))
_fig("fp8_intensity_b1", "FLOP/byte", "batch-1 decode intensity with 1-byte weights (2B / bytes per parameter)")(
    lambda: float(cost.decode_intensity(1, 1.0)))
_fig("fp8_w_decode_gain_b125_s4096", "x", "decode-step speedup, FP8 weights only, batch 125 x 4,096 tokens")(
    lambda: float(cost.tpot_s(_q(), WORKED_BATCH, WORKED_CONTEXT) / cost.tpot_s(_q("fp8"), WORKED_BATCH,
                                                                                WORKED_CONTEXT)))
_fig("fp8_wkv_decode_gain_b125_s4096", "x", "decode-step speedup, FP8 weights and KV, batch 125 x 4,096 tokens")(
    lambda: float(cost.tpot_s(_q(), WORKED_BATCH, WORKED_CONTEXT) / cost.tpot_s(_q("fp8", "fp8"), WORKED_BATCH,
                                                                                WORKED_CONTEXT)))
_fig("max_seqs_4k_fp8_w_kv", "sequences", "max concurrent 4,096-token sequences on 4xH100, FP8 weights and KV")(
    lambda: int(cost.max_concurrency(_q("fp8", "fp8"), 4096)))
for _mix, (_p, _o) in MIXES.items():
    for _case, _tag in (("weights", "w"), ("weights+kv", "wkv"), ("weights+kv+batch", "batch")):
        _at = "each format at its largest batch" if _tag == "batch" else f"batch {QUANT_BATCH}"
        _fig(f"fp8_gain_{_tag}_{_mix}", "x",
             f"end-to-end FP8 gain ({_case}), {_p:,}-token prompt, {_o:,}-token output, {_at}")(
            lambda c=_case, p=_p, o=_o: _qgain(c, p, o))


def _ranking() -> dict[str, float]:
    from stage5.levers import lever_ranking
    return lever_ranking()


for _lever in ("batching", "routing", "quantization", "kernels"):
    _fig(f"lever_gain_{_lever}", "x", f"cost-per-token gain of {_lever} (order of magnitude), 70B on 4xH100")(
        lambda name=_lever: _ranking()[name])
_fig("routing_cost_ratio_8b_70b", "x", "decode cost per token, Llama 3 8B on 1 H100 over 70B on 4, both at max batch")(
    lambda: __import__("stage5.routing", fromlist=["cost_ratio"]).cost_ratio(
        cost.ANCHOR_MODEL, cost.ANCHOR_GPU, cost.ANCHOR_GPUS, "llama3-8b", cost.ANCHOR_GPU, 1, 1024, 256))
_fig("spec_speedup_b256_s1280", "x", "speculative speedup (alpha 0.7, k 4) at batch 256, 1,280-token contexts, 4xH100")(
    lambda: float(cost.speculative_speedup(_four(), SPEC_BATCH, SPEC_CONTEXT, SPEC_ALPHA, SPEC_K)))


# ======================================================================================= chapter 9: published measurements
# The floor and the estimate against stage5.published.SERVING_POINTS (stage5.validate).
def _validation() -> dict:
    from stage5.validate import summary
    return summary()


def _floor_ratios() -> list[float]:
    return sorted(p["floor_ratio"] for p in _validation()["points"])


_fig("validate_points", "points", "published latency points the cost model is checked against")(
    lambda: float(len(_validation()["points"])))
_fig("validate_floor_ratio_median", "x", "median floor / measured over the published points")(
    lambda: float(__import__("numpy").median(_floor_ratios())))
_fig("validate_floor_ratio_min", "x", "lowest floor / measured over the published points")(
    lambda: _floor_ratios()[0])
_fig("validate_floor_ratio_max", "x", "highest floor / measured over the published points")(
    lambda: _floor_ratios()[-1])
_fig("validate_estimate_within_pct", "%", "share of published points the estimate matches within 0.8-1.25x")(
    lambda: 100 * _validation()["estimate_within_25pct"])


# ======================================================================================= published figures (chs 5, 7-9)
# Quoted, not computed: each value and its source are in stage5.published. A range (low, high) becomes two
# figures, "<id>_lo" and "<id>_hi".
from stage5 import published  # noqa: E402

for _pid, ((_lo, _hi), _unit, _desc) in published.RANGES.items():
    _fig(f"{_pid}_lo", _unit, f"{_desc}, low end (published)")(lambda v=_lo: v)
    _fig(f"{_pid}_hi", _unit, f"{_desc}, high end (published)")(lambda v=_hi: v)
for _pid, (_value, _unit, _desc) in published.SINGLE.items():
    _fig(_pid, _unit, f"{_desc} (published)")(lambda v=_value: v)


@cache
def all_figures() -> dict[str, Figure]:
    """Every named figure, computed once per process."""
    return {fid: Figure(fid, float(fn()), unit, desc) for fid, unit, desc, fn in _MAKERS}


def figure(fid: str) -> float:
    """The value of one named figure; unknown ids list close matches."""
    from stage5.names import resolve
    figs = all_figures()
    return figs[resolve(fid, figs, "figure")].value


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m stage5 figures", description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print {id: value} as JSON")
    args = parser.parse_args(argv)
    figs = all_figures()
    if args.json:
        print(dumps({f.id: f.value for f in figs.values()}, indent=1))
        return 0
    width = max(len(f) for f in figs)
    for f in figs.values():
        print(f"{f.id:<{width}}  {f.value:>16,.4g}  {f.unit:<10}  {f.description}")
    return 0
