"""Hardware registry and the calibration of this machine."""

import time

import pytest

from stage5.calibrate import measure_bandwidth, measure_matmul_flops, this_machine
from stage5.hardware import GPUS, GiB, get_gpu
from stage5.names import UnknownNameError

REQUIRED = ["H100-SXM", "H100-PCIe", "H200", "A100-40GB", "A100-80GB", "B200", "L40S", "L4", "MI300X", "RTX-4090"]


def test_registry_has_the_required_accelerators():
    assert set(REQUIRED) <= set(GPUS)


def test_h100_anchor_figures():
    h = get_gpu("H100")
    assert h.name == "H100-SXM"
    assert h.flops_bf16 == 989.5e12
    assert h.bandwidth == 3.35e12
    assert h.memory_bytes == 80 * GiB


def test_dense_fp8_is_twice_bf16_where_supported():
    # Catches a sparse figure typed as dense (a factor 2). The L40S datasheet itself prints 362.05 BF16 against
    # 733 FP8 (2.02x), so the tolerance allows datasheet rounding but not a factor of 2.
    for g in GPUS.values():
        if g.flops_fp8 is not None:
            assert g.flops_fp8 == pytest.approx(2 * g.flops_bf16, rel=0.025), g.name


# Each registry GPU's tensor table as its cited datasheet or whitepaper prints it, in TFLOPS (TOPS for INT8):
# (figure, printed with sparsity?). The registry must hold the dense rate: the printed figure, halved where it is a
# sparsity figure. Accumulation is spelled out where the source separates it (the Ada whitepaper for the RTX 4090);
# a single printed FP16 or FP8 figure holds for both accumulations. None: the chip lacks the format.
PRINTED = {
    "H100-SXM": {"fp16": (1979, True), "bf16": (1979, True), "fp8": (3958, True), "int8": (3958, True)},
    "H100-PCIe": {"fp16": (1513, True), "bf16": (1513, True), "fp8": (3026, True), "int8": (3026, True)},
    "H100-NVL": {"fp16": (1671, True), "bf16": (1671, True), "fp8": (3341, True), "int8": (3341, True)},
    "H200": {"fp16": (1979, True), "bf16": (1979, True), "fp8": (3958, True), "int8": (3958, True)},
    "GH200": {"fp16": (1979, True), "bf16": (1979, True), "fp8": (3958, True), "int8": (3958, True)},
    "A100-40GB": {"fp16": (312, False), "bf16": (312, False), "fp8": None, "int8": (624, False)},
    "A100-80GB": {"fp16": (312, False), "bf16": (312, False), "fp8": None, "int8": (624, False)},
    "B200": {"fp16": (4500, True), "bf16": (4500, True), "fp8": (9000, True), "int8": (9000, True),
             "fp4": (18000, True)},
    # GB200 NVL72: the rack's table over its 72 GPUs (360, 720, 720 and 1,440 PFLOPS with sparsity)
    "GB200-NVL72": {"fp16": (5000, True), "bf16": (5000, True), "fp8": (10000, True), "int8": (10000, True),
                    "fp4": (20000, True)},
    "L40S": {"fp16": (362.05, False), "bf16": (362.05, False), "fp8": (1466, True), "int8": (1466, True)},
    "L4": {"fp16": (242, True), "bf16": (242, True), "fp8": (485, True), "int8": (485, True)},
    "MI300X": {"fp16": (2614.8, True), "bf16": (2614.8, True), "fp8": (5229.8, True), "int8": (5229.8, True)},
    "MI325X": {"fp16": (1307.4, False), "bf16": (1307.4, False), "fp8": (2614.9, False), "int8": (2614.9, False)},
    "MI250X": {"fp16": (383, False), "bf16": (383, False), "fp8": None, "int8": (383, False)},
    "RTX-4090": {"fp16/fp16": (660.6, True), "fp16/fp32": (330.4, True), "bf16": (330.4, True),
                 "fp8/fp16": (1321.2, True), "fp8/fp32": (660.6, True), "int8": (1321.2, True)},
    "T4": {"fp16": (65, False), "bf16": None, "fp8": None, "int8": (130, False)},
    # A10G: the A10 datasheet's 125 (250 with sparsity) as a bound for FP32 accumulation, and twice it for FP16
    # accumulation and twice that for INT8 (the GA102 whitepaper's GeForce ratios), all upper bounds.
    "A10G": {"fp16/fp16": (250, False), "fp16/fp32": (250, True), "bf16": (250, True), "fp8": None,
             "int8": (500, False)},
}
_EXPAND = {"fp16": ("fp16/fp16", "fp16/fp32"), "bf16": ("bf16/fp32",), "fp8": ("fp8/fp16", "fp8/fp32"),
           "int8": ("int8/int32",), "fp4": ("fp4/fp32",)}


@pytest.mark.parametrize("name", sorted(PRINTED))
def test_peak_table_matches_the_cited_figure(name):
    g = get_gpu(name)
    expected = {}
    for key, printed in PRINTED[name].items():
        for fmt in _EXPAND.get(key, (key,)):
            expected[fmt] = None if printed is None else printed[0] / (2 if printed[1] else 1) * 1e12
    expected.setdefault("fp4/fp32", None)  # only Blackwell has FP4 tensor cores here
    for fmt, rate in expected.items():
        got = g.peak(fmt)
        if rate is None:
            assert got is None, f"{name} should have no {fmt} rate, has {got}"
        else:
            assert got == pytest.approx(rate, rel=2e-4), (name, fmt)
    assert set(dict(g.peaks)) == {f for f, r in expected.items() if r is not None}


def test_every_registry_gpu_has_a_printed_table():
    assert set(PRINTED) == set(GPUS)


def test_geforce_fp16_accumulation_is_what_the_floor_uses():
    # The RTX 4090's FP16 with FP16 accumulation runs at twice the FP32-accumulation rate (Ada whitepaper); the
    # estimate assumes FP32 accumulation, the floor the fastest.
    g = get_gpu("RTX-4090")
    assert g.matmul_rate("16-bit") == ("bf16/fp32", 165.2e12)
    assert g.matmul_rate("16-bit", fastest=True) == ("fp16/fp16", 330.3e12)
    assert g.matmul_rate("fp8", fastest=True) == ("fp8/fp16", 660.6e12)
    h = get_gpu("H100-SXM")  # a datacenter part: both accumulations at one rate, and a tie names the usual one
    assert h.matmul_rate("16-bit", fastest=True) == ("bf16/fp32", 989.5e12)


def test_a_precision_the_chip_lacks_upcasts_exactly():
    a100 = get_gpu("A100-80GB")
    # the estimate runs FP8 and FP4 weights at 16 bits (weight-only kernels); the floor may use INT8 for FP4 values
    assert a100.matmul_rate("fp8") == ("bf16/fp32", 312e12)
    assert a100.matmul_rate("fp8", fastest=True) == ("bf16/fp32", 312e12)  # E4M3 is not exact in INT8
    assert a100.matmul_rate("fp4", fastest=True) == ("int8/int32", 624e12)
    h100 = get_gpu("H100-SXM")
    assert h100.matmul_rate("fp4") == ("bf16/fp32", 989.5e12)
    assert h100.matmul_rate("fp4", fastest=True) == ("fp8/fp32", 1979e12)
    assert get_gpu("B200").matmul_rate("fp4") == ("fp4/fp32", 9000e12)


def test_for_every_gpu_and_precision_the_fastest_rate_is_at_least_the_estimates():
    for g in GPUS.values():
        for m in ("16-bit", "fp8", "int8", "fp4"):
            assert g.matmul_rate(m, fastest=True)[1] >= g.matmul_rate(m)[1], (g.name, m)


def test_a_bad_peak_table_is_refused_in_one_line():
    from stage5.hardware import Hardware
    with pytest.raises(ValueError, match="unknown tensor formats"):
        Hardware("x", (("tf32", 1e12),), 1e12, 1e9, "test")
    with pytest.raises(ValueError, match="needs a 16-bit rate"):
        Hardware("x", (("fp8/fp32", 1e12),), 1e12, 1e9, "test")
    with pytest.raises(ValueError, match="positive"):
        Hardware("x", (("bf16/fp32", -1.0),), 1e12, 1e9, "test")
    with pytest.raises(ValueError, match="unknown matmul precision"):
        get_gpu("H100").matmul_rate("fp6")


def test_fp8_weights_on_a_chip_without_fp8_run_at_the_16_bit_rate():
    a100 = get_gpu("A100-80GB")
    assert a100.flops(1.0) == a100.flops_bf16


def test_every_entry_cites_a_source():
    import inspect

    import stage5.hardware as hw
    source = inspect.getsource(hw)
    for name in GPUS:
        line = next(i for i, text in enumerate(source.splitlines()) if f'_gpu("{name}"' in text)
        comment = source.splitlines()[line - 1].strip()
        assert comment.startswith("#"), f"{name} has no datasheet comment above it"


def test_unknown_gpu_lists_close_matches():
    with pytest.raises(UnknownNameError, match="H100-SXM"):
        get_gpu("H1000")


def test_calibration_is_quick_and_plausible():
    t0 = time.process_time()  # CPU seconds, not wall: a busy machine slows the wall clock, not the work
    hw = this_machine()
    assert time.process_time() - t0 < 15
    # Any CPU this course runs on moves between 1 GB/s and 1 TB/s and multiplies between 1 GFLOP/s and 100 TFLOP/s.
    assert 1e9 < hw.bandwidth < 1e12
    assert 1e9 < hw.flops_bf16 < 1e14
    assert hw.ridge == pytest.approx(hw.flops_bf16 / hw.bandwidth)


def test_bandwidth_measure_counts_read_and_write():
    # A copy of a small array that sits in cache must look faster than one of a large array in DRAM.
    small = measure_bandwidth(n_bytes=256 * 1024, repeats=20)
    large = measure_bandwidth(n_bytes=256 * 2**20, repeats=3)
    assert small > large


def test_matmul_measure_grows_with_size_class():
    assert measure_matmul_flops(n=256, seconds=0.3) > measure_matmul_flops(n=8, seconds=0.3)


def test_int4_weights_multiply_at_the_16_bit_rate():
    h100 = get_gpu("H100")
    assert h100.flops(1.0) == h100.flops_fp8
    assert h100.flops(0.5) == h100.flops_bf16
