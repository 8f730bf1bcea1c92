"""Regenerate the ex01 fixture submissions from the committed release and the solutions.

Run ``.venv/bin/python tests/submissions/make_fixtures.py`` after changing ``solutions/ex01`` (and regenerating
``exercises/ex01``). Each fixture is the released notebook with the solution cells filled in the way one kind of
learner would, named ``<student>_ex01.ipynb``; ``EXPECTED`` in tests/test_grading.py lists the score each earns.
"""

from __future__ import annotations

import json
from pathlib import Path

from make_fixtures_ex03 import _gid, fill, solved

REPO = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent / "ex01"
RELEASE = REPO / "exercises" / "ex01" / "ex01.ipynb"


WRITTEN = {"c1_written": "The weights have to come out of memory every step, FLOP/s do not matter."}


KV_HEADS = """def kv_bytes_per_token(config, bytes_per_element=2):
    return 2 * config.num_layers * config.num_heads * config.head_dim * bytes_per_element"""
B3 = """def max_concurrent_sequences(config, gpu, num_gpus, context, weight_bytes=2, kv_bytes=2, reserve_gib_per_gpu=8):
    weights = config.weight_bytes(weight_bytes, table_bytes=max(2, weight_bytes))
    budget = num_gpus * (gpu.memory_bytes - reserve_gib_per_gpu * GiB) - weights
    per_sequence = context * kv_bytes_per_token(config, kv_bytes)
    return max(0, math.floor(budget / per_sequence))"""
KV_NO2 = """def kv_bytes_per_token(config, bytes_per_element=2):
    return config.num_layers * config.num_kv_heads * config.head_dim * bytes_per_element"""


def write_fixtures(out: Path, nbs: dict[str, dict]) -> None:
    """Replace every notebook in ``out`` with ``nbs`` ({name: notebook}), so a renamed fixture leaves no orphan."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.ipynb"):
        stale.unlink()
    for name, nb in nbs.items():
        (out / f"{name}.ipynb").write_text(json.dumps(nb, indent=1) + "\n")


def build():
    good = solved("ex01", WRITTEN)  # what a strong learner hands in
    nbs = {
        "ada lovelace_123_ex01": good,  # an LMS-style file name
        "blank_ex01": json.loads(RELEASE.read_text()),
        "heads_ex01": fill(good, a3_kv_answer="kv_bytes_qwen72b = 2 * 80 * 64 * 128 * 2",
                           b1_kv_function_answer=KV_HEADS),
        "nofactor2_ex01": fill(good, a3_kv_answer="kv_bytes_qwen72b = 80 * 8 * 128 * 2",
                               b1_kv_function_answer=KV_NO2),
        "gbgib_ex01": fill(good, a4_budget_answer=(
            "# 141 GB per H200, weights in GB\n"
            "kv_budget_gib_qwen72b = 4 * 141 - qwen72b.num_params * 2 / 1e9 - 4 * 8"),
            b3_concurrency_function_answer=(
            "def max_concurrent_sequences(config, gpu, num_gpus, context, weight_bytes=2, kv_bytes=2,\n"
            "                             reserve_gib_per_gpu=8):\n"
            "    budget_gib = num_gpus * (gpu.memory_bytes / GiB - reserve_gib_per_gpu) - config.num_params * weight_bytes / 1e9\n"
            "    return max(0, math.floor(budget_gib * GiB / (context * kv_bytes_per_token(config, kv_bytes))))")),
        "hardcoded_ex01": fill(good, b1_kv_function_answer=(
            "def kv_bytes_per_token(config, bytes_per_element=2):\n    return 65536 * bytes_per_element"),
            b2_floor_function_answer=(
            "def decode_floor_ms(config, gpu, num_gpus=1, bytes_per_param=2):\n"
            "    return 53.535 * bytes_per_param / 2 / num_gpus"),
            b3_concurrency_function_answer=(
            "def max_concurrent_sequences(config, gpu, num_gpus, context, weight_bytes=2, kv_bytes=2,\n"
            "                             reserve_gib_per_gpu=8):\n"
            "    return 12 if context >= 4096 else 25")),
        "delegates_ex01": fill(good, b1_kv_function_answer=(
            "def kv_bytes_per_token(config, bytes_per_element=2):\n"
            "    return config.kv_bytes_per_token(bytes_per_element)"),
            b2_floor_function_answer=(
            "from stage5 import cost\n\n"
            "def decode_floor_ms(config, gpu, num_gpus=1, bytes_per_param=2):\n"
            "    return cost.decode_floor_s(cost.Deployment(config, gpu, num_gpus, weight_bytes=bytes_per_param)) * 1e3"),
            b3_concurrency_function_answer=(
            "from stage5.cost import Deployment, max_concurrency\n\n"
            "def max_concurrent_sequences(config, gpu, num_gpus, context, weight_bytes=2, kv_bytes=2,\n"
            "                             reserve_gib_per_gpu=8):\n"
            "    dep = Deployment(config, gpu, num_gpus, weight_bytes=weight_bytes, kv_bytes=kv_bytes)\n"
            "    try:\n"
            "        return int(max_concurrency(dep, context))\n"
            "    except ValueError:\n"
            "        return 0")),
        # the misconceptions the hidden checks name, one fixture each (a learner makes one slip at a time)
        "roundup_ex01": fill(good, a5_concurrency_answer=(
            "max_seqs_qwen72b_32k = math.ceil(kv_budget_gib_qwen72b * GiB / (32_768 * kv_bytes_qwen72b))"),
            b3_concurrency_function_answer=B3.replace("math.floor", "math.ceil")),
        "flops_floor_ex01": fill(good, a1_floor_answer=(
            "floor_ms_llama8b_l4 = 2 * llama8b.num_params / l4.flops_bf16 * 1e3  # FLOPs over FLOP/s"),
            b2_floor_function_answer=(
            "def decode_floor_ms(config, gpu, num_gpus=1, bytes_per_param=2):\n"
            "    return 2 * config.num_params / (gpu.flops_bf16 * num_gpus) * 1e3")),
        "flops_once_ex01": fill(good, a6_intensity_answer=(
            "intensity_b64_weights = qwen72b.num_params * 64 / (qwen72b.num_params * 2)  # one FLOP per parameter"),
            a7_intensity_kv_answer=(
            "_weights = qwen72b.num_params * 2\n_kv_read = 64 * 8_192 * kv_bytes_qwen72b\n"
            "intensity_b64_kv8k = qwen72b.num_params * 64 / (_weights + _kv_read)")),
        "reserve_once_ex01": fill(good, a4_budget_answer=(
            "kv_budget_gib_qwen72b = (4 * h200.memory_bytes - qwen72b.num_params * 2 - 8 * GiB) / GiB"),
            b3_concurrency_function_answer=B3.replace(
                "num_gpus * (gpu.memory_bytes - reserve_gib_per_gpu * GiB)",
                "num_gpus * gpu.memory_bytes - reserve_gib_per_gpu * GiB")),
        "kv_no_layers_ex01": fill(good, a7_intensity_kv_answer=(
            "_weights = qwen72b.num_params * 2\n"
            "_kv_read = 64 * 8_192 * 2 * qwen72b.num_kv_heads * qwen72b.head_dim * 2  # one layer's K and V\n"
            "intensity_b64_kv8k = 2 * qwen72b.num_params * 64 / (_weights + _kv_read)"),
            b1_kv_function_answer=(
            "def kv_bytes_per_token(config, bytes_per_element=2):\n"
            "    return 2 * config.num_kv_heads * config.head_dim * bytes_per_element")),
        # correct builds by another route: full marks
        "weight_bytes_ex01": fill(good, b2_floor_function_answer=(
            "def decode_floor_ms(config, gpu, num_gpus=1, bytes_per_param=2):\n"
            "    tables = config.table_params  # embedding and head, kept at 16 bits\n"
            "    body = (config.num_params - tables) * bytes_per_param\n"
            "    return (body + tables * max(2, bytes_per_param)) / num_gpus / gpu.bandwidth * 1e3"),
            b3_concurrency_function_answer=B3.replace(
                "config.weight_bytes(weight_bytes, table_bytes=max(2, weight_bytes))",
                "(config.num_params - config.table_params) * weight_bytes + config.table_params * max(2, weight_bytes)")),
        "whole_float_ex01": fill(good, a5_concurrency_answer=(
            "max_seqs_qwen72b_32k = kv_budget_gib_qwen72b * GiB // (32_768 * kv_bytes_qwen72b)  # 39.0, a float"),
            b3_concurrency_function_answer=B3.replace("max(0, math.floor(budget / per_sequence))",
                                                      "max(0.0, budget // per_sequence)")),
        # unit slips the visible checks and the hidden ones name: A1 in seconds, A4 for one GPU
        "seconds_ex01": fill(good, a1_floor_answer=(
            "floor_ms_llama8b_l4 = llama8b.num_params * 2 / l4.bandwidth  # in seconds")),
        # the unit slips no visible bound can catch without giving the answer away: A3 counted in bits, A4 given
        # in decimal GB (both carry into A5, and the bits into A7); the hidden checks name each
        "bits_gb_ex01": fill(good, a3_kv_answer=(
            "kv_bytes_qwen72b = 2 * qwen72b.num_layers * qwen72b.num_kv_heads * qwen72b.head_dim * 2 * 8  # bits"),
            a4_budget_answer=(
            "kv_budget_gib_qwen72b = (4 * h200.memory_bytes - qwen72b.num_params * 2 - 4 * 8 * GiB) / 1e9  # GB")),
        "per_gpu_ex01": fill(good, a4_budget_answer=(
            "kv_budget_gib_qwen72b = (h200.memory_bytes - qwen72b.num_params * 2 / 4 - 8 * GiB) / GiB  # one GPU")),
        "loop_ex01": fill(good, a2_ridge_answer="while True:\n    pass"),
        "crash_ex01": fill(good, a1_floor_answer=(
            "import numpy_financial  # not installed: raises at import\n"
            "floor_ms_llama8b_l4 = llama8b.num_params * 2 / l4.bandwidth * 1e3")),
        "bigoutput_ex01": fill(good, a1_floor_answer=(
            "print('x' * 20_000_000)\n"
            "floor_ms_llama8b_l4 = llama8b.num_params * 2 / l4.bandwidth * 1e3")),
    }
    # a learner who deleted the test for A2 and edited the one for A3, with wrong answers under both
    tampered = fill(good, a2_ridge_answer="ridge_l4 = 242e12 / 300e9  # the sparse headline",
                    a3_kv_answer="kv_bytes_qwen72b = 2 * 80 * 64 * 128 * 2")
    tampered["cells"] = [c for c in tampered["cells"] if _gid(c) != "a2_ridge"]
    for cell in tampered["cells"]:
        if _gid(cell) == "a3_kv":
            cell["source"] = "assert True  # my answer is fine"
    nbs["tampered_ex01"] = tampered
    write_fixtures(OUT, nbs)


if __name__ == "__main__":
    build()
    print("\n".join(sorted(p.name for p in OUT.glob("*.ipynb"))))
