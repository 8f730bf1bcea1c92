"""The simulator: the pure function, its update benchmark, and the widget layer driven without a display."""

import json
import math

import pytest

from stage5.models import CONFIG_DIR
from stage5.simulator import PASTED, SimInputs, Simulator, simulate, to_html


def test_default_deployment():
    out = simulate(SimInputs())
    assert out.ok and out.max_concurrency == 400 and out.binding == "memory bandwidth"
    assert out.intensity < out.ridge and out.ttft_ms > 0 and out.tpot_ms > 0
    assert set(out.gains) == {"batching", "prefix_caching", "quantization", "speculative"}
    assert "TTFT" in to_html(out)


def test_the_update_benchmark_runs_every_control_once(capsys):
    """The 100 ms budget per update is measured by ``python -m stage5.bench_simulator`` on the reader's machine
    (a benchmark, not a timed test): here, one pass updates once per control and reports finite, ordered times."""
    from stage5.bench_simulator import SWEEP, main

    assert main(["--repeats", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["updates"] == len(SWEEP)
    assert 0 < report["median_ms"] <= report["p95_ms"] <= report["max_ms"] < float("inf")


def test_bad_deployments_come_back_with_a_reason():
    out = simulate(SimInputs(num_gpus=1))
    assert not out.ok and "does not fit" in out.error and math.isnan(out.tpot_ms)
    assert not simulate(SimInputs(concurrency=100_000)).ok
    assert not simulate(SimInputs(model=PASTED, config_json="{not json")).ok
    assert "Cannot run" in to_html(simulate(SimInputs(num_gpus=1)))


def test_speculation_and_prefix_hits_change_the_outputs():
    base = simulate(SimInputs(concurrency=1))
    spec = simulate(SimInputs(concurrency=1, k=4))
    assert spec.tpot_ms < base.tpot_ms and spec.spec_speedup > 1
    assert simulate(SimInputs(prefix_hit=0.5)).ttft_ms < base.ttft_ms
    assert simulate(SimInputs(concurrency=400)).binding == "KV memory capacity"


def test_widget_headless_updates_and_prediction_box():
    sim = Simulator()
    sim.widget()
    before = sim.outputs.tpot_ms
    after = sim.set(concurrency=8).tpot_ms
    assert after < before and "TPOT" in sim.result.value
    sim.record_guess("TPOT (ms)", 10.0)
    result = sim.reveal()
    assert result["actual"] == pytest.approx(simulate(SimInputs(concurrency=8)).tpot_ms)
    assert result["error"] == pytest.approx(10.0 - result["actual"])
    assert "error" in sim.feedback.value
    assert sim.reveal() is None  # the guess is used up
    with pytest.raises(KeyError):
        sim.set(colour="red")


def test_hidden_results_until_reveal():
    sim = Simulator()
    sim.hide.value = True
    sim.record_guess("max concurrency", 100)
    assert "hidden" in sim.result.value
    sim.reveal()
    assert "max concurrency" in sim.result.value


def test_pasted_config():
    cfg = json.loads((CONFIG_DIR / "llama3-8b.json").read_text())
    out = simulate(SimInputs(model=PASTED, config_json=json.dumps(cfg), num_gpus=1))
    ref = simulate(SimInputs(model="llama3-8b", num_gpus=1))
    assert out.ok and out.tpot_ms == pytest.approx(ref.tpot_ms)


def test_hide_hides_results_before_any_guess():
    """Ticking "hide" must hide the numbers at once, not only after a guess is recorded (chapter 10 tells
    learners to tick it first); a reveal shows them for the inputs guessed, and a new setting hides them again."""
    sim = Simulator()
    shown = sim.result.value
    assert "TPOT" in shown
    sim.hide.value = True
    assert "TPOT" not in sim.result.value and "hidden" in sim.result.value
    sim.set(concurrency=8)  # changing the inputs before guessing must not show them either
    assert "TPOT" not in sim.result.value
    sim.record_guess("TPOT (ms)", 10.0)
    assert "TPOT" not in sim.result.value
    sim.reveal()
    assert "TPOT" in sim.result.value
    sim.set(concurrency=16)  # a new deployment: a new prediction to make
    assert "TPOT" not in sim.result.value
    sim.hide.value = False
    assert "TPOT" in sim.result.value


def test_fleet_levers_price_the_hit_the_router_keeps():
    one = simulate(SimInputs(prefix_hit=0.8, history_share=0.5))
    rr = simulate(SimInputs(prefix_hit=0.8, history_share=0.5, replicas=8, routing="round_robin"))
    pa = simulate(SimInputs(prefix_hit=0.8, history_share=0.5, replicas=8, routing="prefix_aware"))
    assert one.fleet_hit == pa.fleet_hit == pytest.approx(0.8)
    assert rr.fleet_hit == pytest.approx(0.8 * (0.5 + 0.5 / 8))
    assert rr.ttft_ms > pa.ttft_ms == pytest.approx(one.ttft_ms)
    assert rr.usd_per_million > pa.usd_per_million
    assert pa.fleet_throughput == pytest.approx(8 * pa.throughput) and one.fleet_throughput == one.throughput
    assert "replica(s)" in to_html(rr, SimInputs(replicas=8, routing="round_robin"))


def test_a_kv_tier_adds_its_reload_to_ttft_and_never_more_than_recomputing():
    base = SimInputs(prefix_hit=0.9, prompt=4096)
    hbm, cpu, ssd = (simulate(SimInputs(**{**base.__dict__, "kv_tier": t})) for t in ("hbm", "cpu", "ssd"))
    cold = simulate(SimInputs(**{**base.__dict__, "prefix_hit": 0.0}))
    assert hbm.tier_reload_ms == 0 and 0 < cpu.tier_reload_ms < ssd.tier_reload_ms
    assert hbm.ttft_ms < cpu.ttft_ms < ssd.ttft_ms <= cold.ttft_ms
    assert ssd.ttft_ms == pytest.approx(hbm.ttft_ms + ssd.tier_reload_ms)
    assert cpu.usd_per_million == hbm.usd_per_million  # the tier changes TTFT, not the bill
    refused = simulate(SimInputs(gpu="L4", num_gpus=1, model="llama3.2-1b", prefix_hit=0.5, kv_tier="cpu"))
    assert not refused.ok and "host-memory" in refused.error


@pytest.mark.parametrize("field, value", [("replicas", 0), ("replicas", 2.5), ("routing", "random"),
                                          ("history_share", 1.5), ("kv_tier", "tape")])
def test_bad_fleet_inputs_are_refused(field, value):
    out = simulate(SimInputs(**{field: value}))
    assert not out.ok and field in out.error


def test_speculation_takes_the_draft_cost_and_the_tree_width():
    """Chapter 7's engine-shaped speculation in the simulator: a cheaper draft gains more at a small batch, a token
    tree gains more at batch 1 and less on a full server, and a width the cost model does not price is refused."""
    def speed(**kw):
        out = simulate(SimInputs(k=4, alpha=0.7, **kw))
        assert out.ok, out.error
        return out.spec_speedup

    assert speed(concurrency=1, draft_cost=0.0) > speed(concurrency=1) > speed(concurrency=1, draft_cost=0.3)
    assert speed(concurrency=1, tree_width=2) > speed(concurrency=1)
    assert speed(concurrency=256, tree_width=2) < speed(concurrency=256)
    refused = simulate(SimInputs(k=4, tree_width=9))
    assert not refused.ok and "tree_width" in refused.error
