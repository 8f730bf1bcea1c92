"""The rendered book: it builds cleanly, its chapters follow the chapter pattern, and every page works in a
real browser.

The book is built once per test session, from the working tree into a temporary folder (so `_build/` is
never touched and nothing depends on an earlier `make book`). The browser tests drive the system Chromium
(/usr/bin/chromium) through Python Playwright and skip, saying why, when either is missing.
"""

from __future__ import annotations

import functools
import http.server
import json
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import sync_settings  # noqa: E402  (the generator of the setup cells and launch settings)

BOOK = ROOT / "book"
# Every numbered chapter notebook in book/ gets the checks below, so a new chapter cannot skip them.
CHAPTERS = sorted(p.stem for p in BOOK.glob("[0-9][0-9]_*.ipynb"))
PAGES = ["intro", *CHAPTERS, "exercises", "instructors", "appendix_vllm", "glossary", "errata", "references"]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SEED_TOOL = ROOT.parent / "shared" / "tools" / "seed_overlap.py"
# Log lines the kernel prints during execution that are not Sphinx warnings.
HARMLESS = ("running over TCP without encryption", "NbParserConfig")


def _config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text())


def _notebook(name: str) -> dict:
    return json.loads((BOOK / f"{name}.ipynb").read_text())


# ------------------------------------------------------------------------------------------- the build
def test_book_builds_without_warnings(built_book):
    html, log = built_book
    warnings = [line for line in log.splitlines()
                if re.search(r"\bWARNING\b|\bERROR\b", line) and not any(h in line for h in HARMLESS)]
    assert not warnings, "\n".join(warnings)
    for page in PAGES:
        assert (html / "book" / f"{page}.html").is_file(), f"{page}.html was not built"


def test_glue_resolved_everywhere(built_book):
    html, _ = built_book
    for page in PAGES:
        text = (html / "book" / f"{page}.html").read_text()
        assert "{glue" not in text and "pending_glue" not in text.lower(), f"unresolved glue in {page}"


def test_markdown_tables_render_as_tables(built_book):
    """A table a chapter prints from stage5 results (a Markdown output) must reach the reader as a table, not
    as a paragraph of pipes (what CommonMark, myst-nb's default for outputs, makes of it)."""
    html, _ = built_book
    for name in CHAPTERS:
        code = [c for c in _notebook(name)["cells"] if c["cell_type"] == "code"]
        printed = sum("Markdown(" in "".join(c["source"]) and "|---" in "".join(c["source"]) for c in code)
        tables = (html / "book" / f"{name}.html").read_text().count("<table")
        assert tables >= printed, f"{name}: {printed} Markdown tables printed, {tables} rendered as tables"


# ------------------------------------------------------------------------------------------- the sources
@pytest.mark.parametrize("name", CHAPTERS)
def test_chapter_stored_without_outputs(name):
    for cell in _notebook(name)["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, f"{name}: outputs are stored"


@pytest.mark.parametrize("name", CHAPTERS)
def test_first_code_cell_installs_stage5_from_the_configured_repository(name):
    code = [c for c in _notebook(name)["cells"] if c["cell_type"] == "code"]
    first = "".join(code[0]["source"])
    assert 'find_spec("stage5") is None' in first, "the setup cell must install stage5 only when missing"
    settings = sync_settings.load()
    assert first.startswith(sync_settings.setup_block(settings)), "the setup cell is not the generated one"
    # the release comes from course.toml's repository, which _config.yml names once it is published
    assert settings.wheel_url.startswith(settings.repo_url + "/releases/download/")
    assert _config()["repository"]["url"] == (settings.repo_url if settings.published else "")


@pytest.mark.parametrize("name", CHAPTERS)
def test_chapter_pattern(name):
    cells = _notebook(name)["cells"]
    md = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert "What you will be able to do" in md
    assert "{glue:text}" in md and "glue(" in code, "numbers in the prose must be glued"
    draws = "from stage5.plots import" in code or ("import matplotlib" in code and "stage5" in code)
    assert draws, "at least one figure drawn from the cost model"
    predictions = [m.start() for m in re.finditer(r"Commit to a prediction", md)]
    assert predictions, "at least one commit-to-a-prediction block"
    for start in predictions:  # each prediction is followed by a reveal
        assert ":::{dropdown} Reveal" in md[start:], "a prediction block without a reveal after it"
    assert "## Check yourself" in md and ":::{dropdown} Answer" in md
    assert re.search(r"exercises/ex\d\d/ex\d\d\.ipynb", md), "pointer to the exercise that practises the chapter"


# Digits allowed in prose outside maths and glue: chapter and exercise numbers, names such as "Llama 3" or
# "Llama 2", "H100", "FP8", "BF16", "1K"/"4K"/"128K", percentile names ("p50", "p99"), and citation keys. Also
# two conceptual constants that are not measurements: the bit widths of number formats ("8-bit", "16 bits",
# "4-bit weights"), and "2×" as in the claim that FP8 "doubles" throughput (a bare 2× only: "2–4×" or "1.2×"
# still fail).
_ALLOWED = re.compile(
    r"[Cc]hapters? \d+( (to|and) \d+)?|ex0\d|Llama [23](\.\d)?( \d+B)?|\b\d+B\b|[A-Z]+\d+[A-Za-z0-9-]*|\b\d+K\b"
    r"|\bp(50|90|99)\b"
    r"|\*\*\d+\.\*\*|[Bb]atch[- ]1\b|float32|\b(4|8|16)(-bit|[- ]bits)\b|\b2×|2:4|0\d_\w+"
    r"|\{cite\}`[^`]*`|`[^`]*`")


@pytest.mark.parametrize("name", CHAPTERS)
def test_no_hand_typed_numbers_in_prose(name):
    for cell in _notebook(name)["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        text = re.sub(r"(?<!\\)\$\$.*?(?<!\\)\$\$|(?<!\\)\$[^$]*?(?<!\\)\$", " ", text, flags=re.S)  # maths, not \$
        text = re.sub(r"\{glue:text\}`[^`]*`", " ", text)
        text = _ALLOWED.sub(" ", text)
        stray = re.findall(r"\d[\d,.]*", text)
        assert not stray, f"{name}: hand-typed numbers in prose {stray}: glue them from stage5"


def test_bibliography_has_the_required_papers():
    bib = (ROOT / "references.bib").read_text()
    for key in ["yu2022orca", "kwon2023pagedattention", "leviathan2023speculative", "kurtic2024bf16",
                "agrawal2024sarathi", "zhong2024distserve", "patel2024splitwise"]:
        assert f"{{{key}," in bib, key


def test_launch_buttons_come_from_one_repository_url():
    cfg = _config()
    settings = sync_settings.load()
    assert cfg["repository"]["url"] == (settings.repo_url if settings.published else "")
    assert settings.repo_url.startswith("https://github.com/")
    buttons = cfg["launch_buttons"]
    for key in ("colab_url", "binderhub_url"):  # on once published; off while the links would be dead
        assert bool(buttons.get(key)) == settings.published, key
    # the JupyterHub button is course.toml's hub, or off (empty) until a course sets one: never a placeholder
    assert buttons["jupyterhub_url"] == settings.jupyterhub_url
    assert cfg["execute"]["execute_notebooks"] == "cache" and cfg["execute"]["timeout"] > 0


def test_thebe_is_not_loaded():
    """Live code is off: sphinx_thebe is dropped from Jupyter Book's own extension list (nothing else), since it
    declares THEBE_JS_URL twice on every page. The list must follow Jupyter Book's defaults when they change."""
    from jupyter_book.config import get_default_sphinx_config

    cfg = _config()
    extensions = cfg["sphinx"]["config"]["extensions"]
    expected = [e for e in get_default_sphinx_config()["extensions"] if e != "sphinx_thebe"]
    assert extensions == [*expected, "sphinxcontrib.bibtex"]
    assert not cfg["launch_buttons"].get("thebe")


def test_thebe_absent_and_no_page_loads_a_script_from_a_cdn(built_book):
    """Maths and widgets come with the site (scripts/vendor_assets.py), so the book works offline; the footer
    says so on every page."""
    html, _ = built_book
    for page in PAGES:
        text = (html / "book" / f"{page}.html").read_text()
        assert "THEBE_JS_URL" not in text, page
        assert "works from disk with no network" in text, f"{page} lacks the footer"
        remote = re.findall(r'<(?:script|link)[^>]+(?:src|href)="((?:https?:)?//[^"]+)"', text)
        assert not remote, f"{page} loads {remote}"
        assert text.count("vendor/mathjax/tex-svg-full.js") <= 1, f"{page} loads MathJax twice"
        widgets = "application/vnd.jupyter.widget-state+json" in text
        assert ("vendor/html-manager/embed-amd.js" in text) == widgets, f"{page}: embed script without widgets"
    assert (html / "_static" / "vendor" / "mathjax" / "tex-svg-full.js").is_file()


def test_vendored_scripts_match_their_pins():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "vendor_assets.py")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_exercises_page_links_the_released_notebooks(built_book):
    html, _ = built_book
    settings = sync_settings.load()
    page = (html / "book" / "exercises.html").read_text()
    hrefs = re.findall(r'href="([^"]+)"', page)
    assert not [h for h in hrefs if "solutions" in h], "the exercises page links a solution"
    for name in sync_settings.ASSIGNMENTS:
        path = f"exercises/{name}/{name}.ipynb"
        linked = settings.colab_url(path) in hrefs and settings.binder_url(path).replace("&", "&amp;") in page
        assert linked == settings.published, f"{name}: Colab/Binder links {'missing' if linked else 'present'}"
        download = [h for h in hrefs if h.startswith("../_downloads/") and h.endswith(f"/{name}.ipynb")]
        assert len(download) == 1, f"no download link for {name}"
        served = (html / "book" / download[0]).resolve()
        assert served.read_bytes() == (ROOT / path).read_bytes(), f"{name}: the download is not the release"


def test_no_passage_repeats_the_source_text():
    if not SEED_TOOL.exists():
        pytest.skip(f"{SEED_TOOL} not found: the source text lives outside this repository")
    proc = subprocess.run([sys.executable, str(SEED_TOOL), "book", "stage5"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    last = proc.stdout.strip().splitlines()[-1]
    count = int(re.findall(r"\d+", last)[0])
    assert count == 0, proc.stdout[-4000:]


# ------------------------------------------------------------------------------------------- in a browser
def _chromium_or_skip():
    if not CHROMIUM.exists():
        pytest.skip(f"no system Chromium at {CHROMIUM} (apt-get install -y chromium); browser checks skipped")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright Python package is not installed; browser checks skipped")
    return sync_playwright


def _empty_response(route, stubbed: set[str]) -> None:
    stubbed.add(route.request.url)
    css = route.request.url.split("?")[0].endswith(".css")
    route.fulfill(status=200, body="", content_type="text/css" if css else "application/javascript")


def _refused_stand_in(text: str, stubbed: set[str]) -> bool:
    """The one console error this harness causes itself: Chromium's subresource-integrity check refusing the
    empty stand-in for a CDN script that carries an integrity hash (require.js). It names the stubbed URL;
    every other console error is the page's own and fails the test."""
    return "'integrity' attribute" in text and any(f"'{url}'" in text for url in stubbed)


# (maths elements Sphinx wrote, MathJax containers after typesetting), once MathJax has finished
MATHS_TYPESET = """async () => {
  const written = document.querySelectorAll('.math, div.math, span.math').length;
  if (written && window.MathJax && MathJax.startup) { await MathJax.startup.promise; }
  return [written, document.querySelectorAll('mjx-container').length];
}"""
# (saved widget views on the page, widget elements the embed script drew)
WIDGETS_DRAWN = """async () => {
  const views = document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]').length;
  for (let i = 0; i < 50 && views && !document.querySelector('.jupyter-widgets, .widget-inline-hbox'); i++) {
    await new Promise(r => setTimeout(r, 200));
  }
  return [views, document.querySelectorAll('.jupyter-widgets, .widget-inline-hbox').length];
}"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def browser_report(built_book, tmp_path_factory):
    """Open every page in Chromium once; return what each page showed."""
    sync_playwright = _chromium_or_skip()
    html, _ = built_book
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(html)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    profile = tmp_path_factory.mktemp("chromium-profile")
    report = {}
    try:
        with sync_playwright() as p:
            ctx = p.chromium.launch_persistent_context(
                str(profile), executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS, headless=True)
            # Only the local server is reachable. CDN requests (MathJax, require.js, the widgets embed script) get
            # an empty file, as if the CDN answered, so a blocked CDN is not reported as the page's own error.
            stubbed: set[str] = set()
            ctx.route(re.compile(r"^(?!http://127\.0\.0\.1).*"),
                      lambda route: _empty_response(route, stubbed))
            for page_name in PAGES:
                page = ctx.new_page()
                bad, errors = [], []
                page.on("response", lambda r, bad=bad: bad.append(f"{r.status} {r.url}")
                        if r.url.startswith(base) and r.status >= 400 else None)
                page.on("requestfailed", lambda r, bad=bad: bad.append(f"failed {r.url}")
                        if r.url.startswith(base) else None)
                page.on("pageerror", lambda e, errors=errors: errors.append(f"uncaught: {e}"))
                page.on("console", lambda m, errors=errors: errors.append(f"console.{m.type}: {m.text}")
                        if m.type == "error" and not _refused_stand_in(m.text, stubbed) else None)
                outside: list[str] = []
                page.on("request", lambda r, outside=outside: outside.append(r.url)
                        if not r.url.startswith((base, "data:", "blob:")) else None)
                page.goto(f"{base}/book/{page_name}.html", wait_until="load")
                maths = page.evaluate(MATHS_TYPESET)
                images = page.eval_on_selector_all(
                    "img", "els => els.map(e => [e.getAttribute('src'), e.complete && e.naturalWidth > 0])")
                colab = page.eval_on_selector_all(
                    "a[href*='colab.research.google.com']", "els => els.map(e => e.href)")
                outputs = page.eval_on_selector_all(
                    ".cell_output .output.error, .cell_output .output.traceback, .cell_output .output.stderr,"
                    " .cell_output .stderr", "els => els.map(e => e.innerText.slice(0, 300))")
                report[page_name] = {
                    "bad_requests": bad, "images": images, "colab": colab, "error_outputs": outputs,
                    "text": page.inner_text("main") if page.query_selector("main") else page.inner_text("body"),
                    "page_errors": errors,  # every uncaught exception and console error, none filtered
                    "outside": outside, "maths": maths,
                }
                page.close()
            ctx.close()
    finally:
        server.shutdown()
    return report


@pytest.mark.parametrize("page_name", PAGES)
def test_page_has_no_missing_local_asset(browser_report, page_name):
    assert browser_report[page_name]["bad_requests"] == []


@pytest.mark.parametrize("page_name", PAGES)
def test_page_needs_no_network_and_typesets_its_maths(browser_report, page_name):
    r = browser_report[page_name]
    assert r["outside"] == [], f"requests outside the site: {r['outside']}"
    written, typeset = r["maths"]
    assert typeset >= written, f"{written} maths elements, {typeset} typeset by MathJax"


def test_the_maths_check_sees_maths():
    """The chapters hold maths, so the typeset check above is not vacuous."""
    assert any("$\\pi$" in "".join(c["source"]) for c in _notebook("02_roofline")["cells"])


def test_the_site_archive_opens_offline_from_disk(built_book, tmp_path):
    """`make dist`'s book archive, unzipped and opened from disk (file://) with every other request refused:
    the pages load, maths is typeset, widgets draw, and the console has no error."""
    import zipfile

    sync_playwright = _chromium_or_skip()
    html, _ = built_book
    sys.path.insert(0, str(ROOT / "scripts"))
    import pack_site

    archive = pack_site.pack(html, tmp_path / "dist", sync_settings.load().version)
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(tmp_path / "unpacked")
    (site,) = (tmp_path / "unpacked").iterdir()
    refused, errors, seen = [], [], {}
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(str(tmp_path / "profile"), executable_path=str(CHROMIUM),
                                                   args=CHROMIUM_FLAGS, headless=True)
        ctx.route(re.compile(r"^(?!file:|data:|blob:).*"), lambda route: (refused.append(route.request.url),
                                                                        route.abort()))
        for name in ["index", "book/02_roofline", "book/10_simulator"]:
            page = ctx.new_page()
            page.on("pageerror", lambda e, name=name: errors.append(f"{name}: uncaught {e}"))
            page.on("console", lambda m, name=name: errors.append(f"{name}: {m.text}") if m.type == "error" else None)
            page.goto((site / f"{name}.html").as_uri(), wait_until="load")
            if name == "index":  # the root page redirects to the book's first page
                page.wait_for_url("**/book/intro.html", wait_until="load")
            seen[name] = (page.evaluate(MATHS_TYPESET), page.evaluate(WIDGETS_DRAWN), page.url)
            page.close()
        ctx.close()
    assert not refused and not errors, (refused, errors)
    assert seen["index"][2].endswith("/book/intro.html"), seen["index"]  # the root redirects to the book
    written, typeset = seen["book/02_roofline"][0]
    assert written > 0 and typeset >= written, seen
    views, drawn = seen["book/10_simulator"][1]
    assert views == 0 or drawn > 0, f"{views} saved widget views, none drawn"


@pytest.mark.parametrize("page_name", PAGES)
def test_every_figure_loads(browser_report, page_name):
    broken = [src for src, ok in browser_report[page_name]["images"] if not ok and src]
    assert not broken, f"images that did not load: {broken}"
    if page_name in CHAPTERS:
        figures = [src for src, _ in browser_report[page_name]["images"] if src and "_images/" in src]
        assert figures, f"{page_name} shows no figure"


@pytest.mark.parametrize("page_name", PAGES)
def test_no_error_output(browser_report, page_name):
    r = browser_report[page_name]
    assert r["error_outputs"] == [], r["error_outputs"]
    assert "Traceback (most recent call last)" not in r["text"]
    assert r["page_errors"] == [], r["page_errors"]


@pytest.mark.parametrize("name", CHAPTERS)
def test_colab_button_points_at_the_chapter_notebook(browser_report, name):
    cfg = _config()
    if not sync_settings.load().published:  # no launch button until the repository is public
        assert browser_report[name]["colab"] == []
        return
    owner_repo = cfg["repository"]["url"].removeprefix("https://github.com/").rstrip("/")
    branch = cfg["repository"].get("branch", "main")
    expected = f"{cfg['launch_buttons']['colab_url']}/github/{owner_repo}/blob/{branch}/book/{name}.ipynb"
    assert expected in browser_report[name]["colab"], browser_report[name]["colab"]


def test_an_unpublished_repository_is_never_linked(built_book):
    """Until course.toml says the repository is published, no page of the built site links to it, to Colab or
    to Binder (those links would be dead). Its address may appear only as the wheel address in the setup
    cells' code, which then fails with its one-line message."""
    settings = sync_settings.load()
    if settings.published:
        pytest.skip("course.toml: the repository is published, so its links are wanted")
    html, _ = built_book
    pages = sorted(html.rglob("*.html"))
    assert len(pages) >= len(PAGES)
    for path in pages:
        text = path.read_text(errors="replace")
        links = re.findall(r'(?:href|src|action)="([^"]*)"', text)
        dead = [h for h in links if settings.owner_repo in h or "colab.research" in h or "mybinder" in h]
        assert not dead, f"{path.relative_to(html)} links {dead}"
        assert text.count(settings.owner_repo) == text.count(settings.wheel_url), (
            f"{path.relative_to(html)} names {settings.owner_repo} outside the setup cell's wheel address")


# At a phone's width: each display equation's right edge and width, each slider's content and box widths
NARROW = """async () => {
  if (window.MathJax && MathJax.startup) { await MathJax.startup.promise; }
  for (let i = 0; i < 50 && document.querySelector('script[type="application/vnd.jupyter.widget-view+json"]')
       && !document.querySelector('.widget-slider'); i++) { await new Promise(r => setTimeout(r, 200)); }
  return {page: document.documentElement.scrollWidth,
          equations: [...document.querySelectorAll('mjx-container[display="true"]')]
            .map(e => [e.getBoundingClientRect().right, e.clientWidth]),
          sliders: [...document.querySelectorAll('.widget-slider')].map(e => [e.scrollWidth, e.clientWidth])};
}"""


def test_a_phone_screen_fits_the_widest_pages(built_book, tmp_path):
    """At 390 px (a phone), chapter 13's wide equations scroll inside their own box (assets/stage5.css) and the
    simulator's controls wrap into one column with each slider's content inside its box: nothing pushes the page
    sideways."""
    sync_playwright = _chromium_or_skip()
    html, _ = built_book
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(html)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base, seen = f"http://127.0.0.1:{server.server_address[1]}", {}
    try:
        with sync_playwright() as p:
            ctx = p.chromium.launch_persistent_context(str(tmp_path / "profile"), executable_path=str(CHROMIUM),
                                                       args=CHROMIUM_FLAGS, headless=True,
                                                       viewport={"width": 390, "height": 844})
            ctx.route(re.compile(r"^(?!http://127\.0\.0\.1).*"), lambda route: route.abort())
            for name in ("13_serving_fleet", "10_simulator"):
                page = ctx.new_page()
                page.goto(f"{base}/book/{name}.html", wait_until="load")
                seen[name] = page.evaluate(NARROW)
                page.close()
            ctx.close()
    finally:
        server.shutdown()
    for name, m in seen.items():
        assert m["page"] <= 390, f"{name} is {m['page']} px wide at 390 px: {m}"
        assert all(right <= 390 and width <= 390 for right, width in m["equations"]), f"{name}: {m['equations']}"
        assert all(content <= box + 1 for content, box in m["sliders"]), f"{name}: sliders {m['sliders']}"
    assert seen["13_serving_fleet"]["equations"] and seen["10_simulator"]["sliders"], seen


def test_chromium_available_or_reason_given():
    """Not a check of the book: records in the test report why browser checks would skip."""
    if not CHROMIUM.exists():
        pytest.skip(f"no system Chromium at {CHROMIUM}")
    assert shutil.which(str(CHROMIUM))


def test_search_ranks_the_page_named_for_the_words_first(built_book, tmp_path):
    """Offline search (assets/search_scorer.js): a page whose title holds every searched word comes before the
    glossary's index entry (Sphinx scores it 100) and the errata and chapters that only mention the words."""
    sync_playwright = _chromium_or_skip()
    html, _ = built_book
    first = {}
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(str(tmp_path / "profile"), executable_path=str(CHROMIUM),
                                                   args=CHROMIUM_FLAGS, headless=True)
        for query, title in (("roofline", "The roofline"), ("kv cache", "The KV cache")):
            page = ctx.new_page()
            page.goto((html / "search.html").as_uri() + "?q=" + query.replace(" ", "+"), wait_until="load")
            page.wait_for_selector("#search-results ul li", timeout=60_000)
            first[query] = (page.eval_on_selector("#search-results ul li a", "a => a.innerText"), title)
            page.close()
        ctx.close()
    assert all(got == want for got, want in first.values()), first
