"""P98: TurboQuant continuation prefill keeps its dequant buffers on the layer.

Runs TurboQuantAttentionImpl.forward on CPU for a long continuation chunk
(q_len > 128, the full-dequant path). The TurboQuant kernels run under the
Triton interpreter (TRITON_INTERPRET=1, no visible CUDA device, in a fresh
interpreter because vLLM decides at import time whether Triton is usable). A
real WorkspaceManager is initialized on CPU and locked before it ever grew,
as happens when the continuation buffers were not reserved before capture.
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
import sys
import torch
from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
from vllm.v1.attention.backends.turboquant_attn import (
    TurboQuantAttentionBackend, TurboQuantAttentionImpl, TurboQuantMetadata)
from vllm.v1.worker import workspace

# There is no accelerator on this host: the workspace growth path calls
# torch.accelerator.empty_cache(), which has nothing to release here.
torch.accelerator.empty_cache = lambda: None

Hq, Hk, D, bs = 2, 1, 16, 16
impl = tq_impl(VllmConfig(device_config=DeviceConfig(device="cpu")), num_heads=Hq, head_size=D,
               scale=D ** -0.5, num_kv_heads=Hk, kv_cache_dtype="turboquant_k8v4")

def run(lock):
    workspace.init_workspace_manager(torch.device("cpu"))
    if lock:
        workspace.lock_workspace()
    torch.manual_seed(0)
    cached, new = 16, 130
    seq = cached + new
    _, kv = tq_cache(16, bs, Hk, D, "turboquant_k8v4")  # as the runner hands it
    layer = torch.nn.Module()
    q = torch.randn(new, Hq, D, dtype=torch.float16)
    k = torch.randn(seq, Hk, D, dtype=torch.float16)
    v = torch.randn(seq, Hk, D, dtype=torch.float16)
    # Only the cached prefix is read back from the cache on this path.
    impl.do_kv_cache_update(layer, k[:cached], v[:cached], kv, torch.arange(cached))
    qsl = torch.tensor([0, new], dtype=torch.int32)
    seq_lens = torch.tensor([seq], dtype=torch.int32)
    meta = TurboQuantMetadata(
        seq_lens=seq_lens, slot_mapping=torch.arange(cached, seq),
        block_table=torch.arange(10, dtype=torch.int32)[None],
        query_start_loc=qsl, num_actual_tokens=new, max_query_len=new,
        max_seq_len=seq, is_prefill=True, num_decodes=0, num_decode_tokens=0,
        query_start_loc_cpu=qsl.clone(), seq_lens_cpu=seq_lens.clone())
    try:
        out = impl.forward(layer, q.view(new, -1), k[cached:].view(new, -1),
                           v[cached:].view(new, -1), kv, meta)
    except AssertionError as e:
        return {"error": str(e)}
    mask = torch.arange(seq)[None, :] <= torch.arange(new)[:, None] + cached
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1).float(), k.transpose(0, 1).float(),
        v.transpose(0, 1).float(), attn_mask=mask, scale=D ** -0.5,
        enable_gqa=True).transpose(0, 1)
    buf = getattr(layer, "_tq_k_dequant_buf", None)
    return {
        "err": (out.view(new, Hq, D).float() - ref).abs().max().item(),
        "out": out.float().sum().item(),
        "layer_buf_len": None if buf is None else buf.shape[2],
        "workspace_bytes": workspace.current_workspace_manager()
            ._workspace_size_bytes(workspace.current_workspace_manager()
                                   ._current_workspaces[0]),
    }

print(json.dumps({"locked": run(True), "unlocked": run(False)}))
"""


def _run() -> dict:
    return run_interpreted(SCRIPT, TREE, REPO / "kernels", preload=TQ_IMPORTS)


def test_fixed_continuation_prefill_does_not_need_the_workspace(switch):
    switch("P98", True)
    res = _run()
    for case in ("locked", "unlocked"):
        r = res[case]
        assert "error" not in r, r
        assert r["err"] < 0.25
        assert r["layer_buf_len"] == 16  # cached_len 16 rounded to the block size
        assert r["workspace_bytes"] == 0
    assert res["locked"]["out"] == res["unlocked"]["out"]


def test_off_uses_the_shared_workspace(switch):
    switch("P98", False)
    res = _run()
    # Upstream: the dequant buffers come from the WorkspaceManager, which
    # refuses to grow once locked.
    assert "Workspace is locked" in res["locked"]["error"]
    r = res["unlocked"]
    assert r["err"] < 0.25
    assert r["layer_buf_len"] is None
    assert r["workspace_bytes"] >= 2 * 16 * 16 * 2
    switch("P98", True)
    assert _run()["unlocked"]["out"] == r["out"]
