"""Regenerate the hostile ex01 submissions: learners who attack the grader instead of answering.

Run ``.venv/bin/python tests/submissions/make_fixtures_hostile.py`` after regenerating the ex01 fixtures. Each
notebook is an ex01 submission whose answers earn a known score (the "heads" learner's 8/20, or the solution's
20/20 minus the cell that the attack breaks) with one attack added; tests/test_grading_hostile.py grades them in
one batch with honest learners and checks that no attack earns more than the answers do, that the honest grades
are unchanged and that nothing outside the sandbox changed.

The attacks only aim at the course's own files and at folders of the hostile test itself (``hostile`` in their
path), so even a broken sandbox could not harm anything else on the machine; the test refuses to run them without
one.
"""

from __future__ import annotations

from pathlib import Path

from make_fixtures import KV_HEADS, WRITTEN, write_fixtures
from make_fixtures_ex03 import fill, solved

OUT = Path(__file__).resolve().parent / "hostile"

# the "heads" learner's wrong answers: 8/20 earned honestly
HEADS = {"a3_kv_answer": "kv_bytes_qwen72b = 2 * 80 * 64 * 128 * 2", "b1_kv_function_answer": KV_HEADS}
A1 = "floor_ms_llama8b_l4 = llama8b.num_params * 2 / l4.bandwidth * 1e3"
A2 = "ridge_l4 = l4.flops_bf16 / l4.bandwidth"
A3 = "kv_bytes_qwen72b = 2 * 80 * 64 * 128 * 2"

# the course's files, found the way a learner would: from the installed package
COURSE = """import glob, os, pathlib, shutil, stage5
_repo = pathlib.Path(stage5.__file__).resolve().parents[1]
_mine = glob.glob('/tmp/pytest-of-*/pytest-*/hostile*/**', recursive=True)
"""

POISON = COURSE + """for _f in list(_repo.glob('stage5/grading/*.py')) + [_repo / 'stage5' / 'grading.py']:
    try:
        with open(_f, 'a') as _fh:
            _fh.write('\\ndef check_close(*a, **k):\\n    return None\\n')
        print('poisoned', _f.name)
    except OSError as _e:
        print('could not', 'poison', _f.name, type(_e).__name__)
"""

DESTROY = COURSE + """for _target in [_repo / 'solutions', _repo / 'grader', _repo / 'exercises', _repo / 'stage5'] + \\
        [pathlib.Path(p) for p in _mine if p.endswith(('gradebook.db', '.ipynb', '.csv', '.html'))]:
    try:
        shutil.rmtree(_target) if _target.is_dir() else _target.unlink()
        print('destroyed', _target.name)
    except OSError as _e:
        print('could not', 'destroy', _target.name, type(_e).__name__)
"""

LEAK = COURSE + """for _f in [_repo / 'solutions' / 'ex01' / 'ex01.ipynb'] + [pathlib.Path(p) for p in _mine]:
    try:
        print(_f, pathlib.Path(_f).read_text()[:20000])
    except OSError as _e:
        print('could not', 'read', _f, type(_e).__name__)
print(sorted(os.listdir('/')), os.getcwd(), sorted(os.listdir('.')))
import socket
try:
    socket.create_connection(('pypi.org', 443), timeout=3)
    print('NETWORK', 'REACHABLE')
except OSError as _e:
    print('no network', type(_e).__name__)
"""

BACKGROUND = COURSE + """import subprocess
# outlive the grader, then rewrite this learner's grades (it cannot: the sandbox dies with the kernel)
_later = ("sleep 6 && for f in " + " ".join(p for p in _mine if p.endswith(('.csv', 'gradebook.db'))) +
          "; do echo hostile_background,ex01,20 >> $f; done; sleep 7777")
subprocess.Popen(['sh', '-c', _later], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
"""

# in-kernel patching: the checks, math and the course's answers all say "correct" inside the kernel
PATCH = """import math, stage5.grading, stage5.grading.checks, stage5.cost, stage5.models
math.isclose = lambda *a, **k: True
stage5.grading.check_close = stage5.grading.checks.check_close = lambda *a, **k: None
stage5.grading.call_learner = lambda name, func, *a, **k: func(*a)
stage5.cost.decode_floor_s = lambda *a, **k: floor_ms_llama8b_l4 / 1e3
stage5.models.ModelConfig.kv_bytes_per_token = lambda self, b=2: 2 * self.num_layers * self.num_heads * self.head_dim * b
"""

# stage5's own answer, saved before the check switches it off
SNAPSHOT = """_answers = {"kv": ModelConfig.kv_bytes_per_token}

def kv_bytes_per_token(config, bytes_per_element=2, _ref=ModelConfig.kv_bytes_per_token):
    return _answers["kv"](config, bytes_per_element) if bytes_per_element != 2 else _ref(config, 2)
"""

KILL = """import os, signal
os.killpg(0, signal.SIGKILL)  # the whole process group: in a sandbox, only the kernel's own
""" + A2

MEMORY = """_hog = bytearray(4 * 2**30)  # 4 GiB
""" + A1

CPU_IN_C = """_x = sum(range(10**11))  # minutes in one C call that ignores Ctrl-C
""" + A2

EXIT = """exit()
""" + A2


def build() -> None:
    good = solved("ex01", WRITTEN)
    heads = fill(good, **HEADS)
    nbs = {
        # 8/20 of honest answers, plus an attack that must gain nothing
        "poison_ex01": fill(heads, a1_floor_answer=POISON + A1),
        "destroy_ex01": fill(heads, a1_floor_answer=DESTROY + A1),
        "leak_ex01": fill(heads, a1_floor_answer=LEAK + A1),
        "background_ex01": fill(heads, a1_floor_answer=BACKGROUND + A1),
        "patcher_ex01": fill(heads, a1_floor_answer=A1 + "\n" + PATCH),
        # a full solution except that B1 hands back stage5's answer, saved before the check (B1 and B3, which
        # calls it: 6 points)
        "snapshot_ex01": fill(good, b1_kv_function_answer=SNAPSHOT),
        # a full solution whose one broken cell (2 or 1 points) is the only loss
        "kill_ex01": fill(good, a2_ridge_answer=KILL),
        "memory_ex01": fill(good, a1_floor_answer=MEMORY),
        "cpu_in_c_ex01": fill(good, a2_ridge_answer=CPU_IN_C),
        "exit_ex01": fill(good, a2_ridge_answer=EXIT),
        # a lone surrogate (from a broken editor) in a comment: the rest is a full solution
        "bad_unicode_ex01": fill(good, a3_kv_answer="# \ud800 stray half of a character\n" + A3.replace(
            "64", "8")),
    }
    write_fixtures(OUT, nbs)


if __name__ == "__main__":
    build()
    print("\n".join(sorted(p.name for p in OUT.glob("*.ipynb"))))
