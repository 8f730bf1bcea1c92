"""Grading support for the course exercises.

The hidden tests of ``solutions/`` import their checks from here (``from stage5.grading import check_close``),
so every name they use stays importable from the package itself:

* :mod:`.checks` - numeric checks whose messages name the likely slip, never the expected value;
* :mod:`.protocol` - what crosses from the learner's kernel to the grader: data only, read within limits;
* :mod:`.blocking` - stage5's own answers switched off while a learner's function runs;
* :mod:`.remote` - answers and calls carried between the learner's kernel and the grader, which runs the hidden
  checks itself (grader/host_checks.py);
* :mod:`.ex02_visible` - exercise 2's visible reference runs, shipped as data (its grading kernel has no engine);
* :mod:`.ex02`, :mod:`.ex03`, :mod:`.ex04` - the checks of one exercise each (ex01 and the clearing test use only the modules
  above);
* :mod:`.seccomp`, :mod:`.cgroup` - the sandbox's system-call filter and its memory cgroup;
* :mod:`.view` - the course package a sandboxed kernel sees, without its exercise's off-limits functions;
* :mod:`.sandbox` - where a learner's notebook runs on the instructor's machine (bubblewrap, limits).

Imports go one way: each module imports only modules above it in this list (a test in
tests/test_grading_protocol.py checks it), so the protocol never depends on an exercise.
"""

from .blocking import UnavailableError, _learner_failures, unavailable
from .checks import (
    UNIT_MISCONCEPTIONS,
    GB_PER_GiB,
    GradingError,
    check_close,
    diagnose,
    kv_misconceptions,
    label,
)
from .ex02 import (
    SERVING_BLOCKED,
    SERVING_CPU_SECONDS,
    check_allocator,
    check_attention,
    check_block_tables,
    check_contiguous,
    check_continuous,
    check_results,
    check_serving,
    check_stuck,
    kernel_of,
    reference_trace,
)
from .ex03 import (
    DIAGNOSIS_BLOCKED,
    DIAGNOSIS_FIELDS,
    FUNCTION_GAIN_FACTOR,
    GAIN_FACTOR,
    call_diagnose,
    check_diagnosis,
    check_format,
    describe_deployment,
    reference_diagnosis,
)
from .ex04 import ROUTING_BLOCKED, check_fleet, check_held, check_prediction, check_routes, router_kernel
from .remote import call_learner

__all__ = [
    "DIAGNOSIS_BLOCKED", "DIAGNOSIS_FIELDS", "ROUTING_BLOCKED", "check_fleet", "check_held", "check_prediction",
    "check_routes",
    "router_kernel", "FUNCTION_GAIN_FACTOR", "GAIN_FACTOR", "GB_PER_GiB", "SERVING_BLOCKED",
    "SERVING_CPU_SECONDS", "UNIT_MISCONCEPTIONS", "GradingError", "UnavailableError", "_learner_failures",
    "call_diagnose", "call_learner", "check_allocator", "check_attention", "check_block_tables", "check_close", "check_contiguous",
    "check_continuous", "check_diagnosis", "check_format", "check_results", "check_serving", "check_stuck", "describe_deployment", "diagnose",
    "kernel_of", "kv_misconceptions", "label", "reference_diagnosis", "reference_trace", "unavailable",
]
