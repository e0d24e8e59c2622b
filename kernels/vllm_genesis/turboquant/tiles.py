"""What a caller may ask of stage 1 (``TileConfig``), the kernels' names, and the default tiles.

``TileConfig`` is the request: a tile shape and the options of every stage-1 kernel, the
kernel named by ``Stage1`` (its values are the one-letter names the benchmarks' variant
expressions and the docs use). ``stage1.config_for`` keeps only the fields the chosen
kernel reads. ``default_tiles`` is the launcher's own request for a shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Stage1(str, Enum):
    """The stage-1 kernels, by what they do (value: the short name in ``TileConfig.kernel``)."""

    DEQUANT_SPLIT = "n"  # ``_dequant_split``: tiles dequantised, query rows on the MMA's M side; every preset
    PER_WARP_SOFTMAX = "w"  # ``_per_warp_softmax``: one softmax state per warp, tokens split across warps
    FP8_SCORES = "q"  # ``_fp8_scores``: fp8 tensor-core scores of the key bytes as they lie (Hopper)
    GLUON_MMA_DECODE = "g"  # ``_gluon_mma_decode``: Gluon decode on mma.sync, D = 256 (opt-in)
    WGMMA_DECODE = "h"  # ``_wgmma_decode`` (+ ``_wgmma_decode_producer``): Hopper warp-group decode / short verify
    WGMMA_VERIFY = "v"  # ``_wgmma_verify``: Hopper warp-group verify, query rows on M

    __str__ = str.__str__
    __format__ = str.__format__
    __hash__ = str.__hash__  # equal to its letter, so hashed as it

    def __repr__(self) -> str:
        return f"Stage1.{self.name}"


@dataclass(frozen=True)
class TileConfig:
    block_n: int
    num_warps: int
    num_stages: int
    # the stage-1 kernel asked for (a ``Stage1`` or its letter): "n" DEQUANT_SPLIT; "w"
    # PER_WARP_SOFTMAX (fp8 keys + 4-bit values, int32 words, D >= 128; ``words`` 2/4 = PTX
    # conversions, else shifts); "q" FP8_SCORES, tokens (or with ``rows_m`` query rows) on M
    # (fp8 e4m3 keys + 4-bit values, int32 words, D >= 64); "g" GLUON_MMA_DECODE (opt-in; one
    # query token, fp8 e4m3 keys + 4-bit values, D = 256, NVIDIA GPUs with e4m3; 32- or
    # 64-token tiles; on the H200 with 32-token tiles, maxnreg=168 and 3 x SMs / (sequences x
    # KV heads) splits 6-17% faster than the default from 48K tokens on, docs/KERNELS.md); "h"
    # WGMMA_DECODE (one query token, fp8 e4m3 keys + 4-bit values, D = 128 or 256, groups up
    # to 8, pages of 16+ tokens; 2 key stages by default), which the launcher runs by default
    # for decode where it applies and for verify with at most 16 rows, and single requests of
    # up to 32 at D = 256 (``plan.stage1_kernel``); "v" WGMMA_VERIFY (query rows on M, up to
    # 64; D = 128 or 256; fp8 e4m3 keys + 4-bit values; pages of 16+ tokens; 64- or 32-token
    # tiles), the default verify on Hopper for the other batches of 17-64 rows ("q" where it
    # cannot run); all fall back to "n" elsewhere
    kernel: str = Stage1.DEQUANT_SPLIT
    # hand-pipelined loads (fp8 keys + 4-bit values): False/0 off, True/1 one tile ahead,
    # 2 two tiles ahead (word path only; the byte path treats it as 1; kernel "q": only the
    # codes and scale/zero words one tile ahead, the keys on Triton's pipeliner; kernel "h":
    # an L2 prefetch of the code and scale/zero words that many tiles ahead, which the
    # launcher's plan turns on for grids of at most two programs per SM and splits of more
    # than four tiles)
    prefetch: bool | int = False
    maxnreg: int | None = None  # register cap per thread (more programs per SM)
    # fp8 + 4-bit, D >= 128: read slots as int32 words, split in registers by shifts (1, 3) or
    # PTX cvt / lop3 (2, 4); 1, 2: one product per byte / nibble position; 3, 4: re-interleaved
    words: int = 0
    # byte path: read each token's value scale and zero as one int32 word where the slot
    # allows it (lets Triton's pipeliner prefetch them with the tile)
    sz_word: bool = True
    # launch the KV heads of one split next to each other (they read the same pages)
    head_major: bool = False
    # fp8 + 4-bit: sum(p) and sum(p * zero) per row in one cross-warp reduction
    fused_sums: bool = True
    # kernel "w": programs per (split, head, sequence), each accumulating 1/vsplit of the
    # value columns (keys scored by each); lets D = 256 keep per-warp states in registers
    vsplit: int = 1
    # kernel "q": programs per (split, head, sequence), each taking a share of the query
    # tokens (verify: fewer padded rows and accumulators per program; keys read again from L2)
    rsplit: int = 1
    # kernel "q": move the softmax reference only when a row's max grows by more than this
    # (log2 units; a uniform branch), or rescale on every tile (< 0); None: every tile for
    # 16 rows (small accumulators), 8 otherwise
    lazy: float | None = None
    # kernel "q": query rows on the MMA's M side (S = Q K^T, softmax along rows, O = P V;
    # keys as one [block_n, D] tile the MMA reads from shared memory); else tokens on M
    rows_m: bool = False
    # kernel "v": 0 every warp-group product waited for at once; 1 the scores' products run
    # while the next tile's copies are requested and this tile's V^T is built; 2 only while
    # V^T is built (issued after the requests); 3 as 1, and P V runs on into the next tile's
    # start; 4 as 2, and P V runs on while the next tile's copies are requested
    pipe: int = 0
    # MSE keys with centroid pairs, programs of 2+ warps: the pair table loaded once per
    # program and gathered through shared memory instead of by global loads
    pair_table: bool = False
    # kernel "h", decode at D = 256: the key copies in a warp of their own that feeds the
    # products' warp group through shared-memory barriers (``_kernel_hw``; 256 threads a
    # program at 128 registers, so at most two programs an SM); elsewhere, and with the
    # diagnostics timeline, kernel "h" runs as it is
    producer: bool = False
    # kernel "v", 64-token tiles: V^T built and multiplied in two halves of 32 tokens, the
    # second half in the tile's key stage once its scores are done (one more barrier a tile,
    # 16 KB less shared memory at D = 256); with ``pipe`` 3 or 4 P V is waited for before the
    # next tile's barrier (that tile refills the stage)
    v_halves: bool = False
    # kernel "v" with 2 stages: each stage of the copies' ring a buffer of its own and the loop
    # unrolled by two, so that Triton puts no barrier between one stage's refill and the other
    # stage's reads (two barriers a tile less)
    split_ring: bool = False
    # kernels "h" and "hw": the softmax's maximum across the warps in one exchange of its own
    # (one barrier) instead of Triton's reduction (two, and with Triton 3.6 a third before it
    # in kernel "hw"); kernel "hw" then hands the key stage back once the probabilities are
    # stored. sm_90 with Triton 3.6: 3 instead of 5 barriers a tile in kernel "hw", 5 instead
    # of 6 in kernel "h"; not yet timed on a GPU
    warp_max: bool = False

    def __post_init__(self):
        if self.pipe not in range(5):
            raise ValueError(f"kernel v: pipe {self.pipe} is not one of 0-4 (TileConfig.pipe)")
        if self.v_halves and self.block_n <= 32:
            raise ValueError(f"kernel v: V^T halves need 64-token tiles, not {self.block_n} (TileConfig.v_halves)")
        if self.split_ring and self.num_stages != 2:
            raise ValueError(f"kernel v: a split ring has 2 stages, not {self.num_stages} (TileConfig.split_ring)")


def default_tiles(
    head_dim: int,
    m_pad: int,
    key_fp8: bool,
    programs: int = 1,
    max_context: int = 0,
    words_ok: bool = True,
    fp8_mma: bool = False,
    mse_bits: int = 4,
) -> TileConfig:
    """Tile shapes per row count (rows = query tokens x group size) and grid size.

    Picked from H200 sweeps (docs/KERNELS.md). MSE-key presets (``mse_bits``: 3 or 4): the
    byte path with one stage (no software pipelining); at most 16 rows: one warp at D <= 128
    (16-token tiles for 3-bit keys, with the next tile's bytes prefetched, 32 for 4-bit), at
    D = 256 4 warps for few pairs (128-token tiles for 3-bit keys, 64 for 4-bit, prefetched)
    and 32-token tiles of 2 warps for many; more rows: 16-token tiles for few pairs (with
    4-bit keys, the centroid-pair table gathered from shared memory), 64 for many. fp8
    keys: few (sequence, KV head) pairs -> 64-token tiles, hand-pipelined, slots read as
    int32 words (also for 128K contexts); many pairs
    at D = 128 and at most 16 rows (decode; verify with K+1 x group <= 16) -> the
    per-warp-state kernel ("w"), 2 warps x 16 tokens, on
    Triton's pipeliner with 5 stages (with 3, Triton 3.6 waits for every outstanding copy
    at the top of each step; with 5 two tiles stay in flight), with a quarter of the usual
    split count (``default_num_splits``); other many-pair shapes -> 64-token tiles on the
    pipeliner with a 168-register cap; verify -> with ``fp8_mma`` (Hopper) and word-aligned
    slots, D = 256 and at most 64 rows, or D = 128 and 17 to 64, kernel "v" (warp-group
    products, its own split count; kernel "q" where it cannot run); else the fp8 tensor-core kernel ("q") with the query rows on M, 64-token tiles, keys on
    a 5-stage pipeline, codes fetched a tile ahead, the softmax reference moved on every
    tile, at most 64 rows per program (query tokens split over programs beyond that); else
    32-token tiles on a 5-stage pipeline. ``words_ok``: the cache strides and slot allow int32 word loads (fp8
    keys + 4-bit values); head sizes below 128 and other presets ignore ``words``.
    """
    if not key_fp8:
        # MSE keys (byte path, centroid gathers): one stage, plain loads; with Triton's
        # pipeliner (2+ stages) every step waited for the copies it had just issued (H200:
        # 2.4-4x slower)
        if m_pad > 16:
            if programs < 32:
                # 4-bit keys: the pair table gathered from shared memory (4-6% less time on
                # H200 verify sweeps; 3-bit keys and 64-token tiles: mixed, docs/KERNELS.md)
                return TileConfig(16, 4, 1, pair_table=mse_bits == 4)
            return TileConfig(64, 4, 1)
        # PREFETCH: the next tile's bytes requested a step ahead (4-bit values only)
        if head_dim <= 128:
            return TileConfig(16, 1, 1, Stage1.DEQUANT_SPLIT, True) if mse_bits == 3 else TileConfig(32, 1, 1)
        if programs < 32:
            return TileConfig(128, 4, 1) if mse_bits == 3 else TileConfig(64, 4, 1, Stage1.DEQUANT_SPLIT, True)
        return TileConfig(32, 2, 1)
    if m_pad > 16:
        if fp8_mma and words_ok and head_dim in (128, 256) and m_pad <= 64:
            # kernel "v" (Hopper warp-group products; the launcher runs kernel "q" where it
            # cannot); from 17 rows (kernel "h" takes up to 16)
            return verify_v_tiles(head_dim, m_pad)
        if fp8_mma and words_ok and head_dim >= 64:
            return verify_q_tiles(m_pad)
        return TileConfig(32, 4, 5)
    if programs >= 32:
        if head_dim == 128 and words_ok:
            return TileConfig(32, 2, 5, Stage1.PER_WARP_SOFTMAX, words=2)
        return TileConfig(64, 4, 3, maxnreg=168)
    return TileConfig(64, 4, 1, Stage1.DEQUANT_SPLIT, True, words=4)


def verify_v_tiles(head_dim: int, m_pad: int = 64) -> TileConfig:
    """Kernel "v" for verify: 64-token tiles, 2 stages, its products overlapped with the
    V^T build: ``pipe`` 4 at D = 128 and wherever the query's two parts share one operand (at
    most 32 rows, ``m_pad`` <= 32); at D = 256 with 33-64 rows ``pipe`` 3 with V^T in two halves
    (``v_halves``: 98,816 instead of 115,200 bytes of shared memory, so the build gets the
    larger L1 of ``V_CARVEOUT``). H200 sweeps, docs/KERNELS.md "Products overlapped" and "V^T
    in two halves": at D = 128 4 took 1-2% less time than 1; with the parts stacked 4 took
    4.9-6% less than 1 on five D = 256 batches; with 36-64 rows the halves with ``pipe`` 3 took
    11-15% less than the whole V^T with 1 on ten batches."""
    if head_dim == 128 or m_pad <= 32:
        return TileConfig(64, 4, 2, Stage1.WGMMA_VERIFY, pipe=4)
    return TileConfig(64, 4, 2, Stage1.WGMMA_VERIFY, pipe=3, v_halves=True)


def verify_q_tiles(m_pad: int) -> TileConfig:
    """Kernel "q" for verify: query rows on M, 64-token tiles, keys on a 5-stage pipeline,
    codes a tile ahead; more than 64 rows: the query tokens over several programs of at most
    64 rows (128 rows x D = 256 would need 256 accumulator registers per thread)."""
    return TileConfig(64, 4, 5, Stage1.FP8_SCORES, 2, lazy=-1.0, rows_m=True, rsplit=max(1, m_pad // 64))
