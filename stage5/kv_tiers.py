"""KV-cache tiers: when reloading a cached prefix from host memory, a local SSD or another node beats computing
it again, and how many sequences each tier keeps warm. Prices come from :mod:`stage5.cost` and the links from
:mod:`stage5.long_context`; this module adds the tiers below HBM.

A prefix of ``p`` tokens holds ``p x k`` bytes of K/V (``k``: the deployment's KV bytes per token, replicated heads
included). Reloading it over a link of ``B`` bytes/s per GPU, every GPU of the deployment reading its own share
at once, takes ``p k / (B n)``: the transfer chapter 12 prices from a prefill pool to a decode pool
(:func:`stage5.long_context.kv_transfer_s`), which is the same bytes over the same kind of link. Recomputing it
takes a prefill of ``p`` tokens (:func:`stage5.long_context.recompute_s`). Reload wins when the link is faster than

    B*(p) = p k / (n t_prefill(p)),

the break-even bandwidth per GPU (:func:`breakeven_bandwidth`). Once a prefill is compute-bound and its
attention is small, t_prefill = 2 N p / F (N active parameters, F the deployment's achieved FLOP/s), so B* is
k F / (2 N n), independent of the prefix: the ratio of the arithmetic a token costs to the bytes it leaves in the
cache (:func:`breakeven_bandwidth_limit`). Shorter prompts are cheaper to reload than that (a short prefill still
reads every weight once), and longer ones too (attention grows with the square of the prompt).

What this leaves out, and which way it leans: the transfer is priced at the link's rate with no per-request
latency (flattering the slow tiers for short prefixes), and with no overlap (engines load layer ``i + 1`` while
computing layer ``i``, as SGLang's HiCache does, which hides a reload under the uncached part's compute:
this leans the other way). Each tier's figures are per GPU, from the datasheets cited below.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stage5 import cost, inputs
from stage5 import long_context as lc
from stage5.hardware import GB, GiB, Hardware
from stage5.names import resolve

# The servers whose host memory and local drives are cited, per GPU. NVIDIA DGX H100 and DGX H200 datasheets:
# "System memory: 2TB" for eight GPUs, as 32 x 64 GB DIMMs (MLPerf Inference v4.1, NVIDIA's H200-SXM-141GBx8
# system description: "32x 64GB"), so 2 TiB / 8 = 256 GiB per GPU; "Internal storage: 8x 3.84 TB NVMe U.2", one
# drive per GPU. All the host memory is counted as KV cache: an upper bound (the operating system, pinned-memory
# limits and the engine's own buffers take some).
SERVERS: dict[str, tuple[float, float]] = {  # GPU -> (host memory bytes per GPU, NVMe bytes per GPU)
    "H100-SXM": (256 * GiB, 3.84e12), "H200": (256 * GiB, 3.84e12)}
# A U.2 NVMe drive's link: PCIe 4.0 x4, 16 GT/s per lane with 128b/130b encoding (PCI-SIG, PCI Express Base
# Specification 4.0) = 4 x 16e9 x 128/130 / 8 = 7.88 GB/s per direction. A drive reads no faster than its link, so
# this is an upper bound (datacenter Gen4 drives are rated at up to about 7 GB/s of sequential reads); a
# Gen5 x4 drive would double it.
SSD_BYTES_PER_S = 4 * 16e9 * 128 / 130 / 8

TIERS = ("cpu", "ssd", "remote")
TIER_LABELS = {"cpu": "host memory over PCIe", "ssd": "local NVMe SSD", "remote": "another node over the network"}


@dataclass(frozen=True)
class Tier:
    """One place a cached prefix can wait: its read bandwidth and capacity per GPU."""

    name: str
    bandwidth: float  # bytes/s per GPU, one direction
    capacity: float  # bytes per GPU, or inf where the pool is as large as the fleet (the remote tier)
    source: str


def tier(name: str, gpu: Hardware, remote_nodes: int = 1) -> Tier:
    """The tier ``name`` (:data:`TIERS`) of a server of ``gpu``s. ``remote_nodes``: how many other servers lend
    their host memory to a shared pool (Mooncake's store, LMCache's remote backend, SGLang HiCache's L3), which
    is read over one network port per GPU."""
    name = inputs.choice(name, "tier", TIERS)
    if name == "cpu":
        return Tier("cpu", lc.host_link(gpu), _server(gpu)[0], "PCIe to host DRAM (stage5.long_context)")
    if name == "ssd":
        return Tier("ssd", SSD_BYTES_PER_S, _server(gpu)[1], "one PCIe 4.0 x4 NVMe drive per GPU")
    nodes = inputs.positive_int(remote_nodes, "remote_nodes (servers lending host memory)", maximum=100_000)
    return Tier("remote", lc.NETWORK_BYTES_PER_S, nodes * _server(gpu)[0],
                "400 Gb/s network port per GPU (stage5.long_context), other servers' host DRAM")


def _server(gpu: Hardware) -> tuple[float, float]:
    """(host memory, NVMe) bytes per GPU of the server ``gpu`` comes in; GPUs without cited figures are refused."""
    return SERVERS[resolve(gpu.name, SERVERS, "GPU with cited host-memory and drive figures")]


def reload_s(dep: cost.Deployment, prefix: cost.ArrayLike, name: str, remote_nodes: int = 1) -> np.ndarray:
    """Seconds to bring a cached prefix of ``prefix`` tokens back into HBM from tier ``name``, every GPU of the
    deployment over its own link: chapter 12's KV transfer (:func:`stage5.long_context.kv_transfer_s`) at the
    tier's bandwidth."""
    t = tier(name, dep.gpu, remote_nodes)
    return lc.kv_transfer_s(dep, prefix, t.bandwidth)


def speedup(dep: cost.Deployment, prefix: cost.ArrayLike, name: str) -> np.ndarray:
    """Recompute time over reload time: above 1, reloading the prefix from tier ``name`` is faster."""
    return lc.recompute_s(dep, prefix) / reload_s(dep, prefix, name)


def breakeven_bandwidth(dep: cost.Deployment, prefix: cost.ArrayLike) -> np.ndarray:
    """The link bandwidth per GPU (bytes/s) at which reloading a prefix of ``prefix`` tokens takes as long as
    recomputing it: p k / (n t_prefill(p)). A faster tier reloads; a slower one should recompute."""
    p = cost._positive(prefix, "prefix (tokens)")
    return p * dep.kv_bytes_per_token / (dep.num_gpus * lc.recompute_s(dep, p))


def breakeven_bandwidth_limit(dep: cost.Deployment) -> float:
    """B* where prefill is compute-bound and attention is negligible: k F / (2 N n), F the deployment's
    achieved prefill FLOP/s, N its active parameters. Independent of the prefix."""
    flops = cost.achieved_flops(dep, "prefill")
    return dep.kv_bytes_per_token * flops / (2.0 * dep.model.active_params * dep.num_gpus)


def capacity_sequences(dep: cost.Deployment, context: float, name: str | None = None, remote_nodes: int = 1) -> int:
    """Sequences of ``context`` tokens whose caches fit in HBM (``name`` None: the KV budget, as
    :func:`stage5.cost.max_concurrency` counts it) or in tier ``name`` across the deployment's GPUs."""
    s = float(inputs.counts(context, "context (tokens per sequence)"))  # at least one token: no division by ~0
    if name is None:
        return int(cost.max_concurrency(dep, s))
    t = tier(name, dep.gpu, remote_nodes)
    fit = t.capacity * dep.num_gpus // float(cost.kv_bytes_per_sequence(dep, s))
    if not fit <= inputs.MAX_COUNT:  # an infinite pool, or a count past what a float holds exactly
        raise inputs.InputError(f"tier {t.name} would hold {fit:.3g} sequences of {s:,.0f} tokens, past 2**53 (beyond "
                                "that a count is not exact); accepted: a finite tier and a longer context")
    return int(fit)


def tier_gb_per_s(name: str, gpu: Hardware) -> float:
    """A tier's bandwidth per GPU in decimal GB/s (for the chapter's prose)."""
    return tier(name, gpu).bandwidth / GB


# Every public function above refuses a wrong record (a string where a Deployment goes) in one sentence.
inputs.check_object_arguments(globals())
