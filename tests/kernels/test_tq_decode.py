"""TurboQuant decode kernels against a float64 PyTorch reference, and their sm_90 builds.

On a CPU these run at small sizes under TRITON_INTERPRET=1 (set by conftest.py); the
``gpu``-marked tests run the same checks at full sizes on a CUDA device. Inputs are random
(never zeros), page tables shuffled, contexts odd, outputs NaN-poisoned before each run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from _tq_common import (
    _GLUON_SM90_BUILD,
    CUDA,
    DEQ_BOUND,
    DEV,
    RAW_BOUND,
    _count_calls,
    _decode_case,
    _poison_past_end,
    _ref,
    _run_decode,
    _run_verify,
    _sm90_build,
)
from vllm_genesis.turboquant import (
    TQLayout,
    tq_decode_attention,
)
from vllm_genesis.turboquant._fp8_scores import _q_fp8_split
from vllm_genesis.turboquant.reference import (
    dequant_slots,
    quantize_slots,
    random_case,
    rel_err,
)
from vllm_genesis.turboquant.tiles import TileConfig


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
    from vllm_genesis.turboquant.stage1 import centroid_pairs

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
    from vllm_genesis.turboquant import stage1

    lay = TQLayout.from_preset(preset, head_dim)
    c = random_case(seq_lens=[61, 130], num_heads=8, num_kv_heads=2, head_dim=head_dim, block_size=16,
                    layout=lay, generator=torch.Generator().manual_seed(21), device=DEV)
    paired = _run_decode(c, lay, num_splits=2).float()
    monkeypatch.setattr(stage1, "_pair_gathers", lambda layout, d: False)
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


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("preset", ["turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc"])
def test_mse_presets_full_size_on_gpu(preset):
    """The MSE-key presets' default plans at full size: a 32K decode and a verify batch of two
    requests (36 and 24 rows; with 4-bit keys its centroid pairs come from the table in
    shared memory), against float64."""
    from vllm_genesis.turboquant.plan import launch_plan

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
    got = _sm90_build(_GLUON_SM90_BUILD, "_gluon_mma_decode", "_tq_gluon_mma_decode", consts)
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
    got = _sm90_build(_GLUON_SM90_BUILD, "_wgmma_decode", "_tq_wgmma_decode", repr(consts))
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
    got = _sm90_build(_GLUON_SM90_BUILD, "_wgmma_decode", "_tq_wgmma_decode", repr(consts))
    assert got["prefetch"] == 1
    assert got["copies_at"] < got["prefetch_at"] < got["last_product_at"]  # after the prologue's copies
    assert got["wgmma"] == d // 32 + (d // 64) * 4 and got["cp_async"] == d // 8 * 2


@pytest.mark.parametrize("stages", [2, 3])
def test_hopper_decode_early_build_waits_before_the_cache(stages):
    """Kernel "h" built as a programmatic dependent launch (``EARLY``) waits once for the
    kernel before it, and before its first cache copy; the products and copies are those of
    the plain build."""
    consts = dict(HK=4, G=6, D=256, PAGE=16, STAGES=stages, SKP=4 * 388, SKH=388, R=8, PDL=True, EARLY=True)
    got = _sm90_build(_GLUON_SM90_BUILD, "_wgmma_decode", "_tq_wgmma_decode", repr(consts))
    assert got["wait_prior"] == 1 and got["wait_before_copies"]
    assert got["wgmma"] == 8 + 4 * 4 and got["cp_async"] == 32 * stages
    assert got["launch_dependents"] == 1


def test_hopper_decode_timeline_build():
    """Kernel "h" with its diagnostics timeline (``tools/bench/tq_timeline.py``) builds for
    sm_90 and reads the global timer three times (start, loop end, end), with the same
    products and copies as the plain build."""
    consts = dict(HK=4, G=6, D=256, PAGE=16, STAGES=2, SKP=4 * 388, SKH=388, R=8, PDL=False, TL_ON=True)
    got = _sm90_build(_GLUON_SM90_BUILD, "_wgmma_decode", "_tq_wgmma_decode", repr(consts))
    assert got["timer"] == 3
    assert got["wgmma"] == 8 + 4 * 4 and got["cp_async"] == 32 * 2


@pytest.mark.parametrize("group,page,stages,pdl,early", [(6, 16, 2, True, False), (8, 128, 2, False, True),
                                                      (1, 32, 3, True, True)])
def test_hopper_decode_producer_warp_build(group, page, stages, pdl, early):
    """Kernel "h" with its key producer warp (``_wgmma_decode_producer``) builds for sm_90 with 128
    registers a thread at launch and no spills: the producer partition gives back all but
    ``PREGS`` registers, the products' warp group takes them. The producer copies a whole
    64-token tile (D / 8 x 4 four-byte ``cp.async`` a lane) and lets them arrive on the stage's
    barrier (one ``cp.async.mbarrier.arrive``); the consumer waits on one barrier a tile and
    runs the products of kernel "h" (8 scores + 16 values a tile) and nothing of the copies."""
    from vllm_genesis.turboquant import _wgmma_decode_producer

    consts = dict(HK=4, G=group, D=256, PAGE=page, STAGES=stages, SKP=4 * 388, SKH=388, R=8, PDL=pdl, EARLY=early)
    got = _sm90_build(_GLUON_SM90_BUILD, "_wgmma_decode_producer", "_tq_wgmma_decode_producer", repr(consts))
    assert got["regs"] == _wgmma_decode_producer.PRODUCER_MAXNREG and got["stack"] == 0
    import inspect

    preg = inspect.signature(_wgmma_decode_producer._tq_wgmma_decode_producer.fn).parameters["PREGS"].default
    assert {preg, 2 * _wgmma_decode_producer.PRODUCER_MAXNREG - preg} <= set(got["setmaxnreg"])
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
    name = {"h": ("_wgmma_decode", "_tq_wgmma_decode"), "hw": ("_wgmma_decode_producer", "_tq_wgmma_decode_producer")}[kernel]
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


def _check_gluon_decode(launcher, seqs, hq, page, tiles, monkeypatch, d=256, hk=4):
    """A k8v4 decode (D = 256 unless told) with NaN bytes past each sequence's end against
    float64, through ``stage1.<launcher>``, which must actually be called."""
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
    _check_gluon_decode("launch_gluon_mma_decode", seqs, hq, page, tiles, monkeypatch)


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
    _check_gluon_decode("launch_wgmma_decode", seqs, hq, page, tiles, monkeypatch)


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
    from vllm_genesis.turboquant import combine, stage1

    early = []
    real = stage1.launch_wgmma_decode
    monkeypatch.setattr(stage1, "launch_wgmma_decode",
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

    with combine.programmatic_combine(True):  # builds the graph's variants outside the capture
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
    _check_gluon_decode("launch_wgmma_decode", seqs, hq, page, tiles, monkeypatch, d=128, hk=hk)
