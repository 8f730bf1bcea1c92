"""The toy engine's step time, predicted from a :class:`stage5.calibration.Calibration` and a ``ModelConfig``.

    predicted step = overhead + max(weight bytes / bandwidth, FLOPs / achieved rate) + attention

* overhead: the fixed cost per step and per sequence, measured by a hollow run of the same op graph;
* weight bytes / bandwidth: every weight is read once per step, whatever the batch (the memory floor);
* FLOPs / achieved rate: 2 x parameters per token row, at the rate this CPU's kernels reach *at that many
  rows* (on a CPU the rate at small batch is a fraction of peak: the kernel-efficiency gap);
* attention: the stored K/V the step reads, at the streaming bandwidth. The engine gathers each sequence's
  K/V out of the pool (one read and one write) and attention then reads the copy, so the K/V bytes cross
  memory three times.

The ideal roofline replaces the achieved rate by the best rate measured at any batch. Both are here so the
chapters can show the gap between them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from stage5 import inputs
from stage5.calibration import Calibration
from stage5.models import ModelConfig

BYTES_PER_PARAM = 4  # the toy engine runs float32
KV_PASSES = 3  # gather reads and writes the K/V copy, attention reads it (see the module docstring)


@dataclass(frozen=True)
class StepPrediction:
    """The terms of one predicted step, in seconds (arrays when the inputs were arrays)."""

    overhead_s: np.ndarray
    memory_s: np.ndarray
    compute_s: np.ndarray
    attention_s: np.ndarray

    @property
    def time_s(self) -> np.ndarray:
        return self.overhead_s + np.maximum(self.memory_s, self.compute_s) + self.attention_s

    @property
    def memory_share(self) -> np.ndarray:
        """Share of the step spent streaming weights."""
        return self.memory_s / self.time_s


def predict_step(cal: Calibration, cfg: ModelConfig, batch: ArrayLike, context: ArrayLike = 0,
                 tokens_per_seq: ArrayLike = 1, ideal: bool = False) -> StepPrediction:
    """Predicted time of one step that feeds ``tokens_per_seq`` tokens to each of ``batch`` sequences holding
    ``context`` tokens of K/V each. ``ideal`` uses the peak matmul rate at every batch (the ideal roofline)."""
    b = _amount(batch, "batch (sequences)")
    rows = b * _amount(tokens_per_seq, "tokens_per_seq")
    context = inputs.counts(context, "context (tokens)", minimum=0.0)
    rate = cal.peak_rate if ideal else cal.rate(rows)
    memory = np.broadcast_to(cfg.weight_bytes(BYTES_PER_PARAM) / cal.bandwidth, rows.shape).astype(float)
    compute = 2.0 * cfg.num_params * rows / rate
    attention = KV_PASSES * b * np.asarray(context, dtype=float) * cfg.kv_bytes_per_token(BYTES_PER_PARAM) / cal.bandwidth
    overhead = cal.overhead_step_s + cal.overhead_seq_s * b
    return StepPrediction(np.asarray(overhead), memory, np.asarray(compute), np.asarray(attention))


def _amount(x: ArrayLike, name: str) -> np.ndarray:
    """Sequences or tokens per sequence in a step: above 0 (a share of a batch, as a run's mean, is fine) and
    at most 2**53."""
    return inputs.reals(x, name, low=0.0, low_open=True, high=float(inputs.MAX_COUNT),
                        accepted="a number in (0, 2**53] (or an array of them)")


def ridge_batch(cal: Calibration, cfg: ModelConfig) -> float:
    """The batch at which the ideal roofline's compute term (peak rate) reaches the weight-streaming term:
    2 N B / peak = N b_p / bandwidth, so B = b_p x peak / (2 x bandwidth), the ridge in sequences."""
    return BYTES_PER_PARAM * cal.peak_rate / (2 * cal.bandwidth)


def knee_batch(batches: ArrayLike, times: ArrayLike) -> float:
    """Where a measured step-time curve's two asymptotes meet: the flat line through its smallest batch and
    the line through the origin and its largest. Applied to a measurement it estimates the ridge without any
    model; the estimate is rough where fixed overhead is a large part of the largest batch's step."""
    b = inputs.reals(batches, "batches", low=0.0, low_open=True, high=float(inputs.MAX_COUNT))
    t = inputs.reals(times, "times (seconds)", low=0.0, low_open=True)
    if b.ndim != 1 or b.shape != t.shape or b.size < 2:
        raise inputs.InputError(f"batches and times must be two lists of the same length, at least 2, got "
                                f"{b.shape} and {t.shape}")
    return float(t[0] * b[-1] / t[-1])


def speculative_round(cal: Calibration, cfg: ModelConfig, draft_cfg: ModelConfig, batch: ArrayLike,
                      context: ArrayLike, k: int) -> np.ndarray:
    """Predicted seconds of one speculative round: k draft steps, then one target pass over k + 1 tokens each."""
    k = inputs.non_negative_int(k, "k (drafted tokens)", maximum=inputs.MAX_DRAFT_TOKENS)
    draft = predict_step(cal, draft_cfg, batch, context).time_s
    verify = predict_step(cal, cfg, batch, context, tokens_per_seq=k + 1).time_s
    return k * draft + verify


def speculative_speedup(cal: Calibration, cfg: ModelConfig, draft_cfg: ModelConfig, batch: ArrayLike,
                        context: ArrayLike, alpha: float, k: int) -> np.ndarray:
    """Predicted tokens/s with speculation over tokens/s without, at acceptance rate ``alpha``."""
    from stage5.cost import expected_tokens_per_verification

    plain = predict_step(cal, cfg, batch, context).time_s
    return expected_tokens_per_verification(alpha, k) * plain / speculative_round(cal, cfg, draft_cfg, batch,
                                                                                     context, k)


def predict_run_s(cal: Calibration, cfg: ModelConfig, result) -> float:
    """Predicted wall time of a finished engine run (a :class:`stage5.engine.engine.RunResult`), step by step
    from its deterministic trace: sequences, tokens fed and K/V held in each step."""
    batch = np.array([len(ids) for _, ids in result.trace], dtype=float)
    fed = np.asarray(result.step_tokens, dtype=float)
    context = np.asarray(result.step_context, dtype=float) / batch
    return float(predict_step(cal, cfg, batch, context, tokens_per_seq=fed / batch).time_s.sum())


# Every public function above refuses a wrong record (a string where a Calibration goes) in one sentence.
inputs.check_object_arguments(globals())
