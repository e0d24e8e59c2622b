"""PN519: the sliding-window tile loop of unified attention starts at the first allowed key.

Runs vllm's unified_attention (2D path) under the Triton interpreter on CPU
(TRITON_INTERPRET=1, no visible CUDA device, in a fresh interpreter because vLLM
decides at import time whether Triton is usable). The interpreter's load primitive
is wrapped to count block-table reads, one per KV tile iterated.
"""

from __future__ import annotations

import os
from pathlib import Path
from _interpreted import run_interpreted

REPO = Path(__file__).resolve().parents[2]
TREE = Path(os.environ.get("GQUEUE_VLLM_TREE") or REPO / "work").resolve()

SCRIPT = r"""
import json
import numpy as np
import torch
from triton.runtime import interpreter

loads = []
_orig = interpreter.InterpreterBuilder.create_masked_load

def _recording_load(self, ptrs, *args, **kwargs):
    # The primitive's other arguments differ between Triton releases.
    loads.append(np.array(ptrs.data, dtype=np.uint64).ravel())
    return _orig(self, ptrs, *args, **kwargs)

interpreter.InterpreterBuilder.create_masked_load = _recording_load

from vllm.v1.attention.ops.triton_unified_attention import unified_attention

def run(context, new, window, block_size=16, D=16):
    torch.manual_seed(0)
    seq = context + new
    nblk = (seq + block_size - 1) // block_size
    q = torch.randn(new, 1, D)
    k = torch.randn(seq, 1, D)
    v = torch.randn(seq, 1, D)
    perm = torch.randperm(nblk + 2)[:nblk].to(torch.int32)
    k_cache = torch.zeros(nblk + 2, block_size, 1, D)
    v_cache = torch.zeros(nblk + 2, block_size, 1, D)
    for t in range(seq):
        k_cache[perm[t // block_size], t % block_size] = k[t]
        v_cache[perm[t // block_size], t % block_size] = v[t]
    block_table = perm[None].contiguous()
    out = torch.empty_like(q)
    loads.clear()
    unified_attention(
        q=q, k=k_cache, v=v_cache, out=out,
        cu_seqlens_q=torch.tensor([0, new], dtype=torch.int32), max_seqlen_q=new,
        seqused_k=torch.tensor([seq], dtype=torch.int32), max_seqlen_k=seq,
        softmax_scale=D ** -0.5, causal=True, window_size=(window - 1, 0),
        block_table=block_table, softcap=0, q_descale=None, k_descale=None,
        v_descale=None)
    lo = block_table.data_ptr()
    hi = lo + block_table.numel() * block_table.element_size()
    tiles = sum(1 for p in loads if p.size > 1 and ((p >= lo) & (p < hi)).any())
    qpos = torch.arange(new)[:, None] + context
    kpos = torch.arange(seq)[None, :]
    mask = (kpos <= qpos) & (qpos - kpos < window)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
        attn_mask=mask, scale=D ** -0.5).transpose(0, 1)
    return {"tiles": tiles, "err": (out - ref).abs().max().item()}

# Window [31, 43] straddles the 32-key tile boundary: one tile if aligned.
# Window [32, 43] starts on a boundary: nothing to save.
print(json.dumps({"unaligned": run(40, 4, 10), "aligned": run(41, 4, 10),
                  "long": run(70, 20, 24)}))
"""


def _run() -> dict:
    return run_interpreted(SCRIPT, TREE, REPO / "kernels")


def test_fixed_window_tiles_start_at_first_allowed_key(switch):
    switch("PN519", True)
    res = _run()
    assert res["unaligned"]["tiles"] == 1
    assert res["aligned"]["tiles"] == 1
    # Two query blocks (16 + 4 rows): keys [47, 85] take two tiles from key
    # 47, keys [63, 89] one tile from key 63.
    assert res["long"]["tiles"] == 3
    for case in res.values():
        assert case["err"] < 1e-4


def test_off_floor_rounded_tiles_as_upstream(switch):
    switch("PN519", False)
    res = _run()
    assert res["unaligned"]["tiles"] == 2
    assert res["aligned"]["tiles"] == 1
    # Both query blocks walk key tiles [32, 64) and [64, 96).
    assert res["long"]["tiles"] == 4
    for case in res.values():
        assert case["err"] < 1e-4
