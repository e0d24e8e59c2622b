"""P67b: uniform spec-verify batches reach the multi-query kernel from forward().

Three continuing requests with 4 new tokens each (GQA 6) through
TurboQuantAttentionImpl.forward on CPU under the Triton interpreter; see _tq_routing.py.
In ``strict`` runs the metadata's CPU copies fail when read and host reads of tensors
inside forward() are recorded: what a FULL CUDA graph cannot hold. The forward runs
twice, the second time with shorter contexts, and both launches must look the same to
a captured graph (split count, workspace addresses); the split count is the kernels' own
(``verify_num_splits``).
"""

from __future__ import annotations

from _tq_routing import run


def _same_capturable_launch(res: dict) -> None:
    launches = res["calls"]["verify_launches"]
    assert len(launches) == 2
    first, second = launches
    assert first == second
    assert first["max_query_len"] == 4
    # the kernels' own split count for the block table's capacity (more than one split
    # here), not 0.24.0's tq_max_kv_splits_for_cuda_graph (set to 1 by the harness)
    assert isinstance(first["num_splits"], int) and first["num_splits"] == res["planned_splits"] == 2
    assert first["workspace"] is not None


def test_fixed_uniform_verify_routed_in_forward(switch):
    switch("P67", True)
    switch("P67b", True)
    res = run("uniform", "strict")
    assert res["calls"]["genesis_verify"] == [{"tokens": 12, "raw_tail": False}] * 2
    assert res["calls"]["prefill_path"] == 0
    assert res["calls"]["upstream"] == []
    assert res["host_reads"] == []
    _same_capturable_launch(res)
    assert not res["nan"]
    # without PN521 the tail comes from the cache, as on 0.24.0
    assert res["err_cache_tail"] < 0.1
    assert res["err_raw_tail"] > 0.3


def test_fixed_uniform_verify_raw_tail_with_pn521(switch):
    switch("P67", True)
    switch("P67b", True)
    switch("PN521", True)
    res = run("uniform", "strict")
    assert res["calls"]["genesis_verify"] == [{"tokens": 12, "raw_tail": True}] * 2
    assert res["calls"]["prefill_path"] == 0
    assert res["host_reads"] == []
    _same_capturable_launch(res)
    assert not res["nan"]
    assert res["err_raw_tail"] < 0.1
    assert res["err_cache_tail"] > 0.3


def test_on_non_uniform_batch_left_to_p67(switch):
    switch("P67", True)
    switch("P67b", True)
    res = run("verify")
    # 3, 6 and 1 new tokens: not a uniform batch, P67 decides in _prefill_attention
    assert res["calls"]["prefill_path"] == 1
    assert res["calls"]["genesis_verify"] == [{"tokens": 10, "raw_tail": False}]
    assert res["calls"]["verify_launches"][0]["num_splits"] is None
    assert res["err_cache_tail"] < 0.1


def test_off_uniform_batch_takes_the_prefill_path(switch):
    switch("P67", True)
    switch("P67b", False)
    res = run("uniform")
    assert res["calls"]["prefill_path"] == 2
    assert res["calls"]["genesis_verify"] == [{"tokens": 12, "raw_tail": False}] * 2
    assert res["calls"]["verify_launches"][0]["workspace"] is None
    assert res["err_cache_tail"] < 0.1


def test_off_without_p67_per_request_loop(switch):
    switch("P67", False)
    switch("P67b", True)
    res = run("uniform")
    # P67b acts only together with P67: 0.24.0's per-request decode launches
    assert res["calls"]["prefill_path"] == 2
    assert res["calls"]["upstream"] == [4, 4, 4] * 2
    assert res["calls"]["genesis_verify"] == []
    assert res["err_cache_tail"] < 0.1
