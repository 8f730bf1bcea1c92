"""Wrong builds an instructor found getting full marks (issue 41), one test per class: each now loses marks, and
its feedback names the rule it breaks (and, for a schedule, the step).

The builds are the slips of tests/learner_slips.py that FOUND_AT_FULL_MARKS names. ex02's are graded by the hidden
checks in this process (tests/ex02_inprocess.py), ex03's by its hidden B checks on the learner's ``diagnose``.
Two readings of ex02's rules turned out to give the same schedule on every workload, and are listed in
learner_slips.EQUIVALENT with the reason (a readmitted victim put back at the index it left; one victim per
growing sequence): those are correct builds, and tests/test_learner_slips.py keeps them at full marks.
"""

from __future__ import annotations

import re

import ex02_inprocess as inprocess
import pytest
import test_ex03_mutants as ex03
from learner_slips import FOUND_AT_FULL_MARKS, SLIPS
from test_ex02_mutants import NEAREST

BY_NAME = {s.name: s for s in SLIPS}
# what each class's feedback must say: the rule, in the words of the exercise
RULE_WORDS = {
    "room_newest_first": ["make room oldest first", "preempt the newest running sequence only while"],
    "victim_highest_id": ["the victim is the newest running sequence, the one admitted last",
                          "request ids are labels, not ages"],
    "no_admission_after_preemption": ["did not admit it",
                                      "a victim of this very step is admitted again like any other head of the queue"],
    "readmitted_to_old_place": ["keep `running` in the order sequences were admitted",
                                "a readmitted sequence joins the end, like any admission"],
    "meter_swap_as_decode": ["meter.step's `admitted` is true in every step that admitted anyone",
                             "a victim readmitted in its own step included"],
    "slots_prefill_from_zero": ["for positions that do not start at 0", "block_table[p // B] * B + p % B"],
    "phase_latency_undivided": ["phase is wrong", "(output x step time / concurrency)",
                                "under the latency objective too"],
    "prefix_shortens_decode": ["prefix caching computes fewer prompt tokens and changes nothing else",
                               "the cached prefix included"],
}
SCHEDULES = {"room_newest_first", "victim_highest_id", "no_admission_after_preemption", "readmitted_to_old_place",
             "meter_swap_as_decode"}


def _ex03_first_failure(source: str) -> str | None:
    failed = ex03._failures(source, ex03._cells())
    return next(iter(failed.values()), None)


def test_every_class_has_a_build_and_the_words_of_its_rule():
    assert set(FOUND_AT_FULL_MARKS.values()) == set(RULE_WORDS)
    assert set(RULE_WORDS) <= set(BY_NAME)


@pytest.mark.parametrize("found", sorted(FOUND_AT_FULL_MARKS), ids=lambda f: FOUND_AT_FULL_MARKS[f])
def test_the_build_loses_marks_and_its_feedback_names_the_rule(found):
    slip = BY_NAME[FOUND_AT_FULL_MARKS[found]]
    if slip.exercise == "ex02":
        failure = inprocess.first_failure({slip.cell: slip.apply(inprocess.answer(slip.cell))}, NEAREST[slip.cell])
        assert failure is not None, f"{found}: full marks in ex02"
        message = failure[1]
    else:
        message = _ex03_first_failure(slip.apply(ex03._cells()[slip.cell]))
        assert message is not None, f"{found}: full marks in ex03"
    for words in RULE_WORDS[slip.name]:
        assert words in message, (found, message)
    if slip.name in SCHEDULES:
        assert re.search(r": step \d+: ", message), f"{found}: the feedback does not name the step: {message}"


def test_the_solution_passes_the_new_checks():
    """The solution itself keeps full marks on the checks these classes fail (the cell they fail in)."""
    ns = inprocess.namespace()
    for gid in ("p2_block_tables", "p3_preemption"):
        assert inprocess.run_hidden(ns, gid) is None, gid
    assert _ex03_first_failure(ex03._cells()["diagnose_answer"]) is None
