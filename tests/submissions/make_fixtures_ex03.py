"""Regenerate the ex03 and clearing-test fixture submissions from the committed releases and the solutions.

Run ``.venv/bin/python tests/submissions/make_fixtures_ex03.py`` after changing ``solutions/ex03`` or
``solutions/clearing`` (and regenerating their releases). ``EXPECTED`` in tests/test_grading_ex03.py lists the
score each fixture earns.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO / "tests"))
from learner_slips import SLIPS  # noqa: E402 - the structural slips (tests/learner_slips.py)


def slip_source(good, name):
    """The solution's answer cell with one slip of tests/learner_slips.py applied."""
    found = next(s for s in SLIPS if s.name == name)
    return found.cell, diagnose_source(good, *found.edits)


def _gid(cell):
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _src(cell):
    s = cell["source"]
    return "".join(s) if isinstance(s, list) else s


def _strip_markers(src):
    return "\n".join(ln for ln in src.splitlines() if not re.match(r"\s*### (BEGIN|END) SOLUTION", ln))


def solved(assignment, written):
    release = json.loads((REPO / "exercises" / assignment / f"{assignment}.ipynb").read_text())
    source = json.loads((REPO / "solutions" / assignment / f"{assignment}.ipynb").read_text())
    answers = {_gid(c): _strip_markers(_src(c)) for c in source["cells"]
               if c.get("metadata", {}).get("nbgrader", {}).get("solution") and c["cell_type"] == "code"}
    for cell in release["cells"]:
        if _gid(cell) in answers:
            cell["source"] = answers[_gid(cell)]
        elif _gid(cell) in written:
            cell["source"] = written[_gid(cell)]
    return release


def fill(nb, **sources):
    nb = copy.deepcopy(nb)
    for cell in nb["cells"]:
        if _gid(cell) in sources:
            cell["source"] = sources.pop(_gid(cell))
    assert not sources, f"unknown cells {list(sources)}"
    return nb


def diagnose_source(good, *replacements):
    """The solution's diagnose with text replaced (each pair must match exactly once)."""
    src = next(_src(c) for c in good["cells"] if _gid(c) == "diagnose_answer")
    for old, new in replacements:
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    return src


def ex03():
    good = solved("ex03", {"c1_written": "Prefill is most of the bill and the cache removes most of prefill."})
    blank = json.loads((REPO / "exercises" / "ex03" / "ex03.ipynb").read_text())
    ret = 'return {"phase": "prefill" if prefill_s > decode_share_s else "decode",'
    always_spec = diagnose_source(good, ('best = max(LEVERS, key=lambda lever: gains[lever])', 'best = "speculative"'))
    long_prompt = diagnose_source(good, ('best = max(LEVERS, key=lambda lever: gains[lever])',
                                         'best = max(LEVERS, key=lambda lever: gains[lever])\n'
                                         '    if prompt >= 4096:  # a long prompt: cache it\n'
                                         '        best = "prefix_caching"'))
    no_kv = diagnose_source(good, ("attention = batch * context * kv(c) / (g.bandwidth * n)",
                                   "attention = 0  # the weights are the traffic"))
    delegates = ('from stage5.levers import diagnose_reference\n\n'
                 'def diagnose(dep):\n'
                 '    d = diagnose_reference(dep["model"], dep["gpu"], dep["num_gpus"], dep["prompt"], dep["output"],\n'
                 '                           dep["concurrency"], dep["objective"], weights=dep["weights"], kv=dep["kv"],\n'
                 '                           prefix_hit=dep["prefix_hit"], alpha=dep["alpha"], k=dep["k"])\n'
                 '    return {"phase": d.phase, "decode_bound": d.decode_bound, "best_lever": d.best_lever,\n'
                 '            "gain": d.gains[d.best_lever]}')
    crash = diagnose_source(good, ('prompt, output, conc = dep["prompt"], dep["output"], dep["concurrency"]',
                                   'prompt, output, conc = dep["prompt_tokens"], dep["output"], dep["concurrency"]'))
    assert ret in always_spec
    return {
        "solved": good,
        "blank": blank,
        "always_speculative": fill(good, diagnose_answer=always_spec,
                                   a1_prediction_answer='prediction_chat = {"phase": "decode", "decode_bound": "memory", '
                                                        '"best_lever": "speculative", "gain": 1.7}',
                                   a2_prediction_answer='prediction_rag = {"phase": "prefill", "decode_bound": "memory", '
                                                        '"best_lever": "speculative", "gain": 1.1}'),
        "long_prompt_cache": fill(good, diagnose_answer=long_prompt),
        "no_kv_memory": fill(good, diagnose_answer=diagnose_source(good, (
            "fit = math.floor(kv_memory / ((prompt + output) * kv(kb)))",
            "fit = 100_000  # only the TPOT limit caps the batch"))),
        "rounded_gain": fill(good, diagnose_answer=diagnose_source(good, (
            '"best_lever": best, "gain": gains[best]}', '"best_lever": best, "gain": round(gains[best], 2)}'))),
        "no_kv_traffic": fill(good, diagnose_answer=no_kv),
        "delegates": fill(good, diagnose_answer=delegates),
        "crash": fill(good, diagnose_answer=crash),
        # builds an instructor found at full marks: the phase read off the latency metric, and prefix caching that
        # shortens the decode context too
        "latency_phase": fill(good, diagnose_answer=slip_source(good, "phase_latency_undivided")[1]),
        "prefix_decode": fill(good, diagnose_answer=slip_source(good, "prefix_shortens_decode")[1]),
        # correct by another route: labels as a reader writes them (capitals, spaces, hyphens); the visible
        # check_format must accept them too, as the hidden check does
        "capital_labels": fill(good, a1_prediction_answer='prediction_chat = {"phase": "Decode", "decode_bound": '
                                                          '" memory", "best_lever": "Batching", "gain": 2.7}',
                               diagnose_answer=diagnose_source(good, (
                                   '"best_lever": best, "gain": gains[best]}',
                                   '"best_lever": best.replace("_", "-").title(), "gain": gains[best]}'))),
    }


Q2 = """m405 = get_model("llama3.1-405b")
h200 = get_gpu("H200")
budget = 8 * (h200.memory_bytes - 8 * GiB) - (m405.num_params + m405.table_params)  # FP8, 16-bit embedding and head
max_seqs = math.floor(budget / (16_384 * 2 * m405.num_layers * m405.num_kv_heads * m405.head_dim * 2))"""


def clearing():
    good = solved("clearing", {})
    assert any(_src(c) == Q2 for c in good["cells"])
    blank = json.loads((REPO / "exercises" / "clearing" / "clearing.ipynb").read_text())
    return {
        "solved": good,
        "blank": blank,
        "query_heads": fill(good, q1_kv_answer=(
            'kv_per_token = 2 * config["num_hidden_layers"] * config["num_attention_heads"] * config["head_dim"] * 2'),
            q2_concurrency_answer=(
            'm405 = get_model("llama3.1-405b")\n'
            'h200 = get_gpu("H200")\n'
            'budget = 8 * (h200.memory_bytes - 8 * GiB) - (m405.num_params + m405.table_params)\n'
            'max_seqs = math.floor(budget / (16_384 * 2 * m405.num_layers * m405.num_heads * m405.head_dim * 2))')),
        "units": fill(good, q3_floor_answer=(
            'floor_ms = get_model("qwen2.5-72b").num_params * 2 / get_gpu("H200").bandwidth * 1e3  # one GPU'),
            q4_intensity_answer="intensity_b48 = 2 * 48  # FLOPs per parameter, bytes forgotten"),
        "speculative_first": fill(good, q9_lever_answer='first_lever = "speculative"'),
        "roundup": fill(good, q2_concurrency_answer=Q2.replace("math.floor", "math.ceil")),
        "one_gpu": fill(good, q2_concurrency_answer=Q2.replace(
            "budget = 8 * (h200.memory_bytes - 8 * GiB) - (m405.num_params + m405.table_params)",
            "budget = h200.memory_bytes - 8 * GiB - (m405.num_params + m405.table_params) / 8  # one GPU's share")),
        "reserve_once": fill(good, q2_concurrency_answer=Q2.replace("8 * (h200.memory_bytes - 8 * GiB)",
                                                                      "8 * h200.memory_bytes - 8 * GiB")),
        "flops_floor": fill(good, q3_floor_answer=(
            'floor_ms = 2 * get_model("qwen2.5-72b").num_params / (2 * get_gpu("H200").flops_bf16) * 1e3')),
        "flops_once": fill(good, q4_intensity_answer="intensity_b48 = 48 / 2  # one FLOP per parameter",
                           q5_ceiling_answer=(
            'm70 = get_model("llama3-70b")\n'
            'ceiling_4k = m70.num_params / (4096 * 2 * m70.num_layers * m70.num_kv_heads * m70.head_dim * 2)')),
        # chapters 11 and 12: a tensor-parallel split that divides nothing, experts counted as batch x k, and the
        # KV-weight crossover for a single sequence
        "undivided": fill(good, q10_bytes_answer=(
            'm70 = get_model("llama3-70b")\n'
            'kv_token = 2 * m70.num_layers * m70.num_kv_heads * m70.head_dim * 2\n'
            'gb_per_gpu = (m70.num_params * 2 + 32 * 4096 * kv_token) / 1e9'),
            q11_experts_answer="experts_read = 3 * 2",
            q12_crossover_answer=(
            'm72 = get_model("qwen2.5-72b")\n'
            'kv_token = 2 * m72.num_layers * m72.num_kv_heads * m72.head_dim * 2\n'
            'crossover_tokens = m72.num_params * 2 / kv_token')),
        # and the other slips: the cache left whole on each GPU, every resident expert read, keys only
        "resident": fill(good, q10_bytes_answer=(
            'm70 = get_model("llama3-70b")\n'
            'kv_token = 2 * m70.num_layers * m70.num_kv_heads * m70.head_dim * 2\n'
            'gb_per_gpu = (m70.num_params * 2 / 8 + 32 * 4096 * kv_token) / 1e9'),
            q11_experts_answer="experts_read = 8",
            q12_crossover_answer=(
            'm72 = get_model("qwen2.5-72b")\n'
            'kv_token = m72.num_layers * m72.num_kv_heads * m72.head_dim * 2  # keys only\n'
            'crossover_tokens = m72.num_params * 2 / (8 * kv_token)')),
        # correct by another route: a capitalised label and a whole number held in a float
        "capitals": fill(good, q9_lever_answer='first_lever = "Batching"',
                         q2_concurrency_answer=Q2.replace("math.floor(budget / ", "(budget // ")),
    }


def build():
    for assignment, nbs in (("ex03", ex03()), ("clearing", clearing())):
        out = HERE / assignment
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("*.ipynb"):
            old.unlink()
        for name, nb in nbs.items():
            (out / f"{name}_{assignment}.ipynb").write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    build()
    print("\n".join(sorted(str(p.relative_to(HERE)) for p in HERE.glob("*/*.ipynb") if p.parent.name != "ex01")))
