#!/usr/bin/env python3
"""Time TileConfig variants of the TurboQuant kernels on rows of ``tools/bench/kernels.py``.

Each variant's output is first compared with a float64 reference of the same inputs
(relative error, NaN check; outputs poisoned first), then timed as the median of CUDA-graph
replays with the L2 emptied before each (``kernels.py --flush``). The launcher's own
configuration is always timed first, as the anchor of the run.

    python tools/bench/tq_sweep.py --row 1 --tiles 'T(64, 4, 5, "q", 2)' --tiles 'T(64, 4, 5, "q", 2, key2d=True)@96'

A variant is a TileConfig expression (``T`` = TileConfig), optionally ``@S`` for a split count,
``default`` (the launcher's plan again) or ``no-pairs`` (the plan with MSE keys gathered one
centroid per index instead of from ``centroid_pairs``' table: an A/B in one process).
``--preset`` picks another cache preset than k8v4 for every row (its cache then comes from
``reference.random_case``, quantised on the CPU: slower to build).
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--row", type=int, action="append", default=[], help="index into kernels.py's ROWS")
    ap.add_argument("--row-spec", action="append", default=[], help="a row 'kind,B,context,Hq,Hk,D,query_len'")
    ap.add_argument("--tiles", action="append", default=[])
    ap.add_argument("--flush", choices=("write", "read", "none"), default="read")
    ap.add_argument("--preset", default="turboquant_k8v4", help="cache preset of every row")
    ap.add_argument("--json", default=None)
    ap.add_argument("--in-graph", action="store_true",
                    help="also time each variant as a node among others of one graph (kernels.bench_in_graph)")
    ap.add_argument("--no-pdl", action="store_true", help="kernels h and v without the programmatic dependent combine (graph launches)")
    ap.add_argument("--no-early", action="store_true",
                    help="decode without overlap_prior (kernel h in graphs not a programmatic dependent launch)")
    a = ap.parse_args()
    import kernels as bench  # tools/bench/kernels.py
    from vllm_genesis.turboquant import TQLayout, tq_decode_attention, tq_verify_attention
    from vllm_genesis.turboquant.tiles import TileConfig
    from vllm_genesis.turboquant.reference import random_case, reference_attention, rel_err

    from vllm_genesis.turboquant import combine, stage1

    bench.ARGS = argparse.Namespace(flush=a.flush, rep_ms=100, tune=False, tiny=False)
    if a.no_pdl:
        combine.COMBINE_PDL = False
    pair_gathers = stage1._pair_gathers
    results = []
    rows = [bench.ROWS[i] for i in a.row]
    rows += [bench.parse_row_spec(spec) for spec in a.row_spec]
    for idx, (kind, B, L, Hq, Hk, D, QL) in enumerate(rows):
        mse = {}  # MSE key presets: the store's rotation and centroids
        if a.preset == "turboquant_k8v4":
            x = bench.row_inputs((kind, B, L, Hq, Hk, D, QL))
            lay, cache, bt, seq_lens, q, out, kt, qsl = x.lay, x.cache, x.bt, x.seq_lens, x.q, x.out, x.kt, x.qsl
            vt = kt
        else:
            lay = TQLayout.from_preset(a.preset, D)
            c = random_case(seq_lens=[L] * B, query_lens=None if kind == "decode" else [QL] * B, num_heads=Hq,
                            num_kv_heads=Hk, head_dim=D, block_size=bench.BLOCK_SIZE, layout=lay, device=bench.DEV)
            cache, bt, seq_lens, q, qsl = c["kv_cache"], c["block_table"], c["seq_lens"], c["query"], c["query_start_loc"]
            kt, vt, out = c["key"], c["value"], torch.empty_like(c["query"])
            if c["PiT"] is not None:
                mse = dict(PiT=c["PiT"], centroids=c["centroids"])
        scale = D**-0.5
        ref_mse = {} if not mse else dict(Pi=mse["PiT"].t(), centroids=mse["centroids"])
        if kind == "decode":
            ref = reference_attention(q, cache, bt, seq_lens, lay, scale, **ref_mse)
        else:
            ref = reference_attention(q, cache, bt, seq_lens, lay, scale, query_start_loc=qsl, key=kt, value=vt,
                                      **ref_mse)

        def call(tiles, splits, o):
            if kind == "decode":
                return tq_decode_attention(q, cache, bt, seq_lens, layout=lay, out=o, tiles=tiles, num_splits=splits,
                                           overlap_prior=not a.no_early, **mse)
            return tq_verify_attention(q, kt, vt, cache, bt, seq_lens, qsl, QL, layout=lay, out=o, tiles=tiles,
                                       num_splits=splits, **mse)

        print(f"\n{kind} B={B} ctx={L} Hq={Hq} Hk={Hk} D={D} QL={QL} {a.preset}", flush=True)
        for spec in ["default"] + a.tiles:
            expr, _, s = spec.partition("@")
            stage1._pair_gathers = pair_gathers if expr != "no-pairs" else (lambda layout, head_dim: False)
            tiles = None if expr in ("default", "no-pairs") else eval(expr, {"T": TileConfig, "TileConfig": TileConfig})
            splits = int(s) if s else None
            line = dict(row=[kind, B, L, Hq, Hk, D, QL], preset=a.preset, variant=spec)
            try:
                o = torch.full_like(q, float("nan"))
                call(tiles, splits, o)
                if bench.DEV == "cuda":
                    torch.cuda.synchronize()
                line["rel_err"] = rel_err(o, ref)
                line["nan"] = bool(torch.isnan(o).any())
                out.fill_(float("nan"))
                line["ms"] = bench.bench_graph(lambda: call(tiles, splits, out))
                line["graph_rel_err"] = rel_err(out, ref)  # what the timed replays wrote
                if a.in_graph:
                    line["in_graph_ms"] = bench.bench_in_graph(lambda: call(tiles, splits, out))
            except Exception as exc:  # noqa: BLE001 - report and go on with the other variants
                line["error"] = f"{type(exc).__name__}: {str(exc)[-300:]}"
            results.append(line)
            if "error" in line:
                print(f"  {spec:60s} ERROR {line['error']}", flush=True)
            else:
                ok = line["rel_err"] < 1e-2 and not line["nan"] and line["graph_rel_err"] < 1e-2
                extra = f" (in a graph {line['in_graph_ms']:.4f})" if a.in_graph else ""
                print(f"  {spec:60s} {line['ms']:.4f} ms{extra}  rel_err {line['rel_err']:.2e} "
                      f"(replays {line['graph_rel_err']:.2e}) {'ok' if ok else 'BAD'}", flush=True)
        del cache, bt
        if bench.DEV == "cuda":
            torch.cuda.empty_cache()
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
