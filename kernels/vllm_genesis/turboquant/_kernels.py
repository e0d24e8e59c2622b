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

With ``WORDS`` > 0 (fp8 keys, 4-bit values, D >= 128) stage 1 reads each slot as int32
words and splits them in registers (PTX ``cvt``/``lop3`` or shifts) instead of loading and
shuffling single bytes; see docs/KERNELS.md for when that pays.

``_tq_combine_kernel`` (stage 2): one program per (row, KV head, sequence) merges the
split partials; for verify it also attends to the K+1 tail read from the raw key/value
tensors of this step (causal inside the tail) before normalising.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait


# PTX: one int32 word of 4 fp8 e4m3 bytes ($4) -> 4 fp16 values ($0..$3, byte order)
FP8X4_F16_ASM = tl.constexpr("""{
            .reg .b16 l, h;
            .reg .b32 a, c;
            mov.b32 {l, h}, $4;
            cvt.rn.f16x2.e4m3x2 a, l;
            cvt.rn.f16x2.e4m3x2 c, h;
            mov.b32 {$0, $1}, a;
            mov.b32 {$2, $3}, c;
            }""")


@triton.jit
def _fp8_words(w, ASM: tl.constexpr, E4B15: tl.constexpr):
    """int32 words of 4 fp8 key bytes -> 4 fp16 tensors (byte 0..3 of each word)."""
    if ASM:
        k0, k1, k2, k3 = tl.inline_asm_elementwise(
            asm=FP8X4_F16_ASM,
            constraints="=h,=h,=h,=h,r",
            args=[w],
            dtype=(tl.float16, tl.float16, tl.float16, tl.float16),
            is_pure=True,
            pack=1,
        )
    else:
        if E4B15:
            k0 = (w & 0xFF).to(tl.uint8).to(tl.float8e4b15, bitcast=True).to(tl.float16)
            k1 = ((w >> 8) & 0xFF).to(tl.uint8).to(tl.float8e4b15, bitcast=True).to(tl.float16)
            k2 = ((w >> 16) & 0xFF).to(tl.uint8).to(tl.float8e4b15, bitcast=True).to(tl.float16)
            k3 = ((w >> 24) & 0xFF).to(tl.uint8).to(tl.float8e4b15, bitcast=True).to(tl.float16)
        else:
            k0 = (w & 0xFF).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float16)
            k1 = ((w >> 8) & 0xFF).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float16)
            k2 = ((w >> 16) & 0xFF).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float16)
            k3 = ((w >> 24) & 0xFF).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float16)
    return k0, k1, k2, k3


@triton.jit
def _nib(w, SH: tl.constexpr):
    return ((((w >> SH) & 15) | 0x6400).to(tl.uint16).to(tl.float16, bitcast=True) - 1024.0).to(tl.float16)


@triton.jit
def _u4_words(w, ASM: tl.constexpr):
    """int32 words of 8 4-bit codes -> 8 fp16 tensors (code d = 0..7 of each word, exact)."""
    if ASM:
        c0, c1, c2, c3, c4, c5, c6, c7 = tl.inline_asm_elementwise(
            # nibbles 0/4 and 2/6 land in the mantissa of 1024 (mask 0x000F000F), 1/5 and 3/7
            # at 16x that (mask 0x00F000F0, then x/16 - 64 in one fma): one shift a word
            asm="""{
            .reg .b32 t0, t1, t2, t3, s, k, r, m;
            mov.b32 k, 0x64006400;
            mov.b32 r, 0x2C002C00;
            mov.b32 m, 0xD400D400;
            lop3.b32 t0, $8, 0x000F000F, k, 0xEA;
            lop3.b32 t1, $8, 0x00F000F0, k, 0xEA;
            shr.b32 s, $8, 8;
            lop3.b32 t2, s, 0x000F000F, k, 0xEA;
            lop3.b32 t3, s, 0x00F000F0, k, 0xEA;
            sub.rn.f16x2 t0, t0, k;
            fma.rn.f16x2 t1, t1, r, m;
            sub.rn.f16x2 t2, t2, k;
            fma.rn.f16x2 t3, t3, r, m;
            mov.b32 {$0, $4}, t0;
            mov.b32 {$1, $5}, t1;
            mov.b32 {$2, $6}, t2;
            mov.b32 {$3, $7}, t3;
            }""",
            constraints="=h,=h,=h,=h,=h,=h,=h,=h,r",
            args=[w],
            dtype=(tl.float16,) * 8,
            is_pure=True,
            pack=1,
        )
    else:
        c0 = _nib(w, 0)
        c1 = _nib(w, 4)
        c2 = _nib(w, 8)
        c3 = _nib(w, 12)
        c4 = _nib(w, 16)
        c5 = _nib(w, 20)
        c6 = _nib(w, 24)
        c7 = _nib(w, 28)
    return c0, c1, c2, c3, c4, c5, c6, c7


@triton.jit
def _add2(a0, a1, b0, b1):
    return a0 + b0, a1 + b1


@triton.jit
def _scale_zero(w):
    """int32 words holding the fp16 value scale (low half) and zero (high half) -> fp32."""
    vs = (w & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
    vz = ((w >> 16) & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
    return vs, vz


@triton.jit
def _split_stats(m, l, z):
    """Per row of a split: (sum of p or 1 where none, log-sum-exp or -inf where none, the
    zero-point term sum(p * zero) / sum(p) or 0 where none)."""
    has = l > 0.0
    l_safe = tl.where(has, l, 1.0)
    return l_safe, tl.where(has, m + tl.log2(l_safe), float("-inf")), tl.where(has, z / l_safe, 0.0)


@triton.jit
def _split_slice(SeqLens, QStart, b, sid, num_splits, QL: tl.constexpr, BLOCK_N: tl.constexpr,
                 HAS_QSTART: tl.constexpr, RAW_TAIL: tl.constexpr):
    """Where stage 1's program for split ``sid`` of sequence ``b`` reads: (first query token,
    query tokens, positions before the first query token, slice start, slice end). Slices are
    whole tiles of ``BLOCK_N`` but the last; with the raw tail the query tokens' own
    positions are not read from the cache."""
    seq_len = tl.load(SeqLens + b)
    if HAS_QSTART:
        q0 = tl.load(QStart + b)
        q_len = tl.minimum(tl.load(QStart + b + 1) - q0, QL)
    else:
        q0 = b
        q_len = 1
    q_len = tl.maximum(tl.minimum(q_len, seq_len), 0)
    prefix = seq_len - q_len
    if RAW_TAIL:
        cache_end = prefix
    else:
        cache_end = seq_len
    per_split = tl.cdiv(tl.cdiv(cache_end, num_splits), BLOCK_N) * BLOCK_N
    start = sid * per_split
    end = tl.minimum(start + per_split, cache_end)
    return q0, q_len, prefix, start, end


@triton.jit
def _centroid_pair(Pairs, idx, dot_t: tl.constexpr, TABLE: tl.constexpr = False, N0: tl.constexpr = 1,
                   N1: tl.constexpr = 1):
    """The two centroids (dot_t) packed in the int32 ``Pairs[idx]``: low half, high half.
    ``TABLE``: ``Pairs`` is the pair table itself, held by the program, and ``idx`` [N0, N1]
    is gathered from it through shared memory instead of by global loads."""
    if TABLE:
        pr = tl.reshape(tl.gather(Pairs, tl.reshape(idx, [N0 * N1]), 0), [N0, N1])
    else:
        pr = tl.load(Pairs + idx)
    lo = (pr & 0xFFFF).to(tl.uint16).to(dot_t, bitcast=True)
    hi = ((pr >> 16) & 0xFFFF).to(tl.uint16).to(dot_t, bitcast=True)
    return lo, hi


@triton.jit
def _mse_tile_bytes(KV, bt_row, kv_head, n0, end, stride_kb, stride_kp, PAGE: tl.constexpr,
                    BLOCK_N: tl.constexpr, ALIGN: tl.constexpr, KPS: tl.constexpr, VAL_BYTES: tl.constexpr,
                    D: tl.constexpr, K3G: tl.constexpr):
    """The raw bytes of the tile at ``n0`` for MSE keys with 4-bit values: key norms, index
    bytes (4-bit keys: ``[BLOCK_N, D / 2]``; 3-bit keys: the three bytes of each 24-bit
    group), codes, scales and zeros. Tokens past ``end`` re-read the last one, and a tile
    that starts past it reads block 0's rows (in bounds, never used)."""
    pos_c = tl.maximum(tl.minimum(n0 + tl.arange(0, BLOCK_N), end - 1), 0)
    live = (n0 + tl.zeros([BLOCK_N], dtype=tl.int32)) < end
    blk = tl.load(bt_row + pos_c // PAGE, mask=live, other=0).to(tl.int64)
    base = tl.multiple_of(blk * stride_kb + kv_head + (pos_c % PAGE).to(tl.int64) * stride_kp, ALIGN)
    kn = tl.load((KV + base + (KPS - 2)).to(tl.pointer_type(tl.float16)))
    if K3G:
        kaddr = KV + base[:, None] + 3 * tl.arange(0, D // 8)[None, :]
        k0 = tl.load(kaddr)
        k1 = tl.load(kaddr + 1)
        k2 = tl.load(kaddr + 2)
    else:
        k0 = tl.load(KV + base[:, None] + tl.arange(0, D // 2)[None, :])
        k1 = k0
        k2 = k0
    vb = tl.load(KV + base[:, None] + KPS + tl.arange(0, D // 2)[None, :])
    sz = (KV + base + (KPS + VAL_BYTES)).to(tl.pointer_type(tl.float16))
    return kn, k0, k1, k2, vb, tl.load(sz), tl.load(sz + 1)


@triton.jit(do_not_specialize=["num_splits"])  # any split count: one compiled variant
def _tq_split_kernel(
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


@triton.jit(do_not_specialize=["num_splits"])  # any split count: one compiled variant
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


@triton.jit(do_not_specialize=["num_splits"])  # any split count: one compiled variant
def _tq_split_kernel_w(
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
    outputs as ``_tq_split_kernel``; grid ``(splits * VSPLIT, Hk, B)``.
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
