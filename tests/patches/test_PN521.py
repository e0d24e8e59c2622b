"""PN521: the multi-query verify reads the K+1 tail from this step's raw K/V.

Same batch as test_P67.py (see _tq_routing.py): the tail's cache slots hold values
shifted by +4 against the V passed to forward, so only a kernel that takes the tail
from the raw tensors matches the raw-tail reference.
"""

from __future__ import annotations

from _tq_routing import run


def test_fixed_tail_from_raw_kv(switch):
    switch("P67", True)
    switch("PN521", True)
    res = run("verify")
    assert res["calls"]["genesis_verify"] == [{"tokens": 10, "raw_tail": True}]
    assert not res["nan"]
    assert res["err_raw_tail"] < 0.1
    assert res["err_cache_tail"] > 0.3


def test_off_tail_from_cache(switch):
    switch("P67", True)
    switch("PN521", False)
    res = run("verify")
    # as on 0.24.0: the tail is attended through its cached (quantised) values
    assert res["calls"]["genesis_verify"] in ([], [{"tokens": 10, "raw_tail": False}])
    assert res["err_cache_tail"] < 0.1
    assert res["err_raw_tail"] > 0.3


def test_fixed_mse_preset_verify_tail_from_raw_kv(switch):
    """3-bit MSE keys and 3-bit values: one multi-query launch, the tail from the raw K/V,
    float64 over the cache as stored (the layer's rotation and centroids) for the prefix."""
    switch("P67", True)
    switch("PN521", True)
    res = run("verify", "turboquant_3bit_nc")
    assert res["calls"]["genesis_verify"] == [{"tokens": 10, "raw_tail": True}]
    assert res["calls"]["upstream"] == []
    assert not res["nan"]
    assert res["err_dequant_raw_tail"] < 1e-2
    assert res["err_dequant_cache_tail"] > 0.3


def test_kv_shared_layer_tail_from_cache(switch):
    """A layer that reads an earlier layer's cache (KV sharing, as in Gemma 4) is handed
    its own key/value projections, which are not what the cache holds: with PN521 on, its
    tail still comes from the cache, through P67's route and through P67b's."""
    switch("P67", True)
    switch("PN521", True)
    res = run("verify", "kv_shared")
    assert res["calls"]["genesis_verify"] == [{"tokens": 10, "raw_tail": False}]
    assert res["err_cache_tail"] < 0.1
    switch("P67b", True)
    res = run("uniform", "kv_shared")
    assert res["calls"]["genesis_verify"] == [{"tokens": 12, "raw_tail": False}] * 2
    assert res["err_cache_tail"] < 0.1
