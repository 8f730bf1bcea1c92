"""Where a learner's notebook runs on the instructor's machine: a disposable bubblewrap sandbox with limits.

Learner code is hostile (see the README's grading section). Each submission's kernel runs under
`bubblewrap <https://github.com/containers/bubblewrap>`_ (Debian package ``bubblewrap``, 0.8 or later for
``--size``; no daemon), which gives it

* only the system directories, the Python installation and the course package, all **read-only**;
* an environment built from an allow-list (:func:`kernel_env`), never the grader's: ``--clearenv``, then only
  ``PATH``, ``HOME``, ``LANG`` and the Python and Jupyter variables the kernel needs;
* an unprivileged user: when the grader runs as root, the kernel drops to a uid of its own that owns no file
  (:func:`sandbox_uid`, group ``nogroup``) before it starts, so files only root may read (``/etc/shadow``, a
  ``0600`` file anywhere) stay closed; a non-root grader's sandbox runs in a user namespace as the grader's own
  uid, and sees nothing of its files but the read-only binds above;
* a working folder and ``/tmp`` that are two tmpfs mounts of a fixed size (``Limits.home_bytes``,
  ``Limits.tmp_bytes``), thrown away with the sandbox; the kernel's sockets live in a host folder that it may
  write only until the kernel is up (root grader);
* no network (a new network namespace), its own process namespace (so it cannot signal the grader, and every
  process it started dies with it) and its own session; no further user namespace (``--disable-userns`` where
  the sandbox has a user namespace of its own, and the seccomp filter everywhere);
* for an exercise that puts course functions off limits, a course package without them (:mod:`.view`): each
  module that defines one is a copy with those bodies cut, bound over the original;
* a seccomp filter (:mod:`.seccomp`) refusing what a Python kernel never needs and kernel exploits use: new
  namespaces, io_uring, the keyring, unsafe ``personality`` flags, socket families other than Unix and IP, and
  memory no count sees (``memfd_create``, ``shmget``);
* resource limits set by :func:`apply_limits` before the kernel starts: CPU seconds, address space and file size
  per process, and a number of processes and threads (``RLIMIT_NPROC``) for the whole sandbox, because each sandbox
  has a uid of its own (root grader) or a user namespace of its own (other graders; Linux 5.14 and later count
  the limit per namespace). The grader adds the memory of all the sandbox's processes together and
  kills the sandbox over ``Limits.sandbox_memory_bytes`` (``grader/sandboxed_execute.py``).

Where bubblewrap is missing or cannot create namespaces, :func:`isolation` says why, and the grader runs the
kernel without isolation after a loud warning: the environment is still the allow-list, the per-process limits
still apply, the kernel still drops to its own uid where the grader is root and the Python installation is
readable by others; the process cap then counts every process of the kernel's uid (and does not bind root), and
the working folder is a host folder with no size cap.

``python -m stage5.grading.sandbox SPEC_JSON -- ARGV...`` sets the limits, drops the uid, then execs ``ARGV`` with
exactly the spec's environment.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import resource
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from . import seccomp, view

HOME = "/home/learner"  # the sandbox's working folder (a sized tmpfs); never a path on the host
NOGROUP = 65534  # the group every sandbox runs as (Debian's nogroup)
# Each sandbox's uid: this plus a counter. Far above any account's uid (Debian allots up to 60000, systemd's
# dynamic users stay under 2**31 - 1 in 61184-65519 and 524288-1879048191 for containers), so it owns no file.
UID_BASE = 1_900_000_000
_uids = itertools.count()


@dataclass(frozen=True)
class Limits:
    """What one submission may use. CPU limits follow work done, so a busy machine does not fail correct code."""

    cell_cpu_s: float = 10.0  # CPU seconds one cell may use before it is interrupted (enforced by the grader)
    # CPU seconds for the whole notebook, all its sandboxes together (replays included; the grader's watchdog),
    # and RLIMIT_CPU of each sandboxed process (a runaway the grader failed to stop)
    notebook_cpu_s: int = 600
    memory_bytes: int = 2 * 2**30  # RLIMIT_AS per process (importing torch needs under 1 GiB of it)
    file_bytes: int = 256 * 2**20  # RLIMIT_FSIZE: the largest file it may write
    # wall-clock for the whole notebook, replays and the grader's own checks included (the grader's watchdog): only
    # a notebook that waits ever reaches it
    notebook_wall_s: float = 900.0
    sandbox_memory_bytes: int = 3 * 2**30  # resident memory of all the sandbox's processes together (grader polls)
    # processes and threads of the whole sandbox (RLIMIT_NPROC): room for torch's and OpenBLAS's one thread per core
    # on a large grading machine, far below a fork bomb's thousands
    processes: int = 512
    tmp_bytes: int = 256 * 2**20  # size of the sandbox's /tmp (a tmpfs)
    home_bytes: int = 256 * 2**20  # size of its working folder, HOME (a tmpfs)
    shm_bytes: int = 64 * 2**20  # size of its /dev/shm (a tmpfs: POSIX shared memory and semaphores live there)
    # open files per process (RLIMIT_NOFILE): a kernel needs a few dozen; each open socket can hold a few hundred
    # KB of kernel buffers that no memory count sees, so a low ceiling keeps that small
    open_files: int = 1024

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
    resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
    resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))  # POSIX message queues: kernel memory nobody counts


def _course_path() -> str:
    """The folder that holds the ``stage5`` package (in the sandbox it holds nothing else)."""
    import stage5

    return str(Path(stage5.__file__).resolve().parent.parent)


def kernel_env(home: str = HOME) -> dict[str, str]:
    """The kernel's whole environment: an allow-list, never the caller's variables."""
    env = _library_path()
    # nbgrader's own signal that a notebook is being graded (its documented way to skip slow cells), which it sets
    # in the grader's environment around autograde and validate: the grader's value, not the instructor's shell's
    env |= {k: os.environ[k] for k in ("NBGRADER_EXECUTION", "NBGRADER_VALIDATING") if k in os.environ}
    return env | {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": home, "USER": "learner", "LOGNAME": "learner", "LANG": "C.UTF-8", "TMPDIR": "/tmp",
        # the course package from where the grader imports it (an editable install points elsewhere)
        "PYTHONPATH": _course_path(), "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1",
        "MPLCONFIGDIR": f"{home}/.mpl", "IPYTHONDIR": f"{home}/.ipython", "JUPYTER_RUNTIME_DIR": f"{home}/.jupyter",
        # ipykernel watches its parent pid and exits when it looks like init, as bwrap's does in its pid
        # namespace: 1 means "no parent to watch" (the grader kills the sandbox itself)
        "JPY_PARENT_PID": "1",
    }


def _library_path() -> dict[str, str]:
    """``LD_LIBRARY_PATH`` for an interpreter whose libpython lies beside it (the copy the local JupyterHub makes
    for other accounts, hub/local_hub.py): derived from the interpreter, never taken from the caller."""
    lib = Path(sys.executable).resolve().parent.parent / "lib"
    return {"LD_LIBRARY_PATH": str(lib)} if any(lib.glob("libpython*.so*")) else {}


def _world_can_run(path: Path) -> bool:
    """Whether a user with no rights of its own can reach and run ``path`` (every folder above it o+x)."""
    path = path.resolve()
    try:
        return all(p.stat().st_mode & stat.S_IXOTH for p in [path, *path.parents])
    except OSError:
        return False


def sandbox_uid(mode: str | None = None) -> int | None:
    """A fresh uid for one sandbox when the grader is root (so the kernel drops to it), else None.

    Without bubblewrap the kernel runs from the host's files directly, so it drops only where the Python
    installation is open to others; :func:`privilege_note` says when it cannot."""
    if os.geteuid() != 0:
        return None
    if (mode or isolation()[0]) != "bwrap" and not _world_can_run(Path(sys.executable)):
        return None
    return UID_BASE + (os.getpid() * 1000 + next(_uids)) % 100_000_000


def privilege_note(mode: str | None = None) -> str:
    """Empty, or why the kernel runs with the grader's own uid (said with the no-sandbox warning)."""
    if os.geteuid() == 0 and sandbox_uid(mode) is None:
        return (f"the kernel runs as root: {sys.executable} is not readable by other users, so it cannot drop to "
                "an unprivileged uid")
    return ""


def limited_command(argv: list[str], limits: Limits, env: dict[str, str] | None = None,
                    uid: int | None = None) -> list[str]:
    """``argv`` run through this module, which applies ``limits``, drops to ``uid`` (default a fresh
    :func:`sandbox_uid`; only a root grader drops) and execs it with exactly ``env`` (default :func:`kernel_env`)."""
    spec = {"limits": asdict(limits), "env": kernel_env() if env is None else env,
            "uid": sandbox_uid() if uid is None else uid}
    return [sys.executable, "-m", "stage5.grading.sandbox", json.dumps(spec), "--", *argv]


def _readable_roots() -> list[Path]:
    """What the kernel needs to read: the Python installation, the virtual environment and the course package."""
    roots = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), Path(_course_path()) / "stage5"}
    # Package folders on the path that live outside both prefixes (an interpreter copied for another account and
    # pointed at the course's virtual environment, as the local JupyterHub does). Only site-packages folders:
    # never the repository root or the grader's folder, which sys.path may also hold.
    for entry in sys.path:
        path = Path(entry).resolve() if entry else None
        if path is not None and path.name in ("site-packages", "dist-packages") and path.is_dir():
            roots.add(path)
    return sorted(roots)


SYSTEM = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/lib32")


def bwrap_command(argv: list[str], scratch: Path, readable: list[Path] | None = None,
                  limits: Limits | None = None, views: dict[Path, Path] | None = None) -> list[str]:
    """``argv`` inside a bubblewrap sandbox; ``scratch`` (the kernel's sockets and connection file) is bound at
    its own path, the working folder and ``/tmp`` are sized tmpfs mounts. ``views`` ({module file: its copy},
    :func:`.view.build`) are bound over the course's own files, and their cached bytecode hidden."""
    limits = limits or Limits()
    as_root = os.geteuid() == 0
    # A root grader builds the sandbox without a user namespace (one would map the kernel back to root) and lets
    # the launcher inside keep only the right to drop to its own uid, which it uses at once. Otherwise an
    # unprivileged user namespace, as the grader's own uid, with no capabilities.
    cmd = ["bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
           "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"] if as_root else ["--unshare-user"]
    # no user namespace inside (a learner's root, mounts, network): --disable-userns came with bwrap 0.8.0
    # (containers/bubblewrap#488) and needs --unshare-user (bubblewrap.c dies without it), so
    # a root grader's sandbox relies on the seccomp filter's refusal of unshare and clone(CLONE_NEWUSER) alone
    if not as_root and bwrap_has("--disable-userns"):
        cmd += ["--disable-userns"]
    # /dev is bwrap's own tmpfs, unsized: its shm gets a sized tmpfs, and the rest is made read-only (writing to
    # /dev/null still works: a device node is not the file system's data)
    cmd += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(limits.shm_bytes),
            "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    for system in SYSTEM:
        if os.path.islink(system):
            cmd += ["--symlink", os.readlink(system), system]
        elif os.path.isdir(system):
            cmd += ["--ro-bind", system, system]
    # sized tmpfs mounts first: the scratch folder may lie under /tmp on the host, and is bound over it after
    cmd += ["--perms", "1777", "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp",
            "--perms", "0755", "--dir", str(Path(HOME).parent),
            "--perms", "1777", "--size", str(limits.home_bytes), "--tmpfs", HOME]
    scratch = scratch.resolve()
    roots = [Path(r) for r in (readable if readable is not None else _readable_roots())]
    mounts = sorted({*roots, scratch})
    made: set[Path] = {Path("/"), Path("/tmp"), Path(HOME).parent, *map(Path, SYSTEM)}
    for mount in mounts:
        if any(other != mount and other in mount.parents for other in mounts):
            continue  # inside another bind already
        for parent in reversed(mount.parents):
            if parent not in made:  # folders bwrap would otherwise create 0700 (closed to a dropped uid)
                made.add(parent)
                cmd += ["--perms", "0755", "--dir", str(parent)]
        cmd += ["--bind" if mount == scratch else "--ro-bind", str(mount), str(mount)]
    for original, copy in sorted((views or {}).items()):  # the exercise's off-limits functions cut out
        cmd += ["--ro-bind", str(copy), str(original)]
    for cached in view.hidden_bytecode((views or {}).keys()):
        cmd += ["--ro-bind", "/dev/null", str(cached)]
    cmd += ["--chdir", HOME,
            # only what the launcher needs to import itself; it execs the kernel with the spec's environment
            "--clearenv", "--setenv", "PATH", kernel_env()["PATH"], "--setenv", "PYTHONPATH", _course_path(),
            "--setenv", "LANG", "C.UTF-8"]
    for name, value in _library_path().items():
        cmd += ["--setenv", name, value]
    cmd += ["--"]
    return cmd + argv


@functools.cache
def bwrap_has(option: str) -> bool:
    """Whether this machine's bwrap lists ``option`` in its ``--help`` (options arrive with versions)."""
    try:
        done = subprocess.run(["bwrap", "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return option in (done.stdout + done.stderr).split()


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


def _drop_to(uid: int) -> None:
    """Become ``uid`` (group nogroup, no other groups) for good: only root can, and root loses every capability."""
    os.setgroups([])
    os.setgid(NOGROUP)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise SystemExit("stage5 sandbox: could not drop to an unprivileged uid")


def main(args: list[str]) -> None:
    if len(args) < 3 or args[1] != "--":
        raise SystemExit("usage: python -m stage5.grading.sandbox SPEC_JSON -- ARGV...")
    spec = json.loads(args[0])
    apply_limits(Limits(**spec["limits"]))
    if spec.get("uid") is not None and os.geteuid() == 0:
        _drop_to(int(spec["uid"]))
    if seccomp.supported():  # after the drop: memfd, System V shared memory and other architectures' calls refused
        seccomp.install()
    os.execvpe(args[2], args[2:], {str(k): str(v) for k, v in spec["env"].items()})


if __name__ == "__main__":
    main(sys.argv[1:])
