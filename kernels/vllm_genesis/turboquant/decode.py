"""GQA-grouped split-K decode over the vLLM 0.24.0 TurboQuant KV cache.

One program per (sequence, KV head, split) serves every query head of the group, so each
cache byte is read once per step (0.24.0's stage 1 runs one program per *query* head and
re-reads the KV head's bytes G times). A second, small kernel merges the splits. On Hopper
GPUs, fp8 e4m3 keys + 4-bit values with D = 128 or 256 and groups of up to 8 heads run
stage 1 as kernel "h" (``_wgmma_decode.py``: warp-group products reading the keys from
shared memory); elsewhere the Triton kernels (``_dequant_split.py``, ``_per_warp_softmax.py``,
``_fp8_scores.py``). ``plan.py`` says which.
"""

from __future__ import annotations

import torch

from ._launch import as_layout, default_scale, run_attention
from .layout import TQLayout
from .tiles import TileConfig


def tq_decode_attention(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    scale: float | None = None,
    layout: TQLayout | str | None = "turboquant_k8v4",
    centroids: torch.Tensor | None = None,
    PiT: torch.Tensor | None = None,
    num_splits: int | None = None,
    max_context: int | None = None,
    out: torch.Tensor | None = None,
    workspace: tuple[torch.Tensor, torch.Tensor] | None = None,
    tiles: TileConfig | None = None,
    dot_bf16: bool | None = None,
    overlap_prior: bool = False,
) -> torch.Tensor:
    """Attention of one new token per sequence over its whole cached context.

    query ``[B, Hq, D]`` (fp16/bf16); kv_cache ``[num_blocks, block_size, Hk, slot]``
    uint8 in the 0.24.0 TurboQuant layout (the new token already stored, as vLLM does);
    block_table ``[B, max_blocks]`` int32; seq_lens ``[B]`` int32 (0 gives a zero row).
    ``layout`` is a preset name or a :class:`TQLayout`; MSE-key presets also need
    ``centroids`` and ``PiT`` (the rotation the store applied). ``num_splits`` fixes the
    split count (keep it fixed under CUDA graphs); otherwise it is chosen from
    ``max_context`` (default: the block table's capacity) and the SM count.
    ``overlap_prior``: the caller guarantees that the kernel launched right before this call
    writes neither ``seq_lens`` nor ``block_table`` (vLLM fills both before the forward pass;
    the kernel before its decode stores the new keys and values). Inside a CUDA graph, kernel
    "h" is then launched as a programmatic dependent of that kernel: it reads the lengths and
    the block ids while that kernel ends, and the query and the cache only after it.
    Returns ``[B, Hq, D]`` in the query dtype.
    """
    B, Hq, D = query.shape
    lay = as_layout(layout, D)
    return run_attention(
        query,
        kv_cache,
        block_table,
        seq_lens,
        batch=B,
        scale=default_scale(D) if scale is None else scale,
        layout=lay,
        max_query_len=1,
        query_start_loc=None,
        key=None,
        value=None,
        centroids=centroids,
        PiT=PiT,
        num_splits=num_splits,
        max_context=max_context,
        out=out,
        workspace=workspace,
        tiles=tiles,
        dot_bf16=dot_bf16,
        overlap_prior=overlap_prior,
    )
