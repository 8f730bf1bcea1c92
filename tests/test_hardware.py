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
