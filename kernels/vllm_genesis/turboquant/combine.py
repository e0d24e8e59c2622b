"""Stage 2's launch: the merge of the split partials (``_combine_splits``), its shape and launch kind."""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch

from ._combine_splits import _tq_combine_splits
from .layout import next_pow2

if TYPE_CHECKING:
    from .stage1 import Call

# kernels "h" and "v": the combine as a programmatic dependent launch (its launch overlaps
# stage 1's end) inside CUDA graphs; an eager launch of that kind costs ~60 us more host time
# (H200, docs/KERNELS.md), so eager calls launch it plainly (it waits for nothing then)
COMBINE_PDL = True
_PDL_FORCED: bool | None = None


@contextmanager
def programmatic_combine(enabled: bool):
    """Launch the combine after kernels "h" and "v" as a programmatic dependent launch (True)
    or plainly (False) inside this block, whether or not a CUDA graph is being captured (the
    warm-up builds both variants this way)."""
    global _PDL_FORCED
    saved, _PDL_FORCED = _PDL_FORCED, enabled
    try:
        yield
    finally:
        _PDL_FORCED = saved


def pdl_launch() -> bool:
    """Whether launches that may be programmatic dependents are launched so now."""
    if _PDL_FORCED is not None:
        return _PDL_FORCED
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def combine_chunk(num_splits: int) -> int:
    """Splits the combine stage merges per step (a compile-time constant of its kernel)."""
    return min(128, max(2, next_pow2(num_splits)))


def combine_shape(num_splits: int, head_dim: int, verify: bool) -> tuple[int, int, int]:
    """The combine's launch: (splits merged a step, output columns a program, warps).

    A program holds at most 4096 partial values of a step. Verify combines run one warp a
    program: its reductions over the splits and over the raw tail's columns then stay inside
    the warp (H200, in a graph with the read flush: 1-10% less time in all than with four
    warps on eight verify rows; the decode rows level either way, so they keep four;
    docs/KERNELS.md "The combine in one warp")."""
    s_chunk = combine_chunk(num_splits)
    return s_chunk, max(16, min(head_dim, 4096 // s_chunk)), 1 if verify else 4


def launch_combine(call: "Call", num_splits: int, perm: int, pdl: bool) -> None:
    """Merge ``call``'s partials into ``call.out``; ``perm``: their column order (stage 1's);
    ``pdl``: wait for stage 1 as its programmatic dependent (where it was launched so)."""
    query, out, D = call.query, call.out, call.head_dim
    kr = call.key if call.raw_tail else query
    vr = call.value if call.raw_tail else query
    s_chunk, dc, warps = combine_shape(num_splits, D, call.has_qstart)
    _tq_combine_splits[(call.rows * (D // dc), call.num_kv_heads, call.batch)](
        call.mid_o, call.mid_l, query, kr, vr, out, call.seq_lens, call.qstart,
        query.stride(0), query.stride(1), kr.stride(0), kr.stride(1), vr.stride(0), vr.stride(1),
        out.stride(0), out.stride(1), num_splits, call.qk_scale,
        HK=call.num_kv_heads, G=call.group, QL=call.query_len, ROWS=call.rows, D=D, DC=dc, S_CHUNK=s_chunk,
        QL_PAD=max(2, next_pow2(call.query_len)), RAW_TAIL=call.raw_tail, HAS_QSTART=call.has_qstart,
        num_warps=warps, num_stages=2,
        **({"PDL": True, "launch_pdl": pdl_launch()} if pdl else {}),
        **({"PERM": perm} if perm else {}),
    )
