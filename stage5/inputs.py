"""Checks at the doors: each number a user types, pastes or passes is checked once, where it enters.

Every check names the field, the value it got and what is accepted, and raises :class:`InputError` (a
``ValueError``), so a caller that already reports ``ValueError`` as a one-line error needs no change. Nothing
here coerces silently: ``True`` is not the integer 1, ``"3"`` is not 3, and 4096.9 is not 4096.
"""

from __future__ import annotations

import argparse
import json
import math
import numbers
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn

# Counts above 2**53 are no longer exact as floats, and every count here ends up in float arithmetic.
MAX_COUNT = 2**53


class InputError(ValueError):
    """A value that is the wrong type, out of range or not finite; the message says what is accepted."""


class ArgumentTypeError(InputError, TypeError):
    """An argument that is not the record it must be (a string where a Deployment goes): both a ValueError, as
    every refusal here is, and a TypeError, as Python names it."""


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def integer(value: Any, name: str, *, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as an int in [minimum, maximum]; a float is accepted only if it is a whole number (4096.0)."""
    accepted = f"an integer >= {minimum}" + (f" and <= {maximum:,}" if maximum is not None else "")
    if not _is_number(value):
        raise InputError(f"{name} must be {accepted}, got {value!r} ({type(value).__name__})")
    if isinstance(value, numbers.Integral):
        as_int = int(value)
    else:
        as_float = float(value)
        if not math.isfinite(as_float) or not as_float.is_integer():
            raise InputError(f"{name} must be {accepted}, got {value!r}")
        as_int = int(as_float)
    if as_int < minimum or (maximum is not None and as_int > maximum):
        raise InputError(f"{name} must be {accepted}, got {value!r}")
    if as_int > MAX_COUNT:
        raise InputError(f"{name} must be {accepted} and at most 2**53 (beyond that a count is not exact), "
                         f"got {value!r}")
    return as_int


def positive_int(value: Any, name: str, maximum: int | None = None) -> int:
    return integer(value, name, minimum=1, maximum=maximum)


def non_negative_int(value: Any, name: str, maximum: int | None = None) -> int:
    return integer(value, name, minimum=0, maximum=maximum)


def real(value: Any, name: str, *, low: float = -math.inf, high: float = math.inf, low_open: bool = False,
         high_open: bool = False, accepted: str | None = None) -> float:
    """``value`` as a finite float within the stated bounds (open or closed at each end)."""
    lo, hi = "(" if low_open else "[", ")" if high_open else "]"
    if math.isinf(high) and not math.isinf(low):
        what = accepted or f"a finite number {'>' if low_open else '>='} {low:g}"
    else:
        what = accepted or f"a finite number in {lo}{low:g}, {high:g}{hi}"
    if not _is_number(value):
        raise InputError(f"{name} must be {what}, got {value!r} ({type(value).__name__})")
    x = float(value)
    too_low = x <= low if low_open else x < low
    too_high = x >= high if high_open else x > high
    if not math.isfinite(x) or too_low or too_high:
        raise InputError(f"{name} must be {what}, got {value!r}")
    return x


def positive(value: Any, name: str, maximum: float = math.inf) -> float:
    """A finite number > 0 (and <= ``maximum``)."""
    bound = "" if math.isinf(maximum) else f" and <= {maximum:g}"
    return real(value, name, low=0.0, low_open=True, high=maximum,
                accepted=f"a finite number > 0{bound}")


def fraction(value: Any, name: str) -> float:
    """A finite number in [0, 1]."""
    return real(value, name, low=0.0, high=1.0, accepted="a fraction in [0, 1]")


def seed(value: Any, name: str = "seed") -> int:
    """A random seed: an integer in [0, 2**63) (numpy's and torch's generators both take it), never "7" or 7.5."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or not 0 <= int(value) < 2**63:
        raise InputError(f"{name} must be an integer in [0, 2**63), got {value!r} ({type(value).__name__})")
    return int(value)


def boolean(value: Any, name: str) -> bool:
    """A real bool: the string "false" or the number 0 is refused rather than guessed at."""
    if not isinstance(value, bool):
        raise InputError(f"{name} must be true or false, got {value!r} ({type(value).__name__})")
    return value


def choice(value: Any, name: str, options: list[str] | tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in options:
        raise InputError(f"{name} must be one of {', '.join(options)}; got {value!r}")
    return value


# ------------------------------------------------------------------------------------------ arrays
def reals(value: Any, name: str, *, low: float = -math.inf, high: float = math.inf, low_open: bool = False,
          accepted: str | None = None) -> Any:
    """``value`` (a number or an array of numbers) as a float ndarray, every element finite and in bounds.

    The array version of :func:`real`, for the cost model's functions that broadcast: a bool, a string or a
    NaN anywhere is refused in one sentence naming the argument, never turned into NaN or infinity later.
    """
    import numpy as np

    # The common cases, checked without numpy's per-call overhead (this runs on every cost-model call); anything
    # out of bounds, or of another type, goes through the full check below for its message.
    if isinstance(value, (float, int, np.floating, np.integer)) and not isinstance(value, (bool, np.bool_)):
        x = float(value)
        if math.isfinite(x) and (x > low if low_open else x >= low) and x <= high:
            return np.asarray(x)
    elif isinstance(value, np.ndarray) and value.dtype.kind in "fiu":
        a = value.astype(float, copy=False)
        if (np.isfinite(a) & (a > low if low_open else a >= low) & (a <= high)).all():
            return a
    lo = "(" if low_open else "["
    what = accepted or (f"a finite number {'>' if low_open else '>='} {low:g}" if math.isinf(high)
                        else f"finite numbers in {lo}{low:g}, {high:g}]")
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise InputError(f"{name} must be {what}, got {value!r} ({type(value).__name__})")
    try:
        a = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be {what}, got {str(value)[:60]!r} ({type(value).__name__})") from None
    if np.asarray(value).dtype == bool:
        raise InputError(f"{name} must be {what}, got booleans")
    ok = np.isfinite(a) & (a > low if low_open else a >= low) & (a <= high)
    if not np.all(ok):
        bad = a[~ok].flat[0] if a.ndim else a
        raise InputError(f"{name} must be {what}, got {float(bad)!r}" + (" (in an array)" if a.ndim else ""))
    return a


def counts(value: Any, name: str, minimum: float = 1.0) -> Any:
    """Token or sequence counts (numbers or arrays) in [minimum, 2**53]: a batch of less than one sequence, or a
    count past what a float holds exactly, is refused rather than priced as an infinite or a NaN."""
    return reals(value, name, low=minimum, high=float(MAX_COUNT),
                 accepted=f"a count in [{minimum:g}, 2**53] (a finite number, or an array of them)")


# Bounds the public cost functions and the command line share, each from what is built or sold.
# Tensor parallelism all-reduces every layer's activations, so it runs inside one NVLink domain: vLLM's guide sets
# the tensor-parallel size to the GPUs in one node and spans nodes with pipeline parallelism (docs v0.8.3,
# "Distributed Inference and Serving"). The largest NVLink domain built is GB200 NVL72's: 72 Blackwell GPUs
# joined by NVLink Switch trays in one rack (NVIDIA GB200 NVL72 product page).
MAX_GPUS = 72
# USD per GPU-hour: cloud list prices for an H100 or B200 are a few dollars; $1,000 is far past any, and below a
# cent per GPU-hour is not a rental.
MIN_PRICE, MAX_PRICE = 0.01, 1000.0
# Bytes per stored number: from 1-bit formats (0.125) to float64 (8).
MIN_BYTES_PER_NUMBER, MAX_BYTES_PER_NUMBER = 0.125, 8.0


def gpus(value: Any, name: str = "num_gpus") -> int:
    """A tensor-parallel GPU count: an integer in [1, :data:`MAX_GPUS`] (one NVLink domain)."""
    return integer(value, f"{name} (tensor-parallel GPUs in one NVLink domain, at most {MAX_GPUS} as in GB200 NVL72)",
                   minimum=1, maximum=MAX_GPUS)


def price(value: Any, name: str = "price_per_gpu_hour") -> float:
    """USD per GPU-hour in [MIN_PRICE, MAX_PRICE]."""
    return real(value, f"{name} (USD per GPU-hour)", low=MIN_PRICE, high=MAX_PRICE)


def bytes_per_number(value: Any, name: str) -> float:
    return real(value, name, low=MIN_BYTES_PER_NUMBER, high=MAX_BYTES_PER_NUMBER,
                accepted=f"bytes per number in [{MIN_BYTES_PER_NUMBER:g}, {MAX_BYTES_PER_NUMBER:g}] "
                         "(1-bit to float64)")


def within_context(tokens: int, limit: int, what: str, model: str) -> None:
    """Refuse a sequence longer than the model's maximum position (``max_position_embeddings``)."""
    if tokens > limit:
        raise InputError(f"{what} is {tokens:,} tokens, past {model}'s maximum context of {limit:,} tokens "
                         "(max_position_embeddings); accepted: at most that many")


# ------------------------------------------------------------------------------------------ object arguments
# The course's records, by the name their annotations use, and where each is defined (imported when first checked,
# so this module imports none of them).
OBJECT_TYPES = {"Deployment": "stage5.cost", "Estimate": "stage5.cost", "Hardware": "stage5.hardware",
                "ModelConfig": "stage5.models", "Calibration": "stage5.calibration", "Tensor": "torch",
                "Transformer": "stage5.engine.model", "Request": "stage5.engine.sequence"}


def _object_plan(fn: Callable) -> list[tuple[int, str, tuple[str, ...], bool, bool]]:
    """(position, name, record type names, str allowed, None allowed) of each parameter of ``fn`` annotated
    with one of :data:`OBJECT_TYPES` (``dep: cost.Deployment``, ``gpu: str | Hardware``)."""
    import inspect

    plan = []
    for i, param in enumerate(inspect.signature(fn).parameters.values()):
        if not isinstance(param.annotation, str) or param.kind not in (param.POSITIONAL_OR_KEYWORD,
                                                                        param.KEYWORD_ONLY):
            continue
        parts = [part.strip().rsplit(".", 1)[-1] for part in param.annotation.split("|")]
        records = tuple(part for part in parts if part in OBJECT_TYPES)
        if records and all(part in OBJECT_TYPES or part in ("str", "None") for part in parts):
            position = i if param.kind is param.POSITIONAL_OR_KEYWORD else -1
            plan.append((position, param.name, records, "str" in parts, "None" in parts))
    return plan


def check_object_arguments(namespace: dict[str, Any]) -> None:
    """Make every public function of the module whose globals are ``namespace`` refuse, in one ``TypeError``
    sentence naming the argument, a value that is not the record its annotation names (a ``Deployment``, a
    ``Hardware``, ...), where it would otherwise fail deep inside with an ``AttributeError``. A module calls this
    once, at its end; names (``str``) and ``None`` stay accepted where the annotation says so."""
    import functools
    import importlib
    import inspect

    module = namespace["__name__"]
    for name, fn in list(namespace.items()):
        if name.startswith("_") or not inspect.isfunction(fn) or fn.__module__ != module:
            continue
        plan = _object_plan(fn)
        if not plan:
            continue

        resolved: dict[tuple[str, ...], tuple[type, ...]] = {}  # the record classes, imported on the first call

        def checked(*args: Any, __fn: Callable = fn, __plan: list = plan, __classes: dict = resolved,
                    **kwargs: Any) -> Any:
            for position, arg, records, str_ok, none_ok in __plan:
                if 0 <= position < len(args):
                    value = args[position]
                elif arg in kwargs:
                    value = kwargs[arg]
                else:
                    continue
                if (str_ok and isinstance(value, str)) or (none_ok and value is None):
                    continue
                classes = __classes.get(records)
                if classes is None:  # kept after the first call: this wrapper sits on the cost model's hot paths
                    classes = __classes[records] = tuple(getattr(importlib.import_module(OBJECT_TYPES[r]), r)
                                                         for r in records)
                if not isinstance(value, classes):
                    wanted = " or ".join([*records, *(["a name"] if str_ok else []), *(["None"] if none_ok else [])])
                    raise ArgumentTypeError(f"{arg} must be a {wanted}, got {str(value)[:40]!r} "
                                            f"({type(value).__name__})")
            return __fn(*args, **kwargs)

        namespace[name] = functools.wraps(fn)(checked)


# ------------------------------------------------------------------------------------------ command lines
class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument prints one line (``error: ...``) instead of the usage block, exit status 2."""

    def error(self, message: str) -> NoReturn:
        message = re.sub(r"^argument ([^:]+): ", r"\1 ", message)  # "--batch must be ...", not "argument --batch: ..."
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")

    def _print_message(self, message: str, file: Any = None) -> None:
        # argparse drops an OSError here, so --help on a full disk would exit 0 having printed nothing; let it
        # reach run_command, which says so in one line.
        if message:
            file = file or sys.stderr
            if file is not None:
                file.write(message)


def _bound_note(why: str | None) -> str:
    return f" ({why})" if why else ""


def arg_int(minimum: int = 1, maximum: int = MAX_COUNT, why: str | None = None) -> Callable[[str], int]:
    """An argparse ``type`` for integers in [minimum, maximum] whose error says what is accepted (and, with
    ``why``, where the upper bound comes from)."""
    low = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
    accepted = f"{low} and <= {maximum:,}" + _bound_note(why) if maximum < MAX_COUNT else low

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {accepted}, got {text[:40]!r}") from None
        if value < minimum or value > maximum:
            raise argparse.ArgumentTypeError(f"must be {accepted}, got {text[:40]!r}")
        return value
    return parse


def arg_real(low: float = 0.0, high: float = math.inf, low_open: bool = True,
             why: str | None = None) -> Callable[[str], float]:
    """An argparse ``type`` for finite numbers in (low, high] (or [low, high] with ``low_open=False``); ``why``
    says where the bounds come from."""
    lo = "(" if low_open else "["
    accepted = (f"a finite number {'>' if low_open else '>='} {low:g}" if math.isinf(high)
                else f"a finite number in {lo}{low:g}, {high:g}]") + _bound_note(why)

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {accepted}, got {text[:40]!r}") from None
        too_low = value <= low if low_open else value < low
        if not math.isfinite(value) or too_low or value > high:
            raise argparse.ArgumentTypeError(f"must be {accepted}, got {text[:40]!r}")
        return value
    return parse


# Drafted tokens per speculative round: engines draft a handful (vLLM's num_speculative_tokens is typically 1-8);
# the benchmarks' --k flag takes at most 64.
MAX_DRAFT_TOKENS = 64

# Bounds shared by the benchmarks' flags, each from what one CPU can do in a sitting.
MAX_BENCH_REQUESTS = 10_000  # the default runs take tens of seconds for 64 requests: 10,000 is hours of CPU
MAX_ROUNDS = 1_000  # rounds and repeats of a timing loop: medians settle within tens; 1,000 is hours


# Bounds on the workloads the library builds (lists of requests held in memory), each from what the toy engine can
# serve in a sitting: it serves some thousands of tokens a second on one CPU thread, so a workload past
# MAX_WORKLOAD_TOKENS is hours of serving, and building it would only stall the notebook. A request longer than
# MAX_REQUEST_TOKENS fits no model the course reads (the longest context in the registry is DeepSeek-V2-Lite's
# 163,840 tokens).
MAX_WORKLOAD_REQUESTS = MAX_BENCH_REQUESTS
MAX_REQUEST_TOKENS = 2**20
MAX_WORKLOAD_TOKENS = 2**24


def workload_size(n: Any, lengths: dict[str, Any], n_name: str = "n") -> tuple[int, dict[str, int]]:
    """``n`` requests with the token ``lengths`` (name -> tokens per request) as checked ints: ``n`` in
    [1, MAX_WORKLOAD_REQUESTS], each length in [1, MAX_REQUEST_TOKENS], and n x their sum at most
    MAX_WORKLOAD_TOKENS, so a huge count or length is one sentence instead of a hang."""
    count = integer(n, f"{n_name} (requests)", minimum=1, maximum=MAX_WORKLOAD_REQUESTS)
    checked = {k: integer(v, f"{k} (tokens)", minimum=1, maximum=MAX_REQUEST_TOKENS) for k, v in lengths.items()}
    total = count * sum(checked.values())
    if total > MAX_WORKLOAD_TOKENS:
        raise InputError(f"{count:,} requests of {sum(checked.values()):,} tokens each are {total:,} tokens, past "
                         f"{MAX_WORKLOAD_TOKENS:,} (hours of serving on the toy engine); accepted: fewer or shorter "
                         "requests")
    return count, checked


def arg_threads() -> Callable[[str], int]:
    """torch CPU threads: at most this machine's cores (more threads than cores only slow small steps down)."""
    import os

    cores = os.cpu_count() or 1
    return arg_int(1, cores, why=f"this machine has {cores} cores; more threads than cores make timings meaningless")


def arg_requests() -> Callable[[str], int]:
    return arg_int(1, MAX_BENCH_REQUESTS, why="a benchmark of more requests takes hours on a CPU")


def arg_rounds() -> Callable[[str], int]:
    return arg_int(1, MAX_ROUNDS, why="medians settle within tens of rounds; 1,000 is hours of CPU")


INTERRUPTED = 130  # 128 + SIGINT: what a shell reports for a program stopped by Ctrl-C
OUTPUT_FAILED = 1  # the output could not be written (a full disk, a closed stdout): not a usage error


def import_holding_ctrl_c(name: str) -> None:
    """Import module ``name`` with Ctrl-C held until the import returns.

    torch's start-up calls back into Python from C++; a KeyboardInterrupt raised inside such a callback escapes
    through pybind11 as ``std::terminate`` and the process aborts (status -6, a C++ message instead of
    :func:`run_command`'s one line). Held, a Ctrl-C during the import is only noted; once the import returns, the
    handler that was there before gets it (Python's own raises KeyboardInterrupt, in Python). Off the main thread,
    where Python neither delivers signals nor lets a handler be set, it imports plainly."""
    import importlib
    import os
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        importlib.import_module(name)
        return
    noted: list[int] = []
    before = signal.signal(signal.SIGINT, lambda signum, _frame: noted.append(signum))
    try:
        importlib.import_module(name)
    finally:
        signal.signal(signal.SIGINT, before)
    if noted:
        if callable(before):
            before(signal.SIGINT, None)
        elif before == signal.SIG_DFL:
            os.kill(os.getpid(), signal.SIGINT)


def run_command(main: Callable[[], int], prog: str = "python -m stage5") -> NoReturn:
    """Exit with ``main()``'s status, with one line (never a traceback) for what the environment does to a run.

    A reader that closes the pipe early (``... | head -1``) ends the program quietly with status 141 (128 +
    SIGPIPE, what a shell reports for a program stopped by a closed pipe). Ctrl-C prints one line and exits 130
    (every file the course writes is replaced atomically, so nothing is left half-written). Standard output
    closed (``>&-``), or failing to take the output (``OSError``: a full disk, ENOSPC), is one line on stderr
    and status 1. Text the output encoding cannot show (a non-ASCII file name under ``PYTHONIOENCODING=ascii``
    or the C locale) is printed with backslash escapes instead of failing.
    """
    import os
    import sys

    def say(message: str) -> None:
        if sys.stderr is not None:
            try:
                print(f"error: {prog}: {message}", file=sys.stderr, flush=True)
            except (OSError, ValueError):
                pass

    def silence_stdout() -> None:
        # Python flushes stdout again at exit and would print a traceback; point it at /dev/null first.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass

    if sys.stdout is None:  # started with stdout closed: nothing could be printed, say so before doing anything
        say("standard output is closed (started with >&-); accepted: an open standard output, e.g. > file")
        sys.exit(OUTPUT_FAILED)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")  # 'caf\xe9.json', never a UnicodeEncodeError
        except (AttributeError, ValueError, OSError):
            pass
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
        sys.exit(141)
    except KeyboardInterrupt:
        say("interrupted (Ctrl-C); files already written are complete, nothing was left half-written")
        silence_stdout()
        sys.exit(INTERRUPTED)
    except OSError as err:  # stdout on a full disk (ENOSPC), a failing device, or a file no door caught
        why = f"{err.strerror or err} ({errno_name(err.errno)})"
        say(f"{why}: {err.filename}" if err.filename else f"cannot write the output: {why}; accepted: an output "
            "with room to write to")
        silence_stdout()
        sys.exit(OUTPUT_FAILED)
    sys.exit(code)


def errno_name(number: int | None) -> str:
    """``ENOSPC`` for 28: the name a reader can search for."""
    import errno

    return errno.errorcode.get(number or 0, f"errno {number}")


# ------------------------------------------------------------------------------------------ JSON and files
def _non_finite(value: Any, where: str = "") -> str | None:
    """Where the first NaN or infinity in ``value`` sits (``engines.paged.ttft_p50[2]``), or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "the value"
    if isinstance(value, dict):
        items = ((f"{where}.{k}" if where else str(k), v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for path, v in items:
        found = _non_finite(v, path)
        if found:
            return found
    return None


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` that refuses NaN and infinity (they are not JSON): every JSON the course prints goes
    through here, so a non-finite number is one line naming where it is, never a file other tools cannot read."""
    try:
        return json.dumps(value, allow_nan=False, **kwargs)
    except ValueError:
        where = _non_finite(value)
        raise InputError(f"the result holds a non-finite number at {where}, which JSON cannot carry; "
                         "accepted inputs give finite results (this is a bug if the inputs were valid)") from None


# The largest config.json in the course's registry is about 1 kB, and the biggest real ones (with per-layer lists)
# tens of kB; 1 MiB is far above any, and small enough to read and scan at once.
CONFIG_LIMIT_BYTES = 2**20
MAX_JSON_DEPTH = 64  # a config.json nests three or four levels (rope_scaling, quantization_config)


def loads_json(text: str, what: str) -> Any:
    """``json.loads`` with one-line errors, and nesting beyond :data:`MAX_JSON_DEPTH` refused before parsing."""
    depth = 0
    in_string = escaped = False
    for ch in text:  # brackets outside strings; a linear scan, so 100,000 nested arrays cannot recurse
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise InputError(f"{what} nests more than {MAX_JSON_DEPTH} levels deep; accepted: a JSON object "
                                 "as a config.json holds (a few levels)")
        elif ch in "]}":
            depth -= 1
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{what} is not valid JSON: {err}") from None
    except (ValueError, RecursionError) as err:  # e.g. an integer literal too long to convert
        raise InputError(f"{what}: {str(err).splitlines()[0]}") from None


def read_small_file(path: Any, limit: int, what: str = "file") -> str:
    """The text of ``path``, a regular file of at most ``limit`` bytes, in UTF-8.

    Checked before reading: a directory, a FIFO (which would block), a device such as /dev/zero (which never
    ends) or a file past the limit is refused in one line. FileNotFoundError passes through.
    """
    import os
    import stat
    from pathlib import Path

    path = Path(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise FileNotFoundError(f"no {what} at {path}") from None
    except OSError as err:
        raise InputError(f"cannot read {path}: {err.strerror or err}") from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"{path} is a directory; accepted: the path of a {what}")
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{path} is not a regular file (a pipe or a device); accepted: the path of a {what}")
    if info.st_size > limit:
        raise InputError(f"{path} is {info.st_size:,} bytes; accepted: a {what} of at most {limit:,} bytes")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # never block, even if swapped for a FIFO
        with os.fdopen(fd, "rb") as f:
            data = f.read(limit + 1)
    except OSError as err:
        raise InputError(f"cannot read {path}: {err.strerror or err}") from None
    if len(data) > limit:
        raise InputError(f"{path} is over {limit:,} bytes; accepted: a {what} of at most {limit:,} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{path} is not UTF-8 text: {err}") from None
