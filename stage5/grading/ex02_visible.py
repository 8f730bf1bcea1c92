"""Exercise 2's visible schedule check without the course engine: its reference runs, shipped as data.

The release's ``check_schedule`` call (a test cell's) compares the learner's run with the course engine's, step by
step. While the exercise is graded the kernel's course package has no engine, allocators or scheduler
(:mod:`.view`), so the reference run of each workload that call uses is computed once, when the release is made,
and shipped in ``stage5/data/ex02_visible_runs.json``: who ran in each step, who was admitted, the preemptions and
the K/V utilisation. Scheduling never reads a token (a request ends after its ``output_len`` new tokens), so the
schedule is the same on any machine; the tokens are the reference ``generate()``'s, which stays in the kernel.

``scripts/ex02_visible_runs.py`` (which ``make sync`` runs) writes the file from the live engine, for every
``check_schedule`` call of the exercise's test cells; tests/test_grading_view.py checks it is up to date.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

RUNS_FILE = Path(__file__).resolve().parent.parent / "data" / "ex02_visible_runs.json"
#: What identifies a reference run: :func:`stage5.grading.ex02.reference_trace`'s arguments.
KEY_FIELDS = ("workload", "allocator", "scheduler", "num_blocks", "block_size", "max_batch", "model_seed",
              "refusals")


@dataclass(frozen=True)
class Step:
    """One step of a shipped run, as :func:`stage5.grading.ex02.check_serving` reads a StepRecord."""

    kind: str
    ids: tuple[int, ...]
    admitted: tuple[int, ...]
    preemptions: int  # preemptions so far in the run


@dataclass
class ShippedRun:
    """The fields of a :class:`stage5.engine.metrics.RunResult` that the schedule comparison reads."""

    trace: list[tuple[str, tuple[int, ...]]]
    steps_log: list[Step]
    preemptions: int
    kv_utilization: float
    outputs: dict[int, list[int]] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return len(self.trace)


def run_data(run: Any) -> dict[str, Any]:
    """A RunResult's schedule as plain data (what the file holds for it)."""
    return {"steps": [[r.kind, list(r.ids), list(r.admitted), int(r.preemptions)] for r in run.steps_log],
            "preemptions": int(run.preemptions), "kv_utilization": float(run.kv_utilization)}


def key_of(workload: list[list[Any]], allocator: str, scheduler: str, num_blocks: int, block_size: int,
           max_batch: int, model_seed: int = 0, refusals: list[list[int]] | None = None) -> str:
    return json.dumps([workload, allocator, scheduler, num_blocks, block_size, max_batch, model_seed, refusals])


@cache
def _shipped(path: Path = RUNS_FILE) -> dict[str, dict[str, Any]]:
    if not path.is_file():
        return {}
    return {key_of(*(entry[k] for k in KEY_FIELDS)): entry["run"] for entry in json.loads(path.read_text())}


def shipped_run(outputs: dict[int, list[int]], workload: list[list[Any]], allocator: str, scheduler: str,
                num_blocks: int, block_size: int, max_batch: int, model_seed: int = 0,
                refusals: list[list[int]] | None = None) -> ShippedRun | None:
    """The shipped reference run for these arguments (its tokens ``outputs``, which the caller has from
    ``generate()``), or None if none is shipped."""
    data = _shipped().get(key_of(workload, allocator, scheduler, num_blocks, block_size, max_batch, model_seed,
                                 refusals))
    if data is None:
        return None
    steps = [Step(kind, tuple(ids), tuple(admitted), int(pre)) for kind, ids, admitted, pre in data["steps"]]
    return ShippedRun(trace=[(s.kind, s.ids) for s in steps], steps_log=steps, preemptions=int(data["preemptions"]),
                      kv_utilization=float(data["kv_utilization"]), outputs=outputs)


def is_shipped(workload: list[list[Any]], allocator: str, scheduler: str, num_blocks: int, block_size: int,
               max_batch: int, model_seed: int = 0, refusals: list[list[int]] | None = None) -> bool:
    return key_of(workload, allocator, scheduler, num_blocks, block_size, max_batch, model_seed,
                  refusals) in _shipped()


def dumps(content: list[dict[str, Any]]) -> str:
    """One run a line."""
    return "[\n" + ",\n".join(json.dumps(entry) for entry in content) + "\n]\n"
