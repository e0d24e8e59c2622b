"""PN517: Worker.init_device measures free memory before the distributed init.

init_device only runs for CUDA, so the CUDA calls around the code under test are
replaced: the device calls do nothing, the distributed init marks that NCCL now holds
memory, and MemorySnapshot reports the free memory of a simulated 24 GiB card (the
numbers of the upstream report: 8.76 GiB of communicator buffers on a PP-last rank,
gpu_memory_utilization 0.70). request_memory, the check that fails, is the real one.
The test stops right after the snapshot section (0.24.0: at the workspace manager; 0.34.0:
at the workspace and model-runner set-up). 0.34.0 also creates the cuBLAS handles (a small
matmul on the device, run here on the CPU) and asks the model loader for externally held
weights (none here) between the distributed init and its snapshot.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from types import SimpleNamespace

import pytest

from _pins import on

GiB = 1 << 30
TOTAL = int(23.56 * GiB)
NCCL = int(8.76 * GiB)


class _Stop(Exception):
    pass


class _CpuTensors:
    """torch as gpu_worker sees it, but a tensor asked for on a CUDA device is made on the CPU."""

    def __init__(self, torch):
        self._torch = torch

    def __getattr__(self, name):
        return getattr(self._torch, name)

    def ones(self, *size, device=None, **kwargs):
        return self._torch.ones(*size, **kwargs)


class _NoExternalWeights:
    def get_external_weight_memory(self, vllm_config) -> int:
        return 0


@pytest.fixture(scope="module")
def gpu_worker():
    import vllm.v1.worker.gpu_worker as module

    return module


@pytest.fixture
def run_init(gpu_worker, monkeypatch):
    import torch

    from vllm.utils.mem_utils import MemorySnapshot

    events: list[str] = []
    state = {"nccl": False}

    def snapshot(device=None):
        free = TOTAL - (NCCL if state["nccl"] else 0)
        events.append(f"snapshot free={free}")
        return MemorySnapshot(device=device, free_memory=free, total_memory=TOTAL, auto_measure=False)

    def dist_init(*args, **kwargs):
        events.append("dist_init")
        state["nccl"] = True

    def stop(*args, **kwargs):
        raise _Stop

    platform = gpu_worker.current_platform
    monkeypatch.setattr(gpu_worker, "MemorySnapshot", snapshot)
    monkeypatch.setattr(gpu_worker, "init_worker_distributed_environment", dist_init)
    monkeypatch.setattr(gpu_worker, "set_random_seed", lambda seed: None)
    if on(">=0.34"):
        monkeypatch.setattr(gpu_worker, "torch", _CpuTensors(torch))
        monkeypatch.setattr(gpu_worker, "warn_if_flashinfer_kernels_missing", lambda: None)
        monkeypatch.setattr(gpu_worker, "get_model_loader", lambda config: _NoExternalWeights())
        monkeypatch.setattr("vllm.distributed.localization.maybe_init_localized_resources", lambda device: None)
        monkeypatch.setattr(gpu_worker.Worker, "_init_workspace_and_model_runner", stop)
    else:
        monkeypatch.setattr(gpu_worker, "init_workspace_manager", stop)
    monkeypatch.setattr(torch.accelerator, "device_count", lambda: 4)
    monkeypatch.setattr(torch.accelerator, "set_device_index", lambda device: None)
    monkeypatch.setattr(torch.accelerator, "empty_cache", lambda: None)
    monkeypatch.setattr(platform, "logical_device_id_to_visible_device_id", lambda rank: rank, raising=False)
    monkeypatch.setattr(platform, "check_if_supports_dtype", lambda dtype: None, raising=False)
    monkeypatch.setattr(platform, "dist_backend", "nccl", raising=False)

    def run():
        worker = object.__new__(gpu_worker.Worker)
        parallel = SimpleNamespace(
            distributed_executor_backend="external_launcher",
            data_parallel_backend="mp",
            nnodes_within_dp=1,
            assigned_physical_gpu_ids=None,
            enable_dbo=False,
            get_local_gpu_index=lambda rank: rank,
        )
        worker.device_config = SimpleNamespace(device_type="cuda", device="cuda")
        worker.parallel_config = parallel
        worker.vllm_config = SimpleNamespace(parallel_config=parallel)
        worker.model_config = SimpleNamespace(dtype=torch.bfloat16, seed=0)
        worker.cache_config = SimpleNamespace(
            gpu_memory_utilization=0.70, resolved_gpu_memory_utilization=0.70, enable_extensible_kv_cache=False
        )
        worker.load_config = SimpleNamespace()
        worker._external_weight_charges = SimpleNamespace(track=nullcontext)
        worker.rank = worker.local_rank = 3
        worker.distributed_init_method = "tcp://127.0.0.1:1"
        worker.use_v2_model_runner = False
        with pytest.raises(_Stop):
            worker.init_device()
        return worker

    return run, events


def test_fixed_snapshot_taken_before_dist_init(run_init, switch):
    switch("PN517", True)
    run, events = run_init
    worker = run()
    assert events[0] == f"snapshot free={TOTAL}"
    assert events[1] == "dist_init"
    assert worker.init_snapshot.free_memory == TOTAL
    assert worker.requested_memory == math.ceil(TOTAL * 0.70)


def test_fixed_heavy_nccl_rank_starts(run_init, switch):
    switch("PN517", True)
    run, events = run_init
    worker = run()  # upstream raises ValueError here, see below
    assert worker.requested_memory <= worker.init_snapshot.free_memory
    # the second reading after the distributed init is only logged
    assert events[-1] == f"snapshot free={TOTAL - NCCL}"


def test_off_snapshot_after_dist_init_as_upstream(run_init, switch):
    switch("PN517", False)
    run, events = run_init
    with pytest.raises(ValueError, match="less than desired GPU memory utilization"):
        run()
    assert events == ["dist_init", f"snapshot free={TOTAL - NCCL}"]
