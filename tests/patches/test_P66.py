"""P66: piecewise cudagraph capture sizes keep only multiples of num_speculative_tokens + 1.

On 0.24.0, real CompilationConfig objects go through resolve_cudagraph_mode_and_sizes, the
call the GPU model runner makes once it knows the attention backends. 0.34.0 builds the
sizes in VllmConfig._set_cudagraph_sizes and splits them into token-keyed (prefill) sizes
and decode request counts; with PIECEWISE every batch takes the token-keyed graphs, so the
re-authored patch filters those. Its tests build a real VllmConfig (a tiny OPT config, no
weights) and run _set_cudagraph_sizes again with the mode under test.
"""

from __future__ import annotations

import pytest

from _pins import only_on

CARRIED_024 = only_on("<0.34", "the 0.24.0 form of P66 (resolve_cudagraph_mode_and_sizes)")
ON_034 = only_on(">=0.34", "the 0.34.0 form of P66 (VllmConfig._split_cudagraph_capture_sizes)")

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


@CARRIED_024
def test_fixed_piecewise_keeps_multiples_of_query_len(switch):
    switch("P66", True)
    cfg = _config("PIECEWISE")
    assert str(_resolve(cfg, 4)) == str(cfg.cudagraph_mode)
    assert cfg.cudagraph_capture_sizes == [4, 8, 12, 16, 24, 32, 40, 48]
    cfg = _config("PIECEWISE")
    _resolve(cfg, 6)
    assert cfg.cudagraph_capture_sizes == [12, 24, 48]
    assert cfg.max_cudagraph_capture_size == 48


@CARRIED_024
def test_fixed_downgraded_full_decode_is_filtered(switch):
    switch("P66", True)
    # a backend without uniform-batch support turns FULL_AND_PIECEWISE into PIECEWISE
    cfg = _config("FULL_AND_PIECEWISE", [1, 2, 4, 8, 12, 16, 20])
    mode = _resolve(cfg, 3, support="UNIFORM_SINGLE_TOKEN_DECODE")
    assert mode.name == "PIECEWISE"
    assert cfg.cudagraph_capture_sizes == [12]
    assert cfg.max_cudagraph_capture_size == 12


@CARRIED_024
def test_on_full_decode_keeps_upstream_rounding(switch):
    switch("P66", True)
    cfg = _config("FULL_AND_PIECEWISE", [1, 2, 4, 8, 12, 16, 20])
    _resolve(cfg, 3)
    assert cfg.cudagraph_capture_sizes == [3, 6, 9, 12, 18]  # rounded up, as upstream


@CARRIED_024
def test_on_no_divisible_size_leaves_list(switch):
    switch("P66", True)
    cfg = _config("PIECEWISE", [1, 2, 4, 8])
    _resolve(cfg, 3)
    assert cfg.cudagraph_capture_sizes == [1, 2, 4, 8]


@CARRIED_024
@pytest.mark.parametrize("query_len", [1, 4, 6])
def test_off_piecewise_sizes_untouched_as_upstream(switch, query_len):
    switch("P66", False)
    cfg = _config("PIECEWISE")
    _resolve(cfg, query_len)
    assert cfg.cudagraph_capture_sizes == SIZES
    assert cfg.max_cudagraph_capture_size == 48


K = 2  # query length 3: most of the default token grid is not a multiple of it


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from _vllm_sched import tiny_model_dir

    return tiny_model_dir(tmp_path_factory.mktemp("p66"))


def _sizes(model_dir, mode, num_speculative_tokens=K):
    """The capture sizes 0.34.0 resolves for ``mode`` (max_num_seqs 16, 256 tokens)."""
    from vllm.config.compilation import CUDAGraphMode

    from _vllm_sched import create_vllm_config

    cfg = create_vllm_config(
        model_dir, num_speculative_tokens=num_speculative_tokens, max_num_seqs=16, max_num_batched_tokens=256
    )
    cc = cfg.compilation_config
    for name in (
        "cudagraph_capture_sizes",
        "max_cudagraph_capture_size",
        "prefill_cudagraph_capture_token_sizes",
        "max_prefill_cudagraph_capture_tokens",
        "decode_cudagraph_capture_request_sizes",
        "max_decode_cudagraph_capture_requests",
    ):
        setattr(cc, name, None)
    cc.cudagraph_mode = getattr(CUDAGraphMode, mode)
    cfg.model_config.enforce_eager = False
    cfg._set_cudagraph_sizes()
    return cc


@ON_034
def test_fixed_piecewise_prefill_sizes_keep_multiples_of_query_len(switch, model_dir):
    switch("P66", True)
    cc = _sizes(model_dir, "PIECEWISE")
    q = K + 1
    assert cc.prefill_cudagraph_capture_token_sizes
    assert all(size % q == 0 for size in cc.prefill_cudagraph_capture_token_sizes)
    # every uniform decode batch (n requests of q tokens, n up to max_num_seqs) keeps its graph
    assert {n * q for n in (1, 2, 4, 8, 16)} <= set(cc.prefill_cudagraph_capture_token_sizes)
    # the record the attention backends size their buffers by is the filtered one
    assert all(size % q == 0 for size in cc.cudagraph_capture_sizes)
    assert cc.max_cudagraph_capture_size == max(cc.cudagraph_capture_sizes)
    assert cc.max_prefill_cudagraph_capture_tokens == max(cc.prefill_cudagraph_capture_token_sizes)


@ON_034
def test_off_piecewise_captures_the_whole_token_grid_as_upstream(switch, model_dir):
    switch("P66", False)
    cc = _sizes(model_dir, "PIECEWISE")
    sizes = cc.prefill_cudagraph_capture_token_sizes
    assert {1, 2, 4, 8, 16} <= set(sizes)
    assert sum(size % (K + 1) != 0 for size in sizes) > len(sizes) // 2


@ON_034
def test_on_full_decode_graphs_leave_the_sizes_as_upstream(switch, model_dir):
    """With a decode routine of its own, the token-keyed graphs serve mixed batches only."""
    switch("P66", False)
    off = _sizes(model_dir, "FULL_AND_PIECEWISE")
    switch("P66", True)
    on = _sizes(model_dir, "FULL_AND_PIECEWISE")
    assert on.prefill_cudagraph_capture_token_sizes == off.prefill_cudagraph_capture_token_sizes
    assert on.cudagraph_capture_sizes == off.cudagraph_capture_sizes


@ON_034
def test_on_no_speculation_leaves_the_sizes(switch, model_dir):
    switch("P66", False)
    off = _sizes(model_dir, "PIECEWISE", num_speculative_tokens=None)
    switch("P66", True)
    on = _sizes(model_dir, "PIECEWISE", num_speculative_tokens=None)
    assert on.prefill_cudagraph_capture_token_sizes == off.prefill_cudagraph_capture_token_sizes
