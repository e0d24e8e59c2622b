"""Stage 2: merge the split partials of stage 1 (and, for verify, attend to the raw tail).

``_tq_combine_splits``: one program per (row, output column chunk, KV head, sequence)
merges the split partials of any stage-1 kernel (their column order ``PERM``); for verify
it also attends to the K+1 tail read from the raw key/value tensors of this step (causal
inside the tail) before normalising. After the Hopper kernels it can run as their
programmatic dependent launch (``PDL``). The launcher's side: ``combine.py``.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait


@triton.jit(do_not_specialize=["num_splits"])  # any split count: one compiled variant
def _tq_combine_splits(
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
    DC: tl.constexpr,  # output columns per program
    S_CHUNK: tl.constexpr,  # splits merged per step (all of them when S <= S_CHUNK)
    QL_PAD: tl.constexpr,
    RAW_TAIL: tl.constexpr,
    HAS_QSTART: tl.constexpr,
    PDL: tl.constexpr = False,  # after kernels "h" / "v": wait for stage 1's end (a no-op unless the
    # combine was launched as a programmatic dependent of it)
    PERM: tl.constexpr = 0,  # the partials' column order: 0 the head's; 1 kernel "v"'s (column W j + i
    # holds head column 8 i + j, W = D / 8); 2 kernel "h"'s at D = 256 (column m holds head column
    # 8 (8 (m // 16 % 4) + m % 8) + 4 (m // 128) + 2 (m // 64 % 2) + m // 8 % 2)
):
    NDC: tl.constexpr = D // DC
    pid0 = tl.program_id(0)
    r = pid0 // NDC
    dc = pid0 - r * NDC
    hk = tl.program_id(1)
    b = tl.program_id(2)
    qi = r // G
    g = r - qi * G
    head = hk * G + g
    cols = dc * DC + tl.arange(0, DC)  # the partials' columns
    if PERM == 2:  # the head's columns they hold
        hcols = 64 * ((cols >> 4) & 3) + 8 * (cols & 7) + 4 * ((cols >> 7) & 1) + 2 * ((cols >> 6) & 1) + ((cols >> 3) & 1)
    elif PERM == 1:
        hcols = 8 * (cols % (D // 8)) + cols // (D // 8)
    else:
        hcols = cols
    sc = tl.arange(0, S_CHUNK)
    base = ((b.to(tl.int64) * HK + hk) * num_splits) * ROWS + r

    # the metadata and the raw tail do not depend on stage 1: after kernels "h" / "v" (a
    # programmatic dependent launch) they are read before the wait for stage 1's end
    if HAS_QSTART:
        seq_len = tl.load(SeqLens + b)
        q0 = tl.load(QStart + b)
        q_len = tl.minimum(tl.load(QStart + b + 1) - q0, QL)
        q_rows = q_len  # rows this request owns in the output (written even when empty)
        q_len = tl.maximum(tl.minimum(q_len, seq_len), 0)
    else:
        q0 = b
        q_rows = 1
        q_len = 1
    tok = (q0 + qi).to(tl.int64)

    if RAW_TAIL:
        dd = tl.arange(0, D)
        jj = tl.arange(0, QL_PAD)
        jm = (jj <= qi) & (jj < q_len)
        qv = tl.load(Q + tok * stride_qt + head * stride_qh + dd, mask=(dd * 0 + qi) < q_rows, other=0.0).to(tl.float32)
        kt = tl.load(
            KR + (q0 + jj).to(tl.int64)[:, None] * stride_kt + hk * stride_kh + dd[None, :],
            mask=jm[:, None],
            other=0.0,
        ).to(tl.float32)
        # the tail's values too, now: they need only q0 (one memory latency less)
        vt = tl.load(
            VR + (q0 + jj).to(tl.int64)[:, None] * stride_vt + hk * stride_vh + hcols[None, :],
            mask=jm[:, None],
            other=0.0,
        ).to(tl.float32)
        ts = tl.sum(qv[None, :] * kt, 1) * qk_scale
        ts = tl.where(jm, ts, float("-inf"))
    if PDL:
        gdc_wait()
    smask = sc < num_splits
    lse = tl.load(MidL + base + sc * ROWS, mask=smask, other=float("-inf"))
    o = tl.load(MidO + (base + sc * ROWS)[:, None] * D + cols[None, :], mask=smask[:, None], other=0.0)
    m_i = tl.max(lse, 0)
    if RAW_TAIL:
        m_i = tl.maximum(m_i, tl.max(ts, 0))
    m_use = tl.where(m_i == float("-inf"), 0.0, m_i)
    w = tl.exp2(lse - m_use)
    acc = tl.sum(w[:, None] * o, 0)
    den = tl.sum(w, 0)
    for s0 in range(S_CHUNK, num_splits, S_CHUNK):  # only when there are more splits
        ss = s0 + sc
        smask = ss < num_splits
        lse = tl.load(MidL + base + ss * ROWS, mask=smask, other=float("-inf"))
        o = tl.load(MidO + (base + ss * ROWS)[:, None] * D + cols[None, :], mask=smask[:, None], other=0.0)
        m_new = tl.maximum(m_i, tl.max(lse, 0))
        m_nu = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_use - m_nu)
        w = tl.exp2(lse - m_nu)
        acc = acc * alpha + tl.sum(w[:, None] * o, 0)
        den = den * alpha + tl.sum(w, 0)
        m_i = m_new
        m_use = m_nu
    if RAW_TAIL:
        pt = tl.exp2(ts - m_use)
        acc += tl.sum(pt[:, None] * vt, 0)
        den += tl.sum(pt, 0)
    out = tl.where(den > 0.0, acc / tl.where(den > 0.0, den, 1.0), 0.0)
    tl.store(Out + tok * stride_ot + head * stride_oh + hcols, out.to(Out.dtype.element_ty),
             mask=(cols * 0 + qi) < q_rows)
