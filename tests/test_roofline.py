"""The roofline toy, the calibration cache, the step-time model and the timing sentences.

Nothing here passes or fails on a wall-clock time: timings are either faked (to check that a sentence follows
its numbers) or only checked for shape and sign.
"""

from __future__ import annotations

import json

import pytest
import torch

from stage5 import calibrate as cal_mod
from stage5.calibrate import Calibration
from stage5.claims import compare, crossing, describe_roofline, describe_spec, times
from stage5.engine.bench_roofline import KEYS, measurement_from, roofline_report
from stage5.engine.engine import Engine
from stage5.engine.model import Transformer, fuse_projections, generate
from stage5.engine.prefix import PrefixCachingAllocator
from stage5.engine.roofline_spec import SetAcceptanceDrafter
from stage5.engine.roofline_toy import (
    MIN_WEIGHT_BYTES,
    ROOFLINE_DRAFT,
    ROOFLINE_TOY,
    build,
    load_roofline_draft,
    load_roofline_toy,
)
from stage5.engine.sequence import Request
from stage5.engine.speculative import DraftModelDrafter, SpeculativeEngine
from stage5.step_model import predict_run_s, predict_step, ridge_batch, speculative_speedup
from tests.test_engine import CFG

torch.set_num_threads(1)

# A made-up machine: 20 GB/s, matmul rate rising from 10 to 100 GFLOP/s with the rows, 0.5 ms + 50 us overhead.
FAKE = Calibration(machine="test", threads=1, bandwidth=20e9, rows=(1, 4, 16, 64, 256),
                   rates=(10e9, 25e9, 60e9, 90e9, 100e9), overhead_step_s=5e-4, overhead_seq_s=5e-5,
                   model=ROOFLINE_TOY.name)


# ------------------------------------------------------------------------------------------- the toy
def test_roofline_toy_is_large_and_shares_the_architecture():
    assert ROOFLINE_TOY.weight_bytes(4) >= MIN_WEIGHT_BYTES
    model, cfg = load_roofline_toy()
    assert isinstance(model, Transformer) and cfg is ROOFLINE_TOY
    assert sum(p.numel() for p in model.parameters()) == cfg.num_params  # the config counts what is built
    # the draft's op graph matches the target's, so the calibrated overhead applies to both
    assert (ROOFLINE_DRAFT.num_layers, ROOFLINE_DRAFT.num_heads, ROOFLINE_DRAFT.num_kv_heads) == \
           (cfg.num_layers, cfg.num_heads, cfg.num_kv_heads)


def test_roofline_toy_weights_come_from_the_seed_and_leave_the_global_rng_alone():
    cfg = ROOFLINE_DRAFT
    state = torch.random.get_rng_state()
    a, b, c = build(cfg, seed=3), build(cfg, seed=3), build(cfg, seed=4)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))
    assert not torch.equal(a.embed.weight, c.embed.weight)


def test_one_op_per_projection():
    block = load_roofline_toy()[0].blocks[0]
    linears = [name for name, m in block.named_modules() if isinstance(m, torch.nn.Linear)]
    assert linears == ["qkv", "o", "gate_up", "down"]


def test_old_checkpoint_layout_converts_to_the_same_function():
    torch.manual_seed(1)
    model = Transformer(CFG).double().eval()
    old = {}
    for key, value in model.state_dict().items():  # split back into the pre-fusion layout
        if key.endswith("qkv.weight"):
            q, k, v = value.split([CFG.num_heads * CFG.head_dim, CFG.num_kv_heads * CFG.head_dim,
                                   CFG.num_kv_heads * CFG.head_dim])
            old.update({key.replace("qkv", "q"): q, key.replace("qkv", "k"): k, key.replace("qkv", "v"): v})
        elif key.endswith("gate_up.weight"):
            gate, up = value.chunk(2)
            old.update({key.replace("gate_up", "gate"): gate, key.replace("gate_up", "up"): up})
        else:
            old[key] = value
    other = Transformer(CFG).double().eval()
    other.load_state_dict(fuse_projections(old))
    tokens = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    assert torch.equal(model.score(tokens), other.score(tokens))


def _requests(n: int = 3) -> list[Request]:
    return [Request(i, tuple((5 * i + j) % 256 for j in range(3 + i)), 4) for i in range(n)]


def test_every_engine_runs_on_the_roofline_toy_unchanged():
    model, cfg = load_roofline_toy()
    requests = _requests()
    reference = {r.id: generate(model, list(r.prompt), r.output_len) for r in requests}
    for allocator in ("contiguous", "paged"):
        for scheduler in ("static", "continuous"):
            engine = Engine(model, cfg, allocator=allocator, scheduler=scheduler, num_blocks=8, block_size=4)
            assert engine.run(requests).outputs == reference, (allocator, scheduler)
            assert engine.alloc.num_free_slots == engine.alloc.num_slots  # nothing leaked
    prefix = Engine(model, cfg, num_blocks=8, block_size=4, prefix_caching=True)
    assert prefix.run(requests).outputs == reference
    assert isinstance(prefix.alloc, PrefixCachingAllocator)
    draft, draft_cfg = load_roofline_draft()
    spec = SpeculativeEngine(model, cfg, DraftModelDrafter(draft, draft_cfg, 8, 4), k=2, num_blocks=8, block_size=4)
    assert spec.run(requests).outputs == reference
    assert len(spec.alloc.free_blocks) == spec.alloc.num_blocks


def test_set_acceptance_drafter_keeps_outputs_exact_and_reaches_its_alpha():
    model, cfg = load_roofline_draft()  # the small one: this test is about the drafter, not timing
    requests = [Request(i, (1 + i, 2, 3), 24) for i in range(4)]
    plain = Engine(model, cfg, num_blocks=32, block_size=4).run(requests)
    rates = []
    for alpha in (0.0, 1.0, 0.6):
        drafter = SetAcceptanceDrafter(plain.outputs, alpha, cfg.vocab_size, seed=0,
                                       cost=DraftModelDrafter(model, cfg, 32, 4))
        spec = SpeculativeEngine(model, cfg, drafter, k=3, num_blocks=32, block_size=4).run(requests)
        assert spec.outputs == plain.outputs
        rates.append(spec.alpha)
    assert rates[0] == 0 and rates[1] == 1 and 0.3 < rates[2] < 0.9


# ---------------------------------------------------------------------------- calibration and model
def test_calibration_is_cached_per_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("STAGE5_CACHE_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(cal_mod, "measure", lambda cfg: calls.append(cfg) or FAKE)
    assert cal_mod.calibrate(ROOFLINE_TOY) == FAKE and len(calls) == 1
    assert cal_mod.calibrate(ROOFLINE_TOY) == FAKE and len(calls) == 1  # read back, not measured again
    path = cal_mod.cache_path(ROOFLINE_TOY)
    assert path.parent == tmp_path and json.loads(path.read_text())["bandwidth"] == FAKE.bandwidth
    assert cal_mod.cache_path(CFG) != path  # keyed by the model's shapes too
    cal_mod.calibrate(ROOFLINE_TOY, force=True)
    assert len(calls) == 2
    path.write_text("{not json")  # a damaged cache is measured again, not trusted
    cal_mod.calibrate(ROOFLINE_TOY)
    assert len(calls) == 3
    assert torch.get_num_threads() == cal_mod.THREADS


def test_hollow_config_keeps_the_op_graph():
    from stage5.engine.overhead import hollow_config  # the hollow run sits beside the engine it runs

    hollow = hollow_config(ROOFLINE_TOY)
    assert (hollow.num_layers, hollow.num_heads, hollow.num_kv_heads, hollow.vocab_size) == \
           (ROOFLINE_TOY.num_layers, ROOFLINE_TOY.num_heads, ROOFLINE_TOY.num_kv_heads, ROOFLINE_TOY.vocab_size)
    assert hollow.num_params < ROOFLINE_TOY.num_params / 100
    shapes = cal_mod.model_matrices(ROOFLINE_TOY)
    assert sum(n * k for n, k in shapes) + ROOFLINE_TOY.vocab_size * ROOFLINE_TOY.hidden_size + \
        ROOFLINE_TOY.hidden_size * (2 * ROOFLINE_TOY.num_layers + 1) == ROOFLINE_TOY.num_params


def test_step_model_terms():
    one, many = predict_step(FAKE, ROOFLINE_TOY, 1), predict_step(FAKE, ROOFLINE_TOY, 64)
    assert float(one.memory_s) == pytest.approx(ROOFLINE_TOY.weight_bytes(4) / FAKE.bandwidth)
    assert float(one.memory_s) == float(many.memory_s)  # the weights are read once whatever the batch
    assert float(many.compute_s) == pytest.approx(2 * ROOFLINE_TOY.num_params * 64 / 90e9)
    assert float(many.overhead_s) == pytest.approx(5e-4 + 64 * 5e-5)
    ideal = predict_step(FAKE, ROOFLINE_TOY, 4, ideal=True)
    assert float(ideal.compute_s) < float(predict_step(FAKE, ROOFLINE_TOY, 4).compute_s)  # the efficiency gap
    assert float(predict_step(FAKE, ROOFLINE_TOY, 8, context=500).attention_s) > 0
    # the ridge: 2 N B / peak = 4 N / bandwidth
    assert ridge_batch(FAKE, ROOFLINE_TOY) == pytest.approx(4 * 100e9 / (2 * 20e9))
    small, large = speculative_speedup(FAKE, ROOFLINE_TOY, ROOFLINE_DRAFT, [1, 64], 16, 0.8, 4)
    assert small > 1 > large


def test_predicted_run_follows_the_trace():
    model, cfg = load_roofline_draft()
    requests = [Request(i, (1, 2, 3), 6) for i in range(6)]
    runs = [Engine(model, cfg, scheduler=s, max_batch=b, num_blocks=16, block_size=4).run(requests)
            for s, b in (("static", 1), ("continuous", 6))]
    assert all(len(r.step_tokens) == r.steps for r in runs)
    assert runs[0].step_tokens[0] == 3 and runs[0].step_tokens[1] == 1  # a prefill, then one token per decode
    assert predict_run_s(FAKE, ROOFLINE_TOY, runs[0]) > predict_run_s(FAKE, ROOFLINE_TOY, runs[1])


# ---------------------------------------------------------------------------- report and sentences
def _timings(speed: float) -> tuple[dict[int, float], dict[int, float]]:
    """Fake medians: the prediction for FAKE divided by ``speed`` (above 1: a faster machine)."""
    batches = (1, 2, 4, 8, 16, 32)
    context = {b: 6.0 for b in batches}
    return {b: float(predict_step(FAKE, ROOFLINE_TOY, b, 6.0).time_s) / speed for b in batches}, context


def test_roofline_report_has_exactly_the_issue_keys():
    measured, context = _timings(1.0)
    report = roofline_report(FAKE, ROOFLINE_TOY, measured, context)
    assert tuple(report) == KEYS
    assert report["ratio"] == pytest.approx([1.0] * 6)
    assert len(report["batches"]) == len(report["predicted_ms"]) == len(report["measured_ms"]) == 6
    assert report["speedup_b32_over_b1"] == pytest.approx(32 * measured[1] / measured[32])
    assert 0 < report["memory_share_b1"] < 1


def test_chapter_sentences_follow_fast_and_slow_timings():
    """The chapters' measurement code, fed a machine twice as fast and twice as slow as its calibration."""
    fast = describe_roofline(measurement_from(FAKE, ROOFLINE_TOY, *_timings(2.0)).report)
    slow = describe_roofline(measurement_from(FAKE, ROOFLINE_TOY, *_timings(0.5)).report)
    same = describe_roofline(measurement_from(FAKE, ROOFLINE_TOY, *_timings(1.0)).report)
    assert "too high" in fast["agreement"] and "too low" in slow["agreement"] and "within" in same["agreement"]
    assert fast["bound_b1"] != slow["bound_b1"]  # half the time: streaming cannot be most of a doubled step
    batches = [1, 4, 16, 32]
    collapse = describe_spec(batches, [1.6, 1.3, 0.9, 0.6], [1.5, 1.2, 1.0, 0.7])
    never = describe_spec(batches, [1.6, 1.5, 1.4, 1.2], [1.5, 1.2, 1.0, 0.7])
    assert collapse["measured_crossing"] == "crosses 1 between batch 4 and batch 16"
    assert never["measured_crossing"] == "stays above 1 at every batch measured, up to 32"
    assert collapse["large_batch"].endswith("slower") and never["large_batch"].endswith("faster")
    assert collapse["verdict"] != never["verdict"]


def test_comparison_words():
    assert compare(1.5) == "faster" and compare(0.5) == "slower" and compare(1.01) == "about as fast"
    assert times(2.0) == "2.0× faster" and times(0.5) == "2.0× slower"
    assert crossing([1, 2], [0.9, 0.8]) == "is below 1 already at batch 1"


def test_cli_calibrate_and_bench_roofline_json(tmp_path, monkeypatch, capsys):
    """`python -m stage5 calibrate` and `python -m stage5 bench roofline --json`, with the timing faked."""
    from stage5.__main__ import main
    from stage5.engine import bench_roofline

    monkeypatch.setenv("STAGE5_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cal_mod, "measure", lambda cfg: FAKE)
    assert main(["calibrate", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["bandwidth"] == FAKE.bandwidth and shown["cache_file"].startswith(str(tmp_path))
    measured, context = _timings(1.25)
    monkeypatch.setattr(bench_roofline, "measure_decode_steps", lambda *a, **k: (measured, context))
    assert main(["bench", "roofline", "--rounds", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert tuple(report) == KEYS and report["ratio"] == pytest.approx([1.25] * 6)


def test_the_predicted_trend_has_a_branch_for_each_shape():
    """Chapter 7's sentence about the prediction: the collapse (with its break-even), a gain that stays above 1, a
    speedup that does not fall with the batch, and no gain at all (one build predicted 0.87x rising to 0.99x and the
    page still said "predicts the collapse ... from about batch 1")."""
    batches = [1, 4, 16, 64]
    measured = [1.0, 1.0, 1.0, 1.0]
    words = {name: describe_spec(batches, measured, values)["predicted_trend"] for name, values in (
        ("collapse", [1.5, 1.2, 0.9, 0.7]), ("stays", [1.6, 1.4, 1.2, 1.1]), ("flat", [1.3, 1.3, 1.35, 1.4]),
        ("never_rising", [0.87, 0.9, 0.95, 0.99]), ("never_falling", [0.95, 0.9, 0.8, 0.7]))}
    assert words["collapse"].startswith("predicts the collapse") and "from about batch 16" in words["collapse"]
    assert "stays above 1" in words["stays"] and "does not fall" in words["flat"]
    assert "no clear gain" in words["never_rising"] and "does not fall" in words["never_rising"]
    assert "no clear gain" in words["never_falling"] and "does not fall" not in words["never_falling"]
    assert all("collapse:" not in w for k, w in words.items() if k != "collapse")
    # the finer curve, when given, places the break-even
    fine = describe_spec(batches, measured, [1.5, 1.2, 0.9, 0.7],
                         curve=(list(range(1, 65)), [max(0.2, 1.5 - 0.05 * b) for b in range(1, 65)]))
    assert "from about batch 11" in fine["predicted_trend"]
    # the verdict follows both series
    neither = describe_spec(batches, [0.9, 0.95, 0.97, 1.0], [0.87, 0.9, 0.95, 0.99])["verdict"]
    expected = describe_spec(batches, [1.2, 1.2, 1.2, 1.2], [1.5, 1.2, 0.9, 0.7])["verdict"]
    assert neither.startswith("neither") and expected.startswith("this build did not show the collapse")
