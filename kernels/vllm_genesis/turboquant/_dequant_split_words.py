"""Kernel "n" on int32 words: fp8 keys and 4-bit values, D >= 128, pages a power of two (``TileConfig(words=...)``).

``_tq_dequant_split_words`` reads each token's fp8 key bytes, 4-bit codes and scale/zero
pair as int32 words and splits them in registers (``WORDS`` 2 and 4: PTX ``cvt``/``lop3``;
1 and 3: shifts). With ``WORDS`` 1 and 2 the 4 key bytes of a word feed 4 products against
the matching strided query columns (d = 4j + c) and the 8 codes of a value word feed 8
products whose results are the output columns d = 8j + c; with 3 and 4 both are
re-interleaved in registers for one product each. Pages are addressed as on
``_dequant_split_pages`` (one block-table entry and one 64-bit base a page). The kernel
family and the helpers: ``_dequant_split``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._dequant_split import _fp8_weights, _online_softmax, _split_program
from ._triton_words import _fp8_words, _scale_zero, _split_slice, _split_stats, _u4_words


@triton.jit(do_not_specialize=["num_splits"])  # any split count: one compiled variant
def _tq_dequant_split_words(
    QR,  # [T, Hq, D] query, any float dtype
    KV,  # uint8 cache [num_blocks, PAGE, HK, slot], int32 words readable (the launcher checks)
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
    WORDS: tl.constexpr,  # 1-4: shifts / PTX, strided products / re-interleaved
    PREFETCH: tl.constexpr = False,
    PF_DEPTH: tl.constexpr = 1,  # PREFETCH: tiles requested ahead (1 or 2)
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
    bt_row = BT + b.to(tl.int64) * stride_bt
    kv_head = hk.to(tl.int64) * stride_kh
    offs_n = tl.arange(0, BLOCK_N)
    PR: tl.constexpr = PAGE if PAGE < BLOCK_N else BLOCK_N  # rows of one page in a tile
    NP: tl.constexpr = BLOCK_N // PR  # pages per tile

    ASM: tl.constexpr = ((WORDS == 2) or (WORDS == 4)) and (not FP8_E4B15)
    JOIN: tl.constexpr = WORDS >= 3  # re-interleave in registers: one product each
    DQ: tl.constexpr = D // 4
    DV: tl.constexpr = D // 8
    dq = tl.arange(0, DQ)
    dv = tl.arange(0, DV)
    if not JOIN:
        qrow = q_row + 4 * dq[None, :]
        qa = tl.load(qrow, mask=row_ok[:, None], other=0.0).to(tl.float16)
        qb = tl.load(qrow + 1, mask=row_ok[:, None], other=0.0).to(tl.float16)
        qc = tl.load(qrow + 2, mask=row_ok[:, None], other=0.0).to(tl.float16)
        qd = tl.load(qrow + 3, mask=row_ok[:, None], other=0.0).to(tl.float16)
    accj = tl.zeros([M_PAD, D], dtype=tl.float32)
    a0 = tl.zeros([M_PAD, DV], dtype=tl.float32)
    a1 = tl.zeros([M_PAD, DV], dtype=tl.float32)
    a2 = tl.zeros([M_PAD, DV], dtype=tl.float32)
    a3 = tl.zeros([M_PAD, DV], dtype=tl.float32)
    a4 = tl.zeros([M_PAD, DV], dtype=tl.float32)
    a5 = tl.zeros([M_PAD, DV], dtype=tl.float32)
    a6 = tl.zeros([M_PAD, DV], dtype=tl.float32)
    a7 = tl.zeros([M_PAD, DV], dtype=tl.float32)
    # word offsets from a word pointer (the launcher checks 4-byte alignment), so that
    # Triton sees the words of a row as contiguous and lays the threads along them
    # (byte offsets cast to word pointers lose that: every warp load then touched ~25
    # sectors instead of ~4)
    KVW = KV.to(tl.pointer_type(tl.int32))
    r3 = tl.arange(0, PR)
    pg = tl.arange(0, NP)
    row_w = r3 * (stride_kp // 4)
    kwo = row_w[None, :, None] + dq[None, None, :]
    vwo = row_w[None, :, None] + KPS // 4 + dv[None, None, :]
    swo = row_w[None, :] + (KPS + VAL_BYTES) // 4
    last_page = (end - 1) // PAGE
    # PREFETCH: tiles up to PF_DEPTH ahead are requested before a tile is computed
    # (word offsets of their pages carried in registers), and the block ids of the tile
    # after those
    if PREFETCH:
        nz = (start + pg * 0) < end
        p0 = tl.maximum(tl.minimum(start // PAGE + pg, last_page), 0)
        b0 = tl.load(bt_row + p0, mask=nz, other=0).to(tl.int64)
        p1 = tl.maximum(tl.minimum((start + BLOCK_N) // PAGE + pg, last_page), 0)
        blk_n = tl.load(bt_row + p1, mask=nz, other=0)
        if PF_DEPTH >= 2:
            p2 = tl.maximum(tl.minimum((start + 2 * BLOCK_N) // PAGE + pg, last_page), 0)
            blk_nn = tl.load(bt_row + p2, mask=nz, other=0)
        pb0 = tl.multiple_of(b0 * stride_kb + kv_head + (start % PAGE) * stride_kp, ALIGN)
        kw_n = tl.load(KVW + (pb0 // 4)[:, None, None] + kwo, mask=nz[:, None, None], other=0)
        vw_n = tl.load(KVW + (pb0 // 4)[:, None, None] + vwo, mask=nz[:, None, None], other=0)
        sw_n = tl.load(KVW + (pb0 // 4)[:, None] + swo, mask=nz[:, None], other=0)
        if PF_DEPTH >= 2:
            n1 = start + BLOCK_N
            pb1 = tl.multiple_of(blk_n.to(tl.int64) * stride_kb + kv_head + (n1 % PAGE) * stride_kp, ALIGN)
            kw_nn = tl.load(KVW + (pb1 // 4)[:, None, None] + kwo, mask=nz[:, None, None], other=0)
            vw_nn = tl.load(KVW + (pb1 // 4)[:, None, None] + vwo, mask=nz[:, None, None], other=0)
            sw_nn = tl.load(KVW + (pb1 // 4)[:, None] + swo, mask=nz[:, None], other=0)
            blk_n = blk_nn
    for n0 in range(start, end, BLOCK_N):
        pos = n0 + offs_n
        pmask = pos < end
        if PREFETCH:
            kw3 = kw_n
            vw3 = vw_n
            sw3 = sw_n
            n1 = n0 + PF_DEPTH * BLOCK_N
            pb1 = tl.multiple_of(blk_n.to(tl.int64) * stride_kb + kv_head + (n1 % PAGE) * stride_kp, ALIGN)
            if PF_DEPTH >= 2:
                kw_n = kw_nn
                vw_n = vw_nn
                sw_n = sw_nn
                kw_nn = tl.load(KVW + (pb1 // 4)[:, None, None] + kwo)
                vw_nn = tl.load(KVW + (pb1 // 4)[:, None, None] + vwo)
                sw_nn = tl.load(KVW + (pb1 // 4)[:, None] + swo)
            else:
                kw_n = tl.load(KVW + (pb1 // 4)[:, None, None] + kwo)
                vw_n = tl.load(KVW + (pb1 // 4)[:, None, None] + vwo)
                sw_n = tl.load(KVW + (pb1 // 4)[:, None] + swo)
            blk_n = tl.load(bt_row + tl.minimum((n1 + BLOCK_N) // PAGE + pg, last_page))
        else:
            pidx = tl.minimum(n0 // PAGE + pg, last_page)
            blk = tl.load(bt_row + pidx).to(tl.int64)
            pbase = tl.multiple_of(blk * stride_kb + kv_head + (n0 % PAGE) * stride_kp, ALIGN)
            kw3 = tl.load(KVW + (pbase // 4)[:, None, None] + kwo)
            vw3 = tl.load(KVW + (pbase // 4)[:, None, None] + vwo)
            sw3 = tl.load(KVW + (pbase // 4)[:, None] + swo)
        k0, k1, k2, k3 = _fp8_words(tl.reshape(kw3, [BLOCK_N, DQ]), ASM, FP8_E4B15)
        if JOIN:
            kj = tl.reshape(tl.join(tl.join(k0, k2), tl.join(k1, k3)), [BLOCK_N, D])
            s = tl.dot(q.to(tl.float16), tl.trans(kj))
        else:
            s = tl.dot(qa, tl.trans(k0))
            s = tl.dot(qb, tl.trans(k1), s)
            s = tl.dot(qc, tl.trans(k2), s)
            s = tl.dot(qd, tl.trans(k3), s)
        s = s * qk_scale
        valid = pmask[None, :]
        if not RAW_TAIL:
            valid = valid & (pos[None, :] <= row_last[:, None])
        s = tl.where(valid, s, float("-inf"))
        m_new, alpha, p = _online_softmax(s, m_i)
        m_i = m_new
        vs, vz = _scale_zero(tl.reshape(sw3, [BLOCK_N]))
        ps, l_i, z_i = _fp8_weights(p, alpha, vs, vz, pmask, l_i, z_i, FUSE_SUMS)
        c0, c1, c2, c3, c4, c5, c6, c7 = _u4_words(tl.reshape(vw3, [BLOCK_N, DV]), ASM)
        al = alpha[:, None]
        if JOIN:
            lo = tl.join(tl.join(c0, c4), tl.join(c2, c6))
            hi = tl.join(tl.join(c1, c5), tl.join(c3, c7))
            vj = tl.reshape(tl.join(lo, hi), [BLOCK_N, D])
            accj = tl.dot(ps, vj, accj * al)
        else:
            a0 = tl.dot(ps, c0, a0 * al)
            a1 = tl.dot(ps, c1, a1 * al)
            a2 = tl.dot(ps, c2, a2 * al)
            a3 = tl.dot(ps, c3, a3 * al)
            a4 = tl.dot(ps, c4, a4 * al)
            a5 = tl.dot(ps, c5, a5 * al)
            a6 = tl.dot(ps, c6, a6 * al)
            a7 = tl.dot(ps, c7, a7 * al)

    l_safe, lse, zo = _split_stats(m_i, l_i, z_i)
    zo = zo[:, None]
    inv = 1.0 / l_safe[:, None]
    mid_row = ((b.to(tl.int64) * HK + hk) * num_splits + sid) * ROWS + rows
    rmask = rows < ROWS
    tl.store(MidL + mid_row, lse, mask=rmask)
    om = rmask[:, None]
    if JOIN:
        tl.store(MidO + mid_row[:, None] * D + dd[None, :], accj * inv + zo, mask=om)
    else:
        optr = MidO + mid_row[:, None] * D + 8 * dv[None, :]
        tl.store(optr, a0 * inv + zo, mask=om)
        tl.store(optr + 1, a1 * inv + zo, mask=om)
        tl.store(optr + 2, a2 * inv + zo, mask=om)
        tl.store(optr + 3, a3 * inv + zo, mask=om)
        tl.store(optr + 4, a4 * inv + zo, mask=om)
        tl.store(optr + 5, a5 * inv + zo, mask=om)
        tl.store(optr + 6, a6 * inv + zo, mask=om)
        tl.store(optr + 7, a7 * inv + zo, mask=om)
