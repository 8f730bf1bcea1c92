"""Pack the built book into one zip a reader opens from disk: unzip, then open index.html in a browser.

    python scripts/pack_site.py                      # _build/html -> dist/stage5-inference-book-<version>.zip
    python scripts/pack_site.py --html DIR --out DIR

The site needs no network (maths and widgets are served with it: scripts/vendor_assets.py), so the archive is the
way to read the book before, or without, a published site. `make dist` writes it beside the wheel and sdist.
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import sync_settings  # noqa: E402  (course.toml: the release version)

SKIP = {".buildinfo"}  # Sphinx's incremental-build stamp: nothing a reader opens


def pack(html: Path, out_dir: Path, version: str) -> Path:
    """Write ``out_dir/stage5-inference-book-<version>.zip`` holding ``html`` under one top folder."""
    if not (html / "index.html").is_file():
        raise FileNotFoundError(f"{html} holds no built book (no index.html); run `make book` first")
    top = f"stage5-inference-book-{version}"
    out_dir.mkdir(parents=True, exist_ok=True)
    archive = out_dir / f"{top}.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(html.rglob("*")):
            if path.is_file() and path.name not in SKIP:
                zf.write(path, f"{top}/{path.relative_to(html).as_posix()}")
    return archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--html", default=str(ROOT / "_build" / "html"), help="the built site (default _build/html)")
    parser.add_argument("--out", default=str(ROOT / "dist"), help="where the zip goes (default dist/)")
    args = parser.parse_args(argv)
    try:
        archive = pack(Path(args.html), Path(args.out), sync_settings.load().version)
    except (FileNotFoundError, OSError) as err:
        print(f"pack_site: {err}", file=sys.stderr)
        return 2
    print(f"{archive} ({archive.stat().st_size / 1e6:.1f} MB): unzip it and open index.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
