"""A Llama-style decoder in plain torch, described entirely by a :class:`stage5.models.ModelConfig`.

Pieces: RMSNorm, rotary position embeddings, grouped-query attention, a SwiGLU MLP, no biases, embeddings
tied or not as the config says. The model never stores keys and values itself: each layer hands its fresh
q, k, v to an *attention backend* and gets the attention output back. The backend decides where K/V live:

* :class:`CausalBackend` - no cache, a [batch, time] block of tokens (training, scoring);
* :class:`GrowingCache` - one sequence, a cache that grows by concatenation (the reference :func:`generate`);
* ``stage5.engine.kv.KVPool`` - the serving engine's preallocated pool (contiguous runs or paged blocks).

Tokens are passed flat: ``tokens`` and ``positions`` are 1-D of the same length, so one forward can carry
several sequences of different lengths; the backend knows which token belongs to which sequence.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from stage5 import inputs
from stage5.models import ModelConfig


def check_llama_style(cfg: ModelConfig) -> None:
    """Raise ValueError if ``cfg`` describes something this model cannot build (GPT-2 style, MoE, biases)."""
    problems = []
    if not cfg.gated_mlp:
        problems.append("a plain (ungated) MLP")
    if cfg.norm != "rms":
        problems.append(f"norm={cfg.norm!r}")
    if cfg.learned_positions:
        problems.append(f"a learned position table ({cfg.learned_positions} rows)")
    if cfg.qkv_bias or cfg.linear_bias:
        problems.append("bias terms")
    if cfg.num_experts != 1:
        problems.append(f"{cfg.num_experts} experts")
    if cfg.shared_expert_size:
        problems.append("a shared expert")
    if cfg.kv_lora_rank:
        problems.append(f"latent attention (MLA, kv_lora_rank={cfg.kv_lora_rank})")
    if cfg.qk_norm:
        problems.append("q/k norms")
    if cfg.norms_per_layer != 2:
        problems.append(f"{cfg.norms_per_layer} norms per layer")
    if cfg.sliding_window:
        problems.append(f"a sliding window of {cfg.sliding_window} tokens")
    if problems:
        raise ValueError(f"{cfg.name}: the toy engine builds Llama-style decoders only (gated MLP, RMSNorm, "
                         f"rotary positions, no biases, dense); this config has {', '.join(problems)}")


class AttentionBackend(Protocol):
    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q: [N, heads, head_dim]; k, v: [N, kv_heads, head_dim] -> output [N, heads, head_dim]."""
        ...


def expand_kv(x: torch.Tensor, group: int) -> torch.Tensor:
    """Repeat each KV head ``group`` times along dim -3 so it lines up with its query heads."""
    return x if group == 1 else x.repeat_interleave(group, dim=-3)


class CausalBackend:
    """No cache: the N flat tokens are ``batch`` rows of equal length, each attending causally to itself."""

    def __init__(self, batch: int):
        self.batch = batch

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        n, heads, dim = q.shape
        group = heads // k.shape[1]
        q, k, v = (t.reshape(self.batch, n // self.batch, t.shape[1], dim).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, expand_kv(k, group), expand_kv(v, group), is_causal=True)
        return out.transpose(1, 2).reshape(n, heads, dim)


MAX_LAYERS = 65_536  # far past any decoder built (Llama 3.1 405B has 126 layers)


class GrowingCache:
    """One sequence's K/V, kept per layer and extended with torch.cat: simple and obviously right."""

    def __init__(self, num_layers: int):
        num_layers = inputs.positive_int(num_layers, "num_layers", maximum=MAX_LAYERS)
        self.k: list[torch.Tensor | None] = [None] * num_layers
        self.v: list[torch.Tensor | None] = [None] * num_layers

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        old_k, old_v = self.k[layer], self.v[layer]
        self.k[layer] = k if old_k is None else torch.cat([old_k, k])
        self.v[layer] = v if old_v is None else torch.cat([old_v, v])
        keys, values = self.k[layer], self.v[layer]  # [L, kv_heads, dim]
        new, total = q.shape[0], keys.shape[0]
        # query i sits at position total - new + i and may see keys 0 .. that position
        allowed = torch.arange(total)[None, :] <= torch.arange(total - new, total)[:, None]
        group = q.shape[1] // keys.shape[1]
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1), expand_kv(keys.transpose(0, 1), group), expand_kv(values.transpose(0, 1), group),
            attn_mask=allowed)
        return out.transpose(0, 1)

    def __len__(self) -> int:
        return 0 if self.k[0] is None else self.k[0].shape[0]


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # one fused ATen op instead of five: on a CPU a decode step's cost is partly per op dispatched
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding, half-split convention: pairs are (i, i + head_dim/2). x: [N, heads, dim]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Block(nn.Module):
    """One decoder layer. Q, K and V come from one fused projection, and so do the MLP's gate and up halves:
    the same weights as separate matrices, but one matmul (one read of the input, one op dispatched) each."""

    def __init__(self, cfg: ModelConfig, index: int):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.index, self.heads, self.kv_heads, self.dim = index, cfg.num_heads, cfg.num_kv_heads, d
        self.attn_norm = RMSNorm(h, cfg.norm_eps)
        self.qkv = nn.Linear(h, (cfg.num_heads + 2 * cfg.num_kv_heads) * d, bias=False)
        self.o = nn.Linear(cfg.num_heads * d, h, bias=False)
        self.mlp_norm = RMSNorm(h, cfg.norm_eps)
        self.gate_up = nn.Linear(h, 2 * cfg.intermediate_size, bias=False)  # rows: gate, then up
        self.down = nn.Linear(cfg.intermediate_size, h, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: AttentionBackend) -> torch.Tensor:
        n = x.shape[0]
        qkv = self.qkv(self.attn_norm(x)).view(n, self.heads + 2 * self.kv_heads, self.dim)
        rotated = rotate(qkv[:, :self.heads + self.kv_heads], cos, sin)  # q and k heads in one rotation
        q, k = rotated[:, :self.heads], rotated[:, self.heads:]
        v = qkv[:, self.heads + self.kv_heads:]
        x = x + self.o(kv.attend(self.index, q, k, v).reshape(n, -1))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


def fuse_projections(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Convert a state dict saved with separate q/k/v and gate/up matrices to the fused layout.

    The trained checkpoints were saved before the projections were fused; concatenating the rows gives
    exactly the same function, so they load unchanged instead of being retrained.
    """
    out = dict(state)
    for key in [k for k in state if k.endswith(".q.weight")]:
        prefix = key[:-len("q.weight")]
        out[prefix + "qkv.weight"] = torch.cat([out.pop(prefix + n + ".weight") for n in ("q", "k", "v")])
    for key in [k for k in state if k.endswith(".gate.weight")]:
        prefix = key[:-len("gate.weight")]
        out[prefix + "gate_up.weight"] = torch.cat([out.pop(prefix + n + ".weight") for n in ("gate", "up")])
    return out


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        check_llama_style(cfg)
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        inv_freq = cfg.rope_theta ** (-torch.arange(0, cfg.head_dim, 2, dtype=torch.float64) / cfg.head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, kv: AttentionBackend,
                select: torch.Tensor | None = None) -> torch.Tensor:
        """tokens, positions: 1-D [N] -> logits [N, vocab]. K/V go to and come from ``kv``.

        ``select`` (indices into N) keeps only those rows before the output head: a server needs the logits
        of each sequence's last token only.
        """
        if positions.numel() and int(positions.max()) >= self.cfg.max_position_embeddings:
            raise ValueError(f"position {int(positions.max())} is past max_position_embeddings "
                             f"({self.cfg.max_position_embeddings})")
        x = self.embed(tokens)
        angles = positions.to(torch.float64)[:, None] * self.inv_freq[None, :]  # [N, dim/2]
        cos = angles.cos().to(x.dtype)[:, None, :]
        sin = angles.sin().to(x.dtype)[:, None, :]
        for block in self.blocks:
            x = block(x, cos, sin, kv)
        x = self.norm(x if select is None else x[select])
        return x @ self.embed.weight.T if self.lm_head is None else self.lm_head(x)

    def score(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits for a [batch, time] block with no cache (training and evaluation)."""
        b, t = tokens.shape
        positions = torch.arange(t).repeat(b)
        return self.forward(tokens.reshape(-1), positions, CausalBackend(b)).view(b, t, -1)


def probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(logits / temperature) in float64, for ``temperature`` > 0.

    The largest logit is subtracted first, so a temperature small enough to overflow the division gives its
    limit (all mass on the largest logits) instead of NaN."""
    temperature = inputs.positive(temperature, "temperature")
    logits = logits.double()
    return torch.softmax((logits - logits.max(dim=-1, keepdim=True).values) / temperature, dim=-1)


def sample(logits: torch.Tensor, temperature: float = 0.0, generator: torch.Generator | None = None) -> int:
    """Greedy when temperature is 0, else a draw from softmax(logits / temperature)."""
    temperature = inputs.real(temperature, "temperature", low=0.0,
                              accepted="a finite number >= 0 (0 is greedy)")
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point() or not torch.isfinite(logits).all():
        raise inputs.InputError("logits must be a tensor of finite floating-point scores")
    if temperature <= 0:
        return int(torch.argmax(logits))
    return int(torch.multinomial(probs(logits, temperature), 1, generator=generator))


@torch.no_grad()
def generate(model: Transformer, prompt_ids: list[int], max_new_tokens: int, temperature: float = 0.0,
             seed: int | None = None, return_logits: bool = False):
    """The oracle: serve one request alone with a growing cache. Greedy unless ``temperature`` > 0.

    Returns the new token ids, or (ids, [logits per new token]) when ``return_logits`` is set.
    """
    if not isinstance(prompt_ids, (list, tuple)) or not prompt_ids:
        raise inputs.InputError(f"prompt_ids must be a non-empty list of token ids, got {prompt_ids!r:.60}")
    vocab, positions = model.cfg.vocab_size, model.cfg.max_position_embeddings
    for token in prompt_ids:
        inputs.integer(token, "prompt_ids (token ids)", minimum=0, maximum=vocab - 1)
    # the last new token is sampled, never fed: prompt + new - 1 positions (as engine.checks.fits_model counts)
    max_new_tokens = inputs.positive_int(max_new_tokens, "max_new_tokens",
                                         maximum=max(1, positions - len(prompt_ids) + 1))
    temperature = inputs.real(temperature, "temperature", low=0.0, accepted="a finite number >= 0 (0 is greedy)")
    generator = torch.Generator().manual_seed(inputs.seed(seed)) if seed is not None else None
    cache = GrowingCache(model.cfg.num_layers)
    tokens = torch.tensor(prompt_ids, dtype=torch.long)
    out: list[int] = []
    seen: list[torch.Tensor] = []
    for _ in range(max_new_tokens):
        start = len(cache)
        logits = model(tokens, torch.arange(start, start + len(tokens)), cache)[-1]
        seen.append(logits)
        out.append(sample(logits, temperature, generator))
        tokens = torch.tensor(out[-1:], dtype=torch.long)
    return (out, seen) if return_logits else out


# Every public function above refuses a wrong record (a string where a Deployment goes) in one sentence.
inputs.check_object_arguments(globals())
