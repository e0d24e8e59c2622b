"""Stage 1 of the k8v4 spec-verify on Hopper warp-group products, query rows on M (Gluon).

One program (one warp group) per (split, KV head, sequence), 64-token tiles, all K + 1 query
tokens x the group's heads of a request (up to 64 rows) on the products' M side:

* S = Q K^T: the query rows split into two fp8 parts (hi + lo, as kernels "q" and "h") are
  the A operand in shared memory; the tile's fp8 keys, copied into shared memory as they lie
  in the cache (``cp.async``, a ring of stages, as kernel "h"), are the B operand. With at
  most 32 rows both parts share one operand (row 8 w + i's at M rows 16 w + i and 16 w + 8 + i,
  which a thread holds together): one product a k step, the parts added in registers;
* the softmax runs on S's accumulator (one row's tokens within four lanes);
* O = P V: P (times the value scales) is the A operand straight from registers; the 4-bit
  codes, copied into shared memory with the keys, are turned into fp16 once per tile and
  stored as V^T [D, tokens] (the B operand, tokens contiguous), column 8 i + j of the head
  (code j of word i) at row W j + i (W = D / 8 words a token) so that a warp's stores spread
  over all banks; the partials keep that column order (a thread stores pairs of columns)
  and the combine writes each column to its place in the output;
* ``VHALF`` (``TileConfig.v_halves``, 64-token tiles): V^T is built and multiplied in two
  halves of 32 tokens, the first in a buffer of its own while the scores' products run, the
  second in the tile's key stage once every warp has waited for those products (the stage
  holds exactly that much fp16): 16 KB less shared memory at D = 256 (98,816 bytes for 33-64
  rows, within the launcher's carve-out limit), one more barrier a tile;
* ``SPLIT_RING`` (``TileConfig.split_ring``, 2 stages): each stage of the copies' ring a buffer
  of its own and the loop unrolled by two (the second tile of a pair under a branch), so that
  Triton 3.6 puts no barrier between one stage's refill and the other stage's reads (with one
  ring indexed at run time it adds two a tile; later versions none). Each buffer is indexed
  with a 0 the compiler cannot fold, so that the products' shared-memory descriptors are made
  in the loop, as with one ring, not kept in registers across it (the build spilled ~100
  bytes that way);
* ``PIPE`` (``TileConfig.pipe``) orders a tile so that the tensor cores and the other
  instructions run at once: the scores' products are issued before this tile's V^T is built
  and waited for after it (1 to 4; 1 and 3 issue them before the next tile's copies are
  requested too), and P V is left running into the next tile (3, 4); 0 waits for every
  product as it is issued.

fp8 e4m3 keys + 4-bit values, D = 128 or 256, K + 1 x group <= 64, pages of a power of two
of at least 16 tokens, NVIDIA Hopper. The cache is read up to the K + 1 tail, which the combine
takes from the raw K/V (as for the other verify kernels).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

from ._gluon_mma_decode import _codes_joined, _cta_barrier, _row_totals
from ._wgmma_decode import _async_load, _blocks, _launch_dependents, _part_copies, _q_split, _split_range, _word_offsets

NUM_WARPS = 4
# the combine's column order for kernel "v"'s partials (column W j + i holds head column 8 i + j,
# W = D / 8)
PARTIAL_ORDER_V = 1
ROWS_MAX = 64  # query rows a program (the products' M)


@builtin
def _smem_as(smem, dtype, shape, layout, _semantic=None):
    """``smem`` seen as another dtype, shape and layout (the method's name differs between
    Gluon versions: 3.6 ``_reinterpret``, later ``reinterpret``)."""
    view = getattr(smem, "reinterpret", None) or smem._reinterpret
    return view(dtype, shape, layout, _semantic=_semantic)


@gluon.constexpr_function
def _copy_layout(bn, per_token):
    """Copies of one tile [page parts of 16 tokens, 16 rows, per_token items]: a warp copies
    one part (two warps share one with 32-token tiles), 32 lanes along a token (items of 4
    bytes where a token has more than 32, else one 4-byte word each, two tokens a warp step
    for 16 words)."""
    parts = bn // 16
    if per_token > 32:
        return gl.BlockedLayout([1, 16 * parts // 4, 4], [1, 1, 32], [parts, 4 // parts, 1], [2, 1, 0])
    return gl.BlockedLayout([1, 16 * parts * per_token // 128, 1], [1, 32 // per_token, per_token],
                            [parts, 4 // parts, 1], [2, 1, 0])


@gluon.constexpr_function
def _codes_read_layout(bn, words):
    """The codes read back: [tokens / 8 groups, 8 tokens, words], a thread's tokens of one word
    consecutive (the f16x2 pairing), lanes along the words (with 16 words the last lane bit
    takes the highest register bit's tokens), warp w groups w (+ 4)."""
    regs = [[0, 1, 0], [0, 2, 0], [0, 4, 0]] + ([[4, 0, 0]] if bn == 64 else [])
    lanes = [[0, 0, 1 << k] for k in range(words.bit_length() - 1)]
    while len(lanes) < 5:
        lanes.append(regs.pop())
    return gl.DistributedLinearLayout(regs, lanes, [[1, 0, 0], [2, 0, 0]], [], [bn // 8, 8, words])


@gluon.jit
def _scores(ql_s, qh_s, k, LS: gl.constexpr, M: gl.constexpr, BN: gl.constexpr, ASYNC: gl.constexpr,
            STACK: gl.constexpr):
    """S = Q K^T over one key tile from the query's two fp8 parts (with ``ASYNC`` issued and
    left running: a warp-group wait returns it). ``STACK``: both parts in ``ql_s`` (rows
    16 w + i hold the hi part of query row 8 w + i, rows 16 w + 8 + i its lo part), one product
    a k step; ``_stacked_sum`` adds the two."""
    s = warpgroup_mma(ql_s, k.permute((1, 0)), gl.zeros([M, BN], gl.float32, layout=LS), is_async=ASYNC)
    if STACK:
        return s
    return warpgroup_mma(qh_s, k.permute((1, 0)), s, is_async=ASYNC)


@gluon.jit
def _paired_rows(a, b, N: gl.constexpr):
    """Two [32, N] (query rows 8 w + i) -> [64, N]: row 8 w + i of ``a`` at M row 16 w + i, of
    ``b`` at 16 w + 8 + i (the rows a thread of the products' layout holds together)."""
    return gl.reshape(gl.permute(gl.join(gl.reshape(a, [4, 8, N]), gl.reshape(b, [4, 8, N])), (0, 3, 1, 2)),
                      [64, N])


@gluon.jit
def _stacked_sum(s, LS: gl.constexpr, BN: gl.constexpr):
    """Rows 16 w + i and 16 w + 8 + i of S (a query row's hi and lo parts, in the same thread's
    registers) -> their sum in both."""
    t = gl.reshape(gl.sum(gl.reshape(s, [4, 2, 8, BN]), 1), [32, BN])
    return gl.convert_layout(_paired_rows(t, t, BN), LS, assert_trivial=True)


@gluon.jit
def _query_rows(m, STACK: gl.constexpr):
    """M rows -> (the query row each holds, whether it is the one to store it): with ``STACK``
    M row 16 w + 8 h + i holds query row 8 w + i (h = 1: a copy)."""
    if STACK:
        return (m >> 4) * 8 + (m & 7), (m & 8) == 0
    return m, m >= 0


@gluon.jit
def _vt_store(vsm, codes, t0, VN: gl.constexpr, W: gl.constexpr, D: gl.constexpr):
    """V^T of tokens ``t0`` .. ``t0 + VN`` of a tile into ``vsm`` [D, VN] (fp16): code j of word
    i (head column 8 i + j) of each token at row W j + i, from the tile's code words ``codes``
    [tokens, W] in shared memory."""
    cw = codes.reshape([codes.shape[0] // 8, 8, W]).slice(t0 // 8, VN // 8).load(_codes_read_layout(VN, W))
    vsm.store(gl.reshape(gl.permute(_codes_joined(cw), (5, 4, 3, 2, 0, 1)), [D, VN]))


@gluon.jit
def _v_blocks(n0, src, PAGE: gl.constexpr):
    """Block ids of the tile at token ``n0``: its keys', code words' and scale/zero words'
    copies (``src``: the cache pointers, copy positions and bounds ``_tq_wgmma_verify`` sets
    up)."""
    K8, KW, kpos, krow, cpos, crow, zpos, bt_row, last_page, end, stride_kw = src
    return (_blocks(bt_row, n0 + kpos, last_page, PAGE), _blocks(bt_row, n0 + cpos, last_page, PAGE),
            _blocks(bt_row, n0 + zpos, last_page, PAGE))


@gluon.jit
def _v_copies(stage, n0, blk, src, D: gl.constexpr, BN: gl.constexpr, PAGE: gl.constexpr, SKP: gl.constexpr):
    """Request the tile at token ``n0`` (block ids ``blk``) into ``stage`` (keys, code words,
    scale/zero words), one copy group."""
    K8, KW, kpos, krow, cpos, crow, zpos, bt_row, last_page, end, stride_kw = src
    kblk, cblk, zblk = blk
    ks, cs, zs = stage
    NP: gl.constexpr = BN // 16
    _async_load(ks.reshape([NP, 16, D]), K8 + 4 * _word_offsets(kblk, n0 + kpos, stride_kw, PAGE, SKP) + krow,
                mask=n0 + kpos < end)
    _async_load(cs.reshape([NP, 16, D // 8]), KW + _word_offsets(cblk, n0 + cpos, stride_kw, PAGE, SKP) + crow,
                mask=n0 + cpos < end)
    _async_load(zs, KW + _word_offsets(zblk, n0 + zpos, stride_kw, PAGE, SKP) + (D + D // 2) // 4,
                mask=n0 + zpos < end)
    async_copy.commit_group()


@gluon.jit
def _ring(stages: gl.constexpr, BN: gl.constexpr, D: gl.constexpr, SK: gl.constexpr, SC: gl.constexpr,
          S1: gl.constexpr):
    """A ring of ``stages`` tiles in shared memory: keys [BN, D] fp8, code words [BN, D / 8] and
    scale/zero words [BN] (int32)."""
    return (gl.allocate_shared_memory(gl.float8e4nv, [stages, BN, D], SK),
            gl.allocate_shared_memory(gl.int32, [stages, BN, D // 8], SC),
            gl.allocate_shared_memory(gl.int32, [stages, BN], S1))


@gluon.jit
def _stage(ring, i):
    """Stage ``i`` of each of a ring's buffers (keys, code words, scale/zero words)."""
    k, c, z = ring
    return k.index(i), c.index(i), z.index(i)


@gluon.jit
def _v_tile(n0, ring, cur, ring_next, nxt, vsm, ql_s, qh_s, src, blk, st, rsc, m_i, l_i, z_i, acc, D: gl.constexpr,
            BN: gl.constexpr, STAGES: gl.constexpr, PAGE: gl.constexpr, SKP: gl.constexpr, PIPE: gl.constexpr,
            VHALF: gl.constexpr, STACK: gl.constexpr, LS: gl.constexpr, LO: gl.constexpr, SVH: gl.constexpr):
    """One tile of kernel "v"'s loop, at token ``n0``, in stage ``cur`` of ``ring`` (keys, code
    words, scale/zero words): its copies waited for, stage ``nxt`` of ``ring_next`` (the
    previous tile's) refilled with the tile STAGES - 1 ahead (block ids ``blk``; the next ones
    are returned), S, the softmax and P V into the running state ``m_i``, ``l_i``, ``z_i``,
    ``acc``."""
    M: gl.constexpr = 64
    W: gl.constexpr = D // 8
    # TileConfig.pipe: the scores' products issued before the refill is requested (1, 3) or
    # after it (2, 4), and P V left running into the next tile (3, 4)
    S_FIRST: gl.constexpr = PIPE == 1 or PIPE == 3
    S_LATER: gl.constexpr = PIPE == 2 or PIPE == 4
    PV_ON: gl.constexpr = PIPE > 2
    # P V left running is waited for before the next tile's barrier with VHALF (it reads the
    # tile's key stage, which that tile refills), else after it
    PV_EARLY: gl.constexpr = PV_ON and VHALF
    PV_LATE: gl.constexpr = PV_ON and not VHALF
    VN: gl.constexpr = BN // 2 if VHALF else BN
    LRO: gl.constexpr = gl.SliceLayout(1, LO)
    async_copy.wait_group(STAGES - 2)
    if PV_EARLY:
        acc = warpgroup_mma_wait(0, deps=[acc])
    fence_async_shared()
    _cta_barrier()  # this tile's copies are in; every warp is past the previous tile's products
    kcur, ccur, zcur = _stage(ring, cur)
    if S_FIRST:  # the scores' products run while the refill is requested and V^T built
        if PV_LATE:  # the previous tile's P V (it reads V^T) is done
            acc = warpgroup_mma_wait(0, deps=[acc])
        s = _scores(ql_s, qh_s, kcur, LS, M, BN, True, STACK)
    # refill the stage the previous tile used
    pa = n0 + (STAGES - 1) * BN
    _v_copies(_stage(ring_next, nxt), pa, blk, src, D, BN, PAGE, SKP)
    blk = _v_blocks(pa + BN, src, PAGE)

    if S_LATER:  # the scores' products run while V^T is built
        if PV_LATE:  # the previous tile's P V ran while the refill was requested
            acc = warpgroup_mma_wait(0, deps=[acc])
        s = _scores(ql_s, qh_s, kcur, LS, M, BN, True, STACK)
    # V^T of this tile (with VHALF its first half): code j of word i (head column 8 i + j)
    # -> row W j + i, fp16
    _vt_store(vsm, ccur, 0, VN, W, D)

    if PIPE > 0:
        s = warpgroup_mma_wait(0, deps=[s])
    else:
        s = _scores(ql_s, qh_s, kcur, LS, M, BN, False, STACK)
    if VHALF:  # V^T's second half in the key stage, once every warp's scores have read it
        _cta_barrier()
        vsm_b = _smem_as(kcur, gl.float16, [D, VN], SVH)
        _vt_store(vsm_b, ccur, VN, VN, W, D)
    if STACK:
        s = _stacked_sum(s, LS, BN)
    valid = n0 + st < src[9]  # the split's end
    s = gl.where(gl.expand_dims(valid, 0), s, float("-inf"))
    # the row scale (> 0) applied to the row maximum and inside the exponent's FMA, not to
    # every score first
    m_new = gl.maximum(m_i, gl.max(s, 1) * rsc)
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = gl.exp2(m_i - m_use)
    p = gl.exp2(gl.fma(s, gl.expand_dims(rsc, 1), -gl.expand_dims(m_use, 1)))
    m_i = m_new
    szw = gl.where(valid, zcur.load(gl.SliceLayout(0, LS)), 0)
    vs = (szw & 0xFFFF).to(gl.uint16).to(gl.float16, bitcast=True).to(gl.float32)
    vz = ((szw >> 16) & 0xFFFF).to(gl.uint16).to(gl.float16, bitcast=True).to(gl.float32)
    l_i = l_i * alpha + gl.sum(p, 1)
    z_i = z_i * alpha + gl.sum(p * gl.expand_dims(vz, 0), 1)
    p16 = (p * gl.expand_dims(vs, 0)).to(gl.float16)
    LPA: gl.constexpr = gl.DotOperandLayout(0, LO, 2)
    if not VHALF:
        pa16 = gl.convert_layout(p16, LPA)
    fence_async_shared()
    _cta_barrier()  # V^T is stored
    acc = acc * gl.expand_dims(gl.convert_layout(alpha, LRO), 1)
    if VHALF:  # P V over the two halves of the tile's tokens
        pa, pb = gl.split(gl.permute(gl.reshape(p16, [M, 2, VN]), (0, 2, 1)))
        acc = warpgroup_mma(gl.convert_layout(pa, LPA), vsm.permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma(gl.convert_layout(pb, LPA), vsm_b.permute((1, 0)), acc, is_async=PV_ON)
        if PV_ON:  # runs into the next tile's copy wait
            acc = warpgroup_mma_wait(2, deps=[acc])  # waits for nothing: the accumulator the loop carries
    elif PV_ON:  # runs into the next tile
        acc = warpgroup_mma(pa16, vsm.permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=[acc])  # waits for nothing: the accumulator the loop carries
    else:
        acc = warpgroup_mma(pa16, vsm.permute((1, 0)), acc)
    return blk, m_i, l_i, z_i, acc


@gluon.jit(do_not_specialize=["num_splits"])
def _tq_wgmma_verify(
    QR,  # [T, Hq, D] query
    KV,  # uint8 cache [num_blocks, PAGE, HK, slot]
    BT,  # int32 [B, max_blocks]
    SeqLens,  # int32 [B]
    QStart,  # int32 [B + 1] first query token of each sequence
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
    QL: gl.constexpr,  # query tokens per sequence at most (K + 1)
    BN: gl.constexpr = 64,  # tokens a tile (64 or 32)
    PDL: gl.constexpr = False,  # the combine is a programmatic dependent launch: let it start
    PIPE: gl.constexpr = 0,  # TileConfig.pipe
    VHALF: gl.constexpr = False,  # TileConfig.v_halves
    SPLIT_RING: gl.constexpr = False,  # TileConfig.split_ring (STAGES 2)
):
    gl.static_assert(STAGES == 2 or not SPLIT_RING, "kernel v: a split ring has 2 stages")
    NP: gl.constexpr = BN // 16  # page parts a tile
    M: gl.constexpr = 64
    PV_ON: gl.constexpr = PIPE > 2  # P V left running into the next tile (TileConfig.pipe)
    ROWS: gl.constexpr = QL * G
    W: gl.constexpr = D // 8  # code words a token
    # at most 32 rows: the query's two fp8 parts stacked on M (hi and lo of row 8 w + i at rows
    # 16 w + i and 16 w + 8 + i), one scores product a k step; rows 16 w + 8 + i repeat 16 w + i
    STACK: gl.constexpr = ROWS <= 32
    LS: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 32])
    LO: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    LKC: gl.constexpr = _copy_layout(BN, D)  # key bytes, 4 a copy
    LCC: gl.constexpr = _copy_layout(BN, W)  # code words
    LSZ: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    LQ: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [4, 1], [1, 0])
    SK: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2)
    SC: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0])
    S1: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
    sid = gl.program_id(0)
    hk = gl.program_id(1)
    b = gl.program_id(2)
    q0, q_len, start, end, ntiles, last_page = _split_range(SeqLens, QStart, b, sid, num_splits, QL, True, BN, PAGE)
    bt_row = BT + b.to(gl.int64) * stride_bt

    # the query rows (row r: token r // G, head r % G of the group) as two fp8 parts in shared
    # memory, the A operand of S
    QM: gl.constexpr = 32 if STACK else M  # query rows loaded
    qrow = gl.arange(0, QM, layout=gl.SliceLayout(1, LQ))
    qcol = gl.arange(0, D, layout=gl.SliceLayout(0, LQ))
    qok = (qrow < ROWS) & (qrow // G < q_len)
    q_ptr = (QR + gl.expand_dims((q0 + qrow // G).to(gl.int64) * stride_qt + (hk * G + qrow % G) * stride_qh, 1)
             + gl.expand_dims(qcol, 0))
    qh, ql, inv = _q_split(gl.load(q_ptr, mask=gl.expand_dims(qok, 1) & gl.expand_dims(qcol >= 0, 0),
                                   other=0.0).to(gl.float32))
    LR: gl.constexpr = gl.SliceLayout(1, LS)
    LRO: gl.constexpr = gl.SliceLayout(1, LO)
    if STACK:
        ql_s = gl.allocate_shared_memory(gl.float8e4nv, [M, D], SK, _paired_rows(qh, ql, D))
        qh_s = ql_s
        inv2 = gl.expand_dims(inv, 1)
        rsc = gl.convert_layout(gl.reshape(_paired_rows(inv2, inv2, 1), [M]), LR) * qk_scale
    else:
        qh_s = gl.allocate_shared_memory(gl.float8e4nv, [M, D], SK, qh)
        ql_s = gl.allocate_shared_memory(gl.float8e4nv, [M, D], SK, ql)
        rsc = gl.convert_layout(inv, LR) * qk_scale

    # rings of STAGES: the keys, the code words and the scale/zero words of a tile (SPLIT_RING:
    # two rings of one stage, so that Triton sees a stage's refill and the other stage's reads
    # touch different memory and puts no barrier between them)
    if SPLIT_RING:
        ring0 = _ring(1, BN, D, SK, SC, S1)
        ring1 = _ring(1, BN, D, SK, SC, S1)
    else:
        ring = _ring(STAGES, BN, D, SK, SC, S1)
    # V^T of the tile; with VHALF its first half (the second goes to the key stage the scores
    # have read)
    VN: gl.constexpr = BN // 2 if VHALF else BN
    SVH: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=2 * VN, element_bitwidth=16, rank=2)
    vsm = gl.allocate_shared_memory(gl.float16, [D, VN], SVH)
    K8 = KV.to(gl.pointer_type(gl.float8e4nv)) + hk * SKH
    KW = KV.to(gl.pointer_type(gl.int32)) + hk * (SKH // 4)
    kpos, krow = _part_copies(NP, D, SKP, LKC)
    cpos, crow = _part_copies(NP, W, SKP // 4, LCC)
    crow = crow + D // 4  # the code words follow the key bytes
    zpos = gl.arange(0, BN, layout=LSZ)
    src = (K8, KW, kpos, krow, cpos, crow, zpos, bt_row, last_page, end, stride_kw)
    for j in gl.static_range(STAGES - 1):  # SPLIT_RING: the first tile, into ring 0
        n0 = start + j * BN
        _v_copies(_stage(ring0 if SPLIT_RING else ring, j), n0, _v_blocks(n0, src, PAGE), src, D, BN, PAGE, SKP)
    blk = _v_blocks(start + (STAGES - 1) * BN, src, PAGE)

    st = gl.arange(0, BN, layout=gl.SliceLayout(0, LS))
    ocol = gl.arange(0, D, layout=gl.SliceLayout(0, LO))
    m_i = gl.full([M], float("-inf"), gl.float32, layout=LR)
    l_i = gl.zeros([M], gl.float32, layout=LR)
    z_i = gl.zeros([M], gl.float32, layout=LR)
    acc = gl.zeros([M, D], gl.float32, layout=LO)
    if SPLIT_RING:  # the loop unrolled by two, each half naming its rings
        for it in range(0, ntiles, 2):
            zero = gl.minimum(start + it * BN, 0)  # 0, but not to the compiler
            blk, m_i, l_i, z_i, acc = _v_tile(start + it * BN, ring0, zero, ring1, zero, vsm, ql_s, qh_s, src, blk,
                                              st, rsc, m_i, l_i, z_i, acc, D, BN, STAGES, PAGE, SKP, PIPE, VHALF,
                                              STACK, LS, LO, SVH)
            if it + 1 < ntiles:
                blk, m_i, l_i, z_i, acc = _v_tile(start + (it + 1) * BN, ring1, zero, ring0, zero, vsm, ql_s, qh_s,
                                                  src, blk, st, rsc, m_i, l_i, z_i, acc, D, BN, STAGES, PAGE, SKP,
                                                  PIPE, VHALF, STACK, LS, LO, SVH)
    else:  # this tile's stage; the refill goes to the stage the previous tile used
        for it in range(0, ntiles):
            blk, m_i, l_i, z_i, acc = _v_tile(start + it * BN, ring, it % STAGES, ring, (it + STAGES - 1) % STAGES,
                                              vsm, ql_s, qh_s, src, blk, st, rsc, m_i, l_i, z_i, acc, D, BN, STAGES,
                                              PAGE, SKP, PIPE, VHALF, STACK, LS, LO, SVH)
    async_copy.wait_group(0)
    if PV_ON:
        acc = warpgroup_mma_wait(0, deps=[acc])
    if PDL:
        _launch_dependents()

    l_safe, lse, zo = _row_totals(m_i, l_i, z_i)
    rows, own = _query_rows(gl.arange(0, M, layout=LR), STACK)
    mid = ((b.to(gl.int64) * HK + hk) * num_splits + sid) * ROWS
    gl.store(MidL + mid + rows, lse, mask=own & (rows < ROWS))
    o = acc / gl.expand_dims(gl.convert_layout(l_safe, LRO), 1) + gl.expand_dims(gl.convert_layout(zo, LRO), 1)
    orow, oown = _query_rows(gl.expand_dims(gl.arange(0, M, layout=LRO), 1), STACK)
    # stored in the operand's column order (W j + i for head column 8 i + j: pairs of columns
    # a thread, whole sectors a quad); the combine reads them back in head order
    ocol2 = gl.expand_dims(ocol, 0)
    gl.store(MidO + (mid + orow) * D + ocol2, o, mask=oown & (orow < ROWS) & (ocol2 >= 0))
