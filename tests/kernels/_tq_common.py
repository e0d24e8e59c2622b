"""Shared by the TurboQuant kernel tests (test_tq_decode, test_tq_verify, test_tq_plan): the float64
reference runs, the NaN poisoning, the sm_90 build scripts and the launch counters."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from vllm_genesis.turboquant import (
    TQLayout,
    tq_decode_attention,
    tq_verify_attention,
)
from vllm_genesis.turboquant.reference import (
    random_case,
    reference_attention,
)

CUDA = torch.cuda.is_available()
DEV = "cuda" if CUDA else "cpu"


# what fp8 keys / 3-4 bit values cost against attention on the raw bf16 K/V (loose bounds)
RAW_BOUND = {
    "turboquant_k8v4": 0.15,
    "turboquant_4bit_nc": 0.25,
    "turboquant_k3v4_nc": 0.35,
    "turboquant_3bit_nc": 0.5,
}


# against the float64 dequantised cache: fp16 products + bf16 output rounding
DEQ_BOUND = 1e-2


def _poison_past_end(c: dict, seq_lens, page: int) -> None:
    """0xFF (fp8 and fp16 NaN patterns) in the allocated but unwritten slots of each
    sequence's last page: the kernels must never let them into a result."""
    for b, L in enumerate(seq_lens):
        if L % page:
            c["kv_cache"][int(c["block_table"][b, (L - 1) // page]), L % page :] = 0xFF


def _poisoned(like: torch.Tensor) -> torch.Tensor:
    return torch.full_like(like, float("nan"))


def _run_decode(c, lay, **kw):
    out = _poisoned(c["query"])
    res = tq_decode_attention(
        c["query"], c["kv_cache"], c["block_table"], c["seq_lens"],
        layout=lay, centroids=c["centroids"], PiT=c["PiT"], out=out, **kw,
    )
    assert res is out
    return out


def _run_verify(c, lay, raw_tail=True, **kw):
    out = _poisoned(c["query"])
    tq_verify_attention(
        c["query"], c["key"] if raw_tail else None, c["value"] if raw_tail else None,
        c["kv_cache"], c["block_table"], c["seq_lens"], c["query_start_loc"], c["max_query_len"],
        layout=lay, centroids=c["centroids"], PiT=c["PiT"], out=out, **kw,
    )
    return out


def _ref(c, lay, *, verify=False, raw_tail=True, raw=False):
    D = lay.head_dim
    kw = dict(Pi=c["Pi"], centroids=c["centroids"])
    if verify:
        kw["query_start_loc"] = c["query_start_loc"]
        if raw_tail:
            kw.update(key=c["key"], value=c["value"])
    if raw:
        kw = dict(query_start_loc=kw.get("query_start_loc"), raw_kv=c["raw_kv"])
    return reference_attention(c["query"], c["kv_cache"], c["block_table"], c["seq_lens"], lay, D**-0.5, **kw)


def _decode_case(hq, hk, page, D, seed):
    """k8v4 decode case: lengths 203, 1, 0, 95, 33 (row 2 empty), NaN bytes past the end;
    returns the case, the layout, the non-empty rows and their float64 reference."""
    lay = TQLayout.from_preset("turboquant_k8v4", D)
    seqs = [203, 1, 0, 95, 33]
    c = random_case(seq_lens=seqs, num_heads=hq, num_kv_heads=hk, head_dim=D, block_size=page,
                    layout=lay, generator=torch.Generator().manual_seed(seed), device=DEV)
    _poison_past_end(c, seqs, page)
    return c, lay, [0, 1, 3, 4], _ref(c, lay)


# Builds one Gluon kernel of the package for sm_90: argv = module, kernel, its constexprs (a
# Python expression; ``M`` is the module); prints the counts the tests look at, as JSON.
_GLUON_SM90_BUILD = """
import importlib, inspect, json, pathlib, re, subprocess, sys, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource

M = importlib.import_module("vllm_genesis.turboquant." + sys.argv[1])
jit = getattr(M, sys.argv[2])
consts = eval(sys.argv[3], {"M": M})
names = jit.arg_names
if "TL" in names and not consts.pop("TL_ON", False):
    consts.setdefault("TL", None)  # kernel "h"'s diagnostics timeline: off unless asked
for n, par in inspect.signature(jit.fn).parameters.items():  # constexprs not given: their defaults
    if n not in consts and par.default is not par.empty and "constexpr" in str(par.annotation):
        consts[n] = par.default
ptrs = {n: t for n, t in {"QR": "*bf16", "KV": "*u8", "BT": "*i32", "SeqLens": "*i32", "QStart": "*i32",
                          "MidO": "*fp32", "MidL": "*fp32", "TL": "*i64"}.items() if n in names and n not in consts}
sig = {n: ptrs.get(n, "constexpr" if n in consts else ("fp32" if n == "qk_scale" else "i32")) for n in names}
src = GluonASTSource(fn=jit, signature=sig, constexprs={(names.index(k),): v for k, v in consts.items()},
                     attrs={(names.index(n),): [["tt.divisibility", 16]] for n in ptrs})
opts = {"num_warps": M.NUM_WARPS}
if hasattr(M, "PRODUCER_MAXNREG"):  # kernel "hw": registers at launch (two programs an SM)
    opts["maxnreg"] = M.PRODUCER_MAXNREG
ck = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)
ir, ptx = ck.asm["ttgir"], ck.asm["ptx"]
# the main loop: the longest span from a label back to a branch to it that holds a warp-group
# product (kernel "hw": the consumer's, not the producer's)
labels = {m.group(1): m.start() for m in re.finditer(r"^(\\$L__\\w+):", ptx, re.M)}
spans = [(labels[m.group(1)], m.start()) for m in re.finditer(r"bra(?:\\.uni)?\\s+(\\$L__\\w+);", ptx)
         if labels.get(m.group(1), m.start()) < m.start()]
spans = [s for s in spans if "wgmma.mma_async" in ptx[slice(*s)]] or spans
loop = ptx[slice(*max(spans, key=lambda s: s[1] - s[0]))] if spans else ""
with tempfile.NamedTemporaryFile(suffix=".cubin") as f:  # registers and stack of the built kernel
    f.write(ck.asm["cubin"])
    f.flush()
    tool = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    usage = re.search(r"REG:(\\d+) STACK:(\\d+)", subprocess.run([str(tool), "-res-usage", f.name],
                      capture_output=True, text=True, check=True).stdout)
print(json.dumps({k: ir.count(k) for k in ("ttg.convert_layout", "ttg.local_store", "ttg.local_load")}
                 | {"mma": ptx.count("mma.sync.aligned.m16n8k16"), "wgmma": ptx.count("wgmma.mma_async"),
                    "cp_async": ptx.count("cp.async.ca.shared.global"),
                    "launch_dependents": ptx.count("griddepcontrol.launch_dependents"),
                    "timer": ptx.count("%globaltimer"), "prefetch": ptx.count("prefetch.global.L2"),
                    "prefetch_at": ptx.find("prefetch.global.L2"), "copies_at": ptx.find("cp.async.ca.shared.global"),
                    "last_product_at": ptx.rfind("wgmma.mma_async"),
                    "wait_prior": ptx.count("griddepcontrol.wait"),
                    "wait_before_copies": ptx.find("griddepcontrol.wait") < ptx.find("cp.async.ca.shared.global"),
                    "dependents_after_loop": ptx.rfind("wgmma.mma_async") < ptx.find("griddepcontrol"),
                    # kernel "v": the loop's last fp8 (scores) product, shared-memory store (V^T)
                    # and the first wait after those products; waits that leave one group running
                    "scores_at": ptx.rfind("e4m3.e4m3"), "store_at": ptx.rfind("st.shared"),
                    "scores_wait_at": ptx.find("wgmma.wait_group", ptx.rfind("e4m3.e4m3")),
                    "waits_leaving_one": ptx.count("wgmma.wait_group.sync.aligned 1;"),
                    "waits_leaving_two": ptx.count("wgmma.wait_group.sync.aligned 2;"),
                    "shared": ck.metadata.shared,
                    # the main loop's barriers and scores (fp8) products
                    "loop_barriers": loop.count("bar.sync"), "loop_scores": loop.count("e4m3.e4m3"),
                    # kernel "hw": the stage handed back, the proxy fence after the probabilities' store
                    "loop_arrive_at": loop.find("mbarrier.arrive.shared"), "loop_fence_at": loop.rfind("fence.proxy"),
                    # the N sizes of the fp8 (scores) products
                    "scores_n": sorted({int(n) for n in re.findall(r"m64n(\\d+)k32\\.f32\\.e4m3", ptx)}),
                    # kernel "hw": the copies' arrivals, the barrier waits, the partitions' registers
                    "copies_arrive": ptx.count("cp.async.mbarrier.arrive.noinc"),
                    "barrier_waits": ptx.count("mbarrier.try_wait"), "regs": int(usage.group(1)),
                    "setmaxnreg": sorted({int(n) for n in re.findall(r"setmaxnreg\\.\\w+\\.sync\\.aligned\\.u32\\s+(\\d+)", ptx)}),
                    "stack": int(usage.group(2))}))
"""


def _sm90_build(script: str, *args) -> dict:
    """Run a build script (compiles a kernel for sm_90 with Triton's own ptxas, no GPU needed)
    outside the interpreter; its last output line, as JSON."""
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2] / "kernels"), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-c", script, *(str(x) for x in args)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


_COMBINE_BUILD = """
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from vllm_genesis.turboquant._combine_splits import _tq_combine_splits as jit

pdl, tail, launch = (int(x) for x in sys.argv[1:4])
names = jit.arg_names
ptrs = {"MidO": "*fp32", "MidL": "*fp32", "Q": "*bf16", "KR": "*bf16", "VR": "*bf16", "Out": "*bf16",
        "SeqLens": "*i32", "QStart": "*i32"}
consts = dict(HK=4, G=6, QL=6 if tail else 1, ROWS=36 if tail else 6, D=256, DC=64, S_CHUNK=64,
              QL_PAD=8 if tail else 2, RAW_TAIL=bool(tail), HAS_QSTART=bool(tail), PDL=bool(pdl))
sig = {n: ptrs.get(n, "constexpr" if n in consts else ("fp32" if n == "qk_scale" else "i32")) for n in names}
src = ASTSource(fn=jit, signature=sig, constexprs={(names.index(k),): v for k, v in consts.items()})
ck = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "launch_pdl": bool(launch)})
ptx = ck.asm["ptx"]
wait = ptx.find("griddepcontrol.wait")
loads = [i for i in range(len(ptx)) if ptx.startswith("ld.global", i)]
print(json.dumps({"wait": ptx.count("griddepcontrol.wait"), "loads": len(loads),
                  "loads_before_wait": sum(i < wait for i in loads), "launch_pdl": ck.metadata.launch_pdl}))
"""


def _count_calls(monkeypatch, launcher: str) -> list:
    """Wraps ``stage1.<launcher>`` so that each call appends to the returned list."""
    from vllm_genesis.turboquant import stage1

    calls = []
    real = getattr(stage1, launcher)
    monkeypatch.setattr(stage1, launcher, lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls
