"""Exercise 4 (build a fleet router): the learner's ``held_blocks`` and ``route`` run in their kernel, the grader
compares what they answer with :func:`stage5.engine.fleet.route_by_prefix` on the same data.

Kernel side, the probes (:data:`PROBES`) call the learner's functions on hidden cases, or serve a hidden workload
through the toy fleet routed by the learner's ``route``, and hand back only plain data: the counts, the picks.
Grader side, the ``check_*`` functions compute the rule's answers on the same cases, and serve the same workload
with the rule's router (deterministic: a made-up machine times every step), and compare. The first pick that
differs is explained by the rule it breaks, read off what the router saw at that moment, which in the grader's run
is exactly what the learner's router saw (every earlier pick was the same).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

from .checks import GradingError, _as_number
from .remote import LocalKernel, kernel_of, register_probes  # noqa: F401 - LocalKernel re-exported

#: The rule the learner writes, as stage5 states it: off limits while exercise 4 is graded.
ROUTING_BLOCKED: tuple[str, ...] = (
    "stage5.engine.fleet.prefix_blocks_held", "stage5.engine.fleet.pick_replica",
    "stage5.engine.fleet.route_by_prefix", "stage5.engine.fleet.Replica.matched_blocks",
    "stage5.engine.fleet.Router.choose",
)

# ------------------------------------------------------------------------------------ the hidden cases
#: (prompt_blocks, blocks): the prefix counted from the first block, stopping at the first missing one.
HELD_CASES: tuple[tuple[list[int], list[int]], ...] = (
    ([1, 2, 3, 4], [1, 2, 3, 4, 5]), ([1, 2, 3, 4], [1, 2, 4]), ([1, 2, 3, 4], [2, 3, 4]), ([], [1, 2]),
    ([1, 2, 3], []), ([5, 6, 7], [9, 7, 6, 5]), ([8, 9], [8]), ([3, 1, 2], [1, 2]),
)


def _case(held_sets: list[list[int]], loads: list[int], load_bound: float, last_pick: int,
          prompt: tuple[int, ...] = (1, 2, 3, 4, 5, 6)) -> dict[str, Any]:
    return {"prompt_blocks": list(prompt), "replicas": [{"load": load, "blocks": blocks}
                                                        for load, blocks in zip(loads, held_sets, strict=True)],
            "load_bound": load_bound, "last_pick": last_pick}


A, B, C, D = [1], [1, 2], [1, 2, 3], [1, 2, 3, 4, 5, 6]  # 1, 2, 3 and 6 blocks of the prompt, from the first
INF = math.inf
#: Per rule, routing situations where breaking that rule changes the pick (tests/test_ex04_mutants.py).
ROUTE_CASES: dict[str, tuple[dict[str, Any], ...]] = {
    "prefix": (
        _case([B, [1, 2, 3, 4], []], [0, 3, 0], INF, -1),  # the longest prefix wins over a lighter load
        _case([[1, 3, 4, 5, 6], B, []], [0, 0, 0], INF, 1),  # a replica lacking block 2 holds one block
        _case([[7, 8, 9], A, [7]], [0, 0, 0], INF, 1),  # another prompt's blocks count for nothing
        _case([[], A, C], [0, 0, 2], INF, 0),  # the last replica holds the most
        _case([C, [], A, B], [1, 0, 0, 0], INF, 2),  # the first replica holds the most
        _case([B, D, A], [4, 2, 0], INF, 1),
    ),
    "bound": (
        _case([D, B, []], [5, 3, 2], 2, -1),  # 5 > 2 + 2: the longest prefix is out of bounds
        _case([D, B, []], [4, 3, 2], 2, 1),  # 4 <= 2 + 2: in bounds (the bound includes its edge)
        _case([D, A, []], [1, 0, 0], 0, 0),  # bound 0: only the least loaded
        _case([D, C, []], [3, 2, 1], 1.5, -1),  # a fractional bound
        _case([D, A, C], [6, 2, 5], 3, 0),  # relative to the least load, not to replica 0's or the mean
        _case([[], B, D], [0, 4, 5], 4, 2),
        _case([D, B, []], [7, 1, 3], INF, 2),  # no bound
    ),
    "ties": (
        _case([B, B, []], [3, 1, 0], INF, -1),  # equal prefixes: the lower load
        _case([B, B, B], [1, 1, 1], INF, 0),  # equal prefix and load: the first in turn after last_pick
        _case([B, B, B], [1, 1, 1], INF, 1),
        _case([B, B, B], [1, 1, 1], INF, 2),  # wrapping round to 0
        _case([B, B, B], [1, 1, 1], INF, -1),  # before the first request: replica 0
        _case([C, [], C, []], [0, 0, 0, 0], INF, 0),  # the first tied replica in turn, not the next replica
        _case([C, [], C, []], [0, 0, 0, 0], INF, 2),
        _case([[], [], []], [2, 1, 1], INF, 1),  # no prefix anywhere: the least loaded, then in turn
        _case([B, B, B, []], [2, 2, 1, 0], 1, 3),  # in bounds and tied on the prefix: the lower load
        _case([B, B, B, B], [1, 1, 5, 1], 1, 1),  # the turn counts every replica, out-of-bound ones included
    ),
}

#: Hidden fleet runs: (workload, fleet) keyword arguments for stage5.fleet.MultiTenant and FleetConfig. The first
#: pool is small enough to preempt; the second routes under a load bound, the third under the tightest, where ties
#: in load are the rule rather than the exception.
FLEET_RUNS: tuple[tuple[dict[str, Any], dict[str, Any]], ...] = (
    ({"tenants": 4, "system_len": 48, "sessions": 24, "turns": [2, 4], "user": [8, 24], "output": [4, 12],
      "popularity": 1.0, "rate": 60.0, "think_s": 0.02, "seed": 11},
     {"replicas": 3, "num_blocks": 48, "block_size": 4, "max_batch": 4}),
    ({"tenants": 3, "system_len": 40, "sessions": 24, "turns": [2, 3], "user": [8, 16], "output": [4, 8],
      "popularity": 1.5, "rate": 80.0, "think_s": 0.05, "seed": 5},
     {"replicas": 4, "load_bound": 1.0, "num_blocks": 96, "block_size": 8, "max_batch": 8}),
    ({"tenants": 6, "system_len": 40, "sessions": 24, "turns": [2, 3], "user": [8, 16], "output": [4, 8],
      "popularity": 0.5, "rate": 30.0, "think_s": 0.05, "seed": 7},
     {"replicas": 4, "load_bound": 0.0, "num_blocks": 96, "block_size": 8, "max_batch": 8}),
)


# ------------------------------------------------------------------------------------ kernel side
def _probe_held(label: str, held_blocks: Any, cases: list) -> list[Any]:
    return [held_blocks(list(prompt), frozenset(blocks)) for prompt, blocks in cases]


def _seen(case: Mapping[str, Any]) -> tuple[list[int], list[dict[str, Any]], float, int]:
    """A case as a router sees it in the fleet: fresh lists, each replica's blocks a frozenset."""
    replicas = [{"load": r["load"], "blocks": frozenset(r["blocks"])} for r in case["replicas"]]
    return list(case["prompt_blocks"]), replicas, case["load_bound"], case["last_pick"]


def _probe_routes(label: str, route: Any, cases: list) -> list[Any]:
    return [route(*_seen(case)) for case in cases]


@functools.cache
def _tiny() -> tuple[Any, Any]:
    from stage5.engine.fleet import load_tiny

    return load_tiny()


def _run(spec: Any, config: Any, route: Any) -> Any:
    """``spec`` (a MultiTenant) served on the made-up machine by ``config``'s fleet (a FleetConfig)."""
    import torch

    from stage5.engine.fleet import MADE_UP_MACHINE, serve_fleet

    model, cfg = _tiny()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 35k-parameter model: more threads only wait for each other
    try:
        return serve_fleet(model, cfg, MADE_UP_MACHINE, spec, config, route=route)
    finally:
        torch.set_num_threads(threads)


def _serve(workload: Mapping[str, Any], config: Mapping[str, Any], route: Any) -> Any:
    """:func:`_run` on a workload and a fleet given as keyword arguments (plain data)."""
    from stage5 import fleet
    from stage5.engine.fleet import FleetConfig

    spec = fleet.MultiTenant(**{k: tuple(v) if isinstance(v, list) else v for k, v in workload.items()})
    return _run(spec, FleetConfig(**config), route)


def _probe_fleet(label: str, route: Any, workload: dict, config: dict) -> list[int]:
    from stage5.inputs import InputError

    try:
        return _serve(workload, config, route).picks
    except InputError as err:  # the fleet's door: a pick that names no replica
        raise GradingError(f"{label}: {err}") from None


register_probes({"held": _probe_held, "routes": _probe_routes, "fleet": _probe_fleet}, ROUTING_BLOCKED)


# ------------------------------------------------------------------------------------ grader side
#: The kernel a hidden test drives (the notebook's name for :func:`.remote.kernel_of`; LocalKernel by hand).
router_kernel = kernel_of


def _answers(label: str, got: Any, count: int, what: str) -> list[int]:
    """The kernel's answers read as ``count`` whole numbers, or a failure saying what each should be."""
    if not isinstance(got, list) or len(got) != count:
        raise GradingError(f"{label}: your notebook's kernel did not answer every case")
    for value in got:
        if isinstance(value, bool) or not isinstance(value, int):
            raise GradingError(f"{label}: your function returned {str(value)[:40]!r}; it returns {what}")
    return got


def check_held(label: str, kernel: Any) -> None:
    """The learner's ``held_blocks`` on :data:`HELD_CASES`."""
    from stage5.engine.fleet import prefix_blocks_held

    got = _answers(label, kernel.drive(label, "held", ["held_blocks"], {"cases": [list(c) for c in HELD_CASES]}),
                   len(HELD_CASES), "a number of blocks (an int)")
    for (prompt, blocks), answer in zip(HELD_CASES, got, strict=True):
        if answer != prefix_blocks_held(prompt, set(blocks)):
            raise GradingError(f"{label}: held_blocks({prompt}, {set(blocks) or 'an empty set'}) is wrong: count the "
                               "prompt's blocks from the first and stop at the first one the replica lacks")


def why_not(prompt_blocks: list[int], replicas: list[Mapping[str, Any]], load_bound: float, last_pick: int,
            got: int) -> str:
    """The rule a pick other than the rule's breaks (it names the rule, never the replica to pick)."""
    from stage5.engine.fleet import prefix_blocks_held

    n, loads = len(replicas), [r["load"] for r in replicas]
    if not 0 <= got < n:
        return f"it returned {got}, which is no replica's index (0 to {n - 1})"
    held = [prefix_blocks_held(prompt_blocks, set(r["blocks"])) for r in replicas]
    eligible = [i for i in range(n) if loads[i] <= min(loads) + load_bound]
    if got not in eligible:
        return ("it chose a replica whose load is more than load_bound above the least loaded replica's: the bound "
                "comes first, whatever that replica holds")
    most = max(held[i] for i in eligible)
    if held[got] < most:
        return ("another replica within the load bound holds a longer prefix of the prompt: count each replica's "
                "own blocks from the prompt's first, stopping at the first it lacks")
    if loads[got] > min(loads[i] for i in eligible if held[i] == most):
        return "among replicas holding the longest prefix, the one with the lowest load wins"
    return ("on a tie in prefix and load, the first tied replica in turn after last_pick wins (last_pick + 1, "
            "last_pick + 2, ..., wrapping round to 0)")


def check_routes(label: str, kernel: Any, rule: str) -> None:
    """The learner's ``route`` on the cases of :data:`ROUTE_CASES` that exercise ``rule``."""
    from stage5.engine.fleet import route_by_prefix

    cases = ROUTE_CASES[rule]
    got = _answers(label, kernel.drive(label, "routes", ["route"], {"cases": list(cases)}), len(cases),
                   "the index of a replica (an int)")
    for number, (case, pick) in enumerate(zip(cases, got, strict=True), 1):
        args = _seen(case)
        if pick != route_by_prefix(*args):
            raise GradingError(f"{label}, case {number} of {len(cases)}: {why_not(*args, pick)}")


@functools.cache
def _reference_run(index: int) -> tuple[list[int], list[tuple], int, tuple[int, ...]]:
    """The rule's router on hidden fleet run ``index``: its picks, what it saw at each, the prefill tokens the
    fleet computed and the requests per replica (computed once per grading process)."""
    from stage5.engine.fleet import route_by_prefix

    seen: list[tuple] = []

    def recorded(*args: Any) -> int:
        seen.append(args)
        return route_by_prefix(*args)

    result = _serve(*FLEET_RUNS[index], recorded)
    return result.picks, seen, result.computed, tuple(result.sent)


PREDICTION_FACTOR = 2.0  # Part 3's prediction passes within this factor of the measurement (as ex03's by hand)


@functools.cache
def measured_ratio(spec: Any, config: Any) -> float:
    """Prompt tokens computed under round-robin over those under the rules' router with no bound, on ``spec``."""
    from dataclasses import replace

    from stage5.engine.fleet import route_by_prefix

    blind = _run(spec, replace(config, policy="round_robin"), None)
    return blind.computed / _run(spec, replace(config, load_bound=INF), route_by_prefix).computed


def check_prediction(label: str, predicted: Any, spec: Any, config: Any) -> None:
    """Part 3's prediction of :func:`measured_ratio`, within :data:`PREDICTION_FACTOR` of it."""
    value = _as_number(label, predicted)
    want = measured_ratio(spec, config)
    if not want / PREDICTION_FACTOR <= value <= want * PREDICTION_FACTOR:
        side = "high" if value > want else "low"
        raise GradingError(f"{label}: your prediction is too {side}, off by more than a factor of "
                           f"{PREDICTION_FACTOR:g}: round-robin finds a conversation's history only when the turn "
                           "lands where the previous one went (one time in as many as there are replicas), and a "
                           "tenant's system prompt once each replica has seen that tenant")


def _replaying(picks: list[int]) -> Any:
    """A routing function that answers ``picks`` in turn, whatever it is shown."""
    answers = iter(picks)
    return lambda *_: next(answers)


def check_fleet(label: str, kernel: Any) -> None:
    """The learner's ``route`` routing the toy fleet through each hidden run of :data:`FLEET_RUNS`: every pick the
    rule's, so the same prefill tokens computed and requests per replica, and the bound held throughout. A run
    that differs is replayed here with the learner's picks (plain integers) to report what they cost."""
    for index, (workload, config) in enumerate(FLEET_RUNS):
        run = (f"{label} (hidden fleet {index + 1}: {config['replicas']} replicas, load_bound "
               f"{config.get('load_bound', INF):g})")
        picks, seen, computed, sent = _reference_run(index)
        got = kernel.drive(run, "fleet", ["route"], {"workload": workload, "config": config})
        got = _answers(run, got, len(picks), "the index of a replica (an int)")
        if got == picks:
            continue
        at = next(i for i, (a, b) in enumerate(zip(got, picks, strict=True)) if a != b)
        message = f"{run}: request {at + 1} of {len(picks)}: {why_not(*seen[at], got[at])}"
        if all(0 <= g < config["replicas"] for g in got):
            mine = _serve(workload, config, _replaying(got))
            message += (f". Over the run your picks computed {mine.computed:,} prompt tokens (the rules' router "
                        f"{computed:,}) and sent {list(mine.sent)} requests per replica (the rules' {list(sent)})")
        raise GradingError(message)
