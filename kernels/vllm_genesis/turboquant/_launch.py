"""The launcher of the two-stage TurboQuant attention (decode and verify).

``run_attention`` checks a call's inputs, asks ``plan.choose_plan`` for its plan (the
stage-1 kernel, its config, the split count), gathers the call's tensors and facts in a
``stage1.Call`` with the split workspace and runs the plan: stage 1, then the combine.
"""

from __future__ import annotations

import math

import torch

from .device import CacheFacts
from .layout import TQLayout, pow2_alignment
from .plan import choose_plan
from .stage1 import Call
from .tiles import TileConfig

LOG2E = 1.4426950408889634


def as_layout(layout: TQLayout | str | None, head_dim: int) -> TQLayout:
    if layout is None:
        layout = "turboquant_k8v4"
    if isinstance(layout, str):
        layout = TQLayout.from_preset(layout, head_dim)
    if layout.head_dim != head_dim:
        raise ValueError(f"layout head_dim {layout.head_dim} != query head_dim {head_dim}")
    layout.check()
    return layout


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)


def split_workspace(
    batch: int, num_kv_heads: int, num_splits: int, rows: int, head_dim: int, device
) -> tuple[torch.Tensor, torch.Tensor]:
    mid_o = torch.empty(batch, num_kv_heads, num_splits, rows, head_dim, dtype=torch.float32, device=device)
    mid_l = torch.empty(batch, num_kv_heads, num_splits, rows, dtype=torch.float32, device=device)
    return mid_o, mid_l


def run_attention(
    query: torch.Tensor,  # [T, Hq, D]
    kv_cache: torch.Tensor,  # [num_blocks, page, Hk, slot] uint8
    block_table: torch.Tensor,  # [B, max_blocks] int32
    seq_lens: torch.Tensor,  # [B] int32
    *,
    batch: int,
    scale: float,
    layout: TQLayout,
    max_query_len: int,
    query_start_loc: torch.Tensor | None,
    key: torch.Tensor | None,
    value: torch.Tensor | None,
    centroids: torch.Tensor | None,
    PiT: torch.Tensor | None,
    num_splits: int | None,
    max_context: int | None,
    out: torch.Tensor | None,
    workspace: tuple[torch.Tensor, torch.Tensor] | None,
    tiles: TileConfig | None,
    dot_bf16: bool | None,
    overlap_prior: bool = False,
) -> torch.Tensor:
    T, Hq, D = query.shape
    num_blocks, page, Hk, slot = kv_cache.shape
    if kv_cache.dtype != torch.uint8:
        raise TypeError("kv_cache must be the uint8 TurboQuant cache")
    if Hq % Hk:
        raise ValueError(f"{Hq} query heads are not a multiple of {Hk} KV heads")
    if slot < layout.slot_size:
        raise ValueError(f"cache slot {slot} B is smaller than the layout's {layout.slot_size} B")
    if kv_cache.stride(3) != 1 or query.stride(2) != 1:
        raise ValueError("kv_cache and query need a contiguous last dimension")
    G = Hq // Hk
    QL = int(max_query_len)
    ROWS = QL * G
    raw_tail = key is not None

    given_centroids = centroids
    if layout.key_fp8:
        qr = query
    else:
        if centroids is None or PiT is None:
            raise ValueError("MSE key presets need centroids and PiT")
        qr = (query.float() @ PiT.float()).contiguous()
        centroids = centroids.float().contiguous()
    if centroids is None:
        centroids = query  # never read on the fp8 path

    if max_context is None:
        max_context = block_table.shape[1] * page
    facts = CacheFacts.of(layout, kv_cache)
    has_qstart = query_start_loc is not None
    plan = choose_plan(kv_cache, layout, batch, D, G, QL, max_context, has_qstart=has_qstart, raw_tail=raw_tail,
                       tiles=tiles, num_splits=num_splits, facts=facts)
    S = plan.splits

    if workspace is None:
        mid_o, mid_l = split_workspace(batch, Hk, S, ROWS, D, query.device)
    else:
        mid_o, mid_l = workspace
        need = batch * Hk * S * ROWS
        if mid_l.numel() < need or mid_o.numel() < need * D:
            raise ValueError("workspace too small for this launch")
    if out is None:
        out = torch.empty(T, Hq, D, dtype=query.dtype, device=query.device)

    call = Call(
        query=query, qr=qr, kv_cache=kv_cache, block_table=block_table, seq_lens=seq_lens,
        qstart=query_start_loc if query_start_loc is not None else seq_lens, centroids=centroids,
        given_centroids=given_centroids, key=key, value=value, out=out, mid_o=mid_o, mid_l=mid_l, layout=layout,
        ptx_ok=facts.ptx_ok, words_ok=facts.words_ok, batch=batch, group=G, head_dim=D, page=page, query_len=QL,
        has_qstart=has_qstart, raw_tail=raw_tail, qk_scale=float(scale) * LOG2E,
        align=pow2_alignment(kv_cache.stride(0), kv_cache.stride(1), kv_cache.stride(2), kv_cache.storage_offset()),
        # fp16 products: exact for fp8 keys and bf16 queries of normal range
        dot_bf16=False if dot_bf16 is None else dot_bf16,
        overlap_prior=overlap_prior,
    )
    return plan.run(call)
