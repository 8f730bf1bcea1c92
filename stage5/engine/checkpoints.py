"""The two trained byte-level models shipped with the course, the corpus they were trained on, and a tiny
random one.

``target`` (a few million parameters) is what the engine benchmark serves; ``draft`` is a much smaller model
over the same 256-byte vocabulary, for speculative decoding. Weights are stored in float16 to keep the
repository small and are loaded as float32 (or any dtype asked for). Nothing here touches the network.
:func:`tiny_model` has random weights and no file: what exercise 2's loops and ``bench load --model tiny`` serve.
"""

from __future__ import annotations

import gzip
from dataclasses import asdict
from functools import cache
from pathlib import Path

import torch

from stage5.engine.model import Transformer, fuse_projections
from stage5.models import ModelConfig

CHECKPOINT_DIR = Path(__file__).resolve().parent.parent / "checkpoints"
CORPUS = Path(__file__).resolve().parent.parent / "data" / "cpython_stdlib.txt.gz"
HELD_OUT_FRACTION = 0.05  # the last 5% of the corpus bytes are never trained on

CONFIGS = {
    "target": ModelConfig(name="toy-target", vocab_size=256, hidden_size=256, num_layers=6, num_heads=8,
                          num_kv_heads=2, head_dim=32, intermediate_size=688, tie_embeddings=False,
                          max_position_embeddings=1024),
    "draft": ModelConfig(name="toy-draft", vocab_size=256, hidden_size=96, num_layers=2, num_heads=4,
                         num_kv_heads=2, head_dim=24, intermediate_size=256, tie_embeddings=True,
                         max_position_embeddings=1024),
}

TINY = ModelConfig(name="tiny-bytes", vocab_size=256, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                   head_dim=8, intermediate_size=64, max_position_embeddings=1024)


def tiny_model(seed: int = 0, dtype: torch.dtype = torch.float64) -> Transformer:
    """A 35k-parameter byte-level model with random weights: its tokens are noise, but every one is exact."""
    torch.manual_seed(seed)
    model = Transformer(TINY).to(dtype).eval()
    for p in model.parameters():
        p.data.normal_(0, 0.3)
    return model


@cache
def corpus_bytes() -> bytes:
    return gzip.decompress(CORPUS.read_bytes())


def corpus_split() -> tuple[bytes, bytes]:
    """(train, held_out) bytes of the shipped corpus."""
    data = corpus_bytes()
    cut = int(len(data) * (1 - HELD_OUT_FRACTION))
    return data[:cut], data[cut:]


def checkpoint_path(which: str) -> Path:
    return CHECKPOINT_DIR / f"{which}.pt"


def save(which: str, model: Transformer, meta: dict) -> Path:
    """Write ``<which>.pt`` (float16 weights, config, training summary) and ``<which>.json`` (config only)."""
    import json

    CHECKPOINT_DIR.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(torch.float16).clone() for k, v in model.state_dict().items()}
    path = checkpoint_path(which)
    torch.save({"config": asdict(model.cfg), "state_dict": state, "meta": meta}, path)
    (CHECKPOINT_DIR / f"{which}.json").write_text(json.dumps({**asdict(model.cfg), "training": meta}, indent=2))
    return path


@cache
def _load(which: str, dtype: torch.dtype) -> tuple[Transformer, ModelConfig, dict]:
    path = checkpoint_path(which)
    if not path.exists():
        raise FileNotFoundError(f"no {which} checkpoint at {path}; train one with "
                                f"`python scripts/train_tiny.py --model {which}`")
    blob = torch.load(path, map_location="cpu", weights_only=True)
    cfg = ModelConfig(**blob["config"])
    model = Transformer(cfg).to(dtype)
    model.load_state_dict({k: v.to(dtype) for k, v in fuse_projections(blob["state_dict"]).items()})
    model.eval()
    return model, cfg, blob["meta"]


def load(which: str, dtype: torch.dtype = torch.float32) -> tuple[Transformer, ModelConfig]:
    """(model, cfg) for ``"target"`` or ``"draft"``; cached, so treat the model as read-only."""
    if which not in CONFIGS:
        raise ValueError(f"unknown checkpoint {which!r}; choose from {sorted(CONFIGS)}")
    model, cfg, _ = _load(which, dtype)
    return model, cfg


def load_target(dtype: torch.dtype = torch.float32) -> tuple[Transformer, ModelConfig]:
    return load("target", dtype)


def load_draft(dtype: torch.dtype = torch.float32) -> tuple[Transformer, ModelConfig]:
    return load("draft", dtype)


def training_summary(which: str) -> dict:
    """The metadata saved with a checkpoint: losses, minutes, parameter count."""
    return _load(which, torch.float32)[2]
