"""Model descriptions: one :class:`ModelConfig` for the cost model and the torch engine alike.

A config is read from a Hugging Face ``config.json`` dict (:meth:`ModelConfig.from_hf_config`), so every
count here is derived from a published file, not typed in. The registry's files live in
``stage5/configs/*.json``; each one names the URL it was copied from in its ``_source`` field.

The reader knows the model_types in :data:`FAMILIES` (Llama, Mistral/Mixtral, Qwen2/Qwen2-MoE/Qwen3,
Gemma/Gemma-2, Phi-3, GPT-2, DeepSeek-V2) and refuses anything else by name: an encoder, an encoder-decoder, an
unknown model_type, or a key that changes the architecture in a way its family does not.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from stage5 import inputs
from stage5.names import resolve

CONFIG_DIR = Path(__file__).parent / "configs"

# The model_types the reader models, and what each family's HF class assumes when config.json is silent.
# Defaults follow each transformers config class (e.g. GemmaConfig ties the output head to the embedding,
# LlamaConfig does not; Qwen2 puts a bias on q, k and v). Anything else is refused, never priced as a Llama.
@dataclass(frozen=True)
class Family:
    tied: bool  # tie_word_embeddings when config.json omits it
    qkv_bias: bool = False
    gpt2: bool = False  # plain MLP, LayerNorm with bias, learned positions, biases everywhere
    norms_per_layer: int = 2  # Gemma-2 adds a norm after attention and after the MLP
    qk_norm: bool = False  # Qwen3 normalises q and k per head
    window: str = ""  # "all": sliding_window applies to every layer; "alternate": every other layer
    default_window: int = 0  # sliding_window when config.json omits it


FAMILIES: dict[str, Family] = {
    "llama": Family(tied=False),
    "mistral": Family(tied=False, window="all"),
    "mixtral": Family(tied=False, window="all"),
    "qwen2": Family(tied=False, qkv_bias=True),
    "qwen2_moe": Family(tied=False, qkv_bias=True),
    "qwen3": Family(tied=False, qk_norm=True),
    "gemma": Family(tied=True),
    # Gemma2Config defaults sliding_window to 4096 (transformers' configuration_gemma2.py).
    "gemma2": Family(tied=True, norms_per_layer=4, window="alternate", default_window=4096),
    "phi3": Family(tied=False, window="all"),
    "gpt2": Family(tied=True, qkv_bias=True, gpt2=True),
    "deepseek_v2": Family(tied=False),  # multi-head latent attention (MLA) and shared experts
}
ENCODERS = {"bert", "roberta", "xlm-roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2",
            "modernbert", "camembert"}
ENCODER_DECODERS = {"t5", "mt5", "umt5", "longt5", "bart", "mbart", "pegasus", "marian", "whisper", "switch_transformers"}

# Keys that change the architecture. Each is read only for the families listed; in any other family it is
# refused, because ignoring it would price the model as something it is not.
_ARCH_KEYS: dict[str, set[str]] = {
    "kv_lora_rank": {"deepseek_v2"}, "q_lora_rank": {"deepseek_v2"}, "qk_rope_head_dim": {"deepseek_v2"},
    "n_routed_experts": {"deepseek_v2"}, "n_shared_experts": {"deepseek_v2"}, "first_k_dense_replace": {"deepseek_v2"},
    "shared_expert_intermediate_size": {"qwen2_moe"}, "num_experts": {"qwen2_moe"},
    "num_local_experts": {"mixtral"}, "moe_intermediate_size": {"qwen2_moe", "deepseek_v2"},
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
    "multi_query", "resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_type", "summary_use_proj", "summary_activation",
    "summary_proj_to_labels", "summary_first_dropout", "task_specific_params", "original_max_position_embeddings",
    "topk_method", "n_group", "topk_group", "routed_scaling_factor", "scoring_func", "aux_loss_alpha",
    "seq_aux", "ep_size", "pretraining_tp", "embd_layer", "resid_dropout", "embd_dropout", "layer_types",
    "partial_rotary_factor", "rotary_pct",  # how much of each head is rotated: no change to any count
}
MODELLED = tuple(FAMILIES)


class UnsupportedArchitecture(ValueError):
    """A config.json whose architecture the reader does not model: the message names what it did not read."""


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

        def pick(*keys: str, default: Any = None, minimum: int = 1) -> int:
            for key in keys:
                if cfg.get(key) is not None:
                    return inputs.integer(cfg[key], f"{label}: {key}", minimum=minimum)
            if default is None:
                raise ValueError(f"{label}: config.json has none of {', '.join(keys)}")
            return default

        def flag(key: str, default: bool) -> bool:
            value = cfg.get(key)
            return default if value is None else inputs.boolean(value, f"{label}: {key}")

        def real(key: str, default: float) -> float:
            value = cfg.get(key)
            return default if value is None else inputs.positive(value, f"{label}: {key}")

        hidden = pick("hidden_size", "n_embd")
        layers = pick("num_hidden_layers", "n_layer")
        heads = pick("num_attention_heads", "n_head")
        # multi_query (Falcon's spelling of MQA) is honoured wherever it appears: one key-value head.
        kv_heads = 1 if cfg.get("multi_query") is True else pick("num_key_value_heads", default=heads)
        vocab = pick("vocab_size")
        explicit_head_dim = cfg.get("head_dim")
        if explicit_head_dim is not None:
            head_dim = inputs.positive_int(explicit_head_dim, f"{label}: head_dim")
        elif hidden % heads:
            raise ValueError(f"{label}: hidden_size ({hidden}) is not a multiple of num_attention_heads ({heads}) "
                             "and config.json gives no head_dim; accepted: a head_dim, or heads dividing hidden_size")
        else:
            head_dim = hidden // heads
        max_pos = pick("max_position_embeddings", "n_positions", "n_ctx", default=2048)
        extra: dict[str, Any] = {}

        # Mixture of experts: Mixtral's num_local_experts, Qwen2-MoE's num_experts, DeepSeek's n_routed_experts.
        experts = pick("num_local_experts", "num_experts", "n_routed_experts", default=1)
        intermediate = pick("intermediate_size", "n_inner", default=4 * hidden)
        if experts > 1:
            extra["experts_per_token"] = pick("num_experts_per_tok")
            dense_size = intermediate
            intermediate = pick("moe_intermediate_size", default=intermediate)
            if model_type == "qwen2_moe":
                if pick("decoder_sparse_step", default=1) != 1 or cfg.get("mlp_only_layers"):
                    raise UnsupportedArchitecture(f"{label}: decoder_sparse_step != 1 and mlp_only_layers (dense "
                                                  "layers among the MoE ones) are not modelled")
                extra["shared_expert_size"] = pick("shared_expert_intermediate_size", default=0, minimum=0)
                extra["shared_expert_gate"] = extra["shared_expert_size"] > 0
            if model_type == "deepseek_v2":
                if pick("moe_layer_freq", default=1) != 1:
                    raise UnsupportedArchitecture(f"{label}: moe_layer_freq != 1 is not modelled")
                extra["shared_expert_size"] = pick("n_shared_experts", default=0, minimum=0) * intermediate
                extra["dense_layers"] = pick("first_k_dense_replace", default=0, minimum=0)
                extra["dense_intermediate_size"] = dense_size

        if model_type == "deepseek_v2":  # multi-head latent attention
            extra["kv_lora_rank"] = pick("kv_lora_rank")
            extra["q_lora_rank"] = pick("q_lora_rank", default=0, minimum=0)
            extra["qk_rope_head_dim"] = pick("qk_rope_head_dim")
            head_dim = pick("qk_nope_head_dim") + extra["qk_rope_head_dim"]
            extra["v_head_dim"] = pick("v_head_dim")

        # Sliding windows: Mistral-style on every layer, Gemma-2 on alternate layers (or as layer_types says);
        # Qwen writes a window into config.json but only uses it when use_sliding_window is true.
        window = pick("sliding_window", default=fam.default_window, minimum=0)
        if model_type.startswith("qwen") and window:
            if flag("use_sliding_window", False):
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

        if fam.gpt2:
            extra.update(gated_mlp=False, norm="layernorm", learned_positions=max_pos, linear_bias=True)
        return cls(
            name=label, vocab_size=vocab, hidden_size=hidden, num_layers=layers, num_heads=heads,
            num_kv_heads=kv_heads, head_dim=head_dim, intermediate_size=intermediate,
            tie_embeddings=flag("tie_word_embeddings", fam.tied),
            qkv_bias=flag("attention_bias", fam.qkv_bias),
            num_experts=experts, max_position_embeddings=max_pos,
            rope_theta=real("rope_theta", 10000.0),
            norm_eps=real("layer_norm_epsilon" if fam.gpt2 else "rms_norm_eps", 1e-5),
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
