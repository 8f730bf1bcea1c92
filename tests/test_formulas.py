"""Every displayed formula is checked against the numbers its page glues, and every printed tail quantile states its
sample size.

A formula shown beside glued inputs and a glued answer is a claim the reader can redo by hand; if the two disagree
the page is wrong, whichever side is. Two such errors reached readers (issue 49): chapter 13 approximated latent
attention's intensity as 2hs/b beside its own glued 242 at 128 heads (the approximation is 4hs/b), and its hit-rate
formula, fed the page's own split, gave 29.8% where the reveal predicted 54.0%. So:

- ``FORMULAS`` names every displayed (``$$``) formula of every chapter by a piece of its LaTeX, and either evaluates
  it on the page's glued values against the glued answer (:class:`Check`; an "about" form gets a tolerance that
  says how rough it is) or says why there is nothing to evaluate (no glued inputs on the page, a definition, an
  identity). A new formula, or an edited one whose key no longer matches, fails the cheap test below until it is
  registered: the catalogue cannot silently go stale.
- The values come from the executed book (``<page>.glue.json`` beside each executed notebook, as
  tests/test_predictions.py reads them), so this needs the session's one book build and no second one.
- A tail quantile (p90 and above) read from a small sample is close to its maximum: with 40 requests, p99 is
  interpolated between the two slowest. Every markdown cell that pastes a glued tail quantile also pastes the size of
  the sample it was taken over (a glue id named as a count: ``*_n``, ``*_requests``, ``*_gaps``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.test_predictions import _glued_values

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(p.stem for p in (ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
DISPLAYED = re.compile(r"\$\$(.*?)\$\$", re.S)
GLUE_REF = re.compile(r"\{glue(?::\w+)?\}`([\w.:-]+?)(?::[^`]*)?`")


@dataclass(frozen=True)
class Check:
    """``formula(g)`` evaluated on the page's glued values ``g`` (``g["id"]`` on this page, ``g["page::id"]`` on
    another) must equal ``g[answer]`` within ``rel``."""

    what: str
    formula: Callable[[dict[str, float]], float]
    answer: str
    rel: float = 1e-6


H100_BF16 = "02_roofline::h100_bf16_TFLOPs"
H100_BW = "02_roofline::h100_bandwidth_TBs"

# (chapter, a piece of the formula's LaTeX) -> the checks, or why there is nothing to evaluate.
FORMULAS: dict[tuple[str, str], tuple[Check, ...] | str] = {
    ("01_two_phases", r"I_\text{prefill} \approx"): (
        Check("prefill intensity 2P/b_p in BF16, about: the cost model also counts the K/V the prompt writes",
              lambda g: 2 * g["prompt"] / 2, "prefill_intensity_p4096", rel=0.05),),
    ("01_two_phases", r"t_\text{token} \geq"): (
        Check("batch-1 floor N b_p / bandwidth on one H100 (every weight read in BF16)",
              lambda g: 1e3 * 1e9 * g["params_B"] * 2 / (1e12 * g["h100_bandwidth_TBs"]),
              "decode_floor_ms_1xH100", rel=1e-3),),
    ("02_roofline", r"\text{attainable FLOP/s} = \min"): (
        Check("ridge I* = pi / beta", lambda g: g["h100_bf16_TFLOPs"] / g["h100_bandwidth_TBs"],
              "h100_ridge_flops_per_byte"),),
    ("02_roofline", r"I_\text{decode} = \frac{2NB}{N\,b_p} = \frac{2B}{b_p}."): (
        Check("2B/b_p for the small model", lambda g: 2 * g["demo_batch"] / 2, "small_intensity_b64", rel=0.01),
        Check("2B/b_p for the large model", lambda g: 2 * g["demo_batch"] / 2, "large_intensity_b64", rel=0.01)),
    ("02_roofline", r"t_\text{step}(B) = t_0 + B\,t_1"): "the matmul rate pi(B) is measured at each batch and not "
                                                         "glued: the page evaluates the formula only in its figure",
    ("02_roofline", r"I_\text{decode} = \frac{2NB}{N\,b_p + B\,S\,k}"): (
        Check("the worked example's intensity with the KV reads",
              lambda g: 2 * 1e9 * g["large_params_B"] * g["worked_batch"] / (
                  1e9 * g["llama3_70b_weights_GB"] + g["worked_batch"] * g["kv_GiB_per_seq_4k"] * 2**30),
              "intensity_b125_s4096", rel=1e-3),
        Check("the KV bytes per step are B S k", lambda g: g["worked_batch"] * g["kv_GiB_per_seq_4k"] * 2**30 / 1e9,
              "kv_traffic_GB_b125_s4096", rel=1e-6)),
    ("02_roofline", r"I_\text{max} = \frac{2N}{S\,k}"): (
        Check("the long-context cap 2N/(S k)",
              lambda g: 2 * 1e9 * g["large_params_B"] / (g["kv_GiB_per_seq_4k"] * 2**30), "intensity_cap_s4096",
              rel=1e-3),),
    ("02_roofline", r"I_\text{attn} = \frac{\text{query heads per KV head}"): (
        Check("GQA decode attention: group x 1 token x 2 / 2 bytes", lambda g: g["llama3_70b_gqa_ratio"] * 1 * 2 / 2,
              "llama3_70b_gqa_ratio"),),
    ("02_roofline", r"t_\text{step} = \frac{B\,S\,k}{\beta} + \max"): "the step formula in symbols; the page "
                                                                      "evaluates it in its figure and in chapter 4",
    ("03_kv_cache", r"k = 2 \times L \times H_{kv}"): (
        Check("KV bytes per token 2 L H_kv d b_kv, in KiB",
              lambda g: 2 * g["layers"] * g["kv_heads"] * g["head_dim"] * 2 / 1024, "llama3_70b_kv_KiB_per_token"),),
    ("04_batching", r"t_\text{step}(B) = \frac{B\,S\,k}{\beta}"): (
        Check("batch 1 on four H100s: the weight read dominates (the page's weight GB per token times the batch)",
              lambda g: 1e3 * (g["batching_weight_GB_per_token_b64"] * g["batch_demo"] * 1e9
                               + g["batch_context"] * g["03_kv_cache::llama3_70b_kv_bytes_per_token"])
              / (4 * 1e12 * g[H100_BW]), "batching_step_ms_b1_s1024", rel=0.01),
        Check("the throughput gain is B t(1) / t(B)",
              lambda g: g["batch_demo"] * g["batching_step_ms_b1_s1024"] / g["batching_step_ms_b64_s1024"],
              "batching_throughput_gain_b64_s1024", rel=1e-3)),
    ("06_prefix_caching", r"K_\ell[t],\ V_\ell[t]"): "a statement about what a key and value depend on: no numbers",
    ("07_speculative_decoding", r"P(x) = q(x)\min"): "a step of a proof: no numbers",
    ("07_speculative_decoding", r"P(x) = \min\big(p(x), q(x)\big) + \max"): "the proof's conclusion: no numbers",
    ("07_speculative_decoding", r"\mathbb{E}[\text{tokens}]"): (
        Check("tokens per verification (1 - a^(k+1)) / (1 - a)",
              lambda g: (1 - g["spec_alpha"] ** (g["spec_k"] + 1)) / (1 - g["spec_alpha"]), "spec_tokens_a07_k4"),),
    ("08_quantization", r"I_\text{decode} = \frac{2NB}{N\,b_p} = \frac{2B}{b_p}."): (
        Check("batch 1 in an 8-bit format", lambda g: 2 * 1 / 1, "fp8_intensity_b1"),
        Check("batch 1 in BF16", lambda g: 2 * 1 / 2, "bf16_intensity_b1")),
    ("09_cost_model", r"\frac{\text{dollars}}{\text{token}}"): (
        Check("dollars per million tokens = price per second x seconds per step / tokens per step",
              lambda g: 1e6 * g["price_per_s"] * g["step_ms"] / 1e3 / g["tokens_per_step"], "usd_per_m_good",
              rel=1e-6),),
    ("09_cost_model", r"\frac{\text{measured}}{\text{estimate}} \in"): tuple(
        Check(f"the band's {edge} edge exp(m {sign} t sqrt(s_b^2 (1 + 1/n) + s_w^2)) for the batch-1 TPOT",
              lambda g, k=k: math.exp(g["band_b1_centre"] + k * g["band_b1_t"] * math.sqrt(
                  g["band_b1_between"] ** 2 * (1 + 1 / g["band_b1_n"]) + g["band_b1_within"] ** 2)),
              f"band_b1_{edge}", rel=1e-9)
        for edge, sign, k in (("low", "-", -1), ("high", "+", 1))),
    ("11_scaling_out", r"t_\text{step} = \frac{B\,S\,k}{n\,\beta}"): (
        Check("each GPU's ridge at the achieved rate: peak x MFU / bandwidth",
              lambda g: g[H100_BF16] * g["tp_mfu_pct"] / 100 / g[H100_BW], "tp_ridge_1", rel=1e-6),
        Check("n cancels: the ridge on eight GPUs is the ridge on one", lambda g: g["tp_ridge_1"], "tp_ridge_8"),
        Check("t_comp = t_mem at B = ridge x b_p / 2 (the first whole batch past it)",
              lambda g: math.ceil(g["tp_ridge_1"] * 2 / 2), "tp_cb_batch_1")),
    ("11_scaling_out", r"\text{TPOT} = \max\bigl(p\,(t_\text{stage}"): (
        Check("one microbatch over two stages: the bubble is 1 - t_stage / TPOT, TPOT = 2 (t_stage + t_p2p)",
              lambda g: 100 * (1 - (g["pp_pp2_b1_ms"] / 2 - g["pp_p2p_us"] / 1e3) / g["pp_pp2_b1_ms"]),
              "pp_one_micro_bubble_pct", rel=0.01),),
    ("11_scaling_out", r"E_\text{touched}(B)"): (
        Check("experts touched E [1 - (1 - k/E)^B]",
              lambda g: g["moe_experts"] * (1 - (1 - g["moe_k"] / g["moe_experts"]) ** g["moe_q_batch"]),
              "moe_touched_q", rel=1e-6),),
    ("12_long_context", r"\text{FLOPs}_\text{attn} = 4\,L\,H\,d"): "its crossing p + 1 = N / (L H d) is glued, but "
                                                                   "N, L, H and d are not on the page",
    ("12_long_context", r"S^\star = \frac{W}{B\,k}"): (
        Check("the context at which the KV reads equal the weight reads",
              lambda g: g["lc_read_GB_8b"] * 1e9 / (g["lc_q_batch"] * g["lc_kv_KiB_8b"] * 1024), "lc_cross_q",
              rel=1e-3),),
    ("13_serving_fleet", r"h_N \approx h_s + \frac{h_h}{N}"): (
        Check("round-robin in steady state: h_s + h_h / N",
              lambda g: g["pr_hs_pct"] + g["pr_hh_pct"] / g["fl_replicas"], "pr_steady_rr_pct", rel=1e-6),
        Check("prefix-aware routing: h_s + h_h, what one replica finds", lambda g: g["pr_hs_pct"] + g["pr_hh_pct"],
              "pr_one_pct", rel=1e-6),
        Check("prefix-aware routing keeps what one replica finds", lambda g: g["pr_one_pct"], "pr_pa_pct",
              rel=1e-6)),
    ("13_serving_fleet", r"B^\star(p) = \frac{p\,k}{n\,t_\text{prefill}(p)}"): "k, F and N are not glued on the "
                                                                               "page, only the break-even",
    ("13_serving_fleet", r"\text{bytes per token per layer}"): (
        Check("all-to-all bytes per token per layer k h (b_dispatch + b_combine) (e - 1) / e, in kB",
              lambda g: g["ep_k"] * g["ep_hidden"] * (g["ep_dispatch_bytes"] + 2) * (g["ep_ep"] - 1) / g["ep_ep"] / 1e3,
              "ep_bytes_token_KB", rel=1e-6),
        Check("per GPU per decode step: per token x tokens x MoE layers, in MB",
              lambda g: g["ep_bytes_token_KB"] * g["ep_tokens"] * g["ep_moe_layers"] / 1e3, "ep_bytes_step_MB",
              rel=1e-6)),
    ("13_serving_fleet", r"\frac{\text{FLOPs}}{\text{byte}} = \frac{2\,h\,s\,(d_k + d_v)}{b\,d_k}"): (
        Check("MLA decode intensity 2 h s (d_k + d_v) / (b d_k), one query token, BF16",
              lambda g: 2 * g["mla_heads"] * 1 * (g["mla_dk"] + g["mla_rank"]) / (2 * g["mla_dk"]), "mla_int"),
        Check("its approximation 4 h s / b (d_v close to d_k), about",
              lambda g: 4 * g["mla_heads"] * 1 / 2, "mla_int", rel=0.1)),
    ("14_disaggregation", r"\text{TPOT} = \frac{t(b)}{1 - r\,D_1}"): (
        Check("the stalled TPOT t(b) / (1 - r D_1)",
              lambda g: g["dg_step_ms"] / (1 - g["dg_r"] * g["dg_prefill_ms"] / 1e3), "dg_step_stalled_ms"),
        Check("the share of time prefilling, r D_1", lambda g: 100 * g["dg_r"] * g["dg_prefill_ms"] / 1e3,
              "dg_busy_pct"),
        Check("the stretch 1 / (1 - r D_1)", lambda g: 1 / (1 - g["dg_r"] * g["dg_prefill_ms"] / 1e3), "dg_stretch")),
    ("14_disaggregation", r"T_x = \frac{p\,k}{n\,B}"): (
        Check("the cache one prompt leaves, p k, in GB", lambda g: g["dg_prompt"] * g["dg_kv_token_kB"] / 1e6,
              "dg_bytes_GB"),
        *(Check(f"the copy p k / (n B) over {link}, in ms",
                lambda g, link=link: 1e3 * g["dg_prompt"] * g["dg_kv_token_kB"] * 1e3
                / (g["dg_gpus"] * g[f"dg_{link}_GBps"] * 1e9), f"dg_{link}_ms")
          for link in ("rdma", "nvlink", "pcie", "ssd"))),
    ("14_disaggregation", r"\text{exposed} = \max"): (
        *(Check(f"the copy's delay after the prefill, streamed over {link}: max(T_x / L, T_x - T_p (L - 1) / L)",
                lambda g, link=link: max(g[f"dg_{link}_ms"] / g["dg_layers"], g[f"dg_{link}_ms"]
                                         - g["dg_prefill_ms"] * (g["dg_layers"] - 1) / g["dg_layers"]),
                f"dg_{link}_exp_ms")
          for link in ("rdma", "ssd")),
        Check("the link hides the copy from B = p k / (n T_p), in GB/s per GPU",
              lambda g: g["dg_prompt"] * g["dg_kv_token_kB"] * 1e3 / (g["dg_gpus"] * g["dg_prefill_ms"] / 1e3) / 1e9,
              "dg_hide_GBps")),
    ("14_disaggregation", r"r_p = \frac{1}{D}\,\frac{2x}{1 + 2x}"): (
        Check("a prefill replica's M/D/1 rate: D the prefill, T the TTFT target, exposed the streamed RDMA copy "
              "(stage5.disagg.prefill_rate's link; every link's is under a millisecond of a second's target)",
              lambda g: (lambda d, x: 2 * x / (1 + 2 * x) / d)(
                  g["dg_prefill_ms"] / 1e3, (g["dg_ttft_target_ms"] - g["dg_rdma_exp_ms"]) / g["dg_prefill_ms"] - 1),
              "dg_rp"),
        Check("its busy share r_p D", lambda g: 100 * g["dg_rp"] * g["dg_prefill_ms"] / 1e3, "dg_rp_util_pct")),
}


def _markdown(name: str) -> str:
    cells = json.loads((ROOT / "book" / f"{name}.ipynb").read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def _code(name: str) -> str:
    cells = json.loads((ROOT / "book" / f"{name}.ipynb").read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


class _Recorder(dict):
    """Hands out a harmless value for any id and remembers which ids a formula read."""

    def __init__(self) -> None:
        super().__init__()
        self.read: set[str] = set()

    def __missing__(self, key: str) -> float:
        self.read.add(key)
        return 3.0


def _problems(checks: tuple[Check, ...], values: dict[str, float]) -> list[str]:
    out = []
    for c in checks:
        got, want = c.formula(values), values[c.answer]
        if not math.isclose(got, want, rel_tol=c.rel):
            out.append(f"{c.what}: the formula gives {got:.6g}, the page glues {c.answer} = {want:.6g} "
                       f"(tolerance {c.rel:g})")
    return out


@pytest.mark.parametrize("name", CHAPTERS)
def test_every_displayed_formula_is_catalogued(name):
    """Each ``$$`` formula of the chapter matches exactly one catalogue key, and each key of the chapter matches
    exactly one formula (an edited formula must be re-registered, and re-checked)."""
    formulas = DISPLAYED.findall(_markdown(name))
    keys = [key for (chapter, key) in FORMULAS if chapter == name]
    unlisted = [f.strip()[:80] for f in formulas if sum(key in f for key in keys) != 1]
    stale = [key for key in keys if sum(key in f for f in formulas) != 1]
    assert not unlisted, f"{name}: displayed formulas not in FORMULAS (or matched twice): {unlisted}"
    assert not stale, f"{name}: FORMULAS keys that match no formula, or several: {stale}"


@pytest.mark.parametrize("key", [k for k, v in FORMULAS.items() if not isinstance(v, str)], ids=lambda k: k[0])
def test_a_check_reads_what_its_page_shows(key):
    """A check reads only glued values the reader is shown (pasted on its page, or on the page it names) and compares
    with an answer pasted on its page: it checks what the reader can redo, not a number of its own."""
    name = key[0]
    for check in FORMULAS[key]:
        rec = _Recorder()
        check.formula(rec)
        for gid in sorted(rec.read | {check.answer}):
            page, _, bare = gid.rpartition("::")
            pasted = re.search(r"\{glue(?::\w+)?\}`(?:[\w.]+::)?" + re.escape(bare) + r"[:`]", _markdown(page or name))
            assert pasted, f"{name}: {check.what!r} reads {gid!r}, which its page does not show"


def _page_values(executed: Path, name: str) -> dict[str, float]:
    values = dict(_glued_values(executed, name))
    for doc in CHAPTERS:
        values.update({f"{doc}::{gid}": v for gid, v in _glued_values(executed, doc).items()})
    return values


@pytest.mark.parametrize("name", CHAPTERS)
def test_formulas_give_the_glued_answers(name, built_book):
    """Each catalogued formula, evaluated on the glued inputs of the executed chapter, gives its glued answer."""
    html, _ = built_book
    values = _page_values(html.parent / "jupyter_execute" / "book", name)
    problems = [p for (chapter, _), checks in FORMULAS.items() if chapter == name and not isinstance(checks, str)
                for p in _problems(checks, values)]
    assert not problems, "\n".join(problems)


def test_the_check_catches_the_errors_it_was_written_for():
    """Chapter 13 as it was: 2hs/b beside 242 at 128 heads, and h_s + h_h/N fed a split of 21.8 + 64.0 on eight
    replicas beside a 54.0% answer."""
    old_mla = Check("2hs/b", lambda g: 2 * g["mla_heads"] * 1 / 2, "mla_int", rel=0.1)
    old_split = Check("h_s + h_h/N", lambda g: g["pr_hs_pct"] + g["pr_hh_pct"] / g["fl_replicas"], "pr_rr_pct",
                      rel=0.05)
    page = {"mla_heads": 128.0, "mla_int": 241.8, "pr_hs_pct": 21.8, "pr_hh_pct": 64.0, "fl_replicas": 8.0,
            "pr_rr_pct": 54.0}
    assert len(_problems((old_mla, old_split), page)) == 2
    assert not _problems(FORMULAS[("13_serving_fleet", r"\frac{\text{FLOPs}}{\text{byte}} = \frac{2\,h\,s\,(d_k + d_v)}{b\,d_k}")],
                         {"mla_heads": 128.0, "mla_dk": 576.0, "mla_rank": 512.0, "mla_int": 2 * 128 * 1088 / 1152})


# ------------------------------------------------------------------ quantiles and their samples
TAIL = re.compile(r"(?:^|_)(?:p9\d|ttft9\d|itl_p9\d|tpot_p9\d)(?:_|$)")
SAMPLE = re.compile(r"(?:^|_)(?:n|requests|gaps|samples)$")


def _tail_cells(name: str) -> list[tuple[int, set[str], set[str]]]:
    cells = json.loads((ROOT / "book" / f"{name}.ipynb").read_text())["cells"]
    out = []
    for i, c in enumerate(cells):
        if c["cell_type"] != "markdown":
            continue
        ids = {g.rpartition("::")[2] for g in GLUE_REF.findall("".join(c["source"]))}
        tails = {g for g in ids if TAIL.search(g)}
        if tails:
            out.append((i, tails, {g for g in ids if SAMPLE.search(g)}))
    return out


@pytest.mark.parametrize("name", CHAPTERS)
def test_a_printed_tail_quantile_states_its_sample_size(name):
    """A markdown cell that pastes a glued p90-or-above value also pastes the count it was taken over."""
    bare = [(i, sorted(tails)) for i, tails, samples in _tail_cells(name) if not samples]
    assert not bare, f"{name}: cells print tail quantiles without their sample size (glue a *_n count): {bare}"


def test_the_quantile_rule_sees_quantiles_and_counts():
    assert TAIL.search("load_ttft_p99_hi") and TAIL.search("m_pa_ttft99_ms") and not TAIL.search("m_pa_ttft50_ms")
    assert SAMPLE.search("load_n") and SAMPLE.search("m_rr_requests") and not SAMPLE.search("load_long_lo")


# ------------------------------------------------------------------ "compute-bound" beside its ridge
# An intensity called compute-bound is a claim about a ridge: chapter 13 once called 242 FLOPs per byte compute-bound
# beside an H100 ridge of 295 (true on the H200 of its example, and at the FLOP rate kernels reach, which the page
# did not say). A paragraph that says "compute-bound" and pastes a glued intensity pastes the ridge it is judged by.
INTENSITY = re.compile(r"(?:^|_)int(?:ensity)?(?:_|$)")


def _bound_without_ridge(text: str) -> list[list[str]]:
    out = []
    for para in re.split(r"\n\s*\n", text):
        if "compute-bound" not in para:
            continue
        ids = [g.rpartition("::")[2] for g in GLUE_REF.findall(para)]
        if any(INTENSITY.search(g) for g in ids) and not any("ridge" in g for g in ids):
            out.append(sorted(g for g in ids if INTENSITY.search(g)))
    return out


@pytest.mark.parametrize("name", CHAPTERS)
def test_compute_bound_is_said_beside_a_ridge(name):
    bare = _bound_without_ridge(_markdown(name))
    assert not bare, f"{name}: 'compute-bound' beside glued intensities {bare} but no glued ridge in the paragraph"


def test_the_ridge_rule_sees_a_bare_claim():
    assert _bound_without_ridge("MLA is compute-bound ({glue:text}`mla_int:.0f` FLOPs per byte).")
    assert not _bound_without_ridge("compute-bound: {glue:text}`mla_int:.0f` against {glue:text}`mla_ridge:.0f`.")


# ------------------------------------------------------------------ "introduced" and "first" carry their source
# Chapter 4 once credited Sarathi-Serve with introducing chunked prefill (SARATHI did, and DeepSpeed-FastGen's Dynamic
# SplitFuse did the same a few months later), and chapter 13 credited Flash-Decoding with introducing a split whose
# priority its source does not claim and chapter 12 does not give. A sentence that says who introduced, invented or was first to do something cites its source in the same
# sentence; the words for the course's own order ("introduced below", "chapter 3 introduces") are not attributions.
ATTRIBUTION = re.compile(r"\b(?:introduced|introduces|invented|pioneered|first (?:proposed|described)|"
                         r"(?:was|were) the first)\b")
OWN_ORDER = re.compile(r"\b(?:introduced (?:below|above|earlier|later|here)|[Cc]hapters? \d+ introduces?)\b")


def _uncited_attributions(text: str) -> list[str]:
    sentences = re.split(r"(?<=[.!?])\s+(?=[A-Z*])", re.sub(r"\s+", " ", text))
    return [s[:120] for s in sentences if ATTRIBUTION.search(OWN_ORDER.sub(" ", s)) and "{cite}" not in s]


@pytest.mark.parametrize("name", [*CHAPTERS, "glossary", "intro"])
def test_an_attribution_cites_its_source(name):
    path = ROOT / "book" / f"{name}.md"
    text = path.read_text() if path.exists() else _markdown(name)
    bare = _uncited_attributions(text)
    assert not bare, f"{name}: attributions without a citation in the same sentence: {bare}"


def test_the_attribution_rule_tells_credit_from_the_course_s_order():
    assert _uncited_attributions("Sarathi-Serve, which introduced this scheduling, reports its gains.")
    assert not _uncited_attributions("SARATHI introduced chunked prefills {cite}`agrawal2023sarathi`.")
    assert not _uncited_attributions("The toy's matrices (introduced below) are large. Chapter 3 introduces it.")
