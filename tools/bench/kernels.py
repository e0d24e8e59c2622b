#!/usr/bin/env python3
"""Benchmark the TurboQuant decode/verify kernels against vLLM 0.24.0's and bf16 SDPA.

One GPU, one run: it measures the device-to-device copy rate first (bytes read + written
per second), checks every kernel against a float64 reference at full size (outputs
poisoned with NaN before each run), then times, for each row of the issue's table, the
0.24.0 kernel (imported from a vendored copy of the 0.24.0 sources), ours and bf16 SDPA,
and prints milliseconds and achieved bandwidth (cache bytes read / time) against the
copy rate.

    python tools/bench/kernels.py --upstream-dir bench-out/upstream [--json out.json] [--tune]
    python tools/bench/kernels.py --rows 0,1,3 --variant 'default@128' --variant 'verify:T(64,4,2,"v",pipe=1)'

``--variant`` times other configurations of ours beside the plan, in the same process and
against the same copy rate: each is first checked against a float64 reference of the row's
own inputs (output poisoned with NaN first), then timed per replay and in a graph.

``--upstream-dir`` holds ``vllm/v1/attention/ops/triton_turboquant_decode.py`` and
``triton_decode_attention.py`` copied from vLLM 0.24.0 plus a two-module ``vllm`` shim
(``vllm.platforms.current_platform``, ``vllm.triton_utils``). ``--tiny`` runs small
shapes (under TRITON_INTERPRET=1 on a CPU it only exercises the code paths).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "kernels"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

ROWS = [
    # kind, B, context, Hq, Hk, D, query tokens per request
    ("decode", 1, 8192, 24, 4, 256, 1),
    ("decode", 1, 32768, 24, 4, 256, 1),
    ("decode", 1, 131072, 24, 4, 256, 1),
    ("verify", 1, 32768, 24, 4, 256, 6),
    ("decode", 8, 32768, 32, 8, 128, 1),
    ("decode", 32, 8192, 32, 8, 128, 1),
]
TINY_ROWS = [
    ("decode", 1, 300, 12, 2, 64, 1),
    ("verify", 2, 301, 12, 2, 64, 6),
    ("decode", 3, 257, 16, 2, 64, 1),
]
BLOCK_SIZE = 16


def parse():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream-dir", default=str(REPO / "bench-out" / "upstream"))
    ap.add_argument("--json", default=None, help="write all numbers here")
    ap.add_argument("--tune", action="store_true", help="also time tile/split variants of ours")
    ap.add_argument("--tiny", action="store_true", help="small shapes (CPU interpreter smoke run)")
    ap.add_argument("--skip-checks", action="store_true")
    ap.add_argument("--rep-ms", type=int, default=200)
    ap.add_argument("--flush", choices=("write", "read", "none"), default="write",
                    help="empty the L2 before each replay by writing 256 MiB (leaves it full of dirty lines) "
                         "or by reading 256 MiB (leaves it clean); 'none' keeps it (a diagnostic: a cache "
                         "smaller than the L2 is then read from it)")
    ap.add_argument("--rows", default=None, help="comma-separated row indexes to run (default: all)")
    ap.add_argument("--row-spec", action="append", default=[],
                    help="an extra row 'kind,B,context,Hq,Hk,D,query_len' (repeatable; only these rows then)")
    ap.add_argument("--variant", action="append", default=[],
                    help="also time this configuration of ours on every row: '[decode:|verify:]EXPR[@S]', EXPR a "
                         "TileConfig expression (T = TileConfig) or 'default' (the plan), S a split count; "
                         "checked against float64 on the row's inputs first (repeatable)")
    return ap.parse_args()


ARGS = None
DEV = "cuda" if torch.cuda.is_available() else "cpu"


def bench(fn) -> float:
    """Median milliseconds; L2 flushed before every run (triton's do_bench)."""
    if DEV != "cuda":
        fn()
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=25, rep=ARGS.rep_ms, return_mode="median"))


_FLUSH = []


def flush_l2() -> None:
    """Evict the L2 before a timed replay.

    ``write`` zeroes 256 MiB: the L2 is then full of dirty lines, and the timed kernel pays
    for writing them back as it evicts them. ``read`` sums 256 MiB that nothing writes: the
    L2 holds clean lines (as after a layer's weight reads) and eviction costs nothing.
    ``none`` leaves what the previous replay read in the L2.
    """
    mode = getattr(ARGS, "flush", "write")
    if mode == "none":
        return
    if not _FLUSH:
        _FLUSH.append(torch.empty(256 << 20, dtype=torch.int8, device=DEV))
        _FLUSH.append(torch.ones(64 << 20, dtype=torch.int32, device=DEV))
        _FLUSH.append(torch.empty((), dtype=torch.int64, device=DEV))
    if mode == "read":
        torch.sum(_FLUSH[1], dim=0, out=_FLUSH[2])
    else:
        _FLUSH[0].zero_()


def _warm_up(fn) -> None:
    """Three calls on a side stream (compiles, allocates) before a CUDA graph captures ``fn``."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)


def bench_graph(fn, reps: int = 60) -> float:
    """Median milliseconds of one CUDA-graph replay of ``fn``, L2 flushed before each."""
    if DEV != "cuda":
        return bench(fn)
    _warm_up(fn)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(5):
        graph.replay()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        flush_l2()
        starts[i].record()
        graph.replay()
        ends[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    del graph
    return float(times[len(times) // 2])


def bench_in_graph(fn, calls: int = 16, reps: int = 21) -> float:
    """Median milliseconds of ``fn`` as one node among others of a CUDA graph, as a model's
    decode step runs it: a graph of ``calls`` x (L2 flush, ``fn``) against one of the same
    flushes alone, replayed in turns; the difference over ``calls``. Unlike ``bench_graph``
    no graph launch is timed with each call (~5 us on an H200, the floor of that method)."""
    if DEV != "cuda":
        return bench(fn)
    flush_l2()  # its buffers exist before the capture
    _warm_up(fn)
    both = torch.cuda.CUDAGraph()
    with torch.cuda.graph(both):
        for _ in range(calls):
            flush_l2()
            fn()
    alone = None  # nothing to subtract without flushes
    if getattr(ARGS, "flush", "write") != "none":
        alone = torch.cuda.CUDAGraph()
        with torch.cuda.graph(alone):
            for _ in range(calls):
                flush_l2()
    diffs = []
    for rep in range(reps + 2):
        t = []
        for g in (both, alone):
            if g is None:
                t.append(0.0)
                continue
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            g.replay()
            e.record()
            torch.cuda.synchronize()
            t.append(s.elapsed_time(e))
        if rep >= 2:  # the first two are warm-up
            diffs.append((t[0] - t[1]) / calls)
    del both, alone
    diffs.sort()
    return float(diffs[len(diffs) // 2])


def copy_rate() -> float:
    """Bytes read + written per second by a large device-to-device copy."""
    n = (2 << 30) if DEV == "cuda" else (16 << 20)
    x = torch.randint(0, 255, (n,), dtype=torch.uint8, device=DEV)
    y = torch.empty_like(x)
    ms = bench(lambda: y.copy_(x))
    del x, y
    return 2 * n / (ms * 1e-3)


def parse_row_spec(spec: str) -> tuple:
    """'kind,B,context,Hq,Hk,D,query_len' -> a row of ``ROWS``' shape."""
    kind, *rest = spec.split(",")
    return (kind, *map(int, rest))


def row_inputs(row):
    """A k8v4 case for one row ``(kind, B, context, Hq, Hk, D, query_len)`` on ``DEV``: a
    namespace with the layout, cache, block table, lengths, bf16 query, an output buffer,
    raw K+1 tail keys (also used as values) and the packed query start offsets."""
    from types import SimpleNamespace

    from vllm_genesis.turboquant import TQLayout

    kind, B, L, Hq, Hk, D, QL = row
    lay = TQLayout.from_preset("turboquant_k8v4", D)
    cache, bt = build_cache(B, L, Hk, D, layout=lay)
    q = torch.randn(B * QL, Hq, D, device=DEV).to(torch.bfloat16)
    return SimpleNamespace(
        lay=lay, cache=cache, bt=bt, seq_lens=torch.full((B,), L, dtype=torch.int32, device=DEV), q=q,
        out=torch.empty_like(q), kt=torch.randn(B * QL, Hk, D, device=DEV).to(torch.bfloat16),
        qsl=torch.arange(0, B * QL + 1, QL, dtype=torch.int32, device=DEV),
    )


def build_cache(B, L, Hk, D, *, layout, tail=0, seed=0):
    """Random valid k8v4-style slots on the device (fp8 keys, 4-bit codes, fp16 scale/zero)."""
    g = torch.Generator(device=DEV).manual_seed(seed)
    nb = math.ceil(L / BLOCK_SIZE)
    total = B * nb + 1
    slot = layout.slot_size_aligned
    cache = torch.empty(total, BLOCK_SIZE, Hk, slot, dtype=torch.uint8, device=DEV)
    keys = (torch.randn(total, BLOCK_SIZE, Hk, D, generator=g, device=DEV) * 1.5)
    cache[..., :D] = keys.to(torch.float8_e4m3fn).view(torch.uint8)
    del keys
    kps, vd = layout.key_packed_size, layout.value_data_bytes
    cache[..., kps : kps + vd] = torch.randint(0, 256, (total, BLOCK_SIZE, Hk, vd), generator=g, device=DEV, dtype=torch.uint8)
    sc = (torch.rand(total, BLOCK_SIZE, Hk, 1, generator=g, device=DEV) * 0.1 + 0.02).half()
    zr = (torch.randn(total, BLOCK_SIZE, Hk, 1, generator=g, device=DEV) * 0.5 - 0.7).half()
    cache[..., kps + vd : kps + vd + 2] = sc.view(torch.uint8)
    cache[..., kps + vd + 2 : kps + vd + 4] = zr.view(torch.uint8)
    perm = torch.randperm(total - 1, generator=g, device=DEV)[: B * nb].to(torch.int32)
    bt = perm.reshape(B, nb).contiguous()
    return cache, bt


def checks(layout_mod, part="all"):
    """Full-size correctness of ours (and 0.24.0's decode) against float64."""
    from vllm_genesis.turboquant import TQLayout, tq_decode_attention, tq_verify_attention
    from vllm_genesis.turboquant.reference import random_case, reference_attention, rel_err

    results = []
    tiny = ARGS.tiny
    cases = [
        # name, preset, seq_lens, qlens, Hq, Hk, D
        ("decode k8v4 B=1 32K+7 G6", "turboquant_k8v4", [32775], None, 24, 4, 256),
        ("decode k8v4 B=64 odd G8", "turboquant_k8v4", [113 + 97 * i for i in range(64)], None, 32, 8, 128),
        ("verify k8v4 B=1 32K K+1=6 G6", "turboquant_k8v4", [32771], [6], 24, 4, 256),
        ("verify k8v4 B=64 K+1<=8 G8", "turboquant_k8v4", [201 + 37 * i for i in range(64)], [1 + i % 8 for i in range(64)], 32, 8, 128),
        ("verify k8v4 B=5 K+1=8 G6", "turboquant_k8v4", [4099, 17, 8, 1025, 3001], [8] * 5, 24, 4, 256),
        ("decode 4bit_nc B=4 G6", "turboquant_4bit_nc", [4097, 999, 2048, 33], None, 24, 4, 256),
        ("decode k3v4_nc B=4 G8", "turboquant_k3v4_nc", [3001, 77, 1500, 2049], None, 32, 8, 128),
        ("decode 3bit_nc B=4 G8", "turboquant_3bit_nc", [3001, 77, 1500, 2049], None, 32, 8, 128),
        ("verify 4bit_nc B=3 K+1=6 G6", "turboquant_4bit_nc", [4097, 999, 33], [6, 6, 6], 24, 4, 256),
        ("verify 3bit_nc B=3 K+1=4 G8", "turboquant_3bit_nc", [4097, 999, 33], [4, 4, 4], 32, 8, 128),
    ]
    if tiny:
        cases = [(n, p, [min(x, 300) for x in s][:3], (q[:3] if q else None), hq // 2, hk // 2, 64) for n, p, s, q, hq, hk, d in cases[:4]]
    if part == "k8v4":
        cases = [c for c in cases if c[1] == "turboquant_k8v4"]
    elif part == "other":
        cases = [c for c in cases if c[1] != "turboquant_k8v4"]
    for case in cases:
        try:
            results.append(_check_case(case))
        except Exception as exc:  # noqa: BLE001 - report and go on with the other cases
            import traceback

            traceback.print_exc()
            results.append(dict(case=case[0], ok=False, error=f"{type(exc).__name__}: {exc}"))
    return results


def _check_case(case):
    from vllm_genesis.turboquant import TQLayout, tq_decode_attention, tq_verify_attention
    from vllm_genesis.turboquant.reference import random_case, reference_attention, rel_err

    name, preset, seqs, qlens, Hq, Hk, D = case
    if True:
        lay = TQLayout.from_preset(preset, D)
        c = random_case(seq_lens=seqs, query_lens=qlens, num_heads=Hq, num_kv_heads=Hk, head_dim=D,
                        block_size=BLOCK_SIZE, layout=lay, device=DEV)
        scale = D**-0.5
        kw = dict(layout=lay, centroids=c["centroids"], PiT=c["PiT"])
        out = torch.full_like(c["query"], float("nan"))
        if qlens is None:
            tq_decode_attention(c["query"], c["kv_cache"], c["block_table"], c["seq_lens"], out=out, **kw)
            ref = reference_attention(c["query"], c["kv_cache"], c["block_table"], c["seq_lens"], lay, scale,
                                      Pi=c["Pi"], centroids=c["centroids"])
        else:
            tq_verify_attention(c["query"], c["key"], c["value"], c["kv_cache"], c["block_table"], c["seq_lens"],
                                c["query_start_loc"], c["max_query_len"], out=out, **kw)
            ref = reference_attention(c["query"], c["kv_cache"], c["block_table"], c["seq_lens"], lay, scale,
                                      query_start_loc=c["query_start_loc"], key=c["key"], value=c["value"],
                                      Pi=c["Pi"], centroids=c["centroids"])
        raw = reference_attention(c["query"], c["kv_cache"], c["block_table"], c["seq_lens"], lay, scale,
                                  query_start_loc=c["query_start_loc"] if qlens else None, raw_kv=c["raw_kv"])
        e, er = rel_err(out, ref), rel_err(out, raw)
        nan = bool(torch.isnan(out).any())
        line = dict(case=name, rel_err_vs_dequant=e, rel_err_vs_raw=er, nan=nan, ok=(e < 1e-2 and not nan))
        if lay.key_fp8:
            # the word-load tile shapes the sweep times, at full size
            from vllm_genesis.turboquant.tiles import TileConfig

            alts = {}
            T = TileConfig
            if qlens is None:
                alt_tiles = (T(32, 4, 1, "n", True, words=4), T(32, 4, 1, "n", 2, words=4), T(64, 4, 1, "n", True, words=2),
                             T(64, 4, 1, "n", 2, words=4), T(32, 4, 1, "n", 2, maxnreg=128, words=4),
                             T(64, 4, 3, maxnreg=168), T(64, 4, 3, maxnreg=168, sz_word=False), T(64, 8, 3),
                             T(64, 4, 1, "n", True, maxnreg=168), T(32, 4, 1, "n", True, words=4, fused_sums=False),
                             T(64, 4, 2, "w", words=2), T(64, 4, 1, "w", True, words=2), T(32, 2, 3, "w", words=2),
                             T(64, 4, 2, "w", words=2, vsplit=2), T(64, 4, 2, "w", words=2, vsplit=4),
                             T(64, 4, 5, "q"), T(64, 4, 5, "q", lazy=8.0), T(64, 4, 1, "q", True), T(64, 4, 5, "n", words=4),
                             T(32, 2, 5, "w", words=2), T(64, 4, 5, "q", maxnreg=128))
            else:
                alt_tiles = (T(32, 4, 3, words=2), T(32, 4, 3, sz_word=False), T(64, 4, 3), T(32, 4, 1, "n", 2, words=2),
                             T(32, 8, 3), T(64, 8, 3), T(64, 4, 2, "w", words=2), T(64, 4, 2, "q"), T(64, 8, 2, "q"),
                             T(64, 4, 2, "q", rsplit=2), T(64, 4, 3, "q", rsplit=3), T(64, 4, 1, "q", True, rsplit=3),
                             T(64, 4, 3, "q", rsplit=8), T(64, 4, 5, "q"), T(64, 4, 5, "q", lazy=-1.0), T(32, 4, 5),
                             T(64, 4, 2, "q", rows_m=True), T(64, 4, 5, "q", 2, rows_m=True),
                             T(32, 4, 5, "q", 2, rows_m=True, lazy=-1.0), T(64, 4, 1, "q", True, rows_m=True))
            for t in alt_tiles:
                o2 = torch.full_like(c["query"], float("nan"))
                if qlens is None:
                    tq_decode_attention(c["query"], c["kv_cache"], c["block_table"], c["seq_lens"], out=o2,
                                        tiles=t, **kw)
                else:
                    tq_verify_attention(c["query"], c["key"], c["value"], c["kv_cache"], c["block_table"],
                                        c["seq_lens"], c["query_start_loc"], c["max_query_len"], out=o2, tiles=t,
                                        **kw)
                e2 = rel_err(o2, ref)
                alts[repr(t)] = e2
                if not (e2 < 1e-2) or torch.isnan(o2).any():
                    line["ok"] = False
            line["alt_tiles_rel_err"] = alts
            print(f"  alt tiles: {max(alts.values()):.2e} max rel_err", flush=True)
        if qlens is None and lay.key_fp8:
            up = upstream_module()
            if up is not None:
                Pi = torch.eye(D, device=DEV)
                uo = up.triton_turboquant_decode_attention(
                    c["query"], c["kv_cache"], c["block_table"], c["seq_lens"], Pi,
                    torch.linspace(-1, 1, 16, device=DEV), scale, mse_bits=0, key_packed_size=D,
                    value_quant_bits=4, key_fp8=True)
                line["upstream_rel_err_vs_dequant"] = rel_err(uo, ref)
        print(f"check {name:34s} rel_err(dequant)={e:.2e} rel_err(raw)={er:.2e} nan={nan} "
              + (f"upstream={line.get('upstream_rel_err_vs_dequant', float('nan')):.2e} " if 'upstream_rel_err_vs_dequant' in line else "")
              + ("OK" if line["ok"] else "FAIL"), flush=True)
        return line


_UP = []


def upstream_module():
    if not _UP:
        mod = None
        d = Path(ARGS.upstream_dir)
        if (d / "vllm" / "v1" / "attention" / "ops" / "triton_turboquant_decode.py").is_file():
            sys.path.insert(0, str(d))
            import importlib

            mod = importlib.import_module("vllm.v1.attention.ops.triton_turboquant_decode")
        else:
            print(f"no upstream copy under {d}; upstream columns skipped")
        _UP.append(mod)
    return _UP[0]


def tile_key(t) -> str:
    return (f"{t.kernel}{t.block_n}x{t.num_warps}w{t.num_stages}s"
            + (f"pf{int(t.prefetch)}" if t.prefetch else "") + (f"r{t.maxnreg}" if t.maxnreg else "")
            + (f"W{t.words}" if t.words else "") + ("" if t.sz_word else "-sz16")
            + ("" if t.fused_sums else "-unfused") + (f"-vs{t.vsplit}" if t.vsplit > 1 else "")
            + (f"-rs{t.rsplit}" if t.rsplit > 1 else "") + (f"-lazy{t.lazy:g}" if t.lazy is not None else "")
            + ("-rowsM" if t.rows_m else "") + (f"-pipe{t.pipe}" if t.pipe else "")
            + ("-producer" if t.producer else "") + ("-vhalves" if t.v_halves else "")
            + ("-splitring" if t.split_ring else "") + ("-warpmax" if t.warp_max else ""))


def parse_variant(spec: str):
    """'[decode:|verify:]EXPR[@S]' -> (the row kind it is for or None, TileConfig or None, splits or None)."""
    from vllm_genesis.turboquant.tiles import TileConfig

    kind = None
    head, sep, rest = spec.partition(":")
    if sep and head in ("decode", "verify"):
        kind, spec = head, rest
    expr, _, s = spec.rpartition("@") if "@" in spec else (spec, "", "")
    expr = expr.strip()
    tiles = None if expr == "default" else eval(expr, {"T": TileConfig, "TileConfig": TileConfig})
    if tiles is not None and not isinstance(tiles, TileConfig):
        raise ValueError(f"--variant {spec!r}: not a TileConfig expression")
    return kind, tiles, (int(s) if s else None)


def time_variants(kind, ours, inputs, nbytes, copy_bps, default_splits):
    """Each ``--variant`` for this row: its error against float64 on the row's inputs (output
    poisoned first; a variant that is wrong or leaves NaN is not timed), then per replay and in
    a graph, with its % of the run's copy rate."""
    from vllm_genesis.turboquant.reference import reference_attention, rel_err

    q, cache, bt, seq_lens, lay, scale, out, qsl, kt, vt = inputs
    if kind == "decode":
        ref = reference_attention(q, cache, bt, seq_lens, lay, scale)
    else:
        ref = reference_attention(q, cache, bt, seq_lens, lay, scale, query_start_loc=qsl, key=kt, value=vt)
    lines = []
    for spec in ARGS.variant:
        line = dict(variant=spec)
        try:
            for_kind, tiles, splits = parse_variant(spec)
            if for_kind not in (None, kind):
                continue
            fn = ours(tiles, splits=splits if splits is not None else default_splits)
            out.fill_(float("nan"))
            fn()
            if DEV == "cuda":
                torch.cuda.synchronize()
            line["rel_err"] = rel_err(out, ref)
            line["nan"] = bool(torch.isnan(out).any())
            line["ok"] = line["rel_err"] < 1e-2 and not line["nan"]
            if line["ok"]:
                line["ms"] = bench_graph(fn)
                line["in_graph_ms"] = bench_in_graph(fn)
                line["replays_rel_err"] = rel_err(out, ref)  # what the timed replays wrote
                line["ok"] = line["replays_rel_err"] < 1e-2
                for key in ("ms", "in_graph_ms"):
                    line[key.replace("ms", "pct_copy")] = 100 * nbytes / (line[key] * 1e-3) / copy_bps
        except Exception as exc:  # noqa: BLE001 - report and go on with the other variants
            line.update(ok=False, error=f"{type(exc).__name__}: {str(exc)[-300:]}")
        lines.append(line)
        if "ms" in line:
            print(f"  variant {spec:58s} {line['ms']:.4f} ms ({line['pct_copy']:.1f}%) in a graph "
                  f"{line['in_graph_ms']:.4f} ms ({line['in_graph_pct_copy']:.1f}%) rel_err {line['rel_err']:.2e} "
                  + ("ok" if line["ok"] else "BAD"), flush=True)
        else:
            print(f"  variant {spec:58s} not timed: {line.get('error') or 'rel_err %.2e nan %s' % (line['rel_err'], line['nan'])}",
                  flush=True)
    return lines


def tune_variants(kind, B, D, rows, S):
    """(label, tiles, splits) of the --tune sweep for one row; the first is the previous default.

    ``S`` is ``pick_num_splits``'s count.
    """
    from vllm_genesis.turboquant.tiles import TileConfig as T
    from vllm_genesis.turboquant.tiles import verify_q_tiles, verify_v_tiles

    if rows > 16:  # verify
        old, s_old = verify_q_tiles(64), S
        v = verify_v_tiles(D, 1 << (rows - 1).bit_length())
        out = [(replace(v, pipe=0), S), (v, max(1, S // 2)), (replace(v, block_n=32), S), (replace(v, num_stages=3), S),
               (T(64, 4, 5, "q", 2, rows_m=True, lazy=-1.0), S // 2), (T(32, 4, 5), S)]
    elif D >= 256:
        old, s_old = T(64, 4, 1, "n", True, words=4), S
        out = [(T(64, 4, 5, "q"), S), (T(64, 4, 5, "q", 2), S), (T(64, 4, 3, "q", 2), S)]
    else:
        old, s_old = T(32, 2, 5, "w", words=2), max(1, S // 4)
        out = [(T(32, 2, 5, "w", words=2), max(1, S // 2)), (T(64, 4, 5, "q", 2), max(1, S // 2))]
    res = [(tile_key(old) + f"-S{s_old} (old default)", old, s_old)]
    return res + [(tile_key(t) + f"-S{s2}", t, s2) for t, s2 in out]


def _default_plan(B, L, D, G, QL, cache, lay, verify):
    """The stage-1 kernel and the split count the launcher uses for this row by default."""
    from vllm_genesis.turboquant.plan import call_plan

    kernel, _, splits = call_plan(cache, lay, B, D, G, QL, L, has_qstart=verify, raw_tail=verify)
    return kernel, splits


def time_row(row, copy_bps):
    from vllm_genesis.turboquant import TQLayout, pick_num_splits, tq_decode_attention, tq_verify_attention
    from vllm_genesis.turboquant._launch import split_workspace
    from vllm_genesis.turboquant.device import num_sms
    from vllm_genesis.turboquant.tiles import TileConfig

    kind, B, L, Hq, Hk, D, QL = row
    lay = TQLayout.from_preset("turboquant_k8v4", D)
    scale = D**-0.5
    cache, bt = build_cache(B, L, Hk, D, layout=lay)
    seq_lens = torch.full((B,), L, dtype=torch.int32, device=DEV)
    g = torch.Generator(device=DEV).manual_seed(1)
    T = B * QL
    q = torch.randn(T, Hq, D, generator=g, device=DEV).to(torch.bfloat16)
    res = dict(kind=kind, B=B, context=L, Hq=Hq, Hk=Hk, D=D, query_len=QL)
    cache_bytes = (L - (QL if kind == "verify" else 0)) * B * Hk * lay.slot_size
    sdpa_bytes = L * B * Hk * D * 2 * 2
    res["cache_bytes"] = cache_bytes
    up = upstream_module()

    if kind == "decode":
        out = torch.empty(T, Hq, D, dtype=torch.bfloat16, device=DEV)
        S = pick_num_splits(B, Hk, L, num_sms(0))
        ws = split_workspace(B, Hk, S, Hq // Hk, D, DEV)
        kernel, S_def = _default_plan(B, L, D, Hq // Hk, 1, cache, lay, False)

        def ours(tiles=None, splits=S_def, dot_bf16=None):
            wsp = ws if splits <= S else split_workspace(B, Hk, splits, Hq // Hk, D, DEV)
            # as vLLM's decode calls it (P40): the lengths and block table written before the forward
            return lambda: tq_decode_attention(q, cache, bt, seq_lens, scale=scale, layout=lay, num_splits=splits,
                                               out=out, workspace=wsp, tiles=tiles, dot_bf16=dot_bf16,
                                               overlap_prior=True)

        if up is not None:
            Pi = torch.eye(D, device=DEV)
            cent = torch.linspace(-1, 1, 16, device=DEV)
            mid = torch.empty(B, Hq, 32, D + 1, dtype=torch.float32, device=DEV)
            uout = torch.empty(B, Hq, D, dtype=torch.bfloat16, device=DEV)
            ulse = torch.empty(B, Hq, dtype=torch.float32, device=DEV)

            def upstream():
                return up.triton_turboquant_decode_attention(
                    q, cache, bt, seq_lens, Pi, cent, scale, mse_bits=0, key_packed_size=D,
                    value_quant_bits=4, key_fp8=True, mid_o_buf=mid, output_buf=uout, lse_buf=ulse,
                    max_num_kv_splits=32)
        kb = torch.randn(B, Hk, L, D, device=DEV, dtype=torch.bfloat16)
        vb = torch.randn(B, Hk, L, D, device=DEV, dtype=torch.bfloat16)
        q4 = q.view(B, Hq, 1, D)

        def sdpa():
            return F.scaled_dot_product_attention(q4, kb, vb, scale=scale, enable_gqa=True)
    else:
        qsl = torch.arange(0, T + 1, QL, dtype=torch.int32, device=DEV)
        kt = torch.randn(T, Hk, D, generator=g, device=DEV).to(torch.bfloat16)
        vt = torch.randn(T, Hk, D, generator=g, device=DEV).to(torch.bfloat16)
        out = torch.empty(T, Hq, D, dtype=torch.bfloat16, device=DEV)
        S = pick_num_splits(B, Hk, L, num_sms(0))
        rows = QL * (Hq // Hk)
        ws = split_workspace(B, Hk, S, rows, D, DEV)
        kernel, S_def = _default_plan(B, L, D, Hq // Hk, QL, cache, lay, True)

        def ours(tiles=None, splits=S_def, dot_bf16=None):
            wsp = ws if splits <= S else split_workspace(B, Hk, splits, rows, D, DEV)
            return lambda: tq_verify_attention(q, kt, vt, cache, bt, seq_lens, qsl, QL, scale=scale, layout=lay,
                                               num_splits=splits, out=out, workspace=wsp, tiles=tiles,
                                               dot_bf16=dot_bf16)

        if up is not None:
            Pi = torch.eye(D, device=DEV)
            cent = torch.linspace(-1, 1, 16, device=DEV)
            ar = torch.arange(0, L + 1, device=DEV, dtype=torch.int32)

            def upstream():
                # 0.24.0 TurboQuantAttentionImpl._prefill_attention, continuation branch:
                # a Python loop over requests, each a decode call with q_len pseudo-rows.
                output = torch.zeros(T, Hq, D, device=DEV, dtype=q.dtype)
                for i in range(B):
                    cached = L - QL
                    o = up.triton_turboquant_decode_attention(
                        query=q[i * QL : (i + 1) * QL], kv_cache=cache,
                        block_table=bt[i : i + 1].expand(QL, -1), seq_lens=ar[cached + 1 : L + 1],
                        Pi=Pi, centroids=cent, scale=scale, mse_bits=0, key_packed_size=D,
                        value_quant_bits=4, key_fp8=True)
                    output[i * QL : (i + 1) * QL] = o.to(q.dtype)
                return output
        kb = torch.randn(B, Hk, L, D, device=DEV, dtype=torch.bfloat16)
        vb = torch.randn(B, Hk, L, D, device=DEV, dtype=torch.bfloat16)
        qv = q.view(B, QL, Hq, D).transpose(1, 2)
        mask = torch.ones(QL, L, dtype=torch.bool, device=DEV).tril(L - QL)

        def sdpa():
            return F.scaled_dot_product_attention(qv, kb, vb, attn_mask=mask, scale=scale, enable_gqa=True)

    res["kernel"] = kernel  # the stage-1 kernel "ours" launches
    res["splits"] = S_def
    res["splits_pick_num_splits"] = S

    def safe(fn, graph=True, timer=bench_graph):
        try:
            return timer(fn) if graph else bench(fn)
        except Exception as exc:  # noqa: BLE001
            print(f"  timing failed: {type(exc).__name__}: {exc}", flush=True)
            return float("nan")

    res["ours_ms"] = safe(ours())
    res["upstream_ms"] = safe(upstream) if up is not None else float("nan")
    res["sdpa_ms"] = safe(sdpa)
    # the same calls as nodes of a larger graph (no graph launch timed with each call)
    res["ours_in_graph_ms"] = safe(ours(), timer=bench_in_graph)
    res["upstream_in_graph_ms"] = safe(upstream, timer=bench_in_graph) if up is not None else float("nan")
    res["sdpa_in_graph_ms"] = safe(sdpa, timer=bench_in_graph)
    res["eager_ours_ms"] = safe(ours(), graph=False)
    res["eager_upstream_ms"] = safe(upstream, graph=False) if up is not None else float("nan")
    res["eager_sdpa_ms"] = safe(sdpa, graph=False)
    if DEV == "cuda":
        fn = ours()
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            fn()
        res["ours_host_us_per_call"] = (time.perf_counter() - t0) / 20 * 1e6
        torch.cuda.synchronize()
    res["sdpa_bytes"] = sdpa_bytes
    if ARGS.variant:
        print(f"  variants of {kind} B={B} L={L} (plan: kernel {kernel}, S={S_def}):", flush=True)
        inputs = (q, cache, bt, seq_lens, lay, scale, out, qsl if kind == "verify" else None,
                  kt if kind == "verify" else None, vt if kind == "verify" else None)
        res["variant_timings"] = time_variants(kind, ours, inputs, cache_bytes, copy_bps, S_def)
    if ARGS.tune:
        variants = {}
        for key, t, s2 in tune_variants(kind, B, D, QL * (Hq // Hk), S):
            variants[key] = safe(ours(t, splits=s2))
        res["variants"] = variants
        print(f"  variants {kind} B={B} L={L}: " + ", ".join(
            f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in variants.items()), flush=True)
    for name, nbytes in (("ours", cache_bytes), ("upstream", cache_bytes), ("sdpa", sdpa_bytes)):
        for timing in ("", "_in_graph"):
            ms = res[f"{name}{timing}_ms"]
            ok = ms == ms and ms > 0
            res[f"{name}{timing}_GBps"] = nbytes / (ms * 1e-3) / 1e9 if ok else float("nan")
            res[f"{name}{timing}_pct_copy"] = 100 * nbytes / (ms * 1e-3) / copy_bps if ok else float("nan")
    del cache, bt, kb, vb
    if DEV == "cuda":
        torch.cuda.empty_cache()
    return res


def _shape_label(r: dict) -> str:
    return f"{r['kind']} {r['B']} {r['context']} {r['Hq']} {r['Hk']} {r['D']}" + (
        f" K+1={r['query_len']}" if r["kind"] == "verify" else "")


def main():
    global ARGS
    ARGS = parse()
    info = dict(device=torch.cuda.get_device_name(0) if DEV == "cuda" else "cpu", torch=torch.__version__)
    import triton

    info["triton"] = triton.__version__
    info["command"] = "python " + " ".join([os.path.relpath(__file__, REPO)] + sys.argv[1:])
    info["flush"] = ARGS.flush
    print(f"device: {info['device']}  torch {info['torch']}  triton {info['triton']}", flush=True)
    cbps = copy_rate()
    info["copy_rate_GBps"] = cbps / 1e9
    print(f"D2D copy rate (read+write): {cbps / 1e12:.3f} TB/s", flush=True)
    from vllm_genesis.turboquant import layout as layout_mod

    # k8v4 (the timed kernels) first, the other presets after the timings
    info["checks"] = [] if ARGS.skip_checks else checks(layout_mod, "k8v4")
    rows = TINY_ROWS if ARGS.tiny else ROWS
    if ARGS.rows:
        rows = [rows[int(i)] for i in ARGS.rows.split(",")]
    if ARGS.row_spec:
        rows = [parse_row_spec(spec) for spec in ARGS.row_spec]
    info["rows"] = []
    for row in rows:
        try:
            r = time_row(row, cbps)
        except Exception:  # noqa: BLE001
            import traceback

            traceback.print_exc()
            continue
        info["rows"].append(r)
        print(f"row {r['kind']} B={r['B']} L={r['context']} Hq={r['Hq']} Hk={r['Hk']} D={r['D']} q={r['query_len']} "
              f"kernel {r['kernel']} S={r['splits']}: graph: upstream {r['upstream_ms']:.4f} ms ours {r['ours_ms']:.4f} ms sdpa {r['sdpa_ms']:.4f} ms"
              f" | eager: upstream {r['eager_upstream_ms']:.4f} ours {r['eager_ours_ms']:.4f} sdpa {r['eager_sdpa_ms']:.4f}"
              f" | ours host {r.get('ours_host_us_per_call', float('nan')):.0f} us/call",
              flush=True)
    if not ARGS.skip_checks:
        info["checks"] += checks(layout_mod, "other")
    print()
    print(f"CUDA-graph replay times, L2 flushed ({ARGS.flush}) before each replay; bandwidth = cache bytes read / time")
    hdr = (f"{'shape (kind B ctx Hq Hk D)':34s} {'upstream ms':>11s} {'ours ms':>9s} {'SDPA ms':>9s} {'x upstr':>8s} "
           f"{'ours GB/s':>9s} {'%copy':>6s} {'upstr GB/s':>10s} {'%copy':>6s} {'SDPA GB/s':>9s} {'%copy':>6s}")
    print(hdr)
    for r in info["rows"]:
        shape = _shape_label(r)
        print(f"{shape:34s} {r['upstream_ms']:11.4f} {r['ours_ms']:9.4f} {r['sdpa_ms']:9.4f} "
              f"{r['upstream_ms'] / r['ours_ms']:8.1f} {r['ours_GBps']:9.0f} {r['ours_pct_copy']:6.1f} "
              f"{r['upstream_GBps']:10.0f} {r['upstream_pct_copy']:6.1f} {r['sdpa_GBps']:9.0f} {r['sdpa_pct_copy']:6.1f}")
    print()
    print("The same calls as nodes of one larger graph (bench_in_graph: no graph launch timed with each call)")
    print(f"{'shape (kind B ctx Hq Hk D)':34s} {'upstream ms':>11s} {'ours ms':>9s} {'SDPA ms':>9s} {'x upstr':>8s} "
          f"{'ours %copy':>10s} {'SDPA %copy':>10s}")
    for r in info["rows"]:
        shape = _shape_label(r)
        print(f"{shape:34s} {r['upstream_in_graph_ms']:11.4f} {r['ours_in_graph_ms']:9.4f} {r['sdpa_in_graph_ms']:9.4f} "
              f"{r['upstream_in_graph_ms'] / r['ours_in_graph_ms']:8.1f} {r['ours_in_graph_pct_copy']:10.1f} "
              f"{r['sdpa_in_graph_pct_copy']:10.1f}")
    if ARGS.variant:
        print()
        print(f"Variants (write flush unless --flush; % of the run's copy rate; {info['device']})")
        print(f"{'shape':34s} {'variant':52s} {'per replay':>16s} {'in a graph':>16s} {'rel_err':>8s}")
        for r in info["rows"]:
            print(f"{_shape_label(r):34s} {'plan (kernel ' + r['kernel'] + ', S=' + str(r['splits']) + ')':52s} "
                  f"{r['ours_ms']:9.4f} ({r['ours_pct_copy']:4.1f}) {r['ours_in_graph_ms']:9.4f} "
                  f"({r['ours_in_graph_pct_copy']:4.1f})")
            for v in r.get("variant_timings", []):
                if "ms" in v:
                    print(f"{'':34s} {v['variant'][:52]:52s} {v['ms']:9.4f} ({v['pct_copy']:4.1f}) "
                          f"{v['in_graph_ms']:9.4f} ({v['in_graph_pct_copy']:4.1f}) {v['rel_err']:8.2e}"
                          + ("" if v["ok"] else " BAD"))
                else:
                    print(f"{'':34s} {v['variant'][:52]:52s} not timed ({v.get('error', 'wrong')[:60]})")
    bad = [c for c in info["checks"] if not c["ok"]]
    print(f"checks: {len(info['checks']) - len(bad)}/{len(info['checks'])} ok")
    bad_variants = [v for r in info["rows"] for v in r.get("variant_timings", []) if not v["ok"]]
    if ARGS.variant:
        print(f"variants: {len(bad_variants)} wrong or failed")
    bad += bad_variants
    if ARGS.json:
        Path(ARGS.json).write_text(json.dumps(info, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
