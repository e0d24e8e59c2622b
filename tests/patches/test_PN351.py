"""PN351: Triton unified attention launch tune for head_size >= 512.

The launch choice is made in Python; the kernel itself runs under the Triton
interpreter on CPU (TRITON_INTERPRET=1, no visible CUDA device, in a fresh
interpreter because vLLM decides at import time whether Triton is usable). The
kernel's launch is wrapped to record the tile size and launch options and then
runs the real kernel.
"""

from __future__ import annotations

import os
from pathlib import Path
from _interpreted import run_interpreted

REPO = Path(__file__).resolve().parents[2]
TREE = Path(os.environ.get("GQUEUE_VLLM_TREE") or REPO / "work").resolve()

SCRIPT = r"""
import json
import torch
import vllm.v1.attention.ops.triton_unified_attention as ua

launches = []
_kernel = ua.kernel_unified_attention

class RecordingKernel:
    def __getitem__(self, grid):
        def launch(**kw):
            launches.append({k: kw.get(k) for k in ("TILE_SIZE", "num_warps", "num_stages")})
            return _kernel[grid](**kw)
        return launch

ua.kernel_unified_attention = RecordingKernel()

def run(D, new=2, context=5, block_size=16):
    torch.manual_seed(0)
    seq = context + new
    q = torch.randn(new, 2, D)
    k = torch.randn(seq, 1, D)
    v = torch.randn(seq, 1, D)
    k_cache = torch.zeros(2, block_size, 1, D)
    v_cache = torch.zeros(2, block_size, 1, D)
    k_cache[1, :seq] = k
    v_cache[1, :seq] = v
    out = torch.empty_like(q)
    launches.clear()
    ua.unified_attention(
        q=q, k=k_cache, v=v_cache, out=out,
        cu_seqlens_q=torch.tensor([0, new], dtype=torch.int32), max_seqlen_q=new,
        seqused_k=torch.tensor([seq], dtype=torch.int32), max_seqlen_k=seq,
        softmax_scale=D ** -0.5, causal=True, window_size=(-1, -1),
        block_table=torch.tensor([[1]], dtype=torch.int32), softcap=0,
        q_descale=None, k_descale=None, v_descale=None)
    mask = torch.arange(seq)[None, :] <= torch.arange(new)[:, None] + context
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
        attn_mask=mask, scale=D ** -0.5, enable_gqa=True).transpose(0, 1)
    return {"launch": launches[0], "err": (out - ref).abs().max().item()}

print(json.dumps({
    "d512": run(512),
    "d256": run(256),
    "tile_fp8_512": ua._get_tile_size(512, 0, 1, is_prefill=True),
    "tile_bf16_512": ua._get_tile_size(512, 0, 2, is_prefill=True),
    "tile_fp8_256": ua._get_tile_size(256, 0, 1, is_prefill=True),
    "tile_decode_fp8_512": ua._get_tile_size(512, 0, 1, is_prefill=False),
}))
"""


def _run() -> dict:
    return run_interpreted(SCRIPT, TREE, REPO / "kernels", preload=("torch", "vllm.v1.attention.ops.triton_unified_attention"))


def test_fixed_head_dim_512_gets_8_warps_2_stages(switch):
    switch("PN351", True)
    res = _run()
    assert res["d512"]["launch"] == {"TILE_SIZE": 32, "num_warps": 8, "num_stages": 2}
    assert res["d512"]["err"] < 1e-4
    # head_size 256 keeps Triton's defaults
    assert res["d256"]["launch"] == {"TILE_SIZE": 32, "num_warps": None, "num_stages": None}
    assert res["d256"]["err"] < 1e-4
    # 64-key prefill tile only for fp8 elements at head_size >= 512
    assert res["tile_fp8_512"] == 64
    assert res["tile_bf16_512"] == 32
    assert res["tile_fp8_256"] == 32
    assert res["tile_decode_fp8_512"] == 32


def test_off_triton_defaults_as_upstream(switch):
    switch("PN351", False)
    res = _run()
    for d in ("d512", "d256"):
        assert res[d]["launch"] == {"TILE_SIZE": 32, "num_warps": None, "num_stages": None}
        assert res[d]["err"] < 1e-4
    assert res["tile_fp8_512"] == 32
    assert res["tile_bf16_512"] == 32
