"""P101: TurboQuant continuations go through the decode kernel in 64-query slices.

Runs TurboQuantAttentionImpl.forward on CPU for one continuation chunk. The
TurboQuant kernels run under the Triton interpreter (TRITON_INTERPRET=1, no
visible CUDA device, in a fresh interpreter because vLLM decides at import time
whether Triton is usable). The decode launcher is wrapped to record the batch
size of every launch and then calls the real one.
"""

from __future__ import annotations

import os
from pathlib import Path
from _interpreted import TQ_IMPORTS, run_interpreted
from _pins import only_on
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
from vllm.v1.worker import workspace

# No accelerator here: workspace growth calls torch.accelerator.empty_cache().
torch.accelerator.empty_cache = lambda: None
workspace.init_workspace_manager(torch.device("cpu"))

launches = []
_real = tqa.triton_turboquant_decode_attention

def recording_decode(**kw):
    launches.append(kw["query"].shape[0])
    return _real(**kw)

tqa.triton_turboquant_decode_attention = recording_decode

# The routing is exercised at scaled-down sizes (the interpreter is slow):
# slices of 4 queries, the upstream single launch up to 8, a 16-token cap.
SLICE = getattr(tqa, "_CONTINUATION_DECODE_SLICE", None)
CAP = getattr(tqa, "_CONTINUATION_DECODE_MAX_CACHED_LEN", None)
tqa._CONTINUATION_DECODE_SLICE = 4
tqa._CONTINUATION_DECODE_THRESHOLD = 8
tqa._CONTINUATION_DECODE_MAX_CACHED_LEN = 16

Hq, Hk, D, bs = 1, 1, 16, 16
config = VllmConfig(device_config=DeviceConfig(device="cpu"))
config.attention_config.tq_max_kv_splits_for_cuda_graph = 2
impl = tq_impl(config, num_heads=Hq, head_size=D, scale=D ** -0.5,
               num_kv_heads=Hk, kv_cache_dtype="turboquant_k8v4")
SOA = False
if SOA:  # 0.34.0 where FlyDSL decodes: the cache in the SoA layout, read by its SoA kernels
    impl._use_flydsl = impl._soa_store = True

def run(cached, new):
    seq = cached + new
    torch.manual_seed(0)
    _, kv = tq_cache(8, bs, Hk, D, "turboquant_k8v4")  # as the runner hands it
    layer = torch.nn.Module()
    q = torch.randn(new, Hq, D, dtype=torch.float16)
    k = torch.randn(seq, Hk, D, dtype=torch.float16)
    v = torch.randn(seq, Hk, D, dtype=torch.float16)
    impl.do_kv_cache_update(layer, k, v, kv, torch.arange(seq))
    qsl = torch.tensor([0, new], dtype=torch.int32)
    seq_lens = torch.tensor([seq], dtype=torch.int32)
    meta = TurboQuantMetadata(
        seq_lens=seq_lens, slot_mapping=torch.arange(cached, seq),
        block_table=torch.arange(8, dtype=torch.int32)[None],
        query_start_loc=qsl, num_actual_tokens=new, max_query_len=new,
        max_seq_len=seq, is_prefill=True, num_decodes=0, num_decode_tokens=0,
        query_start_loc_cpu=qsl.clone(), seq_lens_cpu=seq_lens.clone())
    launches.clear()
    out = impl.forward(layer, q.view(new, -1), k[cached:].view(new, -1),
                       v[cached:].view(new, -1), kv, meta)
    mask = torch.arange(seq)[None, :] <= torch.arange(new)[:, None] + cached
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1).float(), k.transpose(0, 1).float(),
        v.transpose(0, 1).float(), attn_mask=mask, scale=D ** -0.5
    ).transpose(0, 1)
    return {"launches": list(launches),
            "err": (out.view(new, Hq, D).float() - ref).abs().max().item()}

print(json.dumps({"slice": SLICE, "cap": CAP, "medium": run(8, 6),
                  "long": run(8, 10), "capped_long": run(20, 10),
                  "capped_short": run(20, 3)}))
"""


def _run(soa: bool = False) -> dict:
    return run_interpreted(SCRIPT.replace("SOA = False", f"SOA = {soa}"), TREE, REPO / "kernels", preload=TQ_IMPORTS)


def test_fixed_continuation_decoded_in_64_query_slices(switch):
    switch("P101", True)
    res = _run()
    assert (res["slice"], res["cap"]) == (64, 32 * 1024)
    # Short cached prefix: decode kernel in slices, never the full dequant.
    assert res["medium"]["launches"] == [4, 2]
    assert res["long"]["launches"] == [4, 4, 2]
    # Prefix over the cap: one slice or less still decodes, more dequantizes.
    assert res["capped_long"]["launches"] == []
    assert res["capped_short"]["launches"] == [3]
    for case in ("medium", "long", "capped_long", "capped_short"):
        assert res[case]["err"] < 0.25, case


def test_off_single_launch_then_full_dequant(switch):
    switch("P101", False)
    res = _run()
    # Upstream: one launch up to the threshold, the full-dequant path above,
    # whatever the cached length.
    assert res["medium"]["launches"] == [6]
    assert res["long"]["launches"] == []
    assert res["capped_long"]["launches"] == []
    assert res["capped_short"]["launches"] == [3]
    for case in ("medium", "long", "capped_long", "capped_short"):
        assert res[case]["err"] < 0.25, case


@only_on(">=0.34", "0.34.0 stores the cache in an SoA layout where FlyDSL decodes")
def test_soa_cache_keeps_the_upstream_continuation(switch):
    """Where FlyDSL decodes (gfx950) 0.34.0 stores the cache in an SoA layout and reads
    continuations with its SoA decode kernel: P101's slices, launched with the AoS decode
    kernel, stand aside there. (What 0.34.0's SoA kernels return under the CPU interpreter
    is upstream's and not checked.)"""
    switch("P101", True)
    res = _run(soa=True)
    for case in ("medium", "long", "capped_long", "capped_short"):
        assert res[case]["launches"] == [], case
