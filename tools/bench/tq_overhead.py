#!/usr/bin/env python3
"""Where a small TurboQuant decode's time goes: stage 1, the combine, the replay floor, the L2 flush.

For each chosen row of ``tools/bench/kernels.py`` (default: the three B=1 decode rows and the
K+1=6 verify row) it times CUDA-graph replays of: an empty graph (one 1-element kernel: the
floor of the method), ours in full, ours with the combine launch left out, ours with stage 1
left out, and bf16 SDPA, each with the L2 emptied by a 256 MiB write and by a 256 MiB read
before every replay (``kernels.py --flush``), plus optional split counts for ours. With
``--cache-tail`` verify rows read their K+1 tail from the cache (stage 1, causal) instead of
the raw tensors (the combine). With ``--in-graph`` each case is also timed as a node among
others of one graph (``kernels.bench_in_graph``, read flush: no graph launch timed with it).

    python tools/bench/tq_overhead.py [--rows 0,1,2,3] [--splits 32,64,128] [--cache-tail] [--tiles EXPR] [--in-graph] [--json out.json]
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


class _Skip:
    """Stands in for a Triton kernel whose launch is left out of a replay; as a Gluon kernel's
    launch helper it returns the column order that kernel leaves its partials in, so the
    combine timed alone is built as it runs after that kernel."""

    def __init__(self, partial_order=None):
        self.partial_order = partial_order

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None

    def __call__(self, *args, **kwargs):  # the Gluon kernels' launch helpers
        return self.partial_order


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="0,1,2,3", help="indexes into kernels.py's ROWS")
    ap.add_argument("--row-spec", action="append", default=[], help="a row 'kind,B,context,Hq,Hk,D,query_len' instead")
    ap.add_argument("--splits", default="", help="extra split counts to time for ours (comma-separated)")
    ap.add_argument("--tiles", default=None, help="a TileConfig expression for ours (default: the launcher's own)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--in-graph", action="store_true", help="also time each case inside a larger graph (read flush)")
    ap.add_argument("--cache-tail", action="store_true",
                    help="verify rows: read the K+1 tail from the cache (key=value=None) instead of the raw tensors")
    a = ap.parse_args()
    import kernels as bench  # tools/bench/kernels.py
    from vllm_genesis.turboquant import tq_decode_attention, tq_verify_attention
    from vllm_genesis.turboquant import combine, stage1
    from vllm_genesis.turboquant._wgmma_decode import partial_order
    from vllm_genesis.turboquant._wgmma_verify import PARTIAL_ORDER_V
    from vllm_genesis.turboquant.tiles import TileConfig

    tiles = eval(a.tiles, {"T": TileConfig, "TileConfig": TileConfig}) if a.tiles else None

    bench.ARGS = argparse.Namespace(flush="write", rep_ms=100, tune=False, tiny=False)
    copy = bench.copy_rate()
    print(f"copy rate (read+write) {copy / 1e12:.3f} TB/s", flush=True)
    tiny = torch.zeros(1, device=bench.DEV)
    results = []
    rows = [bench.parse_row_spec(spec) for spec in a.row_spec]
    for row in rows or [bench.ROWS[int(i)] for i in a.rows.split(",")]:
        kind, B, L, Hq, Hk, D, QL = row
        x = bench.row_inputs(row)
        lay, cache, bt, seq_lens, q, out, kt, qsl = x.lay, x.cache, x.bt, x.seq_lens, x.q, x.out, x.kt, x.qsl
        kb = torch.randn(B, Hk, L, D, device=bench.DEV, dtype=torch.bfloat16)
        vb = torch.randn(B, Hk, L, D, device=bench.DEV, dtype=torch.bfloat16)
        qv = q.view(B, QL, Hq, D).transpose(1, 2)
        mask = torch.ones(QL, L, dtype=torch.bool, device=bench.DEV).tril(L - QL) if QL > 1 else None
        nbytes = (L - (QL if kind == "verify" else 0)) * B * Hk * lay.slot_size

        def ours(splits=None):
            if kind == "decode":
                return lambda: tq_decode_attention(q, cache, bt, seq_lens, layout=lay, out=out, num_splits=splits,
                                                   tiles=tiles, overlap_prior=True)
            raw = None if a.cache_tail else kt
            return lambda: tq_verify_attention(q, raw, raw, cache, bt, seq_lens, qsl, QL, layout=lay, out=out,
                                               num_splits=splits, tiles=tiles)

        def sdpa():
            return torch.nn.functional.scaled_dot_product_attention(qv, kb, vb, attn_mask=mask, enable_gqa=True)

        orders = {"launch_wgmma_decode": partial_order(D), "launch_wgmma_verify": PARTIAL_ORDER_V}

        def without(names, fn):
            # the kernel and the launch functions by name: the combine's in ``combine``, stage 1's in ``stage1``
            mods = {n: combine if n == "_tq_combine_splits" else stage1 for n in names}
            saved = {n: getattr(mods[n], n) for n in names}

            def run():
                for n in names:
                    setattr(mods[n], n, _Skip(orders.get(n)))
                try:
                    fn()
                finally:
                    for n, k in saved.items():
                        setattr(mods[n], n, k)
            return run

        stage1_names = ("_tq_dequant_split_words", "_tq_dequant_split_fp8_pages", "_tq_dequant_split_tokens",
                        "_tq_fp8_scores", "_tq_per_warp_softmax", "launch_gluon_mma_decode", "launch_wgmma_decode",
                        "launch_wgmma_verify")
        cases = [("empty graph", lambda: tiny.add_(1.0)), ("ours", ours()),
                 ("ours, stage 1 only", without(("_tq_combine_splits",), ours())),
                 ("ours, combine only", without(stage1_names, ours())), ("sdpa", sdpa)]
        cases += [(f"ours S={s}", ours(int(s))) for s in a.splits.split(",") if s]
        res = dict(row=list(row), cache_bytes=nbytes, times={})
        for mode in ("write", "read"):
            bench.ARGS.flush = mode
            for name, fn in cases:
                ms = bench.bench_graph(fn)
                res["times"][f"{name} [{mode}]"] = ms
                if mode == "read" and a.in_graph:
                    res["times"][f"{name} [in graph]"] = bench.bench_in_graph(fn)
        results.append(res)
        print(f"\n{kind} B={B} ctx={L} Hq={Hq} Hk={Hk} D={D} QL={QL}: {nbytes / 1e6:.1f} MB of cache")
        print(f"  {'':28s} {'write-flush ms':>14s} {'read-flush ms':>13s} {'ours-read %copy':>15s}"
              f" {'in graph ms':>11s} {'%copy':>6s}")
        for name, _ in cases:
            w, r = res["times"][f"{name} [write]"], res["times"][f"{name} [read]"]
            g = res["times"].get(f"{name} [in graph]", float("nan"))
            ours_row = name.startswith("ours")
            pct = 100 * nbytes / (r * 1e-3) / copy if ours_row else float("nan")
            gpct = 100 * nbytes / (g * 1e-3) / copy if ours_row and g > 0 else float("nan")
            print(f"  {name:28s} {w:14.4f} {r:13.4f} {pct:15.1f} {g:11.4f} {gpct:6.1f}", flush=True)
        del cache, bt, kb, vb
        torch.cuda.empty_cache()
    if a.json:
        Path(a.json).write_text(json.dumps(dict(copy_rate_GBps=copy / 1e9, rows=results), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
