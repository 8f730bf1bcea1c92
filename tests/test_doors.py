"""The doors into the package: every public entry point, fed bad input, gives a clear error or a correct answer.

Two halves. First, each reproduction from the issue that found the holes ("inputs that cannot produce a silent
wrong number"), one test each. Then property tests: hypothesis generates bad and odd inputs for the config
reader, the CLI, ``simulate``, ``Deployment`` and the engines, and every answer must be either a one-line
error of the documented kind or a finite, correct result. Kept cheap: few examples, no deadline.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
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
    with pytest.raises(ValueError, match="at least 1"):  # a fraction of one labelled request overflowed the bound
        routing.simulate_router(eval_size=1e-320)


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


# ================================================================ the doors added with the calibration and the load bench
# Issue 31. Every case runs under a generous hang guard (a hang is a failure, never a stuck suite); nothing
# here asserts on how fast anything ran.
import argparse  # noqa: E402
import functools  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from stage5 import calibrate as cal_mod  # noqa: E402
from stage5 import calibration, cli, quantization  # noqa: E402
from stage5.bench_simulator import main as bench_simulator_main  # noqa: E402
from stage5.engine.clock import VirtualClock, WallClock  # noqa: E402
from stage5.engine.kv import ContiguousAllocator, KVPool, PagedAllocator  # noqa: E402
from stage5.engine.roofline_toy import ROOFLINE_TOY  # noqa: E402
from stage5.inputs import InputError, OneLineParser  # noqa: E402
from stage5.simulator import Simulator  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


class Hang(Exception):
    """A case ran past its guard: a hang, reported as a failure."""


def no_hang(seconds: float = 120.0):
    """Run each call (each hypothesis example) under a wall-clock guard far above its CPU cost."""
    def deco(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            def alarm(signum, frame):
                raise Hang(f"{fn.__name__} ran past {seconds:g} s: a hang")
            old = signal.signal(signal.SIGALRM, alarm)
            signal.setitimer(signal.ITIMER_REAL, seconds)
            try:
                return fn(*args, **kwargs)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, old)
        return run
    return deco


GOOD_CAL = calibration.Calibration(machine="test", threads=1, bandwidth=20e9, rows=(1, 4, 16, 64, 256),
                                   rates=(10e9, 25e9, 60e9, 90e9, 100e9), overhead_step_s=5e-4,
                                   overhead_seq_s=5e-5, model=ROOFLINE_TOY.name)
GOOD_DICT = json.loads(GOOD_CAL.to_json())

# (what is done to a valid cache, the field the one-line warning must name)
HOSTILE_CACHES = [
    ({"bandwidth": math.nan}, "bandwidth"), ({"bandwidth": 0}, "bandwidth"),
    ({"bandwidth": -20e9}, "bandwidth"), ({"rates": [0, 0, 0, 0, 0]}, "rates"),
    ({"overhead_step_s": -1}, "overhead_step_s"), ({"overhead_step_s": math.inf}, "overhead_step_s"),
    ({"rows": "abc"}, "rows"), ({"rows": [1, 4, 16]}, "rows"), ({"rows": [1, 4, 4, 64, 256]}, "increasing"),
    ({"rates": [1e9, "x", 1e9, 1e9, 1e9]}, "rates"), ({"threads": True}, "threads"), ({"machine": 7}, "machine"),
    ({"bandwidth": 1e300}, "bandwidth"), ({"extra": 1}, "extra"), ({"model": None}, "model"),
]


def _write_cache(path: Path, change: dict | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(change, str):
        path.write_text(change)
    else:
        path.write_text(json.dumps({**GOOD_DICT, **change}))  # json writes NaN/Infinity, as an editor might


@pytest.fixture
def hostile_home(tmp_path, monkeypatch):
    """A private cache folder, and measuring replaced by the made-up machine (no seconds of timing)."""
    monkeypatch.setenv("STAGE5_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cal_mod, "measure", lambda cfg: GOOD_CAL)
    return tmp_path


@pytest.mark.parametrize("change, field", HOSTILE_CACHES)
@no_hang(60)
def test_a_hostile_cache_is_set_aside_and_measured_again(change, field, hostile_home, capsys):
    path = cal_mod.cache_path(ROOFLINE_TOY)
    _write_cache(path, change)
    assert cal_mod.calibrate(ROOFLINE_TOY) == GOOD_CAL  # re-measured, never used
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and field in err and "Traceback" not in err, err
    assert path.with_name(path.name + ".invalid").exists()  # set aside for inspection
    assert calibration.read_cache(path) == GOOD_CAL  # the fresh measurement was written in its place


@pytest.mark.parametrize("text", ["{not json", "[]", "", "\xff", "[" * 10_000, "1" * 70_000])
@no_hang(60)
def test_a_damaged_cache_file_is_one_line(text, hostile_home, capsys):
    path = cal_mod.cache_path(ROOFLINE_TOY)
    _write_cache(path, text)
    assert cal_mod.calibrate(ROOFLINE_TOY) == GOOD_CAL
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("where", ["cache_path_is_a_directory", "cache_dir_is_a_file", "cache_dir_unwritable"])
@no_hang(60)
def test_a_cache_that_cannot_be_written_is_kept_in_memory(where, hostile_home, monkeypatch, capsys):
    if where == "cache_path_is_a_directory":
        cal_mod.cache_path(ROOFLINE_TOY).mkdir(parents=True)
    elif where == "cache_dir_is_a_file":
        (hostile_home / "file").write_text("x")
        monkeypatch.setenv("STAGE5_CACHE_DIR", str(hostile_home / "file"))
    else:  # even root cannot create a folder in /proc
        monkeypatch.setenv("STAGE5_CACHE_DIR", "/proc/stage5-cache-test")
    assert cal_mod.calibrate(ROOFLINE_TOY) == GOOD_CAL
    err = capsys.readouterr().err
    assert err.count("\n") <= 2 and "cannot save the calibration" in err and "Traceback" not in err, err
    assert not list(hostile_home.rglob("*.tmp"))  # no half-written file left behind


CAL_FIELDS = st.one_of(JSON_SCALARS, st.lists(JSON_SCALARS, max_size=6),
                       st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=5, max_size=5))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.dictionaries(st.sampled_from([*GOOD_DICT, "bogus"]), CAL_FIELDS, min_size=1, max_size=3))
@no_hang(30)
def test_reading_any_cache_gives_a_valid_record_or_none(changes, tmp_path):
    path = tmp_path / f"calibration-{abs(hash(repr(changes)))}.json"
    path.write_text(json.dumps({**GOOD_DICT, **changes}))
    cal = calibration.read_cache(path)
    if cal is None:
        return
    assert math.isfinite(cal.bandwidth) and cal.bandwidth > 0 and cal.overhead_step_s >= 0
    assert len(cal.rows) == len(cal.rates) and all(r > 0 and math.isfinite(r) for r in cal.rates)
    assert list(cal.rows) == sorted(set(cal.rows))
    step = float(__import__("stage5.step_model", fromlist=["x"]).predict_step(cal, ROOFLINE_TOY, 4, 100).time_s)
    assert math.isfinite(step) and step > 0


# ---------------------------------------------------------------- every --json command, under a hostile cache
JSON_COMMANDS = [
    ["calibrate", "--json"],
    ["bench", "load", "--requests", "3", "--no-wall", "--rates", "1", "--json"],
    ["bench", "roofline", "--rounds", "1", "--json"],
    ["validate", "--json"],
    ["model", "mistral-7b", "--json"],
    ["deploy", "--model", "llama3-8b", "--gpu", "H100", "--context", "4096", "--batch", "8", "--json"],
]


def test_every_json_print_goes_through_the_strict_encoder():
    """Every JSON a command prints is encoded with allow_nan=False (inputs.dumps): a source scan, so a new
    --json command that forgets it fails here."""
    offenders = []
    for path in (REPO / "stage5").rglob("*.py"):
        text = path.read_text()
        for i, line in enumerate(text.splitlines(), 1):
            if "json.dumps(" in line and "allow_nan=False" not in line and path.name != "inputs.py":
                offenders.append(f"{path.relative_to(REPO)}:{i}")
    allowed = {"stage5/engine/checkpoints.py"}  # writes the trained models' configs, never a user's number
    assert [o for o in offenders if o.split(":")[0] not in allowed and "/grading/" not in o] == []


@pytest.mark.parametrize("argv", JSON_COMMANDS, ids=lambda a: " ".join(a[:2]))
@no_hang(300)
def test_json_commands_print_strict_json_under_a_hostile_cache(argv, hostile_home, monkeypatch, capsys):
    """The cache holds NaN bandwidth (the case that made bench load loop forever): every command answers in
    strict JSON, or refuses in one line."""
    _write_cache(cal_mod.cache_path(ROOFLINE_TOY), {"bandwidth": math.nan, "rates": [0] * 5})
    if argv[:2] == ["bench", "roofline"]:  # the timing loop is not the door under test: feed it made-up steps
        from stage5.engine import bench_roofline
        monkeypatch.setattr("stage5.engine.roofline_toy.load_roofline_toy", lambda: (None, ROOFLINE_TOY))
        monkeypatch.setattr(bench_roofline, "measure_decode_steps", lambda *a, **k: (
            {b: 1e-3 * (1 + b / 32) for b in bench_roofline.BATCHES}, {b: 8.0 for b in bench_roofline.BATCHES}))
    code = main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    if code == 2:
        assert captured.err.startswith("error: ") and captured.err.count("\n") == 1
        return
    assert code == 0
    _strict_json(captured.out)


def test_a_non_finite_result_is_one_line_not_json_nan():
    with pytest.raises(InputError, match=r"non-finite number at engines\.a\[1\]"):
        inputs.dumps({"engines": {"a": [1.0, math.nan]}})


# ---------------------------------------------------------------- flags: one parser, physical bounds
@pytest.mark.parametrize("argv", [
    ["bench", "roofline", "--bogus"], ["bench", "roofline", "--rounds", "0"], ["bench", "roofline", "--rounds", "abc"],
    ["bench", "roofline", "--rounds", "100000"], ["validate", "--bogus"], ["calibrate", "--bogus"],
    ["bench", "load", "--rates", "1e-300"], ["bench", "load", "--rates", "5e-324"], ["bench", "load", "--rates", "nan"],
    ["bench", "load", "--requests", "1000000"], ["bench", "--threads", "100000"], ["bench", "spec", "--k", "1000"],
    ["bench", "prefix", "--scale", "1e-320"],
    ["deploy", "--model", "llama3-8b", "--gpu", "H100", "--context", "4096", "--batch", "8", "--gpus", str(10**30)],
    ["deploy", "--model", "llama3-8b", "--gpu", "H100", "--context", "4096", "--batch", "8", "--gpus", "1000000"],
    ["deploy", "--model", "llama3-8b", "--gpu", "H100", "--context", "4096", "--batch", "8", "--mfu", "1e-320"],
    ["deploy", "--model", "llama3-8b", "--gpu", "H100", "--context", "10", "--batch", "8", "--prompt", "5000"],
    ["deploy", "--model", "llama3-8b", "--gpu", "H100", "--context", "4096", "--batch", "8", "--price", "1e9"],
])
@no_hang(60)
def test_bad_flags_of_the_new_doors_exit_2_with_one_line(argv, capsys):
    assert main(argv) == 2
    _one_line_error(capsys)


@no_hang(60)
def test_bench_simulator_repeats_are_checked(capsys):
    for bad in ("0", "abc", "100000"):
        with pytest.raises(SystemExit) as stop:
            bench_simulator_main(["--repeats", bad])
        assert stop.value.code == 2
        _one_line_error(capsys)


def test_the_bounds_are_stated_in_the_message(capsys):
    assert main(["deploy", "--model", "llama3-8b", "--gpu", "H100", "--context", "4096", "--batch", "8",
                 "--gpus", "1000000"]) == 2
    assert "<= 72" in (err := _one_line_error(capsys)) and "NVL72" in err
    assert main(["bench", "load", "--rates", "1e-300"]) == 2
    assert "[0.001, 1e+06]" in _one_line_error(capsys)


def test_the_refusal_honours_the_sliding_window(capsys):
    """Mistral-7B on an L4 at 32,768 tokens: its 4,096-token window caps each sequence at 0.5 GiB, so six
    sequences need 3.0 GiB (not 24.0 GiB as if every token were kept)."""
    assert main(["deploy", "--model", "mistral-7b", "--gpu", "L4", "--context", "32768", "--batch", "6"]) == 2
    err = _one_line_error(capsys)
    assert "needs 3.0 GiB" in err and "4,096-token sliding window" in err


FLAG_BOUNDS = {"blocks": 2**20, "requests": 10_000, "rounds": 1_000, "threads": os.cpu_count() or 1, "k": 64, "max_k": 64,
               "max_batch": 4096, "block_size": 4096}


class _Parsed(Exception):
    """Raised instead of running a benchmark once its flags have parsed."""


BENCH_FLAGS = {
    ("bench",): ["--requests", "--seed", "--blocks", "--block-size", "--max-batch", "--threads"],
    ("bench", "load"): ["--requests", "--seed", "--rates"],
    ("bench", "roofline"): ["--rounds"],
    ("bench", "spec"): ["--requests", "--k", "--max-k", "--max-batch", "--threads"],
    ("bench", "prefix"): ["--seed", "--scale", "--threads"],
    ("calibrate",): [], ("validate",): [],
}


@st.composite
def bench_argv(draw) -> list[str]:
    command = draw(st.sampled_from(sorted(BENCH_FLAGS)))
    flags = draw(st.lists(st.sampled_from([*BENCH_FLAGS[command], "--bogus"]), max_size=3, unique=True))
    argv = list(command)
    for flag in flags:
        argv.append(flag)
        if flag == "--rates":
            argv.append(",".join(draw(st.lists(TOKENS, min_size=1, max_size=3))))
        elif flag != "--bogus":
            argv.append(draw(TOKENS))
    return argv


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=bench_argv())
@no_hang(30)
def test_every_bench_flag_parses_within_bounds_or_exits_2(argv, monkeypatch, capsys):
    """A flag either parses to a finite value within its stated bounds (the run itself is stopped there), or
    the command exits 2 with one line."""
    def parse_then_stop(self, args=None, namespace=None):
        raise _Parsed(argparse.ArgumentParser.parse_args(self, args, namespace))  # the real parse, then stop
    with monkeypatch.context() as m:
        m.setattr(OneLineParser, "parse_args", parse_then_stop)
        try:
            code = main(argv)
        except _Parsed as parsed:
            for name, value in vars(parsed.args[0]).items():
                if name == "rates":
                    assert all(1e-3 <= r <= 1e6 for r in value)
                elif isinstance(value, float):
                    assert math.isfinite(value) and 0.01 <= value <= 100, (name, value)  # --scale
                elif isinstance(value, int) and not isinstance(value, bool):
                    assert 0 <= value <= FLAG_BOUNDS.get(name, inputs.MAX_COUNT), (name, value)
            return
    assert code == 2
    _one_line_error(capsys)


# ---------------------------------------------------------------- reading a config is bounded
@no_hang(60)
def test_model_refuses_deep_nesting_devices_and_fifos_in_one_line(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    fifo = tmp_path / "x.json"
    os.mkfifo(fifo)
    big = tmp_path / "big.json"
    big.write_text(" " * (2**20 + 1))
    for path, words in ((deep, "nests more than"), ("/dev/zero", "not a regular file"), (fifo, "not a regular file"),
                        (big, "at most 1,048,576 bytes")):
        assert main(["model", str(path)]) == 2
        assert words in _one_line_error(capsys)


@no_hang(120)
def test_a_closed_pipe_ends_quietly():
    """`python -m stage5 model X | head -1`: the reader is gone before the output is written."""
    proc = subprocess.Popen([sys.executable, "-m", "stage5", "model", "llama3-8b"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)})
    proc.stdout.close()  # before the child has imported anything, so its first write meets a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=100) == 141 and "Traceback" not in err and "BrokenPipe" not in err, err


# ---------------------------------------------------------------- layering: the cost layer never imports torch
def test_the_cost_layer_and_the_calibration_record_import_no_torch():
    code = ("import sys, stage5.calibrate, stage5.calibration, stage5.cost, stage5.step_model, stage5.cli; "
            "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'stage5.engine'))); "
            "print(bad[:5]); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stdout + done.stderr


# ---------------------------------------------------------------- arithmetic that cannot vanish
def test_a_step_that_would_vanish_on_the_clock_is_refused():
    clock = WallClock()
    clock.wait_until(1e300)  # an arrival at a rate of 1e-300 requests/s
    with pytest.raises(InputError, match="vanishes"):
        clock.step(1, 1, 1, 1e-3)
    with pytest.raises(InputError, match="finite"):
        WallClock().wait_until(math.nan)
    virtual = VirtualClock(GOOD_CAL, ROOFLINE_TOY)
    assert virtual.step(2, 2, 20, 0.0) > 0


# ---------------------------------------------------------------- the library's public functions
DEP = cost.Deployment.of("llama3-8b", "H100", 1)
PUBLIC = {  # name -> (function, valid keyword arguments)
    "cost.decode_intensity": (cost.decode_intensity, {"batch": 4, "bytes_per_param": 2.0}),
    "cost.ridge_point": (lambda **k: cost.ridge_point(DEP.gpu, **k), {"bytes_per_param": 2.0}),
    "cost.experts_touched": (cost.experts_touched, {"num_experts": 8, "experts_per_token": 2, "tokens": 4}),
    "cost.decode_intensity_with_kv": (lambda **k: cost.decode_intensity_with_kv(DEP, **k), {"batch": 4, "context": 1024}),
    "cost.attention_flops": (lambda **k: cost.attention_flops(DEP.model, **k), {"new_tokens": 4, "cached": 10}),
    "cost.kv_traffic_bytes": (lambda **k: cost.kv_traffic_bytes(DEP, **k), {"batch": 4, "context": 1024}),
    "cost.decode_step": (lambda **k: cost.decode_step(DEP, **k).time_s, {"batch": 4, "context": 1024,
                                                                          "tokens_per_seq": 1}),
    "cost.kv_bytes_per_sequence": (lambda **k: cost.kv_bytes_per_sequence(DEP, **k), {"context": 1024}),
    "cost.max_concurrency": (lambda **k: cost.max_concurrency(DEP, **k), {"context": 1024}),
    "cost.price_per_s": (lambda **k: cost.price_per_s(DEP, **k), {"price_per_gpu_hour": 3.0}),
    "cost.cost_terms": (lambda **k: cost.cost_terms(DEP, **k).dollars_per_million,
                        {"batch": 4, "context": 1024, "tokens_per_seq": 1.0, "price_per_gpu_hour": 3.0}),
    "cost.cost_per_million_tokens": (lambda **k: cost.cost_per_million_tokens(DEP, **k),
                                     {"batch": 4, "context": 1024, "price_per_gpu_hour": 3.0}),
    "cost.request_gpu_seconds": (lambda **k: cost.request_gpu_seconds(DEP, **k),
                                 {"prompt_tokens": 1024, "output_tokens": 128, "batch": 1, "prefix_hit": 0.0}),
    "quantization.end_to_end_gain": (lambda **k: quantization.end_to_end_gain("llama3-8b", "H100", **k),
                                     {"num_gpus": 1, "prompt": 1024, "output": 128, "batch": 4}),
    "quantization.decode_step_gain": (lambda **k: quantization.decode_step_gain("llama3-8b", "H100", **k),
                                      {"num_gpus": 1, "batch": 4, "context": 1024}),
    "routing.blended_saving": (routing.blended_saving, {"routed_share": 0.5, "ratio": 0.1}),
    "levers.dollars_per_million": (lambda **k: levers.dollars_per_million(DEP, **k),
                                   {"prompt": 1024, "output": 128, "concurrency": 4, "prefix_hit": 0.0,
                                    "decode_speedup": 1.0, "price_per_gpu_hour": 3.0}),
    "levers.latency_s": (lambda **k: levers.latency_s(DEP, **k),
                         {"prompt": 1024, "output": 128, "concurrency": 4, "decode_speedup": 1.0}),
    "levers.naive_batch": (lambda **k: levers.naive_batch(DEP, **k), {"occupancy": 0.5}),
    "levers.max_batch_within_slo": (lambda **k: levers.max_batch_within_slo(DEP, **k),
                                    {"context": 1024, "limit": 64, "tpot_slo_s": 0.05}),
    "long_context.score_matrix_bytes": (lambda **k: __import__("stage5.long_context", fromlist=["x"])
                                        .score_matrix_bytes(DEP.model, **k), {"prompt": 1024, "bytes_per_element": 2.0}),
    "long_context.kv_transfer_s": (lambda **k: __import__("stage5.long_context", fromlist=["x"])
                                   .kv_transfer_s(DEP, **k), {"prompt": 1024, "link_bytes_per_s": 5e10}),
    "cli.diagnose_deployment": (lambda **k: cli.diagnose_deployment(DEP, **k)["usd_per_million_tokens"],
                                {"context": 1024, "batch": 4, "price": 3.0}),
}
BAD_NUMBERS = st.one_of(NUMBERS, st.sampled_from([-3, -4, 0, 1e-320, 5e-324, 10**30, -math.inf]))


@pytest.mark.parametrize("call, expected", [
    (lambda: cost.cost_per_million_tokens(DEP, 4, 1024, -3), "price_per_gpu_hour"),
    (lambda: cost.decode_intensity(-4), "batch"),
    (lambda: quantization.end_to_end_gain("llama3-8b", "H100", 1, 1024, 128, 10**6), "does not fit"),
    (lambda: routing.blended_saving(1.0, ratio=0), "ratio"),
    (lambda: cli.diagnose_deployment(DEP, 1024, 4, price=-1), "price"),
])
def test_the_issues_public_function_probes_raise_one_sentence(call, expected):
    with pytest.raises(ValueError, match=expected) as err:
        call()
    assert "\n" not in str(err.value)


@settings(max_examples=120, deadline=None)
@given(name=st.sampled_from(sorted(PUBLIC)), data=st.data())
@no_hang(30)
def test_public_functions_answer_finite_or_refuse_in_one_sentence(name, data):
    fn, kwargs = PUBLIC[name]
    changed = data.draw(st.lists(st.sampled_from(sorted(kwargs)), min_size=1, max_size=2, unique=True))
    kwargs = {**kwargs, **{k: data.draw(BAD_NUMBERS, label=k) for k in changed}}
    try:
        out = fn(**kwargs)
    except (ValueError, TypeError) as err:
        assert str(err) and "\n" not in str(err)
        return
    values = np.asarray(out, dtype=float)
    assert np.all(np.isfinite(values)) and np.all(values >= 0), (name, kwargs, out)


# ---------------------------------------------------------------- the simulator widget
@pytest.fixture(scope="module")
def sim():
    return Simulator()


@pytest.mark.parametrize("change, words", [({"prompt": -5}, "prompt must be in [1,"), ({"num_gpus": 0}, "num_gpus"),
                                           ({"gpu": "nope"}, "gpu must be one of")])
def test_the_widget_refuses_rather_than_clamps(sim, change, words):
    before = sim.inputs
    with pytest.raises(ValueError, match=re.escape(words)):
        sim.set(**change)
    assert sim.inputs == before  # nothing was clamped behind the learner's back


SIM_VALUES = st.one_of(NUMBERS, st.text(max_size=6), st.sampled_from(["H200", "fp8", "llama3-8b", "latency", 4096]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["prompt", "output", "concurrency", "num_gpus", "alpha", "k", "prefix_hit", "gpu",
                             "weights", "kv", "price_per_gpu_hour", "objective"]), value=SIM_VALUES)
@no_hang(60)
def test_widget_set_shows_exactly_what_was_set_or_refuses(sim, name, value):
    try:
        sim.set(**{name: value})
    except ValueError as err:
        assert str(err) and "\n" not in str(err)
        return
    assert sim.controls[name].value == value  # shown as given, never clamped


# ---------------------------------------------------------------- the engine's parts check their sizes
@pytest.mark.parametrize("build, words", [
    (lambda m: Engine(m, CFG, num_blocks=10**13), "GiB"), (lambda m: Engine(m, CFG, num_blocks=2**62), "2**53"),
    (lambda m: Engine(m, CFG, block_size=10**12), "would take"), (lambda m: PagedAllocator(4, -1), "block_size"),
    (lambda m: KVPool(CFG, -5, torch.float32), "num_slots"), (lambda m: DraftModelDrafter(m, CFG, num_blocks=0),
                                                              "num_blocks"),
    (lambda m: KVPool(CFG, 10**13, torch.float32), "this machine has"),
])
@no_hang(60)
def test_the_engines_parts_refuse_impossible_sizes(tiny, build, words):
    with pytest.raises(ValueError, match=re.escape(words)) as err:
        build(tiny)
    assert "\n" not in str(err.value)


SIZES = st.one_of(st.integers(-3, 64), st.sampled_from([2**62, 10**13, 10**12, 2.5, True, None, "8", math.nan]))


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(["paged", "contiguous", "pool", "engine", "draft"]), a=SIZES, b=SIZES)
@no_hang(30)
def test_allocators_and_pools_are_built_small_or_refused(tiny, kind, a, b):
    try:
        if kind == "paged":
            made = PagedAllocator(a, b)
            assert made.blocks_for(5) >= 1 and made.num_free == a
        elif kind == "contiguous":
            made = ContiguousAllocator(a)
            assert made.num_free_slots == a
        elif kind == "pool":
            made = KVPool(CFG, a, torch.float32)
            assert made.nbytes == a * CFG.kv_bytes_per_token(4)
        elif kind == "engine":
            Engine(tiny, CFG, num_blocks=a, block_size=b)
        else:
            DraftModelDrafter(tiny, CFG, num_blocks=a, block_size=b)
    except (ValueError, TypeError) as err:
        assert str(err) and "\n" not in str(err)


def test_a_count_past_int64_is_refused_not_wrapped():
    """A billion billion GPUs: max_concurrency would wrap int64 to a negative number. Tensor parallelism's rule
    (the degree divides the heads) now refuses such a count first; either way the answer is one sentence."""
    with pytest.raises(ValueError, match="cannot be split|past 2\\*\\*53|at most 2\\*\\*53"):
        cost.max_concurrency(cost.Deployment.of("llama3-8b", "H100", 2**60), 1)
    assert int(cost.max_concurrency(cost.Deployment.of("llama3-8b", "H100", 32), 1)) > 0
