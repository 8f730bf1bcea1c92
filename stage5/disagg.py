"""Disaggregated serving: a prefill pool and a decode pool on separate GPUs, the KV cache handed from one to the
other, the P:D ratio that balances them, and when one colocated pool serves the same traffic better.

**Two pools.** A :class:`Pool` is ``replicas`` copies of one deployment (a :class:`stage5.cost.Deployment`: model,
GPU, tensor-parallel degree, mode), each running at most ``batch`` sequences in a step. The prefill pool only
prefills; the decode pool only decodes. Every formula below is the cost model's own: a prefill is
:func:`stage5.cost.prefill_step`, a decode step :func:`stage5.cost.decode_step`, a step that carries both
:func:`stage5.cost.mixed_step`.

**The hand-off.** A prefilled prompt of ``p`` tokens leaves ``handoff_bytes = kv_bytes_per_sequence(p)`` bytes of
K/V (:func:`stage5.cost.kv_bytes_per_sequence`: sliding windows and heads replicated by tensor parallelism
counted), sent over ``n`` links at once, one per GPU, each of bandwidth ``B`` (:func:`link_bandwidth`, from the
datasheets in :mod:`stage5.hardware`, :mod:`stage5.long_context` and :mod:`stage5.kv_tiers`):
``T_x = bytes / (n B)`` (:func:`stage5.long_context.kv_transfer_s`). Sent layer by layer as each layer's prefill
finishes (Splitwise sends the cache of each layer while the next computes), the copy overlaps the prefill: with
``L`` layers, layer ``i``'s K/V exists after ``i T_p / L`` and the link carries one layer in ``T_x / L``, so the
last byte lands at ``max(T_p + T_x / L, T_p / L + T_x)`` and the delay the copy adds after the prefill is

    exposed = max(T_x / L, T_x - T_p (L - 1) / L)        (:func:`exposed_s`)

(``T_x`` unstreamed). The link hides the copy (all but one layer's share) when ``T_x <= T_p``: the break-even
bandwidth of chapter 13's KV tiers, ``p k / (n T_p)`` (:func:`stage5.kv_tiers.breakeven_bandwidth`).

**Each pool's rate under a target** (DistServe, Zhong et al., OSDI 2024, section 3). A prefill replica serves
prompts one batch at a time, a deterministic service ``D`` (:func:`stage5.cost.prefill_step` of ``batch`` prompts);
with Poisson arrivals it is an M/D/1 queue, whose mean time in system is ``D + r D^2 / (2 (1 - r D))`` at ``r``
batches per second (Pollaczek-Khinchine; DistServe models its prefill instance this way). Solving for the largest
rate that keeps the mean TTFT (the wait, the prefill and the exposed hand-off) within a target ``T``:
``r D <= 2 x / (1 + 2 x)`` with ``x = T' / D - 1`` and ``T' = T - exposed`` (:func:`md1_max_rate`). A decode replica
at ``b`` running sequences emits ``b`` tokens per step; the largest ``b`` (its ``batch`` at most, and what its KV
memory holds at the longest context) whose step meets the TPOT target sets its rate: ``b / (output x step)``
requests per second (:func:`decode_rate`).

**The P:D ratio.** ``n_p`` prefill and ``n_d`` decode replicas serve ``min(n_p R_p, n_d R_d)`` requests per second;
on a budget of ``G`` GPUs the best split makes the two terms meet (:func:`best_split`). Goodput per GPU, DistServe's
objective (here on mean latencies, not DistServe's share of requests meeting each target), is that rate over the GPUs
used. The prefill pool's share of GPUs is the same balance read as GPU-seconds: each request costs ``g_p / R_p``
prefill GPU-seconds and ``g_d / R_d`` decode GPU-seconds (:func:`phase_split`; Splitwise sizes its pools by
simulation instead).

**Colocated, priced by the same steps.** One replica does both jobs. Without chunking (prefills run as their own
steps, first), each prefill of ``D_1`` seconds stalls every running decode: at ``r`` requests per second a replica
spends ``r D_1`` of its time prefilling, so the decodes' step ``t(b)`` stretches to ``t(b) / (1 - r D_1)``, with
``b = r x output x TPOT`` running (Little's law). With chunked prefill (Sarathi-Serve) each decode step also carries
``r x p x step`` prompt tokens, up to the step's token budget (:func:`stage5.cost.mixed_step`: the mean step, the
prefill work spread evenly), and the oldest prompt is fed what the decodes leave of the budget, step after step:
an M/D/1 queue whose service is ``floor(p / (budget - b))`` full steps and one step of what remains (priced at
that remainder's size). Both are solved for the largest rate meeting both targets (:func:`colocated_rate`).

**When it loses.** Short prompts (the stall ``r D_1`` is small, so colocated decodes barely slow, and the
prefill pool idles); a small fleet (one replica of each cannot match the two rates, and the slack is wasted); a
link too slow for the cache (the exposed hand-off eats the TTFT target); a decode pool that cannot batch (memory or
the TPOT target holds ``b`` low, so the decode GPUs are the ones that idle). :func:`compare` prices both designs.

What it leaves out, and which way it leans: targets are on the mean (DistServe's SLOs are on percentiles); links run
at the datasheet rate with no per-transfer latency (flattering disaggregation); the decode pool's seat is assumed
free when the cache lands (both flattering disaggregation); the colocated prefill queue sees only prefills, and the
chunked TPOT spreads every prompt's work evenly over the decode steps where a scheduler may put a whole prompt in one
step (both flattering colocation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from stage5 import cost, inputs, kv_tiers
from stage5 import long_context as lc
from stage5.hardware import Hardware

# Links between the pools: GPU-to-GPU inside an NVLink domain, an RDMA network port per GPU, the GPU's PCIe link, or
# a tier of chapter 13's KV store (host memory, local SSD, another node's memory) that both pools reach.
LINKS = ("nvlink", "rdma", "pcie", *kv_tiers.TIERS)
LINK_LABELS = {"nvlink": "NVLink (same domain)", "rdma": "RDMA network port per GPU", "pcie": "PCIe to the host",
               **{t: f"through {kv_tiers.TIER_LABELS[t]}" for t in kv_tiers.TIERS}}
# DeepSeek-V3's serving units (DeepSeek-V3 Technical Report, arXiv 2412.19437, section 3.4, "Inference and
# Deployment"): prefilling and decoding are separated; the prefilling stage's "minimum deployment unit ... consists of
# 4 nodes with 32 GPUs", attention "TP4 with Sequence Parallelism (SP), combined with 8-way Data Parallelism (DP8)",
# the MoE part "EP32"; the decoding stage's unit is "40 nodes with 320 GPUs" (stage5.published.DEEPSEEK_DECODE_GPUS).
# "For each GPU, besides the original 8 experts it hosts, it will also host one additional redundant expert"
# (prefilling); decoding: "each GPU hosts only one expert".
DEEPSEEK_PREFILL_GPUS, DEEPSEEK_PREFILL_ATTENTION_TP, DEEPSEEK_PREFILL_ATTENTION_DP = 32, 4, 8
DEEPSEEK_PREFILL_EXPERTS_PER_GPU, DEEPSEEK_PREFILL_REDUNDANT_PER_GPU = 8, 1
MAX_POOL_REPLICAS = 4096
BIG = 2.0**40  # stands for "more sequences than any replica holds" where a rate cannot be kept up
FIXED_POINT_ROUNDS = 200  # a contraction by the prefill's share of time per round: converged well before
RATE_GRID, RATE_REFINE = 48, 3  # rates tried per round, rounds: the rate is found to 1 / 48**3 of the prefill capacity


def link_bandwidth(link: str, gpu: Hardware) -> float:
    """Bytes/s per GPU, one direction, of ``link`` (:data:`LINKS`) on ``gpu``: NVLink and the network port from the
    GPU's datasheet (:class:`stage5.hardware.Hardware`'s ``link_bandwidth`` and ``node_link_bandwidth``), PCIe from
    :func:`stage5.long_context.host_link`, a KV tier from :func:`stage5.kv_tiers.tier`. A GPU without NVLink is
    refused for ``nvlink``."""
    link = inputs.choice(link, "link (between the prefill and decode pools)", LINKS)
    if link == "nvlink":
        if gpu.nvlink_domain < 2:
            raise inputs.InputError(f"{gpu.name} has no NVLink (its GPUs talk over PCIe); accepted links for it: "
                                    f"{', '.join(k for k in LINKS if k != 'nvlink')}")
        return gpu.link_bandwidth
    if link == "rdma":
        return gpu.node_link_bandwidth
    if link == "pcie":
        return lc.host_link(gpu)
    return kv_tiers.tier(link, gpu).bandwidth


@dataclass(frozen=True)
class Pool:
    """``replicas`` copies of ``dep`` (its ``num_gpus`` is each copy's tensor-parallel degree), each running at most
    ``batch`` sequences per step (prompts per prefill step in a prefill pool)."""

    dep: cost.Deployment
    replicas: int = 1
    batch: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.dep, cost.Deployment):
            raise inputs.InputError(f"a pool's dep must be a stage5.cost.Deployment, got {type(self.dep).__name__}")
        inputs.integer(self.replicas, "replicas (in the pool)", minimum=1, maximum=MAX_POOL_REPLICAS)
        inputs.integer(self.batch, "batch (sequences per step)", minimum=1, maximum=1 << 20)
        cost.kv_budget_bytes(self.dep)  # refuses a deployment whose weights leave no room for any K/V

    @property
    def gpus(self) -> int:
        return self.replicas * self.dep.num_gpus


@dataclass(frozen=True)
class Mix:
    """The traffic: mean prompt and output tokens per request."""

    prompt: float
    output: float

    def __post_init__(self) -> None:
        inputs.positive(self.prompt, "prompt (tokens)", maximum=float(inputs.MAX_COUNT))
        inputs.real(self.output, "output (tokens)", low=1.0, high=float(inputs.MAX_COUNT),
                    accepted="at least 1 token")


@dataclass(frozen=True)
class Targets:
    """Service targets: mean time to first token and mean time per output token, seconds."""

    ttft_s: float
    tpot_s: float

    def __post_init__(self) -> None:
        inputs.real(self.ttft_s, "ttft_s (target)", low=0.0, low_open=True, high=1e6)
        inputs.real(self.tpot_s, "tpot_s (target)", low=0.0, low_open=True, high=1e6)


# ------------------------------------------------------------------------------------------ the hand-off
def handoff_bytes(dep: cost.Deployment, prompt: cost.ArrayLike) -> np.ndarray:
    """K/V bytes one prefilled prompt hands to the decode pool: what it holds over all of ``dep``'s GPUs."""
    return cost.kv_bytes_per_sequence(dep, cost._positive(prompt, "prompt (tokens)"))


def handoff_s(dep: cost.Deployment, prompt: cost.ArrayLike, link: str = "rdma") -> np.ndarray:
    """Seconds to send it, every GPU over its own ``link`` at once, not overlapped with anything."""
    return lc.kv_transfer_s(dep, prompt, link_bandwidth(link, dep.gpu))


def exposed_s(prefill_s: cost.ArrayLike, transfer_s: cost.ArrayLike, layers: int, streamed: bool = True) -> np.ndarray:
    """Delay the copy adds after a prefill of ``prefill_s`` ends: ``transfer_s`` unstreamed, or, sent layer by layer
    over ``layers`` layers, max(T_x / L, T_x - T_p (L - 1) / L) (module docstring)."""
    t_p = inputs.reals(prefill_s, "prefill_s", low=0.0)
    t_x = inputs.reals(transfer_s, "transfer_s", low=0.0)
    n = inputs.positive_int(layers, "layers")
    if not inputs.boolean(streamed, "streamed"):
        return np.asarray(t_x, dtype=float)
    return np.maximum(t_x / n, t_x - t_p * (n - 1) / n)


def exposed_handoff_s(dep: cost.Deployment, prompt: cost.ArrayLike, link: str = "rdma",
                      streamed: bool = True) -> np.ndarray:
    """:func:`exposed_s` of one prompt's prefill (:func:`stage5.cost.prefill_step`) and hand-off on ``dep``."""
    return exposed_s(cost.prefill_step(dep, prompt).time_s, handoff_s(dep, prompt, link), dep.model.num_layers,
                     streamed)


def hiding_bandwidth(dep: cost.Deployment, prompt: cost.ArrayLike) -> np.ndarray:
    """The link bandwidth per GPU above which a streamed hand-off hides under its prefill (T_x <= T_p): chapter
    13's break-even bandwidth (:func:`stage5.kv_tiers.breakeven_bandwidth`)."""
    return kv_tiers.breakeven_bandwidth(dep, prompt)


# ------------------------------------------------------------------------------------------ each pool's rate
def md1_mean_s(rate: cost.ArrayLike, service_s: float) -> np.ndarray:
    """Mean time in an M/D/1 queue: service + rate service^2 / (2 (1 - rate service)); inf at or past saturation."""
    r = inputs.reals(rate, "rate (per second)", low=0.0)
    d = inputs.positive(service_s, "service_s")
    load = r * d
    with np.errstate(divide="ignore", over="ignore"):
        return np.where(load < 1, d + r * d * d / (2 * np.maximum(1 - load, 1e-300)), np.inf)


def md1_max_rate(service_s: float, target_s: float) -> float:
    """The largest arrival rate an M/D/1 queue of service ``service_s`` takes with a mean time within ``target_s``:
    (2x / (1 + 2x)) / service with x = target / service - 1; 0 when one service alone exceeds the target."""
    d = inputs.positive(service_s, "service_s")
    t = inputs.real(target_s, "target_s", low=-math.inf)
    x = t / d - 1
    return 0.0 if x < 0 else (1 - 1 / (1 + 2 * x)) / d  # 2x / (1 + 2x), kept finite when x overflows


def prefill_rate(pool: Pool, mix: Mix, targets: Targets, link: str = "rdma", streamed: bool = True) -> float:
    """Requests per second one prefill replica takes with the mean TTFT (queue, prefill, exposed hand-off) within
    the target: ``batch`` prompts per service, the M/D/1 bound on batches (:func:`md1_max_rate`)."""
    service = float(cost.prefill_step(pool.dep, mix.prompt, pool.batch).time_s)
    exposed = float(exposed_s(service, handoff_s(pool.dep, mix.prompt, link), pool.dep.model.num_layers, streamed))
    return pool.batch * md1_max_rate(service, targets.ttft_s - exposed)


def decode_batch(pool: Pool, mix: Mix, targets: Targets) -> int:
    """The most sequences one decode replica runs with its step within the TPOT target (at the mean context,
    prompt + output / 2) and its KV memory holding them all at the longest (prompt + output); 0 if none."""
    fits = int(cost.max_concurrency(pool.dep, mix.prompt + mix.output))
    b = np.arange(1, min(pool.batch, max(fits, 1)) + 1)
    ok = cost.tpot_s(pool.dep, b, mix.prompt + mix.output / 2) <= targets.tpot_s
    return int(b[ok].max()) if fits >= 1 and ok.any() else 0


def decode_rate(pool: Pool, mix: Mix, targets: Targets) -> float:
    """Requests per second one decode replica finishes within the TPOT target: b / (output x step(b))."""
    b = decode_batch(pool, mix, targets)
    if b == 0:
        return 0.0
    return b / (mix.output * float(cost.tpot_s(pool.dep, b, mix.prompt + mix.output / 2)))


@dataclass(frozen=True)
class Split:
    """A P:D split of a GPU budget and what it serves."""

    prefill_replicas: int
    decode_replicas: int
    gpus: int
    rate: float  # requests per second meeting both targets
    prefill_rate: float  # per prefill replica
    decode_rate: float  # per decode replica

    @property
    def goodput_per_gpu(self) -> float:
        return self.rate / self.gpus if self.gpus else 0.0

    @property
    def ratio(self) -> float:
        """Prefill replicas per decode replica."""
        return self.prefill_replicas / self.decode_replicas


def _served(n_p: int, n_d: int, r_p: float, r_d: float) -> float:
    return min(n_p * r_p, n_d * r_d)


def best_split(gpus: int, prefill: Pool, decode: Pool, mix: Mix, targets: Targets, link: str = "rdma",
               streamed: bool = True) -> Split:
    """The numbers of prefill and decode replicas (each pool's ``replicas`` ignored) that serve the most requests
    per second within ``gpus`` GPUs, the fewer GPUs among equals. For ``n_p`` prefill replicas the decode pool
    takes every GPU left, so the rate min(n_p R_p, n_d(n_p) R_d) rises with ``n_p`` until the two terms cross and
    falls after: a binary search for the crossing, then the fewest decode replicas that keep the rate. Refuses a
    budget too small for one replica of each."""
    g = inputs.integer(gpus, "gpus (the fleet's budget)", minimum=2, maximum=MAX_POOL_REPLICAS * 64)
    g_p, g_d = prefill.dep.num_gpus, decode.dep.num_gpus
    if g_p + g_d > g:
        raise inputs.InputError(f"{g} GPUs cannot hold one prefill replica ({g_p} GPUs) and one decode replica "
                                f"({g_d} GPUs); accepted: at least {g_p + g_d} GPUs")
    _same_model(prefill, decode)
    r_p, r_d = prefill_rate(prefill, mix, targets, link, streamed), decode_rate(decode, mix, targets)
    most = (g - g_d) // g_p  # prefill replicas that leave room for one decode replica
    n_d = lambda n_p: (g - n_p * g_p) // g_d  # noqa: E731
    lo, hi = 1, most  # the largest n_p whose prefill term is at most its decode term (or 1)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if mid * r_p <= n_d(mid) * r_d:
            lo = mid
        else:
            hi = mid - 1
    best = None
    for n_p in {lo, min(lo + 1, most)}:
        served = _served(n_p, n_d(n_p), r_p, r_d)
        fewest = n_d(n_p) if r_d == 0 else max(1, min(n_d(n_p), math.ceil(served / r_d - 1e-9)))
        cand = (served, -(n_p * g_p + fewest * g_d), n_p, fewest)
        best = cand if best is None or cand[:2] > best[:2] else best
    served, neg_gpus, n_p, n_dec = best
    return Split(n_p, n_dec, -neg_gpus, served, r_p, r_d)


def phase_split(prefill: Pool, decode: Pool, mix: Mix, targets: Targets, link: str = "rdma") -> float:
    """The prefill pool's share of the GPUs a balanced fleet needs, read as GPU-seconds per request,
    (g_p / R_p) / (g_p / R_p + g_d / R_d); nan when either pool meets no target."""
    r_p, r_d = prefill_rate(prefill, mix, targets, link), decode_rate(decode, mix, targets)
    if r_p == 0 or r_d == 0:
        return math.nan
    p, d = prefill.dep.num_gpus / r_p, decode.dep.num_gpus / r_d
    return p / (p + d)


def _same_model(prefill: Pool, decode: Pool) -> None:
    if prefill.dep.model != decode.dep.model or prefill.dep.kv_bytes != decode.dep.kv_bytes:
        raise inputs.InputError(f"the prefill pool serves {prefill.dep.model.name} (KV {prefill.dep.kv_bytes:g} bytes) "
                                f"and the decode pool {decode.dep.model.name} (KV {decode.dep.kv_bytes:g} bytes); "
                                "accepted: one model and one KV format in both, so the cache can be handed over")


# ------------------------------------------------------------------------------------------ colocated
COLOCATED = ("plain", "chunked")
CHUNK_BUDGET = 8192  # tokens per step of a chunked replica, the course's choice (a setting, not a measurement)


@dataclass(frozen=True)
class Colocated:
    """What one colocated replica reaches: its rate, and the TTFT and TPOT there."""

    mode: str
    rate: float
    ttft_s: float
    tpot_s: float
    batch: float  # sequences decoding at once there


def chunked_prefill_s(dep: cost.Deployment, batch: cost.ArrayLike, prompt: float, context: float,
                      budget: int) -> np.ndarray:
    """Seconds a colocated replica with chunked prefill takes to feed one ``prompt``-token prompt while ``batch``
    sequences of ``context`` tokens decode: ``floor(p / c)`` steps carrying a full chunk of ``c = budget - batch``
    prompt tokens, then one step carrying what remains, priced at its own size (so the time is continuous in the
    prompt length), each a :func:`stage5.cost.mixed_step` whose chunk attends over half the prompt on average."""
    b = inputs.reals(batch, "batch (sequences decoding)", low=1.0)
    p = inputs.positive(prompt, "prompt (tokens)")
    budget = inputs.integer(budget, "budget (tokens per step)", minimum=1, maximum=1 << 24)
    per_step = np.maximum(budget - b, 1)
    full = np.floor(p / per_step)
    rest = np.maximum(p - full * per_step, 0.0)
    last = rest > 1e-9 * per_step  # a remainder of rounding error is no step of its own
    return (full * cost.mixed_step(dep, b, context, per_step, p / 2).time_s
            + np.where(last, cost.mixed_step(dep, b, context, rest, p / 2).time_s, 0.0))


def _colocated_at(pool: Pool, mix: Mix, rates: np.ndarray, mode: str, budget: int) -> tuple[np.ndarray, ...]:
    """(TTFT, TPOT, running) of a colocated replica at each of ``rates`` (inf where it cannot keep up)."""
    dep, p, o = pool.dep, mix.prompt, mix.output
    context = p + o / 2
    d1 = float(cost.prefill_step(dep, p).time_s)
    tpot = np.full(rates.shape, float(cost.tpot_s(dep, 1, context)))
    for _ in range(FIXED_POINT_ROUNDS):  # fixed point of TPOT and Little's law b = r o TPOT
        before = tpot
        b = np.clip(np.nan_to_num(rates * o * tpot, posinf=BIG), 1, BIG)  # inf TPOT: a hopeless rate
        if mode == "plain":
            busy = rates * d1
            tpot = np.where(busy < 1, cost.tpot_s(dep, b, context) / np.maximum(1 - busy, 1e-12), np.inf)
        else:  # the chunk a step carries is the prompt work arriving during that step: s = mixed_step(r p s)
            step = np.nan_to_num(tpot, posinf=BIG)
            chunk = np.minimum(rates * p * step, np.maximum(budget - b, 0))
            step = cost.mixed_step(dep, b, context, chunk, p / 2).time_s
            tpot = np.where(rates * p * step <= np.maximum(budget - b, 0), step, np.inf)
        converged = np.array_equal(tpot, before) or np.allclose(tpot, before, rtol=1e-10, atol=0.0, equal_nan=True)
        if converged:
            break
    b = np.clip(np.nan_to_num(rates * o * tpot, posinf=BIG), 1, BIG)
    fits = float(cost.max_concurrency(dep, p + o))
    tpot = np.where((b <= min(pool.batch, fits)) & np.isfinite(tpot), tpot, np.inf)
    if mode == "plain":
        ttft = md1_mean_s(rates, d1)
    else:  # the oldest prompt takes what the decodes leave of the budget, step after step: an M/D/1 queue whose
        # service is those steps
        service = chunked_prefill_s(dep, b, p, context, budget)
        load = rates * service
        ttft = np.where(np.isfinite(tpot) & (load < 1),
                        service + rates * service**2 / (2 * np.maximum(1 - load, 1e-12)), np.inf)
    return ttft, tpot, b


def colocated_rate(pool: Pool, mix: Mix, targets: Targets, mode: str = "plain",
                   budget: int = CHUNK_BUDGET) -> Colocated:
    """The largest rate (requests/s) one colocated replica takes with mean TTFT and TPOT within the targets
    (module docstring), found on a grid of rates up to the replica's prefill capacity, refined in the bracket."""
    mode = inputs.choice(mode, "mode (colocated)", COLOCATED)
    budget = inputs.integer(budget, "budget (tokens per step)", minimum=1, maximum=1 << 24)
    d1 = float(cost.prefill_step(pool.dep, mix.prompt).time_s)
    low, high = 0.0, 1 / d1  # past 1 / d1 the prefills alone fill the replica
    found = None
    for _ in range(RATE_REFINE):  # both latencies grow with the rate: refine the bracket of the last rate that meets both
        rates = np.linspace(low, high, RATE_GRID + 1)[1:]
        ttft, tpot, b = _colocated_at(pool, mix, rates, mode, budget)
        ok = (ttft <= targets.ttft_s) & (tpot <= targets.tpot_s)
        if not ok.any():
            break
        i = int(np.flatnonzero(ok).max())
        found = Colocated(mode, float(rates[i]), float(ttft[i]), float(tpot[i]), float(b[i]))
        low, high = rates[i], rates[min(i + 1, RATE_GRID - 1)]
        if i == RATE_GRID - 1:
            break
    return found or Colocated(mode, 0.0, math.inf, math.inf, 0.0)


@dataclass(frozen=True)
class Comparison:
    """Goodput per GPU of one fleet budget served colocated (plain, chunked) and disaggregated."""

    gpus: int
    plain: Colocated
    chunked: Colocated
    split: Split
    colocated_replicas: int

    @property
    def colocated_per_gpu(self) -> dict[str, float]:
        g = self.gpus
        return {m.mode: m.rate * self.colocated_replicas / g for m in (self.plain, self.chunked)}

    @property
    def disaggregated_per_gpu(self) -> float:
        """The split's requests per second over the whole budget (a split that leaves GPUs idle pays for them)."""
        return self.split.rate / self.gpus

    @property
    def winner(self) -> str:
        """The design with the most goodput per GPU; "none" when no design meets the targets at any rate."""
        best = max(self.colocated_per_gpu.items(), key=lambda kv: kv[1])
        if max(best[1], self.disaggregated_per_gpu) <= 0:
            return "none (no design meets the targets)"
        return "disaggregated" if self.disaggregated_per_gpu > best[1] else f"colocated ({best[0]})"


def compare(gpus: int, dep: cost.Deployment, mix: Mix, targets: Targets, link: str = "rdma",
            batch: int = 256, budget: int = CHUNK_BUDGET) -> Comparison:
    """``gpus`` GPUs of ``dep``-shaped replicas, each running at most ``batch`` sequences, serving ``mix`` within
    ``targets``: colocated (every replica both jobs, without and with chunked prefill at ``budget`` tokens per step)
    against the best P:D split of the same GPUs."""
    pool = Pool(dep, 1, batch)
    replicas = inputs.integer(gpus, "gpus (the fleet's budget)", minimum=2, maximum=MAX_POOL_REPLICAS * 64) \
        // dep.num_gpus
    if replicas < 2:
        raise inputs.InputError(f"{gpus} GPUs hold {replicas} replica of {dep.num_gpus} GPUs; accepted: a budget of "
                                f"at least two replicas ({2 * dep.num_gpus} GPUs), one per pool")
    prefill = Pool(dep, 1, 1)
    return Comparison(gpus, colocated_rate(pool, mix, targets, "plain", budget),
                      colocated_rate(pool, mix, targets, "chunked", budget),
                      best_split(gpus, prefill, pool, mix, targets, link), replicas)


# Every public function above refuses a wrong record (a string where a Deployment goes) in one sentence.
inputs.check_object_arguments(globals())
