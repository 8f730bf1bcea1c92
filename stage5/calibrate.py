"""Measure this machine, so the cost model can predict the toy engine on the computer that runs it.

The toy engine runs float32 torch on the CPU, so the calibration measures exactly that: the bandwidth of a
large array copy and the FLOP/s of a float32 matmul of the engine's size class. Both are best-of-N, so a
busy neighbour makes them pessimistic, never optimistic. It takes a few seconds.
"""

from __future__ import annotations

import os
import platform
import time
from functools import cache
from typing import TYPE_CHECKING

import numpy as np

from stage5.hardware import Hardware

if TYPE_CHECKING:
    from stage5.cost import Deployment
    from stage5.models import ModelConfig


def measure_bandwidth(n_bytes: int = 256 * 2**20, repeats: int = 5) -> float:
    """Memory bandwidth in bytes/s from a large ``np.copyto`` (counts the read and the write)."""
    src = np.ones(n_bytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * n_bytes / best


def measure_matmul_flops(n: int = 512, seconds: float = 1.0) -> float:
    """Float32 matmul FLOP/s with torch (the engine's dtype and library), best of several timed batches."""
    import torch

    a = torch.randn(n, n)
    b = torch.randn(n, n)
    torch.mm(a, b)  # warm up the kernel choice
    best = 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        for _ in range(4):
            torch.mm(a, b)
        best = max(best, 4 * 2 * n**3 / (time.perf_counter() - t0))
    return best


@cache
def this_machine(seconds: float = 2.0) -> Hardware:
    """A :class:`Hardware` entry for this CPU, measured (cached for the life of the process).

    ``flops_bf16`` holds the measured float32 rate: it is the rate the toy engine's matmuls run at.
    ``memory_bytes`` is the machine's RAM where the OS reports it.
    """
    bandwidth = measure_bandwidth()
    flops = measure_matmul_flops(seconds=seconds)
    try:
        memory = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        memory = float(8 * 2**30)
    name = f"this machine ({platform.machine()}, {os.cpu_count()} cores, measured)"
    return Hardware(name, flops, None, bandwidth, memory, "measured by stage5.calibrate")


def toy_deployment(cfg: ModelConfig, machine: Hardware | None = None) -> Deployment:
    """The toy engine as the cost model sees it: ``cfg`` on this CPU (measured) with float32 weights and cache
    (4 bytes each) at MFU 1, since ``this_machine`` already measured the rate the matmuls reach."""
    from stage5.cost import Deployment

    return Deployment(model=cfg, gpu=machine or this_machine(), weight_bytes=4, kv_bytes=4, mfu=1.0)
