"""Measure this machine, so the course can predict the toy engine's step time on the computer that runs it.

:func:`calibrate` (``python -m stage5 calibrate``) measures, on one thread, the streaming bandwidth of a
matrix-vector product, the achieved float32 matmul rate per number of token rows, and the fixed cost of an
engine step from a hollow run. It takes seconds and is cached per machine in a small JSON file, so every
chapter predicts from the same numbers; :mod:`stage5.step_model` turns them into a predicted step time.

A busy machine is the normal case, so every timing is taken to survive one: each is short (one matrix, one
step), repeated and interleaved with the others, counted in the thread's CPU time where the OS counts it finely
(time spent waiting for a core is left out), and summarised by a low quantile. How busy the machine was is
measured too and recorded in the cache; a calibration taken under load is *provisional*. Before a chapter or a
benchmark uses a cached calibration, :func:`calibrate` re-checks it with one short probe step against its own
prediction, and measures again when the probe is off by more than :data:`TOLERANCE`, or when the calibration
is provisional and the machine is now quiet. It says so in one line (:attr:`Checked.note`).

``measure_bandwidth`` and ``measure_matmul_flops`` are the simpler probes (an array copy, a square matmul).

Imports run one way: this module runs the engine's hollow step (:mod:`stage5.engine.overhead`) and its roofline toy,
so it sits above the engine; of the engine, only the benches (``stage5/engine/bench*.py``) import it back.
"""

from __future__ import annotations

import math
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from stage5.calibration import (  # noqa: F401 - the record and its cache, re-exported for the chapters
    CALIBRATION_VERSION,
    MAX_CPU_SHARE,
    THREADS,
    Calibration,
    InvalidCalibration,
    Load,
    cache_dir,
    cache_path,
    cache_unusable,
    cores,
    low_quantile,
    machine_key,
    machine_load,
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
# The re-check of a cached calibration: each term of a probe step (the weights streamed at one row, a matmul at
# PROBE_ROWS rows, a hollow step at each of PROBE_BATCHES) is predicted from the cache and measured; the cache is
# measured again when any predicted/measured ratio falls outside [1 / TOLERANCE, TOLERANCE], 25% either way. On
# the course's 2-core machine, minutes apart and under other engineers' load, these timings repeated within 10%
# (tests/test_calibration_load.py keeps a true calibration and replaces one 40% off). Sharing a core with busy
# loops moved the weight stream and the matmul by under 10% on the CPU clock, but the hollow step's fixed cost by
# up to 90% (its caches start cold after every switch): a calibration taken so is provisional, and a probe on the
# quieter machine finds it off and replaces it.
TOLERANCE = 1.25
PROBE_ROWS = 16
PROBE_BATCHES = (1, 64)  # the batches the calibration's hollow run times (engine/overhead.OVERHEAD_BATCHES)


def use_course_threads() -> None:
    """Run torch on the course's thread count; every chapter and benchmark calls this before timing."""
    import torch

    torch.set_num_threads(THREADS)


def _cpu_clock_is_fine() -> bool:
    from stage5.engine.clock import CpuClock  # the engine's clocks decide what counts as a fine CPU clock

    return CpuClock.FINE


def on_cpu(fn, fine: bool | None = None) -> float:
    """Seconds one call of ``fn`` took on this CPU: its wall time, or the thread's CPU time if that is smaller
    and the OS counts it finely (``fine``; None: ask the engine's CpuClock), so a wait for a core in the middle
    of the call is left out."""
    if fine is None:
        fine = _cpu_clock_is_fine()
    w0, c0 = time.perf_counter(), time.thread_time()
    fn()
    cpu, wall = time.thread_time() - c0, time.perf_counter() - w0
    return min(wall, cpu) if fine and cpu > 0 else wall


class _LoadMeter:
    """How busy the machine is over a stretch of timing: this process's CPU time against the wall clock from
    start to :meth:`result`, and the run queue at each :meth:`sample`."""

    def __init__(self) -> None:
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()
        self.queues: list[float] = []
        self.loads: list[float] = []
        self.sample()

    def sample(self) -> None:
        queue, load = machine_load()
        if queue is not None:
            self.queues.append(queue)
        if load is not None:
            self.loads.append(load)

    def result(self) -> Load:
        self.sample()
        wall = max(time.perf_counter() - self.wall0, 1e-9)
        share = min(MAX_CPU_SHARE, max(0.0, (time.process_time() - self.cpu0) / wall))
        queue = sum(self.queues) / len(self.queues) if self.queues else None
        return Load(share, queue, self.loads[-1] if self.loads else None, cores())


def _stream_weights(shapes: list[tuple[int, int]], n_bytes: int):
    """Matrices of ``shapes`` (out, in), repeated until they hold at least ``n_bytes``, and one input row for
    each input width: what a stream over more bytes than any cache holds multiplies."""
    import torch

    size = sum(4 * n * k for n, k in shapes)
    weights = [torch.full(shape, 1e-3) for _ in range(-(-n_bytes // size)) for shape in shapes]
    inputs = {k: torch.ones(1, k) for k in {w.shape[1] for w in weights}}
    return weights, inputs


def _per_matrix_times(weights, inputs, passes: int, meter: _LoadMeter | None) -> float:
    """Seconds of one pass of matrix-vector products over ``weights``: each product timed alone, ``passes``
    times (after one warm-up pass), interleaved pass by pass, and the low quantiles of each summed."""
    import torch.nn.functional as F

    fine = _cpu_clock_is_fine()
    for w in weights:
        F.linear(inputs[w.shape[1]], w)
    times: list[list[float]] = [[] for _ in weights]
    for _ in range(passes):
        for i, w in enumerate(weights):
            x = inputs[w.shape[1]]
            times[i].append(on_cpu(lambda x=x, w=w: F.linear(x, w), fine))
        if meter is not None:
            meter.sample()
    return sum(low_quantile(t) for t in times)


def measure_stream_bandwidth(shapes: list[tuple[int, int]] | None = None, n_bytes: int = STREAM_BYTES,
                             passes: int = 7, meter: _LoadMeter | None = None) -> float:
    """Bytes/s that float32 matrix-vector products stream: the access pattern of a batch-1 decode step.

    ``shapes`` (out, in) are the matrices to multiply in turn, repeated until they hold at least ``n_bytes``
    so that they cannot sit in any cache; by default one wide matrix of ``n_bytes``. Each product is timed
    alone (milliseconds: short enough that a busy machine seldom interrupts one), ``passes`` times.
    """
    shapes = shapes or [(n_bytes // (4 * 4096), 4096)]
    weights, inputs = _stream_weights(shapes, n_bytes)
    return sum(w.nbytes for w in weights) / _per_matrix_times(weights, inputs, passes, meter)


def model_matrices(cfg) -> list[tuple[int, int]]:
    """(out, in) of every matrix a decode step multiplies by, in the engine's fused layout, output head included."""
    h, d = cfg.hidden_size, cfg.head_dim
    layer = [((cfg.num_heads + 2 * cfg.num_kv_heads) * d, h), (h, cfg.num_heads * d),
             (2 * cfg.intermediate_size, h), (h, cfg.intermediate_size)]
    return layer * cfg.num_layers + [(cfg.vocab_size, h)]


def _matmul_times(weights, rows: tuple[int, ...], repeats: int, meter: _LoadMeter | None,
                  seed: int = 0) -> dict[int, float]:
    """Seconds of one pass of ``r``-row matmuls over ``weights``, per ``r`` in ``rows``: each product timed alone,
    rows and repeats interleaved, the low quantiles of each product summed."""
    import torch
    import torch.nn.functional as F

    fine = _cpu_clock_is_fine()
    gen = torch.Generator().manual_seed(seed)
    inputs = {r: {k: torch.randn(r, k, generator=gen) for k in {w.shape[1] for w in weights}} for r in rows}
    times: dict[int, list[list[float]]] = {r: [[] for _ in weights] for r in rows}
    for _ in range(repeats):
        for r in rows:
            xs = inputs[r]
            for i, w in enumerate(weights):
                x = xs[w.shape[1]]
                times[r][i].append(on_cpu(lambda x=x, w=w: F.linear(x, w), fine))
            if meter is not None:
                meter.sample()
    return {r: sum(low_quantile(t) for t in times[r]) for r in rows}


def measure_matmul_rates(cfg, rows: tuple[int, ...] = ROWS, repeats: int = 3,
                         meter: _LoadMeter | None = None) -> dict[int, float]:
    """Achieved float32 FLOP/s per number of token rows, multiplying by matrices of exactly ``cfg``'s shapes.

    All of the model's matrices are multiplied in turn, so (as in a real step) they stream from memory: at
    one row this is a matrix-vector product at the bandwidth, at a few rows the matmul kernel runs far below
    its peak (the kernel-efficiency gap the chapters name), at many rows it nears the peak. Row counts are
    interleaved across ``repeats``; each product is timed alone and the low quantile of each kept.
    """
    import torch

    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(n, k, generator=gen) * 0.02 for n, k in model_matrices(cfg)]
    flops_per_row = sum(2 * w.shape[0] * w.shape[1] for w in weights)
    seconds = _matmul_times(weights, rows, repeats, meter)
    return {r: flops_per_row * r / seconds[r] for r in rows}


def measure(cfg, rows: tuple[int, ...] = ROWS) -> Calibration:
    """Measure this machine for ``cfg`` (a few seconds, one thread), and how busy it was meanwhile. Does not
    read or write the cache. ``rows``: the token rows the matmul rate is measured at (the step model holds the
    rate flat beyond the last)."""
    use_course_threads()
    meter = _LoadMeter()
    t0 = time.perf_counter()
    bandwidth = measure_stream_bandwidth(model_matrices(cfg), meter=meter)  # the model's own matrices
    rates = measure_matmul_rates(cfg, rows, meter=meter)
    from stage5.engine.overhead import measure_overhead  # the hollow run lives beside the engine it runs

    step, per_seq = measure_overhead(cfg)
    load = meter.result()
    return Calibration(machine=f"{platform.machine()}, {os.cpu_count()} cores", threads=THREADS,
                       bandwidth=bandwidth, rows=tuple(rates), rates=tuple(rates.values()), overhead_step_s=step,
                       overhead_seq_s=per_seq, model=cfg.name, seconds=time.perf_counter() - t0,
                       cpu_share=load.cpu_share, run_queue=load.run_queue, load_1m=load.load_1m,
                       cores=load.cores, measured_at=time.time(), provisional=not load.quiet)


# ------------------------------------------------------------------------------------------------ the re-check
@dataclass(frozen=True)
class Probe:
    """One probe step against a calibration: predicted over measured seconds of each of its terms, and the load
    while it ran. ``ratios`` keys: ``stream`` (the weights at one row), ``matmul`` (at :data:`PROBE_ROWS` rows),
    ``overhead_b<B>`` (a hollow step at batch B)."""

    ratios: dict[str, float]
    load: Load
    cpu_s: float  # CPU seconds the probe cost

    @property
    def agrees(self) -> bool:
        return all(1 / TOLERANCE <= r <= TOLERANCE for r in self.ratios.values())

    @property
    def span(self) -> str:
        lo, hi = min(self.ratios.values()), max(self.ratios.values())
        return f"{lo:.2g}" if f"{lo:.2g}" == f"{hi:.2g}" else f"{lo:.2g} to {hi:.2g}"

    @property
    def worst(self) -> str:
        """The term furthest from its prediction."""
        return max(self.ratios, key=lambda k: abs(math.log(self.ratios[k])))


def probe(cal: Calibration, cfg, passes: int = 3) -> Probe:
    """Time one short probe step on this machine and set each of its terms beside what ``cal`` predicts for it:
    the model's matrices streamed at one row (``cal.bandwidth``), multiplied at :data:`PROBE_ROWS` rows
    (``cal.rate``), and a hollow engine step at each of :data:`PROBE_BATCHES` (the fixed overheads). Each timing
    is taken as the calibration takes it (the CPU clock, ``passes`` repeats, the low quantile), at a fraction
    of its cost: well under 2 CPU seconds on the course's machines."""
    from stage5.engine.overhead import OVERHEAD_ROUNDS, hollow_config, hollow_step_times
    from stage5.engine.roofline_toy import build

    use_course_threads()
    cpu0 = time.process_time()
    meter = _LoadMeter()
    shapes = model_matrices(cfg)
    weights, inputs = _stream_weights(shapes, STREAM_BYTES)
    stream = _per_matrix_times(weights, inputs, passes, meter)
    ratios = {"stream": sum(w.nbytes for w in weights) / cal.bandwidth / stream}
    mats = weights[:len(shapes)]  # one copy of the model's matrices (the values do not change a matmul's speed)
    del weights, inputs
    flops = sum(2 * w.shape[0] * w.shape[1] for w in mats) * PROBE_ROWS
    matmul = _matmul_times(mats, (PROBE_ROWS,), passes, meter)[PROBE_ROWS]
    ratios["matmul"] = flops / float(cal.rate(PROBE_ROWS)) / matmul
    del mats
    # the calibration's own hollow run (same batches, rounds and steps): a low quantile of fewer samples would sit
    # higher on a busy machine, where a step's time spreads wide
    steps = hollow_step_times(build(hollow_config(cfg)), PROBE_BATCHES, rounds=OVERHEAD_ROUNDS)
    for b in PROBE_BATCHES:
        ratios[f"overhead_b{b}"] = (cal.overhead_step_s + b * cal.overhead_seq_s) / low_quantile(steps[b])
    return Probe(ratios, meter.result(), time.process_time() - cpu0)


@dataclass(frozen=True)
class Checked:
    """A calibration ready for use, and what was done to get it.

    ``action``: ``measured`` (no usable cache, or ``force``), ``kept`` (the cached one passed its probe) or
    ``remeasured`` (the cached one failed its probe, or was provisional and the machine is now quiet);
    ``probe``: the probe step (None when none ran). :attr:`note` says it in one line for a chapter to glue.
    """

    cal: Calibration
    action: str
    probe: Probe | None = None
    previous: Calibration | None = None  # the cached calibration that was re-measured
    cached: bool = True  # False: kept in memory only (the cache could not be written)
    reasons: tuple[str, ...] = field(default=())

    @property
    def note(self) -> str:
        cal, p = self.cal, self.probe
        now = ("quiet" if not cal.provisional else
               f"under load ({cal.load.describe()}), so it is provisional and will be measured again when the "
               "machine is quiet")
        accepted = f"accepted: within {_pct(TOLERANCE)} either way"
        if self.action == "measured":
            return f"This machine was calibrated just now, {now}."
        if self.action == "kept":
            if cal.provisional:
                return (f"The cached calibration was measured under load ({cal.load.describe()}) and is provisional: "
                        f"the machine is still busy, and a probe step agreed with it (predicted over measured: "
                        f"{p.span}), so it is used until a quiet moment allows measuring again.")
            return (f"The cached calibration passed its check: the {len(p.ratios)} parts of a probe step were "
                    f"predicted at {p.span} of their measured times ({accepted}).")
        if "off" in self.reasons:
            why = (f"the probe's {_PARTS.get(p.worst, p.worst)} was predicted at {p.ratios[p.worst]:.2f} of its "
                   f"measured time ({accepted})")
        else:
            why = f"it had been measured under load ({self.previous.load.describe()}) and the machine is quiet now"
        return f"The cached calibration was replaced: {why}. This machine was measured again, {now}."


_PARTS = {"stream": "weight stream at one row", "matmul": f"matmul at {PROBE_ROWS} rows",
          **{f"overhead_b{b}": f"hollow step at batch {b}" for b in PROBE_BATCHES}}


def _pct(tolerance: float) -> str:
    return f"{100 * (tolerance - 1):.0f}%"


# One check per cache file per process: a chapter that asks for the calibration several times probes it once.
_CHECKED: dict[Path, Checked] = {}


def calibrated(cfg=None, force: bool = False) -> Checked:
    """This machine's calibration for ``cfg`` (default: the roofline toy), checked, with what was done to get it.

    The first call measures and writes a small JSON file under :func:`cache_dir`; later calls, in any chapter
    or process on the same machine, read it back and re-check it with one :func:`probe` step, once per process:
    a probe off by more than :data:`TOLERANCE`, or a provisional calibration found on a quiet machine, is
    measured again and replaces the file. ``force`` measures again regardless. A cache that fails any check is
    set aside with one line and measured again; one that cannot be written is kept in memory for this run (see
    :mod:`stage5.calibration`). When a calibration is re-measured or provisional, its note goes to stderr.
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
        return Checked(measure(cfg), "measured", cached=False)
    cached = None if force else read_cache(path)
    memo = _CHECKED.get(path)
    if cached is not None and memo is not None and memo.cal == cached:
        return memo
    if cached is None:
        cal = measure(cfg)
        checked = Checked(cal, "measured", cached=write_cache(cal, path))
    else:
        found = probe(cached, cfg)
        reasons = tuple(r for r, hit in (("off", not found.agrees),
                                         ("quiet", cached.provisional and found.load.quiet)) if hit)
        if reasons:
            cal = measure(cfg)
            checked = Checked(cal, "remeasured", found, cached, write_cache(cal, path), reasons)
        else:
            checked = Checked(cached, "kept", found)
    if checked.cached:
        _CHECKED[path] = checked
    if checked.action == "remeasured" or checked.cal.provisional:
        print(f"calibration: {checked.note}", file=sys.stderr, flush=True)
    return checked


def calibrate(cfg=None, force: bool = False) -> Calibration:
    """This machine's calibration for ``cfg``, checked (see :func:`calibrated`, which also says what was done)."""
    return calibrated(cfg, force).cal


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

    checked = calibrated(ROOFLINE_TOY, force=args.force)
    cal = checked.cal
    path = cache_path(ROOFLINE_TOY)
    cached = checked.cached and cache_unusable(path) is None and read_cache(path) == cal  # a warning said why if not
    if args.json:
        print(cal.to_json(cache_file=str(path) if cached else None, check=checked.note))
        return 0
    print(f"{cal.machine}, {cal.threads} thread, calibrated for {cal.model} in {cal.seconds:.1f} s")
    print(f"  streaming bandwidth (matrix-vector product): {cal.bandwidth / 1e9:.1f} GB/s")
    print("  achieved float32 matmul rate by token rows: "
          + ", ".join(f"{r}: {f / 1e9:.0f}" for r, f in zip(cal.rows, cal.rates, strict=True)) + " GFLOP/s")
    print(f"  fixed overhead: {cal.overhead_step_s * 1e3:.2f} ms per step + {cal.overhead_seq_s * 1e6:.0f} us "
          "per sequence")
    print(f"  load while measured: {cal.load.describe()}" + (" (provisional)" if cal.provisional else " (quiet)"))
    print(f"  {checked.note}")
    print(f"  cached in {path}" if cached else "  not cached: kept in memory for this run (see the warning above)")
    return 0
