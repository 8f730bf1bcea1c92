"""Issue 48, found case 5: the kernel attack surface inside the sandbox. The seccomp filter refuses new namespaces
(``unshare``, ``setns``, ``clone`` with a ``CLONE_NEW*`` flag; ``clone3``, whose flags it cannot read, answers
ENOSYS so glibc falls back to ``clone``), io_uring, the keyring, ``personality`` with unsafe flags and socket
families other than AF_UNIX/AF_INET/AF_INET6 (netlink only as NETLINK_ROUTE, which getifaddrs needs); threads, processes, Unix and IP sockets still work. Checked on the
program itself (a small classic-BPF interpreter, every architecture) and by one sandbox run that tries them all."""

from __future__ import annotations

import errno
import subprocess
import sys

import pytest
from grading_harness import REPO  # noqa: F401  (puts grader/ on the path)

from stage5.grading import sandbox, seccomp
from stage5.grading.sandbox import Limits, bwrap_command, isolation, limited_command

CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWNS = 0x10000000, 0x40000000, 0x20000
THREAD_FLAGS = 0x003D0F00  # what glibc's pthread_create passes to clone (CLONE_VM|CLONE_FS|...|CLONE_CHILD_CLEARTID)
FORK_FLAGS = 0x01200011  # what fork() passes (CLONE_CHILD_SETTID|CLONE_CHILD_CLEARTID|SIGCHLD)
AF_NETLINK, AF_PACKET, AF_VSOCK, AF_BLUETOOTH = 16, 17, 40, 31
NETLINK_AUDIT, NETLINK_KOBJECT_UEVENT, NETLINK_GENERIC = 9, 15, 16
READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE = 0x0400000, 0x0040000


def _verdict(machine: str, name: str, arg0: int = 0, arg2: int = 0) -> int:
    """0 (allowed) or the errno the filter answers for the call ``name`` with arguments ``arg0`` and ``arg2``."""
    arch, numbers = seccomp.ARCHES[machine]
    prog, acc, pc = seccomp.program(machine), 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        if code == 0x20:
            acc = {0: numbers[name], 4: arch, 16: arg0, 32: arg2}[k]
            pc += 1
        elif code in (0x15, 0x35, 0x45):
            hit = acc == k if code == 0x15 else acc >= k if code == 0x35 else bool(acc & k)
            pc += 1 + (jt if hit else jf)
        else:
            assert code == 0x06
            return 0 if k == 0x7FFF0000 else k & 0xFFFF


@pytest.mark.parametrize("machine", sorted(seccomp.ARCHES))
def test_the_program_refuses_the_attack_surface_and_keeps_what_a_kernel_needs(machine):
    refused = {("unshare", CLONE_NEWUSER): errno.EPERM, ("unshare", 0): errno.EPERM, ("setns", 0): errno.EPERM,
               ("clone", CLONE_NEWUSER | 17): errno.EPERM, ("clone", CLONE_NEWNET): errno.EPERM,
               ("clone", CLONE_NEWNS | FORK_FLAGS): errno.EPERM, ("clone3", 0): errno.ENOSYS,
               ("io_uring_setup", 8): errno.EPERM, ("io_uring_enter", 0): errno.EPERM,
               ("io_uring_register", 0): errno.EPERM, ("keyctl", 0): errno.EPERM, ("add_key", 0): errno.EPERM,
               ("request_key", 0): errno.EPERM, ("personality", READ_IMPLIES_EXEC): errno.EPERM,
               ("personality", ADDR_NO_RANDOMIZE): errno.EPERM,
               ("socket", AF_NETLINK, NETLINK_AUDIT): errno.EAFNOSUPPORT,
               ("socket", AF_NETLINK, NETLINK_KOBJECT_UEVENT): errno.EAFNOSUPPORT,
               ("socket", AF_NETLINK, NETLINK_GENERIC): errno.EAFNOSUPPORT, ("socket", AF_VSOCK): errno.EAFNOSUPPORT,
               ("socket", AF_PACKET): errno.EAFNOSUPPORT, ("socket", AF_BLUETOOTH): errno.EAFNOSUPPORT,
               ("socketpair", AF_NETLINK, NETLINK_AUDIT): errno.EAFNOSUPPORT}
    for (name, *args), want in refused.items():
        assert _verdict(machine, name, *args) == want, (machine, name, args)
    # getifaddrs() reads the (loopback-only) interfaces through NETLINK_ROUTE: libzmq aborts without it
    allowed = [("clone", THREAD_FLAGS), ("clone", FORK_FLAGS), ("personality", 0xFFFFFFFF), ("personality", 0),
               ("socket", 1), ("socket", 2), ("socket", 10), ("socketpair", 1), ("socket", AF_NETLINK, 0)]
    for name, *args in allowed:
        assert _verdict(machine, name, *args) == 0, (machine, name, args)


PROBE = r"""
import ctypes, errno, os, socket, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
NR = {'x86_64': dict(unshare=272, setns=308, io_uring_setup=425, keyctl=250, add_key=248, request_key=249,
                     personality=135, clone=56),
      'aarch64': dict(unshare=97, setns=268, io_uring_setup=425, keyctl=219, add_key=217, request_key=218,
                      personality=92, clone=220)}[os.uname().machine]
def call(name, *args):
    libc.syscall.restype = ctypes.c_long
    r = libc.syscall(ctypes.c_long(NR[name]), *[ctypes.c_ulong(a) for a in args])
    return 'refused ' + errno.errorcode.get(ctypes.get_errno(), '?') if r == -1 else f'ALLOWED {r}'
print('unshare-user', call('unshare', 0x10000000))
print('unshare-net', call('unshare', 0x40000000))
print('setns', call('setns', 0, 0))
print('clone-newuser', call('clone', 0x10000000 | 17, 0, 0, 0, 0))
print('io_uring_setup', call('io_uring_setup', 8, 0))
print('keyctl', call('keyctl', 0, 0, 0, 0, 0))
print('add_key', call('add_key', 0, 0, 0, 0, 0))
print('request_key', call('request_key', 0, 0, 0, 0))
print('personality-rie', call('personality', 0x0400000))
print('personality-query', 'ok' if call('personality', 0xFFFFFFFF).startswith('ALLOWED') else 'BROKEN')
for fam, proto, label in ((16, 9, 'netlink-audit'), (16, 15, 'netlink-uevent'), (40, 0, 'vsock'),
                          (17, 0, 'packet')):
    try:
        socket.socket(fam, socket.SOCK_RAW if fam != 40 else socket.SOCK_STREAM, proto).close()
        print('socket-' + label, 'ALLOWED')
    except OSError as e:
        print('socket-' + label, 'refused', errno.errorcode.get(e.errno, '?'))
a, b = socket.socketpair(socket.AF_UNIX)
socket.socket(socket.AF_INET).close(); socket.socket(socket.AF_INET6).close()
t = threading.Thread(target=lambda: None); t.start(); t.join()
print('works', subprocess.run(['true']).returncode, os.fork and 'fork')
"""


@pytest.mark.skipif(isolation()[0] != "bwrap", reason=f"no sandbox here: {isolation()[1]}")
@pytest.mark.skipif(not seccomp.supported(), reason="the filter knows x86-64 and arm64 only")
def test_each_route_is_refused_inside_the_sandbox(tmp_path):
    limits = Limits()
    cmd = bwrap_command(limited_command([sys.executable, "-c", PROBE], limits), tmp_path, limits=limits)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    for name in ("unshare-user", "unshare-net", "setns", "clone-newuser", "io_uring_setup", "keyctl", "add_key",
                 "request_key", "personality-rie"):
        assert got[name] == "refused EPERM", (name, got)
    for name in ("socket-netlink-audit", "socket-netlink-uevent", "socket-vsock", "socket-packet"):
        assert got[name] == "refused EAFNOSUPPORT", (name, got)
    assert got["personality-query"] == "ok"
    assert got["works"] == "0 fork"  # threads, a subprocess (clone3 falls back to clone), Unix and IP sockets


def test_disable_userns_is_asked_where_the_sandbox_has_a_user_namespace(monkeypatch, tmp_path):
    """bubblewrap's --disable-userns needs --unshare-user (bubblewrap.c), which only a non-root grader uses."""
    monkeypatch.setattr(sandbox, "bwrap_has", lambda option: option == "--disable-userns")
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    cmd = bwrap_command(["true"], tmp_path, readable=[])
    assert "--unshare-user" in cmd and "--disable-userns" in cmd
    monkeypatch.setattr(sandbox, "bwrap_has", lambda option: False)  # an older bwrap: not asked for
    assert "--disable-userns" not in bwrap_command(["true"], tmp_path, readable=[])
