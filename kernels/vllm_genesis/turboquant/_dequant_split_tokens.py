"""Kernel "n" with each token addressed on its own: MSE keys, and fp8 keys off the page-structured kernels.

``_tq_dequant_split_tokens`` reads every preset. Each token of a tile has its own block-table
entry and slot base (tokens past the end re-read the last valid one, so the cache loads need
no predicate). Keys:

* fp8 bytes -> fp16/bf16, one product against the query;
* 4-bit MSE indices (D >= 32): each index byte read once and split into its two nibbles
  (indices 2j and 2j + 1), scored against the query's even and odd columns;
* 3-bit MSE indices (D >= 128): 8 indices per 3 bytes, read as one 24-bit group and scored
  in 8 products against the query's columns j, j + 8, ...;
* other MSE keys: each index from its two bytes, one product.

The centroids are gathered per index, or with ``CPAIR`` two at a time from the pair table
(``stage1.centroid_pairs``; ``PAIR_TABLE``: the table loaded once and gathered from shared
memory); ``NORM_CORR`` divides each key by its centroids' norm. 4-bit values feed one
product per nibble (even and odd output columns), other widths one product on codes read
from two bytes. With ``PREFETCH`` (MSE keys, 4-bit values, nibble or 24-bit keys) each step
requests the next tile's bytes before it computes on the ones the step before requested.
The kernel family and the helpers: ``_dequant_split``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._dequant_split import _online_softmax, _split_program
from ._triton_words import _centroid_pair, _mse_tile_bytes, _split_slice, _split_stats


@triton.jit(do_not_specialize=["num_splits"])  # any split count: one compiled variant
def _tq_dequant_split_tokens(
    QR,  # [T, Hq, D] query (rotated for MSE keys), any float dtype
    KV,  # uint8 cache [num_blocks, PAGE, HK, slot]
    BT,  # int32 [B, max_blocks]
    SeqLens,  # int32 [B]
    QStart,  # int32 [B + 1] (only read when HAS_QSTART)
    Cent,  # MSE keys: fp32 centroids, or with CPAIR int32 centroid pairs (``centroid_pairs``)
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
    HEAD_MAJOR: tl.constexpr = False,  # grid (HK, splits, B) instead of (splits, HK, B)
    CPAIR: tl.constexpr = False,  # MSE keys (4-bit split, 3-bit groups): Cent holds centroid pairs
    PAIR_TABLE: tl.constexpr = False,  # CPAIR: the pair table loaded once, gathered from shared memory
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

    KSPLIT: tl.constexpr = (not KEY_FP8) and (MSE_BITS == 4) and (D >= 32)  # 4-bit indices by nibbles
    K3G: tl.constexpr = (not KEY_FP8) and (MSE_BITS == 3) and (D >= 128)  # 3-bit indices by 24-bit groups
    if CPAIR and PAIR_TABLE:
        pairs = tl.load(Cent + tl.arange(0, 1 << (2 * MSE_BITS)))
    else:
        pairs = Cent
    if KSPLIT:  # (a product needs D / 2 >= 16)
        q_ev_ptrs = q_row + 2 * tl.arange(0, D // 2)[None, :]
        q_ev = tl.load(q_ev_ptrs, mask=row_ok[:, None], other=0.0).to(dot_t)
        q_od = tl.load(q_ev_ptrs + 1, mask=row_ok[:, None], other=0.0).to(dot_t)

    m_i = tl.full([M_PAD], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([M_PAD], dtype=tl.float32)
    z_i = tl.zeros([M_PAD], dtype=tl.float32)
    VSPLIT: tl.constexpr = (VQB == 4) and (D >= 32)
    if VSPLIT:
        acc_lo = tl.zeros([M_PAD, D // 2], dtype=tl.float32)
        acc_hi = tl.zeros([M_PAD, D // 2], dtype=tl.float32)
    else:
        acc = tl.zeros([M_PAD, D], dtype=tl.float32)

    dh = tl.arange(0, D // 2)
    if not KEY_FP8:
        k_bit = dd * MSE_BITS
        k_byte = k_bit // 8
        k_shift = k_bit % 8
    if not VSPLIT:
        v_bit = dd * VQB
        v_byte = v_bit // 8
        v_shift = v_bit % 8

    bt_row = BT + b.to(tl.int64) * stride_bt
    kv_head = hk.to(tl.int64) * stride_kh
    offs_n = tl.arange(0, BLOCK_N)
    MPF: tl.constexpr = PREFETCH and (not KEY_FP8) and (KSPLIT or K3G) and VSPLIT
    if MPF:
        n_kn, n_k0, n_k1, n_k2, n_vb, n_vs, n_vz = _mse_tile_bytes(
            KV, bt_row, kv_head, start, end, stride_kb, stride_kp, PAGE, BLOCK_N, ALIGN, KPS, VAL_BYTES, D, K3G)
    for n0 in range(start, end, BLOCK_N):
        pos = n0 + offs_n
        pmask = pos < end
        if MPF:
            t_kn, t_k0, t_k1, t_k2, t_vb, t_vs, t_vz = n_kn, n_k0, n_k1, n_k2, n_vb, n_vs, n_vz
            n_kn, n_k0, n_k1, n_k2, n_vb, n_vs, n_vz = _mse_tile_bytes(
                KV, bt_row, kv_head, n0 + BLOCK_N, end, stride_kb, stride_kp, PAGE, BLOCK_N, ALIGN, KPS, VAL_BYTES,
                D, K3G)
        pos_c = tl.minimum(pos, end - 1)
        if PAGE % BLOCK_N == 0:
            blk = tl.load(bt_row + n0 // PAGE).to(tl.int64)
        else:
            blk = tl.load(bt_row + pos_c // PAGE).to(tl.int64)
        base = blk * stride_kb + kv_head + (pos_c % PAGE).to(tl.int64) * stride_kp
        base = tl.multiple_of(base, ALIGN)

        # ---- keys -> scores [M_PAD, BLOCK_N]
        if MPF:
            kn = t_kn.to(tl.float32)
        elif not KEY_FP8:  # MSE keys: the key norm follows the indices
            kn = tl.load((KV + base + (KPS - 2)).to(tl.pointer_type(tl.float16))).to(tl.float32)
        if KEY_FP8:
            kb = tl.load(KV + base[:, None] + dd[None, :])
            if FP8_E4B15:
                k = kb.to(tl.float8e4b15, bitcast=True).to(tl.float16).to(dot_t)
            else:
                k = kb.to(tl.float8e4nv, bitcast=True).to(tl.float16).to(dot_t)
            s = tl.dot(q, tl.trans(k)) * qk_scale
        elif K3G:
            dg = tl.arange(0, D // 8)
            if MPF:
                w = t_k0.to(tl.int32) | (t_k1.to(tl.int32) << 8) | (t_k2.to(tl.int32) << 16)
            else:
                kaddr = KV + base[:, None] + 3 * dg[None, :]
                w = tl.load(kaddr).to(tl.int32)
                w = w | (tl.load(kaddr + 1).to(tl.int32) << 8) | (tl.load(kaddr + 2).to(tl.int32) << 16)
            s = tl.zeros([M_PAD, BLOCK_N], dtype=tl.float32)
            if CPAIR:
                # one gather per two indices: 6 bits address a pair of centroids in dot_t; the
                # squared norms summed by products with a ones operand (every row the same)
                csq_m = tl.zeros([M_PAD, BLOCK_N], dtype=tl.float32)
                ones = tl.full([M_PAD, D // 8], 1.0, dot_t)
                for j in tl.static_range(4):
                    c_ev, c_od = _centroid_pair(pairs, (w >> (6 * j)) & 63, dot_t, PAIR_TABLE, BLOCK_N, D // 8)
                    if NORM_CORR:
                        csq_m = tl.dot(ones, tl.trans(c_ev * c_ev), csq_m)
                        csq_m = tl.dot(ones, tl.trans(c_od * c_od), csq_m)
                    qj = q_row + (8 * dg + 2 * j)[None, :]
                    qa = tl.load(qj, mask=row_ok[:, None], other=0.0).to(dot_t)
                    qb = tl.load(qj + 1, mask=row_ok[:, None], other=0.0).to(dot_t)
                    s = tl.dot(qa, tl.trans(c_ev), s)
                    s = tl.dot(qb, tl.trans(c_od), s)
                if NORM_CORR:
                    s = s * tl.math.rsqrt(csq_m + 1e-16)
            else:
                csq = tl.zeros([BLOCK_N], dtype=tl.float32)
                for j in tl.static_range(8):
                    cj = tl.load(Cent + ((w >> (3 * j)) & 7))
                    if NORM_CORR:
                        csq += tl.sum(cj * cj, 1)
                    qj = tl.load(q_row + (8 * dg + j)[None, :], mask=row_ok[:, None], other=0.0).to(dot_t)
                    s = tl.dot(qj, tl.trans(cj.to(dot_t)), s)
                if NORM_CORR:
                    kn = kn / tl.sqrt(csq + 1e-16)
            s = s * (kn * qk_scale)[None, :]
        elif KSPLIT:
            if MPF:
                kb = t_k0.to(tl.int32)
            else:
                kb = tl.load(KV + base[:, None] + dh[None, :]).to(tl.int32)
            if CPAIR:
                # one gather per index byte: both nibbles' centroids in dot_t; the squared norms
                # summed by products with a ones operand (every row the same), not reductions
                c_lo, c_hi = _centroid_pair(pairs, kb, dot_t, PAIR_TABLE, BLOCK_N, D // 2)
                s = tl.dot(q_ev, tl.trans(c_lo))
                s = tl.dot(q_od, tl.trans(c_hi), s)
                if NORM_CORR:
                    ones = tl.full([M_PAD, D // 2], 1.0, dot_t)
                    csq_m = tl.dot(ones, tl.trans(c_lo * c_lo))
                    csq_m = tl.dot(ones, tl.trans(c_hi * c_hi), csq_m)
                    s = s * tl.math.rsqrt(csq_m + 1e-16)
                s = s * (kn * qk_scale)[None, :]
            else:
                c_lo = tl.load(Cent + (kb & 15))
                c_hi = tl.load(Cent + (kb >> 4))
                if NORM_CORR:
                    kn = kn / tl.sqrt(tl.sum(c_lo * c_lo, 1) + tl.sum(c_hi * c_hi, 1) + 1e-16)
                s = tl.dot(q_ev, tl.trans(c_lo.to(dot_t)))
                s = tl.dot(q_od, tl.trans(c_hi.to(dot_t)), s) * (kn * qk_scale)[None, :]
        else:
            kaddr = KV + base[:, None] + k_byte[None, :]
            r0 = tl.load(kaddr).to(tl.int32)
            r1 = tl.load(kaddr + 1).to(tl.int32)
            kidx = ((r0 | (r1 << 8)) >> k_shift[None, :]) & ((1 << MSE_BITS) - 1)
            c = tl.load(Cent + kidx)
            if NORM_CORR:
                kn = kn / tl.sqrt(tl.sum(c * c, 1) + 1e-16)
            s = tl.dot(q, tl.trans(c.to(dot_t))) * (kn * qk_scale)[None, :]

        valid = pmask[None, :]
        if not RAW_TAIL:
            valid = valid & (pos[None, :] <= row_last[:, None])
        s = tl.where(valid, s, float("-inf"))
        m_new, alpha, p = _online_softmax(s, m_i)
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new

        # ---- values: P @ (code * scale + zero)
        if MPF:
            vs = t_vs.to(tl.float32)
            vz = t_vz.to(tl.float32)
        else:
            sz_ptr = (KV + base + (KPS + VAL_BYTES)).to(tl.pointer_type(tl.float16))
            vs = tl.load(sz_ptr).to(tl.float32)
            vz = tl.load(sz_ptr + 1).to(tl.float32)
        ps = (p * vs[None, :]).to(tl.float16)
        z_i = z_i * alpha + tl.sum(p * vz[None, :], 1)
        if VSPLIT:
            if MPF:
                vb = t_vb.to(tl.uint16)
            else:
                vb = tl.load(KV + base[:, None] + KPS + dh[None, :]).to(tl.uint16)
            lo = (((vb & 15) | 0x6400).to(tl.float16, bitcast=True) - 1024.0).to(tl.float16)
            hi = (((vb >> 4) | 0x6400).to(tl.float16, bitcast=True) - 1024.0).to(tl.float16)
            acc_lo = tl.dot(ps, lo, acc_lo * alpha[:, None])
            acc_hi = tl.dot(ps, hi, acc_hi * alpha[:, None])
        else:
            # codes become fp16 by OR-ing them into the mantissa of 1024.0 and subtracting
            # 1024 in fp16 (exact; no int->float conversions)
            vaddr = KV + base[:, None] + KPS + v_byte[None, :]
            w0 = tl.load(vaddr).to(tl.int32)
            w1 = tl.load(vaddr + 1).to(tl.int32)
            code = (((w0 | (w1 << 8)) >> v_shift[None, :]) & ((1 << VQB) - 1)) | 0x6400
            code16 = (code.to(tl.uint16).to(tl.float16, bitcast=True) - 1024.0).to(tl.float16)
            acc = tl.dot(ps, code16, acc * alpha[:, None])

    l_safe, lse, zo = _split_stats(m_i, l_i, z_i)
    mid_row = ((b.to(tl.int64) * HK + hk) * num_splits + sid) * ROWS + rows
    rmask = rows < ROWS
    tl.store(MidL + mid_row, lse, mask=rmask)
    if VSPLIT:
        o_lo = acc_lo / l_safe[:, None] + zo[:, None]
        o_hi = acc_hi / l_safe[:, None] + zo[:, None]
        optr = MidO + mid_row[:, None] * D + 2 * dh[None, :]
        tl.store(optr, o_lo, mask=rmask[:, None])
        tl.store(optr + 1, o_hi, mask=rmask[:, None])
    else:
        o = acc / l_safe[:, None] + zo[:, None]
        tl.store(MidO + mid_row[:, None] * D + dd[None, :], o, mask=rmask[:, None])
