"""Every parameter a graded function takes is varied by the hidden cases, at values where the reference's answer moves.

A rule the exercise states that no hidden case exercises lets a slip through: a learner who ignores a parameter
(or fixes it at one value) passes every check whose inputs hold it at that value. So for each graded function of
every exercise (read from the solution's answer cells: its signature, or for ex03 the ``Deployment`` signature that
names the keys ``diagnose`` reads) this test records the calls the hidden blocks make, with the checks replaced by
recorders (nothing of the learner's runs), and asks:

* **varied**: the parameter takes at least two values in the hidden calls;
* **it matters**: for each value it takes, and for its default, a solution that used that one value whatever it
  was given fails at least one hidden call (the reference's graded answer with the value substituted differs from
  its answer as given, beyond the check's tolerance);
* **boundaries** the text implies (:data:`BOUNDARIES`): widths above and below 2 bytes, a one-token request (it
  finishes in the step that admits it), draft costs and draft lengths where the best lever changes.

ex02's classes take sizes (constructors): for those, two values at least. Cheap: reference functions only, in this
process; ex02's schedules through the model-free stand-in of tests/ex02_tracesim.py.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import json
import math
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest

import stage5.grading as grading

REPO = Path(__file__).resolve().parent.parent
ASSIGNMENTS = ("ex01", "ex02", "ex03", "clearing")
HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS[^\n]*\n(.*?)^[ \t]*### END HIDDEN TESTS[^\n]*\n?", re.M | re.S)
REL_TOL = 0.02  # the loosest tolerance of ex01's checks: a substituted value must move the answer by more


def _cells(assignment: str) -> list[tuple[str, str, dict[str, Any]]]:
    nb = json.loads((REPO / "solutions" / assignment / f"{assignment}.ipynb").read_text())
    return [(c["metadata"].get("nbgrader", {}).get("grade_id", ""), "".join(c["source"]),
             c["metadata"].get("nbgrader", {})) for c in nb["cells"] if c["cell_type"] == "code"]


def graded_definitions(assignment: str) -> dict[str, list[str]]:
    """Each function or class a learner writes (top level of an answer cell) and the parameters its signature names
    (a class: its constructor's, without ``self``)."""
    out: dict[str, list[str]] = {}
    for _gid, src, meta in _cells(assignment):
        if not meta.get("solution") or meta.get("grade"):
            continue
        for node in ast.parse(src).body:
            if isinstance(node, ast.FunctionDef):
                out[node.name] = [a.arg for a in node.args.args + node.args.kwonlyargs]
            elif isinstance(node, ast.ClassDef):
                init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
                out[node.name] = [a.arg for a in init.args.args[1:] + init.args.kwonlyargs] if init else []
    return out


@cache
def _namespace(assignment: str, measure: bool = False) -> dict[str, Any]:
    """The solution's setup, given and answer cells run in one namespace (not its test cells)."""
    ns: dict[str, Any] = {"__name__": f"__{assignment}__"}
    for gid, src, meta in _cells(assignment):
        if meta.get("grade") or (gid == "measure_answer" and not measure):
            continue
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(src, f"<{assignment} {gid}>", "exec"), ns)  # noqa: S102 - the course's own solution
    return ns


def _run_hidden(assignment: str, ns: dict[str, Any], patches: dict[str, Any], skip: tuple[str, ...] = ()) -> None:
    """Every hidden block of the solution (but ``skip``), run in ``ns`` with ``stage5.grading``'s checks replaced by
    ``patches``."""
    patch = pytest.MonkeyPatch()
    for name, value in patches.items():
        patch.setattr(grading, name, value)
    try:
        for gid, src, meta in _cells(assignment):
            match = HIDDEN.search(src) if meta.get("grade") and gid not in skip else None
            if match:
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(compile(match.group(1), f"<hidden {gid}>", "exec"), dict(ns))  # noqa: S102
    finally:
        patch.undo()


# ------------------------------------------------------------------ the calls each exercise's hidden blocks make
class Call:
    """One hidden call of a graded function: its arguments by parameter name, and how to get the reference's graded
    answer with some of them replaced (None when that substitution is not a valid input)."""

    def __init__(self, function: str, args: dict[str, Any], answer: Callable[[dict[str, Any]], Any] | None,
                 differs: Callable[[Any, Any], bool]):
        self.function, self.args, self._answer, self.differs = function, args, answer, differs

    def answer(self, **replaced: Any) -> Any:
        if not replaced:
            if not hasattr(self, "_given"):
                self._given = self._answer_or_none({})
            return self._given
        return self._answer_or_none(replaced)

    def _answer_or_none(self, replaced: dict[str, Any]) -> Any:
        try:
            return self._answer({**self.args, **replaced})
        except Exception:  # noqa: BLE001 - an input the reference refuses is no evidence either way
            return None


def _numbers_differ(a: Any, b: Any) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a != b
    return not math.isclose(float(a), float(b), rel_tol=REL_TOL)


@cache
def ex01_calls() -> tuple[Call, ...]:
    ns = _namespace("ex01")
    calls: list[Call] = []

    def record(name, func, *args, blocked=(), **kwargs):
        sig = inspect.signature(func)
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        reference = ns[func.__name__]
        calls.append(Call(func.__name__, dict(bound.arguments), lambda a, f=reference: f(**a), _numbers_differ))
        return reference(*args, **kwargs)

    _run_hidden("ex01", ns, {"call_learner": record, "check_close": lambda *a, **k: None})
    return tuple(calls)


@cache
def ex03_calls() -> tuple[Call, ...]:
    """diagnose(dep) on each hidden deployment, with the fields its check grades; the parameters are the keys
    ``Deployment(...)`` names."""
    ns = _namespace("ex03")
    keys = list(inspect.signature(ns["Deployment"]).parameters)
    from_function: set[int] = set()
    calls: list[Call] = []

    def record_calls(name, func, deps, blocked=()):
        deps = list(deps)
        from_function.update(id(d) for d in deps)
        return [grading.reference_diagnosis(d) for d in deps]

    def record_check(name, got, dep, fields=grading.DIAGNOSIS_FIELDS, gain_factor=grading.GAIN_FACTOR):
        if id(dep) not in from_function:
            return  # a prediction by hand (Part A), not the function
        fields = tuple(fields)

        def answer(args, fields=fields):
            # the solution's diagnose (it matches the reference on every hidden deployment: tests/test_ex03_mutants.py),
            # which prices a substituted input as a learner's formula would, where stage5.levers may refuse it
            got = ns["diagnose"](dict(args))
            return {f: got[f] for f in fields}

        def differs(a, b, factor=gain_factor):
            return any(a[f] != b[f] if f != "gain" else not (b[f] / factor <= a[f] <= b[f] * factor) for f in a)

        calls.append(Call("diagnose", {k: dep[k] for k in keys}, answer, differs))

    _run_hidden("ex03", ns, {"call_diagnose": record_calls, "check_diagnosis": record_check})
    return tuple(calls)


@cache
def ex02_runs() -> tuple[dict[str, Any], ...]:
    """The serving runs the hidden blocks ask for (check_serving's and check_results' arguments), and the sizes the
    other checks build the learner's classes with."""
    runs: list[dict[str, Any]] = []

    def serving(label, kernel, function, cache, workload, allocator, num_blocks, block_size, max_batch, continuous,
                stuck=False, refusals=None, model_seed=0):
        runs.append(dict(kind="serving", function=function, cache=cache, workload=workload, allocator=allocator,
                         num_blocks=num_blocks, block_size=block_size, max_batch=max_batch, continuous=continuous,
                         refusals=refusals, model_seed=model_seed))
        return {"trace": []}

    def results(label, res, workload, num_blocks, block_size, max_batch):
        for allocator, cls in (("contiguous", "ContiguousCache"), ("paged", "PagedCache")):
            for continuous in (False, True):
                runs.append(dict(kind="serving", function="serve", cache=cls, workload=workload, allocator=allocator,
                                 num_blocks=num_blocks, block_size=block_size, max_batch=max_batch,
                                 continuous=continuous, refusals=None, model_seed=0))

    def tables(label, kernel, block_size=4, num_blocks=32):
        runs.append(dict(kind="tables", num_blocks=num_blocks, block_size=block_size))

    def attention(label, kernel, cases=grading.ex02.ATTENTION_CASES):
        runs.extend(dict(kind="attention", **case) for case in cases)

    ns = {**_namespace("ex02"), "results": {}}  # the measurement's four runs are not needed: check_results records
    _run_hidden("ex02", ns, {"check_serving": serving, "check_results": results, "check_block_tables": tables,
                             "check_attention": attention, "check_continuous": lambda *a, **k: None,
                             "check_stuck": lambda *a, **k: None, "check_contiguous": lambda *a, **k: None,
                             "check_allocator": lambda *a, **k: None },
                skip=("p4_lever",))  # a label read off the measurement: no function is called
    return tuple(runs)


def _ex02_namespace() -> dict[str, Any]:
    return _namespace("ex02")


def _schedule(run: dict[str, Any]) -> Any:
    import ex02_tracesim as tracesim

    return tracesim.simulate(_ex02_namespace(), run["function"], run["cache"], run["workload"], run["allocator"],
                             run["num_blocks"], run["block_size"], run["max_batch"], run["continuous"],
                             run["refusals"])


@cache
def _tokens(model_seed: int) -> tuple[int, ...]:
    from stage5.grading.ex02 import reference_trace

    return tuple(reference_trace([["request", 0, [1, 2, 3], 4, 4]], "paged", "continuous", 4, 4, 1,
                                 model_seed=model_seed).outputs[0])


@cache
def ex02_calls() -> tuple[Call, ...]:
    calls: list[Call] = []
    loops = {"serve_static": ["model", "requests", "cache", "max_batch"],
             "serve": ["model", "requests", "cache", "continuous", "max_batch"]}
    for run in ex02_runs():
        if run["kind"] == "serving":
            args = {"model": run["model_seed"], "requests": json.dumps(run["workload"]),
                    "cache": (run["cache"], run["num_blocks"], run["block_size"], json.dumps(run["refusals"])),
                    "max_batch": run["max_batch"], "continuous": run["continuous"]}
            args = {k: args[k] for k in loops[run["function"]]}

            def answer(a, run=run):  # the schedule (model-free) and the tokens the model gives
                cls, num_blocks, block_size, refusals = a["cache"]
                schedule = _schedule({**run, "workload": json.loads(a["requests"]), "cache": cls,
                                      "allocator": "contiguous" if cls == "ContiguousCache" else "paged",
                                      "num_blocks": num_blocks, "block_size": block_size,
                                      "refusals": json.loads(refusals), "max_batch": a["max_batch"],
                                      "continuous": a.get("continuous")})
                return schedule, _tokens(a["model"])

            calls.append(Call(run["function"], args, answer, lambda a, b: a != b))
            if run["cache"] == "ContiguousCache":
                calls.append(Call("ContiguousCache", {"num_slots": run["num_blocks"] * run["block_size"]}, None,
                                  lambda a, b: a != b))
            else:
                calls.append(Call("PagedCache", {"num_blocks": run["num_blocks"], "block_size": run["block_size"]},
                                  None, lambda a, b: a != b))
                calls.append(Call("BlockAllocator", {"num_blocks": run["num_blocks"]}, None, lambda a, b: a != b))
            calls.append(Call("PagedKV", {"cfg": "tiny", "num_slots": run["num_blocks"] * run["block_size"],
                                          "dtype": "float64"}, None, lambda a, b: a != b))
        elif run["kind"] == "tables":
            calls.append(Call("PagedCache", {"num_blocks": run["num_blocks"], "block_size": run["block_size"]}, None,
                              lambda a, b: a != b))
            calls.append(Call("BlockAllocator", {"num_blocks": run["num_blocks"]}, None, lambda a, b: a != b))
        else:
            cfg = (run["heads"], run["kv_heads"], run["head_dim"])
            calls.append(Call("PagedKV", {"cfg": cfg, "num_slots": json.dumps(run["steps"]), "dtype": run["dtype"]},
                              None, lambda a, b: a != b))
    return tuple(calls)


CALLS: dict[str, Callable[[], tuple[Call, ...]]] = {"ex01": ex01_calls, "ex02": ex02_calls, "ex03": ex03_calls,
                                                     "clearing": lambda: ()}


def parameters(assignment: str) -> list[tuple[str, str]]:
    """(function, parameter) for every parameter of every graded definition; ex03's ``diagnose(dep)`` reads the keys
    the notebook's ``Deployment`` names."""
    out = []
    for func, params in graded_definitions(assignment).items():
        if assignment == "ex03" and func == "diagnose":
            params = list(inspect.signature(_namespace("ex03")["Deployment"]).parameters)
        out += [(func, p) for p in params]
    return out


def _default(assignment: str, func: str, param: str) -> Any:
    """The value a learner who ignores ``param`` would use: its default in the signature (ex03: ``Deployment``'s)."""
    if assignment == "ex03":
        fn = _namespace("ex03")["Deployment"]
    elif assignment == "ex01":
        fn = _namespace("ex01")[func]
    else:
        return inspect.Parameter.empty
    return inspect.signature(fn).parameters[param].default


def _hashable(value: Any) -> Any:
    try:
        hash(value)
        return value
    except TypeError:
        return repr(value)


def coverage_gaps(assignment: str) -> list[str]:
    """Every parameter of ``assignment``'s graded definitions that the hidden calls do not vary where it matters."""
    calls = CALLS[assignment]()
    gaps = []
    for func, param in parameters(assignment):
        mine = [c for c in calls if c.function == func]
        if not mine:
            gaps.append(f"{assignment} {func}: no hidden check calls it")
            continue
        values = {_hashable(c.args[param]): c.args[param] for c in mine}
        if len(values) < 2:
            gaps.append(f"{assignment} {func}({param}): every hidden call passes {next(iter(values))!r}")
            continue
        if mine[0]._answer is None:  # a constructor: two sizes are the evidence
            continue
        fixed = dict(values)
        default = _default(assignment, func, param)
        if default is not inspect.Parameter.empty:
            fixed.setdefault(_hashable(default), default)
        for key, value in fixed.items():
            caught = False
            for c in mine:
                want = c.answer()
                got = c.answer(**{param: value})
                if want is not None and got is not None and c.differs(got, want):
                    caught = True
                    break
            if not caught:
                gaps.append(f"{assignment} {func}({param}): a solution that always uses {key!r} passes every hidden "
                            "call")
    return gaps


# ------------------------------------------------------------------ boundary values the exercises' texts imply
def _widths(assignment: str, func: str, param: str) -> str | None:
    seen = {float(c.args[param]) for c in CALLS[assignment]() if c.function == func}
    if not (any(v > 2 for v in seen) and any(v < 2 for v in seen)):
        return f"{assignment} {func}({param}): no width above and below 2 bytes (seen {sorted(seen)})"
    return None


def _one_token(func: str) -> str | None:
    from stage5.grading.ex02 import requests_of

    for run in ex02_runs():
        if run["kind"] == "serving" and run["function"] == func and \
                any(r.output_len == 1 for r in requests_of(run["workload"])):
            return None
    return f"ex02 {func}: no hidden run has a one-token request (a sequence that finishes in its admission step)"


def _ranking_moves(param: str) -> str | None:
    """Some hidden deployment whose best lever changes when ``param`` takes another value a hidden case uses or its
    default."""
    calls = [c for c in ex03_calls() if c.function == "diagnose" and "best_lever" in c.answer()]
    assert calls, "no hidden check grades diagnose's best lever"
    values = {c.args[param] for c in calls} | {_default("ex03", "diagnose", param)}
    for c in calls:
        for v in values:
            got = c.answer(**{param: v})
            if got is not None and got["best_lever"] != c.answer()["best_lever"]:
                return None
    return f"ex03 diagnose({param}): no hidden deployment's best lever changes with it"


BOUNDARIES: dict[tuple[str, str, str], Callable[[], str | None]] = {
    ("ex01", "kv_bytes_per_token", "bytes_per_element"): lambda: _widths("ex01", "kv_bytes_per_token",
                                                                         "bytes_per_element"),
    ("ex01", "decode_floor_ms", "bytes_per_param"): lambda: _widths("ex01", "decode_floor_ms", "bytes_per_param"),
    ("ex01", "max_concurrent_sequences", "weight_bytes"): lambda: _widths("ex01", "max_concurrent_sequences",
                                                                          "weight_bytes"),
    ("ex01", "max_concurrent_sequences", "kv_bytes"): lambda: _widths("ex01", "max_concurrent_sequences", "kv_bytes"),
    ("ex02", "serve_static", "requests"): lambda: _one_token("serve_static"),
    ("ex02", "serve", "requests"): lambda: _one_token("serve"),
    ("ex03", "diagnose", "draft_cost"): lambda: _ranking_moves("draft_cost"),
    ("ex03", "diagnose", "k"): lambda: _ranking_moves("k"),
    ("ex03", "diagnose", "alpha"): lambda: _ranking_moves("alpha"),
}


# ------------------------------------------------------------------ the tests
def test_the_graded_definitions_are_found():
    """The signatures this test reads (a renamed cell or a function moved out of an answer cell fails here)."""
    assert graded_definitions("ex01") == {
        "kv_bytes_per_token": ["config", "bytes_per_element"],
        "decode_floor_ms": ["config", "gpu", "num_gpus", "bytes_per_param"],
        "max_concurrent_sequences": ["config", "gpu", "num_gpus", "context", "weight_bytes", "kv_bytes",
                                     "reserve_gib_per_gpu"]}
    assert {"ContiguousCache", "PagedKV", "serve_static", "BlockAllocator", "PagedCache", "serve"} <= \
        set(graded_definitions("ex02"))
    assert graded_definitions("ex03") == {"diagnose": ["dep"]}
    assert {"draft_cost", "k", "tpot_slo_s", "prefix_hit"} <= {p for _, p in parameters("ex03")}
    assert graded_definitions("clearing") == {}  # only values: each is one question, checked on its own


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_parameter_is_varied_where_it_matters(assignment):
    gaps = coverage_gaps(assignment)
    assert not gaps, "hidden cases do not exercise:\n  " + "\n  ".join(gaps)


@pytest.mark.parametrize("where", sorted(BOUNDARIES), ids=["-".join(k) for k in sorted(BOUNDARIES)])
def test_the_boundaries_the_text_implies_are_hidden_cases(where):
    assert where[:2] in {(a, f) for a in ASSIGNMENTS for f in graded_definitions(a)}, where
    gap = BOUNDARIES[where]()
    assert gap is None, gap


def test_the_check_finds_a_parameter_held_at_one_value():
    """The test itself: hidden calls that hold a parameter at one value, or vary it only where it changes nothing,
    are reported (so the assertion above can fail)."""
    calls = ex01_calls()
    b3 = [c for c in calls if c.function == "max_concurrent_sequences"]
    assert b3 and all(c.answer() is not None for c in b3)
    held = Call("max_concurrent_sequences", {**b3[0].args, "reserve_gib_per_gpu": 8}, b3[0]._answer, _numbers_differ)
    # a reserve of 8 GiB where the default is 8 GiB: the call cannot tell a solution that ignores the parameter
    assert not held.differs(held.answer(reserve_gib_per_gpu=8), held.answer())
    assert held.differs(held.answer(reserve_gib_per_gpu=30), held.answer())
    # an ex03 parameter that moves nothing graded at the default deployment: draft_cost when speculation loses
    dep = dict(_namespace("ex03")["Deployment"]("llama3-8b", "H100-SXM", 1, 128, 1024, 256, weights="fp8"))
    call = Call("diagnose", dep, lambda a: grading.reference_diagnosis(a).best_lever, lambda a, b: a != b)
    assert not call.differs(call.answer(draft_cost=0.1), call.answer())
