"""Plotting helpers for the book: every curve is computed from :mod:`stage5.cost`, nothing is typed in.

Each helper draws on a matplotlib ``Axes`` it is given (or a new one) and returns it, so a chapter keeps
control of layout. Units are on the axis labels.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stage5 import cost, inputs
from stage5.hardware import GiB, Hardware


def _axes(ax=None):
    if ax is None:
        import matplotlib.pyplot as plt
        _, ax = plt.subplots(figsize=(7, 4))
    return ax


def mixed_step_s(dep: cost.Deployment, batch: int, context: int, chunk: int) -> float:
    """One step that decodes ``batch`` sequences and prefills ``chunk`` prompt tokens beside them
    (:func:`stage5.cost.mixed_step`)."""
    return float(cost.mixed_step(dep, batch, context, chunk).time_s)


MAX_STALL_STEPS = 100_000  # a timeline of that many tokens is already a solid line at any figure width


def stall_schedule(dep: cost.Deployment, batch: int, context: int, prompt: int, chunk: int | None,
                   arrival_s: float, horizon_s: float) -> tuple[np.ndarray, float]:
    """Times (s) at which one sequence of the decode batch emits tokens, and the new prompt's TTFT (s; inf when
    its first token comes after the horizon).

    A prompt of ``prompt`` tokens arrives at ``arrival_s``. ``chunk=None``: it is prefilled in one pass
    that stops decode; otherwise it is split into ``chunk``-token pieces carried by the decode steps.
    ``horizon_s`` must hold at most :data:`MAX_STALL_STEPS` decode steps (a plot of more is a solid line).
    """
    batch = inputs.positive_int(batch, "batch")
    context = inputs.non_negative_int(context, "context (tokens)")
    prompt = inputs.positive_int(prompt, "prompt (tokens)")
    if chunk is not None:
        chunk = inputs.positive_int(chunk, "chunk (tokens, or None for one pass)")
    arrival_s = inputs.real(arrival_s, "arrival_s", low=0.0, accepted="finite seconds >= 0, or inf for no arrival") \
        if arrival_s != np.inf else np.inf
    horizon_s = inputs.positive(horizon_s, "horizon_s (seconds)")
    steps = horizon_s / mixed_step_s(dep, batch, context, 0)
    if steps > MAX_STALL_STEPS:
        raise inputs.InputError(f"horizon_s={horizon_s:g} s is {steps:,.0f} decode steps of this deployment, past "
                                f"{MAX_STALL_STEPS:,}; accepted: a horizon of at most that many steps")
    t, emitted, remaining, first = 0.0, [], prompt, float("inf")  # inf: no first token within the horizon
    while t < horizon_s:
        if t >= arrival_s and remaining > 0:
            if chunk is None:
                t += float(cost.prefill_step(dep, prompt).time_s)
                remaining, first = 0, t - arrival_s
                continue
            piece = min(chunk, remaining)
            t += mixed_step_s(dep, batch, context, piece)
            remaining -= piece
            if remaining == 0:
                first = t - arrival_s
        else:
            t += mixed_step_s(dep, batch, context, 0)
        emitted.append(t)
    return np.array(emitted), first


def stall_timeline(dep: cost.Deployment, batch: int, context: int, prompt: int, chunk: int,
                   arrival_s: float = 0.1, horizon_s: float = 0.6, ax=None):
    """Tokens emitted by one decode sequence against time: no arrival, an unchunked and a chunked prefill."""
    ax = _axes(ax)
    cases = [("no new prompt", None, np.inf, "0.6", "-"),
             (f"{prompt:,}-token prefill in one pass", None, arrival_s, "C3", "-"),
             (f"same prompt in {chunk}-token chunks", chunk, arrival_s, "C0", "--")]
    for label, ch, arr, colour, style in cases:
        times, ttft = stall_schedule(dep, batch, context, prompt, ch, arr, horizon_s)
        counts = np.arange(1, len(times) + 1)
        ax.step(1e3 * np.r_[0, times], np.r_[0, counts], where="post", color=colour, ls=style, label=label)
        if np.isfinite(ttft):
            ax.axvline(1e3 * (arr + ttft), color=colour, ls=":", lw=1)
    ax.axvline(1e3 * arrival_s, color="k", lw=0.8)
    ax.annotate("prompt arrives", (1e3 * arrival_s, 0.95), xycoords=("data", "axes fraction"),
                ha="right", va="top", fontsize=8, rotation=90)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("tokens emitted by one running sequence")
    ax.set_xlim(0, 1e3 * horizon_s)
    ax.legend(loc="upper left", fontsize=8, title="dotted: new prompt's first token", title_fontsize=8)
    return ax


def roofline(hw: Hardware, batches: Sequence[int] = (1, 8, 64, 125, 512), dep: cost.Deployment | None = None,
             context: int | None = None, bytes_per_param: float = 2.0, ax=None):
    """Attainable FLOP/s against arithmetic intensity for ``hw``, with decode at ``batches`` marked.

    Circles: weights only (intensity = 2B / bytes per parameter). With ``dep`` and ``context``, squares add
    the KV reads of ``context``-token sequences (:func:`stage5.cost.decode_intensity_with_kv`).
    """
    ax = _axes(ax)
    peak = hw.flops(bytes_per_param)
    ridge = peak / hw.bandwidth
    x = np.logspace(-1, np.log10(max(ridge, max(batches)) * 10), 400)
    ax.loglog(x, np.minimum(peak, x * hw.bandwidth) / 1e12, color="k", lw=1.5)
    ax.axvline(ridge, color="0.5", ls=":", lw=1)
    ax.annotate(f"ridge {ridge:,.0f} FLOP/byte", (ridge, peak / 1e12), textcoords="offset points",
                xytext=(4, -14), fontsize=8)
    b = np.asarray(batches, dtype=float)
    weights_only = cost.decode_intensity(b, bytes_per_param)
    ax.scatter(weights_only, np.minimum(peak, weights_only * hw.bandwidth) / 1e12, color="C0", zorder=3,
               label="decode, weights only")
    for bi, xi in zip(batches, weights_only, strict=True):
        ax.annotate(f"B={bi}", (xi, min(peak, xi * hw.bandwidth) / 1e12), textcoords="offset points",
                    xytext=(-6, 6), fontsize=8, ha="right")
    if dep is not None and context is not None:
        with_kv = cost.decode_intensity_with_kv(dep, b, context)
        ax.scatter(with_kv, np.minimum(peak, with_kv * hw.bandwidth) / 1e12, marker="s", color="C3", zorder=3,
                   label=f"decode with KV reads, {context:,}-token contexts")
    ax.set_xlabel("arithmetic intensity (FLOP per byte read)")
    ax.set_ylabel("attainable TFLOP/s")
    ax.set_title(hw.name, fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    return ax


def intensity_vs_batch(dep: cost.Deployment, contexts: Sequence[int], max_batch: int = 1024, ax=None):
    """Decode intensity against batch: the weights-only line and one saturating curve per context length."""
    ax = _axes(ax)
    b = np.arange(1, max_batch + 1)
    ax.loglog(b, cost.decode_intensity(b, dep.weight_bytes), color="k", lw=1, label="weights only (= B in BF16)")
    for s in contexts:
        ax.loglog(b, cost.decode_intensity_with_kv(dep, b, s), label=f"with KV, {s:,}-token contexts")
    ridge = cost.ridge_point(dep.gpu, dep.weight_bytes)
    ax.axhline(ridge, color="0.5", ls=":", lw=1)
    ax.annotate(f"{dep.gpu.name} ridge", (1, ridge), textcoords="offset points", xytext=(2, 3), fontsize=8)
    ax.set_xlabel("batch size (sequences)")
    ax.set_ylabel("decode intensity (FLOP per byte read)")
    ax.legend(fontsize=8, loc="upper left")
    return ax


def concurrency_vs_context(deployments: Sequence[cost.Deployment], contexts: np.ndarray | None = None, ax=None):
    """Most sequences whose KV cache fits at once, against context length, one line per deployment; each line
    stops at its model's maximum context (``max_position_embeddings``), past which nothing can be served."""
    ax = _axes(ax)
    s = np.unique(np.logspace(9, 17, 200, base=2).astype(int)) if contexts is None else np.asarray(contexts)
    for dep in deployments:
        n = cost.max_concurrency(dep, s)
        weights = dep.weight_total_bytes / GiB
        label = f"{dep.model.name} on {dep.num_gpus}x{dep.gpu.name} ({weights:,.0f} GiB weights)"
        ax.loglog(s, np.where((n > 0) & (s <= dep.model.max_position_embeddings), n, np.nan), label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context length per sequence (tokens)")
    ax.set_ylabel("max concurrent sequences")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    return ax


# ======================================================================================= chapters 4-7
# Batching, PagedAttention, prefix caching and speculative decoding: cost-model curves, and pictures of
# what the toy engine (stage5.engine) did during a run. The engine helpers take plain lists, so they never
# import torch themselves.
def batching_curves(dep: cost.Deployment, context: int, max_batch: int = 1024, axes=None):
    """Two panels against batch size: the decode step's terms, and decode throughput.

    The step is the course's (chapter 2): attention's KV reads plus the larger of the weight reads and the
    arithmetic. The weight reads do not move with the batch; the compute term grows linearly and crosses them at
    the (MFU-adjusted) ridge; the KV reads grow with the batch and add at every batch. Returns the two axes.
    """
    if axes is None:
        import matplotlib.pyplot as plt
        _, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    b = np.arange(1, max_batch + 1)
    step = cost.decode_step(dep, b, context)
    ax = axes[0]
    ax.loglog(b, 1e3 * step.memory_s, color="C0", label="weight reads")
    ax.loglog(b, 1e3 * step.compute_s, color="C3", label=f"compute term (at {dep.mfu:.0%} MFU)")
    adds = bool(np.any(np.asarray(step.extra_s) > 0))
    if adds:
        ax.loglog(b, 1e3 * np.broadcast_to(step.extra_s, b.shape), color="C1", ls="--", label="KV reads (they add)")
    ax.loglog(b, 1e3 * step.time_s, color="k", lw=2, alpha=0.4,
              label="step time = KV + the larger" if adds else "step time = the larger")
    crossing = b[np.argmax(step.compute_bound)] if np.any(step.compute_bound) else None
    if crossing is not None:
        for a in axes:
            a.axvline(crossing, color="0.5", ls=":", lw=1)
        ax.annotate(f"compute-bound\nfrom B={crossing}", (crossing, 1e3 * float(step.time_s[crossing - 1])),
                    textcoords="offset points", xytext=(-6, -28), ha="right", fontsize=8)
    ax.set_xlabel("batch size (sequences)")
    ax.set_ylabel("decode step time (ms) = TPOT")
    ax.legend(fontsize=8, loc="upper left")
    ax = axes[1]
    ax.loglog(b, b / step.time_s, color="C2")
    ax.set_xlabel("batch size (sequences)")
    ax.set_ylabel("decode throughput (tokens/s)")
    return axes


def slot_occupancy(trace: Sequence[tuple[str, tuple[int, ...]]], slots: int) -> np.ndarray:
    """A [slots, steps] array of request ids (-1: empty) from an engine trace of (kind, ids that ran).

    A request keeps the lowest free slot from the step it first appears until the step after its last,
    so each row reads as one batch slot's history.
    """
    grid = -np.ones((slots, len(trace)), dtype=int)
    held: dict[int, int] = {}
    for t, (_, ids) in enumerate(trace):
        for rid in [r for r in held if r not in ids]:
            del held[rid]
        for rid in ids:
            if rid not in held:
                free = sorted(set(range(slots)) - set(held.values()))
                if not free:
                    raise ValueError(f"step {t} runs more than {slots} sequences")
                held[rid] = free[0]
            grid[held[rid], t] = rid
    return grid


def _id_colours(grid: np.ndarray):
    from matplotlib import colormaps
    cmap = colormaps["tab20"]
    rgba = np.ones((*grid.shape, 4))
    for rid in np.unique(grid[grid >= 0]):
        rgba[grid == rid] = cmap(int(rid) % 20)
    return rgba


def slot_timeline(trace: Sequence[tuple[str, tuple[int, ...]]], slots: int, steps: int | None = None,
                  ax=None, label: str = ""):
    """Which request held each batch slot at each step (colour = request, white = empty slot)."""
    ax = _axes(ax)
    grid = slot_occupancy(trace, slots)
    width = steps or grid.shape[1]
    padded = -np.ones((slots, width), dtype=int)
    padded[:, :grid.shape[1]] = grid[:, :width]
    ax.imshow(_id_colours(padded), aspect="auto", interpolation="nearest", origin="lower",
              extent=(0, width, -0.5, slots - 0.5))
    busy = 100 * (grid >= 0).mean()
    ax.set_ylabel("batch slot")
    ax.set_title(f"{label}: {grid.shape[1]:,} steps, {busy:.0f}% of slot-steps busy", fontsize=9)
    if grid.shape[1] < width:
        ax.axvline(grid.shape[1], color="k", lw=1)
    return ax


def measured_vs_predicted(batches: Sequence[int], measured_s: Sequence[float], predicted_s: Sequence[float],
                          axes=None, ideal_s: Sequence[float] | None = None, ridge: float | None = None):
    """TPOT and throughput against batch size on this machine: the engine's measured median decode step
    against the prediction for the same batch and context. ``ideal_s`` adds the ideal roofline (the peak
    matmul rate at every batch) and ``ridge`` marks this CPU's ridge, in sequences. Returns the two axes."""
    if axes is None:
        import matplotlib.pyplot as plt
        _, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    b = np.asarray(batches, dtype=float)
    meas, pred = np.asarray(measured_s), np.asarray(predicted_s)
    curves = [(meas, "o-", "C1", "measured (median decode step)"),
              (pred, "s--", "C0", "predicted from the calibration" if ideal_s is not None else "roofline prediction")]
    if ideal_s is not None:
        curves.append((np.asarray(ideal_s), ":", "0.4", "ideal roofline (peak matmul rate at every batch)"))
    for values, style, colour, label in curves:
        axes[0].plot(b, 1e3 * values, style, color=colour, label=label)
        axes[1].plot(b, b / values, style, color=colour, label=label)
    axes[0].set_ylabel("TPOT (ms per token)")
    axes[1].set_ylabel("throughput (tokens/s)")
    from matplotlib.ticker import FuncFormatter, NullFormatter
    for ax in axes:
        if ridge is not None:
            ax.axvline(ridge, color="C3", lw=1, ls="-.", label=f"this CPU's ridge (batch {ridge:.0f})")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(b)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.3g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("batch size (sequences)")
    axes[1].legend(fontsize=7)
    return axes


def kv_pool_map(owner: Sequence[int], used: Sequence[bool], block_size: int, per_row: int = 128, ax=None,
                label: str = ""):
    """The K/V pool at one moment: each cell is one token slot, coloured by the sequence it belongs to.

    Solid: the slot holds a token's keys and values. Pale: reserved for the sequence but empty. Dark grey: free.
    Thin lines mark block boundaries (every ``block_size`` slots).
    """
    ax = _axes(ax)
    own = np.asarray(owner, dtype=int)
    full = np.asarray(used, dtype=bool)
    rows = -(-len(own) // per_row)
    grid = -np.ones(rows * per_row, dtype=int)
    grid[:len(own)] = own
    rgba = _id_colours(grid.reshape(rows, per_row))
    pale = np.zeros(rows * per_row, dtype=bool)
    pale[:len(own)] = (own >= 0) & ~full
    pale = pale.reshape(rows, per_row)
    rgba[pale] = 0.25 * rgba[pale] + 0.75
    rgba[grid.reshape(rows, per_row) < 0] = (0.35, 0.35, 0.35, 1.0)
    rgba[..., 3] = 1.0
    ax.imshow(rgba, aspect="auto", interpolation="nearest", extent=(0, per_row, rows, 0))
    for x in range(block_size, per_row, block_size):
        ax.axvline(x, color="0.85", lw=0.4)
    held = int((own >= 0).sum())
    stored = int(full.sum())
    share = 100 * stored / held if held else 0.0
    ax.set_title(f"{label}: {stored:,} of {held:,} reserved slots hold tokens ({share:.0f}%), "
                 f"{len(own) - held:,} free", fontsize=9)
    ax.set_yticks([])
    ax.set_xlabel(f"slot within a row of {per_row} (rows continue downwards; lines: blocks of {block_size})")
    return ax


# Every public function above refuses a wrong record (a string where a Deployment goes) in one sentence.
inputs.check_object_arguments(globals())
