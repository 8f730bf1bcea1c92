"""ex02 (a toy serving loop, bad version first), graded end to end.

The fixtures in tests/submissions/ex02 (built by tests/submissions/make_fixtures_ex02.py) are graded once per
module. The learner's engine runs in its kernel on hidden workloads and hands back traces; the grader compares them
exactly with the course engine's. The solution and two correct builds by another route (reference counts in a
Counter, slots() returning a list) score full marks, the blank release zero, and each wrong build scores below full
with feedback naming its mistake: a leaked block, an off-by-one at a block boundary, a "paged" cache that reserves the
whole cap, a "continuous" scheduler that waits for the batch, a cache that borrows the reference allocator, and the
attention without the causal mask or with the wrong head mapping, the
scheduling slips a held-out set of learners made (preempting the oldest, the victim at the back of the queue, a
restart from scratch, growing only while blocks are free, one admission per step, metering before the forward pass,
8x the memory, removing from a list while iterating over it, in either loop).
"""

from __future__ import annotations

import json

import pytest
from grading_harness import REPO, check_feedback_has, check_release_is_fresh, check_result, grade_classes

AUTO_MAX = (16, 4)  # (autograded points, points marked by hand)
ALL = {"p1_contiguous_cache", "p1_static_loop", "p2_block_allocator", "p2_block_tables", "p1_attention", "p2_paged_static",
       "p3_continuous", "p3_preemption", "p4_table", "p4_lever"}
PAGED = {"p2_block_tables", "p2_paged_static", "p3_continuous", "p3_preemption"}
ATTENTION = {"p1_attention", "p1_static_loop", "p2_paged_static", "p3_continuous", "p3_preemption"}
VISIBLE = "your schedule: "

# student: (score, failed checks, words the feedback must contain)
EXPECTED = {
    "solved": (16, set(), []),
    "counter_refcount": (16, set(), []),  # nothing leaks: only the counts are read, never the Counter's keys
    "slots_list": (16, set(), []),  # the text asks for one slot per position, a tensor or a list
    "blank": (0, ALL, ["NotImplementedError"]),
    "leaked_block": (8, PAGED | {"p4_table"}, ["leaked blocks"]),
    "off_by_one": (8, PAGED | {"p4_table"}, ["off-by-one at a block boundary"]),
    "reserves_max": (8, PAGED | {"p4_table"}, ["reserves the whole max_tokens cap"]),
    "waits_for_batch": (11, {"p3_continuous", "p3_preemption", "p4_table"}, ["still waits for the batch to finish"]),
    # the grading kernel has no PagedAllocator (issue 48's view), so the 2 x 2 built on it stops too
    "delegates": (8, PAGED | {"p4_table"}, ["PagedAllocator.can_admit, which computes this answer for you"]),
    # the visible schedule check (check_schedule) names the step and the rule before the hidden runs do
    "preempt_oldest": (14, {"p3_preemption"}, [VISIBLE + "step 7: you preempted an older sequence than the rule says"]),
    "victim_at_back": (14, {"p3_preemption"}, [VISIBLE + "step 17: a newer request was admitted while a preempted "
                                               "sequence was still waiting"]),
    "restart_from_scratch": (14, {"p3_preemption"}, ["it is not restarted from scratch"]),
    "grow_while_free": (14, {"p3_preemption"}, [VISIBLE + "step 6: you preempted where the reference had room"]),
    "admit_one_per_step": (11, {"p3_continuous", "p3_preemption", "p4_table"},
                           ["step 1: you admitted one waiting request where more fit"]),
    # the Meter itself refuses a batch whose tokens are not all stored, so the 2 x 2 stops too
    "meter_before_forward": (11, {"p3_continuous", "p3_preemption", "p4_table"}, ["call meter.step after forward_step"]),
    "memory_8x": (8, PAGED | {"p4_table"},
                  ["holds exactly num_blocks blocks of block_size slots", "more than the pool it was given"]),
    # every loop runs through the learner's own attention, so a wrong one fails each serving check
    "attention_not_causal": (7, ATTENTION, ["sees only positions 0 .. p of its sequence"]),
    "attention_head_mapping": (7, ATTENTION, ["consecutive query heads share one key-value head"]),
    # each attention slip named by the visible check_attention, by the rule it breaks
    "attention_mask_off_by_one": (7, ATTENTION, ["the causal mask is off by one"]),
    "attention_head_dim": (7, ATTENTION, ["the scores are divided by head_dim"]),
    "attention_float32": (14, {"p1_attention"}, ["compute in the dtype of q"]),
    "attention_across_sequences": (7, ATTENTION, ["tokens attend across sequences"]),
    # the learner's own exception, with the step and the rule it most likely means
    "grows_without_room": (14, {"p3_preemption"}, ["in step 7, after 6 steps that follow the rules",
                                                   "call grow(seq) only when can_grow(seq) is true"]),
    # a crash in the measurement cell is named as the cause; a 2 x 2 with blocks of 16 is told the block size
    "measure_crash": (15, {"p4_table"}, ["if the measurement cell above stopped with an error, that error is the cause"]),
    "block_size_16": (15, {"p4_table"}, ["PagedCache(96, 8) (blocks of 8 slots)"]),
    "mutates_while_iterating": (11, {"p3_continuous", "p3_preemption", "p4_table"}, ["has no new token to feed"]),
    "static_mutates_while_iterating": (13, {"p1_static_loop", "p2_paged_static"},
                                       ["has no new token to feed", "removes from a list while iterating"]),
    # builds an instructor found at full marks (issue 41), caught by the cache that says no and by slots() asked
    # for positions that do not start at 0
    "readmit_next_step": (14, {"p3_preemption"}, ["a victim of this very step is admitted again like any other head"]),
    "victim_highest_id": (14, {"p3_preemption"}, ["the victim is the newest running sequence, the one admitted last"]),
    "slots_from_zero": (14, {"p2_block_tables"}, ["for positions that do not start at 0"]),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course, results = grade_classes(tmp_path_factory.mktemp("class2"), {"ex02": "ex02"})
    return course, {student: r for (_, student), r in results.items()}


def test_every_student_is_graded(graded):
    _, results = graded
    assert set(results) == set(EXPECTED)


@pytest.mark.parametrize("student", sorted(EXPECTED))
def test_scores_and_failed_checks(graded, student):
    _, results = graded
    score, failed, _ = EXPECTED[student]
    # a written answer left as released is scored 0 by nbgrader: nothing left to mark by hand (workflow.scores)
    check_result(results[student], score, failed, AUTO_MAX[0], 0 if student == "blank" else AUTO_MAX[1])


@pytest.mark.parametrize("student", sorted(s for s, v in EXPECTED.items() if v[2]))
def test_feedback_names_the_misconception(graded, student):
    check_feedback_has(graded[0], student, "ex02", EXPECTED[student][2])


@pytest.mark.parametrize("student", ["waits_for_batch", "leaked_block", "blank", "preempt_oldest"])
def test_feedback_hides_hidden_tests(graded, student):
    course, _ = graded
    text = course.feedback_text(student, "ex02")
    for secret in ("BEGIN HIDDEN TESTS", "reference_trace", "_serving(", '"small", 20, 11', "MARK SCHEME"):
        assert secret not in text


def test_committed_release_matches_solutions(graded):
    check_release_is_fresh(graded[0], "ex02")


def test_release_has_no_answers_and_installs_stage5():
    text = (REPO / "exercises" / "ex02" / "ex02.ipynb").read_text()
    for secret in ("BEGIN SOLUTION", "HIDDEN TESTS", "MARK SCHEME", "reference_trace", "check_serving",
                   "free_list.popleft", "-(-num_tokens"):
        assert secret not in text
    nb = json.loads(text)
    setup = next(c for c in nb["cells"] if c["cell_type"] == "code")
    ex01 = json.loads((REPO / "exercises" / "ex01" / "ex01.ipynb").read_text())
    ex01_setup = "".join(next(c for c in ex01["cells"] if c["cell_type"] == "code")["source"])
    assert "".join(setup["source"]).startswith(ex01_setup.split("import math")[0])


def test_solution_matches_the_reference_engine_in_process():
    """The solution's serve() equals stage5.engine's Engine step for step on another workload, all four builds."""
    from stage5.engine.engine import Engine
    from stage5.exercise_support import small_workload, tiny_model
    from stage5.grading import SERVING_BLOCKED, unavailable

    nb = json.loads((REPO / "solutions" / "ex02" / "ex02.ipynb").read_text())
    ns: dict = {}
    for cell in nb["cells"]:
        gid = cell["metadata"].get("nbgrader", {}).get("grade_id", "")
        if gid == "setup" or gid.endswith("_answer") and gid not in ("measure_answer", "lever_answer"):
            exec("".join(cell["source"]), ns)  # noqa: S102 - our own solution notebook
    model, requests = tiny_model(seed=3), small_workload(16, seed=5, max_tokens=64)
    for allocator in ("contiguous", "paged"):
        for scheduler in ("static", "continuous"):
            ref = Engine(model, model.cfg, allocator, scheduler, num_blocks=30, block_size=8, max_batch=6).run(requests)
            cache = ns["ContiguousCache"](240) if allocator == "contiguous" else ns["PagedCache"](30, 8)
            with unavailable(*SERVING_BLOCKED):
                got = ns["serve"](model, requests, cache, continuous=scheduler == "continuous", max_batch=6)
            assert got.outputs == ref.outputs
            assert got.trace == ref.trace, (allocator, scheduler)
            assert got.kv_utilization == pytest.approx(ref.kv_utilization)
            assert got.preemptions == ref.preemptions


def test_visible_failures_never_show_torch_internals(graded):
    """A loop that skips or repeats a sequence meets forward_step's own message, not a tensor-shape error."""
    for student in ("mutates_while_iterating", "static_mutates_while_iterating"):
        text = graded[0].feedback_text(student, "ex02")
        assert "reshape" not in text and "0 elements" not in text


def test_readme_lists_ex02():
    readme = (REPO / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `exercises/ex02`"))
    assert "hours" in row or "hour" in row


@pytest.mark.parametrize("slip, words", [
    (('weights = scores.masked_fill(~visible, float("-inf")).softmax(dim=-1)', "weights = scores.softmax(dim=-1)"),
     "sees only positions 0 .. p"),
    (("/ q.shape[-1] ** 0.5", ""), "divide q . k by sqrt(head_dim)"),
    ((".repeat_interleave(group, dim=1)", ".repeat(1, group, 1)"), "repeat_interleave"),  # keys and values
])
def test_attention_probe_names_the_slip(slip, words):
    """The hidden attention probe (run here in-process) names each slip in the learner's PagedKV."""
    import torch

    from stage5.grading import GradingError, check_attention
    from stage5.grading.ex02 import LocalKernel

    nb = json.loads((REPO / "solutions" / "ex02" / "ex02.ipynb").read_text())
    src = "".join(next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "paged_kv_answer")
                  ["source"])
    ns: dict = {"torch": torch}
    exec(src, ns)  # noqa: S102 - our own solution notebook
    check_attention("P2 attention", LocalKernel(ns))
    assert src.count(slip[0]) >= 1
    wrong: dict = {"torch": torch}
    exec(src.replace(*slip), wrong)  # noqa: S102
    with pytest.raises(GradingError, match=words.replace(".", r"\.").replace("(", r"\(").replace(")", r"\)")):
        check_attention("P2 attention", LocalKernel(wrong))
