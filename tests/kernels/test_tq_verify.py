"""TurboQuant verify (K+1 query tokens a request) against a float64 PyTorch reference, and
the sm_90 builds of the Hopper verify kernel. As test_tq_decode: small sizes under the
interpreter on a CPU, full sizes for the ``gpu``-marked tests.
"""

from __future__ import annotations

import pytest
import torch
from _tq_common import (
    _COMBINE_BUILD,
    _GLUON_SM90_BUILD,
    CUDA,
    DEQ_BOUND,
    DEV,
    RAW_BOUND,
    _count_calls,
    _ref,
    _run_decode,
    _run_verify,
    _sm90_build,
)
from vllm_genesis.turboquant import (
    TQLayout,
    tq_verify_attention,
)
from vllm_genesis.turboquant.reference import (
    random_case,
    rel_err,
)
from vllm_genesis.turboquant.tiles import TileConfig


@pytest.mark.parametrize("shared,asked", [(98_816, True), (49_664, True), (115_200, False), (40_000, False)])
def test_kernel_v_asks_for_more_l1_where_its_build_is_small(monkeypatch, shared, asked):
    """Kernel "v" builds of more than 48 KB (where Triton's loader asks for its largest
    carve-out) and at most ``V_CARVEOUT_MAX_SHARED`` bytes of shared memory (the stacked-query
    builds up to 32 rows at D = 256, the D = 128 builds of 64-token tiles) ask the driver for
    the ``V_CARVEOUT`` carve-out after their launch; the 36-64-row builds at D = 256 keep
    Triton's (two of them need its largest carve-out to share an SM), smaller builds the
    driver's own. The kernel is stood in for."""
    from types import SimpleNamespace

    from vllm_genesis.turboquant import _wgmma_verify, stage1

    built = SimpleNamespace(function=0x42, metadata=SimpleNamespace(shared=shared))

    class _Stub:
        def __getitem__(self, grid):
            return lambda *a, **k: built

    monkeypatch.setattr(_wgmma_verify, "_tq_wgmma_verify", _Stub())
    asked_for = []
    monkeypatch.setattr(stage1, "prefer_carveout", lambda k, pct: asked_for.append((k, pct)) or True)
    t = torch.zeros(4, 4, 4)
    kv = torch.zeros(2, 16, 4, 388, dtype=torch.uint8)
    stage1.launch_wgmma_verify(t, kv, torch.zeros(1, 2, dtype=torch.int32), torch.zeros(1, dtype=torch.int32), None,
                               t, t, 8, 1.0, 1, 6, 256, 16, 6)
    assert asked_for == ([(built, stage1.V_CARVEOUT)] if asked else [])
    assert (48 * 1024 < shared <= stage1.V_CARVEOUT_MAX_SHARED) == asked
    monkeypatch.setattr(stage1, "V_CARVEOUT", None)
    asked_for.clear()
    stage1.launch_wgmma_verify(t, kv, torch.zeros(1, 2, dtype=torch.int32), torch.zeros(1, dtype=torch.int32), None,
                               t, t, 8, 1.0, 1, 6, 256, 16, 6)
    assert asked_for == []


def test_verify_default_runs_kernel_q_where_kernel_v_cannot(monkeypatch):
    """The default verify plan for D = 256 names kernel "v"; where it cannot run (here: the
    interpreter) the launcher runs kernel "q" instead, and the result matches float64."""
    from vllm_genesis.turboquant import device, plan, stage1

    seen = []
    real = stage1._tq_fp8_scores

    class Spy:
        def __getitem__(self, grid):
            seen.append(grid)
            return real[grid]

    monkeypatch.setattr(stage1, "_tq_fp8_scores", Spy())
    lay = TQLayout.from_preset("turboquant_k8v4", 256)
    c = random_case(seq_lens=[97, 300], query_lens=[3, 2], num_heads=12, num_kv_heads=2, head_dim=256, block_size=16,
                    layout=lay, device=DEV)
    tiles, _ = plan.cache_plan(c["kv_cache"], 2, 256, 6, 3, lay, 300)
    out = _run_verify(c, lay)
    if not CUDA or device.fp8_mma_default(0):
        assert tiles.kernel == "v"
    if not CUDA:
        assert seen, "kernel q did not run"
    assert rel_err(out, _ref(c, lay, verify=True)) < DEQ_BOUND


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


def test_verify_beyond_64_rows_splits_the_query_tokens():
    """G = 16 with K+1 = 8 is 128 rows: the default runs the query rows on M in programs of
    at most 64 rows (two programs per split, four query tokens each) and matches float64;
    a request with fewer tokens leaves the second program's rows empty."""
    from vllm_genesis.turboquant.plan import launch_plan

    lay = TQLayout.from_preset("turboquant_k8v4", 64)
    tiles, _ = launch_plan(2, 2, 64, 16, 8, True, 160, True, 4, fp8_mma=True)
    assert tiles.rows_m and tiles.rsplit == 2
    c = random_case(seq_lens=[150, 37], query_lens=[8, 3], num_heads=32, num_kv_heads=2, head_dim=64,
                    block_size=16, layout=lay, generator=torch.Generator().manual_seed(3), device=DEV)
    out = _run_verify(c, lay, num_splits=2)
    assert not torch.isnan(out).any()
    assert rel_err(out, _ref(c, lay, verify=True)) < DEQ_BOUND


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
    got = _sm90_build(_GLUON_SM90_BUILD, "_wgmma_verify", "_tq_wgmma_verify", repr(consts))
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
    got = _sm90_build(_GLUON_SM90_BUILD, "_wgmma_verify", "_tq_wgmma_verify", repr(consts))
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
    from vllm_genesis.turboquant.stage1 import V_CARVEOUT_MAX_SHARED

    consts = dict(HK=4, G=group, D=256, PAGE=16, STAGES=2, SKP=4 * 388, SKH=388, QL=ql, BN=64, PDL=True, PIPE=pipe)
    whole = _sm90_build(_GLUON_SM90_BUILD, "_wgmma_verify", "_tq_wgmma_verify", repr(consts))
    halves = _sm90_build(_GLUON_SM90_BUILD, "_wgmma_verify", "_tq_wgmma_verify", repr(consts | dict(VHALF=True)))
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
    plain = _sm90_build(_GLUON_SM90_BUILD, "_wgmma_verify", "_tq_wgmma_verify", repr(consts))
    split = _sm90_build(_GLUON_SM90_BUILD, "_wgmma_verify", "_tq_wgmma_verify", repr(consts | dict(SPLIT_RING=True)))
    per_tile = 256 // 32 * (1 if group * ql <= 32 else 2)  # scores products a tile
    assert plain["loop_scores"] == per_tile and split["loop_scores"] == 2 * per_tile  # the loop holds two tiles
    assert split["loop_barriers"] == 2 * (3 + halves) <= 2 * plain["loop_barriers"]
    tile = 256 // 8 + 256 // 16 + 1  # copies a tile (keys, code words, scale/zero words)
    assert (plain["cp_async"], split["cp_async"]) == (2 * tile, 3 * tile)  # the prologue's and the loop's
    assert split["wgmma"] == 2 * plain["wgmma"]  # every product is in the loop
    assert split["shared"] == plain["shared"]


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


# the launch function of each Gluon kernel (in ``stage1``), by its letter
_LAUNCHER = {"g": "launch_gluon_mma_decode", "h": "launch_wgmma_decode", "v": "launch_wgmma_verify"}


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
    calls = _count_calls(monkeypatch, _LAUNCHER[kernel])
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
    calls = _count_calls(monkeypatch, "launch_wgmma_verify")
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
    calls = _count_calls(monkeypatch, "launch_wgmma_verify")
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
    calls = _count_calls(monkeypatch, _LAUNCHER[kernel])
    lay = TQLayout.from_preset("turboquant_k8v4", 256)
    c = random_case(seq_lens=seqs, query_lens=qls, num_heads=hq, num_kv_heads=4, head_dim=256, block_size=16,
                    layout=lay, device="cuda")
    out = _run_verify(c, lay, tiles=TileConfig(64, 4, 2, kernel))
    assert calls, f"kernel {kernel} was not launched"
    assert not torch.isnan(out).any()
    assert rel_err(out, _ref(c, lay, verify=True)) < DEQ_BOUND
