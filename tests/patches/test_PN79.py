"""PN79: in-place SSM state for the GDN chunked prefill.

The FLA chunk kernels do not run under the CPU Triton interpreter (block pointers
on 0.24.0; on 0.34.0 an ``.to()`` on a loop index), so the numerics of the in-place kernel are checked by the GPU test
only. On CPU the tests drive the real code around the kernels:

* QwenGatedDeltaNetAttention._forward_core (the switch's decision point) with the
  convolution and post-conv kernels stood in for by identity/reshape functions and
  the chunk op by a recorder;
* chunk_gated_delta_rule / chunk_gated_delta_rule_fwd_h with the kernel launch
  replaced by a recorder, to check what reaches the kernel.
"""

from __future__ import annotations

import importlib
import types

import pytest
import torch
from _pins import on

H, K, V = 2, 16, 16
LENS = (3, 5)
# 0.34.0 moved the FLA ops to vllm/third_party/.
FLA_OPS = (
    "vllm.third_party.flash_linear_attention.ops"
    if on(">=0.34")
    else "vllm.model_executor.layers.fla.ops"
)


def _layer_and_meta(monkeypatch, backend="triton"):
    import vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn as qgdn
    from vllm.v1.attention.backends.gdn_attn import GDNAttentionMetadata

    T = sum(LENS)
    calls = []
    torch.manual_seed(0)
    ssm_state = torch.randn(8, H, V, K)
    conv_state = torch.zeros(8, 3 * H * K, 3)

    def chunk_op(**kw):
        calls.append(kw)
        o = torch.zeros(1, T, H, V)
        if "initial_state_indices" in kw:
            return o, kw["initial_state"]
        return o, torch.full((len(LENS), H, V, K), 7.0)

    def post_conv(conv_output, a, b, **_):
        n = conv_output.shape[0]
        q, k, v = conv_output.split([H * K, H * K, H * V], dim=-1)
        return (
            q.reshape(n, H, K),
            k.reshape(n, H, K),
            v.reshape(n, H, V),
            torch.zeros(n, H),
            torch.ones(n, H),
        )

    layer = types.SimpleNamespace(
        enable_packed_recurrent_decode=False,
        prefix="layers.0.linear_attn",
        kv_cache=(conv_state, ssm_state),
        conv1d=types.SimpleNamespace(weight=torch.zeros(3 * H * K, 1, 4), bias=None),
        activation="silu",
        A_log=torch.zeros(H),
        dt_bias=torch.zeros(H),
        num_k_heads=H,
        tp_size=1,
        head_k_dim=K,
        head_v_dim=V,
        key_dim=H * K,
        value_dim=H * V,
        chunk_gated_delta_rule=chunk_op,
        gdn_prefill_backend=backend,
    )
    layer.rearrange_mixed_qkv = types.MethodType(
        qgdn.QwenGatedDeltaNetAttention.rearrange_mixed_qkv, layer
    )
    qsl = torch.tensor([0, LENS[0], T], dtype=torch.int32)
    meta = GDNAttentionMetadata(
        num_prefills=2,
        num_prefill_tokens=T,
        num_decodes=0,
        num_decode_tokens=0,
        num_spec_decodes=0,
        num_spec_decode_tokens=0,
        num_actual_tokens=T,
        has_initial_state=torch.tensor([True, False]),
        non_spec_query_start_loc=qsl,
        non_spec_state_indices_tensor=torch.tensor([5, 2], dtype=torch.int32),
        prefill_query_start_loc=qsl,
        prefill_state_indices=torch.tensor([5, 2], dtype=torch.int32),
        prefill_has_initial_state=torch.tensor([True, False]),
    )
    ctx = types.SimpleNamespace(attn_metadata={layer.prefix: meta})
    monkeypatch.setattr(qgdn, "get_forward_context", lambda: ctx)
    monkeypatch.setattr(qgdn, "is_conv_state_dim_first", lambda: True)
    monkeypatch.setattr(qgdn, "causal_conv1d_fn", lambda x, *a, **k: x)
    monkeypatch.setattr(qgdn, "fused_post_conv_prep", post_conv)
    if on(">=0.34"):
        # 0.34.0 gathers and scatters the states with CUDA-only Triton kernels:
        # stand in for them with the indexing they replace.
        def gather(state, indices, has_initial_state):
            init = state[indices.long()].clone()
            init[~has_initial_state] = 0
            return init

        def scatter(state, src, indices):
            state[indices.long()] = src.to(state.dtype)

        monkeypatch.setattr(qgdn, "gather_initial_states", gather)
        monkeypatch.setattr(qgdn, "scatter_states", scatter)

    def run():
        out = torch.empty(T, H, V)
        qgdn.QwenGatedDeltaNetAttention._forward_core(
            layer,
            mixed_qkv=torch.randn(T, 3 * H * K),
            b=torch.zeros(T, H),
            a=torch.zeros(T, H),
            core_attn_out=out,
        )

    return run, calls, ssm_state


def test_fixed_chunk_prefill_reads_and_writes_cache_slots(switch, monkeypatch):
    switch("PN79", True)
    run, calls, ssm_state = _layer_and_meta(monkeypatch)
    before = ssm_state.clone()
    run()
    (kw,) = calls
    # The cache itself goes to the kernel, with the slots and the init mask.
    assert kw["initial_state"] is ssm_state
    assert kw["initial_state_indices"].tolist() == [5, 2]
    assert kw["has_initial_state"].tolist() == [True, False]
    # No Python-side gather/zero/scatter touched the cache.
    assert torch.equal(ssm_state, before)


def test_on_other_backends_keep_the_copy_path(switch, monkeypatch):
    switch("PN79", True)
    run, calls, ssm_state = _layer_and_meta(monkeypatch, backend="cutedsl")
    before = ssm_state.clone()
    run()
    (kw,) = calls
    assert "initial_state_indices" not in kw
    assert kw["initial_state"] is not ssm_state
    # the final states are still scattered back
    assert not torch.equal(ssm_state, before)


def test_off_gathers_and_scatters_as_upstream(switch, monkeypatch):
    switch("PN79", False)
    run, calls, ssm_state = _layer_and_meta(monkeypatch)
    slot5 = ssm_state[5].clone()
    run()
    (kw,) = calls
    assert "initial_state_indices" not in kw
    init = kw["initial_state"]
    assert init.shape == (2, H, V, K)
    assert torch.equal(init[0], slot5)
    assert torch.equal(init[1], torch.zeros(H, V, K))
    # final states scattered back into slots 5 and 2
    assert torch.equal(ssm_state[5], torch.full((H, V, K), 7.0))
    assert torch.equal(ssm_state[2], torch.full((H, V, K), 7.0))


def test_fixed_chunk_op_passes_strided_cache_without_copy(monkeypatch):
    chunk_mod = importlib.import_module(f"{FLA_OPS}.chunk")

    seen = {}

    def fwd(**kw):
        seen.update(kw)
        return None, kw["q"], None, kw["initial_state"], None, None, None

    monkeypatch.setattr(chunk_mod, "chunk_gated_delta_rule_fwd", fwd)
    T = sum(LENS)
    # A cache view with padded slots, as in the hybrid KV-cache layout.
    raw = torch.zeros(8, H * V * K + 64)
    cache = raw[:, : H * V * K].view(8, H, V, K)
    assert not cache.is_contiguous()
    q = torch.randn(1, T, H, K, dtype=torch.bfloat16)
    o, final = chunk_mod.chunk_gated_delta_rule(
        q, q.clone(), torch.randn(1, T, H, V, dtype=torch.bfloat16),
        torch.zeros(1, T, H), torch.ones(1, T, H, dtype=torch.bfloat16),
        initial_state=cache, output_final_state=True,
        cu_seqlens=torch.tensor([0, LENS[0], T], dtype=torch.int32),
        initial_state_indices=torch.tensor([5, 2], dtype=torch.int32),
        has_initial_state=torch.tensor([True, False]),
    )
    assert seen["initial_state"] is cache
    assert final is cache
    assert seen["initial_state_indices"].tolist() == [5, 2]


def test_fixed_fwd_h_launches_in_place_on_slots(monkeypatch):
    dh = importlib.import_module(f"{FLA_OPS}.chunk_delta_h")

    launches = []

    class Recorder:
        def __getitem__(self, grid):
            def launch(**kw):
                launches.append((grid, kw))
            return launch

    monkeypatch.setattr(dh, "_chunk_fwd_kernel_h_inplace", Recorder())
    T = sum(LENS)
    raw = torch.zeros(8, H * V * K + 64)
    cache = raw[:, : H * V * K].view(8, H, V, K)
    k = torch.randn(1, T, H, K)
    h, v_new, final = dh.chunk_gated_delta_rule_fwd_h(
        k=k, w=torch.randn(1, T, H, K), u=torch.randn(1, T, H, V),
        g=torch.zeros(1, T, H), initial_state=cache, output_final_state=True,
        cu_seqlens=torch.tensor([0, LENS[0], T], dtype=torch.int32),
        initial_state_indices=torch.tensor([5, 2], dtype=torch.int32),
        has_initial_state=torch.tensor([True, False]),
        # one 64-token chunk per sequence (0.34.0 would build these on the GPU)
        chunk_indices=torch.tensor([[0, 0], [1, 0]], dtype=torch.int32),
        chunk_offsets=torch.tensor([0, 1, 2], dtype=torch.int32),
    )
    ((grid, kw),) = launches
    assert grid == (1, 2 * H)  # cdiv(V, 32) value blocks x (sequences x heads)
    assert kw["h0"] is cache and kw["ht"] is cache and final is cache
    assert kw["stride_state_n"] == H * V * K + 64
    assert kw["state_indices"].tolist() == [5, 2]
    assert kw["has_initial_state"].tolist() == [True, False]


@pytest.mark.gpu
def test_fixed_in_place_matches_gather_scatter_on_gpu(switch):
    """Numerics of the in-place chunk kernel against the copy path (CUDA only)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    chunk_gated_delta_rule = importlib.import_module(f"{FLA_OPS}.chunk").chunk_gated_delta_rule

    torch.manual_seed(0)
    dev = "cuda"
    Hh, Kk, Vv = 4, 128, 128
    lens = [70, 5, 200]
    T = sum(lens)
    cu = torch.tensor([0, 70, 75, 275], dtype=torch.int32, device=dev)
    q = torch.randn(1, T, Hh, Kk, dtype=torch.bfloat16, device=dev)
    k = torch.nn.functional.normalize(
        torch.randn(1, T, Hh, Kk, device=dev), dim=-1
    ).to(torch.bfloat16)
    v = torch.randn(1, T, Hh, Vv, dtype=torch.bfloat16, device=dev)
    g = torch.nn.functional.logsigmoid(torch.randn(1, T, Hh, device=dev))
    beta = torch.rand(1, T, Hh, device=dev).sigmoid().to(torch.bfloat16)
    raw = torch.randn(10, Hh * Vv * Kk + 256, device=dev)
    cache = raw[:, : Hh * Vv * Kk].view(10, Hh, Vv, Kk)
    slots = torch.tensor([7, 1, 4], dtype=torch.int32, device=dev)
    has_init = torch.tensor([True, False, True], device=dev)

    ref_cache = cache.clone()
    init = ref_cache[slots.long()].clone()
    init[~has_init] = 0
    o_ref, ht_ref = chunk_gated_delta_rule(
        q, k, v, g, beta, initial_state=init, output_final_state=True, cu_seqlens=cu
    )
    ref_cache[slots.long()] = ht_ref.to(ref_cache.dtype)

    o, _ = chunk_gated_delta_rule(
        q, k, v, g, beta, initial_state=cache, output_final_state=True,
        cu_seqlens=cu, initial_state_indices=slots, has_initial_state=has_init,
    )
    torch.testing.assert_close(o, o_ref, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(cache, ref_cache, atol=1e-3, rtol=1e-3)
