"""Device functions the Triton stage-1 kernels share.

Slot words split in registers (fp8 key bytes and 4-bit codes of one int32 word, by PTX
``cvt`` / ``lop3`` or by shifts), the scale/zero halves of a word, a split's token range
and its running softmax sums, the MSE keys' centroid-pair gathers and byte tiles. Used by
kernel "n" (``_dequant_split_words``, ``_dequant_split_pages``, ``_dequant_split_tokens``),
``_per_warp_softmax`` and ``_fp8_scores``; the Gluon kernels reuse ``FP8X4_F16_ASM``.
"""

from __future__ import annotations

import triton
import triton.language as tl


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
