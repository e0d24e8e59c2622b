"""Three costs of Triton's CPU interpreter that the kernel tests, and the scripts the patch tests
run under it (tests/interpreter_site/sitecustomize.py), do not need to pay.

1. ``tl.reduce``.

The interpreter runs ``tl.sum``/``tl.max``/``tl.min`` as NumPy reductions, but any other combine
function (the kernels' ``_add2``, which sums two values in one pass) element by element in
Python: a 16 x 64 tile costs 1024 interpreted calls of the combine function, and that alone was
over half of the kernel tests' time. Triton defines ``tl.reduce`` only for associative combine
functions and the GPU reduces as a tree (adjacent pairs, then pairs of pairs), so the same
tree is run here on whole slices: log2(n) calls of the combine function on NumPy blocks. Float
sums then round in the GPU's order rather than the interpreter's left-to-right one.

2. Device-function calls. A launch points ``triton.language`` at the interpreter's versions of
its builtins (and puts the originals back at its end); then every call of a ``@triton.jit``
helper inside the kernel does the same again, walking the modules with ``inspect.getmembers``:
about a quarter of the time of the tests that call small helpers in loops. Inside a launch
that already patched the modules the helper sees, that second pass changes nothing and is
skipped.

3. Integer-overflow checks. The interpreter redoes every 32-bit integer add, subtract and
multiply in 64 bits and compares the result with the 32-bit range, then hands the outcome to a
device assert that does nothing unless Triton's debug option is on (off by default, here and in
GPU builds): work with no effect, which costs more than the arithmetic itself. It is skipped;
GQUEUE_TRITON_OVERFLOW_CHECKS=1 turns the checks on for real (debug included), and
test_overflow_checks.py runs a decode and a verify case that way.

``install()`` puts these in place; tests/kernels/test_fast_interpreter.py checks them against
the interpreter's own.
"""

from __future__ import annotations

import dataclasses
import inspect
import os

import numpy as np
import triton.language as tl
from triton.runtime import interpreter

_ELEMENTWISE = interpreter.ReduceOps.generic_reduce


def tree_reduce(self: interpreter.ReduceOps, inputs):
    """Reduce ``inputs`` (a tuple of same-shaped tensors) along ``self.axis`` with
    ``self.combine_fn``, halving the axis at each step."""
    original_axis = self.axis
    inputs, axis = self.unravel(inputs, self.axis)
    dtypes = [t.dtype for t in inputs]
    blocks = [t.handle.data for t in inputs]
    shape = blocks[0].shape
    if shape[axis] & (shape[axis] - 1) or not shape[axis]:  # Triton's blocks are powers of two
        return _ELEMENTWISE(self, inputs)
    while blocks[0].shape[axis] > 1:
        n = blocks[0].shape[axis]
        half = n // 2
        lo = [np.take(b, range(0, 2 * half, 2), axis=axis) for b in blocks]
        hi = [np.take(b, range(1, 2 * half, 2), axis=axis) for b in blocks]
        out = self.combine_fn.fn(*(self.to_tensor(b, d) for b, d in zip(lo, dtypes)),
                                 *(self.to_tensor(b, d) for b, d in zip(hi, dtypes)))
        out = out if isinstance(out, tuple) else (out,)
        combined = [np.broadcast_to(np.asarray(o.handle.data), lo[0].shape).astype(b.dtype)
                    for o, b in zip(out, blocks)]
        blocks = combined
    results = []
    for data, dtype in zip(blocks, dtypes):
        data = np.squeeze(data, axis=axis)
        if self.keep_dims:
            if original_axis is not None:
                data = np.expand_dims(data, axis)
            else:
                data = data.reshape((1,) * len(shape))
        elif original_axis is None:
            data = data.item()
        results.append(self.to_tensor(data, dtype))
    return results


_PATCH_LANG = interpreter._patch_lang
_LAUNCHES: list[frozenset[int]] = []  # the language modules the running launch patched


def _languages(fn) -> frozenset[int]:
    return frozenset(id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and v in (tl, tl.core))


class _LaunchScope:
    def __init__(self, scope) -> None:
        self.scope = scope

    def restore(self) -> None:
        _LAUNCHES.pop()
        self.scope.restore()


class _Unchanged:
    def restore(self) -> None:
        pass


def patch_lang_once(fn):
    """The interpreter's ``_patch_lang``, skipped for device functions called inside a launch
    that already patched every language module they see."""
    if _LAUNCHES:
        seen = _languages(fn)
        if seen <= _LAUNCHES[-1]:
            return _Unchanged()
        # a helper that sees other modules (tl.standard sees tl.core): patched as the interpreter
        # does (its scope is never restored), once a launch
        _LAUNCHES[-1] |= seen
        return _PATCH_LANG(fn)
    scope = _PATCH_LANG(fn)
    _LAUNCHES.append(_languages(fn))
    return _LaunchScope(scope)


def overflow_checks(on: bool) -> bool:
    """Integer-overflow checks (and the device asserts that report them) on or off; returns
    whether they were on."""
    builder = interpreter.interpreter_builder
    before = builder.options.sanitize_overflow and builder.options.debug
    builder.options = dataclasses.replace(builder.options, sanitize_overflow=on, debug=on)
    return before


def install() -> None:
    interpreter.ReduceOps.generic_reduce = tree_reduce
    interpreter._patch_lang = patch_lang_once
    overflow_checks(os.environ.get("GQUEUE_TRITON_OVERFLOW_CHECKS") == "1")


def elementwise(self: interpreter.ReduceOps, inputs):
    """The interpreter's own element-by-element fallback (for the check against it)."""
    return _ELEMENTWISE(self, inputs)
