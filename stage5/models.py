"""Model descriptions: one :class:`ModelConfig` for the cost model and the torch engine alike.

A config is read from a Hugging Face ``config.json`` dict (:meth:`ModelConfig.from_hf_config`), so every
count here is derived from a published file, not typed in. The registry's files live in
``stage5/configs/*.json``; each one names the URL it was copied from in its ``_source`` field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from stage5.names import resolve

CONFIG_DIR = Path(__file__).parent / "configs"

# Architectures whose config.json omits tie_word_embeddings because their HF class defaults it to False.
_UNTIED_BY_DEFAULT = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "gemma", "phi3"}
# Architectures with a bias on the q, k and v projections even though config.json does not say so.
_QKV_BIAS_BY_DEFAULT = {"qwen2", "qwen2_moe"}


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer, as far as serving cost is concerned.

    Attributes are integers counted in elements (not bytes); byte widths are chosen at serving time
    by the cost model (weights and KV cache separately) or by the torch dtype in the engine.
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

    def __post_init__(self) -> None:
        for field in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
                      "intermediate_size", "num_experts", "experts_per_token"):
            value = getattr(self, field)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{self.name}: {field} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"{self.name}: num_kv_heads ({self.num_kv_heads}) must divide num_heads ({self.num_heads}); "
                "each key-value head serves a whole group of query heads")
        if self.experts_per_token > self.num_experts:
            raise ValueError(f"{self.name}: experts_per_token ({self.experts_per_token}) exceeds "
                             f"num_experts ({self.num_experts})")
        if self.norm not in ("rms", "layernorm"):
            raise ValueError(f"{self.name}: norm must be 'rms' or 'layernorm', got {self.norm!r}")

    # ----------------------------------------------------------------------------------------- reading
    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any], name: str | None = None) -> ModelConfig:
        """Build a config from a Hugging Face ``config.json`` dict.

        Handles Llama/Mistral/Qwen2/Mixtral-style keys and GPT-2's (``n_embd``, ``n_layer``, ...), an explicit
        ``head_dim``, tied embeddings, MHA/GQA/MQA, q/k/v bias and MoE fields.
        """
        if not isinstance(cfg, dict):
            raise TypeError(f"expected a config.json dict, got {type(cfg).__name__}")
        model_type = str(cfg.get("model_type", "")).lower()
        label = name or cfg.get("_name_or_path") or model_type or "model"

        def pick(*keys: str, default: Any = None) -> Any:
            for key in keys:
                if cfg.get(key) is not None:
                    return cfg[key]
            if default is None:
                raise ValueError(f"{label}: config.json has none of {', '.join(keys)}")
            return default

        hidden = int(pick("hidden_size", "n_embd", "d_model"))
        heads = int(pick("num_attention_heads", "n_head", "num_heads"))
        if cfg.get("multi_query"):
            kv_heads = 1
        else:
            kv_heads = int(pick("num_key_value_heads", "n_head_kv", "num_kv_heads", default=heads))
        head_dim = int(cfg.get("head_dim") or hidden // heads)
        gpt2_style = model_type == "gpt2" or "n_embd" in cfg
        experts = int(pick("num_local_experts", "num_experts", default=1))
        moe_inter = cfg.get("moe_intermediate_size") if experts > 1 else None
        intermediate = int(moe_inter or pick("intermediate_size", "n_inner", "ffn_dim", default=4 * hidden))
        tie_default = gpt2_style or model_type not in _UNTIED_BY_DEFAULT
        return cls(
            name=str(label),
            vocab_size=int(pick("vocab_size")),
            hidden_size=hidden,
            num_layers=int(pick("num_hidden_layers", "n_layer", "num_layers")),
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            intermediate_size=intermediate,
            tie_embeddings=bool(cfg.get("tie_word_embeddings", tie_default)),
            qkv_bias=bool(cfg.get("attention_bias", cfg.get("qkv_bias", gpt2_style or model_type in _QKV_BIAS_BY_DEFAULT))),
            num_experts=experts,
            experts_per_token=int(pick("num_experts_per_tok", default=1)) if experts > 1 else 1,
            gated_mlp=not gpt2_style,
            norm="layernorm" if gpt2_style else "rms",
            learned_positions=int(pick("n_positions", "max_position_embeddings")) if gpt2_style else 0,
            linear_bias=gpt2_style,
            max_position_embeddings=int(pick("max_position_embeddings", "n_positions", "n_ctx", default=2048)),
            rope_theta=float(cfg.get("rope_theta", 10000.0)),
            norm_eps=float(pick("rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps", default=1e-5)),
        )

    @classmethod
    def from_json_file(cls, path: str | Path) -> ModelConfig:
        """Read a ``config.json`` from disk; the model is named after the file."""
        path = Path(path)
        try:
            cfg = json.loads(path.read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"no config file at {path}") from None
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} is not valid JSON: {err}") from None
        return cls.from_hf_config(cfg, name=path.stem)

    def with_name(self, name: str) -> ModelConfig:
        return replace(self, name=name)

    # ------------------------------------------------------------------------------------ counting
    def _attention_params(self) -> int:
        h, q, kv = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        weights = h * q + 2 * h * kv + q * h  # q, k, v, o projections
        bias = (q + 2 * kv) * self.qkv_bias + h * self.linear_bias
        return weights + bias

    def _expert_params(self) -> int:
        h, i = self.hidden_size, self.intermediate_size
        if self.gated_mlp:
            return 3 * h * i + (2 * i + h) * self.linear_bias  # gate, up, down
        return 2 * h * i + (i + h) * self.linear_bias  # up, down

    def _norm_params(self) -> int:
        return self.hidden_size * (2 if self.norm == "layernorm" else 1)

    def _params(self, experts: int) -> int:
        router = self.hidden_size * self.num_experts if self.num_experts > 1 else 0
        layer = self._attention_params() + experts * self._expert_params() + router + 2 * self._norm_params()
        embed = self.vocab_size * self.hidden_size
        head = 0 if self.tie_embeddings else embed
        positions = self.learned_positions * self.hidden_size
        return embed + positions + self.num_layers * layer + self._norm_params() + head

    @property
    def num_params(self) -> int:
        """Parameters resident in memory (all experts), embeddings and norms included."""
        return self._params(self.num_experts)

    @property
    def active_params(self) -> int:
        """Parameters read per token: only the experts a token is routed through (equals num_params if dense)."""
        return self._params(self.experts_per_token)

    def kv_bytes_per_token(self, bytes_per_element: float = 2.0) -> float:
        """KV-cache bytes per token: 2 (K and V) x layers x kv_heads x head_dim x bytes per element."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * bytes_per_element

    def weight_bytes(self, bytes_per_param: float = 2.0) -> float:
        """Bytes of all resident weights at the given width (2 = BF16, 1 = FP8/INT8, 0.5 = INT4)."""
        return self.num_params * bytes_per_param

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
