"""The doors into the package: every public entry point, fed bad input, gives a clear error or a correct answer.

Two halves. First, each reproduction from the issue that found the holes ("inputs that cannot produce a silent
wrong number"), one test each. Then property tests: hypothesis generates bad and odd inputs for the config
reader, the CLI, ``simulate``, ``Deployment`` and the engines, and every answer must be either a one-line
error of the documented kind or a finite, correct result. Kept cheap: few examples, no deadline.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stage5 import cost, inputs, levers, routing
from stage5.__main__ import main
from stage5.engine.engine import Engine
from stage5.engine.model import generate
from stage5.engine.sequence import Request
from stage5.engine.speculative import DraftModelDrafter, PromptLookupDrafter, SpeculativeEngine
from stage5.models import CONFIG_DIR, ModelConfig, UnsupportedArchitecture
from stage5.simulator import PASTED, SimInputs, simulate
from tests.test_engine import BLOCK, CFG, make_model

FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
LLAMA8B = json.loads((CONFIG_DIR / "llama3-8b.json").read_text())


def _llama(**overrides) -> dict:
    cfg = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 2,
           "num_attention_heads": 8, "vocab_size": 1000}
    cfg.update(overrides)
    return cfg


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def _strict_json(text: str):
    """json.loads that refuses NaN and Infinity, which are not JSON."""
    def refuse(token: str):
        raise ValueError(f"non-JSON constant {token}")
    return json.loads(text, parse_constant=refuse)


# ================================================================ reproductions: the config reader
@pytest.mark.parametrize("overrides, field", [
    ({"num_attention_heads": 0}, "num_attention_heads"),
    ({"hidden_size": math.inf}, "hidden_size"),
    ({"hidden_size": 10**400}, "hidden_size"),
    ({"hidden_size": 4096.9}, "hidden_size"),
    ({"num_hidden_layers": True}, "num_hidden_layers"),
    ({"tie_word_embeddings": "false"}, "tie_word_embeddings"),
    ({"head_dim": 0}, "head_dim"),
    ({"hidden_size": 4000, "num_attention_heads": 3}, "not a multiple"),
])
def test_config_values_are_checked_not_coerced(overrides, field):
    with pytest.raises(ValueError, match=field):
        ModelConfig.from_hf_config(_llama(**overrides))


def test_a_whole_float_is_still_a_count():
    assert ModelConfig.from_hf_config(_llama(hidden_size=512.0)).hidden_size == 512


def test_falcon_is_refused_not_priced_as_a_gated_llama():
    falcon = {"model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71,
              "vocab_size": 65024, "multi_query": True, "parallel_attn": True, "bias": False}
    with pytest.raises(UnsupportedArchitecture, match="falcon.*not modelled.*parallel_attn"):
        ModelConfig.from_hf_config(falcon)


def test_deepseek_keys_in_a_llama_config_are_refused():
    with pytest.raises(UnsupportedArchitecture, match="n_routed_experts"):
        ModelConfig.from_hf_config(_llama(n_routed_experts=64, num_experts_per_tok=6))


# ================================================================ reproductions: the command line
def test_deploy_past_the_models_context_is_refused(capsys):
    assert main(["deploy", "--model", "llama3-70b", "--gpu", "H100", "--gpus", "8", "--context", "1000000",
                 "--batch", "1"]) == 2
    assert "maximum context of 8,192" in _one_line_error(capsys)


@pytest.mark.parametrize("flag, value", [("--price", "nan"), ("--price", "-3"), ("--price", "0"),
                                         ("--mfu", "inf"), ("--context", "4096.9"), ("--gpus", "true")])
def test_deploy_numbers_are_checked(flag, value, capsys):
    argv = {"--model": "llama3-70b", "--gpu": "H100", "--gpus": "4", "--context": "4096", "--batch": "8"}
    argv[flag] = value
    assert main(["deploy", *[x for kv in argv.items() for x in kv], "--json"]) == 2
    err = _one_line_error(capsys)
    assert flag in err and repr(value) in err


def test_deploy_json_is_strict_json(capsys):
    assert main(["deploy", "--model", "llama3-70b", "--gpu", "H100", "--gpus", "4", "--context", "4096",
                 "--batch", "8", "--json"]) == 0
    info = _strict_json(capsys.readouterr().out)
    assert all(math.isfinite(v) for v in info.values() if isinstance(v, float))


@pytest.mark.parametrize("text, message", [
    ('{"model_type": "llama", "hidden_size": Infinity, "num_hidden_layers": 2, "num_attention_heads": 4, '
     '"vocab_size": 10}', "hidden_size"),
    ('{"model_type": "llama", "hidden_size": 1e999, "num_hidden_layers": 2, "num_attention_heads": 4, '
     '"vocab_size": 10}', "hidden_size"),
    ('{"model_type": "llama", "hidden_size": ' + "9" * 5000 + "}", "json"),
    ('{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 0, '
     '"vocab_size": 10}', "num_attention_heads"),
    ("[1, 2]", "config.json object"),
])
def test_model_on_a_bad_config_file_is_one_line(text, message, tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(text)
    assert main(["model", str(path)]) == 2
    assert message in _one_line_error(capsys)


def test_model_on_a_directory_is_a_clear_error(tmp_path, capsys):
    assert main(["model", str(tmp_path)]) == 2
    assert "is a directory" in _one_line_error(capsys)


def test_model_reports_sliding_window_and_mla(capsys):
    assert main(["model", "mistral-7b"]) == 0
    assert "sliding window of 4,096 tokens on 32 of 32 layers" in capsys.readouterr().out
    assert main(["model", str(Path(__file__).parents[1] / "stage5" / "configs" / "deepseek-v2-lite.json")]) == 0
    assert "31,104 bytes per token (MLA" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--bogus"], ["bogus"], ["figures", "--bogus"], ["model", "gpt2", "--bogus"],
                                  ["deploy", "--bogus"],
                                  ["bench", "--block-size", "0"], ["bench", "--max-batch", "0"],
                                  ["bench", "--seed", "-1"], ["bench", "spec", "--k", "-1"],
                                  ["bench", "--blocks", "1"]])
def test_bad_flags_exit_2_with_one_line(argv, capsys):
    assert main(argv) == 2
    _one_line_error(capsys)


# ================================================================ reproductions: simulate and the cost model
@pytest.mark.parametrize("overrides, reason", [
    ({"model": PASTED, "config_json": "[]"}, "JSON object"),
    ({"model": PASTED, "config_json": "123"}, "JSON object"),
    ({"model": PASTED, "config_json": '"abc"'}, "JSON object"),
    ({"model": PASTED, "config_json": "null"}, "JSON object"),
    ({"model": PASTED, "config_json": json.dumps({**LLAMA8B, "num_attention_heads": 0})}, "num_attention_heads"),
    ({"price_per_gpu_hour": 0.0}, "price_per_gpu_hour"),
    ({"prompt": math.inf}, "prompt"),
    ({"model": "llama3-8b", "num_gpus": 1, "prompt": 200_000}, "maximum context"),
    ({"alpha": math.nan, "k": 4}, "alpha"),
    ({"prefix_hit": math.nan}, "prefix_hit"),
])
def test_simulate_returns_the_reason(overrides, reason):
    out = simulate(SimInputs(**overrides))
    assert not out.ok and reason in out.error


def test_silent_coercions_are_refused():
    with pytest.raises(ValueError, match="reserve_GiB"):
        cost.Deployment.of("llama3-70b", "H100", 1, reserve_GiB=-1000)
    dep = cost.Deployment.of("llama3-70b", "H100", 4)
    with pytest.raises(ValueError, match="draft_cost"):
        cost.speculative_speedup(dep, 1, 1024, 0.7, 4, draft_cost=-1)
    with pytest.raises(ValueError, match="alpha"):
        cost.speculative_speedup(dep, 1, 1024, math.nan, 4)
    with pytest.raises(ValueError, match="eval_size"):
        routing.simulate_router(eval_size=math.nan)


def test_misleading_errors_now_blame_the_right_input():
    with pytest.raises(ValueError, match="prompt \\+ output is 10,000,256 tokens"):
        levers.lever_ranking(prompt=10**7)
    with pytest.raises(ValueError, match="prefix_hit"):
        cost.ttft_s(cost.Deployment.of("llama3-70b", "H100", 4), 1024, math.nan)
    with pytest.raises(ValueError, match="n \\(simulated requests\\)"):
        routing.simulate_router(n=0)


# ================================================================ reproductions: the engines
@pytest.fixture(scope="module")
def tiny():
    return make_model(torch.float64)


def _requests(n: int, prompt_len: int = 6, max_tokens: int = 20) -> list[Request]:
    return [Request(i, tuple((7 * i + j) % CFG.vocab_size for j in range(prompt_len)), max_tokens)
            for i in range(n)]


@pytest.mark.parametrize("make_drafter", [lambda m: DraftModelDrafter(m, CFG, 64, BLOCK), lambda m: PromptLookupDrafter()])
def test_speculative_engine_rejects_duplicate_ids(tiny, make_drafter):
    engine = SpeculativeEngine(tiny, CFG, make_drafter(tiny), k=2, num_blocks=64, block_size=BLOCK)
    with pytest.raises(ValueError, match="appears more than once"):
        engine.run([Request(1, (1, 2, 3), 5), Request(1, (4, 5, 6), 5)])


def test_draft_pool_is_budgeted(tiny):
    """A draft pool far smaller than the target's: admission waits for it instead of running it dry."""
    requests = _requests(12)
    drafter = DraftModelDrafter(tiny, CFG, num_blocks=8, block_size=BLOCK)  # room for two requests at once
    result = SpeculativeEngine(tiny, CFG, drafter, k=3, num_blocks=128, block_size=BLOCK).run(requests)
    for r in requests:
        assert result.outputs[r.id] == generate(tiny, list(r.prompt), r.max_tokens)
    assert len(drafter.runner.alloc.free_blocks) == 8  # every draft block came back


def test_speculative_checks_before_starting(tiny):
    drafter = DraftModelDrafter(tiny, CFG, num_blocks=2, block_size=BLOCK)
    engine = SpeculativeEngine(tiny, CFG, drafter, k=2, num_blocks=128, block_size=BLOCK)
    with pytest.raises(ValueError, match="draft model's pool"):
        engine.run(_requests(1, max_tokens=30))
    with pytest.raises(ValueError, match="positions"):
        SpeculativeEngine(tiny, CFG, PromptLookupDrafter(), num_blocks=128, block_size=BLOCK).run(
            [Request(0, (1,) * 500, 20)])
    other = ModelConfig(name="other", vocab_size=32, hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2,
                        head_dim=8, intermediate_size=48, max_position_embeddings=512)
    from stage5.engine.model import Transformer
    with pytest.raises(ValueError, match="vocabulary"):
        SpeculativeEngine(tiny, CFG, DraftModelDrafter(Transformer(other).double(), other, 16, BLOCK))
    with pytest.raises(ValueError, match="k \\(drafted"):
        SpeculativeEngine(tiny, CFG, PromptLookupDrafter(), k=2.5)


@pytest.mark.parametrize("kwargs, field", [
    ({"max_tokens": 2.5}, "max_tokens"), ({"max_tokens": True}, "max_tokens"), ({"prompt": (1, -2)}, "token ids"),
    ({"prompt": [1, 2]}, "prompt"), ({"id": "a"}, "id"), ({"stop_after": 1.5}, "stop_after"),
])
def test_request_fields_are_checked(kwargs, field):
    with pytest.raises(ValueError, match=field):
        Request(**{"id": 0, "prompt": (1, 2), "max_tokens": 4, **kwargs})


def test_token_ids_outside_the_vocabulary_are_refused_up_front(tiny):
    bad = [Request(0, (1, CFG.vocab_size), 4)]
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        Engine(tiny, CFG, num_blocks=16, block_size=BLOCK).run(bad)
    with pytest.raises(ValueError, match="outside the target model's vocabulary"):
        SpeculativeEngine(tiny, CFG, PromptLookupDrafter(), num_blocks=16, block_size=BLOCK).run(bad)


def test_the_last_position_is_usable(tiny):
    """max_len - 1 positions are fed, so a request of max_position_embeddings + 1 tokens fits exactly."""
    limit = CFG.max_position_embeddings
    fits = Request(0, tuple(j % CFG.vocab_size for j in range(limit - 3)), 4)  # max_len = limit + 1
    out = Engine(tiny, CFG, num_blocks=(limit + 8) // BLOCK + 1, block_size=BLOCK).run([fits]).outputs[0]
    assert out == generate(tiny, list(fits.prompt), 4)
    with pytest.raises(ValueError, match="positions"):
        Engine(tiny, CFG, num_blocks=80, block_size=BLOCK).run([Request(1, fits.prompt, 5)])


@pytest.mark.parametrize("kwargs", [{"num_blocks": 0}, {"block_size": 0}, {"max_batch": 0}, {"max_batch": 1.5}])
def test_engine_sizes_are_checked(tiny, kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        Engine(tiny, CFG, **kwargs)


# ================================================================ properties: generated bad input
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**6), st.text(max_size=5),
                         st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0, -1, 10**30, 4096.9]))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=6)
KEYS = sorted({*LLAMA8B, "head_dim", "model_type", "num_experts", "num_local_experts", "num_experts_per_tok",
               "moe_intermediate_size", "shared_expert_intermediate_size", "kv_lora_rank", "qk_rope_head_dim",
               "qk_nope_head_dim", "v_head_dim", "sliding_window", "layer_types", "n_routed_experts",
               "first_k_dense_replace", "n_shared_experts", "multi_query", "is_encoder_decoder"})
MODEL_TYPES = st.sampled_from(["llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "gemma", "gemma2",
                               "phi3", "gpt2", "deepseek_v2", "bert", "t5", "falcon", "", "LLAMA"])


@st.composite
def mutated_configs(draw) -> dict:
    """A real config.json with a few keys replaced by arbitrary JSON values (or dropped)."""
    cfg = dict(LLAMA8B)
    cfg["model_type"] = draw(MODEL_TYPES)
    for key in draw(st.lists(st.sampled_from(KEYS), max_size=4, unique=True)):
        if draw(st.booleans()):
            cfg[key] = draw(JSON_VALUES)
        else:
            cfg.pop(key, None)
    return cfg


def _check_model(m: ModelConfig) -> None:
    assert m.num_params > 0 and m.active_params <= m.num_params
    assert math.isfinite(m.kv_bytes_per_token(2)) and m.kv_bytes_per_token(2) > 0


@FEW
@given(st.one_of(mutated_configs(), JSON_VALUES))
def test_config_reader_gives_a_model_or_a_clear_error(cfg):
    try:
        m = ModelConfig.from_hf_config(cfg)
    except (ValueError, TypeError) as err:
        assert str(err) and "\n" not in str(err)
        return
    _check_model(m)


NUMBERS = st.one_of(st.integers(-3, 10**6), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                    st.sampled_from([0, 1, 2.5, 10**12, "4", None]))


SIM_FIELDS = {
    "model": st.sampled_from(["llama3-70b", "llama3-8b", "mixtral-8x7b", "gpt2", PASTED, "nope", 7]),
    "config_json": st.one_of(st.builds(json.dumps, mutated_configs()), st.builds(json.dumps, JSON_VALUES),
                             st.text(max_size=8), st.none()),
    "gpu": st.sampled_from(["H100-SXM", "L4", "B200", "H1000", ""]),
    "weights": st.sampled_from(["bf16", "fp8", "int4", "fp4", None]),
    "kv": st.sampled_from(["bf16", "fp8", "x"]),
    "objective": st.sampled_from(["cost", "latency", "speed"]),
    **{name: NUMBERS for name in ("num_gpus", "prompt", "output", "concurrency", "alpha", "k", "prefix_hit",
                                  "price_per_gpu_hour")},
}


@FEW
@given(changes=st.fixed_dictionaries({}, optional=SIM_FIELDS))
def test_simulate_never_raises_and_never_shows_a_nan(changes):
    """Start from the saved deployment and change a few fields at once, to anything."""
    x = SimInputs(**changes)
    out = simulate(x)
    if not out.ok:
        assert out.error and "\n" not in out.error
        return
    for value in (out.ttft_ms, out.tpot_ms, out.throughput, out.usd_per_million, *out.gains.values()):
        assert math.isfinite(value) and value > 0
    assert 1 <= out.max_concurrency and x.concurrency <= out.max_concurrency


@FEW
@given(num_gpus=NUMBERS, weight_bytes=NUMBERS, kv_bytes=NUMBERS, mfu=NUMBERS, reserve=NUMBERS)
def test_deployment_is_valid_or_refused(num_gpus, weight_bytes, kv_bytes, mfu, reserve):
    try:
        dep = cost.Deployment.of("llama3-8b", "H100", num_gpus, weight_bytes=weight_bytes, kv_bytes=kv_bytes,
                                 mfu=mfu, reserve_GiB=reserve)
    except (ValueError, TypeError) as err:
        assert str(err)
        return
    assert math.isfinite(dep.flops) and dep.flops > 0 and dep.reserve_bytes >= 0
    try:
        budget = cost.kv_budget_bytes(dep)
    except cost.InfeasibleDeployment:
        return
    assert 0 < budget <= dep.memory_bytes


TOKENS = st.one_of(st.integers(-5, 10**7).map(str), st.floats(allow_nan=True, allow_infinity=True).map(str),
                   st.sampled_from(["", "x", "true", "1e3", "4096.9"]))


def _answer_or_one_line_error(code: int, captured) -> dict | None:
    """A command's JSON answer, or None after checking it refused with exit 2 and one line on stderr."""
    if code == 2:
        assert captured.err.startswith("error: ") and captured.err.count("\n") == 1
        return None
    assert code == 0
    return _strict_json(captured.out)


@FEW
@given(flags=st.dictionaries(st.sampled_from(["--gpus", "--context", "--batch", "--prompt", "--mfu", "--price"]),
                             TOKENS, max_size=3),
       model=st.sampled_from(["llama3-70b", "llama3-8b", "gpt2", "mistral-7b"]))
def test_deploy_cli_answers_or_exits_2_with_one_line(flags, model, capsys):
    argv = {"--model": model, "--gpu": "H100", "--gpus": "4", "--context": "2048", "--batch": "8", **flags}
    code = main(["deploy", *[x for kv in argv.items() for x in kv], "--json"])
    info = _answer_or_one_line_error(code, capsys.readouterr())
    if info is None:
        return
    assert info["tpot_ms"] > 0 and info["usd_per_million_tokens"] > 0


@FEW
@given(cfg=st.one_of(mutated_configs(), JSON_VALUES))
def test_model_cli_answers_in_strict_json_or_exits_2(cfg, tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code = main(["model", str(path), "--json"])
    info = _answer_or_one_line_error(code, capsys.readouterr())
    if info is None:
        return
    assert info["params"] > 0 and info["kv_bytes_per_token_bf16"] > 0


ENGINE_SIZES = st.one_of(st.integers(-1, 64), st.sampled_from([2.5, True, None, "8"]))


@FEW
@given(kwargs=st.fixed_dictionaries({}, optional={"num_blocks": ENGINE_SIZES, "block_size": ENGINE_SIZES,
                                                  "max_batch": ENGINE_SIZES, "k": ENGINE_SIZES,
                                                  "temperature": NUMBERS}),
       speculative=st.booleans())
def test_engine_constructors_check_their_arguments(tiny, kwargs, speculative):
    try:
        if speculative:
            engine = SpeculativeEngine(tiny, CFG, PromptLookupDrafter(), **kwargs)
        else:
            kwargs.pop("k", None)
            kwargs.pop("temperature", None)
            engine = Engine(tiny, CFG, **kwargs)
    except (ValueError, TypeError) as err:
        assert str(err)
        return
    # A valid engine serves a request that fits it, or refuses it up front with the reason.
    request = Request(0, (1, 2, 3), 3)
    try:
        out = engine.run([request]).outputs[0]
    except ValueError as err:
        assert "slots" in str(err)
        return
    if not speculative or engine.temperature == 0:
        assert out == generate(tiny, [1, 2, 3], 3)


@settings(max_examples=15, deadline=None)
@given(specs=st.lists(st.tuples(st.integers(-2, 3), st.lists(st.integers(-1, CFG.vocab_size), min_size=0, max_size=12),
                                st.one_of(st.integers(-1, 12), st.sampled_from([2.5, True]))), max_size=4),
       speculative=st.booleans())
def test_engines_refuse_up_front_or_answer_exactly(tiny, specs, speculative):
    try:
        requests = [Request(i, tuple(p), m) for i, p, m in specs]
    except ValueError as err:
        assert str(err)
        return
    engine = (SpeculativeEngine(tiny, CFG, PromptLookupDrafter(), k=2, num_blocks=16, block_size=BLOCK)
              if speculative else Engine(tiny, CFG, num_blocks=16, block_size=BLOCK))
    try:
        result = engine.run(requests)
    except ValueError as err:
        assert str(err)
        return
    for r in requests:
        assert result.outputs[r.id] == generate(tiny, list(r.prompt), r.max_tokens)


def test_inputs_helpers_refuse_bools_and_fractions():
    with pytest.raises(inputs.InputError, match="got True"):
        inputs.positive_int(True, "n")
    with pytest.raises(inputs.InputError, match="got 2.5"):
        inputs.positive_int(2.5, "n")
    with pytest.raises(inputs.InputError, match="got nan"):
        inputs.fraction(math.nan, "f")
    assert inputs.positive_int(3.0, "n") == 3
