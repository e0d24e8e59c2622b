"""The patch tests on the tree of every gated pin besides the main one (the main pin's tree,
work/, is the surrounding run's own: tests/patches). Each such tree is that pin's release with
the queue applied as it serves that pin (its variants, its retired patches):
``gqueue export-tree --pin LABEL pins/LABEL``, which make test runs before its tests; a tree
that is not there is written into the test's own folder. The modules are run in shards
(tests/patch_runs.py), each a pytest of its own on that tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gqueue.model.pin import MAIN_LABEL, Pin
from patch_runs import gated_pins, run_patch_tests, shards
from paths import REPO

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
SHARDS = 2
OTHER_PINS = [pin for pin in gated_pins() if pin.label != MAIN_LABEL]


def _tree(pin: Pin, tmp_path: Path) -> Path:
    exported = REPO / "pins" / pin.label
    if (exported / "vllm").is_dir():
        return exported
    dest = tmp_path / pin.label
    proc = subprocess.run([sys.executable, "-m", "gqueue", "-C", str(REPO), "export-tree", "--pin", pin.label, str(dest)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"gqueue export-tree --pin {pin.label} exited {proc.returncode}: {proc.stderr}"
    return dest


@pytest.mark.parametrize("shard", range(SHARDS), ids=lambda k: f"shard{k + 1}of{SHARDS}")
@pytest.mark.parametrize("pin", OTHER_PINS, ids=lambda pin: pin.label)
def test_patch_tests_pass_on_the_pins_tree(pin: Pin, shard: int, tmp_path: Path) -> None:
    tree = _tree(pin, tmp_path)
    paths = shards(SHARDS)[shard]
    outcomes = run_patch_tests(tree, paths, tmp_path / f"{pin.label}-{shard + 1}.xml")
    assert not outcomes.failed, (f"{len(outcomes.failed)} patch tests fail on {pin.describe()} ({tree}):\n"
                                 f"{outcomes.failures()}\n--- the run's last lines:\n{outcomes.output[-1500:]}")
    assert outcomes.passed, f"no patch test ran on {pin.describe()} in {[p.name for p in paths]}:\n{outcomes.output}"
