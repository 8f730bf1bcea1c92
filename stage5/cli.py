"""``python -m stage5 model`` and ``python -m stage5 deploy``: the cost model from the command line."""

from __future__ import annotations

import sys
from pathlib import Path

from stage5 import cost, inputs
from stage5.hardware import GB, GiB
from stage5.models import ModelConfig, get_model
from stage5.quantization import KV_FORMATS, WEIGHT_FORMATS, deployment


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def describe_model(cfg: ModelConfig) -> dict[str, float | str]:
    """Parameters, BF16 weight bytes and KV bytes per token of one config."""
    return {
        "name": cfg.name,
        "params": cfg.num_params,
        "active_params": cfg.active_params,
        "weights_GB_bf16": cfg.weight_bytes(2) / GB,
        "weights_GiB_bf16": cfg.weight_bytes(2) / GiB,
        "kv_bytes_per_token_bf16": cfg.kv_bytes_per_token(2),
        "layers": cfg.num_layers,
        "heads": cfg.num_heads,
        "kv_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "kv_cache": _kv_formula(cfg),
        "sliding_window": cfg.sliding_window,
        "sliding_window_layers": cfg.sliding_layers,
        "kv_bytes_at_max_context_bf16": cfg.kv_bytes_per_sequence(cfg.max_position_embeddings, 2),
        "max_context": cfg.max_position_embeddings,
    }


def _kv_formula(cfg: ModelConfig) -> str:
    if cfg.is_mla:
        return (f"MLA: {cfg.num_layers} layers x ({cfg.kv_lora_rank} latent + {cfg.qk_rope_head_dim} rotary key) "
                "x 2 bytes")
    return f"2 x {cfg.num_layers} layers x {cfg.num_kv_heads} KV heads x {cfg.head_dim} x 2 bytes"


def _window_note(cfg: ModelConfig) -> str:
    """What a sliding window does to the cache; the cost model (deploy, the simulator) prices it so."""
    return (f"sliding window of {cfg.sliding_window:,} tokens on {cfg.sliding_layers} of {cfg.num_layers} layers: "
            f"past {cfg.sliding_window:,} tokens those layers stop growing, so a {cfg.max_position_embeddings:,}-token "
            f"sequence holds {cfg.kv_bytes_per_sequence(cfg.max_position_embeddings, 2) / GiB:.2f} GiB, not "
            f"{cfg.max_position_embeddings * cfg.kv_bytes_per_token(2) / GiB:.2f} GiB; deploy and the simulator "
            "price the capped cache")


def load_model(text: str) -> ModelConfig:
    """A registry name, or a path to a config.json (anything ending in .json or naming an existing path)."""
    if text.endswith(".json") or Path(text).exists():
        return ModelConfig.from_json_file(text)
    return get_model(text)


def model_main(argv: list[str]) -> int:
    parser = inputs.OneLineParser(prog="python -m stage5 model",
                                  description="Parameters, weight bytes and KV bytes per token of a model.")
    parser.add_argument("config", help="path to a Hugging Face config.json, or a registry name")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        cfg = load_model(args.config)
    except (ValueError, OSError, TypeError) as err:
        return _fail(str(err))
    info = describe_model(cfg)
    if args.json:
        print(inputs.dumps(info, indent=1))
        return 0
    print(f"{cfg.name}: {cfg.num_params:,} parameters"
          + (f" ({cfg.active_params:,} active per token)" if cfg.num_experts > 1 else ""))
    print(f"  weights (BF16): {info['weights_GB_bf16']:.2f} GB = {info['weights_GiB_bf16']:.2f} GiB")
    print(f"  KV cache (BF16): {cfg.kv_bytes_per_token(2):,.0f} bytes per token ({_kv_formula(cfg)})")
    if cfg.sliding_window:
        print(f"  {_window_note(cfg)}")
    print(f"  maximum context: {cfg.max_position_embeddings:,} tokens")
    return 0


# Bounds on deploy's numbers: the GPU count and the price are shared with the library (stage5.inputs).
MAX_GPUS, MIN_PRICE, MAX_PRICE = inputs.MAX_GPUS, inputs.MIN_PRICE, inputs.MAX_PRICE
# An MFU below 0.1% means the GPU does essentially nothing; the simple estimate uses 0.5 and real decode 0.05-0.6.
MIN_MFU = 1e-3


def diagnose_deployment(dep: cost.Deployment, context: int, batch: int, prompt: int | None = None,
                        price: float = cost.DEFAULT_PRICE_PER_GPU_HOUR) -> dict[str, float | str]:
    """TTFT, TPOT, bound, max concurrency and $/M output tokens of a deployment at a batch and context."""
    if not isinstance(dep, cost.Deployment):
        raise inputs.InputError(f"dep must be a stage5.cost.Deployment, got {type(dep).__name__}")
    inputs.gpus(dep.num_gpus)
    context = inputs.positive_int(context, "context", maximum=dep.model.max_position_embeddings)
    batch = inputs.positive_int(batch, "batch")
    if prompt is not None:
        prompt = inputs.positive_int(prompt, "prompt (a part of the context)", maximum=context)
    price = inputs.price(price, "price")
    max_seqs = int(cost.max_concurrency(dep, context))
    if batch > max_seqs:
        per_seq = float(cost.kv_bytes_per_sequence(dep, context))  # a sliding window caps what a sequence holds
        window = (f" (layers with a {dep.model.sliding_window:,}-token sliding window hold at most that many)"
                  if dep.model.sliding_window and context > dep.model.sliding_window else "")
        raise cost.InfeasibleDeployment(
            f"KV cache memory ran out: batch {batch:,} at {context:,} tokens needs "
            f"{batch * per_seq / GiB:,.1f} GiB of KV cache{window} but only "
            f"{cost.kv_budget_bytes(dep) / GiB:.1f} GiB is free after weights and reserve "
            f"(at most {max_seqs:,} sequences fit).")
    step = cost.decode_step(dep, batch, context)
    return {
        "model": dep.model.name, "gpu": dep.gpu.name, "gpus": dep.num_gpus,
        "weights_bytes_per_param": dep.weight_bytes, "kv_bytes_per_element": dep.kv_bytes,
        "context": context, "batch": batch,
        "ttft_ms": float(cost.ttft_s(dep, prompt or context)) * 1e3,
        "tpot_ms": float(step.time_s) * 1e3,
        "memory_ms": float(step.memory_s) * 1e3,
        "compute_ms": float(step.compute_s) * 1e3,
        "added_ms": float(step.extra_s) * 1e3,  # attention's KV reads (and, in estimate mode, the all-reduces)
        "mode": cost.mode_of(dep),
        "tensor_format": cost.tensor_format(dep)[0],  # what the matmuls are priced at (the floor: the fastest)
        "bound": str(step.bound),
        "tokens_per_s": float(cost.decode_throughput(dep, batch, context)),
        "max_concurrency": max_seqs,
        "kv_budget_GiB": cost.kv_budget_bytes(dep) / GiB,
        "usd_per_million_tokens": float(cost.cost_per_million_tokens(dep, batch, context, price)),
    }


def deploy_main(argv: list[str]) -> int:
    parser = inputs.OneLineParser(
        prog="python -m stage5 deploy",
        description="Diagnose a deployment. The default, the simple estimate, assumes perfect tensor-parallel "
                    "scaling (optimistic) and a fixed MFU; --mode floor prices the physics at the datasheet's peak.")
    parser.add_argument("--model", required=True, help="registry name or path to a config.json")
    parser.add_argument("--gpu", required=True, help="accelerator name, e.g. H100, A100-80GB, MI300X")
    parser.add_argument("--gpus", type=inputs.arg_int(1, MAX_GPUS, why="tensor parallelism runs inside one NVLink "
                                                     "domain; the largest, GB200 NVL72, has 72 GPUs"),
                        default=1, help=f"number of GPUs (tensor parallel), 1 to {MAX_GPUS}")
    parser.add_argument("--context", type=inputs.arg_int(), required=True,
                        help="tokens per sequence held in the KV cache (at most the model's maximum context)")
    parser.add_argument("--batch", type=inputs.arg_int(), required=True, help="concurrent sequences")
    parser.add_argument("--prompt", type=inputs.arg_int(), default=None,
                        help="prompt tokens for TTFT (default: --context)")
    parser.add_argument("--weights", choices=list(WEIGHT_FORMATS), default="bf16",
                        help="weight format (stage5.quantization.WEIGHT_FORMATS)")
    parser.add_argument("--kv", choices=list(KV_FORMATS), default="bf16", help="KV-cache format")
    parser.add_argument("--mfu", type=inputs.arg_real(MIN_MFU, 1.0, low_open=False,
                                                      why="below 0.1% of peak a GPU does essentially nothing"),
                        default=None, help=f"model FLOP utilisation of the simple estimate, a fraction in "
                                           f"[{MIN_MFU:g}, 1] (default {cost.DEFAULT_MFU:g})")
    parser.add_argument("--mode", choices=cost.MODES, default="simple",
                        help="simple: the course's formulas at --mfu (an estimate); estimate: plus the terms of "
                             "stage5.cost.Estimate; floor: the physics at the datasheet's peak, a lower bound "
                             "(earlier versions used 'floor' for the 50%%-MFU formulas, now 'simple')")
    parser.add_argument("--engine", choices=list(cost.ENGINES), default=None,
                        help="engine profile for --mode estimate (stage5.cost.ENGINES; default graphs; 'unknown' for an "
                             "engine the registry does not know: no host cost and the widest band)")
    parser.add_argument("--price", type=inputs.arg_real(MIN_PRICE, MAX_PRICE, low_open=False,
                                                        why="USD per GPU-hour; list prices are a few dollars"),
                        default=cost.DEFAULT_PRICE_PER_GPU_HOUR, help=f"USD per GPU-hour, {MIN_PRICE:g} to {MAX_PRICE:g}")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        model = load_model(args.model)
        inputs.within_context(args.context, model.max_position_embeddings, "--context", model.name)
        if args.prompt is not None and args.prompt > args.context:
            raise inputs.InputError(f"--prompt is {args.prompt:,} tokens but --context is {args.context:,}; the prompt "
                                    "is part of the context the KV cache holds, so accepted: --prompt <= --context")
        if args.mfu is not None and args.mode != "simple":
            raise inputs.InputError(f"--mfu sets the simple estimate's MFU; --mode {args.mode} "
                                    + ("is at peak (MFU 1)" if args.mode == "floor" else "takes its MFUs from "
                                       "stage5.cost.Estimate") + ", so accepted: --mfu only with --mode simple")
        if args.engine is not None and args.mode != "estimate":
            raise inputs.InputError(f"--engine sets the estimate's engine profile; --mode {args.mode} charges no engine "
                                    "costs, so accepted: --engine only with --mode estimate")
        mfu = cost.DEFAULT_MFU if args.mfu is None else args.mfu
        dep = cost.with_mode(deployment(model, args.gpu, args.gpus, args.weights, args.kv, mfu=mfu), args.mode)
        if args.engine is not None:
            dep = cost.estimate_deployment(dep, cost.Estimate(engine=args.engine))
        info = diagnose_deployment(dep, args.context, args.batch, args.prompt, args.price)
        text = inputs.dumps(info, indent=1)  # a NaN or infinity is a bug: say so, never print it
    except (ValueError, OSError, TypeError) as err:
        return _fail(str(err))
    if args.json:
        print(text)
        return 0
    print(f"{info['model']} on {args.gpus} x {info['gpu']} (weights {args.weights}, KV {args.kv}), "
          f"batch {args.batch} at {args.context:,} tokens")
    print(f"  TTFT  {info['ttft_ms']:10.2f} ms   (prefill of {args.prompt or args.context:,} tokens, no queueing)")
    print(f"  TPOT  {info['tpot_ms']:10.2f} ms   (memory {info['memory_ms']:.2f} ms, compute "
          f"{info['compute_ms']:.2f} ms: {info['bound']}-bound"
          + (f"; plus {info['added_ms']:.2f} ms of attention's KV reads"
             + (" and all-reduces" if info["mode"] == "estimate" and args.gpus > 1 else "")
             if info["added_ms"] else "") + ")")
    print(f"  throughput {info['tokens_per_s']:,.0f} output tokens/s")
    print(f"  max concurrency {info['max_concurrency']:,} sequences "
          f"(KV budget {info['kv_budget_GiB']:.1f} GiB)")
    print(f"  cost  ${info['usd_per_million_tokens']:.3f} per million output tokens at ${args.price}/GPU-hour")
    if info["mode"] == "simple":
        print(f"  (the simple estimate: perfect tensor-parallel scaling and a fixed MFU of {mfu:g}; an estimate, not a "
              "bound: --mode floor gives the floor)")
    elif info["mode"] == "floor":
        print("  (the floor: the physics at the datasheet's peak, full bandwidth and MFU 1, no communication, matmuls at "
              f"{info['tensor_format']}, the fastest format a kernel can use; no server runs faster)")
    else:
        # the calibrated band comes from the published measurements, each priced without its own source (stage5.fit)
        from stage5 import fit
        print(f"  (estimate mode: stage5.cost.Estimate's terms, the {dep.estimate.engine} engine profile, matmuls at "
              f"{info['tensor_format']})")
        # the band in ms never reaches below the floor of the same deployment, batch and lengths
        floor = diagnose_deployment(cost.floor_deployment(dep), args.context, args.batch, args.prompt, args.price)
        for metric, label in (("tpot_ms", "TPOT"), ("ttft_ms", "TTFT")):
            batch = args.batch if metric == "tpot_ms" else 1  # a TTFT is priced for one prompt
            print(f"  {label} {info[metric]:.2f} ms: "
                  f"{fit.band_sentence(metric, dep.estimate.engine, dep.gpu.name, batch, info[metric], floor[metric])}")
    if model.sliding_window and args.context > model.sliding_window:
        print(f"  note: {_window_note(model)}")
    return 0
