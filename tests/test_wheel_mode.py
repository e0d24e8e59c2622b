"""The built wheel's file mode: what a new file gets under the umask (0644 under 022), not
mkstemp's 0600, so that another user's pip, or a container's, can read it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from test_build import make_build_queue, parser_patch


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600)])
def test_built_wheel_has_the_mode_the_umask_gives_a_new_file(tmp_path: Path, umask: int, mode: int) -> None:
    q, _upstream = make_build_queue(tmp_path)
    parser_patch(q)
    q.set_series("P15-none.patch")
    q.run("checkout")
    q.run("push", "--all")
    proc = subprocess.run([sys.executable, "-m", "gqueue", "-C", str(q.root), "build", "--json"],
                          capture_output=True, text=True, preexec_fn=lambda: os.umask(umask))
    assert proc.returncode == 0, proc.stderr
    wheel = q.root / json.loads(proc.stdout)["result"]["wheel"]
    assert stat.S_IMODE(wheel.stat().st_mode) == mode
