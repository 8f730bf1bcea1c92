"""A toy sized for timing: the same Llama-style decoder as the trained pair, large enough that a decode step
at batch 1 waits on memory, not on Python.

The trained target (:mod:`stage5.engine.checkpoints`) is a few million parameters: its weights fit in a
CPU's last-level cache, so its step time is mostly the fixed cost of dispatching a few hundred small ops, and
"a decode step reads every weight" does not describe what limits it. This toy keeps the architecture and
the :class:`~stage5.models.ModelConfig` type but makes its float32 weights several times a laptop's last-level
cache (Intel's Core i7-13700H datasheet: 24 MB of "Intel Smart Cache") and larger than the biggest desktop
one (AMD's Ryzen 9 7950X3D product page: 128 MB of L3), so each decode step streams them from DRAM.

Its weights are random, drawn from a seed when the model is built, so nothing is stored in the repository.
Random weights produce gibberish, which does not matter for timing: outputs, acceptance rates and
exactness checks stay with the trained pair. :data:`ROOFLINE_DRAFT` is a small model with the same number
of layers (so its op graph, and its fixed cost per step, match the target's) for speculative decoding.
"""

from __future__ import annotations

from functools import cache

import torch

from stage5.engine.model import Transformer
from stage5.models import ModelConfig

# 2 layers x (fused QKV 1536 -> 2560, O 1536 -> 1536, fused gate/up 1536 -> 8192, down 4096 -> 1536) plus a
# 256-byte vocabulary in and out: about 51 million parameters, 205 MB in float32 (checked in the tests). Few
# layers and wide matrices keep the ops per step few and each matrix-vector product long enough to stream at
# full bandwidth.
ROOFLINE_TOY = ModelConfig(name="roofline-toy", vocab_size=256, hidden_size=1536, num_layers=2, num_heads=12,
                           num_kv_heads=4, head_dim=128, intermediate_size=4096, tie_embeddings=False,
                           max_position_embeddings=1024)
ROOFLINE_DRAFT = ModelConfig(name="roofline-draft", vocab_size=256, hidden_size=192, num_layers=2, num_heads=12,
                             num_kv_heads=4, head_dim=16, intermediate_size=384, tie_embeddings=True,
                             max_position_embeddings=1024)
MIN_WEIGHT_BYTES = 128e6  # at least several times a laptop's last-level cache (see above)
DEFAULT_SEED = 0


def build(cfg: ModelConfig, seed: int = DEFAULT_SEED, dtype: torch.dtype = torch.float32) -> Transformer:
    """A model with random weights drawn from ``seed`` (normal, std 0.02, as Transformer initialises them)."""
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = Transformer(cfg)
    finally:  # building a timing model must not disturb anyone else's random stream
        torch.random.set_rng_state(state)
    return model.to(dtype).eval()


@cache
def _cached(which: str, seed: int, dtype: torch.dtype) -> tuple[Transformer, ModelConfig]:
    cfg = {"target": ROOFLINE_TOY, "draft": ROOFLINE_DRAFT}[which]
    return build(cfg, seed, dtype), cfg


def load_roofline_toy(seed: int = DEFAULT_SEED, dtype: torch.dtype = torch.float32) -> tuple[Transformer, ModelConfig]:
    """(model, cfg) of the timing toy; built once per process and seed, so treat the model as read-only."""
    return _cached("target", seed, dtype)


def load_roofline_draft(seed: int = DEFAULT_SEED, dtype: torch.dtype = torch.float32) -> tuple[Transformer, ModelConfig]:
    return _cached("draft", seed + 1, dtype)
