"""The sandbox's memory cgroup (stage5/grading/cgroup.py): what it reads and writes on cgroup v2 (a delegated folder,
imitated here by plain files, as the kernel's files read the same), and on the machine's own hierarchy where this
test runs as root."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from stage5.grading import cgroup

MIB = 2**20


@pytest.fixture
def delegated(tmp_path, monkeypatch):
    """A folder shaped like a delegated cgroup v2 folder: its controllers, and the files a child has."""
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    monkeypatch.setenv(cgroup.ENV, str(tmp_path))
    cgroup.support.cache_clear()
    yield tmp_path
    cgroup.support.cache_clear()


def test_a_delegated_v2_folder_gets_a_limited_child_per_sandbox(delegated, monkeypatch):
    real_mkdir = os.mkdir

    def mkdir(path, *a, **k):  # the kernel makes a child's files; here the test does
        real_mkdir(path, *a, **k)
        for name in ("memory.max", "memory.swap.max", "pids.max", "cgroup.procs", "memory.current", "memory.stat",
                     "memory.events"):
            open(os.path.join(path, name), "w").close()

    monkeypatch.setattr(os, "mkdir", mkdir)
    assert cgroup.support()[:2] == ("v2", delegated)
    group = cgroup.SandboxCgroup.create(400 * MIB, 64)
    assert group is not None and group.memory.parent == delegated
    assert int((group.memory / "memory.max").read_text()) == int(400 * MIB * (1 + cgroup.HEADROOM))
    assert (group.memory / "memory.swap.max").read_text() == "0"
    assert (group.memory / "pids.max").read_text() == "64"
    assert group.enter_command(["bwrap", "x"])[-3:] == ["--", "bwrap", "x"]
    # what it holds: every page charged, less the file cache the kernel can drop (tmpfs and memfd pages stay)
    (group.memory / "memory.current").write_text(str(700 * MIB))
    (group.memory / "memory.stat").write_text(f"anon {100 * MIB}\nfile {600 * MIB}\nshmem {500 * MIB}\n"
                                              f"active_file {60 * MIB}\ninactive_file {40 * MIB}\n")
    assert group.held_bytes() == 600 * MIB
    assert group.oom_kills() == 0
    (group.memory / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert group.oom_kills() == 1


def test_a_folder_that_is_no_cgroup_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv(cgroup.ENV, str(tmp_path))
    cgroup.support.cache_clear()
    try:
        version, parent, _, why = cgroup.support()
        assert (version, parent) == ("none", None) and cgroup.ENV in why
        assert cgroup.SandboxCgroup.create(MIB, 8) is None
    finally:
        cgroup.support.cache_clear()


@pytest.mark.skipif(cgroup.support()[0] == "none", reason=f"no memory cgroup here: {cgroup.support()[3]}")
def test_the_cgroup_counts_a_memfd_and_its_limit_holds():
    """On this machine's own hierarchy: a process started inside the cgroup holds a 200 MiB memfd (no process maps
    it); the cgroup counts it, and past the hard limit the kernel stops the process."""
    group = cgroup.SandboxCgroup.create(120 * MIB, 16)
    assert group is not None
    hold = ("import os, sys, time\nfd = os.memfd_create('m')\n[os.write(fd, b'x' * 2**20) for _ in range(int(sys.argv[1]))]"
            "\nprint('held', flush=True)\ntime.sleep(30)")
    try:
        proc = subprocess.Popen(group.enter_command([sys.executable, "-c", hold, "100"]), stdout=subprocess.PIPE,
                                text=True)
        assert proc.stdout.readline().strip() == "held"
        assert group.held_bytes() >= 100 * MIB and proc.pid in group.pids_in()
        group.kill()
        proc.wait(timeout=60)
        over = subprocess.run(group.enter_command([sys.executable, "-c", hold, "400"]), capture_output=True,
                              timeout=120)
        assert over.returncode == -9 and group.oom_kills() >= 1, over
    finally:
        group.kill()
        group.remove()
    assert not group.memory.exists()
