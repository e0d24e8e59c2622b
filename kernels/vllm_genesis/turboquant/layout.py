"""The TurboQuant KV-cache layout of vLLM 0.24.0, and launch heuristics.

The cache is one uint8 tensor ``[num_blocks, block_size, num_kv_heads, slot]``; each
(token, KV head) slot holds, in this order:

* the key: ``D`` fp8 (E4M3) bytes for ``turboquant_k8v4``, or, for the MSE presets,
  ``ceil(D * key_bits / 8)`` bytes of Lloyd-Max indices (little-endian bit stream,
  index ``d`` at bit ``d * key_bits``) followed by the key norm (fp16) -- the indices
  address centroids of the Hadamard-rotated unit key;
* the value: ``ceil(D * value_bits / 8)`` bytes of unsigned codes (4-bit: two per byte,
  even ``d`` in the low nibble; 3-bit: the same little-endian bit stream), then the
  fp16 scale and the fp16 zero (``v = code * scale + zero``);
* one byte of padding when the sum is odd.

This module only does arithmetic on these numbers; it imports neither vLLM nor Triton.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# preset -> (key bits, value bits, norm correction); 8 key bits means fp8 keys
PRESETS: dict[str, tuple[int, int, bool]] = {
    "turboquant_k8v4": (8, 4, False),
    "turboquant_4bit_nc": (4, 4, True),
    "turboquant_k3v4_nc": (3, 4, True),
    "turboquant_3bit_nc": (3, 3, True),
}


@dataclass(frozen=True)
class TQLayout:
    head_dim: int
    key_bits: int  # 8 = fp8 keys, 3 or 4 = MSE (Lloyd-Max) keys
    value_bits: int  # 3 or 4
    norm_correction: bool = False

    @classmethod
    def from_preset(cls, name: str, head_dim: int) -> "TQLayout":
        if name not in PRESETS:
            raise ValueError(f"unknown TurboQuant preset {name!r}; known: {', '.join(PRESETS)}")
        kb, vb, nc = PRESETS[name]
        return cls(head_dim, kb, vb, nc)

    @property
    def key_fp8(self) -> bool:
        return self.key_bits == 8

    @property
    def mse_bits(self) -> int:
        return 0 if self.key_fp8 else self.key_bits

    @property
    def mse_bytes(self) -> int:
        return math.ceil(self.head_dim * self.mse_bits / 8)

    @property
    def key_packed_size(self) -> int:
        return self.head_dim if self.key_fp8 else self.mse_bytes + 2

    @property
    def value_data_bytes(self) -> int:
        return math.ceil(self.head_dim * self.value_bits / 8)

    @property
    def slot_size(self) -> int:
        return self.key_packed_size + self.value_data_bytes + 4

    @property
    def slot_size_aligned(self) -> int:
        s = self.slot_size
        return s + (s % 2)

    def check(self) -> None:
        d = self.head_dim
        if d < 16 or d & (d - 1):
            raise ValueError(f"head_dim {d} is not supported (power of two >= 16 needed)")
        if self.key_bits not in (3, 4, 8):
            raise ValueError(f"key_bits {self.key_bits} is not supported (3, 4 or 8)")
        if self.value_bits not in (3, 4):
            raise ValueError(f"value_bits {self.value_bits} is not supported (3 or 4)")


def pow2_alignment(*numbers: int, cap: int = 16) -> int:
    """The largest power of two (at most ``cap``) dividing every number."""
    a = cap
    for n in numbers:
        while a > 1 and n % a:
            a //= 2
    return a


def pick_num_splits(
    batch: int,
    num_kv_heads: int,
    max_context: int,
    num_sms: int = 132,
    *,
    ctas_per_sm: int = 16,
    min_tokens_per_split: int = 128,
    max_splits: int | None = None,
) -> int:
    """Split count for the split-K pass: enough programs to fill the GPU, none tiny.

    One program serves one (sequence, KV head, split); the split count is chosen so the
    grid has about ``ctas_per_sm`` programs per SM, while each split keeps at least
    ``min_tokens_per_split`` tokens of the longest context and there are at most
    ``max_splits`` (64, or 128 from 64K tokens on) -- the combine stage reads every split.
    The constants come from H200 sweeps (docs/KERNELS.md).
    """
    if max_splits is None:
        max_splits = 128 if max_context >= 65536 else 64
    programs = max(1, batch * num_kv_heads)
    want = -(-ctas_per_sm * num_sms // programs)
    cap = max(1, -(-max(1, max_context) // min_tokens_per_split))
    return int(max(1, min(want, cap, max_splits)))


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()
