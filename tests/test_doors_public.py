"""Every public function of stage5 and stage5.engine a notebook or a learner calls, fed hostile values (issue 43).

``CATALOGUE`` names each function with arguments it answers for. Each argument in turn is replaced by each of
``HOSTILE`` (wrong types, NaN, infinities, zero, negative, denormal and huge numbers): the call must answer (no
NaN anywhere in what it returns) or raise one ``ValueError``/``TypeError`` sentence, never another exception,
a traceback's worth of message, or a hang. Each function's sweep runs under a CPU-time guard (a hang is a loop,
so it burns CPU), with a generous wall-clock backstop. ``test_the_catalogue_covers_every_public_function`` keeps
it complete: a public function added to one of ``MODULES`` must be catalogued here or exempted with a reason.
"""

from __future__ import annotations

import dataclasses
import inspect
import math

import numpy as np
import pytest
import torch

from stage5 import (
    claims,
    cost,
    drafters,
    fleet,
    kv_tiers,
    levers,
    long_context,
    plots,
    quant_numerics,
    quantization,
    routing,
    scaling,
)
from stage5 import expert_parallel as ep
from stage5 import step_model as sm
from stage5.engine import bench_prefix, bench_roofline, bench_spec, checks, roofline_spec, workload
from stage5.engine import model as tm
from stage5.engine.roofline_toy import ROOFLINE_TOY
from stage5.engine.sequence import Request
from stage5.hardware import get_gpu
from stage5.models import get_model
from tests.test_doors_fourth import GOOD as CAL
from tests.test_doors_fourth import guarded
from tests.test_engine import CFG, make_model

DEP = cost.Deployment.of("llama3-8b", "H100", 1)
EST = cost.with_mode(cost.Deployment.of("llama3-70b", "H100-SXM", 4), "estimate")
H100 = get_gpu("H100")
LLAMA = get_model("llama3-8b")
MIXTRAL = get_model("mixtral-8x7b")
TINY = make_model(torch.float32)
TEXT = bytes(range(256)) * 40
LOGITS = torch.linspace(-2.0, 2.0, 16)
X = np.linspace(-1.0, 1.0, 64).reshape(8, 8)
SMALL_FLEET = fleet.MultiTenant(tenants=2, system_len=32, sessions=4, turns=(1, 3))

# name -> (function, keyword arguments it answers for). Hostile values replace one argument at a time.
CATALOGUE = {
    # ---------------------------------------------------------------- the cost model
    "cost.tp_allowed": (cost.tp_allowed, {"model": LLAMA, "n": 2}),
    "cost.check_tp": (cost.check_tp, {"model": LLAMA, "n": 2}),
    "cost.kv_replication": (cost.kv_replication, {"model": LLAMA, "n": 2}),
    "cost.tp_degrees": (cost.tp_degrees, {"model": LLAMA}),
    "cost.floor_deployment": (cost.floor_deployment, {"dep": DEP}),
    "cost.estimate_deployment": (cost.estimate_deployment, {"dep": DEP}),
    "cost.simple_deployment": (cost.simple_deployment, {"dep": DEP, "mfu": 0.5}),
    "cost.is_floor": (cost.is_floor, {"dep": DEP}),
    "cost.mode_of": (cost.mode_of, {"dep": DEP}),
    "cost.with_mode": (cost.with_mode, {"dep": DEP, "mode": "floor"}),
    "cost.ridge_point": (cost.ridge_point, {"gpu": H100, "bytes_per_param": 2.0}),
    "cost.decode_intensity": (cost.decode_intensity, {"batch": 4, "bytes_per_param": 2.0}),
    "cost.experts_touched": (cost.experts_touched, {"num_experts": 8, "experts_per_token": 2, "tokens": 4}),
    "cost.embedding_rows_saved": (cost.embedding_rows_saved, {"model": LLAMA, "tokens": 4}),
    "cost.weight_bytes_read": (cost.weight_bytes_read, {"dep": DEP, "batch": 4}),
    "cost.decode_intensity_with_kv": (cost.decode_intensity_with_kv, {"dep": DEP, "batch": 4, "context": 1024}),
    "cost.achieved_bandwidth": (cost.achieved_bandwidth, {"dep": EST}),
    "cost.achieved_flops": (cost.achieved_flops, {"dep": EST, "phase": "decode"}),
    "cost.allreduce_algorithm": (cost.allreduce_algorithm, {"gpu": H100, "n": 4, "message_bytes": 1e6}),
    "cost.allreduce_one_s": (cost.allreduce_one_s, {"gpu": H100, "n": 4, "message_bytes": 1e6}),
    "cost.network_efficiency": (cost.network_efficiency, {"gpu": H100, "server_nics": True}),
    "cost.network_bus_bandwidth": (cost.network_bus_bandwidth, {"gpu": H100, "n": 16, "server_nics": True}),
    "cost.allreduce_s": (cost.allreduce_s, {"dep": EST, "tokens": 64}),
    "cost.attention_flops": (cost.attention_flops, {"model": LLAMA, "new_tokens": 4, "cached": 10}),
    "cost.kv_traffic_bytes": (cost.kv_traffic_bytes, {"dep": DEP, "batch": 4, "context": 1024}),
    "cost.decode_step": (cost.decode_step, {"dep": EST, "batch": 4, "context": 1024, "tokens_per_seq": 1}),
    "cost.decode_floor_s": (cost.decode_floor_s, {"dep": DEP}),
    "cost.tpot_s": (cost.tpot_s, {"dep": DEP, "batch": 4, "context": 1024}),
    "cost.prefill_step": (cost.prefill_step, {"dep": EST, "prompt_tokens": 512, "batch": 1, "cached": 1024}),
    "cost.counts_prefill_attention": (cost.counts_prefill_attention, {"dep": DEP}),
    "cost.mixed_step": (cost.mixed_step, {"dep": EST, "batch": 4, "context": 1024, "chunk": 64, "chunk_offset": 0}),
    "cost.mixed_tpot_s": (cost.mixed_tpot_s, {"dep": EST, "concurrency": 8, "prompt": 512, "output": 64,
                                              "prefix_hit": 0.5}),
    "cost.gemm_efficiency": (cost.gemm_efficiency, {"gpu": H100, "fmt": "bf16/fp32"}),
    "cost.gemm_s": (cost.gemm_s, {"gpu": H100, "tokens": 4096, "n": 8192, "k": 8192}),
    "cost.matmul_precision": (cost.matmul_precision, {"dep": DEP}),
    "cost.gpu_family": (cost.gpu_family, {"gpu": H100}),
    "cost.fitted_bandwidth_fraction": (cost.fitted_bandwidth_fraction, {"gpu": H100}),
    "cost.fitted_allreduce_scale": (cost.fitted_allreduce_scale, {"gpu": H100}),
    "cost.fitted_gemm_scale": (cost.fitted_gemm_scale, {"gpu": H100}),
    "cost.fitted_gemm_efficiency": (cost.fitted_gemm_efficiency, {"gpu": H100, "fmt": "bf16/fp32"}),
    "cost.step_overhead_s": (cost.step_overhead_s, {"dep": EST}),
    "cost.tensor_format": (cost.tensor_format, {"dep": DEP}),
    "cost.host_s": (cost.host_s, {"dep": EST}),
    "cost.ttft_s": (cost.ttft_s, {"dep": EST, "prompt_tokens": 512, "prefix_hit": 0.5}),
    "cost.kv_budget_bytes": (cost.kv_budget_bytes, {"dep": DEP}),
    "cost.check_batch_fits": (cost.check_batch_fits, {"dep": DEP, "batch": 4, "context": 1024}),
    "cost.kv_bytes_per_sequence": (cost.kv_bytes_per_sequence, {"dep": DEP, "context": 1024}),
    "cost.max_concurrency": (cost.max_concurrency, {"dep": DEP, "context": 1024}),
    "cost.decode_throughput": (cost.decode_throughput, {"dep": DEP, "batch": 4, "context": 1024}),
    "cost.price_per_s": (cost.price_per_s, {"dep": DEP, "price_per_gpu_hour": 3.0}),
    "cost.cost_terms": (cost.cost_terms, {"dep": DEP, "batch": 4, "context": 1024, "tokens_per_seq": 1.0,
                                          "price_per_gpu_hour": 3.0}),
    "cost.cost_per_million_tokens": (cost.cost_per_million_tokens, {"dep": DEP, "batch": 4, "context": 1024,
                                                                    "price_per_gpu_hour": 3.0}),
    "cost.request_gpu_seconds": (cost.request_gpu_seconds, {"dep": DEP, "prompt_tokens": 1024, "output_tokens": 128,
                                                            "batch": 1, "prefix_hit": 0.0}),
    "cost.expected_tokens_per_verification": (cost.expected_tokens_per_verification, {"alpha": 0.7, "k": 4}),
    "cost.tree_verification": (cost.tree_verification, {"alpha": 0.7, "depth": 4, "width": 2}),
    "cost.one_layer_draft_cost": (cost.one_layer_draft_cost, {"model": "llama3-70b"}),
    "cost.speculative_speedup": (cost.speculative_speedup, {"dep": DEP, "batch": 4, "context": 1024, "alpha": 0.7,
                                                            "k": 4, "draft_cost": 0.05}),
    "cost.speculation_breakeven_batch": (cost.speculation_breakeven_batch, {"dep": DEP, "context": 1024,
                                                                            "alpha": 0.7, "k": 4, "draft_cost": 0.05,
                                                                            "max_batch": 512}),
    "cost.speculation_any_batch_context": (cost.speculation_any_batch_context, {"dep": DEP, "alpha": 0.7, "k": 4,
                                                                                "draft_cost": 0.05}),
    "cost.Deployment.of": (cost.Deployment.of, {"model": "llama3-8b", "gpu": "H100", "num_gpus": 1}),
    # ---------------------------------------------------------------- scaling, quantization, levers, routing
    "scaling.tp_breakdown": (scaling.tp_breakdown, {"model": "llama3-8b", "gpu": "H100", "gpus": [1, 2],
                                                    "batch": 4, "context": 1024}),
    "scaling.per_gpu_ridge": (scaling.per_gpu_ridge, {"dep": DEP}),
    "scaling.compute_bound_batch": (scaling.compute_bound_batch, {"dep": DEP, "context": 0, "max_batch": 4096}),
    "scaling.batch_for_expert_coverage": (scaling.batch_for_expert_coverage, {"model": MIXTRAL, "fraction": 0.5}),
    "scaling.pipeline_max_batch": (scaling.pipeline_max_batch, {"model": "llama3-70b", "gpu": "H100-SXM", "tp": 8,
                                                                "pp": 2, "context": 1024}),
    "scaling.pipeline_decode": (scaling.pipeline_decode, {"model": "llama3-70b", "gpu": "H100-SXM", "tp": 8, "pp": 2,
                                                          "batch": 8, "context": 1024}),
    "quantization.weight_format": (quantization.weight_format, {"key": "fp8"}),
    "quantization.kv_format": (quantization.kv_format, {"key": "fp8"}),
    "quantization.table_16bit_extra_bytes": (quantization.table_16bit_extra_bytes, {"model": "llama3-8b",
                                                                                    "weights": "int4"}),
    "quantization.gpu_for": (quantization.gpu_for, {"gpu": "H100", "weights": "fp8"}),
    "quantization.deployment": (quantization.deployment, {"model": "llama3-8b", "gpu": "H100", "num_gpus": 1,
                                                          "weights": "fp8", "kv": "fp8"}),
    "quantization.case_deployments": (quantization.case_deployments, {"model": "llama3-8b", "gpu": "H100",
                                                                      "num_gpus": 1, "weights": "fp8",
                                                                      "case": "weights", "kv": "fp8"}),
    "quantization.end_to_end_gain": (quantization.end_to_end_gain, {"model": "llama3-8b", "gpu": "H100",
                                                                    "num_gpus": 1, "prompt": 1024, "output": 128,
                                                                    "batch": 4, "weights": "fp8", "kv": "fp8"}),
    "quantization.decode_step_gain": (quantization.decode_step_gain, {"model": "llama3-8b", "gpu": "H100",
                                                                      "num_gpus": 1, "batch": 4, "context": 1024,
                                                                      "weights": "fp8", "kv": "fp8"}),
    "levers.request_seconds": (levers.request_seconds, {"dep": DEP, "prompt": 1024, "output": 128,
                                                        "concurrency": 4, "prefix_hit": 0.0, "decode_speedup": 1.0}),
    "levers.dollars_per_million": (levers.dollars_per_million, {"dep": DEP, "prompt": 1024, "output": 128,
                                                                "concurrency": 4, "price_per_gpu_hour": 3.0}),
    "levers.latency_s": (levers.latency_s, {"dep": DEP, "prompt": 1024, "output": 128, "concurrency": 4}),
    "levers.max_batch_within_slo": (levers.max_batch_within_slo, {"dep": DEP, "context": 1024, "limit": 64,
                                                                  "tpot_slo_s": 0.05}),
    "levers.diagnose_reference": (levers.diagnose_reference, {"model": "llama3-8b", "gpu": "H100", "num_gpus": 1,
                                                              "prompt": 1024, "output": 128, "concurrency": 8,
                                                              "prefix_hit": 0.5, "alpha": 0.7, "k": 4}),
    "levers.lever_gains": (levers.lever_gains, {"model": "llama3-8b", "gpu": "H100", "num_gpus": 1, "prompt": 1024,
                                                "output": 128, "concurrency": 8}),
    "levers.naive_batch": (levers.naive_batch, {"dep": DEP, "occupancy": 0.5}),
    "levers.lever_ranking": (levers.lever_ranking, {"num_gpus": 4, "prompt": 1024, "output": 256, "easy_share": 0.8}),
    "routing.cost_ratio": (routing.cost_ratio, {"big": "llama3-70b", "big_gpu": "H100-SXM", "big_gpus": 4,
                                                "small": "llama3-8b", "small_gpu": "H100-SXM", "small_gpus": 1,
                                                "prompt": 1024, "output": 256}),
    "routing.blended_saving": (routing.blended_saving, {"routed_share": 0.5, "ratio": 0.1}),
    "routing.simulate_router": (routing.simulate_router, {"easy_share": 0.8, "ratio": 0.1, "router_noise": 0.5,
                                                          "eval_size": 200, "n": 2000, "points": 21, "seed": 0}),
    # ---------------------------------------------------------------- long context, plots, the step model
    "long_context.host_link": (long_context.host_link, {"gpu": H100}),
    "long_context.kv_weight_crossover_context": (long_context.kv_weight_crossover_context, {"dep": DEP, "batch": 1}),
    "long_context.attention_linear_crossover_prompt": (long_context.attention_linear_crossover_prompt,
                                                       {"model": LLAMA}),
    "long_context.score_matrix_bytes": (long_context.score_matrix_bytes, {"model": LLAMA, "prompt": 1024,
                                                                          "bytes_per_element": 2.0}),
    "long_context.swap_s": (long_context.swap_s, {"dep": DEP, "context": 1024}),
    "long_context.recompute_s": (long_context.recompute_s, {"dep": DEP, "context": 1024}),
    "long_context.kv_transfer_s": (long_context.kv_transfer_s, {"dep": DEP, "prompt": 1024,
                                                                "link_bytes_per_s": 5e10}),
    "plots.mixed_step_s": (plots.mixed_step_s, {"dep": DEP, "batch": 4, "context": 1024, "chunk": 64}),
    "plots.stall_schedule": (plots.stall_schedule, {"dep": DEP, "batch": 4, "context": 1024, "prompt": 512,
                                                    "chunk": 64, "arrival_s": 0.01, "horizon_s": 0.05}),
    "plots.slot_occupancy": (plots.slot_occupancy, {"trace": [("prefill", (0, 1)), ("decode", (0,))], "slots": 4}),
    "step_model.predict_step": (sm.predict_step, {"cal": CAL, "cfg": ROOFLINE_TOY, "batch": 4, "context": 64,
                                                  "tokens_per_seq": 1}),
    "step_model.ridge_batch": (sm.ridge_batch, {"cal": CAL, "cfg": ROOFLINE_TOY}),
    "step_model.knee_batch": (sm.knee_batch, {"batches": [1, 2, 4, 8, 16], "times": [1.0, 1.0, 1.1, 1.6, 3.0]}),
    "step_model.speculative_round": (sm.speculative_round, {"cal": CAL, "cfg": ROOFLINE_TOY,
                                                            "draft_cfg": ROOFLINE_TOY, "batch": 4, "context": 64,
                                                            "k": 4}),
    "step_model.speculative_speedup": (sm.speculative_speedup, {"cal": CAL, "cfg": ROOFLINE_TOY,
                                                                "draft_cfg": ROOFLINE_TOY, "batch": 4, "context": 64,
                                                                "alpha": 0.7, "k": 4}),
    "drafters.draft_model_cost": (drafters.draft_model_cost, {"target": "llama3-70b", "draft": "llama3-8b",
                                                              "gpu": "H100"}),
    "drafters.eagle_cost": (drafters.eagle_cost, {"target": "llama3-70b"}),
    "drafters.medusa_cost": (drafters.medusa_cost, {"target": "llama3-70b"}),
    "quant_numerics.quantize": (quant_numerics.quantize, {"x": X, "bits": 4, "granularity": "tensor"}),
    "quant_numerics.relative_error": (quant_numerics.relative_error, {"exact": X, "approx": X * 1.01}),
    "quant_numerics.smooth": (quant_numerics.smooth, {"x": X, "w": X, "alpha": 0.5}),
    "quant_numerics.scale_bits_per_weight": (quant_numerics.scale_bits_per_weight, {"group": 128, "scale_bits": 16}),
    "claims.compare": (claims.compare, {"ratio": 1.5}),
    "claims.times": (claims.times, {"ratio": 1.5}),
    "claims.crossing": (claims.crossing, {"batches": [1, 2, 4], "values": [2.0, 1.2, 0.8], "level": 1.0}),
    "claims.first_below": (claims.first_below, {"batches": [1, 2, 4], "values": [2.0, 1.2, 0.8], "level": 1.0}),
    "claims.agreement": (claims.agreement, {"ratios": [0.9, 1.1]}),
    "claims.bound_at_batch_one": (claims.bound_at_batch_one, {"memory_share": 0.8, "threshold": 0.7}),
    "claims.describe_stall_reach": (claims.describe_stall_reach, {"share": 0.2, "percentile": 99}),
    "claims.describe_share": (claims.describe_share, {"shares": [0.8, 0.9], "threshold": 0.7}),
    "claims.describe_tail": (claims.describe_tail, {"count": 40, "percentile": 99}),
    # ---------------------------------------------------------------- the torch model and the workload builders
    "engine.model.probs": (tm.probs, {"logits": LOGITS, "temperature": 0.8}),
    "engine.model.sample": (tm.sample, {"logits": LOGITS, "temperature": 0.8}),
    "engine.model.generate": (tm.generate, {"model": TINY, "prompt_ids": [1, 2, 3], "max_new_tokens": 3,
                                            "temperature": 0.8, "seed": 1}),
    "engine.model.GrowingCache": (tm.GrowingCache, {"num_layers": 2}),
    "engine.workload.make_workload": (workload.make_workload, {"n": 8, "seed": 0, "text": TEXT}),
    "engine.workload.small_workload": (workload.small_workload, {"n": 8, "seed": 0, "max_tokens": 64}),
    "engine.workload.poisson_arrivals": (workload.poisson_arrivals, {"n": 8, "rate": 2.0, "seed": 0}),
    "engine.workload.make_arrivals": (workload.make_arrivals, {"n": 8, "prompt": workload.Lengths("fixed", value=8),
                                                               "output": workload.Lengths("uniform", low=2, high=6),
                                                               "rate": 2.0, "seed": 0, "text": TEXT}),
    "engine.workload.Lengths": (workload.Lengths, {"kind": "long_tail", "low": 4, "high": 8, "long_share": 0.1,
                                                   "long_low": 20, "long_high": 40}),
    "engine.bench_prefix.prefix_workload": (bench_prefix.prefix_workload, {"n": 4, "system_len": 64,
                                                                           "user_len": (4, 8), "output_len": 4,
                                                                           "seed": 0, "text": TEXT}),
    "engine.bench_roofline.step_requests": (bench_roofline.step_requests, {"batch": 4, "prompt_len": 4,
                                                                           "new_tokens": 8}),
    "engine.roofline_spec.spec_requests": (roofline_spec.spec_requests, {"batch": 4, "prompt_len": 4,
                                                                         "new_tokens": 8}),
    "engine.bench_spec.spec_workload": (bench_spec.spec_workload, {"n": 4, "prompt_len": 64, "output_len": 8}),
    "engine.checks.pool_fits": (checks.pool_fits, {"cfg": CFG, "num_slots": 64, "itemsize": 4}),
    "engine.checks.allocator_fits": (checks.allocator_fits, {"num_blocks": 64, "block_size": 16}),
    "engine.checks.fits_model": (checks.fits_model, {"request": Request(0, (1, 2), 4), "cfg": CFG}),
    "engine.sequence.Request": (Request, {"id": 0, "prompt": (1, 2, 3), "max_tokens": 4, "stop_after": 2,
                                          "arrival": 0.0}),
    # ---------------------------------------------------------------- the fleet, KV tiers, expert parallelism (issue 52)
    "fleet.check_replicas": (fleet.check_replicas, {"replicas": 4}),
    "fleet.check_policy": (fleet.check_policy, {"policy": "round_robin"}),
    "fleet.cached_tokens": (fleet.cached_tokens, {"prefix": 100, "prompt": 200, "block_size": 16}),
    "fleet.predicted_hits": (fleet.predicted_hits, {"spec": SMALL_FLEET, "replicas": 3, "policy": "round_robin",
                                                    "block_size": 16}),
    "fleet.routed_hit_rate": (fleet.routed_hit_rate, {"prefix_hit": 0.5, "history_share": 0.5, "replicas": 4,
                                                      "policy": "round_robin"}),
    "fleet.MultiTenant": (fleet.MultiTenant, {"tenants": 2, "system_len": 32, "sessions": 3, "turns": (1, 2),
                                              "rate": 4.0, "think_s": 0.5, "seed": 0}),
    "kv_tiers.tier": (kv_tiers.tier, {"name": "remote", "gpu": H100, "remote_nodes": 2}),
    "kv_tiers.reload_s": (kv_tiers.reload_s, {"dep": DEP, "prefix": 1024, "name": "cpu"}),
    "kv_tiers.speedup": (kv_tiers.speedup, {"dep": DEP, "prefix": 1024, "name": "ssd"}),
    "kv_tiers.breakeven_bandwidth": (kv_tiers.breakeven_bandwidth, {"dep": DEP, "prefix": 1024}),
    "kv_tiers.breakeven_bandwidth_limit": (kv_tiers.breakeven_bandwidth_limit, {"dep": DEP}),
    "kv_tiers.capacity_sequences": (kv_tiers.capacity_sequences, {"dep": DEP, "context": 1024, "name": "cpu",
                                                                  "remote_nodes": 1}),
    "kv_tiers.tier_gb_per_s": (kv_tiers.tier_gb_per_s, {"name": "ssd", "gpu": H100}),
    "expert_parallel.check_ep": (ep.check_ep, {"model": MIXTRAL, "ep": 2}),
    "expert_parallel.alltoall_bytes_per_token": (ep.alltoall_bytes_per_token, {"model": MIXTRAL, "ep": 2,
                                                                               "dispatch_bytes": 1.0,
                                                                               "combine_bytes": 2.0}),
    "expert_parallel.alltoall": (ep.alltoall, {"model": MIXTRAL, "gpu": H100, "ep": 2, "tokens": 64}),
    "expert_parallel.zipf_routing": (ep.zipf_routing, {"model": MIXTRAL, "tokens": 64, "skew": 1.0, "seed": 0}),
    "expert_parallel.Routing": (ep.Routing, {"loads": np.ones(8), "touched": np.full(8, 0.5)}),
    "expert_parallel.ep_experts": (ep.ep_experts, {"model": MIXTRAL, "gpu": H100, "ep": 2, "routing": np.ones(8),
                                                   "weight_bytes": 1.0}),
    "expert_parallel.tp_experts": (ep.tp_experts, {"model": MIXTRAL, "gpu": H100, "tp": 2, "routing": np.ones(8),
                                                   "weight_bytes": 1.0}),
    "expert_parallel.expert_ridge_tokens": (ep.expert_ridge_tokens, {"gpu": H100, "weight_bytes": 1.0}),
    "expert_parallel.mla_attention_intensity": (ep.mla_attention_intensity, {"model": "deepseek-v3",
                                                                             "heads_per_gpu": 16, "query_tokens": 1,
                                                                             "kv_bytes": 2.0}),
    "expert_parallel.gqa_attention_intensity": (ep.gqa_attention_intensity, {"model": LLAMA, "query_tokens": 1,
                                                                             "kv_bytes": 2.0}),
    "expert_parallel.mla_attention": (ep.mla_attention, {"model": "deepseek-v3", "gpu": "H200", "gpus": 8,
                                                         "batch": 8, "context": 4096, "layout": "dp",
                                                         "kv_bytes": 2.0}),
    "expert_parallel.weight_split": (ep.weight_split, {"model": "deepseek-v3"}),
    "expert_parallel.mla_capacity": (ep.mla_capacity, {"model": "deepseek-v3", "gpu": "H200", "gpus": 8,
                                                       "context": 4096, "layout": "dp", "weight_bytes": 1.0,
                                                       "kv_bytes": 2.0}),
    "expert_parallel.hypothetical_domain": (ep.hypothetical_domain, {"gpu": H100, "gpus": 16}),
}

# Public functions of MODULES that are not catalogued, and why.
EXEMPT = {
    "main": "a command line: tests/test_doors*.py drive every flag through python -m stage5",
    "stall_timeline roofline intensity_vs_batch concurrency_vs_context batching_curves slot_timeline "
    "measured_vs_predicted kv_pool_map": "draws on matplotlib Axes from the numbers of the catalogued functions",
    "check_llama_style expand_kv rotate fuse_projections": "the torch model's internals, fed by Transformer only",
    "run_prefix measure_decode_steps measure_for_chapter measure_memory_share run roofline_report "
    "measurement_from measure_spec_collapse acceptance speedup make_drafter": "benchmarks that time this CPU for "
    "seconds to minutes (their flags are checked at the command line)",
    "predict_run_s": "takes a RunResult from an engine run, not a value a learner types",
    "quantize_float": "takes a FloatFormat record (quant_numerics.FORMATS), tested in tests/test_quantization.py",
    "describe_roofline describe_spec describe_knee describe_chunking": "take a benchmark's report dictionary",
    "unique_ids positive_ints": "the engines' own checks, raised with one sentence by construction",
    "gpu_names model_names get_gpu get_model": "registry lookups (names.resolve), tested in tests/test_doors.py",
}
EXEMPT = {name: why for names, why in EXEMPT.items() for name in names.split()}
MODULES = [cost, scaling, quantization, levers, routing, long_context, plots, sm, drafters, quant_numerics, claims,
           tm, workload, bench_prefix, bench_roofline, roofline_spec, bench_spec, checks, fleet, kv_tiers, ep]

HOSTILE = ["x", None, True, [1.0, "a"], math.nan, math.inf, -math.inf, 0, -1, -2.5, 5e-324, 1e300, 10**30, 2**63]


def test_the_catalogue_covers_every_public_function():
    catalogued = {fn for fn, _ in CATALOGUE.values()}
    missing = []
    for module in MODULES:
        for name, obj in vars(module).items():
            if name.startswith("_") or not inspect.isfunction(obj) or obj.__module__ != module.__name__:
                continue
            if obj not in catalogued and name not in EXEMPT:
                missing.append(f"{module.__name__}.{name}")
    assert missing == [], "catalogue these (valid arguments) or exempt them with a reason"


def _nan_in(value, depth: int = 0) -> bool:
    """Whether a NaN hides anywhere in a result (numbers, arrays, tensors, dataclasses, containers)."""
    if depth > 4:
        return False
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        return bool(np.isnan(value).any())
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return bool(torch.isnan(value).any())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return any(_nan_in(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value))
    if isinstance(value, dict):
        return any(_nan_in(v, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_nan_in(v, depth + 1) for v in value[:64])
    return False


def _call(name: str, fn, kwargs: dict) -> str | None:
    """None if the call answered without NaN or refused in one ValueError/TypeError sentence; else what broke."""
    try:
        out = fn(**kwargs)
    except (ValueError, TypeError) as err:
        text = str(err)
        return None if text and "\n" not in text else f"{name}({kwargs}): a refusal of {len(text.splitlines())} lines"
    except Exception as err:  # noqa: BLE001 - any other exception is the bug this test looks for
        return f"{name}({kwargs}): {type(err).__name__}: {str(err)[:120]}"
    return f"{name}({kwargs}): answered with a NaN" if _nan_in(out) else None


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_a_catalogued_call_answers_with_its_valid_arguments(name):
    fn, kwargs = CATALOGUE[name]
    assert not _nan_in(fn(**kwargs))


@pytest.mark.parametrize("name", sorted(CATALOGUE))
@guarded(cpu_s=120, wall_s=1200)
def test_every_argument_fed_every_hostile_value_answers_or_refuses_in_one_sentence(name):
    fn, kwargs = CATALOGUE[name]
    broken = []
    for arg in kwargs:
        for bad in HOSTILE:
            problem = _call(name, fn, {**kwargs, arg: bad})
            if problem:
                broken.append(problem.replace(repr(kwargs), f"..., {arg}={bad!r}"))
    assert broken == []


@pytest.mark.parametrize("name", ["cost.decode_step", "cost.max_concurrency", "cost.kv_bytes_per_sequence",
                                  "long_context.score_matrix_bytes", "cost.ttft_s"])
@guarded()
def test_arrays_with_a_hostile_element_are_refused_in_one_sentence(name):
    fn, kwargs = CATALOGUE[name]
    swept = next(k for k in ("context", "prompt", "prompt_tokens") if k in kwargs)
    for bad in (math.nan, math.inf, -1.0, 1e300):
        assert _call(name, fn, {**kwargs, swept: np.array([512.0, bad])}) is None

