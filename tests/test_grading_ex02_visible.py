"""Issue 48 for exercise 2: its grading kernel has no engine (stage5/grading/view.py cuts the engine, the allocators,
the scheduler and the reference attention), so the release's visible schedule check compares with reference runs
shipped as data (stage5/grading/ex02_visible.py). The shipped runs are the live engine's, for every check_schedule
call of the exercise; with the reference switched off, the release's visible cell still passes the course's
solution and still names the rule a wrong loop breaks. In-process (the sandboxed kernel: tests/test_grading_view.py
and the class graded end to end in tests/test_grading_ex02.py)."""

from __future__ import annotations

import importlib.util
import json

import ex02_inprocess
import pytest
from grading_harness import REPO

from stage5.grading import GradingError, unavailable
from stage5.grading import ex02 as grading_ex02
from stage5.grading.ex02 import ATTENTION_BLOCKED, reference_trace
from stage5.grading.ex02_visible import KEY_FIELDS, RUNS_FILE


def _script():
    spec = importlib.util.spec_from_file_location("ex02_visible_runs", REPO / "scripts" / "ex02_visible_runs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_runs_are_the_engines_for_every_visible_check():
    script = _script()
    calls = script.visible_calls()
    assert len(calls) == 1 and calls[0]["num_blocks"] == 16  # the release's one check_schedule call, read
    assert RUNS_FILE.read_text() == script.expected(), "stale: run python scripts/ex02_visible_runs.py"
    shipped = json.loads(RUNS_FILE.read_text())[0]
    assert shipped["run"]["preemptions"] > 0  # the check is in a tight pool: the shipped run preempts


def _visible(gid: str) -> str:
    return ex02_inprocess.HIDDEN.sub("", ex02_inprocess.answer(gid))


@pytest.fixture(scope="module")
def solved():
    return ex02_inprocess.namespace()


def _run_visible_without_engine(ns: dict) -> None:
    grading_ex02._REFERENCE_RUNS.clear()  # nothing computed earlier in this process stands in for the data
    try:
        with unavailable(*ATTENTION_BLOCKED):
            exec(compile(_visible("p3_preemption"), "<p3_preemption>", "exec"), dict(ns))  # noqa: S102
    finally:
        grading_ex02._REFERENCE_RUNS.clear()


def test_the_visible_check_passes_the_solution_without_the_engine(solved):
    _run_visible_without_engine(solved)


def test_the_visible_check_names_the_rule_without_the_engine(solved):
    mutant = ex02_inprocess.answer("serve_answer").replace("victim = running.pop()  # the newest",
                                                           "victim = running.pop(0)")
    assert mutant != ex02_inprocess.answer("serve_answer")
    ns = dict(solved)
    exec(compile(mutant, "<serve mutant>", "exec"), ns)  # noqa: S102
    with pytest.raises(AssertionError, match="your schedule: step 7: you preempted an older sequence"):
        _run_visible_without_engine(ns)


def test_a_run_not_shipped_is_one_line_without_the_engine():
    shipped = json.loads(RUNS_FILE.read_text())[0]
    other = [*(shipped[k] for k in KEY_FIELDS)]
    other[5] += 1  # another max_batch
    grading_ex02._REFERENCE_RUNS.clear()
    with unavailable(*ATTENTION_BLOCKED), pytest.raises(GradingError, match="not in the grading kernel"):
        reference_trace(*other)
    grading_ex02._REFERENCE_RUNS.clear()
