"""Model descriptions: one :class:`ModelConfig` for the cost model and the torch engine alike.

A config is read from a Hugging Face ``config.json`` dict (:meth:`ModelConfig.from_hf_config`), so every
count here is derived from a published file, not typed in. The registry's files live in
``stage5/configs/*.json``; each one names the URL it was copied from in its ``_source`` field.

The reader knows the model_types in :data:`FAMILIES` (Llama, Mistral/Mixtral, Qwen2/Qwen2-MoE/Qwen3,
Gemma/Gemma-2, Phi-3, GPT-2, DeepSeek-V2) and refuses anything else by name: an encoder, an encoder-decoder, an
unknown model_type, or a key that changes the architecture in a way its family does not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from stage5 import inputs
from stage5.names import resolve

CONFIG_DIR = Path(__file__).parent / "configs"

# The model_types the reader models, and the architecture each family's transformers code builds. Anything else is
# refused, never priced as a Llama. ``qkv_bias``: the bias on q, k and v that the family's attention always has
# (Qwen2Attention builds it with bias=True, MistralAttention and Phi3Attention with bias=False) or, for a family
# whose config class has the key (``bias_key``), that key's default.
@dataclass(frozen=True)
class Family:
    hf_class: str  # the transformers config class whose defaults HF_DEFAULTS records
    qkv_bias: bool = False
    bias_key: str | None = "attention_bias"  # the config key that switches the q/k/v bias; None: fixed by the code
    gpt2: bool = False  # plain MLP, LayerNorm with bias, learned positions, biases everywhere
    norms_per_layer: int = 2  # Gemma-2 adds a norm after attention and after the MLP
    qk_norm: bool = False  # Qwen3 normalises q and k per head
    window: str = ""  # "all": sliding_window applies to every layer; "alternate": every other layer


FAMILIES: dict[str, Family] = {
    "llama": Family("LlamaConfig"),
    "mistral": Family("MistralConfig", bias_key=None, window="all"),
    "mixtral": Family("MixtralConfig", bias_key=None, window="all"),
    "qwen2": Family("Qwen2Config", qkv_bias=True, bias_key=None),
    "qwen2_moe": Family("Qwen2MoeConfig", qkv_bias=True, bias_key="qkv_bias"),
    "qwen3": Family("Qwen3Config", qk_norm=True),
    "gemma": Family("GemmaConfig"),
    "gemma2": Family("Gemma2Config", norms_per_layer=4, window="alternate"),
    "phi3": Family("Phi3Config", bias_key=None, window="all"),
    "gpt2": Family("GPT2Config", qkv_bias=True, bias_key=None, gpt2=True),
    "deepseek_v2": Family("DeepseekV2Config"),  # multi-head latent attention (MLA) and shared experts
    "deepseek_v3": Family("DeepseekV3Config"),  # DeepSeek-V2's shapes; its routing changes no count (sigmoid, groups)
}
MLA_FAMILIES = ("deepseek_v2", "deepseek_v3")

# What config.json may leave out. Each family's transformers config class fills a missing key with its default
# (transformers 5.24.0, src/transformers/models/<model_type>/configuration_<model_type>.py; checked against the
# installed classes by tests/test_config_defaults.py). The reader keeps a default only where it does not depend on
# the model's size: flags, epsilons, the rotary base, the context limit, the sliding window, and the rules a class
# states (num_key_value_heads = num_attention_heads, head_dim = hidden_size // num_attention_heads, GPT-2's
# n_inner = 4 x n_embd). Where a class's default is its reference model's size (LlamaConfig's intermediate_size
# 11008 is Llama-2-7B's, MistralConfig's 8 KV heads Mistral-7B's, GemmaConfig's head_dim 256), the key is
# required and its absence refused by name: that number describes another model.
HF_VERSION = "5.24.0"


class _Rule(str):
    """A default computed from other counts (never equal to a string a config.json holds, which is a plain str)."""


HEADS = _Rule("num_attention_heads")  # as many KV heads as query heads (multi-head attention)
SPLIT = _Rule("hidden_size // num_attention_heads")  # the head width splits the hidden size
FOUR_X = _Rule("4 * n_embd")  # GPT2MLP's inner width when n_inner is None
_ROPE = {"rope_theta": 10000.0}
HF_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"num_key_value_heads": HEADS, "head_dim": SPLIT, "tie_word_embeddings": False,
              "attention_bias": False, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, **_ROPE},
    "mistral": {"head_dim": SPLIT, "tie_word_embeddings": False, "max_position_embeddings": 131072,
                "rms_norm_eps": 1e-6, **_ROPE, "sliding_window": 4096},
    "mixtral": {"head_dim": SPLIT, "tie_word_embeddings": False, "max_position_embeddings": 131072,
                "rms_norm_eps": 1e-5, "rope_theta": 1e6, "sliding_window": None},
    "qwen2": {"head_dim": SPLIT, "tie_word_embeddings": False, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
              **_ROPE, "use_sliding_window": False, "sliding_window": 4096},
    "qwen2_moe": {"head_dim": SPLIT, "tie_word_embeddings": False, "max_position_embeddings": 32768,
                  "rms_norm_eps": 1e-6, **_ROPE, "use_sliding_window": False, "sliding_window": 4096,
                  "qkv_bias": True, "decoder_sparse_step": 1, "mlp_only_layers": []},
    "qwen3": {"tie_word_embeddings": False, "attention_bias": False, "max_position_embeddings": 32768,
              "rms_norm_eps": 1e-6, **_ROPE, "use_sliding_window": False, "sliding_window": 4096},
    "gemma": {"tie_word_embeddings": True, "attention_bias": False, "max_position_embeddings": 8192,
              "rms_norm_eps": 1e-6, **_ROPE},
    "gemma2": {"tie_word_embeddings": True, "attention_bias": False, "max_position_embeddings": 8192,
               "rms_norm_eps": 1e-6, **_ROPE, "sliding_window": 4096},
    "phi3": {"num_key_value_heads": HEADS, "head_dim": SPLIT, "tie_word_embeddings": False,
             "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, **_ROPE, "sliding_window": None},
    "gpt2": {"head_dim": SPLIT, "n_inner": FOUR_X, "n_positions": 1024, "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True},
    "deepseek_v2": {"num_key_value_heads": HEADS, "tie_word_embeddings": False, "attention_bias": False,
                    "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, **_ROPE, "first_k_dense_replace": 0},
    # DeepseekV3Config's KV heads (128), dense layers (3) and ranks are DeepSeek-V3's own: required, not kept
    "deepseek_v3": {"tie_word_embeddings": False, "attention_bias": False, "max_position_embeddings": 4096,
                    "rms_norm_eps": 1e-6, **_ROPE},
}
# What an explicit null means where the family's code reads None as a rule rather than a missing number.
# Elsewhere a null is read as if the key were absent (num_key_value_heads and head_dim then take the family's rule,
# where it has one).
_NULL_MEANS = {"n_inner": FOUR_X, "sliding_window": None,
               "q_lora_rank": 0,  # DeepseekV2Attention: no low-rank query projection
               "n_shared_experts": 0, "mlp_only_layers": [],
               "n_routed_experts": 1}  # DeepSeek's own configuration_deepseek.py: None means a dense MLP
_MISSING = object()
ENCODERS = {"bert", "roberta", "xlm-roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2",
            "modernbert", "camembert"}
ENCODER_DECODERS = {"t5", "mt5", "umt5", "longt5", "bart", "mbart", "pegasus", "marian", "whisper", "switch_transformers"}

# Keys that change the architecture. Each is read only for the families listed; in any other family it is
# refused, because ignoring it would price the model as something it is not.
_ARCH_KEYS: dict[str, set[str]] = {
    "kv_lora_rank": {*MLA_FAMILIES}, "q_lora_rank": {*MLA_FAMILIES}, "qk_rope_head_dim": {*MLA_FAMILIES},
    "n_routed_experts": {*MLA_FAMILIES}, "n_shared_experts": {*MLA_FAMILIES},
    "first_k_dense_replace": {*MLA_FAMILIES},
    "shared_expert_intermediate_size": {"qwen2_moe"}, "num_experts": {"qwen2_moe"},
    "num_local_experts": {"mixtral"}, "moe_intermediate_size": {"qwen2_moe", *MLA_FAMILIES},
    # DeepSeek-V3's multi-token-prediction module: extra weights a server may load for speculative decoding;
    # not counted (the model is priced as served without it, as the main model's 671B are).
    "num_nextn_predict_layers": {"deepseek_v3"},
    "sliding_window": {"mistral", "mixtral", "phi3", "gemma2", "qwen2", "qwen2_moe", "qwen3"},
    "parallel_attn": set(), "alibi": set(), "new_decoder_architecture": set(), "parallel_residual": set(),
    "mlp_bias": set(), "is_encoder_decoder": set(),
}
# Keys every reader may ignore: they do not change parameter or KV counts.
_IGNORED_KEYS = {
    "architectures", "model_type", "torch_dtype", "transformers_version", "bos_token_id", "eos_token_id",
    "pad_token_id", "initializer_range", "use_cache", "hidden_act", "hidden_activation", "attention_dropout",
    "rope_scaling", "rope_theta", "rms_norm_eps", "layer_norm_epsilon", "max_position_embeddings", "_name_or_path",
    "_source", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "tie_word_embeddings", "attention_bias", "num_experts_per_tok",
    "norm_topk_prob", "output_router_logits", "router_aux_loss_coef", "use_sliding_window", "max_window_layers",
    "decoder_sparse_step", "mlp_only_layers", "qk_nope_head_dim", "v_head_dim", "moe_layer_freq",
    "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping", "cache_implementation",
    "n_embd", "n_layer", "n_head", "n_positions", "n_ctx", "n_inner", "activation_function",
    "resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_type", "summary_use_proj", "summary_activation",
    "summary_proj_to_labels", "summary_first_dropout", "task_specific_params", "original_max_position_embeddings",
    "topk_method", "n_group", "topk_group", "routed_scaling_factor", "scoring_func", "aux_loss_alpha",
    "seq_aux", "ep_size", "pretraining_tp", "embd_layer", "resid_dropout", "embd_dropout", "layer_types",
    "partial_rotary_factor", "rotary_pct", "multi_query", "rope_parameters", "qkv_bias",  # how much of each head is rotated: no change to any count
}
MODELLED = tuple(FAMILIES)


class UnsupportedArchitecture(ValueError):
    """A config.json whose architecture the reader does not model: the message names what it did not read."""


def _scaled_max_context(scaling: Any, max_pos: int, label: str) -> int:
    """The longest context a config's rotary scaling serves, by vLLM's rule (vllm/config.py,
    ``_get_and_verify_max_len``, vLLM 0.8): YaRN's ``rope_scaling`` defines one, ``factor`` x
    ``original_max_position_embeddings`` (Qwen2.5's model card adds factor 4 over 32,768 for 131,072 tokens;
    DeepSeek-V3's own config gives 40 x 4,096 = its max_position_embeddings, 163,840). Without
    ``original_max_position_embeddings`` in it, transformers' YaRN takes max_position_embeddings as the original
    (``_compute_yarn_parameters``), and so does this. Other rope types keep max_position_embeddings (vLLM multiplies
    linear and dynamic scaling's factor in too; the course does not read those). The price of a context is the
    same formula either way: scaling changes the rotary angles, not the bytes or the FLOPs."""
    if not isinstance(scaling, dict):
        return max_pos
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind != "yarn":
        return max_pos
    factor = inputs.real(scaling.get("factor"), f"{label}: rope_scaling.factor (YaRN)", low=1.0, high=1024.0)
    original = scaling.get("original_max_position_embeddings", max_pos)
    original = inputs.integer(original, f"{label}: rope_scaling.original_max_position_embeddings", minimum=1,
                              maximum=inputs.MAX_REQUEST_TOKENS)
    return inputs.integer(int(original * factor), f"{label}: YaRN's scaled context (factor x original)", minimum=1,
                          maximum=inputs.MAX_COUNT)


def _refuse_unknown(cfg: dict[str, Any], model_type: str, label: str) -> None:
    if model_type in ENCODERS:
        raise UnsupportedArchitecture(f"{label}: model_type {model_type!r} is an encoder, not a decoder that "
                                      f"generates tokens; modelled decoders: {', '.join(MODELLED)}")
    if model_type in ENCODER_DECODERS or cfg.get("is_encoder_decoder") is True:
        raise UnsupportedArchitecture(f"{label}: model_type {model_type!r} is an encoder-decoder; only "
                                      f"decoder-only models are modelled: {', '.join(MODELLED)}")
    if model_type not in FAMILIES:
        unknown = sorted(k for k in cfg if k not in _IGNORED_KEYS and not k.startswith("_"))
        keys = f"; keys it does not understand: {', '.join(map(repr, unknown[:12]))}" + (
            " ..." if len(unknown) > 12 else "")
        raise UnsupportedArchitecture(
            f"{label}: model_type {model_type or '(missing)'!r} is not modelled{keys if unknown else ''}. "
            f"Modelled model_types: {', '.join(MODELLED)}")
    family_only = sorted(k for k, fams in _ARCH_KEYS.items()
                         if model_type not in fams and cfg.get(k) not in (None, False, 0, [], {}))
    if family_only:
        raise UnsupportedArchitecture(
            f"{label}: a {model_type} config.json does not use {', '.join(family_only)}; the reader does not "
            "know what they change here, so it refuses rather than guess")


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer, as far as serving cost is concerned.

    Attributes are integers counted in elements (not bytes); byte widths are chosen at serving time
    by the cost model (weights and KV cache separately) or by the torch dtype in the engine.

    Beyond the Llama shape: ``shared_expert_size`` is the width of the MLP every token passes through in an
    MoE layer beside its routed experts (Qwen2-MoE, DeepSeek-V2); the first ``dense_layers`` layers have a
    dense MLP of ``dense_intermediate_size`` instead of experts (DeepSeek-V2). ``kv_lora_rank > 0`` means
    multi-head latent attention (MLA): the cache holds one compressed latent of ``kv_lora_rank`` plus a shared
    rotary key of ``qk_rope_head_dim`` per layer, not per-head keys and values; ``head_dim`` is then the query/
    key head width (no-rope part + rope part) and ``v_head_dim`` the value head width. ``sliding_window > 0``
    limits ``sliding_layers`` of the layers to attending over the last ``sliding_window`` tokens.
    """

    name: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    tie_embeddings: bool = False
    qkv_bias: bool = False
    num_experts: int = 1  # experts resident per MoE layer (1 = dense MLP)
    experts_per_token: int = 1  # experts each token is routed through
    gated_mlp: bool = True  # SwiGLU-style (gate, up, down) vs plain (up, down)
    norm: str = "rms"  # "rms" (weight only) or "layernorm" (weight and bias)
    learned_positions: int = 0  # rows of a learned position table (GPT-2); 0 = rotary
    linear_bias: bool = False  # bias on the output and MLP projections too (GPT-2)
    max_position_embeddings: int = 8192
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    norms_per_layer: int = 2
    qk_norm: bool = False
    shared_expert_size: int = 0
    shared_expert_gate: bool = False  # a 1-wide sigmoid gate on the shared expert (Qwen2-MoE)
    dense_layers: int = 0
    dense_intermediate_size: int = 0
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    sliding_window: int = 0
    sliding_layers: int = 0

    def __post_init__(self) -> None:
        for field in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
                      "intermediate_size", "num_experts", "experts_per_token", "max_position_embeddings",
                      "norms_per_layer"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{self.name}: {field} must be a positive integer, got {value!r}")
        for field in ("shared_expert_size", "dense_layers", "dense_intermediate_size", "kv_lora_rank",
                      "q_lora_rank", "qk_rope_head_dim", "v_head_dim", "sliding_window", "sliding_layers",
                      "learned_positions"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{self.name}: {field} must be a non-negative integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"{self.name}: num_kv_heads ({self.num_kv_heads}) must divide num_heads ({self.num_heads}); "
                "each key-value head serves a whole group of query heads")
        if self.experts_per_token > self.num_experts:
            raise ValueError(f"{self.name}: experts_per_token ({self.experts_per_token}) exceeds "
                             f"num_experts ({self.num_experts})")
        if self.norm not in ("rms", "layernorm"):
            raise ValueError(f"{self.name}: norm must be 'rms' or 'layernorm', got {self.norm!r}")
        if self.dense_layers > self.num_layers or self.sliding_layers > self.num_layers:
            raise ValueError(f"{self.name}: dense_layers ({self.dense_layers}) and sliding_layers "
                             f"({self.sliding_layers}) cannot exceed num_layers ({self.num_layers})")
        if self.kv_lora_rank and not 0 < self.qk_rope_head_dim < self.head_dim:
            raise ValueError(f"{self.name}: with MLA, qk_rope_head_dim ({self.qk_rope_head_dim}) must be positive "
                             f"and below the query/key head width head_dim ({self.head_dim})")
        if bool(self.sliding_window) != bool(self.sliding_layers):
            raise ValueError(f"{self.name}: sliding_window ({self.sliding_window}) and sliding_layers "
                             f"({self.sliding_layers}) must both be set or both be 0")

    # ----------------------------------------------------------------------------------------- reading
    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any], name: str | None = None) -> ModelConfig:
        """Build a config from a Hugging Face ``config.json`` dict of one of :data:`MODELLED` model_types.

        Reads Llama/Mistral/Qwen/Gemma/Phi-3-style keys, GPT-2's (``n_embd``, ``n_layer``, ...) and DeepSeek-V2's
        (MLA, routed and shared experts); an explicit ``head_dim``, tied embeddings (each family's default when
        the key is absent), MHA/GQA/MQA, q/k/v bias, MoE fields and sliding windows. Every value is checked:
        integers must be whole positive numbers, flags real booleans. Encoders, encoder-decoders, unknown
        model_types and keys a family does not use raise :class:`UnsupportedArchitecture`.
        """
        if not isinstance(cfg, dict):
            raise TypeError(f"expected a config.json object ({{...}}), got {type(cfg).__name__}")
        raw_type = cfg.get("model_type", "")
        if not isinstance(raw_type, str):
            raise UnsupportedArchitecture(f"model_type must be a string naming the architecture, got {raw_type!r}; "
                                          f"modelled: {', '.join(MODELLED)}")
        model_type = raw_type.lower()
        raw_label = name or cfg.get("_name_or_path") or model_type or "model"
        label = " ".join(raw_label.split()) if isinstance(raw_label, str) else ""  # one line, whatever was pasted
        label = label or "model"
        _refuse_unknown(cfg, model_type, label)
        fam = FAMILIES[model_type]

        defaults = HF_DEFAULTS[model_type]
        source = f"{fam.hf_class} (transformers {HF_VERSION})"

        def given(key: str) -> Any:
            """config.json's value for ``key``, _MISSING when absent; an explicit null means what the family's
            code makes of None (_NULL_MEANS), else it counts as absent."""
            value = cfg.get(key, _MISSING)
            return _NULL_MEANS.get(key, _MISSING) if value is None else value

        rules: dict[_Rule, Any] = {}  # each rule's value, once the counts it needs are read

        def value_of(*keys: str) -> Any:
            """The first of ``keys`` (spellings of one field) config.json gives, else the family's default
            (HF_DEFAULTS), else refused by name."""
            value = next((v for v in map(given, keys) if v is not _MISSING), _MISSING)
            if value is _MISSING:
                if keys[0] not in defaults:
                    spelled = keys[0] if len(keys) == 1 else f"any of {', '.join(keys)}"
                    raise ValueError(
                        f"{label}: config.json gives no {spelled}; {source} would fill in its reference model's "
                        f"value, which describes another model, so the reader refuses rather than guess; accepted: "
                        f"a config.json that gives {keys[0]}")
                value = defaults[keys[0]]
            if isinstance(value, _Rule):
                if rules.get(value) is None:
                    raise ValueError(f"{label}: hidden_size ({hidden}) is not a multiple of num_attention_heads "
                                     f"({heads}) and config.json gives no head_dim; accepted: a head_dim, or heads "
                                     "dividing hidden_size")
                value = rules[value]
            return value

        def pick(*keys: str, minimum: int = 1) -> int:
            return inputs.integer(value_of(*keys), f"{label}: {keys[0]}", minimum=minimum)

        def flag(key: str) -> bool:
            return inputs.boolean(value_of(key), f"{label}: {key}")

        def real(key: str) -> float:
            return inputs.positive(value_of(key), f"{label}: {key}")

        gpt2 = fam.gpt2  # GPT2Config's own names (hidden_size and the rest are its aliases)
        hidden = pick("n_embd", "hidden_size") if gpt2 else pick("hidden_size")
        layers = pick("n_layer", "num_hidden_layers") if gpt2 else pick("num_hidden_layers")
        heads = pick("n_head", "num_attention_heads") if gpt2 else pick("num_attention_heads")
        rules.update({HEADS: heads, SPLIT: hidden // heads if hidden % heads == 0 else None, FOUR_X: 4 * hidden})
        if cfg.get("multi_query") is True:  # Falcon's and GPTBigCode's MQA switch: no modelled family reads it
            raise UnsupportedArchitecture(
                f"{label}: multi_query is not a {model_type} key ({source} has none, and the {model_type} code would "
                "ignore it); the reader refuses rather than choose between it and num_key_value_heads; accepted: "
                "num_key_value_heads alone (1 for multi-query attention)")
        kv_heads = heads if gpt2 else pick("num_key_value_heads")
        vocab = pick("vocab_size")
        head_dim = 0 if model_type in MLA_FAMILIES else pick("head_dim")  # MLA's is read below
        max_pos = pick("n_positions", "n_ctx") if gpt2 else pick("max_position_embeddings")
        extra: dict[str, Any] = {}

        # Mixture of experts: Mixtral's num_local_experts, Qwen2-MoE's num_experts, DeepSeek's n_routed_experts.
        experts_key = {"mixtral": "num_local_experts", "qwen2_moe": "num_experts",
                       "deepseek_v2": "n_routed_experts", "deepseek_v3": "n_routed_experts"}.get(model_type)
        experts = pick(experts_key) if experts_key else 1
        intermediate = pick("n_inner") if gpt2 else pick("intermediate_size")
        if experts > 1:
            extra["experts_per_token"] = pick("num_experts_per_tok")
            dense_size = intermediate
            intermediate = pick("moe_intermediate_size") if model_type != "mixtral" else intermediate
            if model_type == "qwen2_moe":
                if pick("decoder_sparse_step") != 1 or value_of("mlp_only_layers"):
                    raise UnsupportedArchitecture(f"{label}: decoder_sparse_step != 1 and mlp_only_layers (dense "
                                                  "layers among the MoE ones) are not modelled")
                extra["shared_expert_size"] = pick("shared_expert_intermediate_size", minimum=0)
                extra["shared_expert_gate"] = extra["shared_expert_size"] > 0
            if model_type in MLA_FAMILIES:
                if inputs.integer(cfg.get("moe_layer_freq") or 1, f"{label}: moe_layer_freq") != 1:
                    raise UnsupportedArchitecture(f"{label}: moe_layer_freq != 1 is not modelled")
                extra["shared_expert_size"] = pick("n_shared_experts", minimum=0) * intermediate
                extra["dense_layers"] = pick("first_k_dense_replace", minimum=0)
                extra["dense_intermediate_size"] = dense_size

        if model_type in MLA_FAMILIES:  # multi-head latent attention
            extra["kv_lora_rank"] = pick("kv_lora_rank")
            extra["q_lora_rank"] = pick("q_lora_rank", minimum=0)
            extra["qk_rope_head_dim"] = pick("qk_rope_head_dim")
            head_dim = pick("qk_nope_head_dim") + extra["qk_rope_head_dim"]
            extra["v_head_dim"] = pick("v_head_dim")

        # Sliding windows: Mistral-style on every layer, Gemma-2 on alternate layers (or as layer_types says);
        # Qwen writes a window into config.json but only uses it when use_sliding_window is true.
        window = 0
        if fam.window or model_type.startswith("qwen"):
            raw_window = value_of("sliding_window")
            window = 0 if raw_window is None else inputs.integer(raw_window, f"{label}: sliding_window", minimum=0)
        if model_type.startswith("qwen") and window:
            if flag("use_sliding_window"):
                raise UnsupportedArchitecture(f"{label}: use_sliding_window=true (a window on some layers from "
                                              "max_window_layers on) is not modelled")
            window = 0
        layer_types = cfg.get("layer_types")
        if layer_types is not None and (not isinstance(layer_types, list) or len(layer_types) != layers
                                        or not set(layer_types) <= {"full_attention", "sliding_attention"}):
            raise UnsupportedArchitecture(
                f"{label}: layer_types must list one of full_attention or sliding_attention per layer ({layers}); "
                f"other layer types (linear attention, ...) are not modelled. Got {layer_types!r:.120}")
        if window and window < max_pos:
            if layer_types is not None:  # newer config.json files say which layers slide
                sliding = layer_types.count("sliding_attention")
            else:
                sliding = (layers + 1) // 2 if fam.window == "alternate" else layers
            if sliding:
                extra.update(sliding_window=window, sliding_layers=sliding)

        # The q/k/v bias: the family's key where its config class has one; elsewhere fixed by its code, and a
        # config.json that says otherwise is refused (transformers would ignore the key and build the fixed bias).
        qkv_bias = fam.qkv_bias
        if fam.bias_key:
            qkv_bias = flag(fam.bias_key)
        elif cfg.get("attention_bias") not in (None, fam.qkv_bias):
            raise UnsupportedArchitecture(
                f"{label}: attention_bias={cfg['attention_bias']!r}, but {model_type} attention "
                f"{'always has' if fam.qkv_bias else 'never has'} a q/k/v bias ({source} has no such key); "
                f"accepted: no attention_bias, or {str(fam.qkv_bias).lower()}")
        rope = cfg.get("rope_parameters")  # transformers 5 writes the rotary base here
        if cfg.get("rope_theta") is None and isinstance(rope, dict) and rope.get("rope_theta") is not None:
            rope_theta = inputs.positive(rope["rope_theta"], f"{label}: rope_parameters.rope_theta")
        else:
            rope_theta = 0.0 if gpt2 else real("rope_theta")

        if gpt2:
            extra.update(gated_mlp=False, norm="layernorm", learned_positions=max_pos, linear_bias=True)
        else:
            max_pos = _scaled_max_context(cfg.get("rope_scaling"), max_pos, label)
        return cls(
            name=label, vocab_size=vocab, hidden_size=hidden, num_layers=layers, num_heads=heads,
            num_kv_heads=kv_heads, head_dim=head_dim, intermediate_size=intermediate,
            tie_embeddings=flag("tie_word_embeddings"), qkv_bias=qkv_bias,
            num_experts=experts, max_position_embeddings=max_pos,
            rope_theta=rope_theta or 10000.0,
            norm_eps=real("layer_norm_epsilon" if gpt2 else "rms_norm_eps"),
            norms_per_layer=fam.norms_per_layer, qk_norm=fam.qk_norm, **extra)

    @classmethod
    def from_json_file(cls, path: str | Path) -> ModelConfig:
        """Read a ``config.json`` from disk; the model is named after the file."""
        path = Path(path)  # a regular file of at most CONFIG_LIMIT_BYTES, nesting bounded: see stage5.inputs
        text = inputs.read_small_file(path, inputs.CONFIG_LIMIT_BYTES, what="config file")
        cfg = inputs.loads_json(text, what=str(path))
        return cls.from_hf_config(cfg, name=path.stem)

    def with_name(self, name: str) -> ModelConfig:
        return replace(self, name=name)

    # ------------------------------------------------------------------------------------ counting
    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a set of routed experts (0 for a dense model)."""
        return self.num_layers - self.dense_layers if self.num_experts > 1 else 0

    def _attention_params(self) -> int:
        h, q = self.hidden_size, self.num_heads * self.head_dim
        if self.is_mla:
            nope = self.head_dim - self.qk_rope_head_dim
            if self.q_lora_rank:  # q through a low-rank bottleneck with its own norm
                q_proj = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * q
            else:
                q_proj = h * q
            kv_down = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank  # latent + its norm
            kv_up = self.kv_lora_rank * self.num_heads * (nope + self.v_head_dim)
            return q_proj + kv_down + kv_up + self.num_heads * self.v_head_dim * h
        kv = self.num_kv_heads * self.head_dim
        weights = h * q + 2 * h * kv + q * h  # q, k, v, o projections
        bias = (q + 2 * kv) * self.qkv_bias + h * self.linear_bias
        return weights + bias

    def _expert_params(self, width: int | None = None) -> int:
        """One MLP (one expert) of ``width`` (default ``intermediate_size``) in one layer."""
        h, i = self.hidden_size, self.intermediate_size if width is None else width
        if self.gated_mlp:
            return 3 * h * i + (2 * i + h) * self.linear_bias  # gate, up, down
        return 2 * h * i + (i + h) * self.linear_bias  # up, down

    def _norm_params(self) -> int:
        return self.hidden_size * (2 if self.norm == "layernorm" else 1)

    def _params(self, experts: int) -> int:
        per_layer = (self._attention_params() + self.norms_per_layer * self._norm_params()
                     + 2 * self.head_dim * self.qk_norm)
        if self.num_experts > 1:
            moe = (experts * self._expert_params() + self.hidden_size * self.num_experts
                   + (self._expert_params(self.shared_expert_size) if self.shared_expert_size else 0)
                   + self.hidden_size * self.shared_expert_gate)
            mlps = self.moe_layers * moe + self.dense_layers * self._expert_params(self.dense_intermediate_size)
        else:
            mlps = self.num_layers * self._expert_params()
        embed = self.vocab_size * self.hidden_size
        head = 0 if self.tie_embeddings else embed
        positions = self.learned_positions * self.hidden_size
        return embed + positions + self.num_layers * per_layer + mlps + self._norm_params() + head

    @property
    def num_params(self) -> int:
        """Parameters resident in memory (all experts), embeddings and norms included."""
        return self._params(self.num_experts)

    @property
    def active_params(self) -> int:
        """Parameters read per token: only the experts a token is routed through (equals num_params if dense)."""
        return self._params(self.experts_per_token)

    def kv_bytes_per_token(self, bytes_per_element: float = 2.0) -> float:
        """KV-cache bytes per token, with every layer attending over the whole context.

        Standard attention: 2 (K and V) x layers x kv_heads x head_dim x bytes per element. MLA: layers x
        (kv_lora_rank + qk_rope_head_dim) x bytes per element (one latent and one shared rotary key).
        A sliding window caps what some layers keep; :meth:`kv_bytes_per_sequence` applies it.
        """
        return self.num_layers * self._kv_elements_per_layer() * bytes_per_element

    def _kv_elements_per_layer(self) -> int:
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    def kv_bytes_per_sequence(self, context, bytes_per_element: float = 2.0):
        """KV-cache bytes of one sequence of ``context`` tokens (a number or an array), sliding-window layers
        capped at the window."""
        context = np.asarray(context, dtype=float)
        windowed = np.minimum(context, self.sliding_window) if self.sliding_window else context
        tokens = (self.num_layers - self.sliding_layers) * context + self.sliding_layers * windowed
        out = tokens * self._kv_elements_per_layer() * bytes_per_element
        return float(out) if out.ndim == 0 else out

    @property
    def table_params(self) -> int:
        """Parameters in the lookup tables: the input embedding, the output head where it is not tied to it, and a
        learned position table. Engines keep these in 16 bits when they quantize the rest (book chapter 8)."""
        head = 0 if self.tie_embeddings else self.vocab_size * self.hidden_size
        return self.vocab_size * self.hidden_size + head + self.learned_positions * self.hidden_size

    def weight_bytes(self, bytes_per_param: float = 2.0, table_bytes: float | None = None) -> float:
        """Bytes of all resident weights at the given width (2 = BF16, 1 = FP8/INT8, 0.5 = INT4), the lookup tables
        (:attr:`table_params`) at ``table_bytes`` (default: the same width)."""
        tables = self.table_params
        width = bytes_per_param if table_bytes is None else table_bytes
        return (self.num_params - tables) * bytes_per_param + tables * width

    @property
    def gqa_ratio(self) -> int:
        """Query heads per key-value head (1 = MHA, num_heads = MQA)."""
        return self.num_heads // self.num_kv_heads


@cache
def _registry() -> dict[str, ModelConfig]:
    return {p.stem: ModelConfig.from_json_file(p) for p in sorted(CONFIG_DIR.glob("*.json"))}


def model_names() -> list[str]:
    """Names of the models shipped with the course."""
    return list(_registry())


def get_model(name: str | ModelConfig) -> ModelConfig:
    """Look a model up by registry name (case and punctuation forgiving); unknown names list close matches."""
    if isinstance(name, ModelConfig):
        return name
    return _registry()[resolve(name, _registry(), "model")]


#: The simulator's model choice that reads the model from pasted ``config.json`` text instead of the registry.
PASTED = "(pasted config.json)"


def chosen_model(choice: str, config_json: str = "") -> ModelConfig:
    """The model a simulator's inputs name: ``choice`` from the registry, or, when ``choice`` is :data:`PASTED`,
    the model ``config_json`` (the text of a Hugging Face ``config.json``) describes."""
    if choice == PASTED:
        if not isinstance(config_json, str):
            raise TypeError(f"config_json must be the text of a config.json, got {type(config_json).__name__}")
        try:
            cfg = json.loads(config_json)
        except ValueError as err:  # JSONDecodeError, or an integer literal too long to convert
            raise ValueError(f"the pasted config.json is not valid JSON: {err}") from None
        if not isinstance(cfg, dict):
            raise ValueError(f"the pasted config.json must be a JSON object ({{...}}), got {type(cfg).__name__}")
        name = cfg.get("_name_or_path")
        return ModelConfig.from_hf_config(cfg, name=name if isinstance(name, str) and name else "pasted model")
    return get_model(choice)
