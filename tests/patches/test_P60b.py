"""P60b: the GDN conv kernels read a draft-less row's conv state at the accepted offset.

* causal_conv1d_fn (the Triton _causal_conv1d_fwd_kernel) runs under the Triton
  interpreter in a fresh subprocess (vLLM turns Triton off at import when no GPU
  driver is found unless TRITON_INTERPRET is set first) and is compared with a
  plain torch reference of the causal conv over [initial window, x]; the same
  check runs compiled on a GPU in the gpu-marked test. Two interpreter gaps are
  bridged in the subprocess only: the launcher's grid function swaps the
  per-program index tensors into the launch arguments (the interpreter binds
  them, so they are given as interpreter pointers), and masked loads/stores get
  bool masks (the interpreter produces int32 ones where compiled Triton has i1).
* QwenGatedDeltaNetAttention._forward_core / _forward_core_decode_non_spec (the
  switch's decision points) run with the conv and recurrent kernels replaced by
  recorders, to check what reaches the conv kernels.

Those tests hold on 0.24.0, where P60b is carried. P60b is retired on 0.34.0 with P60:
a decode row without drafts stays on the speculative path there, whose conv update
already reads the window at the accepted offset (test_upstream_*).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types

import pytest
import torch
from _pins import only_on

ON_024 = only_on("<0.34", "P60b is carried on 0.24.0 only (its kernel switch and P60's builder field)")
UPSTREAM = only_on(">=0.34", "upstream's own routing of draft-less decode rows")

_KERNEL_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    import torch.nn.functional as F
    from vllm.model_executor.layers.mamba.ops.causal_conv1d import causal_conv1d_fn

    device = sys.argv[1]
    if device == "cpu":
        # Triton 3.9's interpreter rejects masks that come out of `&` on scalar
        # comparisons as int32 (compiled Triton has them as i1): hand it bools.
        import numpy as np
        from triton.runtime import interpreter as interp

        def _bool_mask(mask):
            if mask.data.dtype == np.bool_:
                return mask
            return interp.TensorHandle(np.asarray(mask.data).astype(bool), mask.dtype)

        _load = interp.InterpreterBuilder.create_masked_load
        _store = interp.InterpreterBuilder.create_masked_store
        # (the arguments after the mask differ between Triton releases: 3.8 passes is_volatile)
        interp.InterpreterBuilder.create_masked_load = (
            lambda self, p, m, *rest: _load(self, p, _bool_mask(m), *rest))
        interp.InterpreterBuilder.create_masked_store = (
            lambda self, p, val, m, *rest: _store(self, p, val, _bool_mask(m), *rest))
    W, DIM, NUM_SPEC = 4, 8, 2
    SL = W - 1
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(DIM, W, generator=g)
    bias = torch.randn(DIM, generator=g)
    # 6 cache lines of (dim, W - 1 + num_spec): the layout of a spec-decode GDN cache.
    conv_states = torch.randn(6, DIM, SL + NUM_SPEC, generator=g)
    # seq 0: 5 tokens, state in line 2, accepted 3 -> window starts 2 in
    # seq 1: 1 token (shift-left path), line 4, accepted 2 -> window starts 1 in
    # seq 2: new prefill, 4 tokens, line 1, no initial state
    lens = [5, 1, 4]
    lines = [2, 4, 1]
    accepted = [3, 2, 1]
    has_init = [True, True, False]
    T = sum(lens)
    x = torch.randn(T, DIM, generator=g)
    qsl = torch.tensor([0, 5, 6, 10], dtype=torch.int32)

    def reference(offsets):
        outs, states = [], {}
        for i, (n, line, init) in enumerate(zip(lens, lines, has_init)):
            s = qsl[i].item()
            xi = x[s:s + n].T
            w0 = (conv_states[line, :, offsets[i]:offsets[i] + SL] if init
                  else torch.zeros(DIM, SL))
            full = torch.cat([w0, xi], dim=1)
            y = F.conv1d(full.unsqueeze(0), weight.unsqueeze(1), bias, groups=DIM)[0]
            outs.append(F.silu(y))
            states[line] = full[:, -SL:]
        return torch.cat(outs, dim=1), states

    def metadata(device):
        # What GDNAttentionMetadataBuilder.build hands the layer for the conv launch.
        from types import SimpleNamespace
        import vllm.v1.attention.backends.utils as attn_utils
        import vllm.utils.torch_utils as torch_utils
        if device == "cpu":  # nothing to pin without an accelerator
            attn_utils.PIN_MEMORY = torch_utils.PIN_MEMORY = False
        nums_dict, batch_ptr, offset_ptr = attn_utils.compute_causal_conv1d_metadata(
            qsl, device=torch.device(device))
        if device == "cpu":
            # The launcher's grid function swaps these into the launch arguments;
            # the interpreter binds what it swaps in, so give it bound pointers.
            from triton.runtime.interpreter import _implicit_cvt
            for entry in nums_dict.values():
                entry["batch_ptr"] = _implicit_cvt(entry["batch_ptr"])
                entry["token_chunk_offset_ptr"] = _implicit_cvt(
                    entry["token_chunk_offset_ptr"])
        return SimpleNamespace(nums_dict=nums_dict, batch_ptr=batch_ptr,
                               token_chunk_offset_ptr=offset_ptr)

    def run(num_accepted):
        cs = conv_states.clone().to(device)
        kwargs = {}
        if num_accepted is not None:
            kwargs["num_accepted_tokens"] = torch.tensor(
                num_accepted, dtype=torch.int32, device=device)
        out = causal_conv1d_fn(
            x.to(device).T, weight.to(device), bias.to(device),
            conv_states=cs,
            query_start_loc=qsl.to(device),
            cache_indices=torch.tensor(lines, dtype=torch.int32, device=device),
            has_initial_state=torch.tensor(has_init, device=device),
            activation="silu", metadata=metadata(device), **kwargs)
        return out.cpu(), cs.cpu()

    def check(num_accepted, offsets):
        try:
            out, cs = run(num_accepted)
        except Exception as e:  # e.g. an unpatched causal_conv1d_fn
            return {"error": repr(e)[:300]}
        ref_out, ref_states = reference(offsets)
        untouched = [k for k in range(6) if k not in lines]
        return {
            "out": torch.allclose(out, ref_out, atol=1e-4, rtol=1e-4),
            "states": all(torch.allclose(cs[l, :, :SL], s, atol=1e-5)
                          for l, s in ref_states.items()),
            "spec_tail_kept": all(torch.equal(cs[l, :, SL:], conv_states[l, :, SL:])
                                  for l in lines),
            "others_kept": torch.equal(cs[untouched], conv_states[untouched]),
            "out_matches_offset0": torch.allclose(out, reference([0, 0, 0])[0],
                                                   atol=1e-4, rtol=1e-4),
        }

    print("RESULT" + json.dumps({
        "with_counts": check(accepted, [a - 1 for a in accepted]),
        "ones": check([1, 1, 1], [0, 0, 0]),
        "without_counts": check(None, [0, 0, 0]),
    }))
    """
)


def _run_kernel_script(device: str) -> dict:
    env = dict(os.environ)
    if device == "cpu":
        env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [sys.executable, "-c", _KERNEL_SCRIPT, device],
        env=env, capture_output=True, text=True, timeout=240,
    )
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT") :])


@pytest.fixture(scope="module")
def interpreted():
    return _run_kernel_script("cpu")


@ON_024
def test_fixed_prefill_conv_reads_window_at_accepted_offset(interpreted):
    r = interpreted["with_counts"]
    assert "error" not in r, r
    assert r["out"] is True  # outputs use the window num_accepted - 1 tokens in
    assert r["states"] is True  # the new window is written from position 0
    assert r["spec_tail_kept"] is True and r["others_kept"] is True
    assert r["out_matches_offset0"] is False  # the offset does change the result


@ON_024
def test_fixed_counts_of_one_read_from_line_start(interpreted):
    r = interpreted["ones"]
    assert "error" not in r, r
    assert r["out"] is True and r["states"] is True and r["out_matches_offset0"] is True


@ON_024
def test_off_prefill_conv_without_counts_is_upstream(interpreted):
    r = interpreted["without_counts"]
    assert "error" not in r, r
    assert r["out"] is True and r["states"] is True
    assert r["spec_tail_kept"] is True and r["others_kept"] is True


@ON_024
@pytest.mark.gpu
def test_fixed_prefill_conv_offset_compiled_on_gpu():
    r = _run_kernel_script("cuda")
    assert r["with_counts"]["out"] is True and r["with_counts"]["states"] is True
    assert r["without_counts"]["out"] is True


# ------------------------------------------------------------ layer call sites

H, K, V = 2, 4, 4
ACCEPTED = torch.tensor([3, 1], dtype=torch.int32)


def _layer(monkeypatch, meta, conv_calls):
    import vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn as qgdn

    def conv_update(x, *a, **kw):
        conv_calls.append(("update", kw))
        return x

    def conv_fn(x, *a, **kw):
        conv_calls.append(("fn", kw))
        return x

    def post_conv(conv_output, a, b, **_):
        n = conv_output.shape[0]
        q, k, v = conv_output.split([H * K, H * K, H * V], dim=-1)
        return (q.reshape(n, H, K), k.reshape(n, H, K), v.reshape(n, H, V),
                torch.zeros(n, H), torch.ones(n, H))

    def recurrent(**kw):
        n = kw["q"].shape[1]
        return torch.zeros(1, n, H, V), None

    layer = types.SimpleNamespace(
        enable_packed_recurrent_decode=False,
        prefix="layers.0.linear_attn",
        kv_cache=(torch.zeros(8, 3 * H * K, 5), torch.zeros(8, H, V, K)),
        conv1d=types.SimpleNamespace(weight=torch.zeros(3 * H * K, 1, 4), bias=None),
        activation="silu",
        A_log=torch.zeros(H),
        dt_bias=torch.zeros(H),
        num_k_heads=H,
        tp_size=1,
        head_k_dim=K,
        head_v_dim=V,
        key_dim=H * K,
        value_dim=H * V,
        chunk_gated_delta_rule=lambda **kw: (torch.zeros(1, kw["q"].shape[1], H, V), kw["initial_state"]),
        gdn_prefill_backend="flashinfer",
    )
    layer.rearrange_mixed_qkv = types.MethodType(qgdn.QwenGatedDeltaNetAttention.rearrange_mixed_qkv, layer)
    ctx = types.SimpleNamespace(attn_metadata={layer.prefix: meta})
    monkeypatch.setattr(qgdn, "get_forward_context", lambda: ctx)
    monkeypatch.setattr(qgdn, "is_conv_state_dim_first", lambda: True)
    monkeypatch.setattr(qgdn, "causal_conv1d_update", conv_update)
    monkeypatch.setattr(qgdn, "causal_conv1d_fn", conv_fn)
    monkeypatch.setattr(qgdn, "fused_post_conv_prep", post_conv)
    monkeypatch.setattr(qgdn, "fused_sigmoid_gating_delta_rule_update", recurrent)
    monkeypatch.setattr(qgdn, "fused_recurrent_gated_delta_rule_packed_decode", lambda **kw: None)
    return qgdn, layer


def _meta(num_prefills, **extra):
    from vllm.v1.attention.backends.gdn_attn import GDNAttentionMetadata

    lens = [1, 4] if num_prefills else [1, 1]
    T = sum(lens)
    qsl = torch.tensor([0, lens[0], T], dtype=torch.int32)
    fields = dict(
        num_prefills=num_prefills,
        num_prefill_tokens=4 if num_prefills else 0,
        num_decodes=1 if num_prefills else 2,
        num_decode_tokens=1 if num_prefills else 2,
        num_spec_decodes=0,
        num_spec_decode_tokens=0,
        num_actual_tokens=T,
        has_initial_state=torch.tensor([True, False]),
        non_spec_query_start_loc=qsl,
        non_spec_state_indices_tensor=torch.tensor([5, 2], dtype=torch.int32),
        prefill_query_start_loc=torch.tensor([0, 4], dtype=torch.int32),
        prefill_state_indices=torch.tensor([2], dtype=torch.int32),
        prefill_has_initial_state=torch.tensor([False]),
    )
    fields.update(extra)
    return GDNAttentionMetadata(**fields), T


def _run_core(qgdn, layer, T, packed=False):
    args = dict(mixed_qkv=torch.randn(T, 3 * H * K), b=torch.zeros(T, H), a=torch.zeros(T, H),
                core_attn_out=torch.empty(T, H, V))
    if packed:
        meta = qgdn.get_forward_context().attn_metadata[layer.prefix]
        qgdn.QwenGatedDeltaNetAttention._forward_core_decode_non_spec(layer, attn_metadata=meta, **args)
    else:
        qgdn.QwenGatedDeltaNetAttention._forward_core(layer, **args)


@ON_024
@pytest.mark.parametrize("case", ["prefill", "decode", "packed"])
def test_fixed_layer_passes_non_spec_counts_to_conv(switch, monkeypatch, case):
    switch("P60", True)
    switch("P60b", True)
    meta, T = _meta(1 if case == "prefill" else 0, non_spec_num_accepted_tokens=ACCEPTED.clone())
    calls = []
    qgdn, layer = _layer(monkeypatch, meta, calls)
    _run_core(qgdn, layer, T, packed=case == "packed")
    ((kind, kw),) = calls
    assert kind == ("fn" if case == "prefill" else "update")
    assert kw["num_accepted_tokens"].tolist() == [3, 1]


@ON_024
@pytest.mark.parametrize("case", ["prefill", "decode", "packed"])
def test_off_layer_conv_calls_as_upstream(switch, monkeypatch, case):
    switch("P60", True)
    if "P60b" in __import__("vllm_genesis.runtime", fromlist=["x"]).registry():
        switch("P60b", False)
    extra = {}
    from vllm.v1.attention.backends.gdn_attn import GDNAttentionMetadata

    if "non_spec_num_accepted_tokens" in GDNAttentionMetadata.__dataclass_fields__:
        extra["non_spec_num_accepted_tokens"] = ACCEPTED.clone()
    meta, T = _meta(1 if case == "prefill" else 0, **extra)
    calls = []
    qgdn, layer = _layer(monkeypatch, meta, calls)
    _run_core(qgdn, layer, T, packed=case == "packed")
    ((kind, kw),) = calls
    assert kind == ("fn" if case == "prefill" else "update")
    assert kw.get("num_accepted_tokens") is None


@UPSTREAM
def test_upstream_draftless_decode_rows_read_conv_state_at_accepted_offset(monkeypatch):
    # The GDN builder of 0.34.0, handed what the V2 runner gives for decode rows
    # without drafts (0 drafts, the accepted counts of the last step), and the
    # layer on the metadata it builds.
    from test_P60 import _builder, _decode_batch, _no_pinning

    _no_pinning(monkeypatch)
    meta = _builder().build(
        0, _decode_batch(2), ACCEPTED.clone(), torch.zeros(2, dtype=torch.int32)
    )
    calls = []
    recurrent = []
    qgdn, layer = _layer(monkeypatch, meta, calls)

    def spec_recurrent(**kw):
        recurrent.append(kw)
        return torch.zeros(1, kw["q"].shape[1], H, V), None

    monkeypatch.setattr(qgdn, "fused_sigmoid_gating_delta_rule_update", spec_recurrent)
    _run_core(qgdn, layer, 2)
    # One conv update for both rows, from the conv line in block column 0 at
    # the accepted offset (num_accepted - 1 tokens in); no prefill conv.
    ((kind, kw),) = calls
    assert kind == "update"
    assert kw["conv_state_indices"].tolist() == [1, 4]
    assert kw["num_accepted_tokens"].tolist() == [3, 1]
    # The recurrent kernel gets the whole block window and the same counts, so
    # it reads the state at column num_accepted - 1.
    (rkw,) = recurrent
    assert rkw["ssm_state_indices"].tolist() == [[1, 2, 3], [4, 5, 6]]
    assert rkw["num_accepted_tokens"].tolist() == [3, 1]
