"""The engine benchmark at a tiny size: the JSON schema and the inequalities that do not depend on timing."""

from __future__ import annotations

import json

import pytest
import torch

from stage5.engine.bench import main
from stage5.engine.checkpoints import checkpoint_path

torch.set_num_threads(1)

KEYS = {"tokens_per_s", "tokens_per_step", "kv_utilization", "peak_running", "steps", "wall_s"}
ENGINES = {"contiguous_static", "contiguous_continuous", "paged_static", "paged_continuous"}


@pytest.mark.skipif(not checkpoint_path("target").exists(), reason="target checkpoint not trained")
def test_bench_json_schema_and_orderings(capsys):
    assert main(["--requests", "10", "--seed", "3", "--blocks", "72", "--model", "target", "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)  # stdout holds only the JSON; progress and the estimate go to stderr
    assert "[1/4] contiguous_static" in captured.err and "s left" in captured.err and "[4/4]" in captured.err
    assert set(report) == {"workload", "engines"}
    assert report["workload"]["n"] == 10 and report["workload"]["seed"] == 3
    assert set(report["engines"]) == ENGINES
    for metrics in report["engines"].values():
        assert set(metrics) == KEYS
        assert metrics["steps"] > 0 and metrics["wall_s"] > 0 and 0 < metrics["kv_utilization"] <= 1
    e = report["engines"]
    assert e["paged_continuous"]["tokens_per_step"] > e["contiguous_static"]["tokens_per_step"]
    assert e["contiguous_continuous"]["steps"] <= e["contiguous_static"]["steps"]
    assert e["paged_static"]["kv_utilization"] > 0.8 > 0.4 > e["contiguous_static"]["kv_utilization"]
    assert e["paged_continuous"]["peak_running"] > e["contiguous_static"]["peak_running"]


PREFIX_KEYS = {"hit_rate", "prefill_tokens_computed", "prefill_tokens_skipped", "mean_ttft_steps", "mean_ttft_s",
               "tokens_per_s", "steps", "wall_s"}


@pytest.mark.skipif(not checkpoint_path("target").exists(), reason="target checkpoint not trained")
def test_bench_prefix_json(capsys):
    assert main(["prefix", "--scale", "0.25", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["workloads"]
    assert set(report) == {"shared_system_prompt", "short_prompt_long_answer"}
    for servings in report.values():
        assert set(servings) == {"no_cache", "cache_shared_first", "cache_timestamp_first"}
        assert all(set(m) == PREFIX_KEYS for m in servings.values())
    shared = report["shared_system_prompt"]
    assert shared["no_cache"]["hit_rate"] == 0 and shared["cache_timestamp_first"]["hit_rate"] == 0
    assert shared["cache_shared_first"]["hit_rate"] > 0.6
    assert shared["cache_shared_first"]["prefill_tokens_computed"] < shared["no_cache"]["prefill_tokens_computed"] / 3


@pytest.mark.skipif(not checkpoint_path("draft").exists(), reason="draft checkpoint not trained")
def test_bench_spec_json(capsys):
    assert main(["spec", "--requests", "2", "--max-k", "2", "--max-batch", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(r["drafter"], r["k"]) for r in report["acceptance"]] == [("draft", 1), ("draft", 2),
                                                                      ("prompt_lookup", 1), ("prompt_lookup", 2)]
    for r in report["acceptance"]:
        assert 0 < r["alpha"] <= 1 and 1 <= r["tokens_per_verification"] <= r["k"] + 1
    draft = [r for r in report["acceptance"] if r["drafter"] == "draft"]
    assert min(r["alpha"] for r in draft) > 0.6  # the trained draft agrees with the target most of the time
    assert [r["batch"] for r in report["speedup"]][0] == 1
    assert all({"batch", "k", "measured", "predicted"} <= set(r) for r in report["speedup"])
