#!/usr/bin/env python3
"""When each program of kernel "h" (the Hopper decode's stage 1) starts, ends its loop and ends.

Kernel "h" built with its diagnostics timeline (``TL``: the GPU's nanosecond timer at a
program's start, after its loop and after its partials are stored, and its SM) is launched
alone, eagerly, after the L2 is emptied (``kernels.py --flush``), several times per row; the
run with the median span is summarised: quantiles of the three times from the first start,
the loop's length for programs alone on their SM and for those sharing one, for the SMs
holding two programs the difference of their loop ends and their mean, and the last
programs to end; the slowest SMs of every run are listed (are the same SMs slow each time?). The timeline build holds more registers than the plain one (167 against
127 at D = 256), so rows whose programs do not all fit at once can run in other waves.

    python tools/bench/tq_timeline.py --row-spec decode,1,32768,24,4,256,1 [--splits 64]
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

QUANTILES = (0.0, 0.1, 0.5, 0.9, 1.0)


def quantiles(values: list[int]) -> list[float]:
    """Microseconds at ``QUANTILES`` of nanosecond values."""
    xs = sorted(values)
    return [round(xs[min(len(xs) - 1, int(q * (len(xs) - 1)))] / 1000, 2) for q in QUANTILES]


def summary(rows: list[list[int]]) -> dict:
    """Quantiles of a timeline [program: start, loop end, end, SM] (ns)."""
    t0 = min(r[0] for r in rows)
    # each SM's loop ends (from t0); SMs with two programs: how far apart, and their mean
    # (does an SM run slow, or a program?)
    by_sm: dict[int, list[int]] = {}
    for r in rows:
        by_sm.setdefault(r[3], []).append(r[1] - t0)
    alone = [r[1] - r[0] for r in rows if len(by_sm[r[3]]) == 1]
    shared = [r[1] - r[0] for r in rows if len(by_sm[r[3]]) > 1]
    last = sorted(range(len(rows)), key=lambda i: rows[i][2])[-4:]
    pairs = [v for v in by_sm.values() if len(v) == 2]
    return {
        "span_us": round((max(r[2] for r in rows) - t0) / 1000, 2),
        "programs": len(rows),
        "sms": len(by_sm),
        "start": quantiles([r[0] - t0 for r in rows]),
        "loop_end": quantiles([r[1] - t0 for r in rows]),
        "end": quantiles([r[2] - t0 for r in rows]),
        "epilogue": quantiles([r[2] - r[1] for r in rows]),
        "loop_alone": quantiles(alone) if alone else None,
        "loop_shared": quantiles(shared) if shared else None,
        "pair_diff": quantiles([abs(a - b) for a, b in pairs]) if pairs else None,
        "pair_mean": quantiles([(a + b) // 2 for a, b in pairs]) if pairs else None,
        "slow_sms": sorted(by_sm, key=lambda sm: -sum(by_sm[sm]) / len(by_sm[sm]))[:12],
        "last": [{"program": i, "sm": rows[i][3], "end_us": round((rows[i][2] - t0) / 1000, 2)} for i in last],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--row-spec", action="append", required=True, help="a decode row 'decode,B,context,Hq,Hk,D,1'")
    ap.add_argument("--splits", type=int, default=None, help="split count (default: the launcher's plan)")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--flush", choices=("write", "read", "none"), default="read")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    import kernels as bench  # tools/bench/kernels.py
    from vllm_genesis.turboquant._launch import LOG2E, split_workspace
    from vllm_genesis.turboquant.plan import cache_plan
    from vllm_genesis.turboquant.stage1 import launch_wgmma_decode

    bench.ARGS = argparse.Namespace(flush=a.flush, rep_ms=100, tune=False, tiny=False)
    results = []
    for spec in a.row_spec:
        row = bench.parse_row_spec(spec)
        kind, B, L, Hq, Hk, D, QL = row
        if kind != "decode" or QL != 1:
            raise SystemExit(f"{spec}: only decode rows")
        x = bench.row_inputs(row)
        G = Hq // Hk
        _, S = cache_plan(x.cache, B, D, G, 1, x.lay, L)
        S = a.splits or S
        mid_o, mid_l = split_workspace(B, Hk, S, G, D, x.q.device)
        tl = torch.zeros(B * Hk * S, 4, dtype=torch.int64, device=x.q.device)

        def launch():
            launch_wgmma_decode(x.q, x.cache, x.bt, x.seq_lens, x.seq_lens, mid_o, mid_l, S, D**-0.5 * LOG2E, B, G, D,
                      x.cache.shape[1], 1, False, timeline=tl)

        launch()
        runs = []
        for _ in range(a.runs):
            bench.flush_l2()
            launch()
            torch.cuda.synchronize()
            runs.append(summary(tl.tolist()))
        runs.sort(key=lambda r: r["span_us"])
        med = runs[len(runs) // 2]
        med.update(row=list(row), splits=S, spans_us=[r["span_us"] for r in runs])
        results.append(med)
        print(f"\n{spec} S={S}: {med['programs']} programs on {med['sms']} SMs; span {med['span_us']} us "
              f"(runs: {' '.join(str(s) for s in med['spans_us'])})")
        print(f"  quantiles {', '.join(f'{int(q * 100)}%' for q in QUANTILES)} (us)")
        for key in ("start", "loop_end", "end", "epilogue", "loop_alone", "loop_shared", "pair_diff", "pair_mean"):
            if med[key] is not None:
                print(f"  {key:12s} {' '.join(f'{v:7.2f}' for v in med[key])}")
        print("  slowest SMs (mean loop end), each run:")
        for r in runs:
            print("   ", " ".join(f"{sm:3d}" for sm in r["slow_sms"]))
        print("  last to end:", ", ".join(f"program {d['program']} (SM {d['sm']}) {d['end_us']}" for d in med["last"]))
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
