"""Kernel "n" on byte tiles of whole pages: fp8 keys and 4-bit values, pages a power of two.

``_tq_dequant_split_fp8_pages`` addresses a tile page by page: one block-table entry and
one 64-bit base a page, plus loop-invariant 32-bit offsets inside the page. The key bytes
become fp16/bf16 for one product against the query; the codes' low and high nibbles feed
one product each (even and odd output columns). With ``PREFETCH`` the loop is pipelined by
hand: tile i+1's bytes and tile i+2's block ids are requested before tile i is computed.
The kernel family and the helpers: ``_dequant_split``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._dequant_split import _fp8_weights, _online_softmax, _split_program
from ._triton_words import _scale_zero, _split_slice, _split_stats


@triton.jit(do_not_specialize=["num_splits"])  # any split count: one compiled variant
def _tq_dequant_split_fp8_pages(
    QR,  # [T, Hq, D] query, any float dtype
    KV,  # uint8 cache [num_blocks, PAGE, HK, slot]
    BT,  # int32 [B, max_blocks]
    SeqLens,  # int32 [B]
    QStart,  # int32 [B + 1] (only read when HAS_QSTART)
    Cent,  # not read (the Triton stage-1 kernels share their arguments)
    MidO,  # fp32 [B, HK, S, ROWS, D]
    MidL,  # fp32 [B, HK, S, ROWS]
    stride_qt,
    stride_qh,
    stride_kb,
    stride_kp,
    stride_kh,
    stride_bt,
    num_splits,
    qk_scale,  # softmax scale * log2(e)
    HK: tl.constexpr,
    G: tl.constexpr,
    QL: tl.constexpr,
    ROWS: tl.constexpr,
    M_PAD: tl.constexpr,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    KPS: tl.constexpr,
    VAL_BYTES: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ALIGN: tl.constexpr,
    RAW_TAIL: tl.constexpr,
    HAS_QSTART: tl.constexpr,
    FP8_E4B15: tl.constexpr,
    DOT_BF16: tl.constexpr,
    PREFETCH: tl.constexpr = False,
    SZW: tl.constexpr = False,  # scale/zero pair readable as one aligned int32 word
    HEAD_MAJOR: tl.constexpr = False,  # grid (HK, splits, B) instead of (splits, HK, B)
    FUSE_SUMS: tl.constexpr = False,  # sum(p) and sum(p * zero) in one reduction
):
    sid, hk, b = _split_program(HEAD_MAJOR)

    q0, q_len, prefix, start, end = _split_slice(SeqLens, QStart, b, sid, num_splits, QL, BLOCK_N, HAS_QSTART, RAW_TAIL)

    if DOT_BF16:
        dot_t = tl.bfloat16
    else:
        dot_t = tl.float16

    rows = tl.arange(0, M_PAD)
    qi = rows // G
    g = rows - qi * G
    row_ok = rows < q_len * G
    row_last = prefix + qi  # last visible position of each row (causal)

    dd = tl.arange(0, D)
    q_row = QR + (q0 + qi).to(tl.int64)[:, None] * stride_qt + (hk * G + g)[:, None] * stride_qh
    q = tl.load(q_row + dd[None, :], mask=row_ok[:, None], other=0.0).to(dot_t)

    m_i = tl.full([M_PAD], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([M_PAD], dtype=tl.float32)
    z_i = tl.zeros([M_PAD], dtype=tl.float32)
    acc_lo = tl.zeros([M_PAD, D // 2], dtype=tl.float32)
    acc_hi = tl.zeros([M_PAD, D // 2], dtype=tl.float32)
    dh = tl.arange(0, D // 2)
    bt_row = BT + b.to(tl.int64) * stride_bt
    kv_head = hk.to(tl.int64) * stride_kh
    offs_n = tl.arange(0, BLOCK_N)
    PR: tl.constexpr = PAGE if PAGE < BLOCK_N else BLOCK_N  # rows of one page in a tile
    NP: tl.constexpr = BLOCK_N // PR  # pages per tile

    r3 = tl.arange(0, PR)
    pg = tl.arange(0, NP)
    row_off = r3 * stride_kp
    koff = row_off[None, :, None] + dd[None, None, :]
    voff = row_off[None, :, None] + KPS + dh[None, None, :]
    soff = row_off[None, :] + (KPS + VAL_BYTES)
    last_page = (end - 1) // PAGE
    if PREFETCH:
        # hand-pipelined: tile i+1's bytes and tile i+2's block ids are requested
        # before tile i is computed
        nz = (start + pg * 0) < end
        p0 = tl.maximum(tl.minimum(start // PAGE + pg, last_page), 0)
        b0 = tl.load(bt_row + p0, mask=nz, other=0).to(tl.int64)
        pb0 = tl.multiple_of(b0 * stride_kb + kv_head + (start % PAGE) * stride_kp, ALIGN)
        kb_n = tl.load(KV + pb0[:, None, None] + koff, mask=nz[:, None, None], other=0)
        vb_n = tl.load(KV + pb0[:, None, None] + voff, mask=nz[:, None, None], other=0)
        if SZW:
            vs_n = tl.load((KV + pb0[:, None] + soff).to(tl.pointer_type(tl.int32)), mask=nz[:, None], other=0)
            vz_n = vs_n
        else:
            sz0 = (KV + pb0[:, None] + soff).to(tl.pointer_type(tl.float16))
            vs_n = tl.load(sz0, mask=nz[:, None], other=0.0)
            vz_n = tl.load(sz0 + 1, mask=nz[:, None], other=0.0)
        p1 = tl.maximum(tl.minimum((start + BLOCK_N) // PAGE + pg, last_page), 0)
        blk_n = tl.load(bt_row + p1, mask=nz, other=0)
    for n0 in range(start, end, BLOCK_N):
        pos = n0 + offs_n
        pmask = pos < end
        if PREFETCH:
            kb3 = kb_n
            vb3 = vb_n
            vs3 = vs_n
            vz3 = vz_n
            n1 = n0 + BLOCK_N
            pb1 = tl.multiple_of(blk_n.to(tl.int64) * stride_kb + kv_head + (n1 % PAGE) * stride_kp, ALIGN)
            kb_n = tl.load(KV + pb1[:, None, None] + koff)
            vb_n = tl.load(KV + pb1[:, None, None] + voff)
            if SZW:
                vs_n = tl.load((KV + pb1[:, None] + soff).to(tl.pointer_type(tl.int32)))
                vz_n = vs_n
            else:
                sz1 = (KV + pb1[:, None] + soff).to(tl.pointer_type(tl.float16))
                vs_n = tl.load(sz1)
                vz_n = tl.load(sz1 + 1)
            blk_n = tl.load(bt_row + tl.minimum((n0 + 2 * BLOCK_N) // PAGE + pg, last_page))
        else:
            pidx = tl.minimum(n0 // PAGE + pg, last_page)
            blk = tl.load(bt_row + pidx).to(tl.int64)
            pbase = tl.multiple_of(blk * stride_kb + kv_head + (n0 % PAGE) * stride_kp, ALIGN)
            kb3 = tl.load(KV + pbase[:, None, None] + koff)
            vb3 = tl.load(KV + pbase[:, None, None] + voff)
            if SZW:
                # scale and zero as one int32 word: Triton's pipeliner prefetches it with
                # the tile (two 2-byte loads were issued and awaited inside each step)
                vs3 = tl.load((KV + pbase[:, None] + soff).to(tl.pointer_type(tl.int32)))
                vz3 = vs3
            else:
                sz = (KV + pbase[:, None] + soff).to(tl.pointer_type(tl.float16))
                vs3 = tl.load(sz)
                vz3 = tl.load(sz + 1)
        kb = tl.reshape(kb3, [BLOCK_N, D])
        if FP8_E4B15:
            k = kb.to(tl.float8e4b15, bitcast=True).to(tl.float16).to(dot_t)
        else:
            k = kb.to(tl.float8e4nv, bitcast=True).to(tl.float16).to(dot_t)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        valid = pmask[None, :]
        if not RAW_TAIL:
            valid = valid & (pos[None, :] <= row_last[:, None])
        s = tl.where(valid, s, float("-inf"))
        m_new, alpha, p = _online_softmax(s, m_i)
        m_i = m_new
        if SZW:
            vs, vz = _scale_zero(tl.reshape(vs3, [BLOCK_N]))
        else:
            vs = tl.reshape(vs3, [BLOCK_N]).to(tl.float32)
            vz = tl.reshape(vz3, [BLOCK_N]).to(tl.float32)
        ps, l_i, z_i = _fp8_weights(p, alpha, vs, vz, pmask, l_i, z_i, FUSE_SUMS)
        vb = tl.reshape(vb3, [BLOCK_N, D // 2]).to(tl.uint16)
        lo = (((vb & 15) | 0x6400).to(tl.float16, bitcast=True) - 1024.0).to(tl.float16)
        hi = (((vb >> 4) | 0x6400).to(tl.float16, bitcast=True) - 1024.0).to(tl.float16)
        acc_lo = tl.dot(ps, lo, acc_lo * alpha[:, None])
        acc_hi = tl.dot(ps, hi, acc_hi * alpha[:, None])

    l_safe, lse, zo = _split_stats(m_i, l_i, z_i)
    mid_row = ((b.to(tl.int64) * HK + hk) * num_splits + sid) * ROWS + rows
    rmask = rows < ROWS
    tl.store(MidL + mid_row, lse, mask=rmask)
    o_lo = acc_lo / l_safe[:, None] + zo[:, None]
    o_hi = acc_hi / l_safe[:, None] + zo[:, None]
    optr = MidO + mid_row[:, None] * D + 2 * dh[None, :]
    tl.store(optr, o_lo, mask=rmask[:, None])
    tl.store(optr + 1, o_hi, mask=rmask[:, None])
