"""A memory cgroup per sandbox, where the grader can make one: it counts what the sandbox *holds*, not what its
processes map.

The grader's other memory check adds up the resident memory of the sandbox's processes. Pages held by a file in
a tmpfs, by a ``memfd`` or by shared memory belong to no process once unmapped, and the sum misses them; a
memory cgroup charges every page to the cgroup whose process made it, so its count includes them (and the
kernel memory the kernel charges to it). Its hard limit sits above the grader's cap, as a backstop for a burst
faster than the grader looks; the grader kills the sandbox when what it holds passes the cap.

Where it works: a grader running as root, on cgroup v2 (the unified hierarchy, with the memory controller) or
cgroup v1 (a writable ``memory`` hierarchy). A grader running as another user (Formgrader on a hub) cannot make
cgroups unless its service manager delegates one: point ``STAGE5_CGROUP`` at a cgroup v2 folder it may write in
(systemd's ``Delegate=yes``). :func:`support` says which holds, and why not.

``python -m stage5.grading.cgroup PROCS_FILE... -- ARGV...`` writes its own pid into each ``cgroup.procs`` file,
then execs ``ARGV`` (the sandbox), so every process of the sandbox starts inside the cgroup.
"""

from __future__ import annotations

import functools
import itertools
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PARENT = "stage5-sandboxes"  # the folder the grader makes its sandboxes' cgroups in
ENV = "STAGE5_CGROUP"  # a delegated cgroup v2 folder to use instead (a grader that is not root)
HEADROOM = 0.25  # the kernel's hard limit: the cap plus this share (file cache that can be reclaimed, a burst)
_ids = itertools.count()


def _v2_controllers(folder: Path) -> set[str]:
    try:
        return set((folder / "cgroup.controllers").read_text().split())
    except OSError:
        return set()


@functools.cache
def support() -> tuple[str, Path | None, Path | None, str]:
    """(``"v2"``, parent, None, "") or (``"v1"``, memory parent, pids parent or None, "") where the grader can make
    cgroups, else (``"none"``, None, None, why not). Found once per process, which then removes what earlier
    graders left behind."""
    found = _support()
    for folder in found[1:3]:
        if folder is not None:
            _remove_stale(folder)
    return found


def _support() -> tuple[str, Path | None, Path | None, str]:
    delegated = os.environ.get(ENV)
    if delegated:
        folder = Path(delegated)
        if "memory" in _v2_controllers(folder) and os.access(folder, os.W_OK):
            return "v2", folder, None, ""
        return "none", None, None, f"{ENV}={delegated} is not a writable cgroup v2 folder with the memory controller"
    if os.geteuid() != 0:
        return "none", None, None, (f"the grader is not root (a delegated cgroup v2 folder in {ENV} would do)")
    if "memory" in _v2_controllers(ROOT):
        parent = ROOT / PARENT
        try:
            parent.mkdir(exist_ok=True)
            wanted = " ".join(f"+{c}" for c in sorted({"memory", "pids"} & _v2_controllers(ROOT)))
            (ROOT / "cgroup.subtree_control").write_text(wanted)
            (parent / "cgroup.subtree_control").write_text(wanted)
        except OSError as err:
            return "none", None, None, f"cgroup v2 is not writable here ({err.strerror})"
        return "v2", parent, None, ""
    memory = ROOT / "memory"
    if (memory / "memory.limit_in_bytes").exists():
        try:
            (memory / PARENT).mkdir(exist_ok=True)
        except OSError as err:
            return "none", None, None, f"the cgroup v1 memory hierarchy is not writable here ({err.strerror})"
        pids = ROOT / "pids"
        try:
            (pids / PARENT).mkdir(exist_ok=True)
        except OSError:
            pids = None
        return "v1", memory / PARENT, (pids / PARENT) if pids else None, ""
    return "none", None, None, "this machine mounts no memory cgroup controller"


@dataclass
class SandboxCgroup:
    """One sandbox's cgroup(s): the memory one, and on cgroup v1 a pids one beside it."""

    version: str
    memory: Path
    pids: Path | None = None
    folders: list[Path] = field(default_factory=list)

    @classmethod
    def create(cls, memory_cap: int, processes: int) -> SandboxCgroup | None:
        """A fresh cgroup limited to ``memory_cap`` plus the headroom and to ``processes``; None where
        :func:`support` says the grader cannot make one (or making this one failed)."""
        version, parent, pids_parent, _ = support()
        if parent is None:
            return None
        name = f"sandbox-{os.getpid()}-{next(_ids)}"
        hard = str(int(memory_cap * (1 + HEADROOM)))
        group = cls(version, parent / name)
        try:
            group.memory.mkdir()
            group.folders.append(group.memory)
            limit, optional = (("memory.max", {"memory.swap.max": "0", "pids.max": str(processes)}) if version == "v2"
                               else ("memory.limit_in_bytes", {"memory.memsw.limit_in_bytes": hard}))
            (group.memory / limit).write_text(hard)
            for file, value in optional.items():  # swap and pids where this kernel has them
                if (group.memory / file).exists():
                    (group.memory / file).write_text(value)
            if pids_parent is not None:
                group.pids = pids_parent / name
                group.pids.mkdir()
                group.folders.append(group.pids)
                (group.pids / "pids.max").write_text(str(processes))
        except OSError:
            group.remove()
            return None
        return group

    def procs_files(self) -> list[str]:
        return [str(f / "cgroup.procs") for f in self.folders]

    def enter_command(self, argv: list[str]) -> list[str]:
        """``argv`` started inside this cgroup (see the module's ``__main__``)."""
        return [sys.executable, "-m", "stage5.grading.cgroup", *self.procs_files(), "--", *argv]

    def _stat(self) -> dict[str, int]:
        out = {}
        for line in (self.memory / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if value.isdigit():
                out[key] = int(value)
        return out

    def held_bytes(self) -> int:
        """What the sandbox holds: every page charged to it less the file cache the kernel can drop (the libraries
        it read); tmpfs, memfd and shared-memory pages are not droppable and count. 0 once the cgroup is gone."""
        try:
            if self.version == "v2":
                usage = int((self.memory / "memory.current").read_text())
                stat = self._stat()
                cache = stat.get("active_file", 0) + stat.get("inactive_file", 0)
            else:
                usage = int((self.memory / "memory.usage_in_bytes").read_text())
                stat = self._stat()
                cache = stat.get("total_active_file", stat.get("active_file", 0)) + stat.get(
                    "total_inactive_file", stat.get("inactive_file", 0))
        except (OSError, ValueError):
            return 0
        return max(0, usage - cache)

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer stopped in this cgroup (its hard limit reached)."""
        try:
            name = "memory.events" if self.version == "v2" else "memory.oom_control"
            for line in (self.memory / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and value.strip().isdigit():
                    return int(value)
        except OSError:
            pass
        return 0

    def pids_in(self) -> list[int]:
        out: set[int] = set()
        for f in self.procs_files():
            try:
                out |= {int(p) for p in Path(f).read_text().split()}
            except (OSError, ValueError):
                continue
        return sorted(out)

    def kill(self) -> None:
        """SIGKILL every process in the cgroup (cgroup v2's ``cgroup.kill`` where the kernel has it)."""
        killer = self.memory / "cgroup.kill"
        if self.version == "v2" and killer.exists():
            try:
                killer.write_text("1")
                return
            except OSError:
                pass
        for pid in self.pids_in():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def remove(self, wait_s: float = 5.0) -> None:
        """Remove the cgroup folders once every process in them is gone (a killed process leaves its cgroup only
        when it has been reaped, a moment after the kill); a folder still busy after ``wait_s`` is left, and the
        next grader run removes it (:func:`_remove_stale`)."""
        deadline = time.monotonic() + wait_s
        for folder in reversed(self.folders):
            while True:
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.05)


def _remove_stale(parent: Path) -> None:
    """Remove the empty cgroups that graders which are gone left in ``parent``."""
    for folder in parent.glob("sandbox-*-*"):
        try:
            pid = int(folder.name.split("-")[1])
            os.kill(pid, 0)
        except ProcessLookupError:
            try:
                folder.rmdir()
            except OSError:
                pass
        except (ValueError, PermissionError):
            continue


def main(args: list[str]) -> None:
    if "--" not in args or args.index("--") == len(args) - 1:
        raise SystemExit("usage: python -m stage5.grading.cgroup PROCS_FILE... -- ARGV...")
    split = args.index("--")
    for procs in args[:split]:
        Path(procs).write_text(str(os.getpid()))
    argv = args[split + 1:]
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
