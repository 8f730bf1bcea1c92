"""Prefill replicas and decode replicas of the toy engine, the K/V of each finished prefill copied from one pool to
the other, on the fleet's virtual clock; and the same requests served colocated (every replica both jobs, with and
without chunked prefill) at the same replica count. ``python -m stage5 bench disagg`` prints the comparison
(:mod:`stage5.engine.bench_disagg`); :mod:`stage5.disagg` is the cost model it is set beside.

**Every replica is the course's engine** (:class:`~stage5.engine.engine.Engine`: paged, continuous batching), with
its own K/V pool and its own :class:`~stage5.engine.clock.VirtualClock` pricing each step as the roofline toy on
this machine's calibration (as ``bench load`` and ``bench fleet`` do). The serving loop is the engine's
:meth:`~stage5.engine.engine.Engine.step`; this module only decides which replica steps next and routes.

**Disaggregated.** A request goes to the least-loaded prefill replica as a one-token request: its prefill computes
the prompt's K/V and samples the first token. When it finishes, the K/V of its prompt is copied out of the prefill
replica's blocks (:attr:`Engine.on_retire`, before the blocks are freed) and sent to the least-loaded decode
replica, which allocates blocks of its own, writes the K/V into them (its block table is rebuilt there) and seats
the sequence in its running batch (:meth:`Engine.adopt`) once a seat and room are free. The copy is timed on the
virtual clock: ``prompt x KV bytes per token`` of the roofline toy (float32) over the link, whose bandwidth is the
real link's share of its GPU's memory bandwidth applied to this machine's (a 400 Gb/s port per H100 SXM is 1.5% of
its 3.35 TB/s; :func:`toy_link_bandwidth`), streamed layer by layer under the prefill step
(:func:`stage5.disagg.exposed_s`); one prefill replica's copies share its link, one after another. The first
token counts as delivered when the copy lands (as the cost model's TTFT does).

**Colocated.** Each request goes to the least-loaded replica, which prefills and decodes it; ``chunked`` gives every
replica a per-step token budget (chunked prefill, decodes first).

Greedy tokens from the float64 tiny model do not depend on how a batch is formed, so every mode produces the same
answers token for token (checked by the tests and by the benchmark). Every number but wall time is deterministic
for a given calibration.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

import torch

from stage5 import disagg, inputs
from stage5.engine.engine import Engine, RunResult
from stage5.engine.fleet import FleetConfig, Router
from stage5.engine.metrics import RequestTimes, latency_summary
from stage5.engine.replica import EngineReplica
from stage5.engine.sequence import Request, Sequence
from stage5.hardware import get_gpu

MODES = ("colocated", "chunked", "disaggregated")
BYTES_PER_NUMBER = 4  # the roofline toy's K/V is float32, as the clock prices it (stage5.step_model)


@dataclass(frozen=True)
class DisaggConfig:
    """How the fleet is built: ``replicas`` in all; in ``disaggregated`` mode ``prefill_replicas`` of them prefill
    and the rest decode. Each replica's pool, batch, and (``chunked``) token budget; the link and its GPU."""

    mode: str = "disaggregated"
    replicas: int = 4
    prefill_replicas: int = 2
    num_blocks: int = 512
    block_size: int = 16
    max_batch: int = 16
    token_budget: int = 64
    link: str = "rdma"
    gpu: str = "H100-SXM"
    streamed: bool = True

    def __post_init__(self) -> None:
        inputs.choice(self.mode, "mode", MODES)
        inputs.integer(self.replicas, "replicas", minimum=1, maximum=64)
        if self.mode == "disaggregated":
            inputs.integer(self.replicas, "replicas (a disaggregated fleet needs a prefill and a decode replica)",
                           minimum=2, maximum=64)
            inputs.integer(self.prefill_replicas, "prefill_replicas", minimum=1, maximum=self.replicas - 1)
        inputs.integer(self.num_blocks, "num_blocks (per replica)", minimum=2, maximum=1 << 20)
        inputs.integer(self.block_size, "block_size (tokens)", minimum=1, maximum=4096)
        inputs.integer(self.max_batch, "max_batch", minimum=1, maximum=4096)
        inputs.integer(self.token_budget, "token_budget (tokens per step)", minimum=1, maximum=1 << 20)
        disagg.link_bandwidth(self.link, get_gpu(self.gpu))
        inputs.boolean(self.streamed, "streamed")

    @property
    def decode_replicas(self) -> int:
        return self.replicas - self.prefill_replicas if self.mode == "disaggregated" else 0


def toy_link_bandwidth(cal, link: str, gpu: str = "H100-SXM") -> float:
    """Bytes/s of the toy's link: ``link``'s bandwidth over ``gpu``'s memory bandwidth (both from the datasheets,
    :func:`stage5.disagg.link_bandwidth`), times this machine's measured bandwidth, so a copy costs the toy what it
    costs that GPU relative to a step."""
    g = get_gpu(gpu)
    return cal.bandwidth * disagg.link_bandwidth(link, g) / g.bandwidth


@dataclass(order=True)
class _Handoff:
    ready: float
    order: int
    request: Request = field(compare=False)
    first_token: int = field(compare=False)
    kv: torch.Tensor = field(compare=False, repr=False)


class Node(EngineReplica):
    """One replica: an engine, its clock, and (decode replicas) the sequences whose K/V has landed or is on its way."""

    def __init__(self, index: int, role: str, model, cfg, cal, config: DisaggConfig):
        super().__init__(index, model, cfg, cal, num_blocks=config.num_blocks, block_size=config.block_size,
                         max_batch=config.max_batch,
                         token_budget=config.token_budget if config.mode == "chunked" else None)
        self.role = role
        self.inbox: list[_Handoff] = []  # sorted by ready time
        self.link_free = 0.0  # prefill replicas: when their link finishes the copies already queued on it

    @property
    def load(self) -> int:
        """Requests sent here and not finished, and K/V copies on their way here."""
        return super().load + len(self.inbox)

    def _upcoming(self) -> list[float]:
        """Its next arrival, and its next copy to land."""
        return super()._upcoming() + ([self.inbox[0].ready] if self.inbox else [])

    def seat_landed(self) -> None:
        """Seat every copy that has landed by now, oldest first, while a seat and room are free."""
        if not self.busy and not self.engine.scheduler.pending and self.inbox:
            self.engine.clock.wait_until(self.inbox[0].ready)
        while self.inbox and self.inbox[0].ready <= self.now:
            h = self.inbox[0]
            if not self.engine.adopt(h.request, h.first_token, h.kv, self.now):
                break
            self.inbox.pop(0)


@dataclass
class DisaggResult:
    """What one fleet run measured, on the virtual clock."""

    config: DisaggConfig
    times: dict[int, RequestTimes] = field(repr=False)
    outputs: dict[int, list[int]] = field(repr=False)
    runs: list[RunResult] = field(repr=False)
    bytes_moved: int
    copy_s: float  # link seconds spent copying, summed over copies
    exposed_s: float  # of which after the prefill step ended, summed
    preemptions: int

    @property
    def duration_s(self) -> float:
        return max(t.finish for t in self.times.values())

    def summary(self, ttft_target_s: float, tpot_target_s: float) -> dict:
        lat = latency_summary(list(self.times.values()), self.duration_s, ttft_target_s, tpot_target_s)
        keys = ("ttft_p50", "ttft_p90", "ttft_p99", "tpot_mean", "tpot_p50", "tpot_p90", "tpot_p99", "itl_p99",
                "throughput",
                "goodput", "good_share")
        return {**{k: lat[k] for k in keys}, "requests": len(self.times),
                "tpot_samples": sum(t.tpot is not None for t in self.times.values()),
                "bytes_moved": self.bytes_moved, "copy_s": self.copy_s, "exposed_copy_s": self.exposed_s,
                "preemptions": self.preemptions, "duration_s": self.duration_s}


def serve(model, cfg, cal, requests: list[Request], config: DisaggConfig) -> DisaggResult:
    """Serve ``requests`` (each sent at its ``arrival``) on the fleet ``config`` describes; see the module docstring."""
    from stage5.engine.roofline_toy import ROOFLINE_TOY

    if not requests:
        raise inputs.InputError("no requests to serve; accepted: a non-empty list of Request")
    split = config.mode == "disaggregated"
    n_p = config.prefill_replicas if split else config.replicas
    front = [Node(i, "prefill" if split else "both", model, cfg, cal, config) for i in range(n_p)]
    back = [Node(n_p + i, "decode", model, cfg, cal, config) for i in range(config.decode_replicas)]
    nodes = front + back
    route_front = Router(FleetConfig(replicas=len(front), policy="least_loaded"))
    route_back = Router(FleetConfig(replicas=max(len(back), 1), policy="least_loaded"))
    link = toy_link_bandwidth(cal, config.link, config.gpu)
    per_token = ROOFLINE_TOY.kv_bytes_per_token(BYTES_PER_NUMBER)
    layers = ROOFLINE_TOY.num_layers
    slots = config.num_blocks * config.block_size
    longest = max(requests, key=lambda r: r.max_len)
    if longest.max_len > slots:
        raise inputs.InputError(f"request {longest.id} may need {longest.max_len} K/V slots, but a replica's pool holds "
                                f"{slots} ({config.num_blocks} blocks of {config.block_size}); accepted: a larger pool "
                                "(num_blocks) or shorter requests")
    originals = {r.id: r for r in requests}
    if len(originals) != len(requests):
        raise inputs.InputError("request ids must be unique; accepted: one id per request")
    done_prefill: list[tuple[int, int, torch.Tensor]] = []  # (request id, first token, K/V) from the step just run
    for node in front:
        if split:
            node.engine.on_retire = lambda seq, node=node: done_prefill.append(_copy_out(node.engine, seq))
    first_at: dict[int, float] = {}  # request id -> when its first token was delivered (the copy landed)
    moved = 0
    copy_total = exposed_total = 0.0
    order = 0
    arrivals = sorted(requests, key=lambda r: (r.arrival, r.id))
    a = 0
    while a < len(arrivals) or any(n.next_time < math.inf for n in nodes):
        t_arr = arrivals[a].arrival if a < len(arrivals) else math.inf
        node = min(nodes, key=lambda n: (n.next_time, n.index))
        if node.next_time < t_arr:
            if node.role == "decode":
                node.seat_landed()
                if not node.busy:
                    continue
            record = node.engine.step()
            if record is None:
                continue
            for rid, token, kv in done_prefill:
                request = originals[rid]
                step_s = record.end_s - record.start_s
                transfer = len(request.prompt) * per_token / link
                start = max(node.link_free, record.start_s + step_s / layers if config.streamed else record.end_s)
                ready = max(record.end_s + float(disagg.exposed_s(step_s, transfer, layers, config.streamed)),
                            start + transfer)
                node.link_free = ready
                moved += len(request.prompt) * per_token
                copy_total += transfer
                exposed_total += ready - record.end_s
                first_at[rid] = ready
                if request.output_len > 1:
                    target = back[route_back.choose(back, request, [])]
                    bisect.insort(target.inbox, _Handoff(ready, order, request, token, kv))
                    target.sent += 1
                    order += 1
            done_prefill.clear()
            continue
        request = arrivals[a]
        a += 1
        target = front[route_front.choose(front, request, [])]
        target.engine.add(Request(request.id, request.prompt, 1, None, request.arrival) if split else request)
        target.sent += 1
    runs = [n.engine.finish() for n in nodes]
    times, outputs = _combine(requests, runs[:len(front)], runs[len(front):], first_at, split)
    return DisaggResult(config, times, outputs, runs, int(moved), copy_total, exposed_total,
                        sum(r.preemptions for r in runs))


def _copy_out(engine: Engine, seq: Sequence) -> tuple[int, int, torch.Tensor]:
    """The K/V of a finished prefill's prompt, read out of its blocks before they are freed, and its first token."""
    prompt = len(seq.request.prompt)
    slots = engine.alloc.slots(seq, torch.arange(prompt))
    return seq.id, seq.tokens[prompt], engine.pool.data[:, :, slots].clone()


def _combine(requests, front: list[RunResult], back: list[RunResult], first_at: dict[int, float],
             split: bool) -> tuple[dict[int, RequestTimes], dict[int, list[int]]]:
    """Each request's times and answer across the replicas that served it."""
    first = {i: t for r in front for i, t in r.requests.items()}
    outputs = {i: o for r in front for i, o in r.outputs.items()}
    if not split:
        return first, outputs
    later = {i: t for r in back for i, t in r.requests.items()}
    outputs.update({i: o for r in back for i, o in r.outputs.items()})
    times = {}
    for request in requests:
        p = first[request.id]
        landed = first_at[request.id]
        if request.id not in later:  # a one-token answer: done at its prefill
            times[request.id] = RequestTimes(p.arrival, p.admitted, landed, landed, 1, [], landed)
            continue
        d = later[request.id]
        gaps = [d.first_token - landed, *d.gaps]
        times[request.id] = RequestTimes(p.arrival, p.admitted, landed, d.finish, 1 + d.output_tokens, gaps,
                                         d.last_token)
    return times, outputs
