"""P86: NgramProposer.batch_propose gathers drafts by index, not by list membership.

vLLM 0.34.0 has no V1 n-gram proposer (vllm/v1/spec_decode/ngram_proposer.py is gone with
the V1 model runner): the "ngram" method is served by the V2 runner's NgramGPUSpeculator,
two Triton kernels that write every request's drafts into one batch-ordered tensor, with
no per-request gather in Python. P86 is obsolete there; its own tests run on the releases
that carry it, ``test_upstream_*`` checks pristine 0.34.0.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from _pins import only_on

K = 3
MAX_MODEL_LEN = 32
CARRIED = only_on("<0.34", "P86 is retired on 0.34.0 (obsolete: no V1 n-gram proposer)")


class CountingList(list):
    """A list that counts membership tests (``x in lst``)."""

    contains_calls = 0

    def __contains__(self, item: object) -> bool:
        type(self).contains_calls += 1
        return super().__contains__(item)


@pytest.fixture(scope="module")
def proposer():
    from vllm.v1.spec_decode.ngram_proposer import NgramProposer

    config = SimpleNamespace(
        speculative_config=SimpleNamespace(prompt_lookup_min=2, prompt_lookup_max=3, num_speculative_tokens=K),
        model_config=SimpleNamespace(max_model_len=MAX_MODEL_LEN),
        scheduler_config=SimpleNamespace(max_num_seqs=1024),
        parallel_config=SimpleNamespace(tensor_parallel_size=1),
    )
    return NgramProposer(config)


def _batch(n: int) -> tuple[np.ndarray, np.ndarray]:
    """n requests; even ones repeat a pattern (n-gram match), odd ones do not."""
    tokens = np.zeros((n, MAX_MODEL_LEN), dtype=np.int32)
    lens = np.zeros(n, dtype=np.int32)
    for i in range(n):
        if i % 2 == 0:
            row = [1, 2, 3, 4, 5 + i, 1, 2, 3]
        else:
            row = list(range(100 + i, 108 + i))
        tokens[i, : len(row)] = row
        lens[i] = len(row)
    return lens, tokens


def _reference(proposer, n, valid, lens, tokens) -> list[list[int]]:
    from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens

    out: list[list[int]] = [[] for _ in range(n)]
    for i in valid:
        out[i] = _find_longest_matched_ngram_and_propose_tokens(
            tokens[i, : lens[i]], proposer.min_n, proposer.max_n, proposer.max_model_len, K
        ).tolist()
    return out


@CARRIED
def test_fixed_gather_does_no_membership_scans(switch, proposer):
    switch("P86", True)
    n = 16
    lens, tokens = _batch(n)
    valid = CountingList([0, 1, 2, 6, 9, 12])
    CountingList.contains_calls = 0
    drafts = proposer.batch_propose(n, valid, lens, tokens, K)
    assert CountingList.contains_calls == 0
    assert drafts == _reference(proposer, n, valid, lens, tokens)
    assert drafts[0] == [4, 5, 1] and drafts[1] == [] and drafts[3] == []


@CARRIED
def test_on_empty_slots_are_independent_lists(switch, proposer):
    switch("P86", True)
    n = 8
    lens, tokens = _batch(n)
    drafts = proposer.batch_propose(n, CountingList([3]), lens, tokens, K)
    assert drafts == [[]] * n
    assert len({id(d) for d in drafts}) == n


@CARRIED
def test_off_gather_scans_membership_like_upstream(switch, proposer):
    switch("P86", False)
    n = 16
    lens, tokens = _batch(n)
    valid = CountingList([0, 1, 2, 6, 9, 12])
    CountingList.contains_calls = 0
    drafts = proposer.batch_propose(n, valid, lens, tokens, K)
    assert CountingList.contains_calls == n
    assert drafts == _reference(proposer, n, valid, lens, tokens)


@CARRIED
@pytest.mark.parametrize("on", [True, False])
def test_off_and_on_agree_through_propose(switch, proposer, on):
    switch("P86", on)
    n = 10
    lens, tokens = _batch(n)
    sampled = [[7] if i not in (3, 4) else [] for i in range(n)]
    drafts = proposer.propose(K, sampled, lens, tokens)
    valid = [i for i in range(n) if sampled[i]]
    assert drafts == _reference(proposer, n, valid, lens, tokens)


# The V2 n-gram speculator of 0.34.0 under Triton's CPU interpreter, on the rows of
# _batch(6) kept by request state in an order unlike the batch's.
_V2_NGRAM = """
import vllm.platforms
vllm.platforms.vllm_version_matches_substr = lambda substr: False  # a source tree is no CPU build
import json
from types import SimpleNamespace
import torch
from vllm.v1.worker.gpu.spec_decode.ngram.speculator import NgramGPUSpeculator
K, L, N = 3, 32, 6
tokens = torch.zeros(N, L, dtype=torch.int32)
lens = torch.zeros(N, dtype=torch.int32)
for i in range(N):
    row = [1, 2, 3, 4, 5 + i, 1, 2, 3] if i % 2 == 0 else list(range(100 + i, 108 + i))
    tokens[i, : len(row)] = torch.tensor(row)
    lens[i] = len(row)
config = SimpleNamespace(
    speculative_config=SimpleNamespace(prompt_lookup_min=2, prompt_lookup_max=3, num_speculative_tokens=K),
    model_config=SimpleNamespace(max_model_len=L),
    scheduler_config=SimpleNamespace(max_num_seqs=16),
)
req_states = SimpleNamespace(all_token_ids=SimpleNamespace(gpu=tokens), total_len=SimpleNamespace(gpu=lens))
spec = NgramGPUSpeculator(config, torch.device("cpu"), req_states)
# batch order differs from request-state order
idx = torch.tensor([4, 1, 0, 5, 2, 3], dtype=torch.int64)
batch = SimpleNamespace(num_reqs=N, idx_mapping=idx)
num_sampled = torch.ones(N, dtype=torch.int32)
last = tokens.gather(1, (lens - 1).long().unsqueeze(1)).to(torch.int64)[idx]
drafts = spec.propose(batch, None, None, None, None, num_sampled, torch.zeros(N, dtype=torch.int32), last, None, None, None)
print(json.dumps(drafts.tolist()))
"""


@only_on(">=0.34", "0.34.0 serves the n-gram method with the V2 runner's NgramGPUSpeculator")
def test_upstream_ngram_drafts_come_batch_ordered_from_one_kernel_pass():
    """Pristine 0.34.0: the V1 proposer (and its gather) is gone, "ngram" maps to
    NgramGPUSpeculator, and one propose() call returns each matching request's drafts in
    its batch row (the same drafts the 0.24.0 proposer finds for those rows)."""
    import importlib.util

    from _interpreted import run_interpreted
    from _pins import REPO, TREE
    from vllm.v1.worker.gpu.spec_decode.ngram.config import NgramSpeculatorConfig

    assert importlib.util.find_spec("vllm.v1.spec_decode.ngram_proposer") is None
    assert NgramSpeculatorConfig.speculator_class.endswith(".ngram.speculator.NgramGPUSpeculator")
    drafts = run_interpreted(_V2_NGRAM, TREE, REPO / "kernels")
    # batch rows 0, 2, 4 hold requests 4, 0, 2: [1, 2, 3, 4, 5 + i, 1, 2, 3] proposes [4, 5 + i, 1]
    assert [drafts[0], drafts[2], drafts[4]] == [[4, 9, 1], [4, 5, 1], [4, 7, 1]]
