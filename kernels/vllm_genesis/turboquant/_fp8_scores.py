"""Stage 1 with fp8 tensor-core scores (k8v4, Hopper).

``_tq_fp8_scores`` has the inputs and outputs of kernel "n" (``_dequant_split``; one
program per (split, KV head, sequence), every query row of the group) but never turns a
key into a wider type: the fp8 key bytes go from global memory into shared memory as
they are (``cp.async`` through Triton's pipeliner) and are scored by fp8 x fp8 warp-group
MMAs against the query split into two fp8 parts, ``q * 2^k = hi + lo`` exactly (a bf16
value has 8 significant bits, an e4m3 value 4; the per-row power of two keeps both parts
in e4m3's normal range). Two arrangements:

* tokens on the MMA's M side (default): scores computed transposed (``K @ Q^T``: tokens x
  rows), so a 64-token tile is one M=64 MMA whatever the group size, and values as
  ``V^T @ (P * scale)^T`` with the 4-bit codes turned into fp16 in registers and written
  to shared memory as whole 16-byte rows. The softmax reference max moves only when a
  row's max grows by more than ``LAZY`` (log2 units), in a uniform branch, or on every tile;
* query rows on M (``ROWS_M``, for 64 rows: verify): ``S = Q K^T`` with the key tile read
  by the MMA from shared memory as it lies, the softmax along each row inside a thread and
  its quad, ``O += (P * scale) V`` with ``P`` in registers (``_rows_m_step``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._triton_words import _add2, _scale_zero, _split_slice, _split_stats, _u4_words


@triton.jit
def _q_fp8_split(q):
    """fp32 rows -> (hi, lo, 2^-k per row): fp8 e4m3 parts with hi + lo == q * 2^k, exact for
    bf16/fp16 inputs of normal range (elements below 2^-9 of the row's largest one may
    lose their last bits, by at most 2^-17 of it)."""
    amax = tl.max(tl.abs(q), 1)
    e = ((amax.to(tl.int32, bitcast=True) >> 23) & 255) - 127  # floor(log2 amax)
    e = tl.where(amax > 0.0, e, 0)
    sc = ((134 - e) << 23).to(tl.float32, bitcast=True)  # 2^(7 - e): |q * sc| < 256
    qs = q * sc[:, None]
    # round to 4 significant bits (nearest, ties to even) on the fp32 bits, so that both
    # parts are exact e4m3 values before any conversion
    bits = qs.to(tl.int32, bitcast=True)
    bits = (bits + 0x7FFFF + ((bits >> 20) & 1)) & -1048576  # clear the low 20 mantissa bits
    hi = bits.to(tl.float32, bitcast=True)
    qh = hi.to(tl.float8e4nv)
    ql = (qs - hi).to(tl.float8e4nv)
    inv = ((e + 120) << 23).to(tl.float32, bitcast=True)  # 2^(e - 7)
    return qh, ql, inv


@triton.jit
def _values_fp16(cw3, BLOCK_N: tl.constexpr, D: tl.constexpr, ASM: tl.constexpr):
    """A tile's 4-bit code words -> [BLOCK_N, D] fp16 codes in their natural order."""
    cw = tl.reshape(cw3, [BLOCK_N, D // 8])
    c0, c1, c2, c3, c4, c5, c6, c7 = _u4_words(cw, ASM)
    # join appends its axis last: element (i, j, k) of the nest is code 4i + 2j + k
    return tl.reshape(tl.join(tl.join(tl.join(c0, c4), tl.join(c2, c6)), tl.join(tl.join(c1, c5), tl.join(c3, c7))),
                      [BLOCK_N, D])


@triton.jit
def _rows_m_step(k8, qh, ql, rsc, acc, m_ref, l_i, z_i, sw3, cw3, n0, end, row_last, RAW_TAIL: tl.constexpr,
                 LAZY: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr, ASM: tl.constexpr):
    """One tile with the query rows on the MMA's M side: S = Q K^T (two fp8 products), the
    softmax along each row, O += (P * scale) V."""
    kT = tl.trans(k8)
    s = tl.dot(ql, kT)
    s = tl.dot(qh, kT, s) * rsc[:, None]  # [M_PAD, BLOCK_N] scores, log2 units
    pos = n0 + tl.arange(0, BLOCK_N)
    pmask = pos < end
    valid = pmask[None, :]
    if not RAW_TAIL:
        valid = valid & (pos[None, :] <= row_last[:, None])
    s = tl.where(valid, s, float("-inf"))
    m_t = tl.max(s, 1)
    if LAZY < 0:
        move = tl.full([], 1, tl.int32)
    else:
        move = tl.max(tl.where(m_t > m_ref + LAZY, 1, 0), 0)
    if move > 0:
        m_new = tl.maximum(m_ref, m_t)
        alpha = tl.where(m_ref == float("-inf"), 0.0, tl.exp2(m_ref - m_new))
        acc = acc * alpha[:, None]
        l_i = l_i * alpha
        z_i = z_i * alpha
        m_ref = m_new
    p = tl.exp2(s - tl.where(m_ref == float("-inf"), 0.0, m_ref)[:, None])
    vs, vz = _scale_zero(tl.reshape(sw3, [BLOCK_N]))
    vs = tl.where(pmask, vs, 0.0)
    vz = tl.where(pmask, vz, 0.0)
    ls, zs = tl.reduce((p, p * vz[None, :]), 1, _add2)
    ps = (p * vs[None, :]).to(tl.float16)
    acc = tl.dot(ps, _values_fp16(cw3, BLOCK_N, D, ASM), acc)
    return acc, m_ref, l_i + ls, z_i + zs


@triton.jit(do_not_specialize=["num_splits"])  # any split count: one compiled variant
def _tq_fp8_scores(
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
    SKP: tl.constexpr = 0,  # stride_kp as a constant (0: use the argument): offsets become immediates
    SKH: tl.constexpr = 0,  # stride_kh likewise
    ASM: tl.constexpr = False,  # PTX nibble conversion (GPU) instead of shifts
    LAZY: tl.constexpr = 8.0,
    # hand-pipelined: tile i+1's bytes requested before tile i is computed (1), or only its
    # codes and scale/zero words while the keys go through Triton's pipeliner (2)
    PREFETCH: tl.constexpr = 0,
    RSPLIT: tl.constexpr = 1,  # programs per (split, head, sequence), each QPP query tokens (M_PAD rows)
    QPP: tl.constexpr = 1,
    # query rows on the MMA's M side (S = Q K^T, O = P V); the keys are then addressed as one
    # [BLOCK_N, D] fp8 tile, which the MMA reads from shared memory as it lies
    ROWS_M: tl.constexpr = False,
):
    pid0 = tl.program_id(0)
    sid = pid0 // RSPLIT
    part = pid0 - sid * RSPLIT
    hk = tl.program_id(1)
    b = tl.program_id(2)
    q0, q_len, prefix, start, end = _split_slice(SeqLens, QStart, b, sid, num_splits, QL, BLOCK_N, HAS_QSTART, RAW_TAIL)

    lrows = tl.arange(0, M_PAD)
    if RSPLIT > 1:
        # this program's query tokens: part * QPP ...; rows past QPP x G are padding
        rows = part * (QPP * G) + lrows
        qi = rows // G
        row_ok = (lrows < QPP * G) & (rows < q_len * G)
    else:
        rows = lrows
        qi = rows // G
        row_ok = rows < q_len * G
    g = rows - qi * G
    row_last = prefix + qi  # last visible position of each row (causal)
    dd = tl.arange(0, D)
    q_ptrs = QR + (q0 + qi).to(tl.int64)[:, None] * stride_qt + (hk * G + g)[:, None] * stride_qh + dd[None, :]
    qh, ql, inv = _q_fp8_split(tl.load(q_ptrs, mask=row_ok[:, None], other=0.0).to(tl.float32))
    if not ROWS_M:
        qhT = tl.trans(qh)
        qlT = tl.trans(ql)
    rsc = inv * qk_scale

    m_ref = tl.full([M_PAD], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([M_PAD], dtype=tl.float32)
    z_i = tl.zeros([M_PAD], dtype=tl.float32)
    if ROWS_M:
        acc = tl.zeros([M_PAD, D], dtype=tl.float32)
    else:
        acc = tl.zeros([D, M_PAD], dtype=tl.float32)  # O^T

    if SKP > 0:
        skp = SKP
    else:
        skp = stride_kp
    if SKH > 0:
        kv_head = hk.to(tl.int64) * SKH
    else:
        kv_head = hk.to(tl.int64) * stride_kh
    bt_row = BT + b.to(tl.int64) * stride_bt
    # page-structured addressing: one block-table entry and one 64-bit base per page,
    # loop-invariant offsets inside it (word offsets for the int32 loads)
    PR: tl.constexpr = PAGE if PAGE < BLOCK_N else BLOCK_N
    NP: tl.constexpr = BLOCK_N // PR
    DV: tl.constexpr = D // 8
    dv = tl.arange(0, DV)
    r3 = tl.arange(0, PR)
    pg = tl.arange(0, NP)
    offs_n = tl.arange(0, BLOCK_N)
    KVW = KV.to(tl.pointer_type(tl.int32))
    row_off = r3 * skp
    koff = row_off[None, :, None] + dd[None, None, :]
    vwo = (row_off // 4)[None, :, None] + KPS // 4 + dv[None, None, :]
    swo = (row_off // 4)[None, :] + (KPS + VAL_BYTES) // 4
    last_page = tl.maximum(end - 1, 0) // PAGE
    # M_PAD <= 16: row sums kept per (token, row) element and reduced once after the loop
    # (no cross-warp reduction for them inside it)
    ELEM_SUMS: tl.constexpr = M_PAD <= 16 and not ROWS_M
    if ELEM_SUMS:
        l_e = tl.zeros([BLOCK_N, M_PAD], dtype=tl.float32)
        z_e = tl.zeros([BLOCK_N, M_PAD], dtype=tl.float32)
    if PREFETCH:
        nz = (start + pg * 0) < end
        blk = tl.load(bt_row + tl.maximum(tl.minimum(start // PAGE + pg, last_page), 0), mask=nz, other=0).to(tl.int64)
        pbase_n = tl.multiple_of(blk * stride_kb + kv_head + (start % PAGE) * skp, 4)
        if PREFETCH == 1:
            kb_n = tl.load(KV + pbase_n[:, None, None] + koff, mask=nz[:, None, None], other=0)
        cw_n = tl.load(KVW + (pbase_n // 4)[:, None, None] + vwo, mask=nz[:, None, None], other=0)
        sw_n = tl.load(KVW + (pbase_n // 4)[:, None] + swo, mask=nz[:, None], other=0)
        blk_n = tl.load(bt_row + tl.maximum(tl.minimum((start + BLOCK_N) // PAGE + pg, last_page), 0), mask=nz, other=0)
    for n0 in range(start, end, BLOCK_N):
        if PREFETCH != 1:  # this tile's keys, on Triton's pipeliner
            blk = tl.load(bt_row + tl.minimum(n0 // PAGE + pg, last_page)).to(tl.int64)
            pbase = tl.multiple_of(blk * stride_kb + kv_head + (n0 % PAGE) * skp, 4)
            if ROWS_M:
                ktok = tl.multiple_of(tl.reshape(pbase[:, None] + row_off[None, :], [BLOCK_N]), 4)
                kb = tl.load(KV.to(tl.pointer_type(tl.float8e4nv)) + ktok[:, None] + dd[None, :])
            else:
                kb = tl.load(KV + pbase[:, None, None] + koff)
        if PREFETCH:
            if PREFETCH == 1:
                kb = kb_n
            cw3 = cw_n
            sw3 = sw_n
            pbase_n = tl.multiple_of(blk_n.to(tl.int64) * stride_kb + kv_head + ((n0 + BLOCK_N) % PAGE) * skp, 4)
            if PREFETCH == 1:
                kb_n = tl.load(KV + pbase_n[:, None, None] + koff)
            cw_n = tl.load(KVW + (pbase_n // 4)[:, None, None] + vwo)
            sw_n = tl.load(KVW + (pbase_n // 4)[:, None] + swo)
            blk_n = tl.load(bt_row + tl.minimum((n0 + 2 * BLOCK_N) // PAGE + pg, last_page))
        else:
            cw3 = tl.load(KVW + (pbase // 4)[:, None, None] + vwo)
            sw3 = tl.load(KVW + (pbase // 4)[:, None] + swo)
        if ROWS_M and PREFETCH != 1:
            k8 = kb
        else:
            k8 = tl.reshape(kb, [BLOCK_N, D]).to(tl.float8e4nv, bitcast=True)
        if ROWS_M:
            acc, m_ref, l_i, z_i = _rows_m_step(k8, qh, ql, rsc, acc, m_ref, l_i, z_i, sw3, cw3, n0, end, row_last,
                                                RAW_TAIL, LAZY, BLOCK_N, D, ASM)
        else:
            sT = tl.dot(k8, qlT)
            sT = tl.dot(k8, qhT, sT) * rsc[None, :]  # [BLOCK_N, M_PAD] scores, log2 units
            pos = n0 + offs_n
            pmask = pos < end
            valid = pmask[:, None]
            if not RAW_TAIL:
                valid = valid & (pos[:, None] <= row_last[None, :])
            sT = tl.where(valid, sT, float("-inf"))
            m_t = tl.max(sT, 0)
            if LAZY < 0:
                move = tl.full([], 1, tl.int32)  # rescale on every tile (a constant: no branch)
            else:
                move = tl.max(tl.where(m_t > m_ref + LAZY, 1, 0), 0)
            if move > 0:
                m_new = tl.maximum(m_ref, m_t)
                alpha = tl.where(m_ref == float("-inf"), 0.0, tl.exp2(m_ref - m_new))
                acc = acc * alpha[None, :]
                if ELEM_SUMS:
                    l_e = l_e * alpha[None, :]
                    z_e = z_e * alpha[None, :]
                else:
                    l_i = l_i * alpha
                    z_i = z_i * alpha
                m_ref = m_new
            pT = tl.exp2(sT - tl.where(m_ref == float("-inf"), 0.0, m_ref)[None, :])
            sw = tl.reshape(sw3, [BLOCK_N])
            vs, vz = _scale_zero(sw)
            vs = tl.where(pmask, vs, 0.0)
            vz = tl.where(pmask, vz, 0.0)
            if ELEM_SUMS:
                l_e += pT
                z_e += pT * vz[:, None]
            else:
                ls, zs = tl.reduce((pT, pT * vz[:, None]), 0, _add2)
                l_i += ls
                z_i += zs
            psT = (pT * vs[:, None]).to(tl.float16)
            acc = tl.dot(tl.trans(_values_fp16(cw3, BLOCK_N, D, ASM)), psT, acc)
    if ELEM_SUMS:
        l_i, z_i = tl.reduce((l_e, z_e), 0, _add2)
    l_safe, lse, zo = _split_stats(m_ref, l_i, z_i)
    mid_row = ((b.to(tl.int64) * HK + hk) * num_splits + sid) * ROWS + rows
    if RSPLIT > 1:
        rmask = (lrows < QPP * G) & (rows < ROWS)
    else:
        rmask = rows < ROWS
    tl.store(MidL + mid_row, lse, mask=rmask)
    if ROWS_M:
        tl.store(MidO + mid_row[:, None] * D + dd[None, :], acc / l_safe[:, None] + zo[:, None], mask=rmask[:, None])
    else:
        tl.store(MidO + mid_row[None, :] * D + dd[:, None], acc / l_safe[None, :] + zo[None, :], mask=rmask[None, :])
