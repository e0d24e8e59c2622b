"""P40: TurboQuant decode through the grouped split-K kernel of vllm_genesis.

A pure decode batch (GQA 6, three sequences on a shuffled page table) through
TurboQuantAttentionImpl.forward on CPU under the Triton interpreter; see _tq_routing.py.
"""

from __future__ import annotations

from _pins import only_on
from _tq_routing import run


def test_fixed_decode_uses_grouped_kernel(switch):
    switch("P40", True)
    res = run("decode")
    assert res["calls"]["genesis_decode"] == [3]
    # the lengths and block table are vLLM's metadata, written before the forward pass
    assert res["calls"]["decode_overlap_prior"] == [True]
    assert res["calls"]["upstream"] == []
    assert not res["nan"]
    # decode reads the whole context, the new token included, from the cache
    assert res["err_cache_tail"] < 0.1


def test_off_decode_uses_upstream_kernel(switch):
    switch("P40", False)
    res = run("decode")
    assert res["calls"]["upstream"] == [3]
    assert res["calls"]["genesis_decode"] == []
    assert res["err_cache_tail"] < 0.1


def test_fixed_decode_mse_preset_uses_grouped_kernel(switch):
    """Another preset (4-bit MSE keys, Hadamard-rotated, norm-corrected centroids): the
    grouped kernel takes the layer's own rotation and centroids and matches float64 over
    the cache as stored."""
    switch("P40", True)
    res = run("decode", "turboquant_4bit_nc")
    assert res["calls"]["genesis_decode"] == [3]
    assert res["calls"]["upstream"] == []
    assert not res["nan"]
    assert res["err_dequant_cache_tail"] < 1e-2


def test_off_decode_mse_preset_matches_the_same_reference(switch):
    switch("P40", False)
    res = run("decode", "turboquant_4bit_nc")
    assert res["calls"]["upstream"] == [3]
    assert res["err_dequant_cache_tail"] < 1e-2  # 0.24.0's kernel agrees with the reference


def test_head_size_512_keeps_the_upstream_kernel(switch):
    """Head sizes above 256 are not routed: the kernels are tested at 64 to 256 only, and at
    512 the 3-bit plan for few (sequence, KV head) pairs needs 151,552 bytes of shared memory
    a program (sm_86 build), more than an sm_86 or sm_89 GPU gives one (101,376)."""
    switch("P40", True)
    res = run("decode", "d512", "turboquant_3bit_nc")
    assert res["calls"]["genesis_decode"] == []
    assert res["calls"]["upstream"] == [3]
    assert res["err_dequant_cache_tail"] < 1e-2


@only_on(">=0.34", "0.34.0 stores the cache in an SoA layout where FlyDSL decodes")
def test_soa_cache_keeps_the_upstream_kernel(switch):
    """Where FlyDSL decodes (gfx950) 0.34.0 stores the cache in an SoA layout, which only its
    SoA kernels read: P40 stands aside there (the grouped kernel reads the AoS layout; on
    an SoA cache its output was NaN). What 0.34.0's SoA kernels return under the CPU
    interpreter is not checked: they are upstream's, and meant for the GPU."""
    switch("P40", True)
    res = run("decode", "soa")
    assert res["calls"]["genesis_decode"] == []
