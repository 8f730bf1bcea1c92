"""What a serving run measured, recorded in one place.

:class:`Recorder` is called by the engine once per step and once per event of a request (admitted, first
token, finished). It keeps the per-step log (a :class:`StepRecord` each, which is also what an ``on_step``
hook receives), the per-request timestamps, and builds the :class:`RunResult`.

Latencies follow vLLM's serving benchmark and DistServe:

* **TTFT** (time to first token) = first token - arrival; it includes the **queueing delay** (admission -
  arrival) and the prefill;
* **TPOT** (time per output token) = (finish - first token) / (output tokens - 1), the mean gap between a
  request's later tokens (undefined for one-token answers, which are left out of TPOT percentiles);
* **ITL** (inter-token latency) = the gap between two consecutive tokens of one request; its p99 over every
  gap of every request shows the longest stalls, which a per-request mean such as TPOT averages away;
* **end-to-end** = finish - arrival;
* **goodput** = requests per second that met both a TTFT and a TPOT target.

Times are on the run's clock (:mod:`stage5.engine.clock`): wall seconds, or the step model's virtual ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from stage5.engine.sequence import Sequence

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class StepRecord:
    """One step, as the scheduler ran it. ``start_s``/``end_s`` are on the run's clock; ``wall_s`` is measured."""

    index: int  # 1-based
    kind: str  # "prefill" if the step admitted a request or fed a prompt chunk, else "decode"
    ids: tuple[int, ...]  # sequences that fed tokens, in batch order
    fed: tuple[int, ...]  # tokens each of them fed
    context: int  # K/V tokens the batch attended over
    admitted: tuple[int, ...]
    sampled: tuple[int, ...]  # sequences that produced a token (a prompt chunk short of the end produces none)
    finished: tuple[int, ...]
    preemptions: int  # preemptions so far in the run
    start_s: float
    end_s: float
    wall_s: float
    running: tuple[Sequence, ...] = field(repr=False, default=())  # the running sequences after the step (live)
    waiting: tuple[Sequence, ...] = field(repr=False, default=())  # arrived and not admitted, oldest first

    @property
    def tokens(self) -> int:
        return sum(self.fed)


@dataclass
class RequestTimes:
    """When things happened to one request, on the run's clock."""

    arrival: float
    admitted: float | None = None  # first admission (a preempted request keeps it)
    first_token: float | None = None
    finish: float | None = None
    output_tokens: int = 0
    gaps: list[float] = field(default_factory=list, repr=False)  # between consecutive tokens (ITL)
    last_token: float | None = None

    @property
    def ttft(self) -> float:
        return self.first_token - self.arrival

    @property
    def queueing(self) -> float:
        return self.admitted - self.arrival

    @property
    def e2e(self) -> float:
        return self.finish - self.arrival

    @property
    def tpot(self) -> float | None:
        return (self.finish - self.first_token) / (self.output_tokens - 1) if self.output_tokens > 1 else None


def latency_summary(times: list[RequestTimes], duration_s: float, ttft_target_s: float = float("inf"),
                    tpot_target_s: float = float("inf")) -> dict[str, float]:
    """``ttft_p50`` .. ``e2e_p99``, ``queueing_p50`` .., ``throughput`` (output tokens/s), ``request_rate``
    (finished requests/s) and ``goodput`` (requests/s meeting both targets), over ``duration_s``."""
    out: dict[str, float] = {}
    series = {"ttft": [t.ttft for t in times], "tpot": [t.tpot for t in times if t.tpot is not None],
              "e2e": [t.e2e for t in times], "queueing": [t.queueing for t in times],
              "itl": [g for t in times for g in t.gaps]}
    for name, values in series.items():
        for p in PERCENTILES:
            out[f"{name}_p{p}"] = float(np.percentile(values, p)) if values else 0.0
        out[f"{name}_mean"] = float(np.mean(values)) if values else 0.0
    good = sum(t.ttft <= ttft_target_s and (t.tpot or 0.0) <= tpot_target_s for t in times)
    out["throughput"] = sum(t.output_tokens for t in times) / duration_s if duration_s > 0 else 0.0
    out["request_rate"] = len(times) / duration_s if duration_s > 0 else 0.0
    out["goodput"] = good / duration_s if duration_s > 0 else 0.0
    out["good_share"] = good / len(times) if times else 0.0
    return out


@dataclass
class RunResult:
    """Everything a run measured. All fields but ``wall_s`` and ``tokens_per_s`` are deterministic."""

    allocator: str
    scheduler: str
    steps: int
    prefill_steps: int
    output_tokens: int
    kv_utilization: float  # mean over steps of (K/V tokens stored) / (slots reserved)
    peak_running: int
    preemptions: int
    wall_s: float
    outputs: dict[int, list[int]]  # request id -> generated token ids
    trace: list[tuple[str, tuple[int, ...]]] = field(repr=False)  # per step: ("prefill"|"decode", ids that ran)
    step_context: list[int] = field(repr=False)  # per step: K/V tokens the batch attended over
    step_s: list[float] = field(repr=False)  # per step: seconds (not deterministic)
    logits: dict[int, list[torch.Tensor]] | None = field(default=None, repr=False)
    prefix_caching: bool = False
    prefill_tokens_computed: int = 0  # tokens fed at admissions (recomputes after preemption included)
    prefill_tokens_skipped: int = 0  # tokens found in the prefix cache at admissions
    ttft_steps: dict[int, int] = field(default_factory=dict, repr=False)  # id -> step (1-based) of 1st token
    ttft_s: dict[int, float] = field(default_factory=dict, repr=False)  # id -> seconds from start to 1st token
    step_tokens: list[int] = field(default_factory=list, repr=False)  # per step: tokens fed through the model
    clock: str = "wall"  # what the latencies below are measured on: "wall" or "virtual" (see stage5.engine.clock)
    duration_s: float = 0.0  # the run's length on that clock, from time 0 to the last token
    requests: dict[int, RequestTimes] = field(default_factory=dict, repr=False)  # id -> when things happened
    steps_log: list[StepRecord] = field(default_factory=list, repr=False)

    @property
    def hit_rate(self) -> float:
        """Share of the prompt tokens fed at admissions that the prefix cache already held."""
        total = self.prefill_tokens_computed + self.prefill_tokens_skipped
        return self.prefill_tokens_skipped / total if total else 0.0

    @property
    def mean_ttft_steps(self) -> float:
        return sum(self.ttft_steps.values()) / len(self.ttft_steps) if self.ttft_steps else 0.0

    @property
    def mean_ttft_s(self) -> float:
        return sum(self.ttft_s.values()) / len(self.ttft_s) if self.ttft_s else 0.0

    def prefix_metrics(self) -> dict[str, float | int]:
        """The numbers ``bench prefix`` reports (all deterministic except the ``_s`` ones)."""
        return {"hit_rate": self.hit_rate, "prefill_tokens_computed": self.prefill_tokens_computed,
                "prefill_tokens_skipped": self.prefill_tokens_skipped, "mean_ttft_steps": self.mean_ttft_steps,
                "mean_ttft_s": self.mean_ttft_s, "tokens_per_s": self.tokens_per_s, "steps": self.steps,
                "wall_s": self.wall_s}

    @property
    def tokens_per_step(self) -> float:
        return self.output_tokens / self.steps if self.steps else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.wall_s if self.wall_s > 0 else 0.0

    def latency(self, ttft_target_s: float = float("inf"), tpot_target_s: float = float("inf")) -> dict[str, float]:
        """Per-request latencies on the run's clock as percentiles, throughput, and goodput under the targets."""
        return latency_summary(list(self.requests.values()), self.duration_s, ttft_target_s, tpot_target_s)

    def metrics(self) -> dict[str, float | int]:
        return {"tokens_per_s": self.tokens_per_s, "tokens_per_step": self.tokens_per_step,
                "kv_utilization": self.kv_utilization, "peak_running": self.peak_running, "steps": self.steps,
                "wall_s": self.wall_s, "output_tokens": self.output_tokens, "prefill_steps": self.prefill_steps,
                "preemptions": self.preemptions}


class Recorder:
    """Counts everything a run reports, once; the engine calls it and builds nothing else."""

    def __init__(self, requests, record_logits: bool = False):
        self.times = {r.id: RequestTimes(arrival=r.arrival) for r in requests}
        self.log: list[StepRecord] = []
        self.utilization: list[float] = []
        self.outputs: dict[int, list[int]] = {}
        self.logits: dict[int, list[torch.Tensor]] | None = {} if record_logits else None
        self.prefill_computed = self.prefill_skipped = self.peak = 0
        self.ttft_steps: dict[int, int] = {}

    def add(self, request) -> None:
        """A request sent while the run is under way (:meth:`stage5.engine.engine.Engine.add`)."""
        self.times[request.id] = RequestTimes(arrival=request.arrival)

    def admitted(self, seqs: list[Sequence], now: float) -> None:
        for seq in seqs:
            self.prefill_skipped += seq.num_cached
            self.prefill_computed += len(seq.tokens) - seq.num_cached
            if self.times[seq.id].admitted is None:
                self.times[seq.id].admitted = now

    def sampled(self, seq: Sequence, logits: torch.Tensor | None, now: float, step: int) -> None:
        t = self.times[seq.id]
        t.output_tokens += 1
        if t.first_token is None:
            t.first_token = now
            self.ttft_steps[seq.id] = step
        else:
            t.gaps.append(now - t.last_token)
        t.last_token = now
        if self.logits is not None and logits is not None:
            self.logits.setdefault(seq.id, []).append(logits.clone())

    def finished(self, seq: Sequence, now: float) -> None:
        self.times[seq.id].finish = now
        self.outputs[seq.id] = seq.output

    def occupancy(self, running: list[Sequence], alloc) -> None:
        """Batch size and K/V utilisation after the forward pass, before finished sequences leave."""
        self.peak = max(self.peak, len(running))
        reserved = sum(alloc.reserved(s) for s in running)
        if reserved:
            self.utilization.append(sum(s.num_cached for s in running) / reserved)

    def step(self, record: StepRecord) -> None:
        self.log.append(record)

    def result(self, requests, allocator: str, scheduler: str, preemptions: int, wall_s: float, clock: str,
               prefix_caching: bool) -> RunResult:
        log = self.log
        return RunResult(
            allocator=allocator, scheduler=scheduler, steps=len(log),
            prefill_steps=sum(r.kind == "prefill" for r in log),
            output_tokens=sum(t.output_tokens for t in self.times.values()),
            kv_utilization=sum(self.utilization) / len(self.utilization) if self.utilization else 0.0,
            peak_running=self.peak, preemptions=preemptions, wall_s=wall_s,
            outputs={r.id: self.outputs[r.id] for r in requests}, trace=[(r.kind, r.ids) for r in log],
            step_context=[r.context for r in log], step_s=[r.wall_s for r in log], logits=self.logits,
            prefix_caching=prefix_caching, prefill_tokens_computed=self.prefill_computed,
            prefill_tokens_skipped=self.prefill_skipped, ttft_steps=self.ttft_steps,
            ttft_s={i: t.ttft for i, t in self.times.items()}, step_tokens=[r.tokens for r in log], clock=clock,
            duration_s=log[-1].end_s if log else 0.0, requests=self.times, steps_log=log)
