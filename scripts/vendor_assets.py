"""Refresh the browser scripts the book ships with itself, so the built site works from disk with no network.

    python scripts/vendor_assets.py          # check the files in assets/vendor against the pins below
    python scripts/vendor_assets.py --fetch  # download the pinned npm packages (npm pack) and copy the files

Maths is typeset by MathJax 3 (``tex-svg-full.js``: every TeX extension built in and SVG output, so it loads no
further component and no font file); saved widget state is drawn by the Jupyter widgets HTML manager
(``embed-amd.js``), which needs require.js. Jupyter Book 1 loads all three from public CDNs by default; _config.yml
points ``mathjax_path`` and myst-nb's ``nb_ipywidgets_js`` at these copies instead. Each file is pinned by version
and SHA-256, so a refresh is deliberate and a corrupted copy is found.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENDOR = ROOT / "assets" / "vendor"  # Sphinx copies it to _build/html/_static/vendor

# (npm package, version, file inside the package, where it goes under assets/vendor, SHA-256 of the file)
PINS = [
    ("mathjax", "3.2.2", "package/es5/tex-svg-full.js", "mathjax/tex-svg-full.js",
     "a4354ff94fd868aea0cc6eaaa79a57fda0588646fc46ee3700a349ee0a11cbe6"),
    ("mathjax", "3.2.2", "package/LICENSE", "mathjax/LICENSE",
     "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"),
    ("@jupyter-widgets/html-manager", "1.0.15", "package/dist/embed-amd.js", "html-manager/embed-amd.js",
     "ca87dff57c70ffb2658794fde0eab0e27e5f5472a1f5df7ab2b08e1039fc4b72"),
    # Font Awesome's woff2 files, which the widgets' CSS names for icons (Chromium and Firefox take woff2 first), where
    # the embed script looks for them once assets/vendor/widgets-setup.js sets require.js's base URL
    ("@jupyter-widgets/html-manager", "1.0.15", "package/dist/1551f4f60c37af51121f.woff2",
     "@jupyter-widgets/html-manager/dist/1551f4f60c37af51121f.woff2",
     "9834b82ad26e2a37583d22676a12dd2eb0fe7c80356a2114d0db1aa8b3899537"),
    ("@jupyter-widgets/html-manager", "1.0.15", "package/dist/7a3337626410ca2f4071.woff2",
     "@jupyter-widgets/html-manager/dist/7a3337626410ca2f4071.woff2",
     "e42a88444448ac3d60549cc7c1ff2c8a9cac721034c073d80a14a44e79730cca"),
    ("@jupyter-widgets/html-manager", "1.0.15", "package/dist/d878b0a6a1144760244f.woff2",
     "@jupyter-widgets/html-manager/dist/d878b0a6a1144760244f.woff2",
     "8ea8791754915a898a3100e63e32978a6d1763be6df8e73a39d3a90d691cdeef"),
    ("@jupyter-widgets/html-manager", "1.0.15", "package/dist/embed.js.LICENSE.txt",
     "html-manager/embed.js.LICENSE.txt",
     "aed2008aae8123157c4ae564883166b1af7bab928d504a1fa7de1f67aec11268"),
    ("requirejs", "2.3.7", "package/require.js", "require.js",
     "8215b90000b571bd241d28512c83f59855cecc3158db94b79b2d974c9923b5d2"),
]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for package, version in sorted({(p, v) for p, v, *_ in PINS}):
            done = subprocess.run(["npm", "pack", f"{package}@{version}", "--silent"], cwd=tmp, capture_output=True,
                                  text=True)
            if done.returncode != 0:
                sys.exit(f"npm pack {package}@{version} failed: {done.stderr.strip().splitlines()[-1:]}")
            tgz = Path(tmp) / done.stdout.strip().splitlines()[-1]
            with tarfile.open(tgz) as tar:
                for p, v, member, dest, _ in PINS:
                    if (p, v) == (package, version):
                        out = VENDOR / dest
                        out.parent.mkdir(parents=True, exist_ok=True)
                        with tar.extractfile(member) as src, open(out, "wb") as dst:
                            shutil.copyfileobj(src, dst)
    for *_, dest, _ in PINS:
        print(f"{sha256(VENDOR / dest)}  {dest}")


def check() -> int:
    bad = []
    for package, version, _, dest, digest in PINS:
        path = VENDOR / dest
        if not path.is_file():
            bad.append(f"{dest}: missing (python scripts/vendor_assets.py --fetch)")
        elif sha256(path) != digest:
            bad.append(f"{dest}: SHA-256 differs from the pin for {package} {version}")
    print("\n".join(bad) or f"{len(PINS)} vendored files match their pins")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fetch", action="store_true", help="download the pinned packages with npm pack")
    args = parser.parse_args(argv)
    if args.fetch:
        fetch()
        return 0
    return check()


if __name__ == "__main__":
    sys.exit(main())
