"""Model configs: parameter counts against the published ones, KV bytes, and config.json variations."""

import json
import re
from pathlib import Path

import pytest

from stage5.models import CONFIG_DIR, MODELLED, ModelConfig, UnsupportedArchitecture, get_model, model_names
from stage5.names import UnknownNameError

# Published parameter counts: the safetensors totals shown on each model's Hugging Face page
# (the "Model size" field), which count every tensor in the checkpoint.
PUBLISHED = {
    "llama3-8b": 8_030_261_248,
    "llama3-70b": 70_553_706_496,
    "llama3.1-405b": 405_853_388_800,
    "llama3.2-1b": 1_235_814_400,
    "llama3.2-3b": 3_212_749_824,
    "mistral-7b": 7_241_732_096,
    "qwen2.5-7b": 7_615_616_512,
    "qwen2.5-72b": 72_706_203_648,
    "mixtral-8x7b": 46_702_792_704,
    "gpt2": 124_439_808,
    "deepseek-v2-lite": 15.7e9,  # its model card's "15.7B" (the small MLA model in the registry: chapter 12)
    # DeepSeek-V3 README: "671B of the Main Model weights and 14B of the Multi-Token Prediction (MTP) Module
    # weights"; the reader counts the main model (chapter 13)
    "deepseek-v3": 671e9,
}


def test_registry_is_the_published_set():
    assert set(model_names()) == set(PUBLISHED)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_param_count_matches_published_within_half_a_percent(name):
    assert get_model(name).num_params == pytest.approx(PUBLISHED[name], rel=0.005)


def test_every_registry_config_cites_its_source():
    for path in CONFIG_DIR.glob("*.json"):
        assert json.loads(path.read_text())["_source"].startswith("https://huggingface.co/"), path


def test_llama3_70b_kv_bytes_per_token_is_320_kib():
    assert get_model("llama3-70b").kv_bytes_per_token(2) == 2 * 80 * 8 * 128 * 2 == 320 * 1024


def test_kv_bytes_scale_with_element_width():
    m = get_model("llama3-8b")
    assert m.kv_bytes_per_token(1) == m.kv_bytes_per_token(2) / 2


def test_mixtral_active_params_are_two_experts_of_eight():
    m = get_model("mixtral-8x7b")
    # Mixtral's model card: 46.7B total, 12.9B active per token.
    assert m.num_params == pytest.approx(46.7e9, rel=0.005)
    assert m.active_params == pytest.approx(12.9e9, rel=0.005)


def test_dense_models_have_all_params_active():
    m = get_model("llama3-70b")
    assert m.active_params == m.num_params


def _llama_like(**overrides):
    cfg = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 2,
           "num_attention_heads": 8, "vocab_size": 1000}
    cfg.update(overrides)
    return cfg


def test_missing_kv_heads_means_multi_head_attention():
    m = ModelConfig.from_hf_config(_llama_like())
    assert m.num_kv_heads == m.num_heads == 8


def test_multi_query_is_refused_by_name_one_kv_head_is_num_key_value_heads():
    """multi_query is Falcon's and GPTBigCode's switch; LlamaConfig has no such key and the llama code ignores it,
    so a llama config with multi_query and 8 KV heads is refused (issue 43), never priced with one KV head."""
    with pytest.raises(UnsupportedArchitecture, match="multi_query is not a llama key"):
        ModelConfig.from_hf_config(_llama_like(multi_query=True, num_key_value_heads=8))
    m = ModelConfig.from_hf_config(_llama_like(num_key_value_heads=1, multi_query=False))
    assert m.num_kv_heads == 1
    assert m.kv_bytes_per_token(2) == 2 * 2 * 1 * 64 * 2


def test_explicit_head_dim_overrides_hidden_over_heads():
    m = ModelConfig.from_hf_config(_llama_like(head_dim=128))
    assert m.head_dim == 128
    # q and o projections are 512 x (8 x 128) now, not 512 x 512.
    plain = ModelConfig.from_hf_config(_llama_like())
    assert m.num_params - plain.num_params == 2 * 2 * 512 * 8 * 64 + 2 * 2 * 512 * 8 * 64


def test_tied_embeddings_drop_the_output_head():
    tied = ModelConfig.from_hf_config(_llama_like(tie_word_embeddings=True))
    untied = ModelConfig.from_hf_config(_llama_like(tie_word_embeddings=False))
    assert untied.num_params - tied.num_params == 1000 * 512


def test_qwen2_gets_qkv_bias_without_being_told():
    m = ModelConfig.from_hf_config(_llama_like(model_type="qwen2", num_key_value_heads=2))
    no_bias = ModelConfig.from_hf_config(_llama_like(num_key_value_heads=2))
    assert m.qkv_bias and not no_bias.qkv_bias
    assert m.num_params - no_bias.num_params == 2 * (512 + 2 * 2 * 64)


def test_kv_heads_must_divide_heads():
    with pytest.raises(ValueError, match="must divide num_heads"):
        ModelConfig.from_hf_config(_llama_like(num_key_value_heads=3))


def test_missing_required_key_names_the_keys():
    cfg = _llama_like()
    del cfg["vocab_size"]
    with pytest.raises(ValueError, match="vocab_size"):
        ModelConfig.from_hf_config(cfg)


def test_unknown_model_lists_close_matches():
    with pytest.raises(UnknownNameError, match="llama3-70b"):
        get_model("llama-3-70")


def test_lookup_forgives_case_and_punctuation():
    assert get_model("Llama3_70B") is get_model("llama3-70b")


# ---------------------------------------------------------------- families beyond the registry
HF_CONFIGS = Path(__file__).parent / "data" / "hf_configs"
# Published totals: the safetensors parameter count on each model's Hugging Face page, or the model card's
# figure where that is all the publisher gives (Qwen1.5-MoE-A2.7B: "14.3B" total). DeepSeek-V2-Lite is in the
# registry (stage5/configs), so PUBLISHED above checks it.
PUBLISHED_FAMILIES = {
    "qwen3-8b": 8_190_735_360,
    "gemma-2b": 2_506_172_416,
    "gemma-2-9b": 9_241_705_984,
    "phi-3-mini-4k-instruct": 3_821_079_552,
    "qwen1.5-moe-a2.7b": 14.3e9,
}


def _family(name: str) -> ModelConfig:
    return ModelConfig.from_json_file(HF_CONFIGS / f"{name}.json")


def test_every_family_config_cites_its_source():
    for path in HF_CONFIGS.glob("*.json"):
        assert json.loads(path.read_text())["_source"].startswith("https://huggingface.co/"), path
    assert {p.stem for p in HF_CONFIGS.glob("*.json")} == set(PUBLISHED_FAMILIES)


@pytest.mark.parametrize("name", sorted(PUBLISHED_FAMILIES))
def test_family_param_count_matches_published_within_half_a_percent(name):
    assert _family(name).num_params == pytest.approx(PUBLISHED_FAMILIES[name], rel=0.005)


def test_every_modelled_family_is_checked_against_a_published_count():
    checked = {json.loads(p.read_text())["model_type"] for d in (CONFIG_DIR, HF_CONFIGS) for p in d.glob("*.json")}
    assert set(MODELLED) <= checked


def test_qwen_moe_counts_its_shared_expert():
    m = _family("qwen1.5-moe-a2.7b")
    assert m.active_params == pytest.approx(2.7e9, rel=0.005)  # model card: 2.7B activated
    assert m.shared_expert_size == 5632 and m.shared_expert_gate


def test_deepseek_v2_lite_latent_kv_cache():
    m = get_model("deepseek-v2-lite")
    assert m.is_mla and m.kv_bytes_per_token(2) == (512 + 64) * 27 * 2 == 31_104
    assert m.dense_layers == 1 and m.moe_layers == 26 and m.num_experts == 64
    # DeepSeek's "2.4B activated" leaves the input embedding (a table lookup, no FLOPs) out.
    assert m.active_params - m.vocab_size * m.hidden_size == pytest.approx(2.4e9, rel=0.025)


def test_deepseek_v3_counts_and_latent_cache():
    m = get_model("deepseek-v3")
    assert m.is_mla and m.num_heads == 128 and m.num_experts == 256 and m.experts_per_token == 8
    assert m.dense_layers == 3 and m.moe_layers == 58
    assert m.kv_bytes_per_token(2) == (512 + 64) * 61 * 2  # DeepSeek's "70KB per token" (BF16)
    assert m.active_params == pytest.approx(37e9, rel=0.025)  # "37B activated for each token"


def test_the_mtp_key_is_read_only_for_deepseek_v3():
    cfg = json.loads((CONFIG_DIR / "deepseek-v2-lite.json").read_text())
    with pytest.raises(UnsupportedArchitecture, match="num_nextn_predict_layers"):
        ModelConfig.from_hf_config({**cfg, "num_nextn_predict_layers": 1})


def test_gemma_ties_embeddings_when_the_key_is_absent():
    m = _family("gemma-2-9b")
    assert "tie_word_embeddings" not in json.loads((HF_CONFIGS / "gemma-2-9b.json").read_text())
    assert m.tie_embeddings
    assert _family("gemma-2b").tie_embeddings  # its published count (2.506 B) holds only with a tied head
    gemma1 = ModelConfig.from_hf_config(_llama_like(model_type="gemma", num_key_value_heads=1, head_dim=64))
    assert gemma1.tie_embeddings and not ModelConfig.from_hf_config(_llama_like()).tie_embeddings


def test_sliding_windows_cap_kv_per_sequence():
    gemma2 = _family("gemma-2-9b")  # window on alternate layers, 4096 by Gemma2Config's default
    assert (gemma2.sliding_window, gemma2.sliding_layers) == (4096, 21)
    per_layer = gemma2.kv_bytes_per_token(2) / 42
    assert gemma2.kv_bytes_per_sequence(8192, 2) == per_layer * (21 * 8192 + 21 * 4096)
    assert gemma2.kv_bytes_per_sequence(1000, 2) == 1000 * gemma2.kv_bytes_per_token(2)
    mistral = get_model("mistral-7b")
    assert (mistral.sliding_window, mistral.sliding_layers) == (4096, 32)
    assert mistral.kv_bytes_per_sequence(32768, 2) == 4096 * mistral.kv_bytes_per_token(2)
    assert _family("qwen1.5-moe-a2.7b").sliding_window == 0  # use_sliding_window is false


@pytest.mark.parametrize("cfg, message", [
    ({"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
      "vocab_size": 30522}, "is an encoder"),
    ({"model_type": "t5", "d_model": 512, "num_layers": 6, "num_heads": 8, "vocab_size": 32128,
      "is_encoder_decoder": True}, "encoder-decoder"),
    ({"model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71,
      "vocab_size": 65024, "parallel_attn": True, "new_decoder_architecture": False}, "parallel_attn"),
    ({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10}, "(missing)"),
    (_llama_like(kv_lora_rank=512, qk_rope_head_dim=64), "kv_lora_rank"),
    (_llama_like(model_type="qwen2", num_key_value_heads=8, use_sliding_window=True, sliding_window=4096),
     "use_sliding_window"),
])
def test_unmodelled_architectures_are_refused_by_name(cfg, message):
    with pytest.raises(UnsupportedArchitecture, match=re.escape(message)):
        ModelConfig.from_hf_config(cfg)


def test_layer_types_say_which_layers_slide():
    qwen = json.loads((CONFIG_DIR / "qwen2.5-7b.json").read_text())
    layers = qwen["num_hidden_layers"]
    full = {**qwen, "layer_types": ["full_attention"] * layers, "sliding_window": 131072, "use_sliding_window": False}
    assert ModelConfig.from_hf_config(full).num_params == get_model("qwen2.5-7b").num_params
    gemma2 = json.loads((HF_CONFIGS / "gemma-2-9b.json").read_text())
    three = ["sliding_attention", "sliding_attention", "full_attention"] * 14
    assert ModelConfig.from_hf_config({**gemma2, "layer_types": three}).sliding_layers == 28
    with pytest.raises(UnsupportedArchitecture, match="linear attention"):
        ModelConfig.from_hf_config({**gemma2, "layer_types": ["linear_attention"] * 42})
