"""The fit with a split (stage5.fit, stage5.fitted): reproducible, scored out of sample, and a band that says what it
rests on (issue 47)."""

import functools
import re

import numpy as np
import pytest

from stage5 import cost, fit, fitted, validate
from stage5.__main__ import main
from stage5.hardware import GPUS
from stage5.published import SOURCES, setup_of
from stage5.quantization import WEIGHT_FORMATS


def test_the_decomposed_rows_price_exactly_as_validate_does():
    """The fit prices each row from its steps at unit efficiency; at the frozen constants that must be the estimate
    validate prints (stage5.cost's own formulas), row by row. If a step formula changes, this fails."""
    direct = np.array([r.estimate for r in validate.rows()])
    assert fit.estimates(fit.frozen()) == pytest.approx(direct, rel=1e-9)


def test_the_refit_reproduces_the_frozen_constants_within_rounding(capsys):
    got = fit.fit_constants()
    assert set(got) == set(fit.frozen())
    for name, value in got.items():
        assert value == pytest.approx(fit.frozen()[name], rel=1e-6, abs=1e-9), name
    assert tuple(sorted(fitted.FITTED_ON)) == fit.fit_sources()
    assert main(["validate", "--refit"]) == 0
    out = capsys.readouterr().out
    assert "refit on the fit sources" in out and "frozen in stage5/fitted.py" in out


def test_every_source_is_marked_and_a_later_one_defaults_to_held_out():
    assert {s.split for s in SOURCES.values()} == {"fit", "held_out"}
    assert set(SOURCES) == set(__import__("stage5.published", fromlist=["x"]).SPLIT_REASONS)
    later = SOURCES["vllm-ci"].__class__("new", "e", "a", "v", "s")
    assert later.split == "held_out" and not later.in_sample
    with pytest.raises(ValueError, match="split 'train' is not known; accepted: fit, held_out"):
        SOURCES["vllm-ci"].__class__("new", "e", "a", "v", "s", split="train")


def test_a_constant_no_fit_row_touches_keeps_its_prior():
    # without the only MI300X source, nothing sets MI300X's constants: the refit leaves them at the priors
    without = tuple(s for s in fit.fit_sources() if s != "dstack-mi300x")
    assert "bw:cdna3" not in fit.free_constants(without) and "gemm:cdna3" not in fit.fit_constants(without)
    assert "launch" not in fit.free_constants(("nim",))


def test_moving_a_source_from_fit_to_held_out_changes_the_held_out_figures():
    base = fit.split_report(fit.fit_sources())
    moved = fit.split_report(tuple(s for s in fit.fit_sources() if s != "lmdeploy-a100"))
    assert moved["sources"] == base["sources"] + 1 and moved["points"] > base["points"]
    assert (moved["within_25pct"], moved["within_1.5x"]) != (base["within_25pct"], base["within_1.5x"])


def test_leave_one_source_out_scores_each_fit_source_by_a_fit_without_it():
    loso, used = fit.loso_estimates()
    frozen = fit.estimates(fit.frozen())
    d = fit.decompose()
    for k in fit.fit_sources():
        assert used[k] == fit.fit_constants(tuple(s for s in fit.fit_sources() if s != k))
        mine = d.source == k
        assert loso[mine] == pytest.approx(fit.estimates(used[k])[mine])
    # a source not fitted on but run on a fit source's engine and machines (gpt-fast's quantized rows) is scored by
    # the fit without that source; every other source not fitted on, by the frozen fit
    assert setup_of("gpt-fast-quant") == "gpt-fast"
    twin = d.source == "gpt-fast-quant"
    assert used["gpt-fast-quant"] == used["gpt-fast"] and loso[twin] == pytest.approx(fit.estimates(used["gpt-fast"])[twin])
    assert not np.allclose(loso[twin], frozen[twin])
    held = ~np.isin(d.source, fit.fit_sources()) & ~twin
    assert loso[held] == pytest.approx(frozen[held])


def test_validate_json_reports_the_fit_and_the_bands_coverage_beside_its_claim(capsys):
    import json

    assert main(["validate", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)["fit"]
    assert rep["fit_sources"] == list(fit.fit_sources()) and set(rep["held_out_sources"]).isdisjoint(rep["fit_sources"])
    for key in ("band_calibration", "band_coverage_held_out"):
        for level in rep[key].values():
            assert set(level) == {"claimed", "held", "sources", "points"}
    assert rep["leave_one_source_out"]["points"] == len(validate.rows())


def test_no_band_rests_on_fewer_than_three_sources_or_hides_a_borrowed_family():
    for gpu in GPUS:
        for metric in validate.METRICS:
            for batch in (1, 8):
                for engine in cost.ENGINES:
                    b = fit.band(metric, batch, engine, gpu)
                    sentence = fit.band_sentence(metric, engine, gpu, batch)
                    if b is None:
                        assert sentence.startswith("no error band")
                        continue
                    assert len(b.sources) >= fit.MIN_BAND_SOURCES
                    n = int(re.search(r"from (\d+) sources", sentence).group(1))
                    assert n == len(b.sources) >= 3
                    if b.families != (cost.gpu_family(GPUS[gpu]),):
                        assert "pooled over GPU families" in sentence


def test_the_h100_batch_1_band_no_longer_rests_on_one_mi300x_source():
    b = fit.band("tpot_ms", 1, "graphs", "H100-SXM")
    assert b is not None and len(b.sources) >= 3 and b.sources != ("dstack-mi300x",)


def test_an_unknown_engine_is_priced_without_host_costs_and_with_the_widest_band():
    dep = cost.estimate_deployment(cost.Deployment.of("llama3-8b", "H100"), cost.Estimate(engine="unknown"))
    assert cost.host_s(dep) == 0 and cost.step_overhead_s(dep) == 0
    for metric in validate.METRICS:
        got = fit.band(metric, 1, "unknown", "H100-SXM")
        known = [b for e in ("graphs", "eager") if (b := fit.band(metric, 1, e, "H100-SXM")) is not None]
        if got is None:
            assert not known
            continue
        assert got.low <= min(b.low for b in known) and got.high >= max(b.high for b in known)


def test_deploy_estimate_on_every_registry_gpu_and_format_prints_a_band_or_says_why_not(capsys):
    for gpu in GPUS:
        for fmt in WEIGHT_FORMATS:
            code = main(["deploy", "--model", "llama3.2-1b", "--gpu", gpu, "--context", "512", "--batch", "1",
                         "--weights", fmt, "--mode", "estimate"])
            out, err = capsys.readouterr()
            if code != 0:  # a format the chip cannot run: one line saying so
                assert err.strip() and "\n" not in err.strip() and "Traceback" not in err, (gpu, fmt, err)
                continue
            for label in ("TPOT", "TTFT"):
                line = [x for x in out.splitlines() if x.strip().startswith(label)][-1]  # the band's line comes last
                assert "is expected at" in line or "no error band" in line, (gpu, fmt, line)


def test_the_engine_profiles_cite_their_counts_and_a_fixed_step_adds_to_every_step():
    assert cost.ENGINES["eager"].kernels_per_layer == 42 and cost.ENGINES["fused-eager"].kernels_per_layer == 12
    sync, graphs = cost.ENGINES["vllm-sync"], cost.ENGINES["python-graphs"]
    assert sync.step_s == pytest.approx(graphs.step_s + 4e-3)  # vllm-project/vllm#6854's ~4 ms bubble
    base = cost.Deployment.of("llama3-8b", "H100")
    a, b = (cost.estimate_deployment(base, cost.Estimate(engine=e)) for e in ("python-graphs", "vllm-sync"))
    assert float(cost.decode_step(b, 1, 512).time_s) - float(cost.decode_step(a, 1, 512).time_s) == pytest.approx(4e-3)
    assert float(cost.ttft_s(b, 128)) - float(cost.ttft_s(a, 128)) == pytest.approx(4e-3)


def test_validate_flags_a_row_below_the_floor_with_its_reason():
    row = validate.Row("made-up", "tpot_ms", 1.0, 2.0, 3.0, "nim", "H100-SXM")
    (flag,) = validate.below_floor([row, validate.Row("ok", "tpot_ms", 5.0, 2.0, 3.0, "nim")])
    assert flag["id"] == "made-up" and flag["floor_ratio"] == 2.0 and "below the floor" in flag["reason"]
    assert validate.below_floor() == []  # no published row is below the physics today


# ------------------------------------------------------------------------------------ issue 47's targets
# Out of sample (leave-one-source-out over all sources, and the held-out sources under the frozen fit). Those met are
# plain tests; those not met are strict xfails naming what would meet them.
@functools.lru_cache(maxsize=1)
def _rep():
    return fit.fit_report()


def test_leave_one_source_out_within_25_percent_on_45_percent_of_points():
    assert _rep()["leave_one_source_out"]["within_25pct"] >= 0.45


def test_leave_one_source_out_within_x1_5_on_70_percent_and_60_percent_source_balanced():
    got = _rep()["leave_one_source_out"]
    assert got["within_1.5x"] >= 0.70 and got["balanced_within_1.5x"] >= 0.60


def test_held_out_within_25_percent_on_45_percent_of_points():
    assert _rep()["held_out"]["within_25pct"] >= 0.45


def test_lever_ratios_out_of_sample_within_25_percent_on_65_percent_source_balanced():
    assert _rep()["lever_ratios_leave_one_source_out"]["source_balanced"] >= 0.65


@pytest.mark.xfail(strict=True, reason="held out within x1.5 on 65% of 124 points, 64% source-balanced over 9 "
                   "sources (targets 70% and 60%: the source-balanced one met, the pooled one not; 63% of 112 points "
                   "and 54% before issue 47 added TensorRT-LLM's two H200 blog posts, 7 and 3 rows, 86% and 67% of "
                   "them within x1.5, and MLC LLM's two RTX 4090 rows, both within x1.5; gpt-fast's int8 and int4 "
                   "rows are not held out, having been measured on a fit source's machines): TinyChat's fused "
                   "engine's TTFTs are estimated at a median 0.56 of their measured times "
                   "(41% of its rows within x1.5: its prefill is slower than the fitted launch cost x 12 kernels and "
                   "the W4A16 GEMM roofline allow), and Qwen's speed benchmark, added after the fit, misses on every "
                   "row (Hugging Face transformers and vLLM 0.6.3 at batch 1 both at 0.38: the launch cost fitted on "
                   "TinyChat's baseline and the step time fitted on gpt-fast and vLLM on MI300X do not carry to their "
                   "host). What would meet it: a launch cost and a vLLM-0.6 step time fitted on several engines' "
                   "hosts, and a profiler trace of TinyChat's prefill. A refit with Qwen's two sources joining "
                   "(fit.split_report) would not meet it either: 69% of 116 points, 64% source-balanced on the seven "
                   "sources left held out; and it would move the two sources the fit misses out of the held-out set, "
                   "a choice made by looking at held-out scores")
def test_held_out_within_x1_5_on_70_percent_and_60_percent_source_balanced():
    got = _rep()["held_out"]
    assert got["within_1.5x"] >= 0.70 and got["balanced_within_1.5x"] >= 0.60


def test_the_80_percent_band_covers_70_to_90_percent_of_unseen_sources():
    """Judged by nested leave-one-source-out: each source scored by bands built as if it had never been published
    (before the between-sources rule: 57% with the fit's leave-one-source-out ratios, 68% nested)."""
    got = _rep()["band_calibration"]["0.80"]
    assert 0.70 <= got["held"] <= 0.90 and len(got["sources"]) >= 5


@pytest.mark.xfail(strict=True, reason="on the held-out sources, with bands from the fit sources alone, the 80% band "
                   "holds 100% of 27 points from 3 sources (TensorRT-LLM's TTFTs in two sources, MLC LLM's two "
                   "batch-1 TPOTs; no other held-out source shares a regime with three fit sources: the two H200 "
                   "posts added for issue 47 are batched throughputs, a regime with two fit sources, FasterTransformer "
                   "and LMDeploy, and gpt-fast's int8 and int4 rows count as gpt-fast itself, leaving two other fit "
                   "sources at batch-1 TPOT): target 70-90%. It covers more than it claims, not "
                   "less: the three fit sources with batch-1 TTFTs (MI300X, LMDeploy, NIM) disagree by up to 7x, so "
                   "their band is wide. What would meet it: more held-out sources in regimes the fit sources cover, "
                   "or more fit sources per regime")
def test_the_80_percent_band_covers_70_to_90_percent_of_the_held_out_sources():
    assert 0.70 <= _rep()["band_coverage_held_out"]["0.80"]["held"] <= 0.90


def test_student_t_quantiles_match_the_tables():
    for p, dof, tabled in ((0.9, 2, 1.885618), (0.95, 4, 2.131847), (0.975, 10, 2.228139), (0.975, 1, 12.706205),
                           (0.9, 30, 1.310415)):
        assert fit.student_t_quantile(p, dof) == pytest.approx(tabled, abs=1e-5)
    with pytest.raises(ValueError, match="degree"):
        fit.student_t_quantile(0.9, 0)


def test_the_band_widens_with_the_spread_between_sources():
    sources = np.repeat(np.array(["a", "b", "c"]), 5)
    within = np.tile(np.exp(np.linspace(-0.1, 0.1, 5)), 3)
    agree = fit.between_sources_band(within, sources, 0.8)
    apart = fit.between_sources_band(within * np.repeat(np.exp([-0.5, 0.0, 0.5]), 5), sources, 0.8)
    assert apart[1] / apart[0] > 5 * agree[1] / agree[0]
    assert fit.between_sources_band(within[:10], sources[:10], 0.8) is None  # two sources: no band


def test_a_new_source_drawn_like_the_others_is_covered_at_the_claimed_rate():
    """Monte Carlo under the rule's own model (offsets and scatter normal in the log, four sources known): the
    between-sources band holds a new source's rows at about the claimed rate; the pooled rows' quantiles (the rule
    before) hold far fewer. A rule that ignored the spread between sources, or the few sources, fails this."""
    rng = np.random.default_rng(47)
    sources = np.repeat(np.array(["a", "b", "c", "d"]), 8)
    held = {rule: [] for rule in fit.BAND_RULES}
    for _ in range(1500):
        ratios = np.exp(np.repeat(rng.normal(0, 0.4, 4), 8) + rng.normal(0, 0.1, 32))
        new = np.exp(rng.normal(0, 0.4) + rng.normal(0, 0.1, 8))
        for rule, make in fit.BAND_RULES.items():
            lo, hi = make(ratios, sources, 0.8)
            held[rule].append(np.mean((new >= lo) & (new <= hi)))
    assert 0.75 <= np.mean(held["between sources"]) <= 0.85
    assert np.mean(held["rows"]) < 0.7


def test_nested_calibration_builds_each_band_as_if_its_source_were_never_published():
    d = fit.decompose()
    own = d.measured / fit.loso_estimates()[0]
    left = "lmdeploy-a100"
    got = fit.ratios_without(left)
    assert got[d.source == left] == pytest.approx(own[d.source == left])
    other = d.source == "nim"  # another fit source: a refit without both
    both = fit.estimates(fit.fit_constants(tuple(s for s in fit.fit_sources() if s not in (left, "nim"))))
    assert got[other] == pytest.approx(d.measured[other] / both[other])
    assert not np.allclose(got[other], own[other])
    assert fit.ratios_without("vllm-ci") == pytest.approx(own)  # a held-out source: no fit saw it


def test_the_calibration_reports_every_rule_compared():
    rep = _rep()
    assert rep["band_rule"] == fit.BAND_RULE and set(rep["band_rules_compared"]) == set(fit.BAND_RULES)
    assert rep["band_rules_compared"][fit.BAND_RULE]["calibration"] == rep["band_calibration"]


def test_no_band_edge_in_ms_prints_below_the_floor(capsys):
    from stage5.cli import diagnose_deployment
    from stage5.quantization import deployment

    for gpu in ("H100-SXM", "A100-80GB", "RTX-4090", "MI300X"):
        dep = cost.with_mode(deployment("llama3.2-1b", gpu), "estimate")
        est = diagnose_deployment(dep, 512, 1)
        low = diagnose_deployment(cost.floor_deployment(dep), 512, 1)
        for metric in ("tpot_ms", "ttft_ms"):
            b = fit.band(metric, 1, dep.estimate.engine, gpu)
            if b is None:
                continue
            lo, hi = fit.band_ms(b, est[metric], low[metric])
            assert lo >= low[metric] and hi > lo and est[metric] >= low[metric]
            assert f"for this estimate {lo:.2f}-{hi:.2f} ms" in fit.band_sentence(
                metric, dep.estimate.engine, gpu, 1, est[metric], low[metric])
            main(["deploy", "--model", "llama3.2-1b", "--gpu", gpu, "--context", "512", "--batch", "1",
                  "--mode", "estimate"])
            assert f"for this estimate {lo:.2f}-{hi:.2f} ms" in capsys.readouterr().out
    b = fit.band("ttft_ms", 1, "graphs", "H100-SXM")
    assert fit.band_ms(b, 10.0, 9.0)[0] == 9.0 and fit.band_ms(b, 10.0, 0.1)[0] == pytest.approx(10 * b.low)
    assert "raised to the floor" in fit.band_sentence("ttft_ms", "graphs", "H100-SXM", 1, 10.0, 9.0)
    with pytest.raises(ValueError, match="positive finite"):
        fit.band_ms(b, float("nan"))


def test_deploy_engine_flag_is_checked_at_the_door(capsys):
    args = ["deploy", "--model", "llama3-8b", "--gpu", "H100", "--context", "2048", "--batch", "1"]
    assert main([*args, "--mode", "estimate", "--engine", "jit"]) == 2
    err = capsys.readouterr().err.strip()
    assert "jit" in err and "\n" not in err and "Traceback" not in err
    assert main([*args, "--engine", "eager"]) == 2  # the simple estimate charges no engine costs
    assert "--engine only with --mode estimate" in capsys.readouterr().err
    assert main([*args, "--mode", "estimate", "--engine", "unknown"]) == 0
    out = capsys.readouterr().out
    assert "the unknown engine profile" in out and fit.band_sentence("tpot_ms", "unknown", "H100-SXM", 1) in out


def test_a_hypothetical_variant_of_a_chip_keeps_its_family_and_fitted_efficiencies():
    from stage5.expert_parallel import hypothetical_domain

    wide = hypothetical_domain("H100-SXM", 16)
    h100 = cost.get_gpu("H100-SXM")
    assert cost.gpu_family(wide) == cost.gpu_family(h100) == "hopper"
    assert cost.fitted_allreduce_scale(wide) == cost.fitted_allreduce_scale(h100)
    assert cost.gpu_family(cost.get_gpu("B200")) == "blackwell" and "blackwell" not in fitted.BANDWIDTH_FRACTION


def test_the_simulator_s_band_in_ms_never_reaches_below_its_floor():
    from dataclasses import replace

    from stage5.simulator import SimInputs, simulate, to_html

    for x in (SimInputs(mode="estimate"), SimInputs(mode="estimate", concurrency=1, prompt=64)):
        out, floor = simulate(x), simulate(replace(x, mode="floor"))
        got = re.findall(r"(TPOT|TTFT) error band</td><td>[^<]*for this estimate ([\d.]+)-([\d.]+) ms", to_html(out, x))
        assert got  # at least the TTFT has a band
        for label, lo, hi in got:
            edge = {"TPOT": floor.tpot_ms, "TTFT": floor.ttft_ms}[label]
            assert float(lo) >= round(edge, 2) and float(hi) > float(lo), (label, lo, edge)


def test_sources_of_one_setup_count_once_in_every_band():
    """gpt-fast's int8/int4 rows ran on the fit source gpt-fast's engine and machines: a band counts the two as one
    source (else one lab's two tables would narrow it as two independent sources would), and a band built for
    either leaves both out."""
    for k, s in SOURCES.items():
        assert not s.same_setup_as or (s.same_setup_as in SOURCES and s.same_setup_as != k
                                       and not SOURCES[s.same_setup_as].same_setup_as), k
    b = fit.band("tpot_ms", 1, "graphs", "A100-80GB")
    assert "gpt-fast+gpt-fast-quant" in b.sources and "gpt-fast" not in b.sources
    d = fit.decompose()
    ratio = d.measured / fit.loso_estimates()[0]
    keys = set(d.source[fit._band_rows(d, ratio, "tpot_ms", "batch 1", "graphs")])
    assert len(b.sources) == len(keys) - 1  # the two gpt-fast tables, one source
    assert f"from {len(keys) - 1} sources" in fit.band_sentence("tpot_ms", "graphs", "A100-80GB", 1)
    for left in ("gpt-fast", "gpt-fast-quant"):
        rows = fit._band_rows(d, ratio, "tpot_ms", "batch 1", "graphs", exclude=left)
        assert not np.isin(d.source[rows], ["gpt-fast", "gpt-fast-quant"]).any() and rows.any()
    # counted as two sources, the same rows would give a narrower band
    sel = fit._band_rows(d, ratio, "tpot_ms", "batch 1", "graphs")
    apart = fit.between_sources_band(ratio[sel], d.source[sel], 0.8)
    assert (b.low, b.high) == pytest.approx(fit.between_sources_band(ratio[sel], d.setup[sel], 0.8))
    assert apart[1] / apart[0] < b.high / b.low


def test_a_band_for_a_source_is_built_as_if_its_whole_setup_were_never_published():
    """Nested calibration leaves out the source's setup: gpt-fast's quantized table is judged by ratios from fits
    that saw neither of gpt-fast's tables, the same ratios as for gpt-fast itself."""
    d = fit.decompose()
    assert fit.ratios_without("gpt-fast-quant") == pytest.approx(fit.ratios_without("gpt-fast"))
    other = d.source == "nim"
    without = fit.estimates(fit.fit_constants(tuple(s for s in fit.fit_sources() if s not in ("gpt-fast", "nim"))))
    assert fit.ratios_without("gpt-fast-quant")[other] == pytest.approx(d.measured[other] / without[other])
