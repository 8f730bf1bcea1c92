"""Rebuild ``stage5/data/cpython_stdlib.txt.gz``: the byte-level training text for the toy models.

The text is CPython 3.11's standard-library modules (top-level ``Lib/*.py`` only, in name order) joined until
the total passes ``--bytes``. Each file is preceded by a one-line ``# file: NAME`` marker. The source is
under the PSF licence; see ``stage5/data/LICENSE-PSF.txt``.

    python scripts/build_corpus.py --lib /root/.pyenv/versions/3.11.7/lib/python3.11
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "stage5" / "data"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", type=Path, required=True, help="CPython Lib directory (holds os.py)")
    parser.add_argument("--bytes", type=int, default=3_000_000, help="stop once the text is this long")
    args = parser.parse_args()
    parts: list[bytes] = []
    names: list[str] = []
    total = 0
    for path in sorted(args.lib.glob("*.py")):
        if total >= args.bytes:
            break
        body = path.read_bytes()
        chunk = f"# file: {path.name}\n".encode() + body + b"\n"
        parts.append(chunk)
        names.append(path.name)
        total += len(chunk)
    text = b"".join(parts)
    # mtime=0 keeps the archive byte-identical from run to run.
    (DATA / "cpython_stdlib.txt.gz").write_bytes(gzip.compress(text, compresslevel=9, mtime=0))
    print(f"{len(names)} files, {len(text):,} bytes: {names[0]} .. {names[-1]}")


if __name__ == "__main__":
    main()
