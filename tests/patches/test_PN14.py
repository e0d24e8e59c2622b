"""PN14: TurboQuant decode stage1 keeps masked-out block-table lanes in bounds.

The kernel runs under the Triton interpreter on CPU. vLLM decides at import time
whether Triton is usable, so each case runs in a fresh interpreter with
TRITON_INTERPRET=1 and no visible CUDA device. The interpreter's load primitive is
wrapped to record every lane address, masked or not, which is what a strict bounds
checker on the GPU looks at.
"""

from __future__ import annotations

import os
from pathlib import Path
from _interpreted import run_interpreted

REPO = Path(__file__).resolve().parents[2]
TREE = Path(os.environ.get("GQUEUE_VLLM_TREE") or REPO / "work").resolve()

SCRIPT = r"""
import json
import numpy as np
import torch
from triton.runtime import interpreter

loads = []
_orig = interpreter.InterpreterBuilder.create_masked_load

def _recording_load(self, ptrs, mask, *rest):  # the cache/eviction arguments vary by Triton release
    loads.append((np.array(ptrs.data, dtype=np.uint64).ravel(),
                  np.array(mask.data, dtype=bool).ravel()))
    return _orig(self, ptrs, mask, *rest)

interpreter.InterpreterBuilder.create_masked_load = _recording_load

from vllm.v1.attention.ops.triton_turboquant_decode import (
    triton_turboquant_decode_attention,
)

torch.manual_seed(0)
B, Hq, Hk, D, block_size = 1, 2, 1, 16, 16
mse_bits, vqb = 4, 4
kps = D * mse_bits // 8 + 2          # MSE bytes + fp16 norm
slot = kps + D * vqb // 8 + 4        # + packed values + fp16 scale/zero
seq_len, num_pages = 32, 2           # the row holds exactly the sequence
kv_cache = torch.randint(0, 256, (4, block_size, Hk, slot), dtype=torch.uint8)
# keep the fp16 norm / scale / zero bytes small and finite
for off in (kps - 2, kps + D // 2, kps + D // 2 + 2):
    kv_cache[..., off] = 0
    kv_cache[..., off + 1] = 0x3C      # fp16 1.0
block_table = torch.tensor([[3, 1]], dtype=torch.int32)
assert block_table.shape[1] == num_pages
seq_lens = torch.tensor([seq_len], dtype=torch.int32)
query = torch.randn(B, Hq, D, dtype=torch.float16)
Pi = torch.eye(D)
centroids = torch.linspace(-1.0, 1.0, 2 ** mse_bits)

out = triton_turboquant_decode_attention(
    query=query, kv_cache=kv_cache, block_table=block_table, seq_lens=seq_lens,
    Pi=Pi, centroids=centroids, scale=D ** -0.5, mse_bits=mse_bits,
    key_packed_size=kps, value_quant_bits=vqb, max_num_kv_splits=3,
)

lo = block_table.data_ptr()
hi = lo + block_table.numel() * block_table.element_size()
bt_loads = oob_lanes = 0
for ptrs, mask in loads:
    live = ptrs[mask]
    if live.size and ((live >= lo) & (live < hi)).all():
        bt_loads += 1
        oob_lanes += int(((ptrs < lo) | (ptrs >= hi)).sum())
print(json.dumps({
    "bt_loads": bt_loads,
    "oob_lanes": oob_lanes,
    "out": out.float().flatten().tolist(),
}))
"""


def _run() -> dict:
    return run_interpreted(SCRIPT, TREE, REPO / "kernels", preload=("numpy", "torch", "triton.runtime.interpreter"))


def test_fixed_block_table_lanes_stay_in_row(switch):
    switch("PN14", True)
    on = _run()
    assert on["bt_loads"] > 0
    assert on["oob_lanes"] == 0


def test_off_upstream_addresses_and_same_output(switch):
    switch("PN14", False)
    off = _run()
    # Upstream computes the page index of masked-out lanes unclamped: with
    # seq_len 32, three splits and a 2-page row, the last tile reaches page 2.
    assert off["bt_loads"] > 0
    assert off["oob_lanes"] > 0
    switch("PN14", True)
    on = _run()
    assert off["out"] == on["out"]
