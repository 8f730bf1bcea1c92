"""The structural learner slips of tests/learner_slips.py, graded: none gets full marks unless it is listed as
equivalent, with the reason, and every equivalent one keeps full marks.

The slips were written from the exercise text, not from the hidden checks, so this is the test that finds the next
wrong build that gets full marks before a learner does. Run with ``-s`` to see every slip with its mark (ex02: the
first hidden check it fails and the most it can score; ex03: its mark out of the autograded points).

ex02's slips run the hidden checks in this process (tests/ex02_inprocess.py), nearest check first; ex03's run its
``diagnose`` on the hidden deployments (tests/test_ex03_mutants.py). The scheduling slips listed as equivalent are
also run on a seeded search of small workloads (tight pools, ids out of arrival order, a cache that says no), where
their schedule must equal the solution's on every one: the reason given for them is a claim about every workload.
"""

from __future__ import annotations

import json
import random

import ex02_inprocess as inprocess
import ex02_tracesim as tracesim
import pytest
import test_ex03_mutants as ex03
from learner_slips import EQUIVALENT as FIRST_EQUIVALENT
from learner_slips import SLIPS as FIRST
from learner_slips_second import SECOND, SECOND_EQUIVALENT
from test_ex02_mutants import NEAREST, _hidden_serving_runs

POINTS = {ex: {c["metadata"]["nbgrader"]["grade_id"]: c["metadata"]["nbgrader"].get("points", 0)
               for c in json.loads((inprocess.REPO / "solutions" / ex / f"{ex}.ipynb").read_text())["cells"]
               if c["metadata"].get("nbgrader", {}).get("grade")}
          for ex in ("ex02", "ex03")}
AUTOGRADED = {ex: sum(p for gid, p in points.items() if gid not in ("p4_written", "c1_written"))
              for ex, points in POINTS.items()}
SCHEDULING_CELLS = ("serve_answer", "static_answer")


def _source(slip) -> str:
    if slip.exercise == "ex02":
        return slip.apply(inprocess.answer(slip.cell))
    return slip.apply(ex03._cells()[slip.cell])


# The first list was written by the session that then wired it in, before it read the hidden checks; the second by a
# helper that read only the released exercises and the reference answers, never the grader or the first list.
SLIPS = FIRST + SECOND
EQUIVALENT = {**FIRST_EQUIVALENT, **SECOND_EQUIVALENT}


def test_every_slip_applies_once_and_every_listed_equivalent_is_a_slip():
    names = [s.name for s in SLIPS]
    assert len(names) == len(set(names))
    assert set(EQUIVALENT) <= set(names)
    for slip in SLIPS:
        compile(_source(slip), slip.name, "exec")  # each replacement is found exactly once (Slip.apply)
        assert slip.rule and EQUIVALENT.get(slip.name, "x")


def test_every_ex02_slip_loses_marks(capsys):
    rows, missed = [], []
    for slip in SLIPS:
        if slip.exercise != "ex02" or slip.name in EQUIVALENT:
            continue
        failure = inprocess.first_failure({slip.cell: _source(slip)}, NEAREST[slip.cell])
        if failure is None:
            missed.append(slip)
            rows.append(f"  FULL MARKS {slip.name:36s} 16/16 - breaks: {slip.rule}")
        else:
            gid, message = failure
            most = AUTOGRADED["ex02"] - POINTS["ex02"].get(gid, AUTOGRADED["ex02"])
            rows.append(f"  at most {most:2d}/{AUTOGRADED['ex02']} {slip.name:36s} fails {gid}: {message[:120]}")
    with capsys.disabled():
        print(f"\nex02 structural slips: {len(rows) - len(missed)} of {len(rows)} lose marks "
              f"({sum(s.exercise == 'ex02' for s in SLIPS) - len(rows)} listed as equivalent)")
        print("\n".join(rows))
    assert not missed, f"slips that get full marks in ex02: {[(s.name, s.rule) for s in missed]}"


def test_every_ex03_slip_loses_marks(capsys):
    cells = ex03._cells()
    rows, missed = [], []
    for slip in SLIPS:
        if slip.exercise != "ex03" or slip.name in EQUIVALENT:
            continue
        failed = ex03._failed_checks(_source(slip), cells)
        mark = AUTOGRADED["ex03"] - sum(POINTS["ex03"][gid] for gid in failed)
        rows.append(f"  {mark:2d}/{AUTOGRADED['ex03']} {slip.name:36s} fails {', '.join(failed) or 'nothing'}")
        if not failed:
            missed.append(slip)
    with capsys.disabled():
        print(f"\nex03 structural slips: {len(rows) - len(missed)} of {len(rows)} lose marks")
        print("\n".join(rows))
    assert not missed, f"slips that get full marks in ex03: {[(s.name, s.rule) for s in missed]}"


# ---- the equivalent ones keep full marks, and the scheduling ones keep the schedule on every workload tried

EX02_EQUIVALENT = [s for s in SLIPS if s.exercise == "ex02" and s.name in EQUIVALENT]
EX03_EQUIVALENT = [s for s in SLIPS if s.exercise == "ex03" and s.name in EQUIVALENT]


@pytest.mark.parametrize("slip", EX02_EQUIVALENT, ids=[s.name for s in EX02_EQUIVALENT])
def test_an_equivalent_ex02_slip_passes_the_hidden_checks_nearest_it(slip):
    """The hidden checks nearest the slip's cell pass (the schedule test below covers every serving run)."""
    ns = inprocess.namespace({slip.cell: _source(slip)})
    for gid in NEAREST[slip.cell]:
        assert inprocess.run_hidden(ns, gid) is None, (slip.name, gid, EQUIVALENT[slip.name])


@pytest.fixture(scope="module")
def hidden_runs():
    runs = _hidden_serving_runs()
    base = inprocess.namespace()
    return runs, [tracesim.simulate(base, *run) for run in runs]


@pytest.mark.parametrize("slip", [s for s in EX02_EQUIVALENT if s.cell in SCHEDULING_CELLS],
                         ids=[s.name for s in EX02_EQUIVALENT if s.cell in SCHEDULING_CELLS])
def test_an_equivalent_scheduling_slip_keeps_every_schedule(slip, hidden_runs):
    """Every hidden serving run, then a seeded search of 300 small workloads (pools from roomy to far too small,
    ids shuffled or not, with and without a cache that says no), schedule for schedule."""
    runs, reference = hidden_runs
    ns = inprocess.namespace({slip.cell: _source(slip)})
    assert [tracesim.simulate(ns, *run) for run in runs] == reference, slip.name
    base = inprocess.namespace()
    rng = random.Random(41)
    function = "serve" if slip.cell == "serve_answer" else "serve_static"
    tried = 0
    while tried < 300:
        n, size, blocks, batch = rng.randint(2, 9), rng.choice([1, 2, 4, 8]), rng.randint(3, 16), rng.randint(1, 8)
        ids = rng.sample(range(100), n) if rng.random() < 0.5 else list(range(n))
        workload = []
        for i in ids:
            prompt, cap = rng.randint(1, 9), rng.randint(1, 16)
            workload.append(["request", i, list(range(1, prompt + 1)), cap, rng.randint(1, cap)])
        if any(len(r[2]) + r[3] > blocks * size for r in workload):
            continue
        refusals = [[rng.choice(ids), rng.randint(2, 20)] for _ in range(rng.randint(0, 3))]
        continuous = None if function == "serve_static" else rng.random() < 0.85
        run = (function, "PagedCache", workload, "paged", blocks, size, batch, continuous, refusals)
        want = tracesim.simulate(base, *run)
        if isinstance(want, str):
            continue
        tried += 1
        assert tracesim.simulate(ns, *run) == want, (slip.name, run)


@pytest.mark.parametrize("slip", EX03_EQUIVALENT, ids=[s.name for s in EX03_EQUIVALENT])
def test_an_equivalent_ex03_slip_keeps_every_hidden_answer(slip):
    """The same labels and a gain within 1% on every hidden deployment (far inside the 5% a gain may be off)."""
    cells = ex03._cells()
    deployment, right = ex03._diagnose(cells["diagnose_answer"], cells)
    _, slipped = ex03._diagnose(_source(slip), cells)
    for cases in ex03._hidden_cases(cells).values():
        for case in cases:
            dep = dict(deployment(*case[:7], **case[7]))
            want, got = right(dict(dep)), slipped(dict(dep))
            assert [got[k] for k in ("phase", "decode_bound", "best_lever")] == \
                [want[k] for k in ("phase", "decode_bound", "best_lever")], (slip.name, case)
            assert got["gain"] == pytest.approx(want["gain"], rel=0.01), (slip.name, case)
