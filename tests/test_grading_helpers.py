"""stage5.grading: hints without answers, and stage5's own answers switched off while a learner's code runs."""

from __future__ import annotations

import pytest

from stage5 import cost
from stage5.grading import (
    GradingError,
    UnavailableError,
    call_learner,
    check_close,
    diagnose,
    kv_misconceptions,
    label,
    unavailable,
)
from stage5.models import get_model


def test_check_close_passes_within_tolerance():
    check_close("x", 101.0, 100.0, rel_tol=0.02)
    check_close("n", 40, 39, rel_tol=0, abs_tol=1)


@pytest.mark.parametrize("got", [150.0, 1e5, 0.1, -3.0])
def test_failure_names_check_but_not_value(got):
    with pytest.raises(GradingError) as err:
        check_close("A9 widget size", got, 123.456)
    msg = str(err.value)
    assert msg.startswith("A9 widget size:") and "123.4" not in msg


def test_ratio_hints():
    m = get_model("qwen2.5-72b")
    hints = kv_misconceptions(m)
    want = m.kv_bytes_per_token()
    assert "query heads" in diagnose(want * 8, want, misconceptions=hints)
    assert "factor 2" in diagnose(want / 2, want, misconceptions=hints)
    assert "GiB" in diagnose(100 * 2**30 / 1e9, 100)
    assert "unit" in diagnose(53.5e-3, 53.5)


def test_wrong_answers_first():
    assert diagnose(38, 39, rel_tol=0, wrong_answers=[(38, "mixed GB and GiB")]) == "mixed GB and GiB"


def test_the_nearest_wrong_answer_names_the_slip():
    """Two slips within the tolerance of each other: the learner's exact figure picks the hint."""
    slips = [(428.6, "you left out the reserve"), (420.6, "the reserve is per GPU")]
    assert diagnose(420.6, 396.6, wrong_answers=slips) == "the reserve is per GPU"
    assert diagnose(428.6, 396.6, wrong_answers=slips) == "you left out the reserve"


def test_exact_checks_give_a_direction_without_a_tolerance():
    assert diagnose(45, 39, rel_tol=0) == "too large: re-check the inputs and unit conversions"
    assert "%" not in diagnose(40, 39, rel_tol=0)


def test_labels_read_as_a_reader_would():
    assert [label(x) for x in ("Batching", " prefix caching", "Prefix-Caching", 3)] == \
        ["batching", "prefix_caching", "prefix_caching", 3]


@pytest.mark.parametrize("bad", ["12", None, float("nan"), True])
def test_non_numbers_fail_cleanly(bad):
    with pytest.raises(GradingError):
        check_close("x", bad, 1.0)


def test_unavailable_blocks_and_restores():
    from stage5.cost import max_concurrency as imported_early

    dep = cost.Deployment.of("llama3-8b", "L40S")
    ns = {"mc": imported_early}
    with unavailable("stage5.cost.max_concurrency", "stage5.models.ModelConfig.kv_bytes_per_token",
                     "stage5.cost.Deployment.kv_bytes_per_token", namespaces=[ns]):
        with pytest.raises(UnavailableError):
            cost.max_concurrency(dep, 4096)
        with pytest.raises(UnavailableError):
            ns["mc"](dep, 4096)
        with pytest.raises(UnavailableError):
            dep.model.kv_bytes_per_token()
        with pytest.raises(UnavailableError):
            dep.kv_bytes_per_token  # noqa: B018 - a property
    assert ns["mc"] is imported_early and cost.max_concurrency is imported_early
    assert dep.model.kv_bytes_per_token() > 0 and int(cost.max_concurrency(dep, 4096)) > 0


def test_call_learner_turns_crashes_into_messages():
    def delegating(config):
        return config.kv_bytes_per_token()

    def crashing(config):
        raise ZeroDivisionError("oops")

    def stub(config):
        raise NotImplementedError

    m = get_model("gpt2")
    blocked = ["stage5.models.ModelConfig.kv_bytes_per_token"]
    with pytest.raises(GradingError, match="computes this answer for you"):
        call_learner("B1", delegating, m, blocked=blocked)
    with pytest.raises(GradingError, match="ZeroDivisionError: oops"):
        call_learner("B1", crashing, m, blocked=blocked)
    with pytest.raises(GradingError, match="not written yet"):
        call_learner("B1", stub, m)
    assert call_learner("B1", lambda c: 2 * c.num_layers, m, blocked=blocked) == 24


def test_stashed_copies_of_an_answer_are_blocked_too():
    """A learner who saved stage5's answer before the check (in a default argument, a closure, a list, a dict or a
    class) gets the stub while the check runs, and everything is restored after."""
    from stage5.models import ModelConfig

    original = ModelConfig.kv_bytes_per_token
    stash = [original]
    table = {"kv": original}

    class Stash:
        kv = original

    def via_default(config, b=2, _ref=original):
        return _ref(config, b)

    def via_closure(ref):
        return lambda config, b=2: ref(config, b)

    m = get_model("gpt2")
    blocked = ["stage5.models.ModelConfig.kv_bytes_per_token"]
    for cheat in (via_default, via_closure(original), lambda c, b=2: stash[0](c, b),
                  lambda c, b=2: table["kv"](c, b), lambda c, b=2: Stash.kv(c, b)):
        with pytest.raises(GradingError, match="computes this answer for you"):
            call_learner("B1", cheat, m, 2, blocked=blocked)
        assert cheat(m, 2) == m.kv_bytes_per_token(2)  # restored
    assert stash[0] is original and table["kv"] is original and Stash.kv is original
    assert via_default.__defaults__ == (2, original)


def test_stashes_in_an_instance_a_lost_module_and_a_class_are_all_blocked(monkeypatch):
    """The heap walk finds a copy in an instance's dict even when its class holds the same function, and in the
    dict of a module removed from sys.modules; the class attribute is patched through setattr."""
    import gc
    import types

    from stage5.models import ModelConfig

    original = ModelConfig.kv_bytes_per_token

    class Holder:
        kv = original

    holder = Holder()
    holder.__dict__["kv"] = original  # an instance's own copy, beside the class's
    lost = types.ModuleType("lost_module")  # never in sys.modules
    lost.kv = original
    m = get_model("gpt2")
    blocked = ["stage5.models.ModelConfig.kv_bytes_per_token"]
    walks = []
    real = gc.get_referrers
    monkeypatch.setattr(gc, "get_referrers", lambda *objs: walks.append(len(objs)) or real(*objs))
    for cheat in (lambda c, b=2: holder.kv(c, b), lambda c, b=2: lost.kv(c, b), lambda c, b=2: Holder.kv(c, b)):
        walks.clear()
        with pytest.raises(GradingError, match="computes this answer for you"):
            call_learner("B1", cheat, m, 2, blocked=blocked)
        # each walk of the heap costs tens of ms with torch loaded: at most three per check, however many copies
        assert 1 <= len(walks) <= 3, walks
        assert cheat(m, 2) == m.kv_bytes_per_token(2)
    assert holder.__dict__["kv"] is original and Holder.__dict__["kv"] is original and lost.kv is original


def test_a_slip_is_named_only_where_the_answer_matches_it():
    """A KV size per token rounded early (9.2% high) lies within the checks' 2% of a GB/GiB mix (7.4% high) but is
    not that slip: the hint says less. The mix itself, and a wrong answer hit exactly, are still named."""
    want = get_model("llama3-8b").kv_bytes_per_token(2)
    hints = kv_misconceptions(get_model("llama3-8b"))
    early = diagnose(want * 1.092, want, misconceptions=hints)
    assert "GiB" not in early and early.startswith("too large")
    assert "GiB" in diagnose(want * 2**30 / 1e9, want, misconceptions=hints)
    assert "GiB" in diagnose(want * 2**30 / 1e9 * 1.004, want, misconceptions=hints)  # rounded a little: still it
    assert diagnose(101.5, 100, wrong_answers=[(100.2, "a slip")]) != "a slip"  # 1.3% from the slip's value
    assert diagnose(100.3, 97, wrong_answers=[(100.2, "a slip")]) == "a slip"
