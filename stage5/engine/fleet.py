"""Several toy replicas behind a router, on the load benchmark's virtual clock (``python -m stage5 bench fleet``,
:mod:`stage5.engine.bench_fleet`, prints their comparison).

Each replica is the course's engine (:class:`~stage5.engine.engine.Engine`, paged, continuous, prefix caching
on) with its own K/V pool and its own cache, timed by its own :class:`~stage5.engine.clock.VirtualClock` (the
calibrated step model pricing every step as the roofline toy on this machine, as ``bench load`` does). The
workload is :class:`stage5.fleet.MultiTenant`: tenants with fixed system prompts, multi-turn sessions whose every
turn resends the conversation so far. A later turn is built from the tokens the engine actually answered, so the
cache holds exactly what the client sends back.

**The router** sees each request when it is sent and picks a replica:

* ``round_robin`` - the next replica in turn;
* ``least_loaded`` - the replica with the fewest requests queued or running (ties go round in turn);
* ``prefix_aware`` - the replica holding the longest prefix of the prompt, among those whose load is within
  ``load_bound`` requests of the least loaded (``inf``: no bound; 0: only the least loaded). What a replica
  holds is read from its cache, as NVIDIA Dynamo's KV router and llm-d's precise scorer read the engines' KV
  events, plus the prompts already routed there and not yet admitted (llm-d's speculative indexing; SGLang's
  router keeps an approximate tree of every prompt it routed). SGLang's cache-aware policy switches between the
  two rules on a global imbalance test instead of bounding each choice; the bound here is one knob for the same
  trade. The rule is :func:`route_by_prefix`, stated on plain data (exercise 4 has the learner write it);
  ``serve_fleet(..., route=fn)`` routes through any function of that form instead of a policy.

**The event loop** is one clock for the fleet: it always runs the step of the replica whose clock is earliest,
and routes a request when no replica's next step starts before it arrives. So the router sees every replica as it
is after the steps that began before the arrival; a step in flight is seen as finished (a simplification: at most
one step early). Every number but the wall time is deterministic for a given calibration.
"""

from __future__ import annotations

import heapq
import math
import operator
from dataclasses import dataclass, field

import numpy as np
import torch

from stage5 import fleet, inputs
from stage5.calibration import Calibration
from stage5.engine.engine import RunResult
from stage5.engine.metrics import latency_summary
from stage5.engine.prefix import block_chain
from stage5.engine.replica import EngineReplica
from stage5.engine.sequence import Request

POOL_BLOCKS, BLOCK_SIZE, MAX_BATCH = 256, 16, 16  # each replica's K/V pool, as bench load's engine, a little larger
BENCH_REPLICAS = 8
# A made-up machine (round numbers, not a measurement, as the tests' own): exercise 4's runs are timed alike on
# every computer, so the grader's run of the rule's router sees, at each pick, what the learner's router saw.
MADE_UP_MACHINE = Calibration(machine="made-up", threads=1, bandwidth=10e9, rows=(1, 16, 256),
                              rates=(5e9, 40e9, 80e9), overhead_step_s=1e-3, overhead_seq_s=1e-4,
                              model="roofline-toy")


@dataclass(frozen=True)
class FleetConfig:
    """The fleet: how many replicas, each one's pool and batch, and how requests are routed."""

    replicas: int = BENCH_REPLICAS
    policy: str = "prefix_aware"
    load_bound: float = math.inf  # prefix_aware only: requests above the least-loaded replica's load
    num_blocks: int = POOL_BLOCKS
    block_size: int = BLOCK_SIZE
    max_batch: int = MAX_BATCH

    def __post_init__(self) -> None:
        fleet.check_replicas(self.replicas)
        fleet.check_policy(self.policy)
        if not (isinstance(self.load_bound, (int, float)) and not isinstance(self.load_bound, bool)
                and self.load_bound >= 0) or math.isnan(self.load_bound):
            raise inputs.InputError(f"load_bound must be a number of requests >= 0 (inf: no bound), got "
                                    f"{self.load_bound!r}")
        inputs.integer(self.num_blocks, "num_blocks (per replica)", minimum=2, maximum=1 << 20)
        inputs.integer(self.block_size, "block_size (tokens)", minimum=1, maximum=4096)
        inputs.integer(self.max_batch, "max_batch", minimum=1, maximum=4096)


def prefix_blocks_held(prompt_blocks: list[int], blocks) -> int:
    """How many of the prompt's full blocks, counted from the first, are among ``blocks`` (stop at the first
    missing one: a block's id is chained to every token before it, so a later one cannot be used without it)."""
    held = 0
    for block in prompt_blocks:
        if block not in blocks:
            break
        held += 1
    return held


def pick_replica(held: list[int], loads: list[int], load_bound: float, last_pick: int) -> int:
    """Prefix-aware routing with a load bound: among the replicas whose load is at most the least load plus
    ``load_bound``, the one holding the most blocks of the prompt; ties go to the lower load, then to the first
    in turn after ``last_pick`` (replicas ``last_pick + 1, ..., n - 1, 0, ...``; -1 before the first request)."""
    n, least = len(loads), min(loads)
    eligible = [i for i in range(n) if loads[i] <= least + load_bound]
    return min(eligible, key=lambda i: (-held[i], loads[i], (i - last_pick - 1) % n))


def route_by_prefix(prompt_blocks: list[int], replicas: list[dict], load_bound: float, last_pick: int) -> int:
    """The course's router on what it sees: ``replicas[i]`` is ``{"load": requests queued or running, "blocks":
    ids of the blocks it holds}``; returns the index of the replica chosen (:func:`pick_replica`)."""
    held = [prefix_blocks_held(prompt_blocks, r["blocks"]) for r in replicas]
    return pick_replica(held, [r["load"] for r in replicas], load_bound, last_pick)


class Replica(EngineReplica):
    """One engine with its own pool, cache and clock, and what the router may ask of it."""

    def __init__(self, index: int, model, cfg, cal, config: FleetConfig):
        super().__init__(index, model, cfg, cal, num_blocks=config.num_blocks, block_size=config.block_size,
                         max_batch=config.max_batch, prefix_caching=True)
        self._chains: dict[int, list] = {}  # request id -> its block chain (queued requests only)

    def held_ids(self) -> set[int]:
        """Ids of the full blocks this replica holds: in its cache, or in a prompt already sent here and not yet
        admitted (its blocks are registered when it is; a preempted one's blocks are in the cache)."""
        held = set(self.engine.alloc.cached)
        s = self.engine.scheduler
        for queued in (*s.pending, *s.waiting):
            held.update(key for key, _ in self._chains.get(queued.id, ()))
        return held

    def matched_blocks(self, request: Request, chain: list) -> int:
        """Full blocks of ``request``'s prompt this replica holds (:meth:`held_ids`), from the first."""
        return prefix_blocks_held([key for key, _ in chain], self.held_ids())

    def add(self, request: Request, chain: list) -> None:
        self.engine.add(request)
        self._chains[request.id] = chain
        self.sent += 1

    def step(self):
        record = self.engine.step()
        if record is not None:
            for rid in record.admitted:
                self._chains.pop(rid, None)
        return record


class Router:
    """The three policies; ties between equally good replicas go round in turn, so none is favoured."""

    def __init__(self, config: FleetConfig):
        self.config = config
        self.turn = 0

    def _rotated(self, indices: list[int], n: int) -> list[int]:
        return sorted(indices, key=lambda i: (i - self.turn) % n)

    def choose(self, replicas: list[Replica], request: Request, chain: list) -> int:
        n, policy = len(replicas), self.config.policy
        if policy == "round_robin":
            pick = self.turn % n
        else:
            loads = [r.load for r in replicas]
            least = min(loads)
            if policy == "least_loaded":
                pick = self._rotated([i for i in range(n) if loads[i] == least], n)[0]
            else:
                held = [replicas[i].matched_blocks(request, chain) if loads[i] <= least + self.config.load_bound
                        else 0 for i in range(n)]
                pick = pick_replica(held, loads, self.config.load_bound, self.turn - 1)
        self.turn = pick + 1
        return pick


class Conversations:
    """Builds each turn's prompt: the tenant's system prompt, the session so far (with the answers the engine
    gave), and a new user message, all cut from the held-out corpus bytes."""

    def __init__(self, spec: fleet.MultiTenant, text: bytes | None = None):
        if text is None:
            from stage5.engine.checkpoints import corpus_split

            text = corpus_split()[1]
        need = spec.tenants * spec.system_len + spec.user[1] + 1
        if len(text) < need:
            raise inputs.InputError(f"{spec.tenants} tenants' system prompts of {spec.system_len} tokens need "
                                    f"{need:,} bytes of text, the held-out corpus has {len(text):,}; accepted: "
                                    "fewer tenants or shorter system prompts")
        self.spec, self.text = spec, text
        self.system = [tuple(text[i * spec.system_len:(i + 1) * spec.system_len]) for i in range(spec.tenants)]
        rng = np.random.default_rng(spec.seed + 7)
        self.user_start = {(t.session, t.index): int(rng.integers(0, len(text) - t.user_len))
                           for s in spec.plan for t in s.turns}
        self.history: dict[int, tuple[int, ...]] = {}

    def request(self, turn: fleet.Turn, rid: int, arrival: float) -> Request:
        start = self.user_start[(turn.session, turn.index)]
        past = self.history.get(turn.session, self.system[turn.tenant])
        prompt = past + tuple(self.text[start:start + turn.user_len])
        return Request(rid, prompt, self.spec.output[1], turn.output_len, arrival)

    def answered(self, session: int, prompt: tuple[int, ...], output: list[int]) -> None:
        self.history[session] = prompt + tuple(output)


@dataclass
class FleetResult:
    """What one fleet run measured. Times are on the virtual clock; all fields are deterministic."""

    config: FleetConfig
    runs: list[RunResult] = field(repr=False)
    sent: list[int]  # requests routed to each replica
    turns: dict[int, tuple[int, int]] = field(repr=False)  # request id -> (session, turn)
    picks: list[int] = field(default_factory=list, repr=False)  # the replica each request went to, in order

    @property
    def requests(self) -> int:
        return sum(self.sent)

    @property
    def computed(self) -> int:
        """Prompt tokens the replicas computed at admissions (recomputation after preemption included)."""
        return sum(r.prefill_tokens_computed for r in self.runs)

    @property
    def skipped(self) -> int:
        return sum(r.prefill_tokens_skipped for r in self.runs)

    @property
    def hit_rate(self) -> float:
        total = self.computed + self.skipped
        return self.skipped / total if total else 0.0

    @property
    def busy_s(self) -> list[float]:
        """Seconds each replica spent running steps."""
        return [sum(s.end_s - s.start_s for s in r.steps_log) for r in self.runs]

    @property
    def imbalance(self) -> float:
        """The busiest replica's busy time over the mean: 1 is perfectly even."""
        busy = self.busy_s
        mean = sum(busy) / len(busy)
        return max(busy) / mean if mean else 1.0

    @property
    def duration_s(self) -> float:
        return max(r.duration_s for r in self.runs)

    def latency(self) -> dict[str, float]:
        times = [t for r in self.runs for t in r.requests.values()]
        return latency_summary(times, self.duration_s)

    @property
    def outputs(self) -> dict[int, list[int]]:
        return {i: o for r in self.runs for i, o in r.outputs.items()}

    @property
    def preemptions(self) -> int:
        return sum(r.preemptions for r in self.runs)

    def summary(self) -> dict[str, float]:
        lat = self.latency()
        return {"hit_rate": self.hit_rate, "prefill_tokens_computed": self.computed,
                "prefill_tokens_skipped": self.skipped, "ttft_p50": lat["ttft_p50"], "ttft_p99": lat["ttft_p99"],
                "tpot_p50": lat["tpot_p50"], "tpot_p99": lat["tpot_p99"], "imbalance": self.imbalance,
                "requests": self.requests, "max_requests_per_replica": max(self.sent),
                "requests_per_replica": list(self.sent),
                "preemptions": self.preemptions, "duration_s": self.duration_s}


def ask_route(route, replicas: list[Replica], chain: list, load_bound: float, last_pick: int) -> int:
    """``route(prompt_blocks, replicas, load_bound, last_pick)`` (:func:`route_by_prefix`'s form) on what the
    router sees now: fresh copies, so the function cannot change the fleet. Its answer must be a replica's index."""
    seen = [{"load": r.load, "blocks": frozenset(r.held_ids())} for r in replicas]
    answer = route([key for key, _ in chain], seen, load_bound, last_pick)
    # read once: the index checked is the index used
    pick = None if isinstance(answer, bool) or not hasattr(answer, "__index__") else operator.index(answer)
    if pick is None or not 0 <= pick < len(replicas):
        raise inputs.InputError(f"the routing function returned {str(answer)[:40]!r}; accepted: the index of a "
                                f"replica, an int from 0 to {len(replicas) - 1}")
    return pick


def serve_fleet(model, cfg, cal, spec: fleet.MultiTenant, config: FleetConfig,
                conversations: Conversations | None = None, route=None) -> FleetResult:
    """Serve ``spec`` through ``config.replicas`` replicas routed by ``config.policy``, or by ``route`` (a function
    of :func:`route_by_prefix`'s form, given ``config.load_bound``) when one is given; see the module docstring."""
    if spec.longest_request > config.num_blocks * config.block_size:
        raise inputs.InputError(
            f"a request of this workload may need {spec.longest_request} K/V slots, but a replica's pool holds "
            f"{config.num_blocks * config.block_size} ({config.num_blocks} blocks of {config.block_size}); "
            "accepted: a larger pool (num_blocks) or shorter sessions")
    talk = conversations or Conversations(spec)
    replicas = [Replica(i, model, cfg, cal, config) for i in range(config.replicas)]
    router = Router(config)
    sessions = spec.plan
    events = [(s.start_s, s.id, 0) for s in sessions]  # (time, session, turn): the next request each sends
    heapq.heapify(events)
    where: dict[int, tuple[int, int, tuple[int, ...]]] = {}  # request id -> (session, turn, prompt)
    turns: dict[int, tuple[int, int]] = {}
    picks: list[int] = []
    next_id = 0
    while events or any(r.next_time < math.inf for r in replicas):
        arrival = events[0][0] if events else math.inf
        ready = min(replicas, key=lambda r: (r.next_time, r.index))
        if ready.next_time < arrival:
            record = ready.step()
            if record is None:
                continue
            for rid in record.finished:
                session, index, prompt = where.pop(rid)
                output = ready.engine.recorder.outputs[rid]
                talk.answered(session, prompt, output)
                if index + 1 < len(sessions[session].turns):
                    heapq.heappush(events, (ready.now + spec.think_s, session, index + 1))
            continue
        t, session, index = heapq.heappop(events)
        request = talk.request(sessions[session].turns[index], next_id, t)
        chain = block_chain(request.prompt, config.block_size)
        if route is None:
            pick = router.choose(replicas, request, chain)
        else:
            pick = ask_route(route, replicas, chain, config.load_bound, picks[-1] if picks else -1)
        picks.append(pick)
        replicas[pick].add(request, chain)
        where[next_id] = (session, index, request.prompt)
        turns[next_id] = (session, index)
        next_id += 1
    return FleetResult(config, [r.engine.finish() for r in replicas], [r.sent for r in replicas], turns, picks)


def load_tiny():
    """The exercise's tiny model in float64 (greedy ties cannot flip between batch shapes, so every policy gets
    the same answers and so the same later turns) and its config."""
    from stage5.engine.checkpoints import tiny_model

    model = tiny_model(dtype=torch.float64)
    return model, model.cfg


# ------------------------------------------------------------------------------------------ the comparison
LOAD_BOUNDS = (math.inf, 4.0, 2.0, 1.0, 0.0)  # prefix-aware routing, from no bound to only the least loaded


def compare(model, cfg, cal, spec: fleet.MultiTenant | None = None, replicas: int = BENCH_REPLICAS,
            bounds: tuple[float, ...] = LOAD_BOUNDS, config: FleetConfig | None = None) -> dict:
    """The report ``bench fleet --json`` prints: one replica holding the whole fleet's memory and batch (the hit
    rate the prompts allow when nothing is routed); the three policies over ``replicas``; prefix-aware routing at
    each load bound; and each policy's predicted hit rate (:func:`stage5.fleet.predicted_hits`)."""
    spec = spec or fleet.MultiTenant()
    base = config or FleetConfig()
    talk_text = Conversations(spec).text

    def run(**kw) -> FleetResult:
        return serve_fleet(model, cfg, cal, spec, FleetConfig(**{**base.__dict__, **kw}),
                           Conversations(spec, talk_text))

    # one replica with the whole fleet's memory and batch: the hit rate the template allows, no routing
    single = run(replicas=1, policy="round_robin", num_blocks=base.num_blocks * replicas,
                 max_batch=base.max_batch * replicas)
    policies = {p: run(replicas=replicas, policy=p) for p in fleet.POLICIES}
    sweep = {b: (policies["prefix_aware"] if math.isinf(b) else run(replicas=replicas, policy="prefix_aware",
                                                                      load_bound=b)) for b in bounds}
    predicted = {p: fleet.predicted_hits(spec, replicas, p, base.block_size).hit_rate for p in fleet.POLICIES}
    rr, pa = policies["round_robin"], policies["prefix_aware"]
    return {
        "replicas": replicas,
        "single_replica": single.summary(),
        "policies": {p: {**r.summary(), "predicted_hit_rate": predicted[p]} for p, r in policies.items()},
        "load_bounds": [{"load_bound": None if math.isinf(b) else b, **r.summary()} for b, r in sweep.items()],
        "summary": {"prefill_cut_prefix_over_round_robin": rr.computed / pa.computed,
                    "hit_rate_single": single.hit_rate, "hit_rate_round_robin": rr.hit_rate,
                    "hit_rate_prefix_aware": pa.hit_rate,
                    "ttft_p99_round_robin_over_prefix_aware": rr.latency()["ttft_p99"] / pa.latency()["ttft_p99"]},
        "workload": {k: v for k, v in spec.__dict__.items() if k != "plan"} | {"requests": spec.requests},
        "fleet": {"num_blocks": base.num_blocks, "block_size": base.block_size, "max_batch": base.max_batch},
    }
