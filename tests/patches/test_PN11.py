"""PN11: fix_query_key_value_ordering returns dense b/a when num_v_heads == num_k_heads.

The real method of QwenGatedDeltaNetAttention is called with a namespace holding only
the head sizes it reads (building the whole layer needs a device and a TP group).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

HK = HV = 8


@pytest.fixture(scope="module")
def gdn_cls():
    from vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn import QwenGatedDeltaNetAttention

    return QwenGatedDeltaNetAttention


def _shapes(num_k, num_v, tp=1):
    return SimpleNamespace(num_k_heads=num_k, num_v_heads=num_v, head_k_dim=HK, head_v_dim=HV, tp_size=tp)


def _inputs(num_k, num_v, tokens=5, tp=1):
    g = torch.Generator().manual_seed(0)
    ng, r = num_k // tp, num_v // num_k
    qkvz = torch.randn(tokens, ng * (2 * HK + 2 * r * HV), generator=g)
    ba = torch.randn(tokens, ng * 2 * r, generator=g)
    # expected b/a: per k-group the buffer holds [b (r values), a (r values)]
    grouped = ba.view(tokens, ng, 2 * r)
    b_ref = grouped[..., :r].reshape(tokens, -1).clone()
    a_ref = grouped[..., r:].reshape(tokens, -1).clone()
    return qkvz, ba, b_ref, a_ref


def test_fixed_equal_head_counts_give_dense_b_a(gdn_cls, switch):
    switch("PN11", True)
    ns = _shapes(4, 4)
    qkvz, ba, b_ref, a_ref = _inputs(4, 4)
    *_, b, a = gdn_cls.fix_query_key_value_ordering(ns, qkvz, ba)
    assert b.is_contiguous() and a.is_contiguous()
    assert b.stride() == (4, 1) and a.stride() == (4, 1)
    assert torch.equal(b, b_ref) and torch.equal(a, a_ref)
    # A dense [tokens, heads] read of the buffer (what the gating kernels do) sees b and a.
    assert torch.equal(torch.as_strided(b, b.shape, (4, 1)), b_ref)


def test_fixed_under_fullgraph_compile(gdn_cls, switch):
    switch("PN11", True)
    ns = _shapes(2, 2)
    qkvz, ba, b_ref, a_ref = _inputs(2, 2)
    torch._dynamo.reset()
    fn = torch.compile(
        lambda x, y: gdn_cls.fix_query_key_value_ordering(ns, x, y), fullgraph=True, backend="eager"
    )
    *_, b, a = fn(qkvz, ba)
    assert b.is_contiguous() and a.is_contiguous()
    assert torch.equal(b, b_ref) and torch.equal(a, a_ref)


def test_off_strided_views_as_upstream(gdn_cls, switch):
    switch("PN11", False)
    ns = _shapes(4, 4)
    qkvz, ba, b_ref, a_ref = _inputs(4, 4)
    *_, b, a = gdn_cls.fix_query_key_value_ordering(ns, qkvz, ba)
    # upstream: views into the interleaved buffer, stride 2 along heads
    assert b.stride() == (8, 2) and a.stride() == (8, 2)
    assert b.data_ptr() == ba.data_ptr()
    assert torch.equal(b, b_ref) and torch.equal(a, a_ref)


def test_off_ratio_two_already_dense(gdn_cls, switch):
    switch("PN11", False)
    ns = _shapes(2, 4)
    qkvz, ba, b_ref, a_ref = _inputs(2, 4)
    *_, b, a = gdn_cls.fix_query_key_value_ordering(ns, qkvz, ba)
    assert b.is_contiguous() and a.is_contiguous()
    assert torch.equal(b, b_ref) and torch.equal(a, a_ref)
