"""P79d: preemption under async scheduling drops the in-flight output and placeholders.

vLLM 0.34.0 fixed the bug its own way (vllm#48245): ``_preempt_request`` zeroes the
placeholders and marks the in-flight output stale (``num_stale_output_tokens``); the stale
frame is still delivered but leaves the reset counters alone, and ``reset_prefix_cache``
drops it (``drop_stale_output``). P79d is retired there. The tests that read 0.24.0's
``async_tokens_to_discard`` or switch the patch run on the releases that carry it; the
``test_upstream_*`` ones check pristine 0.34.0's behaviour.
"""

from __future__ import annotations

import pytest

from _pins import only_on
from _vllm_sched import create_requests, create_scheduler, model_output, tiny_model_dir

CARRIED = only_on("<0.34", "P79d is retired on 0.34.0 (vllm#48245); the test reads 0.24.0's discard counter")
UPSTREAM = only_on(">=0.34", "the upstream form of the fix (vllm#48245) is in 0.34.0")

K = 2
MAX_TOKENS = 10


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("p79d"))


def _setup(model_dir):
    """Two requests sharing 7 KV blocks of 4 tokens: the second is preempted while the
    output of its previous step is still in flight."""
    sched = create_scheduler(
        model_dir,
        num_speculative_tokens=K,
        async_scheduling=True,
        max_num_seqs=2,
        max_num_batched_tokens=64,
        num_blocks=7,
        block_size=4,
    )
    reqs = create_requests(2, num_tokens=5, max_tokens=MAX_TOKENS, block_size=4)
    for r in reqs:
        sched.add_request(r)
    return sched, reqs


def _drive(sched, reqs, max_steps=60, token=lambda step: 7):
    """Schedule step N+1 before processing step N; return per-step snapshots taken right
    after each schedule() and right after each update_from_output(). Every request of
    step N samples ``token(N)``."""
    after_schedule, after_update = [], []
    prev = None
    for step in range(max_steps):
        out = sched.schedule()
        after_schedule.append((out, {r.request_id: _state(r) for r in reqs}))
        if prev is not None:
            tok = token(step - 1)
            sched.update_from_output(prev, model_output(prev, {r: [tok] for r in prev.num_scheduled_tokens}))
        after_update.append({r.request_id: _state(r) for r in reqs})
        prev = out
        if all(r.is_finished() for r in reqs):
            break
    return after_schedule, after_update


def _state(r):
    return dict(
        status=r.status.name,
        placeholders=r.num_output_placeholders,
        discard=getattr(r, "async_tokens_to_discard", None),  # 0.24.0
        stale=getattr(r, "num_stale_output_tokens", None),  # 0.34.0
        outputs=r.num_output_tokens,
    )


def _first_preemption(after_schedule):
    for i, (out, states) in enumerate(after_schedule):
        if out.preempted_req_ids:
            return i, next(iter(out.preempted_req_ids))
    raise AssertionError("the scenario must preempt a request")


@CARRIED
def test_fixed_preemption_zeroes_placeholders_and_drops_stale_output(switch, model_dir):
    switch("P79d", True)
    sched, reqs = _setup(model_dir)
    after_schedule, after_update = _drive(sched, reqs)
    step, rid = _first_preemption(after_schedule)
    state = after_schedule[step][1][rid]
    assert state["status"] == "PREEMPTED"
    assert state["placeholders"] == 0
    assert state["discard"] == 1
    # The stale frame comes back in the same step: it is dropped, not appended.
    assert after_update[step][rid]["outputs"] == state["outputs"]
    assert after_update[step][rid]["discard"] == 0
    assert after_update[step][rid]["placeholders"] == 0


@CARRIED
def test_on_requests_still_finish_with_all_tokens(switch, model_dir):
    switch("P79d", True)
    sched, reqs = _setup(model_dir)
    after_schedule, _ = _drive(sched, reqs)
    assert sum(len(out.preempted_req_ids) for out, _ in after_schedule) >= 1
    assert all(r.is_finished() for r in reqs)
    assert [r.num_output_tokens for r in reqs] == [MAX_TOKENS, MAX_TOKENS]
    assert all(r.num_output_placeholders == 0 and r.async_tokens_to_discard == 0 for r in reqs)


def _reset_with_a_frame_in_flight(model_dir):
    """Prefill, then a decode step with K drafts whose output is still in flight when the
    prefill's comes back; then reset_prefix_cache. Gives (scheduler, requests, the frame in flight)."""
    sched, reqs = _setup(model_dir)
    out0 = sched.schedule()  # prefill, samples one token
    out1 = sched.schedule()  # decode with K drafts, frame in flight
    sched.update_from_output(out0, model_output(out0, {r.request_id: [7] for r in reqs}))
    assert all(r.num_output_placeholders == 1 + K for r in reqs)
    assert sched.reset_prefix_cache(reset_running_requests=True)
    return sched, reqs, out1


@CARRIED
def test_fixed_reset_prefix_cache_discards_one_frame(switch, model_dir):
    switch("P79d", True)
    sched, reqs, out1 = _reset_with_a_frame_in_flight(model_dir)
    assert all(r.async_tokens_to_discard == 1 and r.num_output_placeholders == 0 for r in reqs)
    sched.update_from_output(out1, model_output(out1, {r.request_id: [8] for r in reqs}))
    assert all(r.async_tokens_to_discard == 0 for r in reqs)
    assert all(list(r.output_token_ids) == [7] for r in reqs)


@CARRIED
def test_off_preemption_keeps_placeholders_like_upstream(switch, model_dir):
    switch("P79d", False)
    sched, reqs = _setup(model_dir)
    after_schedule, after_update = _drive(sched, reqs)
    step, rid = _first_preemption(after_schedule)
    state = after_schedule[step][1][rid]
    assert state["status"] == "PREEMPTED"
    assert state["placeholders"] == 1 + K
    assert state["discard"] == 0
    # Upstream appends the stale frame's token to the preempted request.
    assert after_update[step][rid]["outputs"] == state["outputs"] + 1
    assert [r.num_output_tokens for r in reqs] == [MAX_TOKENS, MAX_TOKENS]


@CARRIED
def test_off_reset_prefix_cache_counts_placeholder_tokens(switch, model_dir):
    switch("P79d", False)
    sched, reqs = _setup(model_dir)
    out0 = sched.schedule()
    sched.schedule()
    sched.update_from_output(out0, model_output(out0, {r.request_id: [7] for r in reqs}))
    assert sched.reset_prefix_cache(reset_running_requests=True)
    assert all(r.async_tokens_to_discard == 1 + K and r.num_output_placeholders == 0 for r in reqs)


@UPSTREAM
def test_upstream_preemption_zeroes_placeholders_and_delivers_the_stale_token_once(model_dir):
    """Pristine 0.34.0: the preempted request keeps no placeholders; the output in flight
    when it was preempted comes back marked stale, is delivered once and changes no
    counter; both requests finish with all their tokens, none of them twice."""
    sched, reqs = _setup(model_dir)
    after_schedule, after_update = _drive(sched, reqs, token=lambda step: 20 + step)
    step, rid = _first_preemption(after_schedule)
    state = after_schedule[step][1][rid]
    assert state["status"] == "PREEMPTED"
    assert state["placeholders"] == 0
    assert state["stale"] == 1 + K  # the step in flight: one sampled token and K drafts
    returned = after_update[step][rid]
    assert returned["outputs"] == state["outputs"] + 1
    assert returned["placeholders"] == 0 and returned["stale"] == 0
    assert sum(len(out.preempted_req_ids) for out, _ in after_schedule) >= 1
    assert all(r.is_finished() for r in reqs)
    for r in reqs:
        tokens = list(r.output_token_ids)
        # one token a step, in step order: a token delivered twice would repeat a step
        assert len(tokens) == MAX_TOKENS and tokens == sorted(set(tokens)), (r.request_id, tokens)
        assert r.num_output_placeholders == 0 and r.num_stale_output_tokens == 0


@UPSTREAM
def test_upstream_reset_prefix_cache_drops_the_in_flight_frame(model_dir):
    """Pristine 0.34.0: reset_prefix_cache preempts the running requests and drops the
    output still in flight, so the resumed requests have only the token sampled before."""
    sched, reqs, out1 = _reset_with_a_frame_in_flight(model_dir)
    assert all(r.num_output_placeholders == 0 and r.drop_stale_output for r in reqs)
    sched.update_from_output(out1, model_output(out1, {r.request_id: [8] for r in reqs}))
    assert all(r.num_stale_output_tokens == 0 for r in reqs)
    assert all(list(r.output_token_ids) == [7] for r in reqs)
