"""PN35: text-only models get no inputs_embeds buffers (runner and draft proposer)."""

from __future__ import annotations

import pytest
import torch

from _vllm_sched import allow_cpu_runner, create_vllm_config, tiny_model_dir

MAX_TOKENS = 64  # max_num_batched_tokens: the buffers' first dimension
HIDDEN = 16  # the tiny model's hidden size


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("pn35"))


def _runner(model_dir, monkeypatch, **kwargs):
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    allow_cpu_runner(monkeypatch)
    config = create_vllm_config(model_dir, max_num_batched_tokens=MAX_TOKENS, **kwargs)
    return GPUModelRunner(config, torch.device("cpu"))


def _proposer(model_dir, monkeypatch):
    from vllm.v1.spec_decode.draft_model import DraftModelProposer

    allow_cpu_runner(monkeypatch)
    config = create_vllm_config(
        model_dir, max_num_batched_tokens=MAX_TOKENS, num_speculative_tokens=2, draft_model_dir=model_dir
    )
    return DraftModelProposer(config, torch.device("cpu"))


def test_fixed_text_only_runner_has_no_inputs_embeds_by_default(model_dir, monkeypatch):
    # Default on: no environment variable at all.
    runner = _runner(model_dir, monkeypatch)
    assert not runner.supports_mm_inputs and not runner.enable_prompt_embeds
    assert runner.inputs_embeds is None


def test_fixed_text_only_proposer_has_no_inputs_embeds(switch, model_dir, monkeypatch):
    switch("PN35", True)
    proposer = _proposer(model_dir, monkeypatch)
    assert not proposer.supports_mm_inputs
    assert proposer.inputs_embeds is None


def test_on_prompt_embeds_keep_the_buffer(switch, model_dir, monkeypatch):
    switch("PN35", True)
    runner = _runner(model_dir, monkeypatch, enable_prompt_embeds=True)
    assert runner.inputs_embeds is not None
    assert tuple(runner.inputs_embeds.gpu.shape) == (MAX_TOKENS, HIDDEN)


def test_off_runner_allocates_like_upstream(switch, model_dir, monkeypatch):
    switch("PN35", False)
    runner = _runner(model_dir, monkeypatch)
    assert tuple(runner.inputs_embeds.gpu.shape) == (MAX_TOKENS, HIDDEN)
    assert tuple(runner.inputs_embeds.cpu.shape) == (MAX_TOKENS, HIDDEN)


def test_off_disable_spelling_restores_the_buffers(model_dir, monkeypatch):
    monkeypatch.setenv("GENESIS_DISABLE_PN35_INPUTS_EMBEDS_OPTIONAL", "1")
    runner = _runner(model_dir, monkeypatch)
    assert tuple(runner.inputs_embeds.gpu.shape) == (MAX_TOKENS, HIDDEN)
    proposer = _proposer(model_dir, monkeypatch)
    assert tuple(proposer.inputs_embeds.shape) == (MAX_TOKENS, HIDDEN)
