"""The command line: help, figures, model and deploy, including what bad input prints."""

import json
import subprocess
import sys

import pytest

from stage5.__main__ import main

REQUIRED_FIGURES = [
    "llama3_70b_params", "llama3_70b_weights_GB", "llama3_70b_weights_GiB", "h100_ridge_flops_per_byte",
    "decode_floor_ms_1xH100", "decode_floor_ms_4xH100", "llama3_70b_kv_bytes_per_token", "kv_budget_GiB_4xH100",
    "max_seqs_1k", "max_seqs_4k", "max_seqs_32k", "max_seqs_128k", "kv_traffic_GB_b125_s4096",
    "intensity_b125_s4096", "spec_tokens_a07_k4", "spec_speedup_a07_k4", "cost_ratio_128k_vs_1k",
]


def test_help_runs_as_a_module():
    out = subprocess.run([sys.executable, "-m", "stage5", "--help"], capture_output=True, text=True, check=True)
    for command in ("figures", "model", "deploy", "bench"):
        assert command in out.stdout


def test_figures_json_has_the_required_ids(capsys):
    assert main(["figures", "--json"]) == 0
    figs = json.loads(capsys.readouterr().out)
    missing = [f for f in REQUIRED_FIGURES if f not in figs]
    assert not missing
    assert figs["max_seqs_4k"] == 125


def test_model_reads_any_config_json(tmp_path, capsys):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                                "vocab_size": 100}))
    assert main(["model", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["kv_bytes_per_token_bf16"] == 2 * 2 * 2 * 16 * 2


def test_deploy_reports_the_worked_example(capsys):
    assert main(["deploy", "--model", "llama3-70b", "--gpu", "H100", "--gpus", "4", "--context", "4096",
                 "--batch", "125", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["bound"] == "memory"
    assert info["max_concurrency"] == 125
    assert info["tpot_ms"] > 10.5  # the KV reads add to the 10.5 ms weight floor


@pytest.mark.parametrize("args, message", [
    (["--gpu", "H1000"], "Did you mean H100-SXM"),
    (["--model", "llama-70"], "Did you mean llama3-70b"),
    (["--gpus", "1"], "by 59.4 GiB"),
    (["--batch", "400"], "KV cache memory ran out"),
    (["--batch", "0"], "--batch must be a positive integer"),
    (["--context", "-5"], "--context must be a positive integer"),
])
def test_deploy_bad_input_says_what_is_wrong(args, message, capsys):
    base = {"--model": "llama3-70b", "--gpu": "H100", "--gpus": "4", "--context": "4096", "--batch": "125"}
    base.update(dict(zip(args[::2], args[1::2], strict=False)))
    argv = ["deploy"] + [x for kv in base.items() for x in kv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_model_on_missing_file_is_a_clear_error(capsys):
    assert main(["model", "/nonexistent/config.json"]) == 2
    assert "no config file" in capsys.readouterr().err
