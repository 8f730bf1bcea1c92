"""Let the trial hub's accounts reach the course's Python when the checkout lies in a private folder.

A clone in a folder only its owner may enter (``mktemp -d``, and many distributions' home folders, mode 0700)
leaves the hub's accounts unable to run the course's virtual environment: ``No module named 'nbgrader'``. Rather
than open that folder to everyone (``chmod o+x``), :func:`grant` adds one POSIX ACL entry per account to each
folder above the environment and the course that others cannot enter: ``user:<account>:--x``, the right to pass
through, not to list or read. :func:`revoke` takes those entries back (before the accounts are deleted).

The ACL is written as the kernel's ``system.posix_acl_access`` extended attribute (``linux/posix_acl_xattr.h``):
no ``setfacl`` needed. A file system without ACLs (or a folder root cannot change) is one line saying what to do.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from pathlib import Path

XATTR = "system.posix_acl_access"
VERSION = 2
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
UNDEFINED = 0xFFFFFFFF
EXECUTE = 1


class AccessError(RuntimeError):
    """The accounts cannot be let through; the message is one line naming the folder and what to change."""


def _read(path: Path) -> list[tuple[int, int, int]]:
    """The folder's access ACL as (tag, perm, id) entries (its mode bits when it has no ACL of its own)."""
    try:
        raw = os.getxattr(path, XATTR)
    except OSError as err:
        if err.errno not in (errno.ENODATA, errno.EOPNOTSUPP):
            raise
        mode = os.stat(path).st_mode
        return [(USER_OBJ, (mode >> 6) & 7, UNDEFINED), (GROUP_OBJ, (mode >> 3) & 7, UNDEFINED),
                (OTHER, mode & 7, UNDEFINED)]
    (version,) = struct.unpack_from("<I", raw)
    if version != VERSION:
        raise AccessError(f"{path}: an ACL of version {version}, not {VERSION}")
    return [struct.unpack_from("<HHI", raw, 4 + 8 * i) for i in range((len(raw) - 4) // 8)]


def _write(path: Path, entries: list[tuple[int, int, int]]) -> None:
    """Write ``entries`` back, with the mask the kernel requires beside named entries (the union of the group
    class's rights) or, with none left, as the plain mode bits."""
    base = [e for e in entries if e[0] not in (USER, GROUP, MASK)]
    named = sorted((e for e in entries if e[0] in (USER, GROUP)), key=lambda e: (e[0], e[2]))
    if named:
        group_class = next(p for t, p, _ in base if t == GROUP_OBJ)
        for _, perm, _ in named:
            group_class |= perm
        entries = sorted([*base, *named, (MASK, group_class, UNDEFINED)], key=lambda e: (e[0], e[2]))
    else:
        entries = sorted(base, key=lambda e: e[0])
    raw = struct.pack("<I", VERSION) + b"".join(struct.pack("<HHI", *e) for e in entries)
    os.setxattr(path, XATTR, raw)


def closed_folders(targets: list[Path]) -> list[Path]:
    """The folders above (and including) ``targets`` that others may not enter (no o+x), outermost first."""
    out: list[Path] = []
    for target in targets:
        target = target.resolve()
        for folder in [*reversed(target.parents), target]:
            try:
                mode = folder.stat().st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH and folder not in out:
                out.append(folder)
    return out


def checked(targets: object, uids: object) -> tuple[list[Path], list[int]]:
    """``targets`` (a list of paths, each a Path or a string) and ``uids`` (a list of account ids, integers an ACL
    entry can hold) as checked lists; anything else is one :class:`AccessError` line (issue 52: a bad uid raised
    ``struct.error``, a string for the list ``AttributeError``)."""
    if isinstance(targets, (str, bytes, Path)) or not isinstance(targets, (list, tuple)):
        raise AccessError(f"targets must be a list of folders (Path or str), got {type(targets).__name__} "
                          f"{str(targets)[:60]!r}")
    if not all(isinstance(t, (str, Path)) and str(t) and "\0" not in str(t) for t in targets):
        raise AccessError("every target must be a folder's path (a non-empty Path or str without NUL bytes)")
    if isinstance(uids, (str, bytes)) or not isinstance(uids, (list, tuple)):
        raise AccessError(f"uids must be a list of account ids, got {type(uids).__name__} {str(uids)[:60]!r}")
    for uid in uids:
        if not isinstance(uid, int) or isinstance(uid, bool) or not 0 <= uid < UNDEFINED:
            raise AccessError(f"every uid must be an account id, an integer in [0, {UNDEFINED - 1}], got {uid!r}")
    return [Path(t) for t in targets], list(uids)


def grant(targets: list[Path], uids: list[int]) -> list[Path]:
    """Let ``uids`` pass through every folder above ``targets`` that others may not enter; returns those folders."""
    targets, uids = checked(targets, uids)
    folders = closed_folders(targets)
    for folder in folders:
        try:
            entries = _read(folder)
            have = {(t, i) for t, _, i in entries}
            entries += [(USER, EXECUTE, uid) for uid in uids if (USER, uid) not in have]
            _write(folder, [(t, p | EXECUTE, i) if t == USER and i in uids else (t, p, i) for t, p, i in entries])
        except OSError as err:
            raise AccessError(f"the hub's accounts cannot enter {folder} (mode {folder.stat().st_mode & 0o777:04o}) "
                              f"and an ACL could not let them through ({err.strerror}): run `chmod o+x {folder}` "
                              "or put the course in a folder others may enter") from None
    return folders


def revoke(targets: list[Path], uids: list[int]) -> None:
    """Take back what :func:`grant` gave ``uids`` on the folders above ``targets`` (other ACL entries stay)."""
    targets, uids = checked(targets, uids)
    for target in targets:
        target = target.resolve()
        for folder in [*reversed(target.parents), target]:
            try:
                entries = _read(folder)
                kept = [e for e in entries if not (e[0] == USER and e[2] in uids)]
                if len(kept) != len(entries):
                    _write(folder, kept)
            except (OSError, AccessError):
                continue
