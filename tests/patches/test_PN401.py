"""PN401: TurboQuant prefill only takes the all-first-chunk fast path when it may.

Runs TurboQuantAttentionImpl.forward on CPU: the TurboQuant store and decode
kernels run under the Triton interpreter (TRITON_INTERPRET=1, no visible CUDA
device, set in a fresh interpreter because vLLM decides at import time whether
Triton is usable). flash-attn does not exist on CPU, so the backend's varlen
flash-attention entry point is stood in for by a plain causal SDPA reference.
"""

from __future__ import annotations

import os
from pathlib import Path
from _interpreted import TQ_IMPORTS, run_interpreted
from _tq_routing import SETUP

REPO = Path(__file__).resolve().parents[2]
TREE = Path(os.environ.get("GQUEUE_VLLM_TREE") or REPO / "work").resolve()

SCRIPT = SETUP + r"""
import json
import torch
import vllm.v1.attention.backends.turboquant_attn as tqa
from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
from vllm.v1.attention.backends.turboquant_attn import (
    TurboQuantAttentionBackend, TurboQuantAttentionImpl, TurboQuantMetadata)

calls = []

def varlen_ref(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
               softmax_scale, causal, **_):
    calls.append(cu_seqlens_q.shape[0] - 1)
    out = torch.empty_like(q)
    for i in range(cu_seqlens_q.shape[0] - 1):
        qs, qe = int(cu_seqlens_q[i]), int(cu_seqlens_q[i + 1])
        ks, ke = int(cu_seqlens_k[i]), int(cu_seqlens_k[i + 1])
        qi, ki, vi = (t.transpose(0, 1).float() for t in (q[qs:qe], k[ks:ke], v[ks:ke]))
        mask = (torch.arange(ke - ks)[None, :]
                <= torch.arange(qe - qs)[:, None] + ((ke - ks) - (qe - qs)))
        o = torch.nn.functional.scaled_dot_product_attention(
            qi, ki, vi, attn_mask=mask, scale=softmax_scale,
            enable_gqa=ki.shape[0] != qi.shape[0])
        out[qs:qe] = o.transpose(0, 1).to(q.dtype)
    return out

tqa._HAS_FLASH_ATTN = True
tqa.flash_attn_varlen_func = varlen_ref

Hq, Hk, D, bs = 2, 1, 16, 16
impl = tq_impl(VllmConfig(device_config=DeviceConfig(device="cpu")), num_heads=Hq, head_size=D,
               scale=D ** -0.5, num_kv_heads=Hk, kv_cache_dtype="turboquant_k8v4")

def full(q, k, v):
    cu = torch.tensor([0, q.shape[0]])
    return varlen_ref(q, k, v, cu, cu, 0, 0, D ** -0.5, True).float()

def run(cached_b):
    # A: first chunk of 6 tokens in block 0. B: `cached_b` tokens already in
    # the TurboQuant cache (block 1) plus 6 - cached_b new ones.
    torch.manual_seed(0)
    _, kv = tq_cache(4, bs, Hk, D, "turboquant_k8v4")  # as the runner hands it
    layer = torch.nn.Module()
    qA, kA, vA = (torch.randn(6, h, D, dtype=torch.float16) for h in (Hq, Hk, Hk))
    qB, kB, vB = (torch.randn(6, h, D, dtype=torch.float16) for h in (Hq, Hk, Hk))
    if cached_b:
        impl.do_kv_cache_update(layer, kB[:cached_b], vB[:cached_b], kv,
                                torch.arange(16, 16 + cached_b))
    q = torch.cat([qA, qB[cached_b:]])
    k = torch.cat([kA, kB[cached_b:]])
    v = torch.cat([vA, vB[cached_b:]])
    n = q.shape[0]
    slots = torch.cat([torch.arange(0, 6), torch.arange(16 + cached_b, 22)])
    impl.do_kv_cache_update(layer, k, v, kv, slots)
    qsl = torch.tensor([0, 6, n], dtype=torch.int32)
    seq_lens = torch.tensor([6, 6], dtype=torch.int32)
    meta = TurboQuantMetadata(
        seq_lens=seq_lens, slot_mapping=slots,
        block_table=torch.tensor([[0], [1]], dtype=torch.int32),
        query_start_loc=qsl, num_actual_tokens=n, max_query_len=6, max_seq_len=6,
        is_prefill=True, num_decodes=0, num_decode_tokens=0,
        query_start_loc_cpu=qsl.clone(), seq_lens_cpu=seq_lens.clone())
    calls.clear()
    out = impl.forward(layer, q.view(n, -1), k.view(n, -1), v.view(n, -1), kv, meta)
    out = out.view(n, Hq, D).float()
    return {
        "err_a": (out[:6] - full(qA, kA, vA)).abs().max().item(),
        "err_b": (out[6:] - full(qB, kB, vB)[cached_b:]).abs().max().item(),
        "whole_batch_varlen": calls.count(2),
    }

print(json.dumps({"continuation": run(4), "first_chunks": run(0)}))
"""


def _run() -> dict:
    return run_interpreted(SCRIPT, TREE, REPO / "kernels", preload=TQ_IMPORTS)


def test_fixed_cobatched_continuation_keeps_cached_prefix(switch):
    switch("PN401", True)
    res = _run()
    cont = res["continuation"]
    # B attends to its 4 cached tokens (read back from the k8v4 cache, hence the
    # quantization tolerance); the batch did not go through one varlen call.
    assert cont["whole_batch_varlen"] == 0
    assert cont["err_b"] < 0.25
    assert cont["err_a"] < 1e-2
    # A batch of first chunks still takes the single varlen call.
    first = res["first_chunks"]
    assert first["whole_batch_varlen"] == 1
    assert first["err_a"] < 1e-2 and first["err_b"] < 1e-2


def test_off_fast_path_as_upstream(switch):
    switch("PN401", False)
    res = _run()
    cont = res["continuation"]
    # Upstream: max_query_len == max_seq_len sends the whole batch through the
    # fast path, and B's cached prefix is not attended to.
    assert cont["whole_batch_varlen"] == 1
    assert cont["err_b"] > 1.0
    assert cont["err_a"] < 1e-2
    first = res["first_chunks"]
    assert first["whole_batch_varlen"] == 1
    assert first["err_a"] < 1e-2 and first["err_b"] < 1e-2
