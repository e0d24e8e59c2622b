"""Pure-PyTorch model of the 0.24.0 TurboQuant cache: a packer and a float64 reference.

Used by the tests and the benchmark to build caches with the exact byte layout of
``triton_turboquant_store`` (see layout.py) and to compute attention in float64 from the
dequantised cache (what the kernels must match up to fp16 rounding) or from the raw K/V
(what quantisation costs).
"""

from __future__ import annotations

import math

import torch

from .layout import TQLayout


def hadamard(d: int, device=None) -> torch.Tensor:
    """Orthonormal Sylvester-Hadamard matrix (symmetric, so Pi == PiT), as 0.24.0 uses."""
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return (h / math.sqrt(d)).to(dtype=torch.float32, device=device)


def gaussian_centroids(d: int, bits: int, device=None) -> torch.Tensor:
    """Sorted centroids for N(0, 1/d) coordinates (quantile rule; any sorted table works)."""
    n = 2**bits
    u = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    c = math.sqrt(2.0 / d) * torch.erfinv(2 * u - 1)
    return c.to(dtype=torch.float32, device=device)


def _pack_bits(codes: torch.Tensor, bits: int, nbytes: int) -> torch.Tensor:
    """Little-endian bit stream: code d at bit d*bits. codes [N, D] int -> [N, nbytes] uint8."""
    n, d = codes.shape
    if bits == 4 and nbytes * 2 == d:
        c = codes.to(torch.int32)
        return (c[:, 0::2] | (c[:, 1::2] << 4)).to(torch.uint8)
    shifts = torch.arange(bits, device=codes.device)
    bitv = ((codes.long()[:, :, None] >> shifts) & 1).reshape(n, d * bits)
    pad = nbytes * 8 - d * bits
    if pad:
        bitv = torch.cat([bitv, bitv.new_zeros(n, pad)], 1)
    bitv = bitv.reshape(n, nbytes, 8)
    return (bitv << torch.arange(8, device=codes.device)).sum(-1).to(torch.uint8)


def _unpack_bits(packed: torch.Tensor, bits: int, d: int) -> torch.Tensor:
    n, nbytes = packed.shape
    if bits == 4 and nbytes * 2 == d:
        p = packed.to(torch.int32)
        return torch.stack([p & 15, p >> 4], -1).reshape(n, d)
    bitv = ((packed.long()[:, :, None] >> torch.arange(8, device=packed.device)) & 1).reshape(n, nbytes * 8)
    bitv = bitv[:, : d * bits].reshape(n, d, bits)
    return (bitv << torch.arange(bits, device=packed.device)).sum(-1)


def _f16_bytes(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float16).contiguous().view(torch.uint8).reshape(x.shape[0], 2)


def quantize_slots(
    key: torch.Tensor,
    value: torch.Tensor,
    layout: TQLayout,
    *,
    PiT: torch.Tensor | None = None,
    centroids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Slots ``[N, slot_size_aligned]`` uint8 for rows of key/value ``[N, D]``."""
    n, d = key.shape
    parts = []
    if layout.key_fp8:
        k8 = key.float().clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        parts.append(k8.view(torch.uint8))
    else:
        kf = key.float()
        norms = kf.norm(dim=1, keepdim=True)
        y = (kf / (norms + 1e-8)) @ PiT.float()
        c_sorted = centroids.float().sort().values
        mids = (c_sorted[:-1] + c_sorted[1:]) / 2
        idx = torch.bucketize(y, mids, right=True)
        parts.append(_pack_bits(idx, layout.mse_bits, layout.mse_bytes))
        parts.append(_f16_bytes(norms[:, 0]))
    vf = value.float()
    levels = 2**layout.value_bits - 1
    vmin = vf.min(1).values
    vmax = vf.max(1).values
    vscale = (vmax - vmin) / levels
    vscale = torch.where(vscale > 1e-8, vscale, torch.full_like(vscale, 1e-8))
    codes = ((vf - vmin[:, None]) / vscale[:, None] + 0.5).to(torch.int32).clamp(0, levels)
    parts.append(_pack_bits(codes, layout.value_bits, layout.value_data_bytes))
    parts.append(_f16_bytes(vscale))
    parts.append(_f16_bytes(vmin))
    slots = torch.cat([p.to(key.device) for p in parts], 1)
    if slots.shape[1] < layout.slot_size_aligned:
        slots = torch.cat([slots, slots.new_zeros(n, layout.slot_size_aligned - slots.shape[1])], 1)
    return slots


def store(
    kv_cache: torch.Tensor,
    key: torch.Tensor,  # [N, Hk, D]
    value: torch.Tensor,
    slot_mapping: torch.Tensor,  # [N] flat slot = block * block_size + offset
    layout: TQLayout,
    **kw,
) -> None:
    n, hk, d = key.shape
    page = kv_cache.shape[1]
    slots = quantize_slots(key.reshape(n * hk, d), value.reshape(n * hk, d), layout, **kw)
    slots = slots.reshape(n, hk, -1)
    blk = (slot_mapping // page).long()
    off = (slot_mapping % page).long()
    kv_cache[blk, off, :, : slots.shape[2]] = slots


def dequant_slots(slots: torch.Tensor, layout: TQLayout, *, Pi=None, centroids=None):
    """Keys and values (float64) from slots ``[N, slot]``."""
    d = layout.head_dim
    if centroids is not None:
        centroids = centroids.to(slots.device)
    if Pi is not None:
        Pi = Pi.to(slots.device)
    slots = slots.contiguous()
    if layout.key_fp8:
        k = slots[:, :d].contiguous().view(torch.float8_e4m3fn).double()
    else:
        idx = _unpack_bits(slots[:, : layout.mse_bytes], layout.mse_bits, d)
        c = centroids.double()[idx]
        if layout.norm_correction:
            c = c / torch.sqrt((c * c).sum(1, keepdim=True) + 1e-16)
        nb = layout.mse_bytes
        norm = slots[:, nb : nb + 2].contiguous().view(torch.float16).double()
        k = norm * (c @ Pi.double())
    kps = layout.key_packed_size
    vd = layout.value_data_bytes
    codes = _unpack_bits(slots[:, kps : kps + vd], layout.value_bits, d).double()
    sz = slots[:, kps + vd : kps + vd + 4].contiguous().view(torch.float16).double()
    v = codes * sz[:, 0:1] + sz[:, 1:2]
    return k, v


def gather_sequence(kv_cache, block_table_row, length):
    page = kv_cache.shape[1]
    pos = torch.arange(length, device=kv_cache.device)
    blk = block_table_row.long()[pos // page]
    return kv_cache[blk, pos % page]  # [L, Hk, slot]


def reference_attention(
    query: torch.Tensor,  # [T, Hq, D]
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    layout: TQLayout,
    scale: float,
    *,
    query_start_loc: torch.Tensor | None = None,
    key: torch.Tensor | None = None,  # raw tail [T, Hk, D]
    value: torch.Tensor | None = None,
    raw_kv: list | None = None,  # per sequence (K [L,Hk,D], V): use these instead of the cache
    Pi=None,
    centroids=None,
) -> torch.Tensor:
    """float64 attention; row i of a request sees positions 0..seq_len-q_len+i."""
    T, Hq, D = query.shape
    B = seq_lens.shape[0]
    Hk = kv_cache.shape[2]
    G = Hq // Hk
    qsl = query_start_loc.tolist() if query_start_loc is not None else list(range(B + 1))
    dev = query.device
    out = torch.zeros(T, Hq, D, dtype=torch.float64, device=dev)
    for b in range(B):
        L = int(seq_lens[b])
        q0, q1 = qsl[b], qsl[b + 1]
        ql = min(q1 - q0, L)
        if ql <= 0:
            continue
        if raw_kv is not None:
            K, V = (t.double().to(dev) for t in raw_kv[b])
        else:
            slots = gather_sequence(kv_cache, block_table[b], L)
            k, v = dequant_slots(slots.reshape(L * Hk, -1), layout, Pi=Pi, centroids=centroids)
            K, V = k.reshape(L, Hk, D), v.reshape(L, Hk, D)
            if key is not None:
                K = K.clone()
                V = V.clone()
                K[L - ql :] = key[q0 : q0 + ql].double()
                V[L - ql :] = value[q0 : q0 + ql].double()
        Kq = K.repeat_interleave(G, dim=1)  # [L, Hq, D]
        Vq = V.repeat_interleave(G, dim=1)
        q = query[q0 : q0 + ql].double()  # [ql, Hq, D]
        s = torch.einsum("qhd,lhd->hql", q, Kq) * scale
        pos = torch.arange(L, device=dev)
        lim = (L - ql) + torch.arange(ql, device=dev)
        s = s.masked_fill(pos[None, None, :] > lim[None, :, None], float("-inf"))
        p = torch.softmax(s, -1)
        out[q0 : q0 + ql] = torch.einsum("hql,lhd->qhd", p, Vq)
    return out


def random_case(
    *,
    seq_lens: list[int],
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    layout: TQLayout,
    query_lens: list[int] | None = None,
    dtype=torch.bfloat16,
    device="cpu",
    generator: torch.Generator | None = None,
    spare_blocks: int = 3,
    store_tail: bool = True,
) -> dict:
    """Random K/V (never zeros) stored into a cache with a shuffled page table.

    Returns the cache, block table, seq_lens, query (``[sum(query_lens), Hq, D]``),
    query_start_loc, the raw per-sequence K/V and the raw tail K/V of the query tokens.
    The tail positions are stored too (as vLLM stores them before attention), unless
    ``store_tail`` is False, in which case their slots hold random bytes.
    """
    gen = generator or torch.Generator().manual_seed(0)
    B = len(seq_lens)
    qlens = query_lens or [1] * B
    blocks_per = [math.ceil(L / block_size) for L in seq_lens]
    max_blocks = max(1, max(blocks_per))
    total = sum(blocks_per) + spare_blocks
    perm = torch.randperm(total, generator=gen)
    slot = layout.slot_size_aligned
    cache = torch.randint(0, 256, (total, block_size, num_kv_heads, slot), generator=gen, dtype=torch.uint8)
    # random bytes may decode to NaN fp8/fp16: make every slot a valid quantised row
    filler_k = torch.randn(total * block_size, num_kv_heads, head_dim, generator=gen)
    PiT = centroids = None
    if not layout.key_fp8:
        PiT = hadamard(head_dim)
        centroids = gaussian_centroids(head_dim, layout.mse_bits)
    store(cache, filler_k * 3, torch.randn(filler_k.shape, generator=gen) * 5,
          torch.arange(total * block_size), layout, PiT=PiT, centroids=centroids)
    bt = torch.full((B, max_blocks + 1), -1, dtype=torch.int32)
    raw, tails_k, tails_v = [], [], []
    used = 0
    for b, L in enumerate(seq_lens):
        n = blocks_per[b]
        ids = perm[used : used + n]
        used += n
        bt[b, :n] = ids.to(torch.int32)
        bt[b, n:] = perm[-1].to(torch.int32)  # unused entries still point at a real block
        k = (torch.randn(L, num_kv_heads, head_dim, generator=gen) * 1.5 + 0.1).to(dtype)
        v = (torch.randn(L, num_kv_heads, head_dim, generator=gen) + 0.3).to(dtype)
        raw.append((k, v))
        pos = torch.arange(L)
        slots_map = ids.long()[pos // block_size] * block_size + pos % block_size
        ql = min(qlens[b], L)
        n_store = L if store_tail else L - ql
        if n_store > 0:
            store(cache, k[:n_store], v[:n_store], slots_map[:n_store], layout, PiT=PiT, centroids=centroids)
        tails_k.append(k[L - ql :])
        tails_v.append(v[L - ql :])
    qsl = [0]
    for b in range(B):
        # decode rows exist even for empty (padded) sequences
        qsl.append(qsl[-1] + (min(qlens[b], seq_lens[b]) if query_lens is not None else 1))
    T = qsl[-1]
    query = (torch.randn(T, num_heads, head_dim, generator=gen) * 1.2).to(dtype)
    dev = torch.device(device)
    return dict(
        kv_cache=cache.to(dev),
        block_table=bt.to(dev),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=dev),
        query=query.to(dev),
        query_start_loc=torch.tensor(qsl, dtype=torch.int32, device=dev),
        max_query_len=max(1, max(qlens)),
        key=torch.cat(tails_k).to(dev) if T else None,
        value=torch.cat(tails_v).to(dev) if T else None,
        raw_kv=raw,
        PiT=None if PiT is None else PiT.to(dev),
        Pi=None if PiT is None else PiT.t().contiguous().to(dev),
        centroids=None if centroids is None else centroids.to(dev),
    )


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    o = out.double().cpu()
    r = ref.double().cpu()
    return float((o - r).norm() / r.norm().clamp_min(1e-30))
