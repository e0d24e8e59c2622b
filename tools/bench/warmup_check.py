#!/usr/bin/env python3
"""Does ``warmup_verify`` leave nothing for the first real launch to compile? (one GPU)

Runs in a fresh Triton cache: times ``warmup_verify`` for a layer shape with a server's
block-table width and batch limit, then the first and the second call of a real decode
batch and a real verify batch (other batch sizes, real lengths, shuffled block tables).
With a complete warm-up the first call costs what the second does; a missing variant
shows as a first call that takes seconds. ``--no-plan`` repeats it with the warm-up as
it was before it planned variants (one request, a 2-wide table).

    python tools/bench/warmup_check.py [--no-plan] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "kernels"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-plan", action="store_true", help="warm up as before: one request, a 2-wide table")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--tiny", action="store_true",
                        help="small shapes on the CPU (under TRITON_INTERPRET=1 it only exercises the script)")
    args = parser.parse_args()
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="gq-triton-")  # before triton loads

    import torch

    from vllm_genesis.turboquant import tq_decode_attention, tq_verify_attention, warmup_verify
    from vllm_genesis.turboquant.layout import TQLayout
    from vllm_genesis.turboquant.reference import random_case

    dev = "cpu" if args.tiny else "cuda"
    Hq, Hk, D, page, max_blocks, max_seqs = (12, 2, 64, 16, 40, 4) if args.tiny else (24, 4, 256, 16, 2048, 16)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    plan = {} if args.no_plan else {"max_blocks": max_blocks, "max_num_seqs": max_seqs}
    sync()
    start = time.perf_counter()
    launches = warmup_verify(num_heads=Hq, num_kv_heads=Hk, head_dim=D, block_size=page, query_lens=(2, 3, 4),
                             device=dev, **plan)
    sync()
    warm_s = time.perf_counter() - start

    def timed(fn) -> float:
        sync()
        t = time.perf_counter()
        fn()
        sync()
        return time.perf_counter() - t

    lay = TQLayout.from_preset("turboquant_k8v4", D)

    def case(seed: int, seq_lens: list[int], query_lens: list[int] | None = None) -> dict:
        c = random_case(seq_lens=seq_lens, query_lens=query_lens, num_heads=Hq, num_kv_heads=Hk, head_dim=D,
                        block_size=page, layout=lay, generator=torch.Generator().manual_seed(seed), device=dev)
        table = c["block_table"]  # widened to the server's width; spare entries name a real block
        wide = table[:, -1:].repeat(1, max_blocks)
        wide[:, : table.shape[1]] = table
        c["block_table"] = wide.contiguous()
        return c

    if args.tiny:
        dec, ver, one = case(1, [300, 17, 90, 41, 1]), case(2, [500, 40, 77, 120], [4, 4, 4, 4]), case(3, [301], [4])
    else:
        dec, ver, one = (case(1, [3000, 17, 900, 411, 1]), case(2, [500, 40, 777, 1200], [4, 4, 4, 4]),
                         case(3, [3001], [4]))

    def decode():
        tq_decode_attention(dec["query"], dec["kv_cache"], dec["block_table"], dec["seq_lens"])

    def verify(c):
        return lambda: tq_verify_attention(c["query"], c["key"], c["value"], c["kv_cache"], c["block_table"],
                                           c["seq_lens"], c["query_start_loc"], 4)

    # on Hopper 24 verify rows run kernel "v" for four requests and kernel "h" for one
    calls = (("decode B=5", decode), ("verify B=4 K+1=4", verify(ver)), ("verify B=1 K+1=4", verify(one)))
    rows = {name: (timed(fn), timed(fn)) for name, fn in calls}
    doc = {"plan": not args.no_plan, "warmup_s": warm_s, "warmup_launches": launches,
           "first_second_s": {k: list(v) for k, v in rows.items()}, "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu"}
    print(f"warm-up ({'planned' if plan else 'one request, 2-wide table'}): {launches} launches, {warm_s:.2f} s")
    print("| launch | first call s | second call s |")
    print("|---|---:|---:|")
    for name, (first, second) in rows.items():
        print(f"| {name} | {first:.4f} | {second:.4f} |")
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
