"""Profiles and plans on the synthetic upstream: each policy golden-checked.

Regenerate the golden files with GQUEUE_UPDATE_GOLDEN=1 after an intended change.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gqueue.errors import FormatError, UsageError
from gqueue.model.profile import Candidate, Profile, check_predicates, parse_profile, resolve
from gqueue.model.series import parse_series
from gqueue.ops import plan as plan_op
from gqueue.store import Store
from synth import BASE_FILES, Queue, make_queue, unified

GOLDEN = Path(__file__).resolve().parent / "golden" / "plans"
CONFIG = BASE_FILES["vllm/config.py"]

# id, role, extra header lines, series guards
PATCHES = [
    ("A1", "load_bearing", "", ""),
    ("A2", "defensive", "", ""),
    ("A3", "optional_perf", "candidate_when:\n  max_num_seqs_gte: 16\n  kv_cache_dtype: [fp8_e5m2]\n", ""),
    ("A4", "suspected_regression", "", ""),
    ("A5", "no_op", "", ""),
    ("A6", None, "", ""),
    ("A7", "defensive", "requires: [A6]\n", ""),
    ("A8", "defensive", "conflicts: [A1]\n", " #+tq"),
    ("A9", "optional_perf", "", " #-tq"),
]

PROFILE = """\
name: prod
description: a synthetic deployment
guards: [tq]
disable: [A2]
deployment:
  max_num_seqs: 8
  n_gpus: 2
  kv_cache_dtype: turboquant_3bit_nc
attribution:
  A5:
    role: no_op
    note: inactive here
  A4:
    role: optional_perf
    bench_evidence: +3% on this rig
    candidate_when:
      n_gpus_eq: 1
"""


def plan_queue(tmp: Path) -> Queue:
    q = make_queue(tmp)
    lines = []
    for i, (pid, role, extra, guards) in enumerate(PATCHES):
        name = f"{pid}-synthetic.patch"
        role_line = f"role: {role}\n" if role else ""
        body = unified("vllm/config.py", CONFIG, CONFIG.replace(f"OPTION_{i * 5} = {i * 5}\n", f"OPTION_{i * 5} = -1\n"))
        q.write_patch(name, body, patch_id=pid,
                      extra=f"env_flag: GENESIS_ENABLE_{pid}_SYNTHETIC\n{role_line}{extra}")
        lines.append(name + guards)
    (q.root / "series").write_text("# plan test\n" + "\n".join(lines) + "\n")
    (q.root / "profiles").mkdir()
    (q.root / "profiles/prod.yaml").write_text(PROFILE)
    return q


def golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("GQUEUE_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; run with GQUEUE_UPDATE_GOLDEN=1"
    assert text == path.read_text()


@pytest.mark.parametrize("policy", ["compat", "safe", "minimal"])
def test_plan_golden(tmp_path: Path, policy: str) -> None:
    q = plan_queue(tmp_path)
    proc = q.run("plan", "--profile", "prod", "--policy", policy, "--json", check=False)
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "gqueue.plan/1"
    golden(f"prod-{policy}.json", json.dumps(doc["result"], indent=2) + "\n")
    text = q.run("plan", "--profile", "prod", "--policy", policy, check=False)
    golden(f"prod-{policy}.txt", text.stdout)
    assert proc.returncode == (1 if policy == "minimal" else 0)


def test_policy_semantics(tmp_path: Path) -> None:
    store = Store(plan_queue(tmp_path).root)
    ids = {p: {i.id for i in plan_op.plan(store, "prod", p).included} for p in ("compat", "safe", "minimal")}
    assert ids["compat"] == {"A1", "A3", "A4", "A5", "A6", "A7", "A8"}  # A2 disabled, A9 guarded out
    assert ids["safe"] == ids["compat"] - {"A5"}
    assert ids["minimal"] == ids["safe"] - {"A6"}  # A4 is optional_perf by the profile's attribution
    minimal = plan_op.plan(store, "prod", "minimal")
    assert minimal.errors == ("A7 requires A6, which this plan excludes (policy minimal drops role unknown)",)
    compat = plan_op.plan(store, "prod", "compat")
    assert "A8 conflicts with A1, and the plan includes both" in compat.warnings
    assert any(w.startswith("A3: candidate_when max_num_seqs_gte: 16 but deployment.max_num_seqs is 8") for w in compat.warnings)
    assert any(w.startswith("A4: candidate_when n_gpus_eq: 1") for w in compat.warnings)
    assert compat.env["GENESIS_ENABLE_A1_SYNTHETIC"] == "1" and "GENESIS_ENABLE_A2_SYNTHETIC" not in compat.env


def test_select_patches_and_dependency_error(tmp_path: Path) -> None:
    store = Store(plan_queue(tmp_path).root)
    entries = plan_op.select_patches(store, "prod", "safe")
    assert [e.name.split("-")[0] for e in entries] == ["A1", "A3", "A4", "A6", "A7", "A8"]
    with pytest.raises(plan_op.PlanError, match="A7 requires A6"):
        plan_op.select_patches(store, "prod", "minimal")
    series = plan_op.filtered_series(store, "prod", "safe")
    assert series.names == [e.name for e in entries]
    assert series.text().startswith("# plan test\n")


def test_guard_name_as_profile(tmp_path: Path) -> None:
    q = plan_queue(tmp_path)
    store = Store(q.root)
    with_tq = {i.id for i in plan_op.plan(store, "tq").included}
    without = {i.id for i in plan_op.plan(store, None).included}
    assert "A8" in with_tq and "A9" not in with_tq
    assert "A8" not in without and "A9" in without
    excluded = {i.id: i.reason for i in plan_op.plan(store, None).excluded}
    assert excluded == {"A8": "needs guard +tq"}
    proc = q.run("plan", "--profile", "nosuch", check=False)
    assert proc.returncode == 2 and "no profile 'nosuch'" in proc.stderr


def test_profile_errors_name_file_and_line(tmp_path: Path) -> None:
    q = plan_queue(tmp_path)
    (q.root / "profiles/bad.yaml").write_text("name: bad\npolicy: lean\n")
    with pytest.raises(FormatError) as info:
        plan_op.plan(Store(q.root), "bad")
    assert (info.value.path, info.value.line) == ("profiles/bad.yaml", 2)
    (q.root / "profiles/bad.yaml").write_text("name: bad\nenable: [A1]\n")
    with pytest.raises(FormatError, match="unknown profile key 'enable'"):
        plan_op.plan(Store(q.root), "bad")
    with pytest.raises(UsageError):
        plan_op.load_profile(Store(q.root), "../etc")
    assert q.run("plan", "--list").stdout.split() == ["bad", "prod"]


def test_predicates() -> None:
    deployment = {"max_num_seqs": 8, "kv_cache_dtype": "fp8", "n_gpus": 2}
    assert check_predicates({"max_num_seqs_gte": 4, "n_gpus_eq": 2, "kv_cache_dtype": ["fp8"]}, deployment) == []
    assert check_predicates({"max_num_seqs_lte": 4}, deployment) == ["max_num_seqs_lte: 4 but deployment.max_num_seqs is 8"]
    assert "cannot be checked" in check_predicates({"quantization": ["fp8"]}, deployment)[0]
    assert "unknown candidate_when predicate" in check_predicates({"colour": "red"}, deployment)[0]


def test_profile_attribution_replaces_header_entry() -> None:
    series = parse_series("X1-a.patch\n")
    cand = Candidate(series.entries[0], "X1", role="no_op", candidate_when={"n_gpus_eq": 4})
    plain = resolve([cand], Profile("p", deployment={"n_gpus": 1}), "safe")
    assert [i.id for i in plain.excluded] == ["X1"]
    override = Profile("p", deployment={"n_gpus": 1}, attribution={"X1": {"role": "load_bearing"}})
    planned = resolve([cand], override, "minimal")
    assert [i.id for i in planned.included] == ["X1"] and planned.warnings == ()


def test_example_profiles_of_the_project_resolve() -> None:
    repo = Path(__file__).resolve().parents[1]
    store = Store(repo)
    names = plan_op.profile_names(store)
    assert names, "profiles/ has no example profile"
    for name in names:
        for policy in ("compat", "safe", "minimal"):
            result = plan_op.plan(store, name, policy)
            assert result.ok, (name, policy, result.errors)


def test_profile_errors_speak_of_the_profile() -> None:
    with pytest.raises(FormatError, match="^profile must be a YAML mapping$") as err:
        parse_profile("# p\n- a\n", name="p", path="profiles/p.yaml")
    assert (err.value.path, err.value.line) == ("profiles/p.yaml", 2)
