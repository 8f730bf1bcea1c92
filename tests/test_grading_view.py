"""Issue 48, found case 2 (blocking): the answer functions out of reach, not only switched off. The kernel that
grades an exercise sees a course package in which the functions the exercise puts off limits have no code (each
defining module is a stubbed copy bound over the original, its cached bytecode hidden), so the learner's code
switching the in-kernel blocking off (``sys.modules["stage5.grading.remote"].unavailable = ...``) gains nothing.
Checked on the copies themselves and by one sandboxed process per exercise that tries the issue's evasions."""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys

import pytest
from grading_harness import REPO  # noqa: F401  (puts grader/ on the path)

from stage5.grading import view
from stage5.grading.ex02 import ATTENTION_BLOCKED, SERVING_BLOCKED
from stage5.grading.ex03 import DIAGNOSIS_BLOCKED
from stage5.grading.sandbox import Limits, bwrap_command, isolation, limited_command
from stage5.models import ModelConfig


def _solution_blocked_lists(exercise: str) -> set[str]:
    """Every target a hidden test of ``solutions/<exercise>`` switches off (its ``_blocked = [...]`` lists)."""
    found: set[str] = set()
    nb = json.loads((REPO / "solutions" / exercise / f"{exercise}.ipynb").read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_blocked"
                                                    for t in node.targets):
                found |= {e.value for e in getattr(node.value, "elts", []) if isinstance(e, ast.Constant)}
    return found


def test_each_exercise_view_covers_what_its_hidden_tests_switch_off():
    assert _solution_blocked_lists("ex01") and _solution_blocked_lists("ex01") <= set(view.BLOCKED["ex01"])
    assert set(DIAGNOSIS_BLOCKED) <= set(view.BLOCKED["ex03"])
    assert set(SERVING_BLOCKED) | set(ATTENTION_BLOCKED) <= set(view.BLOCKED["ex02"])  # what its probes switch off


@pytest.mark.parametrize("exercise", sorted(view.BLOCKED))
def test_every_off_limits_function_is_cut_from_its_copy(exercise, tmp_path):
    copies = view.views(view.BLOCKED[exercise], tmp_path)
    assert copies
    for target in view.BLOCKED[exercise]:
        path, qualname = view._definition(target)
        tree = ast.parse(copies[path].read_text())
        node, parts = tree, qualname.split(".")
        for part in parts:
            node = next(n for n in node.body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == part)
        assert len(node.body) == 1 and isinstance(node.body[0], ast.Raise), target  # no code of the answer left


ATTACK = r"""
import contextlib, marshal, pathlib, sys
import stage5.grading.remote as remote, stage5.grading.blocking as blocking
remote.unavailable = blocking.unavailable = lambda *a, **k: contextlib.nullcontext()  # the issue's switch
sys.modules["stage5.grading.remote"].unavailable = remote.unavailable
from stage5.models import get_model
cfg = get_model("gpt2")
def attempt(label, fn):
    try:
        print(label, "GOT", fn())
    except Exception as e:
        print(label, "refused", type(e).__name__)
for label, fn in CASES:
    attempt(label, fn)
import importlib as _il
_cut = _il.import_module(CUT)
for cached in pathlib.Path(_cut.__file__).parent.glob(f"__pycache__/{CUT.rsplit('.', 1)[-1]}.*.pyc"):
    print("bytecode", cached.name, len(cached.read_bytes()))
print("weight_bytes", cfg.weight_bytes(2) > 0)
"""
#: A module each exercise's view cuts: its cached bytecode (the real code) must read as empty in the sandbox.
CUT = {"ex01": "stage5.cost", "ex02": "stage5.engine.kv", "ex03": "stage5.cost", "ex04": "stage5.engine.fleet"}
CASES = {
    "ex01": """CASES = [("kv", lambda: getattr(cfg, "kv_bytes_per_" + "token")(2)),
         ("floor", lambda: __import__("stage5.cost", fromlist=["x"]).decode_floor_s),
         ("src", lambda: REAL_LINE in open(__import__("stage5.models", fromlist=["x"]).__file__).read()
                         or next(iter(())))]""",
    "ex03": """import stage5.levers, stage5.simulator, stage5.quantization
CASES = [("diagnose", lambda: stage5.levers.diagnose_reference({})),
         ("simulate", lambda: stage5.simulator.simulate(None)),
         ("gain", lambda: stage5.quantization.end_to_end_gain(None, None)),
         ("kv", lambda: cfg.kv_bytes_per_token(2))]""",
    # exercise 2: the spellings on its engine (the switch is on above), what it gives back (the model,
    # generate(), the visible check's shipped reference run), and a run that is not shipped
    "ex02": """import importlib, json, torch
import stage5.engine.engine as E
from stage5.engine.checkpoints import tiny_model
from stage5.engine.model import generate
from stage5.engine.sequence import Request, Sequence
from stage5.grading.ex02 import reference_trace
from stage5.grading.ex02_visible import KEY_FIELDS, RUNS_FILE
m = tiny_model()
kv = importlib.import_module("stage5.engine." + "kv")
shipped = json.loads(RUNS_FILE.read_text())[0]
CASES = [("engine", lambda: getattr(E.Engine(m, m.cfg, "paged", "continuous", num_blocks=8, block_size=4,
                                             max_batch=2), "r" + "un")([Request(0, (1, 2), 2)])),
         ("allocator", lambda: kv.PagedAllocator(4, 2).allocate()),
         ("admit", lambda: getattr(kv, "Contiguous" + "Allocator")(64).can_admit(Sequence(Request(0, (1, 2), 2)))),
         ("scheduler", lambda: sys.modules["stage5.engine.scheduler"].Scheduler(kv.PagedAllocator(4, 2), 2).plan()),
         ("attention", lambda: kv.KVPool(m.cfg, 8, torch.float64).plan([torch.tensor([0])], [torch.tensor([0])])),
         ("visible", lambda: reference_trace(*(shipped[k] for k in KEY_FIELDS)).steps),
         ("unshipped", lambda: reference_trace([["request", 0, [1, 2], 3, None]], "paged", "continuous", 4, 4, 2)),
         ("generate", lambda: generate(m, [1, 2, 3], 3))]""",
    "ex04": """import stage5.engine.fleet as fleet
CASES = [("route", lambda: fleet.route_by_prefix([1], [{"load": 0, "blocks": {1}}], 0, -1)),
         ("held", lambda: fleet.prefix_blocks_held([1], {1})),
         ("pick", lambda: fleet.pick_replica([1], [0], 0, -1)),
         ("kv", lambda: cfg.kv_bytes_per_token(2))]""",
}


@pytest.mark.skipif(isolation()[0] != "bwrap", reason=f"no sandbox here: {isolation()[1]}")
@pytest.mark.parametrize("exercise", sorted(CASES))
def test_switching_the_blocking_off_reaches_no_answer_in_the_sandbox(exercise, tmp_path):
    real = inspect.getsource(ModelConfig.kv_bytes_per_token).strip().splitlines()[-1].strip()  # its return line
    assert real.startswith("return"), real
    code = f"CUT = {CUT[exercise]!r}\n" + (
        f"REAL_LINE = {real!r}\n" + CASES[exercise] + "\n" + ATTACK if exercise == "ex01" else ATTACK.replace(
            "for label, fn in CASES:", CASES[exercise] + "\nfor label, fn in CASES:"))
    limits = Limits()
    cmd = bwrap_command(limited_command([sys.executable, "-c", code], limits), tmp_path, limits=limits,
                        views=view.build(exercise))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    refused = {"ex01": ("kv", "src"), "ex02": ("engine", "allocator", "admit", "scheduler", "attention"),
               "ex03": ("diagnose", "simulate", "gain"), "ex04": ("route", "held", "pick")}[exercise]
    for label in refused:
        assert lines[label].startswith("refused"), (label, done.stdout)
    if exercise == "ex01":  # reached, the function itself is the stub that raises
        assert lines["floor"].startswith("GOT <function decode_floor_s"), done.stdout
    elif exercise == "ex02":  # by the stub's own error, not by a call that went wrong some other way
        assert all(lines[label] == "refused UnavailableError" for label in refused), done.stdout
        # the visible check still has its reference run; one not shipped is refused
        from stage5.grading.ex02 import engine_run
        from stage5.grading.ex02_visible import KEY_FIELDS, RUNS_FILE
        shipped = json.loads(RUNS_FILE.read_text())[0]
        assert lines["visible"] == f"GOT {engine_run(*(shipped[k] for k in KEY_FIELDS)).steps}", done.stdout
        assert lines["unshipped"] == "refused GradingError", done.stdout
        assert lines["generate"].startswith("GOT ["), done.stdout
    else:  # exercise 3 gives kv_bytes_per_token back (you wrote it in exercise 1); exercise 4 never takes it
        assert lines["kv"].startswith("GOT "), done.stdout
    assert lines["weight_bytes"] == "True"  # what the exercise gives stays
    assert all(v.endswith(" 0") for k, v in lines.items() if k == "bytecode"), done.stdout
