"""Command line: ``python -m stage5 --help``."""

from __future__ import annotations

import argparse
import sys

from stage5 import __version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stage5",
        description="Stage 5: Inference - cost model, figures and toy-engine benchmarks.")
    parser.add_argument("--version", action="version", version=f"stage5 {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("figures", help="every number the book prints (--json for {id: value})", add_help=False)
    sub.add_parser("model", help="parameters, weight bytes and KV bytes per token of a config.json", add_help=False)
    sub.add_parser("deploy", help="diagnose a deployment: TTFT, TPOT, bound, max concurrency, $/M tokens",
                   add_help=False)
    sub.add_parser("bench", help="serve a seeded workload through the toy engines (bench [prefix|spec|roofline])",
                   add_help=False)
    sub.add_parser("calibrate", help="measure this CPU for the toy engine's step-time model (cached per machine)",
                   add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    # Each subcommand parses its own arguments, so `python -m stage5 deploy --help` shows its options.
    if args.command == "figures":
        from stage5.figures import main as run
    elif args.command in ("model", "deploy"):
        from stage5.cli import deploy_main, model_main
        run = model_main if args.command == "model" else deploy_main
    elif args.command == "calibrate":
        from stage5.calibrate import main as run
    else:
        from stage5.engine.bench import main as run
    return run(rest)


if __name__ == "__main__":
    sys.exit(main())
