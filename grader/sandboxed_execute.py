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
* When the kernel dies in a cell (killed, out of memory, ``exit()``), that cell gets a one-line error naming the
  reason, a fresh sandbox replays the cells that had run, and grading continues with the next cell: only the
  cell that died loses its marks.
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
from host_checks import HostChecks, instructor_cells
from jupyter_client.manager import AsyncKernelManager
from nbclient.exceptions import DeadKernelError
from nbformat import NotebookNode
from nbgrader.preprocessors.execute import Execute
from traitlets import Float, Instance, Integer

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

MAX_RESTARTS = 4  # kernel deaths per notebook before the remaining cells are marked as not run
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


class SandboxKernelManager(AsyncKernelManager):
    """A kernel started inside the sandbox (or, where none can be built, only under the limits)."""

    limits = Instance(Limits, args=())
    scratch: Path
    uid: int | None = None  # the sandbox's own uid (a root grader), else None

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
            cmd = bwrap_command(cmd, self.scratch, limits=self.limits)
        return cmd

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
        """Resident memory of ``procs`` added up (shared pages count once per process: an upper bound)."""
        total = 0
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.NoSuchProcess:
                continue
        return total

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

    def kill_sandbox(self) -> None:
        """SIGKILL everything: bwrap's process namespace then takes every remaining process with it.

        First adds what the sandbox used to :data:`USAGE`: killed processes are never waited for by the grader,
        so their CPU time would not reach ``getrusage(RUSAGE_CHILDREN)``."""
        procs = self.sandbox_processes()
        USAGE["cpu_s"] += self.cpu_seconds(procs)
        USAGE["peak_rss_bytes"] = max([USAGE["peak_rss_bytes"], *map(_peak_rss, procs)])
        for p in reversed(procs):
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        _wait_dead(procs)

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


class _CpuWatch(threading.Thread):
    """Interrupt the kernel when a cell has used ``budget`` CPU seconds; kill the sandbox if it keeps going."""

    def __init__(self, km: SandboxKernelManager, budget: float):
        super().__init__(daemon=True)
        self.km, self.budget = km, budget
        self.start_cpu = km.cpu_seconds()
        self.stop = threading.Event()
        self.over = False  # the cell used more than its budget
        self.killed = False
        self.memory = 0  # resident bytes of the whole sandbox when it was killed for using too much

    def run(self) -> None:
        interrupted_at = None
        cap = self.km.limits.sandbox_memory_bytes
        while not self.stop.wait(0.2):
            procs = self.km.sandbox_processes()
            resident = self.km.memory_bytes(procs)
            if resident > cap:
                self.memory, self.killed = resident, True
                self.km.kill_sandbox()
                return
            used = self.km.cpu_seconds(procs) - self.start_cpu
            if used > self.budget and interrupted_at is None:
                self.over, interrupted_at = True, used
                self.km.signal_kernel_process(signal.SIGINT)
            elif interrupted_at is not None and used > interrupted_at + 2 + 0.25 * self.budget:
                self.killed = True  # the interrupt did not stop it (a C call, or a caught KeyboardInterrupt)
                self.km.kill_sandbox()
                return


class SandboxedExecute(Execute):
    """Execute a submission in a sandbox, one cell at a time, with per-cell CPU limits and recovery from a dead
    kernel. Errors it adds have ``ename`` ``CellCPUTimeout`` or ``KernelDied`` and a one-line ``evalue``."""

    cell_cpu_s = Float(10.0, help="CPU seconds one cell may use").tag(config=True)
    memory_bytes = Integer(Limits.memory_bytes, help="address space per sandboxed process").tag(config=True)
    sandbox_memory_bytes = Integer(Limits.sandbox_memory_bytes,
                                   help="resident memory of all a sandbox's processes").tag(config=True)
    processes = Integer(Limits.processes, help="processes and threads of a whole sandbox").tag(config=True)
    tmp_bytes = Integer(Limits.tmp_bytes, help="size of the sandbox's /tmp").tag(config=True)
    home_bytes = Integer(Limits.home_bytes, help="size of the sandbox's working folder").tag(config=True)
    _warned = False
    _asked_exit = False

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs["kernel_manager_class"] = SandboxKernelManager
        super().__init__(*args, **kwargs)

    def _limits(self) -> Limits:
        return Limits(cell_cpu_s=self.cell_cpu_s, memory_bytes=self.memory_bytes,
                      sandbox_memory_bytes=self.sandbox_memory_bytes, processes=self.processes,
                      tmp_bytes=self.tmp_bytes, home_bytes=self.home_bytes,
                      notebook_cpu_s=max(600, int(60 * self.cell_cpu_s)))

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
        self.kernel_name = "python3"  # never the kernel the submission's metadata asks for
        self.raise_on_iopub_timeout = False  # a long C call is not an error of the grader's
        started = time.monotonic()
        done: list[int] = []  # cells that ran to the end in the current kernel's lifetime (replayed after a death)
        restarts = 0
        host = HostChecks(self.nb.cells, self._ask, instructor_cells(resources))  # runs only the gradebook's cells
        # whatever escapes the loop, the sandbox is killed before its folder goes (no kernel outlives its notebook)
        with tempfile.TemporaryDirectory(prefix="stage5-sandbox-") as tmp, contextlib.ExitStack() as stop:
            stop.callback(self._stop)
            index = 0
            while index < len(self.nb.cells):
                cell = self.nb.cells[index]
                if cell.cell_type != "code" or not cell.source.strip():
                    index += 1
                    continue
                if time.monotonic() - started > self._limits().notebook_wall_s:
                    self._error(cell, "NotebookTimeout", "not run: the notebook ran out of its total time")
                    index += 1
                    continue
                if self.km is None or self.kc is None:
                    self._start(Path(tmp), done)
                watch = _CpuWatch(self.km, self.cell_cpu_s)
                watch.start()
                self._asked_exit = False
                split = host.split(cell)  # (what the kernel runs, the hidden checks the grader runs) or None
                original = cell.source
                verdict = None
                try:
                    if split:
                        cell.source = split[0]
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
                if verdict and not watch.over:
                    ename, _, evalue = verdict.partition(": ")
                    self._error(cell, ename, evalue)
                label = _grade_label(cell, index)
                if watch.over:
                    cell.outputs = [o for o in cell.outputs if o.get("output_type") != "error"]
                    self._error(cell, "CellCPUTimeout",
                                cpu_timeout_text(label, self.cell_cpu_s, stopped=bool(watch.killed or died)))
                elif watch.memory:
                    self._error(cell, "KernelDied", f"the kernel died in {label}: its processes together used "
                                f"{watch.memory / 2**30:.1f} GiB, over the sandbox's "
                                f"{self._limits().sandbox_memory_bytes / 2**30:g} GiB")
                    died = died or "memory"
                elif died:
                    self._error(cell, "KernelDied", f"the kernel died in {label}: {died}")
                if died or watch.killed:
                    self._stop()
                    restarts += 1
                    if restarts > MAX_RESTARTS:
                        for rest in self.nb.cells[index + 1:]:
                            if rest.cell_type == "code" and rest.source.strip():
                                self._error(rest, "KernelDied", "not run: the kernel died too many times")
                        break
                else:
                    done.append(index)
                index += 1
            self._stop()
        self.set_widgets_metadata()
        return self.nb, self.resources

    # ------------------------------------------------------------------------------------ kernel lifetime
    def _start(self, tmp: Path, replay: list[int]) -> None:
        os.chmod(tmp, 0o711)  # a kernel dropped to its own uid must reach its scratch folder inside
        scratch = Path(tempfile.mkdtemp(dir=tmp))
        self.km = self.create_kernel_manager()
        self.km.limits = self._limits()
        self.km.scratch = scratch
        self.km.transport = "ipc"
        self.km.ip = str(scratch / "kernel")
        self.km.connection_file = str(scratch / "kernel.json")
        self.start_new_kernel(cwd=str(scratch))
        self.start_new_kernel_client()
        info = self.wait_for_reply(self.kc.kernel_info())
        self.km.close_scratch()
        self.nb.metadata["language_info"] = info["content"]["language_info"]
        for i in replay:  # rebuild the state of a kernel that died, without keeping these outputs
            scratch_cell = copy.deepcopy(self.nb.cells[i])
            watch = _CpuWatch(self.km, self.cell_cpu_s)
            watch.start()
            try:
                self.execute_cell(scratch_cell, i, store_history=True)
            except DeadKernelError:
                break  # a cell that ran fine once died on replay: go on with the state built so far
            finally:
                watch.stop.set()
                watch.join()

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

    def on_cell_executed(self, **kwargs: Any) -> None:
        super().on_cell_executed(**kwargs)
        payload = kwargs["execute_reply"]["content"].get("payload", [])
        if any(p.get("source") == "ask_exit" for p in payload):
            self._asked_exit = True  # ipykernel answers exit() with a request to its front end to shut it down

    def _stop(self) -> None:
        if self.km is None:
            return
        try:
            self.km.kill_sandbox()
            self._cleanup_kernel()
        except Exception:  # noqa: BLE001 - a dead sandbox may fail to shut down cleanly; it is gone either way
            pass
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
    def _error(cell: NotebookNode, ename: str, evalue: str) -> None:
        cell.setdefault("metadata", NotebookNode()).setdefault(GRADER_ERRORS, []).append(
            NotebookNode(ename=ename, evalue=evalue))
        cell.setdefault("outputs", []).append(NotebookNode(output_type="error", ename=ename, evalue=evalue,
                                                           traceback=[f"{ename}: {evalue}"]))
