"""This machine's calibration as a record: what is measured, its checks, and the cache it is read from and written to.

The record sits below the engine: the engine's virtual clock and :mod:`stage5.step_model` read it, and nothing
here imports torch or the engine. Measuring it (:func:`stage5.calibrate.calibrate`) needs both, and sits above.

A calibration also records how busy the machine was while it was measured (:class:`Load`): the share of a CPU
core the measuring process got, and how many other tasks were ready to run. One taken under load is
*provisional*: it is used, said to be provisional, and replaced at the next quiet chance
(:func:`stage5.calibrate.calibrate`).

The cache is a file the program wrote itself, but a person can edit it, a disk can cut it short, and a copy can
come from another machine. So a cache is read as untrusted input: every field is checked (types, lengths,
finite, positive, within what any CPU can do), and an invalid file is set aside with one line naming the field,
then measured again; it is never used. Writing is atomic, and a failure to write says where and goes on with
the measurement in memory.
"""

from __future__ import annotations

import math
import os
import platform
import sys
from dataclasses import MISSING, asdict, dataclass
from pathlib import Path

import numpy as np

from stage5 import inputs
from stage5.hardware import Hardware

THREADS = 1
CALIBRATION_VERSION = 3  # bump when what is measured changes, so stale caches are not reused (3: load recorded)
CACHE_LIMIT_BYTES = 64 * 1024  # a calibration file is under 1 kB; anything far larger is not one

# Plausible bounds on what one CPU thread measures, so an edited or foreign cache cannot put a silent wrong number
# into a chapter: a value outside them is set aside like a damaged file, and the machine is measured again.
# Bandwidth: a thread streams at most what its package's memory delivers, and the most any CPU package has is
# 800 GB/s (Apple M2 Ultra, Apple's announcement of June 2023; AnandTech measured Apple's 400 GB/s M1 Max), so
# 1 TB/s is above any honest measurement. The slowest DDR memory, JEDEC's DDR-200 (PC-1600), moves 1.6 GB/s per
# channel; 100 MB/s is 16 times below that, room for an old or very busy machine. Rates (float32 FLOP/s): one
# core's vector peak is FMA units x lanes x 2 x clock, at most 2 x 16 x 2 x ~5 GHz = 320 GFLOP/s with two
# AVX-512 FMA units (Intel's Xeon Scalable cores); 10 TFLOP/s leaves room for a matrix coprocessor beside the
# core. At one token row the matmul is a matrix-vector product: 2 FLOPs per 4-byte weight streamed, so its rate
# is about bandwidth / 2 (this machine: 7.8 GFLOP/s at 14.6 GB/s), and 10 MFLOP/s sits below the slowest
# bandwidth accepted. Overheads: the hollow step replays one step's op graph; on this course's machines it takes
# about a millisecond per step and tens of microseconds per sequence, so a second per step (0.1 s per sequence)
# is a thousand times beyond, not an overhead.
MIN_BANDWIDTH, MAX_BANDWIDTH = 1e8, 1e12  # bytes/s
MIN_RATE, MAX_RATE = 1e7, 1e13  # FLOP/s
MAX_OVERHEAD_STEP_S, MAX_OVERHEAD_SEQ_S = 1.0, 0.1
MAX_ROWS = 2**20
# Load: a share of a core is CPU seconds per wall second of a one-thread process, at most 1 (a little more only
# through clock granularity; 2 leaves room without admitting nonsense). Run queues and load averages are counts of
# tasks; a million is beyond any machine's.
MAX_CPU_SHARE, MAX_TASKS = 2.0, 1e6
# Quiet: the measuring thread had at least 90% of a core, and fewer other tasks were ready to run than there are
# cores (so, on average, a core was free for it). Below either, the calibration is provisional.
QUIET_CPU_SHARE = 0.9
# Repeated timings are summarised by their low quantile: other work on the machine can only slow a timing down,
# so the low tail is the machine undisturbed, where a mean would average in whatever else ran. Not the minimum:
# one lucky sample (a timer tick, a prefetch that happened to win) would set it alone.
LOW_QUANTILE = 0.2


class InvalidCalibration(inputs.InputError):
    """A calibration whose field is missing, of the wrong type or out of bounds; the message names the field."""


def _field(name: str) -> str:
    return f"calibration field {name!r}"


@dataclass(frozen=True)
class Load:
    """How busy the machine was while something was timed.

    ``cpu_share``: CPU seconds the timing process used per wall second (1: it had a core to itself, 0.5: it
    waited half the time). ``run_queue``: other tasks ready to run, the mean of snapshots of ``/proc/loadavg``
    (None where the OS has no such file). ``load_1m``: the one-minute load average (None where unknown).
    ``cores``: CPUs this process may run on.
    """

    cpu_share: float
    run_queue: float | None
    load_1m: float | None
    cores: int

    @property
    def quiet(self) -> bool:
        """The timing thread had most of a core and, on average, a core was free for it."""
        return self.cpu_share >= QUIET_CPU_SHARE and (self.run_queue is None or self.run_queue < self.cores)

    def describe(self) -> str:
        """'48% of a CPU core, 3.1 other tasks ready to run on 2 cores', in words for a one-line note."""
        queue = "" if self.run_queue is None else f", {self.run_queue:.1f} other tasks ready to run on {self.cores} cores"
        return f"{100 * min(self.cpu_share, 1.0):.0f}% of a CPU core{queue}"


@dataclass(frozen=True)
class Calibration:
    """One machine's measured step-time constants, all at ``threads`` torch threads. Seconds and bytes/s.

    Every field is checked when the record is built (from a measurement or a cache file alike).
    """

    machine: str
    threads: int
    bandwidth: float  # bytes/s streamed by a matrix-vector product over a weight larger than the cache
    rows: tuple[int, ...]  # token rows per matmul at which the rate was measured
    rates: tuple[float, ...]  # achieved float32 FLOP/s at each of ``rows``
    overhead_step_s: float  # fixed cost of one engine step (Python, op dispatch), whatever the batch
    overhead_seq_s: float  # extra fixed cost per sequence in the step
    model: str  # the config whose shapes and op graph were measured
    seconds: float = 0.0  # how long calibrating took
    version: int = CALIBRATION_VERSION
    # The load while it was measured (see Load); the defaults describe a quiet machine, for records made by hand.
    cpu_share: float = 1.0
    run_queue: float | None = None
    load_1m: float | None = None
    cores: int = 1
    measured_at: float = 0.0  # Unix time of the measurement (0: unknown)
    provisional: bool = False  # measured under load: replaced at the next quiet chance

    def __post_init__(self) -> None:
        try:
            self._check()
        except InvalidCalibration:
            raise
        except inputs.InputError as err:
            raise InvalidCalibration(str(err)) from None

    def _check(self) -> None:
        for name in ("machine", "model"):
            if not isinstance(getattr(self, name), str):
                raise InvalidCalibration(f"{_field(name)} must be a string, got {getattr(self, name)!r}")
        inputs.integer(self.threads, _field("threads"), minimum=1, maximum=4096)
        inputs.integer(self.version, _field("version"), minimum=1)
        inputs.real(self.bandwidth, _field("bandwidth"), low=MIN_BANDWIDTH, high=MAX_BANDWIDTH,
                    accepted=f"bytes/s in [{MIN_BANDWIDTH:g}, {MAX_BANDWIDTH:g}] (what one CPU thread can stream)")
        for name in ("rows", "rates"):
            value = getattr(self, name)
            if not isinstance(value, (tuple, list)) or not value:
                raise InvalidCalibration(f"{_field(name)} must be a non-empty list, got {value!r}")
        if len(self.rows) != len(self.rates):
            raise InvalidCalibration(f"{_field('rows')} has {len(self.rows)} entries but {_field('rates')} has "
                                     f"{len(self.rates)}; accepted: one rate per row count")
        rows = [inputs.integer(r, _field("rows"), minimum=1, maximum=MAX_ROWS) for r in self.rows]
        if any(b <= a for a, b in zip(rows, rows[1:], strict=False)):
            raise InvalidCalibration(f"{_field('rows')} must be strictly increasing, got {list(self.rows)!r}")
        for r in self.rates:
            inputs.real(r, _field("rates"), low=MIN_RATE, high=MAX_RATE,
                        accepted=f"FLOP/s in [{MIN_RATE:g}, {MAX_RATE:g}] (what one CPU thread can reach)")
        for name, most in (("overhead_step_s", MAX_OVERHEAD_STEP_S), ("overhead_seq_s", MAX_OVERHEAD_SEQ_S)):
            inputs.real(getattr(self, name), _field(name), low=0.0, high=most,
                        accepted=f"seconds in [0, {most:g}] (a fixed cost of Python and op dispatch)")
        inputs.real(self.seconds, _field("seconds"), low=0.0, accepted="a finite number of seconds >= 0")
        inputs.real(self.cpu_share, _field("cpu_share"), low=0.0, high=MAX_CPU_SHARE,
                    accepted=f"CPU seconds per wall second in [0, {MAX_CPU_SHARE:g}] (a one-thread process's share of a core)")
        for name in ("run_queue", "load_1m"):
            if getattr(self, name) is not None:
                inputs.real(getattr(self, name), _field(name), low=0.0, high=MAX_TASKS,
                            accepted=f"null or a number of tasks in [0, {MAX_TASKS:g}]")
        inputs.integer(self.cores, _field("cores"), minimum=1, maximum=2**20)
        inputs.real(self.measured_at, _field("measured_at"), low=0.0, high=1e11,
                    accepted="a Unix time in seconds, in [0, 1e11]")
        if not isinstance(self.provisional, bool):
            raise InvalidCalibration(f"{_field('provisional')} must be true or false, got {self.provisional!r}")
        # frozen: normalise lists from JSON to tuples of plain numbers
        object.__setattr__(self, "rows", tuple(rows))
        object.__setattr__(self, "rates", tuple(float(r) for r in self.rates))
        for name in ("cpu_share", "measured_at"):
            object.__setattr__(self, name, float(getattr(self, name)))
        for name in ("run_queue", "load_1m"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, float(getattr(self, name)))

    @property
    def load(self) -> Load:
        """The load while this calibration was measured."""
        return Load(self.cpu_share, self.run_queue, self.load_1m, self.cores)

    def rate(self, rows) -> np.ndarray:
        """Achieved FLOP/s at ``rows`` token rows, interpolated in log-log between measured points."""
        r = np.clip(np.asarray(rows, dtype=float), self.rows[0], self.rows[-1])
        return np.exp(np.interp(np.log(r), np.log(self.rows), np.log(self.rates)))

    @property
    def peak_rate(self) -> float:
        """The best rate measured: the flat roof of the ideal roofline."""
        return max(self.rates)

    def hardware(self) -> Hardware:
        """This machine as a :class:`Hardware` entry for ``stage5.cost`` (``flops_bf16`` holds the float32 peak)."""
        return Hardware(f"this machine ({self.machine}, {self.threads} thread, measured)",
                        (("bf16/fp32", self.peak_rate),), self.bandwidth, machine_memory_bytes(),
                        "measured by stage5.calibrate (python -m stage5 calibrate)")

    @classmethod
    def from_dict(cls, data: object) -> Calibration:
        """A record from parsed JSON; raises :class:`InvalidCalibration` naming the first bad field."""
        if not isinstance(data, dict):
            raise InvalidCalibration(f"a calibration must be a JSON object, got {type(data).__name__}")
        known = set(cls.__dataclass_fields__)
        # a cache must say how busy the machine was: a file without it cannot be told apart from a quiet one
        required = {n for n, f in cls.__dataclass_fields__.items() if f.default is MISSING} | set(LOAD_FIELDS)
        missing = sorted(required - set(data))
        if missing:
            raise InvalidCalibration(f"{_field(missing[0])} is missing")
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidCalibration(f"{_field(unknown[0])} is not a calibration field")
        return cls(**data)

    def to_json(self, **extra) -> str:
        return inputs.dumps({**asdict(self), **extra}, indent=1)


def low_quantile(samples) -> float:
    """The :data:`LOW_QUANTILE` of repeated timings (linear interpolation between order statistics)."""
    return float(np.quantile(np.asarray(samples, dtype=float), LOW_QUANTILE))


LOAD_FIELDS = ("cpu_share", "run_queue", "load_1m", "cores", "measured_at", "provisional")


def cores() -> int:
    """CPUs this process may run on (its affinity where the OS reports it, else every CPU)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def machine_load() -> tuple[float | None, float | None]:
    """(other tasks ready to run now, one-minute load average), None for what this OS does not report.

    Linux's ``/proc/loadavg`` gives both: its fourth field counts the runnable tasks, this one included (it is
    running while it reads), so one is taken off. Elsewhere only the load average is known (``os.getloadavg``).
    """
    try:
        with open("/proc/loadavg") as f:
            fields = f.read(200).split()
        running = float(fields[3].split("/")[0])
        return max(0.0, running - 1.0), float(fields[0])
    except (OSError, IndexError, ValueError):
        pass
    try:
        return None, float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None, None


def machine_memory_bytes() -> float:
    """This machine's RAM in bytes where the OS reports it, else 8 GiB (a small laptop)."""
    try:
        memory = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return float(8 * 2**30)
    return memory if math.isfinite(memory) and memory > 0 else float(8 * 2**30)


# ------------------------------------------------------------------------------------------------ the cache
def _torch_version() -> str:
    """torch's version from its installed metadata, without importing torch."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return "none"


def machine_key(cfg) -> str:
    """What the cache is keyed by: this host and CPU, torch's version, the thread count and the model's shapes."""
    import hashlib

    parts = [platform.node(), platform.machine(), platform.processor(), str(os.cpu_count()), _torch_version(),
             str(THREADS), str(CALIBRATION_VERSION), cfg.name, str(cfg.hidden_size), str(cfg.intermediate_size),
             str(cfg.num_layers), str(cfg.num_heads), str(cfg.num_kv_heads)]
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:16]


def cache_dir() -> Path:
    """``$STAGE5_CACHE_DIR``, else ``$XDG_CACHE_HOME/stage5``, else ``~/.cache/stage5``."""
    if os.environ.get("STAGE5_CACHE_DIR"):
        return Path(os.environ["STAGE5_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "stage5"


def cache_path(cfg) -> Path:
    return cache_dir() / f"calibration-{machine_key(cfg)}.json"


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _set_aside(path: Path, why: str) -> None:
    """Move an invalid cache out of the way (kept for inspection), with one line saying why."""
    target = path.with_name(path.name + ".invalid")
    try:
        os.replace(path, target)
        where = f"moved to {target}"
    except OSError:
        where = "left in place"
    _say(f"warning: ignoring the calibration cache {path} ({why}); {where}, measuring again")


def cache_unusable(path: Path) -> str | None:
    """Why no cache can ever live at ``path`` (a name too long for the file system), or None: then calibrating says
    so once and keeps the measurement in memory, rather than failing to read and again to write it."""
    import errno

    try:
        os.stat(path)
    except OSError as err:
        if err.errno == errno.ENAMETOOLONG:
            return f"{err.strerror} (ENAMETOOLONG)"
    return None


def read_cache(path: Path) -> Calibration | None:
    """The valid calibration at ``path``, or None (absent, outdated, or invalid: then set aside with one line)."""
    try:
        text = inputs.read_small_file(path, CACHE_LIMIT_BYTES, what="calibration cache")
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        try:
            present = path.exists() and not path.is_dir()
        except OSError:  # a path the file system cannot even look up
            present = False
        if present:
            _set_aside(path, str(err))
        else:
            _say(f"warning: cannot read the calibration cache {path} ({err}); measuring again")
        return None
    try:
        data = inputs.loads_json(text, what=str(path))
        if isinstance(data, dict) and data.get("version") != CALIBRATION_VERSION:
            return None  # written by another version of the course: measured again, silently
        return Calibration.from_dict(data)
    except ValueError as err:
        _set_aside(path, str(err))
        return None


def write_cache(cal: Calibration, path: Path) -> bool:
    """Write ``cal`` to ``path`` atomically; on failure say where and why (one line) and return False."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(cal.to_json())
        os.replace(tmp, path)  # atomic: two chapters calibrating at once never read half a file
        return True
    except BaseException as err:  # a Ctrl-C between writing and renaming leaves no .tmp behind either
        try:
            tmp.unlink()
        except OSError:
            pass
        if not isinstance(err, OSError):
            raise
        _say(f"warning: cannot save the calibration to {path} ({err.strerror or err}); using it in memory "
             "for this run (set STAGE5_CACHE_DIR to a writable directory to keep it)")
        return False
