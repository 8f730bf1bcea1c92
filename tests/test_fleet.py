"""The serving fleet: the multi-tenant workload, the predicted hit rates, the toy fleet and its router, bench fleet."""

from __future__ import annotations

import json
import math

import pytest
import torch

from stage5 import fleet
from stage5.calibrate import Calibration
from stage5.engine import fleet as F
from stage5.engine.roofline_toy import ROOFLINE_TOY
from stage5.inputs import InputError

torch.set_num_threads(1)

# A made-up machine, so virtual times do not depend on the one running the tests (as tests/test_load.py).
CAL = Calibration(machine="test", threads=1, bandwidth=10e9, rows=(1, 16, 256), rates=(5e9, 40e9, 80e9),
                  overhead_step_s=1e-3, overhead_seq_s=1e-4, model=ROOFLINE_TOY.name)
# A small workload: three tenants (one busy), short sessions, so a run is a second of CPU.
SMALL = fleet.MultiTenant(tenants=3, system_len=64, sessions=14, turns=(2, 3), user=(8, 16), output=(4, 8),
                          popularity=1.5, rate=40.0, think_s=0.05, seed=3)
ROOMY = dict(num_blocks=96, block_size=8, max_batch=8)  # nothing is ever evicted in these runs


@pytest.fixture(scope="module")
def tiny():
    return F.load_tiny()


@pytest.fixture(scope="module")
def text():
    return F.Conversations(SMALL).text


def serve(tiny, text, spec=SMALL, route=None, **config):
    model, cfg = tiny
    return F.serve_fleet(model, cfg, CAL, spec, F.FleetConfig(**{**ROOMY, **config}), F.Conversations(spec, text),
                         route=route)


# ------------------------------------------------------------------------------------------ the workload
def test_plan_is_seeded_and_sessions_grow_turn_by_turn():
    a, b = fleet.MultiTenant(seed=5).plan, fleet.MultiTenant(seed=5).plan
    assert a == b and a != fleet.MultiTenant(seed=6).plan
    spec = SMALL
    for s in spec.plan:
        assert spec.turns[0] <= len(s.turns) <= spec.turns[1]
        lengths = [spec.prompt_len(t) for t in s.turns]
        for prev, turn, now in zip(s.turns, s.turns[1:], lengths[1:], strict=False):
            assert now == spec.prompt_len(prev) + prev.output_len + turn.user_len
    assert [s.start_s for s in spec.plan] == sorted(s.start_s for s in spec.plan)


def test_popularity_skews_tenants():
    skewed = fleet.MultiTenant(tenants=8, sessions=400, popularity=1.5).plan
    uniform = fleet.MultiTenant(tenants=8, sessions=400, popularity=0.0).plan
    top = lambda plan: sum(s.tenant == 0 for s in plan) / len(plan)  # noqa: E731
    assert top(skewed) > 0.35 > 0.2 > top(uniform)


def test_cached_tokens_counts_full_blocks_and_keeps_the_last_token():
    assert fleet.cached_tokens(64, 100, 16) == 64
    assert fleet.cached_tokens(70, 100, 16) == 64  # the straddling block is not shared
    assert fleet.cached_tokens(200, 65, 16) == 64  # the prompt's last token is always computed
    assert fleet.cached_tokens(200, 64, 16) == 48


# ------------------------------------------------------------------------------------------ the prediction
def test_prediction_by_hand_on_one_session():
    """One tenant, one two-turn session: turn 0 finds nothing; turn 1 finds its whole history on the same replica
    (probability 1 under prefix-aware routing, 1/N otherwise) and the system prompt elsewhere only if the tenant
    had been seen there."""
    spec = fleet.MultiTenant(tenants=1, system_len=32, sessions=1, turns=(2, 2), user=(8, 8), output=(8, 8))
    # turn 0: 32 + 8 = 40 tokens; turn 1: 40 + 8 + 8 = 56, history = 40 + 8 - 1 = 47 -> 5 blocks of 8 = 40
    assert [spec.prompt_len(t) for t in spec.plan[0].turns] == [40, 56]
    pa = fleet.predicted_hits(spec, 4, "prefix_aware", block_size=8)
    assert pa.prompt_tokens == 96 and pa.cached_tokens == 40
    rr = fleet.predicted_hits(spec, 4, "round_robin", block_size=8)
    # elsewhere the tenant's only other request is the previous turn, which is not there: 0
    assert rr.cached_tokens == pytest.approx(40 / 4)
    assert fleet.predicted_hits(spec, 1, "round_robin", block_size=8).cached_tokens == 40


def test_prediction_falls_with_replicas_for_prompt_blind_routing_only():
    spec = fleet.MultiTenant()
    rr = [fleet.predicted_hits(spec, n, "round_robin").hit_rate for n in (1, 2, 4, 8, 16)]
    pa = [fleet.predicted_hits(spec, n, "prefix_aware").hit_rate for n in (1, 2, 4, 8, 16)]
    assert all(a > b for a, b in zip(rr, rr[1:], strict=False))
    assert len(set(pa)) == 1 and pa[0] == rr[0]


def test_routed_hit_rate_formula():
    assert fleet.routed_hit_rate(0.8, 0.5, 4, "round_robin") == pytest.approx(0.8 * (0.5 + 0.5 / 4))
    assert fleet.routed_hit_rate(0.8, 0.5, 4, "prefix_aware") == pytest.approx(0.8)
    assert fleet.routed_hit_rate(0.8, 0.0, 64, "least_loaded") == pytest.approx(0.8)


@pytest.mark.parametrize("call, match", [
    (lambda: fleet.check_replicas(0), "replicas"),
    (lambda: fleet.check_replicas(2.5), "replicas"),
    (lambda: fleet.check_replicas(True), "replicas"),
    (lambda: fleet.check_policy("random"), "round_robin, least_loaded, prefix_aware"),
    (lambda: fleet.MultiTenant(turns=(3, 2)), "low <= high"),
    (lambda: fleet.MultiTenant(rate=0.0), "rate"),
    (lambda: fleet.MultiTenant(tenants=0), "tenants"),
    (lambda: fleet.routed_hit_rate(1.2, 0.5, 2, "round_robin"), "prefix_hit"),
    (lambda: F.FleetConfig(load_bound=-1), "load_bound"),
    (lambda: F.FleetConfig(load_bound=float("nan")), "load_bound"),
    (lambda: F.FleetConfig(replicas=0), "replicas"),
])
def test_impossible_fleets_are_refused_in_one_line(call, match):
    with pytest.raises(InputError, match=match) as err:
        call()
    assert "\n" not in str(err.value)


def test_a_pool_too_small_for_the_workload_is_refused(tiny, text):
    with pytest.raises(InputError, match="pool holds"):
        serve(tiny, text, num_blocks=4)


# ------------------------------------------------------------------------------------------ the toy fleet
def test_fleet_runs_are_deterministic(tiny, text):
    a = serve(tiny, text, replicas=3, policy="prefix_aware", load_bound=1.0)
    b = serve(tiny, text, replicas=3, policy="prefix_aware", load_bound=1.0)
    assert a.summary() == b.summary() and a.outputs == b.outputs and a.sent == b.sent
    assert a.requests == SMALL.requests == len(a.outputs)


def test_every_request_gets_the_answer_it_would_get_alone(tiny, text):
    """Routing and caching change where and when, never what: each request's tokens equal a reference run of the
    same prompts through one engine without a cache."""
    from stage5.engine.engine import Engine
    from stage5.engine.sequence import Request

    model, cfg = tiny
    run = serve(tiny, text, replicas=3, policy="prefix_aware")
    prompts = {}
    talk = F.Conversations(SMALL, text)
    # rebuild each prompt from the recorded answers, in (session, turn) order
    by_turn = sorted(run.turns.items(), key=lambda kv: kv[1])
    for rid, (session, index) in by_turn:
        turn = SMALL.plan[session].turns[index]
        request = talk.request(turn, rid, 0.0)
        prompts[rid] = request
        talk.answered(session, request.prompt, run.outputs[rid])
    alone = Engine(model, cfg, num_blocks=96, block_size=8).run(
        [Request(r.id, r.prompt, r.max_tokens, r.stop_after) for r in prompts.values()])
    assert alone.outputs == run.outputs


def test_prefix_aware_without_a_bound_hits_what_one_replica_hits(tiny, text):
    single = serve(tiny, text, replicas=1, policy="round_robin")
    routed = serve(tiny, text, replicas=4, policy="prefix_aware")
    assert routed.computed == single.computed and routed.hit_rate == single.hit_rate
    assert routed.hit_rate == pytest.approx(fleet.predicted_hits(SMALL, 4, "prefix_aware", 8).hit_rate)
    # round-robin divides the cache: far fewer hits, close to its prediction
    rr = serve(tiny, text, replicas=4, policy="round_robin")
    assert rr.hit_rate < routed.hit_rate - 0.15
    assert rr.hit_rate == pytest.approx(fleet.predicted_hits(SMALL, 4, "round_robin", 8).hit_rate, abs=0.08)


def test_tightening_the_load_bound_trades_hits_for_balance(tiny, text):
    rr = serve(tiny, text, replicas=4, policy="round_robin")
    runs = {b: serve(tiny, text, replicas=4, policy="prefix_aware", load_bound=b) for b in (math.inf, 2.0, 0.0)}
    hits = [runs[b].hit_rate for b in (math.inf, 2.0, 0.0)]
    assert hits[0] > hits[2] and hits[0] >= hits[1] >= hits[2]
    # at the tightest bound the hit rate has fallen most of the way to round-robin's
    assert hits[2] - rr.hit_rate < (hits[0] - rr.hit_rate) / 2
    # and the busiest replica is less busy
    assert runs[0.0].imbalance < runs[math.inf].imbalance
    assert max(runs[0.0].sent) < max(runs[math.inf].sent)


def test_round_robin_sends_requests_in_turn(tiny, text):
    run = serve(tiny, text, replicas=4, policy="round_robin")
    assert max(run.sent) - min(run.sent) <= 1


def test_the_router_rotates_ties_and_respects_the_bound():
    """Router alone, on stand-in replicas: ties go round in turn; the bound excludes a loaded replica even when
    it holds the longest prefix."""
    class Stub:
        def __init__(self, load, held):
            self.load, self.held = load, held

        def matched_blocks(self, request, chain):
            return self.held

    router = F.Router(F.FleetConfig(replicas=3, policy="least_loaded"))
    idle = [Stub(0, 0), Stub(0, 0), Stub(0, 0)]
    assert [router.choose(idle, None, []) for _ in range(4)] == [0, 1, 2, 0]
    pa = F.Router(F.FleetConfig(replicas=3, policy="prefix_aware", load_bound=2.0))
    assert pa.choose([Stub(3, 9), Stub(1, 2), Stub(0, 0)], None, []) == 1  # 3 > 0 + 2: replica 0 excluded
    pa = F.Router(F.FleetConfig(replicas=3, policy="prefix_aware", load_bound=3.0))
    assert pa.choose([Stub(3, 9), Stub(1, 2), Stub(0, 0)], None, []) == 0


# ------------------------------------------------------------------------------------------ bench fleet
def test_a_routing_function_on_plain_data_routes_as_the_policies_do(tiny, text):
    """route_by_prefix, given what the router sees as plain data (exercise 4's form), picks what the prefix-aware
    policy picks, in a pool small enough to preempt; a round-robin function picks what round-robin does."""
    tight = dict(num_blocks=40, block_size=4, max_batch=4)
    for bound in (math.inf, 1.0):
        policy = serve(tiny, text, replicas=3, policy="prefix_aware", load_bound=bound, **tight)
        routed = serve(tiny, text, replicas=3, load_bound=bound, route=F.route_by_prefix, **tight)
        assert routed.picks == policy.picks and routed.computed == policy.computed
    assert policy.preemptions > 0 and len(set(policy.picks)) == 3
    turn = serve(tiny, text, replicas=3, route=lambda blocks, replicas, bound, last: (last + 1) % len(replicas))
    assert turn.picks == serve(tiny, text, replicas=3, policy="round_robin").picks


@pytest.mark.parametrize("answer", [3, -1, True, "0", None, 1.5])
def test_a_routing_function_that_names_no_replica_is_refused_in_one_line(tiny, text, answer):
    with pytest.raises(InputError, match=r"^the routing function returned .*; accepted: the index of a replica, an "
                                         r"int from 0 to 2$"):
        serve(tiny, text, replicas=3, route=lambda *_: answer)


def test_bench_fleet_json(tiny, monkeypatch, capsys):
    """The command on a small workload: one JSON object with the three policies' hit rate and TTFT percentiles."""
    import stage5.calibrate as calibrate
    from stage5.engine.bench import main

    monkeypatch.setattr(calibrate, "calibrate", lambda cfg, **kw: CAL)
    assert main(["fleet", "--json", "--replicas", "3", "--sessions", "6", "--tenants", "2"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["policies"]) == set(fleet.POLICIES)
    for r in report["policies"].values():
        assert {"hit_rate", "ttft_p50", "ttft_p99", "predicted_hit_rate", "imbalance"} <= set(r)
        assert 0 <= r["hit_rate"] <= 1 and r["ttft_p99"] >= r["ttft_p50"] > 0
    assert report["summary"]["prefill_cut_prefix_over_round_robin"] >= 1


@pytest.mark.parametrize("argv", [["--replicas", "0"], ["--replicas", "65"], ["--rate", "-1"], ["--sessions", "x"]])
def test_bench_fleet_refuses_bad_flags_in_one_line(argv, capsys):
    from stage5.engine.bench import main

    with pytest.raises(SystemExit) as stop:
        main(["fleet", *argv])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err
