"""Shared harness for the TurboQuant routing patches (P40, P67, P67b, PN521).

Runs TurboQuantAttentionImpl.forward of the patched tree on CPU in a fresh process (see
_interpreted.py; TRITON_INTERPRET=1, no visible CUDA device: vLLM decides at import time whether Triton is
usable), the cache as each release's model runner hands it over (``SETUP``). The upstream decode launcher and the vllm_genesis launchers the patches import are
wrapped to record each launch, then call the real kernels.

Modes: ``decode`` (three one-token requests), ``verify`` (3, 6 and 1 new tokens) and
``uniform`` (4 new tokens each, a FULL-graph spec-verify batch; run twice, the second
time with shorter contexts, to compare the launches). A ``turboquant_*`` option picks the
cache preset (default k8v4); ``kv_shared`` builds the layer as one that reads another layer's
cache (KV sharing), so its tail must come from the cache; ``d512`` a head size of 512;
``soa`` (0.34.0) stores the cache in the SoA layout, as 0.34.0 does where FlyDSL decodes;
``err_dequant_*`` compare with float64 over the cache as
stored (the layer's rotation and centroids), with the tail from the cache or the raw K/V. ``strict`` replaces the
metadata's CPU copies with an object that fails when read, and records host reads of
tensors (tolist, item, bool, int, float) made by forward() outside the kernel launchers.
"""

from __future__ import annotations

import os
from pathlib import Path

from _interpreted import TQ_IMPORTS, run_interpreted

REPO = Path(__file__).resolve().parents[2]
TREE = Path(os.environ.get("GQUEUE_VLLM_TREE") or REPO / "work").resolve()

# Set-up shared by the TurboQuant patch scripts, written for each release's callers.
SETUP = r"""
from types import SimpleNamespace as _NS
import torch as _torch
from vllm.config import set_current_vllm_config as _set_config
from vllm.model_executor.layers.quantization.turboquant.config import TurboQuantConfig as _TQConfig
from vllm.v1.attention.backends.turboquant_attn import (
    TurboQuantAttentionBackend as _Backend, TurboQuantAttentionImpl as _Impl)

# tq_cache -> (stored, handed): the cache as stored, (blocks, block_size, KV heads, slot
# bytes), which the TurboQuant kernels read, and the tensor the backend's methods are
# handed. 0.24.0's runner hands the stored tensor. 0.34.0's hands each layer the logical
# [blocks, KV heads, tokens, bytes] view of a cache laid out as the backend declares
# (supported_kv_cache_layouts: LBNHC, tokens before heads in memory), and the backend
# transposes it back before its kernels run.
def tq_cache(num_blocks, block_size, num_kv_heads, head_size, preset):
    slot = _TQConfig.from_cache_dtype(preset, head_size).slot_size_aligned
    layouts = getattr(_Backend, "supported_kv_cache_layouts", None)
    if layouts is None:
        stored = _torch.zeros(num_blocks, block_size, num_kv_heads, slot, dtype=_torch.uint8)
        return stored, stored
    logical = (num_blocks, num_kv_heads, block_size, slot)
    order = layouts()[0].layer_view_order  # the logical axes in memory order
    stored = _torch.zeros([logical[d] for d in order], dtype=_torch.uint8)
    handed = stored.permute([order.index(d) for d in range(4)])
    assert tuple(handed.shape) == logical
    assert tuple(stored.shape) == (num_blocks, block_size, num_kv_heads, slot), stored.shape
    return stored, handed

# tq_impl: TurboQuantAttentionImpl(**kwargs) built under `config`. 0.34.0's __init__ reads
# model_config.max_model_len (kept for the FlyDSL decode's buffers, unused on this path):
# a config with no model gets a stand-in for that field while the layer is built.
def tq_impl(config, **kwargs):
    had = config.model_config
    if had is None:
        object.__setattr__(config, "model_config", _NS(max_model_len=4096))
    try:
        with _set_config(config):
            return _Impl(**kwargs)
    finally:
        object.__setattr__(config, "model_config", had)
"""

SCRIPT = SETUP + r"""
import json, sys
import torch
import vllm.v1.attention.backends.turboquant_attn as tqa
from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
from vllm.v1.attention.backends.turboquant_attn import (
    TurboQuantAttentionBackend, TurboQuantAttentionImpl, TurboQuantMetadata)
from vllm.v1.worker import workspace

torch.accelerator.empty_cache = lambda: None
workspace.init_workspace_manager(torch.device("cpu"))

calls = {"upstream": [], "genesis_decode": [], "decode_overlap_prior": [], "genesis_verify": [], "verify_launches": [],
         "prefill_path": 0}
host_reads = []
guard = {"on": False}

def _guarded(name):
    orig = getattr(torch.Tensor, name)
    def f(self, *a, **kw):
        if guard["on"]:
            host_reads.append(name)
        return orig(self, *a, **kw)
    setattr(torch.Tensor, name, f)

def unguarded(fn):
    def call(*a, **kw):
        was, guard["on"] = guard["on"], False
        try:
            return fn(*a, **kw)
        finally:
            guard["on"] = was
    return call

_prefill = TurboQuantAttentionImpl._prefill_attention
def rec_prefill(self, *a, **kw):
    calls["prefill_path"] += 1
    return _prefill(self, *a, **kw)
TurboQuantAttentionImpl._prefill_attention = rec_prefill
_up = tqa.triton_turboquant_decode_attention
def rec_up(*a, **kw):
    calls["upstream"].append(int((kw.get("query") if "query" in kw else a[0]).shape[0]))
    return _up(*a, **kw)
tqa.triton_turboquant_decode_attention = rec_up
if hasattr(tqa, "genesis_tq_decode"):
    _gd = tqa.genesis_tq_decode
    def rec_gd(*a, **kw):
        calls["genesis_decode"].append(int(a[0].shape[0]))
        calls["decode_overlap_prior"].append(kw.get("overlap_prior", False))
        return _gd(*a, **kw)
    tqa.genesis_tq_decode = rec_gd
if hasattr(tqa, "genesis_tq_verify"):
    _gv = tqa.genesis_tq_verify
    def rec_gv(*a, **kw):
        calls["genesis_verify"].append({"tokens": int(a[0].shape[0]), "raw_tail": a[1] is not None})
        ws = kw.get("workspace")
        calls["verify_launches"].append({
            "max_query_len": int(a[7]), "num_splits": kw.get("num_splits"),
            "workspace": None if ws is None else [ws[0].data_ptr(), ws[1].data_ptr()]})
        return unguarded(_gv)(*a, **kw)
    tqa.genesis_tq_verify = rec_gv

MODE = sys.argv[1]  # decode | verify | uniform
STRICT = "strict" in sys.argv[2:]
PRESET = next((a for a in sys.argv[2:] if a.startswith("turboquant_")), "turboquant_k8v4")
# d512: head size 512 (Gemma 4's global layers), GQA 2; else head size 32, GQA 6
Hq, Hk, D, bs = (2, 1, 512, 16) if "d512" in sys.argv[2:] else (6, 2, 32, 16)
config = VllmConfig(device_config=DeviceConfig(device="cpu"))
# 0.24.0's own decode kernel's fixed split count; P67b must not apply it to its launches
config.attention_config.tq_max_kv_splits_for_cuda_graph = 1
# kv_shared: a layer that reads an earlier layer's cache (vLLM's KV sharing, e.g. Gemma 4's
# last layers): it stores nothing, and the key/value it is handed are its own projections
# (not normed or rotated), not what the cache holds
KV_SHARED = "kv_shared" in sys.argv[2:]
impl = tq_impl(config, num_heads=Hq, head_size=D, scale=D ** -0.5,
               num_kv_heads=Hk, kv_cache_dtype=PRESET,
               kv_sharing_target_layer_name="model.layers.0.attn" if KV_SHARED else None)
if "soa" in sys.argv[2:]:
    # 0.34.0 on a gfx950 with FlyDSL: the cache is stored in the SoA layout (data and
    # metadata regions apart in each block), which only the SoA kernels read
    impl._use_flydsl = impl._soa_store = True

g = torch.Generator().manual_seed(0)
seqs = [21, 40, 9]
qlens = {"decode": [1, 1, 1], "verify": [3, 6, 1], "uniform": [4, 4, 4]}[MODE]
nb = 4
kv, kv_handed = tq_cache(len(seqs) * nb + 1, bs, Hk, D, PRESET)
perm = torch.randperm(len(seqs) * nb, generator=g)
bt = perm.view(len(seqs), nb).to(torch.int32)
layer = torch.nn.Module()
ks, vs, qs, tails_k, tails_v = [], [], [], [], []
for b, (L, ql) in enumerate(zip(seqs, qlens)):
    k = torch.randn(L, Hk, D, generator=g).to(torch.bfloat16)
    v = (torch.randn(L, Hk, D, generator=g) + 0.5).to(torch.bfloat16)
    pos = torch.arange(L)
    slots = bt[b].long()[pos // bs] * bs + pos % bs
    stored_v = v.clone()
    stored_v[L - ql:] += 4.0  # the tail's cache slots hold other values than this step's V
    impl.do_kv_cache_update(layer, k.view(L, -1), stored_v.view(L, -1), kv_handed, slots)
    ks.append(k); vs.append(v)
    qs.append(torch.randn(ql, Hq, D, generator=g).to(torch.bfloat16))
    tails_k.append(k[L - ql:]); tails_v.append(v[L - ql:])
q = torch.cat(qs)
N = q.shape[0]
qsl = torch.tensor([0] + torch.tensor(qlens).cumsum(0).tolist(), dtype=torch.int32)
class Poison:  # stands for a CPU copy the code under test must not read
    def __getattr__(self, name):
        raise RuntimeError(f"forward() read a CPU copy of the metadata ({name})")
    def __getitem__(self, index):
        raise RuntimeError("forward() read a CPU copy of the metadata")

if STRICT:
    for name in ("tolist", "item", "__bool__", "__int__", "__float__"):
        _guarded(name)

# uniform mode: a block table wider than the contexts (as vLLM's, sized for
# max_model_len), so that the split-K pass has more than one split
bt_meta = bt if MODE != "uniform" else torch.cat(
    [bt, torch.zeros(len(seqs), 8, dtype=torch.int32)], 1)

def step(seqs_now):
    seq_lens = torch.tensor(seqs_now, dtype=torch.int32)
    meta = TurboQuantMetadata(
        seq_lens=seq_lens, slot_mapping=torch.zeros(N, dtype=torch.long),
        block_table=bt_meta, query_start_loc=qsl, num_actual_tokens=N,
        max_query_len=max(qlens), max_seq_len=max(seqs_now), is_prefill=MODE != "decode",
        num_decodes=len(seqs) if MODE == "decode" else 0,
        num_decode_tokens=N if MODE == "decode" else 0,
        query_start_loc_cpu=Poison() if STRICT else qsl.clone(),
        seq_lens_cpu=Poison() if STRICT else seq_lens.clone())
    k_in, v_in = torch.cat(tails_k).view(N, -1), torch.cat(tails_v).view(N, -1)
    guard["on"] = True
    try:
        return impl.forward(layer, q.view(N, -1), k_in, v_in, kv_handed, meta)
    finally:
        guard["on"] = False

out = step(seqs).view(N, Hq, D).double()
if MODE == "uniform":
    step([L - 3 for L in seqs])  # shorter contexts, same shapes

def ref(tail_from_cache):
    res = []
    for b, (L, ql) in enumerate(zip(seqs, qlens)):
        k = ks[b].double().repeat_interleave(Hq // Hk, 1)
        v = vs[b].double().clone()
        if tail_from_cache:
            v[L - ql:] += 4.0
        v = v.repeat_interleave(Hq // Hk, 1)
        mask = torch.arange(L)[None, :] <= torch.arange(ql)[:, None] + (L - ql)
        o = torch.nn.functional.scaled_dot_product_attention(
            qs[b].double().transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
            attn_mask=mask, scale=D ** -0.5).transpose(0, 1)
        res.append(o)
    return torch.cat(res)

def err(r):
    return float((out - r).norm() / r.norm())

from vllm_genesis.turboquant import TQLayout, verify_num_splits
from vllm_genesis.turboquant.reference import reference_attention
lay = TQLayout.from_preset(PRESET, D)
planned = verify_num_splits(kv, len(seqs), Hq, D, max(qlens), bt_meta.shape[1] * bs, lay)

def ref_dequant(**tail):  # float64 over the cache as stored (the layer's rotation and centroids)
    return reference_attention(q, kv, bt, torch.tensor(seqs, dtype=torch.int32), lay, D ** -0.5,
                               query_start_loc=qsl, Pi=getattr(layer, "_tq_Pi", None),
                               centroids=getattr(layer, "_tq_centroids", None), **tail)

print(json.dumps({"calls": calls, "host_reads": host_reads, "nan": bool(torch.isnan(out).any()),
                  "err_raw_tail": err(ref(False)), "err_cache_tail": err(ref(True)),
                  "err_dequant_cache_tail": err(ref_dequant()),
                  "err_dequant_raw_tail": err(ref_dequant(key=torch.cat(tails_k), value=torch.cat(tails_v))),
                  "planned_splits": planned}))
"""


def run(mode: str, *options: str) -> dict:
    return run_interpreted(SCRIPT, TREE, REPO / "kernels", (mode, *options), TQ_IMPORTS)
