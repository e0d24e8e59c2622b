"""Kernel "h" with its key copies in a warp of their own (warp specialisation, Gluon).

The same products, softmax and partials as ``_wgmma_decode`` (decode, D = 256, groups of up to 8
heads), but the program is split in two partitions that meet at shared-memory barriers:

* a producer warp requests each key tile into a ring of ``STAGES`` stages
  (``cp.async``, 4 bytes a copy, as kernel "h") as soon as the stage is free, and lets the
  copies arrive on the stage's ``ready`` barrier when they land; it reads the block ids a
  tile ahead;
* the consumer (one warp group, the program's first four warps) waits on ``ready``, runs the
  scores' products, hands the stage back on its ``empty`` barrier, and does the softmax and
  the value products as kernel "h" does (code words straight into the A operand's registers).

So the consumer's loop carries no copy addressing and no wait for the whole program, and the
producer can run up to ``STAGES`` tiles ahead. With ``XMAX`` (``TileConfig.warp_max``) the
softmax's maximum across the warps is one exchange of its own (``_max_over_warps``) and the
stage is handed back after the probabilities' store, next to the barrier that store needs:
Triton orders an ``mbarrier`` arrival after every shared-memory access before it and before
every one after it, so placed after the scores' wait it cost a barrier of its own (Triton 3.6:
three barriers a tile instead of five).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, warpgroup_mma

from ._gluon_mma_decode import _cta_barrier, _row_totals
from ._wgmma_decode import (_async_load, _blocks, _code_word_offsets, _exchange_buffer, _launch_dependents,
                        _output_layout, _part_copies, _probs_smem_layout, _q_split, _scores_layout, _softmax_step,
                        _split_range, _tile_words, _value_operand, _wait_prior, _word_offsets, _words_layout)

NUM_WARPS = 4  # the consumer; the producer's warps come on top
# registers a thread at launch: 256 threads (the consumer's warp group, the producer's padded to
# one) x 128 = two programs an SM; the producer gives back all but PREGS, the consumer takes them
PRODUCER_MAXNREG = 128


@gluon.jit
def _producer(ksm, ready, empty, K8, bt_row, start, end, ntiles, last_page, stride_kw, SKP: gl.constexpr,
              PAGE: gl.constexpr, STAGES: gl.constexpr, D: gl.constexpr, EARLY: gl.constexpr):
    """Requests the split's key tiles into the ring, each as soon as its stage is handed back
    (``EARLY``: the first block ids read before the wait for the kernel before)."""
    BN: gl.constexpr = 64
    # [4 page parts, 16 rows, D bytes]: 32 lanes x 4 bytes along a token (2 or 4 warps were no
    # faster, docs/KERNELS.md)
    LKC: gl.constexpr = gl.BlockedLayout([4, 16, 4], [1, 1, 32], [1, 1, 1], [2, 1, 0])
    kpos, krow = _part_copies(4, D, SKP, LKC)
    kblk = _blocks(bt_row, start + kpos, last_page, PAGE)
    if EARLY:
        _wait_prior()
    for it in range(0, ntiles):
        s = it % STAGES
        mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
        pa = start + it * BN + kpos
        _async_load(ksm.index(s).reshape([4, 16, D]), K8 + 4 * _word_offsets(kblk, pa, stride_kw, PAGE, SKP) + krow,
                    mask=pa < end)
        kblk = _blocks(bt_row, pa + BN, last_page, PAGE)
        async_copy.mbarrier_arrive(ready.index(s), increment_count=False)


@gluon.jit
def _consumer(ksm, ready, empty, psm, q2_s, QR, q0, hk, stride_qt, stride_qh, qk_scale, KW, bt_row, start, end,
              ntiles, last_page, stride_kw, MidO, MidL, mid, SKP: gl.constexpr, PAGE: gl.constexpr,
              STAGES: gl.constexpr, D: gl.constexpr, R: gl.constexpr, G: gl.constexpr, PDL: gl.constexpr,
              EARLY: gl.constexpr, XMAX: gl.constexpr, xbuf):
    """The query split, then per tile: wait for its keys, the scores' products, the stage handed
    back, the softmax and the value products; then the partials (``EARLY``: the first block
    ids read before the wait for the kernel before, the query after it)."""
    BN: gl.constexpr = 64
    LS: gl.constexpr = _scores_layout(R)
    LS2: gl.constexpr = _scores_layout(2 * R)
    LO: gl.constexpr = _output_layout(R)
    LW: gl.constexpr = _words_layout(False)
    LW3: gl.constexpr = _words_layout(True)
    LRS: gl.constexpr = gl.SliceLayout(0, LS)
    LRO: gl.constexpr = gl.SliceLayout(0, LO)
    wpos, wrow = _code_word_offsets(LW3, SKP, D)
    st = gl.arange(0, BN, layout=gl.SliceLayout(1, LS))
    SZW: gl.constexpr = (D + D // 2) // 4
    wblk = _blocks(bt_row, start + wpos, last_page, PAGE)
    sblk = _blocks(bt_row, start + st, last_page, PAGE)
    if EARLY:
        _wait_prior()
    # the query rows as two fp8 parts, stacked as the scores' B operand (K-major)
    LQ: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [4, 1], [1, 0])
    qrow = gl.arange(0, R, layout=gl.SliceLayout(1, LQ))
    qcol = gl.arange(0, D, layout=gl.SliceLayout(0, LQ))
    q_ptr = (QR + gl.expand_dims(q0.to(gl.int64) * stride_qt + (hk * G + qrow % G) * stride_qh, 1)
             + gl.expand_dims(qcol, 0))
    qmask = gl.expand_dims(qrow < G, 1) & gl.expand_dims(qcol >= 0, 0)
    qh, ql, inv = _q_split(gl.load(q_ptr, mask=qmask, other=0.0).to(gl.float32))
    q2_s.store(gl.reshape(gl.permute(gl.join(qh, ql), (2, 0, 1)), [2 * R, D]))
    rsc = gl.convert_layout(inv, LRS) * qk_scale
    fence_async_shared()
    _cta_barrier()  # inside a partition: its own warps only
    m_i = gl.full([R], float("-inf"), gl.float32, layout=LRS)
    l_e = gl.zeros([BN, R], gl.float32, layout=LS)
    z_e = gl.zeros([BN, R], gl.float32, layout=LS)
    acc = gl.zeros([D, R], gl.float32, layout=LO)
    for it in range(0, ntiles):
        n0 = start + it * BN
        ps_ = n0 + st
        s_ = it % STAGES
        cw3, szw, wblk, sblk = _tile_words(KW, bt_row, wblk, sblk, n0, ps_, wpos, wrow, stride_kw, last_page, PAGE,
                                           SKP, SZW, BN)
        mbarrier.wait(ready.index(s_), (it // STAGES) & 1)
        cw = gl.convert_layout(gl.reshape(cw3, [D // 8, BN]), LW, assert_trivial=True)
        s2 = warpgroup_mma(ksm.index(s_), q2_s.permute((1, 0)), gl.zeros([BN, 2 * R], gl.float32, layout=LS2))
        if not XMAX:
            mbarrier.arrive(empty.index(s_))
        # XMAX: the maximum across the warps in one exchange (xbuf)
        pv, alpha, m_i, l_e, z_e = _softmax_step(s2, rsc, ps_ < end, szw, m_i, l_e, z_e, LS, BN, R,
                                                 xbuf if XMAX else None)
        pbuf = psm.index(it % 2)
        pbuf.store(pv)
        fence_async_shared()
        if XMAX:  # the stage handed back once P is stored, next to the barrier the store needs
            mbarrier.arrive(empty.index(s_))
        _cta_barrier()  # inside a partition: its own warps only
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, LRO), 0)
        acc = warpgroup_mma(_value_operand(cw, LO, D, BN), pbuf, acc)
    if PDL:
        _launch_dependents()
    l_i = gl.sum(l_e, 0)
    z_i = gl.sum(z_e, 0)
    l_safe, lse, zo = _row_totals(m_i, l_i, z_i)
    rows = gl.arange(0, R, layout=LRS)
    gl.store(MidL + mid + rows, lse, mask=rows < G)
    o = acc / gl.expand_dims(gl.convert_layout(l_safe, LRO), 0) + gl.expand_dims(gl.convert_layout(zo, LRO), 0)
    om = gl.expand_dims(gl.arange(0, D, layout=gl.SliceLayout(1, LO)), 1)
    orow = gl.expand_dims(gl.arange(0, R, layout=LRO), 0)
    # the partials in operand-row order, as kernel "h" at D = 256 (``PARTIAL_ORDER_H``)
    gl.store(MidO + (mid + orow) * D + om, o, mask=(orow < G) & (om >= 0))


@gluon.jit(do_not_specialize=["num_splits"])
def _tq_wgmma_decode_producer(
    QR, KV, BT, SeqLens, QStart, MidO, MidL,
    stride_qt, stride_qh, stride_kw, stride_bt, num_splits, qk_scale,
    SKP: gl.constexpr,
    SKH: gl.constexpr,
    HK: gl.constexpr,
    G: gl.constexpr,
    D: gl.constexpr,
    PAGE: gl.constexpr,
    STAGES: gl.constexpr,
    R: gl.constexpr,
    PREGS: gl.constexpr = 56,  # the producer's registers a thread
    PDL: gl.constexpr = False,
    EARLY: gl.constexpr = False,  # a programmatic dependent launch: the sequence length read
    # before the previous kernel's end, everything else after
    XMAX: gl.constexpr = False,  # TileConfig.warp_max: the softmax's maximum in one exchange
):
    """Stage 1 of a decode (one query token a sequence), arguments and partials as kernel "h"'s
    at D = 256 (``PARTIAL_ORDER_H``); launched with ``PRODUCER_MAXNREG`` registers a thread."""
    gl.static_assert(D == 256, "kernel hw: D = 256")
    gl.static_assert(R == 8, "kernel hw: decode, groups of up to 8")
    BN: gl.constexpr = 64
    SK: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2)
    SP: gl.constexpr = _probs_smem_layout(R)
    sid = gl.program_id(0)
    hk = gl.program_id(1)
    b = gl.program_id(2)
    q0, q_len, start, end, ntiles, last_page = _split_range(SeqLens, QStart, b, sid, num_splits, 1, False, BN, PAGE)
    bt_row = BT + b.to(gl.int64) * stride_bt
    K8 = KV.to(gl.pointer_type(gl.float8e4nv)) + hk * SKH
    KW = KV.to(gl.pointer_type(gl.int32)) + hk * (SKH // 4)
    ksm = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, BN, D], SK)
    psm = gl.allocate_shared_memory(gl.float16, [2, BN, R], SP)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=32)  # the producer's lanes
        mbarrier.init(empty.index(i), count=1)

    q2_s = gl.allocate_shared_memory(gl.float8e4nv, [2 * R, D], SK)
    mid = ((b.to(gl.int64) * HK + hk) * num_splits + sid) * G
    if XMAX:
        xbuf = _exchange_buffer(R)
    else:
        xbuf = psm  # not read
    gl.warp_specialize([
        (_consumer, (ksm, ready, empty, psm, q2_s, QR, q0, hk, stride_qt, stride_qh, qk_scale, KW, bt_row, start,
                     end, ntiles, last_page, stride_kw, MidO, MidL, mid, SKP, PAGE, STAGES, D, R, G, PDL,
                     EARLY, XMAX, xbuf)),
        (_producer, (ksm, ready, empty, K8, bt_row, start, end, ntiles, last_page, stride_kw, SKP, PAGE, STAGES, D,
                     EARLY)),
    ], [1], [PREGS])
