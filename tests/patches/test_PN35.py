"""PN35: text-only models get no inputs_embeds buffers (runner and draft proposer).

Carried on 0.24.0, whose V1 runner and proposer allocate the buffers unconditionally.
Retired on 0.34.0: the V2 runner allocates them only where a reader exists (the model
state for prompt embeds, the encoder runner for multimodal models, the speculators for
multimodal drafters); the ``test_upstream_*`` tests observe that on pristine 0.34.0.
"""

from __future__ import annotations

import pytest
import torch

from _pins import only_on
from _vllm_sched import allow_cpu_runner, create_vllm_config, tiny_model_dir

V1 = only_on("<0.34", "V1 runner and proposer internals; 0.34.0 has neither")
V2 = only_on(">=0.34", "the V2 runner's model state, 0.34.0 only")

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


@V1
def test_fixed_text_only_runner_has_no_inputs_embeds_by_default(model_dir, monkeypatch):
    # Default on: no environment variable at all.
    runner = _runner(model_dir, monkeypatch)
    assert not runner.supports_mm_inputs and not runner.enable_prompt_embeds
    assert runner.inputs_embeds is None


@V1
def test_fixed_text_only_proposer_has_no_inputs_embeds(switch, model_dir, monkeypatch):
    switch("PN35", True)
    proposer = _proposer(model_dir, monkeypatch)
    assert not proposer.supports_mm_inputs
    assert proposer.inputs_embeds is None


@V1
def test_on_prompt_embeds_keep_the_buffer(switch, model_dir, monkeypatch):
    switch("PN35", True)
    runner = _runner(model_dir, monkeypatch, enable_prompt_embeds=True)
    assert runner.inputs_embeds is not None
    assert tuple(runner.inputs_embeds.gpu.shape) == (MAX_TOKENS, HIDDEN)


@V1
def test_off_runner_allocates_like_upstream(switch, model_dir, monkeypatch):
    switch("PN35", False)
    runner = _runner(model_dir, monkeypatch)
    assert tuple(runner.inputs_embeds.gpu.shape) == (MAX_TOKENS, HIDDEN)
    assert tuple(runner.inputs_embeds.cpu.shape) == (MAX_TOKENS, HIDDEN)


@V1
def test_off_disable_spelling_restores_the_buffers(model_dir, monkeypatch):
    monkeypatch.setenv("GENESIS_DISABLE_PN35_INPUTS_EMBEDS_OPTIONAL", "1")
    runner = _runner(model_dir, monkeypatch)
    assert tuple(runner.inputs_embeds.gpu.shape) == (MAX_TOKENS, HIDDEN)
    proposer = _proposer(model_dir, monkeypatch)
    assert tuple(proposer.inputs_embeds.shape) == (MAX_TOKENS, HIDDEN)


def _model_state(model_dir, monkeypatch, **kwargs):
    """The V2 runner's model state, built as GPUModelRunner.load_model builds it
    (init_model_state), on the CPU: host buffers unpinned, no UVA."""
    import vllm.v1.worker.gpu.buffer_utils as buffer_utils
    from vllm.platforms import current_platform
    from vllm.v1.worker.gpu.model_states import init_model_state

    monkeypatch.setattr(buffer_utils, "is_uva_available", lambda: False)
    monkeypatch.setattr(buffer_utils, "is_pin_memory_available", lambda: False)
    monkeypatch.setattr(current_platform, "device_type", "cpu", raising=False)
    config = create_vllm_config(model_dir, max_num_batched_tokens=MAX_TOKENS, **kwargs)
    return init_model_state(config, torch.nn.Linear(HIDDEN, HIDDEN), None, torch.device("cpu"))


@V2
def test_upstream_text_only_model_state_allocates_no_inputs_embeds(model_dir, monkeypatch):
    # Default switches: PN35 is not carried on 0.34.0, and nothing turns it off here.
    state = _model_state(model_dir, monkeypatch)
    assert type(state).__name__ == "DefaultModelState"
    assert not state.supports_mm_inputs
    assert getattr(state, "inputs_embeds", None) is None
    assert not [name for name, value in vars(state).items() if isinstance(value, torch.Tensor)]


@V2
def test_upstream_prompt_embeds_allocate_the_buffer(model_dir, monkeypatch):
    state = _model_state(model_dir, monkeypatch, enable_prompt_embeds=True)
    assert tuple(state.inputs_embeds.shape) == (MAX_TOKENS, HIDDEN)
