"""A queue carried on two pins: a variant of a patch per release, and patches not carried on one.

The fixture: a synthetic upstream in two releases, 0.1.0 (the rollback pin) and 0.2.0 (the
main pin), where 0.2.0 renumbered the body of f7 in vllm/util.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gqueue.errors import FormatError
from synth import BASE_FILES, Queue, make_queue, make_sdist, sha256, unified
from test_bisect_pins import Index, index  # noqa: F401 - the local package index fixture

OLD = dict(BASE_FILES)
NEW = dict(BASE_FILES, **{"vllm/util.py": BASE_FILES["vllm/util.py"].replace("return x + 7\n", "return x + 7 * 1\n")
                          .replace("return x + 20\n", "return x + 20 * 1\n")})
RETIRED = "retired: {in: '0.2.0', reason: fixed-upstream, by: 'vllm#123', test: 'tests/patches/test_R2.py::test_upstream'}\n"


def _edit(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


# --- the pure model ---------------------------------------------------------------------------------


def test_resolution_picks_the_one_file_that_admits_the_release() -> None:
    from gqueue.model.variants import Candidate, resolve

    main = Candidate("A1-a.patch", ">=0.34.0")
    old = Candidate("variants/0.24.0/A1-a.patch", ">=0.24.0,<0.34")
    assert resolve("A1-a.patch", "0.34.0", [main, old]).file == "A1-a.patch"
    found = resolve("A1-a.patch", "0.24.0", [main, old])
    assert found.file == "variants/0.24.0/A1-a.patch" and found.variant and found.carried
    assert resolve("A1-a.patch", "0.35.1", [Candidate("A1-a.patch", None)]).file == "A1-a.patch"  # no range: all
    none = resolve("A1-a.patch", "0.20.0", [main, old])
    assert not none.carried and none.reason == "applies_to '>=0.34.0', '>=0.24.0,<0.34' excludes 0.20.0"


def test_resolution_gives_the_retired_reason_and_refuses_two_files_for_one_release() -> None:
    from gqueue.model.variants import Candidate, resolve

    retired = {"in": "0.34.0", "reason": "fixed-upstream", "by": "vllm#39148", "test": "tests/patches/test_PN28.py::t"}
    found = resolve("PN28-x.patch", "0.34.0", [Candidate("PN28-x.patch", "<0.34", retired)])
    assert not found.carried
    assert found.reason == "retired in 0.34.0 (fixed-upstream by vllm#39148; test tests/patches/test_PN28.py::t)"
    with pytest.raises(FormatError) as err:
        resolve("A1-a.patch", "0.30.0", [Candidate("A1-a.patch", ">=0.24"), Candidate("variants/0.24.0/A1-a.patch", "<0.34", None, 7)])
    assert "queue/A1-a.patch and queue/variants/0.24.0/A1-a.patch both admit 0.30.0" in err.value.message
    assert err.value.path == "queue/variants/0.24.0/A1-a.patch" and err.value.line == 7


def test_admits_prereleases_and_leaves_unparsable_ranges_to_lint() -> None:
    from gqueue.model.variants import admits

    assert admits(">=0.25.0.dev0", "0.25.0.dev3") and not admits("<0.25", "0.25.0")
    assert admits("not a range", "0.1.0")


def test_retired_field_is_checked() -> None:
    from gqueue.model.variants import retired_problems

    assert retired_problems({"in": "0.34.0", "reason": "obsolete"}) == []
    problems = dict(retired_problems({"in": "soon", "reason": "gone", "why": 1}))
    assert set(problems) == {"in", "reason", "why"}
    assert "not one of: fixed-upstream, obsolete" in problems["reason"]
    assert retired_problems("yes")[0][0] is None


# --- a queue on two pins ------------------------------------------------------------------------------


def two_pin_queue(tmp_path: Path, *, checkout: bool = True) -> Queue:
    """Main pin 0.2.0, rollback 0.1.0; A1 has a variant for 0.1.0, R2 is retired in 0.2.0, C3 serves both."""
    q = make_queue(tmp_path, NEW, version="0.2.0")
    old = make_sdist(tmp_path / "upstream-old", "0.1.0", OLD)
    with (q.root / "vendor-pin.txt").open("a") as f:
        f.write(f"rollback {old.as_uri()}#sha256={sha256(old)}\n")
    util_new, util_old = NEW["vllm/util.py"], OLD["vllm/util.py"]
    q.write_patch("A1-a.patch", unified("vllm/util.py", util_new, _edit(util_new, "return x + 7 * 1\n", "return x + 70\n")),
                  extra="applies_to: {vllm: '>=0.2.0'}\n")
    q.write_patch("variants/0.1.0/A1-a.patch", unified("vllm/util.py", util_old, _edit(util_old, "return x + 7\n", "return x + 70\n")),
                  patch_id="A1", extra="applies_to: {vllm: '>=0.1.0,<0.2'}\n")
    parser = BASE_FILES["vllm/parser.py"]
    q.write_patch("R2-r.patch", unified("vllm/parser.py", parser, _edit(parser, "== 'null'", "in ('null', 'None')")),
                  extra="applies_to: {vllm: '<0.2'}\n" + RETIRED)
    q.write_patch("C3-c.patch", unified("vllm/util.py", util_old, _edit(util_old, "return x + 30\n", "return x + 300\n")))
    q.set_series("A1-a.patch", "R2-r.patch", "C3-c.patch")
    if checkout:
        q.run("checkout")
    return q


def test_push_uses_the_variant_for_the_pin_and_passes_over_a_patch_not_carried(tmp_path: Path) -> None:
    q = two_pin_queue(tmp_path)
    proc = q.run("push", "--all")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert any("R2-r.patch" in line and line.startswith("n/a") and "retired in 0.2.0 (fixed-upstream by vllm#123" in line
               for line in lines), proc.stdout
    util = (q.work / "vllm/util.py").read_text()
    assert "return x + 70\n" in util and "return x + 300\n" in util
    assert "('null', 'None')" not in (q.work / "vllm/parser.py").read_text()
    assert q.run("applied").stdout.split() == ["A1-a.patch", "R2-r.patch", "C3-c.patch"]  # its place is kept
    doc = json.loads(q.run("push", "--all", "--json").stdout)
    assert doc["ok"] and doc["result"]["pushed"] == []
    q.run("goto", "A1-a.patch")
    assert q.run("applied").stdout.split() == ["A1-a.patch"]
    doc = json.loads(q.run("push", "-n", "1", "--json").stdout)
    assert doc["result"]["not_carried"] == [{"name": "R2-r.patch", "status": "n/a",
                                            "reason": "retired in 0.2.0 (fixed-upstream by vllm#123; "
                                                      "test tests/patches/test_R2.py::test_upstream)"}]
    q.run("pop", "--all")
    assert (q.work / "vllm/util.py").read_text() == NEW["vllm/util.py"]


def test_push_on_the_rollback_pin_uses_the_variant_and_refresh_writes_it_back(tmp_path: Path) -> None:
    q = two_pin_queue(tmp_path)
    pins = (q.root / "vendor-pin.txt").read_text().splitlines()
    (q.root / "vendor-pin.txt").write_text(f"{pins[1].replace('rollback', 'pin', 1)}\n{pins[0].replace('pin', 'next', 1)}\n")
    q.run("checkout")
    q.run("push", "--all")
    assert "('null', 'None')" in (q.work / "vllm/parser.py").read_text()  # R2 is carried on 0.1.0
    q.run("goto", "A1-a.patch")
    main_before = (q.root / "queue/A1-a.patch").read_text()
    util = q.work / "vllm/util.py"
    util.write_text(util.read_text().replace("return x + 70\n", "return x + 71\n"))
    q.run("refresh")
    assert (q.root / "queue/A1-a.patch").read_text() == main_before
    variant = (q.root / "queue/variants/0.1.0/A1-a.patch").read_text()
    assert "+    return x + 71" in variant and variant.startswith("---\nid: A1\n")


def test_rebase_from_a_pin_a_variant_serves_is_refused_with_nothing_changed(tmp_path: Path) -> None:
    """Rolled back (the main pin set to the variants' release), a rebase would have moved the
    main files, the diffs of another release, onto the new pin: refused, naming the variant."""
    q = two_pin_queue(tmp_path)
    pins = (q.root / "vendor-pin.txt").read_text().splitlines()
    (q.root / "vendor-pin.txt").write_text(f"{pins[1].replace('rollback', 'pin', 1)}\n")
    q.run("checkout")
    q.run("push", "--all")
    new = make_sdist(tmp_path / "upstream-next", "0.1.1", OLD)
    before = {p: p.read_bytes() for p in (q.root / "queue").rglob("*.patch")}
    head = q.run("top").stdout
    proc = q.run("rebase", "--pin", f"{new.as_uri()}#sha256={sha256(new)}", check=False)
    assert proc.returncode == 2, proc.stderr
    assert "variants/0.1.0/A1-a.patch serves" in proc.stderr and "gqueue variant A1-a.patch" in proc.stderr
    assert {p: p.read_bytes() for p in (q.root / "queue").rglob("*.patch")} == before
    assert q.run("top").stdout == head and not (q.root / ".gqueue" / "rebase").exists()


def test_two_files_admitting_the_pin_stop_push_naming_both(tmp_path: Path) -> None:
    q = two_pin_queue(tmp_path)
    path = q.root / "queue/variants/0.1.0/A1-a.patch"
    path.write_text(path.read_text().replace("'>=0.1.0,<0.2'", "'>=0.1.0'"))
    proc = q.run("push", "--all", check=False)
    assert proc.returncode == 1
    assert "queue/A1-a.patch and queue/variants/0.1.0/A1-a.patch both admit 0.2.0" in proc.stderr
    assert q.run("applied").stdout.split() == []


def test_export_tree_writes_another_pins_patched_tree_and_leaves_work_alone(tmp_path: Path) -> None:
    q = two_pin_queue(tmp_path)
    q.run("push", "-n", "1")
    head = (q.work / ".git/HEAD").read_text(), q.run("applied").stdout
    dest = tmp_path / "tree-0.1.0"
    proc = q.run("export-tree", "--pin", "rollback", str(dest))
    assert "wrote " in proc.stdout and "with 3 patch(es)" in proc.stdout
    util = (dest / "vllm/util.py").read_text()
    assert "return x + 70\n" in util and "return x + 300\n" in util and "7 * 1" not in util  # the 0.1.0 variant
    assert "('null', 'None')" in (dest / "vllm/parser.py").read_text()  # R2 is carried on 0.1.0
    assert not (dest / ".git").exists() and "vllm" in {p.name for p in dest.iterdir()}
    assert ((q.work / ".git/HEAD").read_text(), q.run("applied").stdout) == head
    assert json.loads(q.run("status", "--json").stdout)["result"]["dirty"] == []
    doc = json.loads(q.run("export-tree", str(tmp_path / "main"), "--json").stdout)  # the main pin by default
    assert doc["result"]["not_carried"][0]["name"] == "R2-r.patch" and doc["result"]["version"] == "0.2.0"
    assert "return x + 7 * 1" not in (tmp_path / "main/vllm/util.py").read_text()
    refused = q.run("export-tree", "--pin", "rollback", str(dest), check=False)
    assert refused.returncode == 2 and "not an empty folder" in refused.stderr


def test_export_tree_writes_nothing_when_a_patch_does_not_apply(tmp_path: Path) -> None:
    q = two_pin_queue(tmp_path)
    (q.root / "queue/variants/0.1.0/A1-a.patch").unlink()  # the 0.2.0 diff does not apply on 0.1.0 ...
    path = q.root / "queue/A1-a.patch"
    path.write_text(path.read_text().replace("'>=0.2.0'", "'>=0.1.0'"))  # ... and now claims to
    dest = tmp_path / "tree"
    proc = q.run("export-tree", "--pin", "rollback", str(dest), check=False)
    assert proc.returncode == 3 and "A1-a.patch" in proc.stdout and "nothing written" in proc.stdout
    assert not dest.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".tree")] == []


def test_check_gates_each_pin_with_its_own_files_and_passes_a_patch_not_carried(tmp_path: Path) -> None:
    q = two_pin_queue(tmp_path, checkout=False)
    junit = tmp_path / "check.xml"
    proc = q.run("check", "--json", "--junit", str(junit), check=False)  # lint included
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["ok"], proc.stdout
    main, rollback = doc["pins"]
    assert main["version"] == "0.2.0" and rollback["version"] == "0.1.0"
    by_name = {p["name"]: p for p in main["patches"]}
    assert by_name["R2-r.patch"]["status"] == "n/a" and by_name["R2-r.patch"]["acceptable"]
    assert by_name["R2-r.patch"]["detail"].startswith("retired in 0.2.0 (fixed-upstream by vllm#123")
    assert by_name["A1-a.patch"]["patch_file"] == "queue/A1-a.patch" and main["counts"] == {"clean": 2, "n/a": 1}
    old = {p["name"]: p for p in rollback["patches"]}
    assert old["A1-a.patch"]["patch_file"] == "queue/variants/0.1.0/A1-a.patch"
    assert old["A1-a.patch"]["status"] == "clean" and old["R2-r.patch"]["status"] == "clean"
    assert rollback["base"] == rollback["pin"]  # its own stack differs: drift is measured on its own tree
    xml = junit.read_text()
    assert 'skipped="1"' in xml and "<skipped message=\"not carried on vllm==0.2.0: retired in 0.2.0" in xml
    text = q.run("check", "--no-lint").stdout
    line = next(x for x in text.splitlines() if "R2-r.patch" in x)
    assert line.split()[0] == "n/a" and "not carried on this pin: retired in 0.2.0" in line
    assert "variants/0.1.0/A1-a.patch" in next(x for x in text.splitlines()[text.splitlines().index(
        next(x for x in text.splitlines() if x.startswith("vllm==0.1.0"))):] if "A1-a.patch" in x)


def test_check_of_a_pin_not_in_vendor_pin_shows_what_the_main_pin_carries(tmp_path: Path) -> None:
    q = two_pin_queue(tmp_path, checkout=False)
    c3 = q.root / "queue/C3-c.patch"
    c3.write_text(c3.read_text().replace("title: C3-c.patch\n", "title: C3-c.patch\napplies_to: {vllm: '<0.3'}\n"))
    newer = make_sdist(tmp_path / "upstream-new", "0.3.0", NEW)
    doc = json.loads(q.run("check", "--no-lint", "--json", "--pin", f"{newer.as_uri()}#sha256={sha256(newer)}").stdout)
    (pin,) = doc["pins"]
    assert {p["name"]: p["status"] for p in pin["patches"]} == {"A1-a.patch": "clean", "R2-r.patch": "n/a",
                                                                "C3-c.patch": "clean"}
    assert pin["base"].endswith("vllm-0.2.0.tar.gz#sha256=" + sha256(tmp_path / "upstream/vllm-0.2.0.tar.gz"))


def _lint(q: Queue) -> list[tuple[str, str, str]]:
    from gqueue.ops.lint import lint
    from gqueue.store import Store

    return [(f.path, f.rule, f.message) for f in lint(Store(q.root)).findings]


def _set(q: Queue, name: str, old: str, new: str) -> None:
    path = q.root / "queue" / name
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new, 1))


def test_lint_is_quiet_on_a_queue_carried_on_two_pins(tmp_path: Path) -> None:
    assert _lint(two_pin_queue(tmp_path, checkout=False)) == []


def test_lint_finds_overlapping_variants_files_serving_no_pin_and_unmet_requires(tmp_path: Path) -> None:
    q = two_pin_queue(tmp_path, checkout=False)
    _set(q, "variants/0.1.0/A1-a.patch", "'>=0.1.0,<0.2'", "'>=0.1.0'")
    _set(q, "C3-c.patch", "title: C3-c.patch\n", "title: C3-c.patch\nrequires: [R2]\n")
    (q.root / "queue/variants/0.0.1").mkdir()
    (q.root / "queue/variants/0.0.1/C3-c.patch").write_text(
        (q.root / "queue/C3-c.patch").read_text().replace("title: C3-c.patch\n", "title: C3-c.patch\napplies_to: '<0.1'\n"))
    found = _lint(q)
    assert ("queue/variants/0.1.0/A1-a.patch", "applies-to-pin",
            "queue/A1-a.patch and queue/variants/0.1.0/A1-a.patch both admit 0.2.0 (applies_to.vllm '>=0.2.0' and "
            "'>=0.1.0'): a release must have one variant of 'A1-a.patch'") in found
    serves = [f for f in found if f[0] == "queue/variants/0.0.1/C3-c.patch" and f[1] == "applies-to-pin"]
    assert len(serves) == 1 and "serves no gated pin" in serves[0][2] and "delete it or retire the patch" in serves[0][2]
    needs = [f for f in found if f[1] == "requires-not-carried"]
    assert needs == [("queue/C3-c.patch", "requires-not-carried",
                      f"requires 'R2', which is not carried on {json.loads(q.run('pin', '--json').stdout)['result']['pins'][0]['source']}: "
                      "retired in 0.2.0 (fixed-upstream by vllm#123; test tests/patches/test_R2.py::test_upstream)")]


def test_lint_checks_the_retired_field_and_a_variants_id(tmp_path: Path) -> None:
    q = two_pin_queue(tmp_path, checkout=False)
    _set(q, "R2-r.patch", "reason: fixed-upstream", "reason: fixed")
    _set(q, "variants/0.1.0/A1-a.patch", "id: A1\n", "id: A9\n")
    found = {(f[0], f[1]): f[2] for f in _lint(q)}
    assert "is not one of: fixed-upstream, obsolete" in found[("queue/R2-r.patch", "header-retired")]
    assert "a variant keeps its patch's id" in found[("queue/variants/0.1.0/A1-a.patch", "variant-id")]
    _set(q, "R2-r.patch", "reason: fixed", "reason: obsolete")
    _set(q, "R2-r.patch", "applies_to: {vllm: '<0.2'}", "applies_to: {vllm: '<0.3'}")
    found = {(f[0], f[1]): f[2] for f in _lint(q)}
    assert "retired in 0.2.0, but applies_to.vllm '<0.3' admits 0.2.0" in found[("queue/R2-r.patch", "header-retired")]


# --- rebase --keep-old ----------------------------------------------------------------------------------


def rebase_queue(tmp_path: Path) -> Queue:
    """On 0.1.0, with 0.2.0 as 'next': K1 moves as it is, K2 lands by a three-way merge (its context
    changed), K3 conflicts (0.2.0 rewrote the line it edits)."""
    q = make_queue(tmp_path, OLD, version="0.1.0")
    new = make_sdist(tmp_path / "upstream-new", "0.2.0", NEW)
    with (q.root / "vendor-pin.txt").open("a") as f:
        f.write(f"next {new.as_uri()}#sha256={sha256(new)}\n")
    util = OLD["vllm/util.py"]
    rng = "applies_to: {vllm: '>=0.1.0,<0.2'}\n"
    q.write_patch("K1-same.patch", unified("vllm/util.py", util, _edit(util, "return x + 30\n", "return x + 300\n")), extra=rng)
    q.write_patch("K2-merge.patch", unified("vllm/util.py", util, _edit(util, "def f8(x):\n", "def f8(x):  # k2\n")), extra=rng)
    q.write_patch("K3-gone.patch", unified("vllm/util.py", util, _edit(util, "return x + 20\n", "return x + 200\n")), extra=rng)
    q.set_series("K1-same.patch", "K2-merge.patch", "K3-gone.patch")
    q.run("checkout")
    q.run("push", "--all")
    return q


def test_rebase_keep_old_keeps_changed_diffs_as_variants_and_retires_for_the_new_pin_only(tmp_path: Path) -> None:
    q = rebase_queue(tmp_path)
    k2_before = (q.root / "queue/K2-merge.patch").read_text()
    k3_diff = (q.root / "queue/K3-gone.patch").read_text().split("...\n", 1)[1]
    stopped = q.run("rebase", "--pin", "next", "--keep-old", "rollback", check=False)
    assert stopped.returncode == 3 and "K3-gone.patch" in stopped.stdout
    assert q.run("rebase", "--continue", "--upstream", "vllm#42", check=False).returncode == 2  # only with --retire
    done = json.loads(q.run("rebase", "--retire", "--reason", "obsolete", "--upstream", "vllm#42", "--json").stdout)
    assert done["result"]["done"] and done["result"]["summary"]["variants"] == ["K2-merge.patch"]
    assert done["result"]["summary"]["retired"] == ["K3-gone.patch"]
    k1 = (q.root / "queue/K1-same.patch").read_text()
    assert "vllm: '>=0.1.0'" in k1 or 'vllm: ">=0.1.0"' in k1 or "vllm: '>=0.1.0'" in k1.replace('"', "'")
    assert not (q.root / "queue/variants/0.1.0/K1-same.patch").exists()  # the same change: one file, widened
    variant = (q.root / "queue/variants/0.1.0/K2-merge.patch").read_text()
    assert variant.split("...\n", 1)[1] == k2_before.split("...\n", 1)[1]  # the old diff as it was
    assert ">=0.1.0,<0.2.0" in variant
    k2 = (q.root / "queue/K2-merge.patch").read_text()
    assert ">=0.2.0" in k2 and "return x + 7 * 1" in k2
    k3 = (q.root / "queue/K3-gone.patch").read_text()
    assert k3.split("...\n", 1)[1] == k3_diff and ">=0.1.0,<0.2.0" in k3
    assert "retired:" in k3 and "reason: obsolete" in k3 and "vllm#42" in k3 and "in: 0.2.0" in k3.replace("'", "")
    assert "K3-gone.patch" in q.run("series").stdout.split()  # still carried on the rollback pin
    assert q.run("applied").stdout.split() == ["K1-same.patch", "K2-merge.patch", "K3-gone.patch"]
    assert "return x + 200" not in (q.work / "vllm/util.py").read_text()
    pins = (q.root / "vendor-pin.txt").read_text()
    assert "\npin " in "\n" + pins and "\nrollback " in pins
    assert _lint(q) == []
    doc = json.loads(q.run("check", "--json").stdout)
    main, rollback = doc["pins"]
    assert doc["ok"] and {p["name"]: p["status"] for p in main["patches"]}["K3-gone.patch"] == "n/a"
    assert {p["name"]: p["patch_file"] for p in rollback["patches"]}["K2-merge.patch"] == "queue/variants/0.1.0/K2-merge.patch"
    q.run("pop", "--all")
    q.run("push", "--all")


def test_rebase_abort_removes_the_variants_it_wrote(tmp_path: Path) -> None:
    q = rebase_queue(tmp_path)
    q.run("rebase", "--pin", "next", "--keep-old", "rollback", check=False)
    assert (q.root / "queue/variants/0.1.0/K2-merge.patch").exists()
    q.run("rebase", "--abort")
    assert not (q.root / "queue/variants/0.1.0/K2-merge.patch").exists()
    assert "applies_to: {vllm: '>=0.1.0,<0.2'}" in (q.root / "queue/K2-merge.patch").read_text()


def _index_with_wheels(index: Index, *versions: str) -> None:
    doc = json.loads(index.routes["/simple/vllm/"][1])
    for version in versions:
        doc["files"].append({"filename": f"vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl",
                             "url": f"{index.url}/files/vllm-{version}.whl", "hashes": {"sha256": version[-1] * 64}})
    index.routes["/simple/vllm/"] = ("application/vnd.pypi.simple.v1+json", json.dumps(doc).encode())


def test_pin_record_wheel_fills_every_index_pin_and_rebase_keeps_the_new_pins_wheel(tmp_path: Path, index: Index) -> None:  # noqa: F811
    _index_with_wheels(index, "0.1.0", "0.1.1", "0.1.2")
    root = tmp_path / "q"
    (root / "queue").mkdir(parents=True)
    (root / "series").write_text("")
    (root / "vendor-pin.txt").write_text("pin vllm==0.1.0\nrollback vllm==0.1.1\n")
    q = Queue(root)
    q.run("pin", "--record", "--wheel")
    lines = (root / "vendor-pin.txt").read_text().splitlines()
    assert f"wheel=sha256:{'0' * 64}" in lines[0] and f"wheel=sha256:{'1' * 64}" in lines[1]
    assert "wheel-file=vllm-0.1.1-cp38-abi3-manylinux_2_28_x86_64.whl" in lines[1]
    q.run("checkout")
    q.run("rebase", "--pin", "vllm==0.1.2", "--keep-old", "old")
    lines = (root / "vendor-pin.txt").read_text().splitlines()
    assert lines[0].startswith("pin vllm==0.1.2 ") and f"wheel=sha256:{'2' * 64}" in lines[0]
    assert "wheel-file=vllm-0.1.2-cp38-abi3-manylinux_2_28_x86_64.whl" in lines[0]
    assert lines[1].startswith("old vllm==0.1.0 ") and f"wheel=sha256:{'0' * 64}" in lines[1]


def test_build_pin_builds_the_overlay_wheel_of_another_pins_resolved_stack(tmp_path: Path) -> None:
    import zipfile

    from gqueue.upstream import cache
    from test_build import make_build_queue, make_wheel

    q, _old_wheel = make_build_queue(tmp_path, OLD)
    new_sdist = make_sdist(tmp_path / "upstream-new", "0.2.0", NEW)
    new_wheel = make_wheel(tmp_path / "upstream-new", "0.2.0", NEW)
    cache.fetch(new_wheel.as_uri(), sha256(new_wheel), new_wheel.name, where="test")
    with (q.root / "vendor-pin.txt").open("a") as f:
        f.write(f"next {new_sdist.as_uri()}#sha256={sha256(new_sdist)} wheel=sha256:{sha256(new_wheel)} "
                f"wheel-file={new_wheel.name}\n")
    util_new, util_old = NEW["vllm/util.py"], OLD["vllm/util.py"]
    q.write_patch("A1-a.patch", unified("vllm/util.py", util_new, _edit(util_new, "return x + 7 * 1\n", "return x + 70\n")),
                  extra="applies_to: {vllm: '>=0.2.0'}\n")
    q.write_patch("variants/0.1.0/A1-a.patch", unified("vllm/util.py", util_old, _edit(util_old, "return x + 7\n", "return x + 71\n")),
                  patch_id="A1", extra="applies_to: {vllm: '<0.2'}\n")
    q.set_series("A1-a.patch")
    q.run("checkout")
    doc = json.loads(q.run("build", "--pin", "next", "--json", "-o", str(tmp_path / "dist")).stdout)
    assert doc["ok"] and doc["result"]["version"].startswith("0.2.0+") and doc["result"]["patches"] == ["A1-a.patch"]
    with zipfile.ZipFile(tmp_path / "dist" / doc["result"]["filename"]) as zf:
        util = zf.read("vllm/util.py").decode()
    assert "return x + 70\n" in util and "return x + 20 * 1" in util
    assert q.run("applied").stdout.split() == []  # work/ was not moved


def _before_variant(tmp_path: Path) -> tuple[Queue, Path, str]:
    """A two-pin queue whose A1 is one file with the 0.1.0 diff, and a draft of A1 for 0.2.0."""
    q = two_pin_queue(tmp_path, checkout=False)
    (q.root / "queue/variants/0.1.0/A1-a.patch").unlink()
    util_old, util_new = OLD["vllm/util.py"], NEW["vllm/util.py"]
    old_body = unified("vllm/util.py", util_old, _edit(util_old, "return x + 7\n", "return x + 70\n"))
    (q.root / "queue/A1-a.patch").write_text("---\nid: A1\ntitle: A1-a.patch\napplies_to: {vllm: '>=0.1.0,<0.2'}\n...\n"
                                             + old_body)
    draft = tmp_path / "A1-draft.patch"
    draft.write_text("---\nid: A1\ntitle: A1 on 0.2.0\n...\n"
                     + unified("vllm/util.py", util_new, _edit(util_new, "return x + 7 * 1\n", "return x + 70\n")))
    return q, draft, old_body


def _patch_files(q: Queue) -> dict[str, bytes]:
    return {p.relative_to(q.root).as_posix(): p.read_bytes() for p in sorted((q.root / "queue").rglob("*.patch"))}


def test_variant_takes_a_new_diff_for_the_main_pin_and_keeps_the_old_one_for_the_rollback(tmp_path: Path) -> None:
    q, draft, _ = _before_variant(tmp_path)  # A1 as the queue had it before the move: one file, the 0.1.0 diff
    old_a1 = q.root / "queue/A1-a.patch"
    before = old_a1.read_text()
    doc = json.loads(q.run("variant", "A1-a.patch", str(draft), "--json").stdout)
    assert doc["result"]["kind"] == "variant"
    assert doc["result"]["written"] == ["A1-a.patch", "variants/0.1.0/A1-a.patch"]
    kept = (q.root / "queue/variants/0.1.0/A1-a.patch").read_text()
    assert kept.split("...\n", 1)[1] == before.split("...\n", 1)[1] and ">=0.1.0,<0.2.0" in kept
    main = (q.root / "queue/A1-a.patch").read_text()
    assert "title: A1 on 0.2.0" in main and ">=0.2.0" in main
    assert _lint(q) == []
    q.run("undo")  # the undo log records it: both files back as they were
    assert old_a1.read_text() == before and not (q.root / "queue/variants/0.1.0/A1-a.patch").exists()
    q.run("redo")
    assert (q.root / "queue/variants/0.1.0/A1-a.patch").read_text() == kept
    same = tmp_path / "C3-same.patch"
    same.write_text((q.root / "queue/C3-c.patch").read_text().replace("title: C3-c.patch", "title: C3 again"))
    assert json.loads(q.run("variant", "C3-c.patch", str(same), "--json").stdout)["result"]["kind"] == "one-file"
    wrong = tmp_path / "wrong.patch"
    wrong.write_text(draft.read_text().replace("id: A1", "id: A9"))
    files = {p: p.read_bytes() for p in (q.root / "queue").rglob("*.patch")}
    proc = q.run("variant", "A1-a.patch", str(wrong), check=False)
    assert proc.returncode == 1 and "a variant keeps its patch's id" in proc.stderr
    assert {p: p.read_bytes() for p in (q.root / "queue").rglob("*.patch")} == files


def test_variant_killed_at_any_write_loses_no_diff_and_finishes_when_run_again(tmp_path: Path) -> None:
    """`variant` writes the kept copy before it replaces queue/NAME: killed between the two, the
    old diff is in one file or both, never lost, and the same command run again finishes."""
    ref, ref_draft, _ = _before_variant(tmp_path / "ref")
    ref.run("variant", "A1-a.patch", str(ref_draft))
    final = _patch_files(ref)
    q, draft, old_body = _before_variant(tmp_path / "q")
    start = _patch_files(q)
    kills = between = 0
    for crash_after in range(1, 60):
        for rel in set(_patch_files(q)) - set(start):
            (q.root / rel).unlink()
        for rel, data in start.items():
            (q.root / rel).write_bytes(data)
        proc = q.run("variant", "A1-a.patch", str(draft), check=False, env={"GQUEUE_TEST_CRASH_AFTER": str(crash_after)})
        if proc.returncode == 0:
            break
        assert proc.returncode == -9, proc.stderr
        kills += 1
        texts = [data.decode() for rel, data in _patch_files(q).items() if rel.endswith("A1-a.patch")]
        assert any(t.split("...\n", 1)[1] == old_body for t in texts), crash_after  # the old diff survives
        if _patch_files(q) != final:  # killed before its last rename: the same command again finishes it
            between += (q.root / "queue/variants/0.1.0/A1-a.patch").exists()
            q.run("variant", "A1-a.patch", str(draft))
        assert _patch_files(q) == final, crash_after
    assert kills >= 2 and between >= 1 and _patch_files(q) == final  # a kill between the two renames was met


def test_rebase_keep_old_skip_keeps_the_patch_for_the_old_pin(tmp_path: Path) -> None:
    q = rebase_queue(tmp_path)
    assert q.run("rebase", "--pin", "next", "--keep-old", "rollback", check=False).returncode == 3
    done = json.loads(q.run("rebase", "--skip", "--json").stdout)
    assert done["result"]["done"] and done["result"]["summary"]["skipped"] == ["K3-gone.patch"]
    assert "K3-gone.patch" in q.run("series").stdout.split() and "# parked" not in (q.root / "series").read_text()
    k3 = (q.root / "queue/K3-gone.patch").read_text()
    assert ">=0.1.0,<0.2.0" in k3 and "retired" not in k3
    assert q.run("applied").stdout.split() == ["K1-same.patch", "K2-merge.patch", "K3-gone.patch"]
    doc = json.loads(q.run("check", "--json").stdout)
    assert doc["ok"] and [p["status"] for p in doc["pins"][1]["patches"]] == ["clean", "clean", "clean"]


def test_diff_files_and_header_show_the_file_that_serves_the_pin(tmp_path: Path) -> None:
    q = two_pin_queue(tmp_path)
    doc = json.loads(q.run("header", "A1", "--json").stdout)
    assert doc["result"]["file"] == "queue/A1-a.patch" and doc["result"]["header"]["applies_to"] == {"vllm": ">=0.2.0"}
    pins = (q.root / "vendor-pin.txt").read_text().splitlines()  # the rollback pin becomes the main one
    (q.root / "vendor-pin.txt").write_text(f"{pins[1].replace('rollback', 'pin', 1)}\n{pins[0].replace('pin', 'next', 1)}\n")
    q.run("checkout")
    doc = json.loads(q.run("diff", "A1", "--json").stdout)
    assert doc["result"]["file"] == "queue/variants/0.1.0/A1-a.patch" and "-    return x + 7\n" in doc["result"]["diff"]
    doc = json.loads(q.run("header", "A1", "--json").stdout)
    assert doc["result"]["file"] == "queue/variants/0.1.0/A1-a.patch"
