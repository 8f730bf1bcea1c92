"""The generated setup cell in a real Jupyter kernel (nbclient), where ipykernel sets FORCE_COLOR and CLICOLOR_FORCE.

A bare IPython shell does not set them, so only a real kernel shows whether pip's colour codes reach the learner.
Each case is a failure a Colab learner can meet: no network, a release that does not exist, an index without a
matching wheel. The line the learner reads must name that cause and hold no escape codes.
"""

from __future__ import annotations

import functools
import http.server
import socket
import sys
import threading
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import sync_settings as sync  # noqa: E402

SETTINGS = sync.load()
# As on a fresh Colab: stage5 is not importable, so the cell installs it.
HIDE_STAGE5 = ("import importlib.util\n_real = importlib.util.find_spec\n"
               "importlib.util.find_spec = lambda name, *a: None if name == 'stage5' else _real(name, *a)")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """An HTTP server on loopback serving an empty folder: every wheel is a 404, every index page too."""
    root = tmp_path_factory.mktemp("empty-index")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a, **k: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed: connection refused


def run_in_kernel(cells: list[str], monkeypatch) -> list[dict]:
    # The kernel inherits this process's environment: no retries (the failures are immediate), no machine-wide
    # pip config (its local wheel store would satisfy requirements without the network).
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = nbclient.NotebookClient(nb, timeout=240, allow_errors=True, kernel_name="python3")
    client.execute()
    return [c.get("outputs", []) for c in nb.cells]


def shown_text(outputs: list[dict]) -> str:
    parts = []
    for out in outputs:
        if out["output_type"] == "stream":
            parts.append(out["text"])
        elif out["output_type"] == "error":
            parts.append("\n".join(out["traceback"]))
    return "".join(parts)


def error_line(outputs: list[dict]) -> str:
    errors = [o for o in outputs if o["output_type"] == "error"]
    assert len(errors) == 1, outputs
    assert len(errors[0]["traceback"]) == 1, errors[0]["traceback"]  # one line, no traceback
    return errors[0]["traceback"][0]


@pytest.mark.parametrize("case", ["no network", "no such release"])
def test_a_failed_release_install_names_its_cause_in_one_clean_line(case, server, monkeypatch):
    url = (f"http://127.0.0.1:{closed_port()}/{SETTINGS.wheel_name}" if case == "no network"
           else f"{server}/{SETTINGS.wheel_name}")
    cell = sync.setup_block(SETTINGS).replace(SETTINGS.wheel_url, url)
    first, later = run_in_kernel([HIDE_STAGE5, cell,
                                  "from stage5 import cost"], monkeypatch)[1:]
    line = error_line(first)
    assert "\x1b" not in shown_text(first) + shown_text(later)
    assert line.startswith(f"Stage5SetupError: could not install stage5 {SETTINGS.version} ({case}")
    assert "restart the kernel" in line
    assert shown_text(first).startswith(f"installing stage5 {SETTINGS.version} and its dependencies")
    assert error_line(later) == line  # every later cell stops with the same line


def test_the_kernel_really_forces_colour(monkeypatch):
    """The trap these tests exist for: without it a bare shell would do."""
    (out,) = run_in_kernel(["import os\nprint(os.environ.get('FORCE_COLOR'), os.environ.get('CLICOLOR_FORCE'))"],
                           monkeypatch)
    assert shown_text(out).split() == ["1", "1"]


def test_an_index_without_a_matching_wheel_is_named(server, monkeypatch):
    """The engine block's path (torch from PyTorch's CPU index): an index with no matching wheel. torch is
    installed here, so a requirement nothing provides stands in for it."""
    cell = sync.setup_block(SETTINGS)  # stage5 is installed here: the block only defines the installer
    call = f'stage5_pip_install("torch (CPU build)", "stage5-no-such-package>=2", "--index-url", "{server}/simple")'
    (_, out) = run_in_kernel([cell, call], monkeypatch)
    line = error_line(out)
    assert "\x1b" not in shown_text(out)
    assert line.startswith("Stage5SetupError: could not install torch (CPU build) (no matching wheel for this "
                           "Python and platform for stage5-no-such-package>=2)"), line
