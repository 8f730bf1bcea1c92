"""End-to-end simulator latency in a real browser: JupyterLab in headless Chromium, one control changed at a time.

Starts JupyterLab on a scratch notebook that shows ``Simulator().widget()``, types new values into the
concurrency box, and times each change from the Enter key to the next animation frame after the plots' SVG
was replaced in the page (kernel round trip, Python update, widget sync and the browser's layout). Not a
test: the numbers depend on the machine and its load. Needs Chromium (/usr/bin/chromium) and playwright.

    .venv/bin/python scripts/bench_simulator_browser.py [--changes 20]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = {"cells": [{"cell_type": "code", "execution_count": None, "id": "sim", "metadata": {}, "outputs": [],
                       "source": ["from stage5.simulator import Simulator\n", "sim = Simulator()\n", "sim.widget()"]}],
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
            "nbformat": 4, "nbformat_minor": 5}
# Runs in the page: note the time of the Enter key and of the frame after the plots' titles next change (they
# name the batch, so every new concurrency changes them).
PROBE = """() => {
  const titles = () => Array.from(document.querySelectorAll('.widget-html-content svg text[font-weight=bold]'))
                         .map(t => t.textContent).join('|');
  window.__marks = [];
  window.__seen = titles();
  document.addEventListener('keydown', e => { if (e.key === 'Enter') window.__start = performance.now(); }, true);
  new MutationObserver(() => {
    if (window.__start === undefined) return;
    const now = titles();
    if (now === window.__seen) return;  // some other part of the page changed (kernel status, the input)
    window.__seen = now;
    const t0 = window.__start; window.__start = undefined;
    requestAnimationFrame(() => window.__marks.push(performance.now() - t0));
  }).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=20)
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="simbench-"))
    (work / "sim.ipynb").write_text(json.dumps(NOTEBOOK))
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    lab = subprocess.Popen([str(Path(sys.executable).with_name("jupyter-lab")), "--no-browser", f"--port={port}",
                            "--ServerApp.token=", "--ServerApp.password=", f"--ServerApp.root_dir={work}",
                            "--ServerApp.disable_check_xsrf=True", "--allow-root"], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"], headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            for _ in range(120):  # the server takes a while to start on a busy machine
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(1)
            page.goto(f"http://127.0.0.1:{port}/lab/tree/sim.ipynb", timeout=120_000)
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator, .jp-Toolbar", timeout=120_000)
            time.sleep(3)
            page.click(".jp-Cell .jp-InputArea-editor")
            page.keyboard.press("Shift+Enter")
            page.wait_for_selector(".widget-html-content svg", timeout=180_000)
            box = page.locator(".widget-text", has_text="concurrency").locator("input")
            page.evaluate(PROBE)
            for i in range(args.changes):
                box.fill(str(8 + 8 * (i % 40)))
                box.press("Enter")
                page.wait_for_function(f"window.__marks.length > {i}", timeout=30_000)
            marks = page.evaluate("window.__marks")
            python_ms = page.locator(".widget-html-content small").last.inner_text()
            browser.close()
    finally:
        lab.terminate()
        lab.wait(timeout=30)
    print(json.dumps({"changes": len(marks), "median_ms": statistics.median(marks), "max_ms": max(marks),
                      "min_ms": min(marks), "last_python_side": python_ms}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
