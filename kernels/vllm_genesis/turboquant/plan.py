"""The launch plan: which stage-1 kernel a call runs, with which config and split count.

``choose_plan`` reads the call's shapes and what its cache and device allow (``CacheFacts``)
and returns a ``Plan``; ``Plan.run(call)`` launches stage 1 and the combine. ``call_plan``
(the same choice as a (kernel, tiles, splits) triple) is what the warm-up and the benchmarks
key their variants on. The choice, step by step:

1. the request: the caller's ``TileConfig`` or ``default_tiles`` (``launch_plan``), and the
   split count (``default_num_splits``);
2. the kernel that can run it (``stage1_kernel``): the request's kernel where the cache and
   device allow it, kernel "h" in place of the plan's own where it is the default, else
   "n";
3. for the launcher's own plan on kernel "h": the producer warp or the L2 prefetch by the
   grid's programs per SM;
4. ``stage1.config_for``: the chosen kernel's own config from the tiles.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from . import combine
from .device import CacheFacts, cache_words_ok, fp8_mma_default, num_sms
from .layout import TQLayout, next_pow2, pick_num_splits
from .stage1 import Call, Stage1Config, config_for, h_producer_ok, h_programs_per_split
from .tiles import Stage1, TileConfig, default_tiles, verify_q_tiles


def _q_kernel_ok(layout: TQLayout, head_dim: int, cache: CacheFacts) -> bool:
    """kernel "q" (fp8 tensor-core scores): fp8 e4m3 keys + 4-bit values read as int32
    words, D >= 64, and a GPU with e4m3 (or the interpreter)."""
    return cache.words_ok and head_dim >= 64 and layout.key_fp8 and cache.e4m3


def _per_warp_ok(tiles: TileConfig, words_ok: bool, head_dim: int) -> bool:
    return tiles.kernel == Stage1.PER_WARP_SOFTMAX and words_ok and head_dim >= 128 and tiles.block_n // tiles.num_warps >= 16


def default_num_splits(
    batch: int, num_kv_heads: int, max_context: int, n_sms: int, tiles: TileConfig, words_ok: bool, head_dim: int
) -> int:
    """``pick_num_splits``; a quarter of it for 2-warp per-warp-state programs (H200 sweeps at
    B=8 x 32K and B=32 x 8K, D=128: half the count 8-10% faster than the full one, a quarter
    another 5% in three runs)."""
    if tiles.kernel == Stage1.WGMMA_VERIFY:
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


def _g_kernel_ok(layout: TQLayout, head_dim, group, query_len, raw_tail, cache: CacheFacts) -> bool:
    """kernel "g" (Gluon decode): one query token, fp8 e4m3 keys + 4-bit values read as int32
    words, D = 256, at most 16 heads a group, an NVIDIA GPU with e4m3 conversions, and a cache
    of power-of-two pages whose int32 word offsets fit in 31 bits."""
    return (
        cache.words_ok and cache.ptx_ok and layout.key_fp8 and head_dim == 256 and group <= 16 and query_len == 1
        and not raw_tail and cache.small and cache.page & (cache.page - 1) == 0
    )


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
    from ._wgmma_decode import MAX_ROWS

    if head_dim not in (128, 256) or query_len * group > MAX_ROWS:
        return False
    return tiles.kernel in (Stage1.FP8_SCORES, Stage1.DEQUANT_SPLIT, Stage1.PER_WARP_SOFTMAX) or (tiles.kernel == Stage1.WGMMA_VERIFY and head_dim == 256 and batch == 1)


H_TILES = TileConfig(64, 4, 2, Stage1.WGMMA_DECODE)  # kernel "h" where it runs in place of the plan's kernel
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


def stage1_kernel(
    tiles: TileConfig, planned: bool, layout: TQLayout, cache: CacheFacts, *, batch: int, head_dim: int,
    group: int, query_len: int, has_qstart: bool, raw_tail: bool,
) -> tuple[Stage1, TileConfig]:
    """The stage-1 kernel a call launches ("g", "h", "v", "q", "w", or "n": the Triton split
    kernel, also where the tiles name a kernel the call cannot run) and the tiles it runs
    with, from the call's tiles (``planned``: the launcher's own plan, not the caller's) and
    shapes and what the cache and its device allow. A function of these alone, so that the
    warm-up keys its variants on the kernel actually launched."""
    M_PAD = max(16, next_pow2(query_len * group))
    h_ok = _h_kernel_ok(layout, head_dim, group, query_len, cache)
    # kernel "v" runs where kernel "h" could (the same head sizes; its limits, G <= 8 and
    # K + 1 <= 8, keep the rows within its 64)
    if tiles.kernel == Stage1.WGMMA_VERIFY and not (has_qstart and raw_tail and h_ok):
        tiles = verify_q_tiles(M_PAD)  # where kernel "v" cannot run: kernel "q" (the plan's split count)
    if tiles.kernel == Stage1.GLUON_MMA_DECODE and _g_kernel_ok(layout, head_dim, group, query_len, raw_tail, cache):
        return Stage1.GLUON_MMA_DECODE, tiles
    # the default decode on Hopper where kernel "h" covers it, and the verify batches of
    # ``_h_verify_default`` (the plan's split count); other verify batches on request
    h_default = planned and ((query_len == 1 and not has_qstart)
                             or (has_qstart and _h_verify_default(tiles, head_dim, group, query_len, batch)))
    if (h_default or tiles.kernel == Stage1.WGMMA_DECODE) and raw_tail == has_qstart and h_ok:
        # in place of the plan's kernel: its own tiles (2 key stages, no register cap)
        return Stage1.WGMMA_DECODE, tiles if tiles.kernel == Stage1.WGMMA_DECODE else H_TILES
    if tiles.kernel == Stage1.WGMMA_VERIFY:
        return Stage1.WGMMA_VERIFY, tiles
    if tiles.kernel == Stage1.FP8_SCORES and _q_kernel_ok(layout, head_dim, cache):
        return Stage1.FP8_SCORES, tiles
    if _per_warp_ok(tiles, cache.words_ok, head_dim):
        return Stage1.PER_WARP_SOFTMAX, tiles
    return Stage1.DEQUANT_SPLIT, tiles


def call_plan(
    kv_cache: torch.Tensor, layout: TQLayout, batch: int, head_dim: int, group: int, query_len: int,
    max_context: int, *, has_qstart: bool, raw_tail: bool, tiles: TileConfig | None = None,
    num_splits: int | None = None, facts: CacheFacts | None = None,
) -> tuple[Stage1, TileConfig, int]:
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
    if planned and kernel == Stage1.WGMMA_DECODE:
        programs = splits * h_programs_per_split(query_len, group)[1] * kv_cache.shape[2] * batch
        sms = num_sms(kv_cache.device.index or 0)
        if h_producer_ok(head_dim, query_len, has_qstart) and programs <= H_PRODUCER_PROGRAMS_PER_SM * sms:
            tiles = replace(tiles, producer=True)
        elif programs <= H_PREFETCH_PROGRAMS_PER_SM * sms and -(-max_context // splits) > H_PREFETCH_MIN_SPAN:
            tiles = replace(tiles, prefetch=1)
    return kernel, tiles, splits


@dataclass(frozen=True)
class Plan:
    """What one call launches: stage 1's kernel with its own config, the split count, and
    the tiles it was chosen from (the warm-up's key)."""

    kernel: Stage1
    config: Stage1Config
    splits: int
    tiles: TileConfig

    def run(self, call: Call) -> torch.Tensor:
        """Stage 1 into ``call``'s split workspace, then the combine into ``call.out``."""
        perm = self.config.launch(call, self.splits)
        combine.launch_combine(call, self.splits, perm, pdl=self.config.combine_pdl and combine.COMBINE_PDL)
        return call.out


def choose_plan(
    kv_cache: torch.Tensor, layout: TQLayout, batch: int, head_dim: int, group: int, query_len: int,
    max_context: int, *, has_qstart: bool, raw_tail: bool, tiles: TileConfig | None = None,
    num_splits: int | None = None, facts: CacheFacts | None = None,
) -> Plan:
    """The ``Plan`` of a call on ``kv_cache`` (``call_plan``'s choice, with the kernel's config)."""
    kernel, tiles, splits = call_plan(kv_cache, layout, batch, head_dim, group, query_len, max_context,
                                      has_qstart=has_qstart, raw_tail=raw_tail, tiles=tiles,
                                      num_splits=num_splits, facts=facts)
    return Plan(kernel, config_for(kernel, tiles), splits, tiles)
