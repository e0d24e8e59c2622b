"""Small real vLLM v1 schedulers for patch tests (CPU only, no network).

The model is a local directory holding only a tiny OPT ``config.json``; the tokenizer is
never loaded. The approach follows vLLM's own tests/v1/core/utils.py.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path

EOS_TOKEN_ID = 2

_TINY_OPT = {
    "architectures": ["OPTForCausalLM"],
    "model_type": "opt",
    "hidden_size": 16,
    "ffn_dim": 32,
    "num_attention_heads": 2,
    "num_hidden_layers": 1,
    "max_position_embeddings": 2048,
    "vocab_size": 128,
    "word_embed_proj_dim": 16,
    "do_layer_norm_before": True,
    "torch_dtype": "float16",
    "bos_token_id": 2,
    "eos_token_id": EOS_TOKEN_ID,
    "pad_token_id": 1,
}


def tiny_model_dir(root: Path) -> Path:
    path = root / "tiny-opt"
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(_TINY_OPT), encoding="utf-8")
    return path


_MODEL_CONFIGS: dict = {}


@contextmanager
def _tree_on_pythonpath():
    """vLLM inspects model classes in a subprocess, which must import the same tree."""
    import vllm

    tree = str(Path(vllm.__file__).resolve().parents[1])
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([tree] + ([saved] if saved else []))
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def _model_config(model_dir: Path, max_model_len: int, **extra):
    """One ModelConfig per model directory and length: building it inspects the model
    class in a subprocess, which is the slow part of making a scheduler."""
    from vllm.config import ModelConfig

    key = (str(model_dir), max_model_len, tuple(sorted(extra.items())))
    if key in _MODEL_CONFIGS:
        return _MODEL_CONFIGS[key]
    with _tree_on_pythonpath():
        model_config = ModelConfig(
            model=str(model_dir),
            dtype="float16",
            seed=42,
            skip_tokenizer_init=True,
            max_model_len=max_model_len,
            **extra,
        )
    _MODEL_CONFIGS[key] = model_config
    return model_config


def create_vllm_config(
    model_dir: Path,
    *,
    max_num_seqs: int = 16,
    max_num_batched_tokens: int = 256,
    max_model_len: int = 256,
    block_size: int = 16,
    num_speculative_tokens: int | None = None,
    async_scheduling: bool = False,
    enable_prefix_caching: bool = False,
    draft_model_dir: Path | None = None,
    enable_prompt_embeds: bool = False,
):
    from vllm.config import CacheConfig, DeviceConfig, ParallelConfig, SchedulerConfig, SpeculativeConfig, VllmConfig

    extra = {"enable_prompt_embeds": True} if enable_prompt_embeds else {}
    model_config = _model_config(model_dir, max_model_len, **extra)
    scheduler_config = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        enable_chunked_prefill=True,
        async_scheduling=async_scheduling,
        is_encoder_decoder=False,
        watermark=0.0,
    )
    cache_config = CacheConfig(
        block_size=block_size,
        gpu_memory_utilization=0.9,
        cache_dtype="auto",
        enable_prefix_caching=enable_prefix_caching,
    )
    speculative_config = None
    if num_speculative_tokens is not None and draft_model_dir is not None:
        with _tree_on_pythonpath():
            speculative_config = SpeculativeConfig(
                model=str(draft_model_dir),
                method="draft_model",
                num_speculative_tokens=num_speculative_tokens,
                target_model_config=model_config,
                target_parallel_config=ParallelConfig(),
            )
    elif num_speculative_tokens is not None:
        # Async scheduling takes the GPU n-gram drafter; both need no draft model.
        method = "ngram_gpu" if async_scheduling else "ngram"
        speculative_config = SpeculativeConfig(
            method=method, num_speculative_tokens=num_speculative_tokens, prompt_lookup_min=2, prompt_lookup_max=3
        )
    vllm_config = VllmConfig(
        scheduler_config=scheduler_config,
        model_config=model_config,
        cache_config=cache_config,
        parallel_config=ParallelConfig(),
        device_config=DeviceConfig(device="cpu"),
        speculative_config=speculative_config,
    )
    return vllm_config


def create_scheduler(
    model_dir: Path,
    *,
    num_blocks: int = 1000,
    block_size: int = 16,
    async_scheduling: bool = False,
    **kwargs,
):
    import torch

    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    vllm_config = create_vllm_config(model_dir, block_size=block_size, async_scheduling=async_scheduling, **kwargs)
    cache_config = vllm_config.cache_config
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["layer"], FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32)
            )
        ],
    )
    cache_config.num_gpu_blocks = num_blocks
    register_all_kvcache_specs(vllm_config)
    cls = AsyncScheduler if async_scheduling else Scheduler
    return cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        block_size=block_size,
        log_stats=True,
        structured_output_manager=StructuredOutputManager(vllm_config),
    )


_hash_ready = False


def create_requests(n: int, num_tokens: int = 8, max_tokens: int = 16, block_size: int = 16, prefix: str = "r"):
    global _hash_ready
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    if not _hash_ready:
        init_none_hash(sha256)
        _hash_ready = True
    params = SamplingParams(ignore_eos=True, max_tokens=max_tokens)
    params.update_from_generation_config({}, EOS_TOKEN_ID)
    hasher = get_request_block_hasher(block_size, sha256)
    return [
        Request(
            request_id=f"{prefix}{i}",
            prompt_token_ids=[10 + i] * num_tokens,
            sampling_params=params,
            pooling_params=None,
            block_hasher=hasher,
        )
        for i in range(n)
    ]


def model_output(scheduler_output, sampled: dict[str, list[int]]):
    """A ModelRunnerOutput for the requests of ``scheduler_output`` (others get no tokens)."""
    from vllm.v1.outputs import ModelRunnerOutput

    import dataclasses

    req_ids = list(scheduler_output.num_scheduled_tokens)
    fields = {f.name for f in dataclasses.fields(ModelRunnerOutput)}
    # 0.34.0 dropped req_id_to_index: the scheduler indexes by req_ids itself.
    index = {"req_id_to_index": {r: i for i, r in enumerate(req_ids)}} if "req_id_to_index" in fields else {}
    return ModelRunnerOutput(
        req_ids=req_ids,
        **index,
        sampled_token_ids=[list(sampled.get(r, [])) for r in req_ids],
        logprobs=None,
        prompt_logprobs_dict={},
        pooler_output=[],
    )


def run_async_steps(sched, requests, steps: int, sampled_token: int = 7):
    """Drive an AsyncScheduler as the engine does: step N+1 is scheduled before the
    output of step N is processed. Every scheduled request samples one token (all drafts
    rejected). Returns, per step, the scheduler output, the request ids of the previous
    step, and each request's spec_token_ids right after scheduling."""
    steps_out = []
    prev = None
    prev_ids: set[str] = set()
    for _ in range(steps):
        out = sched.schedule()
        spec_after = {r.request_id: list(r.spec_token_ids) for r in requests}
        steps_out.append((out, prev_ids, spec_after))
        if prev is not None:
            sched.update_from_output(prev, model_output(prev, {r: [sampled_token] for r in prev.num_scheduled_tokens}))
        prev, prev_ids = out, set(out.num_scheduled_tokens)
    return steps_out


def placeholder_leaks(steps_out):
    """(step, request id) where -1 drafts were scheduled for a request absent from the
    previous step: the worker has no slot to overwrite them from."""
    return [
        (i, rid)
        for i, (out, prev_ids, _) in enumerate(steps_out)
        for rid, toks in out.scheduled_spec_decode_tokens.items()
        if any(t < 0 for t in toks) and rid not in prev_ids
    ]


def allow_cpu_runner(monkeypatch) -> None:
    """Let GPUModelRunner.__init__ run on this CPU-only machine: no pinned memory and a
    compute-unit count, the two things the unspecified platform cannot answer."""
    import sys

    from vllm.platforms import current_platform
    from vllm.v1.utils import CpuGpuBuffer

    monkeypatch.setattr(current_platform, "is_pin_memory_available", lambda: False, raising=False)
    monkeypatch.setattr(current_platform, "num_compute_units", lambda *args: 1, raising=False)
    monkeypatch.setitem(CpuGpuBuffer.__init__.__kwdefaults__, "pin_memory", False)
    for name, module in list(sys.modules.items()):
        if name.startswith("vllm") and getattr(module, "PIN_MEMORY", None) is True:
            monkeypatch.setattr(module, "PIN_MEMORY", False)

