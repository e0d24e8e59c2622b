"""The V2 model runner's input step (0.34.0), under Triton's CPU interpreter, for the patches
retired with the V1 runner (P58, P79c): a request left out of the previous batch (request
state 3) is put in batch slot 0 with K draft slots, and the input buffer holds -1 where a worker
filling from the scheduler's lists would look. ``v2_input_ids()`` gives the input ids it writes."""

from __future__ import annotations

from _interpreted import run_interpreted
from _pins import REPO, TREE

_V2_FILL = """
import vllm.platforms
vllm.platforms.vllm_version_matches_substr = lambda substr: False  # a source tree is no CPU build
import json
import torch
from vllm.v1.worker.gpu.input_batch import combine_sampled_and_draft_tokens
K = 2
# Request states: 1 = the neighbour, 3 = the request left out of the previous step.
draft = torch.zeros(4, K, dtype=torch.int64)
draft[1] = torch.tensor([51, 52])
draft[3] = torch.tensor([41, 42])
last = torch.zeros(4, 1, dtype=torch.int64)
last[1], last[3] = 50, 40
prefill_len = torch.tensor([0, 3, 0, 2], dtype=torch.int32)
# This step's batch: the starved request first (a slot it did not have before).
idx_mapping = torch.tensor([3, 1], dtype=torch.int64)
query_start_loc = torch.tensor([0, 1 + K, 2 + 2 * K], dtype=torch.int32)
seq_lens = torch.tensor([10, 12], dtype=torch.int32)
cu_num_logits = torch.tensor([0, 1 + K, 2 + 2 * K], dtype=torch.int32)
# What a worker filling from the scheduler's lists would find there.
input_ids = torch.full((2 + 2 * K,), -1, dtype=torch.int32)
combine_sampled_and_draft_tokens(
    input_ids, idx_mapping, last, query_start_loc, seq_lens, prefill_len, draft, cu_num_logits, 2 + 2 * K, 1
)
print(json.dumps(input_ids.tolist()))
"""


def v2_input_ids() -> list[int]:
    return run_interpreted(_V2_FILL, TREE, REPO / "kernels")
