"""Quantization: formats, the three cases, and the figures chapter 8 prints."""

import numpy as np
import pytest

from stage5 import cost
from stage5.figures import figure
from stage5.quantization import (
    CASES,
    WEIGHT_FORMATS,
    decode_step_gain,
    deployment,
    end_to_end_gain,
    gpu_for,
    weight_format,
)

ARGS = ("llama3-70b", "H100-SXM", 4)


def test_fp8_halves_the_batch1_floor_but_the_tables_and_doubles_intensity():
    from stage5.models import get_model
    m = get_model(ARGS[0])
    body, tables = m.num_params - m.table_params, m.table_params  # the tables stay at 16 bits (2 bytes)
    bf16 = figure("decode_floor_ms_4xH100")
    assert figure("fp8_decode_floor_ms_4xH100") == pytest.approx(bf16 * (body * 1.0 + tables * 2) / (m.num_params * 2))
    # 4-bit weights carry an FP16 scale per 128 weights: 0.515625 bytes a weight, not a quarter of BF16's 2
    assert figure("int4_decode_floor_ms_4xH100") == pytest.approx(
        bf16 * (body * (0.5 + 2 / 128) + tables * 2) / (m.num_params * 2))
    assert figure("fp8_decode_floor_ms_4xH100") > bf16 / 2  # the 16-bit tables keep it above half
    assert float(cost.decode_intensity(7, 1.0)) == 2 * float(cost.decode_intensity(7, 2.0))


def test_weights_only_gain_is_set_by_kv_share_in_the_worked_example():
    w, kv, w8 = figure("llama3_70b_weights_GB"), figure("kv_traffic_GB_b125_s4096"), figure("fp8_weights_GB")
    assert figure("fp8_w_decode_gain_b125_s4096") == pytest.approx((w + kv) / (w8 + kv), rel=1e-3)
    # weights and cache both in FP8: every byte halves but the 16-bit tables', so just under 2x
    assert figure("fp8_wkv_decode_gain_b125_s4096") == pytest.approx((w + kv) / (w8 + kv / 2), rel=1e-3)
    assert 1.9 < figure("fp8_wkv_decode_gain_b125_s4096") < 2.0


def test_weight_only_formats_keep_the_bf16_matmul_rate():
    assert gpu_for("H100-SXM", "int4").flops(0.5) == gpu_for("H100-SXM", "bf16").flops_bf16
    assert gpu_for("H100-SXM", "fp8").flops(1.0) == 2 * gpu_for("H100-SXM", "fp8").flops_bf16
    w8a16 = deployment(*ARGS, "w8a16")
    assert float(cost.ttft_s(w8a16, 4096)) == pytest.approx(float(cost.ttft_s(deployment(*ARGS), 4096)))


def test_cases_are_ordered_and_bounded():
    p, o, b = np.array([256, 1024, 4096]), np.array([2048, 256, 256]), 64
    w, wkv, batch = (end_to_end_gain(*ARGS, p, o, b, "fp8", case) for case in CASES)
    assert np.all(w < 2) and np.all(w > 1)
    assert np.all(w <= wkv + 1e-12) and np.all(wkv <= 2 + 1e-12)
    assert np.all(batch >= wkv - 1e-12)
    only = end_to_end_gain(*ARGS, p, o, b, "w8a16", "weights+kv")
    assert np.all(only < 2)  # prefill does not shrink with weight-only formats


def test_infeasible_baseline_batch_is_nan_and_bad_inputs_raise():
    # in a sweep the point that does not fit is a hole; alone, it is refused with the reason (not a bare NaN)
    gains = end_to_end_gain(*ARGS, 4096, 256, np.array([8, 10_000]), "fp8", "weights")
    assert np.isfinite(gains[0]) and np.isnan(gains[1])
    with pytest.raises(ValueError, match="does not fit the BF16 baseline"):
        end_to_end_gain(*ARGS, 4096, 256, 10_000, "fp8", "weights")
    with pytest.raises(ValueError):
        weight_format("fp3")
    with pytest.raises(ValueError):
        end_to_end_gain(*ARGS, 1024, 256, 8, "fp8", "everything")
    with pytest.raises(ValueError):
        decode_step_gain(*ARGS, 8, 1024, case="weights+kv+batch")


def test_fp8_kv_and_weights_raise_max_concurrency():
    assert figure("max_seqs_4k_fp8_w_kv") > 2 * figure("max_seqs_4k")


def test_larger_batch_case_puts_each_format_at_its_own_ceiling():
    """The third case must not compare FP8 at its ceiling with BF16 held below its own."""
    p, o = np.array([256, 1024, 4096]), np.array([2048, 256, 256])
    bf16, fp8 = deployment(*ARGS), deployment(*ARGS, "fp8", "fp8")
    fair = (cost.request_gpu_seconds(bf16, p, o, cost.max_concurrency(bf16, p + o))
            / cost.request_gpu_seconds(fp8, p, o, cost.max_concurrency(fp8, p + o)))
    for b in (1, 16, 64):
        assert end_to_end_gain(*ARGS, p, o, b, "fp8", "weights+kv+batch") == pytest.approx(fair)
    held = cost.request_gpu_seconds(bf16, p, o, 16) / cost.request_gpu_seconds(fp8, p, o, cost.max_concurrency(fp8, p + o))
    assert np.all(held > fair)  # what the old comparison reported


def test_ridge_moves_only_for_formats_with_a_low_precision_matmul():
    h100 = "H100-SXM"
    assert cost.ridge_point(gpu_for(h100, "fp8"), 1.0) == pytest.approx(2 * cost.ridge_point(gpu_for(h100, "bf16")))
    for weight_only in ("w8a16", "int4"):
        fmt = weight_format(weight_only)
        assert cost.ridge_point(gpu_for(h100, weight_only), fmt.bytes) == cost.ridge_point(gpu_for(h100, "bf16"))


def test_fp8_weights_and_cache_stay_below_two_in_estimate_mode():
    """The simple estimate halves every term it has under W8A8 FP8 with an FP8 cache but the 16-bit tables' reads:
    with the tables in FP8 too it gains exactly 2x, with them at 16 bits a little less. Estimate mode's
    tensor-parallel all-reduce moves 16-bit activations whatever the format, so there the gain is lower still, and on
    one GPU (no all-reduce) it is not."""
    p, o, b = np.array([256, 1024, 4096]), np.array([2048, 256, 256]), 64
    every = deployment(*ARGS, "fp8", "fp8", head_bytes=1.0)
    assert np.all(cost.request_gpu_seconds(deployment(*ARGS), p, o, b) / cost.request_gpu_seconds(every, p, o, b)
                  == pytest.approx(2.0))
    simple = end_to_end_gain(*ARGS, p, o, b, "fp8", "weights+kv")
    assert np.all(simple < 2.0) and np.all(simple > 1.95)
    estimated = end_to_end_gain(*ARGS, p, o, b, "fp8", "weights+kv", estimate=cost.Estimate())
    assert np.all(estimated < 1.95) and np.all(estimated > 1.0)
    allreduce = end_to_end_gain(*ARGS, p, o, b, "fp8", "weights+kv", estimate=cost.Estimate.only("allreduce"))
    assert np.all(allreduce < 2.0)
    # (prefill's attention named too: the simple estimate counts it since issue 52, Estimate.only() does not)
    one_gpu = end_to_end_gain("llama3-8b", ARGS[1], 1, 1024, 256, 16, "fp8", "weights+kv",
                              estimate=cost.Estimate.only("allreduce", "prefill_attention"))
    assert float(one_gpu) == pytest.approx(float(end_to_end_gain("llama3-8b", ARGS[1], 1, 1024, 256, 16, "fp8",
                                                                 "weights+kv")))



# ------------------------------------------------------------------------------------------ inside the 8 bits
def test_fp8_encodings_match_torch():
    """E4M3 and E5M2 built from their bit layouts agree with torch's float8 types, limits and rounding alike."""
    torch = pytest.importorskip("torch")
    from stage5.quant_numerics import E4M3, E5M2, quantize_float

    x = np.random.default_rng(1).standard_normal((32, 128)) * np.geomspace(1e-4, 1e3, 128)
    for fmt, dtype in ((E4M3, torch.float8_e4m3fn), (E5M2, torch.float8_e5m2)):
        info = torch.finfo(dtype)
        assert (fmt.max, fmt.min_normal, fmt.relative_step) == (info.max, info.tiny, info.eps)
        s = np.abs(x).max() / fmt.max
        ours = quantize_float(x, fmt)
        theirs = (torch.tensor(x / s).to(dtype).double() * s).numpy()
        assert np.array_equal(ours, theirs), fmt.name
    assert E4M3.max == 448 and E5M2.max == 57344


def test_integer_quantization_rounds_within_half_a_step_and_groups_help():
    from stage5.quant_numerics import quantize, relative_error, scale_bits_per_weight

    w = np.random.default_rng(2).standard_normal((64, 256))
    for gran in ("tensor", "row", 128, 32):
        q = quantize(w, 4, gran)
        shape = {"tensor": (1, 1, -1), "row": (64, 1, -1)}.get(gran, (64, -1, gran))
        view = w.reshape(shape)
        step = np.abs(view).max(axis=-1, keepdims=True) / 7
        assert np.all(np.abs((w - q).reshape(view.shape)) <= step / 2 + 1e-12), gran
        assert len(np.unique(np.round(q.reshape(view.shape) / step))) <= 15  # 4 bits, symmetric: -7..7
    errors = [relative_error(w, quantize(w, 4, g)) for g in ("tensor", "row", 128, 32)]
    assert errors == sorted(errors, reverse=True) and errors[-1] < errors[0]
    assert scale_bits_per_weight(128) == 16 / 128


def test_outlier_channels_ruin_per_tensor_int8_and_smoothing_or_fp8_repairs_it():
    """Chapter 8's demonstration: a few loud channels crush the others under one INT8 scale; a scale per token
    only partly helps; SmoothQuant's migration keeps the product exact and its W8A8 error small; E4M3 keeps
    the quiet channels' relative error whatever the outliers."""
    from stage5.quant_numerics import E4M3, quantize, quantize_float, relative_error, smooth

    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 1024))
    w = rng.standard_normal((512, 1024)) * 0.02
    loud = x.copy()
    idx = rng.choice(1024, 4, replace=False)
    loud[:, idx] *= 50
    quiet = np.ones(1024, bool)
    quiet[idx] = False
    clean = relative_error(x, quantize(x, 8))
    crushed = relative_error(loud[:, quiet], quantize(loud, 8)[:, quiet])
    per_token = relative_error(loud[:, quiet], quantize(loud, 8, "row")[:, quiet])
    assert crushed > 10 * clean and clean < per_token < crushed
    xs, ws = smooth(loud, w, 0.5)
    assert np.allclose(xs @ ws.T, loud @ w.T)
    y = loud @ w.T
    naive = relative_error(y, quantize(loud, 8, "row") @ quantize(w, 8, "row").T)
    smoothed = relative_error(y, quantize(xs, 8, "row") @ quantize(ws, 8, "row").T)
    assert smoothed < naive / 2
    fp8_quiet = relative_error(loud[:, quiet], quantize_float(loud, E4M3)[:, quiet])
    assert fp8_quiet == pytest.approx(relative_error(x, quantize_float(x, E4M3)), rel=0.1)


@pytest.mark.parametrize("call", ["bits", "granularity", "group", "nan", "alpha"])
def test_quantization_numerics_refuse_bad_input(call):
    from stage5 import quant_numerics as qn

    w = np.ones((4, 8))
    bad = {"bits": lambda: qn.quantize(w, 1), "granularity": lambda: qn.quantize(w, 8, "column"),
           "group": lambda: qn.quantize(w, 8, 3), "nan": lambda: qn.quantize(w * np.nan, 8),
           "alpha": lambda: qn.smooth(w, w, 1.5)}[call]
    with pytest.raises(ValueError) as err:
        bad()
    assert "\n" not in str(err.value)


def test_a_16bit_vocabulary_table_costs_its_size_times_the_bytes_the_format_saves():
    from stage5.models import get_model
    from stage5.quantization import table_16bit_extra_bytes

    m = get_model("llama3-70b")
    table = m.vocab_size * m.hidden_size
    assert table_16bit_extra_bytes("llama3-70b", "fp8") == table
    assert table_16bit_extra_bytes(m, "int4") == pytest.approx(table * (2 - 0.515625))
    assert table_16bit_extra_bytes(m, "bf16") == 0
    with pytest.raises(ValueError, match="unknown weight format"):
        table_16bit_extra_bytes(m, "fp6")


def test_the_vocabulary_tables_stay_at_16_bits_in_every_format():
    from stage5.models import get_model

    m = get_model("llama3-70b")
    tables = 2 * m.vocab_size * m.hidden_size  # untied: embedding and head
    assert m.table_params == tables
    for key, fmt in WEIGHT_FORMATS.items():
        dep = deployment(m, "H100", 4, key)
        assert dep.table_bytes == 2.0
        assert dep.weight_total_bytes == pytest.approx((m.num_params - tables) * fmt.bytes + tables * 2.0), key
        # the decode floor reads every weight, the tables at 16 bits
        assert cost.decode_floor_s(dep) == pytest.approx(dep.weight_total_bytes / dep.bandwidth), key
    # a step that looks up embedding rows reads the head whole and only the rows it needs
    fp8 = cost.floor_deployment(deployment(m, "H100", 4, "fp8"))
    read = cost.weight_bytes_read(fp8, 1)
    assert read == pytest.approx((m.num_params - tables) * 1.0 + (m.vocab_size + 1) * m.hidden_size * 2.0)
    # a tied table is one table, and an explicit head_bytes overrides the default
    tied = get_model("llama3.2-1b")
    assert tied.table_params == tied.vocab_size * tied.hidden_size
    assert deployment(tied, "H100", 1, "fp8", head_bytes=1.0).weight_total_bytes == pytest.approx(tied.num_params)


def test_a_body_wider_than_16_bits_keeps_its_tables_at_its_own_width():
    dep = cost.Deployment.of("llama3-8b", "H100", weight_bytes=4.0)
    assert dep.table_bytes == 4.0 and dep.weight_total_bytes == dep.model.num_params * 4.0
    with pytest.raises(ValueError, match="head_bytes"):
        cost.Deployment.of("llama3-8b", "H100", head_bytes=0.0)


def test_fp4_formats_price_their_block_scales():
    # NVFP4: E2M1 with an E4M3 scale per 16 values (4.5 bits); MXFP4: an E8M0 scale per 32 (4.25 bits, OCP MX v1.0)
    assert weight_format("nvfp4").bytes == 0.5625
    assert weight_format("mxfp4").bytes == 0.53125
    for key in ("nvfp4", "mxfp4"):
        b200, h100 = deployment("llama3-70b", "B200", 1, key), deployment("llama3-70b", "H100", 2, key)
        assert cost.tensor_format(b200) == ("fp4/fp32", 9000e12)  # Blackwell multiplies FP4 directly
        assert cost.tensor_format(h100) == ("bf16/fp32", 989.5e12)  # Hopper dequantizes to 16 bits...
        assert cost.tensor_format(cost.floor_deployment(h100)) == ("fp8/fp32", 1979e12)  # ...or at best to FP8
