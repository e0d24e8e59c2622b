#!/usr/bin/env python3
"""Run one TurboQuant stage-1 configuration a few times, for a profiler (ncu) to read.

    ncu --clock-control none --kernel-name 'regex:_tq_(dequant|per_warp|fp8|gluon|wgmma)' --launch-skip 2 --launch-count 1 \\
        --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \\
        python tools/bench/tq_profile.py --row 1 --tiles 'TileConfig(64, 4, 5, "q")'

``--row`` indexes ``tools/bench/kernels.py``'s ROWS; ``--tiles`` is a TileConfig expression
(default: the launcher's own); ``--splits`` overrides the split count.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "kernels"))
sys.path.insert(0, str(REPO / "tools" / "bench"))

import torch  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--row", type=int, default=1)
    ap.add_argument("--tiles", default=None)
    ap.add_argument("--splits", type=int, default=None)
    ap.add_argument("--runs", type=int, default=4)
    a = ap.parse_args()
    import kernels as bench  # tools/bench/kernels.py
    from vllm_genesis.turboquant import tq_decode_attention, tq_verify_attention
    from vllm_genesis.turboquant.tiles import TileConfig

    row = bench.ROWS[a.row]
    kind, QL = row[0], row[6]
    bench.DEV = "cuda"
    x = bench.row_inputs(row)
    tiles = eval(a.tiles, {"TileConfig": TileConfig}) if a.tiles else None
    for _ in range(a.runs):
        if kind == "decode":
            tq_decode_attention(x.q, x.cache, x.bt, x.seq_lens, layout=x.lay, tiles=tiles, num_splits=a.splits)
        else:
            tq_verify_attention(x.q, x.kt, x.kt, x.cache, x.bt, x.seq_lens, x.qsl, QL, layout=x.lay, tiles=tiles,
                                num_splits=a.splits)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
