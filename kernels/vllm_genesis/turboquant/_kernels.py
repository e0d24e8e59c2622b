"""Triton kernels for attention over the vLLM 0.24.0 TurboQuant KV cache.

Two stages, shared by decode and speculative verify:

``_tq_split_kernel`` (stage 1): one program per (split, KV head, sequence). It loads the
query rows of *every* query head of the KV head's group and, for verify, of every query
token of the request (rows ``r = i * G + g``), then streams its share of the compressed
prefix once: ``BLOCK_N`` tokens per step, keys dequantised to fp16/bf16 and scored with
one tensor-core product for all rows, online softmax in base 2, values applied as
``P * scale`` times the raw codes (plus ``P . zero``), so the 4-bit codes never need to be
turned into full values. It writes one normalised partial output and one log-sum-exp per
row and split.

``_tq_combine_kernel`` (stage 2): one program per (row, KV head, sequence) merges the
split partials; for verify it also attends to the K+1 tail read from the raw key/value
tensors of this step (causal inside the tail) before normalising.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _tq_split_kernel(
    QR,  # [T, Hq, D] query (rotated for MSE keys), any float dtype
    KV,  # uint8 cache [num_blocks, PAGE, HK, slot]
    BT,  # int32 [B, max_blocks]
    SeqLens,  # int32 [B]
    QStart,  # int32 [B + 1] (only read when HAS_QSTART)
    Cent,  # fp32 centroids (only read for MSE keys)
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
):
    sid = tl.program_id(0)
    hk = tl.program_id(1)
    b = tl.program_id(2)

    seq_len = tl.load(SeqLens + b)
    if HAS_QSTART:
        q0 = tl.load(QStart + b)
        q_len = tl.minimum(tl.load(QStart + b + 1) - q0, QL)
    else:
        q0 = b
        q_len = 1
    q_len = tl.maximum(tl.minimum(q_len, seq_len), 0)
    prefix = seq_len - q_len  # positions before the first query token
    if RAW_TAIL:
        cache_end = prefix
    else:
        cache_end = seq_len
    per_split = tl.cdiv(tl.cdiv(cache_end, num_splits), BLOCK_N) * BLOCK_N
    start = sid * per_split
    end = tl.minimum(start + per_split, cache_end)

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
    q_ptrs = QR + (q0 + qi).to(tl.int64)[:, None] * stride_qt + (hk * G + g)[:, None] * stride_qh + dd[None, :]
    q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0).to(dot_t)

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
    for n0 in range(start, end, BLOCK_N):
        pos = n0 + offs_n
        pmask = pos < end
        if PAGE % BLOCK_N == 0:
            blk = tl.load(bt_row + n0 // PAGE).to(tl.int64)
            base = blk * stride_kb + kv_head + (pos % PAGE).to(tl.int64) * stride_kp
        else:
            blk = tl.load(bt_row + pos // PAGE, mask=pmask, other=0).to(tl.int64)
            base = blk * stride_kb + kv_head + (pos % PAGE).to(tl.int64) * stride_kp
        base = tl.multiple_of(base, ALIGN)

        # ---- keys -> scores [M_PAD, BLOCK_N]
        if KEY_FP8:
            kb = tl.load(KV + base[:, None] + dd[None, :], mask=pmask[:, None], other=0)
            if FP8_E4B15:
                k = kb.to(tl.float8e4b15, bitcast=True).to(dot_t)
            else:
                k = kb.to(tl.float8e4nv, bitcast=True).to(dot_t)
            s = tl.dot(q, tl.trans(k)) * qk_scale
        else:
            kaddr = KV + base[:, None] + k_byte[None, :]
            r0 = tl.load(kaddr, mask=pmask[:, None], other=0).to(tl.int32)
            r1 = tl.load(kaddr + 1, mask=pmask[:, None], other=0).to(tl.int32)
            kidx = ((r0 | (r1 << 8)) >> k_shift[None, :]) & ((1 << MSE_BITS) - 1)
            c = tl.load(Cent + kidx)
            kn_ptr = (KV + base + (KPS - 2)).to(tl.pointer_type(tl.float16))
            kn = tl.load(kn_ptr, mask=pmask, other=0.0).to(tl.float32)
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
        sz_ptr = (KV + base + (KPS + VAL_BYTES)).to(tl.pointer_type(tl.float16))
        vs = tl.load(sz_ptr, mask=pmask, other=0.0).to(tl.float32)
        vz = tl.load(sz_ptr + 1, mask=pmask, other=0.0).to(tl.float32)
        z_i = z_i * alpha + tl.sum(p * vz[None, :], 1)
        ps = (p * vs[None, :]).to(tl.float16)
        if VSPLIT:
            vb = tl.load(KV + base[:, None] + KPS + dh[None, :], mask=pmask[:, None], other=0)
            lo = (vb & 15).to(tl.float16)
            hi = (vb >> 4).to(tl.float16)
            acc_lo = tl.dot(ps, lo, acc_lo * alpha[:, None])
            acc_hi = tl.dot(ps, hi, acc_hi * alpha[:, None])
        else:
            vaddr = KV + base[:, None] + KPS + v_byte[None, :]
            w0 = tl.load(vaddr, mask=pmask[:, None], other=0).to(tl.int32)
            w1 = tl.load(vaddr + 1, mask=pmask[:, None], other=0).to(tl.int32)
            code = ((w0 | (w1 << 8)) >> v_shift[None, :]) & ((1 << VQB) - 1)
            acc = tl.dot(ps, code.to(tl.float16), acc * alpha[:, None])

    has = l_i > 0.0
    l_safe = tl.where(has, l_i, 1.0)
    lse = tl.where(has, m_i + tl.log2(l_safe), float("-inf"))
    zo = tl.where(has, z_i / l_safe, 0.0)
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


@triton.jit
def _tq_combine_kernel(
    MidO,  # fp32 [B, HK, S, ROWS, D]
    MidL,  # fp32 [B, HK, S, ROWS]
    Q,  # [T, Hq, D] raw query (tail only)
    KR,  # [T, HK, D] raw keys of this step (tail only)
    VR,  # [T, HK, D] raw values of this step (tail only)
    Out,  # [T, Hq, D]
    SeqLens,
    QStart,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_ot,
    stride_oh,
    num_splits,
    qk_scale,
    HK: tl.constexpr,
    G: tl.constexpr,
    QL: tl.constexpr,
    ROWS: tl.constexpr,
    D: tl.constexpr,
    S_CHUNK: tl.constexpr,
    QL_PAD: tl.constexpr,
    RAW_TAIL: tl.constexpr,
    HAS_QSTART: tl.constexpr,
):
    r = tl.program_id(0)
    hk = tl.program_id(1)
    b = tl.program_id(2)
    seq_len = tl.load(SeqLens + b)
    if HAS_QSTART:
        q0 = tl.load(QStart + b)
        q_len = tl.minimum(tl.load(QStart + b + 1) - q0, QL)
    else:
        q0 = b
        q_len = 1
    q_len = tl.maximum(tl.minimum(q_len, seq_len), 0)
    qi = r // G
    g = r - qi * G
    head = hk * G + g
    tok = (q0 + qi).to(tl.int64)
    dd = tl.arange(0, D)
    if qi < q_len:
        base = ((b.to(tl.int64) * HK + hk) * num_splits) * ROWS + r
        sc = tl.arange(0, S_CHUNK)
        m = tl.full([S_CHUNK], float("-inf"), dtype=tl.float32)
        for s0 in range(0, num_splits, S_CHUNK):
            ss = s0 + sc
            lse = tl.load(MidL + base + ss * ROWS, mask=ss < num_splits, other=float("-inf"))
            m = tl.maximum(m, lse)
        m_all = tl.max(m, 0)
        if RAW_TAIL:
            jj = tl.arange(0, QL_PAD)
            jm = jj <= qi
            q = tl.load(Q + tok * stride_qt + head * stride_qh + dd).to(tl.float32)
            kt = tl.load(
                KR + (q0 + jj).to(tl.int64)[:, None] * stride_kt + hk * stride_kh + dd[None, :],
                mask=jm[:, None],
                other=0.0,
            ).to(tl.float32)
            ts = tl.sum(q[None, :] * kt, 1) * qk_scale
            ts = tl.where(jm, ts, float("-inf"))
            m_all = tl.maximum(m_all, tl.max(ts, 0))
        m_use = tl.where(m_all == float("-inf"), 0.0, m_all)
        acc = tl.zeros([D], dtype=tl.float32)
        den = tl.zeros([S_CHUNK], dtype=tl.float32)
        for s0 in range(0, num_splits, S_CHUNK):
            ss = s0 + sc
            smask = ss < num_splits
            lse = tl.load(MidL + base + ss * ROWS, mask=smask, other=float("-inf"))
            w = tl.exp2(lse - m_use)
            o = tl.load(MidO + (base + ss * ROWS)[:, None] * D + dd[None, :], mask=smask[:, None], other=0.0)
            acc += tl.sum(w[:, None] * o, 0)
            den += w
        total = tl.sum(den, 0)
        if RAW_TAIL:
            pt = tl.exp2(ts - m_use)
            vt = tl.load(
                VR + (q0 + jj).to(tl.int64)[:, None] * stride_vt + hk * stride_vh + dd[None, :],
                mask=jm[:, None],
                other=0.0,
            ).to(tl.float32)
            acc += tl.sum(pt[:, None] * vt, 0)
            total += tl.sum(pt, 0)
        out = tl.where(total > 0.0, acc / tl.where(total > 0.0, total, 1.0), 0.0)
        tl.store(Out + tok * stride_ot + head * stride_oh + dd, out.to(Out.dtype.element_ty))
