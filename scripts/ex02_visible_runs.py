"""Write the reference runs of exercise 2's visible schedule checks (stage5/data/ex02_visible_runs.json).

    python scripts/ex02_visible_runs.py          # rewrite the file if it is out of date
    python scripts/ex02_visible_runs.py --check  # change nothing; exit 1 if it is out of date

Every ``check_schedule(...)`` call in a test cell of the exercise (solutions/ex02, whose test cells the release
copies) is read from the notebook, its workload built, and the course engine run on it now
(:mod:`stage5.grading.ex02_visible` says why the runs are shipped as data).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "solutions" / "ex02" / "ex02.ipynb"
sys.path.insert(0, str(ROOT))

from stage5.grading.ex02 import engine_run  # noqa: E402
from stage5.grading.ex02_visible import KEY_FIELDS, RUNS_FILE, dumps, run_data  # noqa: E402


def visible_calls(notebook: Path = NOTEBOOK) -> list[dict[str, Any]]:
    """The reference run each ``check_schedule`` call of a test cell compares with, as reference_trace's
    arguments. A call's workload is an expression of ``small_workload`` and ``Request`` only; its sizes are
    literals."""
    from stage5.engine.sequence import Request
    from stage5.engine.workload import small_workload

    calls = []
    for cell in json.loads(notebook.read_text())["cells"]:
        if cell["cell_type"] != "code" or not cell["metadata"].get("nbgrader", {}).get("grade"):
            continue
        for node in ast.walk(ast.parse("".join(cell["source"]))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "check_schedule"):
                continue
            names = ["loop", "cache_class", "requests", "num_blocks", "block_size", "max_batch", "continuous"]
            bound = dict(zip(names, node.args, strict=False)) | {k.arg: k.value for k in node.keywords}
            requests = eval(compile(ast.Expression(bound["requests"]), str(notebook), "eval"),  # noqa: S307
                            {"__builtins__": {}, "small_workload": small_workload, "Request": Request})
            cache = bound["cache_class"]
            continuous = ast.literal_eval(bound["continuous"]) if "continuous" in bound else True
            calls.append({"workload": [["request", r.id, list(r.prompt), r.max_tokens, r.stop_after]
                                       for r in requests],
                          "allocator": "contiguous" if getattr(cache, "id", "") == "ContiguousCache" else "paged",
                          "scheduler": "continuous" if continuous else "static",
                          **{k: ast.literal_eval(bound[k]) for k in ("num_blocks", "block_size", "max_batch")}})
    return calls


def expected() -> str:
    """The file's content: each visible call's arguments and the live engine's run."""
    entries = []
    for call in visible_calls():
        args = {k: call.get(k) for k in KEY_FIELDS} | {"model_seed": call.get("model_seed") or 0}
        entries.append({**args, "run": run_data(engine_run(**args))})
    return dumps(entries)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if the file is out of date")
    args = parser.parse_args(argv)
    want = expected()
    if RUNS_FILE.is_file() and RUNS_FILE.read_text() == want:
        return 0
    if args.check:
        print(f"{RUNS_FILE.relative_to(ROOT)} is out of date: run python scripts/ex02_visible_runs.py")
        return 1
    RUNS_FILE.write_text(want)
    print(f"wrote {RUNS_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
