"""Accelerators: dense peak FLOP/s, memory bandwidth, memory and GPU-to-GPU links, each from its public datasheet.

Units: FLOP/s and bytes/s are plain SI (1 TB/s = 1e12 bytes/s). Memory capacity is stored in bytes and
counted in binary GiB. The datasheet's memory figure is a marketing round number, neither exactly GB nor
GiB: an H100 "80GB" reports 81,559 MiB in nvidia-smi, which is 79.6 GiB (85.5 GB). The registry stores the
datasheet number as GiB (80 GiB for the H100), 0.4 GiB per GPU more than the driver shows, a simplification
that flatters the KV budget by about half a percent. FLOP/s are the *dense* figures; datasheets headline the
2:4-sparsity rate (two of every four weights zero), which is twice these. Each GPU carries the dense peak of every
tensor format it has (:data:`TENSOR_FORMATS`: FP16 with FP16 and with FP32 accumulation, BF16, FP8 at both
accumulations, INT8, FP4), each from its datasheet or architecture whitepaper: the estimate prices matmuls at FP32
accumulation, the floor at the fastest format a kernel can run the values in (:meth:`Hardware.matmul_rate`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from stage5.inputs import integer, real
from stage5.names import resolve

GiB = 2**30
GB = 10**9
TB = 10**12
TFLOP = 10**12


# Tensor-core formats a matmul kernel can run, named "inputs/accumulator". Dense rates only: a datasheet's
# headline figure is usually the 2:4-sparsity rate, twice these, and no dense model uses it.
TENSOR_FORMATS: dict[str, str] = {
    "fp16/fp16": "FP16 inputs, FP16 accumulation",
    "fp16/fp32": "FP16 inputs, FP32 accumulation",
    "bf16/fp32": "BF16 inputs, FP32 accumulation",
    "fp8/fp16": "FP8 inputs, FP16 accumulation",
    "fp8/fp32": "FP8 inputs, FP32 accumulation",
    "int8/int32": "INT8 inputs, INT32 accumulation",
    "fp4/fp32": "FP4 (E2M1) inputs with block scales (NVFP4, MXFP4), FP32 accumulation",
}
# The precision a deployment's matmuls run at (its activations'), and the tensor formats that can serve it.
MATMULS: dict[str, tuple[str, ...]] = {"16-bit": ("fp16/fp16", "fp16/fp32", "bf16/fp32"),
                                       "fp8": ("fp8/fp16", "fp8/fp32"), "int8": ("int8/int32",),
                                       "fp4": ("fp4/fp32",)}
# What the estimate assumes each runs at: FP32 accumulation, what PyTorch's cuBLAS calls use for 16-bit GEMMs
# (cublasGemmEx with a CUDA_R_32F compute type whatever allow_fp16_reduced_precision_reduction says:
# pytorch/pytorch#123157) and what cuBLASLt requires for FP8 (CUBLAS_COMPUTE_32F). Kernels that accumulate in FP16
# (llama.cpp's cuBLAS path before April 2025, ggml-org/llama.cpp#13101; TinyChat's W4A16 GEMM) can run faster on
# GeForce cards, where FP32 accumulation is half rate: the floor allows for them (:meth:`Hardware.matmul_rate`).
STANDARD: dict[str, tuple[str, ...]] = {"16-bit": ("bf16/fp32", "fp16/fp32"), "fp8": ("fp8/fp32",),
                                        "int8": ("int8/int32",), "fp4": ("fp4/fp32",)}
# Where a chip lacks a precision, what a kernel can run those matmuls as without changing a single value:
# FP4 (E2M1) values are exact in FP8, in INT8 within a scale block, and in 16 bits; FP8 (E4M3) values and INT8
# integers are exact in FP16. The floor takes the fastest of these; the estimate upcasts to 16 bits, as engines'
# weight-only kernels do (vLLM's Marlin runs FP8 and FP4 checkpoints on chips without those tensor cores).
EXACT_IN: dict[str, tuple[str, ...]] = {"16-bit": ("16-bit",), "fp8": ("fp8", "16-bit"), "int8": ("int8", "16-bit"),
                                        "fp4": ("fp4", "fp8", "int8", "16-bit")}


@dataclass(frozen=True)
class Hardware:
    """One accelerator (or this machine, measured).

    Attributes:
        name: registry name.
        peaks: dense peak FLOP/s (OP/s for INT8) of every tensor format the chip has, as ``(format, rate)`` pairs
            keyed by :data:`TENSOR_FORMATS`; a format the chip lacks is absent. :attr:`flops_bf16` and
            :attr:`flops_fp8` are the rates the estimate assumes (FP32 accumulation), :meth:`matmul_rate` the
            fastest a kernel can use.
        bandwidth: memory bandwidth, bytes/s.
        memory_bytes: memory per device, bytes.
        source: where the figures come from.
        link_bandwidth: GPU-to-GPU bandwidth per direction, bytes/s (NVLink or, without it, PCIe): half the
            bidirectional total a datasheet prints. Only estimate mode uses it (tensor-parallel all-reduce).
        link_latency_s: latency per ring hop of a small all-reduce (NCCL's tuning model, Ring/LL protocol,
            src/graph/tuning.cc: 0.4 us over NVLink, 1.0 us over PCIe).
    """

    name: str
    peaks: tuple[tuple[str, float], ...]
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

    def __post_init__(self) -> None:
        table = dict(self.peaks)
        unknown = set(table) - set(TENSOR_FORMATS)
        if unknown:
            raise ValueError(f"{self.name}: unknown tensor formats {sorted(unknown)}; accepted: "
                             f"{', '.join(TENSOR_FORMATS)}")
        if not any(k in table for k in MATMULS["16-bit"]):
            raise ValueError(f"{self.name}: a peak table needs a 16-bit rate ({', '.join(MATMULS['16-bit'])})")
        for fmt, rate in table.items():  # a bool is an int to Python, and inf > 0: both refused by name
            real(rate, f"{self.name}: peak FLOP/s of {fmt}", low=0.0, low_open=True,
                 accepted="a positive, finite number of FLOP/s")
        # A user-defined accelerator's other figures, each checked where it enters (issue 52: a bandwidth of
        # -3e12 bytes/s priced a TPOT of 0.0 s): finite and positive, latencies >= 0, efficiencies in (0, 1].
        for name, what in (("bandwidth", "memory bandwidth, bytes/s"), ("memory_bytes", "memory per device, bytes"),
                           ("link_bandwidth", "GPU-to-GPU bandwidth per direction, bytes/s"),
                           ("node_link_bandwidth", "inter-node bandwidth per GPU, bytes/s")):
            real(getattr(self, name), f"{self.name}: {name} ({what})", low=0.0, low_open=True,
                 accepted="a positive, finite number")
        for name in ("link_latency_s", "node_link_latency_s", "allreduce_latency_s", "collective_latency_s"):
            real(getattr(self, name), f"{self.name}: {name}", low=0.0, high=1.0,
                 accepted="a finite number of seconds in [0, 1]")
        for name in ("link_efficiency", "node_link_efficiency"):
            real(getattr(self, name), f"{self.name}: {name}", low=0.0, high=1.0, low_open=True,
                 accepted="a share of the link's bandwidth in (0, 1]")
        for name in ("nvlink_domain", "gpus_per_node"):
            integer(getattr(self, name), f"{self.name}: {name} (GPUs)", minimum=1, maximum=1 << 20)

    def peak(self, fmt: str) -> float | None:
        """Dense peak of one tensor format (a key of :data:`TENSOR_FORMATS`); None where the chip lacks it."""
        if fmt not in TENSOR_FORMATS:
            raise ValueError(f"unknown tensor format {fmt!r}; accepted: {', '.join(TENSOR_FORMATS)}")
        return dict(self.peaks).get(fmt)

    def matmul_rate(self, matmul: str = "16-bit", fastest: bool = False,
                    accumulation: str = "fp32") -> tuple[str, float]:
        """(tensor format, dense FLOP/s) matmuls at ``matmul`` precision (a key of :data:`MATMULS`) run at.

        The estimate (``fastest=False``) assumes FP32 accumulation (:data:`STANDARD`) and upcasts to 16 bits where
        the chip lacks the precision. The floor (``fastest=True``) takes the fastest format a kernel can run those
        values in exactly (:data:`EXACT_IN`), any accumulation: FP16 accumulation on a GeForce card, FP8 tensor
        cores for FP4 values on a chip without FP4. ``accumulation="fp16"``: an estimate of an engine whose GEMMs
        accumulate in FP16, so either accumulation of its precision counts."""
        if matmul not in MATMULS:
            raise ValueError(f"unknown matmul precision {matmul!r}; accepted: {', '.join(MATMULS)}")
        table = dict(self.peaks)

        def best(formats: list[str]) -> tuple[str, float]:  # the first of the fastest, so a tie names the usual one
            return max(((f, table[f]) for f in formats), key=lambda pair: pair[1])

        if accumulation not in ("fp32", "fp16"):
            raise ValueError(f"accumulation is 'fp32' or 'fp16', got {accumulation!r}")
        if not fastest:  # the first precision the chip has, at FP32 accumulation (or either, for an FP16 one)
            for c in (matmul, "16-bit"):
                allowed = (*STANDARD[c], *MATMULS[c]) if accumulation == "fp16" else STANDARD[c]
                if formats := [f for f in allowed if f in table]:
                    return best(formats)
        # Every format that holds the values exactly, each precision's FP32-accumulation format first. A 16-bit
        # format always exists (checked at construction), so the list is never empty.
        return best([f for c in EXACT_IN[matmul] for f in (*STANDARD[c], *MATMULS[c]) if f in table])

    @property
    def flops_bf16(self) -> float:
        """Dense 16-bit tensor FLOP/s with FP32 accumulation (BF16, or FP16 where the chip has no BF16): the rate
        the estimate prices 16-bit matmuls at."""
        return self.matmul_rate("16-bit")[1]

    @property
    def flops_fp8(self) -> float | None:
        """Dense FP8 FLOP/s with FP32 accumulation, or ``None`` where the chip has no FP8 matmul (FP8 weights are
        then upcast and run at the 16-bit rate: they save bytes, not FLOPs)."""
        return self.peak("fp8/fp32")

    def scaled(self, factor: float) -> Hardware:
        """This chip with every peak multiplied by ``factor`` (a what-if: twice the arithmetic, same memory)."""
        return replace(self, name=f"{self.name} x{factor:g} FLOP/s",
                       peaks=tuple((f, r * factor) for f, r in self.peaks))

    def without_low_precision(self) -> Hardware:
        """This chip with only its 16-bit formats: what a weight-only format's matmuls can use."""
        return replace(self, peaks=tuple((f, r) for f, r in self.peaks if f in MATMULS["16-bit"]))

    @property
    def ridge(self) -> float:
        """Ridge point in FLOPs per byte: above it a kernel is compute-bound, below it bandwidth-bound."""
        return self.flops_bf16 / self.bandwidth

    def flops(self, bytes_per_param: float = 2.0) -> float:
        """Peak FLOP/s the estimate assumes for matmuls whose weights are stored at ``bytes_per_param``.

        Only 8-bit weights (1 byte, W8A8) get the FP8 tensor-core rate. 4-bit weights (about 0.5 byte) are
        weight-only formats (W4A16): kernels dequantize to 16 bits and multiply at the BF16 rate.
        """
        return self.matmul_rate("fp8" if bytes_per_param == 1.0 else "16-bit")[1]


def _tflops(**dense: float) -> tuple[tuple[str, float], ...]:
    """A peak table from dense TFLOPS. ``fp16=`` is FP16 at both accumulations (datacenter parts run FP32
    accumulation at full rate), ``bf16=`` BF16 with FP32 accumulation, ``fp8=`` FP8 at both accumulations, ``int8=``
    and ``fp4=`` those formats; ``fp16_acc16=``, ``fp16_acc32=``, ``fp8_acc16=``, ``fp8_acc32=`` set one
    accumulation alone (GeForce cards, whose FP32 accumulation runs at half rate)."""
    keys = {"fp16": ("fp16/fp16", "fp16/fp32"), "bf16": ("bf16/fp32",), "fp8": ("fp8/fp16", "fp8/fp32"),
            "int8": ("int8/int32",), "fp4": ("fp4/fp32",), "fp16_acc16": ("fp16/fp16",),
            "fp16_acc32": ("fp16/fp32",), "fp8_acc16": ("fp8/fp16",), "fp8_acc32": ("fp8/fp32",)}
    table = {fmt: rate * TFLOP for arg, rate in dense.items() for fmt in keys[arg]}
    return tuple((fmt, table[fmt]) for fmt in TENSOR_FORMATS if fmt in table)


def _gpu(name: str, peaks: tuple[tuple[str, float], ...], tb_per_s: float, mem_gib: float, source: str,
         link_gb_per_s: float = 64.0, domain: int | None = None, node_gb_per_s: float = 50.0,
         per_node: int = 8) -> Hardware:
    """``peaks``: :func:`_tflops`. ``link_gb_per_s``: the bidirectional GPU-to-GPU figure of the datasheet
    (default: PCIe Gen4 x16, 64 GB/s). ``domain``: GPUs the direct link joins all-to-all (default 8 for a direct
    link, 1 for PCIe); ``node_gb_per_s``: inter-node bandwidth per GPU and direction; ``per_node``: GPUs per
    server."""
    nvlink = link_gb_per_s > 128  # anything faster than a PCIe Gen5 x16 slot is a direct link
    return Hardware(name, peaks, tb_per_s * TB, mem_gib * GiB, source, link_bandwidth=link_gb_per_s / 2 * GB,
                    link_latency_s=0.4e-6 if nvlink else 1.0e-6,
                    nvlink_domain=domain if domain is not None else (8 if nvlink else 1),
                    gpus_per_node=per_node, node_link_bandwidth=node_gb_per_s * GB)


# Every figure below is the dense rate: a datasheet that prints "with sparsity" (an asterisk on NVIDIA's) gives twice
# it, and the comment quotes the printed figure. Where a datasheet prints one FP16 (or FP8) figure, both accumulations
# run at it: NVIDIA's architecture whitepapers list the two separately and they agree on datacenter parts (A100
# whitepaper, table "NVIDIA A100 Tensor Core GPU Performance Specs": 312 TFLOPS for FP16 with FP16 and with FP32
# accumulate; H100 whitepaper, table "NVIDIA H100 Tensor Core GPU Performance Specs", likewise), and halve FP32
# accumulation only on GeForce cards (the RTX 4090 below).
_H100_SXM = _tflops(fp16=989.5, bf16=989.5, fp8=1979.0, int8=1979.0)
GPUS: dict[str, Hardware] = {g.name: g for g in (
    # NVIDIA H100 Tensor Core GPU datasheet (SXM column): FP16 and BF16 1,979 TFLOPS, FP8 3,958 TFLOPS, INT8 3,958
    # TOPS, all "with sparsity"; 3.35 TB/s HBM3; 80GB; NVLink 900GB/s. https://www.nvidia.com/en-us/data-center/h100/
    _gpu("H100-SXM", _H100_SXM, 3.35, 80, "NVIDIA H100 datasheet, SXM", 900),
    # Same datasheet, PCIe column: FP16/BF16 1,513, FP8 3,026 TFLOPS, INT8 3,026 TOPS with sparsity; 2 TB/s; 80GB;
    # PCIe Gen5 128GB/s. (NVLink bridges join H100 PCIe cards in pairs: a two-GPU domain.)
    _gpu("H100-PCIe", _tflops(fp16=756.5, bf16=756.5, fp8=1513.0, int8=1513.0), 2.0, 80,
         "NVIDIA H100 datasheet, PCIe", 128, domain=2),
    # NVIDIA H200 datasheet (SXM): FP16/BF16 1,979, FP8 3,958 TFLOPS, INT8 3,958 TOPS with sparsity (the H100's
    # tensor cores); 141GB HBM3e at 4.8 TB/s; NVLink 900GB/s. https://www.nvidia.com/en-us/data-center/h200/
    _gpu("H200", _H100_SXM, 4.8, 141, "NVIDIA H200 datasheet, SXM", 900),
    # NVIDIA A100 datasheet: FP16 and BF16 312 TFLOPS (624 with sparsity), INT8 624 TOPS (1,248); no FP8; 40GB HBM2
    # at 1,555 GB/s (SXM); NVLink 600GB/s. https://www.nvidia.com/en-us/data-center/a100/
    # DGX A100 networks each GPU through one ConnectX-6 200 Gb/s HCA (DGX A100 user guide), 25 GB/s per direction.
    _gpu("A100-40GB", _tflops(fp16=312.0, bf16=312.0, int8=624.0), 1.555, 40, "NVIDIA A100 datasheet, 40GB SXM", 600,
         node_gb_per_s=25),
    # Same datasheet: 80GB HBM2e at 2,039 GB/s (SXM).
    _gpu("A100-80GB", _tflops(fp16=312.0, bf16=312.0, int8=624.0), 2.039, 80, "NVIDIA A100 datasheet, 80GB SXM",
         600, node_gb_per_s=25),
    # NVIDIA HGX B200 datasheet, per GPU: FP4 18 PFLOPS, FP8/FP6 9 PFLOPS, INT8 9 POPS, FP16/BF16 4.5 PFLOPS, all
    # with sparsity; 180GB HBM3e at 7.7 TB/s; NVLink 1.8TB/s. https://www.nvidia.com/en-us/data-center/hgx/
    # (The FP4 rate serves NVFP4 and MXFP4 alike: both are E2M1 values with block scales.)
    _gpu("B200", _tflops(fp16=2250.0, bf16=2250.0, fp8=4500.0, int8=4500.0, fp4=9000.0), 7.7, 180,
         "NVIDIA HGX B200 datasheet, per GPU", 1800),
    # NVIDIA L40S datasheet: FP16 and BF16 362.05 TFLOPS (733 with sparsity), FP8 733 (1,466), INT8 733 TOPS (1,466);
    # 48GB GDDR6 at 864 GB/s. https://www.nvidia.com/en-us/data-center/l40s/
    # (L40S, L4 and RTX 4090 have no NVLink: GPUs talk over PCIe Gen4 x16, 64 GB/s both ways, the default.)
    _gpu("L40S", _tflops(fp16=362.05, bf16=362.05, fp8=733.0, int8=733.0), 0.864, 48, "NVIDIA L40S datasheet"),
    # NVIDIA L4 datasheet: FP16 and BF16 242, FP8 485 TFLOPS, INT8 485 TOPS, all with sparsity; 24GB GDDR6 at
    # 300 GB/s. https://www.nvidia.com/en-us/data-center/l4/
    _gpu("L4", _tflops(fp16=121.0, bf16=121.0, fp8=242.5, int8=242.5), 0.300, 24, "NVIDIA L4 datasheet"),
    # AMD Instinct MI300X data sheet: FP16 and BF16 1,307.4 TFLOPS (2,614.9 with sparsity), FP8 2,614.9 (5,229.8),
    # INT8 2,614.9 TOPS (5,229.8); 192GB HBM3 at 5.3 TB/s; Infinity Fabric 896 GB/s peak (7 links x 128 GB/s).
    # https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html
    _gpu("MI300X", _tflops(fp16=1307.4, bf16=1307.4, fp8=2614.9, int8=2614.9), 5.3, 192,
         "AMD Instinct MI300X data sheet", 896),
    # NVIDIA Ada Lovelace GPU architecture whitepaper (v2.1), appendix table "GeForce RTX 4090": dense/sparse peak
    # FP16 Tensor TFLOPS with FP16 accumulate 330.3/660.6, with FP32 accumulate 165.2/330.4, BF16 with FP32
    # accumulate 165.2/330.4, FP8 with FP16 accumulate 660.6/1,321.2, FP8 with FP32 accumulate 330.3/660.6 (the
    # revision that corrected FP32 accumulation to half rate on GeForce, forums.developer.nvidia.com/t/294400), INT8
    # 660.6/1,321.2 TOPS; 24GB GDDR6X at 1,008 GB/s.
    _gpu("RTX-4090", _tflops(fp16_acc16=330.3, fp16_acc32=165.2, bf16=165.2, fp8_acc16=660.6, fp8_acc32=330.3,
                             int8=660.6), 1.008, 24, "NVIDIA Ada Lovelace whitepaper, RTX 4090"),
    # NVIDIA T4 datasheet: FP16 mixed-precision (FP16/FP32) tensor 65 TFLOPS (Turing has no 2:4 sparsity, so
    # dense), INT8 130 TOPS, no FP8 and no BF16 (a BF16 model runs in FP16 on it); 16GB GDDR6 at 300 GB/sec; PCIe
    # Gen3 x16 (32 GB/s both ways). https://www.nvidia.com/en-us/data-center/tesla-t4/ (Colab's free GPU.) Turing's
    # datacenter and workstation parts accumulate in FP32 at full rate (NVIDIA Turing GPU architecture whitepaper,
    # appendix: Quadro RTX 6000, 130.5 TFLOPS FP16 with FP16 and with FP32 accumulate), so FP16 accumulation is 65 too.
    _gpu("T4", _tflops(fp16=65.0, int8=130.0), 0.300, 16, "NVIDIA T4 datasheet", 32),
    # A10G: AWS's variant of the A10 (G5 instances). NVIDIA publishes no A10G datasheet; it shares the A10's 24GB
    # GDDR6 at 600 GB/s (Baseten, "NVIDIA A10 vs A10G for ML model inference", 2023) and has less tensor compute
    # than the A10. The A10 datasheet's rates, FP16/BF16 125 TFLOPS and INT8 250 TOPS dense (250 and 500 with
    # sparsity), are used for FP32 accumulation: an upper bound, so the floor stays a floor.
    # https://www.nvidia.com/en-us/data-center/products/a10-gpu/ With no table for the A10G, FP16 accumulation is
    # bounded by twice that, the most GA102 gains from it (NVIDIA Ampere GA102 GPU architecture whitepaper, RTX 3090:
    # 142 TFLOPS with FP16 accumulate against 71 with FP32), and INT8 by twice that again (RTX 3090: 284 TOPS).
    _gpu("A10G", _tflops(fp16_acc16=250.0, fp16_acc32=125.0, bf16=125.0, int8=500.0), 0.600, 24,
         "NVIDIA A10 datasheet (upper bound for AWS's A10G); Baseten A10 vs A10G"),
    # NVIDIA H100 NVL (H100 datasheet, NVL column): FP16/BF16 1,671, FP8 3,341 TFLOPS, INT8 3,341 TOPS with sparsity;
    # 94GB HBM3 at 3.9 TB/s; NVLink bridge 600GB/s between a pair of cards. https://www.nvidia.com/en-us/data-center/h100/
    _gpu("H100-NVL", _tflops(fp16=835.5, bf16=835.5, fp8=1670.5, int8=1670.5), 3.9, 94, "NVIDIA H100 datasheet, NVL",
         600, domain=2),
    # NVIDIA GH200 Grace Hopper Superchip datasheet (HBM3e version): the H100's tensor cores (FP16/BF16 1,979, FP8
    # 3,958 TFLOPS, INT8 3,958 TOPS with sparsity), 144GB HBM3e at 4.9 TB/s; NVLink 900GB/s. A standard GH200 server
    # holds one superchip, so a second GPU is across the network.
    # https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/
    _gpu("GH200", _H100_SXM, 4.9, 144, "NVIDIA GH200 Grace Hopper Superchip datasheet, HBM3e", 900, domain=1,
         per_node=1),
    # AMD Instinct MI250X data sheet (one OAM module): peak FP16 and BF16 matrix 383 TFLOPS, INT8 383 TOPS (CDNA 2 has
    # no sparsity), no FP8; 128GB HBM2e at 3.2 TB/s; Infinity Fabric links 800 GB/s peak (8 links x 100 GB/s).
    # Software sees the module as two GCDs of 64 GB each; priced here as the data sheet's one module. HPE Cray EX
    # nodes hold four. https://www.amd.com/en/products/accelerators/instinct/mi200/mi250x.html
    _gpu("MI250X", _tflops(fp16=383.0, bf16=383.0, int8=383.0), 3.2, 128, "AMD Instinct MI250X data sheet", 800,
         domain=4, per_node=4),
    # AMD Instinct MI325X data sheet: FP16/BF16 1,307.4, FP8 2,614.9 TFLOPS, INT8 2,614.9 TOPS dense (the MI300X's
    # CDNA 3 compute); 256GB HBM3E at 6 TB/s; Infinity Fabric 896 GB/s (7 links x 128 GB/s, eight GPUs fully
    # connected). https://www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html
    _gpu("MI325X", _tflops(fp16=1307.4, bf16=1307.4, fp8=2614.9, int8=2614.9), 6.0, 256,
         "AMD Instinct MI325X data sheet", 896),
    # NVIDIA GB200 NVL72 product page, specifications table, for the rack of 72 Blackwell GPUs, all "with sparsity":
    # FP4 1,440 PFLOPS, FP8/FP6 720 PFLOPS, INT8 720 POPS, FP16/BF16 360 PFLOPS, so per GPU dense 10, 5, 5 and 2.5
    # PFLOPS; "Up to 13.4 TB HBM3e | 576 TB/s", 186 GB and 8 TB/s per GPU; NVLink bandwidth 130 TB/s, 1.8 TB/s per
    # GPU, every one of the 72 GPUs on one NVLink Switch domain (so tensor parallelism up to 72 never crosses the
    # network). https://www.nvidia.com/en-us/data-center/gb200-nvl72/
    _gpu("GB200-NVL72", _tflops(fp16=2500.0, bf16=2500.0, fp8=5000.0, int8=5000.0, fp4=10000.0), 8.0, 186,
         "NVIDIA GB200 NVL72 product page, per GPU of the rack", 1800, domain=72, per_node=72),
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
