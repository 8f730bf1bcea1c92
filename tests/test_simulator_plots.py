"""The simulator's four live plots: the numbers they draw agree with the simulator, and the widget follows it."""

import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from stage5 import cost
from stage5.simulator import SimInputs, Simulator, simulate
from stage5.simulator_plots import figure_svg, plot_data
from stage5.svg_chart import Scale


@pytest.mark.parametrize("inputs", [SimInputs(), SimInputs(concurrency=8, k=4, prefix_hit=0.5),
                                    SimInputs(weights="fp8", kv="fp8", concurrency=300, k=6, alpha=0.9),
                                    SimInputs(model="llama3-8b", gpu="L40S", num_gpus=1, concurrency=4)])
def test_plot_data_agrees_with_the_simulator(inputs):
    out = simulate(inputs)
    d = plot_data(inputs, out)
    assert d.kv_wall == out.max_concurrency and d.concurrency == inputs.concurrency
    assert d.batch[-1] > d.kv_wall  # the wall is on the axis
    # the roofline's corner is the simulator's ridge (so FP8 W8A8 moves it)
    assert d.peak_tflops / d.bandwidth_tbs == pytest.approx(out.ridge)
    # each lever's bar is the levers' baseline bill divided by that lever's gain (objective "cost")
    as_set = sum(d.bars["no lever"])
    assert d.usd_as_set == out.usd_per_million
    if inputs.k == 0 and inputs.prefix_hit == 0:
        assert as_set == pytest.approx(out.usd_per_million)
    for label, lever in (("batching", "batching"), ("prefix cache", "prefix_caching"),
                         ("FP8 w+KV", "quantization"), ("speculation", "speculative")):
        assert sum(d.bars[label]) == pytest.approx(as_set / out.gains[lever], rel=1e-9)
    # the speedup curve crosses 1 where the panel says
    if not math.isnan(d.spec_crossing):
        i = int(np.searchsorted(d.batch, d.spec_crossing))
        assert d.spec_speedup[i] < 1 and np.all(d.spec_speedup[:i] >= 1)
    elif inputs.k > 0:
        assert np.all(d.spec_speedup >= 1)
    else:  # speculation off: nothing drawn, nothing to give away before a prediction
        assert np.all(np.isnan(d.spec_speedup)) and "speculation off" in figure_svg(d)


def test_svg_is_well_formed_and_titled():
    x = SimInputs(weights="fp8", kv="fp8")
    out = simulate(x)
    doc = figure_svg(plot_data(x, out))
    root = ET.fromstring(doc)  # raises on malformed XML
    svgs = list(root.iter("{http://www.w3.org/2000/svg}svg"))
    assert len(svgs) == 4 and all(s.get("viewBox") and s.get("width") == "100%" for s in svgs)
    titles = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text") if t.get("font-weight") == "bold"]
    assert len(titles) == 4
    assert f"ridge {out.ridge:,.0f}" in titles[0] and f"{2 * cost.ridge_point(cost.get_gpu('H100-SXM')):,.0f}" in titles[0]


def test_widget_plots_follow_controls_and_hide():
    sim = Simulator()
    sim.widget()
    first = sim.plots.widget.value
    assert first.count("<svg") == 4
    sim.set(concurrency=8)
    assert sim.plots.widget.value.count("<svg") == 4 and sim.plots.widget.value != first
    sim.hide.value = True
    assert "<svg" not in sim.plots.widget.value and "hidden" in sim.plots.widget.value
    sim.hide.value = False
    sim.set(num_gpus=1)  # does not fit: no plot, the result says why
    assert sim.plots.widget.value == "" and "Cannot run" in sim.result.value


def test_scale_refuses_empty_or_nonpositive_log_ranges():
    with pytest.raises(ValueError):
        Scale(1.0, 1.0)
    with pytest.raises(ValueError):
        Scale(0.0, 10.0, log=True)
    assert Scale(1, 1000, log=True).ticks() == [1, 10, 100, 1000]


# ------------------------------------------------------------------------------------------ the page
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Where every drawn element ends up, relative to the column; each panel's box; the smallest title's height.
_MEASURE = """() => {
  const column = document.getElementById('column').getBoundingClientRect();
  const panels = [...document.querySelectorAll('svg')].map(s => {
    const r = s.getBoundingClientRect(); const v = s.viewBox.baseVal;
    return {left: r.left, top: r.top, width: r.width, height: r.height, aspect: v.height / v.width,
            drawn: v.width};
  });
  let left = Infinity, right = -Infinity, overflow = 0;
  for (const s of document.querySelectorAll('svg')) {
    const box = s.getBoundingClientRect();
    for (const el of s.querySelectorAll('text, line, polyline, rect, circle')) {
      if (el.closest('clipPath')) continue;
      const r = el.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) continue;
      left = Math.min(left, r.left); right = Math.max(right, r.right);
      // how far a label or mark reaches past its own panel's edge, where the panel would cut it off
      overflow = Math.max(overflow, box.left - r.left, r.right - box.right, box.top - r.top, r.bottom - box.bottom);
    }
  }
  const titles = [...document.querySelectorAll('svg text[font-weight="bold"]')].map(t => t.getBoundingClientRect().height);
  return {columnLeft: column.left, columnRight: column.right, left, right, overflow, panels,
          smallestTitle: Math.min(...titles)};
}"""


@pytest.mark.parametrize("column", [757, 360])
def test_the_four_plots_fit_the_book_column_and_a_phone(tmp_path, column):
    """The book's content column is 757 px wide; a phone gives about 360. The four plots must fit either: two to
    a row in the column, one to a row on the phone, every label inside its panel and the column, the drawing's
    proportions kept, and titles large enough to read."""
    import os

    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright Python package is not installed")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing; install the system chromium to run the browser check")
    x = SimInputs(concurrency=8, k=4, prefix_hit=0.5)
    doc = figure_svg(plot_data(x, simulate(x)))
    page_html = (f'<!doctype html><html><body style="margin:0"><div id="column" style="width:{column}px">{doc}'
                 f'</div></body></html>')
    with sync_api.sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(str(tmp_path / "profile"), executable_path=CHROMIUM,
                                                   args=CHROMIUM_FLAGS, headless=True,
                                                   viewport={"width": column + 200, "height": 900})
        page = ctx.new_page()
        page.set_content(page_html)
        m = page.evaluate(_MEASURE)
        ctx.close()
    panels = m["panels"]
    assert len(panels) == 4
    for p in panels:
        assert p["left"] >= m["columnLeft"] - 0.5 and p["left"] + p["width"] <= m["columnRight"] + 0.5, (
            f"a panel spills out of the {column} px column: {p}")
        assert p["width"] <= p["drawn"] + 0.5, "a panel was drawn larger than its own size"
        assert p["height"] == pytest.approx(p["aspect"] * p["width"], rel=0.02), "a panel was stretched or cut"
    assert m["left"] >= m["columnLeft"] - 0.5 and m["right"] <= m["columnRight"] + 0.5, (
        f"something is drawn outside the column: {m}")
    assert m["overflow"] <= 0.5, f"a label or mark reaches {m['overflow']:.1f} px past its panel and is cut off"
    rows = len({round(p["top"]) for p in panels})
    assert rows == (2 if column >= 2 * 340 else 4), f"{rows} rows of panels in a {column} px column"
    assert m["smallestTitle"] >= 9, f"titles render {m['smallestTitle']:.1f} px tall: too small to read"
