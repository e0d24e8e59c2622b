"""P58: async scheduling never ships -1 draft placeholders the worker cannot fill.

The -1s could reach the model only through the V1 model runner, which filled a request's
draft slots from its slot in the previous batch (P58 was already skipped under the V2
runner). vLLM 0.34.0 has only the V2 runner, which writes each request's own drafts, kept
by request state, into the input ids: P58 is obsolete there. Its own tests run on the
releases that carry it; ``test_upstream_*`` checks pristine 0.34.0.
"""

from __future__ import annotations

import pytest

from _pins import only_on
from _vllm_sched import create_requests, create_scheduler, model_output, tiny_model_dir
from _v2_inputs import v2_input_ids

CARRIED = only_on("<0.34", "P58 is retired on 0.34.0 (obsolete: no V1 model runner)")

K = 2


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("p58"))


def _run(model_dir, steps: int = 8):
    """Drive an AsyncScheduler the way the engine does: schedule step N+1 before
    the output of step N comes back. A budget of 1 + K tokens lets the first request
    starve the second until it finishes."""
    sched = create_scheduler(
        model_dir, num_speculative_tokens=K, async_scheduling=True, max_num_seqs=2, max_num_batched_tokens=1 + K
    )
    short = create_requests(1, num_tokens=2, max_tokens=4, prefix="short")[0]
    long = create_requests(1, num_tokens=1, max_tokens=30, prefix="long")[0]
    sched.add_request(short)
    sched.add_request(long)
    outputs = []
    prev = None
    prev_ids: set[str] = set()
    for _ in range(steps):
        out = sched.schedule()
        outputs.append((out, prev_ids))
        if prev is not None:
            sched.update_from_output(prev, model_output(prev, {r: [7] for r in prev.num_scheduled_tokens}))
        prev, prev_ids = out, set(out.num_scheduled_tokens)
    return outputs


def _leaks(outputs):
    return [
        (i, rid)
        for i, (out, prev_ids) in enumerate(outputs)
        for rid, toks in out.scheduled_spec_decode_tokens.items()
        if any(t < 0 for t in toks) and rid not in prev_ids
    ]


@CARRIED
def test_fixed_no_placeholders_for_requests_absent_from_previous_step(switch, model_dir):
    switch("P58", True)
    outputs = _run(model_dir)
    assert _leaks(outputs) == []
    # The starved request is scheduled again, for one token and no drafts ...
    resumed = next(i for i, (out, prev_ids) in enumerate(outputs) if "long0" in out.num_scheduled_tokens and i > 1)
    out, prev_ids = outputs[resumed]
    assert "long0" not in prev_ids
    assert out.num_scheduled_tokens["long0"] == 1
    assert "long0" not in out.scheduled_spec_decode_tokens
    # ... and the step after, being in the previous batch, it decodes with drafts again.
    nxt, _ = outputs[resumed + 1]
    assert nxt.scheduled_spec_decode_tokens["long0"] == [-1] * K
    assert nxt.num_scheduled_tokens["long0"] == 1 + K


@CARRIED
def test_fixed_requests_in_previous_step_keep_their_placeholders(switch, model_dir):
    switch("P58", True)
    outputs = _run(model_dir)
    out, prev_ids = outputs[1]
    assert "short0" in prev_ids
    assert out.scheduled_spec_decode_tokens == {"short0": [-1] * K}
    # The resumed request is sized without its dropped placeholders.
    total = sum(sum(o.num_scheduled_tokens.values()) for o, _ in outputs)
    switch("P58", False)
    off_total = sum(sum(o.num_scheduled_tokens.values()) for o, _ in _run(model_dir))
    assert total == off_total - K


@CARRIED
def test_off_behaves_like_upstream_and_leaks(switch, model_dir):
    switch("P58", False)
    outputs = _run(model_dir)
    leaks = _leaks(outputs)
    assert leaks, "upstream 0.24.0 ships -1 placeholders for the starved request"
    step, rid = leaks[0]
    assert rid == "long0"
    out, _ = outputs[step]
    assert out.num_scheduled_tokens["long0"] == 1 + K


@only_on(">=0.34", "0.34.0 has only the V2 model runner")
def test_upstream_starved_request_decodes_its_own_drafts(model_dir):
    """Pristine 0.34.0: the scheduler still gives the request it starved K draft
    placeholders when it comes back (the worker needs their count), and the V2 runner
    writes that request's own last token and drafts into the input ids, never a -1."""
    outputs = _run(model_dir)
    leaks = _leaks(outputs)
    assert [rid for _, rid in leaks] == ["long0"]
    step, _ = leaks[0]
    out, _ = outputs[step]
    assert out.scheduled_spec_decode_tokens["long0"] == [-1] * K
    assert out.num_scheduled_tokens["long0"] == 1 + K
    assert v2_input_ids() == [40, 41, 42, 50, 51, 52]
