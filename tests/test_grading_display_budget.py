"""Issue 48, found case 1: display updates past the output budget. nbclient applies ``update_display_data`` (and a
``display_data`` or ``execute_result`` naming a display id it has shown) to every stored output under that id before
the grader's per-output hook runs; the grader judges each such message first. In-process: the messages a kernel
would send are fed to :meth:`SandboxedExecute.process_message` directly (no kernel, no sandbox)."""

from __future__ import annotations

import itertools

import nbformat
import pytest
from grading_harness import REPO  # noqa: F401  (puts grader/ on the path)
from nbclient import NotebookClient
from sandboxed_execute import SandboxedExecute

MIB = 2**20
CELL, NOTEBOOK = 2 * MIB, 16 * MIB
_ids = itertools.count()


def _executor(cells: int = 3) -> SandboxedExecute:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("pass") for _ in range(cells)]
    ex = SandboxedExecute(cell_output_bytes=CELL, notebook_output_bytes=NOTEBOOK, flood_bytes=64 * MIB)
    NotebookClient.__init__(ex, nb, None)
    ex.reset_execution_trackers()
    ex._kept_bytes = 0
    ex.clear_before_next_output = False  # set by nbclient as each cell starts
    return ex


def _start_cell(ex: SandboxedExecute) -> None:
    """What :meth:`SandboxedExecute._watch` resets as each cell starts."""
    ex._cell_bytes, ex._cell_cut, ex._flooded = 0, False, False


def _msg(msg_type: str, content: dict) -> dict:
    return {"msg_type": msg_type, "header": {"msg_type": msg_type, "msg_id": f"m{next(_ids)}"},
            "parent_header": {"msg_id": "cell"}, "metadata": {}, "content": content}


def _display(text: str, display_id: str | None, msg_type: str = "display_data") -> dict:
    content = {"data": {"text/plain": text}, "metadata": {}, "transient": {"display_id": display_id} if display_id
               else {}}
    if msg_type == "execute_result":
        content["execution_count"] = 1
    return _msg(msg_type, content)


def _send(ex: SandboxedExecute, index: int, msg: dict) -> None:
    ex.process_message(msg, ex.nb.cells[index], index)


def _kept(ex: SandboxedExecute) -> int:
    return len(nbformat.writes(ex.nb))


@pytest.mark.parametrize("msg_type", ["update_display_data", "display_data", "execute_result"])
def test_a_display_update_is_budgeted_before_nbclient_applies_it(msg_type):
    """Eight small displays under eight ids, then an update of 1 MiB to each from the next cell: without the check
    nbclient stores all eight in the first cell whatever the budget (the issue's 8 x 100 MiB, scaled down)."""
    ex = _executor()
    _start_cell(ex)
    for k in range(8):
        _send(ex, 0, _display("small", f"k{k}"))
    _start_cell(ex)
    for k in range(8):
        _send(ex, 1, _display("u" * MIB, f"k{k}", msg_type))
    assert _kept(ex) < CELL + MIB, f"{_kept(ex) / MIB:.1f} MiB kept"
    assert "output truncated" in "".join(o.get("text", "") for o in ex.nb.cells[1].outputs)


def test_many_display_ids_across_cells_stay_within_the_notebook_budget():
    """Forty ids, shown in forty cells, each updated to 1 MiB from a later cell (under the per-cell budget each
    time): the notebook's budget bounds them together."""
    ex = _executor(cells=41)
    for i in range(40):
        _start_cell(ex)
        _send(ex, i, _display("small", f"id{i}"))
    for i in range(40):
        _start_cell(ex)  # each update in a cell of its own: no cell passes its own budget
        _send(ex, 40, _display("v" * MIB, f"id{i}", "update_display_data"))
    assert _kept(ex) < NOTEBOOK + 2 * MIB, f"{_kept(ex) / MIB:.1f} MiB kept"


def test_one_id_shown_in_many_places_is_charged_per_place():
    """One id displayed in twenty cells: one 1 MiB update would fill twenty outputs (20 MiB kept)."""
    ex = _executor(cells=21)
    for i in range(20):
        _start_cell(ex)
        _send(ex, i, _display("small", "same"))
    _start_cell(ex)
    _send(ex, 20, _display("w" * MIB, "same", "update_display_data"))
    assert _kept(ex) < NOTEBOOK + 2 * MIB, f"{_kept(ex) / MIB:.1f} MiB kept"


def test_clear_output_then_writes_stay_within_the_cell_budget():
    """clear_output empties the stored outputs, but what was kept still counts: a clear-then-write loop stops
    being kept at the cell's budget."""
    ex = _executor()
    _start_cell(ex)
    for _ in range(8):
        _send(ex, 0, _msg("clear_output", {"wait": False}))
        _send(ex, 0, _msg("stream", {"name": "stdout", "text": "c" * MIB}))
    assert "c" * 1000 not in "".join(o.get("text", "") for o in ex.nb.cells[0].outputs)


def test_display_updates_count_towards_the_flood_limit():
    ex = _executor()
    killed = []
    ex.km = type("FakeKM", (), {"kill_sandbox": lambda self: killed.append(1)})()
    _start_cell(ex)
    _send(ex, 0, _display("small", "k"))
    for _ in range(70):
        _send(ex, 0, _display("f" * MIB, "k", "update_display_data"))
    assert ex._flooded and killed == [1]


def test_honest_display_updates_are_applied():
    """A progress display updated a hundred times with a short line is kept, showing the last update."""
    ex = _executor()
    _start_cell(ex)
    _send(ex, 0, _display("0 %", "progress"))
    for pct in range(1, 101):
        _send(ex, 0, _display(f"{pct} %", "progress", "update_display_data"))
    assert [o["data"]["text/plain"] for o in ex.nb.cells[0].outputs] == ["100 %"]
