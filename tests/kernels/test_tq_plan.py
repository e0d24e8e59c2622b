"""The TurboQuant launch plans: default tiles, the stage-1 kernel a call runs, split counts,
the warm-up's variants, the launchers' arguments and the combine's launch.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from _tq_common import (
    _COMBINE_BUILD,
    CUDA,
    DEQ_BOUND,
    DEV,
    _decode_case,
    _poison_past_end,
    _ref,
    _run_decode,
    _run_verify,
    _sm90_build,
)
from vllm_genesis.turboquant import (
    PRESETS,
    TQLayout,
    pick_num_splits,
    tq_decode_attention,
    tq_verify_attention,
    verify_num_splits,
    warmup_verify,
)
from vllm_genesis.turboquant.layout import pow2_alignment
from vllm_genesis.turboquant.reference import (
    random_case,
    rel_err,
)
from vllm_genesis.turboquant.tiles import TileConfig


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


def test_default_tiles_for_mse_keys_use_one_stage():
    """MSE-key presets take the byte path with one stage (not Triton's pipeliner, which
    waited for every step's own copies): at most 16 rows, one warp at D <= 128 (16-token
    tiles for 3-bit keys, prefetched, 32 for 4-bit) and at D = 256 4 warps for few pairs (128
    / 64-token tiles, the 64 prefetched) or 2 warps x 32 tokens for many; more rows, 16-token
    tiles for few pairs, 64 for many, the few pairs' 16-token tiles with 4-bit keys gathering
    their centroid pairs from a table in shared memory. The plan of a call follows its
    layout's key bits."""
    from vllm_genesis.turboquant.plan import cache_plan, launch_plan
    from vllm_genesis.turboquant.tiles import default_tiles

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
    from vllm_genesis.turboquant.plan import default_num_splits, launch_plan
    from vllm_genesis.turboquant.tiles import default_tiles

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
    from vllm_genesis.turboquant.plan import _h_verify_default, launch_plan
    from vllm_genesis.turboquant.tiles import verify_v_tiles

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
    from vllm_genesis.turboquant.device import CacheFacts
    from vllm_genesis.turboquant.plan import launch_plan, stage1_kernel

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
    from vllm_genesis.turboquant import plan
    from vllm_genesis.turboquant.device import CacheFacts

    monkeypatch.setattr(plan, "num_sms", lambda index: 132)
    lay = TQLayout.from_preset("turboquant_k8v4", 256)
    kv = torch.empty(2, 16, 4, lay.slot_size, dtype=torch.uint8)
    call = dict(has_qstart=ql > 1, raw_tail=ql > 1, facts=CacheFacts(**_HOPPER))
    kernel, tiles, splits = plan.call_plan(kv, lay, batch, 256, group, ql, context, **call)
    assert kernel == ("h" if prefetch is not None else "v")
    if prefetch is not None:
        assert tiles == replace(plan.H_TILES, prefetch=prefetch, producer=producer)
        two = splits * 4 * batch <= 2 * 132
        assert producer == (two and ql == 1)
        assert bool(prefetch) == (two and ql > 1 and -(-context // splits) > 256)
    asked = TileConfig(64, 4, 2, "h")
    assert plan.call_plan(kv, lay, batch, 256, group, ql, context, tiles=asked, **call)[1] == asked
    # D = 128 decode: no producer warp (kernel "hw" is written for D = 256)
    lay128 = TQLayout.from_preset("turboquant_k8v4", 128)
    kv128 = torch.empty(2, 16, 4, lay128.slot_size, dtype=torch.uint8)
    if ql == 1:
        assert not plan.call_plan(kv128, lay128, batch, 128, group, ql, context, **call)[1].producer


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


def test_warmup_builds_the_kernel_each_batch_size_launches(monkeypatch):
    """PN522 on Hopper, where the kernel depends on the batch size and not only on the plan
    (24 verify rows at D = 256: kernel "h" for one request, kernel "v" for more): the warm-up
    launches both, and real calls of one and of two requests launch nothing it did not.
    Kernels "h" and "v" are stood in for by recorders (they need a Hopper GPU)."""
    from vllm_genesis.turboquant import combine, stage1
    from vllm_genesis.turboquant.device import CacheFacts

    launched = []

    def recorder(name):
        def launch(*args, **kwargs):
            launched.append((name, args[8]))  # the kernel and its split count
            return 0
        return launch

    monkeypatch.setattr(CacheFacts, "of", classmethod(lambda cls, layout, kv: cls(**_HOPPER)))
    monkeypatch.setattr(stage1, "launch_wgmma_decode", recorder("h"))
    monkeypatch.setattr(stage1, "launch_wgmma_verify", recorder("v"))
    monkeypatch.setattr(combine, "COMBINE_PDL", False)
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


def test_default_tiles_pick_fp8_tensor_core_kernel_for_verify():
    """Verify on Hopper (and under the interpreter) runs kernel "v" for D = 256 or 128 and 17
    to 64 rows (D = 256 also with 16-row padding), kernel "q" for other head sizes and more
    rows; elsewhere, with unaligned slots and for decode the previous defaults stay."""
    from vllm_genesis.turboquant.device import fp8_mma_default
    from vllm_genesis.turboquant.tiles import default_tiles

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
    from vllm_genesis.turboquant.plan import default_num_splits

    v = TileConfig(64, 4, 2, "v")
    got = {(b, ctx): default_num_splits(b, 4, ctx, 132, v, True, 256)
           for b, ctx in [(1, 32768), (2, 32768), (8, 8192), (64, 4096), (1, 1000), (1, 131072), (100, 4096)]}
    assert got == {(1, 32768): 64, (2, 32768): 33, (8, 8192): 8, (64, 4096): 1, (1, 1000): 4, (1, 131072): 66,
                   (100, 4096): 1}
    for (b, _ctx), s in got.items():
        assert b * 4 * s <= 2 * 132 or s == 1


def test_warmup_compiles_every_query_len():
    n = warmup_verify(num_heads=12, num_kv_heads=2, head_dim=64, block_size=16, query_lens=(1, 6),
                      device=DEV)
    assert n == 3


class _VariantLog:
    """Wraps the launchers' Triton kernels and records what picks a compiled variant of each launch:
    the kernel, its compile-time arguments, and how Triton specialises its integer arguments
    (== 1, divisible by 16, other) -- except those it is told not to specialise."""

    def __init__(self, monkeypatch):
        from vllm_genesis.turboquant import combine, stage1

        self.seen: set = set()
        for module, name in ((stage1, "_tq_dequant_split_words"), (stage1, "_tq_dequant_split_fp8_pages"),
                             (stage1, "_tq_dequant_split_tokens"), (stage1, "_tq_fp8_scores"),
                             (stage1, "_tq_per_warp_softmax"), (combine, "_tq_combine_splits")):
            monkeypatch.setattr(module, name, self._wrap(getattr(module, name), name))

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


@pytest.mark.parametrize("launcher,kernel,tiles,flag", [
    ("launch_wgmma_verify", "_wgmma_verify._tq_wgmma_verify", dict(split_ring=True), ("SPLIT_RING", True)),
    ("launch_wgmma_verify", "_wgmma_verify._tq_wgmma_verify", dict(), ("SPLIT_RING", False)),
    ("launch_wgmma_decode", "_wgmma_decode._tq_wgmma_decode", dict(warp_max=True), ("XMAX", True)),
    ("launch_wgmma_decode", "_wgmma_decode_producer._tq_wgmma_decode_producer", dict(warp_max=True, producer=True), ("XMAX", True)),
    ("launch_wgmma_decode", "_wgmma_decode._tq_wgmma_decode", dict(), ("XMAX", None))],
    ids=["v-split-ring", "v-plain", "h-warp-max", "hw-warp-max", "h-plain"])
def test_launchers_pass_the_opt_in_builds_on(monkeypatch, launcher, kernel, tiles, flag):
    """``split_ring`` and ``warp_max`` reach the kernels as their constexprs (``SPLIT_RING``,
    ``XMAX``; the plain launches leave ``XMAX`` unset, so that the plans' builds stay as they
    were): the launchers run with the kernels replaced by recorders, on CPU tensors."""
    import importlib

    from vllm_genesis.turboquant import stage1

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
    if launcher == "launch_wgmma_verify":
        stage1.launch_wgmma_verify(*common, 2, pipe=3, v_halves=True, **tiles)
    else:
        stage1.launch_wgmma_decode(*common, 1, False, **tiles)
    assert len(seen) == 1
    assert seen[0].get(flag[0]) == flag[1]


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
    from vllm_genesis.turboquant._combine_splits import _tq_combine_splits
    from vllm_genesis.turboquant._wgmma_decode import PARTIAL_ORDER_H
    from vllm_genesis.turboquant._wgmma_verify import PARTIAL_ORDER_V
    from vllm_genesis.turboquant.combine import combine_chunk

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
    _tq_combine_splits[(g * (d // dc), hk, 1)](
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
    from vllm_genesis.turboquant import combine

    launched = []
    kernel = combine._tq_combine_splits

    class Logged:
        def __getitem__(self, grid):
            def run(*args, **kwargs):
                launched.append((kwargs["num_warps"], kwargs["S_CHUNK"] * kwargs["DC"]))
                return kernel[grid](*args, **kwargs)
            return run

    monkeypatch.setattr(combine, "_tq_combine_splits", Logged())
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
    assert combine.combine_shape(128, 256, True) == (128, 32, 1)
    assert combine.combine_shape(3, 128, False) == (4, 128, 4)


def test_combine_is_a_dependent_launch_only_inside_graphs_or_when_asked():
    """Eager calls launch the combine plainly (a programmatic dependent launch costs host
    time); inside a CUDA-graph capture, or inside ``programmatic_combine(True)`` (the warm-up),
    it is one; the setting is restored when the block ends, also on an error."""
    from vllm_genesis.turboquant import combine

    assert combine.pdl_launch() is False
    with combine.programmatic_combine(True):
        assert combine.pdl_launch() is True
        with combine.programmatic_combine(False):
            assert combine.pdl_launch() is False
        assert combine.pdl_launch() is True
    with pytest.raises(RuntimeError), combine.programmatic_combine(True):
        raise RuntimeError("boom")
    assert combine.pdl_launch() is False


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
