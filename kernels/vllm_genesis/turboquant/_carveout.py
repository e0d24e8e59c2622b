"""The L1 / shared-memory split of a loaded kernel, set through the CUDA driver.

Triton's loader gives every kernel with more than 48 KB of shared memory the driver's
``CU_FUNC_CACHE_PREFER_SHARED`` preference, i.e. the largest shared-memory carve-out and the
smallest L1 (~28 KB of an H200 SM's 256 KB). Kernels whose 4-byte ``cp.async`` copies and
code-word loads go through the L1 run slower with it (docs/KERNELS.md "A producer warp for the
key copies"); ``prefer_carveout`` asks for a smaller carve-out instead, once per loaded kernel.
A hint to the driver: it still gives a kernel the shared memory one program needs.
"""

from __future__ import annotations

import ctypes

# Triton's loader asks for the largest carve-out for kernels of more shared memory than this
TRITON_PREFER_SHARED_ABOVE = 48 * 1024
_CU_FUNC_CACHE_PREFER_NONE = 0
_CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9
_done: dict[int, int] = {}  # function handle -> the percentage asked for
_driver: list = []  # the loaded libcuda, or None where it cannot be loaded


def _libcuda():
    if not _driver:
        try:
            _driver.append(ctypes.CDLL("libcuda.so.1"))
        except OSError:
            _driver.append(None)
    return _driver[0]


def prefer_carveout(compiled, percent: int) -> bool:
    """Asks the driver to give ``percent`` of the SM's shared-memory maximum to shared memory
    (the rest to the L1) for the loaded kernel ``compiled`` (what a Triton / Gluon launch
    returns); returns whether the driver took it. Called on every launch, it talks to the
    driver once per kernel and percentage."""
    handle = getattr(compiled, "function", None)
    if not handle:
        return False
    if _done.get(handle) == percent:
        return True
    cu = _libcuda()
    if cu is None:
        return False
    fn = ctypes.c_void_p(handle)
    ok = (cu.cuFuncSetCacheConfig(fn, ctypes.c_int(_CU_FUNC_CACHE_PREFER_NONE)) == 0
          and cu.cuFuncSetAttribute(fn, ctypes.c_int(_CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT),
                                    ctypes.c_int(percent)) == 0)
    if ok:
        _done[handle] = percent
    return ok
