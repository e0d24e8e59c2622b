"""P79c: running requests left out of a step lose their stale draft tokens.

The stale -1s could reach the model only through the V1 model runner, which filled a
request's draft slots from its slot in the previous batch (P79c only ran with the V1
runner). vLLM 0.34.0 has only the V2 runner, which writes each request's own drafts, kept
by request state, into the input ids: P79c is obsolete there. Its own tests run on the
releases that carry it; ``test_upstream_*`` checks pristine 0.34.0.
"""

from __future__ import annotations

import pytest

from _pins import only_on
from _vllm_sched import create_requests, create_scheduler, placeholder_leaks, run_async_steps, tiny_model_dir
from _v2_inputs import v2_input_ids

CARRIED = only_on("<0.34", "P79c is retired on 0.34.0 (obsolete: no V1 model runner)")

K = 2


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("p79c"))


def _starved(model_dir, async_scheduling: bool = True):
    """A budget of 1 + K tokens: the first request starves the second until it ends."""
    sched = create_scheduler(
        model_dir,
        num_speculative_tokens=K,
        async_scheduling=async_scheduling,
        max_num_seqs=2,
        max_num_batched_tokens=1 + K,
    )
    reqs = create_requests(1, num_tokens=2, max_tokens=4, prefix="short") + create_requests(
        1, num_tokens=1, max_tokens=30, prefix="long"
    )
    for r in reqs:
        sched.add_request(r)
    return sched, reqs


@CARRIED
def test_fixed_unscheduled_request_has_no_drafts(switch, model_dir):
    switch("P79c", True)
    sched, reqs = _starved(model_dir)
    steps = run_async_steps(sched, reqs, 8)
    starved = [i for i, (out, _, _) in enumerate(steps) if i > 0 and "long0" not in out.num_scheduled_tokens]
    assert starved, "the scenario must leave the long request out of some steps"
    for i in starved:
        assert steps[i][2]["long0"] == []
    assert placeholder_leaks(steps) == []
    resumed = max(starved) + 1
    out = steps[resumed][0]
    assert out.num_scheduled_tokens["long0"] == 1
    assert "long0" not in out.scheduled_spec_decode_tokens


@CARRIED
def test_fixed_scheduled_requests_keep_placeholders(switch, model_dir):
    switch("P79c", True)
    sched, reqs = _starved(model_dir)
    steps = run_async_steps(sched, reqs, 4)
    out, prev_ids, spec_after = steps[1]
    assert out.scheduled_spec_decode_tokens == {"short0": [-1] * K}
    assert spec_after["short0"] == [-1] * K  # placeholders for the next step
    assert spec_after["long0"] == []


@CARRIED
def test_off_unscheduled_request_keeps_stale_placeholders(switch, model_dir):
    switch("P79c", False)
    sched, reqs = _starved(model_dir)
    steps = run_async_steps(sched, reqs, 8)
    assert steps[2][2]["long0"] == [-1] * K
    leaks = placeholder_leaks(steps)
    assert [rid for _, rid in leaks] == ["long0"]


@only_on(">=0.34", "0.34.0 has only the V2 model runner")
def test_upstream_unscheduled_request_comes_back_with_its_own_drafts(model_dir):
    """Pristine 0.34.0: a running request left out of steps keeps its K placeholders and
    is scheduled with them when it comes back (the worker needs their count); the V2
    runner writes that request's own last token and drafts into the input ids, never a -1."""
    sched, reqs = _starved(model_dir)
    steps = run_async_steps(sched, reqs, 8)
    leaks = placeholder_leaks(steps)
    assert [rid for _, rid in leaks] == ["long0"]
    assert steps[leaks[0][0]][0].scheduled_spec_decode_tokens["long0"] == [-1] * K
    assert v2_input_ids() == [40, 41, 42, 50, 51, 52]
