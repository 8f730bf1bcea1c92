"""Run a long command and say, every ``--every`` seconds, that it is still running and for how long.

    python scripts/with_progress.py "installing requirements" -- python -m pip install -q -r requirements.txt

The command's own output passes through unchanged; its exit status is this script's. `make` uses it for the
steps that are silent for minutes (the first install, the book build's chapter executions).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], usage="%(prog)s LABEL [--every S] -- COMMAND ...")
    parser.add_argument("label", help="what the command is doing, e.g. 'installing requirements'")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between progress lines (default 30)")
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    args, command = parser.parse_args(argv[:split]), argv[split + 1:]
    if not command or args.every <= 0:
        parser.error("give a positive --every and, after --, the command to run")
    start = time.monotonic()
    try:
        proc = subprocess.Popen(command)
    except OSError as err:
        print(f"error: cannot run {command[0]}: {err.strerror}", file=sys.stderr)
        return 127
    try:
        while True:
            try:
                code = proc.wait(timeout=args.every)
                break
            except subprocess.TimeoutExpired:
                print(f"    ... still {args.label} ({_elapsed(time.monotonic() - start)})", flush=True)
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
        return 130
    print(f"    {args.label}: done in {_elapsed(time.monotonic() - start)}" if code == 0 else
          f"    {args.label}: failed after {_elapsed(time.monotonic() - start)} (exit status {code})", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
