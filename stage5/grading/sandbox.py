"""Where a learner's notebook runs on the instructor's machine: a disposable bubblewrap sandbox with limits.

Learner code is hostile (see the README's grading section). Each submission's kernel runs under
`bubblewrap <https://github.com/containers/bubblewrap>`_ (Debian package ``bubblewrap``; no daemon, no root
needed where unprivileged user namespaces are allowed), which gives it

* only the system directories, the Python installation and the course package, all **read-only**;
* one fresh, writable scratch folder (its working directory, ``HOME`` and the kernel's sockets), thrown away after;
* nothing else: no repository (so no ``solutions/``), no gradebook, no inbox, no other learner's files;
* no network (a new network namespace), its own process namespace (so it cannot signal the grader, and every
  process it started dies with it) and its own session;
* resource limits set by :func:`apply_limits` before the kernel starts: CPU seconds and address space per
  process, file size.

Where bubblewrap is missing or cannot create namespaces, :func:`isolation` says why, and the grader runs the
kernel without isolation (limits still apply) after a loud warning.

``python -m stage5.grading.sandbox LIMITS_JSON -- ARGV...`` sets the limits, then execs ``ARGV``.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Limits:
    """What one submission may use. CPU limits follow work done, so a busy machine does not fail correct code."""

    cell_cpu_s: float = 10.0  # CPU seconds one cell may use before it is interrupted (enforced by the grader)
    notebook_cpu_s: int = 600  # RLIMIT_CPU of each sandboxed process: a runaway the grader failed to stop
    memory_bytes: int = 2 * 2**30  # RLIMIT_AS per process (importing torch needs under 1 GiB of it)
    file_bytes: int = 256 * 2**20  # RLIMIT_FSIZE: the largest file it may write in its scratch folder
    notebook_wall_s: float = 900.0  # wall-clock for the whole notebook: only catches a kernel that waits forever

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not value > 0:
                raise ValueError(f"Limits.{name} must be positive, got {value!r}")


def apply_limits(limits: Limits) -> None:
    """Set this process's resource limits (inherited by everything it starts)."""
    cpu = int(limits.notebook_cpu_s)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def limited_command(argv: list[str], limits: Limits) -> list[str]:
    """``argv`` run through this module, which applies ``limits`` and then execs it."""
    return [sys.executable, "-m", "stage5.grading.sandbox", json.dumps(asdict(limits)), "--", *argv]


def _readable_roots() -> list[Path]:
    """What the kernel needs to read: the Python installation, the virtual environment and the course package."""
    import stage5

    roots = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), Path(stage5.__file__).resolve().parent}
    # Package folders on the path that live outside both prefixes (an interpreter copied for another account and
    # pointed at the course's virtual environment, as the local JupyterHub does). Only site-packages folders:
    # never the repository root or the grader's folder, which sys.path may also hold.
    for entry in sys.path:
        path = Path(entry).resolve() if entry else None
        if path is not None and path.name in ("site-packages", "dist-packages") and path.is_dir():
            roots.add(path)
    return sorted(roots)


def bwrap_command(argv: list[str], scratch: Path, readable: list[Path] | None = None) -> list[str]:
    """``argv`` inside a bubblewrap sandbox whose only writable place is ``scratch``."""
    cmd = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
           "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for system in ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/lib32"):
        if os.path.islink(system):
            cmd += ["--symlink", os.readlink(system), system]
        elif os.path.isdir(system):
            cmd += ["--ro-bind", system, system]
    for root in readable if readable is not None else _readable_roots():
        cmd += ["--ro-bind", str(root), str(root)]
    scratch = scratch.resolve()
    cmd += ["--bind", str(scratch), str(scratch), "--chdir", str(scratch),
            "--setenv", "HOME", str(scratch), "--setenv", "TMPDIR", "/tmp",
            "--setenv", "MPLCONFIGDIR", str(scratch / ".mpl"), "--setenv", "IPYTHONDIR", str(scratch / ".ipython"),
            "--unsetenv", "JUPYTER_RUNTIME_DIR", "--unsetenv", "JUPYTER_DATA_DIR",
            # ipykernel watches its parent pid and exits when it looks like init, as bwrap's does in its pid
            # namespace: 1 means "no parent to watch" (the grader kills the sandbox itself)
            "--setenv", "JPY_PARENT_PID", "1", "--"]
    return cmd + argv


@functools.cache
def isolation() -> tuple[str, str]:
    """``("bwrap", "")`` when bubblewrap can build the sandbox here, else ``("none", why not)``."""
    if shutil.which("bwrap") is None:
        return "none", "bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run(bwrap_command(["/bin/true"], Path(tmp), readable=[]), capture_output=True,
                                  text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return "none", f"bwrap could not run: {err}"
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["unknown error"])[-1]
        return "none", (f"bwrap cannot create namespaces here ({reason}); allow unprivileged user namespaces "
                        "(sysctl kernel.unprivileged_userns_clone=1) or run the grader in a container")
    return "bwrap", ""


def main(args: list[str]) -> None:
    if len(args) < 3 or args[1] != "--":
        raise SystemExit("usage: python -m stage5.grading.sandbox LIMITS_JSON -- ARGV...")
    apply_limits(Limits(**json.loads(args[0])))
    os.execvp(args[2], args[2:])


if __name__ == "__main__":
    main(sys.argv[1:])
