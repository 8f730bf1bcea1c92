"""Model configs: parameter counts against the published ones, KV bytes, and config.json variations."""

import json

import pytest

from stage5.models import CONFIG_DIR, ModelConfig, get_model, model_names
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


def test_multi_query_flag_means_one_kv_head():
    m = ModelConfig.from_hf_config(_llama_like(multi_query=True))
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
