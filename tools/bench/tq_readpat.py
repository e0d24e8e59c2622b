#!/usr/bin/env python3
"""Read-pattern probe for the TurboQuant cache (H200 sweeps in docs/KERNELS.md).

Times, with the L2 flushed before each CUDA-graph replay, (1) a Triton kernel that only
reads the cache the way stage 1 does (one program per split x KV head x sequence, each
reading its head's slots of every page: Hk-strided chunks of ``slot`` bytes), (2) one that
reads the same bytes as whole pages (every head of a page in one program), each with a
shuffled and with an in-order block table, and (3) ``tq_decode_attention`` with both tables.
It tells whether the per-head strided reads or the page placement cap the bandwidth.

    python tools/bench/tq_readpat.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "kernels"))
sys.path.insert(0, str(REPO / "tools" / "bench"))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _read_kernel(KVW, BT, Out, stride_kbw, stride_bt, pages_per_prog, n_pages, HEAD_W, CHUNK_W: tl.constexpr,
                 ROWS: tl.constexpr, ROW_STRIDE_W, SPAN: tl.constexpr, PP: tl.constexpr):
    """Each program sums ``ROWS`` chunks of ``CHUNK_W`` words (stride ROW_STRIDE_W) per page."""
    sid = tl.program_id(0)
    h = tl.program_id(1)
    b = tl.program_id(2)
    r = tl.arange(0, ROWS)
    w = tl.arange(0, SPAN)
    off = r[:, None] * ROW_STRIDE_W + w[None, :]
    m = w[None, :] < CHUNK_W
    pp = tl.arange(0, PP)
    acc = tl.zeros([PP, ROWS, SPAN], dtype=tl.int32)
    p0 = sid * pages_per_prog
    p1 = tl.minimum(p0 + pages_per_prog, n_pages)
    for p in range(p0, p1, PP):
        blk = tl.load(BT + b.to(tl.int64) * stride_bt + tl.minimum(p + pp, n_pages - 1)).to(tl.int64)
        base = blk * stride_kbw + h * HEAD_W
        acc ^= tl.load(KVW + base[:, None, None] + off[None, :, :], mask=m[None, :, :], other=0)
    tl.store(Out + (b * tl.num_programs(1) + h) * tl.num_programs(0) + sid, tl.sum(tl.sum(tl.sum(acc, 2), 1), 0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import kernels as kb

    kb.ARGS = argparse.Namespace(rep_ms=100, tiny=False)
    from vllm_genesis.turboquant import TQLayout, pick_num_splits, tq_decode_attention
    from vllm_genesis.turboquant._launch import split_workspace
    from vllm_genesis.turboquant.tiles import TileConfig, default_tiles

    dev = "cuda"
    res = []
    for B, L, Hq, Hk, D in ((1, 32768, 24, 4, 256), (8, 32768, 32, 8, 128), (1, 131072, 24, 4, 256)):
        lay = TQLayout.from_preset("turboquant_k8v4", D)
        cache, bt_rand = kb.build_cache(B, L, Hk, D, layout=lay)
        nb = bt_rand.shape[1]
        bt_seq = torch.arange(B * nb, dtype=torch.int32, device=dev).reshape(B, nb)
        slot = lay.slot_size_aligned
        page = cache.shape[1]
        nbytes = B * L * Hk * lay.slot_size
        kvw = cache.view(torch.int32)
        S = pick_num_splits(B, Hk, L, 132)
        out = torch.empty(B * Hk * S * Hk, dtype=torch.int32, device=dev)
        q = torch.randn(B, Hq, D, device=dev).to(torch.bfloat16)
        sl = torch.full((B,), L, dtype=torch.int32, device=dev)
        o = torch.empty_like(q)
        row = dict(shape=f"B={B} L={L} Hk={Hk} D={D}", bytes=nbytes, splits=S)
        for tname, bt in (("shuffled", bt_rand), ("in-order", bt_seq)):
            for mode in ("per-head", "whole-page"):
                for pp in (1, 4):
                    if mode == "per-head":
                        grid = (S, Hk, B)
                        ppp = -(-nb // S)
                        kw = dict(HEAD_W=slot // 4, CHUNK_W=slot // 4, ROWS=page, ROW_STRIDE_W=Hk * slot // 4,
                                  SPAN=triton.next_power_of_2(slot // 4))
                    else:
                        grid = (S * Hk, 1, B)
                        ppp = -(-nb // (S * Hk))
                        kw = dict(HEAD_W=0, CHUNK_W=Hk * slot // 4, ROWS=page, ROW_STRIDE_W=Hk * slot // 4,
                                  SPAN=triton.next_power_of_2(Hk * slot // 4))
                    if mode == "whole-page" and kw["SPAN"] * page * pp > 16384:
                        continue

                    def fn(grid=grid, ppp=ppp, kw=kw, bt=bt, pp=pp):
                        _read_kernel[grid](kvw, bt, out, cache.stride(0) // 4, bt.stride(0), ppp, nb, PP=pp,
                                           num_warps=4, **kw)

                    ms = kb.bench_graph(fn)
                    row[f"read {mode} pp{pp} {tname}"] = (ms, nbytes / ms / 1e6)
            ws = split_workspace(B, Hk, S, Hq // Hk, D, dev)
            for hm in (False, True):
                t = default_tiles(D, 16, True, B * Hk, L)
                t = TileConfig(**{**t.__dict__, "head_major": hm})
                ms = kb.bench_graph(lambda bt=bt, t=t: tq_decode_attention(q, cache, bt, sl, layout=lay, num_splits=S,
                                                                           out=o, workspace=ws, tiles=t))
                row[f"decode {tname}" + (" head-major" if hm else "")] = (ms, nbytes / ms / 1e6)
        res.append(row)
        print(row["shape"], f"S={S}", flush=True)
        for k, v in row.items():
            if isinstance(v, tuple):
                print(f"   {k:36s} {v[0]:.4f} ms  {v[1] / 1e3:.2f} TB/s", flush=True)
        del cache
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
