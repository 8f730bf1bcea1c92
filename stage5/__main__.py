"""Command line: ``python -m stage5 --help``."""

from __future__ import annotations

import sys

from stage5 import __version__
from stage5.inputs import InputError, OneLineParser, import_holding_ctrl_c, run_command


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog="python -m stage5",
        description="Stage 5: Inference - cost model, figures and toy-engine benchmarks.")
    parser.add_argument("--version", action="version", version=f"stage5 {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("figures", help="every number the book prints (--json for {id: value})", add_help=False)
    sub.add_parser("model", help="parameters, weight bytes and KV bytes per token of a config.json", add_help=False)
    sub.add_parser("deploy", help="diagnose a deployment: TTFT, TPOT, bound, max concurrency, $/M tokens",
                   add_help=False)
    sub.add_parser("bench", help="serve a seeded workload through the toy engines (bench [prefix|spec|roofline|load|fleet|disagg]; bench book times the chapters)",
                   add_help=False)
    sub.add_parser("calibrate", help="measure this CPU for the toy engine's step-time model (cached per machine)",
                   add_help=False)
    sub.add_parser("validate", help="the floor and the estimate against published serving measurements (--json)",
                   add_help=False)
    try:
        args, rest = parser.parse_known_args(argv)
    except SystemExit as stop:  # --help, --version, or an unknown command (argparse has printed why)
        return stop.code if isinstance(stop.code, int) else 2
    if args.command is None:
        if rest:  # e.g. `python -m stage5 --bogus`: an option before any command
            print(f"error: python -m stage5: unknown option {' '.join(rest)!r}; accepted: a command "
                  "(figures, model, deploy, bench, calibrate, validate) or --help, --version", file=sys.stderr)
            return 2
        parser.print_help()
        return 0
    if args.command in ("calibrate", "bench"):  # the commands that run torch: import it where Ctrl-C cannot abort it
        import_holding_ctrl_c("torch")
    # Each subcommand parses its own arguments, so `python -m stage5 deploy --help` shows its options.
    if args.command == "figures":
        from stage5.figures import main as run
    elif args.command in ("model", "deploy"):
        from stage5.cli import deploy_main, model_main
        run = model_main if args.command == "model" else deploy_main
    elif args.command == "validate":
        from stage5.fit import main as run
    elif args.command == "calibrate":
        from stage5.calibrate import main as run
    else:
        from stage5.engine.bench import main as run
    try:
        return run(rest)
    except SystemExit as stop:  # a subcommand's argparse: --help exits 0, a bad argument exits 2 after one line
        return stop.code if isinstance(stop.code, int) else 2
    except InputError as err:  # a value checked past the flags (a run's clock, a pool's size, a JSON number)
        print(f"error: python -m stage5 {args.command}: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    run_command(main)
