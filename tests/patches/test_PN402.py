"""PN402: the model runner schedules requests with invalid draft ids without drafts.

Carried on 0.24.0, whose V1 runner writes the scheduler's draft token ids into the input
ids. Retired on 0.34.0 (obsolete): the V2 runner takes only the number of drafts from
SchedulerOutput.scheduled_spec_decode_tokens and reads the ids from the drafts its own
speculator left on the device (req_states.draft_tokens, zeroed for a new request), so an id
the scheduler holds never reaches the embedding. ``test_upstream_*`` observes that on
pristine 0.34.0: the batch state is built from the counts, and the Triton kernel that
fills the input ids runs under the interpreter on the CPU.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from _interpreted import run_interpreted
from _pins import REPO, TREE, only_on
from _vllm_sched import create_requests, create_scheduler, model_output, tiny_model_dir

V1 = only_on("<0.34", "V1 runner internals (_drop_invalid_draft_tokens); 0.34.0 has no V1 runner")
V2 = only_on(">=0.34", "the V2 runner's input preparation, 0.34.0 only")

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


@V1
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


@V1
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


@V1
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


@V1
def test_off_drafts_pass_through_unchanged(switch, model_dir):
    switch("PN402", False)
    _, _, out = _scheduled_with_drafts(model_dir, {"r0": [-1, -1], "r1": [VOCAB + 5, 4]})
    assert _drop(_runner(), out) is out
    assert out.scheduled_spec_decode_tokens == {"r0": [-1, -1], "r1": [VOCAB + 5, 4]}


@V1
def test_on_valid_drafts_keep_the_same_object(switch, model_dir):
    switch("PN402", True)
    _, _, out = _scheduled_with_drafts(model_dir, {"r0": [0, VOCAB - 1]})
    assert _drop(_runner(), out) is out


_V2_INPUT_IDS = r"""
import json
from types import SimpleNamespace

import numpy as np
import torch

import vllm.platforms

# A source tree has no installed distribution to ask whether it is a CPU build; without
# this the lookup fails and vLLM turns Triton off (see test_PN28.py).
vllm.platforms.vllm_version_matches_substr = lambda substr: False

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.worker.gpu.input_batch import combine_sampled_and_draft_tokens
from vllm.v1.worker.gpu.model_runner import GPUModelRunner

VOCAB, K, PROMPT = 128, 2, 6
# What the scheduler hands the runner: one decode token plus K drafts per request, the
# drafts out of the vocabulary, async placeholders and negative.
scheduled = {"r0": [VOCAB + 5, 4], "r1": [-1, -1], "r2": [-7, VOCAB]}
out = SchedulerOutput.make_empty()
out.num_scheduled_tokens = {r: 1 + K for r in scheduled}
out.total_num_scheduled_tokens = 3 * (1 + K)
out.scheduled_spec_decode_tokens = scheduled

# The runner state gather_batch_req_state reads: three decoding requests past their prompt.
req_states = SimpleNamespace(
    req_id_to_index={"r0": 0, "r1": 1, "r2": 2},
    prefill_len=SimpleNamespace(np=np.full(4, PROMPT, dtype=np.int32)),
    num_computed_prefill_tokens=np.full(4, PROMPT, dtype=np.int32),
)
runner = SimpleNamespace(
    req_states=req_states, decode_query_len=1 + K, use_pp=False, adaptive_verification=None, pcp_manager=None
)
state, _ = GPUModelRunner.gather_batch_req_state(runner, out, False)

# prepare_inputs: one logit per draft plus the bonus token, then the kernel fills the ids.
num_logits = state.num_draft_tokens_np + 1
cu_num_logits = torch.tensor(np.concatenate([[0], np.cumsum(num_logits)]), dtype=torch.int32)
query_start_loc = torch.tensor(np.concatenate([[0], np.cumsum(state.num_scheduled_tokens)]), dtype=torch.int32)
num_computed = PROMPT + 3  # prompt and three generated tokens
seq_lens = torch.tensor(num_computed + state.num_scheduled_tokens, dtype=torch.int32)
# The device-side state: the last sampled token and the speculator's drafts per request slot.
last_sampled = torch.tensor([[11], [12], [13], [0]], dtype=torch.int64)
device_drafts = torch.tensor([[21, 22], [31, 32], [41, 42], [0, 0]], dtype=torch.int64)
input_ids = torch.full((int(query_start_loc[-1]),), -99, dtype=torch.int32)
combine_sampled_and_draft_tokens(
    input_ids,
    torch.tensor(state.idx_mapping_np, dtype=torch.int64),
    last_sampled,
    query_start_loc,
    seq_lens,
    torch.full((4,), PROMPT, dtype=torch.int32),
    device_drafts,
    cu_num_logits,
    int(cu_num_logits[-1]),
)
print(json.dumps({
    "req_ids": state.req_ids,
    "num_draft_tokens": state.num_draft_tokens_np.tolist(),
    "input_ids": input_ids.tolist(),
}))
"""


@V2
@pytest.mark.slow  # a fresh process imports the V2 runner under the Triton interpreter: 20 s of CPU here
def test_upstream_scheduler_draft_ids_never_reach_the_input_ids():
    result = run_interpreted(_V2_INPUT_IDS, TREE, REPO / "kernels")
    assert result["req_ids"] == ["r0", "r1", "r2"]
    # The scheduler's lists only give the counts ...
    assert result["num_draft_tokens"] == [2, 2, 2]
    # ... and the input ids come from the device-side state, all inside the vocabulary.
    assert result["input_ids"] == [11, 21, 22, 12, 31, 32, 13, 41, 42]
    assert all(0 <= token < VOCAB for token in result["input_ids"])
