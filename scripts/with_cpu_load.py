"""Run a command while N other processes keep N CPU cores busy: the book must build on a busy machine.

    python scripts/with_cpu_load.py 3 -- jupyter-book build . --warningiserror

Each competitor is a plain Python busy loop. They are stopped (by their own process ids) when the command
ends, however it ends; the command's exit status is returned, and its wall time is printed.
"""

from __future__ import annotations

import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print("usage: with_cpu_load.py N -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    n = int(argv[0])
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    t0 = time.perf_counter()
    try:
        code = subprocess.call(argv[2:])
    finally:
        for hog in hogs:
            hog.terminate()
        for hog in hogs:
            hog.wait()
    print(f"==> {' '.join(argv[2:])} exited {code} after {time.perf_counter() - t0:.0f} s, "
          f"with {n} CPU-bound processes competing", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
