"""P86: NgramProposer.batch_propose gathers drafts by index, not by list membership."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

K = 3
MAX_MODEL_LEN = 32


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


def test_on_empty_slots_are_independent_lists(switch, proposer):
    switch("P86", True)
    n = 8
    lens, tokens = _batch(n)
    drafts = proposer.batch_propose(n, CountingList([3]), lens, tokens, K)
    assert drafts == [[]] * n
    assert len({id(d) for d in drafts}) == n


def test_off_gather_scans_membership_like_upstream(switch, proposer):
    switch("P86", False)
    n = 16
    lens, tokens = _batch(n)
    valid = CountingList([0, 1, 2, 6, 9, 12])
    CountingList.contains_calls = 0
    drafts = proposer.batch_propose(n, valid, lens, tokens, K)
    assert CountingList.contains_calls == n
    assert drafts == _reference(proposer, n, valid, lens, tokens)


@pytest.mark.parametrize("on", [True, False])
def test_off_and_on_agree_through_propose(switch, proposer, on):
    switch("P86", on)
    n = 10
    lens, tokens = _batch(n)
    sampled = [[7] if i not in (3, 4) else [] for i in range(n)]
    drafts = proposer.propose(K, sampled, lens, tokens)
    valid = [i for i in range(n) if sampled[i]]
    assert drafts == _reference(proposer, n, valid, lens, tokens)
