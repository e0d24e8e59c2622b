"""P72: profile_run's dummy forward is capped at GENESIS_PROFILE_RUN_CAP_M tokens."""

from __future__ import annotations

from types import SimpleNamespace

import pytest


def _profile(monkeypatch, max_num_tokens: int) -> list[int]:
    """Run the real GPUModelRunner.profile_run on the runner state it reads, for a
    text-only model on a non-last pipeline rank; return the dummy forward sizes."""
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
