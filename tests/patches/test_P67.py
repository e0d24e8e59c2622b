"""P67: a TurboQuant spec-verify batch in one multi-query launch.

Three continuing requests with 3, 6 and 1 new tokens (GQA 6) through
TurboQuantAttentionImpl.forward on CPU under the Triton interpreter; see _tq_routing.py.
The tail's cache slots hold values shifted by +4 against this step's V, so the
reference with the cached tail and the one with the raw tail differ clearly.
"""

from __future__ import annotations

from _pins import only_on
from _tq_routing import run


def test_fixed_verify_batch_in_one_launch(switch):
    switch("P67", True)
    res = run("verify")
    assert res["calls"]["genesis_verify"] == [{"tokens": 10, "raw_tail": False}]
    assert res["calls"]["upstream"] == []
    assert not res["nan"]
    # without PN521 the tail comes from the cache, as on 0.24.0
    assert res["err_cache_tail"] < 0.1
    assert res["err_raw_tail"] > 0.3


def test_off_per_request_decode_launches(switch):
    switch("P67", False)
    res = run("verify")
    assert res["calls"]["upstream"] == [3, 6, 1]
    assert res["calls"]["genesis_verify"] == []
    assert res["err_cache_tail"] < 0.1


def test_fixed_mse_preset_verify_batch_in_one_launch(switch):
    """3-bit MSE keys and 3-bit values through the multi-query kernel: float64 over the cache
    as stored (the layer's rotation and centroids), the tail from the cache as on 0.24.0."""
    switch("P67", True)
    res = run("verify", "turboquant_3bit_nc")
    assert res["calls"]["genesis_verify"] == [{"tokens": 10, "raw_tail": False}]
    assert res["calls"]["upstream"] == []
    assert not res["nan"]
    assert res["err_dequant_cache_tail"] < 1e-2


def test_head_size_512_keeps_the_per_request_loop(switch):
    """Head sizes above 256 keep 0.24.0's path (see test_P40.py), in _prefill_attention and
    in forward() alike."""
    switch("P67", True)
    switch("P67b", True)
    res = run("verify", "d512", "turboquant_3bit_nc")
    assert res["calls"]["genesis_verify"] == []
    assert res["calls"]["upstream"] == [3, 6, 1]
    assert res["err_dequant_cache_tail"] < 1e-2


@only_on(">=0.34", "0.34.0 stores the cache in an SoA layout where FlyDSL decodes")
def test_soa_cache_keeps_the_per_request_loop(switch):
    """On 0.34.0's SoA cache (FlyDSL, see test_P40.py) the multi-query kernel, which reads
    the AoS layout, is not launched, by P67's route or by P67b's."""
    switch("P67", True)
    switch("P67b", True)
    for mode in ("verify", "uniform"):
        res = run(mode, "soa")
        assert res["calls"]["genesis_verify"] == [], mode
