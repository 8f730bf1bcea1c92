"""Whose file is which: sort an inbox into one submission per learner for one assignment, and read a roster.

The rules, as the README's instructor section states them:

* **Named for the assignment.** A notebook is collected for ``ex01`` only if ``ex01`` is a word of its file name
  (``alice_ex01.ipynb``, ``EX01-Bob.ipynb``), or, when its file name names no assignment, of the nearest folder or
  zip that names one (``alice/ex01.ipynb``, ``ex01/alice.ipynb``, ``alice_ex01.zip`` holding ``notebook.ipynb``).
  Every other file is listed as skipped, with the reason.
* **One id per person.** The learner id is what is left of that name once the assignment is taken out, as a
  Unicode slug: NFKC-normalised, case-folded, its runs of letters, digits and marks joined by ``_`` (so
  ``Carol_ex01``, ``carol-ex01`` and ``CAROL ex01`` are all ``carol``; ``Ωmega`` stays ``ωmega``, ``张伟`` stays
  ``张伟``). Ids longer than 64 characters are cut and end in a short hash of the whole slug.
* **Clashes are refused, never resolved.** Two different files that give the same id (a folder and a file, a zip
  member and a loose file, case or punctuation variants) are a clash: neither is graded until the instructor
  removes (or renames) the wrong one. Byte-identical copies are one submission.
* **The time is the inbox's.** A notebook's submission time is when its file (or the zip holding it) arrived in
  the inbox, by the file system's clock; a zip member's own date is the learner's claim, kept beside it
  (:attr:`Found.claimed`) and noted where the two disagree (:func:`claim_note`).
* **A learner's zip holds only their notebook.** A zip named for a learner (``eve_ex01.zip``) whose notebooks name
  another learner is refused whole, and eve is not graded until the instructor looks. A zip not named for a
  learner (``submissions.zip`` from an LMS) is a bulk download: each notebook in it is named by its own path.

nbgrader 0.9.6 uses the id as a folder name and inside a file glob (``CourseDirectory.student_id``), and its
exchange splits on ``+``: a slug holds no path separator, glob character, ``+``, ``,`` or space, and is never
empty, ``.`` or ``*``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import re
import struct
import time
import unicodedata
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path

MAX_ID_CHARS = 64
MAX_COMPARED_BYTES = 50 * 2**20  # files compared byte for byte to tell a copy from a clash
MAX_ROSTER_BYTES = 5 * 2**20
MAX_NAME_CHARS = 128  # nbgrader's gradebook columns for first and last names are String(128)
ROSTER_COLUMNS = ("id", "first_name", "last_name")
# how far a zip member's own date may stand from the zip's arrival before the line notes it: a zip's DOS dates
# carry no time zone (up to 26 h off), and a learner may zip a notebook a while before handing it in
CLAIM_SLACK_S = 2 * 86400


# ------------------------------------------------------------------------------------------------ names
def printable(text: str) -> str:
    """``text`` with every control, format, separator (but the space) and unassigned character written as a
    Python escape (``\\x1b``, ``\\x0a``, ``\\u202e``): a file name a learner chose, as ``make grade`` prints it and
    summary.csv stores it, can neither move the cursor, clear the screen, start a line of its own nor reverse the
    text after it. Applying it twice changes nothing more."""
    if all(ch == " " or unicodedata.category(ch)[0] not in "CZ" for ch in text):
        return text
    out = []
    for ch in text:
        if ch != " " and unicodedata.category(ch)[0] in "CZ":
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else
                       f"\\U{code:08x}")
        else:
            out.append(ch)
    return "".join(out)


def words(text: str) -> list[str]:
    """The runs of letters, digits and combining marks in ``text``, NFKC-normalised and case-folded."""
    text = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    out, word = [], []
    for ch in text:
        if unicodedata.category(ch)[0] in "LNM":
            word.append(ch)
        elif word:
            out.append("".join(word))
            word = []
    if word:
        out.append("".join(word))
    return out


def slug(text: str) -> str:
    """A learner id from free text: its words joined by ``_``; "" when it has none."""
    sid = "_".join(words(text))
    if len(sid) > MAX_ID_CHARS:
        sid = sid[: MAX_ID_CHARS - 9].rstrip("_") + "_" + hashlib.sha256(sid.encode()).hexdigest()[:8]
    return sid


def _stem(name: str) -> str:
    """A file or folder name without its extension and without a browser's " (1)" for a second download."""
    stem = name[: -len(Path(name).suffix)] if Path(name).suffix.lower() in (".ipynb", ".zip") else name
    return re.sub(r"\s*\(\d+\)$", "", stem)


def _find(seq: list[str], sub: list[str]) -> int:
    for i in range(len(seq) - len(sub) + 1):
        if seq[i: i + len(sub)] == sub:
            return i
    return -1


def _named_for(name: str, assignments: list[str]) -> tuple[str | None, str]:
    """(the assignment ``name`` names, or None; the id that is left once it is taken out). ``assignments`` are
    tried in order: the one being graded first, so a learner called "Clearing" is not taken for that exercise."""
    ws = words(_stem(name))
    for a in assignments:
        aw = words(a)
        i = _find(ws, aw) if aw else -1
        if i >= 0:
            return a, slug(" ".join(ws[:i] + ws[i + len(aw):]))
    return None, slug(" ".join(ws))


def _identify(chain: list[str], assignments: list[str]) -> tuple[str | None, str]:
    """(assignment, learner id) of a notebook whose file name and the folders (or zip) holding it are ``chain``,
    nearest first. The nearest name that names an assignment decides which; the id is what is left of it, or else
    the name just inside it (``ex01/alice.ipynb``), or else the nearest name outside it (``alice/ex01.ipynb``)."""
    named = [_named_for(part, assignments) for part in chain]
    k = next((i for i, (a, _) in enumerate(named) if a), None)
    if k is None:
        return None, ""
    which, sid = named[k]
    if not sid and k > 0:
        sid = named[k - 1][1]
    if not sid:
        sid = next((s for _, s in named[k + 1:] if s), "")
    return which, sid


def _order(assignment: str, assignments: list[str]) -> list[str]:
    others = sorted(set(assignments) - {assignment}, key=lambda a: (-len(words(a)), a))
    return [assignment, *others]


def student_id(label: str, assignment: str) -> str:
    """The learner id of a notebook at ``label`` (its path in the inbox) for ``assignment``; "" when no name is
    left once the assignment is taken out. ``ex01_alice.ipynb``, ``Alice-ex01.ipynb`` and ``alice/ex01.ipynb`` all
    give ``alice``."""
    which, sid = _identify(list(reversed(Path(label).parts)), [assignment])
    return sid if which else ""


# ------------------------------------------------------------------------------------------------ the inbox
@dataclass(frozen=True)
class Found:
    """One notebook in the inbox: a file, or a member of a zip."""

    label: str  # where the instructor finds it: "alice/alice_ex01.ipynb" or "eve_ex01.zip:bob_ex01.ipynb"
    path: Path  # the file, or the zip that holds it
    member: str | None  # the member's name in the zip
    size: int
    # when it arrived (POSIX seconds): the file's mtime in the inbox, or that of the zip holding it (set by
    # whoever put it there, never by a zip's contents)
    mtime: float
    problem: str = ""  # why its bytes cannot be read (a corrupt or encrypted zip member): graded as invalid
    claimed: float | None = None  # the learner's own date for it (a zip member's), kept beside the arrival

    def read(self) -> bytes:
        if self.member is None:
            return self.path.read_bytes()
        with zipfile.ZipFile(self.path) as zf:
            return zf.read(self.member)

    def sha256(self) -> str:
        return hashlib.sha256(self.read()).hexdigest()

    def materialise(self, folder: Path, max_bytes: int) -> Path:
        """A file with this notebook's bytes and mtime: the file itself, or the zip member written under
        ``folder``. A member over ``max_bytes`` is not read: a sparse file of its size stands for it, so the
        size check that follows refuses it without the grader reading it."""
        if self.member is None:
            return self.path
        target = folder / hashlib.sha256(self.label.encode()).hexdigest()[:16] / Path(self.member).name
        target.parent.mkdir(parents=True, exist_ok=True)
        if self.size > max_bytes:
            with target.open("wb") as fh:
                fh.truncate(self.size)
        else:
            target.write_bytes(self.read())
        os.utime(target, (self.mtime, self.mtime))
        return target


@dataclass
class Sorted:
    """An inbox sorted for one assignment."""

    learners: dict[str, Found] = field(default_factory=dict)  # id -> the one notebook to grade
    clashes: dict[str, list[Found]] = field(default_factory=dict)  # id -> the different files that claim it
    refused: dict[str, list[str]] = field(default_factory=dict)  # id -> why it is not graded (a zip's contents)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file, why) for files not collected
    copies: dict[str, list[str]] = field(default_factory=dict)  # id -> byte-identical copies not used

    def is_empty(self) -> bool:
        return not (self.learners or self.clashes or self.refused)


def _zip_mtime(info: zipfile.ZipInfo) -> float:
    """A zip member's date: the UTC time of its extended-timestamp field when present (Info-ZIP's 0x5455), else
    its DOS date read as this machine's local time (what ``unzip`` does: the format stores no time zone)."""
    extra = info.extra
    while len(extra) >= 4:
        tag, size = struct.unpack("<HH", extra[:4])
        body = extra[4: 4 + size]
        if tag == 0x5455 and len(body) >= 5 and body[0] & 1:
            return float(struct.unpack("<i", body[1:5])[0])
        extra = extra[4 + size:]
    try:
        return time.mktime(info.date_time + (0, 0, -1))
    except (OverflowError, ValueError):
        return 0.0


def _unreadable(found: Found) -> str:
    """Why a zip member's bytes cannot be read (bad CRC, encrypted, unknown compression), or "" when they can."""
    if found.size > MAX_COMPARED_BYTES:
        return ""  # not read at all: refused by size when collected
    try:
        found.read()
    except Exception as err:  # noqa: BLE001 - any failure to read one member is that member's, never the class's
        return f"could not be read from the zip ({type(err).__name__}: {str(err)[:120]})"
    return ""


def _visible(parts: tuple[str, ...]) -> bool:
    """Hidden files (``.gitkeep``, ``.ipynb_checkpoints/``) and macOS's ``__MACOSX`` are not submissions."""
    return not any(p.startswith(".") or p == "__MACOSX" for p in parts)


def entries(inbox: Path) -> list[Path]:
    """Every visible file in ``inbox`` (links are listed too, and refused later), without following links."""
    out = []
    for folder, dirs, files in os.walk(inbox):
        dirs[:] = sorted(d for d in dirs if _visible((d,)))
        rel = Path(folder).relative_to(inbox)
        out += [rel / f for f in sorted(files) if _visible((f,))]
        out += [rel / d for d in dirs if (Path(folder) / d).is_symlink()]
    return sorted(out)


def sort_inbox(inbox: Path, assignment: str, assignments: list[str]) -> Sorted:
    """Sort ``inbox`` for ``assignment`` (``assignments`` are all the course's assignment ids): see the module's
    docstring for the rules."""
    known = _order(assignment, assignments)
    out = Sorted()
    claims: dict[str, list[Found]] = {}
    for rel in entries(inbox):
        path, label = inbox / rel, printable(rel.as_posix())
        if path.is_symlink() or not path.is_file():
            out.skipped.append((label, "a link or special file, not a plain file"))
        elif path.suffix.lower() == ".ipynb":
            stat = path.stat()
            _claim(out, claims, list(reversed(rel.parts)), known, Found(label, path, None, stat.st_size,
                                                                        stat.st_mtime))
        elif path.suffix.lower() == ".zip":
            _sort_zip(out, claims, inbox, rel, known)
        else:
            out.skipped.append((label, "not a notebook (.ipynb) or a zip"))
    for sid, found in claims.items():
        if sid in out.refused:
            out.refused[sid].append("also handed in: " + ", ".join(f.label for f in found))
            continue
        distinct: dict[str, list[Found]] = {}
        for f in found:
            key = f.label if f.problem or f.size > MAX_COMPARED_BYTES else f.sha256()  # never a copy of another
            distinct.setdefault(key, []).append(f)
        if len(distinct) == 1:
            found = sorted(found, key=lambda f: (len(f.label), f.label))  # "alice_ex01" before "alice_ex01 (1)"
            out.learners[sid] = found[0]
            if len(found) > 1:
                out.copies[sid] = [f.label for f in found[1:]]
        else:
            out.clashes[sid] = found
    return out


def _claim(out: Sorted, claims: dict[str, list[Found]], chain: list[str], known: list[str], found: Found) -> None:
    """Record ``found`` (its file name and the names holding it in ``chain``, nearest first) as a claim on its
    learner's id, or as skipped."""
    which, sid = _identify(chain, known)
    if which != known[0]:
        out.skipped.append((found.label, f"named for {which}, not {known[0]}" if which else
                            f"not named for {known[0]} (name it <learner>_{known[0]}.ipynb)"))
    elif not sid:
        out.skipped.append((found.label, f"no learner's name in it (name it <learner>_{known[0]}.ipynb)"))
    else:
        claims.setdefault(sid, []).append(found)


def _sort_zip(out: Sorted, claims: dict[str, list[Found]], inbox: Path, rel: Path, known: list[str]) -> None:
    path, label = inbox / rel, printable(rel.as_posix())
    try:
        with zipfile.ZipFile(path) as zf:
            infos = [i for i in zf.infolist() if not i.is_dir() and _visible(Path(i.filename).parts)]
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        out.skipped.append((label, f"not a readable zip ({type(err).__name__})"))
        return
    arrived = path.stat().st_mtime  # the zip's arrival in the inbox: its members' own dates are the learner's
    zip_for, owner = _named_for(rel.name, known)
    owner = owner if zip_for else ""  # a zip named for no assignment is a bulk download, not one learner's
    outside = list(reversed(rel.parts))
    notebooks: list[tuple[list[str], Found]] = []
    foreign: list[str] = []
    for info in infos:
        member, shown = Path(info.filename), printable(info.filename)
        if member.suffix.lower() != ".ipynb":
            out.skipped.append((f"{label}:{shown}", "not a notebook (.ipynb)"))
            continue
        inside = list(reversed(member.parts))
        own = _identify(inside, known)[1]
        if owner and own and own != owner and _identify(inside + outside, known)[0] == known[0]:
            foreign.append(f"{shown} (named for {own})")  # only this assignment's notebooks count
        found = Found(f"{label}:{shown}", path, info.filename, info.file_size, arrived, claimed=_zip_mtime(info))
        notebooks.append((inside + outside, replace(found, problem=_unreadable(found))))
    if foreign:
        out.refused.setdefault(owner, []).append(
            f"{label} is {owner}'s zip but holds another learner's notebook: {', '.join(foreign)}; nothing in it "
            "is graded")
        return
    for chain, found in notebooks:
        _claim(out, claims, chain, known, found)


# ------------------------------------------------------------------------------------------------ the roster
class RosterError(ValueError):
    """A roster the grader cannot use; the message is one line that says what is wrong and what is accepted."""


@dataclass(frozen=True)
class Learner:
    id: str
    first_name: str
    last_name: str


def read_roster(path: str | Path) -> dict[str, Learner]:
    """The learners of a roster CSV (UTF-8, header ``id,first_name,last_name``; other columns are ignored), by id.

    Ids are slugged like file names, so ``Alice`` in the roster is the ``alice`` of ``Alice_ex01.ipynb``."""
    path = Path(path)
    where = f"roster {path}"
    if not path.is_file():
        raise RosterError(f"{where}: no such file (give a CSV file with the columns {','.join(ROSTER_COLUMNS)})")
    raw = path.read_bytes()
    if len(raw) > MAX_ROSTER_BYTES:
        raise RosterError(f"{where}: {len(raw) / 2**20:.0f} MiB is too large for a roster (at most 5 MiB)")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise RosterError(f"{where}: not UTF-8 text (byte {err.start}); save it as CSV UTF-8") from None
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as err:
        raise RosterError(f"{where}: not a CSV file ({err})") from None
    if not rows:
        raise RosterError(f"{where}: empty; the first line must be {','.join(ROSTER_COLUMNS)}")
    header = [h.strip().lower() for h in rows[0]]
    missing = [c for c in ROSTER_COLUMNS if c not in header]
    if missing:
        raise RosterError(f"{where}: the first line must name the columns {','.join(ROSTER_COLUMNS)} "
                          f"(missing {', '.join(missing)}; found {','.join(header)[:200]})")
    col = {c: header.index(c) for c in ROSTER_COLUMNS}
    learners: dict[str, Learner] = {}
    lines: dict[str, int] = {}
    for n, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise RosterError(f"{where} line {n}: {len(row)} fields, the header has {len(header)}")
        given = row[col["id"]].strip()
        sid = slug(given)
        if not sid:
            raise RosterError(f"{where} line {n}: the id {given!r} has no letter or digit")
        if sid in lines:
            raise RosterError(f"{where} line {n}: the id {given!r} is learner {sid!r} again (line {lines[sid]})")
        first, last = row[col["first_name"]].strip(), row[col["last_name"]].strip()
        for what, value in (("first_name", first), ("last_name", last)):
            if len(value) > MAX_NAME_CHARS or any(unicodedata.category(ch) == "Cc" for ch in value):
                raise RosterError(f"{where} line {n}: {what} must be one line of at most {MAX_NAME_CHARS} "
                                  "characters")
        learners[sid], lines[sid] = Learner(sid, first, last), n
    if not learners:
        raise RosterError(f"{where}: no learners below the header")
    return learners


def claim_note(found: Found) -> str:
    """The line's note when the learner's own date for a notebook (a zip member's) disagrees with its arrival by
    more than :data:`CLAIM_SLACK_S`, else ""."""
    if found.claimed is None or abs(found.claimed - found.mtime) <= CLAIM_SLACK_S:
        return ""
    return (f"submission time {timestamp_text(found.mtime)} (when it arrived in the inbox); the zip dates it "
            f"{timestamp_text(found.claimed)}, which was not used")


def timestamp_text(mtime: float) -> str:
    """A submission time as nbgrader writes ``timestamp.txt`` (``ExchangeSubmit``'s default format, UTC)."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(mtime)) + f".{int(mtime % 1 * 1e6):06d} UTC"
