"""Measure this machine, so the course can predict the toy engine's step time on the computer that runs it.

:func:`calibrate` (``python -m stage5 calibrate``) measures, on one thread, the streaming bandwidth of a
matrix-vector product, the achieved float32 matmul rate per number of token rows, and the fixed cost of an
engine step from a hollow run. It takes seconds and is cached per machine in a small JSON file, so every
chapter predicts from the same numbers; :mod:`stage5.step_model` turns them into a predicted step time.
Timings are best-of-N, so a busy neighbour makes them pessimistic, never optimistic.

``measure_bandwidth`` and ``measure_matmul_flops`` are the simpler probes (an array copy, a square matmul).

Imports run one way: this module runs the engine's hollow step (:mod:`stage5.engine.overhead`) and its roofline toy,
so it sits above the engine; of the engine, only the benches (``stage5/engine/bench*.py``) import it back.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from typing import TYPE_CHECKING

import numpy as np

from stage5.calibration import (  # noqa: F401 - the record and its cache, re-exported for the chapters
    CALIBRATION_VERSION,
    THREADS,
    Calibration,
    InvalidCalibration,
    cache_dir,
    cache_path,
    cache_unusable,
    machine_key,
    read_cache,
    write_cache,
)
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


def this_machine() -> Hardware:
    """A :class:`Hardware` entry for this CPU at the course's thread count, from the cached calibration.

    ``flops_bf16`` holds the best float32 matmul rate measured (the toy engine's dtype), ``bandwidth`` the
    streaming rate of a matrix-vector product over a weight larger than the cache. ``memory_bytes`` is the
    machine's RAM where the OS reports it.
    """
    return calibrate().hardware()


def toy_deployment(cfg: ModelConfig, machine: Hardware | None = None) -> Deployment:
    """The toy engine as the cost model sees it: ``cfg`` on this CPU (measured) with float32 weights and cache
    (4 bytes each) at MFU 1, since ``this_machine`` already measured the rate the matmuls reach."""
    from stage5.cost import Deployment

    return Deployment(model=cfg, gpu=machine or this_machine(), weight_bytes=4, kv_bytes=4, mfu=1.0)


# ------------------------------------------------------------------------------------------------------------
# The step-time calibration: what `python -m stage5 calibrate` measures and every chapter reads from one cache.
#
# Predicted decode step = overhead + max(weight bytes / bandwidth, FLOPs / achieved rate) + attention, with
#   bandwidth      matrix-vector products over the model's own matrices, repeated past any cache's size;
#   achieved rate  float32 matmuls by matrices of the model's own shapes, streamed from memory as in a real
#                  step, per number of token rows (small batches reach a fraction of the kernel's peak);
#   overhead       a hollow run: the same op graph (layers, heads, engine) with tiny matrices.
# All on one thread: on a shared or small machine, more threads than free cores make timings erratic, and a
# chapter that calibrates with one thread count and runs with another measures two different machines.

ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # token rows per matmul: batch x tokens per sequence
# Above the last-level cache of any desktop or laptop CPU: the largest, AMD's Ryzen 9 7950X3D, has 128 MB of L3
# (AMD product page). A few server parts hold more; there the toy's weights may partly stay in cache.
STREAM_BYTES = 256 * 2**20


def use_course_threads() -> None:
    """Run torch on the course's thread count; every chapter and benchmark calls this before timing."""
    import torch

    torch.set_num_threads(THREADS)


def _best_time(fn, min_s: float = 0.02, repeats: int = 5) -> float:
    """Seconds per call of ``fn``: the best of ``repeats`` batches of calls lasting at least ``min_s`` each.

    The best, not the mean: other work on the machine can only slow a batch down, never speed it up.
    """
    fn()
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-7)
    calls = max(1, int(min_s / one))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def measure_stream_bandwidth(shapes: list[tuple[int, int]] | None = None, n_bytes: int = STREAM_BYTES) -> float:
    """Bytes/s that float32 matrix-vector products stream: the access pattern of a batch-1 decode step.

    ``shapes`` (out, in) are the matrices to multiply in turn, repeated until they hold at least ``n_bytes``
    so that they cannot sit in any cache; by default one wide matrix of ``n_bytes``.
    """
    import torch
    import torch.nn.functional as F

    shapes = shapes or [(n_bytes // (4 * 4096), 4096)]
    size = sum(4 * n * k for n, k in shapes)
    weights = [torch.full(shape, 1e-3) for _ in range(-(-n_bytes // size)) for shape in shapes]
    inputs = {k: torch.ones(1, k) for k in {w.shape[1] for w in weights}}
    total = sum(w.nbytes for w in weights)
    return total / _best_time(lambda: [F.linear(inputs[w.shape[1]], w) for w in weights], min_s=0.0, repeats=5)


def model_matrices(cfg) -> list[tuple[int, int]]:
    """(out, in) of every matrix a decode step multiplies by, in the engine's fused layout, output head included."""
    h, d = cfg.hidden_size, cfg.head_dim
    layer = [((cfg.num_heads + 2 * cfg.num_kv_heads) * d, h), (h, cfg.num_heads * d),
             (2 * cfg.intermediate_size, h), (h, cfg.intermediate_size)]
    return layer * cfg.num_layers + [(cfg.vocab_size, h)]


def measure_matmul_rates(cfg, rows: tuple[int, ...] = ROWS, repeats: int = 3) -> dict[int, float]:
    """Achieved float32 FLOP/s per number of token rows, multiplying by matrices of exactly ``cfg``'s shapes.

    All of the model's matrices are multiplied in turn, so (as in a real step) they stream from memory: at
    one row this is a matrix-vector product at the bandwidth, at a few rows the matmul kernel runs far below
    its peak (the kernel-efficiency gap the chapters name), at many rows it nears the peak. Row counts are
    interleaved across ``repeats`` and the best time of each is kept.
    """
    import torch
    import torch.nn.functional as F

    weights = [torch.randn(n, k) * 0.02 for n, k in model_matrices(cfg)]
    flops_per_row = sum(2 * w.shape[0] * w.shape[1] for w in weights)
    best = {r: float("inf") for r in rows}
    inputs = {r: {k: torch.randn(r, k) for k in {w.shape[1] for w in weights}} for r in rows}
    for _ in range(repeats):
        for r in rows:
            xs = inputs[r]
            t0 = time.perf_counter()
            for w in weights:
                F.linear(xs[w.shape[1]], w)
            best[r] = min(best[r], time.perf_counter() - t0)
    return {r: flops_per_row * r / best[r] for r in rows}


def measure(cfg) -> Calibration:
    """Measure this machine for ``cfg`` (a few seconds, one thread). Does not read or write the cache."""
    use_course_threads()
    t0 = time.perf_counter()
    bandwidth = measure_stream_bandwidth(model_matrices(cfg))  # the model's own matrices, past any cache
    rates = measure_matmul_rates(cfg)
    from stage5.engine.overhead import measure_overhead  # the hollow run lives beside the engine it runs

    step, per_seq = measure_overhead(cfg)
    return Calibration(machine=f"{platform.machine()}, {os.cpu_count()} cores", threads=THREADS,
                       bandwidth=bandwidth, rows=tuple(rates), rates=tuple(rates.values()), overhead_step_s=step,
                       overhead_seq_s=per_seq, model=cfg.name, seconds=time.perf_counter() - t0)


def calibrate(cfg=None, force: bool = False) -> Calibration:
    """This machine's calibration for ``cfg`` (default: the roofline toy), from the cache if it is there.

    The first call measures and writes a small JSON file under :func:`cache_dir`; later calls, in any
    chapter or process on the same machine, read it back, so every chapter predicts from the same numbers.
    ``force`` measures again and overwrites it. A cache that fails any check is set aside with one line and
    measured again; one that cannot be written is kept in memory for this run (see :mod:`stage5.calibration`).
    """
    if cfg is None:
        from stage5.engine.roofline_toy import ROOFLINE_TOY as cfg
    use_course_threads()
    path = cache_path(cfg)
    unusable = cache_unusable(path)
    if unusable:
        print(f"warning: the calibration cache {path} cannot be used ({unusable}); measuring and keeping the result "
              "in memory for this run (set STAGE5_CACHE_DIR to a shorter, writable directory)", file=sys.stderr,
              flush=True)
        return measure(cfg)
    if not force:
        cached = read_cache(path)
        if cached is not None:
            return cached
    cal = measure(cfg)
    write_cache(cal, path)
    return cal


def main(argv: list[str] | None = None) -> int:
    """``python -m stage5 calibrate [--force] [--json]``."""
    from stage5.inputs import OneLineParser

    parser = OneLineParser(prog="python -m stage5 calibrate",
                                     description="Measure this CPU (one thread) for the toy engine's step-time "
                                                 "model; the result is cached per machine and read by every chapter.")
    parser.add_argument("--force", action="store_true", help="measure again even if a cached result exists")
    parser.add_argument("--json", action="store_true", help="print the calibration as JSON")
    args = parser.parse_args(argv)
    from stage5.engine.roofline_toy import ROOFLINE_TOY

    cal = calibrate(ROOFLINE_TOY, force=args.force)
    path = cache_path(ROOFLINE_TOY)
    cached = cache_unusable(path) is None and read_cache(path) == cal  # a warning above said why if not
    if args.json:
        print(cal.to_json(cache_file=str(path) if cached else None))
        return 0
    print(f"{cal.machine}, {cal.threads} thread, calibrated for {cal.model} in {cal.seconds:.1f} s")
    print(f"  streaming bandwidth (matrix-vector product): {cal.bandwidth / 1e9:.1f} GB/s")
    print("  achieved float32 matmul rate by token rows: "
          + ", ".join(f"{r}: {f / 1e9:.0f}" for r, f in zip(cal.rows, cal.rates, strict=True)) + " GFLOP/s")
    print(f"  fixed overhead: {cal.overhead_step_s * 1e3:.2f} ms per step + {cal.overhead_seq_s * 1e6:.0f} us "
          "per sequence")
    print(f"  cached in {path}" if cached else "  not cached: kept in memory for this run (see the warning above)")
    return 0

