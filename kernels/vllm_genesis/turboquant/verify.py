"""Multi-query attention for speculative-decoding verify (K+1 query tokens per request).

All K+1 query rows of a request and all query heads of a KV-head group share one pass
over the compressed prefix (split-K over long contexts). The K+1 tail itself -- the
tokens whose keys and values this step writes -- is read from the raw fp16/bf16 key and
value tensors, causally (row i sees tail tokens 0..i), instead of through the 4-bit
cache, so verify sees the same tail values the drafter conditioned on.
"""

from __future__ import annotations

import torch

from ._launch import as_layout, default_scale, run_attention, split_workspace
from .layout import TQLayout, next_pow2
from .plan import cache_plan
from .tiles import TileConfig

MAX_QUERY_LEN = 8


def tq_verify_attention(
    query: torch.Tensor,
    key: torch.Tensor | None,
    value: torch.Tensor | None,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    max_query_len: int,
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
) -> torch.Tensor:
    """Causal attention of up to ``max_query_len`` (<= 8) new tokens per request.

    query ``[T, Hq, D]`` packed by ``query_start_loc`` ``[B+1]`` (int32, as vLLM's
    metadata); ``seq_lens`` ``[B]`` counts context *including* the request's query
    tokens. With ``key``/``value`` ``[T, Hk, D]`` (the raw tensors of this step) the
    last q_len positions are read from them; with ``None`` everything is read from the
    cache (0.24.0's semantics, causal per row). Returns ``[T, Hq, D]``.
    """
    T, Hq, D = query.shape
    if not 1 <= max_query_len <= MAX_QUERY_LEN:
        raise ValueError(f"max_query_len {max_query_len} outside 1..{MAX_QUERY_LEN}")
    if (key is None) != (value is None):
        raise ValueError("pass both key and value, or neither")
    if key is not None and (key.stride(-1) != 1 or value.stride(-1) != 1):
        raise ValueError("key/value need a contiguous last dimension")
    B = seq_lens.shape[0]
    lay = as_layout(layout, D)
    return run_attention(
        query,
        kv_cache,
        block_table,
        seq_lens,
        batch=B,
        scale=default_scale(D) if scale is None else scale,
        layout=lay,
        max_query_len=max_query_len,
        query_start_loc=query_start_loc,
        key=key,
        value=value,
        centroids=centroids,
        PiT=PiT,
        num_splits=num_splits,
        max_context=max_context,
        out=out,
        workspace=workspace,
        tiles=tiles,
        dot_bf16=dot_bf16,
    )


def verify_num_splits(
    kv_cache: torch.Tensor,
    batch: int,
    num_heads: int,
    head_dim: int,
    query_len: int,
    max_context: int,
    layout: TQLayout | str | None = "turboquant_k8v4",
) -> int:
    """The split count ``tq_verify_attention`` picks when ``num_splits`` is unset.

    A function of shapes alone (the batch size, the heads, the query length, the context
    capacity ``max_context``, the cache's layout and strides, the device), so a caller
    that preallocates the split workspace or captures a CUDA graph can rely on it; the
    launcher and ``warmup_verify`` plan with the same rule.
    """
    num_kv_heads = kv_cache.shape[2]
    if num_heads % num_kv_heads:
        raise ValueError(f"{num_heads} query heads are not a multiple of {num_kv_heads} KV heads")
    if not 1 <= query_len <= MAX_QUERY_LEN:
        raise ValueError(f"query_len {query_len} outside 1..{MAX_QUERY_LEN}")
    lay = as_layout(layout, head_dim)
    return cache_plan(kv_cache, batch, head_dim, num_heads // num_kv_heads, query_len, lay, max_context)[1]


def warmup_verify(
    *,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    layout: TQLayout | str = "turboquant_k8v4",
    query_lens=range(1, MAX_QUERY_LEN + 1),
    dtype: torch.dtype = torch.bfloat16,
    device="cuda",
    raw_tail: bool = True,
    dot_bf16: bool | None = None,
    max_blocks: int = 2,
    max_num_seqs: int = 1,
    split_cap: int | None = None,
) -> int:
    """Compile the decode and verify kernels for one layer shape before serving.

    Launches every kernel variant that real calls of this shape can reach, once each, on
    a tiny cache, so the first request -- or a CUDA-graph capture -- does not pay Triton's
    JIT. A variant is fixed by the stage-1 kernel with its tiles (``call_plan``) and the
    combine stage's chunk, which the launchers pick from the batch size, the query length
    and the context capacity, so pass what the server uses: ``max_blocks``, the block
    table's width (vLLM: ``cdiv(max_model_len, block_size)``; it sets the capacity the split
    count is picked from and the table's stride), ``max_num_seqs``, the largest batch (every
    batch size up to it is planned, each distinct variant launched once), and ``split_cap``,
    a ceiling a caller puts on the split count (the launchers' own count,
    ``verify_num_splits``, needs none): the variants with and without it are built. Returns
    the number of launches.
    """
    from .combine import combine_chunk, programmatic_combine
    from .device import CacheFacts
    from .plan import call_plan
    from .decode import tq_decode_attention

    lay = as_layout(layout, head_dim)
    cache = torch.zeros(2, block_size, num_kv_heads, lay.slot_size_aligned, dtype=torch.uint8, device=device)
    centroids = PiT = None
    if not lay.key_fp8:
        centroids = torch.linspace(-1, 1, 2**lay.mse_bits, device=device)
        PiT = torch.eye(head_dim, device=device)
    group = num_heads // num_kv_heads
    capacity = max_blocks * block_size
    facts = CacheFacts.of(lay, cache)
    launches = 0
    for ql in (0, *query_lens):  # 0: the decode launcher
        chosen: dict[tuple, tuple[int, int]] = {}
        for batch in range(1, max(1, max_num_seqs) + 1):
            # the kernel the call launches (it can depend on the batch size, not only on the plan)
            kernel, tiles, splits = call_plan(cache, lay, batch, head_dim, group, max(ql, 1), capacity,
                                              has_qstart=ql > 0, raw_tail=raw_tail and ql > 0, facts=facts)
            for count in {splits, max(1, min(splits, split_cap or splits))}:
                chosen.setdefault((kernel, tiles, combine_chunk(count)), (batch, count))
        for batch, splits in chosen.values():
            bt = torch.zeros(batch, max_blocks, dtype=torch.int32, device=device)
            common = dict(layout=lay, centroids=centroids, PiT=PiT, num_splits=splits, dot_bf16=dot_bf16)
            # on a GPU the combine's two launch kinds: eager, and as inside CUDA graphs
            # (the decode also as a programmatic dependent of the kernel before it, whose
            # lengths must then be written before that kernel: made before the query)
            for pdl in (False, True) if cache.is_cuda else (False,):
                with programmatic_combine(pdl):
                    if ql == 0:
                        seq_lens = torch.ones(batch, dtype=torch.int32, device=device)
                        q = torch.zeros(batch, num_heads, head_dim, dtype=dtype, device=device)
                        tq_decode_attention(q, cache, bt, seq_lens, overlap_prior=pdl, **common)
                    else:
                        q = torch.zeros(batch * ql, num_heads, head_dim, dtype=dtype, device=device)
                        k = v = None
                        if raw_tail:
                            k = torch.zeros(batch * ql, num_kv_heads, head_dim, dtype=dtype, device=device)
                            v = torch.zeros_like(k)
                        tq_verify_attention(
                            q, k, v, cache, bt,
                            torch.full((batch,), ql + 1, dtype=torch.int32, device=device),
                            torch.arange(0, batch * ql + 1, ql, dtype=torch.int32, device=device),
                            ql, **common,
                        )
                launches += 1
    return launches


__all__ = ["MAX_QUERY_LEN", "tq_verify_attention", "verify_num_splits", "warmup_verify", "split_workspace", "next_pow2"]
