"""Triton attention kernels for vLLM 0.24.0's TurboQuant KV cache.

``tq_decode_attention``: GQA-grouped split-K decode (one program per sequence, KV head
and split serves the whole query-head group). ``tq_verify_attention``: K+1 spec-verify
over the compressed prefix plus the raw K+1 tail, causal. ``warmup_verify`` compiles
them ahead of serving; ``verify_num_splits`` is the split count verify picks from shapes.
Presets: turboquant_k8v4, turboquant_4bit_nc, turboquant_k3v4_nc, turboquant_3bit_nc
(see layout.py). Imports torch and triton only.
"""

from .decode import tq_decode_attention
from .layout import PRESETS, TQLayout, pick_num_splits
from .verify import MAX_QUERY_LEN, tq_verify_attention, verify_num_splits, warmup_verify

__all__ = [
    "MAX_QUERY_LEN",
    "PRESETS",
    "TQLayout",
    "pick_num_splits",
    "tq_decode_attention",
    "tq_verify_attention",
    "verify_num_splits",
    "warmup_verify",
]
