"""Issue 48, found case 2: the answer functions reached around the review column. Each spelling the issue found
(and its neighbours) is flagged; each exercise's off-limits table matches what its Rules say; the course's own
solutions raise no flag under their exercise's table. Reads notebooks only (nothing runs)."""

from __future__ import annotations

import json
import re
import sys

import pytest
from grading_harness import REPO

sys.path.insert(0, str(REPO / "grader"))
import review  # noqa: E402

EXERCISES = ("ex01", "ex02", "ex03", "ex04", "clearing")


def _release(exercise: str) -> dict:
    return json.loads((REPO / "exercises" / exercise / f"{exercise}.ipynb").read_text())


def _flags(source: str, exercise: str) -> list[str]:
    return review.review_sources([source], {"cells": []}, exercise)


EVASIONS = {  # (exercise, learner code, words its flag must contain)
    "the switch": ("ex01", 'import sys\nsys.modules["stage5.grading.remote"].unavailable = lambda *a, **k: None\n',
                   "sys.modules"),
    "the switch's name": ("ex01", "import sys\nm = sys.modules['stage5.grading.blocking']\n", "grader's own code"),
    "the switch through getattr": ("ex01", "setattr(m, 'unavai' + 'lable', f)\n", "grader's switch"),
    "getattr with a built string": ("ex01", 'f = getattr(cfg, "kv_bytes_per_" + "token")\n', "kv_bytes_per_token"),
    "getattr with a variable": ("ex01", "f = getattr(cfg, name)\n", "name built at run time"),
    "an f-string name": ("ex01", 'f = getattr(cfg, f"kv_bytes_per_{part}")\n', "name built at run time"),
    "sys.modules lookup": ("ex01", "import sys\nc = sys.modules.get('stage5.cost')\n", "sys.modules"),
    "from sys import modules": ("ex01", "from sys import modules\n", "sys.modules"),
    "importlib": ("ex01", "import importlib\nc = importlib.import_module(x)\n", "importlib"),
    "__import__ as a value": ("ex01", "imp = __import__\nc = imp(x)\n", "__import__"),
    "__builtins__": ("ex01", "c = __builtins__.__dict__['__imp' + 'ort__'](x)\n", "__builtins__"),
    "operator.attrgetter": ("ex01", "from operator import attrgetter\nf = attrgetter(n)(cfg)\n", "attrgetter"),
    "stage5.simulator.cost": ("ex01", "import stage5.simulator\nx = stage5.simulator.cost.max_concurrency(a)\n",
                              "max_concurrency"),
    "ex03 levers plainly": ("ex03", "import stage5.levers\ndef diagnose(d):\n    return "
                            "stage5.levers.diagnose_reference(d)\n", "stage5.levers"),
    "ex03 from levers": ("ex03", "from stage5.levers import diagnose_reference\n", "stage5.levers"),
    "ex03 simulate": ("ex03", "from stage5.simulator import simulate\n", "stage5.simulator.simulate"),
    "ex03 quantization gains": ("ex03", "import stage5.quantization as q\ng = q.end_to_end_gain(a, b)\n",
                                "stage5.quantization"),
    "ex03 a gain by attribute": ("ex03", "g = mod.decode_step_gain(a, b)\n", "decode_step_gain"),
    "ex02 the reference engine": ("ex02", "from stage5.engine.engine import Engine\n", "stage5.engine.engine"),
    "ex02 the engine by a built name": ("ex02", 'r = getattr(E, "Eng" + "ine")\n', "Engine, the course's own answer"),
    "ex02 the allocators through importlib": ("ex02", 'import importlib\nkv = importlib.import_module('
                                              '"stage5.engine." + "kv")\n', "importlib.import_module"),
    "ex02 the switch": ("ex02", 'import sys\nsys.modules["stage5.grading.remote"].unavailable = f\n', "sys.modules"),
    "clearing scaling": ("clearing", "import stage5.scaling\n", "stage5.scaling"),
}


@pytest.mark.parametrize("case", sorted(EVASIONS))
def test_each_evasion_is_flagged(case):
    exercise, source, words = EVASIONS[case]
    flags = _flags(source, exercise)
    assert any(words in f for f in flags), (case, flags)


def test_ex03_gives_kv_bytes_per_token_back():
    """Exercise 3's Rules allow ``kv_bytes_per_token`` (written in exercise 1); exercise 1 forbids it."""
    code = "b = model.kv_bytes_per_token()\n"
    assert _flags(code, "ex03") == []
    assert _flags(code, "ex01")


def _rules_names(exercise: str) -> set[str]:
    """The ``stage5.x`` names in the exercise's Rules paragraph (up to the next blank line)."""
    text = "\n".join("".join(c["source"]) for c in _release(exercise)["cells"] if c["cell_type"] == "markdown")
    rules = text[text.index("**Rules.**"):]
    rules = rules.split("\n\n")[0]
    return set(re.findall(r"`(stage5(?:\.\w+)+)`", rules)) | set(
        f"stage5.{w}" for w in re.findall(r"\bthe (simulator)\b", rules))


@pytest.mark.parametrize("exercise", EXERCISES)
def test_each_exercise_table_holds_what_its_rules_put_off_limits(exercise):
    names = _rules_names(exercise)
    assert names, exercise
    modules = review.OFF_LIMITS[exercise].modules
    for name in names:
        assert any(name == m or m.startswith(name + ".") or name.startswith(m + ".") for m in modules), (
            exercise, name, modules)


def test_ex03s_rules_are_the_issues():
    assert {"stage5.levers", "stage5.simulator.simulate", "stage5.quantization"} <= _rules_names("ex03")


@pytest.mark.parametrize("exercise", EXERCISES)
def test_the_solutions_raise_no_flag_under_their_exercises_table(exercise):
    solution = json.loads((REPO / "solutions" / exercise / f"{exercise}.ipynb").read_text())
    assert review.review_notebook(solution, _release(exercise), exercise) == []
