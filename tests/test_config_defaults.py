"""The config reader's defaults against the transformers config classes they come from (issue 43).

``stage5.models.HF_DEFAULTS`` records, per family, what its transformers config class fills in when config.json
leaves a key out, for the keys the reader keeps a default for; every other key a model's size needs is required.
Three checks, each against the installed transformers (pinned in requirements.txt to ``models.HF_VERSION``):
the kept defaults equal the classes'; where the reader refuses instead, the class's default is a number that does
not follow the model (so using it would be a guess); and every real config the course ships, with any one key
removed, is either refused by a message naming that key or read to what transformers itself builds.
Only configuration classes are imported: no model, no weights.
"""

from __future__ import annotations

import importlib
import json
import math
from dataclasses import fields
from importlib.metadata import version
from pathlib import Path

import pytest

from stage5 import models
from stage5.models import CONFIG_DIR, FAMILIES, FOUR_X, HEADS, HF_DEFAULTS, SPLIT, ModelConfig

transformers = pytest.importorskip("transformers", reason="transformers is in requirements.txt (the reader's "
                                   "defaults are checked against its config classes)")
HF_CONFIGS = Path(__file__).parent / "data" / "hf_configs"
REAL = sorted([*CONFIG_DIR.glob("*.json"), *HF_CONFIGS.glob("*.json")])


def hf_class(model_type: str):
    module = importlib.import_module(f"transformers.models.{model_type}.configuration_{model_type}")
    return getattr(module, FAMILIES[model_type].hf_class)


def test_the_pinned_transformers_is_the_one_the_defaults_cite():
    assert version("transformers") == models.HF_VERSION


def _size(model_type: str, hidden: int, heads: int) -> dict:
    if model_type == "gpt2":
        return {"n_embd": hidden, "n_head": heads}
    return {"hidden_size": hidden, "num_attention_heads": heads}


def effective(c, key: str):
    """What the family's transformers code uses for ``key`` (a config attribute, or the rule its model applies
    when the attribute is unset)."""
    if key == "head_dim":  # LlamaConfig sets it; Qwen2Attention and others: getattr(config, "head_dim", h // n)
        return getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    if key == "n_inner":  # GPT2MLP: config.n_inner if not None else 4 * hidden_size
        return c.n_inner if c.n_inner is not None else 4 * c.n_embd
    if key == "rope_theta":  # transformers 5 keeps the rotary base in rope_parameters
        return c.rope_parameters["rope_theta"]
    return getattr(c, key)


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_kept_defaults_equal_the_transformers_class_defaults(model_type):
    hidden, heads = 512, 8
    c = hf_class(model_type)(**_size(model_type, hidden, heads))
    rules = {HEADS: heads, SPLIT: hidden // heads, FOUR_X: 4 * hidden}
    for key, ours in HF_DEFAULTS[model_type].items():
        ours = rules.get(ours, ours) if isinstance(ours, models._Rule) else ours
        if key == "sliding_window" and model_type.startswith("qwen"):
            # Qwen's classes store None unless use_sliding_window is set; the window itself is the signature's
            theirs = hf_class(model_type)(**_size(model_type, hidden, heads), use_sliding_window=True).sliding_window
        else:
            theirs = effective(c, key)
        assert theirs == ours, (model_type, key, theirs, ours)


# Keys the reader requires (no default), with the family's class default shown not to follow the model's size.
REQUIRED = {"intermediate_size": [t for t in FAMILIES if t != "gpt2"],
            "num_key_value_heads": [t for t in FAMILIES if "num_key_value_heads" not in HF_DEFAULTS[t] and t != "gpt2"],
            "head_dim": [t for t in FAMILIES if "head_dim" not in HF_DEFAULTS[t] and t not in models.MLA_FAMILIES]}


@pytest.mark.parametrize("key, model_type", [(k, t) for k, ts in REQUIRED.items() for t in ts])
def test_refused_keys_would_get_a_number_that_does_not_follow_the_model(key, model_type):
    small = hf_class(model_type)(**_size(model_type, 512, 8))
    large = hf_class(model_type)(**_size(model_type, 1024, 16))
    if key == "intermediate_size":
        assert small.intermediate_size == large.intermediate_size  # a constant, whatever the hidden size
    elif key == "num_key_value_heads":
        assert (small.num_key_value_heads, large.num_key_value_heads) != (8, 16)  # not "as many as the heads"
    else:
        assert small.head_dim != 64  # not hidden_size // num_attention_heads
    cfg = _small(model_type)
    cfg.pop(key)
    with pytest.raises(ValueError, match=f"gives no {key}; {FAMILIES[model_type].hf_class}"):
        ModelConfig.from_hf_config(cfg)


def _small(model_type: str) -> dict:
    """A small config.json of the family with every key the reader requires."""
    cfg = {"model_type": model_type, "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
           "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 1024, "vocab_size": 1000}
    moe = {"mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},
           "qwen2_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 256,
                         "shared_expert_intermediate_size": 512},
           "deepseek_v2": {"n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 256,
                           "n_shared_experts": 1, "q_lora_rank": None, "kv_lora_rank": 128, "qk_rope_head_dim": 32,
                           "qk_nope_head_dim": 64, "v_head_dim": 64}}
    moe["deepseek_v3"] = {**moe["deepseek_v2"], "first_k_dense_replace": 1}  # V3's class default (3) is required
    return {**cfg, **moe.get(model_type, {})}


# The ModelConfig field each defaulted key sets, and how transformers' value maps onto it.
FIELD_OF = {"num_key_value_heads": "num_kv_heads", "head_dim": "head_dim", "tie_word_embeddings": "tie_embeddings",
            "attention_bias": "qkv_bias", "qkv_bias": "qkv_bias", "max_position_embeddings": "max_position_embeddings",
            "n_positions": "max_position_embeddings", "rms_norm_eps": "norm_eps", "layer_norm_epsilon": "norm_eps",
            "rope_theta": "rope_theta", "sliding_window": "sliding_window", "n_inner": "intermediate_size",
            "first_k_dense_replace": "dense_layers"}


def _read(cfg: dict, name: str) -> ModelConfig:
    return ModelConfig.from_hf_config(cfg, name=name)


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.stem)
def test_a_real_config_missing_any_one_key_is_refused_by_name_or_read_as_transformers_builds_it(path):
    cfg = json.loads(path.read_text())
    full = _read(cfg, path.stem)
    checked = 0
    for key in [k for k in cfg if not k.startswith("_") and k != "model_type"]:
        dropped = {k: v for k, v in cfg.items() if k != key}
        try:
            got = _read(dropped, path.stem)
        except ValueError as err:
            assert key in str(err) and "\n" not in str(err), (key, str(err))
            continue
        theirs = transformers.AutoConfig.for_model(**{k: v for k, v in dropped.items() if not k.startswith("_")})
        if key in FIELD_OF:
            expected = effective(theirs, key)
            if key == "sliding_window":
                expected = expected if expected and expected < got.max_position_embeddings else 0
            if key == "n_positions" and "n_ctx" in dropped:
                expected = dropped["n_ctx"]
            scaling = dropped.get("rope_scaling") or {}
            if (key == "max_position_embeddings" and scaling.get("rope_type", scaling.get("type")) == "yarn"
                    and "original_max_position_embeddings" in scaling):
                # The field is the context served, by vLLM's YaRN rule (factor x original), which needs no
                # max_position_embeddings: transformers' class default (2,048) is not what an engine serves.
                expected = int(scaling["original_max_position_embeddings"] * scaling["factor"])
            actual = getattr(got, FIELD_OF[key])
            assert actual == expected or math.isclose(actual, expected), (key, actual, expected)
            checked += 1
            others = [f.name for f in fields(ModelConfig) if f.name not in (FIELD_OF[key], "learned_positions")]
        else:
            others = [f.name for f in fields(ModelConfig)]
        assert [f for f in others if getattr(got, f) != getattr(full, f)] == [], key  # nothing else moved
    assert checked or path.stem == "gpt2"


@pytest.mark.parametrize("model_type, context", [("llama", 2048), ("mistral", 131072), ("mixtral", 131072),
                                                 ("qwen2", 32768), ("qwen3", 32768), ("phi3", 4096),
                                                 ("gemma", 8192), ("gemma2", 8192)])
def test_a_config_without_a_context_gets_its_own_familys_limit(model_type, context):
    cfg = _small(model_type)
    assert ModelConfig.from_hf_config(cfg).max_position_embeddings == context
    assert hf_class(model_type)().max_position_embeddings == context


def test_an_explicit_null_means_what_the_family_code_makes_of_it():
    lite = json.loads((CONFIG_DIR / "deepseek-v2-lite.json").read_text())
    assert lite["q_lora_rank"] is None and ModelConfig.from_hf_config(lite).q_lora_rank == 0  # no query LoRA
    no_key = {k: v for k, v in lite.items() if k != "q_lora_rank"}
    assert hf_class("deepseek_v2")().q_lora_rank == 1536  # absent, the class would use DeepSeek-V2's 1536
    with pytest.raises(ValueError, match="gives no q_lora_rank"):
        ModelConfig.from_hf_config(no_key)
    mistral = json.loads((CONFIG_DIR / "mistral-7b.json").read_text())
    assert ModelConfig.from_hf_config({**mistral, "sliding_window": None}).sliding_window == 0  # v0.2: no window
    assert ModelConfig.from_hf_config({k: v for k, v in mistral.items() if k != "sliding_window"}).sliding_window \
        == 4096  # absent: MistralConfig's 4096


def test_a_string_that_spells_a_rule_is_not_a_rule():
    cfg = {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
           "intermediate_size": 1024, "vocab_size": 1000, "num_key_value_heads": str(HEADS)}
    with pytest.raises(ValueError, match="num_key_value_heads must be an integer"):
        ModelConfig.from_hf_config(cfg)
