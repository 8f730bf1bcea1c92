"""``python -m stage5 bench book``: execute the book's chapters one by one, as ``make book`` does, and time each.

    python -m stage5 bench book                      # every chapter of book/, a table
    python -m stage5 bench book --json               # the same as JSON (the README's build times come from it)
    python -m stage5 bench book --chapters 04_batching 09_cost_model

Each chapter runs top to bottom in a fresh kernel (nbclient, the library Jupyter Book executes with), in the book's
folder, with one private calibration cache for the whole run, as a clean build has. For each it reports the wall
time and the CPU time the kernel used (user + system, from the operating system's account of finished child
processes, so a busy machine shows as wall time well above CPU time), and its slowest cells. The machine's load
average before and after is in the JSON: a figure means little without it. Nothing is written into the book.
"""

from __future__ import annotations

import os
import re
import resource
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from stage5.inputs import OneLineParser, dumps

DEFAULT_BOOK = Path(__file__).resolve().parents[2] / "book"  # a checkout's book/ (the wheel has none)
CELL_TIMEOUT_S = 1200  # per cell: only stops a hung chapter (the build's own limit is _config.yml's)
SLOWEST = 3  # cells listed per chapter


def chapters_in(book: Path) -> list[str]:
    """The notebooks ``make book`` executes: every ``.ipynb`` in the book's folder, in name order."""
    return sorted(p.stem for p in book.glob("*.ipynb"))


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _stamp(text: str | None) -> float | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def slowest_cells(nb, count: int = SLOWEST) -> list[dict]:
    """The ``count`` cells with the longest execution, from the timings nbclient records in each cell's metadata."""
    timed = []
    for index, cell in enumerate(nb.cells):
        execution = cell.get("metadata", {}).get("execution", {})
        start, end = _stamp(execution.get("iopub.execute_input")), _stamp(execution.get("shell.execute_reply"))
        if cell.cell_type == "code" and start is not None and end is not None:
            first = next((line for line in cell.source.splitlines() if line.strip()), "")
            timed.append({"cell": index, "wall_s": round(end - start, 2), "first_line": first[:100]})
    return sorted(timed, key=lambda c: -c["wall_s"])[:count]


def run_chapter(path: Path, timeout_s: int) -> dict:
    """Execute one notebook in a fresh kernel; its wall time, its kernel's CPU time and its slowest cells."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout_s, kernel_name="python3", resources={"metadata": {"path":
                                                                                                  str(path.parent)}})
    cpu0, wall0 = _children_cpu_s(), time.perf_counter()
    error = None
    try:
        client.execute()
    except CellExecutionError as err:  # the chapter fails as it would fail the build: say which, keep going
        text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", str(err)).strip()  # the traceback's colours
        error = text.splitlines()[-1][:300] if text else type(err).__name__
    except Exception as err:  # noqa: BLE001 - a kernel that died or timed out: one line, the next chapter runs
        error = f"{type(err).__name__}: {str(err).strip()[:300]}"
    wall = time.perf_counter() - wall0
    return {"chapter": path.stem, "wall_s": round(wall, 2), "cpu_s": round(_children_cpu_s() - cpu0, 2),
            "error": error, "slowest_cells": slowest_cells(nb)}


def _load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def run(book: Path, names: list[str], timeout_s: int) -> dict:
    """Every chapter in ``names``, in order, with one fresh calibration cache; the report ``--json`` prints."""
    report = {"book": str(book), "cpus": os.cpu_count(), "load_before": _load(), "chapters": []}
    with tempfile.TemporaryDirectory(prefix="stage5-bench-book-") as cache:
        before = os.environ.get("STAGE5_CACHE_DIR")
        os.environ["STAGE5_CACHE_DIR"] = cache  # the kernels inherit it: calibrated afresh, as a clean build is
        try:
            for name in names:
                report["chapters"].append(run_chapter(book / f"{name}.ipynb", timeout_s))
        finally:
            if before is None:
                os.environ.pop("STAGE5_CACHE_DIR", None)
            else:
                os.environ["STAGE5_CACHE_DIR"] = before
    report["load_after"] = _load()
    report["total"] = {"wall_s": round(sum(c["wall_s"] for c in report["chapters"]), 2),
                       "cpu_s": round(sum(c["cpu_s"] for c in report["chapters"]), 2)}
    return report


def table(report: dict) -> str:
    lines = [f"{'chapter':<26}{'wall s':>9}{'CPU s':>9}  slowest cell (wall s)"]
    for c in report["chapters"]:
        slow = c["slowest_cells"][0] if c["slowest_cells"] else None
        note = f"cell {slow['cell']} ({slow['wall_s']:.1f}): {slow['first_line'][:50]}" if slow else ""
        lines.append(f"{c['chapter']:<26}{c['wall_s']:9.1f}{c['cpu_s']:9.1f}  "
                     + (f"FAILED: {c['error']}" if c["error"] else note))
    lines.append(f"{'total':<26}{report['total']['wall_s']:9.1f}{report['total']['cpu_s']:9.1f}")
    lines.append(f"{report['cpus']} CPUs; load average (1, 5, 15 min) before {report['load_before']}, after "
                 f"{report['load_after']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m stage5 bench book", description=__doc__.splitlines()[0])
    parser.add_argument("--book", type=Path, default=DEFAULT_BOOK, help="the book's folder (default: book/)")
    parser.add_argument("--chapters", nargs="+", metavar="NAME", help="only these (notebook names without .ipynb)")
    parser.add_argument("--timeout", type=int, default=CELL_TIMEOUT_S, help="seconds per cell before it is stopped")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    if not args.book.is_dir():
        parser.error(f"--book {args.book} is not a folder (the book's chapters are in a checkout's book/)")
    found = chapters_in(args.book)
    if not found:
        parser.error(f"--book {args.book} holds no .ipynb chapter")
    unknown = [n for n in args.chapters or [] if n not in found]
    if unknown:
        parser.error(f"--chapters: no chapter {', '.join(unknown)} in {args.book}; there are {', '.join(found)}")
    if args.timeout <= 0:
        parser.error(f"--timeout must be a positive number of seconds, not {args.timeout}")
    try:
        import nbclient  # noqa: F401
    except ImportError:
        parser.error("needs nbclient, which executes the chapters (pip install -r requirements-book.txt)")
    report = run(args.book, args.chapters or found, args.timeout)
    print(dumps(report, indent=1) if args.json else table(report))
    return 1 if any(c["error"] for c in report["chapters"]) else 0


if __name__ == "__main__":
    sys.exit(main())
