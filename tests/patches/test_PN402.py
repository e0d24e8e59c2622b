"""PN402: the model runner schedules requests with invalid draft ids without drafts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from _vllm_sched import create_requests, create_scheduler, model_output, tiny_model_dir

K = 2
VOCAB = 128  # the tiny model's vocab_size


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("pn402"))


def _scheduled_with_drafts(model_dir, drafts: dict[str, list[int]]):
    """A real Scheduler whose requests got ``drafts`` from the drafter, after one
    prefill step; returns the scheduler, its requests and the decode step's output."""
    from vllm.v1.outputs import DraftTokenIds

    sched = create_scheduler(model_dir, num_speculative_tokens=K)
    reqs = create_requests(3, num_tokens=6)
    for r in reqs:
        sched.add_request(r)
    out = sched.schedule()
    sched.update_from_output(out, model_output(out, {r.request_id: [5] for r in reqs}))
    sched.update_draft_token_ids(DraftTokenIds(list(drafts), list(drafts.values())))
    return sched, reqs, sched.schedule()


def _runner(prev_ids=(), async_spec=False, have_drafts=False):
    """The runner state the method reads (a stand-in for a CUDA GPUModelRunner)."""
    return SimpleNamespace(
        input_batch=SimpleNamespace(vocab_size=VOCAB, prev_req_id_to_index={r: i for i, r in enumerate(prev_ids)}),
        use_async_spec_decode=async_spec,
        _draft_token_ids=object() if have_drafts else None,
    )


def _drop(runner, out):
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    return GPUModelRunner._drop_invalid_draft_tokens(runner, out)


def test_fixed_out_of_vocab_drafts_are_dropped(switch, model_dir):
    switch("PN402", True)
    _, _, out = _scheduled_with_drafts(model_dir, {"r0": [3, 4], "r1": [VOCAB + 5, 4], "r2": [7, 8]})
    assert out.scheduled_spec_decode_tokens["r1"] == [VOCAB + 5, 4]
    clean = _drop(_runner(), out)
    assert clean is not out
    assert clean.scheduled_spec_decode_tokens == {"r0": [3, 4], "r2": [7, 8]}
    assert clean.num_scheduled_tokens == {"r0": 1 + K, "r1": 1, "r2": 1 + K}
    assert clean.total_num_scheduled_tokens == out.total_num_scheduled_tokens - K
    # The scheduler's own output is untouched.
    assert out.scheduled_spec_decode_tokens["r1"] == [VOCAB + 5, 4]
    assert out.num_scheduled_tokens["r1"] == 1 + K


def test_fixed_unfillable_placeholders_are_dropped(switch, model_dir):
    switch("PN402", True)
    _, _, out = _scheduled_with_drafts(model_dir, {"r0": [-1, -1], "r1": [-1, -1], "r2": [-1, -1]})
    # Async runner with drafts on the GPU: only "r0" and "r2" have a previous-batch row.
    clean = _drop(_runner(prev_ids=("r0", "r2"), async_spec=True, have_drafts=True), out)
    assert clean.scheduled_spec_decode_tokens == {"r0": [-1, -1], "r2": [-1, -1]}
    assert clean.num_scheduled_tokens["r1"] == 1
    # No drafts held on the GPU: no placeholder can be filled.
    clean = _drop(_runner(prev_ids=("r0", "r1", "r2"), async_spec=True, have_drafts=False), out)
    assert clean.scheduled_spec_decode_tokens == {}
    assert clean.total_num_scheduled_tokens == 3


def test_fixed_scheduler_stays_consistent(switch, model_dir):
    switch("PN402", True)
    sched, reqs, out = _scheduled_with_drafts(model_dir, {"r0": [3, 4], "r1": [-7, 4], "r2": [7, 8]})
    clean = _drop(_runner(), out)
    # The runner ran "r1" without drafts and sampled one token; the scheduler gets its own
    # output back and treats both drafts as rejected.
    sched.update_from_output(out, model_output(clean, {"r0": [9], "r1": [9], "r2": [9]}))
    req = next(r for r in reqs if r.request_id == "r1")
    assert req.num_computed_tokens == req.num_tokens - 1
    assert list(req.output_token_ids) == [5, 9]


def test_off_drafts_pass_through_unchanged(switch, model_dir):
    switch("PN402", False)
    _, _, out = _scheduled_with_drafts(model_dir, {"r0": [-1, -1], "r1": [VOCAB + 5, 4]})
    assert _drop(_runner(), out) is out
    assert out.scheduled_spec_decode_tokens == {"r0": [-1, -1], "r1": [VOCAB + 5, 4]}


def test_on_valid_drafts_keep_the_same_object(switch, model_dir):
    switch("PN402", True)
    _, _, out = _scheduled_with_drafts(model_dir, {"r0": [0, VOCAB - 1]})
    assert _drop(_runner(), out) is out
