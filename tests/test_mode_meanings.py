"""Every page that defines a mode of the cost model defines it in the same words: those of
``stage5.cost.MODE_MEANINGS``, pasted, never retyped.

The glossary, chapter 9 (where the floor and the estimate are met), chapter 10 (the simulator's *cost model*
control) and the appendix (the ex03 commands' three columns) each paste every mode's meaning through glue; the
notebooks glue it from ``cost.MODE_MEANINGS`` itself; the rendered pages show it word for word. The meanings are
checked against the code in turn: the estimate's names every term ``stage5.cost.Estimate`` can switch, the floor's
agrees with ``stage5.cost.FLOOR``, and the step each states is the step ``stage5.cost.decode_step`` prices.
"""

from __future__ import annotations

import ast
import html as html_lib
import json
import re
from pathlib import Path

import numpy as np
import pytest

from stage5 import cost

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
# page -> how it names the glued meaning of mode m (the glossary, a Markdown page, pastes chapter 9's)
# (a paste from another page needs a format spec, ":s": myst-nb reads "page::key" alone as a key ending in ":")
PAGES = {"glossary": "09_cost_model.ipynb::mode_{m}:s", "09_cost_model": "mode_{m}", "10_simulator": "mode_{m}",
         "appendix_vllm": "mode_{m}"}
GLOSSARY_TERMS = {"floor": "Floor", "simple": "Simple estimate", "estimate": "Estimate"}
# Words in the estimate's meaning for each term an Estimate can switch off: a new term must be described there.
TERM_WORDS = {
    "bandwidth_fraction": "share of the datasheet's bandwidth",
    "prefill_mfu": "an MFU per phase",
    "decode_mfu": "an MFU per phase",
    "additive_attention": "KV reads add",
    "allreduce": "all-reduces",
    "server_nics": "every network card",
    "prefill_attention": "prefill's causal attention",
    "mixed_step": "prefill chunks",
    "embedding_lookup": "embedding rows",
}


def _markdown(page: str) -> str:
    path = BOOK / f"{page}.md"
    if path.exists():
        return path.read_text()
    cells = json.loads((BOOK / f"{page}.ipynb").read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


@pytest.mark.parametrize("page", PAGES)
def test_each_page_pastes_every_mode_meaning(page):
    text = _markdown(page)
    missing = [m for m in cost.MODES if f"{{glue:text}}`{PAGES[page].format(m=m)}`" not in text]
    assert not missing, f"{page} does not paste the meaning of {missing} (glue id {PAGES[page].format(m='<mode>')})"


@pytest.mark.parametrize("page", [p for p in PAGES if (BOOK / f"{p}.ipynb").exists()])
def test_each_notebook_glues_the_meanings_from_the_cost_model(page):
    """A loop over cost.MODES glues f"mode_{m}" with cost.MODE_MEANINGS[m]: nothing typed, nothing left out."""
    cells = json.loads((BOOK / f"{page}.ipynb").read_text())["cells"]
    found = False
    for cell in (c for c in cells if c["cell_type"] == "code"):
        for loop in (n for n in ast.walk(ast.parse("".join(cell["source"]))) if isinstance(n, ast.For)):
            if ast.unparse(loop.iter) != "cost.MODES" or not isinstance(loop.target, ast.Name):
                continue
            var = loop.target.id
            for call in (n for n in ast.walk(loop) if isinstance(n, ast.Call) and ast.unparse(n.func) == "glue"):
                found |= (len(call.args) >= 2 and ast.unparse(call.args[0]) == f"f'mode_{{{var}}}'"
                          and ast.unparse(call.args[1]) == f"cost.MODE_MEANINGS[{var}]")
    assert found, f"{page} should glue f'mode_{{m}}' from cost.MODE_MEANINGS[m] in a loop over cost.MODES"


def test_glossary_entries_open_with_the_meanings():
    """The glossary's entry for each mode starts with its pasted meaning, so no other definition comes first."""
    text = (BOOK / "glossary.md").read_text()
    for mode, term in GLOSSARY_TERMS.items():
        entry = re.search(rf"^{re.escape(term)}\n  (.*)$", text, re.M)
        assert entry, f"the glossary has no entry {term!r}"
        assert entry.group(1).startswith(f"{{glue:text}}`{PAGES['glossary'].format(m=mode)}`"), (
            f"the glossary's {term!r} should open with its pasted meaning, not {entry.group(1)[:60]!r}")


def test_the_estimate_meaning_names_every_term_it_can_switch():
    assert set(TERM_WORDS) == set(cost.TERMS), (
        f"describe the estimate terms {sorted(set(cost.TERMS) - set(TERM_WORDS))} in MODE_MEANINGS['estimate'] "
        "and add them here")
    meaning = cost.MODE_MEANINGS["estimate"]
    missing = {t: w for t, w in TERM_WORDS.items() if w not in meaning}
    assert not missing, f"MODE_MEANINGS['estimate'] does not mention {missing}"


def test_the_floor_and_simple_meanings_agree_with_the_code():
    floor, simple = cost.MODE_MEANINGS["floor"], cost.MODE_MEANINGS["simple"]
    assert cost.FLOOR.embedding_lookup and "only the embedding rows" in floor
    assert cost.FLOOR.prefill_attention and "prefill's causal attention included" in floor
    assert not cost.FLOOR.additive_attention and "overlapped" in floor
    assert not cost.FLOOR.allreduce and "communication between GPUs free" in floor
    assert "whole embedding table" in simple and "causal attention FLOPs are counted" in simple
    assert cost.counts_prefill_attention(cost.Deployment.of("llama3-8b", "H100"))  # as the simple meaning says
    assert f"{cost.DEFAULT_MFU:.0%}" in simple


def test_the_step_each_meaning_states_is_the_step_the_cost_model_prices():
    """The simple estimate's stated step, KV / bandwidth + max(weights / bandwidth, FLOPs / (peak x MFU)), and the
    floor's, the larger of all bytes / bandwidth and FLOPs / peak, recomputed here from the deployment's numbers."""
    dep = cost.Deployment.of(cost.ANCHOR_MODEL, cost.ANCHOR_GPU, cost.ANCHOR_GPUS)
    batch, context = np.array([1, 64, 400]), 1152
    bw, peak = dep.gpu.bandwidth * dep.num_gpus, dep.gpu.flops(dep.weight_bytes) * dep.num_gpus
    kv = batch * dep.kv_bytes_per_token * context
    flops = 2 * dep.model.active_params * batch
    simple = kv / bw + np.maximum(dep.model.num_params * dep.weight_bytes / bw, flops / (peak * dep.mfu))
    np.testing.assert_allclose(cost.decode_step(cost.with_mode(dep, "simple"), batch, context).time_s, simple)
    rows = np.minimum(batch, dep.model.vocab_size) * dep.model.hidden_size  # the embedding rows looked up
    read = (dep.model.num_params - dep.model.vocab_size * dep.model.hidden_size + rows) * dep.weight_bytes
    floor = np.maximum((read + kv) / bw, flops / peak)
    np.testing.assert_allclose(cost.decode_step(cost.with_mode(dep, "floor"), batch, context).time_s, floor)


def _page_text(html_dir: Path, page: str) -> str:
    raw = (html_dir / "book" / f"{page}.html").read_text()
    text = html_lib.unescape(re.sub(r"<[^>]+>", "", raw))
    return re.sub(r"\s+", " ", text.replace("\u2019", "'").replace("\u2018", "'"))


@pytest.mark.parametrize("page", PAGES)
def test_rendered_pages_show_every_meaning_word_for_word(page, built_book):
    html_dir, _ = built_book
    text = _page_text(html_dir, page)
    missing = [m for m in cost.MODES if re.sub(r"\s+", " ", cost.MODE_MEANINGS[m]) not in text]
    assert not missing, f"the rendered {page} page does not show the meaning of {missing}"
