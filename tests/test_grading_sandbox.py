"""The pieces of trustworthy grading, without a notebook: the sandbox, the limits, the answer channel between the
learner's kernel and the grader, and where each hidden block runs. (Whole notebooks: test_grading_hostile.py.)"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from grading_harness import REPO
from host_checks import _free_names, split_hidden
from nbformat import NotebookNode

from stage5.grading import GradingError, call_diagnose, call_learner, remote
from stage5.grading.protocol import ProtocolError
from stage5.grading.remote import Opaque, RemoteFunction, decode, encode
from stage5.grading.sandbox import Limits, bwrap_command, isolation, limited_command
from stage5.hardware import get_gpu
from stage5.models import get_model

sandboxed = pytest.mark.skipif(isolation()[0] != "bwrap", reason=f"no sandbox here: {isolation()[1]}")


def _run(argv, tmp_path, limits=None):
    cmd = limited_command(argv, limits or Limits())
    if isolation()[0] == "bwrap":
        cmd = bwrap_command(cmd, tmp_path)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


@sandboxed
def test_sandbox_hides_the_course_and_keeps_it_read_only(tmp_path):
    probe = f"""
import os, pathlib, socket, stage5
repo = pathlib.Path({str(REPO)!r})
print('solutions', (repo / 'solutions').exists(), 'grader', (repo / 'grader').exists())
try:
    open(pathlib.Path(stage5.__file__).parent / 'cost.py', 'a'); print('WROTE')
except OSError as e:
    print('read-only', type(e).__name__)
try:
    socket.create_connection(('1.1.1.1', 53), timeout=2); print('NET')
except OSError:
    print('no network')
print('pid', os.getpid(), 'files', sorted(os.listdir('.')))
open('scratch.txt', 'w').write('ok'); print('wrote', open('scratch.txt').read())
"""
    done = _run([sys.executable, "-c", probe], tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "solutions False grader False" in out and "read-only" in out and "no network" in out, out
    assert "WROTE" not in out and "NET\n" not in out
    assert int(out.split("pid ")[1].split()[0]) < 10  # its own process namespace
    # the working folder is writable, and is a sized tmpfs thrown away with the sandbox, not the host's folder
    assert "wrote ok" in out and not (tmp_path / "scratch.txt").exists()


def test_limits_cap_memory_and_reject_nonsense(tmp_path):
    done = _run([sys.executable, "-c", "b = bytearray(3 * 2**30)"], tmp_path, Limits(memory_bytes=2**30))
    assert done.returncode != 0 and "MemoryError" in done.stderr
    with pytest.raises(ValueError, match="cell_cpu_s must be positive"):
        Limits(cell_cpu_s=0)


def test_answers_cross_as_data_and_stage5_configs_rebuild():
    m, g = get_model("qwen2.5-7b"), get_gpu("L4")
    value = {"phase": "decode", "gain": 1.5, (1, 2): [m, g], "n": np.int64(3), "x": np.float64(0.25),
             "inf": math.inf}
    back = decode(json.loads(json.dumps(encode(value))))
    assert back[(1, 2)] == [m, g] and back["n"] == 3 and back["x"] == 0.25 and back["inf"] == math.inf
    assert isinstance(decode(encode(object())), Opaque)
    with pytest.raises(ProtocolError, match="does not read"):  # no name a kernel sends is ever resolved
        decode({"__stage5__": "os:system", "fields": {}})


def test_learner_functions_run_in_the_kernel_with_answers_blocked(monkeypatch):
    """RemoteFunction -> serve() (the kernel's side) -> call_learner there, with stage5's answer switched off."""
    def honest(config, b):
        return 2 * config.num_layers * config.num_kv_heads * config.head_dim * b

    def delegates(config, b):
        return config.kv_bytes_per_token(b)

    def diagnose(dep):
        return {"phase": "decode", "seen": dep["model"]}

    kernel = {"honest": honest, "delegates": delegates, "diagnose": diagnose}
    monkeypatch.setattr(remote, "_main", lambda: kernel)
    blocked = ["stage5.models.ModelConfig.kv_bytes_per_token"]
    m = get_model("mistral-7b")
    assert call_learner("B1", RemoteFunction("honest", remote.serve), m, 2, blocked=blocked) == m.kv_bytes_per_token(2)
    with pytest.raises(GradingError, match="computes this answer for you"):
        call_learner("B1", RemoteFunction("delegates", remote.serve), m, 2, blocked=blocked)
    with pytest.raises(GradingError, match="expected a function, got NoneType"):
        call_learner("B1", RemoteFunction("missing", remote.serve), m, 2)
    deps = [dict(model=name, gpu="L4", num_gpus=1, prompt=128, output=64, concurrency=1, objective="cost")
            for name in ("a", "b")]
    got = call_diagnose("B2", RemoteFunction("diagnose", remote.serve), deps, blocked=[])
    assert [d["seen"] for d in got] == ["a", "b"]
    assert json.loads(remote.values(["honest", "nope"])) == {"honest": {"function": True}, "nope": {"missing": True}}


def _cell(source, **meta):
    return NotebookNode(cell_type="code", source=source, metadata={"nbgrader": meta}, outputs=[])


def test_hidden_blocks_run_in_the_grader():
    src = ("assert x > 0\n### BEGIN HIDDEN TESTS\nfrom stage5.grading import check_close as _c\n_c('A', x, 2)\n"
           "### END HIDDEN TESTS\n")
    visible, hidden = split_hidden(_cell(src, grade=True, solution=False))
    assert visible.strip() == "assert x > 0" and "check_close" in hidden and "HIDDEN" not in visible
    assert _free_names(hidden) == {"x"}
    # exercise 2's engine checks drive the learner's objects by name through the grader's `_kernel`: nothing is
    # fetched from the kernel before the block runs
    engine = ("### BEGIN HIDDEN TESTS\nfrom stage5.grading import check_allocator as _c, kernel_of as _k\n"
              "_c('P2', _k(globals()))\n### END HIDDEN TESTS\n")
    _, hidden_engine = split_hidden(_cell(engine, grade=True, solution=False))
    assert _free_names(hidden_engine) == set()
    assert split_hidden(_cell(src, grade=False, solution=True)) is None
    assert split_hidden(_cell("assert x > 0", grade=True, solution=False)) is None


def test_committed_hidden_tests_are_split_as_expected():
    """Every assignment checks everything in the grader: ex02's kernel hands over its engine's traces."""
    for assignment, in_grader in (("ex01", True), ("ex03", True), ("clearing", True), ("ex02", True)):
        nb = json.loads((REPO / "solutions" / assignment / f"{assignment}.ipynb").read_text())
        cells = [NotebookNode(c, source="".join(c["source"])) for c in nb["cells"]]
        hidden = [c for c in cells if "BEGIN HIDDEN TESTS" in c.source]
        split = [c for c in hidden if split_hidden(c)]
        assert hidden and (len(split) == len(hidden) if in_grader else len(split) < len(hidden)), assignment
