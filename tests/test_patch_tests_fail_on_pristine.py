"""Every patch test that asserts a fix must fail on the pristine tree of each gated pin (the
tests prove the patches). The gated pins are the lines of vendor-pin.txt; each one's pristine
release is the pin's tag in work/.git, which the queue gate's `gqueue check` imports."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gqueue.model.pin import Pin
from patch_runs import PATCH_TESTS, gated_pins, run_patch_tests
from paths import REPO

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
WORK = REPO / "work"
# The fewest fixed-behaviour tests a gated pin has (0.34.0: 47 with 18 patches carried): fewer failing means tests went
# missing (a module that no longer imports, a wrong only_on), not that the patches got better.
MIN_FIXED = 28


def _pristine_tree(pin: Pin, dest: Path) -> Path:
    found = subprocess.run(["git", "-C", str(WORK), "rev-parse", "--verify", "--quiet", f"refs/tags/{pin.tag_name}"],
                           capture_output=True, text=True)
    assert found.returncode == 0, f"work/.git has no {pin.tag_name}: run the main job and `gqueue check` first"
    dest.mkdir()
    archive = subprocess.run(["git", "-C", str(WORK), "archive", found.stdout.strip()], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


@pytest.mark.parametrize("pin", gated_pins(), ids=lambda pin: pin.label)
def test_fixed_tests_fail_without_the_queue(pin: Pin, tmp_path: Path) -> None:
    pristine = _pristine_tree(pin, tmp_path / "pristine")
    outcomes = run_patch_tests(pristine, [PATCH_TESTS], tmp_path / f"pristine-{pin.label}.xml", select="fixed", only="test_fixed")
    failed = list(outcomes.failed)
    assert len(failed) >= MIN_FIXED, f"only {len(failed)} fixed-behaviour tests ran on pristine {pin.describe()}"
    assert outcomes.passed == [], f"these pass on pristine {pin.describe()}, so they prove nothing: {outcomes.passed}"
