"""P66: piecewise cudagraph capture sizes keep only multiples of num_speculative_tokens + 1.

Real CompilationConfig objects go through resolve_cudagraph_mode_and_sizes, the call the
GPU model runner makes once it knows the attention backends.
"""

from __future__ import annotations

import pytest

SIZES = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48]


def _config(mode, sizes=SIZES):
    from vllm.config.compilation import CompilationConfig

    return CompilationConfig(
        cudagraph_mode=mode,
        cudagraph_capture_sizes=list(sizes),
        max_cudagraph_capture_size=max(sizes),
        # piecewise graphs split at attention, as set up for VLLM_COMPILE
        splitting_ops=list(CompilationConfig._attention_ops),
    )


def _resolve(cfg, query_len, support="UNIFORM_BATCH"):
    from vllm.v1.attention.backend import AttentionCGSupport

    return cfg.resolve_cudagraph_mode_and_sizes(
        getattr(AttentionCGSupport, support), "TEST_BACKEND", uniform_decode_query_len=query_len
    )


def test_fixed_piecewise_keeps_multiples_of_query_len(switch):
    switch("P66", True)
    cfg = _config("PIECEWISE")
    assert str(_resolve(cfg, 4)) == str(cfg.cudagraph_mode)
    assert cfg.cudagraph_capture_sizes == [4, 8, 12, 16, 24, 32, 40, 48]
    cfg = _config("PIECEWISE")
    _resolve(cfg, 6)
    assert cfg.cudagraph_capture_sizes == [12, 24, 48]
    assert cfg.max_cudagraph_capture_size == 48


def test_fixed_downgraded_full_decode_is_filtered(switch):
    switch("P66", True)
    # a backend without uniform-batch support turns FULL_AND_PIECEWISE into PIECEWISE
    cfg = _config("FULL_AND_PIECEWISE", [1, 2, 4, 8, 12, 16, 20])
    mode = _resolve(cfg, 3, support="UNIFORM_SINGLE_TOKEN_DECODE")
    assert mode.name == "PIECEWISE"
    assert cfg.cudagraph_capture_sizes == [12]
    assert cfg.max_cudagraph_capture_size == 12


def test_on_full_decode_keeps_upstream_rounding(switch):
    switch("P66", True)
    cfg = _config("FULL_AND_PIECEWISE", [1, 2, 4, 8, 12, 16, 20])
    _resolve(cfg, 3)
    assert cfg.cudagraph_capture_sizes == [3, 6, 9, 12, 18]  # rounded up, as upstream


def test_on_no_divisible_size_leaves_list(switch):
    switch("P66", True)
    cfg = _config("PIECEWISE", [1, 2, 4, 8])
    _resolve(cfg, 3)
    assert cfg.cudagraph_capture_sizes == [1, 2, 4, 8]


@pytest.mark.parametrize("query_len", [1, 4, 6])
def test_off_piecewise_sizes_untouched_as_upstream(switch, query_len):
    switch("P66", False)
    cfg = _config("PIECEWISE")
    _resolve(cfg, query_len)
    assert cfg.cudagraph_capture_sizes == SIZES
    assert cfg.max_cudagraph_capture_size == 48
