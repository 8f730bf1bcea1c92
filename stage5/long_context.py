"""Long context: where KV reads overtake weight reads, where attention's FLOPs overtake the linear layers', what
FlashAttention saves, and what moving a KV cache costs (swap to host memory, or handing it from a prefill pool
to a decode pool) against recomputing it. Prices come from :mod:`stage5.cost`; this module adds the links.

Links are per GPU and per direction. A tensor-parallel deployment holds 1/n of each sequence's cache on each
GPU, and each GPU has its own host link and its own network card, so moving a cache uses all n at once.
"""

from __future__ import annotations

import numpy as np

from stage5 import cost, inputs
from stage5.hardware import GB, Hardware
from stage5.models import ModelConfig
from stage5.names import resolve

# GPU-to-host bandwidth per direction, bytes/s: the PCIe generation each datasheet names, x16 lanes. The
# datasheets print the bidirectional total; a transfer in one direction gets half of it.
# H100 datasheet (SXM and PCIe columns) and H200 datasheet: "PCIe Gen5: 128GB/s". A100 datasheet: "PCIe Gen4:
# 64GB/s". L40S datasheet: "PCIe Gen4 x16: 64GB/s bidirectional". L4 datasheet: "PCIe Gen4 x16". MI300X data
# sheet: "PCIe Gen 5 x16", 128 GB/s. RTX 4090 (Ada whitepaper): PCIe Gen4 x16.
HOST_LINK_BYTES_PER_S: dict[str, float] = {
    "H100-SXM": 64 * GB, "H100-PCIe": 64 * GB, "H200": 64 * GB, "MI300X": 64 * GB,
    "A100-40GB": 32 * GB, "A100-80GB": 32 * GB, "L40S": 32 * GB, "L4": 32 * GB, "RTX-4090": 32 * GB,
}
# Between a prefill pool and a decode pool on different machines: one 400 Gb/s InfiniBand NDR port per GPU
# (NVIDIA ConnectX-7 datasheet: "up to 400Gb/s"; a DGX H100 has eight, one per GPU), 50 GB/s per direction.
NETWORK_BYTES_PER_S = 400e9 / 8


def host_link(gpu: Hardware) -> float:
    """GPU-to-host bandwidth of one ``gpu`` per direction, bytes/s; GPUs without a cited figure are refused."""
    return HOST_LINK_BYTES_PER_S[resolve(gpu.name, HOST_LINK_BYTES_PER_S, "GPU with a host-link figure")]


# ------------------------------------------------------------------------------------------- crossovers
def kv_weight_crossover_context(dep: cost.Deployment, batch: float = 1) -> float:
    """The context (tokens per sequence) at which a decode step of ``batch`` sequences reads as many KV-cache
    bytes as weight bytes: weight bytes read / (batch x KV bytes per token). Every layer is priced over the
    whole context, as :func:`stage5.cost.kv_traffic_bytes` does (a sliding window would push it out)."""
    b = cost._positive(batch, "batch")
    return float(cost.weight_bytes_read(dep, b) / (b * dep.kv_bytes_per_token))


def attention_linear_crossover_prompt(model: ModelConfig) -> float:
    """The prompt length at which a prefill's causal attention FLOPs equal its linear layers' FLOPs.

    Linear: 2 N p (N active parameters). Attention (:func:`stage5.cost.attention_flops`): 4 L H d p (p + 1) / 2.
    Equal when p + 1 = N / (L H d)."""
    return model.active_params / (model.num_layers * model.num_heads * model.head_dim) - 1


def score_matrix_bytes(model: ModelConfig, prompt: cost.ArrayLike, bytes_per_element: float = 2.0) -> np.ndarray:
    """HBM traffic of the attention scores when a prefill materialises them: each layer writes a prompt x prompt
    matrix per query head and reads it back for the softmax and again for the PV product (three passes; the
    causal half is not skipped). FlashAttention keeps each tile of scores in on-chip memory, so this traffic
    drops to zero; the K and V bytes it reads are unchanged."""
    inputs.bytes_per_number(bytes_per_element, "bytes_per_element")
    p = cost._positive(prompt, "prompt")
    return 3.0 * model.num_layers * model.num_heads * p * p * bytes_per_element


# ------------------------------------------------------------------------------------------- moving a cache
def swap_s(dep: cost.Deployment, context: cost.ArrayLike) -> np.ndarray:
    """Seconds to copy one preempted sequence's KV cache to host memory and back, over every GPU's host link in
    parallel (the copies overlap no compute in this estimate; a real engine overlaps them with other steps)."""
    s = cost._positive(context, "context")
    return 2.0 * s * dep.kv_bytes_per_token / (host_link(dep.gpu) * dep.num_gpus)


def recompute_s(dep: cost.Deployment, context: cost.ArrayLike) -> np.ndarray:
    """Seconds to rebuild one preempted sequence's KV cache by prefilling its ``context`` tokens again."""
    return cost.prefill_step(dep, context).time_s


def kv_transfer_s(dep: cost.Deployment, prompt: cost.ArrayLike, link_bytes_per_s: float = NETWORK_BYTES_PER_S) -> np.ndarray:
    """Seconds to send a prefilled prompt's KV cache from a prefill pool to a decode pool of the same shape,
    each GPU over its own link of ``link_bytes_per_s`` (default: a 400 Gb/s network port per GPU)."""
    p = cost._positive(prompt, "prompt")
    # from a 10 Mb/s link to 1 PB/s, past any network port or NVLink (1.8 TB/s per GPU on Blackwell)
    inputs.real(link_bytes_per_s, "link_bytes_per_s", low=1e6, high=1e15,
                accepted="a positive bandwidth in [1e6, 1e15] bytes/s")
    # the bytes the prompt holds (a sliding window's layers stop at the window): chapter 14's hand-off bytes
    return cost.kv_bytes_per_sequence(dep, p) / (link_bytes_per_s * dep.num_gpus)


# Every public function above refuses a wrong record (a string where a Deployment goes) in one sentence.
inputs.check_object_arguments(globals())
