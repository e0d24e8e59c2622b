#!/usr/bin/env python3
"""Compile TurboQuant stage-1 kernels for sm_90 without a GPU and summarise their SASS.

    PYTHONPATH=<triton 3.6 package dir> python tools/bench/tq_sass.py [--dump DIR] [--only TEXT]
    python tools/bench/tq_sass.py --plans --dump DIR [--only TEXT]   # every build the plans launch
    python tools/bench/tq_sass.py --compare DIR_A DIR_B             # the same SASS in both?

``--plans`` (``tq_plans.py``) runs the public launchers on CPU tensors with every kernel
launch recorded instead of run, over the benchmark rows and the shapes, presets and tile
requests the tests reach, on an sm_90 device as the plans see it (Hopper, 132 SMs), and
compiles each distinct build once as Triton would at that launch (its own argument
specialisation); it writes ``CASE.N.sass`` per distinct build and ``plans.json`` (case ->
builds).
``--compare`` diffs two such folders with the kernels' symbol names normalised.

Uses ``triton.compile`` with an sm_90 target (Triton's bundled ptxas / cuobjdump), for the
shapes of the benchmark rows, and prints registers, spills, shared memory and the SASS
opcode counts of the main loop (the longest backward branch), divided by the tokens one
loop iteration handles (warp instructions per token). A static count, not a measurement.
Covers the Triton kernels "n" and "w" (``CONFIGS``) and the Gluon kernel "h" (``H_CONFIGS``:
its constexprs as the launcher passes them; one 64-token tile a loop iteration).
"""

from __future__ import annotations

import argparse
import inspect
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "kernels"))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from vllm_genesis.turboquant._dequant_split import dequant_path  # noqa: E402
from vllm_genesis.turboquant._dequant_split_pages import _tq_dequant_split_fp8_pages  # noqa: E402
from vllm_genesis.turboquant._dequant_split_tokens import _tq_dequant_split_tokens  # noqa: E402
from vllm_genesis.turboquant._dequant_split_words import _tq_dequant_split_words  # noqa: E402
from vllm_genesis.turboquant._per_warp_softmax import _tq_per_warp_softmax  # noqa: E402
from vllm_genesis.turboquant.layout import TQLayout  # noqa: E402

PTR = {"QR": "*bf16", "KV": "*u8", "BT": "*i32", "SeqLens": "*i32", "QStart": "*i32", "Cent": "*bf16",
       "MidO": "*fp32", "MidL": "*fp32"}
INTS = ["stride_qt", "stride_qh", "stride_kb", "stride_kp", "stride_kh", "stride_bt", "num_splits"]


def compile_stage1(fn, *, G, QL, D, Hk, block_n, warps, stages, extra, page=16, maxnreg=None, m_pad=None,
                   preset="turboquant_k8v4"):
    lay = TQLayout.from_preset(preset, D)
    slot = lay.slot_size_aligned
    rows = G * QL
    m_pad = m_pad or max(16, 1 << (rows - 1).bit_length())
    consts = dict(HK=Hk, G=G, QL=QL, ROWS=rows, M_PAD=m_pad, D=D, PAGE=page, KEY_FP8=lay.key_fp8,
                  MSE_BITS=lay.mse_bits, NORM_CORR=lay.norm_correction, VQB=lay.value_bits, KPS=lay.key_packed_size,
                  VAL_BYTES=lay.value_data_bytes, BLOCK_N=block_n, ALIGN=4 if slot % 4 == 0 else 2,
                  RAW_TAIL=QL > 1, HAS_QSTART=QL > 1, FP8_E4B15=0, DOT_BF16=False, **extra)
    jit = fn
    names = jit.arg_names
    sig = {}
    for n in names:
        if n == "Cent" and not lay.key_fp8:  # MSE keys: fp32 centroids or int32 centroid pairs
            sig[n] = "*i32" if extra.get("CPAIR") else "*fp32"
        elif n in PTR:
            sig[n] = PTR[n]
        elif n in INTS:
            sig[n] = "i32"
        elif n == "qk_scale":
            sig[n] = "fp32"
        else:
            sig[n] = "constexpr"
    # which ints are divisible by 16 in the benchmark (Triton specialises on it)
    div16 = {"stride_qt": True, "stride_qh": True, "stride_kb": (page * Hk * slot) % 16 == 0,
             "stride_kp": (Hk * slot) % 16 == 0, "stride_kh": slot % 16 == 0, "stride_bt": False}
    attrs = {}
    for i, n in enumerate(names):
        if n in PTR or div16.get(n):
            attrs[(i,)] = [["tt.divisibility", 16]]
    cx = {(names.index(k),): v for k, v in consts.items() if k in names}
    for i, prm in enumerate(jit.params):  # constexprs left at their defaults
        if prm.is_constexpr and (i,) not in cx:
            cx[(i,)] = prm.default
    for n in names:
        if sig[n] == "constexpr" and (names.index(n),) not in cx:
            sig.pop(n)
    src = ASTSource(fn=jit, signature=sig, constexprs=cx, attrs=attrs)
    opts = {"num_warps": warps, "num_stages": stages}
    if maxnreg:
        opts["maxnreg"] = maxnreg
    ck = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)
    return ck


def compile_h(**consts):
    """Kernel "h" for sm_90 with the launcher's constexprs (``consts``: HK, G, D, R, QL, QPP,
    HAS_QSTART, PF, ...; the cache slot and strides follow from D and HK)."""
    from triton.experimental.gluon._runtime import GluonASTSource

    from vllm_genesis.turboquant._wgmma_decode import NUM_WARPS, _tq_wgmma_decode as fn

    d, hk = consts["D"], consts["HK"]
    slot = d + d // 2 + 4
    consts = dict(SKP=hk * slot, SKH=slot, PAGE=16, STAGES=2, PDL=True, TL=None) | consts
    for name, par in inspect.signature(fn.fn).parameters.items():  # constexprs not given: their defaults
        if "constexpr" in str(par.annotation) and par.default is not par.empty:
            consts.setdefault(name, par.default)
    ptrs = {"QR": "*bf16", "KV": "*u8", "BT": "*i32", "SeqLens": "*i32", "QStart": "*i32", "MidO": "*fp32",
            "MidL": "*fp32"}
    names = fn.arg_names
    sig = {n: ptrs.get(n, "constexpr" if n in consts else ("fp32" if n == "qk_scale" else "i32")) for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
             if n in ptrs or n in ("stride_qt", "stride_qh", "stride_kw")}
    src = GluonASTSource(fn=fn, signature=sig, constexprs={(names.index(k),): v for k, v in consts.items()},
                         attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": NUM_WARPS})


def sass_of(ck) -> str:
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(ck.asm["cubin"])
        f.flush()
        return subprocess.run([str(tool), "-sass", f.name], capture_output=True, text=True, check=True).stdout


def res_usage(ck) -> str:
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(ck.asm["cubin"])
        f.flush()
        out = subprocess.run([str(tool), "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+)", out)
    return f"regs {m.group(1)} stack {m.group(2)} smem {m.group(3)}" if m else out.strip()[-200:]


def loop_stats(sass: str):
    lines = [ln for ln in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4,}\*/", ln)]
    addr = []
    ops = []
    for ln in lines:
        m = re.match(r"\s+/\*([0-9a-f]+)\*/\s+(.*?);", ln)
        if not m:
            continue
        addr.append(int(m.group(1), 16))
        ops.append(m.group(2))
    best = None
    for i, op in enumerate(ops):
        m = re.search(r"BRA\s+(?:`\(\.L_x_\d+\)\s*)?0x([0-9a-f]+)", op) or re.search(r"BRA.*?\(\.L_x_(\d+)\)", op)
        mm = re.search(r"0x([0-9a-f]+)", op) if "BRA" in op else None
        if mm:
            tgt = int(mm.group(1), 16)
            if tgt < addr[i]:
                j = addr.index(tgt) if tgt in addr else None
                if j is not None and (best is None or i - j > best[1] - best[0]):
                    best = (j, i)
    if best is None:
        return len(ops), Counter()
    body = ops[best[0] : best[1] + 1]
    c = Counter()
    for op in body:
        op = re.sub(r"^@!?U?P\w+\s+", "", op)
        c[op.split()[0].split(".")[0]] += 1
    return len(body), c


class Cfg(NamedTuple):
    """A Triton stage-1 build: kernel ("n" or "w"), group, query tokens, head size, KV heads,
    tile, warps, stages, extra constexprs, register cap, cache preset."""

    kind: str
    G: int
    QL: int
    D: int
    Hk: int
    block_n: int
    warps: int
    stages: int
    extra: dict
    maxnreg: int | None
    preset: str = "turboquant_k8v4"


CONFIGS = {
    "n64 D128 G4 r168 (default B>=32 pairs)": Cfg("n", 4, 1, 128, 8, 64, 4, 3, dict(SZW=True, FUSE_SUMS=True), 168),
    "w64x4 D128 G4 pipeliner": Cfg("w", 4, 1, 128, 8, 64, 4, 3, dict(ASM=True, NW=4), None),
    "w64x4 D128 G4 s2": Cfg("w", 4, 1, 128, 8, 64, 4, 2, dict(ASM=True, NW=4), None),
    "w64x4 D128 G4 pf": Cfg("w", 4, 1, 128, 8, 64, 4, 1, dict(ASM=True, NW=4, PREFETCH=True), None),
    "w128x4 D128 G4 s2": Cfg("w", 4, 1, 128, 8, 128, 4, 2, dict(ASM=True, NW=4), None),
    "w128x4 D128 G4 pf": Cfg("w", 4, 1, 128, 8, 128, 4, 1, dict(ASM=True, NW=4, PREFETCH=True), None),
    "w64x4 D128 G4 s3 r128": Cfg("w", 4, 1, 128, 8, 64, 4, 3, dict(ASM=True, NW=4), 128),
    "w64x4 D128 G4 s2 r168": Cfg("w", 4, 1, 128, 8, 64, 4, 2, dict(ASM=True, NW=4), 168),
    "w64x4 D128 G4 s3 r168": Cfg("w", 4, 1, 128, 8, 64, 4, 3, dict(ASM=True, NW=4), 168),
    "w64x4 D128 G4 pf r168": Cfg("w", 4, 1, 128, 8, 64, 4, 1, dict(ASM=True, NW=4, PREFETCH=True), 168),
    "w64x4 D256 G6 s2 vsplit2": Cfg("w", 6, 1, 256, 4, 64, 4, 2, dict(ASM=True, NW=4, VSPLIT=2), None),
    "w64x4 D256 G6 pf vsplit2": Cfg("w", 6, 1, 256, 4, 64, 4, 1, dict(ASM=True, NW=4, VSPLIT=2, PREFETCH=True), None),
    "w64x4 D256 G6 s2 vsplit4": Cfg("w", 6, 1, 256, 4, 64, 4, 2, dict(ASM=True, NW=4, VSPLIT=4), None),
    "w32x2 D256 G6 s2 vsplit2": Cfg("w", 6, 1, 256, 4, 32, 2, 2, dict(ASM=True, NW=2, VSPLIT=2), None),
    "n64 D256 G6 pf W4 (default B=1)": Cfg("n", 6, 1, 256, 4, 64, 4, 1, dict(PREFETCH=True, WORDS=4, SZW=True, FUSE_SUMS=True), None),
    "w32x2 D128 G4 s3": Cfg("w", 4, 1, 128, 8, 32, 2, 3, dict(ASM=True, NW=2), None),
    # MSE-key presets, with and without the centroid-pair table
    "n32x4 D256 G6 pairs 4bit_nc": Cfg("n", 6, 1, 256, 4, 32, 4, 1, dict(CPAIR=True), None, "turboquant_4bit_nc"),
    "n32x4 D256 G6 per-index 4bit_nc": Cfg("n", 6, 1, 256, 4, 32, 4, 1, {}, None, "turboquant_4bit_nc"),
    "n64x4 D256 G6 pairs 4bit_nc": Cfg("n", 6, 1, 256, 4, 64, 4, 1, dict(CPAIR=True), None, "turboquant_4bit_nc"),
    "n64x4 D256 G6 pairs pf (default few pairs) 4bit_nc": Cfg("n", 6, 1, 256, 4, 64, 4, 1, dict(CPAIR=True, PREFETCH=True), None, "turboquant_4bit_nc"),
    "n32x4 D256 G6 pairs 3bit_nc": Cfg("n", 6, 1, 256, 4, 32, 4, 1, dict(CPAIR=True), None, "turboquant_3bit_nc"),
    "n32x4 D256 G6 per-index 3bit_nc": Cfg("n", 6, 1, 256, 4, 32, 4, 1, {}, None, "turboquant_3bit_nc"),
    "n128x4 D256 G6 pairs (default few pairs) 3bit_nc": Cfg("n", 6, 1, 256, 4, 128, 4, 1, dict(CPAIR=True), None, "turboquant_3bit_nc"),
    "n64x4 D256 G6 pairs pf table 4bit_nc": Cfg("n", 6, 1, 256, 4, 64, 4, 1, dict(CPAIR=True, PREFETCH=True, PAIR_TABLE=True), None, "turboquant_4bit_nc"),
    "n128x4 D256 G6 pairs table 3bit_nc": Cfg("n", 6, 1, 256, 4, 128, 4, 1, dict(CPAIR=True, PAIR_TABLE=True), None, "turboquant_3bit_nc"),
    "n16x4 D256 G6 K+1=6 pairs (verify) 4bit_nc": Cfg("n", 6, 6, 256, 4, 16, 4, 1, dict(CPAIR=True), None, "turboquant_4bit_nc"),
    "n16x4 D256 G6 K+1=6 pairs table (default verify few pairs) 4bit_nc": Cfg("n", 6, 6, 256, 4, 16, 4, 1, dict(CPAIR=True, PAIR_TABLE=True), None, "turboquant_4bit_nc"),
    "n32x2 D128 G4 pairs 4bit_nc": Cfg("n", 4, 1, 128, 8, 32, 2, 1, dict(CPAIR=True), None, "turboquant_4bit_nc"),
    "n32x2 D128 G4 per-index 4bit_nc": Cfg("n", 4, 1, 128, 8, 32, 2, 1, {}, None, "turboquant_4bit_nc"),
    "n32x1 D128 G4 pairs (default) 4bit_nc": Cfg("n", 4, 1, 128, 8, 32, 1, 1, dict(CPAIR=True), None, "turboquant_4bit_nc"),
    "n32x1 D128 G4 pairs pf 4bit_nc": Cfg("n", 4, 1, 128, 8, 32, 1, 1, dict(CPAIR=True, PREFETCH=True), None, "turboquant_4bit_nc"),
    "n16x1 D128 G4 pairs k3v4_nc": Cfg("n", 4, 1, 128, 8, 16, 1, 1, dict(CPAIR=True), None, "turboquant_k3v4_nc"),
    "n16x1 D128 G4 pairs pf (default) k3v4_nc": Cfg("n", 4, 1, 128, 8, 16, 1, 1, dict(CPAIR=True, PREFETCH=True), None, "turboquant_k3v4_nc"),
}


H_CONFIGS = {
    # name: kernel "h"'s constexprs (one 64-token tile a loop iteration, 4 warps)
    "h decode D256 G6": dict(HK=4, G=6, D=256, R=8),
    "h decode D256 G6 pf": dict(HK=4, G=6, D=256, R=8, PF=1),
    "h decode D128 G4": dict(HK=8, G=4, D=128, R=8),
    "h verify D256 G6 K+1=2 (12 rows)": dict(HK=4, G=6, D=256, R=16, QL=2, QPP=2, HAS_QSTART=True),
    "h verify D256 G6 K+1=4 (24 rows)": dict(HK=4, G=6, D=256, R=32, QL=4, QPP=4, HAS_QSTART=True),
}


def report(name, ck, tokens, warps, dump):
    sass = sass_of(ck)
    n, c = loop_stats(sass)
    top = ", ".join(f"{k} {v}" for k, v in c.most_common(14))
    print(f"{name}: {res_usage(ck)} dyn-smem {ck.metadata.shared} | loop {n} instr/warp, "
          f"{n / tokens * warps:.1f} warp-instr/token | {top}", flush=True)
    if dump:
        Path(dump).mkdir(parents=True, exist_ok=True)
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
        (Path(dump) / f"{safe}.sass").write_text(sass)
        (Path(dump) / f"{safe}.ttgir").write_text(ck.asm["ttgir"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", default=None)
    ap.add_argument("--only", default=None, help="substring of the config names")
    ap.add_argument("--plans", action="store_true", help="the builds the launch plans choose (tq_plans.py)")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two --plans dumps")
    a = ap.parse_args()
    if a.compare or a.plans:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import tq_plans

        if a.compare:
            sys.exit(tq_plans.compare(Path(a.compare[0]), Path(a.compare[1])))
        if not a.dump:
            ap.error("--plans needs --dump DIR")
        tq_plans.dump_plans(Path(a.dump), a.only)
        return
    for name, (kind, G, QL, D, Hk, bn, w, st, extra, mr, preset) in CONFIGS.items():
        if a.only and a.only not in name:
            continue
        if kind == "n":  # the kernel "n" build the launcher would pick for this cache and these words
            lay = TQLayout.from_preset(preset, D)
            path = dequant_path(lay.key_fp8, lay.value_bits, D, 16, bn, extra.get("WORDS", 0))
            fn = {"words": _tq_dequant_split_words, "pages": _tq_dequant_split_fp8_pages,
                  "tokens": _tq_dequant_split_tokens}[path]
        else:
            fn = _tq_per_warp_softmax
        try:
            ck = compile_stage1(fn, G=G, QL=QL, D=D, Hk=Hk, block_n=bn, warps=w, stages=st, extra=extra, maxnreg=mr,
                                preset=preset)
        except Exception as exc:  # noqa: BLE001
            print(f"{name}: compile failed: {type(exc).__name__}: {str(exc)[-1500:]}")
            continue
        report(name, ck, bn, w, a.dump)
    for name, consts in H_CONFIGS.items():
        if a.only and a.only not in name:
            continue
        try:
            ck = compile_h(**consts)
        except Exception as exc:  # noqa: BLE001
            print(f"{name}: compile failed: {type(exc).__name__}: {str(exc)[-1500:]}")
            continue
        report(name, ck, 64, 4, a.dump)


if __name__ == "__main__":
    main()
