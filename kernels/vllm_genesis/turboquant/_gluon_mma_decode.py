"""Stage 1 of the k8v4 decode written in Gluon (explicit layouts, tensor cores from registers).

One program per (split, KV head, sequence) and 4 warps, as the Triton kernels, but each warp
owns a quarter of the head dimension instead of a quarter of the tokens, and both products
are transposed (tokens or head columns on the MMA's M side, the query rows on N, so a group
of up to 8 heads fills N = 8 without padding):

* scores^T: warp ``w`` multiplies the 64 tokens' key columns ``w*D/4 ..`` (``mma.sync`` A
  operand: the fp8 key words are loaded straight into its registers and widened there) with
  the same columns of the query rows; the four partial tiles are summed across warps through
  shared memory, so every warp holds the whole tile and runs the softmax itself;
* output^T: warp ``w`` accumulates head columns ``w*D/4 ..`` (M side) as V^T P^T: each
  thread's 8 columns are the 8 codes of one 4-byte word, the codes of two tokens are paired in
  registers (``prmt``) and turned into fp16 pairs (``lop3`` + one f16x2 op), which are the A
  operand as they are, and the probabilities in the softmax's layout are the B operand as they
  are (the columns are written back in cache order at the end).

No operand passes through shared memory (the layout conversions are asserted to move no
data). The cache is read as [.., pages, rows] tiles: one block-table entry per page, the
offsets inside a page compile-time constants. Each set of words is requested right after the
previous tile's set is used, and a tile's values are multiplied while the next tile's partial
scores are exchanged. Decode only (one query token per sequence), fp8 e4m3 keys + 4-bit
values, D = 256, groups of up to 16 heads, pages of a power of two.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2

from ._triton_words import FP8X4_F16_ASM

BLOCK_N = 64
NUM_WARPS = 4
# the CTA barrier's name differs between Gluon versions (3.6: thread_barrier, later: barrier)
_cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier


def _split_tokens(bases: list, dim: int, rows: int) -> list:
    """Linear-layout bases of rank r -> rank r + 1: the token dimension ``dim`` becomes
    (page, row inside the page) with ``rows`` rows (a power of two)."""
    out = []
    for v in bases:
        t = v[dim]
        out.append(v[:dim] + ([0, t] if t < rows else [t // rows, 0]) + v[dim + 1:])
    return out


def g_layouts(head_dim: int, page: int, group: int = 16, block_n: int = BLOCK_N) -> dict:
    """The layouts of the kernel's tensors for ``head_dim`` (a quarter of it per warp) and
    pages of ``page`` tokens (a power of two): the cache is read as [.., pages, rows] tiles, so
    that a thread's addresses are one block-table entry per page plus constant offsets."""
    dw = head_dim // 4
    pr = min(page, block_n)
    c = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[4, 1, 1], instr_shape=[1, 16, 8])
    warps = [[1, 0, 0], [2, 0, 0]]
    nb = (block_n // 8).bit_length() - 1  # token bits held in registers above the 8 lanes
    # key words [4, dw / 4, block_n]: 4 lanes read 16 consecutive bytes of a token, each thread
    # words l, l + 4, .. of 8 tokens: byte j of word l + 4r is column 16r + 4l + j, which is
    # where the tensor-core operand (k_width=4) wants it
    k_reg = [[0, 4, 0], [0, 8, 0]] + [[0, 0, 8 << i] for i in range(nb)]
    k_lane = [[0, 1, 0], [0, 2, 0], [0, 0, 1], [0, 0, 2], [0, 0, 4]]
    # value words [4, block_n, 8]: tokens as the mma operand's K, one word per 8 lanes
    v_reg = [[0, 1, 0]] + [[0, 8 << i, 0] for i in range(nb)]
    v_lane = [[0, 2, 0], [0, 4, 0], [0, 0, 1], [0, 0, 2], [0, 0, 4]]
    w4 = [[1, 0, 0, 0], [2, 0, 0, 0]]
    key = gl.DistributedLinearLayout(_split_tokens(k_reg, 2, pr), _split_tokens(k_lane, 2, pr), w4, [],
                                     [4, dw // 4, block_n // pr, pr])
    vword = gl.DistributedLinearLayout(_split_tokens(v_reg, 1, pr), _split_tokens(v_lane, 1, pr), w4, [],
                                       [4, block_n // pr, pr, 8])
    return dict(
        LC=c,
        LK=key,
        LV=vword,
        NP=block_n // pr,
        PR=pr,
        R=8 if group <= 8 else 16,  # query rows on the products' N side (a multiple of 8)
    )


@gluon.jit
def _idx4(N: gl.constexpr, DIM: gl.constexpr, L: gl.constexpr):
    """arange(N) along dimension DIM of a rank-4 tensor of layout L (size 1 elsewhere)."""
    if DIM == 0:
        x = gl.arange(0, N, layout=gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, L))))
        return gl.expand_dims(gl.expand_dims(gl.expand_dims(x, 1), 2), 3)
    elif DIM == 1:
        x = gl.arange(0, N, layout=gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, L))))
        return gl.expand_dims(gl.expand_dims(gl.expand_dims(x, 0), 2), 3)
    elif DIM == 2:
        x = gl.arange(0, N, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, L))))
        return gl.expand_dims(gl.expand_dims(gl.expand_dims(x, 0), 1), 3)
    else:
        x = gl.arange(0, N, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, L))))
        return gl.expand_dims(gl.expand_dims(gl.expand_dims(x, 0), 1), 2)


@gluon.jit
def _page_words(bt_row, n0, pg, last_page, ok, PAGE: gl.constexpr, wkb, SKP: gl.constexpr):
    """int32 word offsets of the pages ``pg`` of the tile at token n0 (pages past the last:
    the last one; where not ``ok``: block 0), plus the tile's first row in its page."""
    blk = gl.load(bt_row + gl.minimum(n0 // PAGE + pg, last_page), mask=ok, other=0)
    return blk * wkb + (n0 % PAGE) * (SKP // 4)


@gluon.jit
def _idx3(N: gl.constexpr, DIM: gl.constexpr, L: gl.constexpr):
    """arange(N) along dimension DIM of a rank-3 tensor of layout L (size 1 elsewhere)."""
    if DIM == 0:
        x = gl.arange(0, N, layout=gl.SliceLayout(1, gl.SliceLayout(2, L)))
        return gl.expand_dims(gl.expand_dims(x, 1), 2)
    elif DIM == 1:
        x = gl.arange(0, N, layout=gl.SliceLayout(0, gl.SliceLayout(2, L)))
        return gl.expand_dims(gl.expand_dims(x, 0), 2)
    else:
        x = gl.arange(0, N, layout=gl.SliceLayout(0, gl.SliceLayout(0, L)))
        return gl.expand_dims(gl.expand_dims(x, 0), 0)


@gluon.jit
def _fp8_f16(w):
    """Words of 4 fp8 e4m3 bytes -> 4 tensors of fp16 (byte 0..3 of each word)."""
    return gl.inline_asm_elementwise(
        asm=FP8X4_F16_ASM,
        constraints="=h,=h,=h,=h,r",
        args=[w],
        dtype=(gl.float16,) * 4,
        is_pure=True,
        pack=1,
    )


def _codes_asm(selects: list[list[str]], regs: str = "t") -> str:
    """PTX turning code words of two tokens into f16x2 codes: for each entry of ``selects``
    (lines leaving byte i of both words side by side in ``t``), its low nibbles into the
    mantissa of 1024 (mask 0x000F000F, minus 1024) -> $2i, its high ones at 16x that
    (0x00F000F0, x/16 - 64) -> $2i+1; exact."""
    body = []
    for i, select in enumerate(selects):
        body += [*select, "lop3.b32 a, t, 0x000F000F, k, 0xEA;", "lop3.b32 c, t, 0x00F000F0, k, 0xEA;",
                 f"sub.rn.f16x2 ${2 * i}, a, k;", f"fma.rn.f16x2 ${2 * i + 1}, c, r, m;"]
    return "\n".join(["{", f".reg .b32 {regs}, k, r, m, a, c;", "mov.b32 k, 0x64006400;", "mov.b32 r, 0x2C002C00;",
                      "mov.b32 m, 0xD400D400;", *body, "}"])


def _code_pairs_asm() -> str:
    """PTX: the code words of two tokens ($8, $9) -> 8 f16x2 registers ($0..$7: code j of
    both), byte i of both words side by side by an immediate ``prmt`` selector."""
    return _codes_asm([[f"prmt.b32 t, $8, $9, {i | i << 4 | (4 + i) << 8 | (4 + i) << 12:#06x};"]
                       for i in range(4)])


CODE_PAIRS_F16_ASM = gl.constexpr(_code_pairs_asm())


def _code_half_pairs_asm() -> str:
    """PTX: as ``_code_pairs_asm``, but only codes 4 h .. 4 h + 3 of the two words ($4, $5:
    bytes 2 h and 2 h + 1), ``h`` given per thread as h x 0x2222 ($6, the byte selectors'
    offset) -> 4 f16x2 registers ($0..$3)."""
    return _codes_asm([[f"add.u32 s, $6, {i * 0x1111 + 0x4400:#06x};", "prmt.b32 t, $4, $5, s;"] for i in range(2)],
                      regs="s, t")


CODE_HALF_PAIRS_F16_ASM = gl.constexpr(_code_half_pairs_asm())


@gluon.jit
def _codes_f16(w):
    """Code words of two tokens (consecutive elements) -> 8 tensors of fp16 codes (code j of
    each word), each element pair one f16x2 register."""
    return gl.inline_asm_elementwise(
        asm=CODE_PAIRS_F16_ASM,
        constraints="=r,=r,=r,=r,=r,=r,=r,=r,r,r",
        args=[w],
        dtype=(gl.float16,) * 8,
        is_pure=True,
        pack=2,
    )


@gluon.jit
def _half_codes_joined(w, hsel):
    """Code words -> [..., 2, 2] fp16 codes 4 h + 2 k1 + k0 at index [..., k0, k1], the half
    ``h`` of each element's word chosen per thread by ``hsel`` (= h x 0x2222; two tokens a
    register pair as ``_codes_f16``)."""
    c0, c1, c2, c3 = gl.inline_asm_elementwise(
        asm=CODE_HALF_PAIRS_F16_ASM,
        constraints="=r,=r,=r,=r,r,r,r,r",
        args=[w, hsel],
        dtype=(gl.float16,) * 4,
        is_pure=True,
        pack=2,
    )
    return gl.join(gl.join(c0, c1), gl.join(c2, c3))


@gluon.jit
def _codes_joined(w):
    """Code words -> [..., 2, 2, 2] fp16 codes: code j = 4 j2 + 2 j1 + j0 of each word at index
    [..., j0, j1, j2] (``_codes_f16``'s pairing: consecutive elements are two tokens)."""
    c0, c1, c2, c3, c4, c5, c6, c7 = _codes_f16(w)
    return gl.join(gl.join(gl.join(c0, c1), gl.join(c2, c3)), gl.join(gl.join(c4, c5), gl.join(c6, c7)))


@gluon.jit
def _row_totals(m_i, l_i, z_i):
    """A row's softmax sum (1 where it saw no token), log2-sum-exp (-inf there) and mean value
    zero term, from its running maximum and sums."""
    has = l_i > 0.0
    l_safe = gl.where(has, l_i, 1.0)
    return l_safe, gl.where(has, m_i + gl.log2(l_safe), float("-inf")), gl.where(has, z_i / l_safe, 0.0)


@gluon.jit
def _values(vw, pt, alpha, acc, LC: gl.constexpr, BLOCK_N: gl.constexpr, DW: gl.constexpr):
    """acc * alpha + V^T P^T for one tile: ``pt`` the probabilities (times the value scales) as
    the B operand [4, BLOCK_N, R], ``vw`` the tile's code words; code j of a thread's word is
    head column 8j + lane // 4 of its warp's quarter (M side)."""
    cj = _codes_joined(gl.reshape(vw, [4, BLOCK_N, 8]))
    # [4, BLOCK_N, lane // 4, j0, j1, j2] -> [4, 8 j + lane // 4, BLOCK_N]
    cj = gl.reshape(gl.permute(cj, (0, 5, 4, 3, 2, 1)), [4, DW, BLOCK_N])
    vop = gl.convert_layout(cj, gl.DotOperandLayout(0, LC, 2), assert_trivial=True)
    a3 = gl.expand_dims(gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(0, gl.SliceLayout(0, LC))), 0), 0)
    return mma_v2(vop, pt, acc * a3)


@gluon.jit
def _tile_step(n0, end, qt, kb, vw, sz, kp, vp, zp, pt, alpha, m_i, l_i, z_i, acc, part, KVW, kin, vin, zin,
               bt_row, kpg, vpg, zpg, last_page, ok, wkb, st, qk_scale, PAGE: gl.constexpr, SKP: gl.constexpr,
               W: gl.constexpr, DW: gl.constexpr, BLOCK_N: gl.constexpr, R: gl.constexpr, LC: gl.constexpr):
    """The tile at n0: its scores and softmax, and the previous tile's values (``pt``,
    ``alpha``, code words ``vw``) while the warps' partial scores are exchanged. Each word set
    is requested right after its predecessor is used (keys and scale/zero: the next tile's;
    codes: this tile's), with the pages of the tile after it."""
    LPT: gl.constexpr = gl.SliceLayout(0, gl.DotOperandLayout(1, LC, 2))  # [BLOCK_N, R], every warp
    n2 = n0 + 2 * BLOCK_N
    k0, k1, k2, k3 = _fp8_f16(gl.reshape(kb, [4, W, BLOCK_N]))
    kb = gl.load(KVW + kp + kin)
    kp = _page_words(bt_row, n2, kpg, last_page, ok, PAGE, wkb, SKP)

    # scores^T: the tokens' keys (A operand, columns 4 word + 2 j1 + j0 of each warp's quarter)
    # times the query rows' same columns, summed across warps
    k5 = gl.permute(gl.join(gl.join(k0, k1), gl.join(k2, k3)), (0, 2, 1, 4, 3))
    kop = gl.convert_layout(gl.reshape(k5, [4, BLOCK_N, DW]), gl.DotOperandLayout(0, LC, 4), assert_trivial=True)
    part.store(gl.reshape(mma_v2(kop, qt, gl.zeros([4, BLOCK_N, R], gl.float32, layout=LC)), [4 * BLOCK_N, R]))
    # the previous tile's values meanwhile
    acc = _values(vw, pt, alpha, acc, LC, BLOCK_N, DW)
    vw = gl.load(KVW + vp + vin)
    vp = _page_words(bt_row, n0 + BLOCK_N, vpg, last_page, ok, PAGE, wkb, SKP)
    _cta_barrier()
    s = part.slice(0, BLOCK_N).load(LPT) + part.slice(BLOCK_N, BLOCK_N).load(LPT)
    s = (s + part.slice(2 * BLOCK_N, BLOCK_N).load(LPT) + part.slice(3 * BLOCK_N, BLOCK_N).load(LPT)) * qk_scale
    valid = n0 + st < end
    s = gl.where(gl.expand_dims(valid, 1), s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 0))
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = gl.exp2(m_i - m_use)
    p = gl.exp2(s - gl.expand_dims(m_use, 0))
    # (slots past the end of the sequence are unwritten: their scale and zero are zeroed)
    szv = gl.where(valid, gl.convert_layout(gl.reshape(sz, [BLOCK_N]), st.type.layout, assert_trivial=True), 0)
    sz = gl.load(KVW + zp + zin)
    zp = _page_words(bt_row, n2, zpg, last_page, ok, PAGE, wkb, SKP)
    vs = (szv & 0xFFFF).to(gl.uint16).to(gl.float16, bitcast=True).to(gl.float32)
    vz = ((szv >> 16) & 0xFFFF).to(gl.uint16).to(gl.float16, bitcast=True).to(gl.float32)
    l_i = l_i * alpha + gl.sum(p, 0)
    z_i = z_i * alpha + gl.sum(p * gl.expand_dims(vz, 1), 0)
    ps = (p * gl.expand_dims(vs, 1)).to(gl.float16)
    pt = gl.expand_dims(ps, 0) + gl.zeros([4, BLOCK_N, R], gl.float16, layout=gl.DotOperandLayout(1, LC, 2))
    return kb, vw, sz, kp, vp, zp, pt, alpha, m_new, l_i, z_i, acc


@gluon.jit(do_not_specialize=["num_splits"])
def _tq_gluon_mma_decode(
    QR,  # [T, Hq, D] query
    KV,  # uint8 cache [num_blocks, PAGE, HK, slot]
    BT,  # int32 [B, max_blocks]
    SeqLens,  # int32 [B]
    MidO,  # fp32 [B, HK, S, G, D]
    MidL,  # fp32 [B, HK, S, G]
    stride_qt,
    stride_qh,
    stride_kb,
    stride_bt,
    num_splits,
    qk_scale,
    SKP: gl.constexpr,  # the cache's token and head strides (bytes, multiples of 4): offsets
    SKH: gl.constexpr,  # inside a page become constants
    HK: gl.constexpr,
    G: gl.constexpr,
    D: gl.constexpr,
    PAGE: gl.constexpr,
    BLOCK_N: gl.constexpr,
    LC: gl.constexpr,
    LK: gl.constexpr,
    LV: gl.constexpr,
    NP: gl.constexpr,
    PR: gl.constexpr,
    R: gl.constexpr,
):
    sid = gl.program_id(0)
    hk = gl.program_id(1)
    b = gl.program_id(2)
    DW: gl.constexpr = D // 4
    seq_len = gl.load(SeqLens + b)
    per_split = gl.cdiv(gl.cdiv(seq_len, num_splits), BLOCK_N) * BLOCK_N
    start = sid * per_split
    end = gl.minimum(start + per_split, seq_len)

    # the query rows, transposed, as the scores' B operand [4, DW, R]: warp w's columns w*DW..
    LB4: gl.constexpr = gl.DotOperandLayout(1, LC, 4)
    qr = _idx3(R, 2, LB4)
    qcol = _idx3(4, 0, LB4) * DW + _idx3(DW, 1, LB4)
    q_ptr = QR + b.to(gl.int64) * stride_qt + (hk * G + qr) * stride_qh + qcol
    qt = gl.load(q_ptr, mask=(qr < G) & (qcol >= 0), other=0.0).to(gl.float16)

    bt_row = BT + b.to(gl.int64) * stride_bt
    # int32 word offsets (the launcher checks the cache is under 2**33 bytes): one block-table
    # entry per page of a tile, plus loop-invariant offsets inside the page
    wkb = stride_kb // 4
    kvh = hk * (SKH // 4)
    KVW = KV.to(gl.pointer_type(gl.int32))
    W: gl.constexpr = DW // 4
    kin = _idx4(4, 0, LK) * W + _idx4(W, 1, LK) + _idx4(PR, 3, LK) * (SKP // 4) + kvh  # [4, W, 1, PR]
    kpg = _idx4(NP, 2, LK)
    vin = (D // 4) + _idx4(4, 0, LV) * (DW // 8) + _idx4(8, 3, LV) + _idx4(PR, 2, LV) * (SKP // 4) + kvh
    vpg = _idx4(NP, 1, LV)
    LZ: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(3, LV))  # [NP, PR] scale/zero words
    SZW: gl.constexpr = (D + D // 2) // 4
    zin = gl.expand_dims(gl.arange(0, PR, layout=gl.SliceLayout(0, LZ)), 0) * (SKP // 4) + SZW + kvh
    zpg = gl.expand_dims(gl.arange(0, NP, layout=gl.SliceLayout(1, LZ)), 1)
    LPT: gl.constexpr = gl.SliceLayout(0, gl.DotOperandLayout(1, LC, 2))  # [BLOCK_N, R] scores^T
    LR: gl.constexpr = gl.SliceLayout(0, LPT)  # [R] rows
    st = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, LPT))
    last_page = gl.maximum(end - 1, 0) // PAGE
    ok = start < end

    # the first tile's key and scale/zero words and the previous (none) tile's code words are
    # requested here, with the pages of the tiles each set needs next
    kb = gl.load(KVW + _page_words(bt_row, start, kpg, last_page, ok, PAGE, wkb, SKP) + kin)
    vw = gl.load(KVW + _page_words(bt_row, start, vpg, last_page, ok, PAGE, wkb, SKP) + vin)
    sz = gl.load(KVW + _page_words(bt_row, start, zpg, last_page, ok, PAGE, wkb, SKP) + zin)
    n1 = start + BLOCK_N
    kp = _page_words(bt_row, n1, kpg, last_page, ok, PAGE, wkb, SKP)
    vp = _page_words(bt_row, start, vpg, last_page, ok, PAGE, wkb, SKP)
    zp = _page_words(bt_row, n1, zpg, last_page, ok, PAGE, wkb, SKP)

    m_i = gl.full([R], float("-inf"), gl.float32, layout=LR)
    l_i = gl.zeros([R], gl.float32, layout=LR)
    z_i = gl.zeros([R], gl.float32, layout=LR)
    alpha = gl.full([R], 1.0, gl.float32, layout=LR)
    acc = gl.zeros([4, DW, R], gl.float32, layout=LC)  # output^T: each warp's quarter of the columns
    pt = gl.zeros([4, BLOCK_N, R], gl.float16, layout=gl.DotOperandLayout(1, LC, 2))
    # the warps' partial score tiles (tokens contiguous), one set for each step of an iteration
    red = gl.allocate_shared_memory(gl.float32, [2, 4 * BLOCK_N, R], gl.SwizzledSharedLayout(2, 1, 8, order=[0, 1]))
    # (an odd last tile is followed by one past the end: every token masked, no effect)
    for n0 in range(start, end, 2 * BLOCK_N):
        kb, vw, sz, kp, vp, zp, pt, alpha, m_i, l_i, z_i, acc = _tile_step(
            n0, end, qt, kb, vw, sz, kp, vp, zp, pt, alpha, m_i, l_i, z_i, acc, red.index(0), KVW, kin, vin, zin,
            bt_row, kpg, vpg, zpg, last_page, ok, wkb, st, qk_scale, PAGE, SKP, W, DW, BLOCK_N, R, LC)
        kb, vw, sz, kp, vp, zp, pt, alpha, m_i, l_i, z_i, acc = _tile_step(
            n0 + BLOCK_N, end, qt, kb, vw, sz, kp, vp, zp, pt, alpha, m_i, l_i, z_i, acc, red.index(1), KVW, kin,
            vin, zin, bt_row, kpg, vpg, zpg, last_page, ok, wkb, st, qk_scale, PAGE, SKP, W, DW, BLOCK_N, R, LC)
    acc = _values(vw, pt, alpha, acc, LC, BLOCK_N, DW)  # the last tile's values

    l_safe, lse, zo = _row_totals(m_i, l_i, z_i)
    rows = gl.arange(0, R, layout=LR)
    mid = ((b.to(gl.int64) * HK + hk) * num_splits + sid) * G
    gl.store(MidL + mid + rows, lse, mask=rows < G)
    LCR: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(0, LC))
    l3 = gl.expand_dims(gl.expand_dims(gl.convert_layout(l_safe, LCR), 0), 0)
    z3 = gl.expand_dims(gl.expand_dims(gl.convert_layout(zo, LCR), 0), 0)
    o = acc / l3 + z3
    od = _idx3(DW, 1, LC)
    orow = _idx3(R, 2, LC)
    ocol = _idx3(4, 0, LC) * DW + (od % 8) * 8 + od // 8
    gl.store(MidO + (mid + orow) * D + ocol, o, mask=(orow < G) & (ocol >= 0))
