"""A seccomp filter for the sandboxed kernel: the system calls that make memory no process's resident set shows.

A file made by ``memfd_create`` (or ``memfd_secret``) and a System V shared-memory segment (``shmget``) hold pages
that belong to no process once they are unmapped, so the grader's sum of its processes' resident memory never sees
them (issue 38: 22 files of 192 MiB each held 4.1 GiB outside a 3 GiB cap). Where the machine has a memory cgroup
the grader can use, the cgroup counts such pages anyway (:mod:`.cgroup`); this filter closes the same door where it
has none. Each call fails with ``EPERM``, as a kernel without the feature would refuse it, and every other call is
allowed. System calls of another architecture (the i386 table through ``int 0x80`` on x86-64, the x32 table) are
refused whole, since their numbers differ and a filter by number would let them through.

Classic BPF, built here without libseccomp (one program of a dozen instructions; ``seccomp(2)``, ``prctl(2)``).
"""

from __future__ import annotations

import ctypes
import errno
import platform

# struct seccomp_data: int nr (offset 0), __u32 arch (offset 4)
_NR, _ARCH = 0, 4
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, ...
_RET_ALLOW = 0x7FFF0000  # SECCOMP_RET_ALLOW
_RET_ERRNO = 0x00050000  # SECCOMP_RET_ERRNO (the low 16 bits are the errno)
_X32_BIT = 0x40000000  # __X32_SYSCALL_BIT: the x32 ABI's numbers on x86-64
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2

# AUDIT_ARCH_* and the numbers of the refused calls, from the kernel's syscall tables
# (arch/x86/entry/syscalls/syscall_64.tbl; include/uapi/asm-generic/unistd.h for arm64)
ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, {"memfd_create": 319, "memfd_secret": 447, "shmget": 29}),
    "aarch64": (0xC00000B7, {"memfd_create": 279, "memfd_secret": 447, "shmget": 194}),
}
REFUSED = ("memfd_create", "memfd_secret", "shmget")


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


def supported(machine: str | None = None) -> bool:
    """Whether the filter knows this machine's system-call numbers."""
    return (machine or platform.machine()) in ARCHES


def program(machine: str | None = None) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions for ``machine`` (default: this one)."""
    machine = machine or platform.machine()
    arch, numbers = ARCHES[machine]
    refused = [numbers[name] for name in REFUSED]
    deny = _RET_ERRNO | errno.EPERM
    # layout: 0 ld arch; 1 arch?; 2 ld nr; [3 x32?]; one jeq per refused call; allow; deny
    body: list[tuple[int, int, int, int]] = [(_LD_W_ABS, 0, 0, _NR)]
    checks = [(_JGE_K, "deny", 0, _X32_BIT)] if machine == "x86_64" else []
    checks += [(_JEQ_K, "deny", 0, nr) for nr in refused]
    head = [(_LD_W_ABS, 0, 0, _ARCH), (_JEQ_K, 0, "deny", arch)]
    code = head + body + checks + [(_RET_K, 0, 0, _RET_ALLOW), (_RET_K, 0, 0, deny)]
    deny_at = len(code) - 1
    out = []
    for i, (op, jt, jf, k) in enumerate(code):  # jumps are relative to the next instruction
        jt = deny_at - i - 1 if jt == "deny" else jt
        jf = deny_at - i - 1 if jf == "deny" else jf
        out.append((op, jt, jf, k))
    return out


def install() -> None:
    """Install the filter on this process (inherited by everything it starts; it cannot be removed). Sets
    no_new_privs first, as an unprivileged process must. Raises OSError when the kernel refuses."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    code = program()
    filters = (_Filter * len(code))(*[_Filter(*ins) for ins in code])
    prog = _Program(len(code), filters)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.cast(ctypes.pointer(prog), ctypes.c_void_p), 0, 0):
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")
