"""A serving fleet: the multi-tenant workload, and the prefix-cache hit rate each routing policy should reach,
predicted from the workload's lengths before any engine runs (the toy fleet, :mod:`stage5.engine.fleet`, then
measures it).

**The workload.** ``tenants`` services each send one fixed system prompt of ``system_len`` tokens. Conversations
(sessions) start as a Poisson process; each picks a tenant by popularity (tenant ``i`` with weight
``1 / (i + 1) ** popularity``: a few busy tenants and a long tail) and runs a few turns. Turn ``j`` sends the
tenant's system prompt, every earlier user message and answer of the session, and a new user message, as a chat
client does; the next turn is sent ``think_s`` seconds after the answer arrives. Only lengths are drawn here (all
from ``seed``); which tokens fill them is the engine's business.

**What a cache can hold for a request**, in full blocks (the engine shares only full blocks and always computes
the prompt's last token, :mod:`stage5.engine.prefix`):

* its tenant's system prompt, if an earlier request of the tenant went to the same replica: the system prompt's
  full blocks (the block that straddles the end of the system prompt differs between requests);
* the session's history, if the previous turn went to the same replica: the previous prompt and answer, less the
  answer's last token (sampled, never fed back, so it has no K/V), in full blocks.

**The prediction.** One replica, or prefix-aware routing with no load bound, finds both whenever they exist: with
nothing evicted, no router finds more, so that figure bounds every policy. Round-robin and least-loaded routing do
not look at prompts; the prediction for them is what a router that picks a replica at random for each request
finds on average: the replica holding its session's history with probability 1/N, one that has seen its tenant
with probability 1 - (1 - 1/N)^m after the tenant's m earlier requests. It is an expectation, not a bound: round-robin
is deterministic, and a workload whose turns fall in step with its cycle (two sessions on three replicas) can find
more than it, or less (issue 52). The prediction assumes nothing is evicted and every earlier request was admitted
before this one arrives; both flatter the hit rate, and the fleet measures what is left.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from stage5 import inputs

POLICIES = ("round_robin", "least_loaded", "prefix_aware")
POLICY_LABELS = {"round_robin": "round-robin", "least_loaded": "least-loaded", "prefix_aware": "prefix-aware"}
MAX_REPLICAS = 1024  # past a thousand replicas of one model a fleet is several fleets (and routers)


def check_replicas(replicas: object) -> int:
    """A replica count: an integer in [1, MAX_REPLICAS]."""
    return inputs.integer(replicas, "replicas (copies of the deployment behind the router)", minimum=1,
                          maximum=MAX_REPLICAS)


def check_policy(policy: object) -> str:
    return inputs.choice(policy, "policy (routing)", POLICIES)


def _length_range(value: object, name: str) -> tuple[int, int]:
    if not (isinstance(value, tuple) and len(value) == 2):
        raise inputs.InputError(f"{name} must be a (low, high) pair of token counts, got {value!r}")
    low = inputs.positive_int(value[0], f"{name} low")
    high = inputs.positive_int(value[1], f"{name} high")
    if low > high:
        raise inputs.InputError(f"{name} must have low <= high, got {value!r}")
    return low, high


@dataclass(frozen=True)
class Turn:
    """One request of a session: its user message and the length of the answer it gets (``stop_after``)."""

    session: int
    tenant: int
    index: int  # 0 for the first turn
    user_len: int
    output_len: int


@dataclass(frozen=True)
class Session:
    id: int
    tenant: int
    start_s: float  # when its first turn is sent
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class MultiTenant:
    """The fleet's workload; every default is what ``python -m stage5 bench fleet`` serves."""

    tenants: int = 8
    system_len: int = 256
    sessions: int = 64
    turns: tuple[int, int] = (2, 4)
    user: tuple[int, int] = (16, 48)
    output: tuple[int, int] = (16, 32)
    popularity: float = 1.0  # Zipf exponent over tenants; 0 is uniform
    rate: float = 32.0  # new sessions per second, on the fleet's virtual clock
    think_s: float = 0.5  # seconds between an answer and the session's next turn
    seed: int = 0

    def __post_init__(self) -> None:
        inputs.integer(self.tenants, "tenants", minimum=1, maximum=10_000)
        inputs.positive_int(self.system_len, "system_len (tokens)", maximum=1 << 20)
        inputs.integer(self.sessions, "sessions", minimum=1, maximum=100_000)
        _length_range(self.turns, "turns")
        _length_range(self.user, "user (tokens)")
        _length_range(self.output, "output (tokens)")
        # the bound every workload builder keeps (stage5.inputs.workload_size): requests and the tokens they carry
        # at most, so 2**40 turns is one sentence, not a plan of terabytes
        inputs.workload_size(self.sessions * self.turns[1], {"prompt": self.longest_prompt,
                                                             "output": self.output[1]},
                             "sessions x turns (the most requests the workload can send)")
        inputs.real(self.popularity, "popularity (Zipf exponent)", low=0.0, high=8.0)
        inputs.real(self.rate, "rate (sessions per second)", low=1e-3, high=1e6)
        inputs.real(self.think_s, "think_s (seconds)", low=0.0, high=1e6)
        inputs.non_negative_int(self.seed, "seed")

    @property
    def longest_prompt(self) -> int:
        """The most tokens a request of this workload can send (the last turn of the longest session)."""
        return (self.system_len + self.turns[1] * self.user[1] + (self.turns[1] - 1) * self.output[1])

    @property
    def longest_request(self) -> int:
        """Prompt plus answer cap: the K/V slots one request may need."""
        return self.longest_prompt + self.output[1]

    @cached_property
    def plan(self) -> tuple[Session, ...]:
        """Every session, its tenant, start time and turn lengths, drawn from ``seed``."""
        rng = np.random.default_rng(self.seed)
        weights = 1.0 / np.arange(1, self.tenants + 1) ** self.popularity
        tenants = rng.choice(self.tenants, size=self.sessions, p=weights / weights.sum())
        gaps = rng.exponential(1.0 / self.rate, self.sessions)
        gaps[0] = 0.0
        starts = np.cumsum(gaps)
        out = []
        for s in range(self.sessions):
            n = int(rng.integers(self.turns[0], self.turns[1] + 1))
            users = rng.integers(self.user[0], self.user[1] + 1, n)
            outputs = rng.integers(self.output[0], self.output[1] + 1, n)
            turns = tuple(Turn(s, int(tenants[s]), j, int(users[j]), int(outputs[j])) for j in range(n))
            out.append(Session(s, int(tenants[s]), float(starts[s]), turns))
        return tuple(out)

    @property
    def requests(self) -> int:
        return sum(len(s.turns) for s in self.plan)

    def prompt_len(self, turn: Turn) -> int:
        """Tokens turn ``turn.index`` sends: the system prompt, the session so far, the new user message."""
        session = self.plan[turn.session]
        before = session.turns[:turn.index]
        return self.system_len + sum(t.user_len + t.output_len for t in before) + turn.user_len


def cached_tokens(prefix: int, prompt: int, block_size: int) -> int:
    """Prompt tokens a cache holding K/V for the first ``prefix`` tokens can serve: whole blocks of the prefix,
    at most the prompt's full blocks before its last token (which is always computed)."""
    prefix = inputs.non_negative_int(prefix, "prefix (tokens with cached K/V)")
    prompt = inputs.positive_int(prompt, "prompt (tokens)")
    block_size = inputs.positive_int(block_size, "block_size (tokens)")
    return min(prefix // block_size, (prompt - 1) // block_size) * block_size


@dataclass(frozen=True)
class HitPrediction:
    """Prompt tokens sent, the tokens a cache is expected to serve, and their ratio (the hit rate)."""

    policy: str
    replicas: int
    prompt_tokens: int
    cached_tokens: float
    from_history: float  # of cached_tokens: found as the session's own history
    from_system: float  # of cached_tokens: found as the tenant's system prompt alone

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens

    @property
    def computed_tokens(self) -> float:
        return self.prompt_tokens - self.cached_tokens


def predicted_hits(spec: MultiTenant, replicas: int, policy: str, block_size: int = 16) -> HitPrediction:
    """The hit rate ``policy`` is predicted to reach over ``replicas`` replicas (module docstring). Prefix-aware
    routing with no load bound finds what one replica would: with no eviction and no requests racing one another,
    no policy finds more. For round-robin and least-loaded routing, which do not look at prompts, it is the
    expectation for a router that picks a replica at random: a session's history with probability 1/N, its
    tenant's system prompt with probability 1 - (1 - 1/N)^m after m earlier requests of the tenant (sessions
    counted in start order, a session's turns in order). Not a bound for them: round-robin is deterministic and
    can find more (issue 52). Linear in the requests: each turn's prompt grows from the previous one's."""
    if not isinstance(spec, MultiTenant):
        raise inputs.ArgumentTypeError(f"spec must be a stage5.fleet.MultiTenant, got {type(spec).__name__}")
    n = check_replicas(replicas)
    check_policy(policy)
    block = inputs.positive_int(block_size, "block_size (tokens)")
    p_same = 1.0 if policy == "prefix_aware" else 1.0 / n
    seen: dict[int, int] = {}  # tenant -> its requests so far
    sent = history_part = system_part = 0.0
    for session in spec.plan:
        prompt = last_prompt = last_output = 0
        for turn in session.turns:
            # the system prompt, the session so far and the new message (MultiTenant.prompt_len, built up from the
            # previous turn's prompt and answer instead of summed again: linear in the turns)
            last_prompt, prompt = prompt, (spec.system_len if turn.index == 0 else prompt + last_output) + turn.user_len
            earlier = seen.get(turn.tenant, 0)
            p_tenant = (1.0 if earlier else 0.0) if policy == "prefix_aware" else 1 - (1 - 1 / n) ** earlier
            system = cached_tokens(spec.system_len, prompt, block)
            if turn.index == 0:
                system_part += p_tenant * system
            else:
                history = cached_tokens(last_prompt + last_output - 1, prompt, block)
                # on the previous turn's replica the history holds the system prompt too; elsewhere only the
                # tenant's other requests can have left it
                p_other = p_tenant if policy == "prefix_aware" else 1 - (1 - 1 / n) ** (earlier - 1)
                history_part += p_same * history
                system_part += (1 - p_same) * p_other * system
            sent += prompt
            seen[turn.tenant] = earlier + 1
            last_output = turn.output_len
    return HitPrediction(policy, n, int(sent), history_part + system_part, history_part, system_part)


# ------------------------------------------------------------------------------------------ the simulator's lever
def routed_hit_rate(prefix_hit: float, history_share: float, replicas: int, policy: str) -> float:
    """The hit rate a fleet keeps of ``prefix_hit``, what one replica would find, in steady state: the part
    that is a prefix shared across sessions (a system prompt) soon sits on every replica whatever the router does;
    the part that is the session's own history (``history_share`` of the hit) is found only on the replica that
    served the previous turn, which a prompt-blind router (round-robin, least-loaded) picks with probability
    1/N. Caches large enough to keep both are assumed."""
    hit = inputs.fraction(prefix_hit, "prefix_hit")
    share = inputs.fraction(history_share, "history_share (share of the hit that is the session's own history)")
    n = check_replicas(replicas)
    keep = 1.0 if check_policy(policy) == "prefix_aware" else 1.0 / n
    return hit * ((1 - share) + share * keep)
