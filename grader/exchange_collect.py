"""Collect from nbgrader's exchange (Formgrader's "Collect" on a JupyterHub) with the hub's identity rules.

nbgrader 0.9.6's default collect takes the learner from the folder's name (``<learner>+<assignment>+<time>+…``)
and only warns when another account owns it; it copies the folder with ``shutil.copytree``, which follows links.
On a hub every account may create any name in the inbound folder, so one learner could hand in under another's
name, or hand in a link to a file only the grader account can read (another learner's collected notebook) and
have it graded as their own. Here, as on one machine (``grader/collect.py``), a file's learner is decided by who
it is, not by what it is called:

* **The folder's owner is the learner it names.** A folder owned by another account (or naming no account on this
  machine) is refused, with the reason in the collect log; the named learner's own latest folder is collected.
* **Only plain files and folders the learner owns.** A link, a device, a FIFO or a socket anywhere in the
  submission, or a file another account owns, refuses the whole submission; nothing is followed. Files are opened
  with ``O_NOFOLLOW`` and checked on the open descriptor, so a link swapped in after the check is refused too.
* **Within the course's sizes.** ``CourseDirectory.max_file_size`` and ``max_dir_size`` (kB), and at most
  :data:`MAX_ENTRIES` files and folders; ``CourseDirectory.ignore`` and ``include`` apply as in nbgrader.
* **The time is the exchange's.** A submission's time is when it arrived, by the file system's clock: the latest
  inode-change time (ctime) of its folder and files, which no learner can set back (setting a file's times sets
  its ctime to now). The folder name's time and the learner's ``timestamp.txt`` are claims: the collected
  ``timestamp.txt`` holds the arrival, the claim is kept beside it in ``timestamp_claimed.txt``, and a claim more
  than :data:`CLAIM_SLACK_S` away is logged. The latest folder per learner, and the due date, go by arrival.
* **Taken in as ``make grade`` takes it** (``intake.py``): a notebook whose grading metadata was changed is graded on
  the release's grading cells with the learner's answers, and the collect log says so.

``ExchangeCollect.check_owner = False`` (nbgrader's own switch, for a hub whose accounts all share one uid, as on
Zero to JupyterHub's default image) turns the owner rules off; links and special files are refused all the same.
Every refusal is logged as ``refused <folder>: <why>`` and listed in :attr:`OwnerCheckedCollect.refused`.
"""

from __future__ import annotations

import fnmatch
import json
import os
import pwd
import shutil
import stat
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

from collect import printable
from intake import InvalidSubmission, prepare, write_notebook
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.utils import check_mode

MAX_ENTRIES = 1000  # files and folders in one submission (an exercise hands in one notebook)
CLAIM_SLACK_S = 300  # ExchangeSubmit names the folder and writes timestamp.txt seconds before the copy lands
CLAIMED = "timestamp_claimed.txt"  # beside the collected timestamp.txt: the time the learner's own files gave
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)  # a FIFO must not block
_OPEN_DIR = _OPEN | os.O_DIRECTORY


class Refused(Exception):
    """Why a submission folder is not collected (one line; names only the submission's own paths)."""


def _uid_of(name: str) -> int | None:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


class OwnerCheckedCollect(ExchangeCollect):
    """nbgrader's collect with the owner and plain-file rules of the module docstring."""

    refused: list[tuple[str, str]]

    def init_src(self) -> None:
        """The latest folder per learner that passes :meth:`check`, before the due date where nbgrader would."""
        self.refused = []
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.course_path, "inbound")
        if not os.path.isdir(self.inbound_path):
            self.fail(f"Course not found: {self.inbound_path}")
        if not check_mode(self.inbound_path, read=True, execute=True):
            self.fail(f"You don't have read permissions for the directory: {self.inbound_path}")
        wanted = self.coursedir.student_id or "*"
        pattern = f"{wanted}+{self.coursedir.assignment_id}+*"
        records = []
        for name in sorted(os.listdir(self.inbound_path)):
            if not fnmatch.fnmatchcase(name, pattern):
                continue
            if len(name.rsplit("+", 3)) < 3:
                self._refuse(name, "not an nbgrader submission folder name")
                continue
            try:
                record = self._path_to_record(os.path.join(self.inbound_path, name))
            except Exception:  # noqa: BLE001 - a name whose time nbgrader cannot read is refused, not fatal
                self._refuse(name, "its name holds no time nbgrader can read")
                continue
            try:
                self.check(Path(self.inbound_path) / name, record["username"])
            except Refused as why:
                self._refuse(name, str(why))
                continue
            # the arrival, by the file system's clock, replaces the name's time; the name's is the learner's claim
            record["claimed"], record["timestamp"] = record["timestamp"], arrival(Path(self.inbound_path) / name)
            records.append(record)
        groups = defaultdict(list)
        for record in records:
            groups[record["username"]].append(record)
        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            try:
                self.duedate = gb.find_assignment(self.coursedir.assignment_id).duedate
            except MissingEntry:
                self.duedate = None
        self.src_records = []
        for group in groups.values():
            latest = self._sort_by_timestamp(group)
            if self.duedate is not None and self.before_duedate:
                latest = [r for r in latest if r["timestamp"] <= self.duedate] or latest
            self.src_records.append(latest[0])

    def _refuse(self, name: str, why: str) -> None:
        self.refused.append((printable(name), why))
        self.log.error("refused %s: %s", printable(name), why)

    def _owner(self, learner: str) -> int | None:
        """The uid that must own ``learner``'s files, or None where ownership is not checked."""
        if not self.check_owner:
            return None
        uid = _uid_of(learner)
        if uid is None:
            raise Refused(f"no account named {printable(learner)} on this machine hands in here")
        return uid

    def check(self, folder: Path, learner: str) -> None:
        """Raise :class:`Refused` unless ``folder`` is ``learner``'s own submission of plain files (the walk that
        :meth:`do_copy` repeats on open descriptors)."""
        self._walk(folder, learner, None)

    def do_copy(self, src: str, dest: str, log=None) -> None:
        """Copy ``src`` to ``dest`` file by file from descriptors opened without following links, checking each
        as it is opened (``copy_files`` passes a folder :meth:`check` passed; the learner is its name's). A folder
        that fails now was changed during the collect: it is refused, and nothing of it is kept."""
        learner = os.path.basename(src).rsplit("+", 3)[0]
        try:
            self._walk(Path(src), learner, Path(dest))
        except Refused as why:
            self._refuse(os.path.basename(src), str(why))
            shutil.rmtree(dest, ignore_errors=True)
            return
        self._stamp(Path(dest), os.path.basename(src), learner)
        self._intake(Path(dest), learner)

    def _stamp(self, dest: Path, name: str, learner: str) -> None:
        """The collected ``timestamp.txt`` holds the arrival (:func:`arrival`), the learner's own claims go beside it
        in :data:`CLAIMED`, and a claim that disagrees is logged."""
        from collect import timestamp_text  # (imported here, beside the one use)

        record = next((r for r in self.src_records if r["filename"] == name), None)
        if record is None:
            return
        stamp = dest / "timestamp.txt"
        try:
            with open(stamp, "rb") as fh:
                own = fh.read(200).decode("utf-8", "replace").strip()
        except OSError:
            own = ""
        claims = {"the folder's name": record["claimed"]}
        try:
            from nbgrader.utils import parse_utc

            claims["its timestamp.txt"] = parse_utc(own) if own else None
        except Exception:  # noqa: BLE001 - a learner's text nbgrader cannot read is no time at all
            claims["its timestamp.txt"] = None
        arrived = record["timestamp"]
        stamp.write_text(timestamp_text(arrived.replace(tzinfo=timezone.utc).timestamp()))
        (dest / CLAIMED).write_text("".join(f"{k}: {printable(str(v))}\n" for k, v in claims.items()))
        off = [f"{k} says {v}" if v is not None else f"{k} holds no time" for k, v in claims.items()
               if v is None or abs((v - arrived).total_seconds()) > CLAIM_SLACK_S]
        if off:
            self.log.warning("%s: handed in at %s by the exchange's clock; %s: graded with the arrival time",
                             printable(learner), timestamp_text(arrived.replace(tzinfo=timezone.utc).timestamp()),
                             "; ".join(off))

    def _intake(self, dest: Path, learner: str) -> None:
        """Each collected notebook of the release's as ``make grade`` takes it in (``intake.prepare``): changed
        grading metadata restored onto the release's cells, each note logged. One that is no notebook stays as it
        is, and nbgrader's autograde reports it."""
        release = Path(self.coursedir.format_path(self.coursedir.release_directory, ".",
                                                  self.coursedir.assignment_id))
        for released in sorted(release.glob("*.ipynb")):
            notebook = dest / released.name
            if not notebook.is_file():
                continue
            who = f"{printable(learner)} {released.name}"
            try:
                nb, notes = prepare(notebook, json.loads(released.read_text()))
            except InvalidSubmission as why:
                self.log.error("%s: %s", who, why)
                continue
            try:
                write_notebook(notebook, nb)  # a new file, replacing the collected one only once it is whole
            except (OSError, ValueError) as why:
                self.log.error("%s: kept as collected, could not be taken in (%s)", who, type(why).__name__)
                continue
            for note in notes:
                self.log.warning("%s: %s", who, note)

    def _walk(self, folder: Path, learner: str, dest: Path | None) -> None:
        """Check (and, with ``dest``, copy) the submission in ``folder``; see the module docstring."""
        uid = self._owner(learner)
        max_file = 1000 * self.coursedir.max_file_size
        budget = {"bytes": 1000 * self.coursedir.max_dir_size, "entries": MAX_ENTRIES}
        try:
            top = os.open(folder, _OPEN_DIR)
        except OSError:
            raise Refused("the submission is not a folder (a link or a file)") from None
        try:
            self._folder(top, uid, Path(), dest, max_file, budget)
        finally:
            os.close(top)

    def _folder(self, fd: int, uid: int | None, rel: Path, dest: Path | None, max_file: int,
                budget: dict[str, int]) -> None:
        info = os.fstat(fd)
        if uid is not None and info.st_uid != uid:
            raise Refused(f"{printable(rel.as_posix()) if rel.parts else 'the submission folder'} belongs to another account "
                          f"({_account(info.st_uid)}), not the learner it names")
        if dest is not None:
            (dest / rel).mkdir(parents=True, exist_ok=True)
        for name in sorted(os.listdir(fd)):
            budget["entries"] -= 1
            if budget["entries"] < 0:
                raise Refused(f"more than {MAX_ENTRIES} files and folders")
            path = rel / name
            if any(fnmatch.fnmatch(name, glob) for glob in self.coursedir.ignore):
                continue
            mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
            if stat.S_ISLNK(mode):
                raise Refused(f"{printable(path.as_posix())} is a link: a submission holds plain files only")
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise Refused(f"{printable(path.as_posix())} is not a plain file")
            try:
                child = os.open(name, _OPEN_DIR if stat.S_ISDIR(mode) else _OPEN, dir_fd=fd)
            except OSError:  # swapped for a link (ELOOP) or something else since it was listed
                raise Refused(f"{printable(path.as_posix())} changed while it was collected") from None
            try:
                if stat.S_ISDIR(mode):
                    self._folder(child, uid, path, dest, max_file, budget)
                else:
                    self._file(child, uid, path, dest, max_file, budget)
            finally:
                os.close(child)

    def _file(self, fd: int, uid: int | None, rel: Path, dest: Path | None, max_file: int,
              budget: dict[str, int]) -> None:
        info = os.fstat(fd)
        shown = printable(rel.as_posix())
        if not stat.S_ISREG(info.st_mode):
            raise Refused(f"{shown} is not a plain file")
        if uid is not None and info.st_uid != uid:
            raise Refused(f"{shown} belongs to another account ({_account(info.st_uid)}), not the learner")
        include = self.coursedir.include
        if include and not any(fnmatch.fnmatch(rel.name, glob) for glob in include):
            return
        if info.st_size > max_file:
            self.log.warning("not collected, over CourseDirectory.max_file_size: %s", shown)
            return
        budget["bytes"] -= info.st_size
        if budget["bytes"] < 0:
            raise Refused("larger than CourseDirectory.max_dir_size")
        if dest is None:
            return
        with os.fdopen(os.dup(fd), "rb") as src, open(dest / rel, "wb") as out:
            left = info.st_size
            while left > 0:
                chunk = src.read(min(left, 2**20))
                if not chunk:
                    break
                out.write(chunk)
                left -= len(chunk)


def arrival(folder: Path) -> datetime:
    """When ``folder`` (and everything in it) arrived, as a naive UTC datetime (nbgrader's): the latest ctime of the
    folder and its entries, read without following links. A learner can move a ctime forward (any change sets it
    to now), never back."""
    latest = os.lstat(folder).st_ctime
    for root, dirs, files in os.walk(folder, followlinks=False):
        for entry in dirs + files:
            try:
                latest = max(latest, os.lstat(os.path.join(root, entry)).st_ctime)
            except OSError:
                continue
    return datetime.fromtimestamp(latest, timezone.utc).replace(tzinfo=None)


def _account(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"
