"""Estimate mode, the published serving points and `python -m stage5 validate`."""

import itertools
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from stage5 import cost, validate
from stage5.__main__ import main
from stage5.hardware import GPUS
from stage5.published import (
    NIM_KV_EVIDENCE,
    SERVING_POINTS,
    SOURCES,
    TRTLLM_H200_KV_EVIDENCE,
    seen_by_fit,
    setup_of,
)
from stage5.quantization import deployment, weight_format


def test_validate_json_has_exactly_the_issue_shape(capsys):
    assert main(["validate", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"points", "estimate_within_25pct", "floor_is_lower_bound", "shares", "sources",
                           "set_aside_queued", "not_priced", "static_batches_memory_model_rejects",
                           "chosen_after_looking", "fresh_sources", "ratios", "below_floor", "fit"}
    keys = {"id", "metric", "measured", "floor", "estimate", "floor_ratio", "estimate_ratio", "source", "gpu"}
    assert report["points"] and all(set(p) == keys for p in report["points"])
    for p in report["points"]:
        assert p["floor_ratio"] == pytest.approx(p["floor"] / p["measured"])
    shares = report["shares"]
    assert set(shares) == {"by_source", "by_metric", "by_gpu", "source_balanced", "in_sample", "held_out", "fresh"}
    assert set(shares["by_source"]) == set(SOURCES) == set(report["sources"])
    assert set(shares["by_metric"]) == {"TPOT/ITL", "TTFT", "throughput"}
    assert all(set(s) >= {"address", "version", "setup", "in_sample", "split", "fresh", "profile"}
               for s in report["sources"].values())
    # floor, absolute and ratio shares per source, per regime, in and out of sample (issue 39's acceptance)
    for split in ("in_sample", "held_out", "fresh"):
        assert set(shares[split]["by_metric"]) <= {"TPOT/ITL", "TTFT", "throughput"} and shares[split]["by_metric"]
        assert set(report["ratios"][split]) >= {"pairs", "within_25pct", "source_balanced", "by_lever", "by_source"}
    assert all("by_metric" in v and "floor_is_lower_bound" in v for v in shares["by_source"].values())
    assert report["fresh_sources"] == sorted(k for k, s in report["sources"].items() if s["fresh"])
    assert report["below_floor"] == [] and set(report["fit"]) >= {"bands", "band_calibration", "held_out"}


def test_shares_are_recomputed_from_the_rows():
    table = validate.rows()
    sh = validate.shares(table)
    for key, group in sh["by_source"].items():
        mine = [r for r in table if r.source == key]
        assert group["points"] == len(mine)
        assert group["within_25pct"] == pytest.approx(np.mean([0.8 <= r.estimate / r.measured <= 1.25 for r in mine]))
        assert group["within_1.5x"] == pytest.approx(np.mean([1 / 1.5 <= r.estimate / r.measured <= 1.5 for r in mine]))
    balanced = np.mean([g["within_25pct"] for g in sh["by_source"].values()])
    assert sh["source_balanced"]["within_25pct"] == pytest.approx(balanced)
    # fitted on, held out, or neither: not fitted on but measured on a fitted source's machines (not held out either)
    beside = {k for k, s in SOURCES.items() if not s.in_sample and seen_by_fit(k)}
    assert beside == {"gpt-fast-quant"}
    assert set(sh["in_sample"]["sources"]) | set(sh["held_out"]["sources"]) == set(SOURCES) - beside
    assert not set(sh["in_sample"]["sources"]) & set(sh["held_out"]["sources"])


def test_four_or_more_independent_sources_beyond_nim_on_h100():
    used = {(p.source_key, p.gpu) for p in SERVING_POINTS if not validate.queued(p)}
    others = {s for s, g in used if s != "nim"}
    assert len(others) >= 4
    assert any(g.startswith("A100") for _, g in used) and any(g == "MI300X" for _, g in used)
    held_out = [k for k, s in SOURCES.items() if not s.in_sample]
    assert len(held_out) >= 4 and {"trtllm-0.6", "vllm-ci", "tinychat", "tinychat-trtllm"} <= set(held_out)
    # FasterTransformer's rows led to the server_nics correction, so they are in sample
    assert SOURCES["ft-530b"].in_sample and "server_nics" in cost.TERMS
    assert all(k in others for k in held_out), "every held-out source keeps rows after the queueing rule"


def test_terms_chosen_after_looking_make_their_sources_in_sample_and_report_the_shares_without():
    report = validate.summary()
    got = report["chosen_after_looking"]
    assert set(got) == set(validate.CHOSEN_AFTER_LOOKING) and set(got) <= set(cost.TERMS)
    for term, entry in got.items():
        assert entry["looked_at"] == list(validate.CHOSEN_AFTER_LOOKING[term])
        assert all(SOURCES[k].in_sample for k in entry["looked_at"])
        assert set(entry["looked_at_without"]) == set(entry["looked_at"])
        # the term moved the shares it was chosen on: without it its sources score differently
        for k in entry["looked_at"]:
            assert entry["looked_at_without"][k] != report["shares"]["by_source"][k]
    # the network correction: FasterTransformer within x1.5 on three points in four with it, about half without
    ft_with = report["shares"]["by_source"]["ft-530b"]["within_1.5x"]
    ft_without = got["server_nics"]["looked_at_without"]["ft-530b"]["within_1.5x"]
    assert ft_with >= 0.75 > 0.6 > ft_without


def test_floor_is_at_or_below_every_published_latency():
    rows = validate.rows()
    assert all(r.floor <= r.measured for r in rows), [r.id for r in rows if r.floor > r.measured]
    assert validate.summary()["floor_is_lower_bound"] is True


# Issue 39's targets, on the sources added after the constants were fixed (validate.FRESH_AFTER: TinyChat's README, its
# FP16 baseline and its TensorRT-LLM comparison), source-balanced. The floor's holds; the estimate's are not met. Each
# marker is strict, so the test fails (and the marker must go) the day the estimate reaches its target.
def test_the_floor_is_at_or_below_every_point_of_every_source_fresh_ones_included():
    sh = validate.summary()["shares"]
    assert all(s["floor_is_lower_bound"] for s in sh["by_source"].values())
    assert sh["fresh"]["sources"] == ["gpt-fast-quant", "mlc-llm", "qwen-hf", "qwen-vllm", "tinychat",
                                    "tinychat-fp16", "tinychat-trtllm", "trtllm-h200-0.5", "trtllm-h200-0.7a"]


# Issue 39's targets on the fresh sources (lever ratios 80%, TPOT and TTFT within x1.5 on 90% and 70%) were superseded
# by issue 47's, judged out of sample on the split (tests/test_fit.py); one fresh source, TinyChat's FP16 baseline, is
# now fitted on (the only unfused eager engine: it sets the launch cost).
def test_the_fresh_sources_were_added_after_the_constants_and_set_nothing():
    fresh = {k for k, s in SOURCES.items() if s.added_in >= validate.FRESH_AFTER}
    assert fresh == {"tinychat", "tinychat-fp16", "tinychat-trtllm", "qwen-hf", "qwen-vllm", "trtllm-h200-0.5",
                     "trtllm-h200-0.7a", "gpt-fast-quant", "mlc-llm"}
    assert [k for k in fresh if SOURCES[k].in_sample] == ["tinychat-fp16"]  # fitted on since issue 47
    assert not any(k in looked for looked in validate.CHOSEN_AFTER_LOOKING.values() for k in fresh)


def _point(pid, **kw):
    base = dict(id=pid, model="llama3-8b", gpu="H100-SXM", num_gpus=1, weights="bf16", kv="bf16", concurrency=1,
                prompt=128, output=128, tpot_ms=10.0, ttft_ms=None, source="hand-made", source_key="nim")
    return replace(SERVING_POINTS[0], **{**base, **kw})


def test_lever_ratios_pair_points_that_differ_in_exactly_one_lever():
    pts = {p.id: p for p in (
        _point("a"), _point("b", concurrency=8), _point("c", concurrency=8, weights="fp8"),
        _point("d", prompt=1024, output=64), _point("e", variant="legacy", concurrency=8))}
    # measured and estimated TPOT, hand-set: a -> b doubles measured, the estimate says x2.2 (within 25%)
    table = [validate.Row("a", "tpot_ms", 10.0, 1.0, 8.0, "nim"), validate.Row("b", "tpot_ms", 20.0, 1.0, 17.6, "nim"),
             validate.Row("c", "tpot_ms", 12.0, 1.0, 16.0, "nim"), validate.Row("d", "tpot_ms", 11.0, 1.0, 8.8, "nim"),
             validate.Row("e", "tpot_ms", 30.0, 1.0, 9.0, "nim")]
    got = {(p.a, p.b): p for p in validate.pairs(table, pts)}
    # a-b batch, b-c format, a-d lengths; a-c two levers, b-d and c-d two or more; e is another release: never paired
    assert set(got) == {("a", "b"), ("b", "c"), ("a", "d")}
    assert {k: p.lever for k, p in got.items()} == {("a", "b"): "batch", ("b", "c"): "format", ("a", "d"): "lengths"}
    ab = got[("a", "b")]
    assert (ab.measured, ab.estimate) == pytest.approx((0.5, 8.0 / 17.6)) and validate.in_band(ab.error)
    bc = got[("b", "c")]
    assert bc.error == pytest.approx((17.6 / 16.0) / (20.0 / 12.0)) and not validate.in_band(bc.error)
    # a metric is never paired with another
    assert validate.pairs([table[0], replace(table[1], metric="ttft_ms")], pts) == []


def test_ratio_shares_are_recomputed_from_the_pairs():
    table = validate.rows()
    every = validate.pairs(table)
    got = validate.ratio_shares(table)
    assert got["pairs"] == len(every)
    assert got["within_25pct"] == pytest.approx(np.mean([0.8 <= p.error <= 1.25 for p in every]))
    per_source = {k: np.mean([0.8 <= p.error <= 1.25 for p in every if p.source == k]) for k in {p.source for p in every}}
    assert got["source_balanced"] == pytest.approx(np.mean(list(per_source.values())))
    assert sum(v["pairs"] for v in got["by_lever"].values()) == len(every)
    assert got["fresh"]["pairs"] == sum(validate.is_fresh(p.source) for p in every)


def test_an_estimate_is_printed_with_its_error_band(capsys):
    from stage5 import fit

    band = fit.band("ttft_ms", 1, "graphs", "H100-SXM")
    sentence = fit.band_sentence("ttft_ms", "graphs", "H100-SXM", 1)
    assert f"{band.low:.2f}-{band.high:.2f}x" in sentence and "on 80% of" in sentence
    args = ["deploy", "--model", "llama3-8b", "--gpu", "H100", "--context", "2048", "--batch", "8"]
    assert main([*args, "--mode", "estimate"]) == 0
    out = capsys.readouterr().out
    assert sentence in out and fit.band_sentence("tpot_ms", "graphs", "H100-SXM", 8) in out
    assert "matmuls at bf16/fp32" in out
    assert main([*args, "--mode", "simple"]) == 0
    assert "such estimates" not in capsys.readouterr().out  # only the estimate has a validated band
    from stage5.simulator import SimInputs, simulate, to_html
    x = SimInputs(mode="estimate")
    assert sentence.replace("'", "&#x27;") in to_html(simulate(x), x)
    assert "such estimates" not in to_html(simulate(SimInputs()), SimInputs())


def test_recorded_shares_do_not_fall():
    """A ratchet under the unmet targets: the source-balanced shares recorded after the network correction
    (59.0% within 25%, 74.7% within x1.5). They were 57% and 68% with three held-out sources, 58% and 70% with
    LMDeploy's, and 54% and 67% with FasterTransformer's rows past one server, when the all-reduce across servers
    went through one NIC per ring. Then the ring was given every NIC of a server (Estimate.server_nics; 55% and 69%
    with it switched off, the rest being TensorRT-LLM's A100 table read per GPU as the page's later revision heads
    it). A change that lowers them must say why. Issue 39 replaced the one MFU of 0.40 for every chip (Llama 3 training's)
    by each chip's measured GEMM efficiency (cost.gemm_efficiency, 0.71 on an A100, 0.66 on an H100): the held-out
    sources rose from 51% and 62% to 59% and 68%, the in-sample ones fell from 70% and 92% to 60% and 84%, because
    FasterTransformer's static batches on A100s now come out too fast (94% within x1.5 before, 76% now); so 59.5% and
    74.6%. Then issue 39 added three fresh sources, TinyChat's README (its W4A16 engine, its FP16 baseline and its
    TensorRT-LLM comparison, all on one RTX 4090 or A100), on which the estimate scores 18% and 48%: over the ten
    sources, 46.9% and 66.7%."""
    balanced = validate.summary()["shares"]["source_balanced"]
    assert balanced["within_25pct"] >= 0.469 and balanced["within_1.5x"] >= 0.667, balanced


def test_published_points_span_gpus_prompts_and_concurrency_and_cite_a_table():
    used = [p for p in SERVING_POINTS if not validate.queued(p)]
    assert len(used) >= 10
    assert {1, 8} <= {p.num_gpus for p in used}
    assert min(p.prompt for p in used) <= 16 and max(p.prompt for p in used) >= 4096
    assert sum(p.concurrency >= 100 for p in used) >= 10, "the issue asks for points at batch 100 and beyond"
    assert all("table" in p.source and any((getattr(p, m) or 0) > 0 for m in validate.METRICS) for p in SERVING_POINTS)
    assert len({p.id for p in SERVING_POINTS}) == len(SERVING_POINTS)


def _nim(model: str, prompt: int, output: int, concurrency: int):
    (point,) = [p for p in SERVING_POINTS if p.id.startswith(f"nim-{model}-") and p.id.endswith(
        f"-p{prompt}-o{output}-c{concurrency}")]
    return point


def test_queued_rows_are_the_ones_whose_requests_do_not_fit_and_their_ttft_shows_it():
    excluded = validate.excluded()
    assert excluded and all(validate.queued(p) for p in excluded)
    assert {r.id for r in validate.rows()}.isdisjoint(p.id for p in excluded)
    assert validate.queued(_nim("llama3.3-70b", 5000, 500, 100)) and not validate.queued(_nim("llama3.3-70b", 5000, 500, 50))
    # the rule uses memory and the engine's cap on running requests only; the published TTFT agrees: every
    # set-aside row waited far longer than a lone request of its table
    for p in excluded:
        (alone,) = [q for q in SERVING_POINTS if q.source_key == p.source_key and q.model == p.model
                    and q.num_gpus == p.num_gpus and q.prompt == p.prompt and q.concurrency == 1
                    and (q.output == p.output or p.source_key == "dstack-mi300x")]
        assert p.published_ttft_ms > 3 * alone.ttft_ms, p.id
    # vLLM runs at most 256 requests (max_num_seqs); the dstack rows past it are set aside, the 256 row is not
    dstack = {p.concurrency: p for p in SERVING_POINTS if p.source_key == "dstack-mi300x"}
    assert validate.queued(dstack[512]) and not validate.queued(dstack[256])


def _lmdeploy(model: str, batch: int, prompt: int, output: int):
    (point,) = [p for p in SERVING_POINTS if p.id.startswith(f"lmdeploy-{model}-") and p.id.endswith(
        f"-b{batch}-p{prompt}-o{output}")]
    return point


def test_lmdeploy_rows_are_whole_tables_and_queue_by_the_engines_own_block_pool():
    rows = [p for p in SERVING_POINTS if p.source_key == "lmdeploy-a100"]
    # every row of the four tables: 4 models x batch 1/16/32/64 x five prompt/output pairs
    assert len(rows) == 80 and {(p.concurrency, p.prompt, p.output) for p in rows} == {
        (b, i, o) for b in (1, 16, 32, 64) for i, o in ((1, 128), (128, 128), (128, 2048), (2048, 128), (2048, 2048))}
    assert all(p.closed_loop and not p.static and p.kv_pool for p in rows)
    assert all((p.ttft_ms is not None) == (p.concurrency == 1) for p in rows)
    # 7B's pool is 1,000 blocks of 128 tokens: 32 x (2,048 + 128) needs 32 x 17 = 544 blocks, 64 x 17 = 1,088 do not fit
    point = _lmdeploy("llama2-7b", 32, 2048, 128)
    assert not validate.queued(point) and validate.queued(_lmdeploy("llama2-7b", 64, 2048, 128))
    # the pool, not the cost model's memory budget, decides, in whole blocks per sequence
    assert not validate.queued(replace(point, kv_pool=(544, 128))) and validate.queued(replace(point, kv_pool=(543, 128)))
    assert validate.queued(replace(point, kv_pool=(1000, 64)))  # 34 blocks of 64 each: 1,088
    # 32 x 4,096 tokens need 1,024 blocks: set aside, though only the last tokens of the answers overflow
    assert validate.queued(_lmdeploy("llama2-7b", 32, 2048, 2048))
    # the 70B's 4,000 blocks hold every row
    assert not any(validate.queued(p) for p in rows if p.model.name == "llama2-70b")
    # where the engine's pool overflowed far, the published first-token wait shows it (a minute and more)
    assert all(validate.queued(p) for p in rows if p.published_ttft_ms > 60_000)


@pytest.mark.parametrize("model,prompt,output,concurrency", NIM_KV_EVIDENCE)
def test_the_nim_tables_rule_out_a_bf16_kv_cache(model, prompt, output, concurrency):
    """published.NIM_KV is FP8 by inference: a BF16 cache could not hold these rows, which show no queueing."""
    p = _nim(model, prompt, output, concurrency)
    fits = {kv: int(cost.max_concurrency(deployment(p.model, p.gpu, p.num_gpus, p.weights, kv), prompt + output))
            for kv in ("bf16", "fp8")}
    assert fits["bf16"] < concurrency <= fits["fp8"]
    before = max((q for q in SERVING_POINTS if q.id.startswith(f"nim-{model}-") and q.prompt == prompt
                  and q.output == output and q.concurrency < concurrency), key=lambda q: q.concurrency)
    assert p.published_ttft_ms < 2 * before.published_ttft_ms, "TTFT jumps: requests queued"


@pytest.mark.parametrize("model,tp,prompt,output,batch", TRTLLM_H200_KV_EVIDENCE)
def test_the_h200_blog_tables_rule_out_a_bf16_kv_cache(model, tp, prompt, output, batch):
    """published.TRTLLM_H200_KV is FP8 by inference: a BF16 cache could not hold these static batches on an H200,
    an FP8 one can; and each is a published row."""
    assert any(p.source_key.startswith("trtllm-h200") and (p.model, p.num_gpus, p.prompt, p.output, p.concurrency)
               == (model, tp, prompt, output, batch) for p in SERVING_POINTS)
    fits = {kv: int(cost.max_concurrency(deployment(model, "H200", tp, "fp8", kv), prompt + output))
            for kv in ("bf16", "fp8")}
    assert fits["bf16"] < batch <= fits["fp8"]


def test_estimate_with_every_term_off_is_the_source_formula():
    """One set of formulas: the estimate with every term off but the additive attention and prefill attention terms
    (the simple estimate counts both; prefill's since issue 52) prices every point as the simple estimate does."""
    for p in SERVING_POINTS:
        dep = deployment(p.model, p.gpu, p.num_gpus, p.weights, p.kv)
        bare = cost.replace(dep, estimate=cost.Estimate.only("additive_attention", "prefill_attention", mfu=dep.mfu))
        assert float(cost.mixed_tpot_s(bare, p.concurrency, p.prompt, p.output)) == pytest.approx(
            float(cost.mixed_tpot_s(dep, p.concurrency, p.prompt, p.output)), rel=1e-12)
        assert float(cost.ttft_s(bare, p.prompt)) == pytest.approx(float(cost.ttft_s(dep, p.prompt)), rel=1e-12)


def test_the_floor_counts_prefill_attention_at_peak():
    dep = deployment("llama3-70b", "H100-SXM", 4)
    true = cost.floor_deployment(dep)
    # below the simple estimate (MFU 0.5) at a short prompt; at a long one the attention FLOPs take it past twice
    # the linear layers' time at peak
    assert float(cost.ttft_s(true, 1024)) < float(cost.ttft_s(dep, 1024))
    linear_only = 2 * dep.model.active_params * 131072 / (dep.gpu.flops() * dep.num_gpus)
    assert float(cost.ttft_s(true, 131072)) > 2 * linear_only


@pytest.mark.parametrize("term", cost.TERMS)
def test_each_term_switches_off_alone_and_matters_somewhere(term):
    on, off = cost.Estimate(), cost.Estimate().without(term)
    assert getattr(off, term) in (False, 1.0)
    changed = [p.id for p in SERVING_POINTS for m in validate.METRICS if getattr(p, m) is not None
               if validate.predict_ms(p, m, "estimate", on) != validate.predict_ms(p, m, "estimate", off)]
    assert changed, f"switching off {term} changed no prediction"


def test_unknown_terms_are_refused_with_the_list():
    with pytest.raises(ValueError, match="accepted"):
        cost.Estimate().without("kernel_magic")
    with pytest.raises(ValueError, match="fraction"):
        cost.Estimate(bandwidth_fraction=1.5)


def test_additive_attention_adds_kv_time_instead_of_overlapping_it():
    """The worked example at batch 400: KV + max(W, C) in the simple estimate (the additive term), max(W + KV, C)
    with it switched off, the source's form."""
    dep = deployment(cost.ANCHOR_MODEL, cost.ANCHOR_GPU, cost.ANCHOR_GPUS)
    source = cost.replace(dep, estimate=cost.Estimate.only(mfu=dep.mfu))
    b, s = 400, 1152
    w = dep.weight_total_bytes / dep.bandwidth
    kv = b * s * dep.kv_bytes_per_token / dep.bandwidth
    c = 2 * dep.model.active_params * b / dep.flops
    assert float(cost.tpot_s(source, b, s)) == pytest.approx(max(w + kv, c))
    assert float(cost.tpot_s(dep, b, s)) == pytest.approx(kv + max(w, c))
    assert float(cost.tpot_s(dep, b, s)) > float(cost.tpot_s(source, b, s))


def test_allreduce_costs_nothing_on_one_gpu_and_more_with_more_gpus():
    est = cost.Estimate.only("allreduce")
    one, two, eight = (deployment("llama3-8b", "H100-SXM", n, estimate=est) for n in (1, 2, 8))
    assert float(cost.allreduce_s(one, 1)) == 0
    assert 0 < float(cost.allreduce_s(two, 1)) < float(cost.allreduce_s(eight, 1))
    assert float(cost.allreduce_s(eight, 4096)) > float(cost.allreduce_s(eight, 1))  # the message grows


def test_every_gpu_has_an_interconnect_and_nvlink_is_faster_than_pcie():
    assert all(g.link_bandwidth > 0 and g.link_latency_s > 0 for g in GPUS.values())
    assert GPUS["H100-SXM"].link_bandwidth > GPUS["H100-PCIe"].link_bandwidth > GPUS["L40S"].link_bandwidth


def test_prefill_attention_flops_grow_with_the_square_of_the_prompt():
    m = deployment("llama3-70b", "H100-SXM", 1).model
    ratio = cost.attention_flops(m, 131072) / cost.attention_flops(m, 4096)
    assert ratio == pytest.approx(32**2, rel=0.01)
    # at 131K tokens attention outweighs the linear layers, so the floor's TTFT more than doubles with it
    assert float(cost.attention_flops(m, 131072)) > 2 * m.active_params * 131072


def test_mixed_step_is_plain_decode_alone_and_grows_with_other_prefills():
    dep = deployment("llama3-70b", "H100-SXM", 2, "fp8", estimate=cost.Estimate())
    plain = cost.replace(dep, estimate=cost.Estimate().without("mixed_step"))
    assert float(cost.mixed_tpot_s(dep, 1, 5000, 500)) == pytest.approx(float(cost.mixed_tpot_s(plain, 1, 5000, 500)))
    loaded = cost.mixed_tpot_s(dep, np.array([5, 25, 50]), 5000, 500)
    assert np.all(np.diff(loaded) > 0)
    assert float(cost.mixed_tpot_s(dep, 50, 5000, 500)) > float(cost.mixed_tpot_s(plain, 50, 5000, 500))
    # the token budget caps the chunk: a tiny budget leaves almost a plain step
    tight = cost.replace(dep, estimate=cost.replace(cost.Estimate(), step_token_budget=60))
    assert float(cost.mixed_tpot_s(tight, 50, 5000, 500)) < float(cost.mixed_tpot_s(dep, 50, 5000, 500))


def test_one_cost_per_token_formula():
    dep = deployment("llama3-8b", "H100-SXM", 1)
    terms = cost.cost_terms(dep, 32, 2048)
    assert float(cost.cost_per_million_tokens(dep, 32, 2048)) == pytest.approx(terms.dollars_per_million)


def test_simulator_switches_between_its_three_modes():
    from stage5.simulator import SimInputs, Simulator, simulate

    simple, est, floor = (simulate(SimInputs(mode=m)) for m in ("simple", "estimate", "floor"))
    assert SimInputs().mode == "simple"  # the default
    assert simple.ok and est.ok and floor.ok
    assert est.tpot_ms > simple.tpot_ms  # the estimate's terms only add time to a step
    # Its cost need not be higher: with prefill chunks riding in the decode steps (Estimate.mixed_step) a request's
    # prefill hides partly under the weight reads, where the simple estimate runs it as steps of its own. Each mode's
    # cost is its own throughput at the deployment's price.
    x = SimInputs()
    for out in (simple, est, floor):
        assert out.usd_per_million == pytest.approx(x.price_per_gpu_hour * x.num_gpus / 3600 * 1e6 / out.throughput)
    assert floor.tpot_ms <= simple.tpot_ms and floor.ttft_ms < simple.ttft_ms and floor.tpot_ms < est.tpot_ms
    bad = simulate(SimInputs(mode="optimistic"))
    assert not bad.ok and all(m in bad.error for m in ("simple", "floor", "estimate"))
    sim = Simulator()
    assert sim.set(mode="estimate").tpot_ms == pytest.approx(est.tpot_ms)


def test_levers_and_quantization_take_an_estimate():
    from stage5.levers import diagnose_reference, lever_ranking
    from stage5.quantization import end_to_end_gain

    est = cost.Estimate()
    assert lever_ranking(estimate=est) != lever_ranking()
    assert diagnose_reference("llama3-70b", "H100-SXM", 4, 1024, 256, 16, estimate=est).metric > \
        diagnose_reference("llama3-70b", "H100-SXM", 4, 1024, 256, 16).metric
    # fixed costs (the all-reduces) do not shrink with the bytes, so the estimate's FP8 gain is smaller
    assert float(end_to_end_gain("llama3-70b", "H100-SXM", 4, 1024, 256, 64, estimate=est)) < \
        float(end_to_end_gain("llama3-70b", "H100-SXM", 4, 1024, 256, 64))


def test_deploy_takes_a_mode(capsys):
    args = ["deploy", "--model", "llama3-70b", "--gpu", "H100", "--gpus", "4", "--context", "4096", "--batch", "125",
            "--json"]
    assert main(args) == 0
    simple = json.loads(capsys.readouterr().out)
    assert main([*args, "--mode", "estimate"]) == 0
    est = json.loads(capsys.readouterr().out)
    assert main([*args, "--mode", "floor"]) == 0
    floor = json.loads(capsys.readouterr().out)
    kv_ms = 1e3 * 125 * 4096 * cost.Deployment.of("llama3-70b", "H100", 4).kv_bytes_per_token / (4 * 3.35e12)
    assert simple["mode"] == "simple" and simple["added_ms"] == pytest.approx(kv_ms)  # attention's KV reads add
    assert est["mode"] == "estimate" and est["added_ms"] > 0 and est["tpot_ms"] > simple["tpot_ms"]
    # the floor is the physics at peak: at or below both estimates, and it prefills far faster than at 50% MFU
    assert floor["mode"] == "floor" and floor["tpot_ms"] <= simple["tpot_ms"] < est["tpot_ms"]
    assert floor["added_ms"] == 0  # the floor lets the KV reads overlap the weight reads
    assert floor["ttft_ms"] < simple["ttft_ms"] / 1.5


def test_deploy_says_which_mode_it_priced_and_refuses_an_mfu_the_mode_ignores(capsys):
    args = ["deploy", "--model", "llama3-70b", "--gpu", "H100", "--gpus", "4", "--context", "4096", "--batch", "125"]
    assert main(args) == 0
    assert "the simple estimate" in capsys.readouterr().out
    assert main([*args, "--mode", "floor"]) == 0
    assert "the floor: the physics at the datasheet's peak" in capsys.readouterr().out
    for mode in ("floor", "estimate"):
        assert main([*args, "--mode", mode, "--mfu", "0.5"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "--mfu only with --mode simple" in err and "Traceback" not in err
    assert main([*args, "--mfu", "0.25", "--json"]) == 0


def test_concurrency_bands_partition_the_points_and_agree_with_the_share():
    report = validate.summary()
    bands = validate.by_concurrency(report, {"alone": (1, 1), "more": (2, 10**9)})
    assert sum(n for n, _, _ in bands.values()) == len(report["points"])
    in_band = sum(n * pct / 100 for n, pct, _ in bands.values())
    assert in_band == pytest.approx(report["estimate_within_25pct"] * len(report["points"]))
    assert all(validate.WITHIN[0] / 4 < median < validate.WITHIN[1] * 4 for _, _, median in bands.values())


def test_past_one_nvlink_domain_the_floor_holds_and_the_estimate_is_within_x1_5_at_both_ends():
    """FasterTransformer's Megatron-530B table, tensor parallel over 16 and 32 A100s on two and four servers: the one
    published check of the model past one NVLink domain (chapter 11 states what it shows)."""
    from stage5.hardware import get_gpu
    from stage5.published import FT_530B, NOT_PRICED

    a100 = get_gpu("A100-80GB")
    rows = {r.id: r for r in validate.rows() if r.source == "ft-530b"}
    points = {p.id: p for p in SERVING_POINTS if p.source_key == "ft-530b"}
    # every measured cell of the TP 16 and TP 32 columns is a point; the OOM cells and the PP column are listed
    cells = [(b, tp) for t in FT_530B.values() for b, m16, m32, _ in t for tp, ms in ((16, m16), (32, m32))]
    oom = sum(ms is None for t in FT_530B.values() for _, m16, m32, _ in t for ms in (m16, m32))
    assert len(points) == len(rows) == len(cells) - oom and oom == 3
    listed = [row for key, row, _ in NOT_PRICED if key == "ft-530b"]
    assert len(listed) == 27 + oom and sum("PP 3" in r for r in listed) == 27
    # every point crosses servers, and its all-reduces at batch 256 take the ring across nodes
    assert all(p.num_gpus > a100.nvlink_domain for p in points.values())
    assert cost.allreduce_algorithm(a100, 16, 256 * 20 * 20480 * 2) == "ring across nodes"
    # the floor holds on every point; the estimate is within x1.5 on every batch-256 row (chapter 11 states it; a change
    # to the network term must update it and this test)
    assert all(r.floor <= r.measured for r in rows.values())
    alone = [r for i, r in rows.items() if points[i].concurrency == 1]
    biggest = [r for i, r in rows.items() if points[i].concurrency == 256]
    assert len(alone) == 6  # chapter 11 glues their range; since issue 47's fit, TP 32 at batch 1 sits below x1.5
    assert biggest and all(validate.in_wide_band(r.estimate_ratio) for r in biggest)
    # through one NIC per ring (the model before the correction) every batch-256 row is too slow by more than x1.5
    one_nic = {r.id: r for r in validate.rows(cost.Estimate().without("server_nics")) if r.source == "ft-530b"}
    assert all(one_nic[r.id].estimate_ratio > validate.WIDE[1] for r in biggest)
    # the all-reduce across servers is a real share of a batch-256 step: without it every such row is faster still
    off = cost.Estimate().without("allreduce")
    assert all(validate.predict_ms(points[r.id], "batch_ms", "estimate", off) < 0.9 * r.estimate for r in biggest)


# ---------------------------------------------------------------------------------- what fitting would buy
def _balanced(ratios, sources, band):
    """The source-balanced share of ``ratios`` in ``band``, written out independently of validate.shares."""
    keys = sorted(set(sources))
    return float(np.mean([np.mean([band[0] <= r <= band[1] for r, s in zip(ratios, sources, strict=True) if s == k])
                          for k in keys]))


def _steps(table):
    """Engine steps each row spans as the cost model prices it: a static batch's prefill and output - 1 decodes."""
    points = {p.id: p for p in SERVING_POINTS}
    return np.array([points[r.id].output if r.metric == "batch_ms" else 1 for r in table])


def test_a_fit_on_one_grid_point_is_the_estimate_there_with_its_time_per_step_added():
    table = validate.rows(cost.Estimate(bandwidth_fraction=0.6, prefill_mfu=0.4, decode_mfu=0.4), engine="graphs")
    sources = [r.source for r in table]
    for step_ms in (0.0, 1.0):
        (fit,) = validate.fitted_shares((0.6,), (0.4,), (step_ms,), (("one", "all", True),))
        ratios = [(r.estimate + step_ms * n) / r.measured for r, n in zip(table, _steps(table), strict=True)]
        tight, wide = _balanced(ratios, sources, validate.WITHIN), _balanced(ratios, sources, validate.WIDE)
        assert (fit.within_25pct, fit.within_wide) == pytest.approx((tight, wide))
        assert len(fit.frontier) == 1 and fit.frontier[0] == pytest.approx((tight, wide))
        assert fit.tight_constants == {"every row": ((0.6, 0.6), (0.4, 0.4), (step_ms, step_ms))}
        assert fit.tight_hits == {"every row": pytest.approx(tight)}
        assert fit.reaches(tight, wide) and not fit.reaches(tight + 0.01, 0) and not fit.reaches(0, wide + 0.01)
    # with no time per step: the shares of the report priced at those constants
    (fit,) = validate.fitted_shares((0.6,), (0.4,), (0.0,), (("one", "all", False),))
    assert fit.within_25pct == pytest.approx(validate.shares(table)["source_balanced"]["within_25pct"])


@pytest.mark.parametrize("group_by, step_time", [("gpu", True), ("source", False)])
def test_a_fit_agrees_with_trying_every_combination(group_by, step_time):
    """Brute force on a small grid: every choice of constants for every group, scored from the estimate's own rows
    (a fit without a time per step may only choose 0 ms)."""
    bandwidths, step_ms = (0.5, 0.7), (0.0, 2.0)
    (fit,) = validate.fitted_shares(bandwidths, (0.4,), step_ms, (("fit", group_by, step_time),))
    table = validate.rows()
    measured = np.array([r.measured for r in table])
    steps = _steps(table)
    options = [(b, o, np.array([r.estimate for r in validate.rows(cost.Estimate(bandwidth_fraction=b,
                                                                                prefill_mfu=0.4, decode_mfu=0.4),
                                                                  engine="graphs")])
                + o * steps) for b in bandwidths for o in step_ms if step_time or o == 0]
    group_of = {r.id + r.metric: (r.gpu if group_by == "gpu" else r.source) for r in table}
    groups = sorted(set(group_of.values()))
    sources = [r.source for r in table]
    reached = []
    for choice in itertools.product(range(len(options)), repeat=len(groups)):
        pick = dict(zip(groups, choice, strict=True))
        ratios = [options[pick[group_of[r.id + r.metric]]][2][i] / measured[i] for i, r in enumerate(table)]
        reached.append((_balanced(ratios, sources, validate.WITHIN), _balanced(ratios, sources, validate.WIDE)))
    assert fit.within_25pct == pytest.approx(max(a for a, _ in reached))
    assert fit.within_wide == pytest.approx(max(b for _, b in reached))
    frontier = {(round(a, 9), round(b, 9)) for a, b in reached
                if not any(x >= a and y >= b and (x, y) != (a, b) for x, y in reached)}
    assert {(round(a, 9), round(b, 9)) for a, b in fit.frontier} == frontier
    # the frontier runs from the best within 25% to the best within x1.5
    firsts = [a for a, _ in fit.frontier]
    assert firsts == sorted(firsts, reverse=True) and [b for _, b in fit.frontier] == sorted(b for _, b in fit.frontier)
    assert fit.frontier[0][0] == pytest.approx(fit.within_25pct) and fit.frontier[-1][1] == pytest.approx(fit.within_wide)
    # each group's tight-band constants: the range over the choices that give it its best weighted count within 25%
    weight = np.array([1 / sources.count(s) for s in sources])
    for group in groups:
        mine = np.array([group_of[r.id + r.metric] == group for r in table])
        score = [float(np.sum(weight[mine] * [validate.in_band(x) for x in est[mine] / measured[mine]]))
                 for _, _, est in options]
        best = [(b, o) for (b, o, _), sc in zip(options, score, strict=True) if sc >= max(score) - 1e-12]
        expect = ((min(b for b, _ in best), max(b for b, _ in best)), (0.4, 0.4),
                  (min(o for _, o in best), max(o for _, o in best)))
        assert fit.tight_constants[group] == expect, group
        assert fit.tight_hits[group] == pytest.approx(max(score) / weight[mine].sum())


def test_more_freedom_never_scores_less():
    fits = validate.fitted_shares((0.5, 0.6, 0.7), (0.4, 0.6), (0.0, 2.0))
    by = {f.label: f for f in fits}
    order = [label for label, _, _ in validate.FITS]
    # each fit groups the rows more finely than, or as finely as, the one it is compared with, or adds a term
    for looser, tighter in ((0, 1), (1, 2), (0, 3)):
        looser, tighter = by[order[looser]], by[order[tighter]]
        assert tighter.within_25pct >= looser.within_25pct - 1e-12
        assert tighter.within_wide >= looser.within_wide - 1e-12
        assert all(tighter.reaches(a, b) for a, b in looser.frontier)
    on_grid = validate.rows(cost.Estimate(bandwidth_fraction=0.6, prefill_mfu=0.4, decode_mfu=0.4), engine="graphs")
    assert by[order[0]].within_25pct >= validate.shares(on_grid)["source_balanced"]["within_25pct"]
    assert set(by["one set per GPU"].tight_constants) == {r.gpu for r in validate.rows()}
    assert set(by["one set per source, with a time per step"].tight_constants) == set(SOURCES)


@pytest.mark.parametrize("kwargs, words", [
    ({"step_ms": (-1.0,)}, "0 or more"), ({"step_ms": (float("nan"),)}, "0 or more"),
    ({"mfus": ()}, "at least one"), ({"bandwidths": (1.5,)}, "fraction"),
    ({"fits": (("x", "engine", False),)}, "'all', 'gpu' or 'source'"), ({"step_ms": (1.0,)}, "needs 0")])
def test_fitted_shares_refuses_a_bad_grid_in_one_line(kwargs, words):
    with pytest.raises(ValueError, match=words) as err:
        validate.fitted_shares(**kwargs)
    assert "\n" not in str(err.value)


def test_validate_fitted_prints_every_fit(capsys, monkeypatch):
    # the defaults' grid point only, to keep the test fast
    monkeypatch.setattr(validate, "fitted_shares", lambda f=validate.fitted_shares: f((0.6,), (0.4,), (0.0,)))
    assert main(["validate", "--fitted"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if any(label in line for label, _, _ in validate.FITS)]
    assert len(lines) == len(validate.FITS)
    # at the defaults' grid point no fit reaches both targets
    assert all(line.endswith("one set: no") for line in lines)
    assert main(["validate", "--fitted", "--json"]) == 0
    fits = json.loads(capsys.readouterr().out)
    assert [f["label"] for f in fits] == [label for label, _, _ in validate.FITS]


def test_gpt_fast_quantized_rows_are_the_readme_tables_with_the_head_quantized_too():
    """The README's 'Benchmarks' and 'Tensor Parallelism + Quantization' tables (8-bit, 4-bit G=32 rows), priced with
    gpt-fast's formats: int8 per channel (W8A16) and int4 with a BF16 scale and zero per 32 weights (0.625 bytes),
    the output head quantized as well (quantize.py replaces every nn.Linear)."""
    readme = {("llama2-7b", 1, "8-bit"): 155.58, ("llama2-7b", 1, "4-bit (G=32)"): 196.80,
              ("llama2-70b", 1, "8-bit"): 19.13, ("llama2-70b", 1, "4-bit (G=32)"): 25.25,
              ("llama2-70b", 8, "8-bit"): 80.44, ("llama2-70b", 8, "4-bit (G=32)"): 90.77}
    pts = [p for p in SERVING_POINTS if p.source_key == "gpt-fast-quant"]
    label = {"w8a16": "8-bit", "int4-g32-zp": "4-bit (G=32)"}
    assert {(p.model.name, p.num_gpus, label[p.weights]): round(1000 / p.tpot_ms, 2) for p in pts} == readme
    assert weight_format("int4-g32-zp").bytes == 0.625
    for p in pts:
        assert p.head == p.weights and validate._deployment(p).head_bytes == weight_format(p.weights).bytes
        assert validate.predict_ms(p, "tpot_ms", "floor") < validate.predict_ms(
            replace(p, head=""), "tpot_ms", "floor")  # the quantized head is read in fewer bytes
    assert all(validate._deployment(p).head_bytes is None for p in SERVING_POINTS if not p.head)


def test_chapter_9_lists_each_source_on_its_side_of_the_split_with_its_citation():
    """The chapter glues how many sources are in sample, held out and fresh, and names each in prose, with its
    citation, in the part of the paragraph for its side: fitted on; held out (a source whose setup the fit never
    saw) and not fresh; fresh and held out; or neither (fresh, not fitted on, but measured on a fitted source's
    machines). A source added, or moved across the split, without its sentence moving too fails here."""
    named = {"gpt-fast": ("gptfast2023", "batch-1 decode of Llama"), "nim": ("nim2025benchmarks", "NIM's tables"),
             "ft-530b": ("fastertransformer2022gpt", "FasterTransformer's static batches"),
             "dstack-mi300x": ("dstack2024mi300x", "vLLM on eight AMD MI300X"),
             "lmdeploy-a100": ("lmdeploy2023a100", "static-inference tables"),
             "tinychat-fp16": ("tinychat2025readme", "the FP16 baseline in TinyChat's benchmarks"),
             "trtllm-0.6": ("trtllm2023perf", "static-batch tables on H100, L40S and A100"),
             "vllm-ci": ("vllmci2024", "vLLM's CI latency tests"),
             "gpt-fast-quant": ("gptfast2023", "gpt-fast's rows with 8-bit and 4-bit weights"),
             "tinychat": ("tinychat2025readme", "its 4-bit AWQ engine"),
             "tinychat-trtllm": ("tinychat2025readme", "AWQ engine and of TensorRT-LLM"),
             "qwen-hf": ("qwen2024speed", "benchmark of Hugging Face transformers"),
             "qwen-vllm": ("qwen2024speed", "transformers and vLLM on one A100"),
             "trtllm-h200-0.5": ("trtllm2023h200", "TensorRT-LLM's two H200 blog posts"),
             "trtllm-h200-0.7a": ("trtllm2023falcon180b", "TensorRT-LLM's two H200 blog posts"),
             "mlc-llm": ("mlc2023perfbench", "MLC LLM's 4-bit decode")}
    assert set(named) == set(SOURCES)
    cells = json.load(open(Path(__file__).parents[1] / "book" / "09_cost_model.ipynb"))["cells"]
    text = " ".join(next("".join(c["source"]) for c in cells if c["cell_type"] == "markdown"
                         and "are *in sample*" in "".join(c["source"])).split())
    marks = ("are *in sample*", "are *held out*", "The fresh held-out sources are", "Two things about")
    cuts = [text.index(m) for m in marks]
    fitted, held_old, fresh_held = (text[a:b] for a, b in itertools.pairwise(cuts))
    for k, s in SOURCES.items():
        fresh = s.added_in >= validate.FRESH_AFTER
        # the middle part: held out and older, or not fitted on but beside a fitted source
        part = fitted if s.in_sample else fresh_held if fresh and not seen_by_fit(k) else held_old
        cite, phrase = named[k]
        assert f"`{cite}" in part or f",{cite}" in part, (k, cite)
        assert phrase in part, (k, phrase)
    bib = (Path(__file__).parents[1] / "references.bib").read_text()
    assert all(f"{{{cite}," in bib for cite, _ in named.values())


def test_mlc_rows_are_the_readme_table_in_q4f16_1():
    """MLC LLM's column of llm-perf-bench's int4 table on the RTX 4090, priced as q4f16_1 stores weights: 4 bits with an
    FP16 scale per 32 (0.5625 bytes), the embedding and the output head quantized the same way."""
    pts = [p for p in SERVING_POINTS if p.source_key == "mlc-llm"]
    assert {p.model.name: round(1000 / p.tpot_ms, 1) for p in pts} == {"llama2-7b": 204.8, "llama2-13b": 113.5}
    assert all((p.gpu, p.weights, p.head, p.concurrency, p.output) == ("RTX-4090", "int4-g32", "int4-g32", 1, 256)
               for p in pts)
    assert weight_format("int4-g32").bytes == 0.5625
    assert SOURCES["mlc-llm"].profile == "graphs" and not SOURCES["mlc-llm"].in_sample


def test_format_pairs_cross_the_two_tables_of_one_setup_and_no_other_sources():
    """gpt-fast's 16-bit and quantized rows ran on one engine and machine: a pair differing only in the format (the
    head's included) is scored, counted under the held-out source; rows of different setups never pair."""
    got = {(p.a, p.b): p for p in validate.pairs(validate.rows())}
    cross = got[("gptfast-llama2-7b-tp1", "gptfast-llama2-7b-w8a16-tp1")]
    assert (cross.lever, cross.source) == ("format", "gpt-fast-quant")
    assert ("gptfast-llama2-70b-tp8", "gptfast-llama2-70b-int4-g32-zp-tp8") in got
    ids = {p.id: p for p in SERVING_POINTS}
    for p in got.values():
        assert setup_of(ids[p.a].source_key) == setup_of(ids[p.b].source_key), (p.a, p.b)
    # the head's format is part of the format lever: the same point with only its head quantized pairs as "format"
    base = _point("h", weights="w8a16")
    pts = {"h": base, "q": replace(base, id="q", head="w8a16")}
    table = [validate.Row("h", "tpot_ms", 10.0, 1.0, 9.0, "nim"), validate.Row("q", "tpot_ms", 9.5, 1.0, 8.8, "nim")]
    assert [p.lever for p in validate.pairs(table, pts)] == ["format"]
