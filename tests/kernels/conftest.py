"""Kernel tests: the shipped package on sys.path; Triton's interpreter when there is no GPU."""

from __future__ import annotations

import os
import sys
from pathlib import Path

KERNELS = Path(__file__).resolve().parents[2] / "kernels"
if str(KERNELS) not in sys.path:
    sys.path.insert(0, str(KERNELS))


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


if not _has_cuda():
    # must be set before triton compiles (or even binds) any kernel
    os.environ["TRITON_INTERPRET"] = "1"

if os.environ.get("TRITON_INTERPRET") == "1":
    # tl.reduce on whole blocks, device functions without re-patching (see tests/fast_interpreter.py)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import fast_interpreter

    fast_interpreter.install()
