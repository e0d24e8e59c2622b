"""The stage-1 kernels' own configs and launches.

A config holds only the fields of ``TileConfig`` its kernel reads (``config_for``), and
``launch(call, splits)`` runs the kernel over ``call`` (the validated inputs of one
attention call, ``Call``), returning the column order of the partials it wrote (the
combine's ``PERM``). ``combine_pdl`` says whether the combine after it may be a
programmatic dependent launch (the Hopper kernels).

    DequantSplit      "n"  _dequant_split_words._tq_dequant_split_words, _dequant_split_pages._tq_dequant_split_fp8_pages
                           or _dequant_split_tokens._tq_dequant_split_tokens (every preset; ``_dequant_split``)
    PerWarpSoftmax    "w"  _per_warp_softmax._tq_per_warp_softmax
    Fp8Scores         "q"  _fp8_scores._tq_fp8_scores
    GluonMmaDecode    "g"  _gluon_mma_decode._tq_gluon_mma_decode
    WgmmaDecode       "h"  _wgmma_decode._tq_wgmma_decode (_wgmma_decode_producer with ``producer``)
    WgmmaVerify       "v"  _wgmma_verify._tq_wgmma_verify
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from . import combine
from ._carveout import TRITON_PREFER_SHARED_ABOVE, prefer_carveout
from ._dequant_split import dequant_path
from ._dequant_split_pages import _tq_dequant_split_fp8_pages
from ._dequant_split_tokens import _tq_dequant_split_tokens
from ._dequant_split_words import _tq_dequant_split_words
from ._fp8_scores import _tq_fp8_scores
from ._per_warp_softmax import _tq_per_warp_softmax
from .device import _fp8_e4b15
from .layout import TQLayout, next_pow2
from .tiles import Stage1, TileConfig


@dataclass(frozen=True, eq=False)
class Call:
    """The inputs of one attention call, checked and derived (``_launch.run_attention``)."""

    query: torch.Tensor  # [T, Hq, D]
    qr: torch.Tensor  # the query stage 1 reads (rotated by PiT for MSE keys)
    kv_cache: torch.Tensor
    block_table: torch.Tensor
    seq_lens: torch.Tensor
    qstart: torch.Tensor  # query_start_loc, or seq_lens where there is none (never read then)
    centroids: torch.Tensor  # MSE keys: fp32 centroids; fp8 keys: the query (never read)
    given_centroids: torch.Tensor | None  # the caller's centroids (the pair tables are built from them)
    key: torch.Tensor | None
    value: torch.Tensor | None
    out: torch.Tensor
    mid_o: torch.Tensor
    mid_l: torch.Tensor
    layout: TQLayout
    ptx_ok: bool
    words_ok: bool
    batch: int
    group: int
    head_dim: int
    page: int
    query_len: int
    has_qstart: bool
    raw_tail: bool
    qk_scale: float
    align: int
    dot_bf16: bool
    overlap_prior: bool

    @property
    def rows(self) -> int:
        return self.query_len * self.group

    @property
    def m_pad(self) -> int:
        return max(16, next_pow2(self.rows))

    @property
    def num_kv_heads(self) -> int:
        return self.kv_cache.shape[2]

    @property
    def dev_index(self) -> int:
        return self.query.device.index or 0


# ---------------------------------------------------------------- the Triton kernels ("n", "w", "q")


def _triton_launch(kern, call: Call, splits: int, grid, centroids, block_n: int, num_warps: int, num_stages: int,
                   extra: dict, m_pad: int | None = None, formats: bool = True):
    """One of the Triton stage-1 kernels, which share their arguments and the cache's constants
    (``extra``: the kernel's own constexprs and options; ``m_pad``: rows a program, padded;
    ``formats``: the kernel takes the key and value formats, ``KEY_FP8`` ... ``VQB``, which the
    kernels for fp8 keys and 4-bit values only do not)."""
    lay = call.layout
    qr, kv = call.qr, call.kv_cache
    if formats:
        extra = dict(KEY_FP8=lay.key_fp8, MSE_BITS=lay.mse_bits, NORM_CORR=lay.norm_correction, VQB=lay.value_bits,
                     **extra)
    kern[grid](
        qr, kv, call.block_table, call.seq_lens, call.qstart, centroids, call.mid_o, call.mid_l,
        qr.stride(0), qr.stride(1), kv.stride(0), kv.stride(1), kv.stride(2), call.block_table.stride(0),
        splits, call.qk_scale,
        HK=call.num_kv_heads, G=call.group, QL=call.query_len, ROWS=call.rows, M_PAD=m_pad or call.m_pad,
        D=call.head_dim, PAGE=call.page, KPS=lay.key_packed_size, VAL_BYTES=lay.value_data_bytes, BLOCK_N=block_n,
        ALIGN=call.align, RAW_TAIL=call.raw_tail, HAS_QSTART=call.has_qstart,
        FP8_E4B15=_fp8_e4b15(call.dev_index) if lay.key_fp8 else 0, DOT_BF16=call.dot_bf16,
        **extra, num_warps=num_warps, num_stages=num_stages,
    )


def _pair_gathers(layout: TQLayout, head_dim: int) -> bool:
    """MSE keys read as index bytes split in nibbles (4-bit) or 24-bit groups (3-bit)."""
    if layout.key_fp8:
        return False
    return (layout.mse_bits == 4 and head_dim >= 32) or (layout.mse_bits == 3 and head_dim >= 128)


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


@dataclass(frozen=True)
class DequantSplit:
    """Kernel "n": tiles dequantised, rows on the MMA's M side (``_dequant_split``: one of three
    kernels by how the cache is read, ``dequant_path``)."""

    block_n: int
    num_warps: int
    num_stages: int
    prefetch: int = 0  # tiles requested ahead by hand (word path: 1 or 2; byte path: on / off)
    maxnreg: int | None = None
    words: int = 0  # slots read as int32 words (fp8 keys + 4-bit values, D >= 128): 1-4
    sz_word: bool = True
    head_major: bool = False
    fused_sums: bool = True
    pair_table: bool = False
    kernel: ClassVar[Stage1] = Stage1.DEQUANT_SPLIT
    combine_pdl: ClassVar[bool] = False

    def launch(self, call: Call, splits: int) -> int:
        lay = call.layout
        words = 0
        if self.words and call.words_ok and call.head_dim >= 128:
            words = self.words
            if words >= 3 and call.m_pad > 16:
                words -= 2  # Triton 3.6 fails to lower the re-interleave next to warp-group MMAs
            if words in (2, 4) and not call.ptx_ok:
                words -= 1  # PTX only on NVIDIA GPUs with e4m3 conversions
        path = dequant_path(lay.key_fp8, lay.value_bits, call.head_dim, call.page, self.block_n, words)
        extra: dict = {}
        centroids = call.centroids
        if self.prefetch:
            extra["PREFETCH"] = True
        if self.head_major:
            extra["HEAD_MAJOR"] = True
        if path == "words":
            kern = _tq_dequant_split_words
            extra["WORDS"] = words
            if self.prefetch >= 2:
                extra["PF_DEPTH"] = 2
        elif path == "pages":
            kern = _tq_dequant_split_fp8_pages
            if self.sz_word and call.words_ok:
                extra["SZW"] = True
        else:
            kern = _tq_dequant_split_tokens
            if _pair_gathers(lay, call.head_dim):
                extra["CPAIR"] = True
                centroids = centroid_pairs(call.given_centroids, lay.mse_bits, call.dot_bf16)
                if self.pair_table and self.num_warps > 1:
                    extra["PAIR_TABLE"] = True
        if self.fused_sums and path != "tokens":
            extra["FUSE_SUMS"] = True
        if self.maxnreg:
            extra["maxnreg"] = self.maxnreg
        hk = call.num_kv_heads
        grid = (hk, splits, call.batch) if self.head_major else (splits, hk, call.batch)
        _triton_launch(kern, call, splits, grid, centroids, self.block_n, self.num_warps, self.num_stages, extra,
                       formats=path == "tokens")
        return 0


@dataclass(frozen=True)
class PerWarpSoftmax:
    """Kernel "w": one softmax state per warp (``_per_warp_softmax``)."""

    block_n: int
    num_warps: int
    num_stages: int
    prefetch: int = 0
    maxnreg: int | None = None
    words: int = 0  # 2 or 4: the words split by PTX conversions (where the GPU has them)
    vsplit: int = 1
    kernel: ClassVar[Stage1] = Stage1.PER_WARP_SOFTMAX
    combine_pdl: ClassVar[bool] = False

    def launch(self, call: Call, splits: int) -> int:
        extra: dict = {"NW": self.num_warps, "ASM": self.words in (2, 4) and call.ptx_ok}
        vsplit = 1
        if self.vsplit > 1 and call.head_dim // 8 // self.vsplit >= 16:
            vsplit = extra["VSPLIT"] = self.vsplit
        if self.prefetch:
            extra["PREFETCH"] = True
        if self.maxnreg:
            extra["maxnreg"] = self.maxnreg
        grid = (splits * vsplit, call.num_kv_heads, call.batch)
        _triton_launch(_tq_per_warp_softmax, call, splits, grid, call.centroids, self.block_n, self.num_warps,
                       self.num_stages, extra)
        return 0


@dataclass(frozen=True)
class Fp8Scores:
    """Kernel "q": fp8 tensor-core scores (``_fp8_scores``)."""

    block_n: int
    num_warps: int
    num_stages: int
    prefetch: int = 0  # 1: the next tile's bytes by hand; 2: only its codes and scale/zero words
    maxnreg: int | None = None
    lazy: float | None = None
    rows_m: bool = False
    rsplit: int = 1
    kernel: ClassVar[Stage1] = Stage1.FP8_SCORES
    combine_pdl: ClassVar[bool] = False

    def launch(self, call: Call, splits: int) -> int:
        kv = call.kv_cache
        lazy = self.lazy if self.lazy is not None else (-1.0 if call.m_pad <= 16 else 8.0)
        extra: dict = {"ASM": call.ptx_ok, "SKP": kv.stride(1), "SKH": kv.stride(2), "LAZY": float(lazy)}
        rsplit, m_pad = 1, call.m_pad
        if self.rsplit > 1 and call.query_len > 1:
            qpp = -(-call.query_len // self.rsplit)
            rsplit = extra["RSPLIT"] = -(-call.query_len // qpp)
            extra["QPP"] = qpp
            m_pad = max(16, next_pow2(qpp * call.group))  # rows of the program's share
        if self.rows_m:
            extra["ROWS_M"] = True
        if self.prefetch:
            extra["PREFETCH"] = self.prefetch
        if self.maxnreg:
            extra["maxnreg"] = self.maxnreg
        grid = (splits * rsplit, call.num_kv_heads, call.batch)
        _triton_launch(_tq_fp8_scores, call, splits, grid, call.centroids, self.block_n, self.num_warps, self.num_stages,
                       extra, m_pad)
        return 0


# ---------------------------------------------------------------- the Gluon kernels ("g", "h", "v")


def launch_gluon_mma_decode(qr, kv_cache, block_table, seq_lens, mid_o, mid_l, num_splits, qk_scale, batch, group,
                            head_dim, page, maxnreg=None, block_n=None):
    """Stage 1 on kernel "g" (its partials in head order)."""
    from ._gluon_mma_decode import BLOCK_N, NUM_WARPS, _tq_gluon_mma_decode, g_layouts

    block_n = block_n if block_n in (32, 64) else BLOCK_N
    hk = kv_cache.shape[2]
    _tq_gluon_mma_decode[(num_splits, hk, batch)](
        qr, kv_cache, block_table, seq_lens, mid_o, mid_l,
        qr.stride(0), qr.stride(1), kv_cache.stride(0), block_table.stride(0), num_splits, qk_scale,
        SKP=kv_cache.stride(1), SKH=kv_cache.stride(2),
        HK=hk, G=group, D=head_dim, PAGE=page, BLOCK_N=block_n, **g_layouts(head_dim, page, group, block_n),
        num_warps=NUM_WARPS, **({"maxnreg": maxnreg} if maxnreg else {}),
    )


@dataclass(frozen=True)
class GluonMmaDecode:
    """Kernel "g": the Gluon decode on mma.sync (``_gluon_mma_decode``)."""

    block_n: int
    maxnreg: int | None = None
    kernel: ClassVar[Stage1] = Stage1.GLUON_MMA_DECODE
    combine_pdl: ClassVar[bool] = False

    def launch(self, call: Call, splits: int) -> int:
        launch_gluon_mma_decode(call.qr, call.kv_cache, call.block_table, call.seq_lens, call.mid_o, call.mid_l, splits,
                                call.qk_scale, call.batch, call.group, call.head_dim, call.page, self.maxnreg,
                                self.block_n)
        return 0


def h_producer_ok(head_dim: int, query_len: int, has_qstart: bool) -> bool:
    """Whether kernel "h" can run with its key producer warp (``_wgmma_decode_producer``): decode at D = 256."""
    return head_dim == 256 and query_len == 1 and not has_qstart


def h_programs_per_split(query_len: int, group: int) -> tuple[int, int]:
    """Kernel "h"'s query tokens a program and programs per (split, KV head, sequence): all
    of a sequence's K + 1 x group rows in one program where they fit its 32."""
    from ._wgmma_decode import MAX_ROWS

    qpp = max(1, min(query_len, MAX_ROWS // group))
    return qpp, -(-query_len // qpp)


def launch_wgmma_decode(qr, kv_cache, block_table, seq_lens, qstart, mid_o, mid_l, num_splits, qk_scale, batch, group,
                        head_dim, page, query_len, has_qstart, stages=2, maxnreg=None, pdl=False, timeline=None,
                        early=False, prefetch=0, producer=False, warp_max=False) -> int:
    """Stage 1 on kernel "h"; returns the combine's column order for its partials.
    ``timeline``: int64 [programs, 4], the kernel's diagnostics timeline (``tq_timeline.py``);
    ``early``: launched as a programmatic dependent of the kernel before it, reading the
    sequence lengths and the block table before that kernel's end (in CUDA graphs, where the
    caller allows it: ``tq_decode_attention``'s ``overlap_prior``)."""
    from ._wgmma_decode import NUM_WARPS, _tq_wgmma_decode, partial_order

    hk = kv_cache.shape[2]
    if producer and timeline is None and h_producer_ok(head_dim, query_len, has_qstart):
        from ._wgmma_decode_producer import PRODUCER_MAXNREG, _tq_wgmma_decode_producer

        _tq_wgmma_decode_producer[(num_splits, hk, batch)](
            qr, kv_cache, block_table, seq_lens, qstart, mid_o, mid_l,
            qr.stride(0), qr.stride(1), kv_cache.stride(0) // 4, block_table.stride(0), num_splits, qk_scale,
            SKP=kv_cache.stride(1), SKH=kv_cache.stride(2), HK=hk, G=group, D=head_dim, PAGE=page,
            STAGES=max(2, stages), R=8, PDL=pdl, num_warps=NUM_WARPS, maxnreg=maxnreg or PRODUCER_MAXNREG,
            **({"EARLY": True, "launch_pdl": True} if early else {}), **({"XMAX": True} if warp_max else {}),
        )
        return partial_order(head_dim)
    qpp, rsplit = h_programs_per_split(query_len, group)
    _tq_wgmma_decode[(num_splits * rsplit, hk, batch)](
        qr, kv_cache, block_table, seq_lens, qstart, mid_o, mid_l,
        qr.stride(0), qr.stride(1), kv_cache.stride(0) // 4, block_table.stride(0), num_splits, qk_scale,
        SKP=kv_cache.stride(1), SKH=kv_cache.stride(2), HK=hk, G=group, D=head_dim, PAGE=page,
        STAGES=max(2, stages), R=max(8, next_pow2(qpp * group)), QL=query_len, QPP=qpp, RSPLIT=rsplit,
        HAS_QSTART=has_qstart, PDL=pdl, num_warps=NUM_WARPS, **({"maxnreg": maxnreg} if maxnreg else {}),
        **({"TL": timeline} if timeline is not None else {}), **({"EARLY": True, "launch_pdl": True} if early else {}),
        **({"PF": int(prefetch)} if prefetch else {}), **({"XMAX": True} if warp_max else {}),
    )
    return partial_order(head_dim)


@dataclass(frozen=True)
class WgmmaDecode:
    """Kernel "h": the Hopper warp-group decode and short verify (``_wgmma_decode``; with
    ``producer``, decode at D = 256: ``_wgmma_decode_producer``)."""

    num_stages: int = 2
    maxnreg: int | None = None
    prefetch: int = 0  # L2 prefetch of the code and scale/zero words, tiles ahead
    producer: bool = False
    warp_max: bool = False
    kernel: ClassVar[Stage1] = Stage1.WGMMA_DECODE
    combine_pdl: ClassVar[bool] = True

    def launch(self, call: Call, splits: int) -> int:
        return launch_wgmma_decode(
            call.qr, call.kv_cache, call.block_table, call.seq_lens, call.qstart, call.mid_o, call.mid_l, splits,
            call.qk_scale, call.batch, call.group, call.head_dim, call.page, call.query_len, call.has_qstart,
            self.num_stages, self.maxnreg, pdl=combine.COMBINE_PDL,
            early=call.overlap_prior and combine.pdl_launch(), prefetch=self.prefetch, producer=self.producer,
            warp_max=self.warp_max)


# kernel "v" builds of 48 KB to V_CARVEOUT_MAX_SHARED bytes of shared memory (Triton's loader
# gives them its largest carve-out, ~28 KB of L1) ask the driver for V_CARVEOUT percent of the
# shared-memory maximum instead (``_carveout``): more L1 for their 4-byte copies, 11-14% less
# time on the H200's verify batches of 24-32 rows (docs/KERNELS.md "The L1 for kernel "v"");
# the 36-64-row builds at D = 256 (115 KB) keep Triton's, which lets two share an SM. None:
# Triton's setting everywhere
V_CARVEOUT: int | None = 85
V_CARVEOUT_MAX_SHARED = 100_000


def launch_wgmma_verify(qr, kv_cache, block_table, seq_lens, qstart, mid_o, mid_l, num_splits, qk_scale, batch, group,
                        head_dim, page, query_len, block_n=64, stages=2, maxnreg=None, pdl=False, pipe=0,
                        v_halves=False, split_ring=False) -> int:
    """Stage 1 on kernel "v"; returns the combine's column order for its partials."""
    from ._wgmma_verify import NUM_WARPS, PARTIAL_ORDER_V, _tq_wgmma_verify

    hk = kv_cache.shape[2]
    compiled = _tq_wgmma_verify[(num_splits, hk, batch)](
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


@dataclass(frozen=True)
class WgmmaVerify:
    """Kernel "v": the Hopper warp-group verify, query rows on M (``_wgmma_verify``)."""

    block_n: int = 64
    num_stages: int = 2
    maxnreg: int | None = None
    pipe: int = 0
    v_halves: bool = False
    split_ring: bool = False
    kernel: ClassVar[Stage1] = Stage1.WGMMA_VERIFY
    combine_pdl: ClassVar[bool] = True

    def launch(self, call: Call, splits: int) -> int:
        return launch_wgmma_verify(
            call.qr, call.kv_cache, call.block_table, call.seq_lens, call.qstart, call.mid_o, call.mid_l, splits,
            call.qk_scale, call.batch, call.group, call.head_dim, call.page, call.query_len, self.block_n,
            self.num_stages, self.maxnreg, pdl=combine.COMBINE_PDL, pipe=self.pipe, v_halves=self.v_halves,
            split_ring=self.split_ring)


Stage1Config = DequantSplit | PerWarpSoftmax | Fp8Scores | GluonMmaDecode | WgmmaDecode | WgmmaVerify


def config_for(kernel: str, tiles: TileConfig) -> Stage1Config:
    """The config of ``kernel`` (a ``Stage1``) from the request ``tiles``: the fields it reads."""
    t = tiles
    pf = int(t.prefetch)
    if kernel == Stage1.GLUON_MMA_DECODE:
        return GluonMmaDecode(t.block_n, t.maxnreg)
    if kernel == Stage1.WGMMA_DECODE:
        return WgmmaDecode(t.num_stages, t.maxnreg, pf, t.producer, t.warp_max)
    if kernel == Stage1.WGMMA_VERIFY:
        return WgmmaVerify(t.block_n, t.num_stages, t.maxnreg, t.pipe, t.v_halves, t.split_ring)
    if kernel == Stage1.FP8_SCORES:
        return Fp8Scores(t.block_n, t.num_warps, t.num_stages, pf, t.maxnreg, t.lazy, t.rows_m, int(t.rsplit))
    if kernel == Stage1.PER_WARP_SOFTMAX:
        return PerWarpSoftmax(t.block_n, t.num_warps, t.num_stages, pf, t.maxnreg, int(t.words), int(t.vsplit))
    return DequantSplit(t.block_n, t.num_warps, t.num_stages, pf, t.maxnreg, int(t.words), t.sz_word, t.head_major,
                        t.fused_sums, t.pair_table)
