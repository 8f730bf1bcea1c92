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
    assert main(["--requests", "10", "--seed", "3", "--blocks", "72", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
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


def test_later_subcommands_are_reserved(capsys):
    for sub in ("prefix", "spec"):
        assert main([sub]) == 2
        assert "not implemented yet" in capsys.readouterr().err
