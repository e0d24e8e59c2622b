"""Stage 1 with one online-softmax state per warp (fp8 keys + 4-bit values read as int32 words).

``_tq_per_warp_softmax``: the tokens of a tile split across the warps, each warp with
its own running max, sums and accumulators, merged once after the loop (D >= 128; meant
for at most 16 rows). The launcher's config: ``stage1.PerWarpSoftmax``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._triton_words import _add2, _fp8_words, _scale_zero, _split_slice, _split_stats, _u4_words


@triton.jit(do_not_specialize=["num_splits"])  # any split count: one compiled variant
def _tq_per_warp_softmax(
    QR,
    KV,
    BT,
    SeqLens,
    QStart,
    Cent,
    MidO,
    MidL,
    stride_qt,
    stride_qh,
    stride_kb,
    stride_kp,
    stride_kh,
    stride_bt,
    num_splits,
    qk_scale,
    HK: tl.constexpr,
    G: tl.constexpr,
    QL: tl.constexpr,
    ROWS: tl.constexpr,
    M_PAD: tl.constexpr,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    KEY_FP8: tl.constexpr,
    MSE_BITS: tl.constexpr,
    NORM_CORR: tl.constexpr,
    VQB: tl.constexpr,
    KPS: tl.constexpr,
    VAL_BYTES: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ALIGN: tl.constexpr,
    RAW_TAIL: tl.constexpr,
    HAS_QSTART: tl.constexpr,
    FP8_E4B15: tl.constexpr,
    DOT_BF16: tl.constexpr,
    PREFETCH: tl.constexpr = False,
    ASM: tl.constexpr = False,
    NW: tl.constexpr = 4,  # warps of the program = independent softmax states
    VSPLIT: tl.constexpr = 1,  # programs sharing one (split, head, sequence), each 1/VSPLIT of the values
):
    """Stage 1 for fp8 keys + 4-bit values (int32 word loads, D >= 128) with one
    online-softmax state per warp.

    A tile of ``BLOCK_N`` tokens is split into ``NW`` sub-tiles of ``BLOCK_N / NW``
    consecutive tokens; every tensor carries a leading warp axis, so the products are
    batched dots whose batch axis Triton places on the warps (rank-3 MMA layout). Each warp
    keeps its own running max, row sums and accumulators over its tokens; the row max and
    sums of a step are reductions inside a warp (shuffles), never across warps. The
    ``NW`` states are merged once, after the loop. Costs ``NW`` times the accumulator
    registers (every warp holds all ``M_PAD x D`` outputs), so it is meant for 16 rows and
    D = 128. With ``VSPLIT`` > 1 (D = 256), ``VSPLIT`` programs score the same keys and
    each accumulates ``D / VSPLIT`` of the value columns (keys read VSPLIT times, mostly
    from L2), which keeps the accumulators within the register file. Same inputs and
    outputs as kernel "n" (``_dequant_split``); grid ``(splits * VSPLIT, Hk, B)``.
    """
    pid0 = tl.program_id(0)
    sid = pid0 // VSPLIT
    vh = pid0 - sid * VSPLIT
    hk = tl.program_id(1)
    b = tl.program_id(2)

    q0, q_len, prefix, start, end = _split_slice(SeqLens, QStart, b, sid, num_splits, QL, BLOCK_N, HAS_QSTART, RAW_TAIL)

    NT: tl.constexpr = BLOCK_N // NW  # tokens per warp and step
    DQ: tl.constexpr = D // 4
    DV: tl.constexpr = D // 8 // VSPLIT  # value words (8 columns each) of this program
    rows = tl.arange(0, M_PAD)
    qi = rows // G
    g = rows - qi * G
    row_ok = rows < q_len * G
    row_last = prefix + qi
    dq = tl.arange(0, DQ)
    dv = tl.arange(0, DV)
    wv = tl.arange(0, NW)
    jj = tl.arange(0, NT)

    # query columns d = 4j + c against byte c of each key word (no re-interleave)
    qrow = QR + (q0 + qi).to(tl.int64)[:, None] * stride_qt + (hk * G + g)[:, None] * stride_qh + 4 * dq[None, :]
    qa = tl.broadcast_to(tl.load(qrow, mask=row_ok[:, None], other=0.0).to(tl.float16)[None, :, :], [NW, M_PAD, DQ])
    qb = tl.broadcast_to(tl.load(qrow + 1, mask=row_ok[:, None], other=0.0).to(tl.float16)[None, :, :], [NW, M_PAD, DQ])
    qc = tl.broadcast_to(tl.load(qrow + 2, mask=row_ok[:, None], other=0.0).to(tl.float16)[None, :, :], [NW, M_PAD, DQ])
    qd = tl.broadcast_to(tl.load(qrow + 3, mask=row_ok[:, None], other=0.0).to(tl.float16)[None, :, :], [NW, M_PAD, DQ])

    m_i = tl.full([NW, M_PAD], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([NW, M_PAD], dtype=tl.float32)
    z_i = tl.zeros([NW, M_PAD], dtype=tl.float32)
    a0 = tl.zeros([NW, M_PAD, DV], dtype=tl.float32)
    a1 = tl.zeros([NW, M_PAD, DV], dtype=tl.float32)
    a2 = tl.zeros([NW, M_PAD, DV], dtype=tl.float32)
    a3 = tl.zeros([NW, M_PAD, DV], dtype=tl.float32)
    a4 = tl.zeros([NW, M_PAD, DV], dtype=tl.float32)
    a5 = tl.zeros([NW, M_PAD, DV], dtype=tl.float32)
    a6 = tl.zeros([NW, M_PAD, DV], dtype=tl.float32)
    a7 = tl.zeros([NW, M_PAD, DV], dtype=tl.float32)

    bt_row = BT + b.to(tl.int64) * stride_bt
    kv_head = hk.to(tl.int64) * stride_kh
    KVW = KV.to(tl.pointer_type(tl.int32))
    WPAGE: tl.constexpr = (PAGE & (PAGE - 1) == 0) and (PAGE % NT == 0)  # a sub-tile sits in one page
    row_w = jj * (stride_kp // 4)
    VW0 = KPS // 4 + vh * DV  # first value word of this program
    last_page = (end - 1) // PAGE
    if WPAGE:
        kwo = row_w[None, :, None] + dq[None, None, :]
        vwo = row_w[None, :, None] + VW0 + dv[None, None, :]
        swo = row_w[None, :] + (KPS + VAL_BYTES) // 4
    if PREFETCH:
        nz = (start + wv * 0) < end
        t0 = start + wv * NT
        if WPAGE:
            b0 = tl.load(bt_row + tl.maximum(tl.minimum(t0 // PAGE, last_page), 0), mask=nz, other=0).to(tl.int64)
            wb = (b0 * stride_kb + kv_head + (t0 % PAGE) * stride_kp) // 4
            kw_n = tl.load(KVW + wb[:, None, None] + kwo, mask=nz[:, None, None], other=0)
            vw_n = tl.load(KVW + wb[:, None, None] + vwo, mask=nz[:, None, None], other=0)
            sw_n = tl.load(KVW + wb[:, None] + swo, mask=nz[:, None], other=0)
            t1 = start + BLOCK_N + wv * NT
            blk_n = tl.load(bt_row + tl.maximum(tl.minimum(t1 // PAGE, last_page), 0), mask=nz, other=0)
        else:
            pc = tl.maximum(tl.minimum(t0[:, None] + jj[None, :], end - 1), 0)
            b0 = tl.load(bt_row + pc // PAGE, mask=nz[:, None], other=0).to(tl.int64)
            wb = (b0 * stride_kb + kv_head + (pc % PAGE) * stride_kp) // 4
            kw_n = tl.load(KVW + wb[:, :, None] + dq[None, None, :], mask=nz[:, None, None], other=0)
            vw_n = tl.load(KVW + wb[:, :, None] + VW0 + dv[None, None, :], mask=nz[:, None, None], other=0)
            sw_n = tl.load(KVW + wb + (KPS + VAL_BYTES) // 4, mask=nz[:, None], other=0)
    for n0 in range(start, end, BLOCK_N):
        pos = n0 + wv[:, None] * NT + jj[None, :]  # [NW, NT]
        pmask = pos < end
        if PREFETCH:
            kw = kw_n
            vw = vw_n
            sw = sw_n
            t1 = n0 + BLOCK_N + wv * NT
            if WPAGE:
                wb = (blk_n.to(tl.int64) * stride_kb + kv_head + (t1 % PAGE) * stride_kp) // 4
                kw_n = tl.load(KVW + wb[:, None, None] + kwo)
                vw_n = tl.load(KVW + wb[:, None, None] + vwo)
                sw_n = tl.load(KVW + wb[:, None] + swo)
                blk_n = tl.load(bt_row + tl.minimum((t1 + BLOCK_N) // PAGE, last_page))
            else:
                pc = tl.minimum(t1[:, None] + jj[None, :], end - 1)
                bn = tl.load(bt_row + pc // PAGE).to(tl.int64)
                wb = (bn * stride_kb + kv_head + (pc % PAGE) * stride_kp) // 4
                kw_n = tl.load(KVW + wb[:, :, None] + dq[None, None, :])
                vw_n = tl.load(KVW + wb[:, :, None] + VW0 + dv[None, None, :])
                sw_n = tl.load(KVW + wb + (KPS + VAL_BYTES) // 4)
        else:
            t0 = n0 + wv * NT
            if WPAGE:
                blk = tl.load(bt_row + tl.minimum(t0 // PAGE, last_page)).to(tl.int64)
                wb = (blk * stride_kb + kv_head + (t0 % PAGE) * stride_kp) // 4
                kw = tl.load(KVW + wb[:, None, None] + kwo)
                vw = tl.load(KVW + wb[:, None, None] + vwo)
                sw = tl.load(KVW + wb[:, None] + swo)
            else:
                pc = tl.minimum(pos, end - 1)
                blk = tl.load(bt_row + pc // PAGE).to(tl.int64)
                wb = (blk * stride_kb + kv_head + (pc % PAGE) * stride_kp) // 4
                kw = tl.load(KVW + wb[:, :, None] + dq[None, None, :])
                vw = tl.load(KVW + wb[:, :, None] + VW0 + dv[None, None, :])
                sw = tl.load(KVW + wb + (KPS + VAL_BYTES) // 4)
        k0, k1, k2, k3 = _fp8_words(kw, ASM, FP8_E4B15)
        s = tl.dot(qa, tl.permute(k0, (0, 2, 1)))
        s = tl.dot(qb, tl.permute(k1, (0, 2, 1)), s)
        s = tl.dot(qc, tl.permute(k2, (0, 2, 1)), s)
        s = tl.dot(qd, tl.permute(k3, (0, 2, 1)), s)  # [NW, M_PAD, NT], unscaled
        valid = pmask[:, None, :]
        if not RAW_TAIL:
            valid = valid & (pos[:, None, :] <= row_last[None, :, None])
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 2) * qk_scale)  # qk_scale > 0
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_use)
        p = tl.exp2(s * qk_scale - m_use[:, :, None])
        m_i = m_new
        vs, vz = _scale_zero(sw)
        vs = tl.where(pmask, vs, 0.0)
        vz = tl.where(pmask, vz, 0.0)
        ps = (p * vs[:, None, :]).to(tl.float16)
        ls, zs = tl.reduce((p, p * vz[:, None, :]), 2, _add2)  # inside each warp
        l_i = l_i * alpha + ls
        z_i = z_i * alpha + zs
        c0, c1, c2, c3, c4, c5, c6, c7 = _u4_words(vw, ASM)
        al = alpha[:, :, None]
        a0 = tl.dot(ps, c0, a0 * al)
        a1 = tl.dot(ps, c1, a1 * al)
        a2 = tl.dot(ps, c2, a2 * al)
        a3 = tl.dot(ps, c3, a3 * al)
        a4 = tl.dot(ps, c4, a4 * al)
        a5 = tl.dot(ps, c5, a5 * al)
        a6 = tl.dot(ps, c6, a6 * al)
        a7 = tl.dot(ps, c7, a7 * al)

    # merge the warps' states (once per program)
    m_c = tl.max(m_i, 0)
    m_cu = tl.where(m_c == float("-inf"), 0.0, m_c)
    f = tl.exp2(m_i - m_cu[None, :])  # 0 for warps that saw no token
    l_c = tl.sum(l_i * f, 0)
    z_c = tl.sum(z_i * f, 0)
    l_safe, lse, zo = _split_stats(m_c, l_c, z_c)
    zo = zo[:, None]
    inv = 1.0 / l_safe[:, None]
    fw = f[:, :, None]
    mid_row = ((b.to(tl.int64) * HK + hk) * num_splits + sid) * ROWS + rows
    rmask = rows < ROWS
    tl.store(MidL + mid_row, lse, mask=rmask & ((rows * 0 + vh) == 0))
    om = rmask[:, None]
    optr = MidO + mid_row[:, None] * D + 8 * (vh * DV + dv[None, :])
    tl.store(optr, tl.sum(a0 * fw, 0) * inv + zo, mask=om)
    tl.store(optr + 1, tl.sum(a1 * fw, 0) * inv + zo, mask=om)
    tl.store(optr + 2, tl.sum(a2 * fw, 0) * inv + zo, mask=om)
    tl.store(optr + 3, tl.sum(a3 * fw, 0) * inv + zo, mask=om)
    tl.store(optr + 4, tl.sum(a4 * fw, 0) * inv + zo, mask=om)
    tl.store(optr + 5, tl.sum(a5 * fw, 0) * inv + zo, mask=om)
    tl.store(optr + 6, tl.sum(a6 * fw, 0) * inv + zo, mask=om)
    tl.store(optr + 7, tl.sum(a7 * fw, 0) * inv + zo, mask=om)
