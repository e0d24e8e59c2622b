"""TurboQuant decode / verify kernels against a float64 PyTorch reference.

On a CPU these run at small sizes under TRITON_INTERPRET=1 (set by conftest.py); the
``gpu``-marked tests run the same checks at full sizes on a CUDA device. Inputs are random
(never zeros), page tables shuffled, contexts odd, outputs NaN-poisoned before each run.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from vllm_genesis.turboquant import (
    PRESETS,
    TQLayout,
    pick_num_splits,
    tq_decode_attention,
    tq_verify_attention,
    verify_num_splits,
    warmup_verify,
)
from vllm_genesis.turboquant._kernel_q import _q_fp8_split
from vllm_genesis.turboquant._launch import TileConfig
from vllm_genesis.turboquant.layout import pow2_alignment
from vllm_genesis.turboquant.reference import (
    dequant_slots,
    quantize_slots,
    random_case,
    reference_attention,
    rel_err,
)

CUDA = torch.cuda.is_available()
DEV = "cuda" if CUDA else "cpu"
# what fp8 keys / 3-4 bit values cost against attention on the raw bf16 K/V (loose bounds)
RAW_BOUND = {
    "turboquant_k8v4": 0.15,
    "turboquant_4bit_nc": 0.25,
    "turboquant_k3v4_nc": 0.35,
    "turboquant_3bit_nc": 0.5,
}
# against the float64 dequantised cache: fp16 products + bf16 output rounding
DEQ_BOUND = 1e-2


def _poison_past_end(c: dict, seq_lens, page: int) -> None:
    """0xFF (fp8 and fp16 NaN patterns) in the allocated but unwritten slots of each
    sequence's last page: the kernels must never let them into a result."""
    for b, L in enumerate(seq_lens):
        if L % page:
            c["kv_cache"][int(c["block_table"][b, (L - 1) // page]), L % page :] = 0xFF


def _poisoned(like: torch.Tensor) -> torch.Tensor:
    return torch.full_like(like, float("nan"))


def _run_decode(c, lay, **kw):
    out = _poisoned(c["query"])
    res = tq_decode_attention(
        c["query"], c["kv_cache"], c["block_table"], c["seq_lens"],
        layout=lay, centroids=c["centroids"], PiT=c["PiT"], out=out, **kw,
    )
    assert res is out
    return out


def _run_verify(c, lay, raw_tail=True, **kw):
    out = _poisoned(c["query"])
    tq_verify_attention(
        c["query"], c["key"] if raw_tail else None, c["value"] if raw_tail else None,
        c["kv_cache"], c["block_table"], c["seq_lens"], c["query_start_loc"], c["max_query_len"],
        layout=lay, centroids=c["centroids"], PiT=c["PiT"], out=out, **kw,
    )
    return out


def _ref(c, lay, *, verify=False, raw_tail=True, raw=False):
    D = lay.head_dim
    kw = dict(Pi=c["Pi"], centroids=c["centroids"])
    if verify:
        kw["query_start_loc"] = c["query_start_loc"]
        if raw_tail:
            kw.update(key=c["key"], value=c["value"])
    if raw:
        kw = dict(query_start_loc=kw.get("query_start_loc"), raw_kv=c["raw_kv"])
    return reference_attention(c["query"], c["kv_cache"], c["block_table"], c["seq_lens"], lay, D**-0.5, **kw)


def _decode_case(hq, hk, page, D, seed):
    """k8v4 decode case: lengths 203, 1, 0, 95, 33 (row 2 empty), NaN bytes past the end;
    returns the case, the layout, the non-empty rows and their float64 reference."""
    lay = TQLayout.from_preset("turboquant_k8v4", D)
    seqs = [203, 1, 0, 95, 33]
    c = random_case(seq_lens=seqs, num_heads=hq, num_kv_heads=hk, head_dim=D, block_size=page,
                    layout=lay, generator=torch.Generator().manual_seed(seed), device=DEV)
    _poison_past_end(c, seqs, page)
    return c, lay, [0, 1, 3, 4], _ref(c, lay)


# ---------------------------------------------------------------- layout / heuristics


def test_layout_matches_0_24_0_slot_sizes():
    # TurboQuantConfig.slot_size_aligned of 0.24.0 for these presets / head sizes
    assert TQLayout.from_preset("turboquant_k8v4", 256).slot_size_aligned == 388  # 1.5*D + 4
    assert TQLayout.from_preset("turboquant_k8v4", 128).slot_size_aligned == 196
    assert TQLayout.from_preset("turboquant_4bit_nc", 128).slot_size_aligned == 64 + 2 + 64 + 4
    assert TQLayout.from_preset("turboquant_k3v4_nc", 256).slot_size_aligned == 96 + 2 + 128 + 4
    assert TQLayout.from_preset("turboquant_3bit_nc", 128).slot_size_aligned == 48 + 2 + 48 + 4
    assert set(PRESETS) == {"turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc"}
    with pytest.raises(ValueError):
        TQLayout.from_preset("turboquant_k8v4", 96).check()


def test_split_heuristic():
    # one sequence, 4 KV heads, 32K: enough programs for every SM, >= 256 tokens each
    s = pick_num_splits(1, 4, 32768, 132)
    assert 4 * s >= 132 and 32768 / s >= 256
    assert pick_num_splits(1, 4, 100, 132) == 1  # short context: no splitting
    assert pick_num_splits(64, 8, 8192, 132) == 5  # the batch nearly fills the GPU already
    assert pick_num_splits(1, 1, 1 << 22, 132) == 128  # capped (64 below 64K tokens)
    assert pick_num_splits(1, 1, 32768, 132) == 64
    assert pow2_alignment(388 * 4 * 16, 388 * 4, 388) == 4


# ---------------------------------------------------------------- decode


@pytest.mark.parametrize("hq,hk", [(12, 2), (16, 2)], ids=["gqa6", "gqa8"])
def test_decode_k8v4_matches_float64(hq, hk):
    lay = TQLayout.from_preset("turboquant_k8v4", 64)
    g = torch.Generator().manual_seed(hq)
    seqs = [1, 37, 203, 0, 129]  # 0: a padded CUDA-graph row -> zeros, never NaN
    c = random_case(seq_lens=seqs, num_heads=hq, num_kv_heads=hk, head_dim=64, block_size=16,
                    layout=lay, generator=g, device=DEV)
    out = _run_decode(c, lay, num_splits=3)
    assert not torch.isnan(out).any()
    assert torch.all(out[3] == 0)
    keep = [0, 1, 2, 4]
    ref = _ref(c, lay)
    raw = _ref(c, lay, raw=True)
    assert rel_err(out[keep], ref[keep]) < DEQ_BOUND
    assert rel_err(out[keep], raw[keep]) < RAW_BOUND["turboquant_k8v4"]


def test_decode_ignores_unwritten_slots_past_the_end():
    """Slots after a sequence's last token (same page) may hold NaN bytes in a live cache."""
    lay = TQLayout.from_preset("turboquant_k8v4", 64)
    c = random_case(seq_lens=[37, 70], num_heads=12, num_kv_heads=2, head_dim=64, block_size=32,
                    layout=lay, generator=torch.Generator().manual_seed(4), device=DEV)
    _poison_past_end(c, [37, 70], 32)
    for tiles in (None, TileConfig(32, 4, 3), TileConfig(16, 4, 1, "n", True)):
        out = _run_decode(c, lay, num_splits=2, tiles=tiles)
        assert not torch.isnan(out).any()
        assert rel_err(out, _ref(c, lay)) < DEQ_BOUND


@pytest.mark.parametrize("words", [1, 2, 3, 4])
@pytest.mark.parametrize("pf", [False, True], ids=["pipeliner", "prefetch"])
def test_word_path_decode_and_verify(words, pf):
    """Slots read as int32 words (D >= 128), NaN bytes past the end, G = 6, decode + verify."""
    D = 128
    lay = TQLayout.from_preset("turboquant_k8v4", D)
    seqs = [37, 70, 1, 0]
    c = random_case(seq_lens=seqs, num_heads=12, num_kv_heads=2, head_dim=D, block_size=32,
                    layout=lay, generator=torch.Generator().manual_seed(11), device=DEV)
    _poison_past_end(c, seqs[:3], 32)
    for bn in (16, 64):
        tiles = TileConfig(bn, 4, 1 if pf else 2, "n", pf, words=words)
        out = _run_decode(c, lay, num_splits=2, tiles=tiles)
        assert not torch.isnan(out).any()
        assert torch.all(out[3] == 0)
        keep = [0, 1, 2]
        assert rel_err(out[keep], _ref(c, lay)[keep]) < DEQ_BOUND
    cv = random_case(seq_lens=[77, 40], query_lens=[6, 3], num_heads=12, num_kv_heads=2, head_dim=D,
                     block_size=16, layout=lay, generator=torch.Generator().manual_seed(12), device=DEV)
    out = _run_verify(cv, lay, num_splits=3, tiles=TileConfig(32, 4, 1 if pf else 2, "n", pf, words=words))
    assert not torch.isnan(out).any()
    assert rel_err(out, _ref(cv, lay, verify=True)) < DEQ_BOUND
    out = _run_verify(cv, lay, raw_tail=False, num_splits=2,
                      tiles=TileConfig(32, 4, 1 if pf else 2, "n", pf, words=words))
    assert rel_err(out, _ref(cv, lay, verify=True, raw_tail=False)) < DEQ_BOUND


@pytest.mark.parametrize("hq,hk,page", [(12, 2, 16), (16, 2, 32)], ids=["gqa6-page16", "gqa8-page32"])
def test_word_path_two_tiles_ahead(hq, hk, page):
    """prefetch=2 (two tiles requested ahead): odd lengths, short splits, NaN bytes past the end."""
    D = 128
    lay = TQLayout.from_preset("turboquant_k8v4", D)
    seqs = [203, 1, 0, 95, 33]
    c = random_case(seq_lens=seqs, num_heads=hq, num_kv_heads=hk, head_dim=D, block_size=page,
                    layout=lay, generator=torch.Generator().manual_seed(hq + page), device=DEV)
    _poison_past_end(c, seqs, page)
    keep = [0, 1, 3, 4]
    ref = _ref(c, lay)
    for bn, splits in ((16, 3), (32, 2), (64, 5)):
        out = _run_decode(c, lay, num_splits=splits, tiles=TileConfig(bn, 4, 1, "n", 2, words=4))
        assert not torch.isnan(out).any()
        assert torch.all(out[2] == 0)
        assert rel_err(out[keep], ref[keep]) < DEQ_BOUND
    cv = random_case(seq_lens=[77, 40, 9], query_lens=[6, 3, 8], num_heads=hq, num_kv_heads=hk, head_dim=D,
                     block_size=page, layout=lay, generator=torch.Generator().manual_seed(5), device=DEV)
    out = _run_verify(cv, lay, num_splits=3, tiles=TileConfig(32, 4, 1, "n", 2, words=2))
    assert not torch.isnan(out).any()
    assert rel_err(out, _ref(cv, lay, verify=True)) < DEQ_BOUND


@pytest.mark.parametrize("hq,hk,page", [(12, 2, 16), (16, 2, 32), (16, 2, 8)], ids=["gqa6-page16", "gqa8-page32", "gqa8-page8"])
@pytest.mark.parametrize("pf", [False, True], ids=["pipeliner", "prefetch"])
def test_per_warp_state_kernel(hq, hk, page, pf):
    """kernel="w" (one softmax state per warp): odd lengths, empty and one-token rows, short
    and empty splits, NaN bytes past the end, pages smaller than a warp's sub-tile (8),
    decode and both verify modes; words=2 runs its PTX conversions on a GPU only."""
    D = 128
    c, lay, keep, ref = _decode_case(hq, hk, page, D, hq * page + pf)
    for bn, nw, splits, words in ((64, 4, 3, 2), (32, 2, 2, 1), (128, 4, 7, 2), (64, 2, 1, 1)):
        tiles = TileConfig(bn, nw, 1 if pf else 2, "w", pf, words=words)
        out = _run_decode(c, lay, num_splits=splits, tiles=tiles)
        assert not torch.isnan(out).any()
        assert torch.all(out[2] == 0)
        assert rel_err(out[keep], ref[keep]) < DEQ_BOUND
    cv = random_case(seq_lens=[77, 40, 9], query_lens=[2, 1, 2], num_heads=hq, num_kv_heads=hk, head_dim=D,
                     block_size=page, layout=lay, generator=torch.Generator().manual_seed(6), device=DEV)
    tiles = TileConfig(64, 4, 1 if pf else 2, "w", pf, words=2)
    out = _run_verify(cv, lay, num_splits=3, tiles=tiles)
    assert not torch.isnan(out).any()
    assert rel_err(out, _ref(cv, lay, verify=True)) < DEQ_BOUND
    out = _run_verify(cv, lay, raw_tail=False, num_splits=2, tiles=tiles)
    assert rel_err(out, _ref(cv, lay, verify=True, raw_tail=False)) < DEQ_BOUND


def test_default_tiles_for_mse_keys_use_one_stage():
    """MSE-key presets take the byte path with one stage (not Triton's pipeliner, which
    waited for every step's own copies): at most 16 rows, one warp at D <= 128 (16-token
    tiles for 3-bit keys, prefetched, 32 for 4-bit) and at D = 256 4 warps for few pairs (128
    / 64-token tiles, the 64 prefetched) or 2 warps x 32 tokens for many; more rows, 16-token
    tiles for few pairs, 64 for many, the few pairs' 16-token tiles with 4-bit keys gathering
    their centroid pairs from a table in shared memory. The plan of a call follows its
    layout's key bits."""
    from vllm_genesis.turboquant._launch import cache_plan, default_tiles, launch_plan

    for d, m_pad, pairs, bits, want, prefetch in [
        (256, 16, 4, 4, (64, 4), True), (256, 16, 4, 3, (128, 4), False), (256, 16, 64, 4, (32, 2), False),
        (256, 16, 64, 3, (32, 2), False), (128, 16, 4, 4, (32, 1), False), (128, 16, 64, 3, (16, 1), True),
        (64, 16, 256, 4, (32, 1), False), (256, 64, 4, 3, (16, 4), False), (256, 64, 64, 4, (64, 4), False),
        (128, 32, 64, 3, (64, 4), False), (256, 64, 4, 4, (16, 4), False), (128, 32, 8, 4, (16, 4), False),
    ]:
        t = default_tiles(d, m_pad, False, pairs, 32768, False, mse_bits=bits)
        assert (t.kernel, t.num_stages, (t.block_n, t.num_warps)) == ("n", 1, want), (d, m_pad, pairs, bits)
        assert bool(t.prefetch) == prefetch, (d, m_pad, pairs, bits)
        assert t.pair_table == (m_pad > 16 and pairs < 32 and bits == 4), (d, m_pad, pairs, bits)
    assert launch_plan(1, 4, 256, 6, 6, False, 32768, False, 132)[0] == default_tiles(256, 64, False, 4, 32768, False)
    for preset, block_n in [("turboquant_4bit_nc", 64), ("turboquant_3bit_nc", 128), ("turboquant_k3v4_nc", 128)]:
        lay = TQLayout.from_preset(preset, 256)
        cache = torch.empty(4, 16, 4, lay.slot_size_aligned, dtype=torch.uint8)
        assert cache_plan(cache, 1, 256, 6, 1, lay, 32768)[0].block_n == block_n


def test_default_tiles_pick_per_warp_kernel_for_many_pairs():
    """Many (sequence, KV head) pairs at D = 128 and at most 16 rows (decode, or verify with
    K+1 x group <= 16): the per-warp-state kernel with a quarter of the splits is the
    default (not for more rows, other head sizes, few pairs or unaligned slots)."""
    from vllm_genesis.turboquant._launch import default_num_splits, default_tiles, launch_plan

    t = default_tiles(128, 16, True, 64, 32768, True)
    assert (t.kernel, t.num_warps, t.block_n) == ("w", 2, 32)
    assert default_num_splits(8, 8, 32768, 132, t, True, 128) == pick_num_splits(8, 8, 32768, 132) // 4
    assert launch_plan(16, 8, 128, 4, 4, True, 32768, True, 132)[0] == t  # verify, K+1 = 4 x group 4
    assert default_tiles(128, 16, True, 64, 32768, False).kernel == "n"
    assert default_tiles(128, 32, True, 64, 32768, True, fp8_mma=False).kernel == "n"
    assert default_tiles(256, 16, True, 64, 32768, True).kernel == "n"
    assert default_tiles(128, 16, True, 8, 32768, True).kernel == "n"
    n = default_tiles(128, 16, True, 64, 32768, False)
    assert default_num_splits(8, 8, 32768, 132, n, False, 128) == pick_num_splits(8, 8, 32768, 132)
    D = 128
    lay = TQLayout.from_preset("turboquant_k8v4", D)
    seqs = [70, 0, 33, 1] * 4  # 16 sequences x 2 KV heads = 32 pairs
    c = random_case(seq_lens=seqs, num_heads=8, num_kv_heads=2, head_dim=D, block_size=16,
                    layout=lay, generator=torch.Generator().manual_seed(41), device=DEV)
    _poison_past_end(c, seqs, 16)
    out = _run_decode(c, lay)
    keep = [i for i, L in enumerate(seqs) if L]
    assert not torch.isnan(out).any()
    assert torch.all(out[1] == 0)
    assert rel_err(out[keep], _ref(c, lay)[keep]) < DEQ_BOUND


def test_hopper_kernel_replaces_planned_verify_kernels():
    """At D = 128 and 256 kernel "h" takes verify batches whose K+1 x group rows fit one of its
    programs (32) in place of the planned kernels "q", "n" and the per-warp "w" (the
    plan, and so its split count, stays); not more rows, not other head sizes, and not a plan
    that names kernel "v", which the plan does on Hopper from 17 rows: so at both head sizes
    kernel "h" takes the batches of at most 16 rows."""
    from vllm_genesis.turboquant._launch import _h_verify_default, launch_plan, verify_v_tiles

    # (head size, batch, KV heads, group, K+1): planned kernel
    planned = {(128, 16, 4, 4, 2): "w", (128, 1, 8, 4, 4): "n", (128, 2, 2, 4, 5): "v", (128, 2, 2, 4, 8): "v",
               (256, 1, 4, 6, 2): "n", (256, 8, 8, 4, 4): "n", (256, 32, 4, 6, 2): "n", (256, 1, 4, 6, 3): "v",
               (256, 1, 4, 6, 6): "v"}
    for (d, batch, hk, group, ql), kernel in planned.items():
        tiles, _ = launch_plan(batch, hk, d, group, ql, True, 32768, True, 132, fp8_mma=True)
        assert tiles.kernel == kernel
        assert _h_verify_default(tiles, d, group, ql, 2) == (kernel != "v") == (ql * group <= 16)
        if kernel == "v":  # its products overlapped as measured per head size and row count
            assert tiles == verify_v_tiles(d, max(16, 1 << (ql * group - 1).bit_length()))
            # the 33-64-row builds at D = 256 with V^T in halves (fits the larger L1's carve-out)
            assert (tiles.pipe, tiles.v_halves) == ((4, False) if d == 128 or ql * group <= 32 else (3, True))
            # a single request of at most 32 rows at D = 256 takes kernel "h" in its place
            assert _h_verify_default(tiles, d, group, ql, 1) == (d == 256 and ql * group <= 32)
    assert _h_verify_default(TileConfig(64, 4, 5, "q"), 128, 4, 8, 2)  # a plan of kernel "q", 32 rows
    assert not _h_verify_default(TileConfig(64, 4, 2, "q"), 128, 6, 6, 1)  # 36 rows
    assert not _h_verify_default(TileConfig(64, 4, 2, "w"), 64, 4, 2, 1)
    assert not _h_verify_default(TileConfig(64, 4, 2, "v"), 128, 4, 2, 1)


_HOPPER = dict(page=16, words_ok=True, ptx_ok=True, hopper=True, e4m3=True, small=True)


@pytest.mark.parametrize("d,batch,group,ql,raw_tail,want", [
    (256, 1, 6, 1, False, "h"),  # decode
    (256, 1, 6, 2, True, "h"),  # 12 rows: the plan's kernel "n" -> "h"
    (256, 1, 6, 4, True, "h"),  # 24 rows, one request: the plan's kernel "v" -> "h"
    (256, 2, 6, 4, True, "v"),  # 24 rows, two requests: kernel "v"
    (256, 1, 6, 6, True, "v"),  # 36 rows: more than kernel "h"'s 32
    (128, 1, 4, 6, True, "v"),  # D = 128, 24 rows: kernel "v" also for one request
    (128, 8, 4, 4, True, "h"),  # D = 128, 16 rows
    (256, 1, 6, 4, False, "q"),  # the tail from the cache: neither "v" nor "h" run it
])
def test_stage1_kernel_on_hopper(d, batch, group, ql, raw_tail, want):
    """The launcher's choice of stage-1 kernel for a Hopper cache, without a GPU: the plan's
    kernel, kernel "h" in place of it for decode and the verify batches it takes by default
    (at most 16 rows; 17-32 rows of a single request at D = 256), kernel "q" where kernel "v"
    cannot run; a caller's tiles are taken as given, and without a Hopper GPU neither "h" nor
    "v" is chosen."""
    from vllm_genesis.turboquant._launch import CacheFacts, launch_plan, stage1_kernel

    lay = TQLayout.from_preset("turboquant_k8v4", d)
    tiles, _ = launch_plan(batch, 4, d, group, ql, True, 32768, True, 132, fp8_mma=True)
    call = dict(batch=batch, head_dim=d, group=group, query_len=ql, has_qstart=ql > 1 or raw_tail, raw_tail=raw_tail)
    kernel, used = stage1_kernel(tiles, True, lay, CacheFacts(**_HOPPER), **call)
    assert kernel == want
    # the tiles it runs with: the plan's, kernel "q"'s where kernel "v" cannot run, or kernel
    # "h"'s own (2 key stages, no register cap) where it runs in place of the plan's kernel
    assert used == {"q": used if used.kernel == "q" else None, "h": TileConfig(64, 4, 2, "h")}.get(want, tiles)
    asked = TileConfig(64, 4, 2, "q", rows_m=True)
    assert stage1_kernel(asked, False, lay, CacheFacts(**_HOPPER), **call) == ("q", asked)
    elsewhere = CacheFacts(**{**_HOPPER, "hopper": False, "ptx_ok": False})
    assert stage1_kernel(tiles, True, lay, elsewhere, **call)[0] not in ("h", "v")


@pytest.mark.parametrize("batch,context,group,ql,prefetch,producer", [
    (1, 32768, 6, 1, 0, True),  # decode, 64 splits x 4 KV heads: 256 programs for 132 SMs, 8 tiles a split
    (1, 20480, 6, 1, 0, True),  # 5 tiles a split
    (1, 8192, 6, 1, 0, True),
    (1, 131072, 6, 1, 0, False),  # 128 splits: four programs an SM
    (8, 32768, 6, 1, 0, False),
    (1, 32768, 6, 4, 1, False),  # 24 verify rows of one request: kernel "h", one program a split
    (1, 16384, 6, 4, 0, False),  # 4 tiles a split
    (2, 32768, 6, 4, None, False),  # two requests: kernel "v"
])
def test_hopper_decode_plan_where_two_programs_share_an_sm(monkeypatch, batch, context, group, ql, prefetch,
                                                           producer):
    """For grids of at most two programs per SM the launcher's plan runs kernel "h"'s decode at
    D = 256 with its key producer warp, and turns on its L2 prefetch of the next tile's code
    words for the other kernel "h" batches whose splits span more than four 64-token tiles;
    neither elsewhere. A caller's tiles are taken as given."""
    from vllm_genesis.turboquant import _launch

    monkeypatch.setattr(_launch, "num_sms", lambda index: 132)
    lay = TQLayout.from_preset("turboquant_k8v4", 256)
    kv = torch.empty(2, 16, 4, lay.slot_size, dtype=torch.uint8)
    call = dict(has_qstart=ql > 1, raw_tail=ql > 1, facts=_launch.CacheFacts(**_HOPPER))
    kernel, tiles, splits = _launch.call_plan(kv, lay, batch, 256, group, ql, context, **call)
    assert kernel == ("h" if prefetch is not None else "v")
    if prefetch is not None:
        assert tiles == replace(_launch.H_TILES, prefetch=prefetch, producer=producer)
        two = splits * 4 * batch <= 2 * 132
        assert producer == (two and ql == 1)
        assert bool(prefetch) == (two and ql > 1 and -(-context // splits) > 256)
    asked = TileConfig(64, 4, 2, "h")
    assert _launch.call_plan(kv, lay, batch, 256, group, ql, context, tiles=asked, **call)[1] == asked
    # D = 128 decode: no producer warp (kernel "hw" is written for D = 256)
    lay128 = TQLayout.from_preset("turboquant_k8v4", 128)
    kv128 = torch.empty(2, 16, 4, lay128.slot_size, dtype=torch.uint8)
    if ql == 1:
        assert not _launch.call_plan(kv128, lay128, batch, 128, group, ql, context, **call)[1].producer


class _FakeDriver:
    """Stands in for libcuda: records the calls, answers ``rc``."""

    def __init__(self, rc=0):
        self.calls, self.rc = [], rc

    def cuFuncSetCacheConfig(self, fn, config):
        self.calls.append(("config", fn.value, config.value))
        return self.rc

    def cuFuncSetAttribute(self, fn, attr, value):
        self.calls.append(("attribute", fn.value, attr.value, value.value))
        return self.rc


def test_carveout_asks_the_driver_once_per_kernel(monkeypatch):
    """``prefer_carveout`` drops Triton's prefer-shared cache setting and asks for the
    carve-out (``CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT`` = 9) once per kernel and
    percentage; a refusal is reported and asked again next time; no handle or no driver: no."""
    from types import SimpleNamespace

    from vllm_genesis.turboquant import _carveout

    drv = _FakeDriver()
    monkeypatch.setattr(_carveout, "_driver", [drv])
    monkeypatch.setattr(_carveout, "_done", {})
    k = SimpleNamespace(function=0x1234)
    assert _carveout.prefer_carveout(k, 85) and _carveout.prefer_carveout(k, 85)
    assert drv.calls == [("config", 0x1234, 0), ("attribute", 0x1234, 9, 85)]
    assert _carveout.prefer_carveout(k, 70) and drv.calls[-1] == ("attribute", 0x1234, 9, 70)
    assert not _carveout.prefer_carveout(SimpleNamespace(function=0), 85)
    assert not _carveout.prefer_carveout(SimpleNamespace(), 85)
    refused = _FakeDriver(rc=1)
    monkeypatch.setattr(_carveout, "_driver", [refused])
    k2 = SimpleNamespace(function=0x99)
    assert not _carveout.prefer_carveout(k2, 85) and not _carveout.prefer_carveout(k2, 85)
    assert len(refused.calls) == 2  # asked again: the refusal was not remembered as done
    monkeypatch.setattr(_carveout, "_driver", [None])
    assert not _carveout.prefer_carveout(SimpleNamespace(function=0x77), 85)


@pytest.mark.parametrize("shared,asked", [(98_816, True), (49_664, True), (115_200, False), (40_000, False)])
def test_kernel_v_asks_for_more_l1_where_its_build_is_small(monkeypatch, shared, asked):
    """Kernel "v" builds of more than 48 KB (where Triton's loader asks for its largest
    carve-out) and at most ``V_CARVEOUT_MAX_SHARED`` bytes of shared memory (the stacked-query
    builds up to 32 rows at D = 256, the D = 128 builds of 64-token tiles) ask the driver for
    the ``V_CARVEOUT`` carve-out after their launch; the 36-64-row builds at D = 256 keep
    Triton's (two of them need its largest carve-out to share an SM), smaller builds the
    driver's own. The kernel is stood in for."""
    from types import SimpleNamespace

    from vllm_genesis.turboquant import _kernel_v, _launch

    built = SimpleNamespace(function=0x42, metadata=SimpleNamespace(shared=shared))

    class _Stub:
        def __getitem__(self, grid):
            return lambda *a, **k: built

    monkeypatch.setattr(_kernel_v, "_tq_verify_kernel_v", _Stub())
    asked_for = []
    monkeypatch.setattr(_launch, "prefer_carveout", lambda k, pct: asked_for.append((k, pct)) or True)
    t = torch.zeros(4, 4, 4)
    kv = torch.zeros(2, 16, 4, 388, dtype=torch.uint8)
    _launch._launch_v(t, kv, torch.zeros(1, 2, dtype=torch.int32), torch.zeros(1, dtype=torch.int32), None, t, t,
                      8, 1.0, 1, 6, 256, 16, 6)
    assert asked_for == ([(built, _launch.V_CARVEOUT)] if asked else [])
    assert (48 * 1024 < shared <= _launch.V_CARVEOUT_MAX_SHARED) == asked
    monkeypatch.setattr(_launch, "V_CARVEOUT", None)
    asked_for.clear()
    _launch._launch_v(t, kv, torch.zeros(1, 2, dtype=torch.int32), torch.zeros(1, dtype=torch.int32), None, t, t,
                      8, 1.0, 1, 6, 256, 16, 6)
    assert asked_for == []


def test_warmup_builds_the_kernel_each_batch_size_launches(monkeypatch):
    """PN522 on Hopper, where the kernel depends on the batch size and not only on the plan
    (24 verify rows at D = 256: kernel "h" for one request, kernel "v" for more): the warm-up
    launches both, and real calls of one and of two requests launch nothing it did not.
    Kernels "h" and "v" are stood in for by recorders (they need a Hopper GPU)."""
    from vllm_genesis.turboquant import _launch

    launched = []

    def recorder(name):
        def launch(*args, **kwargs):
            launched.append((name, args[8]))  # the kernel and its split count
            return 0
        return launch

    monkeypatch.setattr(_launch.CacheFacts, "of", classmethod(lambda cls, layout, kv: cls(**_HOPPER)))
    monkeypatch.setattr(_launch, "_launch_h", recorder("h"))
    monkeypatch.setattr(_launch, "_launch_v", recorder("v"))
    monkeypatch.setattr(_launch, "COMBINE_PDL", False)
    hq, hk, d = 24, 4, 256
    warmup_verify(num_heads=hq, num_kv_heads=hk, head_dim=d, block_size=16, query_lens=(4,), max_blocks=4,
                  max_num_seqs=2, device=DEV)
    built = set(launched)
    assert {k for k, _ in built} == {"h", "v"}
    launched.clear()
    lay = TQLayout.from_preset("turboquant_k8v4", d)
    for seqs in (1, 2):
        c = random_case(seq_lens=[50, 61][:seqs], query_lens=[4] * seqs, num_heads=hq, num_kv_heads=hk,
                        head_dim=d, block_size=16, layout=lay, device=DEV)
        tq_verify_attention(c["query"], c["key"], c["value"], c["kv_cache"], c["block_table"][:, :4].contiguous(),
                            c["seq_lens"], c["query_start_loc"], 4, layout=lay)
    assert [k for k, _ in launched] == ["h", "v"]
    assert set(launched) <= built


@triton.jit
def _split_q_kernel(Q, O, M: tl.constexpr, D: tl.constexpr):
    r = tl.arange(0, M)[:, None] * D + tl.arange(0, D)[None, :]
    hi, lo, inv = _q_fp8_split(tl.load(Q + r).to(tl.float32))
    tl.store(O + r, (hi.to(tl.float32) + lo.to(tl.float32)) * inv[:, None])


def test_query_split_into_two_fp8_parts_is_exact():
    """The fp8 tensor-core kernel scores with q * 2^k = hi + lo (two e4m3 parts): exact for
    bf16 queries of normal range, with RNE ties and carries into the exponent (126 -> 128)."""
    g = torch.Generator().manual_seed(5)
    q = (torch.randn(16, 64, generator=g) * torch.logspace(-3, 3, 16)[:, None]).to(torch.bfloat16)
    q[0, :4] = torch.tensor([-1.96875, 1.0625, 0.78125, 2.0])  # ties and a carry at the row's scale
    q[1] = 0.0  # an all-zero row
    q = q.to(DEV)
    out = torch.empty(16, 64, dtype=torch.float32, device=DEV)
    _split_q_kernel[(1,)](q, out, 16, 64)
    qf = q.float()
    amax = qf.abs().amax(1, keepdim=True)
    small = qf.abs() < amax * 2.0**-9  # their low part may fall among e4m3's subnormals
    assert small[2:].float().mean() < 0.05  # rows 0 and 1 are the hand-made ones
    assert torch.equal(out[~small], qf[~small])
    assert torch.all((out - qf).abs() <= amax * 2.0**-16)


@pytest.mark.parametrize("hq,hk,page", [(12, 2, 16), (16, 2, 32), (16, 2, 8)], ids=["gqa6-page16", "gqa8-page32", "gqa8-page8"])
@pytest.mark.parametrize("pf", [0, 1, 2], ids=["pipeliner", "prefetch", "prefetch-codes"])
def test_fp8_tensor_core_kernel(hq, hk, page, pf):
    """kernel="q" (fp8 x fp8 scores, tokens on M, lazily moved softmax reference): odd
    lengths, empty and one-token rows, short and empty splits, NaN bytes past the end, 64-
    and 128-token tiles, decode and both verify modes, query tokens split over programs; all
    loads on Triton's pipeliner, all hand-prefetched, or only the codes hand-prefetched;
    tokens or query rows on the MMA's M side."""
    D = 64 if page == 32 else 128
    c, lay, keep, ref = _decode_case(hq, hk, page, D, hq * page + pf)
    for bn, splits, rm in ((64, 3, False), (128, 1, True), (64, 7, True)):
        tiles = TileConfig(bn, 4, 1 if pf == 1 else 2, "q", pf, rows_m=rm)
        out = _run_decode(c, lay, num_splits=splits, tiles=tiles)
        assert not torch.isnan(out).any()
        assert torch.all(out[2] == 0)
        assert rel_err(out[keep], ref[keep]) < DEQ_BOUND
    vseqs = [77, 40, 9, 130]
    cv = random_case(seq_lens=vseqs, query_lens=[6, 1, 5, 3], num_heads=hq, num_kv_heads=hk, head_dim=D,
                     block_size=page, layout=lay, generator=torch.Generator().manual_seed(6), device=DEV)
    _poison_past_end(cv, vseqs, page)
    for rs, splits, rm in ((1, 3, True), (2, 2, False), (3, 1, False), (1, 2, False)):
        tiles = TileConfig(64, 4, 1 if pf == 1 else 2, "q", pf, rsplit=rs, rows_m=rm)
        out = _run_verify(cv, lay, num_splits=splits, tiles=tiles)
        assert not torch.isnan(out).any()
        assert rel_err(out, _ref(cv, lay, verify=True)) < DEQ_BOUND
        out = _run_verify(cv, lay, raw_tail=False, num_splits=splits, tiles=tiles)
        assert rel_err(out, _ref(cv, lay, verify=True, raw_tail=False)) < DEQ_BOUND


def test_default_tiles_pick_fp8_tensor_core_kernel_for_verify():
    """Verify on Hopper (and under the interpreter) runs kernel "v" for D = 256 or 128 and 17
    to 64 rows (D = 256 also with 16-row padding), kernel "q" for other head sizes and more
    rows; elsewhere, with unaligned slots and for decode the previous defaults stay."""
    from vllm_genesis.turboquant._launch import default_tiles, fp8_mma_default

    assert default_tiles(256, 64, True, 4, 32768, True, fp8_mma=True).kernel == "v"
    assert default_tiles(256, 32, True, 64, 8192, True, fp8_mma=True).kernel == "v"
    assert default_tiles(128, 64, True, 4, 32768, True, fp8_mma=True).kernel == "v"
    assert default_tiles(128, 32, True, 4, 32768, True, fp8_mma=True).kernel == "v"
    assert default_tiles(128, 32, True, 512, 4096, True, fp8_mma=True).kernel == "v"
    assert default_tiles(128, 128, True, 4, 32768, True, fp8_mma=True).kernel == "q"
    verify = default_tiles(64, 32, True, 4, 32768, True, fp8_mma=True)
    assert verify.kernel == "q" and verify.rows_m and verify.prefetch == 2
    assert default_tiles(64, 32, True, 64, 8192, True, fp8_mma=True).rows_m
    assert default_tiles(64, 64, True, 4, 32768, True, fp8_mma=True).kernel == "q"
    assert default_tiles(128, 64, True, 4, 32768, False, fp8_mma=True).kernel == "n"  # unaligned slots
    wide = default_tiles(256, 128, True, 4, 32768, True, fp8_mma=True)
    assert verify.rsplit == 1 and wide.kernel == "q" and wide.rsplit == 2
    assert default_tiles(256, 64, True, 4, 32768, True, fp8_mma=False).kernel == "n"
    assert default_tiles(256, 64, True, 4, 32768, False, fp8_mma=True).kernel == "n"
    assert default_tiles(256, 16, True, 4, 32768, True, fp8_mma=True).kernel == "n"
    if not CUDA:
        assert fp8_mma_default(0)  # the interpreter: the tests above run the default path


def test_kernel_v_splits_fill_one_wave():
    """Kernel "v"'s split count: two programs an SM, one wave of them rounded down (a few
    more would run as a second wave), splits of at least 256 tokens, at most 64 (128 from
    64K tokens on)."""
    from vllm_genesis.turboquant._launch import TileConfig, default_num_splits

    v = TileConfig(64, 4, 2, "v")
    got = {(b, ctx): default_num_splits(b, 4, ctx, 132, v, True, 256)
           for b, ctx in [(1, 32768), (2, 32768), (8, 8192), (64, 4096), (1, 1000), (1, 131072), (100, 4096)]}
    assert got == {(1, 32768): 64, (2, 32768): 33, (8, 8192): 8, (64, 4096): 1, (1, 1000): 4, (1, 131072): 66,
                   (100, 4096): 1}
    for (b, _ctx), s in got.items():
        assert b * 4 * s <= 2 * 132 or s == 1


def test_verify_default_runs_kernel_q_where_kernel_v_cannot(monkeypatch):
    """The default verify plan for D = 256 names kernel "v"; where it cannot run (here: the
    interpreter) the launcher runs kernel "q" instead, and the result matches float64."""
    from vllm_genesis.turboquant import _launch

    seen = []
    real = _launch._tq_split_kernel_q

    class Spy:
        def __getitem__(self, grid):
            seen.append(grid)
            return real[grid]

    monkeypatch.setattr(_launch, "_tq_split_kernel_q", Spy())
    lay = TQLayout.from_preset("turboquant_k8v4", 256)
    c = random_case(seq_lens=[97, 300], query_lens=[3, 2], num_heads=12, num_kv_heads=2, head_dim=256, block_size=16,
                    layout=lay, device=DEV)
    tiles, _ = _launch.cache_plan(c["kv_cache"], 2, 256, 6, 3, lay, 300)
    out = _run_verify(c, lay)
    if not CUDA or _launch.fp8_mma_default(0):
        assert tiles.kernel == "v"
    if not CUDA:
        assert seen, "kernel q did not run"
    assert rel_err(out, _ref(c, lay, verify=True)) < DEQ_BOUND


@pytest.mark.parametrize("pf", [False, True], ids=["pipeliner", "prefetch"])
def test_per_warp_state_kernel_value_split(pf):
    """kernel="w" with vsplit=2 (D = 256, two programs per split, half the value columns
    each): G = 6, odd lengths, an empty row, NaN bytes past the end, decode and verify."""
    D = 256
    lay = TQLayout.from_preset("turboquant_k8v4", D)
    seqs = [150, 0, 37]
    c = random_case(seq_lens=seqs, num_heads=12, num_kv_heads=2, head_dim=D, block_size=16,
                    layout=lay, generator=torch.Generator().manual_seed(31 + pf), device=DEV)
    _poison_past_end(c, seqs, 16)
    ref = _ref(c, lay)
    for bn, nw, splits in ((64, 4, 2), (32, 2, 3)):
        out = _run_decode(c, lay, num_splits=splits, tiles=TileConfig(bn, nw, 1 if pf else 2, "w", pf, words=2, vsplit=2))
        assert not torch.isnan(out).any()
        assert torch.all(out[1] == 0)
        assert rel_err(out[[0, 2]], ref[[0, 2]]) < DEQ_BOUND
    cv = random_case(seq_lens=[70, 20], query_lens=[2, 1], num_heads=12, num_kv_heads=2, head_dim=D,
                     block_size=16, layout=lay, generator=torch.Generator().manual_seed(32), device=DEV)
    out = _run_verify(cv, lay, num_splits=2, tiles=TileConfig(64, 4, 1 if pf else 2, "w", pf, words=2, vsplit=2))
    assert not torch.isnan(out).any()
    assert rel_err(out, _ref(cv, lay, verify=True)) < DEQ_BOUND


@pytest.mark.parametrize("pf", [False, True], ids=["pipeliner", "prefetch"])
def test_scale_zero_word_matches_two_halves(pf):
    """Byte path: scale/zero read as one int32 word (default) or as two fp16 loads, same result."""
    lay = TQLayout.from_preset("turboquant_k8v4", 64)
    seqs = [150, 37, 0, 64]
    c = random_case(seq_lens=seqs, num_heads=16, num_kv_heads=2, head_dim=64, block_size=16,
                    layout=lay, generator=torch.Generator().manual_seed(21), device=DEV)
    _poison_past_end(c, seqs, 16)
    ref = _ref(c, lay)
    keep = [0, 1, 3]
    outs = []
    for szw in (True, False):
        out = _run_decode(c, lay, num_splits=3, tiles=TileConfig(32, 4, 1 if pf else 3, "n", pf, sz_word=szw))
        assert not torch.isnan(out).any()
        assert torch.all(out[2] == 0)
        assert rel_err(out[keep], ref[keep]) < DEQ_BOUND
        outs.append(out.float())
    assert rel_err(outs[0], outs[1]) < 1e-3
    cv = random_case(seq_lens=[70, 41], query_lens=[6, 5], num_heads=12, num_kv_heads=2, head_dim=64,
                     block_size=16, layout=lay, generator=torch.Generator().manual_seed(22), device=DEV)
    for raw_tail in (True, False):
        out = _run_verify(cv, lay, raw_tail=raw_tail, num_splits=2,
                          tiles=TileConfig(32, 4, 1 if pf else 3, "n", pf, sz_word=True))
        assert not torch.isnan(out).any()
        assert rel_err(out, _ref(cv, lay, verify=True, raw_tail=raw_tail)) < DEQ_BOUND


@pytest.mark.parametrize("preset", ["turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc"])
def test_decode_other_presets(preset):
    lay = TQLayout.from_preset(preset, 64)
    g = torch.Generator().manual_seed(7)
    c = random_case(seq_lens=[45, 150, 3], num_heads=12, num_kv_heads=2, head_dim=64, block_size=32,
                    layout=lay, generator=g, device=DEV)
    out = _run_decode(c, lay, num_splits=2)
    assert not torch.isnan(out).any()
    assert rel_err(out, _ref(c, lay)) < DEQ_BOUND
    assert rel_err(out, _ref(c, lay, raw=True)) < RAW_BOUND[preset]


@pytest.mark.parametrize("head_dim", [16, 32])
def test_mse_keys_at_small_head_sizes(head_dim):
    """4-bit MSE keys split their index bytes into nibbles from D = 32 on (each product then
    has D / 2 >= 16 columns); D = 16 keeps the per-index loads. Both match float64."""
    lay = TQLayout.from_preset("turboquant_4bit_nc", head_dim)
    c = random_case(seq_lens=[50, 17], query_lens=[3, 2], num_heads=4, num_kv_heads=2, head_dim=head_dim,
                    block_size=16, layout=lay, generator=torch.Generator().manual_seed(11), device=DEV)
    out = _run_verify(c, lay)
    assert not torch.isnan(out).any()
    assert rel_err(out, _ref(c, lay, verify=True)) < DEQ_BOUND
    dec = random_case(seq_lens=[50, 17], num_heads=4, num_kv_heads=2, head_dim=head_dim, block_size=16,
                      layout=lay, generator=torch.Generator().manual_seed(12), device=DEV)
    assert rel_err(_run_decode(dec, lay), _ref(dec, lay)) < DEQ_BOUND


@pytest.mark.parametrize("preset", ["turboquant_k3v4_nc", "turboquant_3bit_nc"])
def test_3bit_mse_keys_in_24_bit_groups(preset):
    """3-bit MSE keys from D = 128 on: 8 indices per 3 bytes read as one group and scored in
    8 products against every eighth query column (decode and verify against float64)."""
    lay = TQLayout.from_preset(preset, 128)
    c = random_case(seq_lens=[70, 17], query_lens=[3, 2], num_heads=4, num_kv_heads=2, head_dim=128,
                    block_size=16, layout=lay, generator=torch.Generator().manual_seed(13), device=DEV)
    out = _run_verify(c, lay)
    assert not torch.isnan(out).any()
    assert rel_err(out, _ref(c, lay, verify=True)) < DEQ_BOUND
    dec = random_case(seq_lens=[70, 17], num_heads=4, num_kv_heads=2, head_dim=128, block_size=16,
                      layout=lay, generator=torch.Generator().manual_seed(14), device=DEV)
    assert rel_err(_run_decode(dec, lay), _ref(dec, lay)) < DEQ_BOUND


@pytest.mark.parametrize("bits,bf16", [(4, False), (4, True), (3, False), (3, True)])
def test_centroid_pairs_pack_two_indices_and_follow_writes(bits, bf16):
    """Entry u of the pair table holds the centroids of indices u % 2**bits (low 16 bits) and
    u >> bits (high 16 bits); the table is kept per tensor and rebuilt after an in-place write."""
    from vllm_genesis.turboquant._launch import centroid_pairs

    n = 1 << bits
    cent = torch.randn(n, generator=torch.Generator().manual_seed(bits)).sort().values.to(DEV)
    half = torch.bfloat16 if bf16 else torch.float16
    pairs = centroid_pairs(cent, bits, bf16)
    assert pairs.dtype == torch.int32 and pairs.shape == (n * n,)
    lo = (pairs & 0xFFFF).to(torch.int16).view(half).float()
    hi = ((pairs >> 16) & 0xFFFF).to(torch.int16).view(half).float()
    u = torch.arange(n * n, device=cent.device)
    assert torch.equal(lo, cent.to(half).float()[u % n])
    assert torch.equal(hi, cent.to(half).float()[u // n])
    assert centroid_pairs(cent, bits, bf16) is pairs
    cent.mul_(2.0)
    again = centroid_pairs(cent, bits, bf16)
    assert again is not pairs
    assert torch.equal(((again & 0xFFFF).to(torch.int16).view(half).float()), 2 * lo)


@pytest.mark.parametrize("preset,head_dim", [("turboquant_4bit_nc", 64), ("turboquant_3bit_nc", 128)])
def test_mse_pair_gathers_match_per_index_gathers(preset, head_dim, monkeypatch):
    """The pair-table gathers (one per two indices) give what one gather per index gives."""
    from vllm_genesis.turboquant import _launch

    lay = TQLayout.from_preset(preset, head_dim)
    c = random_case(seq_lens=[61, 130], num_heads=8, num_kv_heads=2, head_dim=head_dim, block_size=16,
                    layout=lay, generator=torch.Generator().manual_seed(21), device=DEV)
    paired = _run_decode(c, lay, num_splits=2).float()
    monkeypatch.setattr(_launch, "_pair_gathers", lambda layout, d: False)
    single = _run_decode(c, lay, num_splits=2).float()
    assert not torch.isnan(paired).any()
    assert rel_err(paired, single) < 2e-3
    assert rel_err(paired, _ref(c, lay)) < DEQ_BOUND


@pytest.mark.parametrize("preset,head_dim", [("turboquant_4bit_nc", 64), ("turboquant_3bit_nc", 128)])
def test_mse_pair_table_in_shared_memory_matches_global_gathers(preset, head_dim):
    """``TileConfig.pair_table``: the program loads the pair table once and gathers from it
    (through shared memory) instead of loading each pair; the result is the same, bit for bit."""
    lay = TQLayout.from_preset(preset, head_dim)
    c = random_case(seq_lens=[61, 130], num_heads=8, num_kv_heads=2, head_dim=head_dim, block_size=16,
                    layout=lay, generator=torch.Generator().manual_seed(23), device=DEV)
    runs = [_run_decode(c, lay, num_splits=3, tiles=TileConfig(16, 4, 1, pair_table=t)).float() for t in (True, False)]
    assert not torch.isnan(runs[0]).any()
    assert torch.equal(runs[0], runs[1])
    assert rel_err(runs[0], _ref(c, lay)) < DEQ_BOUND
    v = random_case(seq_lens=[40, 90], query_lens=[5, 4], num_heads=8, num_kv_heads=2, head_dim=head_dim,
                    block_size=16, layout=lay, generator=torch.Generator().manual_seed(24), device=DEV)
    runs = [_run_verify(v, lay, num_splits=2, tiles=TileConfig(16, 4, 1, pair_table=t)).float() for t in (True, False)]
    assert torch.equal(runs[0], runs[1])
    assert rel_err(runs[0], _ref(v, lay, verify=True)) < DEQ_BOUND


@pytest.mark.parametrize("preset,head_dim", [("turboquant_4bit_nc", 64), ("turboquant_k3v4_nc", 128)])
def test_mse_tile_prefetch_matches_plain_loads(preset, head_dim):
    """MSE keys with 4-bit values, PREFETCH: each step requests the next tile's bytes. The
    result equals the plain loads' and float64's, with splits past the end of short sequences
    and a verify request whose whole context is its raw tail (no cached token)."""
    lay = TQLayout.from_preset(preset, head_dim)
    c = random_case(seq_lens=[45, 150, 3], num_heads=8, num_kv_heads=2, head_dim=head_dim, block_size=16,
                    layout=lay, generator=torch.Generator().manual_seed(31), device=DEV)
    runs = [_run_decode(c, lay, num_splits=6, tiles=TileConfig(16, 4, 1, "n", pf)).float() for pf in (True, False)]
    assert not torch.isnan(runs[0]).any()
    assert torch.equal(runs[0], runs[1])
    assert rel_err(runs[0], _ref(c, lay)) < DEQ_BOUND
    v = random_case(seq_lens=[40, 5, 70], query_lens=[3, 5, 2], num_heads=8, num_kv_heads=2, head_dim=head_dim,
                    block_size=16, layout=lay, generator=torch.Generator().manual_seed(32), device=DEV,
                    store_tail=False)
    runs = [_run_verify(v, lay, num_splits=4, tiles=TileConfig(16, 4, 1, "n", pf)).float() for pf in (True, False)]
    assert not torch.isnan(runs[0]).any()
    assert torch.equal(runs[0], runs[1])
    assert rel_err(runs[0], _ref(v, lay, verify=True)) < DEQ_BOUND


def test_decode_split_count_does_not_change_the_result():
    lay = TQLayout.from_preset("turboquant_k8v4", 64)
    c = random_case(seq_lens=[301, 77], num_heads=12, num_kv_heads=2, head_dim=64, block_size=16,
                    layout=lay, generator=torch.Generator().manual_seed(3), device=DEV)
    one = _run_decode(c, lay, num_splits=1).float()
    many = _run_decode(c, lay, num_splits=7).float()
    assert rel_err(many, one) < 5e-3
    lots = _run_decode(c, lay, num_splits=150).float()  # mostly empty splits, merged in two steps
    assert rel_err(lots, one) < 5e-3


# ---------------------------------------------------------------- verify


@pytest.mark.parametrize("hq,hk,qlens", [(12, 2, [6, 1, 8, 3]), (16, 2, [8, 6, 2, 5])], ids=["gqa6", "gqa8"])
def test_verify_raw_tail_matches_float64(hq, hk, qlens):
    lay = TQLayout.from_preset("turboquant_k8v4", 64)
    g = torch.Generator().manual_seed(hq + 1)
    # the tail's cache slots hold unrelated rows: the kernel must take the tail from key/value
    c = random_case(seq_lens=[213, 9, 130, 66], query_lens=qlens, num_heads=hq, num_kv_heads=hk,
                    head_dim=64, block_size=16, layout=lay, generator=g, device=DEV, store_tail=False)
    out = _run_verify(c, lay, num_splits=2)
    assert not torch.isnan(out).any()
    assert rel_err(out, _ref(c, lay, verify=True)) < DEQ_BOUND
    assert rel_err(out, _ref(c, lay, verify=True, raw=True)) < RAW_BOUND["turboquant_k8v4"]


def test_verify_without_raw_tail_reads_the_cache_causally():
    lay = TQLayout.from_preset("turboquant_k8v4", 64)
    c = random_case(seq_lens=[150, 41], query_lens=[6, 4], num_heads=12, num_kv_heads=2, head_dim=64,
                    block_size=16, layout=lay, generator=torch.Generator().manual_seed(5), device=DEV)
    out = _run_verify(c, lay, raw_tail=False, num_splits=2)
    assert not torch.isnan(out).any()
    assert rel_err(out, _ref(c, lay, verify=True, raw_tail=False)) < DEQ_BOUND


def test_verify_mse_preset():
    lay = TQLayout.from_preset("turboquant_k3v4_nc", 64)
    c = random_case(seq_lens=[99, 40], query_lens=[5, 6], num_heads=12, num_kv_heads=2, head_dim=64,
                    block_size=16, layout=lay, generator=torch.Generator().manual_seed(9), device=DEV)
    out = _run_verify(c, lay, num_splits=2)
    assert not torch.isnan(out).any()
    assert rel_err(out, _ref(c, lay, verify=True)) < DEQ_BOUND


def test_verify_rejects_bad_query_len():
    lay = TQLayout.from_preset("turboquant_k8v4", 64)
    c = random_case(seq_lens=[20], query_lens=[2], num_heads=4, num_kv_heads=2, head_dim=64,
                    block_size=16, layout=lay, device=DEV)
    with pytest.raises(ValueError):
        tq_verify_attention(c["query"], c["key"], c["value"], c["kv_cache"], c["block_table"], c["seq_lens"],
                            c["query_start_loc"], 9, layout=lay)


def test_warmup_compiles_every_query_len():
    n = warmup_verify(num_heads=12, num_kv_heads=2, head_dim=64, block_size=16, query_lens=(1, 6),
                      device=DEV)
    assert n == 3


class _VariantLog:
    """Wraps the launchers' Triton kernels and records what picks a compiled variant of each launch:
    the kernel, its compile-time arguments, and how Triton specialises its integer arguments
    (== 1, divisible by 16, other) -- except those it is told not to specialise."""

    def __init__(self, monkeypatch):
        from vllm_genesis.turboquant import _launch

        self.seen: set = set()
        for name in ("_tq_split_kernel", "_tq_split_kernel_q", "_tq_split_kernel_w", "_tq_combine_kernel"):
            monkeypatch.setattr(_launch, name, self._wrap(getattr(_launch, name), name))

    def _wrap(self, kernel, name):
        log = self

        class Wrapped:
            def __getitem__(self, grid):
                launch = kernel[grid]

                def run(*args, **kwargs):
                    ints = tuple(
                        (arg, "1" if v == 1 else "16" if v % 16 == 0 else "n")
                        for arg, v in zip(kernel.arg_names, args)
                        if isinstance(v, int) and not isinstance(v, bool) and arg != "num_splits"
                    )
                    log.seen.add((name, tuple(sorted(kwargs.items())), ints))
                    return launch(*args, **kwargs)

                return run

        return Wrapped()


def _real_calls(max_blocks: int, Hq: int = 12, Hk: int = 2, D: int = 64, bs: int = 16):
    """A decode batch of 5 and a verify batch of 3 requests x 3 tokens, as a server would send."""
    g = torch.Generator().manual_seed(5)
    kv = torch.randint(0, 255, (12, bs, Hk, as_layout_slot(D)), generator=g, dtype=torch.uint8).to(DEV)
    bt = torch.randint(0, 12, (5, max_blocks), generator=g, dtype=torch.int32).to(DEV)
    tq_decode_attention(torch.randn(5, Hq, D, generator=g).to(DEV, torch.bfloat16), kv, bt,
                        torch.tensor([40, 7, 33, 1, 90], dtype=torch.int32, device=DEV))
    q = torch.randn(9, Hq, D, generator=g).to(DEV, torch.bfloat16)
    k = torch.randn(9, Hk, D, generator=g).to(DEV, torch.bfloat16)
    tq_verify_attention(q, k, torch.randn_like(k), kv, bt[:3], torch.tensor([20, 50, 9], dtype=torch.int32, device=DEV),
                        torch.tensor([0, 3, 6, 9], dtype=torch.int32, device=DEV), 3)


def as_layout_slot(D: int) -> int:
    from vllm_genesis.turboquant._launch import as_layout

    return as_layout("turboquant_k8v4", D).slot_size_aligned


def test_warmup_reaches_the_variants_real_calls_use(monkeypatch):
    """PN522: after warmup_verify with the server's block-table width and batch limit, a real
    decode and verify launch need no kernel variant the warm-up did not build."""
    shape = dict(num_heads=12, num_kv_heads=2, head_dim=64, block_size=16, query_lens=(3,), device=DEV)
    log = _VariantLog(monkeypatch)
    _real_calls(max_blocks=64)
    needed = set(log.seen)
    log.seen.clear()
    warmup_verify(**shape, max_blocks=64, max_num_seqs=8)
    assert needed and needed <= log.seen, needed - log.seen
    log.seen.clear()
    warmup_verify(**shape)  # a 2-wide table and one request: not enough (the check above can fail)
    assert not needed <= log.seen


# ---------------------------------------------------------------- cache layout vs 0.24.0's store


def _vllm_tree() -> Path | None:
    """GQUEUE_VLLM_TREE, else the queue's work tree (made by the main job before the tests)."""
    tree = os.environ.get("GQUEUE_VLLM_TREE") or str(Path(__file__).resolve().parents[2] / "work")
    if (Path(tree) / "vllm" / "v1" / "attention" / "ops" / "triton_turboquant_store.py").is_file():
        return Path(tree)
    return None


@pytest.mark.skipif(_vllm_tree() is None, reason="no vLLM 0.24.0 tree: run the main job or set GQUEUE_VLLM_TREE")
@pytest.mark.parametrize("preset", ["turboquant_k8v4", "turboquant_3bit_nc"])
def test_packer_matches_0_24_0_store(preset, monkeypatch):
    import sys

    monkeypatch.syspath_prepend(str(_vllm_tree()))
    if not CUDA:
        # vllm.triton_utils only binds the real triton without a GPU in this mode
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    store_mod = pytest.importorskip("vllm.v1.attention.ops.triton_turboquant_store")
    if not hasattr(store_mod.triton, "next_power_of_2"):
        pytest.skip("vllm.triton_utils bound its placeholder triton")
    D, H, N = 64, 2, 5
    lay = TQLayout.from_preset(preset, D)
    g = torch.Generator().manual_seed(11)
    key = torch.randn(N, H, D, generator=g).to(torch.float16)
    val = torch.randn(N, H, D, generator=g).to(torch.float16)
    cache = torch.zeros(2, 4, H, lay.slot_size_aligned, dtype=torch.uint8, device=DEV)
    slots = torch.tensor([5, 0, 7, 2, 3], dtype=torch.int32)
    from vllm_genesis.turboquant.reference import gaussian_centroids, hadamard

    PiT = hadamard(D)
    cent = gaussian_centroids(D, lay.mse_bits or 4)
    mids = (cent[:-1] + cent[1:]) / 2
    store_mod.triton_turboquant_store(
        key.to(DEV), val.to(DEV), cache, slots.to(DEV), PiT.to(DEV), mids.to(DEV),
        mse_bits=lay.mse_bits, key_packed_size=lay.key_packed_size,
        value_quant_bits=lay.value_bits, key_fp8=lay.key_fp8,
    )
    ours = quantize_slots(key.reshape(N * H, D), val.reshape(N * H, D), lay, PiT=PiT, centroids=cent)
    got = cache.cpu().reshape(8, H, -1)[slots.long()].reshape(N * H, -1)
    n = lay.slot_size
    # same layout: the scale / zero bytes are identical, and both decode to the same
    # keys and values up to one rounding step of the quantisers (fp8 rounding of the
    # interpreter, value codes at .5 boundaries)
    assert torch.equal(got[:, n - 4 : n], ours[:, n - 4 : n])
    assert (got[:, :n] != ours[:, :n]).float().mean() < 0.05
    kg, vg = dequant_slots(got, lay, Pi=PiT.t(), centroids=cent)
    ko, vo = dequant_slots(ours, lay, Pi=PiT.t(), centroids=cent)
    assert rel_err(kg, ko) < 0.1  # the interpreter rounds some fp8 casts toward zero
    assert rel_err(vg, vo) < 0.05
    del sys


# ---------------------------------------------------------------- full sizes on a GPU


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "seqs,qlens,hq,hk,d",
    [
        ([32775], None, 24, 4, 256),
        ([113 + 97 * i for i in range(64)], None, 32, 8, 128),
        ([32771], [6], 24, 4, 256),
        ([201 + 37 * i for i in range(64)], [1 + i % 8 for i in range(64)], 32, 8, 128),
    ],
    ids=["decode-32K-gqa6", "decode-B64-gqa8", "verify-32K-K6", "verify-B64-K1to8"],
)
def test_full_size_on_gpu(seqs, qlens, hq, hk, d):
    lay = TQLayout.from_preset("turboquant_k8v4", d)
    c = random_case(seq_lens=seqs, query_lens=qlens, num_heads=hq, num_kv_heads=hk, head_dim=d,
                    block_size=16, layout=lay, device="cuda", store_tail=qlens is None)
    out = _run_decode(c, lay) if qlens is None else _run_verify(c, lay)
    assert not torch.isnan(out).any()
    assert rel_err(out, _ref(c, lay, verify=qlens is not None)) < DEQ_BOUND


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("preset", ["turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc"])
def test_mse_presets_full_size_on_gpu(preset):
    """The MSE-key presets' default plans at full size: a 32K decode and a verify batch of two
    requests (36 and 24 rows; with 4-bit keys its centroid pairs come from the table in
    shared memory), against float64."""
    from vllm_genesis.turboquant._launch import launch_plan

    lay = TQLayout.from_preset(preset, 256)
    dec = random_case(seq_lens=[32775], num_heads=24, num_kv_heads=4, head_dim=256, block_size=16, layout=lay,
                      device="cuda")
    out = _run_decode(dec, lay)
    assert not torch.isnan(out).any()
    assert rel_err(out, _ref(dec, lay)) < DEQ_BOUND
    ver = random_case(seq_lens=[32771, 5003], query_lens=[6, 4], num_heads=24, num_kv_heads=4, head_dim=256,
                      block_size=16, layout=lay, device="cuda")
    tiles = launch_plan(2, 4, 256, 6, 6, False, 32771, False, 132, mse_bits=lay.mse_bits)[0]
    assert tiles.pair_table == (lay.mse_bits == 4)
    out = _run_verify(ver, lay)
    assert not torch.isnan(out).any()
    assert rel_err(out, _ref(ver, lay, verify=True)) < DEQ_BOUND


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_bf16_products_on_gpu():
    # (Triton's CPU interpreter gets bf16 dots wrong, so this option is checked here only)
    lay = TQLayout.from_preset("turboquant_k8v4", 256)
    c = random_case(seq_lens=[9001, 77], query_lens=[6, 6], num_heads=24, num_kv_heads=4, head_dim=256,
                    block_size=16, layout=lay, device="cuda")
    ref = _ref(c, lay, verify=True)
    out = _run_verify(c, lay, dot_bf16=True)
    assert not torch.isnan(out).any()
    assert rel_err(out, ref) < DEQ_BOUND
    c1 = random_case(seq_lens=[9001, 77], num_heads=24, num_kv_heads=4, head_dim=256, block_size=16,
                     layout=lay, device="cuda")
    out = _run_decode(c1, lay, dot_bf16=True)
    assert rel_err(out, _ref(c1, lay)) < DEQ_BOUND



def test_callers_split_workspace_is_used():
    """A caller's split workspace (as P67b preallocates one for CUDA graphs; larger than
    needed is fine) is written and gives the launcher's own result (decode and verify)."""
    from vllm_genesis.turboquant._launch import split_workspace

    c, lay, keep, ref = _decode_case(12, 2, 16, 128, 41)
    mid_o, mid_l = split_workspace(5, 2, 7, 6, 128, DEV)
    mid_o.fill_(float("nan"))
    a = _run_decode(c, lay, num_splits=5)
    b = _run_decode(c, lay, num_splits=5, workspace=(mid_o, mid_l))
    assert not torch.isnan(mid_o.flatten()[: 5 * 2 * 5 * 6 * 128]).all()  # the caller's buffer was written
    assert rel_err(a[keep], ref[keep]) < DEQ_BOUND
    assert torch.equal(a[keep], b[keep])
    cv = random_case(seq_lens=[77, 130], query_lens=[6, 3], num_heads=12, num_kv_heads=2, head_dim=128,
                     block_size=16, layout=lay, generator=torch.Generator().manual_seed(42), device=DEV)
    ws = split_workspace(2, 2, 3, 36, 128, DEV)
    va = _run_verify(cv, lay, num_splits=3)
    vb = _run_verify(cv, lay, num_splits=3, workspace=ws)
    assert rel_err(va, _ref(cv, lay, verify=True)) < DEQ_BOUND
    assert torch.equal(va, vb)
    with pytest.raises(ValueError, match="workspace too small"):
        _run_verify(cv, lay, num_splits=4, workspace=ws)


class _Planned(Exception):
    """Raised by a stand-in for the launcher's workspace allocation, once the plan is known."""


def _launch_splits(monkeypatch, launch) -> int:
    """The split count a launch allocates its split workspace for (the launch itself is cut short)."""
    from vllm_genesis.turboquant import _launch

    seen = []

    def record(batch, num_kv_heads, num_splits, rows, head_dim, device):
        seen.append(num_splits)
        raise _Planned

    monkeypatch.setattr(_launch, "split_workspace", record)
    with pytest.raises(_Planned):
        launch()
    return seen[0]


@pytest.mark.parametrize(
    "B, Hq, Hk, D, QL, blocks",
    [(1, 24, 4, 256, 6, 2048), (16, 16, 8, 128, 2, 512), (3, 12, 2, 64, 3, 64), (64, 32, 8, 128, 8, 256)],
)
def test_verify_num_splits_is_the_launchers_count(monkeypatch, B, Hq, Hk, D, QL, blocks):
    """P67b sizes its workspace and its CUDA-graph launch with verify_num_splits: it must be the
    count the launcher picks by itself, from the block table's capacity."""
    lay = TQLayout.from_preset("turboquant_k8v4", D)
    kv = torch.zeros(4, 16, Hk, lay.slot_size_aligned, dtype=torch.uint8, device=DEV)
    bt = torch.zeros(B, blocks, dtype=torch.int32, device=DEV)
    q = torch.zeros(B * QL, Hq, D, dtype=torch.bfloat16, device=DEV)
    lens = torch.full((B,), QL + 1, dtype=torch.int32, device=DEV)
    qsl = torch.arange(0, B * QL + 1, QL, dtype=torch.int32, device=DEV)
    planned = verify_num_splits(kv, B, Hq, D, QL, blocks * 16, lay)
    got = _launch_splits(monkeypatch, lambda: tq_verify_attention(q, None, None, kv, bt, lens, qsl, QL, layout=lay))
    assert got == planned
    if (B, D, QL) == (16, 128, 2):  # per-warp-state kernel: a quarter of pick_num_splits' count
        assert planned == max(1, pick_num_splits(B, Hk, blocks * 16) // 4) < pick_num_splits(B, Hk, blocks * 16)
    with pytest.raises(ValueError, match="query_len"):
        verify_num_splits(kv, B, Hq, D, 9, blocks * 16, lay)


def test_verify_beyond_64_rows_splits_the_query_tokens():
    """G = 16 with K+1 = 8 is 128 rows: the default runs the query rows on M in programs of
    at most 64 rows (two programs per split, four query tokens each) and matches float64;
    a request with fewer tokens leaves the second program's rows empty."""
    from vllm_genesis.turboquant._launch import launch_plan

    lay = TQLayout.from_preset("turboquant_k8v4", 64)
    tiles, _ = launch_plan(2, 2, 64, 16, 8, True, 160, True, 4, fp8_mma=True)
    assert tiles.rows_m and tiles.rsplit == 2
    c = random_case(seq_lens=[150, 37], query_lens=[8, 3], num_heads=32, num_kv_heads=2, head_dim=64,
                    block_size=16, layout=lay, generator=torch.Generator().manual_seed(3), device=DEV)
    out = _run_verify(c, lay, num_splits=2)
    assert not torch.isnan(out).any()
    assert rel_err(out, _ref(c, lay, verify=True)) < DEQ_BOUND


# ---------------------------------------------------------------- kernel "g" (Gluon, opt-in)


# Builds one Gluon kernel of the package for sm_90: argv = module, kernel, its constexprs (a
# Python expression; ``M`` is the module); prints the counts the tests look at, as JSON.
_GLUON_SM90_BUILD = """
import importlib, inspect, json, pathlib, re, subprocess, sys, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource

M = importlib.import_module("vllm_genesis.turboquant." + sys.argv[1])
jit = getattr(M, sys.argv[2])
consts = eval(sys.argv[3], {"M": M})
names = jit.arg_names
if "TL" in names and not consts.pop("TL_ON", False):
    consts.setdefault("TL", None)  # kernel "h"'s diagnostics timeline: off unless asked
for n, par in inspect.signature(jit.fn).parameters.items():  # constexprs not given: their defaults
    if n not in consts and par.default is not par.empty and "constexpr" in str(par.annotation):
        consts[n] = par.default
ptrs = {n: t for n, t in {"QR": "*bf16", "KV": "*u8", "BT": "*i32", "SeqLens": "*i32", "QStart": "*i32",
                          "MidO": "*fp32", "MidL": "*fp32", "TL": "*i64"}.items() if n in names and n not in consts}
sig = {n: ptrs.get(n, "constexpr" if n in consts else ("fp32" if n == "qk_scale" else "i32")) for n in names}
src = GluonASTSource(fn=jit, signature=sig, constexprs={(names.index(k),): v for k, v in consts.items()},
                     attrs={(names.index(n),): [["tt.divisibility", 16]] for n in ptrs})
opts = {"num_warps": M.NUM_WARPS}
if hasattr(M, "PRODUCER_MAXNREG"):  # kernel "hw": registers at launch (two programs an SM)
    opts["maxnreg"] = M.PRODUCER_MAXNREG
ck = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)
ir, ptx = ck.asm["ttgir"], ck.asm["ptx"]
# the main loop: the longest span from a label back to a branch to it that holds a warp-group
# product (kernel "hw": the consumer's, not the producer's)
labels = {m.group(1): m.start() for m in re.finditer(r"^(\\$L__\\w+):", ptx, re.M)}
spans = [(labels[m.group(1)], m.start()) for m in re.finditer(r"bra(?:\\.uni)?\\s+(\\$L__\\w+);", ptx)
         if labels.get(m.group(1), m.start()) < m.start()]
spans = [s for s in spans if "wgmma.mma_async" in ptx[slice(*s)]] or spans
loop = ptx[slice(*max(spans, key=lambda s: s[1] - s[0]))] if spans else ""
with tempfile.NamedTemporaryFile(suffix=".cubin") as f:  # registers and stack of the built kernel
    f.write(ck.asm["cubin"])
    f.flush()
    tool = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    usage = re.search(r"REG:(\\d+) STACK:(\\d+)", subprocess.run([str(tool), "-res-usage", f.name],
                      capture_output=True, text=True, check=True).stdout)
print(json.dumps({k: ir.count(k) for k in ("ttg.convert_layout", "ttg.local_store", "ttg.local_load")}
                 | {"mma": ptx.count("mma.sync.aligned.m16n8k16"), "wgmma": ptx.count("wgmma.mma_async"),
                    "cp_async": ptx.count("cp.async.ca.shared.global"),
                    "launch_dependents": ptx.count("griddepcontrol.launch_dependents"),
                    "timer": ptx.count("%globaltimer"), "prefetch": ptx.count("prefetch.global.L2"),
                    "prefetch_at": ptx.find("prefetch.global.L2"), "copies_at": ptx.find("cp.async.ca.shared.global"),
                    "last_product_at": ptx.rfind("wgmma.mma_async"),
                    "wait_prior": ptx.count("griddepcontrol.wait"),
                    "wait_before_copies": ptx.find("griddepcontrol.wait") < ptx.find("cp.async.ca.shared.global"),
                    "dependents_after_loop": ptx.rfind("wgmma.mma_async") < ptx.find("griddepcontrol"),
                    # kernel "v": the loop's last fp8 (scores) product, shared-memory store (V^T)
                    # and the first wait after those products; waits that leave one group running
                    "scores_at": ptx.rfind("e4m3.e4m3"), "store_at": ptx.rfind("st.shared"),
                    "scores_wait_at": ptx.find("wgmma.wait_group", ptx.rfind("e4m3.e4m3")),
                    "waits_leaving_one": ptx.count("wgmma.wait_group.sync.aligned 1;"),
                    "waits_leaving_two": ptx.count("wgmma.wait_group.sync.aligned 2;"),
                    "shared": ck.metadata.shared,
                    # the main loop's barriers and scores (fp8) products
                    "loop_barriers": loop.count("bar.sync"), "loop_scores": loop.count("e4m3.e4m3"),
                    # kernel "hw": the stage handed back, the proxy fence after the probabilities' store
                    "loop_arrive_at": loop.find("mbarrier.arrive.shared"), "loop_fence_at": loop.rfind("fence.proxy"),
                    # the N sizes of the fp8 (scores) products
                    "scores_n": sorted({int(n) for n in re.findall(r"m64n(\\d+)k32\\.f32\\.e4m3", ptx)}),
                    # kernel "hw": the copies' arrivals, the barrier waits, the partitions' registers
                    "copies_arrive": ptx.count("cp.async.mbarrier.arrive.noinc"),
                    "barrier_waits": ptx.count("mbarrier.try_wait"), "regs": int(usage.group(1)),
                    "setmaxnreg": sorted({int(n) for n in re.findall(r"setmaxnreg\\.\\w+\\.sync\\.aligned\\.u32\\s+(\\d+)", ptx)}),
                    "stack": int(usage.group(2))}))
"""


def _sm90_build(script: str, *args) -> dict:
    """Run a build script (compiles a kernel for sm_90 with Triton's own ptxas, no GPU needed)
    outside the interpreter; its last output line, as JSON."""
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2] / "kernels"), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-c", script, *(str(x) for x in args)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("group,page,block_n", [(6, 16, 64), (16, 16, 64), (6, 128, 64), (6, 16, 32)])
def test_gluon_decode_operands_stay_in_registers(group, page, block_n):
    """Kernel "g" builds for sm_90 (Triton's own ptxas; no GPU needed, and outside the
    interpreter) for pages smaller and larger than its tiles, groups of up to 8 and 16 heads
    and 32- and 64-token tiles; its operand conversions (fp8 key words and 4-bit code words -> tensor-core operands)
    and that of the scale/zero words to the score tile's tokens are asserted trivial while it
    is built (no data moves between threads), and the only shared memory it uses is the
    exchange of the warps' partial score tiles (one store, four loads a tile)."""
    consts = (f"dict(HK=4, G={group}, D=256, PAGE={page}, BLOCK_N={block_n}, SKP=4 * 388, SKH=388, "
              f"**M.g_layouts(256, {page}, {group}, {block_n}))")
    got = _sm90_build(_GLUON_SM90_BUILD, "_kernel_g", "_tq_decode_kernel_g", consts)
    # the loop runs two tiles a step: per tile the key and code operands, the scale/zero words
    # and the rescale factors (to the accumulator's layout); outside it the last tile's code
    # operand and rescale factors, the final sums and zero terms
    assert got["ttg.convert_layout"] == 2 * 4 + 4
    assert got["ttg.local_store"] == 2 and got["ttg.local_load"] == 2 * 4
    # per 64-token tile 16 score and 16 value products for each 8 query rows, and the last
    # tile's values
    assert got["mma"] == (2 * 32 + 16) * (2 if group > 8 else 1) * block_n // 64


@pytest.mark.parametrize("group,page,stages,ql,qpp,pdl,d", [(6, 16, 2, 1, 1, 1, 256), (8, 128, 3, 1, 1, 0, 256),
                                                             (1, 32, 2, 1, 1, 1, 256), (6, 16, 2, 6, 3, 1, 256),
                                                             (8, 16, 2, 4, 4, 0, 256), (4, 16, 2, 1, 1, 1, 128),
                                                             (1, 128, 3, 1, 1, 0, 128), (8, 16, 2, 4, 4, 1, 128)])
def test_hopper_decode_reads_keys_and_probabilities_from_shared_memory(group, page, stages, ql, qpp, pdl, d):
    """Kernel "h" builds for sm_90 (Triton's own ptxas, outside the interpreter) for head sizes
    256 and 128, groups of 1 to 8 heads, pages of 16 to 128 tokens, 2 or 3 key stages, and
    verify rows (6 query tokens over two programs of 3 x 6 rows, 4 tokens x 8 heads in one).
    Per 64-token tile it copies the keys with D / 8 four-byte ``cp.async`` per thread (the
    prologue fills STAGES - 1 stages) and runs 3 D / 32 warp-group products (D / 32 k-steps for
    the scores, the two query parts stacked as the columns of one operand; D / 64 row blocks x
    4 k-steps for the values; at D = 128 two
    lanes share each code word, each converting half of its codes); the only shared-memory
    store is the probability tile, and no
    operand is read back from shared memory into registers (the products read the keys and the
    probabilities where they lie; the code operand's layout conversions are asserted trivial
    while it is built). With ``PDL`` it lets the combine be launched once its products are done
    (one ``griddepcontrol.launch_dependents`` after the last product), and not without it."""
    slot = d + d // 2 + 4
    consts = dict(HK=4, G=group, D=d, PAGE=page, STAGES=stages, SKP=4 * slot, SKH=slot,
                  R=max(8, 1 << (qpp * group - 1).bit_length()), QL=ql, QPP=qpp, RSPLIT=-(-ql // qpp),
                  HAS_QSTART=ql > 1, PDL=bool(pdl))
    got = _sm90_build(_GLUON_SM90_BUILD, "_kernel_h", "_tq_decode_kernel_h", repr(consts))
    assert got["wgmma"] == d // 32 + (d // 64) * 4
    assert got["scores_n"] == [2 * consts["R"]]  # [hi rows; lo rows]: one operand of 2 R columns
    assert got["cp_async"] == d // 8 * stages
    assert got["ttg.local_store"] == 1 and got["ttg.local_load"] == 0
    assert got["launch_dependents"] == pdl
    if pdl:
        assert got["dependents_after_loop"]
    assert got["timer"] == 0  # the diagnostics timeline is off
    assert got["wait_prior"] == 0  # not a programmatic dependent launch
    assert got["prefetch"] == 0  # no L2 prefetch unless asked


@pytest.mark.parametrize("d,ql,qpp", [(256, 1, 1), (128, 1, 1), (256, 4, 4)])
def test_hopper_decode_prefetch_build(d, ql, qpp):
    """Kernel "h" with the L2 prefetch (``PF``) issues one prefetch a thread and tile, inside
    the loop, with the products and copies of the plain build."""
    slot = d + d // 2 + 4
    consts = dict(HK=4, G=6, D=d, PAGE=16, STAGES=2, SKP=4 * slot, SKH=slot, R=8 if qpp == 1 else 32, QL=ql,
                  QPP=qpp, HAS_QSTART=ql > 1, PDL=True, PF=1)
    got = _sm90_build(_GLUON_SM90_BUILD, "_kernel_h", "_tq_decode_kernel_h", repr(consts))
    assert got["prefetch"] == 1
    assert got["copies_at"] < got["prefetch_at"] < got["last_product_at"]  # after the prologue's copies
    assert got["wgmma"] == d // 32 + (d // 64) * 4 and got["cp_async"] == d // 8 * 2


@pytest.mark.parametrize("stages", [2, 3])
def test_hopper_decode_early_build_waits_before_the_cache(stages):
    """Kernel "h" built as a programmatic dependent launch (``EARLY``) waits once for the
    kernel before it, and before its first cache copy; the products and copies are those of
    the plain build."""
    consts = dict(HK=4, G=6, D=256, PAGE=16, STAGES=stages, SKP=4 * 388, SKH=388, R=8, PDL=True, EARLY=True)
    got = _sm90_build(_GLUON_SM90_BUILD, "_kernel_h", "_tq_decode_kernel_h", repr(consts))
    assert got["wait_prior"] == 1 and got["wait_before_copies"]
    assert got["wgmma"] == 8 + 4 * 4 and got["cp_async"] == 32 * stages
    assert got["launch_dependents"] == 1


def test_hopper_decode_timeline_build():
    """Kernel "h" with its diagnostics timeline (``tools/bench/tq_timeline.py``) builds for
    sm_90 and reads the global timer three times (start, loop end, end), with the same
    products and copies as the plain build."""
    consts = dict(HK=4, G=6, D=256, PAGE=16, STAGES=2, SKP=4 * 388, SKH=388, R=8, PDL=False, TL_ON=True)
    got = _sm90_build(_GLUON_SM90_BUILD, "_kernel_h", "_tq_decode_kernel_h", repr(consts))
    assert got["timer"] == 3
    assert got["wgmma"] == 8 + 4 * 4 and got["cp_async"] == 32 * 2


@pytest.mark.parametrize("group,page,stages,pdl,early", [(6, 16, 2, True, False), (8, 128, 2, False, True),
                                                      (1, 32, 3, True, True)])
def test_hopper_decode_producer_warp_build(group, page, stages, pdl, early):
    """Kernel "h" with its key producer warp (``_kernel_hw``) builds for sm_90 with 128
    registers a thread at launch and no spills: the producer partition gives back all but
    ``PREGS`` registers, the products' warp group takes them. The producer copies a whole
    64-token tile (D / 8 x 4 four-byte ``cp.async`` a lane) and lets them arrive on the stage's
    barrier (one ``cp.async.mbarrier.arrive``); the consumer waits on one barrier a tile and
    runs the products of kernel "h" (8 scores + 16 values a tile) and nothing of the copies."""
    from vllm_genesis.turboquant import _kernel_hw

    consts = dict(HK=4, G=group, D=256, PAGE=page, STAGES=stages, SKP=4 * 388, SKH=388, R=8, PDL=pdl, EARLY=early)
    got = _sm90_build(_GLUON_SM90_BUILD, "_kernel_hw", "_tq_decode_kernel_hw", repr(consts))
    assert got["regs"] == _kernel_hw.PRODUCER_MAXNREG and got["stack"] == 0
    import inspect

    preg = inspect.signature(_kernel_hw._tq_decode_kernel_hw.fn).parameters["PREGS"].default
    assert {preg, 2 * _kernel_hw.PRODUCER_MAXNREG - preg} <= set(got["setmaxnreg"])
    assert got["cp_async"] == 256 // 8 * 4 and got["copies_arrive"] == 1
    assert got["barrier_waits"] == 2  # the producer's wait for a free stage, the consumer's for its keys
    assert got["wgmma"] == 8 + 4 * 4
    # EARLY: each partition waits for the kernel before once, after its first block ids
    assert got["launch_dependents"] == pdl and got["wait_prior"] == 2 * early
    if early:
        assert got["wait_before_copies"]


@pytest.mark.parametrize("kernel,consts", [
    ("hw", dict(G=6, STAGES=2, R=8, PDL=True)), ("hw", dict(G=8, STAGES=3, R=8, PDL=False, EARLY=True)),
    ("h", dict(G=6, STAGES=2, R=8)), ("h", dict(G=6, STAGES=2, R=16, QL=2, QPP=2, HAS_QSTART=True))],
    ids=["hw", "hw-3stages-early", "h-decode", "h-verify"])
def test_hopper_decode_warp_max_needs_fewer_barriers(kernel, consts):
    """Kernels "h" and "hw" with the softmax's maximum across the warps in one exchange of its
    own (``TileConfig.warp_max``): no more barriers a tile than Triton's reduction takes (with
    Triton 3.6 two fewer in kernel "hw" and one in kernel "h"); kernel "hw" keeps three (the
    exchange, the one before the stage is handed back, the one before P V) and hands the key
    stage back after the probabilities' store; the same products, copies, registers and no
    spills."""
    name = {"h": ("_kernel_h", "_tq_decode_kernel_h"), "hw": ("_kernel_hw", "_tq_decode_kernel_hw")}[kernel]
    base = dict(HK=4, D=256, PAGE=16, SKP=4 * 388, SKH=388) | consts
    plain = _sm90_build(_GLUON_SM90_BUILD, *name, repr(base))
    xmax = _sm90_build(_GLUON_SM90_BUILD, *name, repr(base | dict(XMAX=True)))
    assert xmax["loop_barriers"] <= plain["loop_barriers"]
    if kernel == "hw":
        assert xmax["loop_barriers"] == 3
        assert 0 <= plain["loop_arrive_at"] < plain["loop_fence_at"]  # the stage back before P's store
        assert 0 <= xmax["loop_fence_at"] < xmax["loop_arrive_at"]  # after it
    else:
        assert xmax["loop_barriers"] <= 5
    assert (xmax["wgmma"], xmax["cp_async"], xmax["loop_scores"]) == (plain["wgmma"], plain["cp_async"],
                                                                      plain["loop_scores"])
    assert xmax["stack"] == 0 and xmax["regs"] <= max(plain["regs"], 168)


@pytest.mark.parametrize("group,page,stages,ql,bn,pdl,d", [(6, 16, 2, 6, 64, 1, 256), (8, 128, 3, 8, 64, 0, 256),
                                                           (4, 32, 2, 2, 32, 1, 256), (8, 16, 2, 4, 32, 0, 256),
                                                           (8, 16, 2, 8, 64, 1, 128), (6, 32, 3, 6, 32, 0, 128)])
def test_hopper_verify_builds_its_operands_in_shared_memory(group, page, stages, ql, bn, pdl, d):
    """Kernel "v" builds for sm_90 (Triton's own ptxas) for head sizes 256 and 128, 8 to 64
    rows, pages of 16 to 128 tokens, 2 or 3 stages and 32- or 64-token tiles. Per tile each
    thread copies the keys (tokens x D bytes), the code words (tokens x D / 8) and the
    scale/zero word with 4-byte ``cp.async`` (64 tokens at D = 256: 32 + 16 + 1; the prologue
    fills STAGES - 1 stages), the scores take D / 16 warp-group products (D / 32 k-steps x 2
    query parts; D / 32 for at most 32 rows, whose two parts are stacked on M) and P V one per
    16 tokens; the tile's V^T is the only shared-memory store
    and the codes and scale/zero words the only loads from it; with ``PDL`` it lets the
    combine be launched once, after its products."""
    slot = d + d // 2 + 4
    consts = dict(HK=4, G=group, D=d, PAGE=page, STAGES=stages, SKP=4 * slot, SKH=slot, QL=ql, BN=bn, PDL=bool(pdl))
    got = _sm90_build(_GLUON_SM90_BUILD, "_kernel_v", "_tq_verify_kernel_v", repr(consts))
    assert got["wgmma"] == d // 32 * (1 if group * ql <= 32 else 2) + bn // 16
    assert got["cp_async"] == (bn * d // 512 + bn * d // 1024 + 1) * stages
    assert got["ttg.local_store"] == 1 and got["ttg.local_load"] == 2
    assert got["launch_dependents"] == pdl
    # the default products (pipe 0) are waited for at once: V^T is stored before the scores'
    assert got["scores_at"] > got["store_at"] and got["waits_leaving_one"] == 0


def test_kernel_v_rejects_an_unknown_pipe():
    """``TileConfig.pipe`` outside 0-4, V^T halves on 32-token tiles and a split ring of other
    than two stages are refused when the tiles are made, before anything is built or launched."""
    with pytest.raises(ValueError, match="pipe 5 is not one of 0-4"):
        TileConfig(64, 4, 2, "v", pipe=5)
    assert TileConfig(64, 4, 2, "v", pipe=4).pipe == 4
    # V^T in halves splits a 64-token tile; a 32-token tile asking for it is refused too
    with pytest.raises(ValueError, match="V\\^T halves need 64-token tiles, not 32"):
        TileConfig(32, 4, 2, "v", pipe=3, v_halves=True)
    assert TileConfig(64, 4, 2, "v", pipe=3, v_halves=True).v_halves
    # a split ring has exactly two stages
    with pytest.raises(ValueError, match="a split ring has 2 stages, not 3"):
        TileConfig(64, 4, 3, "v", pipe=3, split_ring=True)
    assert TileConfig(64, 4, 2, "v", pipe=3, split_ring=True).split_ring


@pytest.mark.parametrize("launcher,kernel,tiles,flag", [
    ("_launch_v", "_kernel_v._tq_verify_kernel_v", dict(split_ring=True), ("SPLIT_RING", True)),
    ("_launch_v", "_kernel_v._tq_verify_kernel_v", dict(), ("SPLIT_RING", False)),
    ("_launch_h", "_kernel_h._tq_decode_kernel_h", dict(warp_max=True), ("XMAX", True)),
    ("_launch_h", "_kernel_hw._tq_decode_kernel_hw", dict(warp_max=True, producer=True), ("XMAX", True)),
    ("_launch_h", "_kernel_h._tq_decode_kernel_h", dict(), ("XMAX", None))],
    ids=["v-split-ring", "v-plain", "h-warp-max", "hw-warp-max", "h-plain"])
def test_launchers_pass_the_opt_in_builds_on(monkeypatch, launcher, kernel, tiles, flag):
    """``split_ring`` and ``warp_max`` reach the kernels as their constexprs (``SPLIT_RING``,
    ``XMAX``; the plain launches leave ``XMAX`` unset, so that the plans' builds stay as they
    were): the launchers run with the kernels replaced by recorders, on CPU tensors."""
    import importlib

    from vllm_genesis.turboquant import _launch

    module, name = kernel.split(".")
    mod = importlib.import_module(f"vllm_genesis.turboquant.{module}")
    seen = []

    class Recorder:
        def __getitem__(self, grid):
            return lambda *args, **kw: seen.append(kw)

    monkeypatch.setattr(mod, name, Recorder())
    d, hk, page = 256, 4, 16
    qr = torch.zeros(2, 24, d, dtype=torch.bfloat16)
    cache = torch.zeros(8, page, hk, d + d // 2 + 4, dtype=torch.uint8)
    bt = torch.zeros(1, 8, dtype=torch.int32)
    lens = torch.full((1,), 100, dtype=torch.int32)
    common = (qr, cache, bt, lens, lens, None, None, 8, 1.0, 1, 6, d, page)
    if launcher == "_launch_v":
        _launch._launch_v(*common, 2, pipe=3, v_halves=True, **tiles)
    else:
        _launch._launch_h(*common, 1, False, **tiles)
    assert len(seen) == 1
    assert seen[0].get(flag[0]) == flag[1]


@pytest.mark.parametrize("pipe,d,ql", [(1, 256, 6), (2, 256, 6), (3, 256, 6), (4, 128, 6), (4, 256, 6), (2, 128, 6),
                                       (1, 256, 4), (4, 128, 5)])
def test_hopper_verify_overlaps_its_products(pipe, d, ql):
    """Kernel "v" with ``pipe`` (TileConfig): the scores' warp-group products are issued before
    the tile's V^T is built and stored, and waited for only after that store; with ``pipe`` 3
    or 4 P V is left running into the next tile (a wait that leaves one group in flight). The
    same products and copies as the plain build (24 and 30 rows: the query's parts stacked on
    M, one scores product a k step)."""
    slot = d + d // 2 + 4
    consts = dict(HK=4, G=6, D=d, PAGE=16, STAGES=2, SKP=4 * slot, SKH=slot, QL=ql, BN=64, PDL=True, PIPE=pipe)
    got = _sm90_build(_GLUON_SM90_BUILD, "_kernel_v", "_tq_verify_kernel_v", repr(consts))
    assert got["wgmma"] == d // 32 * (1 if 6 * ql <= 32 else 2) + 4 and got["cp_async"] == (d // 8 + d // 16 + 1) * 2
    assert got["scores_at"] < got["store_at"] < got["scores_wait_at"]
    assert got["waits_leaving_one"] == (pipe >= 3)


@pytest.mark.parametrize("pipe,group,ql", [(3, 6, 6), (0, 8, 8), (1, 8, 5), (4, 6, 4)])
def test_hopper_verify_builds_v_in_halves(pipe, group, ql):
    """Kernel "v" with V^T in two halves of 32 tokens (``TileConfig.v_halves``, D = 256): the
    second half is built in the tile's key stage, so the build takes 16 KB less shared memory
    than with the whole V^T, and for 33-64 rows (the plan's) it falls within the sizes the
    launcher asks the larger L1 for, where the whole V^T does not; the same copies and
    products, two V^T stores a tile; with ``pipe`` 3 or 4 both halves' products are left
    running (a wait that leaves two groups) and waited for before the next tile's barrier."""
    from vllm_genesis.turboquant._carveout import TRITON_PREFER_SHARED_ABOVE
    from vllm_genesis.turboquant._launch import V_CARVEOUT_MAX_SHARED

    consts = dict(HK=4, G=group, D=256, PAGE=16, STAGES=2, SKP=4 * 388, SKH=388, QL=ql, BN=64, PDL=True, PIPE=pipe)
    whole = _sm90_build(_GLUON_SM90_BUILD, "_kernel_v", "_tq_verify_kernel_v", repr(consts))
    halves = _sm90_build(_GLUON_SM90_BUILD, "_kernel_v", "_tq_verify_kernel_v", repr(consts | dict(VHALF=True)))
    assert whole["shared"] - halves["shared"] == 256 * 32 * 2
    if group * ql > 32:
        assert TRITON_PREFER_SHARED_ABOVE < halves["shared"] <= V_CARVEOUT_MAX_SHARED < whole["shared"]
    assert (halves["wgmma"], halves["cp_async"]) == (whole["wgmma"], whole["cp_async"])
    assert halves["ttg.local_store"] == 2 and halves["ttg.local_load"] == 3
    assert halves["waits_leaving_two"] == (pipe >= 3) and halves["waits_leaving_one"] == 0
    assert halves["stack"] <= whole["stack"]


@pytest.mark.parametrize("pipe,halves,group,ql", [(3, True, 6, 6), (1, False, 6, 6), (4, False, 6, 4), (0, True, 8, 8)])
def test_hopper_verify_split_ring_keeps_to_its_own_barriers(pipe, halves, group, ql):
    """Kernel "v" with the ring's two stages as buffers of their own and the loop unrolled by two
    (``TileConfig.split_ring``): a tile's only barriers are the one after the copy wait, the
    loop's own at the tile's start and before P V, and with V^T in halves the one before the
    second half; no more than the plain loop's (Triton 3.6 adds two there, for a ring indexed
    at run time, later versions none); the same copies and products a tile and the same
    shared memory."""
    consts = dict(HK=4, G=group, D=256, PAGE=16, STAGES=2, SKP=4 * 388, SKH=388, QL=ql, BN=64, PDL=True, PIPE=pipe,
                  VHALF=halves)
    plain = _sm90_build(_GLUON_SM90_BUILD, "_kernel_v", "_tq_verify_kernel_v", repr(consts))
    split = _sm90_build(_GLUON_SM90_BUILD, "_kernel_v", "_tq_verify_kernel_v", repr(consts | dict(SPLIT_RING=True)))
    per_tile = 256 // 32 * (1 if group * ql <= 32 else 2)  # scores products a tile
    assert plain["loop_scores"] == per_tile and split["loop_scores"] == 2 * per_tile  # the loop holds two tiles
    assert split["loop_barriers"] == 2 * (3 + halves) <= 2 * plain["loop_barriers"]
    tile = 256 // 8 + 256 // 16 + 1  # copies a tile (keys, code words, scale/zero words)
    assert (plain["cp_async"], split["cp_async"]) == (2 * tile, 3 * tile)  # the prologue's and the loop's
    assert split["wgmma"] == 2 * plain["wgmma"]  # every product is in the loop
    assert split["shared"] == plain["shared"]


_COMBINE_BUILD = """
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from vllm_genesis.turboquant._kernels import _tq_combine_kernel as jit

pdl, tail, launch = (int(x) for x in sys.argv[1:4])
names = jit.arg_names
ptrs = {"MidO": "*fp32", "MidL": "*fp32", "Q": "*bf16", "KR": "*bf16", "VR": "*bf16", "Out": "*bf16",
        "SeqLens": "*i32", "QStart": "*i32"}
consts = dict(HK=4, G=6, QL=6 if tail else 1, ROWS=36 if tail else 6, D=256, DC=64, S_CHUNK=64,
              QL_PAD=8 if tail else 2, RAW_TAIL=bool(tail), HAS_QSTART=bool(tail), PDL=bool(pdl))
sig = {n: ptrs.get(n, "constexpr" if n in consts else ("fp32" if n == "qk_scale" else "i32")) for n in names}
src = ASTSource(fn=jit, signature=sig, constexprs={(names.index(k),): v for k, v in consts.items()})
ck = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "launch_pdl": bool(launch)})
ptx = ck.asm["ptx"]
wait = ptx.find("griddepcontrol.wait")
loads = [i for i in range(len(ptx)) if ptx.startswith("ld.global", i)]
print(json.dumps({"wait": ptx.count("griddepcontrol.wait"), "loads": len(loads),
                  "loads_before_wait": sum(i < wait for i in loads), "launch_pdl": ck.metadata.launch_pdl}))
"""


@pytest.mark.parametrize("pdl,tail,launch", [(1, 0, 1), (1, 0, 0), (0, 0, 0), (0, 1, 0)],
                         ids=["graph-decode", "eager", "plain", "plain-verify"])
def test_combine_after_kernel_h_waits_for_it_before_any_load(pdl, tail, launch):
    """The decode combine after kernels "h" and "v" (sm_90 build, Triton's own ptxas) waits
    for stage 1's grid (``griddepcontrol.wait``) before its first global load, built for a
    programmatic dependent launch (inside CUDA graphs) or a plain one (eager calls: the wait
    returns at once); without ``PDL`` neither the decode nor the verify combine has a wait."""
    got = _sm90_build(_COMBINE_BUILD, pdl, tail, launch)
    assert got["loads"] > 0
    assert got["wait"] == pdl and got["launch_pdl"] == bool(launch)
    assert got["loads_before_wait"] == 0


def test_verify_combine_reads_only_its_raw_tail_before_the_wait():
    """The verify combine after kernels "h" and "v" inside CUDA graphs reads the sequence
    metadata and the raw K+1 tail (none of which stage 1 writes) before it waits for stage
    1's grid, and the split partials after the wait: as many loads there as the decode
    combine, which reads nothing else, makes."""
    decode = _sm90_build(_COMBINE_BUILD, 1, 0, 1)
    verify = _sm90_build(_COMBINE_BUILD, 1, 1, 1)
    assert verify["wait"] == 1 and verify["launch_pdl"]
    assert verify["loads_before_wait"] > 0
    assert verify["loads"] - verify["loads_before_wait"] == decode["loads"] > 0


def _partial_columns(order: int, d: int) -> torch.Tensor:
    """The head column that each partial column holds, from the stage-1 kernels' definitions:
    0 the head's order; 1 kernel "v" (column W j + i holds head column 8 i + j, W = D / 8); 2
    kernel "h" at D = 256 (partials in the value operand's row order: row 128 j2 + 64 j1 +
    16 (i // 8) + 8 j0 + i % 8 holds code j = 4 j2 + 2 j1 + j0 of code word i, head column
    8 i + j)."""
    held = torch.arange(d)
    w = d // 8
    for i in range(w):
        for j in range(8):
            if order == 1:
                held[w * j + i] = 8 * i + j
            elif order == 2:
                held[128 * (j >> 2) + 64 * ((j >> 1) & 1) + 16 * (i // 8) + 8 * (j & 1) + i % 8] = 8 * i + j
    return held


@pytest.mark.parametrize("order,num_splits", [(0, 5), (1, 3), (2, 3), (2, 70)])
def test_combine_puts_partial_columns_back_in_head_order(order, num_splits):
    """The combine merges split partials stored in kernel "v"'s and kernel "h"'s (D = 256)
    column orders into the head's order (the order codes the launcher passes, against the
    column maps written out from the kernels' operand rows), over one and over several
    split chunks."""
    from vllm_genesis.turboquant._kernel_h import PARTIAL_ORDER_H
    from vllm_genesis.turboquant._kernel_v import PARTIAL_ORDER_V
    from vllm_genesis.turboquant._kernels import _tq_combine_kernel
    from vllm_genesis.turboquant._launch import combine_chunk

    assert (PARTIAL_ORDER_V, PARTIAL_ORDER_H) == (1, 2)
    d, g, hk = 256, 2, 2
    held = _partial_columns(order, d)
    assert sorted(held.tolist()) == list(range(d))
    gen = torch.Generator().manual_seed(5)
    true_o = torch.randn(1, hk, num_splits, g, d, generator=gen)
    lse = torch.randn(1, hk, num_splits, g, generator=gen) * 3
    lse[0, 0, 1, 0] = float("-inf")  # a split that saw no token
    mid_o = torch.empty_like(true_o)
    mid_o[..., torch.arange(d)] = true_o[..., held]
    w = torch.exp2(lse - lse.amax(2, keepdim=True))
    want = (w[..., None] * true_o).sum(2) / w.sum(2)[..., None]  # [1, hk, g, d]
    q = torch.zeros(1, hk * g, d, dtype=torch.bfloat16)
    out = torch.full_like(q, float("nan"))
    seq = torch.tensor([9], dtype=torch.int32)
    mid_o, mid_l, q, out, seq = (t.to(DEV) for t in (mid_o, lse, q, out, seq))
    s_chunk = min(combine_chunk(num_splits), 64)
    dc = max(16, min(d, 4096 // s_chunk))
    _tq_combine_kernel[(g * (d // dc), hk, 1)](
        mid_o, mid_l, q, q, q, out, seq, seq, q.stride(0), q.stride(1), q.stride(0), q.stride(1), q.stride(0),
        q.stride(1), out.stride(0), out.stride(1), num_splits, 1.0, HK=hk, G=g, QL=1, ROWS=g, D=d, DC=dc,
        S_CHUNK=s_chunk, QL_PAD=2, RAW_TAIL=False, HAS_QSTART=False, PERM=order)
    got = out.float().cpu().reshape(hk, g, d)
    assert not torch.isnan(got).any()
    assert rel_err(got, want.reshape(hk, g, d)) < 1e-2


def test_verify_combines_in_one_warp_decode_in_four(monkeypatch):
    """The combine's launch (``combine_shape``): a verify call merges its splits with one warp
    a program, a decode call with four; either way a program holds at most 4096 partial
    values of a step, and the output is the float64 reference's."""
    from vllm_genesis.turboquant import _launch

    launched = []
    kernel = _launch._tq_combine_kernel

    class Logged:
        def __getitem__(self, grid):
            def run(*args, **kwargs):
                launched.append((kwargs["num_warps"], kwargs["S_CHUNK"] * kwargs["DC"]))
                return kernel[grid](*args, **kwargs)
            return run

    monkeypatch.setattr(_launch, "_tq_combine_kernel", Logged())
    lay = TQLayout.from_preset("turboquant_k8v4", 64)
    c = random_case(seq_lens=[41, 70], query_lens=[3, 3], num_heads=6, num_kv_heads=2, head_dim=64,
                    block_size=16, layout=lay, device=DEV)
    got = tq_verify_attention(c["query"], c["key"], c["value"], c["kv_cache"], c["block_table"], c["seq_lens"],
                              c["query_start_loc"], 3, layout=lay, num_splits=3)
    assert rel_err(got.float().cpu(), _ref(c, lay, verify=True).float().cpu()) < DEQ_BOUND
    d = random_case(seq_lens=[41, 70], query_lens=[1, 1], num_heads=6, num_kv_heads=2, head_dim=64,
                    block_size=16, layout=lay, device=DEV)
    tq_decode_attention(d["query"], d["kv_cache"], d["block_table"], d["seq_lens"], layout=lay, num_splits=3)
    assert [w for w, _ in launched] == [1, 4]
    assert all(n <= 4096 for _, n in launched)
    assert _launch.combine_shape(128, 256, True) == (128, 32, 1)
    assert _launch.combine_shape(3, 128, False) == (4, 128, 4)


def test_combine_is_a_dependent_launch_only_inside_graphs_or_when_asked():
    """Eager calls launch the combine plainly (a programmatic dependent launch costs host
    time); inside a CUDA-graph capture, or inside ``programmatic_combine(True)`` (the warm-up),
    it is one; the setting is restored when the block ends, also on an error."""
    from vllm_genesis.turboquant import _launch

    assert _launch._pdl_launch() is False
    with _launch.programmatic_combine(True):
        assert _launch._pdl_launch() is True
        with _launch.programmatic_combine(False):
            assert _launch._pdl_launch() is False
        assert _launch._pdl_launch() is True
    with pytest.raises(RuntimeError), _launch.programmatic_combine(True):
        raise RuntimeError("boom")
    assert _launch._pdl_launch() is False


def test_gluon_kernel_request_falls_back_where_it_cannot_run():
    """``TileConfig(kernel="g")`` or ``"h"`` where the kernel cannot run (here: the interpreter,
    or on a GPU D = 128, and for "g" a verify batch) gives the Triton kernels' result."""
    c, lay, keep, ref = _decode_case(24, 4, 16, 256, 7)
    for tiles in (TileConfig(64, 4, 1, "g"), TileConfig(64, 4, 2, "h")):
        out = _run_decode(c, lay, tiles=tiles)
        assert not torch.isnan(out[keep]).any()
        assert rel_err(out[keep], ref[keep]) < DEQ_BOUND
    cv = random_case(seq_lens=[77, 130], query_lens=[3, 2], num_heads=16, num_kv_heads=2, head_dim=128,
                     block_size=16, layout=TQLayout.from_preset("turboquant_k8v4", 128), device=DEV)
    lay128 = TQLayout.from_preset("turboquant_k8v4", 128)
    for tiles in (TileConfig(64, 4, 1, "g"), TileConfig(64, 4, 2, "h")):
        out = _run_verify(cv, lay128, tiles=tiles)
        assert rel_err(out, _ref(cv, lay128, verify=True)) < DEQ_BOUND


def _count_calls(monkeypatch, launcher: str) -> list:
    """Wraps ``_launch.<launcher>`` so that each call appends to the returned list."""
    from vllm_genesis.turboquant import _launch

    calls = []
    real = getattr(_launch, launcher)
    monkeypatch.setattr(_launch, launcher, lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def _check_gluon_decode(launcher, seqs, hq, page, tiles, monkeypatch, d=256, hk=4):
    """A k8v4 decode (D = 256 unless told) with NaN bytes past each sequence's end against
    float64, through ``_launch.<launcher>``, which must actually be called."""
    calls = _count_calls(monkeypatch, launcher)
    lay = TQLayout.from_preset("turboquant_k8v4", d)
    c = random_case(seq_lens=seqs, num_heads=hq, num_kv_heads=hk, head_dim=d, block_size=page, layout=lay,
                    device="cuda")
    _poison_past_end(c, seqs, page)
    keep = [i for i, L in enumerate(seqs) if L > 0]
    out = _run_decode(c, lay, tiles=tiles)
    assert calls, f"{launcher} was not called"
    assert not torch.isnan(out[keep]).any()
    assert rel_err(out[keep], _ref(c, lay)[keep]) < DEQ_BOUND


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "seqs,hq,page,tiles",
    [([32775], 24, 16, TileConfig(64, 4, 1, "g")),
     ([203, 1, 0, 95, 33, 4099], 64, 16, TileConfig(64, 4, 1, "g")),
     ([4099, 77, 1, 130], 24, 128, TileConfig(64, 4, 1, "g")),
     ([999, 64], 32, 32, TileConfig(64, 4, 1, "g")),
     ([131075, 31], 24, 16, TileConfig(32, 4, 1, "g", maxnreg=168))],
    ids=["32K-gqa6", "B6-gqa16", "pages128", "pages32-gqa8", "128K-tiles32"],
)
def test_gluon_decode_on_gpu(seqs, hq, page, tiles, monkeypatch):
    _check_gluon_decode("_launch_g", seqs, hq, page, tiles, monkeypatch)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "seqs,hq,page,tiles",
    [([32775], 24, 16, None),
     ([203, 1, 0, 95, 33, 4099], 32, 16, None),
     ([4099, 77, 1, 130], 24, 128, TileConfig(64, 4, 3, "h")),
     ([999, 64], 4, 32, None),
     ([131075, 31], 24, 16, None),
     ([203, 1, 0, 95, 33, 4099], 32, 16, TileConfig(64, 4, 2, "h", producer=True)),
     ([4099, 77, 1, 130], 24, 128, TileConfig(64, 4, 3, "h", producer=True)),
     ([32775], 24, 16, TileConfig(64, 4, 2, "h", producer=True, warp_max=True)),
     ([203, 1, 0, 95, 33, 4099], 32, 16, TileConfig(64, 4, 2, "h", warp_max=True)),
     ([4099, 77, 1, 130], 24, 128, TileConfig(64, 4, 3, "h", producer=True, warp_max=True))],
    ids=["32K-gqa6", "B6-gqa8", "pages128-3stages", "pages32-mha", "128K", "B6-gqa8-producer",
         "pages128-3stages-producer", "32K-gqa6-producer-warpmax", "B6-gqa8-warpmax",
         "pages128-3stages-producer-warpmax"],
)
def test_hopper_decode_on_gpu(seqs, hq, page, tiles, monkeypatch):
    """Kernel "h", the default decode on Hopper where it applies (and on request, with and
    without its key producer warp), against float64: empty, one-token and odd lengths, groups
    of 1, 6 and 8, pages of 16 to 128, NaN bytes past each sequence's end; the test asserts the
    kernel actually launched. The plan runs the 32K and the pages-of-32 cases with the
    producer warp (at most two programs an SM), the others without."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("kernel h needs a Hopper GPU")
    _check_gluon_decode("_launch_h", seqs, hq, page, tiles, monkeypatch)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("seqs,producer", [([32775, 4099, 17], False), ([32775], True)])
def test_hopper_decode_in_a_graph_waits_for_the_cache_write(monkeypatch, seqs, producer):
    """In a CUDA graph kernel "h" is a programmatic dependent launch of the kernel before it
    (``EARLY``): there, a kernel that writes the whole cache. Before each replay the cache is
    filled with NaN bytes; every replay's output must match float64 on the copied cache, so
    no key or value was read before the copy ended. One request of 32K runs the key producer
    warp's build (each partition waits for itself), three requests the plain one."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("kernel h needs a Hopper GPU")
    from vllm_genesis.turboquant import _launch

    early = []
    real = _launch._launch_h
    monkeypatch.setattr(_launch, "_launch_h",
                        lambda *a, **k: early.append((k.get("early"), k.get("producer"))) or real(*a, **k))
    lay = TQLayout.from_preset("turboquant_k8v4", 256)
    c = random_case(seq_lens=seqs, num_heads=24, num_kv_heads=4, head_dim=256, block_size=16,
                    layout=lay, device="cuda")
    ref = _ref(c, lay)
    cache = torch.full_like(c["kv_cache"], 0x7F)  # fp8 e4m3 NaN
    out = torch.empty_like(c["query"])

    def step():  # the copy as a kernel (``copy_`` would be a memcpy node)
        torch.add(c["kv_cache"].view(torch.int32), 0, out=cache.view(torch.int32))
        tq_decode_attention(c["query"], cache, c["block_table"], c["seq_lens"], layout=lay, out=out, overlap_prior=True)

    with _launch.programmatic_combine(True):  # builds the graph's variants outside the capture
        step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    assert early[-1] == (True, producer)
    for _ in range(20):
        cache.fill_(0x7F)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert not torch.isnan(out).any()
        assert rel_err(out, ref) < DEQ_BOUND


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "seqs,hq,hk,page,tiles",
    [([32775], 32, 8, 16, None),
     ([203, 1, 0, 95, 33, 4099], 16, 2, 16, None),
     ([4099, 77, 1, 130], 8, 8, 128, TileConfig(64, 4, 3, "h"))],
    ids=["32K-gqa4", "B6-gqa8", "pages128-mha-3stages"],
)
def test_hopper_decode_d128_on_gpu(seqs, hq, hk, page, tiles, monkeypatch):
    """Kernel "h" at D = 128 (two lanes a code word), the default decode there on Hopper too,
    against float64: empty, one-token and odd lengths, groups of 1, 4 and 8, pages of 16 and
    128, NaN bytes past each sequence's end; the test asserts the kernel actually launched."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("kernel h needs a Hopper GPU")
    _check_gluon_decode("_launch_h", seqs, hq, page, tiles, monkeypatch, d=128, hk=hk)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("seqs,qls,hq,hk,d", [([32771], [4], 32, 8, 128), ([2051, 7, 300], [8, 1, 3], 32, 8, 128),
                                              ([999, 4100], [5, 2], 24, 4, 128),
                                              ([4099 + 13 * i for i in range(32)], [2, 1, 2, 2] * 8, 32, 8, 128),
                                              ([32771], [8], 64, 8, 128), ([2051, 7, 300], [6, 1, 3], 24, 4, 128),
                                              ([999, 4100, 17], [5, 2, 5], 64, 8, 128),
                                              ([32771], [2], 24, 4, 256), ([999, 4100, 17], [4, 2, 3], 32, 8, 256),
                                              ([4099 + 13 * i for i in range(32)], [2, 1, 2, 2] * 8, 32, 8, 256),
                                              ([2051, 7, 300], [3, 1, 2], 24, 4, 256),
                                              ([32771], [4], 24, 4, 256), ([4111], [8], 16, 4, 256),
                                              ([32771], [6], 24, 4, 256), ([2051, 7, 300], [8, 1, 5], 32, 4, 256)],
                         ids=["32K-k4-gqa4", "B3-k8-gqa4", "B2-k5-gqa6", "B32-k2-gqa4", "32K-k8-gqa8-v",
                              "B3-k6-gqa6-v", "B3-k5-gqa8-v", "d256-32K-k2-gqa6", "d256-B3-k4-gqa4",
                              "d256-B32-k2-gqa4", "d256-B3-k3-gqa6-v", "d256-32K-k4-gqa6-one", "d256-4K-k8-gqa4-one",
                              "d256-32K-k6-gqa6-v-halves", "d256-B3-k8-gqa8-v-halves"])
def test_hopper_verify_default_on_gpu(seqs, qls, hq, hk, d, monkeypatch):
    """At D = 128 and 256 kernel "h" is the default verify for up to 16 K+1 x group rows, also
    for batches the plan gives the per-warp kernel (D = 128, 32 sequences x 8 KV heads, 8
    rows), and at D = 256 for single requests of up to 32 rows; kernel "v" for the other
    batches of 17 to 64 rows (at D = 256 from 33 rows with V^T in halves): against float64
    with the tail from the raw K/V; the test asserts which kernel launched."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("kernels h and v need a Hopper GPU")
    rows = max(qls) * (hq // hk)
    kernel = "h" if rows <= 16 or (d == 256 and len(seqs) == 1 and rows <= 32) else "v"
    calls = _count_calls(monkeypatch, f"_launch_{kernel}")
    lay = TQLayout.from_preset("turboquant_k8v4", d)
    c = random_case(seq_lens=seqs, query_lens=qls, num_heads=hq, num_kv_heads=hk, head_dim=d, block_size=16,
                    layout=lay, device="cuda")
    out = _run_verify(c, lay)
    assert calls, f"kernel {kernel} was not launched"
    assert not torch.isnan(out).any()
    assert rel_err(out, _ref(c, lay, verify=True)) < DEQ_BOUND


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("seqs,qls,hq,pipe", [([2051, 7, 300], [6, 1, 3], 24, p) for p in range(5)]
                         + [([515, 3000], [8, 7], 32, 3), ([999, 4100], [4, 2], 32, 0)],
                         ids=[f"B3-gqa6-pipe{p}" for p in range(5)] + ["k8-gqa8-pipe3", "B2-gqa8-stacked-pipe0"])
def test_hopper_verify_v_halves_on_gpu(seqs, qls, hq, pipe, monkeypatch):
    """Kernel "v" with V^T in two halves (the second in the tile's key stage) for every
    ``pipe``, 17 to 64 rows, odd and one-token lengths, against float64; the test asserts the
    kernel launched."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("kernel v needs a Hopper GPU")
    calls = _count_calls(monkeypatch, "_launch_v")
    lay = TQLayout.from_preset("turboquant_k8v4", 256)
    c = random_case(seq_lens=seqs, query_lens=qls, num_heads=hq, num_kv_heads=4, head_dim=256, block_size=16,
                    layout=lay, device="cuda")
    out = _run_verify(c, lay, tiles=TileConfig(64, 4, 2, "v", pipe=pipe, v_halves=True))
    assert calls, "kernel v was not launched"
    assert not torch.isnan(out).any()
    assert rel_err(out, _ref(c, lay, verify=True)) < DEQ_BOUND


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("seqs,qls,hq,d,pipe,halves",
                         [([2051, 7, 300], [6, 1, 3], 24, 256, p, True) for p in range(5)]
                         + [([32771], [6], 24, 256, 3, True), ([4099, 80, 1500], [6, 2, 6], 24, 256, 1, False),
                            ([999, 4100], [4, 2], 32, 256, 4, False), ([515, 3000, 33], [8, 7, 3], 32, 128, 4, False)],
                         ids=[f"B3-gqa6-halves-pipe{p}" for p in range(5)]
                         + ["32K-k6-gqa6-halves-pipe3", "B3-gqa6-pipe1", "B2-gqa8-stacked-pipe4", "d128-k8-gqa8-pipe4"])
def test_hopper_verify_v_split_ring_on_gpu(seqs, qls, hq, d, pipe, halves, monkeypatch):
    """Kernel "v" with the ring's two stages as buffers of their own and the loop unrolled by two
    (``TileConfig.split_ring``): splits of odd and even tile counts (the second half of the
    last pair skipped), every ``pipe``, with and without V^T in halves, D = 128 and 256,
    against float64; the test asserts the kernel launched."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("kernel v needs a Hopper GPU")
    calls = _count_calls(monkeypatch, "_launch_v")
    lay = TQLayout.from_preset("turboquant_k8v4", d)
    c = random_case(seq_lens=seqs, query_lens=qls, num_heads=hq, num_kv_heads=4, head_dim=d, block_size=16,
                    layout=lay, device="cuda")
    out = _run_verify(c, lay, tiles=TileConfig(64, 4, 2, "v", pipe=pipe, v_halves=halves, split_ring=True))
    assert calls, "kernel v was not launched"
    assert not torch.isnan(out).any()
    assert rel_err(out, _ref(c, lay, verify=True)) < DEQ_BOUND


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("seqs,qls,hq", [([32771], [6], 24), ([2051, 7, 300], [6, 1, 3], 24),
                                         ([999, 4100], [4, 2], 32), ([515, 3000], [8, 7], 32)],
                         ids=["32K-k6-gqa6", "B3-gqa6", "B2-gqa8", "k8-gqa8"])
@pytest.mark.parametrize("kernel", ["h", "v"])
def test_hopper_verify_on_gpu(seqs, qls, hq, kernel, monkeypatch):
    """Kernels "h" and "v" on request for verify batches (K + 1 up to 8, groups of 6 and 8;
    "h": the query tokens over two programs where they exceed 32 rows; "v": up to 64 rows in
    one program; the tail from the raw K/V) against float64; the test asserts the kernel
    actually launched."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("kernel h needs a Hopper GPU")
    calls = _count_calls(monkeypatch, f"_launch_{kernel}")
    lay = TQLayout.from_preset("turboquant_k8v4", 256)
    c = random_case(seq_lens=seqs, query_lens=qls, num_heads=hq, num_kv_heads=4, head_dim=256, block_size=16,
                    layout=lay, device="cuda")
    out = _run_verify(c, lay, tiles=TileConfig(64, 4, 2, kernel))
    assert calls, f"kernel {kernel} was not launched"
    assert not torch.isnan(out).any()
    assert rel_err(out, _ref(c, lay, verify=True)) < DEQ_BOUND
