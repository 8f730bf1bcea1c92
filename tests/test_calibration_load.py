"""Calibration on a busy machine (issue 54): timings that survive load, the load recorded, a cache re-checked.

The machine these tests run on is shared and busy, so nothing here passes or fails on the wall clock: step
times are taken on the thread's CPU clock (stage5.engine.clock.CpuClock), as the calibration and the chapters
take them, and costs are asserted in process CPU seconds. The two real calibrations
measure the matmul rate only up to the rows the benchmark's batches need (a quarter of the full calibration's
matmul work), and the reference for the re-check only at the rows the probe uses; everything else is the code
the chapters run. In all, about 6 CPU seconds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from stage5 import calibrate as cal_mod
from stage5 import calibration
from stage5.calibration import Calibration, Load
from stage5.engine.bench_roofline import BATCHES, measure_decode_steps, roofline_report
from stage5.engine.clock import CpuClock
from stage5.engine.roofline_toy import ROOFLINE_TOY, load_roofline_toy

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[1]
ROWS = tuple(r for r in cal_mod.ROWS if r <= max(BATCHES))  # every batch the benchmark measures, one row each
WITHIN = 1.25  # the bound: predicted within 25% of measured at every batch


@contextlib.contextmanager
def burners(n: int):
    """``n`` CPU-bound Python processes (as scripts/with_cpu_load.py starts), stopped by their own ids."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        deadline = time.monotonic() + 30  # a guard only: wait until each has started its loop
        while time.monotonic() < deadline and any(_cpu_ticks(h.pid) < 5 for h in hogs):
            time.sleep(0.05)
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()


def _cpu_ticks(pid: int) -> int:
    """User-mode clock ticks a process has run (Linux), or a large number where /proc cannot say."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[11])
    except (OSError, IndexError, ValueError):
        return 10**9


@pytest.fixture(scope="module")
def under_load() -> Calibration:
    """This machine calibrated while three busy loops compete for its cores."""
    with burners(3):
        return cal_mod.measure(ROOFLINE_TOY, rows=ROWS)


@pytest.fixture(scope="module")
def now() -> Calibration:
    """This machine calibrated as it is now (no burners of ours), as a reference for the re-check: at the rows
    the probe multiplies by and one, which is all the probe predicts from."""
    return dataclasses.replace(cal_mod.measure(ROOFLINE_TOY, rows=(1, cal_mod.PROBE_ROWS)), provisional=False)


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("STAGE5_CACHE_DIR", str(tmp_path))
    return tmp_path


def _write(cal: Calibration) -> Path:
    path = cal_mod.cache_path(ROOFLINE_TOY)
    assert calibration.write_cache(cal, path)
    return path


# ------------------------------------------------------------------ a calibration under load, used on a quiet core
def test_a_calibration_beside_three_burners_predicts_the_step_without_them(under_load):
    if under_load.run_queue is not None:  # the snapshots saw the three loops ready to run
        assert under_load.run_queue >= 2.5, under_load
    if calibration.cores() <= 3:  # three loops leave no core free: the calibration says it was taken under load
        assert under_load.provisional and under_load.cpu_share < calibration.QUIET_CPU_SHARE, under_load
    model, cfg = load_roofline_toy()
    measure_decode_steps(model, cfg, batches=(1,), rounds=1, new_tokens=3)  # warm up
    measured, context = measure_decode_steps(model, cfg, BATCHES, rounds=1, new_tokens=5)
    report = roofline_report(under_load, cfg, measured, context)
    assert all(1 / WITHIN <= r <= WITHIN for r in report["ratio"]), (report["ratio"], under_load)
    assert report["calibration"]["provisional"] == under_load.provisional
    # the gain of batch 32 over batch 1 is whatever this CPU measured, reported as such, never a fixed figure
    assert report["speedup_b32_over_b1"] == pytest.approx(32 * measured[1] / measured[32])


# ------------------------------------------------------------------ the re-check of a cached calibration
def test_the_recheck_keeps_a_true_calibration_for_under_2_cpu_seconds(now, cache_home, monkeypatch, capsys):
    _write(now)
    monkeypatch.setattr(cal_mod, "measure", lambda *a, **k: pytest.fail("a true calibration was measured again"))
    cpu0 = time.process_time()
    checked = cal_mod.calibrated(ROOFLINE_TOY)
    cost = time.process_time() - cpu0
    assert checked.action == "kept" and checked.cal == now, checked.probe
    assert cost < 2.0, f"the re-check cost {cost:.2f} CPU seconds"
    assert set(checked.probe.ratios) == {"stream", "matmul", *(f"overhead_b{b}" for b in cal_mod.PROBE_BATCHES)}
    assert "passed its check" in checked.note and "\n" not in checked.note
    assert capsys.readouterr().err == ""  # nothing to say about a quiet calibration that holds
    # asked again in the same process, it is not probed again
    monkeypatch.setattr(cal_mod, "probe", lambda *a, **k: pytest.fail("probed twice"))
    assert cal_mod.calibrated(ROOFLINE_TOY) is checked


@pytest.mark.parametrize("factor", [1.4, 1 / 1.4], ids=["40pct_fast", "40pct_slow"])
def test_a_cache_40_percent_off_is_detected_and_replaced(factor, now, cache_home, monkeypatch, capsys):
    """Every figure 40% off, in either direction: the machine claimed 1.4 times faster, or slower."""
    off = dataclasses.replace(now, bandwidth=now.bandwidth * factor, rates=tuple(r * factor for r in now.rates),
                              overhead_step_s=now.overhead_step_s / factor,
                              overhead_seq_s=now.overhead_seq_s / factor)
    path = _write(off)
    calls = []
    monkeypatch.setattr(cal_mod, "measure", lambda cfg, rows=cal_mod.ROWS: calls.append(cfg) or now)
    checked = cal_mod.calibrated(ROOFLINE_TOY)
    assert checked.action == "remeasured" and "off" in checked.reasons and len(calls) == 1, checked.probe
    assert checked.cal == now and calibration.read_cache(path) == now  # replaced on disk too
    worst = checked.probe.ratios[checked.probe.worst]
    assert not 1 / cal_mod.TOLERANCE <= worst <= cal_mod.TOLERANCE
    assert (worst < 1) == (factor > 1)  # a machine claimed faster predicts too short a step
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "was replaced" in err and "Traceback" not in err, err


def _probe(ratio: float, quiet: bool) -> cal_mod.Probe:
    load = Load(1.0, 0.0, 0.5, 2) if quiet else Load(0.4, 3.0, 4.0, 2)
    return cal_mod.Probe({"stream": ratio, "matmul": ratio, "overhead_b1": ratio, "overhead_b64": ratio}, load, 0.1)


GOOD = Calibration(machine="test", threads=1, bandwidth=20e9, rows=(1, 4, 16, 64, 256),
                   rates=(10e9, 25e9, 60e9, 90e9, 100e9), overhead_step_s=5e-4, overhead_seq_s=5e-5,
                   model=ROOFLINE_TOY.name, cpu_share=0.99, run_queue=0.2, load_1m=0.3, cores=2,
                   measured_at=1.7e9)
BUSY = dataclasses.replace(GOOD, bandwidth=15e9, cpu_share=0.45, run_queue=3.1, load_1m=4.0, provisional=True)


@pytest.mark.parametrize("quiet", [True, False], ids=["quiet_now", "still_busy"])
def test_a_provisional_calibration_is_replaced_at_the_next_quiet_chance(quiet, cache_home, monkeypatch, capsys):
    path = _write(BUSY)
    monkeypatch.setattr(cal_mod, "probe", lambda cal, cfg: _probe(1.05, quiet))
    monkeypatch.setattr(cal_mod, "measure", lambda cfg: GOOD)
    checked = cal_mod.calibrated(ROOFLINE_TOY)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    if quiet:
        assert checked.action == "remeasured" and checked.reasons == ("quiet",) and checked.cal == GOOD
        assert calibration.read_cache(path) == GOOD
        assert "under load (45% of a CPU core" in checked.note and "quiet now" in checked.note
    else:
        assert checked.action == "kept" and checked.cal == BUSY and calibration.read_cache(path) == BUSY
        assert "provisional" in checked.note and "predicted over measured: 1" in checked.note


def test_a_fresh_calibration_under_load_says_it_is_provisional(cache_home, monkeypatch, capsys):
    monkeypatch.setattr(cal_mod, "measure", lambda cfg: BUSY)
    checked = cal_mod.calibrated(ROOFLINE_TOY)
    assert checked.action == "measured" and checked.probe is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "provisional" in err and "3.1 other tasks ready to run on 2 cores" in err, err
    monkeypatch.setattr(cal_mod, "measure", lambda cfg: GOOD)
    assert cal_mod.calibrated(ROOFLINE_TOY, force=True).note == "This machine was calibrated just now, quiet."


def test_calibrate_json_and_bench_report_carry_the_load(cache_home, monkeypatch, capsys):
    from stage5.__main__ import main

    monkeypatch.setattr(cal_mod, "measure", lambda cfg: BUSY)
    assert main(["calibrate", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["provisional"] is True and shown["cpu_share"] == 0.45 and shown["run_queue"] == 3.1
    assert "provisional" in shown["check"]


# ------------------------------------------------------------------ the cache's new fields are a door too
LOADED_DICT = json.loads(GOOD.to_json())
HOSTILE_LOAD = [
    ({"provisional": "no"}, "provisional"), ({"provisional": 0}, "provisional"), ({"cpu_share": math.nan}, "cpu_share"),
    ({"cpu_share": -0.1}, "cpu_share"), ({"cpu_share": 50}, "cpu_share"), ({"run_queue": "3"}, "run_queue"),
    ({"run_queue": -1}, "run_queue"), ({"load_1m": math.inf}, "load_1m"), ({"cores": 0}, "cores"),
    ({"cores": True}, "cores"), ({"measured_at": -5}, "measured_at"), ({"measured_at": 1e300}, "measured_at"),
]


@pytest.mark.parametrize("change, field", HOSTILE_LOAD + [("drop:provisional", "provisional"),
                                                         ("drop:cpu_share", "cpu_share")])
def test_a_hostile_load_record_is_one_line_and_measured_again(change, field, cache_home, monkeypatch, capsys):
    data = dict(LOADED_DICT)
    if isinstance(change, str):
        del data[change.split(":")[1]]
    else:
        data.update(change)
    path = cal_mod.cache_path(ROOFLINE_TOY)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    monkeypatch.setattr(cal_mod, "measure", lambda cfg: GOOD)
    monkeypatch.setattr(cal_mod, "probe", lambda *a, **k: pytest.fail("a hostile cache was probed, not set aside"))
    assert cal_mod.calibrate(ROOFLINE_TOY) == GOOD
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and field in err and "Traceback" not in err, err
    assert path.with_name(path.name + ".invalid").exists() and calibration.read_cache(path) == GOOD


def test_quiet_means_most_of_a_core_and_a_core_free():
    assert not BUSY.load.quiet and GOOD.load.quiet
    assert not Load(0.95, 2.0, None, 2).quiet  # every core had another task ready: not quiet
    assert Load(0.95, None, None, 2).quiet  # no run queue known: the CPU share decides
    queue, load = calibration.machine_load()
    assert queue is None or (queue >= 0 and math.isfinite(queue))
    assert load is None or (load >= 0 and math.isfinite(load))


# ------------------------------------------------------------------ the CPU clock
def test_the_cpu_clock_leaves_out_a_wait_and_keeps_work():
    clock = CpuClock()
    _ = clock.now  # the engine reads the clock as a step begins
    t0 = time.perf_counter()
    time.sleep(0.05)  # waiting, as for a core another process holds
    waited = clock.step(1, 1, 0, time.perf_counter() - t0)
    assert waited < 0.02, waited
    _ = clock.now
    cpu0, t0 = time.thread_time(), time.perf_counter()
    while time.thread_time() - cpu0 < 0.02:
        pass
    worked = clock.step(1, 1, 0, time.perf_counter() - t0)
    assert 0.02 <= worked <= time.perf_counter() - t0, worked


# ------------------------------------------------------------------ the batch gain is measured, never required
def test_no_test_or_chapter_requires_a_fixed_batch_gain():
    """The gain of batch 32 over batch 1 is a property of the CPU (3.9x on one machine, about 10x on another):
    nothing compares it with a number typed in."""
    literal = re.compile(r"(speedup_b32_over_b1|throughput_gain)\W*\s*(==|<=|>=|<|>)\s*\d")
    offenders = [f"{p.name}:{i}" for p in sorted((REPO / "tests").glob("*.py"))
                 for i, line in enumerate(p.read_text().splitlines(), 1) if literal.search(line)]
    assert offenders == []
    for name in ("02_roofline", "04_batching"):
        text = (REPO / "book" / f"{name}.ipynb").read_text()
        # the toy's gain is glued from the measurement wherever the prose states it
        assert not re.search(r"batch 32[^.]{0,80}?\b\d+(\.\d+)?\s*(×|x)\b", text), name


def test_bench_roofline_times_on_the_cpu_clock_unless_told_wall(cache_home, monkeypatch, capsys):
    from stage5.__main__ import main
    from stage5.engine import bench_roofline
    from stage5.inputs import InputError

    monkeypatch.setattr(cal_mod, "measure", lambda cfg: GOOD)
    monkeypatch.setattr("stage5.engine.roofline_toy.load_roofline_toy", lambda: (None, ROOFLINE_TOY))
    seen = []

    def fake(model, cfg, batches=BATCHES, rounds=5, clock="cpu", **kwargs):
        seen.append(clock)
        return {b: 1e-3 * (1 + b / 32) for b in batches}, {b: 8.0 for b in batches}

    monkeypatch.setattr(bench_roofline, "measure_decode_steps", fake)
    for argv, clock in ((["bench", "roofline", "--rounds", "1", "--json"], "cpu"),
                        (["bench", "roofline", "--rounds", "1", "--wall", "--json"], "wall")):
        assert main(argv) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["clock"] == seen[-1] == clock
        assert report["calibration"]["check"] == "This machine was calibrated just now, quiet."
    monkeypatch.undo()
    with pytest.raises(InputError, match="accepted: one of cpu, wall"):
        bench_roofline.measure_decode_steps(None, ROOFLINE_TOY, clock="gpu")
