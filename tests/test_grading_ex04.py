"""ex04 (build a fleet router) graded end to end, as `make grade ASSIGNMENT=ex04` grades it: the release regenerated
from the solution, each fixture (tests/submissions/ex04, built by tests/submissions/make_fixtures_ex04.py) run in
the sandbox, the hidden tests run in the grader against the learner's answers handed over as data. One grading
run per module; every test reads its results.
"""

from __future__ import annotations

import pytest
from grading_harness import check_feedback_has, check_release_is_fresh, check_result, grade_classes

AUTO_MAX = 10  # nothing is marked by hand
EVERY = {"p1_held", "p2_prefix", "p2_bound", "p2_ties", "p3_prediction", "p3_fleet"}

# student: (score, failed checks, words the feedback must contain)
EXPECTED = {
    "solved": (10, set(), []),
    "blank": (0, EVERY, ["NotImplementedError"]),
    "ignores_bound": (6, {"p2_bound", "p3_fleet"}, ["out of bounds", "the load bound spreads the requests"]),
    "hash_prompt": (3, {"p2_prefix", "p2_bound", "p2_ties", "p3_fleet"}, ["holds a longer prefix of the prompt"]),
    "other_cache": (3, {"p2_prefix", "p2_bound", "p2_ties", "p3_fleet"}, ["the longest prefix wins even on a busy"]),
    # passes every visible test: the hidden cases and the hidden fleet under the tightest bound find it, and the
    # fleet's replay of its picks says what they cost
    "lowest_index": (7, {"p2_ties", "p3_fleet"}, ["the first tied replica in turn after last_pick",
                                                  "hidden fleet 3", "prompt tokens (the rules' router"]),
    # the reference routing is cut out of the sandbox's course package: only the prediction stands
    "delegates": (1, EVERY - {"p3_prediction"}, ["computes this answer for you"]),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return grade_classes(tmp_path_factory.mktemp("class4"), {"ex04": "ex04"})


def test_the_release_is_fresh(graded):
    check_release_is_fresh(graded[0], "ex04")


@pytest.mark.parametrize("student", sorted(EXPECTED))
def test_scores_failed_checks_and_feedback(graded, student):
    course, results = graded
    score, failed, words = EXPECTED[student]
    check_result(results[("ex04", student)], score, failed, AUTO_MAX, 0)
    check_feedback_has(course, student, "ex04", words)
    text = course.feedback_text(student, "ex04")
    for secret in ("BEGIN HIDDEN TESTS", "_check(", "FLEET_RUNS", "ROUTE_CASES"):
        assert secret not in text, (student, secret)
