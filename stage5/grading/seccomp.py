"""A seccomp filter for the sandboxed kernel: the system calls a Python kernel with numpy and torch never needs and
a learner could use against the grading machine.

* Memory no process's resident set shows: a file made by ``memfd_create`` (or ``memfd_secret``) and a System V
  shared-memory segment (``shmget``) hold pages that belong to no process once unmapped, so the grader's sum of
  its processes' resident memory never sees them (issue 38: 22 files of 192 MiB each held 4.1 GiB outside a
  3 GiB cap). Where the machine has a memory cgroup the grader can use, the cgroup counts them anyway
  (:mod:`.cgroup`); this filter closes the same door where it has none.
* The usual routes of kernel privilege-escalation bugs (issue 48): new namespaces (``unshare``, ``setns``, and
  ``clone`` with any ``CLONE_NEW*`` flag: a user namespace gives root inside it, then mounts and network
  namespaces), ``io_uring_setup``/``enter``/``register``, the kernel keyring (``keyctl``, ``add_key``,
  ``request_key``), ``personality`` with a flag that weakens the address space (``READ_IMPLIES_EXEC``,
  ``ADDR_NO_RANDOMIZE``, ...; reading it stays allowed), and sockets of any family but ``AF_UNIX``, ``AF_INET``
  and ``AF_INET6`` (``AF_VSOCK``, ``AF_PACKET``, ...: the sandbox's network namespace is empty), netlink
  included except its ``NETLINK_ROUTE`` protocol (see :data:`NETLINK_ROUTE`).
* ``clone3`` passes its flags in memory a filter cannot read, so it fails with ``ENOSYS``, as on a kernel that
  predates it: glibc then falls back to ``clone``, whose flags the filter reads.

Each refused call fails with ``EPERM`` (a socket family with ``EAFNOSUPPORT``), as a kernel without the feature
would refuse it, and every other call is allowed. System calls of another architecture (the i386 table through
``int 0x80`` on x86-64, the x32 table) are refused whole, since their numbers differ and a filter by number would
let them through.

Classic BPF, built here without libseccomp (one program of a few dozen instructions; ``seccomp(2)``,
``prctl(2)``).
"""

from __future__ import annotations

import ctypes
import errno
import platform

# struct seccomp_data: int nr (offset 0), __u32 arch (offset 4), __u64 instruction_pointer (8), __u64 args[6] (16):
# args[0]'s low 32 bits at offset 16 on the little-endian machines below
_NR, _ARCH, _ARG0, _ARG2 = 0, 4, 16, 32
# BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_JMP|BPF_JGE|BPF_K, BPF_JMP|BPF_JSET|BPF_K, BPF_RET|BPF_K
_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_ALLOW = 0x7FFF0000  # SECCOMP_RET_ALLOW
_RET_ERRNO = 0x00050000  # SECCOMP_RET_ERRNO (the low 16 bits are the errno)
_X32_BIT = 0x40000000  # __X32_SYSCALL_BIT: the x32 ABI's numbers on x86-64
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2

# AUDIT_ARCH_* and the numbers of the calls the filter looks at, from the kernel's syscall tables
# (arch/x86/entry/syscalls/syscall_64.tbl; include/uapi/asm-generic/unistd.h for arm64)
ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, {"memfd_create": 319, "memfd_secret": 447, "shmget": 29, "unshare": 272, "setns": 308,
                            "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
                            "keyctl": 250, "add_key": 248, "request_key": 249, "clone": 56, "clone3": 435,
                            "personality": 135, "socket": 41, "socketpair": 53}),
    "aarch64": (0xC00000B7, {"memfd_create": 279, "memfd_secret": 447, "shmget": 194, "unshare": 97, "setns": 268,
                             "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
                             "keyctl": 219, "add_key": 217, "request_key": 218, "clone": 220, "clone3": 435,
                             "personality": 92, "socket": 198, "socketpair": 199}),
}
# refused whatever their arguments
REFUSED = ("memfd_create", "memfd_secret", "shmget", "unshare", "setns", "io_uring_setup", "io_uring_enter",
           "io_uring_register", "keyctl", "add_key", "request_key")
# include/uapi/linux/sched.h: CLONE_NEWTIME, CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
# CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET (all in clone's low 32 bits)
CLONE_NAMESPACES = 0x80 | 0x20000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
# include/uapi/linux/personality.h: ADDR_NO_RANDOMIZE, FDPIC_FUNCPTRS, MMAP_PAGE_ZERO, ADDR_COMPAT_LAYOUT,
# READ_IMPLIES_EXEC, ADDR_LIMIT_32BIT, SHORT_INODE, WHOLE_SECONDS, STICKY_TIMEOUTS, ADDR_LIMIT_3GB
PERSONALITY_UNSAFE = (0x0040000 | 0x0080000 | 0x0100000 | 0x0200000 | 0x0400000 | 0x0800000 | 0x1000000
                      | 0x2000000 | 0x4000000 | 0x8000000)
PERSONALITY_QUERY = 0xFFFFFFFF  # personality(0xffffffff) reads the current persona, changing nothing
SOCKET_FAMILIES = (1, 2, 10)  # AF_UNIX, AF_INET, AF_INET6 (include/linux/socket.h)
# AF_NETLINK with protocol NETLINK_ROUTE only (include/uapi/linux/netlink.h): getifaddrs() reads the interfaces
# through it, and libzmq aborts the kernel when that fails (src/ip_resolver.cpp); in the sandbox's empty network
# namespace it shows only the loopback, and changing anything needs CAP_NET_ADMIN, which the kernel lacks.
# Every other netlink protocol (audit, uevents, netfilter, xfrm, generic, ...) is refused.
AF_NETLINK, NETLINK_ROUTE = 16, 0


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
    arch, nr = ARCHES[machine]
    # written with labels (a str jump target), resolved below: jumps are relative to the next instruction
    code: list[tuple[int, int | str, int | str, int]] = [
        (_LD_W_ABS, 0, 0, _ARCH), (_JEQ_K, 0, "deny", arch), (_LD_W_ABS, 0, 0, _NR)]
    if machine == "x86_64":
        code.append((_JGE_K, "deny", 0, _X32_BIT))
    code += [(_JEQ_K, "deny", 0, nr[name]) for name in REFUSED]
    code += [(_JEQ_K, "enosys", 0, nr["clone3"]), (_JEQ_K, "clone", 0, nr["clone"]),
             (_JEQ_K, "personality", 0, nr["personality"]), (_JEQ_K, "socket", 0, nr["socket"]),
             (_JEQ_K, "socket", 0, nr["socketpair"]), (_RET_K, 0, 0, _RET_ALLOW)]
    labels: dict[str, int] = {}
    labels["clone"] = len(code)
    code += [(_LD_W_ABS, 0, 0, _ARG0), (_JSET_K, "deny", "allow", CLONE_NAMESPACES)]
    labels["personality"] = len(code)
    code += [(_LD_W_ABS, 0, 0, _ARG0), (_JEQ_K, "allow", 0, PERSONALITY_QUERY),
             (_JSET_K, "deny", "allow", PERSONALITY_UNSAFE)]
    labels["socket"] = len(code)
    code += [(_LD_W_ABS, 0, 0, _ARG0)] + [(_JEQ_K, "allow", 0, family) for family in SOCKET_FAMILIES]
    code += [(_JEQ_K, "netlink", "no_family", AF_NETLINK)]
    labels["netlink"] = len(code)
    code += [(_LD_W_ABS, 0, 0, _ARG2), (_JEQ_K, "allow", "no_family", NETLINK_ROUTE)]
    for name, value in (("allow", _RET_ALLOW), ("deny", _RET_ERRNO | errno.EPERM),
                        ("no_family", _RET_ERRNO | errno.EAFNOSUPPORT), ("enosys", _RET_ERRNO | errno.ENOSYS)):
        labels[name] = len(code)
        code.append((_RET_K, 0, 0, value))
    out = []
    for i, (op, jt, jf, k) in enumerate(code):
        jt = labels[jt] - i - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - i - 1 if isinstance(jf, str) else jf
        if not (0 <= jt <= 255 and 0 <= jf <= 255):
            raise AssertionError("a seccomp jump out of range")  # classic BPF jumps forward, by at most 255
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
