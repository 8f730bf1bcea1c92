"""The toy disaggregated fleet (stage5.engine.disagg): the same answers as colocated, token for token; the K/V
bytes and the copy's time on the virtual clock by hand; the doors. Small workloads: about a second of CPU each."""

from __future__ import annotations

import pytest
import torch

from stage5 import disagg
from stage5.calibrate import Calibration
from stage5.engine import disagg as E
from stage5.engine import fleet as F
from stage5.engine.bench_disagg import main as bench_main
from stage5.engine.roofline_toy import ROOFLINE_TOY
from stage5.engine.sequence import Request
from stage5.engine.workload import Lengths, make_arrivals
from stage5.hardware import get_gpu
from stage5.step_model import predict_step

torch.set_num_threads(1)

# A made-up machine, so virtual times do not depend on the one running the tests (as tests/test_fleet.py).
CAL = Calibration(machine="test", threads=1, bandwidth=10e9, rows=(1, 16, 256), rates=(5e9, 40e9, 80e9),
                  overhead_step_s=1e-3, overhead_seq_s=1e-4, model=ROOFLINE_TOY.name)
SMALL = dict(num_blocks=64, block_size=8, max_batch=4, token_budget=32)
KV_PER_TOKEN = 2 * 2 * 4 * 128 * 4  # the roofline toy: 2 layers x K and V x 4 KV heads x 128 dims x float32


@pytest.fixture(scope="module")
def tiny():
    return F.load_tiny()


@pytest.fixture(scope="module")
def requests():
    reqs = make_arrivals(16, Lengths("uniform", low=40, high=120), Lengths("uniform", low=2, high=12), rate=20.0,
                         seed=1)
    return [*reqs, Request(16, reqs[3].prompt, 12, 1, reqs[3].arrival)]  # one answer done at its prefill


def test_disaggregated_answers_equal_colocated_token_for_token(tiny, requests):
    model, cfg = tiny
    runs = {m: E.serve(model, cfg, CAL, requests, E.DisaggConfig(mode=m, replicas=3, prefill_replicas=1, **SMALL))
            for m in E.MODES}
    answers = runs["colocated"].outputs
    assert sorted(answers) == [r.id for r in requests]
    assert [len(answers[r.id]) for r in requests] == [r.output_len for r in requests]
    assert runs["disaggregated"].outputs == answers and runs["chunked"].outputs == answers
    split = runs["disaggregated"]
    assert split.bytes_moved == sum(len(r.prompt) for r in requests) * KV_PER_TOKEN
    assert runs["colocated"].bytes_moved == 0
    # every answer's tokens are counted once across the two replicas that served it
    assert sum(t.output_tokens for t in split.times.values()) == sum(r.output_len for r in requests)
    assert any(r.output_len == 1 for r in requests) and any(r.output_len > 1 for r in requests)


@pytest.mark.parametrize("link, streamed", [("rdma", True), ("ssd", False), ("pcie", True)])
def test_one_copy_is_timed_from_the_link_by_hand(tiny, link, streamed):
    model, cfg = tiny
    prompt = tuple(range(1, 97))
    request = Request(0, prompt, 4, 4, 0.0)
    result = E.serve(model, cfg, CAL, [request], E.DisaggConfig(replicas=2, prefill_replicas=1, link=link,
                                                                streamed=streamed, **SMALL))
    h100 = get_gpu("H100-SXM")
    link_bw = CAL.bandwidth * disagg.link_bandwidth(link, h100) / h100.bandwidth
    transfer = 96 * KV_PER_TOKEN / link_bw
    prefill = float(predict_step(CAL, ROOFLINE_TOY, 1, 96, tokens_per_seq=96).time_s)
    exposed = transfer if not streamed else max(transfer / 2, transfer - prefill / 2)
    times = result.times[0]
    assert times.ttft == pytest.approx(prefill + exposed, rel=1e-9)
    assert result.copy_s == pytest.approx(transfer) and result.exposed_s == pytest.approx(exposed)
    # the decode replica's first step reads the whole prompt's K/V plus the first token's
    first_decode = float(predict_step(CAL, ROOFLINE_TOY, 1, 97).time_s)
    assert times.gaps[0] == pytest.approx(first_decode, rel=1e-9)


@pytest.mark.parametrize("config, says", [
    (dict(mode="disaggregated", replicas=1), "replicas"),
    (dict(mode="disaggregated", replicas=3, prefill_replicas=3), "prefill_replicas"),
    (dict(link="pigeon"), "link"),
    (dict(mode="both"), "mode"),
    (dict(num_blocks=1), "num_blocks"),
])
def test_impossible_fleets_are_refused_in_one_line(config, says):
    with pytest.raises(ValueError) as excinfo:
        E.DisaggConfig(**config)
    assert says in str(excinfo.value) and "\n" not in str(excinfo.value)


def test_adopt_refuses_kv_of_the_wrong_shape(tiny):
    model, cfg = tiny
    node = E.Node(0, "decode", model, cfg, CAL, E.DisaggConfig(**SMALL))
    with pytest.raises(ValueError, match="K/V of shape"):
        node.engine.adopt(Request(0, (1, 2, 3), 4, 4), 5, torch.zeros(1, 2, 3, 2, 8), 0.0)


def test_bench_refuses_a_fleet_without_decode_replicas(capsys):
    with pytest.raises(SystemExit):
        bench_main(["--replicas", "4", "--prefill", "4"])
    err = capsys.readouterr().err.strip()
    assert "--prefill" in err and len(err.splitlines()) == 1


def test_a_request_no_replica_can_hold_is_refused_before_serving(tiny):
    model, cfg = tiny
    big = Request(0, tuple(i % 256 for i in range(400)), 200, 10, 0.0)  # 600 slots; the pool holds 512
    with pytest.raises(ValueError) as excinfo:
        E.serve(model, cfg, CAL, [big], E.DisaggConfig(replicas=2, prefill_replicas=1, **SMALL))
    assert "K/V slots" in str(excinfo.value) and "\n" not in str(excinfo.value)
