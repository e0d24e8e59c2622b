"""What the plans read of the device and the cache: SM count, fp8 support, word alignment."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

import torch

from .layout import TQLayout, pow2_alignment


@lru_cache(maxsize=None)
def num_sms(device_index: int) -> int:
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(device_index).multi_processor_count
    return 132


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@lru_cache(maxsize=None)
def _fp8_e4b15(device_index: int) -> int:
    """1 where the GPU lacks e4m3 conversions (SM < 8.9), as the 0.24.0 store kernel."""
    if torch.cuda.is_available() and torch.version.hip is None:
        return 1 if torch.cuda.get_device_capability(device_index) < (8, 9) else 0
    return 0


@lru_cache(maxsize=None)
def fp8_mma_default(device_index: int) -> bool:
    """Whether the launchers pick the fp8 tensor-core kernels ("q", for verify "v") by
    default: Hopper GPUs (where they were measured) and the CPU interpreter (so that the
    default path is tested; "v" is run as "q" there)."""
    if _interpreting():
        return True
    if torch.cuda.is_available() and torch.version.hip is None:
        return torch.cuda.get_device_capability(device_index)[0] == 9
    return False


def cache_words_ok(layout: TQLayout, kv_cache: torch.Tensor) -> bool:
    """fp8 keys + 4-bit values whose slots can be read as aligned int32 words."""
    align = pow2_alignment(kv_cache.stride(0), kv_cache.stride(1), kv_cache.stride(2), kv_cache.storage_offset())
    return (
        layout.key_fp8
        and layout.value_bits == 4
        and align >= 4
        and layout.key_packed_size % 4 == 0
        and (layout.key_packed_size + layout.value_data_bytes) % 4 == 0
    )


@dataclass(frozen=True)
class CacheFacts:
    """What the choice of a stage-1 kernel reads of the cache and its device."""

    page: int  # tokens a page
    words_ok: bool  # fp8 keys + 4-bit values read as aligned int32 words (``cache_words_ok``)
    ptx_ok: bool  # inline PTX: an NVIDIA GPU with e4m3 conversions, not the interpreter
    hopper: bool  # on a GPU where the warp-group kernels run (``fp8_mma_default``)
    e4m3: bool  # the GPU converts fp8 e4m3 (or the interpreter)
    small: bool  # the cache's int32 word offsets fit in 31 bits

    @classmethod
    def of(cls, layout: TQLayout, kv_cache: torch.Tensor) -> "CacheFacts":
        dev_index = kv_cache.device.index or 0
        e4b15 = bool(_fp8_e4b15(dev_index))
        return cls(
            page=kv_cache.shape[1], words_ok=cache_words_ok(layout, kv_cache),
            ptx_ok=not (_interpreting() or e4b15 or torch.version.hip is not None),
            hopper=kv_cache.is_cuda and fp8_mma_default(dev_index), e4m3=not e4b15,
            small=kv_cache.numel() < (1 << 33),
        )
