"""Accelerators: dense peak FLOP/s, memory bandwidth, memory and GPU-to-GPU links, each from its public datasheet.

Units: FLOP/s and bytes/s are plain SI (1 TB/s = 1e12 bytes/s). Memory capacity is stored in bytes and
counted in binary GiB. The datasheet's memory figure is a marketing round number, neither exactly GB nor
GiB: an H100 "80GB" reports 81,559 MiB in nvidia-smi, which is 79.6 GiB (85.5 GB). The registry stores the
datasheet number as GiB (80 GiB for the H100), 0.4 GiB per GPU more than the driver shows, a simplification
that flatters the KV budget by about half a percent. FLOP/s are the *dense* figures; datasheets headline the
2:4-sparsity rate (two of every four weights zero), which is twice these.
"""

from __future__ import annotations

from dataclasses import dataclass

from stage5.names import resolve

GiB = 2**30
GB = 10**9
TB = 10**12
TFLOP = 10**12


@dataclass(frozen=True)
class Hardware:
    """One accelerator (or this machine, measured).

    Attributes:
        name: registry name.
        flops_bf16: dense 16-bit tensor FLOP/s (the rate BF16 weights and activations run at).
        flops_fp8: dense FP8 FLOP/s, or ``None`` where the chip has no FP8 matmul (FP8 weights are then
            upcast and run at the 16-bit rate: they save bytes, not FLOPs).
        bandwidth: memory bandwidth, bytes/s.
        memory_bytes: memory per device, bytes.
        source: where the figures come from.
        link_bandwidth: GPU-to-GPU bandwidth per direction, bytes/s (NVLink or, without it, PCIe): half the
            bidirectional total a datasheet prints. Only estimate mode uses it (tensor-parallel all-reduce).
        link_latency_s: latency per ring hop of a small all-reduce (NCCL's tuning model, Ring/LL protocol,
            src/graph/tuning.cc: 0.4 us over NVLink, 1.0 us over PCIe).
    """

    name: str
    flops_bf16: float
    flops_fp8: float | None
    bandwidth: float
    memory_bytes: float
    source: str
    link_bandwidth: float = 32 * GB
    link_latency_s: float = 1.0e-6
    # GPUs one all-to-all direct link joins (NVSwitch or AMD Infinity Fabric mesh); 1 = PCIe only. Within it an
    # engine runs its own one-shot/two-shot all-reduce for small messages (:func:`stage5.cost.allreduce_one_s`).
    nvlink_domain: int = 1
    # GPUs per server: past it, tensor parallelism crosses the inter-node network.
    gpus_per_node: int = 8
    # Inter-node bandwidth per GPU and direction: one ConnectX-7 400 Gb/s NIC per GPU (DGX H100/H200/B200: "eight
    # single-port NVIDIA ConnectX-7 VPI, up to 400 Gb/s", DGX BasePOD reference architecture, "Core Components"),
    # 50 GB/s. Assumed for every server without its own figure below. A server has one NIC per GPU, and NCCL
    # spreads a ring's channels over all of them (:func:`stage5.cost.allreduce_one_s`).
    node_link_bandwidth: float = 50 * GB
    # All-reduce bus bandwidth reached across servers over their NICs: 192 GB/s of a DGX A100's 8 x 200 Gb/s
    # (200 GB/s), 96%, reported by an NCCL maintainer (github.com/NVIDIA/nccl/issues/812, 2023; one figure, with no
    # message size, algorithm or node count stated). Applied to every network, and to one NIC's point-to-point send
    # between pipeline stages, for want of other measurements.
    node_link_efficiency: float = 0.96
    # Latency of one ring step over the network: NCCL's tuning model, hwLat[NET][Ring][LL] = 2.7 us
    # (NVIDIA/nccl src/graph/tuning.cc).
    node_link_latency_s: float = 2.7e-6
    # Fixed latency of an engine's custom all-reduce of a small message inside one NVLink domain: 5.9 us on 8 x H100
    # for 512 bytes (3.7 us on 2, 4.8 us on 4: roughly flat in n), SGLang PR #2904's microbenchmark of the
    # TensorRT-LLM-derived kernel (github.com/sgl-project/sglang/pull/2904, "unit test performance in H100").
    # Used for every NVLink-class GPU, for want of a measurement on the others.
    allreduce_latency_s: float = 5.9e-6
    # NCCL's tuning model (src/graph/tuning.cc), Ring/LL base latency: the fixed cost of one small collective.
    collective_latency_s: float = 3.6e-6
    # All-reduce bus bandwidth reached over NVLink: 366 GB/s of H100's 450 GB/s per direction, 77%, measured with
    # nccl-tests on 4 x H100 (waynehacking8.github.io/blog/nccl-nvlink-bandwidth, 2026). Applied to PCIe links too,
    # for want of a measurement there.
    link_efficiency: float = 0.77

    @property
    def ridge(self) -> float:
        """Ridge point in FLOPs per byte: above it a kernel is compute-bound, below it bandwidth-bound."""
        return self.flops_bf16 / self.bandwidth

    def flops(self, bytes_per_param: float = 2.0) -> float:
        """Peak FLOP/s for matmuls whose weights are stored at ``bytes_per_param``.

        Only 8-bit weights (1 byte, W8A8) get the FP8/INT8 tensor-core rate. 4-bit weights (about 0.5 byte) are
        weight-only formats (W4A16): kernels dequantize to 16 bits and multiply at the BF16 rate.
        """
        if bytes_per_param == 1.0 and self.flops_fp8:
            return self.flops_fp8
        return self.flops_bf16


def _gpu(name: str, bf16_tflops: float, fp8_tflops: float | None, tb_per_s: float, mem_gib: float,
         source: str, link_gb_per_s: float = 64.0, domain: int | None = None, node_gb_per_s: float = 50.0,
         per_node: int = 8) -> Hardware:
    """``link_gb_per_s``: the bidirectional GPU-to-GPU figure of the datasheet (default: PCIe Gen4 x16, 64 GB/s).
    ``domain``: GPUs the direct link joins all-to-all (default 8 for a direct link, 1 for PCIe);
    ``node_gb_per_s``: inter-node bandwidth per GPU and direction; ``per_node``: GPUs per server."""
    nvlink = link_gb_per_s > 128  # anything faster than a PCIe Gen5 x16 slot is a direct link
    return Hardware(name, bf16_tflops * TFLOP, fp8_tflops * TFLOP if fp8_tflops else None,
                    tb_per_s * TB, mem_gib * GiB, source, link_bandwidth=link_gb_per_s / 2 * GB,
                    link_latency_s=0.4e-6 if nvlink else 1.0e-6,
                    nvlink_domain=domain if domain is not None else (8 if nvlink else 1),
                    gpus_per_node=per_node, node_link_bandwidth=node_gb_per_s * GB)


GPUS: dict[str, Hardware] = {g.name: g for g in (
    # NVIDIA H100 Tensor Core GPU datasheet (SXM column): BF16 1,979 TFLOPS and FP8 3,958 TFLOPS "with
    # sparsity", so 989.5 and 1,979 dense; 3.35 TB/s HBM3; 80GB; NVLink 900GB/s.
    # https://www.nvidia.com/en-us/data-center/h100/
    _gpu("H100-SXM", 989.5, 1979.0, 3.35, 80, "NVIDIA H100 datasheet, SXM", 900),
    # Same datasheet, PCIe column: BF16 1,513 / FP8 3,026 TFLOPS with sparsity; 2 TB/s; 80GB; PCIe Gen5 128GB/s.
    # (NVLink bridges join H100 PCIe cards in pairs: a two-GPU domain.)
    _gpu("H100-PCIe", 756.5, 1513.0, 2.0, 80, "NVIDIA H100 datasheet, PCIe", 128, domain=2),
    # NVIDIA H200 datasheet (SXM): the H100's tensor cores with 141GB HBM3e at 4.8 TB/s; NVLink 900GB/s.
    # https://www.nvidia.com/en-us/data-center/h200/
    _gpu("H200", 989.5, 1979.0, 4.8, 141, "NVIDIA H200 datasheet, SXM", 900),
    # NVIDIA A100 datasheet: BF16 312 TFLOPS dense (624 sparse); no FP8; 40GB HBM2 at 1,555 GB/s (SXM);
    # NVLink 600GB/s. https://www.nvidia.com/en-us/data-center/a100/
    # DGX A100 networks each GPU through one ConnectX-6 200 Gb/s HCA (DGX A100 user guide), 25 GB/s per direction.
    _gpu("A100-40GB", 312.0, None, 1.555, 40, "NVIDIA A100 datasheet, 40GB SXM", 600, node_gb_per_s=25),
    # Same datasheet: 80GB HBM2e at 2,039 GB/s (SXM).
    _gpu("A100-80GB", 312.0, None, 2.039, 80, "NVIDIA A100 datasheet, 80GB SXM", 600, node_gb_per_s=25),
    # NVIDIA HGX B200 datasheet, per GPU: BF16 2.25 PFLOPS dense (4.5 sparse), FP8 4.5 dense (9 sparse);
    # 180GB HBM3e at 7.7 TB/s; NVLink 1.8TB/s. https://www.nvidia.com/en-us/data-center/hgx/
    _gpu("B200", 2250.0, 4500.0, 7.7, 180, "NVIDIA HGX B200 datasheet, per GPU", 1800),
    # NVIDIA L40S datasheet: BF16 362.05 / FP8 733 TFLOPS dense (733 / 1,466 with sparsity); 48GB GDDR6 at
    # 864 GB/s. https://www.nvidia.com/en-us/data-center/l40s/
    # (L40S, L4 and RTX 4090 have no NVLink: GPUs talk over PCIe Gen4 x16, 64 GB/s both ways, the default.)
    _gpu("L40S", 362.05, 733.0, 0.864, 48, "NVIDIA L40S datasheet"),
    # NVIDIA L4 datasheet: BF16 242 / FP8 485 TFLOPS with sparsity, so 121 / 242.5 dense; 24GB GDDR6 at
    # 300 GB/s. https://www.nvidia.com/en-us/data-center/l4/
    _gpu("L4", 121.0, 242.5, 0.300, 24, "NVIDIA L4 datasheet"),
    # AMD Instinct MI300X data sheet: BF16 1,307.4 / FP8 2,614.9 TFLOPS dense; 192GB HBM3 at 5.3 TB/s; Infinity
    # Fabric 896 GB/s peak (7 links x 128 GB/s). https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html
    _gpu("MI300X", 1307.4, 2614.9, 5.3, 192, "AMD Instinct MI300X data sheet", 896),
    # NVIDIA Ada Lovelace architecture whitepaper, appendix A (GeForce RTX 4090): BF16 with FP32 accumulate
    # 165.2 TFLOPS dense, FP8 330.3 dense; 24GB GDDR6X at 1,008 GB/s.
    _gpu("RTX-4090", 165.2, 330.3, 1.008, 24, "NVIDIA Ada Lovelace whitepaper, RTX 4090"),
    # NVIDIA T4 datasheet: FP16 mixed-precision tensor 65 TFLOPS (Turing has no 2:4 sparsity, so dense), INT8 130
    # TOPS, no FP8 and no BF16 (a BF16 model runs in FP16 on it); 16GB GDDR6 at 300 GB/sec; PCIe Gen3 x16
    # (32 GB/s both ways). https://www.nvidia.com/en-us/data-center/tesla-t4/ (Colab's free GPU.)
    _gpu("T4", 65.0, None, 0.300, 16, "NVIDIA T4 datasheet", 32),
    # A10G: AWS's variant of the A10 (G5 instances). NVIDIA publishes no A10G datasheet; it shares the A10's 24GB
    # GDDR6 at 600 GB/s (Baseten, "NVIDIA A10 vs A10G for ML model inference", 2023) and has less tensor compute
    # than the A10. The A10 datasheet's BF16 rate, 125 TFLOPS dense (250 with sparsity), is used: an upper bound,
    # so the floor stays a floor. https://www.nvidia.com/en-us/data-center/products/a10-gpu/
    _gpu("A10G", 125.0, None, 0.600, 24, "NVIDIA A10 datasheet (upper bound for AWS's A10G); Baseten A10 vs A10G"),
    # NVIDIA H100 NVL (H100 datasheet, NVL column): BF16 1,671 / FP8 3,341 TFLOPS with sparsity, so 835.5 / 1,670.5
    # dense; 94GB HBM3 at 3.9 TB/s; NVLink bridge 600GB/s between a pair of cards.
    # https://www.nvidia.com/en-us/data-center/h100/
    _gpu("H100-NVL", 835.5, 1670.5, 3.9, 94, "NVIDIA H100 datasheet, NVL", 600, domain=2),
    # NVIDIA GH200 Grace Hopper Superchip datasheet (HBM3e version): the H100's tensor cores (BF16 1,979 / FP8
    # 3,958 TFLOPS with sparsity, so 989.5 / 1,979 dense), 144GB HBM3e at 4.9 TB/s; NVLink 900GB/s. A standard
    # GH200 server holds one superchip, so a second GPU is across the network.
    # https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/
    _gpu("GH200", 989.5, 1979.0, 4.9, 144, "NVIDIA GH200 Grace Hopper Superchip datasheet, HBM3e", 900, domain=1,
         per_node=1),
    # AMD Instinct MI250X data sheet (one OAM module): peak FP16/BF16 matrix 383 TFLOPS, no FP8 (INT8 383 TOPS);
    # 128GB HBM2e at 3.2 TB/s; Infinity Fabric links 800 GB/s peak (8 links x 100 GB/s). Software sees the module as
    # two GCDs of 64 GB each; priced here as the data sheet's one module. HPE Cray EX nodes hold four.
    # https://www.amd.com/en/products/accelerators/instinct/mi200/mi250x.html
    _gpu("MI250X", 383.0, None, 3.2, 128, "AMD Instinct MI250X data sheet", 800, domain=4, per_node=4),
    # AMD Instinct MI325X data sheet: BF16 1,307.4 / FP8 2,614.9 TFLOPS dense (the MI300X's CDNA 3 compute); 256GB
    # HBM3E at 6 TB/s; Infinity Fabric 896 GB/s (7 links x 128 GB/s, eight GPUs fully connected).
    # https://www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html
    _gpu("MI325X", 1307.4, 2614.9, 6.0, 256, "AMD Instinct MI325X data sheet", 896),
    # NVIDIA GB200 NVL72 product page, specifications table, for the rack of 72 Blackwell GPUs (tensor rates "with
    # sparsity"): FP16/BF16 360 PFLOPS and FP8/FP6 720 PFLOPS, so 2.5 and 5 PFLOPS dense per GPU; "Up to 13.4 TB
    # HBM3e | 576 TB/s", 186 GB and 8 TB/s per GPU; NVLink bandwidth 130 TB/s, 1.8 TB/s per GPU, every one of the 72
    # GPUs on one NVLink Switch domain (so tensor parallelism up to 72 never crosses the network).
    # https://www.nvidia.com/en-us/data-center/gb200-nvl72/
    _gpu("GB200-NVL72", 2500.0, 5000.0, 8.0, 186, "NVIDIA GB200 NVL72 product page, per GPU of the rack", 1800,
         domain=72, per_node=72),
)}

_ALIASES = {"H100": "H100-SXM", "H100 SXM5": "H100-SXM", "A100": "A100-80GB", "4090": "RTX-4090",
            "RTX 4090": "RTX-4090", "MI300": "MI300X", "H200-SXM": "H200", "Tesla T4": "T4",
            "GB200": "GB200-NVL72", "NVL72": "GB200-NVL72"}


def gpu_names() -> list[str]:
    """Names of the accelerators in the registry."""
    return list(GPUS)


def get_gpu(name: str | Hardware) -> Hardware:
    """Look an accelerator up by name (``"H100"`` means the SXM part); unknown names list close matches."""
    if isinstance(name, Hardware):
        return name
    return GPUS[resolve(name, GPUS, "GPU", _ALIASES)]
