"""The kernel tests' faster interpreter paths against Triton's own."""

from __future__ import annotations

import os

import pytest
import torch
import triton
import triton.language as tl

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="checks the CPU interpreter")


@triton.jit
def _pair(a0, a1, b0, b1):
    return a0 + b0, a1 * b1


@triton.jit
def _first(a, b):  # associative, not commutative: keeps the leftmost
    return a


@triton.jit
def _reduce_kernel(X, Y, OUT_A, OUT_B, OUT_F, OUT_ALL, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr):
    r = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(X + r)
    y = tl.load(Y + r)
    a, b = tl.reduce((x, y), AXIS, _pair)
    f = tl.reduce(x, AXIS, _first)
    if AXIS == 1:
        o = tl.arange(0, M)
    else:
        o = tl.arange(0, N)
    tl.store(OUT_A + o, a)
    tl.store(OUT_B + o, b)
    tl.store(OUT_F + o, f)
    s = tl.reduce(x, None, _first, keep_dims=False)
    tl.store(OUT_ALL, s)


@pytest.mark.parametrize("m,n,axis", [(4, 8, 1), (8, 4, 0), (2, 16, 1), (16, 2, 0), (1, 8, 1)])
def test_tree_reduce_matches_the_elementwise_one(m, n, axis, monkeypatch):
    import fast_interpreter
    from triton.runtime import interpreter

    g = torch.Generator().manual_seed(m * n + axis)
    x = torch.randn(m, n, generator=g, dtype=torch.float64)
    y = 1 + torch.rand(m, n, generator=g, dtype=torch.float64) / 8
    outs = {}
    for name, impl in (("tree", fast_interpreter.tree_reduce), ("elementwise", fast_interpreter.elementwise)):
        monkeypatch.setattr(interpreter.ReduceOps, "generic_reduce", impl)
        k = m if axis == 1 else n
        got = [torch.empty(k, dtype=torch.float64) for _ in range(3)] + [torch.empty(1, dtype=torch.float64)]
        _reduce_kernel[(1,)](x, y, *got, m, n, axis)
        outs[name] = got
    for tree, elem in zip(outs["tree"], outs["elementwise"]):
        assert torch.allclose(tree, elem, rtol=1e-12, atol=1e-12)
    # and both are what the reductions mean
    assert torch.allclose(outs["tree"][0], x.sum(axis), rtol=1e-12)
    assert torch.allclose(outs["tree"][1], y.prod(axis), rtol=1e-12)
    assert torch.equal(outs["tree"][2], x[:, 0] if axis == 1 else x[0, :])
    assert outs["tree"][3].item() == x[0, 0].item()


@triton.jit
def _twice(x):
    return x * 2


@triton.jit
def _nested_kernel(X, OUT, N: tl.constexpr):
    o = tl.arange(0, N)
    x = tl.load(X + o)
    tl.store(OUT + o, _twice(_twice(x)) + tl.sum(x, 0))


def test_device_functions_inside_a_launch_and_the_language_afterwards(monkeypatch):
    import fast_interpreter
    from triton.runtime import interpreter

    original = fast_interpreter._PATCH_LANG
    patched = []
    monkeypatch.setattr(fast_interpreter, "_PATCH_LANG", lambda fn: patched.append(fn.__name__) or original(fn))
    x = torch.arange(8, dtype=torch.float32)
    got = {}
    for name, patch in (("once", fast_interpreter.patch_lang_once), ("every call", fast_interpreter._PATCH_LANG)):
        patched.clear()
        monkeypatch.setattr(interpreter, "_patch_lang", patch)
        out = torch.empty(8)
        _nested_kernel[(2,)](x, out, 8)
        got[name] = out, list(patched)
        # after the launch, triton.language is the compiler's again
        assert not fast_interpreter._LAUNCHES and not isinstance(tl.sum, type(lambda: 0))
    assert torch.equal(got["once"][0], got["every call"][0])
    assert torch.equal(got["once"][0], x * 4 + x.sum())
    # the launch and, per program, _twice twice and tl.sum; once: the launch, and tl.sum's module
    # (which sees triton.language.core, the kernel's module does not) the first time
    assert got["every call"][1] == ["_nested_kernel"] + ["_twice", "_twice", "sum"] * 2
    assert got["once"][1] == ["_nested_kernel", "sum"]
