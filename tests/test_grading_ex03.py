"""ex03 (diagnose a deployment) and the clearing test, graded end to end with one gradebook.

Both classes of fixtures (tests/submissions/ex03 and tests/submissions/clearing, built by
tests/submissions/make_fixtures_ex03.py) are graded once per module; the tests read the results. Also checks that
ex03's hidden deployments stay unambiguous under the reference (stage5.levers), so a change to the cost model that
makes one a near-tie fails here rather than in a learner's grade.
"""

from __future__ import annotations

import ast
import json

import pytest
from grading_harness import REPO, check_feedback_has, check_release_is_fresh, check_result, grade_classes

ASSIGNMENTS = ("ex03", "clearing")
# (autograded points, points marked by hand). Every clearing fixture leaves its written answers as released, which
# nbgrader scores 0 by itself (as Formgrader and the feedback page show): nothing is left to mark by hand.
AUTO_MAX = {"ex03": (16, 3), "clearing": (17, 0)}
EX03_B = {"b1_phase_bound", "b2_general", "b3_high_batch", "b4_long_answers", "b5_kv_heavy", "b6_latency"}

# (assignment, student): (score, failed checks, words the feedback must contain)
EXPECTED = {
    ("ex03", "solved"): (16, set(), []),
    ("ex03", "blank"): (0, EX03_B | {"a1_prediction", "a2_prediction", "a3_prediction"},
                        ["NotImplementedError", "not defined"]),
    ("ex03", "always_speculative"): (4, EX03_B - {"b1_phase_bound"} | {"a1_prediction", "a2_prediction"},
                                     ["the verify pass is no longer free"]),
    # a long prompt (B4's, and B6's 8,000-token one judged on latency) is not a reason to cache it
    ("ex03", "long_prompt_cache"): (12, {"b4_long_answers", "b6_latency"}, ["prefix caching only removes prefill work"]),
    # attention's KV reads add to the step without deciding its bound (chapter 2), so leaving them out keeps
    # phase and bound right here and gets the levers' gains wrong
    ("ex03", "no_kv_traffic"): (6, {"b2_general", "b3_high_batch", "b4_long_answers", "b5_kv_heavy", "b6_latency"},
                                ["each step reads every sequence's KV"]),
    ("ex03", "no_kv_memory"): (10, {"b2_general", "b4_long_answers", "b5_kv_heavy"},
                               ["fits in KV memory", "batching is limited here: by the KV memory"]),
    # builds an instructor found at full marks (issue 41): the phase read off the latency metric, and prefix caching
    # that shortens the decode context as well as the prefill
    ("ex03", "latency_phase"): (13, {"b1_phase_bound"}, ["under the latency objective too"]),
    ("ex03", "prefix_decode"): (14, {"b2_general"}, ["each decode step still reads the whole context's KV"]),
    ("ex03", "capital_labels"): (16, set(), []),  # "Batching", "Prefix-Caching", " memory": visible and hidden
    ("ex03", "rounded_gain"): (16, set(), []),  # a gain rounded to two decimals is still within 5%
    ("ex03", "delegates"): (3, EX03_B, ["computes this answer for you"]),
    ("ex03", "crash"): (3, EX03_B, ["KeyError"]),
    ("clearing", "solved"): (17, set(), []),
    ("clearing", "blank"): (0, {"q1_kv", "q2_concurrency", "q3_floor", "q4_intensity", "q5_ceiling", "q9_lever",
                                "q10_bytes", "q11_experts", "q12_crossover"},
                            ["NotImplementedError"]),
    ("clearing", "query_heads"): (13, {"q1_kv", "q2_concurrency"}, ["query heads"]),
    ("clearing", "units"): (14, {"q3_floor", "q4_intensity"},
                            ["each read only half of the weights", "each BF16 parameter is 2 bytes"]),
    ("clearing", "speculative_first"): (15, {"q9_lever"}, ["best_lever is wrong"]),
    ("clearing", "roundup"): (15, {"q2_concurrency"}, ["one too many: round down"]),
    ("clearing", "one_gpu"): (15, {"q2_concurrency"}, ["one GPU holds (per GPU)"]),
    ("clearing", "reserve_once"): (15, {"q2_concurrency"}, ["64 GiB on eight, not 8 GiB once"]),
    ("clearing", "flops_floor"): (15, {"q3_floor"}, ["the arithmetic time (FLOPs / FLOP/s)"]),
    ("clearing", "flops_once"): (14, {"q4_intensity", "q5_ceiling"},
                                 ["a multiply-add is 2 FLOPs", "2 FLOPs per parameter per token, not 1"]),
    ("clearing", "undivided"): (11, {"q10_bytes", "q11_experts", "q12_crossover"},
                                ["tensor parallelism divides the bytes", "tokens share experts",
                                 "each of the 8 sequences brings its own cache"]),
    ("clearing", "resident"): (11, {"q10_bytes", "q11_experts", "q12_crossover"},
                               ["the KV cache is split by heads", "a step reads only those chosen",
                                "keys and values (factor 2)"]),
    ("clearing", "capitals"): (17, set(), []),  # "Batching" and 87.0 read as what they say
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return grade_classes(tmp_path_factory.mktemp("class3"), {a: a for a in ASSIGNMENTS})


def test_every_student_is_graded(graded):
    _, results = graded
    assert set(results) == set(EXPECTED)


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_scores_and_failed_checks(graded, key):
    _, results = graded
    score, failed, _ = EXPECTED[key]
    auto_max, manual = AUTO_MAX[key[0]]
    check_result(results[key], score, failed, auto_max, 0 if key == ("ex03", "blank") else manual)


@pytest.mark.parametrize("key", sorted(k for k, v in EXPECTED.items() if v[2]))
def test_feedback_names_the_misconception(graded, key):
    check_feedback_has(graded[0], key[1], key[0], EXPECTED[key][2])


def _hidden_cases():
    """ex03's hidden deployments, read from the hidden tests of the solution notebook."""
    nb = json.loads((REPO / "solutions" / "ex03" / "ex03.ipynb").read_text())
    cases = {}
    for cell in nb["cells"]:
        gid = cell["metadata"].get("nbgrader", {}).get("grade_id", "")
        src = "".join(cell["source"])
        if gid.startswith("b") and "_cases = [" in src:
            tree = ast.parse(src)
            for node in ast.walk(tree):
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_cases":
                    cases[gid] = ast.literal_eval(node.value)
    return cases


def _dep(case):
    model, gpu, n, prompt, output, conc, objective, extra = case
    return dict(model=model, gpu=gpu, num_gpus=n, prompt=prompt, output=output, concurrency=conc,
                objective=objective, **extra)


@pytest.mark.parametrize("feedback_of", [("ex03", "no_kv_traffic"), ("ex03", "always_speculative"),
                                         ("ex03", "blank"), ("clearing", "query_heads")])
def test_feedback_hides_hidden_tests_and_expected_values(graded, feedback_of):
    from stage5.grading import reference_diagnosis

    course, _ = graded
    text = course.feedback_text(feedback_of[1], feedback_of[0])
    for secret in ("BEGIN HIDDEN TESTS", "_check(", "_cases", "diagnose_reference(", "MARK SCHEME"):
        assert secret not in text
    for cases in _hidden_cases().values():
        for case in cases:
            ref = reference_diagnosis(_dep(case))
            value = ref.gains[ref.best_lever]
            for form in (repr(value), f"{value:.3f}"):
                if len(form.rstrip("0").rstrip(".")) >= 4:  # "1.5" or "2.000" also appear as ordinary text
                    assert form not in text, f"{feedback_of}: feedback shows an expected gain {form}"


def test_hidden_deployments_are_unambiguous():
    """Each hidden case: best lever >= 1.3x the runner-up, prefill share >= 0.15 from a half, and the decode step's
    larger roofline term >= 1.3x the other; and the set spans models, GPUs and both objectives."""
    from stage5 import cost
    from stage5.grading import reference_diagnosis
    from stage5.quantization import deployment

    cases = _hidden_cases()
    assert set(cases) == EX03_B
    every = [_dep(c) for c in cases["b1_phase_bound"]]
    assert sorted(map(str, every)) == sorted(str(_dep(c)) for g, cs in cases.items() if g != "b1_phase_bound"
                                             for c in cs)
    for dep in every:
        ref = reference_diagnosis(dep)
        first, second = sorted(ref.gains.values(), reverse=True)[:2]
        assert first / second >= 1.3, (dep, ref.gains)
        assert abs(ref.prefill_share - 0.5) >= 0.15, (dep, ref.prefill_share)
        d = deployment(dep["model"], dep["gpu"], dep["num_gpus"], dep.get("weights", "bf16"), dep.get("kv", "bf16"))
        step = cost.decode_step(d, dep["concurrency"], dep["prompt"] + dep["output"] / 2)
        hi, lo = sorted([float(step.memory_s), float(step.compute_s)], reverse=True)
        assert hi / lo >= 1.3, dep
    assert len({d["model"] for d in every}) >= 5 and len({d["gpu"] for d in every}) >= 5
    assert {d["objective"] for d in every} == {"cost", "latency"}
    assert {reference_diagnosis(d).best_lever for d in every} == {"batching", "prefix_caching", "quantization",
                                                                  "speculative"}
    assert {reference_diagnosis(d).decode_bound for d in every} == {"memory", "compute"}
    # the traps: speculative loses at high batch; long answers beat a long prompt; KV-heavy cases are not naive
    for case in cases["b3_high_batch"]:
        assert reference_diagnosis(_dep(case)).gains["speculative"] < 1
    for case in cases["b4_long_answers"]:
        ref = reference_diagnosis(_dep(case))
        assert case[3] >= 4096 and ref.best_lever != "prefix_caching" and ref.phase == "decode"


def _solution_diagnose():
    nb = json.loads((REPO / "solutions" / "ex03" / "ex03.ipynb").read_text())
    ns: dict = {}
    for cell in nb["cells"]:
        gid = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if gid in ("setup", "diagnose_answer"):
            exec("".join(cell["source"]), ns)  # noqa: S102 - our own solution notebook
    return ns["diagnose"], ns["Deployment"]


def test_solution_agrees_with_the_reference_off_the_hidden_set():
    """The first-principles solution equals stage5.levers exactly on a grid, so the stated rules are complete."""
    from stage5 import cost
    from stage5.grading import DIAGNOSIS_BLOCKED, reference_diagnosis, unavailable

    diagnose, deployment = _solution_diagnose()
    checked = 0
    # Models without a sliding window: the exercise's rules price KV per token, and stage5 caps a windowed
    # model's cache at its window (Mistral-7B past 4,096 tokens), which ex03 neither teaches nor grades.
    for model, gpu, n in (("llama3-8b", "L4", 1), ("qwen2.5-72b", "H100-SXM", 4), ("llama3.2-3b", "MI300X", 1)):
        for prompt, output in ((256, 2048), (4096, 128)):
            for conc in (1, 64):
                for objective in ("cost", "latency"):
                    for weights in ("bf16", "fp8"):
                        dep = deployment(model, gpu, n, prompt, output, conc, objective, weights=weights)
                        try:
                            ref = reference_diagnosis(dep)
                        except cost.InfeasibleDeployment:
                            continue
                        with unavailable(*DIAGNOSIS_BLOCKED):
                            got = diagnose(dep)
                        assert (got["phase"], got["decode_bound"], got["best_lever"]) == \
                            (ref.phase, ref.decode_bound, ref.best_lever), dep
                        assert got["gain"] == pytest.approx(ref.gains[ref.best_lever], rel=1e-9)
                        checked += 1
    assert checked >= 30


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_committed_release_matches_solutions(graded, assignment):
    check_release_is_fresh(graded[0], assignment)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_has_no_answers_and_installs_stage5(assignment):
    text = (REPO / "exercises" / assignment / f"{assignment}.ipynb").read_text()
    for secret in ("BEGIN SOLUTION", "HIDDEN TESTS", "MARK SCHEME", "check_diagnosis", "check_close", "_cases"):
        assert secret not in text
    nb = json.loads(text)
    setup = next(c for c in nb["cells"] if c["cell_type"] == "code")
    ex01 = json.loads((REPO / "exercises" / "ex01" / "ex01.ipynb").read_text())
    ex01_setup = "".join(next(c for c in ex01["cells"] if c["cell_type"] == "code")["source"])
    install = ex01_setup.split("import math")[0]
    assert "".join(setup["source"]).startswith(install)


def test_readme_lists_both():
    readme = (REPO / "README.md").read_text()
    assert "`exercises/ex03`" in readme and "`exercises/clearing`" in readme
