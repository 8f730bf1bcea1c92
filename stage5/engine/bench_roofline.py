"""``python -m stage5 bench roofline``: the predicted against the measured decode step of the roofline toy.

For each batch size the paged, continuous engine serves that many short requests, and the median time of
its decode steps is compared with :func:`stage5.step_model.predict_step` from this machine's cached
calibration. Steps are timed as the calibration's timings are, on the thread's CPU clock
(:class:`~stage5.engine.clock.CpuClock`: time spent waiting for a core is left out), so a build on a busy
machine compares the same thing as one on a quiet machine; ``--wall`` times them on the wall clock instead. Batch sizes are measured interleaved, round after round (alternating direction), and medians are
reported, so a burst of other work on the machine hits every batch size alike. The calibration is re-checked
before use (:func:`stage5.calibrate.calibrated`); the report says how busy the machine was when it was
measured, whether it is provisional, and what the re-check did.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from stage5.calibration import Calibration
from stage5.inputs import OneLineParser, arg_rounds, dumps
from stage5.models import ModelConfig

BATCHES = (1, 2, 4, 8, 16, 32, 64)
PROMPT_LEN, NEW_TOKENS, BLOCK = 4, 8, 16
KEYS = ("batches", "predicted_ms", "measured_ms", "ratio", "memory_share_b1", "ridge_batch_predicted",
        "ridge_batch_measured", "speedup_b32_over_b1", "clock", "calibration")
CLOCKS = ("cpu", "wall")


def step_requests(batch: int, prompt_len: int = PROMPT_LEN, new_tokens: int = NEW_TOKENS):
    """``batch`` requests of ``prompt_len`` tokens, each answered with exactly ``new_tokens``."""
    from stage5.engine.sequence import Request
    from stage5.inputs import workload_size

    batch, lengths = workload_size(batch, {"prompt_len": prompt_len, "new_tokens": new_tokens}, "batch")
    prompt_len, new_tokens = lengths["prompt_len"], lengths["new_tokens"]

    return [Request(i, tuple((7 * i + j) % 251 for j in range(prompt_len)), new_tokens) for i in range(batch)]


def measure_decode_steps(model, cfg: ModelConfig, batches=BATCHES, rounds: int = 5, prompt_len: int = PROMPT_LEN,
                         new_tokens: int = NEW_TOKENS, clock: str = "cpu") -> tuple[dict[int, float], dict[int, float]]:
    """(median decode step seconds, mean K/V tokens per sequence in those steps) per batch size.

    ``clock``: ``cpu`` times each step on a :class:`~stage5.engine.clock.CpuClock` (a wait for a core is left
    out: the step as the calibration would time it), ``wall`` on the wall clock."""
    from stage5.engine.clock import CpuClock
    from stage5.engine.engine import Engine
    from stage5.inputs import InputError

    if clock not in CLOCKS:
        raise InputError(f"clock {clock!r}; accepted: one of {', '.join(CLOCKS)}")
    times: dict[int, list[float]] = {b: [] for b in batches}
    context: dict[int, list[float]] = {b: [] for b in batches}
    blocks = max(batches) * (-(-(prompt_len + new_tokens) // BLOCK) + 1)  # + the allocator's spare per sequence
    for r in range(rounds):
        for b in (batches if r % 2 == 0 else batches[::-1]):
            result = Engine(model, cfg, num_blocks=blocks, block_size=BLOCK, max_batch=b).run(
                step_requests(b, prompt_len, new_tokens), clock=CpuClock() if clock == "cpu" else None)
            for record in result.steps_log:
                if record.kind == "decode":
                    times[b].append(record.end_s - record.start_s)  # on the run's clock
                    context[b].append(record.context / len(record.ids))
    return ({b: statistics.median(t) for b, t in times.items()},
            {b: statistics.fmean(c) for b, c in context.items()})


def roofline_report(cal: Calibration, cfg: ModelConfig, measured_s: dict[int, float],
                    context: dict[int, float], clock: str = "cpu") -> dict:
    """The benchmark's JSON from measured median step times (seconds) per batch, timed on ``clock``; pure, so
    tests can feed it."""
    from stage5.step_model import knee_batch, predict_step, ridge_batch

    batches = sorted(measured_s)
    predicted = [float(predict_step(cal, cfg, b, context[b]).time_s) for b in batches]
    measured = [measured_s[b] for b in batches]
    b1 = predict_step(cal, cfg, batches[0], context[batches[0]])
    report = {
        "batches": batches,
        "predicted_ms": [1e3 * p for p in predicted],
        "measured_ms": [1e3 * m for m in measured],
        "ratio": [p / m for p, m in zip(predicted, measured, strict=True)],
        # the weight-streaming term's share of the measured batch-1 step
        "memory_share_b1": float(b1.memory_s) / measured[0],
        "ridge_batch_predicted": ridge_batch(cal, cfg),
        "ridge_batch_measured": knee_batch(batches, measured),
        # a property of this CPU (how far its matmul kernels gain with rows), reported as measured, never expected
        "speedup_b32_over_b1": (32 / measured_s[32]) / (1 / measured_s[1]) if {1, 32} <= set(batches) else None,
        "clock": clock,  # what the steps were timed on: "cpu" (waits for a core left out) or "wall"
        # how busy the machine was while the calibration was measured; run() adds what its re-check did
        "calibration": {"provisional": cal.provisional, "cpu_share": cal.cpu_share, "run_queue": cal.run_queue,
                        "cores": cal.cores, "check": None},
    }
    assert tuple(report) == KEYS
    return report


@dataclass
class RooflineMeasurement:
    """What a chapter needs: the calibration, the toy's config, the benchmark report and the ideal roofline."""

    cal: Calibration
    cfg: ModelConfig
    report: dict
    ideal_ms: list[float]
    context: dict[int, float]
    shares: tuple[float, ...] = ()  # batch-1 weight-streaming shares, one per round (measure_memory_share)
    calibration_note: str = ""  # what the calibration's re-check did, in one sentence (Checked.note)


def measure_for_chapter(batches=(1, 2, 4, 8, 16, 32), rounds: int = 3, new_tokens: int = 5) -> RooflineMeasurement:
    """The chapters' version of the benchmark: fewer batches, rounds and tokens, so it takes seconds."""
    import dataclasses

    from stage5.calibrate import calibrated
    from stage5.engine.roofline_toy import load_roofline_toy

    model, cfg = load_roofline_toy()
    checked = calibrated(cfg)
    measure_decode_steps(model, cfg, batches=(1,), rounds=1, new_tokens=3)  # warm up before timing
    measured, context = measure_decode_steps(model, cfg, batches, rounds, new_tokens=new_tokens)
    shares = tuple(measure_memory_share(model, cfg, new_tokens=new_tokens))
    toy = measurement_from(checked.cal, cfg, measured, context)
    toy.report["calibration"]["check"] = checked.note
    return dataclasses.replace(toy, shares=shares, calibration_note=checked.note)


def measurement_from(cal: Calibration, cfg: ModelConfig, measured_s: dict[int, float],
                     context: dict[int, float]) -> RooflineMeasurement:
    """Everything a chapter prints, from measured step seconds per batch (pure: the tests feed it fakes)."""
    from stage5.step_model import predict_step

    ideal = [1e3 * float(predict_step(cal, cfg, b, context[b], ideal=True).time_s) for b in sorted(measured_s)]
    return RooflineMeasurement(cal, cfg, roofline_report(cal, cfg, measured_s, context), ideal, context)


def measure_memory_share(model, cfg: ModelConfig, rounds: int = 7, new_tokens: int = 5,
                         passes: int = 3, clock: str = "cpu") -> list[float]:
    """Batch-1 decode's weight-streaming share of the step, one per round, each round measured under one set
    of conditions: the model's matrices streamed once by matrix-vector products (its weight read; the median of
    ``passes`` passes), then a batch-1 decode run (its median step), back to back. A busy machine slows both
    halves of a round alike, where a calibration cached at another time would not; the spread over rounds says
    how much the conditions moved. Both halves are timed on ``clock``, as :func:`measure_decode_steps` times."""
    import time

    import torch
    import torch.nn.functional as F

    from stage5.calibrate import model_matrices, on_cpu

    weights = [torch.full(shape, 1e-3) for shape in model_matrices(cfg)]
    inputs = {k: torch.ones(1, k) for k in {w.shape[1] for w in weights}}

    def one_pass() -> None:
        for w in weights:
            F.linear(inputs[w.shape[1]], w)

    def stream_s() -> float:
        times = []
        for _ in range(passes):
            if clock == "cpu":
                times.append(on_cpu(one_pass))
            else:
                t0 = time.perf_counter()
                one_pass()
                times.append(time.perf_counter() - t0)
        return statistics.median(times)

    stream_s()  # warm up
    shares = []
    for _ in range(rounds):
        stream = stream_s()
        step, _ = measure_decode_steps(model, cfg, batches=(1,), rounds=1, new_tokens=new_tokens, clock=clock)
        shares.append(stream / step[1])
    return shares


def run(rounds: int = 5, batches=BATCHES, force_calibration: bool = False, clock: str = "cpu") -> dict:
    from stage5.calibrate import calibrated
    from stage5.engine.roofline_toy import load_roofline_toy

    model, cfg = load_roofline_toy()
    checked = calibrated(cfg, force=force_calibration)
    measure_decode_steps(model, cfg, batches=(1, 4), rounds=1)  # warm up allocator and kernels before timing
    measured, context = measure_decode_steps(model, cfg, batches, rounds, clock=clock)
    report = roofline_report(checked.cal, cfg, measured, context, clock)
    report["calibration"]["check"] = checked.note
    return report


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m stage5 bench roofline", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=arg_rounds(), default=5,
                        help="interleaved rounds over the batch sizes (medians), 1 to 1,000")
    parser.add_argument("--recalibrate", action="store_true", help="measure this machine again, ignoring the cache")
    parser.add_argument("--wall", action="store_true",
                        help="time steps on the wall clock (a wait for a core included), not the thread's CPU clock")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args(argv)
    report = run(args.rounds, force_calibration=args.recalibrate, clock="wall" if args.wall else "cpu")
    if args.json:
        print(dumps(report, indent=1))
        return 0
    on = "the thread's CPU clock" if report["clock"] == "cpu" else "the wall clock"
    print(f"decode step of the roofline toy, one thread: predicted from the calibration vs measured (medians, on {on})")
    print(f"{'batch':>6}{'predicted ms':>14}{'measured ms':>13}{'ratio':>8}")
    for b, p, m, r in zip(report["batches"], report["predicted_ms"], report["measured_ms"], report["ratio"],
                          strict=True):
        print(f"{b:6d}{p:14.2f}{m:13.2f}{r:8.2f}")
    print(f"weight streaming is {report['memory_share_b1']:.0%} of the measured batch-1 step")
    print(f"ridge: batch {report['ridge_batch_predicted']:.0f} predicted, about {report['ridge_batch_measured']:.0f} "
          "from the measured curve's knee")
    if report["speedup_b32_over_b1"] is not None:
        print(f"tokens/s at batch 32 over batch 1: {report['speedup_b32_over_b1']:.1f}x (measured on this CPU)")
    print(report["calibration"]["check"])
    return 0


if __name__ == "__main__":
    from stage5.inputs import run_command

    run_command(main)
