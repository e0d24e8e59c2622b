"""P60: the GDN recurrent state follows the accepted tokens into draft-less steps.

On CPU the tests drive:

* mamba_utils.copy_accepted_temporal_states, the block-column copy, through the
  Triton interpreter in a fresh subprocess (vLLM turns Triton off at import when
  no GPU driver is found unless TRITON_INTERPRET is set first);
* GPUModelRunner._genesis_p60_copy_accepted_gdn_states / _genesis_p60_state_recovery
  on a stand-in runner (the copy itself replaced by a recorder), for which layers
  and rows are handed over;
* GDNAttentionMetadataBuilder.build, built from a small config, for the per-row
  accepted counts it keeps for draft-less rows.

Those tests hold on 0.24.0, where P60 is carried. P60 is retired on 0.34.0: there the
V1 runner is gone, and the V2 runner and the GDN builder keep a decode row without
drafts on the speculative path, whose kernels read the state at the accepted offset.
The test_upstream_* tests show that on pristine 0.34.0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from _pins import on, only_on

NUM_SPEC = 2

ON_024 = only_on("<0.34", "P60 is carried on 0.24.0 only (V1 runner and P60's builder field)")
UPSTREAM = only_on(">=0.34", "upstream's own routing of draft-less decode rows")

_COPY_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    from vllm.v1.worker import mamba_utils

    # Two GDN layers, 6 cache slots each; slot stride padded past the state.
    raws = [torch.randn(6, 40, generator=torch.Generator().manual_seed(i)) for i in (1, 2)]
    raws_before = [r.clone() for r in raws]
    ssm = [r[:, :24].unflatten(1, (2, 3, 4)) for r in raws]  # (slots, H, V, K) view
    conv = [torch.zeros(6, 8, 4), torch.zeros(6, 8, 4)]
    kv = {f"l{i}": type("L", (), {"kv_cache": [conv[i], ssm[i]]})() for i in range(2)}
    from vllm.model_executor.layers.mamba.mamba_utils import (
        get_conv_copy_spec, get_temporal_copy_spec)
    targets = mamba_utils.collect_accepted_state_targets(
        ["l0", "l1"], kv, (get_conv_copy_spec, get_temporal_copy_spec),
        torch.device("cpu"))
    # rows: 0 accepted 3, no drafts now -> block 3 (col 2) copied to block 1 (col 0)
    #       1 accepted 2 but has drafts now -> untouched
    #       2 accepted 1 -> untouched
    #       3 accepted 2, no drafts, but col 1 is the null block -> untouched
    block_table = torch.tensor(
        [[1, 2, 3], [4, 5, 0], [2, 0, 0], [5, 0, 0]], dtype=torch.int32)
    na = torch.tensor([3, 2, 1, 2], dtype=torch.int32)
    ndd = torch.tensor([-1, 2, -1, -1], dtype=torch.int32)
    mamba_utils.copy_accepted_temporal_states(targets, block_table, na, ndd)
    out = {
        "row0": [torch.equal(r[1, :24], b[3, :24]) for r, b in zip(raws, raws_before)],
        "other_slots": [
            all(torch.equal(r[k], b[k]) for k in (0, 2, 3, 4, 5))
            for r, b in zip(raws, raws_before)],
        "padding": [torch.equal(r[:, 24:], b[:, 24:]) for r, b in zip(raws, raws_before)],
        "conv": all(bool((c == 0).all()) for c in conv),
    }
    print("RESULT" + json.dumps(out))
    """
)


def _run_interpreted(script: str) -> dict:
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT") :])


@ON_024
def test_fixed_copy_moves_accepted_state_to_column_zero():
    out = _run_interpreted(_COPY_SCRIPT)
    # Row 0: block 1 (column 0) now holds what block 3 (column 2) held, per layer.
    assert out["row0"] == [True, True]
    # Rows with drafts, accepted 1 or a null source block keep their slots.
    assert out["other_slots"] == [True, True]
    assert out["padding"] == [True, True]
    assert out["conv"] is True


# ---------------------------------------------------------------- runner side


def _gdn_runner(monkeypatch, spec=True, hybrid=True, mode="none"):
    from vllm.v1.attention.backends.gdn_attn import GDNAttentionBackend
    from vllm.v1.attention.backends.mamba2_attn import Mamba2AttentionBackend
    from vllm.v1.worker import mamba_utils

    calls = []
    monkeypatch.setattr(
        mamba_utils,
        "copy_accepted_temporal_states",
        lambda targets, bt, na, ndd: calls.append((targets, bt.clone(), na.clone(), ndd.clone())),
        raising=False,
    )
    states = {name: SimpleNamespace(kv_cache=[torch.zeros(4, 3, 2), torch.zeros(4, 2, 2, 2)]) for name in ("g0", "g1", "m0")}
    block_tables = [torch.tensor([[1, 2, 3], [2, 3, 1]], dtype=torch.int32), torch.tensor([[3, 1, 2], [1, 2, 3]], dtype=torch.int32)]
    runner = SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=NUM_SPEC) if spec else None,
        model_config=SimpleNamespace(is_hybrid=hybrid),
        cache_config=SimpleNamespace(mamba_cache_mode=mode),
        compilation_config=SimpleNamespace(static_forward_context=states),
        attn_groups=[
            [SimpleNamespace(backend=GDNAttentionBackend, layer_names=["g0", "g1"])],
            [SimpleNamespace(backend=Mamba2AttentionBackend, layer_names=["m0"])],
        ],
        model=SimpleNamespace(get_mamba_state_copy_func=lambda: (
            __import__("vllm.model_executor.layers.mamba.mamba_utils", fromlist=["x"]).get_conv_copy_spec,
            __import__("vllm.model_executor.layers.mamba.mamba_utils", fromlist=["x"]).get_temporal_copy_spec,
        )),
        device=torch.device("cpu"),
        input_batch=SimpleNamespace(block_table=[SimpleNamespace(get_device_tensor=lambda n, t=t: t[:n]) for t in block_tables]),
        num_accepted_tokens=SimpleNamespace(gpu=torch.tensor([3, 1, 1, 1], dtype=torch.int32)),
        num_decode_draft_tokens=SimpleNamespace(gpu=torch.tensor([-1, 2, -1, -1], dtype=torch.int32)),
    )
    return runner, calls, states


@ON_024
def test_fixed_runner_hands_gdn_states_and_counts_to_the_copy(monkeypatch, switch):
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    switch("P60", True)
    runner, calls, states = _gdn_runner(monkeypatch)
    assert GPUModelRunner._genesis_p60_state_recovery(runner) is True
    GPUModelRunner._genesis_p60_copy_accepted_gdn_states(runner, 2)
    # One call, for the GDN group only; its targets are the two GDN ssm states.
    assert len(calls) == 1
    targets, bt, na, ndd = calls[0]
    assert targets.key == (states["g0"].kv_cache[1].data_ptr(), states["g1"].kv_cache[1].data_ptr())
    assert targets.slot_bytes.tolist() == [8 * 4, 8 * 4]
    assert torch.equal(bt, torch.tensor([[1, 2, 3], [2, 3, 1]], dtype=torch.int32))
    assert na.tolist() == [3, 1] and ndd.tolist() == [-1, 2]
    # A second step reuses the address table while the caches are unchanged.
    GPUModelRunner._genesis_p60_copy_accepted_gdn_states(runner, 2)
    assert calls[1][0] is targets


@ON_024
@pytest.mark.parametrize("kw", [dict(spec=False), dict(hybrid=False), dict(mode="align"), dict(mode="all")])
def test_fixed_runner_state_recovery_scope(monkeypatch, switch, kw):
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    switch("P60", True)
    runner, _, _ = _gdn_runner(monkeypatch, **kw)
    assert GPUModelRunner._genesis_p60_state_recovery(runner) is False


@ON_024
def test_off_runner_state_recovery_disabled(monkeypatch, switch):
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    switch("P60", False)
    runner, _, _ = _gdn_runner(monkeypatch)
    if hasattr(GPUModelRunner, "_genesis_p60_state_recovery"):
        assert GPUModelRunner._genesis_p60_state_recovery(runner) is False


# --------------------------------------------------------------- builder side


def _builder(full_cudagraph=False):
    from vllm.config.compilation import CUDAGraphMode
    from vllm.v1.attention.backends.gdn_attn import GDNAttentionMetadataBuilder
    from vllm.v1.kv_cache_interface import MambaSpec

    config = SimpleNamespace(
        additional_config={},
        speculative_config=SimpleNamespace(
            num_speculative_tokens=NUM_SPEC,
            parallel_drafting=False,
            # read on 0.34.0 only
            enable_adaptive_verification=False,
            use_eagle_block_drop=lambda: False,
            max_num_new_slots_for_drafting=0,
        ),
        num_hash_lookahead_tokens=0,
        model_config=SimpleNamespace(hf_text_config=SimpleNamespace()),
        compilation_config=SimpleNamespace(
            cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE if full_cudagraph else CUDAGraphMode.PIECEWISE,
            max_cudagraph_capture_size=None,
        ),
        scheduler_config=SimpleNamespace(max_num_seqs=8),
        parallel_config=SimpleNamespace(decode_context_parallel_size=1),
        cache_config=SimpleNamespace(mamba_cache_mode="none"),
    )
    spec = MambaSpec(
        block_size=16,
        shapes=((3, 8), (2, 4, 4)),
        dtypes=(torch.float32, torch.float32),
        num_speculative_blocks=NUM_SPEC,
    )
    return GDNAttentionMetadataBuilder(spec, ["l0"], config, torch.device("cpu"))


def _decode_batch(num_reqs=3):
    from vllm.v1.attention.backend import CommonAttentionMetadata

    qsl = torch.arange(num_reqs + 1, dtype=torch.int32)
    seq_lens = torch.tensor([10, 20, 30][:num_reqs], dtype=torch.int32)
    return CommonAttentionMetadata(
        query_start_loc=qsl,
        query_start_loc_cpu=qsl.clone(),
        seq_lens=seq_lens,
        num_reqs=num_reqs,
        num_actual_tokens=num_reqs,
        max_query_len=1,
        max_seq_len=30,
        block_table_tensor=torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]][:num_reqs], dtype=torch.int32),
        slot_mapping=torch.zeros(num_reqs, dtype=torch.int64),
        is_prefilling=torch.zeros(num_reqs, dtype=torch.bool),
        seq_lens_cpu_upper_bound=seq_lens.clone(),
        # 0.24.0's host-side copies (0.34.0 has none)
        **({} if on(">=0.34") else dict(_seq_lens_cpu=seq_lens.clone(), _num_computed_tokens_cpu=seq_lens - 1)),
    )


ACCEPTED = torch.tensor([3, 1, 2], dtype=torch.int32)
NO_DRAFTS = torch.full((3,), -1, dtype=torch.int32)


@ON_024
@pytest.mark.parametrize("full_cudagraph", [False, True])
def test_fixed_builder_keeps_accepted_counts_of_draftless_rows(switch, full_cudagraph):
    switch("P60", True)
    meta = _builder(full_cudagraph).build(0, _decode_batch(), ACCEPTED.clone(), NO_DRAFTS.clone())
    assert meta.num_spec_decodes == 0 and meta.num_decodes == 3
    assert meta.num_accepted_tokens is None
    assert meta.non_spec_state_indices_tensor.tolist() == [1, 4, 7]
    assert meta.non_spec_num_accepted_tokens.tolist() == [3, 1, 2]


@ON_024
def test_fixed_builder_mixed_batch_keeps_non_spec_counts(switch, monkeypatch):
    import vllm.utils.torch_utils as torch_utils
    from vllm.v1.attention.backend import CommonAttentionMetadata

    import vllm.v1.attention.backends.utils as attn_utils

    # CPU: nothing to pin.
    monkeypatch.setattr(torch_utils, "PIN_MEMORY", False)
    monkeypatch.setattr(attn_utils, "PIN_MEMORY", False)
    switch("P60", True)
    # Row 0: spec decode with 2 drafts (3 tokens); rows 1-2: one token, no drafts.
    qsl = torch.tensor([0, 3, 4, 5], dtype=torch.int32)
    seq_lens = torch.tensor([12, 20, 30], dtype=torch.int32)
    m = CommonAttentionMetadata(
        query_start_loc=qsl,
        query_start_loc_cpu=qsl.clone(),
        seq_lens=seq_lens,
        num_reqs=3,
        num_actual_tokens=5,
        max_query_len=3,
        max_seq_len=30,
        block_table_tensor=torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]], dtype=torch.int32),
        slot_mapping=torch.zeros(5, dtype=torch.int64),
        is_prefilling=torch.zeros(3, dtype=torch.bool),
        seq_lens_cpu_upper_bound=seq_lens.clone(),
        _seq_lens_cpu=seq_lens.clone(),
        _num_computed_tokens_cpu=seq_lens - torch.tensor([3, 1, 1], dtype=torch.int32),
    )
    meta = _builder().build(0, m, torch.tensor([2, 3, 1], dtype=torch.int32), torch.tensor([2, -1, -1], dtype=torch.int32))
    assert meta.num_spec_decodes == 1
    assert meta.num_accepted_tokens.tolist() == [2]
    assert meta.non_spec_state_indices_tensor.tolist() == [4, 7]
    assert meta.non_spec_num_accepted_tokens.tolist() == [3, 1]


@ON_024
def test_off_builder_drops_accepted_counts(switch):
    switch("P60", False)
    meta = _builder().build(0, _decode_batch(), ACCEPTED.clone(), NO_DRAFTS.clone())
    assert meta.num_spec_decodes == 0 and meta.num_decodes == 3
    assert meta.num_accepted_tokens is None
    assert getattr(meta, "non_spec_num_accepted_tokens", None) is None
    assert meta.non_spec_state_indices_tensor.tolist() == [1, 4, 7]


@ON_024
def test_off_builder_without_counts_matches_upstream(switch):
    # What the unpatched runner hands over on a draft-less step: no counts at all.
    switch("P60", True)
    meta = _builder().build(0, _decode_batch())
    assert meta.num_accepted_tokens is None
    assert getattr(meta, "non_spec_num_accepted_tokens", None) is None


# ------------------------------------------------------- 0.34.0: upstream's form


def _no_pinning(monkeypatch):
    import vllm.utils.torch_utils as torch_utils
    import vllm.v1.attention.backends.utils as attn_utils

    # CPU: nothing to pin.
    monkeypatch.setattr(torch_utils, "PIN_MEMORY", False)
    monkeypatch.setattr(attn_utils, "PIN_MEMORY", False, raising=False)


@UPSTREAM
def test_upstream_v2_runner_hands_draftless_decode_rows_over_as_spec_rows(monkeypatch):
    from vllm.config.compilation import CUDAGraphMode
    from vllm.v1.worker.gpu.model_states import mamba_hybrid

    built = {}
    monkeypatch.setattr(mamba_hybrid, "build_attn_metadata", lambda **kw: built.update(kw) or {})
    state = SimpleNamespace(
        max_model_len=64,
        vllm_config=SimpleNamespace(num_speculative_tokens=NUM_SPEC),
        # per request slot: what the last step accepted
        num_accepted_tokens_gpu=torch.tensor([1, 3, 2, 1], dtype=torch.int32),
        _align_mode=False,
        _use_flashinfer_replayssm=False,
        recoverssm=None,
    )
    # Row 0: decode, no drafts this step, accepted 3 last step (ngram found no match).
    # Row 1: decode with 2 drafts. Row 2: a prompt chunk.
    scheduled = np.array([1, 3, 10], dtype=np.int32)
    qsl = np.concatenate([[0], np.cumsum(scheduled)]).astype(np.int32)
    batch = SimpleNamespace(
        num_reqs=3,
        num_tokens=int(scheduled.sum()),
        query_start_loc_np=qsl,
        query_start_loc=torch.from_numpy(qsl),
        max_query_len=10,
        num_scheduled_tokens=scheduled,
        seq_lens_cpu_upper_bound=torch.tensor([20, 30, 10], dtype=torch.int32),
        seq_lens=torch.tensor([20, 30, 10], dtype=torch.int32),
        is_prefilling_np=np.array([False, False, True]),
        prefill_runs_as_decode_np=None,
        idx_mapping=torch.tensor([1, 3, 0], dtype=torch.int64),
        num_draft_tokens_per_req=np.array([0, 2, 0], dtype=np.int32),
        dcp_local_seq_lens=None,
        positions=torch.zeros(int(scheduled.sum()), dtype=torch.int64),
        prompt_lens=None,
    )
    mamba_hybrid.MambaHybridModelState.prepare_attn(
        state, batch, CUDAGraphMode.NONE, (), torch.zeros(0), [], None
    )
    meta = built["model_specific_attn_metadata"]
    # The draft-less decode row is a spec row (0 drafts, not the -1 of a non-spec
    # row), so the GDN builder keeps its accepted count; the prompt chunk is not.
    assert meta.num_decode_draft_tokens_cpu.tolist() == [0, 2, -1]
    assert meta.num_accepted_tokens.tolist() == [3, 1, 1]


@UPSTREAM
def test_upstream_builder_runs_draftless_decode_rows_on_the_spec_path(monkeypatch):
    _no_pinning(monkeypatch)
    # Every row drafted nothing this step: the batch still takes the spec path,
    # whose kernels read each row's state at block column num_accepted - 1.
    meta = _builder().build(0, _decode_batch(), ACCEPTED.clone(), torch.zeros(3, dtype=torch.int32))
    assert meta.num_spec_decodes == 3 and meta.num_decodes == 0
    assert meta.num_accepted_tokens.tolist() == [3, 1, 2]
    assert meta.spec_state_indices_tensor.tolist() == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert meta.non_spec_state_indices_tensor is None
