"""Every patch test that asserts a fix must fail on the pristine tree of each gated pin (the
tests prove the patches). The gated pins are the lines of vendor-pin.txt; each one's pristine
release is the pin's tag in work/.git, which the queue gate's `gqueue check` imports."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gqueue.model.pin import Pin, parse_pins
from paths import REPO

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
WORK = REPO / "work"
# The fewest fixed-behaviour tests a gated pin has (0.34.0: 47 with 18 patches carried): fewer failing means tests went
# missing (a module that no longer imports, a wrong only_on), not that the patches got better.
MIN_FIXED = 28


def _gated_pins() -> list[Pin]:
    path = REPO / "vendor-pin.txt"
    return list(parse_pins(path.read_text(encoding="utf-8"), path=str(path)).pins)


def _pristine_tree(pin: Pin, dest: Path) -> Path:
    found = subprocess.run(["git", "-C", str(WORK), "rev-parse", "--verify", "--quiet", f"refs/tags/{pin.tag_name}"],
                           capture_output=True, text=True)
    assert found.returncode == 0, f"work/.git has no {pin.tag_name}: run the main job and `gqueue check` first"
    dest.mkdir()
    archive = subprocess.run(["git", "-C", str(WORK), "archive", found.stdout.strip()], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def _outcomes(report: Path) -> tuple[list[str], list[str]]:
    """The test_fixed cases that passed and those that failed (skipped ones are neither)."""
    passed, failed = [], []
    for case in ET.parse(report).getroot().iter("testcase"):
        if not case.get("name", "").startswith("test_fixed"):
            continue
        outcome = [child.tag for child in case]
        if "skipped" in outcome:
            continue
        (failed if ("failure" in outcome or "error" in outcome) else passed).append(
            f"{case.get('classname')}::{case.get('name')}")
    return passed, failed


@pytest.mark.parametrize("pin", _gated_pins(), ids=lambda pin: pin.label)
def test_fixed_tests_fail_without_the_queue(pin: Pin, tmp_path: Path) -> None:
    pristine = _pristine_tree(pin, tmp_path / "pristine")
    report = tmp_path / "junit.xml"
    env = dict(os.environ, GQUEUE_VLLM_TREE=str(pristine))
    subprocess.run(
        [sys.executable, "-m", "pytest", str(REPO / "tests" / "patches"), "-k", "fixed", "-m", "not gpu",
         "-q", "-p", "no:cacheprovider", f"--junitxml={report}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1800,
    )
    passed, failed = _outcomes(report)
    assert len(failed) >= MIN_FIXED, f"only {len(failed)} fixed-behaviour tests ran on pristine {pin.describe()}"
    assert passed == [], f"these pass on pristine {pin.describe()}, so they prove nothing: {passed}"
