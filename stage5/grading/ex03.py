"""Exercise 3 (diagnose a deployment) and the clearing test's lever question: checks against stage5.levers."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .blocking import _learner_failures, unavailable
from .checks import GradingError, _as_number
from .checks import label as _label
from .remote import RemoteFunction

#: What a learner's ``diagnose`` may not call while it is checked: the reference itself and every cost-model
#: function that would do the step-time, prefill, concurrency or speculation arithmetic for it. The registries
#: (get_model, get_gpu), ModelConfig's fields and Hardware's datasheet numbers stay available.
DIAGNOSIS_BLOCKED: tuple[str, ...] = (
    "stage5.levers.diagnose_reference", "stage5.levers.lever_gains", "stage5.levers.request_seconds",
    "stage5.levers.dollars_per_million", "stage5.levers.latency_s", "stage5.levers.max_batch_within_slo",
    "stage5.levers.cost_terms", "stage5.simulator.simulate",
    "stage5.cost.decode_step", "stage5.cost.tpot_s", "stage5.cost.prefill_step", "stage5.cost.ttft_s",
    "stage5.cost.request_gpu_seconds", "stage5.cost.speculative_speedup",
    "stage5.cost.expected_tokens_per_verification", "stage5.cost.max_concurrency", "stage5.cost.kv_budget_bytes",
    "stage5.cost.cost_per_million_tokens", "stage5.cost.decode_throughput", "stage5.cost.cost_terms",
    "stage5.cost.mixed_tpot_s",
    "stage5.quantization.end_to_end_gain", "stage5.quantization.decode_step_gain",
)
DIAGNOSIS_FIELDS = ("phase", "decode_bound", "best_lever", "gain")
GAIN_FACTOR = 2.0  # a gain predicted by hand (Part A) passes when within this factor of the reference's
#: A gain computed by a learner's ``diagnose`` (Part B) follows the notebook's stated cost model, which has no free
#: parameter, so it must land within 5% of the reference (room for rounding in the by-hand parts of a build, far
#: less than any misconception moves it: leaving out the KV memory limit moves a gain by 10% or more on the hidden
#: deployments, checked in tests/test_grading_ex03.py).
FUNCTION_GAIN_FACTOR = 1.05


def reference_diagnosis(dep: Mapping[str, Any]) -> Any:
    """:func:`stage5.levers.diagnose_reference` for a learner-style deployment dict (ex03's ``Deployment``), priced
    by the cost model the exercise states: the simple estimate with prefill's attention FLOPs left out (its rule 3
    prices a prefill at 2 x N x T FLOPs), which ``Estimate.only("additive_attention")`` prices exactly."""
    from stage5 import cost, levers

    return levers.diagnose_reference(
        dep["model"], dep["gpu"], dep["num_gpus"], dep["prompt"], dep["output"], dep["concurrency"],
        dep["objective"], weights=dep.get("weights", "bf16"), kv=dep.get("kv", "bf16"),
        prefix_hit=dep.get("prefix_hit", 0.5), alpha=dep.get("alpha", 0.7), k=dep.get("k", 4),
        draft_cost=dep.get("draft_cost", 0.05), tpot_slo_s=dep.get("tpot_slo_s", levers.DEFAULT_TPOT_SLO_S),
        estimate=cost.Estimate.only("additive_attention"))


def describe_deployment(dep: Mapping[str, Any]) -> str:
    """A short learner-facing label for a deployment (it names the inputs, which the learner may see; the TPOT SLO
    only when it is not the default 50 ms)."""
    from stage5 import levers

    slo = dep.get("tpot_slo_s", levers.DEFAULT_TPOT_SLO_S)
    slo_text = "" if slo == levers.DEFAULT_TPOT_SLO_S else f", TPOT SLO {slo * 1e3:g} ms"
    # the lever inputs too, where they are not the Deployment defaults (prefix_hit 0.5, alpha 0.7, k 4, draft_cost 0.05)
    hit = dep.get("prefix_hit", 0.5)
    levers_text = "" if hit == 0.5 else f", prefix hit {hit:g}"
    if (dep.get("alpha", 0.7), dep.get("k", 4)) != (0.7, 4):
        levers_text += f", draft alpha {dep.get('alpha', 0.7):g} k {dep.get('k', 4)}"
    if dep.get("draft_cost", 0.05) != 0.05:
        levers_text += f", draft cost {dep.get('draft_cost', 0.05):g}"
    return (f"{dep['model']} on {dep['num_gpus']} x {dep['gpu']}, prompt {dep['prompt']:,}, output {dep['output']:,}, "
            f"concurrency {dep['concurrency']}, {dep.get('weights', 'bf16')} weights, {dep.get('kv', 'bf16')} KV"
            f"{levers_text}, objective {dep['objective']}{slo_text}")


def _lever_hint(got: str, ref: Any, dep: Mapping[str, Any]) -> str:
    """Why the named lever is not the best one here, without naming the one that is."""
    gains = ref.gains
    if got not in gains:
        return f"best_lever should be one of {', '.join(sorted(gains))}"
    if got == "speculative":
        if gains["speculative"] < 1.05:
            return ("speculative decoding gains little or loses here: verifying k+1 tokens per sequence multiplies "
                    "the arithmetic, and at this concurrency the verify pass is no longer free")
        return "speculative decoding helps here, but another lever helps clearly more"
    if got == "prefix_caching":
        if ref.prefill_share < 0.5:
            return ("prefix caching only removes prefill work, and most of this request's cost is decode: every "
                    "decode step reads the weights and, for each running sequence, its whole KV cache (batch x "
                    "context x KV bytes per token); count those reads before weighing the prompt")
        return "prefix caching helps here, but another lever helps clearly more"
    if got == "quantization":
        if gains["quantization"] > 1.05 and ref.max_concurrency > int(dep["concurrency"]):
            return ("FP8 does help here (a memory-bound step reads half the bytes), but another lever helps clearly "
                    "more: the KV memory holds more sequences than run now, and each extra sequence in a "
                    "memory-bound step shares the weight reads the others already pay for")
        return ("FP8 halves the bytes of whatever is quantized, but not the time of a compute-bound step or of a "
                "part already in 8 bits: count the weight and KV traffic (and the FLOPs) before and after")
    if dep["objective"] == "latency":
        return ("under the latency objective a larger batch makes every step slower for each user, and batching "
                "never lowers the concurrency below the stated one (not even when that batch misses the TPOT limit)")
    return ("batching is limited here: by the KV memory at the full sequence length and by the TPOT limit; "
            "check how far concurrency can actually rise and what each step then costs")


LABELS: dict[str, tuple[str, ...]] = {"phase": ("prefill", "decode"), "decode_bound": ("memory", "compute"),
                                      "best_lever": ("batching", "prefix_caching", "quantization", "speculative")}


def check_format(diagnosis: Any) -> None:
    """Exercise 3's visible check: ``diagnosis`` has the shape every answer must have, read exactly as
    :func:`check_diagnosis` reads it (a label in any case, with spaces or hyphens, as :func:`label` reads it; a gain
    that is any positive finite number, ``6`` or ``6.0``). Raises :class:`GradingError` naming the field and what is
    accepted; says nothing about whether the answer is right."""
    if not isinstance(diagnosis, Mapping):
        raise GradingError(f"a diagnosis is a dict with keys {', '.join(DIAGNOSIS_FIELDS)}; got "
                           f"{type(diagnosis).__name__}")
    missing = [f for f in DIAGNOSIS_FIELDS if f not in diagnosis]
    if missing:
        raise GradingError(f"the diagnosis lacks {', '.join(missing)}")
    for field, accepted in LABELS.items():
        if _label(diagnosis[field]) not in accepted:
            raise GradingError(f"{field} is one of {', '.join(repr(a) for a in accepted)}; got {diagnosis[field]!r}")
    if _as_number("gain", diagnosis["gain"]) <= 0:
        raise GradingError(f"gain is a positive number (old metric / new metric); got {diagnosis['gain']!r}")


def check_diagnosis(name: str, got: Any, dep: Mapping[str, Any], fields: Iterable[str] = DIAGNOSIS_FIELDS,
                    gain_factor: float = GAIN_FACTOR) -> None:
    """Compare a learner's diagnosis dict with the reference for ``dep``: ``phase``, ``decode_bound`` and
    ``best_lever`` exactly, ``gain`` (of the best lever) within ``gain_factor``. The message names the
    deployment and the misconception, never the expected value."""
    label = f"{name} ({describe_deployment(dep)})"
    if not isinstance(got, Mapping):
        raise GradingError(f"{label}: expected a dict with keys {', '.join(DIAGNOSIS_FIELDS)}, "
                           f"got {type(got).__name__}")
    fields = list(fields)
    missing = [f for f in fields if f not in got]
    if missing:
        raise GradingError(f"{label}: the dict lacks {', '.join(missing)}")
    ref = reference_diagnosis(dep)
    got = {key: _label(value) for key, value in got.items()}  # "Batching", "Decode" read as the label they name
    if "phase" in fields and got["phase"] != ref.phase:
        latency = (": under the latency objective too, since phase is about deployment-seconds, not the time a "
                   "user waits" if dep.get("objective") == "latency" else "")
        raise GradingError(f"{label}: phase is wrong: compare the prefill seconds of one request with its share of "
                           f"decode (output x step time / concurrency), KV reads included in the step{latency}")
    if "decode_bound" in fields and got["decode_bound"] != ref.decode_bound:
        # the course's step (chapter 2): KV / bandwidth + max(weights / bandwidth, FLOPs / FLOP/s); the bound is
        # the larger term inside the max, so the KV reads add to the step without deciding it
        hint = ("compare the matmuls' FLOPs at the achieved FLOP/s (MFU, and the FP8 rate for 8-bit weights) with "
                "the weight bytes at the bandwidth: attention's KV reads add to the step but do not decide the bound")
        raise GradingError(f"{label}: decode_bound is wrong: {hint}")
    if "best_lever" in fields and got["best_lever"] != ref.best_lever:
        raise GradingError(f"{label}: best_lever is wrong: {_lever_hint(str(got['best_lever']), ref, dep)}")
    if "gain" in fields:
        value = _as_number(f"{label}: gain", got["gain"])
        want = ref.gains[ref.best_lever]
        if not (want / gain_factor <= value <= want * gain_factor):
            direction = "too large" if value > want else "too small"
            size = f"{gain_factor:g}x" if gain_factor >= 1.5 else f"{gain_factor - 1:.0%}"
            if ref.best_lever == "batching" and direction == "too large":
                hint = ("the batch cannot rise past what fits in KV memory (prompt + output tokens of KV per "
                        "sequence, after the weights and the reserve of 8 GiB = 8 x 2^30 bytes per GPU), and each "
                        "step reads every sequence's KV: did you leave out one of them?")
            elif ref.best_lever == "batching":
                hint = ("the batch can rise to whatever fits in KV memory and meets the TPOT limit: did you stop "
                        "short of either, or count the KV reads at the full rather than the mean context?")
            elif ref.best_lever == "prefix_caching" and direction == "too large":
                hint = ("prefix caching computes fewer prompt tokens and changes nothing else: each decode step "
                        "still reads the whole context's KV, the cached prefix included")
            else:
                hint = "re-check the step time before and after the lever"
            raise GradingError(f"{label}: the gain is {direction} by more than {size}: {hint}")


def call_diagnose(name: str, func: Callable[..., Any], deps: Iterable[Mapping[str, Any]],
                  blocked: Iterable[str] = DIAGNOSIS_BLOCKED) -> list[Any]:
    """Call a learner's ``diagnose`` on each deployment (a fresh copy of each dict) with ``blocked`` stage5
    functions unavailable throughout; crashes become learner-safe failures naming the deployment."""
    if isinstance(func, RemoteFunction):  # in the grader: each call happens in the learner's kernel
        return func.call_many([(f"{name} ({describe_deployment(dep)})", (dict(dep),)) for dep in deps], blocked)
    if not callable(func):
        raise GradingError(f"{name}: expected a function, got {type(func).__name__}")
    out = []
    with unavailable(*blocked, deep=True):
        for dep in deps:
            with _learner_failures(f"{name} ({describe_deployment(dep)})", name):
                out.append(func(dict(dep)))
    return out

