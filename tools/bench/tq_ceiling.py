#!/usr/bin/env python3
"""What the benchmark's timing method allows a kernel that only reads a row's bytes.

For each chosen row of ``tools/bench/kernels.py`` a plain streaming read of exactly the
row's cache bytes (int32 words, contiguous, one partial sum a program; the best of a few grid
shapes) is timed the way ``kernels.py`` times ours: CUDA-graph replays with the L2 emptied
before each by a 256 MiB write and by a 256 MiB read (``--flush``), and as a node among others
of one graph (``bench_in_graph``). Next to it an empty graph (one 1-element kernel) per
replay. Its "% copy" is the ceiling of that column of the table for that row: a kernel that
must read those bytes and does nothing else.

    python tools/bench/tq_ceiling.py [--rows 0,1,2,3] [--json out.json]
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
def _read_words(X, Out, n_words, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    base = pid * (BLOCK * ITERS)
    for i in range(ITERS):
        offs = base + i * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(X + offs, mask=offs < n_words, other=0)
    tl.store(Out + pid, tl.sum(acc, axis=0))


def reader(x: torch.Tensor, out: torch.Tensor, block: int, iters: int):
    n = x.numel()
    grid = (triton.cdiv(n, block * iters),)
    assert grid[0] <= out.numel()
    return lambda: _read_words[grid](x, out, n, BLOCK=block, ITERS=iters, num_warps=4)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="0,1,2,3", help="indexes into kernels.py's ROWS")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    import kernels as bench  # tools/bench/kernels.py
    from vllm_genesis.turboquant import TQLayout

    bench.ARGS = argparse.Namespace(flush="write", rep_ms=100, tune=False, tiny=False)
    cbps = bench.copy_rate()
    print(f"device: {torch.cuda.get_device_name(0) if bench.DEV == 'cuda' else 'cpu'}; "
          f"D2D copy rate (read+write): {cbps / 1e12:.3f} TB/s", flush=True)
    one = torch.zeros(1, device=bench.DEV)
    results = dict(copy_rate_GBps=cbps / 1e9, rows=[])
    shapes = [(2048, 1), (2048, 4), (4096, 2), (1024, 8)] if bench.DEV == "cuda" else [(64, 2)]
    for idx in (int(i) for i in a.rows.split(",")):
        kind, B, L, Hq, Hk, D, QL = bench.ROWS[idx]
        lay = TQLayout.from_preset("turboquant_k8v4", D)
        nbytes = (L - (QL if kind == "verify" else 0)) * B * Hk * lay.slot_size
        if bench.DEV != "cuda":
            nbytes = min(nbytes, 1 << 16)
        x = torch.randint(-1000, 1000, (nbytes // 4,), dtype=torch.int32, device=bench.DEV)
        out = torch.empty(x.numel() // 64 + 1, dtype=torch.int32, device=bench.DEV)
        # the sum is checked once: every word read
        fn = reader(x, out, *shapes[0])
        fn()
        grid = triton.cdiv(x.numel(), shapes[0][0] * shapes[0][1])
        assert int(out[:grid].sum()) == int(x.sum()), "reader lost words"
        line = dict(row=bench.ROWS[idx], bytes=nbytes)
        for flush in ("write", "read"):
            bench.ARGS.flush = flush
            line[f"empty_{flush}_ms"] = bench.bench_graph(lambda: one.add_(1.0))
            best = None
            for blk, it in shapes:
                ms = bench.bench_graph(reader(x, out, blk, it))
                if best is None or ms < best[0]:
                    best = (ms, blk, it)
            line[f"read_{flush}_ms"], line[f"read_{flush}_shape"] = best[0], best[1:]
            line[f"read_{flush}_in_graph_ms"] = bench.bench_in_graph(reader(x, out, best[1], best[2]))
            for key in (f"read_{flush}_ms", f"read_{flush}_in_graph_ms"):
                line[key.replace("_ms", "_pct_copy")] = 100 * nbytes / (line[key] * 1e-3) / cbps
        results["rows"].append(line)
        print(f"row {idx} {kind} B={B} L={L} D={D} q={QL}: {nbytes / 1e6:.1f} MB; "
              + "; ".join(f"{f} flush: empty graph {line[f'empty_{f}_ms']:.4f} ms, read {line[f'read_{f}_ms']:.4f} ms "
                          f"({line[f'read_{f}_pct_copy']:.1f}% copy; in a graph {line[f'read_{f}_in_graph_ms']:.4f}, "
                          f"{line[f'read_{f}_in_graph_pct_copy']:.1f}%)" for f in ("write", "read")), flush=True)
        del x, out
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
