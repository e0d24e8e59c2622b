"""Stage 1 that dequantises each tile and scores it with rows on the MMA's M side (kernel "n", every preset).

One program per (split, KV head, sequence). It loads the query rows of *every* query head of
the KV head's group and, for verify, of every query token of the request (rows
``r = i * G + g``), then streams its share of the compressed prefix once: ``BLOCK_N`` tokens
per step, keys dequantised to fp16/bf16 and scored with one tensor-core product for all rows,
online softmax in base 2, values applied as ``P * scale`` times the raw codes (plus
``P . zero``), so the 4-bit codes never need to be turned into full values. It writes one
normalised partial output and one log-sum-exp per row and split; ``_combine_splits`` merges
them.

Three kernels, one per way of reading a tile (``dequant_path`` says which; the launcher's
config: ``stage1.DequantSplit``):

* ``_dequant_split_words._tq_dequant_split_words``: fp8 keys, 4-bit values, D >= 128, pages
  a power of two, ``TileConfig(words=...)``: each slot read as int32 words and split in
  registers (PTX ``cvt``/``lop3`` or shifts) instead of loading and shuffling single bytes;
* ``_dequant_split_pages._tq_dequant_split_fp8_pages``: fp8 keys and 4-bit values on such
  pages otherwise: byte tiles, one block-table entry and one 64-bit base a page;
* ``_dequant_split_tokens._tq_dequant_split_tokens``: every other cache (MSE keys through
  centroid gathers, ``CPAIR`` / ``PAIR_TABLE`` for the pair table; fp8 keys on other pages or
  with other values): each token addressed on its own.

See docs/KERNELS.md for when each pays. What they share is here as ``@triton.jit`` helpers
(Triton inlines them): the program's place in the grid, the online-softmax update of a tile,
and the fp8 kernels' value weights and row sums. The query rows, the scores' mask, the 4-bit
codes of a byte tile and the partials' writes are written out in each kernel instead: as
helpers they changed the SASS of some of the builds the plans launch (the inlined functions'
line-info ranges reach ptxas, which then allocates and schedules differently;
docs/KERNELS.md, "The refactor's check").
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._triton_words import _add2


def dequant_path(key_fp8: bool, value_bits: int, head_dim: int, page: int, block_n: int, words: int) -> str:
    """Which kernel reads the tiles: "words" (``words`` > 0 words a slot asked for and possible),
    "pages" (fp8 keys, 4-bit values, pages a power of two that hold whole tiles or whole pages
    a tile) or "tokens" (the rest)."""
    page_rows = min(page, block_n)  # rows of one page in a tile
    paged = (key_fp8 and value_bits == 4 and head_dim >= 32 and page & (page - 1) == 0
             and block_n % page_rows == 0)
    if paged and words > 0 and head_dim >= 128:
        return "words"
    return "pages" if paged else "tokens"


@triton.jit
def _split_program(HEAD_MAJOR: tl.constexpr):
    """This program's (split, KV head, sequence): grid ``(splits, HK, B)``, or ``(HK, splits, B)``
    with ``HEAD_MAJOR``."""
    if HEAD_MAJOR:
        hk = tl.program_id(0)
        sid = tl.program_id(1)
    else:
        sid = tl.program_id(0)
        hk = tl.program_id(1)
    b = tl.program_id(2)
    return sid, hk, b


@triton.jit
def _online_softmax(s, m_i):
    """One tile of the online softmax in base 2 on the masked scores ``s`` [M_PAD, BLOCK_N]:
    (the new running max, the factor for what was summed before, p)."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_use)
    p = tl.exp2(s - m_use[:, None])
    return m_new, alpha, p


@triton.jit
def _fp8_weights(p, alpha, vs, vz, pmask, l_i, z_i, FUSE_SUMS: tl.constexpr):
    """The fp8 kernels' value weights ``P * scale`` (fp16) and running sums of p and p * zero.
    Rows past the end of the sequence read allocated but unwritten slots: their scale / zero
    may be anything, so they are zeroed (their p is 0 already)."""
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
    return ps, l_i, z_i
