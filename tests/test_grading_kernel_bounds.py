"""The grader's bounds on one notebook's kernel (issue 38), each tried with the attack that got past it: memory a
sandbox holds that no process maps, output and widget state piling up in the grading process, hidden tests
replayed into a kernel after a death, a cell that ignores the interrupt and waits, a notebook longer than its
total time, replays that cost more than the time they are given, and replies built to make decoding quadratic.

Each runs a small notebook through :class:`SandboxedExecute` directly (under bubblewrap); the class-level run, with
honest learners beside hostile ones and ``make grade``'s exit status, is tests/test_grading_boundary_38.py.
"""

from __future__ import annotations

import json
import threading
import time

import nbformat
import psutil
import pytest
from grading_harness import REPO
from sandboxed_execute import GRADER_ERRORS, HostMemoryLow, SandboxedExecute

from stage5.grading import cgroup, seccomp
from stage5.grading.protocol import MAX_INT, ProtocolError, decode, loads
from stage5.grading.sandbox import isolation

sandboxed = pytest.mark.skipif(isolation()[0] != "bwrap", reason=f"no sandbox here: {isolation()[1]}")
MIB = 2**20
HANG_GUARD_S = 300  # a run that has not returned by then hangs (what the bound under test is there to stop)
TEST_META = {"grade": True, "locked": True, "solution": False, "points": 1, "schema_version": 3}


def _notebook(*cells: str | tuple[str, str]) -> nbformat.NotebookNode:
    """Code cells; a (grade_id, source) pair is an instructor's locked test cell."""
    nb = nbformat.v4.new_notebook()
    for cell in cells:
        if isinstance(cell, tuple):
            gid, source = cell
            nb.cells.append(nbformat.v4.new_code_cell(source, metadata={"nbgrader": {**TEST_META, "grade_id": gid}}))
        else:
            nb.cells.append(nbformat.v4.new_code_cell(cell))
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def _run(nb: nbformat.NotebookNode, **traits) -> nbformat.NotebookNode:
    """Grade ``nb``'s execution in a thread with a hang guard: a run that never returns fails the test instead of
    hanging the suite (and its sandbox is killed)."""
    ex = SandboxedExecute(**{"cell_cpu_s": 10, **traits})
    box: dict = {}

    def go() -> None:
        try:
            box["nb"] = ex.preprocess(nb, {"metadata": {"path": "."}})[0]
        except BaseException as err:  # noqa: BLE001 - handed to the test
            box["error"] = err

    worker = threading.Thread(target=go, daemon=True)
    worker.start()
    worker.join(HANG_GUARD_S)
    if worker.is_alive():
        if ex.km is not None:
            ex.km.kill_sandbox()
        pytest.fail(f"grading did not return within {HANG_GUARD_S} s: a cell held the grader")
    if "error" in box:
        raise box["error"]
    return box["nb"]


def _text(cell) -> str:
    out = []
    for o in cell.get("outputs", []):
        out.append(o.get("text", "") if isinstance(o.get("text", ""), str) else "".join(o["text"]))
        out.append(json.dumps(o.get("data", {})))
        out.append(f"{o.get('ename', '')}: {o.get('evalue', '')}")
    return "\n".join(out)


def _errors(cell) -> list[dict]:
    return cell.get("metadata", {}).get(GRADER_ERRORS, [])


# ------------------------------------------------------------------------------------ 3: memory outside the cap
def test_the_seccomp_filter_refuses_what_it_names_and_nothing_else():
    """The filter as the kernel runs it: a small classic-BPF interpreter over the program for each architecture."""

    def verdict(machine: str, arch: int, nr: int, arg0: int = 0) -> str:
        prog, acc, pc = seccomp.program(machine), 0, 0
        while True:
            code, jt, jf, k = prog[pc]
            if code == 0x20:
                acc = {0: nr, 4: arch, 16: arg0}[k]
                pc += 1
            elif code in (0x15, 0x35, 0x45):
                hit = acc == k if code == 0x15 else acc >= k if code == 0x35 else bool(acc & k)
                pc += 1 + (jt if hit else jf)
            else:
                return "allow" if k == 0x7FFF0000 else "deny"

    for machine, (arch, numbers) in seccomp.ARCHES.items():
        for name in seccomp.REFUSED:
            assert verdict(machine, arch, numbers[name]) == "deny", (machine, name)
        for nr in (0, 1, 2, 9, 56, 57, 59, 60, 231):  # read, write, open, mmap, clone, fork, execve, exit(_group)
            if nr not in numbers.values():
                assert verdict(machine, arch, nr) == "allow", (machine, nr)
        assert verdict(machine, 0x40000003, 356) == "deny"  # i386's memfd_create through int 0x80
    assert verdict("x86_64", seccomp.ARCHES["x86_64"][0], 0x40000000 | 319) == "deny"  # the x32 table


MEMFD = """import os
made = []
try:
    for i in range(22):  # 22 files of 192 MiB: 4.1 GiB, each under the file-size limit
        fd = os.memfd_create(f'm{i}')
        for _ in range(192):
            os.write(fd, b'x' * 2**20)
        made.append(fd)
    print('held', len(made))
except OSError as e:
    print('memfd refused:', type(e).__name__, 'after', len(made))
"""


@sandboxed
@pytest.mark.skipif(not seccomp.supported(), reason="the filter knows x86-64 and arm64 only")
def test_memfd_files_are_refused_in_the_sandbox():
    out = _run(_notebook(MEMFD, "import ctypes\nprint('shmget', ctypes.CDLL(None).shmget(0, 4096, 0o1600))",
                         "print('the next cell runs')"))
    assert "memfd refused: PermissionError after 0" in _text(out.cells[0]), _text(out.cells[0])
    assert "shmget -1" in _text(out.cells[1])
    assert "the next cell runs" in _text(out.cells[2])


HOLD_TMPFS = """import os
for folder, mib in (('/tmp', 240), (os.getcwd(), 240), ('/dev/shm', 60)):
    with open(os.path.join(folder, 'fill'), 'wb') as fh:
        for _ in range(mib):
            fh.write(b'x' * 2**20)
import time
time.sleep(5)
print('held 540 MiB in files')
"""


@sandboxed
@pytest.mark.skipif(cgroup.support()[0] == "none", reason=f"no memory cgroup here: {cgroup.support()[3]}")
def test_what_the_sandbox_holds_counts_not_only_what_its_processes_map():
    """540 MiB in the sandbox's tmpfs mounts, from one process whose resident memory stays small: the cgroup
    counts the pages and the sandbox is killed over a 400 MiB cap (the processes' sum alone never passes it)."""
    out = _run(_notebook(HOLD_TMPFS, "print('the next cell runs')"), sandbox_memory_bytes=400 * MIB)
    text = _text(out.cells[0])
    assert "held 540 MiB" not in text and "over the sandbox's" in text, text
    assert any(e.get("stopped") for e in _errors(out.cells[0]))
    assert "the next cell runs" in _text(out.cells[1])


@sandboxed
def test_a_machine_short_of_memory_stops_the_notebook_as_not_the_learners_result():
    """Memory no count sees (a kernel's socket buffers): under the reserve the sandbox is stopped and the notebook
    is not given a score (the workflow reports it as not graded, to retry)."""
    with pytest.raises(HostMemoryLow, match="memory left"):
        _run(_notebook("import time\ntime.sleep(5)"), host_reserve_bytes=psutil.virtual_memory().total)


# ------------------------------------------------------------------------------------ 4 and 9: the grader's own memory
OUTPUTS = ["import sys\nfor _ in range(40):\n    print('x' * 2**20)\n    sys.stdout.flush()",  # 40 1-MiB messages
           "print('y' * (40 * 2**20))",  # one message of 40 MiB
           "print('after the outputs')"]


@sandboxed
def test_outputs_are_budgeted_while_the_cell_runs():
    before = psutil.Process().memory_info().rss
    out = _run(_notebook(*OUTPUTS))
    kept = len(nbformat.writes(out))
    assert kept < 3 * MIB, f"{kept / MIB:.0f} MiB of output kept"
    assert "output truncated" in _text(out.cells[0])
    assert "y" * 1000 not in _text(out.cells[1])
    assert "after the outputs" in _text(out.cells[2])
    assert psutil.Process().memory_info().rss - before < 512 * MIB


@sandboxed
def test_a_cell_that_floods_output_is_stopped():
    out = _run(_notebook("import sys\nfor _ in range(200):\n    print('z' * 2**20)\n    sys.stdout.flush()",
                         "print('the next cell runs')"),
               flood_bytes=20 * MIB)
    assert "sent more than 20 MiB of output" in _text(out.cells[0]), _text(out.cells[0])
    assert "the next cell runs" in _text(out.cells[1])


WIDGETS = "import ipywidgets as w\nws = [w.Text(value='x' * 200_000) for _ in range(50)]\ndisplay(ws[0])"


@sandboxed
def test_widget_state_is_not_kept_in_the_graded_notebook():
    out = _run(_notebook(WIDGETS, WIDGETS, WIDGETS, "print(len(ws))"))
    assert "widgets" not in out.metadata
    assert len(nbformat.writes(out)) < 1 * MIB
    assert "50" in _text(out.cells[3])


# ------------------------------------------------------------------------------------ 5: hidden tests stay out
HIDDEN_CASE = "hidden-deployment-zeta-42"
TEST_CELL = f"assert x > 0\n### BEGIN HIDDEN TESTS\nCASE = {HIDDEN_CASE!r}\nassert x == 2.0, 'x'\n### END HIDDEN TESTS\n"


@sandboxed
def test_a_replay_after_a_kernel_death_never_runs_a_test_cells_hidden_block():
    out = _run(_notebook("x = 2.0", ("t1", TEST_CELL), "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
                         "print('\\n'.join(In))\nprint(sorted(globals()))\nprint('x is', x)"))
    shown = "\n".join(_text(c) for c in out.cells)
    assert "x is 2.0" in shown  # the replay rebuilt the state
    assert "assert x > 0" in _text(out.cells[3])  # and the kernel's history holds what it ran
    assert HIDDEN_CASE not in shown and "HIDDEN TESTS" not in shown


@sandboxed
def test_a_replayed_test_cell_keeps_the_verdict_it_was_graded_with():
    """The replay runs a test cell's visible part again in the new kernel; the graded cell (the grader's verdict on
    its hidden checks, and its outputs) is the one the notebook keeps."""
    out = _run(_notebook("x = 3.0\nprint('answered', x)", ("t1", TEST_CELL), DIE, "print('after', x)"))
    assert [e["evalue"] for e in _errors(out.cells[1])] == ["x"], _errors(out.cells[1])
    assert "answered 3.0" in _text(out.cells[0]) and "after 3.0" in _text(out.cells[3])


# ------------------------------------------------------------------------------------ 7, 8, 12: time
WAITS = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(10**6)"


@sandboxed
def test_a_cell_that_ignores_the_interrupt_and_waits_is_killed_and_the_class_goes_on():
    out = _run(_notebook("x = 1", WAITS, "print('after the wait', x)"), timeout=3)
    assert "waited more than 3 s (wall-clock) without finishing and was stopped" in _text(out.cells[1])
    assert "CellTimeoutError" not in _text(out.cells[1])
    assert any(e.get("stopped") for e in _errors(out.cells[1]))
    assert "after the wait 1" in _text(out.cells[2])


@sandboxed
def test_the_whole_notebook_is_bounded_while_a_cell_runs():
    t0 = time.monotonic()
    out = _run(_notebook("import time\ntime.sleep(60)", "print('never')"), timeout=120, notebook_wall_s=8)
    assert [e["ename"] for e in _errors(out.cells[0])] == ["NotebookTimeout"], _errors(out.cells[0])
    assert "was stopped: the notebook ran out of its 8 s of wall-clock time" in _text(out.cells[0])
    assert "not run" in _text(out.cells[1]) and "never" not in _text(out.cells[1])
    assert time.monotonic() - t0 < 60  # stopped by the watchdog, not by the cell's own end


BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 2:\n    pass\nburnt = True"
DIE = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"


@sandboxed
def test_replays_after_deaths_count_against_the_notebooks_cpu_time():
    out = _run(_notebook(BURN, DIE, DIE, DIE, DIE, "print('end', burnt)"), notebook_cpu_s=7)
    assert "end" not in _text(out.cells[-1])
    assert any(e["ename"] == "NotebookTimeout" and "CPU time" in e["evalue"] for e in _errors(out.cells[-1]))


# ------------------------------------------------------------------------------------ 10: decoding work
def test_integers_that_could_collide_in_a_dict_are_refused():
    keys = [k * MAX_INT for k in range(1, 20_000)]  # every one hashes to 0 in CPython
    text = json.dumps({"__dict__": [[k, 0] for k in keys]})
    t0 = time.process_time()
    with pytest.raises(ProtocolError, match="integer larger than 2\\*\\*61"):
        decode(loads(text))
    assert time.process_time() - t0 < 2.0  # the colliding dict is never built (about 7 CPU-s per MB if it were)
    assert decode(loads(json.dumps({"__dict__": [[k, k] for k in range(10_000)]})))[9_999] == 9_999
    assert decode(MAX_INT - 1) == MAX_INT - 1
    for big in (MAX_INT, -MAX_INT, 2**64):
        with pytest.raises(ProtocolError):
            decode(big)


COLLIDE = """import json
import stage5.grading.remote as remote
P = 2**61 - 1
remote.values = lambda names: json.dumps({n: {"value": {"__dict__": [[k * P, 0] for k in range(1, 20000)]}}
                                          for n in names})
"""


@sandboxed
def test_a_reply_built_to_collide_is_one_refused_check():
    out = _run(_notebook("x = 2.0", COLLIDE, ("t1", TEST_CELL), "print('the next cell runs')"))
    errors = _errors(out.cells[2])
    assert len(errors) == 1 and "integer larger than 2**61" in errors[0]["evalue"], errors
    assert errors[0].get("stopped")
    assert "the next cell runs" in _text(out.cells[3])


# ------------------------------------------------------------------------------------ 11: what learner code sees
LOGGER = """calls = []
def twice(v):
    calls.append(v)
    return 2 * v
"""
CALLS = ("t2", "### BEGIN HIDDEN TESTS\nfrom stage5.grading import call_learner\nEXPECTED = 2 * 21.125\n"
         "assert call_learner('c1 twice', twice, 21.125) == EXPECTED\n### END HIDDEN TESTS\n")


@sandboxed
def test_learner_code_sees_the_hidden_inputs_it_is_called_with_never_the_expected_values():
    """What the README says: a learner's function receives the hidden inputs (it can log them), while the expected
    values are computed in the grader and never enter the kernel."""
    out = _run(_notebook(LOGGER, CALLS, "print('logged', calls, [k for k in globals() if 'EXPECTED' in k])"))
    assert not _errors(out.cells[1])  # the check passed
    text = _text(out.cells[2])
    assert "logged [21.125] []" in text, text
    readme = (REPO / "README.md").read_text()
    assert "receives the hidden inputs" in readme and "expected values never enter the kernel" in readme
