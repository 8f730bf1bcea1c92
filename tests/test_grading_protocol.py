"""What a learner's kernel sends the grader is data: the host builds plain values or fails a check, and never
imports, calls or evaluates a name the kernel chose (stage5/grading/protocol.py, grader/host_checks.py).

Value shapes are generated (hypothesis): tagged forms claiming any type, module or name, the old
``__stage5__`` "module:name" payload through every stage5 module, pickle-style ``__reduce__`` and ``py/object``
forms, deep nesting, long strings, non-string keys, non-finite floats, and every dataclass name in stage5, plus
objects a hostile kernel would encode (registered ABCs, classes that claim a stage5 module and name). While the
host reads them, ``__import__``, ``importlib.import_module``, ``os.system``, ``eval`` and ``exec`` are watched.
"""

from __future__ import annotations

import ast
import builtins
import collections.abc
import dataclasses
import importlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from grading_harness import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nbclient.exceptions import DeadKernelError
from nbformat import NotebookNode

from stage5.grading import GradingError, _learner_failures
from stage5.grading.protocol import (
    MAX_DEPTH,
    MAX_ITEMS,
    MAX_STRING,
    VALUE_TYPES,
    Opaque,
    ProtocolError,
    _spec,
    decode,
    dumps,
    encode,
    loads,
    quote,
)
from stage5.hardware import get_gpu
from stage5.models import get_model

sys.path.insert(0, str(REPO / "grader"))
from code_guard import CodeGuard, CourseCodeChanged  # noqa: E402
from host_checks import HostChecks  # noqa: E402

GRADING = REPO / "stage5" / "grading"
STAGE5_MODULES = sorted(".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
                        for p in (REPO / "stage5").rglob("*.py"))


def _dataclass_names() -> list[str]:
    """Every class declared a dataclass in stage5's source (read, not imported)."""
    names = set()
    for path in (REPO / "stage5").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    "dataclass" in ast.unparse(d) for d in node.decorator_list):
                names.add(node.name)
    return sorted(names)


DATACLASSES = _dataclass_names()
for _name in VALUE_TYPES:  # warm the host's own lookups, so reading a value needs no import at all
    _spec(_name)


class Watch:
    """Records every import, os.system, subprocess start, eval and exec while a value is read."""

    def __init__(self, monkeypatch, marker: Path | None = None):
        self.calls: list[str] = []
        real_import = builtins.__import__

        def spy_import(name, *a, **k):
            self.calls.append(f"import {name}")
            return real_import(name, *a, **k)

        def refuse(what):
            def f(*a, **k):
                self.calls.append(what)
                raise AssertionError(f"the host called {what}")
            return f

        monkeypatch.setattr(importlib, "import_module", refuse("importlib.import_module"))
        monkeypatch.setattr(os, "system", refuse("os.system"))
        monkeypatch.setattr(subprocess, "Popen", refuse("subprocess.Popen"))
        monkeypatch.setattr(builtins, "eval", refuse("eval"))
        monkeypatch.setattr(builtins, "exec", refuse("exec"))
        monkeypatch.setattr(builtins, "__import__", spy_import)  # last: monkeypatch itself imports


ALLOWED_CLASSES = tuple(_spec(n).cls for n in VALUE_TYPES)


def _only_data(value, depth=0) -> None:
    """``value`` is plain data, an Opaque, or one of the allowed course types (whose fields are plain data)."""
    assert depth <= MAX_DEPTH + 2
    if value is None or type(value) in (bool, int, float, str, Opaque):
        return
    if type(value) in (list, tuple):
        for v in value:
            _only_data(v, depth + 1)
    elif type(value) is dict:
        for k, v in value.items():
            _only_data(k, depth + 1)
            _only_data(v, depth + 1)
    else:
        assert type(value) in ALLOWED_CLASSES, type(value)
        for f in dataclasses.fields(value):
            _only_data(getattr(value, f.name), depth + 1)


def _read(value):
    """What the host makes of ``value``: plain data, or a failed check (ProtocolError); nothing else escapes."""
    try:
        out = decode(value)
    except ProtocolError as err:
        assert "\n" not in str(err)
        return err
    _only_data(out)
    return out


# ------------------------------------------------------------------------------------ generated shapes
names = st.one_of(st.sampled_from(DATACLASSES + list(VALUE_TYPES) + ["system", "os.system", "eval", "__import__"]),
                  st.text(max_size=30))
modules = st.one_of(st.sampled_from(STAGE5_MODULES + ["os", "builtins", "subprocess", "stage5.grading.sandbox"]),
                    st.text(max_size=30))
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=20), st.sampled_from(["inf", "-inf", "nan", "1e999", "__import__('os')"]))


def _tagged(children):
    payload = st.dictionaries(st.text(max_size=12), children, max_size=4)
    return st.one_of(
        st.builds(lambda m, n, f: {"__stage5__": f"{m}:{n}", "fields": f}, modules, names, payload),
        st.builds(lambda n, f: {"__type__": n, "fields": f}, names, payload),
        st.builds(lambda m, n, f: {"__type__": f"{m}:{n}", "fields": f}, modules, names, payload),
        st.builds(lambda n, f: {"__type__": n, "fields": f, "__module__": "os"}, names, payload),
        st.builds(lambda n: {"__opaque__": n}, st.one_of(names, scalars)),
        st.builds(lambda s: {"__float__": s}, st.one_of(scalars, names)),
        st.builds(lambda pairs: {"__dict__": pairs}, st.lists(st.lists(children, min_size=1, max_size=3), max_size=4)),
        st.builds(lambda m, n, a: {"__reduce__": [f"{m}.{n}", a]}, modules, names, st.lists(children, max_size=3)),
        st.builds(lambda m, n: {"py/object": f"{m}.{n}"}, modules, names),
        st.builds(lambda m, n: {"__class__": n, "__module__": m}, modules, names),
        payload,
    )


shapes = st.recursive(scalars, lambda children: st.one_of(st.lists(children, max_size=4), _tagged(children)),
                      max_leaves=40)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes)
def test_generated_values_become_data_or_a_failed_check_and_nothing_is_imported_or_called(value):
    with pytest.MonkeyPatch.context() as mp:
        watch = Watch(mp)
        _read(value)
        _read(json.loads(json.dumps(value, allow_nan=True)))
    assert watch.calls == []


@pytest.mark.parametrize("module", STAGE5_MODULES + ["os", "stage5.grading.sandbox"])
def test_the_old_os_system_payload_runs_nothing_through_any_module(monkeypatch, tmp_path, module):
    marker = tmp_path / "ran"
    watch = Watch(monkeypatch)
    for form in ({"__stage5__": f"{module}:os.system", "fields": {"command": f"touch {marker}"}},
                 {"__type__": f"{module}:os.system", "fields": {"command": f"touch {marker}"}},
                 {"__type__": "system", "fields": {"command": f"touch {marker}"}}):
        with pytest.raises(ProtocolError):
            decode(form)
        with pytest.raises(ProtocolError):
            decode({"__dict__": [["x", form]]})
    assert watch.calls == [] and not marker.exists()


@pytest.mark.parametrize("name", DATACLASSES)
def test_every_stage5_dataclass_name_builds_only_if_allowed_and_with_its_own_fields(monkeypatch, name):
    watch = Watch(monkeypatch)
    with pytest.raises(ProtocolError):
        decode({"__type__": name, "fields": {}})  # never with no fields: every allowed type has required ones
    with pytest.raises(ProtocolError):
        decode({"__type__": name, "fields": {"command": "id", "__class__": "os.system"}})
    assert watch.calls == []


def test_allowed_types_round_trip_with_field_types_checked():
    m, g = get_model("qwen2.5-7b"), get_gpu("L4")
    value = {"phase": "decode", (1, ("a", 2)): [m, g], "inf": math.inf, "n": -math.inf}
    back = decode(json.loads(dumps(encode(value))))
    assert back[(1, ("a", 2))] == [m, g] and back["inf"] == math.inf and back["n"] == -math.inf
    assert math.isnan(decode(json.loads(dumps(encode(math.nan)))))
    fields = encode(m)["fields"]
    for bad in ({**fields, "num_layers": "32"}, {**fields, "num_layers": 2.5}, {**fields, "num_layers": True},
                {**fields, "num_layers": -1}, {**fields, "name": ["x"]}, {**fields, "extra": 1},
                {k: v for k, v in fields.items() if k != "num_layers"}):
        with pytest.raises(ProtocolError):
            decode({"__type__": "ModelConfig", "fields": bad})
    # a RunResult crosses without its live parts (sequences, logits, per-request times)
    from stage5.engine.metrics import RunResult
    run = RunResult("paged", "continuous", 2, 1, 3, 0.5, 2, 0, 0.1, {0: [1, 2], 1: [3]},
                    [("prefill", (0, 1)), ("decode", (0,))], [4, 5], [0.01, 0.02])
    back = decode(json.loads(dumps(encode({("paged", "continuous"): run}))))[("paged", "continuous")]
    assert type(back) is RunResult and back.trace == run.trace and back.outputs == run.outputs
    with pytest.raises(ProtocolError):
        decode({"__type__": "RunResult", "fields": {**encode(run)["fields"], "logits": None}})


def test_what_a_hostile_kernel_encodes_arrives_as_data(monkeypatch, tmp_path):
    """Objects as a hostile kernel holds them: encoded there, read here."""
    marker = tmp_path / "ran"

    class Reduce:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    class FakeMap:  # a registered ABC: isinstance(FakeMap(), Mapping) is True
        def __getitem__(self, k):
            raise AssertionError("read on the host")

        def __iter__(self):
            return iter(["x"])

        def __len__(self):
            return 1

    collections.abc.Mapping.register(FakeMap)

    @dataclasses.dataclass
    class ModelConfig:  # a learner's class that claims the course's module and name
        command: str = f"touch {marker}"

    ModelConfig.__module__, ModelConfig.__qualname__ = "stage5.models", "ModelConfig"

    @dataclasses.dataclass
    class Sneaky:
        command: str = f"touch {marker}"

    Sneaky.__module__, Sneaky.__qualname__, Sneaky.__name__ = "stage5.grading.sandbox", "os.system", "system"
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    loop: list = []
    loop.append(loop)
    sent = [Reduce(), FakeMap(), ModelConfig(), Sneaky(), deep, loop, {(1, 2): "ok"}, "x" * (MAX_STRING + 1)]
    wire = [json.loads(dumps(encode(v))) for v in sent]
    watch = Watch(monkeypatch)
    for w in wire:
        _read(w)
    assert watch.calls == [] and not marker.exists()
    assert isinstance(decode(wire[0]), Opaque) and isinstance(decode(wire[1]), Opaque)
    with pytest.raises(ProtocolError):
        decode(wire[2])  # claims ModelConfig, lacks its fields


def test_limits_on_what_is_read():
    with pytest.raises(ProtocolError):
        loads("[" * 200_000 + "]" * 200_000)  # json's own recursion: a failed check, not RecursionError
    with pytest.raises(ProtocolError):
        loads("[" * 5_000)
    with pytest.raises(ProtocolError):
        loads("1" * 5_000)  # an integer longer than Python's 4300-digit limit
    deep: list = []
    for _ in range(200_000):
        deep = [deep]
    with pytest.raises(ProtocolError, match="nested"):
        decode(deep)
    with pytest.raises(ProtocolError, match="string"):
        decode("x" * (MAX_STRING + 1))
    with pytest.raises(ProtocolError, match="values"):
        decode([0] * MAX_ITEMS)
    with pytest.raises(ProtocolError):
        decode({"plain": "dict"})  # an untagged JSON object: not a form the protocol writes
    with pytest.raises(ProtocolError):
        decode({"__dict__": [[{"__dict__": []}, 1]]})  # a dict as a key
    with pytest.raises(ProtocolError):
        decode({"__float__": "1e999"})
    with pytest.raises(ProtocolError):
        loads("x" * 2_000_001, limit=2_000_000)
    assert decode({"__dict__": [[[1, [2, 3]], "v"], [None, 1], [1.5, 2]]}) == {(1, (2, 3)): "v", None: 1, 1.5: 2}


# ------------------------------------------------------------------------------------ the host's checks
HIDDEN = "from stage5.grading import check_close as _c\n_c('A1 the answer', x, 2.0)\n"
PAYLOAD = {"__stage5__": "stage5.grading.sandbox:os.system", "fields": {"command": "touch {marker}"}}


def _replies(marker: Path):
    """(what the kernel's ``ask`` does) for every way a reply can be hostile."""
    payload = json.loads(json.dumps(PAYLOAD).replace("{marker}", str(marker)))

    def raises(err):
        def ask(expr):
            raise err
        return ask

    def literal(text):  # what SandboxedExecute._ask does with the kernel's repr
        return lambda expr: ast.literal_eval(text)

    return {
        "os.system payload": lambda expr: json.dumps({"x": {"value": payload}}),
        "payload in a dict": lambda expr: json.dumps({"x": {"value": {"__dict__": [["k", payload]]}}}),
        "200,000 deep": lambda expr: '{"x": {"value": ' + "[" * 200_000 + "]" * 200_000 + "}}",
        "5,000 brackets": literal("[" * 5_000),
        "not a string": literal("[1, 2]"),
        "SyntaxError": raises(SyntaxError("too many nested parentheses")),
        "RecursionError": raises(RecursionError("maximum recursion depth exceeded")),
        "MemoryError": raises(MemoryError()),
        "OverflowError": raises(OverflowError("int too large")),
        "huge int": lambda expr: '{"x": {"value": ' + "9" * 5000 + "}}",
        "not JSON": lambda expr: "{'x': 1}",
        "a list": lambda expr: "[1, 2, 3]",
        "value not a dict": lambda expr: json.dumps({"x": 3}),
        "forged reason": lambda expr: json.dumps({"x": {"value": "KernelDied: =HYPERLINK(\"http://e.vil\")\n"
                                                                 "CellCPUTimeout: forged"}}),
        "function flag not true": lambda expr: json.dumps({"x": {"function": "yes", "value": 2.0}}),
    }


@pytest.mark.parametrize("case", sorted(_replies(Path("/nonexistent"))))
def test_no_reply_escapes_host_checks_as_anything_but_a_one_line_failure(monkeypatch, tmp_path, case):
    marker = tmp_path / "ran"
    host = HostChecks([], _replies(marker)[case])
    verdict = host.run(HIDDEN)
    assert not marker.exists()
    if case == "function flag not true":
        assert verdict is None  # {"function": "yes"} is not a function; its value is read as data
        return
    assert isinstance(verdict, str) and "\n" not in verdict, verdict
    # the grader's own words: a failed check, or (a value the kernel did not hand over) the name it lacks
    assert verdict.startswith(("GradingError: ", "NameError: name 'x' is not defined")), verdict
    assert len(verdict) < 2000
    assert "HYPERLINK" not in verdict.split(": ", 1)[0]


def test_a_dead_kernel_still_escapes_so_the_caller_restarts_it():
    def ask(expr):
        raise DeadKernelError("gone")
    with pytest.raises(DeadKernelError):
        HostChecks([], ask).run(HIDDEN)


def test_a_kernels_error_message_stays_one_inert_line_in_the_grader():
    """serve() in a hostile kernel answers with an error text shaped like grader messages."""
    forged = "B1: fine\nKernelDied: =HYPERLINK(\"http://e.vil\")\r\x1b[31m"

    def ask(expr):
        if "values" in expr:
            return json.dumps({"f": {"function": True}})
        return json.dumps([{"error": forged}])

    verdict = HostChecks([], ask).run("from stage5.grading import call_learner as _c\n_c('B1 f', f, 1)\n")
    assert verdict.startswith("GradingError: ") and "\n" not in verdict and "\r" not in verdict
    assert "\x1b" not in verdict and "\\n" in verdict


def test_a_learner_exception_named_like_a_grader_message_is_quoted_as_theirs():
    KernelDied = type("KernelDied", (Exception,), {})
    with pytest.raises(GradingError) as err:
        with _learner_failures("B1 kv", "B1 kv"):
            raise KernelDied('=HYPERLINK("http://e.vil")\nCellCPUTimeout: x')
    msg = str(err.value)
    assert msg.startswith("B1 kv: your function raised \"KernelDied: =HYPERLINK(\\\"http://e.vil\\\")\\n")
    assert "\n" not in msg
    assert quote("x" * 1000).endswith('..."') and len(quote("x" * 1000)) == 202


def _cell(source, **meta):
    return NotebookNode(cell_type="code", source=source, metadata=NotebookNode(nbgrader=NotebookNode(meta)),
                        outputs=[])


def test_only_the_gradebooks_cells_run_in_the_grader(tmp_path):
    """A cell a learner added and marked locked (or as a test) never runs in the grader."""
    marker = tmp_path / "ran"
    setup = _cell("GIVEN = 2.0\n", grade_id="setup", locked=True, grade=False, solution=False)
    added = _cell(f"open({str(marker)!r}, 'w').write('x')\nGIVEN = 99\n", grade_id="evil", locked=True,
                  grade=False, solution=False)
    test = _cell("### BEGIN HIDDEN TESTS\nassert GIVEN == 2.0\n### END HIDDEN TESTS\n", grade_id="t1",
                 locked=True, grade=True, solution=False, points=1)
    forged = _cell(f"### BEGIN HIDDEN TESTS\nopen({str(marker)!r}, 'w')\n### END HIDDEN TESTS\n", grade_id="t2",
                   locked=True, grade=True, solution=False, points=1)
    instructor = {"setup": setup.source, "t1": test.source}
    host = HostChecks([setup, added, test, forged], lambda e: "{}", instructor)
    assert host.split(forged) is None and host.split(test) is not None
    assert host.run(host.split(test)[1]) is None
    assert not marker.exists() and host.trusted_namespace()["GIVEN"] == 2.0


# ------------------------------------------------------------------------------------ imports in one direction
LAYERS = ["checks", "protocol", "blocking", "remote", "ex02_visible", "ex02", "ex03", "ex04", "seccomp", "cgroup", "view", "sandbox"]  # as stage5/grading/__init__.py lists them


def _grading_imports(path: Path) -> set[str]:
    """Modules of stage5.grading that ``path`` imports anywhere (module level or inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                found |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
            elif node.module and node.module.startswith("stage5.grading"):
                rest = node.module.split(".")[2:]
                found |= {rest[0]} if rest else {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names if a.name.startswith("stage5.grading.")}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                node.value.startswith("stage5.grading."):
            found.add(node.value.split(".")[2])  # importlib.import_module("stage5.grading.x") and the like
    return (found & set(LAYERS)) - {path.stem}  # a module naming itself (python -m ...) is no import


def test_imports_in_stage5_grading_go_one_way():
    """The protocol at the bottom, the exercises on top: each module imports only modules below it."""
    modules = {p.stem for p in GRADING.glob("*.py")} - {"__init__"}
    assert modules == set(LAYERS), f"place new modules in LAYERS: {modules ^ set(LAYERS)}"
    for i, name in enumerate(LAYERS):
        above = _grading_imports(GRADING / f"{name}.py") - set(LAYERS[:i])
        assert not above, f"stage5/grading/{name}.py imports {sorted(above)}, which sit above it in {LAYERS}"


def test_the_import_check_sees_function_level_imports(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from .ex02 import drive\n    import stage5.grading.remote\n")
    assert _grading_imports(src) == {"ex02", "remote"}


# ------------------------------------------------------------------------------------ course code fingerprint
def test_a_change_to_the_course_code_stops_grading_with_one_line(tmp_path):
    code, grader = tmp_path / "stage5", tmp_path / "grader"
    (code / "grading").mkdir(parents=True)
    grader.mkdir()
    (code / "grading" / "checks.py").write_text("def check_close(): ...\n")
    (grader / "workflow.py").write_text("x = 1\n")
    (grader / "gradebook.db").write_text("state")
    guard = CodeGuard(code, grader)
    (grader / "gradebook.db").write_text("changed by grading")  # the instructor's state: not course code
    (code / "grading" / "__pycache__").mkdir()
    (code / "grading" / "__pycache__" / "checks.pyc").write_text("x")
    guard.check("after grading alice")
    (code / "grading" / "checks.py").write_text("def check_close(): return None\n")
    with pytest.raises(CourseCodeChanged) as err:
        guard.check("after grading mallory")
    assert "after grading mallory" in str(err.value) and "checks.py" in str(err.value)
    assert "\n" not in str(err.value)
    (code / "grading" / "checks.py").write_text("def check_close(): ...\n")
    (code / "grading" / "new.py").write_text("")
    with pytest.raises(CourseCodeChanged, match="new.py"):
        guard.check("after grading eve")


def test_autograde_stops_before_the_next_submission_when_the_code_changed(tmp_path, monkeypatch):
    import workflow

    code, grader = tmp_path / "stage5", tmp_path / "grader"
    code.mkdir()
    grader.mkdir()
    (code / "cost.py").write_text("A = 1\n")
    monkeypatch.setattr(workflow, "CodeGuard", lambda: CodeGuard(code, grader))
    graded = []

    def fake_each(self, todo, jobs):
        for r in todo:
            graded.append(r.student)
            if r.student == "mallory":
                (code / "cost.py").write_text("A = 2\n")  # what a submission without a sandbox could do
            yield r, (True, "", 0.0)

    monkeypatch.setattr(workflow.Course, "_autograde_each", fake_each)
    monkeypatch.setattr(workflow.Course, "_execution_problems", lambda self, r: ([], []))
    monkeypatch.setattr(workflow.Course, "_save_record", lambda self, r: None)
    course = workflow.Course(tmp_path / "work")
    results = [workflow.Result(s, "ex01") for s in ("alice", "mallory", "zed")]
    with pytest.raises(CourseCodeChanged, match="after grading mallory"):
        course.autograde(results)
    assert graded == ["alice", "mallory"]


def test_grade_py_reports_a_code_change_in_one_line_and_fails(tmp_path, monkeypatch, capsys):
    import grade

    def stop(self, *a, **k):
        raise CourseCodeChanged("grading stopped after grading mallory: the course code changed (x.py)")

    monkeypatch.setattr(grade.Course, "grade", stop)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a_ex01.ipynb").write_text("{}")
    assert grade.main(["--inbox", str(inbox), "--work", str(tmp_path / "work")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("STOPPED: grading stopped after grading mallory")


def test_whatever_escapes_the_cell_loop_the_kernel_is_killed(monkeypatch):
    """A failure the loop does not expect (here a RecursionError) still kills the sandbox before it propagates."""
    import nbformat
    import psutil
    from sandboxed_execute import SandboxedExecute

    seen = {}

    def boom(self, cell, index, **kwargs):
        seen["procs"] = self.km.sandbox_processes()
        raise RecursionError("escaped the loop")

    monkeypatch.setattr(SandboxedExecute, "execute_cell", boom)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    with pytest.raises(RecursionError):
        SandboxedExecute(cell_cpu_s=5).preprocess(nb, {})
    assert seen["procs"], "the kernel never started"
    alive = [p for p in seen["procs"] if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, alive
