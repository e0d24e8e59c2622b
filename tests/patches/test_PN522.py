"""PN522: vLLM's kernel warm-up compiles the TurboQuant verify kernels per layer shape.

vllm.model_executor.warmup.kernel_warmup.kernel_warmup runs on a stand-in worker whose
compilation config holds TurboQuant attention layers of a few shapes (plus layers the
warm-up must skip); the other warm-ups it calls need a real model and are stubbed.
vllm_genesis' warmup_verify is replaced by a recorder that checks each call against
the real signature. The caches are CPU tensors, which the patch never warms, so the
script first runs with the patch's device check as it is, then with it accepting
every device. Fresh interpreter, Triton's CPU interpreter on (see _interpreted.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from _interpreted import TQ_IMPORTS, run_interpreted
from _tq_routing import SETUP

REPO = Path(__file__).resolve().parents[2]
TREE = Path(os.environ.get("GQUEUE_VLLM_TREE") or REPO / "work").resolve()

SCRIPT = SETUP + r"""
import inspect, json, logging, sys
from types import ModuleType, SimpleNamespace
import torch
import vllm_genesis.turboquant as gtq
import vllm.model_executor.warmup.kernel_warmup as kw
import vllm.v1.attention.backends.turboquant_attn as tqa
from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
from vllm.v1.attention.backends.turboquant_attn import (
    TurboQuantAttentionBackend, TurboQuantAttentionImpl, TurboQuantMetadata)
from vllm.v1.worker import workspace

MODE, SPEC = sys.argv[1], int(sys.argv[2])  # on | fail | sticky | shared, speculative tokens (0: none)
torch.accelerator.empty_cache = lambda: None
workspace.init_workspace_manager(torch.device("cpu"))

# the other warm-ups need a real model and GPU: every warm-up and autotune function of
# the module but PN522's is stubbed, and so are the modules kernel_warmup imports when
# called (MiniMax's does not even import without vLLM's compiled ops)
for name, obj in list(vars(kw).items()):
    if (inspect.isfunction(obj) and name != "kernel_warmup" and "genesis" not in name
            and ("warmup" in name or "autotune" in name)):
        setattr(kw, name, lambda *a, **k: None)
for name in ("minimax_m3_msa_warmup", "step5_dsa_warmup"):
    mm = ModuleType("vllm.model_executor.warmup." + name)
    setattr(mm, name, lambda *a, **k: None)
    sys.modules[mm.__name__] = mm

signature = inspect.signature(gtq.warmup_verify)
calls = []
def recorder(*args, **kwargs):
    signature.bind(*args, **kwargs)  # the call the real function would take
    lay = kwargs["layout"]
    calls.append({
        "num_heads": kwargs["num_heads"], "num_kv_heads": kwargs["num_kv_heads"],
        "head_dim": kwargs["head_dim"], "block_size": kwargs["block_size"],
        "layout": [lay.key_bits, lay.value_bits, lay.norm_correction],
        "query_lens": list(kwargs["query_lens"]), "dtype": str(kwargs["dtype"]),
        "device": str(kwargs["device"]), "raw_tail": kwargs["raw_tail"],
        "max_blocks": kwargs.get("max_blocks"), "max_num_seqs": kwargs.get("max_num_seqs"),
        "split_cap": kwargs.get("split_cap")})
    if MODE == "fail":
        raise RuntimeError("compiler exploded")
    if MODE == "sticky":
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    return 1
gtq.warmup_verify = recorder

warnings = []
class Catch(logging.Handler):
    def emit(self, record):
        if record.levelno >= logging.WARNING:
            warnings.append(record.getMessage())
kw.logger.addHandler(Catch())

config = VllmConfig(device_config=DeviceConfig(device="cpu"))
if SPEC:
    object.__setattr__(config, "speculative_config", SimpleNamespace(num_speculative_tokens=SPEC))

def tq_layer(hq, hk, d, preset, block, dtype=torch.bfloat16, bound=True):
    impl = tq_impl(config, num_heads=hq, head_size=d, scale=d ** -0.5,
                   num_kv_heads=hk, kv_cache_dtype=preset)
    cache = tq_cache(3, block, hk, d, preset)[1] if bound else torch.tensor([])  # as bound to the layer
    return SimpleNamespace(impl=impl, kv_cache=cache, dtype=dtype)

ctx = config.compilation_config.static_forward_context
ctx["l0"] = tq_layer(6, 2, 32, "turboquant_k8v4", 16)
ctx["l1"] = tq_layer(6, 2, 32, "turboquant_k8v4", 16)  # same shape as l0
ctx["l2"] = tq_layer(6, 2, 32, "turboquant_k8v4", 16, torch.float16)
ctx["l3"] = tq_layer(4, 1, 64, "turboquant_4bit_nc", 32)
ctx["l4"] = tq_layer(4, 1, 96, "turboquant_k8v4", 16)  # head size the kernels skip
ctx["l5"] = tq_layer(4, 1, 64, "turboquant_k8v4", 16, bound=False)  # no cache bound
ctx["l6"] = SimpleNamespace(impl=object(), kv_cache=torch.zeros(3, 16, 1, 64), dtype=torch.bfloat16)
if MODE == "shared":  # l0's shape, reading l0's cache (KV sharing)
    ctx["l7"] = tq_layer(6, 2, 32, "turboquant_k8v4", 16)
    ctx["l7"].kv_sharing_target_layer_name = "l0"

# the runner's block tables for 16-token pages, 80 wide: 0.24.0's V1 runner keeps them in
# input_batch.block_table, 0.34.0's V2 runner in block_tables (one per KV cache group)
worker = SimpleNamespace(
    vllm_config=config, scheduler_config=config.scheduler_config,
    model_runner=SimpleNamespace(
        attn_groups=[], is_pooling_model=False,
        jit_warmup_registry=SimpleNamespace(warmup=lambda: None),
        input_batch=SimpleNamespace(block_table=SimpleNamespace(
            block_tables=[SimpleNamespace(block_size=16, max_num_blocks_per_req=80)])),
        block_tables=SimpleNamespace(block_sizes=[16], input_block_tables=[
            torch.zeros(4, 80, dtype=torch.int32)])),
    get_model=lambda: None)

kw.kernel_warmup(worker)
cpu_calls = list(calls)
calls.clear()
if hasattr(kw, "_genesis_tq_warmup_device"):
    kw._genesis_tq_warmup_device = lambda device: True
if MODE == "sticky":  # the first launch leaves the device's context broken
    kw._genesis_device_unusable = lambda device: True
    try:
        kw.kernel_warmup(worker)
        raised = None
    except RuntimeError as exc:
        raised = str(exc)
    print(json.dumps({"raised": raised, "first": calls, "warnings": warnings}))
    sys.exit(0)
kw.kernel_warmup(worker)
first = list(calls)
calls.clear()
kw.kernel_warmup(worker)  # again: shapes compiled once per process
second = list(calls)

# a verify step after the warm-up, through P67's routing and the real kernel
launches = []
_gv = tqa.genesis_tq_verify if hasattr(tqa, "genesis_tq_verify") else None
if _gv is not None:
    def rec_gv(*a, **k):
        launches.append(int(a[0].shape[0]))
        return _gv(*a, **k)
    tqa.genesis_tq_verify = rec_gv
layer = ctx["l0"]
impl, kv = layer.impl, tq_cache(4, 16, 2, 32, "turboquant_k8v4")[1]
g = torch.Generator().manual_seed(0)
seqs, ql = [9, 20], 3
bt = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
mod = torch.nn.Module()
for b, L in enumerate(seqs):
    k = torch.randn(L, 2 * 32, generator=g).to(torch.bfloat16)
    v = torch.randn(L, 2 * 32, generator=g).to(torch.bfloat16)
    pos = torch.arange(L)
    impl.do_kv_cache_update(mod, k, v, kv, bt[b].long()[pos // 16] * 16 + pos % 16)
N = ql * len(seqs)
q = torch.randn(N, 6 * 32, generator=g).to(torch.bfloat16)
qsl = torch.tensor([0, ql, 2 * ql], dtype=torch.int32)
sl = torch.tensor(seqs, dtype=torch.int32)
meta = TurboQuantMetadata(
    seq_lens=sl, slot_mapping=torch.zeros(N, dtype=torch.long), block_table=bt,
    query_start_loc=qsl, num_actual_tokens=N, max_query_len=ql, max_seq_len=max(seqs),
    is_prefill=True, query_start_loc_cpu=qsl.clone(), seq_lens_cpu=sl.clone())
out = impl.forward(mod, q, torch.zeros(N, 64, dtype=torch.bfloat16),
                   torch.zeros(N, 64, dtype=torch.bfloat16), kv, meta)

print(json.dumps({"max_num_seqs": config.scheduler_config.max_num_seqs,
                  "split_cap": config.attention_config.tq_max_kv_splits_for_cuda_graph,
                  "cpu_calls": cpu_calls, "first": first, "second": second,
                  "warnings": warnings, "verify_launches": launches,
                  "finite": bool(torch.isfinite(out).all())}))
"""

K8V4 = [8, 4, False]
MSE4 = [4, 4, True]


def run(mode: str, spec: int) -> dict:
    return run_interpreted(SCRIPT.replace("sys.argv[1], int(sys.argv[2])", f"{mode!r}, {spec}"), TREE, REPO / "kernels", preload=TQ_IMPORTS)


def shape(heads, kv_heads, head_dim, block, layout, dtype, query_lens, raw_tail, res, split_cap=None):
    # the runner's block table for 16-token pages is 80 wide; none is given for 32-token
    # pages and the stand-in config has no model (max_model_len), so the floor of 2 applies
    return {"num_heads": heads, "num_kv_heads": kv_heads, "head_dim": head_dim, "block_size": block,
            "layout": layout, "query_lens": query_lens, "dtype": dtype, "device": "cpu",
            "raw_tail": raw_tail, "max_blocks": 80 if block == 16 else 2, "max_num_seqs": res["max_num_seqs"],
            "split_cap": split_cap}


def test_fixed_warmup_once_per_layer_shape(switch):
    switch("P67", True)
    switch("PN522", True)
    res = run("on", 3)
    assert res["cpu_calls"] == []  # caches off a CUDA device are never warmed
    ks = [2, 3, 4]  # K+1 lengths of a 3-token drafter
    assert res["first"] == [
        shape(6, 2, 32, 16, K8V4, "torch.bfloat16", ks, False, res),
        shape(6, 2, 32, 16, K8V4, "torch.float16", ks, False, res),
        shape(4, 1, 64, 32, MSE4, "torch.bfloat16", ks, False, res),
    ]
    assert res["second"] == []
    assert res["warnings"] == []
    assert res["verify_launches"] == [6] and res["finite"]


def test_fixed_raw_tail_variant_with_pn521_and_no_drafter(switch):
    switch("P67", True)
    switch("PN521", True)
    switch("PN522", True)
    res = run("on", 0)
    first = res["first"]
    assert len(first) == 3
    assert all(c["raw_tail"] is True and c["query_lens"] == list(range(1, 9)) for c in first)


def test_fixed_kv_shared_layer_warms_the_cache_tail_variant(switch):
    """A layer that reads another layer's cache takes its verify tail from the cache even
    with PN521 on, so its shape is warmed for that variant too."""
    switch("P67", True)
    switch("PN521", True)
    switch("PN522", True)
    res = run("shared", 3)
    ks = [2, 3, 4]
    assert res["first"] == [
        shape(6, 2, 32, 16, K8V4, "torch.bfloat16", ks, True, res),
        shape(6, 2, 32, 16, K8V4, "torch.float16", ks, True, res),
        shape(4, 1, 64, 32, MSE4, "torch.bfloat16", ks, True, res),
        shape(6, 2, 32, 16, K8V4, "torch.bfloat16", ks, False, res),
    ]


def test_fixed_failing_warmup_logged_once_forward_unharmed(switch):
    switch("P67", True)
    switch("PN522", True)
    res = run("fail", 3)
    assert len(res["first"]) == 3  # every shape tried
    assert len(res["second"]) == 3  # none recorded as compiled
    assert len(res["warnings"]) == 1 and "PN522" in res["warnings"][0]
    assert res["verify_launches"] == [6] and res["finite"]


def test_fixed_sticky_device_error_is_raised_not_skipped(switch):
    """A warm-up launch that leaves the CUDA context broken (a fault in a kernel, which every
    later call reports) is no compilation to skip: kernel_warmup raises the launch's error."""
    switch("P67", True)
    switch("PN522", True)
    res = run("sticky", 3)
    assert res["raised"] == "CUDA error: an illegal memory access was encountered"
    assert len(res["first"]) == 1 and res["warnings"] == []


def test_off_no_warmup(switch):
    switch("P67", True)
    switch("PN522", False)
    res = run("on", 3)
    assert res["cpu_calls"] == [] and res["first"] == [] and res["second"] == []
    assert res["verify_launches"] == [6] and res["finite"]


def test_off_without_p67_no_warmup(switch):
    switch("P67", False)
    switch("PN522", True)
    res = run("on", 3)
    assert res["first"] == [] and res["second"] == []
    assert res["verify_launches"] == [] and res["finite"]


def test_fixed_p67b_needs_no_split_ceiling(switch):
    """P67b launches with the kernels' own split count (verify_num_splits, the planner
    warmup_verify uses), so 0.24.0's tq_max_kv_splits_for_cuda_graph is not passed on."""
    switch("P67", True)
    switch("P67b", True)
    switch("PN522", True)
    res = run("on", 3)
    assert len(res["first"]) == 3 and [c["split_cap"] for c in res["first"]] == [None] * 3
    assert res["split_cap"] >= 1 and res["verify_launches"] == [6] and res["finite"]
