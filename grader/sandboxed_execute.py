"""nbgrader's Execute step with each submission's kernel in a disposable sandbox and CPU-time limits per cell.

* The kernel starts inside bubblewrap (:mod:`stage5.grading.sandbox`) and talks to the grader over Unix sockets
  in its scratch folder (the ``ipc`` transport), so it needs no network at all.
* Each cell may use ``cell_cpu_s`` seconds of CPU time (the sandbox's processes together). Over that it is
  interrupted; if it keeps computing (a long C call ignores the interrupt), the sandbox is killed. CPU time, not
  wall-clock, so a correct notebook graded on a busy machine gets the same limits as on a quiet one; a generous
  wall-clock limit only catches a cell that waits forever.
* The memory of all the sandbox's processes together is checked with the CPU time; over
  ``Limits.sandbox_memory_bytes`` the sandbox is killed (three processes that each stay under the per-process limit
  cannot add up past it).
* Where the grader can make a memory cgroup (:mod:`stage5.grading.cgroup`), the sandbox runs in one, and what the
  cgroup holds (tmpfs, memfd and shared-memory pages included, which no process's resident set shows) counts too.
  Where the machine's available memory falls under ``host_reserve_bytes`` whatever the counts say (memory the
  kernel holds for sockets or pipes, which no count sees), the sandbox is stopped and the notebook is reported as
  not graded, to be graded again.
* A cell that waits past the wall-clock ``timeout`` is interrupted, and killed ``WALL_GRACE_S`` later if it ignores
  the interrupt. The whole notebook (replays after kernel deaths and the grader's own checks included) has
  ``Limits.notebook_wall_s`` of wall-clock and ``Limits.notebook_cpu_s`` of CPU, kept by a watchdog no cell can
  ignore: past either, the sandbox is killed and the cells left are marked as not run.
* Outputs are budgeted while a cell runs (``cell_output_bytes`` kept per cell, ``notebook_output_bytes`` per
  notebook, past which they are dropped with a note; a cell that sends more than ``FLOOD_BYTES`` is stopped),
  display updates included (charged once per output they rewrite, before nbclient applies them), no
  single message may exceed ``MAX_MESSAGE_BYTES`` (ZeroMQ drops it unread), and widget state is not kept.
* When the kernel dies in a cell (killed, out of memory, ``exit()``), that cell gets a one-line error naming the
  reason, a fresh sandbox replays what the kernel had run (for a test cell, its source without the hidden block,
  never the cell's stored source), and grading continues with the next cell: only the cell that died loses its
  marks.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import os
import signal
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import psutil
import zmq
from host_checks import HostChecks, instructor_cells
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from nbclient.exceptions import DeadKernelError
from nbformat import NotebookNode
from nbgrader.preprocessors.execute import Execute
from traitlets import Bool, Float, Instance, Integer, Type, default

from stage5.grading.cgroup import SandboxCgroup
from stage5.grading.remote import MAX_REPLY_CHARS
from stage5.grading.sandbox import (
    HOME,
    NOGROUP,
    Limits,
    bwrap_command,
    isolation,
    kernel_env,
    limited_command,
    privilege_note,
    sandbox_uid,
)
from stage5.grading.view import build as course_view

MAX_RESTARTS = 4  # kernel deaths per notebook before the remaining cells are marked as not run
# One message from the kernel: ZeroMQ drops a larger one before reading it, and the kernel's outputs until its socket
# reconnects (the learner's own outputs only: marks come from the shell's reply and the grader's own checks). A
# print loop's lines reach the grader as one message per flush, so this is well above what a cell prints at once.
MAX_MESSAGE_BYTES = 128 * 2**20
CELL_OUTPUT_BYTES = 2 * 2**20  # output kept per cell (TruncateOutput later cuts each output to 20,000 characters)
NOTEBOOK_OUTPUT_BYTES = 16 * 2**20  # output kept for the whole notebook
FLOOD_BYTES = 256 * 2**20  # output one cell may send before the grader stops its kernel
# messages that rewrite the outputs kept under a display id (nbclient applies them to every place the id was shown)
DISPLAY_UPDATES = frozenset({"display_data", "update_display_data", "execute_result"})
OUTPUT_MESSAGES = DISPLAY_UPDATES | {"stream", "error"}  # what a cell's output budgets count
WALL_GRACE_S = 10.0  # after the wall-clock timeout's interrupt, the time a cell has to stop before it is killed
HOST_RESERVE_BYTES = min(2**30, psutil.virtual_memory().total // 20)  # available memory the grader keeps free
# Cell metadata where the grader records the errors it added itself (workflow.py reads its notes from there, never
# from an output's ename, which a learner's exception class can spell). Cleared from a submission before it runs.
GRADER_ERRORS = "stage5_grader_errors"


def _has_error(cell: NotebookNode) -> bool:
    return any(o.get("output_type") == "error" for o in cell.get("outputs", []))


def cpu_timeout_text(label: str, cpu_s: float, stopped: bool) -> str:
    """The one line a cell that ran out of CPU time records (workflow.py names the cell from its own reading)."""
    return f"{label} used more than {cpu_s:g} s of CPU time and was {'stopped' if stopped else 'interrupted'}"


def _grade_label(cell: NotebookNode, index: int) -> str:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or f"cell {index + 1}"


def output_bytes(content: Any) -> int:
    """The characters (a bound on the bytes kept) of the strings in an output message's content."""
    total, todo = 0, [content]
    while todo:
        value = todo.pop()
        if isinstance(value, str):
            total += len(value)
        elif isinstance(value, dict):
            todo.extend(value.values())
        elif isinstance(value, list):
            todo.extend(value)
    return total


class BoundedKernelClient(AsyncKernelClient):
    """A kernel client whose sockets refuse any message larger than :data:`MAX_MESSAGE_BYTES` (ZeroMQ's
    ``MAXMSGSIZE``: the sender is disconnected and the message never reaches Python)."""

    @default("context")
    def _bounded_context(self) -> zmq.asyncio.Context:
        self._created_context = True  # so the client destroys it when it goes
        ctx = zmq.asyncio.Context()
        ctx.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        return ctx


class SandboxKernelManager(AsyncKernelManager):
    """A kernel started inside the sandbox (or, where none can be built, only under the limits), in a memory
    cgroup of its own where the grader can make one."""

    limits = Instance(Limits, args=())
    client_factory = Type(BoundedKernelClient)
    scratch: Path
    uid: int | None = None  # the sandbox's own uid (a root grader), else None
    views: dict[Path, Path] | None = None  # the course modules with the exercise's off-limits functions cut out
    cgroup: SandboxCgroup | None = None
    cpu_seen = 0.0  # the largest CPU reading of the live sandbox: what a sandbox that died used, near enough

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        """The kernel's command line; called once the connection file is written (jupyter_client's provisioner)."""
        mode = isolation()[0]
        self.uid = sandbox_uid(mode)
        if self.uid is not None:  # the kernel, as its own uid, must create its sockets and read the connection file
            for path in (self.scratch, Path(self.connection_file)):
                os.chown(path, self.uid, NOGROUP)
        home = HOME if mode == "bwrap" else str(self.scratch)
        cmd = limited_command(super().format_kernel_cmd(extra_arguments), self.limits, kernel_env(home), self.uid)
        if mode == "bwrap":
            cmd = bwrap_command(cmd, self.scratch, limits=self.limits, views=self.views)
        self.cgroup = SandboxCgroup.create(self.limits.sandbox_memory_bytes, self.limits.processes)
        return self.cgroup.enter_command(cmd) if self.cgroup else cmd

    def close_scratch(self) -> None:
        """Once the kernel is up, take back its socket folder: it may write only in its sized tmpfs mounts."""
        if self.uid is not None and isolation()[0] == "bwrap":
            os.chown(self.scratch, 0, 0)
            os.chmod(self.scratch, 0o755)

    def sandbox_processes(self) -> list[psutil.Process]:
        """The launched process (bwrap or the kernel) and everything below it."""
        proc = getattr(self.provisioner, "process", None)
        if proc is None or proc.poll() is not None:
            return []
        try:
            root = psutil.Process(proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def memory_bytes(self, procs: list[psutil.Process]) -> int:
        """What the sandbox holds: the resident memory of ``procs`` added up (shared pages count once per process:
        an upper bound), or what its cgroup holds where that is more (pages no process maps)."""
        total = 0
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.NoSuchProcess:
                continue
        return max(total, self.cgroup.held_bytes() if self.cgroup else 0)

    def cpu_seconds(self, procs: list[psutil.Process] | None = None) -> float:
        """CPU time used so far by every process in the sandbox (including finished children it waited for);
        ``procs``: the sandbox's processes when the caller has just listed them."""
        total = 0.0
        for p in self.sandbox_processes() if procs is None else procs:
            try:
                t = p.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
            except psutil.NoSuchProcess:
                continue
        self.cpu_seen = max(self.cpu_seen, total)
        return total

    def signal_kernel_process(self, sig: int) -> None:
        """Send ``sig`` to the kernel itself (inside bwrap, the innermost Python process)."""
        procs = self.sandbox_processes()
        kernels = [p for p in procs if "ipykernel" in " ".join(_cmdline(p))]
        for p in kernels[-1:] or procs[-1:]:
            try:
                p.send_signal(sig)
            except psutil.NoSuchProcess:
                pass

    def kill_sandbox(self) -> float:
        """SIGKILL everything: bwrap's process namespace then takes every remaining process with it, and the
        cgroup's kill takes whatever is left in the cgroup. Returns the CPU seconds the sandbox had used (the last
        reading, for a sandbox that died on its own).

        First adds what the sandbox used to :data:`USAGE`: killed processes are never waited for by the grader,
        so their CPU time would not reach ``getrusage(RUSAGE_CHILDREN)``."""
        procs = self.sandbox_processes()
        used = max(self.cpu_seconds(procs), self.cpu_seen)
        self.cpu_seen = 0.0  # counted once
        USAGE["cpu_s"] += used
        USAGE["peak_rss_bytes"] = max([USAGE["peak_rss_bytes"], *map(_peak_rss, procs)])
        for p in reversed(procs):
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        if self.cgroup:
            self.cgroup.kill()
        _wait_dead(procs)
        return used

    def remove_cgroup(self) -> None:
        if self.cgroup:
            self.cgroup.remove()

    def oom_kills(self) -> int:
        """How many processes of this sandbox the kernel's OOM killer stopped (its cgroup's hard limit)."""
        return self.cgroup.oom_kills() if self.cgroup else 0

    def out_of_memory(self) -> bool:
        """Whether the kernel's OOM killer stopped a process of this sandbox."""
        return self.oom_kills() > 0

    async def _async_interrupt_kernel(self) -> None:
        # the launched process is bwrap, which does not forward SIGINT: signal the kernel directly
        self.signal_kernel_process(signal.SIGINT)

    interrupt_kernel = _async_interrupt_kernel


def _wait_dead(procs: list[psutil.Process], limit_s: float = 10.0) -> None:
    """Return once every process is gone or a zombie: SIGKILL is delivered asynchronously, and on a busy machine a
    killed process can still be scheduled for a moment. ``limit_s`` only bounds the wait for a process the kernel
    cannot reap at once (in uninterruptible I/O); what is left then dies on its own."""
    deadline = time.monotonic() + limit_s
    for p in procs:
        while time.monotonic() < deadline:
            try:
                if p.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.01)


# What every sandbox this process ran has used, added up as each is killed (hub/measure_class.py reads it).
USAGE: dict[str, float] = {"cpu_s": 0.0, "peak_rss_bytes": 0}


def _peak_rss(p: psutil.Process) -> int:
    """The peak resident memory of ``p`` in bytes (Linux's VmHWM), or 0 where it cannot be read."""
    try:
        for line in Path(f"/proc/{p.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


class _CellWatch(threading.Thread):
    """One cell's limits, checked every 0.2 s: interrupt the kernel when the cell has used ``budget`` CPU seconds
    and kill the sandbox if it keeps going; kill it when what it holds passes the memory cap; kill it when the cell
    has waited ``wall_s`` + :data:`WALL_GRACE_S` (nbclient interrupts it at ``wall_s``); stop it when the machine's
    available memory falls under ``reserve`` bytes."""

    def __init__(self, km: SandboxKernelManager, budget: float, wall_s: float | None, reserve: int):
        super().__init__(daemon=True)
        self.km, self.budget, self.wall_s, self.reserve = km, budget, wall_s, reserve
        self.start_cpu = km.cpu_seconds()
        self.start_oom = km.oom_kills()
        self.started = time.monotonic()
        self.stop = threading.Event()
        self.over = False  # the cell used more than its CPU budget
        self.killed = False
        self.memory = 0  # what the sandbox held when it was killed for holding too much
        # the cgroup's hard limit stopped one of its processes: it passed the cap between two of this watch's looks
        # (a child the OOM killer picks, while the kernel lives on and the cell waits)
        self.oom = False
        self.waited = False  # killed after ignoring the wall-clock timeout's interrupt
        self.host_low = 0  # the machine's available bytes when the sandbox was stopped for the machine's sake

    def _kill(self) -> None:
        self.killed = True
        self.km.kill_sandbox()

    def run(self) -> None:
        interrupted_at = None
        cap = self.km.limits.sandbox_memory_bytes
        while not self.stop.wait(0.2):
            procs = self.km.sandbox_processes()
            held = self.km.memory_bytes(procs)
            if held > cap:
                self.memory = held
                return self._kill()
            if self.km.oom_kills() > self.start_oom:
                self.oom = True
                return self._kill()
            available = psutil.virtual_memory().available
            if available < self.reserve:
                self.host_low = available
                return self._kill()
            used = self.km.cpu_seconds(procs) - self.start_cpu
            if used > self.budget and interrupted_at is None:
                self.over, interrupted_at = True, used
                self.km.signal_kernel_process(signal.SIGINT)
            elif interrupted_at is not None and used > interrupted_at + 2 + 0.25 * self.budget:
                return self._kill()  # the interrupt did not stop it (a C call, or a caught KeyboardInterrupt)
            if self.wall_s and time.monotonic() - self.started > self.wall_s + WALL_GRACE_S:
                self.waited = True  # it ignored the interrupt nbclient sent at the wall-clock timeout
                return self._kill()


class _NotebookWatch(threading.Thread):
    """The whole notebook's bound, which no cell can ignore or outwait: wall-clock since grading began and CPU time
    of every sandbox it started (replays after kernel deaths and the grader's own checks included). Past either,
    it kills the current sandbox and sets ``expired`` to the reason; the grader runs nothing more."""

    def __init__(self, executor: SandboxedExecute, wall_s: float, cpu_s: float):
        super().__init__(daemon=True)
        self.executor, self.wall_s, self.cpu_s = executor, wall_s, cpu_s
        self.started = time.monotonic()
        self.stop = threading.Event()
        self.expired = ""

    def run(self) -> None:
        while not self.stop.wait(0.5):
            km = self.executor.km
            cpu = self.executor.spent_cpu_s + (km.cpu_seconds() if km is not None else 0.0)
            if time.monotonic() - self.started > self.wall_s:
                self.expired = f"the notebook ran out of its {self.wall_s:g} s of wall-clock time"
            elif cpu > self.cpu_s:
                self.expired = f"the notebook ran out of its {self.cpu_s:g} s of CPU time"
            if self.expired:
                if km is not None:
                    km.kill_sandbox()
                return


class HostMemoryLow(RuntimeError):
    """The grading machine ran low on memory while this notebook ran: not the learner's result; grade it again."""


class SandboxedExecute(Execute):
    """Execute a submission in a sandbox, one cell at a time, with per-cell CPU limits, a bound on the whole
    notebook and recovery from a dead kernel. Errors it adds have ``ename`` ``CellCPUTimeout``, ``KernelDied`` or
    ``NotebookTimeout`` and a one-line ``evalue``."""

    cell_cpu_s = Float(10.0, help="CPU seconds one cell may use").tag(config=True)
    memory_bytes = Integer(Limits.memory_bytes, help="address space per sandboxed process").tag(config=True)
    sandbox_memory_bytes = Integer(Limits.sandbox_memory_bytes,
                                   help="memory a sandbox may hold (its processes, or its cgroup)").tag(config=True)
    processes = Integer(Limits.processes, help="processes and threads of a whole sandbox").tag(config=True)
    tmp_bytes = Integer(Limits.tmp_bytes, help="size of the sandbox's /tmp").tag(config=True)
    home_bytes = Integer(Limits.home_bytes, help="size of the sandbox's working folder").tag(config=True)
    shm_bytes = Integer(Limits.shm_bytes, help="size of the sandbox's /dev/shm").tag(config=True)
    notebook_wall_s = Float(Limits.notebook_wall_s, help="wall-clock seconds for the whole notebook").tag(config=True)
    host_reserve_bytes = Integer(HOST_RESERVE_BYTES,
                                 help="available memory under which the machine stops a sandbox").tag(config=True)
    cell_output_bytes = Integer(CELL_OUTPUT_BYTES, help="output kept per cell").tag(config=True)
    notebook_output_bytes = Integer(NOTEBOOK_OUTPUT_BYTES, help="output kept per notebook").tag(config=True)
    flood_bytes = Integer(FLOOD_BYTES, help="output one cell may send before its kernel is stopped").tag(config=True)
    notebook_cpu_s = Float(0.0, help="CPU seconds for the whole notebook (0: 60 cells' worth, at least 600)"
                           ).tag(config=True)
    store_widget_state = Bool(False)  # a graded notebook keeps no widget state (a learner's can be gigabytes)
    _warned = False
    _asked_exit = False
    _assignment: str | None = None  # the assignment being graded (nbgrader's resources), for its course view

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs["kernel_manager_class"] = SandboxKernelManager
        super().__init__(*args, **kwargs)
        self.spent_cpu_s = 0.0  # CPU of this notebook's sandboxes that are gone (the watchdog adds the live one's)
        self._cell_bytes = self._kept_bytes = 0  # output bytes sent by the running cell, kept in the notebook
        self._cell_cut = self._flooded = self._replaying = self._wall_timeout = False

    def _limits(self) -> Limits:
        return Limits(cell_cpu_s=self.cell_cpu_s, memory_bytes=self.memory_bytes,
                      sandbox_memory_bytes=self.sandbox_memory_bytes, processes=self.processes,
                      tmp_bytes=self.tmp_bytes, home_bytes=self.home_bytes, shm_bytes=self.shm_bytes,
                      notebook_cpu_s=int(self.notebook_cpu_s or max(600, 60 * self.cell_cpu_s)),
                      notebook_wall_s=self.notebook_wall_s)

    def _watch(self) -> _CellWatch:
        watch = _CellWatch(self.km, self.cell_cpu_s, self._get_timeout(None), self.host_reserve_bytes)
        watch.start()
        self._cell_bytes, self._cell_cut, self._flooded, self._wall_timeout = 0, False, False, False
        return watch

    def preprocess(self, nb: NotebookNode, resources: Any = None, km: Any = None):
        mode, why = isolation()
        if mode != "bwrap" and not SandboxedExecute._warned:
            SandboxedExecute._warned = True
            drop = privilege_note(mode) or ("the kernel runs as an unprivileged uid of its own"
                                            if sandbox_uid(mode) is not None else "the kernel runs as this user")
            msg = (f"WARNING: learner notebooks run WITHOUT isolation ({why}). They can read every file {drop} can, "
                   "which may include solutions/ and the gradebook; the environment is still cleared to an "
                   "allow-list and the limits apply, but not the sized /tmp and working folder. Install "
                   "bubblewrap 0.8 or later to grade safely.")
            self.log.warning(msg)
            warnings.warn(msg, RuntimeWarning, stacklevel=2)
        from nbclient import NotebookClient

        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        for c in self.nb.cells:  # a submission's own copy of the grader's record is the learner's text: drop it
            c.get("metadata", {}).pop(GRADER_ERRORS, None)
        self.nb.metadata.pop("widgets", None)  # nor its own widget state
        self.kernel_name = "python3"  # never the kernel the submission's metadata asks for
        self._assignment = ((resources or {}).get("nbgrader") or {}).get("assignment")  # nbgrader's, not the notebook's
        self.raise_on_iopub_timeout = False  # a long C call is not an error of the grader's
        self.spent_cpu_s, self._kept_bytes = 0.0, 0
        limits = self._limits()
        # what the kernel ran, in order, in the current kernel's lifetime: (cell index, source), replayed after a
        # death. A test cell's entry is its source without the hidden block: the hidden code never reaches a kernel.
        done: list[tuple[int, str]] = []
        restarts = 0
        host = HostChecks(self.nb.cells, self._ask, instructor_cells(resources))  # runs only the gradebook's cells
        nbwatch = _NotebookWatch(self, limits.notebook_wall_s, limits.notebook_cpu_s)
        # whatever escapes the loop, the sandbox is killed before its folder goes (no kernel outlives its notebook)
        with tempfile.TemporaryDirectory(prefix="stage5-sandbox-") as tmp, contextlib.ExitStack() as stop:
            stop.callback(self._stop)
            stop.callback(nbwatch.stop.set)
            nbwatch.start()
            index = 0
            while index < len(self.nb.cells):
                cell = self.nb.cells[index]
                if cell.cell_type != "code" or not cell.source.strip():
                    index += 1
                    continue
                if not nbwatch.expired and (self.km is None or self.kc is None):
                    try:
                        self._start(Path(tmp), done)
                    except Exception:
                        if not nbwatch.expired:  # a start that failed for the grader's reasons: retried later
                            raise
                if nbwatch.expired:
                    self._error(cell, "NotebookTimeout", f"not run: {nbwatch.expired}", stopped=True)
                    index += 1
                    continue
                watch = self._watch()
                self._asked_exit = False
                split = host.split(cell)  # (what the kernel runs, the hidden checks the grader runs) or None
                original = cell.source
                ran = split[0] if split else original
                verdict = None
                try:
                    cell.source = ran
                    self.execute_cell(cell, index, store_history=True)
                    died = "it stopped (exit() or quit() in this cell)" if self._asked_exit else None
                    if split and not died and not watch.over and not _has_error(cell):
                        verdict = host.run(split[1])
                except DeadKernelError:
                    died = self._death_reason()
                finally:
                    cell.source = original
                    watch.stop.set()
                    watch.join()
                if watch.host_low:
                    raise HostMemoryLow(f"the grading machine had {watch.host_low / 2**20:.0f} MiB of memory left "
                                        f"(under its reserve of {self.host_reserve_bytes / 2**20:.0f} MiB)")
                if verdict and not watch.over and not nbwatch.expired:
                    ename, _, evalue = verdict.partition(": ")
                    self._error(cell, ename, evalue, stopped=host.refused)
                died = self._record_stop(cell, _grade_label(cell, index), watch, died, nbwatch.expired, limits)
                if died:
                    self._stop()
                    restarts += 1
                    if restarts > MAX_RESTARTS and not nbwatch.expired:
                        for rest in self.nb.cells[index + 1:]:
                            if rest.cell_type == "code" and rest.source.strip():
                                self._error(rest, "KernelDied", "not run: the kernel died too many times")
                        break
                else:
                    done.append((index, ran))
                index += 1
            self._stop()
        return self.nb, self.resources

    def _record_stop(self, cell: NotebookNode, label: str, watch: _CellWatch, died: str | None, expired: str,
                     limits: Limits) -> str | None:
        """Record on ``cell`` the one line saying why the grader stopped it or its kernel died, if either
        happened; returns why its sandbox must be replaced (None: the kernel lives on)."""
        if expired and (died or watch.killed):
            self._error(cell, "NotebookTimeout", f"{label} was stopped: {expired}", stopped=True)
        elif watch.over:
            cell.outputs = [o for o in cell.outputs if o.get("output_type") != "error"]
            self._error(cell, "CellCPUTimeout",
                        cpu_timeout_text(label, self.cell_cpu_s, stopped=bool(watch.killed or died)))
        elif watch.memory or watch.oom or (died and self.km is not None and self.km.out_of_memory()):
            held = (f"{watch.memory / 2**30:.1f} GiB" if watch.memory
                    else "more than its memory limit (the kernel's OOM killer stopped one of them)")
            self._error(cell, "KernelDied", f"the kernel died in {label}: its processes together held {held}, "
                        f"over the sandbox's {limits.sandbox_memory_bytes / 2**30:g} GiB", stopped=True)
            return died or "memory"
        elif watch.waited or self._wall_timeout:
            cell.outputs = [o for o in cell.outputs if o.get("ename") != "CellTimeoutError"]  # nbclient's reply
            self._error(cell, "CellWallTimeout", f"{label} waited more than {self._get_timeout(None):g} s "
                        "(wall-clock) without finishing and was stopped", stopped=True)
            return died or "waited"
        elif self._flooded:
            self._error(cell, "KernelDied", f"the kernel was stopped in {label}: it sent more than "
                        f"{self.flood_bytes / 2**20:g} MiB of output", stopped=True)
            return died or "output"
        elif died:
            self._error(cell, "KernelDied", f"the kernel died in {label}: {died}")
        return died or ("killed" if watch.killed else None)

    # ------------------------------------------------------------------------------------ kernel lifetime
    def _start(self, tmp: Path, replay: list[tuple[int, str]]) -> None:
        os.chmod(tmp, 0o711)  # a kernel dropped to its own uid must reach its scratch folder inside
        scratch = Path(tempfile.mkdtemp(dir=tmp))
        self.km = self.create_kernel_manager()
        self.km.limits = self._limits()
        self.km.scratch = scratch
        self.km.views = course_view(self._assignment)  # the exercise's off-limits functions are not in its kernel
        self.km.transport = "ipc"
        self.km.ip = str(scratch / "kernel")
        self.km.connection_file = str(scratch / "kernel.json")
        self.start_new_kernel(cwd=str(scratch))
        self.start_new_kernel_client()
        info = self.wait_for_reply(self.kc.kernel_info())
        self.km.close_scratch()
        self.nb.metadata["language_info"] = info["content"]["language_info"]
        self._replaying = True  # rebuild the state of a kernel that died, keeping none of these outputs
        try:
            for i, source in replay:
                graded = self.nb.cells[i]
                scratch_cell = copy.deepcopy(graded)
                scratch_cell.source = source  # what the kernel ran, never the stored cell (a test's hidden block)
                watch = self._watch()
                try:
                    self.execute_cell(scratch_cell, i, store_history=True)
                except DeadKernelError:
                    break  # a cell that ran fine once died on replay: go on with the state built so far
                finally:
                    self.nb.cells[i] = graded  # nbclient stores the cell it ran: keep the graded one, verdicts included
                    watch.stop.set()
                    watch.join()
                if watch.killed:
                    break
        finally:
            self._replaying = False

    def _ask(self, expression: str) -> str:
        """Evaluate ``expression`` in the learner's kernel (no output, no history); its value, which must be a
        string. Raises DeadKernelError when the kernel died meanwhile, ValueError for anything else."""
        msg_id = self.kc.execute("", silent=True, store_history=False, user_expressions={"r": expression})
        reply = self.wait_for_reply(msg_id)
        got = (reply or {}).get("content", {}).get("user_expressions", {}).get("r", {})
        text = got.get("data", {}).get("text/plain", "") if got.get("status") == "ok" else ""
        if not text or len(text) > 4 * MAX_REPLY_CHARS:
            raise ValueError("no answer from the kernel")
        value = ast.literal_eval(text)
        if not isinstance(value, str):
            raise ValueError("the kernel's answer is not a string")
        return value

    async def _async_handle_timeout(self, timeout: int, cell: NotebookNode | None = None):
        """nbclient's wall-clock timeout (it interrupts the kernel and answers with an error reply), remembered:
        the kernel may still be running the cell, so the grader stops its sandbox and starts a fresh one."""
        self._wall_timeout = True
        return await super()._async_handle_timeout(timeout, cell)

    def on_cell_executed(self, **kwargs: Any) -> None:
        super().on_cell_executed(**kwargs)
        payload = kwargs["execute_reply"]["content"].get("payload", [])
        if any(p.get("source") == "ask_exit" for p in payload):
            self._asked_exit = True  # ipykernel answers exit() with a request to its front end to shut it down

    # ------------------------------------------------------------------------------------ what the kernel sends
    def process_message(self, msg: dict[str, Any], cell: NotebookNode, cell_index: int):
        """Every message the kernel sends counts towards the cell's flood limit before nbclient sees it; a display
        update (``update_display_data``, or ``display_data``/``execute_result`` naming a display id already shown)
        rewrites every output kept under that id, so it is charged to the budgets once per place it would fill,
        and refused (nothing changes, one note says so) past them or while a dead kernel's cells are replayed.
        nbclient applies such updates before :meth:`output` is called, so they are judged here."""
        content = msg.get("content")
        self._sent(output_bytes(content), msg.get("msg_type"))
        transient = content.get("transient") if isinstance(content, dict) else None
        display_id = transient.get("display_id") if isinstance(transient, dict) else None
        if display_id and msg.get("msg_type") in DISPLAY_UPDATES:
            places = self._display_id_map.get(display_id, {}) if isinstance(display_id, str) else {}
            cost = output_bytes(content) * sum(len(p) for p in places.values())
            if cost and (self._replaying or not self._within(cost)):
                if not self._replaying:
                    self._cut(cell.outputs)
                # nbclient must neither apply the update nor record a new place for the id
                msg = {**msg, "content": {**content, "transient": {}}}
            elif cost:
                self._kept_bytes += cost
        return super().process_message(msg, cell, cell_index)

    def _sent(self, size: int, msg_type: Any) -> None:
        """Count ``size`` bytes sent by the running cell; past ``flood_bytes`` its kernel is stopped."""
        if msg_type not in OUTPUT_MESSAGES:  # status, execute_input, widget messages (dropped unread)
            return
        self._cell_bytes += size
        if self._cell_bytes > self.flood_bytes and not self._flooded and self.km is not None:
            self._flooded = True
            self.km.kill_sandbox()

    def _within(self, size: int) -> bool:
        """Whether ``size`` more bytes may be kept (the cell's sends so far, the notebook's kept output)."""
        return self._cell_bytes <= self.cell_output_bytes and self._kept_bytes + size <= self.notebook_output_bytes

    def _cut(self, outs: list) -> None:
        """The one note of a cell whose output the grader stopped keeping."""
        if not self._cell_cut:
            self._cell_cut = True
            outs.append(NotebookNode(output_type="stream", name="stdout", text=(
                f"\n... output truncated: past {self.cell_output_bytes / 2**20:g} MiB in this cell or "
                f"{self.notebook_output_bytes / 2**20:g} MiB in the notebook, the grader kept no more ...\n")))

    def output(self, outs: list, msg: dict[str, Any], display_id: str | None, cell_index: int):
        """nbclient's output, within the budgets: past ``cell_output_bytes`` sent by this cell or
        ``notebook_output_bytes`` kept in the notebook, outputs are dropped (one note says so). (The flood limit
        was counted in :meth:`process_message`.)"""
        if self._replaying:
            return None
        size = output_bytes(msg.get("content"))
        if not self._within(size):
            self._cut(outs)
            return None
        self._kept_bytes += size
        return super().output(outs, msg, display_id, cell_index)

    def handle_comm_msg(self, outs: list, msg: dict[str, Any], cell_index: int) -> None:
        """Widget messages are not kept (no widget state, no output widgets): grading needs none of them."""

    def _stop(self) -> None:
        km = self.km
        if km is None:
            return
        try:
            self.spent_cpu_s += km.kill_sandbox()
            self._cleanup_kernel()
        except Exception:  # noqa: BLE001 - a dead sandbox may fail to shut down cleanly; it is gone either way
            pass
        finally:
            km.remove_cgroup()
        self.km = self.kc = None

    def _death_reason(self) -> str:
        proc = getattr(getattr(self.km, "provisioner", None), "process", None)
        code = proc.poll() if proc is not None else None
        if code is None or code < 0 or code >= 128:
            sig = -code if code is not None and code < 0 else (code - 128 if code else 9)
            name = signal.Signals(sig).name if sig in {s.value for s in signal.Signals} else f"signal {sig}"
            return f"it was killed ({name}: the cell killed it, or it ran out of memory or CPU time)"
        if code == 0:
            return "it stopped (exit(), quit() or sys.exit() in this cell?)"
        return f"it exited with status {code}"

    @staticmethod
    def _error(cell: NotebookNode, ename: str, evalue: str, stopped: bool = False) -> None:
        """Record a one-line error of the grader's on ``cell``; ``stopped``: the grader stopped or refused part of
        the submission at its boundary (memory, output, a wait, the notebook's time, a reply it could not read),
        which ``make grade`` lists and reports in its exit status."""
        record = NotebookNode(ename=ename, evalue=evalue)
        if stopped:
            record["stopped"] = True
        cell.setdefault("metadata", NotebookNode()).setdefault(GRADER_ERRORS, []).append(record)
        cell.setdefault("outputs", []).append(NotebookNode(output_type="error", ename=ename, evalue=evalue,
                                                           traceback=[f"{ename}: {evalue}"]))
