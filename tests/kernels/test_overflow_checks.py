"""A decode and a verify case with the interpreter's integer-overflow checks on (the other kernel
tests run without them: see fast_interpreter.py)."""

from __future__ import annotations

import os

import pytest

import test_tq_decode
import test_tq_verify

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="checks the CPU interpreter")


@pytest.fixture
def overflow_checks():
    import fast_interpreter

    before = fast_interpreter.overflow_checks(True)
    yield
    fast_interpreter.overflow_checks(before)


def test_checks_are_on_and_catch_an_overflow(overflow_checks):
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _wraps(X, OUT):
        x = tl.load(X)
        tl.store(OUT, x * 65536 * 65536)

    x = torch.tensor([3], dtype=torch.int32)
    with pytest.raises(Exception, match="overflow"):
        _wraps[(1,)](x, torch.empty(1, dtype=torch.int32))


def test_decode_with_overflow_checks(overflow_checks):
    test_tq_decode.test_decode_k8v4_matches_float64(12, 2)


def test_verify_with_overflow_checks(overflow_checks):
    test_tq_verify.test_verify_raw_tail_matches_float64(12, 2, [6, 1, 8, 3])
