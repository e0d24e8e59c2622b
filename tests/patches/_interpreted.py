"""Running a script against the patched tree in a fresh process under Triton's CPU interpreter.

vLLM turns Triton off at import when it finds no GPU driver; an empty CUDA_VISIBLE_DEVICES keeps
it on, and TRITON_INTERPRET must be set before Triton binds any kernel, hence a new process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def run_interpreted(script: str, tree: Path, kernels: Path) -> dict:
    """Run ``script``; return the JSON document it prints on its last line."""
    env = dict(os.environ)
    env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", PYTHONPATH=os.pathsep.join([str(kernels), str(tree)]))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
