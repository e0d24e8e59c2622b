"""P72: profile_run's dummy forward is capped at GENESIS_PROFILE_RUN_CAP_M tokens.

0.24.0 carries the cap in the V1 runner (vllm/v1/worker/gpu_model_runner.py), 0.34.0 in the
V2 runner (vllm/v1/worker/gpu/model_runner.py), the only one that release has. Each test runs
the real profile_run of the tree's runner on the runner state it reads; the dummy forward is
recorded, not run.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from _pins import on


def _profile_v1(monkeypatch, max_num_tokens: int) -> list[int]:
    """0.24.0: a text-only model on a non-last pipeline rank."""
    import vllm.v1.worker.gpu_model_runner as gmr

    monkeypatch.setattr(gmr, "get_pp_group", lambda: SimpleNamespace(is_last_rank=False))
    sizes: list[int] = []

    def dummy_run(num_tokens, is_profile=False):
        assert is_profile
        sizes.append(num_tokens)
        return object(), object()

    runner = SimpleNamespace(
        supports_mm_inputs=False,
        max_num_tokens=max_num_tokens,
        _dummy_run=dummy_run,
        _sync_device=lambda: None,
        encoder_cache={},
    )
    runner._capped_profile_num_tokens = lambda: gmr.GPUModelRunner._capped_profile_num_tokens(runner)
    gmr.GPUModelRunner.profile_run(runner)
    return sizes


def _profile_v2(monkeypatch, max_num_tokens: int) -> list[int]:
    """0.34.0: the V2 runner, text-only model, non-last pipeline rank (no sampler pass)."""
    import torch

    import vllm.v1.worker.gpu.model_runner as mr

    monkeypatch.setattr(torch.accelerator, "synchronize", lambda *args: None)
    sizes: list[int] = []

    def dummy_run(num_tokens, *, skip_attn=False, is_profile=False, randomize_inputs=False):
        assert is_profile and skip_attn
        sizes.append(num_tokens)
        return None, None

    runner = SimpleNamespace(
        vllm_config=SimpleNamespace(aux_output_config=SimpleNamespace(enabled=False)),
        supports_mm_inputs=False,
        is_first_pp_rank=True,
        is_last_pp_rank=False,
        max_num_tokens=max_num_tokens,
        _dummy_run=dummy_run,
        reset_encoder_cache=lambda: None,
    )
    # Looked up when called: pristine 0.34.0 has no such method and never calls it.
    runner._capped_profile_num_tokens = lambda: mr.GPUModelRunner._capped_profile_num_tokens(runner)
    mr.GPUModelRunner.profile_run(runner)
    return sizes


def _profile(monkeypatch, max_num_tokens: int) -> list[int]:
    if on(">=0.34"):
        return _profile_v2(monkeypatch, max_num_tokens)
    return _profile_v1(monkeypatch, max_num_tokens)


def test_fixed_profile_forward_is_capped_at_4096(switch, monkeypatch):
    switch("P72", True)
    assert _profile(monkeypatch, 8192) == [4096]


def test_fixed_cap_follows_the_env_knob(switch, monkeypatch):
    switch("P72", True)
    monkeypatch.setenv("GENESIS_PROFILE_RUN_CAP_M", "2048")
    assert _profile(monkeypatch, 8192) == [2048]


@pytest.mark.parametrize(("cap", "max_tokens"), [("0", 8192), ("4096", 1024), ("4096", 4096)])
def test_on_no_cap_when_disabled_or_not_needed(switch, monkeypatch, cap, max_tokens):
    switch("P72", True)
    monkeypatch.setenv("GENESIS_PROFILE_RUN_CAP_M", cap)
    assert _profile(monkeypatch, max_tokens) == [max_tokens]


def test_fixed_bad_knob_falls_back_to_default(switch, monkeypatch):
    switch("P72", True)
    monkeypatch.setenv("GENESIS_PROFILE_RUN_CAP_M", "lots")
    assert _profile(monkeypatch, 8192) == [4096]


def test_off_profiles_the_full_token_budget(switch, monkeypatch):
    switch("P72", False)
    monkeypatch.setenv("GENESIS_PROFILE_RUN_CAP_M", "2048")
    assert _profile(monkeypatch, 8192) == [8192]
