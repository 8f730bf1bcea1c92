"""The toy Llama-style model: sizes agree with ModelConfig, the reference generate() is self-consistent."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from stage5.engine.checkpoints import CONFIGS, checkpoint_path, load_draft, load_target, training_summary
from stage5.engine.kv import KVPool
from stage5.engine.model import CausalBackend, GrowingCache, Transformer, check_llama_style, generate
from stage5.engine.workload import make_workload
from stage5.models import ModelConfig, get_model

torch.set_num_threads(1)

TINY = ModelConfig(name="tiny", vocab_size=50, hidden_size=24, num_layers=2, num_heads=6, num_kv_heads=2,
                   head_dim=4, intermediate_size=40, max_position_embeddings=256)


def random_model(cfg: ModelConfig = TINY, dtype: torch.dtype = torch.float64, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(cfg).to(dtype).eval()
    for p in model.parameters():  # larger than the training init, so logits are far from uniform
        p.data.normal_(0, 0.3)
    return model


@pytest.mark.parametrize("cfg", [TINY, replace(TINY, name="tied", tie_embeddings=True), CONFIGS["target"],
                                 CONFIGS["draft"]], ids=lambda c: c.name)
def test_parameter_count_matches_config(cfg):
    model = Transformer(cfg)
    assert sum(p.numel() for p in model.parameters()) == cfg.num_params
    assert (model.lm_head is None) == cfg.tie_embeddings


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kv_bytes_per_token_matches_config(dtype):
    cfg = CONFIGS["target"]
    itemsize = torch.empty(0, dtype=dtype).element_size()
    pool = KVPool(cfg, num_slots=48, dtype=dtype)
    assert pool.nbytes == 48 * cfg.kv_bytes_per_token(bytes_per_element=itemsize)
    # the reference cache stores the same bytes per token
    model = random_model(TINY, dtype)
    cache = GrowingCache(TINY.num_layers)
    model(torch.arange(7), torch.arange(7), cache)
    stored = sum(t.numel() * t.element_size() for t in cache.k + cache.v)
    assert stored == 7 * TINY.kv_bytes_per_token(bytes_per_element=itemsize)


def test_non_llama_config_is_refused():
    with pytest.raises(ValueError, match="Llama-style"):
        Transformer(get_model("gpt2"))
    with pytest.raises(ValueError, match="bias"):
        Transformer(replace(TINY, qkv_bias=True))


@pytest.mark.parametrize("name, change, named", [
    ("deepseek-v2-lite", {}, "MLA"),  # latent attention and shared experts: not what the toy builds
    ("mistral-7b", {}, "sliding window"),
    ("tiny", {"qk_norm": True}, "q/k norms"),
    ("tiny", {"norms_per_layer": 4}, "4 norms per layer"),
])
def test_architectures_the_toy_does_not_build_are_refused_by_name(name, change, named):
    cfg = TINY if name == "tiny" else get_model(name)
    with pytest.raises(ValueError, match=named):
        check_llama_style(replace(cfg, **change))


def test_cached_generation_matches_full_recompute():
    """generate() with its growing cache gives the same logits as rescoring the whole text without a cache."""
    model = random_model()
    prompt = [3, 14, 15, 9, 26, 5]
    out, logits = generate(model, prompt, 12, return_logits=True)
    full = model.score(torch.tensor([prompt + out]))[0]
    for i, row in enumerate(logits):
        torch.testing.assert_close(row, full[len(prompt) - 1 + i], rtol=1e-10, atol=1e-10)
    assert out == [int(full[len(prompt) - 1 + i].argmax()) for i in range(len(out))]


def test_rotary_attention_depends_on_relative_position_only():
    model = random_model()
    tokens = torch.tensor([1, 2, 3, 4, 5, 6, 7, 8])
    base = model(tokens, torch.arange(8), CausalBackend(1))
    shifted = model(tokens, torch.arange(8) + 37, CausalBackend(1))
    torch.testing.assert_close(base, shifted, rtol=1e-9, atol=1e-9)
    scrambled = model(tokens, torch.tensor([0, 2, 1, 3, 4, 5, 6, 7]), CausalBackend(1))
    assert not torch.allclose(base, scrambled)  # positions do matter


def test_sampling_with_seed_is_reproducible():
    model = random_model()
    a = generate(model, [1, 2, 3], 10, temperature=1.0, seed=5)
    b = generate(model, [1, 2, 3], 10, temperature=1.0, seed=5)
    assert a == b and a != generate(model, [1, 2, 3], 10)


def test_workload_is_seeded_and_caps_exceed_lengths():
    a, b, c = make_workload(20, seed=1), make_workload(20, seed=1), make_workload(20, seed=2)
    assert a == b and a != c
    assert all(r.stop_after < r.max_tokens for r in a)
    assert len({r.stop_after for r in a}) > 5  # lengths vary


@pytest.mark.skipif(not checkpoint_path("target").exists(), reason="target checkpoint not trained")
def test_trained_checkpoints_load_and_write_python():
    target, cfg = load_target()
    draft, dcfg = load_draft()
    assert cfg.vocab_size == dcfg.vocab_size == 256
    assert sum(p.numel() for p in target.parameters()) == cfg.num_params > 10 * dcfg.num_params
    assert training_summary("target")["held_out_nats_per_byte"] < 1.5
    assert training_summary("draft")["held_out_nats_per_byte"] < 5.0
    assert load_target()[0] is target  # cached
    text = bytes(generate(target, list(b"import os\n\ndef "), 60)).decode("ascii", "replace")
    assert "(" in text and "\ufffd" not in text
    total = sum(p.stat().st_size for p in checkpoint_path("target").parent.glob("*"))
    assert total < 20e6
