"""PN33: the rejection-sampler warmup uses K draft tokens per request."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from _vllm_sched import create_vllm_config, tiny_model_dir

VOCAB = 128
HIDDEN = 16


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("pn33"))


class _Recorder:
    """Stands in for the rejection sampler (a Triton kernel) and records its inputs."""

    def __init__(self):
        self.calls = []

    def __call__(self, metadata, draft_probs, logits, sampling_metadata):
        self.calls.append((list(metadata.num_draft_tokens), tuple(logits.shape)))


def _warm(model_dir, k: int, num_reqs: int, budget: int = 256):
    """Run the real GPUModelRunner._dummy_sampler_run on the runner state it reads:
    the real configs and Sampler, a linear head for compute_logits, and a recorder
    for the rejection sampler."""
    from vllm.v1.sample.sampler import Sampler
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    config = create_vllm_config(
        model_dir,
        max_num_seqs=max(num_reqs, 2),
        max_num_batched_tokens=budget,
        num_speculative_tokens=k,
        draft_model_dir=model_dir,
    )
    head = torch.nn.Linear(HIDDEN, VOCAB)
    recorder = _Recorder()
    runner = SimpleNamespace(
        vllm_config=config,
        speculative_config=config.speculative_config,
        max_num_tokens=config.scheduler_config.max_num_batched_tokens,
        device=torch.device("cpu"),
        model=SimpleNamespace(compute_logits=lambda h: head(h.float())),
        sampler=Sampler(),
        rejection_sampler=recorder,
    )
    GPUModelRunner._dummy_sampler_run(runner, torch.zeros(num_reqs, HIDDEN))
    assert len(recorder.calls) == 1
    return recorder.calls[0]


def test_fixed_warmup_uses_k_drafts_by_default(model_dir):
    # Default on: no environment variable set.
    num_drafts, logits_shape = _warm(model_dir, k=4, num_reqs=8)
    assert num_drafts == [4] * 8
    assert logits_shape == (8 * (4 + 1), VOCAB)


def test_fixed_warmup_respects_the_token_budget(switch, model_dir):
    switch("PN33", True)
    # 16 requests, budget 48 tokens: 3 per request, so 2 drafts + 1 bonus.
    num_drafts, logits_shape = _warm(model_dir, k=4, num_reqs=16, budget=48)
    assert num_drafts == [2] * 16
    assert logits_shape == (16 * 3, VOCAB)


def test_off_warmup_uses_one_draft_like_upstream(switch, model_dir):
    switch("PN33", False)
    num_drafts, logits_shape = _warm(model_dir, k=4, num_reqs=8)
    assert num_drafts == [1] * 8
    assert logits_shape == (8 * 2, VOCAB)
