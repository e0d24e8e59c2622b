"""P100: FlashInfer reports UNIFORM_BATCH CUDA-graph support for native spec decode.

No FlashInfer package is needed: a stand-in module satisfies the backend's imports
(wrapper classes are never constructed here). The kernel path needs a GPU run.

Those tests hold on 0.24.0, where P100 is carried. P100 is retired on 0.34.0, whose
FlashInfer backend reports UNIFORM_BATCH for uniform causal spec queries itself: fa2
decode below SM90, XQA decode on SM90 and SM12x, trtllm-gen on SM100 (test_upstream_*).
"""

from __future__ import annotations

import importlib.machinery
import sys
import types

import pytest
import torch

from _pins import only_on
from _vllm_sched import create_vllm_config, tiny_model_dir

ON_024 = only_on("<0.34", "P100 is carried on 0.24.0 only")
UPSTREAM = only_on(">=0.34", "0.34.0's own CUDA-graph support for spec decode")

_STUB_NAMES = {
    "flashinfer": [
        "BatchAttentionWithAttentionSinkWrapper",
        "BatchDecodeWithPagedKVCacheWrapper",
        "BatchPrefillWithPagedKVCacheWrapper",
        "BatchPrefillWithRaggedKVCacheWrapper",
        "MultiLevelCascadeAttentionWrapper",
        "get_seq_lens",
        "nvfp4_quantize_append_paged_kv_cache_with_slot_mapping",
    ],
    "flashinfer.decode": ["fast_decode_plan", "trtllm_batch_decode_with_kv_cache"],
    "flashinfer.prefill": ["trtllm_batch_context_with_kv_cache"],
    "flashinfer.utils": ["FP4Tensor", "get_device_sm_count", "get_trtllm_gen_multi_ctas_kv_counter_bytes"],
}


@pytest.fixture
def backend(monkeypatch):
    """vllm.v1.attention.backends.flashinfer imported over a stand-in flashinfer."""
    for name, attrs in _STUB_NAMES.items():
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        for attr in attrs:
            setattr(module, attr, type(attr, (), {}))
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.delitem(sys.modules, "vllm.v1.attention.backends.flashinfer", raising=False)
    import vllm.v1.attention.backends.flashinfer as fi

    yield fi
    sys.modules.pop("vllm.v1.attention.backends.flashinfer", None)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("p100"))


def _support(fi, monkeypatch, config, trtllm: bool):
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    # Hardware capability: whether TRTLLM-gen kernels exist for this GPU.
    monkeypatch.setattr(fi, "can_use_trtllm_attention", lambda **kwargs: trtllm)
    spec = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=8, dtype=torch.float16)
    return fi.FlashInferMetadataBuilder.get_cudagraph_support(config, spec)


@ON_024
def test_fixed_native_spec_decode_gets_uniform_batch(switch, backend, model_dir, monkeypatch):
    from vllm.v1.attention.backend import AttentionCGSupport

    switch("P100", True)
    config = create_vllm_config(model_dir, num_speculative_tokens=3)
    assert _support(backend, monkeypatch, config, trtllm=False) == AttentionCGSupport.UNIFORM_BATCH


@ON_024
def test_on_other_configs_keep_upstream_levels(switch, backend, model_dir, monkeypatch):
    from vllm.v1.attention.backend import AttentionCGSupport

    switch("P100", True)
    no_spec = create_vllm_config(model_dir)
    assert _support(backend, monkeypatch, no_spec, trtllm=False) == AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE
    spec = create_vllm_config(model_dir, num_speculative_tokens=3)
    assert _support(backend, monkeypatch, spec, trtllm=True) == AttentionCGSupport.UNIFORM_BATCH
    spec.attention_config.use_non_causal = True
    assert _support(backend, monkeypatch, spec, trtllm=False) == AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE


@ON_024
def test_off_native_spec_decode_stays_single_token(switch, backend, model_dir, monkeypatch):
    from vllm.v1.attention.backend import AttentionCGSupport

    switch("P100", False)
    config = create_vllm_config(model_dir, num_speculative_tokens=3)
    assert _support(backend, monkeypatch, config, trtllm=False) == AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE
    assert _support(backend, monkeypatch, config, trtllm=True) == AttentionCGSupport.UNIFORM_BATCH


class _Wrapper:
    """Stand-in FlashInfer wrapper: records construction and plan() arguments."""

    def __init__(self, *args, **kwargs):
        self.init_kwargs = kwargs
        self.plans = []

    def plan(self, *args, **kwargs):
        # Copy tensors: the builder plans from views of persistent buffers.
        self.plans.append({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()})


class _CopyPageIndices:
    """Torch stand-in for the Triton _copy_page_indices_kernel (no GPU here)."""

    def __getitem__(self, grid):
        def run(out, block_table, stride, indptr, BLOCK_SIZE):
            for row in range(grid[0]):
                start, end = int(indptr[row]), int(indptr[row + 1])
                out[start:end] = block_table[row, : end - start]

        return run


def _builder(fi, monkeypatch, model_dir, k: int, cudagraph: bool):
    from vllm.config import CUDAGraphMode
    from vllm.v1.attention.backends.utils import PerLayerParameters
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    from _vllm_sched import allow_cpu_runner

    allow_cpu_runner(monkeypatch)
    monkeypatch.setattr(fi, "can_use_trtllm_attention", lambda *a, **kw: False)
    monkeypatch.setattr(fi, "BatchPrefillWithPagedKVCacheWrapper", _Wrapper)
    monkeypatch.setattr(fi, "BatchDecodeWithPagedKVCacheWrapper", _Wrapper)
    params = PerLayerParameters(window_left=-1, logits_soft_cap=None, sm_scale=0.35, has_sinks=False)
    monkeypatch.setattr(fi, "get_per_layer_parameters", lambda *a: {"layer": params})
    monkeypatch.setattr(fi, "_copy_page_indices_kernel", _CopyPageIndices())
    config = create_vllm_config(model_dir, num_speculative_tokens=k)
    config.compilation_config.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE if cudagraph else CUDAGraphMode.NONE
    spec = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=8, dtype=torch.float16)
    return config, lambda: fi.FlashInferMetadataBuilder(spec, ["layer"], config, torch.device("cpu"))


def _uniform_batch(num_reqs: int, q_len: int, seq_lens: list[int]):
    from vllm.v1.attention.backend import CommonAttentionMetadata

    qsl = torch.arange(0, (num_reqs + 1) * q_len, q_len, dtype=torch.int32)
    seq = torch.tensor(seq_lens, dtype=torch.int32)
    return CommonAttentionMetadata(
        query_start_loc=qsl,
        query_start_loc_cpu=qsl.clone(),
        seq_lens=seq,
        _seq_lens_cpu=seq.clone(),
        _num_computed_tokens_cpu=seq - q_len,
        num_reqs=num_reqs,
        num_actual_tokens=num_reqs * q_len,
        max_query_len=q_len,
        max_seq_len=max(seq_lens),
        block_table_tensor=torch.arange(num_reqs * 4, dtype=torch.int32).reshape(num_reqs, 4),
        slot_mapping=torch.zeros(num_reqs * q_len, dtype=torch.int64),
    )


@ON_024
@pytest.mark.parametrize("cudagraph", [False, True])
def test_fixed_uniform_verify_batch_plans_a_causal_spec_decode(switch, backend, model_dir, monkeypatch, cudagraph):
    from vllm.config import set_current_vllm_config

    switch("P100", True)
    k = 2

    config, make = _builder(backend, monkeypatch, model_dir, k, cudagraph)
    with set_current_vllm_config(config):
        builder = make()
        meta = builder.build(0, _uniform_batch(3, 1 + k, [10, 20, 33]))
        again = builder.build(0, _uniform_batch(3, 1 + k, [11, 21, 34]))
    assert builder.reorder_batch_threshold == 1 + k
    assert meta.num_decodes == 3 and meta.num_prefills == 0
    assert isinstance(meta.decode, backend.FISpecDecode)
    plan, second = meta.decode.wrapper.plans
    assert plan["causal"] is True
    assert plan["qo_indptr"].tolist() == [0, 3, 6, 9]
    assert plan["paged_kv_indptr"].tolist() == [0, 1, 3, 6]
    assert plan["paged_kv_last_page_len"].tolist() == [10, 4, 1]
    if cudagraph:
        init = meta.decode.wrapper.init_kwargs
        assert init["use_cuda_graph"] is True
        assert init["qo_indptr_buf"].shape[0] == 4 and init["paged_kv_last_page_len_buf"].shape[0] == 3
    else:
        assert "use_cuda_graph" not in meta.decode.wrapper.init_kwargs
        assert meta.decode.wrapper is not builder._prefill_wrapper
    # One wrapper per batch size (or one eager wrapper), reused across steps.
    assert again.decode.wrapper is meta.decode.wrapper
    assert second["paged_kv_last_page_len"].tolist() == [11, 5, 2]


@ON_024
def test_off_uniform_verify_batch_is_a_prefill(switch, backend, model_dir, monkeypatch):
    from vllm.config import set_current_vllm_config

    switch("P100", False)

    config, make = _builder(backend, monkeypatch, model_dir, 2, cudagraph=True)
    with set_current_vllm_config(config):
        builder = make()
        meta = builder.build(0, _uniform_batch(3, 3, [10, 20, 33]))
    assert builder.reorder_batch_threshold == 1
    assert meta.num_decodes == 0 and meta.num_prefills == 3
    assert meta.decode is None
    assert isinstance(meta.prefill, backend.FIPrefill)


def _support_on(fi, monkeypatch, config, *, fa2: bool, sm90: bool = False, xqa_kernels: bool = True):
    """0.34.0's get_cudagraph_support on a stand-in GPU: fa2 native decode (below SM90),
    or SM90 with or without the XQA decode kernels (trtllm support)."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    monkeypatch.setattr(fi, "_use_fa2_native_decode", lambda: fa2)
    monkeypatch.setattr(fi.current_platform, "is_device_capability", lambda cap: sm90 and cap == 90, raising=False)
    monkeypatch.setattr(fi.current_platform, "is_device_capability_family", lambda fam: False, raising=False)
    monkeypatch.setattr(fi, "can_use_trtllm_attention", lambda **kwargs: xqa_kernels)
    spec = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=torch.float16)
    return fi.FlashInferMetadataBuilder.get_cudagraph_support(config, spec)


@UPSTREAM
def test_upstream_fa2_native_decode_graphs_uniform_spec_batches(backend, model_dir, monkeypatch):
    from vllm.v1.attention.backend import AttentionCGSupport

    # Below SM90 (the case P100 was written for on 0.24.0): no TRTLLM-gen kernels,
    # and still full decode graphs for the K + 1 verify batches.
    spec = create_vllm_config(model_dir, num_speculative_tokens=3)
    assert _support_on(backend, monkeypatch, spec, fa2=True) == AttentionCGSupport.UNIFORM_BATCH
    # Non-causal (DFlash) drafting keeps single-token graphs, as P100 did.
    spec.attention_config.use_non_causal = True
    assert _support_on(backend, monkeypatch, spec, fa2=True) == AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE


@UPSTREAM
def test_upstream_xqa_decode_graphs_uniform_spec_batches_on_sm90(backend, model_dir, monkeypatch):
    from vllm.v1.attention.backend import AttentionCGSupport

    spec = create_vllm_config(model_dir, num_speculative_tokens=3)
    assert _support_on(backend, monkeypatch, spec, fa2=False, sm90=True) == AttentionCGSupport.UNIFORM_BATCH
    # Left open upstream (docs/RETIRED.md): SM90 without the XQA kernels (no
    # artifactory access for the cubins, forced off) still gets single-token graphs.
    assert (
        _support_on(backend, monkeypatch, spec, fa2=False, sm90=True, xqa_kernels=False)
        == AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE
    )
