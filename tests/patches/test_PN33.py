"""PN33: the rejection-sampler warmup uses K draft tokens per request.

Carried on 0.24.0, whose V1 _dummy_sampler_run warms the rejection sampler with one draft
per request. Retired on 0.34.0: the V2 runner's profile_run does not run the rejection
sampler at all, and its scheduler-driven warmup (vllm/v1/worker/gpu/warmup.py) verifies K
drafts for every warmup request before the workspaces are locked and, with the extensible
KV cache, before the cache is sized; ``test_upstream_*`` observes that warmup on pristine
0.34.0.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from _pins import only_on
from _vllm_sched import create_vllm_config, tiny_model_dir

V1 = only_on("<0.34", "V1 runner internals (_dummy_sampler_run); 0.34.0 has no V1 runner")
V2 = only_on(">=0.34", "the V2 runner's warmup, 0.34.0 only")

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


@V1
def test_fixed_warmup_uses_k_drafts_by_default(model_dir):
    # Default on: no environment variable set.
    num_drafts, logits_shape = _warm(model_dir, k=4, num_reqs=8)
    assert num_drafts == [4] * 8
    assert logits_shape == (8 * (4 + 1), VOCAB)


@V1
def test_fixed_warmup_respects_the_token_budget(switch, model_dir):
    switch("PN33", True)
    # 16 requests, budget 48 tokens: 3 per request, so 2 drafts + 1 bonus.
    num_drafts, logits_shape = _warm(model_dir, k=4, num_reqs=16, budget=48)
    assert num_drafts == [2] * 16
    assert logits_shape == (16 * 3, VOCAB)


@V1
def test_off_warmup_uses_one_draft_like_upstream(switch, model_dir):
    switch("PN33", False)
    num_drafts, logits_shape = _warm(model_dir, k=4, num_reqs=8)
    assert num_drafts == [1] * 8
    assert logits_shape == (8 * 2, VOCAB)


def _v2_warmup_steps(monkeypatch, model_dir, k: int, max_num_seqs: int, budget: int):
    """Run 0.34.0's warmup_kernels (what the worker runs before CUDA graph capture and
    before it commits the extensible KV cache) on the runner state it reads; return the
    scheduler outputs it hands the worker, in order."""
    from vllm.v1.worker.gpu.warmup import warmup_kernels

    monkeypatch.setattr(torch.accelerator, "synchronize", lambda *args: None)
    config = create_vllm_config(
        model_dir,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=budget,
        num_speculative_tokens=k,
        draft_model_dir=model_dir,
    )
    runner = SimpleNamespace(
        vllm_config=config,
        model_config=config.model_config,
        scheduler_config=config.scheduler_config,
        speculative_config=config.speculative_config,
        max_num_tokens=config.scheduler_config.max_num_batched_tokens,
        max_model_len=config.model_config.max_model_len,
        num_speculative_steps=k,
        decode_query_len=k + 1,
        kv_cache_config=SimpleNamespace(kv_cache_groups=[]),
        model_state=SimpleNamespace(),
        is_encoder_decoder=False,
        is_pooling_model=False,
        is_last_pp_rank=True,
        kv_block_zeroer=None,
        kv_connector=SimpleNamespace(set_disabled=lambda disabled: None),
        adaptive_verification=None,
        rejection_sampler=None,
        speculator=None,
    )
    steps = []
    warmup_kernels(runner, steps.append, lambda grammar_output: None)
    return steps


@V2
def test_upstream_warmup_verifies_k_drafts_for_every_request(model_dir, monkeypatch):
    k, num_reqs = 4, 8
    steps = _v2_warmup_steps(monkeypatch, model_dir, k=k, max_num_seqs=num_reqs, budget=256)
    verify = [s for s in steps if len(s.scheduled_spec_decode_tokens) == num_reqs]
    # Sampled and greedy passes: each has one decode step where all requests verify K drafts.
    assert len(verify) == 2
    for step in verify:
        assert all(drafts == [0] * k for drafts in step.scheduled_spec_decode_tokens.values())
        assert set(step.num_scheduled_tokens.values()) == {k + 1}
        assert step.total_num_scheduled_tokens == num_reqs * (k + 1)


@V2
def test_upstream_warmup_stays_within_the_token_budget(model_dir, monkeypatch):
    # 16 seqs, 48 tokens: the prompt is K + 2 tokens plus the draft slot per request,
    # so warmup runs 48 // (4 + 2 + 1) = 6 requests, each still verifying K drafts.
    k = 4
    steps = _v2_warmup_steps(monkeypatch, model_dir, k=k, max_num_seqs=16, budget=48)
    widest = max(steps, key=lambda s: len(s.scheduled_spec_decode_tokens))
    assert len(widest.scheduled_spec_decode_tokens) == 6
    assert all(drafts == [0] * k for drafts in widest.scheduled_spec_decode_tokens.values())
    assert max(s.total_num_scheduled_tokens for s in steps) <= 48
