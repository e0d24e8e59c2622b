"""Every patch test that asserts a fix must fail on the pristine pin (the tests prove the patches)."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from paths import REPO

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
WORK = REPO / "work"


def test_fixed_tests_fail_without_the_queue(tmp_path: Path) -> None:
    tag = next((line.split()[1] for line in subprocess.run(
        ["git", "-C", str(WORK), "show-ref", "--tags"], capture_output=True, text=True, check=True
    ).stdout.splitlines() if "gqueue/pin/" in line), None)
    assert tag, "work/ has no pinned release: run the main job first"
    pristine = tmp_path / "pristine"
    pristine.mkdir()
    archive = subprocess.run(["git", "-C", str(WORK), "archive", tag], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(pristine)], input=archive, check=True)
    report = tmp_path / "junit.xml"
    env = dict(os.environ, GQUEUE_VLLM_TREE=str(pristine))
    subprocess.run(
        [sys.executable, "-m", "pytest", str(REPO / "tests" / "patches"), "-k", "fixed", "-m", "not gpu",
         "-q", "-p", "no:cacheprovider", f"--junitxml={report}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1800,
    )
    cases = ET.parse(report).getroot().iter("testcase")
    passed, failed = [], []
    for case in cases:
        if not case.get("name", "").startswith("test_fixed"):
            continue
        outcome = [child.tag for child in case]
        if "skipped" in outcome:
            continue
        (failed if ("failure" in outcome or "error" in outcome) else passed).append(f"{case.get('classname')}::{case.get('name')}")
    assert len(failed) >= 28, f"only {len(failed)} fixed-behaviour tests ran"
    assert passed == [], f"these pass on the pristine pin, so they prove nothing: {passed}"
