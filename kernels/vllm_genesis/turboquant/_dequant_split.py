"""Stage 1 that dequantises each tile and scores it with rows on the MMA's M side (every preset).

``_tq_dequant_split``: one program per (split, KV head, sequence). It loads the query
rows of *every* query head of the KV head's group and, for verify, of every query token
of the request (rows ``r = i * G + g``), then streams its share of the compressed prefix
once: ``BLOCK_N`` tokens per step, keys dequantised to fp16/bf16 and scored with one
tensor-core product for all rows, online softmax in base 2, values applied as ``P * scale``
times the raw codes (plus ``P . zero``), so the 4-bit codes never need to be turned into
full values. It writes one normalised partial output and one log-sum-exp per row and
split; ``_combine_splits`` merges them.

Two paths inside, chosen at compile time: with ``WORDS`` > 0 (fp8 keys, 4-bit values,
D >= 128) it reads each slot as int32 words and splits them in registers (PTX
``cvt``/``lop3`` or shifts) instead of loading and shuffling single bytes; otherwise the
byte path (MSE keys through centroid gathers, ``CPAIR`` / ``PAIR_TABLE`` for the pair
table). See docs/KERNELS.md for when each pays. The launcher's config: ``stage1.DequantSplit``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._triton_words import _add2, _centroid_pair, _fp8_words, _mse_tile_bytes, _scale_zero, _split_slice, _split_stats, _u4_words


@triton.jit(do_not_specialize=["num_splits"])  # any split count: one compiled variant
def _tq_dequant_split(
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
    WORDS: tl.constexpr = 0,
    SZW: tl.constexpr = False,  # scale/zero pair readable as one aligned int32 word
    PF_DEPTH: tl.constexpr = 1,  # word path, PREFETCH: tiles requested ahead (1 or 2)
    HEAD_MAJOR: tl.constexpr = False,  # grid (HK, splits, B) instead of (splits, HK, B)
    FUSE_SUMS: tl.constexpr = False,  # fp8 paths: sum(p) and sum(p * zero) in one reduction
    CPAIR: tl.constexpr = False,  # MSE keys (4-bit split, 3-bit groups): Cent holds centroid pairs
    PAIR_TABLE: tl.constexpr = False,  # CPAIR: the pair table loaded once, gathered from shared memory
):
    if HEAD_MAJOR:
        hk = tl.program_id(0)
        sid = tl.program_id(1)
    else:
        sid = tl.program_id(0)
        hk = tl.program_id(1)
    b = tl.program_id(2)

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
    # 4-bit MSE keys: each index byte is read once and split into its two nibbles (indices
    # 2j and 2j + 1), scored against the query's even and odd columns (a product needs
    # D / 2 >= 16)
    KSPLIT: tl.constexpr = (not KEY_FP8) and (MSE_BITS == 4) and (D >= 32)
    # 3-bit MSE keys: 8 indices per 3 bytes, read as one 24-bit group and scored in 8 products
    # against the query's columns j, j + 8, ... (each product needs D / 8 >= 16)
    K3G: tl.constexpr = (not KEY_FP8) and (MSE_BITS == 3) and (D >= 128)
    if CPAIR and PAIR_TABLE:
        pairs = tl.load(Cent + tl.arange(0, 1 << (2 * MSE_BITS)))
    else:
        pairs = Cent
    if KSPLIT:
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
        acc = acc_lo
    else:
        acc = tl.zeros([M_PAD, D], dtype=tl.float32)
        acc_lo = acc
        acc_hi = acc

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
    PR: tl.constexpr = PAGE if PAGE < BLOCK_N else BLOCK_N  # rows of one page in a tile
    NP: tl.constexpr = BLOCK_N // PR  # pages per tile
    PAGED: tl.constexpr = KEY_FP8 and VSPLIT and (PAGE & (PAGE - 1) == 0) and (BLOCK_N % PR == 0)
    WPAGED: tl.constexpr = PAGED and (WORDS > 0) and (D >= 128)
    if WPAGED:
        # Word path: each token's fp8 key bytes, 4-bit codes and scale/zero are read as
        # int32 words and split in registers. The 4 key bytes of a word feed 4 products
        # against the matching strided query columns (d = 4j + c); the 8 codes of a value
        # word feed 8 products whose results are the output columns d = 8j + c.
        ASM: tl.constexpr = ((WORDS == 2) or (WORDS == 4)) and (not FP8_E4B15)
        JOIN: tl.constexpr = WORDS >= 3  # re-interleave in registers: one product each
        DQ: tl.constexpr = D // 4
        DV: tl.constexpr = D // 8
        dq = tl.arange(0, DQ)
        dv = tl.arange(0, DV)
        if not JOIN:
            qrow = (QR + (q0 + qi).to(tl.int64)[:, None] * stride_qt + (hk * G + g)[:, None] * stride_qh
                    + 4 * dq[None, :])
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
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp2(m_i - m_use)
            p = tl.exp2(s - m_use[:, None])
            m_i = m_new
            vs, vz = _scale_zero(tl.reshape(sw3, [BLOCK_N]))
            vs = tl.where(pmask, vs, 0.0)
            vz = tl.where(pmask, vz, 0.0)
            ps = (p * vs[None, :]).to(tl.float16)
            if FUSE_SUMS:
                # one cross-warp reduction for both row sums
                ls, zs = tl.reduce((p, p * vz[None, :]), 1, _add2)
                l_i = l_i * alpha + ls
                z_i = z_i * alpha + zs
            else:
                l_i = l_i * alpha + tl.sum(p, 1)
                z_i = z_i * alpha + tl.sum(p * vz[None, :], 1)
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
            return
        optr = MidO + mid_row[:, None] * D + 8 * dv[None, :]
        tl.store(optr, a0 * inv + zo, mask=om)
        tl.store(optr + 1, a1 * inv + zo, mask=om)
        tl.store(optr + 2, a2 * inv + zo, mask=om)
        tl.store(optr + 3, a3 * inv + zo, mask=om)
        tl.store(optr + 4, a4 * inv + zo, mask=om)
        tl.store(optr + 5, a5 * inv + zo, mask=om)
        tl.store(optr + 6, a6 * inv + zo, mask=om)
        tl.store(optr + 7, a7 * inv + zo, mask=om)
        return
    if PAGED:
        # Page-structured addressing: one block-table entry and one 64-bit base per page,
        # plus loop-invariant 32-bit offsets inside the page.
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
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp2(m_i - m_use)
            p = tl.exp2(s - m_use[:, None])
            m_i = m_new
            # rows past the end of the sequence read allocated but unwritten slots: their
            # scale / zero may be anything, so they are zeroed (their p is 0 already)
            if SZW:
                vs, vz = _scale_zero(tl.reshape(vs3, [BLOCK_N]))
            else:
                vs = tl.reshape(vs3, [BLOCK_N]).to(tl.float32)
                vz = tl.reshape(vz3, [BLOCK_N]).to(tl.float32)
            vs = tl.where(pmask, vs, 0.0)
            vz = tl.where(pmask, vz, 0.0)
            ps = (p * vs[None, :]).to(tl.float16)
            if FUSE_SUMS:
                # one cross-warp reduction for both row sums
                ls, zs = tl.reduce((p, p * vz[None, :]), 1, _add2)
                l_i = l_i * alpha + ls
                z_i = z_i * alpha + zs
            else:
                l_i = l_i * alpha + tl.sum(p, 1)
                z_i = z_i * alpha + tl.sum(p * vz[None, :], 1)
            vb = tl.reshape(vb3, [BLOCK_N, D // 2]).to(tl.uint16)
            lo = (((vb & 15) | 0x6400).to(tl.float16, bitcast=True) - 1024.0).to(tl.float16)
            hi = (((vb >> 4) | 0x6400).to(tl.float16, bitcast=True) - 1024.0).to(tl.float16)
            acc_lo = tl.dot(ps, lo, acc_lo * alpha[:, None])
            acc_hi = tl.dot(ps, hi, acc_hi * alpha[:, None])
        end = start
    # MSE keys and 4-bit values, PREFETCH: each step requests the next tile's bytes before
    # it computes on the ones the step before requested
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
        # Rows past the end re-read the last valid token (finite bytes, score masked
        # to -inf below), so the cache loads need no predicate.
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
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_use)
        p = tl.exp2(s - m_use[:, None])
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
        # codes become fp16 by OR-ing them into the mantissa of 1024.0 and subtracting
        # 1024 in fp16 (exact; no int->float conversions)
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
