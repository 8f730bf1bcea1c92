"""Quantization in the cost model: number formats, and what each of three ways of using them gains end to end.

A format sets two things: the bytes each weight (or each cached key/value element) occupies, and whether the
matrix multiplications may run at the chip's low-precision rate. The lookup tables (input embedding, output head)
stay at 16 bits whatever the format, as most engines keep them (:attr:`stage5.cost.Deployment.table_bytes`; an engine
that quantizes them too sets :attr:`stage5.cost.Deployment.head_bytes`). Weight-only formats (W8A16, W4A16) keep the
activations in 16 bits, so their matmuls run at the BF16 rate: they save bytes, not FLOPs. W8A8 formats (FP8,
INT8) quantize the activations too, and on a chip with FP8 tensor cores the cost model grants them its FP8
rate at the same MFU (an estimate that flatters them: low-precision kernels rarely reach the same MFU).

The three cases this module separates (``CASES``):

``"weights"``
    weights quantized, KV cache left in BF16, same batch;
``"weights+kv"``
    weights and KV cache both quantized, same batch;
``"weights+kv+batch"``
    as the second, and the memory this frees spent on the largest batch that now fits; the BF16 baseline
    runs at *its* largest batch too, so the gain is not inflated by an under-batched baseline.

Gains are ratios of :func:`stage5.cost.request_gpu_seconds` (prefill plus the request's share of decode), so
they are throughput ratios of the whole deployment. The cost model has no scheduling or sampling overhead;
such fixed costs would not shrink with the bytes, so every gain here is an upper bound.

Why W8A8 FP8 with an FP8 cache gains just under 2x here: every term the simple estimate has (weight reads, cache
reads, matmul FLOPs at the FP8 rate, for prefill and decode alike) halves, except the reads of the lookup tables,
which stay at 16 bits (3% of Llama 3 70B's weights, 13% of Llama 3 8B's). What keeps real end-to-end gains further
below 2x is what the simple estimate leaves out: scheduling, sampling and detokenising, attention arithmetic that
stays in 16 bits, communication. ``end_to_end_gain(estimate=cost.Estimate())`` prices the last of these (the
tensor-parallel all-reduce moves 16-bit activations whatever the format).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stage5 import cost, inputs
from stage5.hardware import Hardware, get_gpu
from stage5.models import ModelConfig, get_model


@dataclass(frozen=True)
class WeightFormat:
    """A weight format: bits per weight, its scales, and whether the matmuls run at the low-precision rate.

    Integer formats with group scales store one scale of ``scale_bytes`` per ``group_size`` weights (0: no
    per-group scale; per-tensor or per-channel scales are a negligible share of the bytes; a format that stores a
    zero point per group too counts it in ``scale_bytes``), so a weight costs
    bits / 8 + scale_bytes / group_size bytes: 4-bit weights with FP16 scales per 128 weights take 0.515625 bytes,
    per 32 weights 0.5625.
    """

    key: str
    label: str
    bits: int
    matmul: str  # the precision its matmuls run at, a key of stage5.hardware.MATMULS
    group_size: int = 0
    scale_bytes: float = 0.0

    @property
    def low_precision_matmul(self) -> bool:
        """Whether the matmuls run below 16 bits (W8A8, W4A4), at a low-precision tensor-core rate."""
        return self.matmul != "16-bit"

    @property
    def bytes(self) -> float:
        """Bytes per weight, scales included."""
        return self.bits / 8 + (self.scale_bytes / self.group_size if self.group_size else 0.0)


WEIGHT_FORMATS: dict[str, WeightFormat] = {f.key: f for f in (
    WeightFormat("bf16", "BF16", 16, "16-bit"),
    WeightFormat("fp8", "FP8 (W8A8-FP)", 8, "fp8"),
    WeightFormat("int8", "INT8 (W8A8-INT)", 8, "int8"),
    WeightFormat("w8a16", "8-bit weights only (W8A16)", 8, "16-bit"),
    # GPTQ and AWQ checkpoints store 4-bit weights with one FP16 scale per group of 128 weights along the input
    # dimension (GPTQ, Frantar et al. 2023, and AWQ, Lin et al. 2024, both evaluate group size 128; it is the
    # default of AutoAWQ's and AutoGPTQ's quantize configs). Zero points, where a checkpoint keeps them, add
    # 4 bits per group more (0.4% here) and are left out.
    WeightFormat("int4", "INT4 weights only (W4A16, FP16 scale per 128)", 4, "16-bit", group_size=128,
                 scale_bytes=2.0),
    WeightFormat("int4-g32", "INT4 weights only (W4A16, FP16 scale per 32)", 4, "16-bit", group_size=32,
                 scale_bytes=2.0),
    # gpt-fast's int4 (github.com/pytorch-labs/gpt-fast quantize.py, get_group_qparams and pack_scales_and_zeros): a
    # BF16 scale and a BF16 zero point per group, 4 bytes per 32 weights in the README's "4-bit (G=32)" rows, read
    # by PyTorch's tinygemm kernel (torch.ops.aten._weight_int4pack_mm): 0.625 bytes per weight.
    WeightFormat("int4-g32-zp", "INT4 weights only (W4A16, BF16 scale and zero per 32)", 4, "16-bit", group_size=32,
                 scale_bytes=4.0),
    # The 4-bit floating-point formats, weights and activations both (W4A4), multiplied by FP4 tensor cores where
    # the chip has them (Blackwell; elsewhere engines dequantize to 16 bits, and the floor may use FP8 tensor cores,
    # which hold E2M1 values exactly: stage5.hardware.EXACT_IN). Both store E2M1 values (1 sign, 2 exponent, 1
    # mantissa bit) with a scale per block:
    # NVFP4: one FP8 (E4M3) scale per 16 values, and one FP32 scale per tensor (negligible here), so 4 + 8 / 16 = 4.5
    # bits (NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference", NVIDIA Technical Blog,
    # June 2025: "micro-block scaling" of 16 values with an E4M3 scale, plus a second-level FP32 per-tensor scale).
    WeightFormat("nvfp4", "NVFP4 (W4A4, E2M1 with an E4M3 scale per 16)", 4, "fp4", group_size=16, scale_bytes=1.0),
    # MXFP4: one shared E8M0 scale (8 bits, a power of two) per block of 32 values, so 4 + 8 / 32 = 4.25 bits (OCP
    # Microscaling Formats (MX) Specification v1.0, 2023, section 5: block size k = 32, scale E8M0, element E2M1).
    WeightFormat("mxfp4", "MXFP4 (W4A4, E2M1 with an E8M0 scale per 32)", 4, "fp4", group_size=32, scale_bytes=1.0),
)}

KV_FORMATS: dict[str, float] = {"bf16": 2.0, "fp8": 1.0, "int8": 1.0}

CASES = ("weights", "weights+kv", "weights+kv+batch")

# The study's findings, quoted with its citation key (Kurtic et al., arXiv:2411.02355). Not computed.
STUDY = "kurtic2024bf16"
STUDY_FINDINGS: dict[str, str] = {
    "fp8": "effectively lossless across model scales",
    "int8": "well-tuned INT8 loses 1-3% accuracy",
    "int4": "competitive with the 8-bit formats (weights only, activations stay 16-bit)",
}


def weight_format(key: str) -> WeightFormat:
    if not isinstance(key, str):
        raise inputs.InputError(f"weight format must be a name, one of {', '.join(WEIGHT_FORMATS)}; got {key!r} "
                                f"({type(key).__name__})")
    try:
        return WEIGHT_FORMATS[key.lower()]
    except KeyError:
        raise ValueError(f"unknown weight format {key!r}; accepted: {', '.join(WEIGHT_FORMATS)}") from None


def table_16bit_extra_bytes(model: str | ModelConfig, weights: str) -> float:
    """Bytes one vocabulary x hidden table (the output head, or the input embedding) takes at 16 bits beyond what it
    would at ``weights``: what keeping it in 16 bits costs. Engines keep these tables in 16 bits (vLLM's FP8 mode
    quantizes the linear layers but the output head, GPTQ and AWQ checkpoints leave the head alone: book chapter 8),
    and so does the cost model (:attr:`stage5.cost.Deployment.table_bytes`)."""
    cfg = get_model(model)
    return cfg.vocab_size * cfg.hidden_size * (weight_format("bf16").bytes - weight_format(weights).bytes)


def kv_format(key: str) -> float:
    if not isinstance(key, str):
        raise inputs.InputError(f"KV format must be a name, one of {', '.join(KV_FORMATS)}; got {key!r} "
                                f"({type(key).__name__})")
    try:
        return KV_FORMATS[key.lower()]
    except KeyError:
        raise ValueError(f"unknown KV format {key!r}; accepted: {', '.join(KV_FORMATS)}") from None


def gpu_for(gpu: str | Hardware, weights: str) -> Hardware:
    """The accelerator as the format sees it: weight-only formats lose the low-precision matmul rates.

    (:meth:`Hardware.flops` grants the FP8 rate to every 1-byte width; a W8A16 kernel dequantizes to BF16
    and multiplies at the BF16 rate, so those rates are removed here.)
    """
    hw = get_gpu(gpu)
    return hw if weight_format(weights).low_precision_matmul else hw.without_low_precision()


def deployment(model: str | ModelConfig, gpu: str | Hardware, num_gpus: int = 1, weights: str = "bf16",
               kv: str = "bf16", **kw: float) -> cost.Deployment:
    """A :class:`stage5.cost.Deployment` with the weight and KV formats named as strings."""
    fmt = weight_format(weights)
    return cost.Deployment(get_model(model), gpu_for(gpu, weights), num_gpus, weight_bytes=fmt.bytes,
                           kv_bytes=kv_format(kv), matmul=fmt.matmul, **kw)


def case_deployments(model: str | ModelConfig, gpu: str | Hardware, num_gpus: int, weights: str = "fp8",
                     case: str = "weights", kv: str = "fp8",
                     estimate: cost.Estimate | None = None) -> tuple[cost.Deployment, cost.Deployment]:
    """(BF16 baseline, quantized deployment) for one of :data:`CASES`; ``kv`` is used by the last two.
    ``estimate``: price both in estimate mode with these terms (default: the simple estimate)."""
    if not isinstance(case, str) or case not in CASES:
        raise ValueError(f"unknown case {case!r}; accepted: {', '.join(CASES)}")
    base = deployment(model, gpu, num_gpus, estimate=estimate)
    new = deployment(model, gpu, num_gpus, weights, "bf16" if case == "weights" else kv, estimate=estimate)
    return base, new


def end_to_end_gain(model: str | ModelConfig, gpu: str | Hardware, num_gpus: int, prompt: cost.ArrayLike,
                    output: cost.ArrayLike, batch: cost.ArrayLike, weights: str = "fp8", case: str = "weights",
                    kv: str = "fp8", estimate: cost.Estimate | None = None) -> np.ndarray:
    """Throughput gain of a quantized deployment over BF16, per request, prefill included.

    ``prompt``, ``output`` and ``batch`` broadcast. In the batch case each deployment runs its own largest
    batch whose KV cache fits at the full sequence length (prompt + output), whatever ``batch`` says: the fair
    comparison, since a BF16 baseline held below its own ceiling makes any format look better. Where
    ``batch`` does not fit the BF16 baseline the result is NaN in an array (a hole in a plotted sweep); a
    single point that does not fit raises :class:`~stage5.cost.InfeasibleDeployment` instead.

    ``estimate``: the gain in estimate mode (``cost.Estimate()`` for the default terms), where costs such as
    the all-reduces do not shrink with the format.
    """
    inputs.gpus(num_gpus)
    for value, name in ((prompt, "prompt"), (output, "output"), (batch, "batch")):
        inputs.counts(value, name)
    base, new = case_deployments(model, gpu, num_gpus, weights, case, kv, estimate)
    p, o, b = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (prompt, output, batch)))
    seq = p + o
    fits = b <= cost.max_concurrency(base, seq)
    b_base = b_new = b
    if case == "weights+kv+batch":
        b_base = np.maximum(1, cost.max_concurrency(base, seq)).astype(float)
        b_new = np.maximum(1, cost.max_concurrency(new, seq)).astype(float)
    if gain_is_scalar := not np.ndim(fits):
        if not fits:  # one point that does not fit: say so, rather than return a NaN the caller may not check
            raise cost.InfeasibleDeployment(
                f"batch {float(b):,.0f} at {float(seq):,.0f} tokens does not fit the BF16 baseline's KV cache (at most "
                f"{int(cost.max_concurrency(base, seq)):,} sequences); accepted: a batch that fits, or an array "
                "of batches (then the points that do not fit are NaN)")
    gain = cost.request_gpu_seconds(base, p, o, b_base) / cost.request_gpu_seconds(new, p, o, b_new)
    return np.where(fits, gain, np.nan) if not gain_is_scalar else gain


def decode_step_gain(model: str | ModelConfig, gpu: str | Hardware, num_gpus: int, batch: cost.ArrayLike,
                     context: cost.ArrayLike, weights: str = "fp8", case: str = "weights",
                     kv: str = "fp8", estimate: cost.Estimate | None = None) -> np.ndarray:
    """Decode-step speedup alone (no prefill), at the same batch: the mechanism without the dilution.
    ``estimate``: in estimate mode (default: the simple estimate)."""
    inputs.gpus(num_gpus)
    inputs.counts(batch, "batch")
    inputs.counts(context, "context", minimum=0.0)
    if case == "weights+kv+batch":
        raise ValueError("decode_step_gain compares steps at the same batch; use end_to_end_gain for that case")
    base, new = case_deployments(model, gpu, num_gpus, weights, case, kv, estimate)
    return cost.tpot_s(base, batch, context) / cost.tpot_s(new, batch, context)


# Every public function above refuses a wrong record (a string where a Deployment goes) in one sentence.
inputs.check_object_arguments(globals())
