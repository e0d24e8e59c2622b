"""Stage 1 of the k8v4 decode and verify on Hopper warp-group products (Gluon).

One program (one warp group) per (split, KV head, sequence), 64-token tiles, the query rows
of the group (up to 8) on the products' N side:

* scores^T = K Q^T: the tile's fp8 keys are copied into shared memory as they lie in the
  cache (``cp.async``, a ring of stages) and are the A operand of fp8 warp-group products
  read from there: no per-thread key registers and no conversions. The query is split into
  two fp8 parts (hi + lo, exact for bf16 queries of normal range, as kernel "q") stacked in
  shared memory as the 2 R columns of one B operand: one product a k step serves both parts,
  and a thread, holding columns r and R + r of its rows, adds them in its registers;
* the softmax runs on the scores^T accumulator (tokens on M across the four warps); its
  maximum across the warps is Triton's reduction, or with ``XMAX`` (``TileConfig.warp_max``)
  one exchange of its own through shared memory (``_max_over_warps``: one barrier instead of
  two);
* output^T = V^T P^T: the probabilities (times the value scales) go to shared memory as the
  B operand; the 4-bit codes are loaded into the registers of the A operand, each thread's
  eight output rows being the eight codes of one int32 word of a token, two tokens' words
  paired into f16x2 registers (``prmt``), so no code passes through shared memory. At D = 256
  the partials are stored in the operand's row order (whole 32-byte sectors a store; the
  combine puts the columns back in head order), at D = 128 in head order.

``PF`` asks the L2 for the code and scale/zero words of the tile PF ahead (one
``prefetch.global.L2`` a thread and tile), which the launcher's plan turns on for grids of at
most two programs per SM whose splits span more than four tiles (``H_PREFETCH_PROGRAMS_PER_SM``,
``H_PREFETCH_MIN_SPAN``).

At D = 128 (16 code words a token, two m64 row blocks) two lanes load each word and convert
half of its codes each, so the operand keeps the same register layout.

fp8 e4m3 keys + 4-bit values, D = 128 or 256, groups of up to 8 heads, pages of a power of two
of at least 16 tokens, NVIDIA Hopper. Decode (one query token per sequence: 8 rows); verify
batches (up to 8 query tokens; by default at D = 128 where the rows fit one program, else on
request): the query tokens over programs of at most 32 rows, the cache read up to the K + 1
tail, which the combine takes from the raw K/V.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma

from ._gluon_mma_decode import _codes_joined, _cta_barrier, _half_codes_joined, _row_totals

NUM_WARPS = 4
# the cp.async copy's name differs between Gluon versions (3.6: async_copy_global_to_shared,
# later: async_load)
_async_load = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared
MAX_ROWS = 32  # query rows on N per program (more: the query tokens over several programs)
# the combine's column order for kernel "h"'s partials at D = 256 (operand rows: row m holds
# code 4 (m // 128) + 2 (m // 64 % 2) + m // 8 % 2 of word 8 (m // 16 % 4) + m % 8)
PARTIAL_ORDER_H = 2


def partial_order(head_dim: int) -> int:
    """The combine's column order for the partials of kernel "h" at this head size (D = 128
    stores them in head order)."""
    return PARTIAL_ORDER_H if head_dim == 256 else 0


# The layouts, built while the kernel is compiled (only the row count is a launch argument,
# which keeps the launcher's cache lookup cheap).


@gluon.constexpr_function
def _scores_layout(rows):
    """scores^T [tokens, rows] (fp8 products, k = 32)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, rows, 32])


@gluon.constexpr_function
def _output_layout(rows):
    """output^T [D, rows] (fp16 products, k = 16)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, rows, 16])


@gluon.constexpr_function
def _half_words_layout(parts):
    """D = 128: code words [16 words, 2 halves, 64 tokens] (``parts`` = False), or the same as
    [16 words, 2 halves, 4 page parts, 16 rows]: word 4 w + (lane // 4) // 2 (warp w), its half
    (codes 4 h .. 4 h + 3) h = (lane // 4) % 2, tokens as in ``_words_layout``; two lanes load
    each word."""
    if parts:
        return gl.DistributedLinearLayout([[0, 0, 0, 1], [0, 0, 0, 8], [0, 0, 1, 0], [0, 0, 2, 0]],
                                          [[0, 0, 0, 2], [0, 0, 0, 4], [0, 1, 0, 0], [1, 0, 0, 0], [2, 0, 0, 0]],
                                          [[4, 0, 0, 0], [8, 0, 0, 0]], [], [16, 2, 4, 16])
    return gl.DistributedLinearLayout([[0, 0, 1], [0, 0, 8], [0, 0, 16], [0, 0, 32]],
                                      [[0, 0, 2], [0, 0, 4], [0, 1, 0], [1, 0, 0], [2, 0, 0]],
                                      [[4, 0, 0], [8, 0, 0]], [], [16, 2, 64])


@gluon.constexpr_function
def _words_layout(parts):
    """Code words [32 words, 64 tokens] (``parts`` = False), or the same as [32 words, 4 page
    parts, 16 rows] (one block-table entry a part): word 8 w + lane // 4 (warp w), tokens
    2 (lane % 4) + {0, 1} + {0, 8} + {0, 16, 32, 48}, consecutive tokens in consecutive
    registers, which the f16x2 pairing needs."""
    if parts:
        return gl.DistributedLinearLayout([[0, 0, 1], [0, 0, 8], [0, 1, 0], [0, 2, 0]],
                                          [[0, 0, 2], [0, 0, 4], [1, 0, 0], [2, 0, 0], [4, 0, 0]],
                                          [[8, 0, 0], [16, 0, 0]], [], [32, 4, 16])
    return gl.DistributedLinearLayout([[0, 1], [0, 8], [0, 16], [0, 32]], [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]],
                                      [[8, 0], [16, 0]], [], [32, 64])


@gluon.constexpr_function
def _probs_smem_layout(rows):
    """probabilities^T [tokens, rows] fp16 in shared memory: the widest swizzle a row allows."""
    return gl.NVMMASharedLayout(swizzle_byte_width=min(128, 2 * rows) if rows >= 16 else 0, element_bitwidth=16,
                                rank=2)


@gluon.jit
def _q_split(q):
    """fp32 rows -> (hi, lo, 2^-k per row): fp8 e4m3 parts with hi + lo == q * 2^k (kernel "q"'s
    split: exact for bf16/fp16 inputs of normal range)."""
    amax = gl.max(gl.abs(q), 1)
    e = ((amax.to(gl.int32, bitcast=True) >> 23) & 255) - 127
    e = gl.where(amax > 0.0, e, 0)
    sc = ((134 - e) << 23).to(gl.float32, bitcast=True)
    qs = q * gl.expand_dims(sc, 1)
    bits = qs.to(gl.int32, bitcast=True)
    bits = (bits + 0x7FFFF + ((bits >> 20) & 1)) & -1048576
    hi = bits.to(gl.float32, bitcast=True)
    return hi.to(gl.float8e4nv), (qs - hi).to(gl.float8e4nv), ((e + 120) << 23).to(gl.float32, bitcast=True)


@gluon.jit
def _launch_dependents():
    """Lets the kernel that follows on the stream (the combine, launched as a programmatic
    dependent launch) be launched now; it still waits for this grid's end before it reads."""
    gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [], dtype=gl.int32, is_pure=False,
                              pack=1)


@gluon.jit
def _wait_prior():
    """Waits for the end of the kernel before this one on the stream (and for its writes); a
    no-op unless this kernel was a programmatic dependent launch."""
    gl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _prefetch_l2(ptrs):
    """Asks the L2 for the lines at ``ptrs`` (no registers written, nothing waited for)."""
    gl.inline_asm_elementwise("prefetch.global.L2 [$1]; // $0", "=r,l", [ptrs], dtype=gl.int32, is_pure=False,
                              pack=1)


@gluon.jit
def _first_copies(ksm, K8, bt_row, blk0, start, end, last_page, kpos, krow, stride_kw, PAGE: gl.constexpr,
                  SKP: gl.constexpr, STAGES: gl.constexpr, BN: gl.constexpr, D: gl.constexpr):
    """Requests the split's first STAGES - 1 key tiles into the ring (``blk0``: the first
    tile's block ids)."""
    for j in gl.static_range(STAGES - 1):
        pj = start + j * BN + kpos
        if j == 0:
            blk = blk0
        else:
            blk = _blocks(bt_row, pj, last_page, PAGE)
        _async_load(ksm.index(j).reshape([4, 16, D]), K8 + 4 * _word_offsets(blk, pj, stride_kw, PAGE, SKP) + krow,
                    mask=pj < end)
        async_copy.commit_group()


@gluon.jit
def _clock():
    """The GPU's global nanosecond timer."""
    return gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)


@gluon.jit
def _split_range(SeqLens, QStart, b, sid, num_splits, QL: gl.constexpr, HAS_QSTART: gl.constexpr, BN: gl.constexpr,
                 PAGE: gl.constexpr):
    """Sequence ``b``'s first query token and query length (verify: from QStart, at most QL;
    decode: ``b`` and 1), and split ``sid``'s share of the cached context in whole tiles:
    start, end, tile count and last page. Verify reads the cache up to the K + 1 tail, which
    the combine takes from the raw K/V."""
    seq_len = gl.load(SeqLens + b)
    if HAS_QSTART:
        q0 = gl.load(QStart + b)
        q_len = gl.maximum(gl.minimum(gl.minimum(gl.load(QStart + b + 1) - q0, QL), seq_len), 0)
        cache_end = seq_len - q_len
    else:
        q0 = b
        q_len = gl.minimum(seq_len, 1)
        cache_end = seq_len
    per_split = gl.cdiv(gl.cdiv(cache_end, num_splits), BN) * BN
    start = sid * per_split
    end = gl.minimum(start + per_split, cache_end)
    return q0, q_len, start, end, gl.cdiv(gl.maximum(end - start, 0), BN), gl.maximum(end - 1, 0) // PAGE


@gluon.jit
def _part_copies(NP: gl.constexpr, N: gl.constexpr, row_stride, L: gl.constexpr):
    """Copies of a tile as [NP page parts, 16 rows, N items] in layout ``L``: each part's first
    token (part x 16, [NP, 1, 1]) and each item's offset from its part's first row
    ([1, 16, N]: row x ``row_stride`` + item)."""
    pos = gl.expand_dims(gl.expand_dims(gl.arange(0, NP, layout=gl.SliceLayout(1, gl.SliceLayout(2, L))), 1), 2) * 16
    row = gl.expand_dims(gl.expand_dims(gl.arange(0, 16, layout=gl.SliceLayout(0, gl.SliceLayout(2, L))), 0), 2)
    item = gl.expand_dims(gl.expand_dims(gl.arange(0, N, layout=gl.SliceLayout(0, gl.SliceLayout(1, L))), 0), 1)
    return pos, row * row_stride + item


@gluon.jit
def _blocks(bt_row, pos, last_page, PAGE: gl.constexpr):
    """Block ids of positions ``pos`` (pages past the last: the last). Loaded a step before
    their use, so that no address waits for the block table."""
    return gl.load(bt_row + gl.minimum(pos // PAGE, last_page))


@gluon.jit
def _word_offsets(blk, pos, stride_kw, PAGE: gl.constexpr, SKP: gl.constexpr):
    """int32-word offsets of the rows at ``pos`` (their pages' block ids ``blk``)."""
    return blk.to(gl.int64) * stride_kw + (pos % PAGE) * (SKP // 4)


@gluon.jit
def _code_word_offsets(LW3: gl.constexpr, SKP: gl.constexpr, D: gl.constexpr):
    """The code words' loads as [D / 8 words, 4 page parts, 16 rows] in layout ``LW3``
    (``_words_layout(True)``): each part's first token ([1, 4, 1], part x 16) and each word's
    int32 offset from its part's first row ([D / 8, 1, 16]: row x SKP / 4 + D / 4 + word)."""
    wi = gl.expand_dims(gl.expand_dims(gl.arange(0, D // 8, layout=gl.SliceLayout(1, gl.SliceLayout(2, LW3))), 1),
                        2) + D // 4
    wpos = gl.expand_dims(gl.expand_dims(gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(2, LW3))), 0),
                          2) * 16
    wrow = gl.expand_dims(gl.expand_dims(gl.arange(0, 16, layout=gl.SliceLayout(0, gl.SliceLayout(1, LW3))), 0),
                          1) * (SKP // 4) + wi
    return wpos, wrow


@gluon.jit
def _tile_words(KW, bt_row, wblk, sblk, n0, ps_, wpos, wrow, stride_kw, last_page, PAGE: gl.constexpr,
                SKP: gl.constexpr, SZW: gl.constexpr, BN: gl.constexpr):
    """The code words (``_code_word_offsets``' shape) and the scale/zero words of the tile at
    ``n0`` (positions ``ps_``), from the block ids ``wblk`` / ``sblk`` read a step before; and
    the next tile's block ids."""
    cw3 = gl.load(KW + _word_offsets(wblk, n0 + wpos, stride_kw, PAGE, SKP) + wrow)
    szw = gl.load(KW + _word_offsets(sblk, ps_, stride_kw, PAGE, SKP) + SZW)
    return cw3, szw, _blocks(bt_row, n0 + BN + wpos, last_page, PAGE), _blocks(bt_row, ps_ + BN, last_page, PAGE)


@gluon.jit
def _exchange_buffer(R: gl.constexpr):
    """Shared memory for ``_max_over_warps``: 4 warps x R rows, fp32."""
    return gl.allocate_shared_memory(gl.float32, [4 * R], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))


@gluon.jit
def _max_over_warps(s, xbuf, LS: gl.constexpr, BN: gl.constexpr):
    """The maximum over the tokens of scores^T ``s`` ([BN, R], a warp's 16 tokens each) in one
    exchange: each warp's maximum by shuffles, stored to ``xbuf`` (4 x R fp32), one barrier,
    the four read back in the rows' layout. ``xbuf`` is written again only after the caller's
    next barrier."""
    R: gl.constexpr = s.shape[1]
    xbuf.store(gl.reshape(gl.max(gl.reshape(s, [4, BN // 4, R]), 1), [4 * R]))
    _cta_barrier()
    LR: gl.constexpr = gl.SliceLayout(0, LS)
    return gl.maximum(gl.maximum(xbuf.slice(0, R).load(LR), xbuf.slice(R, R).load(LR)),
                      gl.maximum(xbuf.slice(2 * R, R).load(LR), xbuf.slice(3 * R, R).load(LR)))


@gluon.jit
def _softmax_step(s2, rsc, valid, szw, m_i, l_e, z_e, LS: gl.constexpr, BN: gl.constexpr, R: gl.constexpr,
                  xbuf=None):
    """One tile's online softmax on the scores^T products ``s2`` ([BN, 2 R]; a row's hi and lo
    columns r and R + r sit in the same thread's registers) times ``rsc``, tokens not ``valid``
    left out: the probabilities times the value scales of ``szw`` in fp16 (the value product's
    B operand), the rows' rescale factor, and the running maximum and per-element sums of p
    and of p times the value zeros, updated. With ``xbuf`` the maximum across the warps is
    ``_max_over_warps``' one exchange instead of Triton's reduction."""
    s = gl.convert_layout(gl.sum(gl.reshape(s2, [BN, 2, R]), 1), LS, assert_trivial=True)
    s = s * gl.expand_dims(rsc, 0)
    s = gl.where(gl.expand_dims(valid, 1), s, float("-inf"))
    if xbuf is None:
        m_new = gl.maximum(m_i, gl.max(s, 0))
    else:
        m_new = gl.maximum(m_i, _max_over_warps(s, xbuf, LS, BN))
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = gl.exp2(m_i - m_use)
    p = gl.exp2(s - gl.expand_dims(m_use, 0))
    szw = gl.where(valid, szw, 0)
    vs = (szw & 0xFFFF).to(gl.uint16).to(gl.float16, bitcast=True).to(gl.float32)
    vz = ((szw >> 16) & 0xFFFF).to(gl.uint16).to(gl.float16, bitcast=True).to(gl.float32)
    a2 = gl.expand_dims(alpha, 0)
    l_e = l_e * a2 + p
    z_e = z_e * a2 + p * gl.expand_dims(vz, 1)
    return (p * gl.expand_dims(vs, 1)).to(gl.float16), alpha, m_new, l_e, z_e


@gluon.jit
def _value_operand(cw, LO: gl.constexpr, D: gl.constexpr, BLOCK_N: gl.constexpr):
    """Code words [D / 8, tokens] -> the A operand V^T [D, tokens] in fp16. Row m of the operand
    is code j of word i with m = 128 j2 + 64 j1 + 16 (i // 8) + 8 j0 + i % 8 (j = 4 j2 + 2 j1 + j0)."""
    cj = gl.reshape(_codes_joined(cw), [4, 8, BLOCK_N, 2, 2, 2])
    cj = gl.reshape(gl.permute(cj, (5, 4, 0, 3, 1, 2)), [D, BLOCK_N])
    return gl.convert_layout(cj, gl.DotOperandLayout(0, LO, 2), assert_trivial=True)


@gluon.jit
def _half_value_operand(cw, hsel, LO: gl.constexpr, BLOCK_N: gl.constexpr):
    """D = 128: code words [16, 2 halves, tokens] (``hsel`` = half x 0x2222) -> the A operand
    V^T [128, tokens] in fp16. Row m of the operand is code 4 h + 2 k1 + k0 of word
    4 i1 + i0 with m = 64 k1 + 16 i1 + 8 k0 + 2 i0 + h."""
    cj = gl.reshape(_half_codes_joined(cw, hsel), [4, 4, 2, BLOCK_N, 2, 2])
    cj = gl.reshape(gl.permute(cj, (5, 0, 4, 1, 2, 3)), [128, BLOCK_N])
    return gl.convert_layout(cj, gl.DotOperandLayout(0, LO, 2), assert_trivial=True)


@gluon.jit(do_not_specialize=["num_splits"])
def _tq_wgmma_decode(
    QR,  # [T, Hq, D] query
    KV,  # uint8 cache [num_blocks, PAGE, HK, slot]
    BT,  # int32 [B, max_blocks]
    SeqLens,  # int32 [B]
    QStart,  # int32 [B + 1] first query token of each sequence (verify)
    MidO,  # fp32 [B, HK, S, ROWS, D]
    MidL,  # fp32 [B, HK, S, ROWS]
    stride_qt,
    stride_qh,
    stride_kw,  # the cache's block stride in int32 words
    stride_bt,
    num_splits,
    qk_scale,
    SKP: gl.constexpr,
    SKH: gl.constexpr,
    HK: gl.constexpr,
    G: gl.constexpr,
    D: gl.constexpr,
    PAGE: gl.constexpr,
    STAGES: gl.constexpr,
    R: gl.constexpr,  # query rows on N (8, 16 or 32)
    QL: gl.constexpr = 1,  # query tokens per sequence at most (verify: K + 1)
    QPP: gl.constexpr = 1,  # query tokens per program (QPP x G <= R)
    RSPLIT: gl.constexpr = 1,  # programs per (split, KV head, sequence), one share of the tokens each
    HAS_QSTART: gl.constexpr = False,  # verify: query tokens from QStart, the cache up to them
    PDL: gl.constexpr = False,  # the combine is a programmatic dependent launch: let it start
    PF: gl.constexpr = 0,  # L2 prefetch of the code and scale/zero words PF tiles ahead (0: none)
    EARLY: gl.constexpr = False,  # this kernel is a programmatic dependent launch: the sequence
    # lengths and the block table are read before the previous kernel's end, the query and the
    # cache after it
    TL=None,  # diagnostics: int64 [programs, 4] timeline (``tools/bench/tq_timeline.py``)
    XMAX: gl.constexpr = False,  # TileConfig.warp_max: the softmax's maximum in one exchange
):
    if TL is not None:
        t_start = _clock()
    BN: gl.constexpr = 64
    ROWS: gl.constexpr = QL * G
    LS: gl.constexpr = _scores_layout(R)
    LS2: gl.constexpr = _scores_layout(2 * R)  # the products' [hi | lo] columns
    LO: gl.constexpr = _output_layout(R)
    if D == 128:
        LW: gl.constexpr = _half_words_layout(False)
        LW3: gl.constexpr = _half_words_layout(True)
    else:
        LW: gl.constexpr = _words_layout(False)
        LW3: gl.constexpr = _words_layout(True)
    # key copies [4 page parts, 16 rows, D bytes]: warp w copies part w, 32 lanes x 4 bytes
    # along a token
    LKC: gl.constexpr = gl.BlockedLayout([1, 16, 4], [1, 1, 32], [4, 1, 1], [2, 1, 0])
    LQ: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [4, 1], [1, 0])  # a query row within one warp
    SK: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2)
    SP: gl.constexpr = _probs_smem_layout(R)
    pid0 = gl.program_id(0)
    sid = pid0 // RSPLIT
    part = pid0 - sid * RSPLIT
    hk = gl.program_id(1)
    b = gl.program_id(2)
    q0, q_len, start, end, ntiles, last_page = _split_range(SeqLens, QStart, b, sid, num_splits, QL, HAS_QSTART, BN,
                                                            PAGE)
    bt_row = BT + b.to(gl.int64) * stride_bt
    K8 = KV.to(gl.pointer_type(gl.float8e4nv)) + hk * SKH
    kpos, krow = _part_copies(4, D, SKP, LKC)
    blk0 = _blocks(bt_row, start + kpos, last_page, PAGE)  # the first key copies' block ids
    ksm = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, BN, D], SK)
    if EARLY:
        _wait_prior()
        _first_copies(ksm, K8, bt_row, blk0, start, end, last_page, kpos, krow, stride_kw, PAGE, SKP, STAGES, BN, D)

    # the query rows as two fp8 parts in shared memory (the scores' B operand, K-major)
    # row r: query token part * QPP + r // G, head r % G of the group
    qrow = gl.arange(0, R, layout=gl.SliceLayout(1, LQ))
    qcol = gl.arange(0, D, layout=gl.SliceLayout(0, LQ))
    qtok = part * QPP + qrow // G
    qok = qrow < QPP * G
    if HAS_QSTART:
        qok = qok & (qtok < q_len)
    q_ptr = (QR + gl.expand_dims((q0 + qtok).to(gl.int64) * stride_qt + (hk * G + qrow % G) * stride_qh, 1)
             + gl.expand_dims(qcol, 0))
    qmask = gl.expand_dims(qok, 1) & gl.expand_dims(qcol >= 0, 0)
    qh, ql, inv = _q_split(gl.load(q_ptr, mask=qmask, other=0.0).to(gl.float32))
    # [hi rows; lo rows]: one B operand of 2 R columns, so one product a k step serves both parts
    q2_s = gl.allocate_shared_memory(gl.float8e4nv, [2 * R, D], SK,
                                     gl.reshape(gl.permute(gl.join(qh, ql), (2, 0, 1)), [2 * R, D]))
    LRS: gl.constexpr = gl.SliceLayout(0, LS)
    LRO: gl.constexpr = gl.SliceLayout(0, LO)
    rsc = gl.convert_layout(inv, LRS) * qk_scale

    # key tiles: a ring of STAGES in shared memory, STAGES - 1 tiles requested ahead
    psm = gl.allocate_shared_memory(gl.float16, [BN, R], SP)
    xbuf = _exchange_buffer(R) if XMAX else None  # the softmax's maximum in one exchange
    if not EARLY:
        _first_copies(ksm, K8, bt_row, blk0, start, end, last_page, kpos, krow, stride_kw, PAGE, SKP, STAGES, BN, D)
    kblk = _blocks(bt_row, start + (STAGES - 1) * BN + kpos, last_page, PAGE)

    # code words [D / 8, tokens] (as [words, page parts, rows]) and scale/zero words per token
    # (plain loads)
    KW = KV.to(gl.pointer_type(gl.int32)) + hk * (SKH // 4)
    if D == 128:
        # [words, halves, parts, rows]; both halves load the word
        wi = gl.arange(0, 16, layout=gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, LW3))))
        wi = gl.expand_dims(gl.expand_dims(gl.expand_dims(wi, 1), 2), 3) + D // 4
        wh = gl.arange(0, 2, layout=gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, LW3))))
        wh = gl.expand_dims(gl.expand_dims(gl.expand_dims(wh, 0), 2), 3)
        wpos = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, LW3))))
        wpos = gl.expand_dims(gl.expand_dims(gl.expand_dims(wpos, 0), 1), 3) * 16
        wrow = gl.arange(0, 16, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, LW3))))
        wrow = gl.expand_dims(gl.expand_dims(gl.expand_dims(wrow, 0), 1), 2) * (SKP // 4) + wi + wh * 0
        hsel = gl.arange(0, 2, layout=gl.SliceLayout(0, gl.SliceLayout(2, LW)))
        hsel = gl.expand_dims(gl.expand_dims(hsel, 0), 2) * 0x2222 + gl.zeros([16, 2, BN], gl.int32, layout=LW)
    else:
        wpos, wrow = _code_word_offsets(LW3, SKP, D)
    st = gl.arange(0, BN, layout=gl.SliceLayout(1, LS))
    SZW: gl.constexpr = (D + D // 2) // 4
    wblk = _blocks(bt_row, start + wpos, last_page, PAGE)
    sblk = _blocks(bt_row, start + st, last_page, PAGE)

    if PF > 0:
        # one prefetch a thread: [2 words, BN tokens], a token's first code word and its
        # scale/zero word; their block ids read a step before, as the loads'
        LPF: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [2, 2], [1, 0])
        pf_tok = gl.expand_dims(gl.arange(0, BN, layout=gl.SliceLayout(0, LPF)), 0)
        pf_word = gl.expand_dims(gl.arange(0, 2, layout=gl.SliceLayout(1, LPF)), 1) * (SZW - D // 4) + D // 4
        pf_blk = _blocks(bt_row, start + PF * BN + pf_tok, last_page, PAGE)
    m_i = gl.full([R], float("-inf"), gl.float32, layout=LRS)
    l_e = gl.zeros([BN, R], gl.float32, layout=LS)
    z_e = gl.zeros([BN, R], gl.float32, layout=LS)
    acc = gl.zeros([D, R], gl.float32, layout=LO)
    for it in range(0, ntiles):
        n0 = start + it * BN
        ps_ = n0 + st
        cw3, szw, wblk, sblk = _tile_words(KW, bt_row, wblk, sblk, n0, ps_, wpos, wrow, stride_kw, last_page, PAGE,
                                           SKP, SZW, BN)
        if PF > 0:
            pf_pos = n0 + PF * BN + pf_tok
            _prefetch_l2(KW + _word_offsets(pf_blk, pf_pos, stride_kw, PAGE, SKP) + pf_word)
            pf_blk = _blocks(bt_row, pf_pos + BN, last_page, PAGE)

        async_copy.wait_group(STAGES - 2)
        fence_async_shared()
        _cta_barrier()
        if D == 128:
            cw = gl.convert_layout(gl.reshape(cw3, [16, 2, BN]), LW, assert_trivial=True)
        else:
            cw = gl.convert_layout(gl.reshape(cw3, [D // 8, BN]), LW, assert_trivial=True)
        # refill the stage the previous tile used (every warp is past its products)
        pa = n0 + (STAGES - 1) * BN + kpos
        _async_load(
            ksm.index((it + STAGES - 1) % STAGES).reshape([4, 16, D]),
            K8 + 4 * _word_offsets(kblk, pa, stride_kw, PAGE, SKP) + krow, mask=pa < end)
        async_copy.commit_group()
        kblk = _blocks(bt_row, pa + BN, last_page, PAGE)
        kcur = ksm.index(it % STAGES)
        s2 = warpgroup_mma(kcur, q2_s.permute((1, 0)), gl.zeros([BN, 2 * R], gl.float32, layout=LS2))
        pv, alpha, m_i, l_e, z_e = _softmax_step(s2, rsc, ps_ < end, szw, m_i, l_e, z_e, LS, BN, R, xbuf)
        psm.store(pv)
        fence_async_shared()
        _cta_barrier()
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, LRO), 0)
        if D == 128:
            acc = warpgroup_mma(_half_value_operand(cw, hsel, LO, BN), psm, acc)
        else:
            acc = warpgroup_mma(_value_operand(cw, LO, D, BN), psm, acc)
    async_copy.wait_group(0)
    if TL is not None:
        t_loop = _clock()
    if PDL:
        _launch_dependents()

    l_i = gl.sum(l_e, 0)
    z_i = gl.sum(z_e, 0)
    l_safe, lse, zo = _row_totals(m_i, l_i, z_i)
    rows = gl.arange(0, R, layout=LRS)
    mid = ((b.to(gl.int64) * HK + hk) * num_splits + sid) * ROWS + part * (QPP * G)
    gl.store(MidL + mid + rows, lse, mask=(rows < QPP * G) & (part * (QPP * G) + rows < ROWS))
    o = acc / gl.expand_dims(gl.convert_layout(l_safe, LRO), 0) + gl.expand_dims(gl.convert_layout(zo, LRO), 0)
    om = gl.expand_dims(gl.arange(0, D, layout=gl.SliceLayout(1, LO)), 1)
    orow = gl.expand_dims(gl.arange(0, R, layout=LRO), 0)
    if D == 128:
        # operand row m -> head column: word 4 (m // 16 % 4) + m // 2 % 4, code 4 (m % 2) +
        # 2 (m // 64) + m // 8 % 2
        ocol = 32 * ((om >> 4) & 3) + 8 * ((om >> 1) & 3) + 4 * (om & 1) + 2 * ((om >> 6) & 1) + ((om >> 3) & 1)
    else:
        # D = 256: the partials in operand-row order (each store instruction of a warp fills
        # whole 32-byte sectors; the combine puts the columns back, ``PARTIAL_ORDER_H``)
        ocol = om
    own = (orow < QPP * G) & (part * (QPP * G) + orow < ROWS)  # this program's rows
    gl.store(MidO + (mid + orow) * D + ocol, o, mask=own & (ocol >= 0))
    if TL is not None:
        # the program's start, its loop's end, its end (partials stored) and its SM
        row = TL + ((b * HK + hk) * gl.num_programs(0) + pid0) * 4
        gl.store(row, t_start)
        gl.store(row + 1, t_loop)
        gl.store(row + 2, _clock())
        gl.store(row + 3, gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=gl.int32, is_pure=False,
                                                    pack=1).to(gl.int64))
