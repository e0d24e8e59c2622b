"""Shared launcher of the two-stage TurboQuant attention (decode and verify)."""

from __future__ import annotations

import math
import os
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import lru_cache

import torch

from ._kernel_q import _tq_split_kernel_q
from ._kernels import _tq_combine_kernel, _tq_split_kernel, _tq_split_kernel_w
from ._carveout import TRITON_PREFER_SHARED_ABOVE, prefer_carveout
from .layout import TQLayout, next_pow2, pick_num_splits, pow2_alignment

LOG2E = 1.4426950408889634


@lru_cache(maxsize=None)
def num_sms(device_index: int) -> int:
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(device_index).multi_processor_count
    return 132


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@lru_cache(maxsize=None)
def _fp8_e4b15(device_index: int) -> int:
    """1 where the GPU lacks e4m3 conversions (SM < 8.9), as the 0.24.0 store kernel."""
    if torch.cuda.is_available() and torch.version.hip is None:
        return 1 if torch.cuda.get_device_capability(device_index) < (8, 9) else 0
    return 0


def as_layout(layout: TQLayout | str | None, head_dim: int) -> TQLayout:
    if layout is None:
        layout = "turboquant_k8v4"
    if isinstance(layout, str):
        layout = TQLayout.from_preset(layout, head_dim)
    if layout.head_dim != head_dim:
        raise ValueError(f"layout head_dim {layout.head_dim} != query head_dim {head_dim}")
    layout.check()
    return layout


@dataclass(frozen=True)
class TileConfig:
    block_n: int
    num_warps: int
    num_stages: int
    # "n": rows on the MMA's M side; "w": one softmax state per warp, tokens split across
    # warps (fp8 keys + 4-bit values, int32 words, D >= 128; ``words`` 2/4 = PTX conversions,
    # else shifts); "q": fp8 tensor-core scores, tokens (or with ``rows_m`` query rows) on M
    # (fp8 e4m3 keys + 4-bit values, int32 words, D >= 64); "g": the Gluon decode (opt-in;
    # one query token, fp8 e4m3 keys + 4-bit values, D = 256, NVIDIA GPUs with e4m3; 32- or
    # 64-token tiles; on the H200 with 32-token tiles, maxnreg=168 and 3 x SMs / (sequences x
    # KV heads) splits 6-17% faster than the default from 48K tokens on, docs/KERNELS.md); "h":
    # the Hopper decode on warp-group products (one query token, fp8 e4m3 keys + 4-bit values,
    # D = 128 or 256, groups up to 8, pages of 16+ tokens; 2 key stages by default), which the
    # launcher runs by default for decode where it applies and for verify with at most 16
    # rows, and single requests of up to 32 at D = 256 (``stage1_kernel``); "v": the Hopper
    # verify on warp-group products (query rows on M, up to 64; D = 128 or 256; fp8 e4m3 keys
    # + 4-bit values; pages of 16+ tokens; 64- or 32-token tiles), the default verify on
    # Hopper for the other batches of 17-64 rows ("q" where it cannot run); all fall back to
    # "n" elsewhere
    kernel: str = "n"
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
            return TileConfig(16, 1, 1, "n", True) if mse_bits == 3 else TileConfig(32, 1, 1)
        if programs < 32:
            return TileConfig(128, 4, 1) if mse_bits == 3 else TileConfig(64, 4, 1, "n", True)
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
            return TileConfig(32, 2, 5, "w", words=2)
        return TileConfig(64, 4, 3, maxnreg=168)
    return TileConfig(64, 4, 1, "n", True, words=4)


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
        return TileConfig(64, 4, 2, "v", pipe=4)
    return TileConfig(64, 4, 2, "v", pipe=3, v_halves=True)


def verify_q_tiles(m_pad: int) -> TileConfig:
    """Kernel "q" for verify: query rows on M, 64-token tiles, keys on a 5-stage pipeline,
    codes a tile ahead; more than 64 rows: the query tokens over several programs of at most
    64 rows (128 rows x D = 256 would need 256 accumulator registers per thread)."""
    return TileConfig(64, 4, 5, "q", 2, lazy=-1.0, rows_m=True, rsplit=max(1, m_pad // 64))


@lru_cache(maxsize=None)
def fp8_mma_default(device_index: int) -> bool:
    """Whether the launchers pick the fp8 tensor-core kernels ("q", for verify "v") by
    default: Hopper GPUs (where they were measured) and the CPU interpreter (so that the
    default path is tested; "v" is run as "q" there)."""
    if _interpreting():
        return True
    if torch.cuda.is_available() and torch.version.hip is None:
        return torch.cuda.get_device_capability(device_index)[0] == 9
    return False


def _q_kernel_ok(layout: TQLayout, head_dim: int, cache: "CacheFacts") -> bool:
    """kernel "q" (fp8 tensor-core scores): fp8 e4m3 keys + 4-bit values read as int32
    words, D >= 64, and a GPU with e4m3 (or the interpreter)."""
    return cache.words_ok and head_dim >= 64 and layout.key_fp8 and cache.e4m3


def _per_warp_ok(tiles: TileConfig, words_ok: bool, head_dim: int) -> bool:
    return tiles.kernel == "w" and words_ok and head_dim >= 128 and tiles.block_n // tiles.num_warps >= 16


def default_num_splits(
    batch: int, num_kv_heads: int, max_context: int, n_sms: int, tiles: TileConfig, words_ok: bool, head_dim: int
) -> int:
    """``pick_num_splits``; a quarter of it for 2-warp per-warp-state programs (H200 sweeps at
    B=8 x 32K and B=32 x 8K, D=128: half the count 8-10% faster than the full one, a quarter
    another 5% in three runs)."""
    if tiles.kernel == "v":
        # two programs fit an SM: one wave of them, rounded down (a few programs more would
        # run as a second wave; H200 sweeps, docs/KERNELS.md), splits of at least 256 tokens
        cap = pick_num_splits(batch, num_kv_heads, max_context, n_sms, min_tokens_per_split=256)
        return max(1, min(2 * n_sms // max(1, batch * num_kv_heads), cap))
    s = pick_num_splits(batch, num_kv_heads, max_context, n_sms)
    if _per_warp_ok(tiles, words_ok, head_dim) and tiles.num_warps == 2 and tiles.vsplit == 1:
        s = max(1, s // 4)
    return s


def launch_plan(
    batch: int, num_kv_heads: int, head_dim: int, group: int, query_len: int, key_fp8: bool, max_context: int,
    words_ok: bool, n_sms: int, *, tiles: TileConfig | None = None, num_splits: int | None = None,
    fp8_mma: bool = False, mse_bits: int = 4,
) -> tuple[TileConfig, int]:
    """The tiles and split count ``run_attention`` launches with (``None``: its defaults)."""
    m_pad = max(16, next_pow2(query_len * group))
    if tiles is None:
        tiles = default_tiles(head_dim, m_pad, key_fp8, batch * num_kv_heads, max_context, words_ok, fp8_mma,
                              mse_bits)
    if num_splits is None:
        num_splits = default_num_splits(batch, num_kv_heads, max_context, n_sms, tiles, words_ok, head_dim)
    return tiles, int(num_splits)


def combine_chunk(num_splits: int) -> int:
    """Splits the combine stage merges per step (a compile-time constant of its kernel)."""
    return min(128, max(2, next_pow2(num_splits)))


def combine_shape(num_splits: int, head_dim: int, verify: bool) -> tuple[int, int, int]:
    """The combine's launch: (splits merged a step, output columns a program, warps).

    A program holds at most 4096 partial values of a step. Verify combines run one warp a
    program: its reductions over the splits and over the raw tail's columns then stay inside
    the warp (H200, in a graph with the read flush: 1-10% less time in all than with four
    warps on eight verify rows; the decode rows level either way, so they keep four;
    docs/KERNELS.md "The combine in one warp")."""
    s_chunk = combine_chunk(num_splits)
    return s_chunk, max(16, min(head_dim, 4096 // s_chunk)), 1 if verify else 4


def cache_words_ok(layout: TQLayout, kv_cache: torch.Tensor) -> bool:
    """fp8 keys + 4-bit values whose slots can be read as aligned int32 words."""
    align = pow2_alignment(kv_cache.stride(0), kv_cache.stride(1), kv_cache.stride(2), kv_cache.storage_offset())
    return (
        layout.key_fp8
        and layout.value_bits == 4
        and align >= 4
        and layout.key_packed_size % 4 == 0
        and (layout.key_packed_size + layout.value_data_bytes) % 4 == 0
    )


def cache_plan(
    kv_cache: torch.Tensor, batch: int, head_dim: int, group: int, query_len: int, layout: TQLayout,
    max_context: int, *, tiles: TileConfig | None = None, num_splits: int | None = None,
) -> tuple[TileConfig, int]:
    """``launch_plan`` for a call on ``kv_cache``, with its KV heads, its word alignment and its
    device's SM count and fp8 tensor-core default filled in (the launcher, ``verify_num_splits``
    and ``warmup_verify`` all plan with it)."""
    dev_index = kv_cache.device.index or 0
    return launch_plan(
        batch, kv_cache.shape[2], head_dim, group, query_len, layout.key_fp8, max_context,
        cache_words_ok(layout, kv_cache), num_sms(dev_index), tiles=tiles, num_splits=num_splits,
        fp8_mma=fp8_mma_default(dev_index), mse_bits=layout.mse_bits,
    )


@dataclass(frozen=True)
class CacheFacts:
    """What the choice of a stage-1 kernel reads of the cache and its device."""

    page: int  # tokens a page
    words_ok: bool  # fp8 keys + 4-bit values read as aligned int32 words (``cache_words_ok``)
    ptx_ok: bool  # inline PTX: an NVIDIA GPU with e4m3 conversions, not the interpreter
    hopper: bool  # on a GPU where the warp-group kernels run (``fp8_mma_default``)
    e4m3: bool  # the GPU converts fp8 e4m3 (or the interpreter)
    small: bool  # the cache's int32 word offsets fit in 31 bits

    @classmethod
    def of(cls, layout: TQLayout, kv_cache: torch.Tensor) -> "CacheFacts":
        dev_index = kv_cache.device.index or 0
        e4b15 = bool(_fp8_e4b15(dev_index))
        return cls(
            page=kv_cache.shape[1], words_ok=cache_words_ok(layout, kv_cache),
            ptx_ok=not (_interpreting() or e4b15 or torch.version.hip is not None),
            hopper=kv_cache.is_cuda and fp8_mma_default(dev_index), e4m3=not e4b15,
            small=kv_cache.numel() < (1 << 33),
        )


def _g_kernel_ok(layout: TQLayout, head_dim, group, query_len, raw_tail, cache: CacheFacts) -> bool:
    """kernel "g" (Gluon decode): one query token, fp8 e4m3 keys + 4-bit values read as int32
    words, D = 256, at most 16 heads a group, an NVIDIA GPU with e4m3 conversions, and a cache
    of power-of-two pages whose int32 word offsets fit in 31 bits."""
    return (
        cache.words_ok and cache.ptx_ok and layout.key_fp8 and head_dim == 256 and group <= 16 and query_len == 1
        and not raw_tail and cache.small and cache.page & (cache.page - 1) == 0
    )


def _launch_g(qr, kv_cache, block_table, seq_lens, mid_o, mid_l, num_splits, qk_scale, batch, group, head_dim, page,
              maxnreg=None, block_n=None):
    from ._kernel_g import BLOCK_N, NUM_WARPS, _tq_decode_kernel_g, g_layouts

    block_n = block_n if block_n in (32, 64) else BLOCK_N
    hk = kv_cache.shape[2]
    _tq_decode_kernel_g[(num_splits, hk, batch)](
        qr, kv_cache, block_table, seq_lens, mid_o, mid_l,
        qr.stride(0), qr.stride(1), kv_cache.stride(0), block_table.stride(0), num_splits, qk_scale,
        SKP=kv_cache.stride(1), SKH=kv_cache.stride(2),
        HK=hk, G=group, D=head_dim, PAGE=page, BLOCK_N=block_n, **g_layouts(head_dim, page, group, block_n),
        num_warps=NUM_WARPS, **({"maxnreg": maxnreg} if maxnreg else {}),
    )


# kernels "h" and "v": the combine as a programmatic dependent launch (its launch overlaps
# stage 1's end) inside CUDA graphs; an eager launch of that kind costs ~60 us more host time
# (H200, docs/KERNELS.md), so eager calls launch it plainly (it waits for nothing then)
COMBINE_PDL = True
_PDL_FORCED: bool | None = None


@contextmanager
def programmatic_combine(enabled: bool):
    """Launch the combine after kernels "h" and "v" as a programmatic dependent launch (True)
    or plainly (False) inside this block, whether or not a CUDA graph is being captured (the
    warm-up builds both variants this way)."""
    global _PDL_FORCED
    saved, _PDL_FORCED = _PDL_FORCED, enabled
    try:
        yield
    finally:
        _PDL_FORCED = saved


def _pdl_launch() -> bool:
    if _PDL_FORCED is not None:
        return _PDL_FORCED
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _h_kernel_ok(layout: TQLayout, head_dim, group, query_len, cache: CacheFacts) -> bool:
    """kernel "h" (warp-group products): fp8 e4m3 keys + 4-bit values read as int32 words,
    D = 128 or 256, groups of at most 8 heads, at most 8 query tokens a sequence, pages of a
    power of two of at least 16 tokens, and a Hopper GPU."""
    return (
        cache.words_ok and cache.ptx_ok and layout.key_fp8 and head_dim in (128, 256) and group <= 8
        and query_len <= 8 and cache.page >= 16 and cache.page & (cache.page - 1) == 0
        and cache.hopper  # (``ptx_ok``: not the interpreter)
    )


def _h_verify_default(tiles: TileConfig, head_dim: int, group: int, query_len: int, batch: int) -> bool:
    """Verify batches kernel "h" runs by default: D = 128 or 256 with all K + 1 x group rows in
    one program, in place of the planned kernel "q", "n" or "w", with the plan's split count
    (H200, D = 128: 25-38% less time than kernel "q", 2-13% less than the per-warp kernel "w"
    at its quarter split count; D = 256, 8-16 rows: 19-46% less than kernel "n", 12-40% less
    than kernel "v"). The plan names kernel "v" from 17 rows (at D = 128 less time than kernel
    "h" on 12 of 15 batches of 17-32 rows), so on Hopper this takes the batches of at most 16
    rows; and at D = 256 single requests of 17-32 rows in place of kernel "v" (3-11% less time
    on eleven requests of 8K-128K; from two requests on kernel "v" took 4-34% less;
    docs/KERNELS.md "Kernel "h" for short verify batches at D = 256")."""
    from ._kernel_h import MAX_ROWS

    if head_dim not in (128, 256) or query_len * group > MAX_ROWS:
        return False
    return tiles.kernel in ("q", "n", "w") or (tiles.kernel == "v" and head_dim == 256 and batch == 1)


H_TILES = TileConfig(64, 4, 2, "h")  # kernel "h" where it runs in place of the plan's kernel
# Kernel "h" grids of at most this many programs per SM whose splits span more than
# H_PREFETCH_MIN_SPAN tokens of the planned context run with the L2 prefetch of the next
# tile's code and scale/zero words (``prefetch`` 1; its 163 registers against 128 leave room
# for two programs, not four). H200, in a graph: 3-4% less time at 1 x 32K decode (8 tiles a
# split), 8-10% at a 24-row verify of 1 x 32K, level at 1 x 16K (4 tiles), 2-3% more at 1 x
# 8K (2 tiles); at 1 x 128K (four programs an SM) 22% more; docs/KERNELS.md "L2 prefetch of
# the code words".
H_PREFETCH_PROGRAMS_PER_SM = 2
H_PREFETCH_MIN_SPAN = 4 * 64
# D = 256 decode grids of at most this many programs per SM run kernel "h" with its key
# producer warp (``TileConfig.producer``) instead of the prefetch: 1-6% less time there, 10-23%
# more where four programs share an SM (docs/KERNELS.md "A producer warp for the key copies")
H_PRODUCER_PROGRAMS_PER_SM = 2


def h_programs_per_split(query_len: int, group: int) -> tuple[int, int]:
    """Kernel "h"'s query tokens a program and programs per (split, KV head, sequence): all
    of a sequence's K + 1 x group rows in one program where they fit its 32."""
    from ._kernel_h import MAX_ROWS

    qpp = max(1, min(query_len, MAX_ROWS // group))
    return qpp, -(-query_len // qpp)


def stage1_kernel(
    tiles: TileConfig, planned: bool, layout: TQLayout, cache: CacheFacts, *, batch: int, head_dim: int,
    group: int, query_len: int, has_qstart: bool, raw_tail: bool,
) -> tuple[str, TileConfig]:
    """The stage-1 kernel a call launches ("g", "h", "v", "q", "w", or "n": the Triton split
    kernel, also where the tiles name a kernel the call cannot run) and the tiles it runs
    with, from the call's tiles (``planned``: the launcher's own plan, not the caller's) and
    shapes and what the cache and its device allow. A function of these alone, so that the
    warm-up keys its variants on the kernel actually launched."""
    M_PAD = max(16, next_pow2(query_len * group))
    h_ok = _h_kernel_ok(layout, head_dim, group, query_len, cache)
    # kernel "v" runs where kernel "h" could (the same head sizes; its limits, G <= 8 and
    # K + 1 <= 8, keep the rows within its 64)
    if tiles.kernel == "v" and not (has_qstart and raw_tail and h_ok):
        tiles = verify_q_tiles(M_PAD)  # where kernel "v" cannot run: kernel "q" (the plan's split count)
    if tiles.kernel == "g" and _g_kernel_ok(layout, head_dim, group, query_len, raw_tail, cache):
        return "g", tiles
    # the default decode on Hopper where kernel "h" covers it, and the verify batches of
    # ``_h_verify_default`` (the plan's split count); other verify batches on request
    h_default = planned and ((query_len == 1 and not has_qstart)
                             or (has_qstart and _h_verify_default(tiles, head_dim, group, query_len, batch)))
    if (h_default or tiles.kernel == "h") and raw_tail == has_qstart and h_ok:
        # in place of the plan's kernel: its own tiles (2 key stages, no register cap)
        return "h", tiles if tiles.kernel == "h" else H_TILES
    if tiles.kernel == "v":
        return "v", tiles
    if tiles.kernel == "q" and _q_kernel_ok(layout, head_dim, cache):
        return "q", tiles
    if _per_warp_ok(tiles, cache.words_ok, head_dim):
        return "w", tiles
    return "n", tiles


def call_plan(
    kv_cache: torch.Tensor, layout: TQLayout, batch: int, head_dim: int, group: int, query_len: int,
    max_context: int, *, has_qstart: bool, raw_tail: bool, tiles: TileConfig | None = None,
    num_splits: int | None = None, facts: CacheFacts | None = None,
) -> tuple[str, TileConfig, int]:
    """What a call on ``kv_cache`` launches: its stage-1 kernel (``stage1_kernel``), the tiles
    it runs with and the split count (``cache_plan``; ``tiles`` / ``num_splits``: the
    caller's, ``None`` for the launcher's own). The launcher, ``warmup_verify`` and the
    benchmarks all ask this."""
    facts = facts or CacheFacts.of(layout, kv_cache)
    planned = tiles is None
    tiles, splits = cache_plan(kv_cache, batch, head_dim, group, query_len, layout, max_context, tiles=tiles,
                               num_splits=num_splits)
    kernel, tiles = stage1_kernel(tiles, planned, layout, facts, batch=batch, head_dim=head_dim, group=group,
                                  query_len=query_len, has_qstart=has_qstart, raw_tail=raw_tail)
    if planned and kernel == "h":
        programs = splits * h_programs_per_split(query_len, group)[1] * kv_cache.shape[2] * batch
        sms = num_sms(kv_cache.device.index or 0)
        if h_producer_ok(head_dim, query_len, has_qstart) and programs <= H_PRODUCER_PROGRAMS_PER_SM * sms:
            tiles = replace(tiles, producer=True)
        elif programs <= H_PREFETCH_PROGRAMS_PER_SM * sms and -(-max_context // splits) > H_PREFETCH_MIN_SPAN:
            tiles = replace(tiles, prefetch=1)
    return kernel, tiles, splits


def h_producer_ok(head_dim: int, query_len: int, has_qstart: bool) -> bool:
    """Whether kernel "h" can run with its key producer warp (``_kernel_hw``): decode at D = 256."""
    return head_dim == 256 and query_len == 1 and not has_qstart


def _launch_h(qr, kv_cache, block_table, seq_lens, qstart, mid_o, mid_l, num_splits, qk_scale, batch, group,
              head_dim, page, query_len, has_qstart, stages=2, maxnreg=None, pdl=False, timeline=None,
              early=False, prefetch=0, producer=False, warp_max=False) -> int:
    """Stage 1 on kernel "h"; returns the combine's column order for its partials.
    ``timeline``: int64 [programs, 4], the kernel's diagnostics timeline (``tq_timeline.py``);
    ``early``: launched as a programmatic dependent of the kernel before it, reading the
    sequence lengths and the block table before that kernel's end (in CUDA graphs, where the
    caller allows it: ``tq_decode_attention``'s ``overlap_prior``)."""
    from ._kernel_h import NUM_WARPS, _tq_decode_kernel_h, partial_order

    hk = kv_cache.shape[2]
    if producer and timeline is None and h_producer_ok(head_dim, query_len, has_qstart):
        from ._kernel_hw import PRODUCER_MAXNREG, _tq_decode_kernel_hw

        _tq_decode_kernel_hw[(num_splits, hk, batch)](
            qr, kv_cache, block_table, seq_lens, qstart, mid_o, mid_l,
            qr.stride(0), qr.stride(1), kv_cache.stride(0) // 4, block_table.stride(0), num_splits, qk_scale,
            SKP=kv_cache.stride(1), SKH=kv_cache.stride(2), HK=hk, G=group, D=head_dim, PAGE=page,
            STAGES=max(2, stages), R=8, PDL=pdl, num_warps=NUM_WARPS, maxnreg=maxnreg or PRODUCER_MAXNREG,
            **({"EARLY": True, "launch_pdl": True} if early else {}), **({"XMAX": True} if warp_max else {}),
        )
        return partial_order(head_dim)
    qpp, rsplit = h_programs_per_split(query_len, group)
    _tq_decode_kernel_h[(num_splits * rsplit, hk, batch)](
        qr, kv_cache, block_table, seq_lens, qstart, mid_o, mid_l,
        qr.stride(0), qr.stride(1), kv_cache.stride(0) // 4, block_table.stride(0), num_splits, qk_scale,
        SKP=kv_cache.stride(1), SKH=kv_cache.stride(2), HK=hk, G=group, D=head_dim, PAGE=page,
        STAGES=max(2, stages), R=max(8, next_pow2(qpp * group)), QL=query_len, QPP=qpp, RSPLIT=rsplit,
        HAS_QSTART=has_qstart, PDL=pdl, num_warps=NUM_WARPS, **({"maxnreg": maxnreg} if maxnreg else {}),
        **({"TL": timeline} if timeline is not None else {}), **({"EARLY": True, "launch_pdl": True} if early else {}),
        **({"PF": int(prefetch)} if prefetch else {}), **({"XMAX": True} if warp_max else {}),
    )
    return partial_order(head_dim)


# kernel "v" builds of 48 KB to V_CARVEOUT_MAX_SHARED bytes of shared memory (Triton's loader
# gives them its largest carve-out, ~28 KB of L1) ask the driver for V_CARVEOUT percent of the
# shared-memory maximum instead (``_carveout``): more L1 for their 4-byte copies, 11-14% less
# time on the H200's verify batches of 24-32 rows (docs/KERNELS.md "The L1 for kernel "v"");
# the 36-64-row builds at D = 256 (115 KB) keep Triton's, which lets two share an SM. None:
# Triton's setting everywhere
V_CARVEOUT: int | None = 85
V_CARVEOUT_MAX_SHARED = 100_000


def _launch_v(qr, kv_cache, block_table, seq_lens, qstart, mid_o, mid_l, num_splits, qk_scale, batch, group,
              head_dim, page, query_len, block_n=64, stages=2, maxnreg=None, pdl=False, pipe=0, v_halves=False,
              split_ring=False) -> int:
    """Stage 1 on kernel "v"; returns the combine's column order for its partials."""
    from ._kernel_v import NUM_WARPS, PARTIAL_ORDER_V, _tq_verify_kernel_v

    hk = kv_cache.shape[2]
    compiled = _tq_verify_kernel_v[(num_splits, hk, batch)](
        qr, kv_cache, block_table, seq_lens, qstart, mid_o, mid_l,
        qr.stride(0), qr.stride(1), kv_cache.stride(0) // 4, block_table.stride(0), num_splits, qk_scale,
        SKP=kv_cache.stride(1), SKH=kv_cache.stride(2), HK=hk, G=group, D=head_dim, PAGE=page,
        STAGES=max(2, stages), QL=query_len, BN=32 if block_n <= 32 else 64, PDL=pdl, PIPE=pipe,
        VHALF=v_halves, SPLIT_RING=split_ring, num_warps=NUM_WARPS,
        **({"maxnreg": maxnreg} if maxnreg else {}),
    )
    shared = getattr(getattr(compiled, "metadata", None), "shared", 0)
    if V_CARVEOUT and TRITON_PREFER_SHARED_ABOVE < shared <= V_CARVEOUT_MAX_SHARED:
        prefer_carveout(compiled, V_CARVEOUT)
    return PARTIAL_ORDER_V


_PAIRS = None  # centroids tensor -> (its version, {(bits, bf16): pair table})


def centroid_pairs(centroids: torch.Tensor, bits: int, bf16: bool) -> torch.Tensor:
    """The MSE key paths' gather table: int32 ``[4 ** bits]`` whose entry ``u`` packs the
    centroids of indices ``u % 2**bits`` (low half) and ``u >> bits`` (high half) as bf16 or
    fp16 bit patterns, so that one gather serves two indices. Kept per centroids tensor (while
    it lives and is not written), except when built inside a CUDA graph's capture."""
    global _PAIRS
    if _PAIRS is None:
        from torch.utils.weak import WeakIdKeyDictionary

        _PAIRS = WeakIdKeyDictionary()
    key = (bits, bf16)
    version, known = _PAIRS.get(centroids, (None, {}))
    if version != centroids._version:
        known = {}
    if key in known:
        return known[key]
    n = 1 << bits
    half = centroids.reshape(-1)[:n].to(torch.bfloat16 if bf16 else torch.float16)
    bits16 = half.view(torch.int16).to(torch.int32) & 0xFFFF
    u = torch.arange(n * n, device=centroids.device)
    pairs = (bits16[u % n] | (bits16[u // n] << 16)).contiguous()
    if not (centroids.is_cuda and torch.cuda.is_current_stream_capturing()):
        _PAIRS[centroids] = (centroids._version, {**known, key: pairs})
    return pairs


def _pair_gathers(layout: TQLayout, head_dim: int) -> bool:
    """MSE keys read as index bytes split in nibbles (4-bit) or 24-bit groups (3-bit)."""
    if layout.key_fp8:
        return False
    return (layout.mse_bits == 4 and head_dim >= 32) or (layout.mse_bits == 3 and head_dim >= 128)


def split_workspace(
    batch: int, num_kv_heads: int, num_splits: int, rows: int, head_dim: int, device
) -> tuple[torch.Tensor, torch.Tensor]:
    mid_o = torch.empty(batch, num_kv_heads, num_splits, rows, head_dim, dtype=torch.float32, device=device)
    mid_l = torch.empty(batch, num_kv_heads, num_splits, rows, dtype=torch.float32, device=device)
    return mid_o, mid_l


def run_attention(
    query: torch.Tensor,  # [T, Hq, D]
    kv_cache: torch.Tensor,  # [num_blocks, page, Hk, slot] uint8
    block_table: torch.Tensor,  # [B, max_blocks] int32
    seq_lens: torch.Tensor,  # [B] int32
    *,
    batch: int,
    scale: float,
    layout: TQLayout,
    max_query_len: int,
    query_start_loc: torch.Tensor | None,
    key: torch.Tensor | None,
    value: torch.Tensor | None,
    centroids: torch.Tensor | None,
    PiT: torch.Tensor | None,
    num_splits: int | None,
    max_context: int | None,
    out: torch.Tensor | None,
    workspace: tuple[torch.Tensor, torch.Tensor] | None,
    tiles: TileConfig | None,
    dot_bf16: bool | None,
    overlap_prior: bool = False,
) -> torch.Tensor:
    T, Hq, D = query.shape
    num_blocks, page, Hk, slot = kv_cache.shape
    if kv_cache.dtype != torch.uint8:
        raise TypeError("kv_cache must be the uint8 TurboQuant cache")
    if Hq % Hk:
        raise ValueError(f"{Hq} query heads are not a multiple of {Hk} KV heads")
    if slot < layout.slot_size:
        raise ValueError(f"cache slot {slot} B is smaller than the layout's {layout.slot_size} B")
    if kv_cache.stride(3) != 1 or query.stride(2) != 1:
        raise ValueError("kv_cache and query need a contiguous last dimension")
    G = Hq // Hk
    QL = int(max_query_len)
    ROWS = QL * G
    M_PAD = max(16, next_pow2(ROWS))
    raw_tail = key is not None
    dev_index = query.device.index or 0

    if layout.key_fp8:
        qr = query
    else:
        if centroids is None or PiT is None:
            raise ValueError("MSE key presets need centroids and PiT")
        qr = (query.float() @ PiT.float()).contiguous()
        given_centroids = centroids
        centroids = centroids.float().contiguous()
    if centroids is None:
        centroids = query  # never read on the fp8 path

    if max_context is None:
        max_context = block_table.shape[1] * page
    facts = CacheFacts.of(layout, kv_cache)
    words_ok = facts.words_ok
    has_qstart = query_start_loc is not None
    kernel, tiles, S = call_plan(kv_cache, layout, batch, D, G, QL, max_context, has_qstart=has_qstart,
                                 raw_tail=raw_tail, tiles=tiles, num_splits=num_splits, facts=facts)
    if dot_bf16 is None:
        dot_bf16 = False  # fp16 products: exact for fp8 keys and bf16 queries of normal range

    if workspace is None:
        mid_o, mid_l = split_workspace(batch, Hk, S, ROWS, D, query.device)
    else:
        mid_o, mid_l = workspace
        need = batch * Hk * S * ROWS
        if mid_l.numel() < need or mid_o.numel() < need * D:
            raise ValueError("workspace too small for this launch")
    if out is None:
        out = torch.empty(T, Hq, D, dtype=query.dtype, device=query.device)

    align = pow2_alignment(kv_cache.stride(0), kv_cache.stride(1), kv_cache.stride(2), kv_cache.storage_offset())
    qk_scale = float(scale) * LOG2E
    qstart = query_start_loc if query_start_loc is not None else seq_lens

    kern = _tq_split_kernel
    extra = {}
    pdl = False  # the combine as a programmatic dependent launch of stage 1 (kernels "h", "v")
    perm = 0  # the partials' column order (``_tq_combine_kernel``'s PERM)
    ptx_ok = facts.ptx_ok
    if kernel == "g":
        _launch_g(qr, kv_cache, block_table, seq_lens, mid_o, mid_l, S, qk_scale, batch, G, D, page, tiles.maxnreg,
                  tiles.block_n)
        kern = None
    elif kernel == "h":
        perm = _launch_h(qr, kv_cache, block_table, seq_lens, qstart, mid_o, mid_l, S, qk_scale, batch, G, D, page,
                         QL, has_qstart, tiles.num_stages, tiles.maxnreg,
                         pdl=COMBINE_PDL, early=overlap_prior and _pdl_launch(), prefetch=tiles.prefetch,
                         producer=tiles.producer, warp_max=tiles.warp_max)
        kern = None
        pdl = COMBINE_PDL
    elif kernel == "v":
        perm = _launch_v(qr, kv_cache, block_table, seq_lens, qstart, mid_o, mid_l, S, qk_scale, batch, G, D, page,
                         QL, tiles.block_n, tiles.num_stages, tiles.maxnreg, pdl=COMBINE_PDL, pipe=tiles.pipe,
                         v_halves=tiles.v_halves, split_ring=tiles.split_ring)
        kern = None
        pdl = COMBINE_PDL
    elif kernel == "q":
        kern = _tq_split_kernel_q
        extra["ASM"] = ptx_ok
        extra["SKP"] = kv_cache.stride(1)
        extra["SKH"] = kv_cache.stride(2)
        extra["LAZY"] = float(tiles.lazy if tiles.lazy is not None else (-1.0 if M_PAD <= 16 else 8.0))
        if tiles.rsplit > 1 and QL > 1:
            qpp = -(-QL // int(tiles.rsplit))
            extra["RSPLIT"] = -(-QL // qpp)
            extra["QPP"] = qpp
            M_PAD = max(16, next_pow2(qpp * G))
        if tiles.rows_m:
            extra["ROWS_M"] = True
    elif kernel == "w":
        kern = _tq_split_kernel_w
        extra["NW"] = tiles.num_warps
        extra["ASM"] = int(tiles.words) in (2, 4) and ptx_ok
        if tiles.vsplit > 1 and D // 8 // tiles.vsplit >= 16:
            extra["VSPLIT"] = int(tiles.vsplit)
    if tiles.prefetch:
        extra["PREFETCH"] = int(tiles.prefetch) if kern is _tq_split_kernel_q else True
    if kern is _tq_split_kernel:
        if tiles.prefetch and int(tiles.prefetch) >= 2:
            extra["PF_DEPTH"] = 2
        if tiles.sz_word and words_ok:
            extra["SZW"] = True
        if tiles.head_major:
            extra["HEAD_MAJOR"] = True
        if tiles.fused_sums:
            extra["FUSE_SUMS"] = True
        if _pair_gathers(layout, D):
            extra["CPAIR"] = True
            centroids = centroid_pairs(given_centroids, layout.mse_bits, dot_bf16)
            if tiles.pair_table and tiles.num_warps > 1:
                extra["PAIR_TABLE"] = True
    if tiles.maxnreg:
        extra["maxnreg"] = tiles.maxnreg
    if tiles.words and kern is _tq_split_kernel and words_ok and D >= 128:
        words = int(tiles.words)
        if words >= 3 and M_PAD > 16:
            words -= 2  # Triton 3.6 fails to lower the re-interleave next to warp-group MMAs
        if words in (2, 4) and not ptx_ok:
            words -= 1  # PTX only on NVIDIA GPUs with e4m3 conversions
        extra["WORDS"] = words
    if kern is not None:
        grid = (Hk, S, batch) if extra.get("HEAD_MAJOR") else (S * extra.get("VSPLIT", 1) * extra.get("RSPLIT", 1), Hk, batch)
        kern[grid](
            qr,
            kv_cache,
            block_table,
            seq_lens,
            qstart,
            centroids,
            mid_o,
            mid_l,
            qr.stride(0),
            qr.stride(1),
            kv_cache.stride(0),
            kv_cache.stride(1),
            kv_cache.stride(2),
            block_table.stride(0),
            S,
            qk_scale,
            HK=Hk,
            G=G,
            QL=QL,
            ROWS=ROWS,
            M_PAD=M_PAD,
            D=D,
            PAGE=page,
            KEY_FP8=layout.key_fp8,
            MSE_BITS=layout.mse_bits,
            NORM_CORR=layout.norm_correction,
            VQB=layout.value_bits,
            KPS=layout.key_packed_size,
            VAL_BYTES=layout.value_data_bytes,
            BLOCK_N=tiles.block_n,
            ALIGN=align,
            RAW_TAIL=raw_tail,
            HAS_QSTART=has_qstart,
            FP8_E4B15=_fp8_e4b15(dev_index) if layout.key_fp8 else 0,
            DOT_BF16=dot_bf16,
            **extra,
            num_warps=tiles.num_warps,
            num_stages=tiles.num_stages,
        )
    kr = key if raw_tail else query
    vr = value if raw_tail else query
    s_chunk, dc, combine_warps = combine_shape(S, D, has_qstart)
    _tq_combine_kernel[(ROWS * (D // dc), Hk, batch)](
        mid_o,
        mid_l,
        query,
        kr,
        vr,
        out,
        seq_lens,
        qstart,
        query.stride(0),
        query.stride(1),
        kr.stride(0),
        kr.stride(1),
        vr.stride(0),
        vr.stride(1),
        out.stride(0),
        out.stride(1),
        S,
        qk_scale,
        HK=Hk,
        G=G,
        QL=QL,
        ROWS=ROWS,
        D=D,
        DC=dc,
        S_CHUNK=s_chunk,
        QL_PAD=max(2, next_pow2(QL)),
        RAW_TAIL=raw_tail,
        HAS_QSTART=has_qstart,
        num_warps=combine_warps,
        num_stages=2,
        **({"PDL": True, "launch_pdl": _pdl_launch()} if pdl else {}),
        **({"PERM": perm} if perm else {}),
    )
    return out


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)
