"""The sandbox as a boundary, without a class run: what the grader's environment and files show a learner, and
caps that hold for the whole sandbox (memory of all its processes, their number, the size of /tmp and of the
working folder). The class-level checks (honest learners keep their grades) are in test_grading_boundary.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from grading_harness import REPO  # noqa: F401  (puts grader/ on the path)
from sandboxed_execute import SandboxedExecute

from stage5.grading import cgroup
from stage5.grading.sandbox import (
    Limits,
    _readable_roots,
    bwrap_command,
    isolation,
    kernel_env,
    limited_command,
    sandbox_uid,
)

sandboxed = pytest.mark.skipif(isolation()[0] != "bwrap", reason=f"no sandbox here: {isolation()[1]}")
SECRET = "i27b-grader-secret-3f9a"


def _run(code: str, scratch: Path, limits: Limits | None = None, readable: list[Path] | None = None):
    limits = limits or Limits()
    cmd = bwrap_command(limited_command([sys.executable, "-c", code], limits), scratch, readable, limits)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_kernel_environment_is_an_allow_list(monkeypatch):
    monkeypatch.setenv("STAGE5_TEST_TOKEN", SECRET)
    env = kernel_env()
    assert SECRET not in repr(env) and "STAGE5_TEST_TOKEN" not in env
    assert set(env) >= {"PATH", "HOME", "LANG", "PYTHONPATH"}
    # the course package comes from where the grader imports it, explicitly, whatever the caller's PYTHONPATH says
    import stage5

    assert Path(env["PYTHONPATH"]) == Path(stage5.__file__).resolve().parent.parent


@sandboxed
def test_learner_reads_neither_the_graders_environment_nor_its_private_files(tmp_path, monkeypatch):
    monkeypatch.setenv("STAGE5_TEST_TOKEN", SECRET)
    private = tmp_path / "instructor"
    private.mkdir(mode=0o755)
    (private / "gradebook-key").write_text(SECRET)
    os.chmod(private / "gradebook-key", 0o600)  # the grader's user can read it; nobody else
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    probe = f"""
import os, sys
print('ENV', sorted(os.environ.items()))
for path in ['/etc/shadow', {str(private / 'gradebook-key')!r}]:
    try:
        print('OPENED', path, open(path).read()[:40])
    except OSError as e:
        print('closed', path, type(e).__name__)
print('uid', os.getuid())
"""
    # the private folder is bound into the sandbox on purpose: only the uid stops the read
    done = _run(probe, scratch, readable=[*_readable_roots(), private])
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr and "STAGE5_TEST_TOKEN" not in done.stdout
    assert "OPENED" not in done.stdout, done.stdout
    assert f"closed {private / 'gradebook-key'} PermissionError" in done.stdout
    if os.geteuid() == 0:  # root grader: the kernel dropped to a uid of its own
        assert int(done.stdout.split("uid ")[1].split()[0]) >= 1_000_000_000


@sandboxed
def test_tmp_and_working_folder_are_sized(tmp_path):
    mib = 2**20
    limits = Limits(tmp_bytes=32 * mib, home_bytes=24 * mib, file_bytes=16 * mib)
    probe = """
import os
for folder in ('/tmp', os.getcwd()):
    written = 0
    try:
        for i in range(20):  # up to 20 files of 8 MiB: each under the per-file limit, together far over the sizes
            with open(os.path.join(folder, f'f{i}'), 'wb') as fh:
                fh.write(b'x' * 2**23)
            written += 2**23
    except OSError as e:
        print(folder, 'stopped', type(e).__name__, written // 2**20)
    else:
        print(folder, 'wrote', written // 2**20)
"""
    done = _run(probe, tmp_path, limits)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert lines["/tmp"].startswith("stopped OSError") and int(lines["/tmp"].split()[-1]) <= 32
    assert lines["/home/learner"].startswith("stopped OSError") and int(lines["/home/learner"].split()[-1]) <= 24
    assert sum(f.stat().st_size for f in tmp_path.rglob("*") if f.is_file()) == 0  # nothing reached the host


@sandboxed
@pytest.mark.skipif(os.geteuid() != 0, reason="the process cap is per sandbox only where each has its own uid")
def test_process_cap_holds_for_the_whole_sandbox(tmp_path):
    probe = """
import subprocess
procs = []
try:
    for _ in range(200):
        procs.append(subprocess.Popen(['sleep', '60']))
except OSError as e:
    print('refused after', len(procs), type(e).__name__)
else:
    print('started', len(procs))
for p in procs:
    p.kill()
"""
    done = _run(probe, tmp_path, Limits(processes=40))
    assert done.returncode == 0, done.stderr
    assert "refused after" in done.stdout and int(done.stdout.split()[2]) < 40, done.stdout


def _notebook(*sources: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


MIB = 2**20
HOLD = f"""
import subprocess, sys, time
hold = "import time; s = 'x' * ({200 * MIB}); time.sleep(60)"
procs = [subprocess.Popen([sys.executable, '-c', hold]) for _ in range(3)]
time.sleep(30)
print('three processes held 600 MiB together')
"""


@sandboxed
def test_memory_cap_holds_for_all_the_sandboxes_processes_together(monkeypatch):
    monkeypatch.setenv("STAGE5_TEST_TOKEN", SECRET)
    # each process stays far under the per-process limit (2 GiB of address space); together they pass 500 MiB
    ex = SandboxedExecute(cell_cpu_s=20, sandbox_memory_bytes=500 * MIB)
    nb = _notebook("import os\nprint(sorted(os.environ.items()))", HOLD, "print('the next cell runs')")
    out, _ = ex.preprocess(nb, {"metadata": {"path": "."}})
    died = [o for o in out.cells[1].outputs if o.get("output_type") == "error"]
    assert died and died[0]["ename"] == "KernelDied" and "over the sandbox's" in died[0]["evalue"], out.cells[1]
    assert not any("held 600 MiB" in o.get("text", "") for o in out.cells[1].outputs)
    assert "the next cell runs" in out.cells[2].outputs[0]["text"]
    assert SECRET not in nbformat.writes(out)  # the kernel's environment never held the grader's variables


BURST = f"""
import subprocess, sys, time
subprocess.run([sys.executable, '-c', "s = b'x' * {900 * MIB}"])  # past the cgroup's hard limit in a few ms
time.sleep(120)
print('the cell went on after the burst')
"""


@sandboxed
@pytest.mark.skipif(cgroup.support()[0] == "none", reason=f"no memory cgroup here: {cgroup.support()[3]}")
def test_a_child_the_oom_killer_stops_ends_the_cell_as_over_memory():
    """The cgroup's hard limit acts at once: a child that passes it between two of the watch's looks is stopped by
    the kernel's OOM killer, and the kernel lives on, waiting. The watch reads the cgroup's OOM count, so the cell
    is stopped as over the memory cap, not left to run out its wall-clock limit."""
    ex = SandboxedExecute(cell_cpu_s=20, sandbox_memory_bytes=300 * MIB, timeout=90)
    out, _ = ex.preprocess(_notebook(BURST, "print('the next cell runs')"), {"metadata": {"path": "."}})
    died = [o for o in out.cells[0].outputs if o.get("output_type") == "error"]
    assert died and died[0]["ename"] == "KernelDied" and "over the sandbox's" in died[0]["evalue"], out.cells[0]
    assert not any("went on" in o.get("text", "") for o in out.cells[0].outputs)
    assert "the next cell runs" in out.cells[1].outputs[0]["text"]


def test_uid_is_fresh_for_each_sandbox():
    if os.geteuid() != 0:
        assert sandbox_uid("bwrap") is None
        return
    uids = {sandbox_uid("bwrap") for _ in range(50)}
    assert len(uids) == 50 and min(uids) >= 1_000_000_000


def test_the_kernel_is_told_it_is_being_graded(monkeypatch):
    """nbgrader sets NBGRADER_EXECUTION around autograde so that notebooks can skip slow cells (ex03's engine
    demo does); the cleared environment must keep it, and nothing else of the caller's."""
    from stage5.grading.sandbox import kernel_env

    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    monkeypatch.setenv("STAGE5_TEST_SECRET", "x")
    env = kernel_env()
    assert env["NBGRADER_EXECUTION"] == "autograde" and "STAGE5_TEST_SECRET" not in env
