"""Regenerate the ex04 fixture submissions from the committed release and the solution.

Run ``.venv/bin/python tests/submissions/make_fixtures_ex04.py`` after changing ``solutions/ex04`` (and regenerating
its release). ``EXPECTED`` in tests/test_grading_ex04.py lists the score each fixture earns. The broken routers are
mutants of tests/test_ex04_mutants.py, graded here by the grader itself, through the sandbox.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))
from make_fixtures_ex03 import _gid, _src, fill, solved  # noqa: E402 - the same helpers as ex03's fixtures
from test_ex04_mutants import MUTANTS, SANDBOXED  # noqa: E402

# fixture name -> the mutant of tests/test_ex04_mutants.py it submits
BROKEN = {"ignores_bound": "ignores the load bound", "hash_prompt": "routes by a hash of the whole prompt",
          "other_cache": "reads the previous replica's blocks", "lowest_index": "ties go to the lowest index, not in turn"}

assert set(BROKEN.values()) == SANDBOXED


def mutant(good: dict, name: str) -> dict:
    _, gid, old, new, _ = next(m for m in MUTANTS if m[0] == name)
    source = next(_src(c) for c in good["cells"] if _gid(c) == gid)
    assert source.count(old) == 1, old
    return fill(good, **{gid: source.replace(old, new)})


def ex04() -> dict[str, dict]:
    good = solved("ex04", {})
    delegates = ("from stage5.engine.fleet import prefix_blocks_held as held_blocks, route_by_prefix as route")
    return {"solved": good, "blank": json.loads((REPO / "exercises" / "ex04" / "ex04.ipynb").read_text()),
            **{name: mutant(good, m) for name, m in BROKEN.items()},
            "delegates": fill(good, held_answer=delegates, route_answer="")}


def build() -> None:
    out = HERE / "ex04"
    out.mkdir(exist_ok=True)
    for old in out.glob("*.ipynb"):
        old.unlink()
    for name, nb in ex04().items():
        (out / f"{name}_ex04.ipynb").write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    build()
    print("\n".join(sorted(p.name for p in (HERE / "ex04").glob("*.ipynb"))))
