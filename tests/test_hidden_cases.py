"""The hidden tests price only what the exercises teach: no model whose cost the exercises' rules do not state
(a sliding window, multi-head latent attention, a mixture of experts), and no sequence longer than its model's
context window. A hidden case outside that set grades a learner on a rule they were never given, or on a
deployment the course's own simulator refuses.

Read from the solution notebooks' hidden-test blocks, so a new hidden case is checked without being listed here.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from stage5 import cost
from stage5 import long_context as lc
from stage5.models import ModelConfig, get_model, model_names

REPO = Path(__file__).resolve().parent.parent
ASSIGNMENTS = ("ex01", "ex02", "ex03", "ex04", "clearing")
HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)
# A model the exercises price outside the taught set, where the question itself states the rule it needs:
# (assignment, grade_id, model) -> words the release's question must hold.
STATED_IN_THE_QUESTION = {
    ("clearing", "q11_experts", "mixtral-8x7b"): ["**2** of its **8** experts", "uniformly random pair"],
}


def _notebook(folder: str, assignment: str) -> dict:
    return json.loads((REPO / folder / assignment / f"{assignment}.ipynb").read_text())


def _hidden_blocks() -> list[tuple[str, str, str]]:
    """(assignment, grade_id, hidden source) for every hidden-test block of every solution notebook."""
    blocks = []
    for assignment in ASSIGNMENTS:
        for cell in _notebook("solutions", assignment)["cells"]:
            for block in HIDDEN.findall("".join(cell["source"])):
                blocks.append((assignment, cell["metadata"].get("nbgrader", {}).get("grade_id", ""), block))
    return blocks


def taught(model: ModelConfig) -> list[str]:
    """What the exercises' rules do not price in ``model`` (empty when they price all of it): the rules count
    ``num_params`` weights read per step, 2 x layers x KV heads x head_dim bytes per token for every cached token."""
    why = []
    if model.num_experts > 1:
        why.append(f"a mixture of experts ({model.num_experts} experts)")
    if model.kv_lora_rank:
        why.append("multi-head latent attention")
    if model.sliding_layers:
        why.append(f"a {model.sliding_window:,}-token sliding window")
    return why


def _models_named(source: str) -> set[str]:
    names = set(model_names())
    return {node.value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names}


def _built_models(source: str) -> list[ast.Call]:
    return [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", "")) == "ModelConfig"]


def test_the_check_sees_what_it_refuses():
    """The rule itself: each architecture the exercises do not teach is named, a taught one passes."""
    assert taught(get_model("llama3-70b")) == [] and taught(get_model("qwen2.5-7b")) == []
    assert "sliding window" in " ".join(taught(get_model("mistral-7b")))
    assert "mixture of experts" in " ".join(taught(get_model("mixtral-8x7b")))
    assert "latent attention" in " ".join(taught(get_model("deepseek-v2-lite")))


@pytest.mark.parametrize(("assignment", "grade_id", "source"), _hidden_blocks(),
                         ids=[f"{a}-{g}" for a, g, _ in _hidden_blocks()])
def test_hidden_tests_name_only_taught_models(assignment, grade_id, source):
    for name in sorted(_models_named(source)):
        why = taught(get_model(name))
        if not why:
            continue
        words = STATED_IN_THE_QUESTION.get((assignment, grade_id, name))
        assert words is not None, f"{assignment} {grade_id}: {name} has {', '.join(why)}, which the exercises " \
                                  "do not teach how to price"
        release = "".join("".join(c["source"]) for c in _notebook("exercises", assignment)["cells"]
                          if c["cell_type"] == "markdown")
        for w in words:
            assert w in release, f"{assignment}: the question on {name} no longer states {w!r}"
    for call in _built_models(source):  # models made up for a hidden test (ex01's "unseen" ones)
        fields = {kw.arg for kw in call.keywords}
        assert not fields & {"num_experts", "experts_per_token", "kv_lora_rank", "sliding_window"}, \
            f"{assignment} {grade_id}: a made-up model with {fields & {'num_experts', 'kv_lora_rank', 'sliding_window'}}"


def test_the_clearing_config_json_is_a_taught_model():
    """Q1's model comes from a config.json in the notebook, not the registry."""
    cell = next(c for c in _notebook("solutions", "clearing")["cells"] if "CONFIG_JSON = " in "".join(c["source"]))
    text = re.search(r'CONFIG_JSON = """(.*?)"""', "".join(cell["source"]), re.S).group(1)
    assert taught(ModelConfig.from_hf_config(json.loads(text), name="clearing")) == []


def _ex03_cases() -> list[tuple]:
    cases = []
    for _, grade_id, source in _hidden_blocks():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_cases" \
                    and grade_id.startswith("b") and "diagnose" in source:
                cases += ast.literal_eval(node.value)
    return cases


def _ex01_b3_cases() -> list[tuple]:
    source = next(s for a, g, s in _hidden_blocks() if (a, g) == ("ex01", "b3_concurrency_function"))
    node = next(n for n in ast.walk(ast.parse(source))
                if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "_cases")
    return ast.literal_eval(node.value)


def test_ex03_hidden_sequences_fit_their_models_context():
    cases = _ex03_cases()
    assert len(cases) >= 14  # every B check's deployments, read from the notebook
    for model, _gpu, _n, prompt, output, *_ in cases:
        limit = get_model(model).max_position_embeddings
        assert prompt + output <= limit, f"ex03 hidden case {model}: {prompt:,} + {output:,} tokens exceeds its " \
                                         f"{limit:,}-token context"


def test_ex01_hidden_contexts_fit_their_models_context():
    for model, _gpu, _n, context, *_ in _ex01_b3_cases():
        assert context <= get_model(model).max_position_embeddings, (model, context)


# Hidden questions that fix a context in their own text: (assignment, grade_id, model, context). Each must appear
# in its hidden block as written, so a change there fails here until the table (and the context) is checked again.
FIXED_CONTEXTS = [
    ("ex01", "a5_concurrency", "qwen2.5-72b", "32_768", 32_768),
    ("ex01", "a7_intensity_kv", "qwen2.5-72b", "8_192", 8_192),
    ("clearing", "q2_concurrency", "llama3.1-405b", "16_384", 16_384),
    ("clearing", "q5_ceiling", "llama3-70b", "4096", 4096),
    ("clearing", "q10_bytes", "llama3-70b", "4096", 4096),
]


@pytest.mark.parametrize(("assignment", "grade_id", "model", "written", "context"), FIXED_CONTEXTS)
def test_fixed_contexts_fit_their_models_context(assignment, grade_id, model, written, context):
    source = next(s for a, g, s in _hidden_blocks() if (a, g) == (assignment, grade_id))
    assert f'"{model}"' in source and written in source, f"{assignment} {grade_id} changed: check its context again"
    assert context <= get_model(model).max_position_embeddings


def test_the_crossover_answer_is_a_context_the_model_serves():
    """Clearing Q12's answer is itself a context length: one the model can hold (Llama 3 70B's is past 8,192)."""
    source = next(s for a, g, s in _hidden_blocks() if (a, g) == ("clearing", "q12_crossover"))
    model = re.search(r'kv_weight_crossover_context\(_cost\.Deployment\.of\("([^"]+)", "([^"]+)", (\d+)\), (\d+)\)',
                      source)
    assert model, "Q12's hidden test no longer computes the crossover as this test reads it"
    name, gpu, n, batch = model.group(1), model.group(2), int(model.group(3)), int(model.group(4))
    x = float(lc.kv_weight_crossover_context(cost.Deployment.of(name, gpu, n), batch))
    assert x <= get_model(name).max_position_embeddings, f"Q12: {x:,.0f} tokens exceed {name}'s context"


def test_unit_slips_left_to_grading_are_named_in_the_question_and_in_the_visible_check():
    """ex01's A3 (bits for bytes, 8x) and A4 (decimal GB for binary GiB, 7%) slips pass any visible bound that would
    not give the answer away: the question names the unit asked and the one not asked, and the visible check says
    the slip is checked only at grading (tests/test_grading.py's bits_gb fixture shows the hidden check naming
    each)."""
    cells = _notebook("exercises", "ex01")["cells"]

    def after_question(tag):
        i = next(i for i, c in enumerate(cells) if "".join(c["source"]).startswith(f"**{tag}.**"))
        return "".join(cells[i]["source"]), next("".join(c["source"]) for c in cells[i + 1:]
                                                 if c["metadata"].get("nbgrader", {}).get("grade")
                                                 and not c["metadata"]["nbgrader"].get("solution"))

    question, check = after_question("A3")
    assert "in **bytes**, not bits" in question
    assert "Bits counted for bytes" in check and "checked only at grading" in check
    question, check = after_question("A4")
    assert "binary **GiB** (2³⁰ bytes), not decimal GB (10⁹ bytes)" in question
    assert "Decimal GB where GiB is asked" in check and "checked only at grading" in check


def test_bits_for_bytes_is_named_even_where_query_heads_give_the_same_ratio():
    """Qwen2.5 72B has 8 query heads per KV head, so counting bits and using query heads are both 8x: the hint
    names both (ex01 A3), and names bits alone where the heads ratio differs."""
    from stage5.grading import diagnose, kv_misconceptions

    q, llama = get_model("qwen2.5-72b"), get_model("llama3-8b")
    assert q.num_heads == 8 * q.num_kv_heads
    text = diagnose(8 * q.kv_bytes_per_token(2), q.kv_bytes_per_token(2), misconceptions=kv_misconceptions(q))
    assert "query heads" in text and "bits instead of bytes" in text
    text = diagnose(8 * llama.kv_bytes_per_token(2), llama.kv_bytes_per_token(2),
                    misconceptions=kv_misconceptions(llama))
    assert "bits instead of bytes" in text and "query heads" not in text
