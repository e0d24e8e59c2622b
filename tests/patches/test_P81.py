"""P81: the default fp8 block-scaled Triton config uses a 16-row M tile for M <= 8.

The real w8a8_triton_block_scaled_mm runs under the Triton interpreter on CPU. The
interpreter must be on before Triton is first imported, so the kernel runs in a child
Python process with TRITON_INTERPRET=1; the child flips the P81 env flag itself between
cases. The kernel launch is wrapped only to record the config it is given: the kernel
still runs and its result is checked against a dequantised matmul. No tuned JSON exists
for the test device name, so the default-config branch is taken, as on a GPU without one.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

CHILD = textwrap.dedent(
    """
    import json, os, sys
    import torch
    flag = sys.argv[1]
    import vllm.model_executor.layers.quantization.utils.fp8_utils as fp8_utils

    assert type(fp8_utils._w8a8_triton_block_scaled_mm).__name__ == "InterpretedFunction"
    fp8_utils.current_platform.get_device_name = lambda *a, **k: "genesis test cpu"
    kernel = fp8_utils._w8a8_triton_block_scaled_mm
    seen = []

    class Recorder:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                seen.append(dict(kwargs))
                return kernel[grid](*args, **kwargs)
            return launch

    fp8_utils._w8a8_triton_block_scaled_mm = Recorder()
    block = [128, 128]
    out = {}
    for on in ("0", "1"):
        os.environ[flag] = on
        for m in (1, 8, 9):
            g = torch.Generator().manual_seed(m)
            n = k = 256
            a = torch.randn(m, k, generator=g).to(torch.float8_e4m3fn)
            b = torch.randn(n, k, generator=g).to(torch.float8_e4m3fn)
            a_s = torch.rand(m, k // 128, generator=g) + 0.5
            b_s = torch.rand(n // 128, k // 128, generator=g) + 0.5
            c = fp8_utils.w8a8_triton_block_scaled_mm(a, b, a_s, b_s, block, torch.float32)
            a_d = a.float() * a_s.repeat_interleave(128, 1)
            b_d = b.float() * b_s.repeat_interleave(128, 0).repeat_interleave(128, 1)
            ref = a_d @ b_d.T
            err = ((c - ref).abs().max() / ref.abs().max()).item()
            out[f"{on}/{m}"] = {"config": seen.pop(), "rel_err": err}
    print("RESULT " + json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def runs():
    from vllm_genesis import runtime

    flag = runtime.registry()["P81"].spellings("ENABLE")[0]
    # the same vLLM tree and runtime package the conftest put first on sys.path
    tree = Path(importlib.util.find_spec("vllm").origin).parents[1]
    kernels = Path(runtime.__file__).parents[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GENESIS_", "SNDR_"))}
    env.update(
        TRITON_INTERPRET="1",
        # An empty CUDA_VISIBLE_DEVICES lets vllm.triton_utils keep Triton with no driver.
        CUDA_VISIBLE_DEVICES="",
        PYTHONPATH=os.pathsep.join([str(kernels), str(tree), env.get("PYTHONPATH", "")]),
    )
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, flag], env=env, capture_output=True, text=True, timeout=300
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT ") :])


UPSTREAM_DEFAULT = {
    "BLOCK_SIZE_M": 64,
    "BLOCK_SIZE_N": 128,
    "BLOCK_SIZE_K": 128,
    "GROUP_SIZE_M": 32,
    "num_warps": 4,
    "num_stages": 2,
}


@pytest.mark.parametrize("m", [1, 8])
def test_fixed_decode_batches_use_16_row_tile(runs, m):
    run = runs[f"1/{m}"]
    assert run["config"] == {**UPSTREAM_DEFAULT, "BLOCK_SIZE_M": 16, "num_stages": 3}
    assert run["rel_err"] < 1e-4


def test_on_larger_batches_keep_default(runs):
    run = runs["1/9"]
    assert run["config"] == UPSTREAM_DEFAULT
    assert run["rel_err"] < 1e-4


@pytest.mark.parametrize("m", [1, 8, 9])
def test_off_default_config_is_upstream(runs, m):
    run = runs[f"0/{m}"]
    assert run["config"] == UPSTREAM_DEFAULT
    assert run["rel_err"] < 1e-4
