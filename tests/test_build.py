"""gqueue build on a synthetic upstream: a fake vllm sdist plus a binary wheel with a fake compiled file."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from synth import BASE_FILES, Queue, make_queue, sha256, unified

REPO = Path(__file__).resolve().parents[1]
WHEEL_TAGS = "cp38-abi3-manylinux_2_28_x86_64"
FAKE_SO = bytes((i * 7919 + (i >> 3)) % 251 for i in range(1 << 16))
METADATA = "Metadata-Version: 2.1\nName: vllm\nVersion: {version}\nSummary: synthetic\nRequires-Dist: numpy\n\nLong description.\n"
ENTRY_POINTS = "[console_scripts]\nvllm = vllm.parser:parse\n"
RUNTIME_FILES = ("__init__.py", "runtime.py", "manifest.py")


# the synthetic upstream wheel ------------------------------------------------------------
def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(directory: Path, version: str, files: dict[str, str | bytes]) -> Path:
    """A binary wheel of the sdist's vllm/ files, a fake compiled extension and a wheel-only module."""
    members: dict[str, tuple[bytes, int]] = {}
    for name, content in files.items():
        if name.startswith("vllm/"):
            members[name] = (content.encode() if isinstance(content, str) else content, 0o644)
    members["vllm/_C.abi3.so"] = (FAKE_SO, 0o755)
    members["vllm/_wheel_only.py"] = (b"BUILT = 'wheel'\n", 0o644)
    info = f"vllm-{version}.dist-info"
    members[f"{info}/METADATA"] = (METADATA.format(version=version).encode(), 0o644)
    members[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: synth\nRoot-Is-Purelib: false\nTag: {WHEEL_TAGS}\n".encode(), 0o644)
    members[f"{info}/top_level.txt"] = (b"vllm\n", 0o644)
    members[f"{info}/entry_points.txt"] = (ENTRY_POINTS.encode(), 0o644)
    record = "".join(f"{n},{_record_hash(d)},{len(d)}\n" for n, (d, _) in sorted(members.items())) + f"{info}/RECORD,,\n"
    members[f"{info}/RECORD"] = (record.encode(), 0o644)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"vllm-{version}-{WHEEL_TAGS}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, (data, mode) in members.items():  # RECORD last, as written above
            zi = zipfile.ZipInfo(name, (2024, 1, 2, 3, 4, 6))
            zi.external_attr = (0o100000 | mode) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)
    return path


def make_build_queue(tmp: Path, files: dict[str, str | bytes] | None = None, *, seed_cache: bool = True) -> tuple[Queue, Path]:
    """A queue whose pin also records the synthetic wheel; the wheel seeded in the download cache."""
    from gqueue.upstream import cache

    files = files or BASE_FILES
    q = make_queue(tmp, files)
    wheel = make_wheel(tmp / "upstream", "0.1.0", files)
    pin = (q.root / "vendor-pin.txt").read_text().strip()
    (q.root / "vendor-pin.txt").write_text(f"{pin} wheel=sha256:{sha256(wheel)} wheel-file={wheel.name}\n")
    if seed_cache:
        cache.fetch(wheel.as_uri(), sha256(wheel), wheel.name, where="test")
    kernels = q.root / "kernels" / "vllm_genesis"
    kernels.mkdir(parents=True)
    for name in RUNTIME_FILES:
        (kernels / name).write_bytes((REPO / "kernels" / "vllm_genesis" / name).read_bytes())
    return q, wheel


def edit(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


def parser_patch(q: Queue, name: str = "P15-none.patch", extra: str = "lifecycle: stable\nenv_flag: GENESIS_ENABLE_P15\n") -> None:
    parser = BASE_FILES["vllm/parser.py"]
    q.write_patch(name, unified("vllm/parser.py", parser, edit(parser, "== 'null'", "in ('null', 'None')")), extra=extra)


def build_json(q: Queue, *args: str) -> dict:
    doc = json.loads(q.run("build", "--json", *args).stdout)
    assert doc["schema"] == "gqueue.build/1" and doc["ok"], doc
    return doc["result"]


def fresh_venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, capture_output=True)
    return path / "bin" / "python"


def pip_install(python: Path, wheel: Path) -> None:
    proc = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def verify_record(wheel: Path) -> list[list[str]]:
    """Every member is in RECORD with the right hash and size, and RECORD lists nothing else."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        record_name = next(n for n in names if n.endswith(".dist-info/RECORD"))
        rows = list(csv.reader(io.StringIO(zf.read(record_name).decode())))
        assert sorted(r[0] for r in rows) == sorted(names)
        for path, digest, size in rows:
            if path == record_name:
                assert (digest, size) == ("", "")
                continue
            data = zf.read(path)
            assert digest == _record_hash(data) and int(size) == len(data), path
        assert zf.testzip() is None
    return rows


# tests ------------------------------------------------------------------------------------
def test_overlay_wheel_installs_and_behaves_patched(tmp_path: Path) -> None:
    q, upstream = make_build_queue(tmp_path)
    parser_patch(q)
    q.set_series("P15-none.patch")
    q.run("checkout")
    q.run("push", "--all")
    result = build_json(q)
    assert result["version"].startswith("0.1.0+gq.") and len(result["label"]) == len("gq.") + 12
    wheel = q.root / result["wheel"]
    assert wheel.name == f"vllm-{result['version']}-{WHEEL_TAGS}.whl" and wheel.parent == q.root / "dist"
    assert result["replaced"] == ["vllm/parser.py"] and result["patches"] == ["P15-none.patch"]
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == result["sha256"]
    verify_record(wheel)

    with zipfile.ZipFile(wheel) as new, zipfile.ZipFile(upstream) as old:
        info = f"vllm-{result['version']}.dist-info"
        assert new.read(f"{info}/METADATA") == old.read("vllm-0.1.0.dist-info/METADATA").replace(
            b"Version: 0.1.0", f"Version: {result['version']}".encode())
        assert new.read("vllm/_C.abi3.so") == FAKE_SO
        assert (new.getinfo("vllm/_C.abi3.so").external_attr >> 16) & 0o777 == 0o755
        assert new.read("vllm/parser.py") == (q.work / "vllm/parser.py").read_bytes()
        assert {"vllm_genesis/runtime.py", "vllm_genesis/manifest.py", "vllm_genesis/registry.json"} <= set(new.namelist())
        registry = json.loads(new.read("vllm_genesis/registry.json"))
        assert [(p["id"], p["env_flag"]) for p in registry["patches"]] == [("P15", "GENESIS_ENABLE_P15")]

    python = fresh_venv(tmp_path / "venv")
    pip_install(python, wheel)
    script = (
        "import json, vllm.parser, vllm._wheel_only, importlib.metadata as md\n"
        "from vllm_genesis.manifest import manifest\n"
        "from vllm_genesis.runtime import registry\n"
        "m = manifest()\n"
        "print(json.dumps({'parsed': vllm.parser.parse('None'), 'version': md.version('vllm'),"
        " 'manifest': m, 'switches': sorted(registry())}))\n"
    )
    out = json.loads(subprocess.run([str(python), "-c", script], check=True, capture_output=True, text=True,
                                    cwd=tmp_path).stdout)
    assert out["parsed"] is None  # unpatched, json.loads('None') raises
    assert out["version"] == result["version"] and out["switches"] == ["P15"]
    m = out["manifest"]
    assert m["schema"] == "gqueue.manifest/1" and m["version"] == result["version"] and m["mode"] == "overlay"
    assert m["patches"] == [{"name": "P15-none.patch", "id": "P15", "title": "P15-none.patch", "lifecycle": "stable",
                             "env_flag": "GENESIS_ENABLE_P15", "default_on": False, "files": ["vllm/parser.py"]}]
    assert m["files"]["replaced"] == ["vllm/parser.py"] and m["pin"]["wheel_sha256"] == sha256(upstream)
    assert result["label"] == "gq." + m["digests"]["queue"][:12]


def test_rebuild_is_byte_identical_and_label_follows_inputs(tmp_path: Path) -> None:
    q, _ = make_build_queue(tmp_path)
    parser_patch(q)
    q.set_series("P15-none.patch")
    q.run("checkout")
    q.run("push", "--all")
    first = build_json(q)
    data = (q.root / first["wheel"]).read_bytes()
    second = build_json(q, "-o", str(tmp_path / "again"))
    assert (tmp_path / "again" / first["filename"]).read_bytes() == data and second["sha256"] == first["sha256"]
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        names = zf.namelist()
        assert all(i.date_time == (1980, 1, 1, 0, 0, 0) for i in zf.infolist())
    body = [n for n in names if ".dist-info/" not in n]
    assert body == sorted(body) and names[-1].endswith(".dist-info/RECORD")
    (q.root / "kernels/vllm_genesis/extra.json").write_text("{}\n")
    third = build_json(q)
    assert third["label"] != first["label"] and "vllm_genesis/extra.json" in third["added"]


def test_unchanged_members_are_copied_without_recompressing(tmp_path: Path) -> None:
    from gqueue.ops.wheel import Overlay, write_overlay

    upstream = make_wheel(tmp_path / "up", "0.1.0", BASE_FILES)
    stats = write_overlay(upstream, tmp_path / "out", Overlay("0.1.0+x", {"vllm/util.py": b"X = 1\n", "vllm/config.py": None}))
    assert stats.replaced == ["vllm/util.py"] and stats.removed == ["vllm/config.py"] and stats.added == []

    def raw(path: Path, name: str) -> bytes:
        with zipfile.ZipFile(path) as zf:
            info = zf.getinfo(name)
        with path.open("rb") as handle:
            handle.seek(info.header_offset + 26)
            skip = int.from_bytes(handle.read(2), "little") + int.from_bytes(handle.read(2), "little")
            handle.seek(skip, 1)
            return handle.read(info.compress_size)

    out = tmp_path / "out" / stats.filename
    assert raw(out, "vllm/_C.abi3.so") == raw(upstream, "vllm/_C.abi3.so")
    rows = verify_record(out)
    assert "vllm/config.py" not in {r[0] for r in rows}
    assert stats.copied == len(rows) - 3  # all but RECORD, METADATA and the replaced file


def test_added_and_deleted_package_files(tmp_path: Path) -> None:
    q, _ = make_build_queue(tmp_path)
    body = unified("vllm/new_mod.py", "", "VALUE = 42\n").replace("--- a/vllm/new_mod.py", "--- /dev/null")
    body = body.replace("diff --git a/vllm/new_mod.py b/vllm/new_mod.py\n", "diff --git a/vllm/new_mod.py b/vllm/new_mod.py\nnew file mode 100644\n")
    q.write_patch("A1-add.patch", body)
    q.write_patch("A2-readme.patch", unified("README.md", "synthetic upstream\n", "synthetic upstream, patched\n"))
    q.set_series("A1-add.patch", "A2-readme.patch")
    q.run("checkout")
    q.run("push", "--all")
    proc = q.run("build", "--json")
    result = json.loads(proc.stdout)["result"]
    assert result["added"][0] == "vllm/new_mod.py" and result["not_shipped"] == ["README.md"]
    assert "outside vllm/" in proc.stderr
    with zipfile.ZipFile(q.root / result["wheel"]) as zf:
        assert zf.read("vllm/new_mod.py") == b"VALUE = 42\n" and "README.md" not in zf.namelist()


def test_patch_touching_compiled_sources_is_refused(tmp_path: Path) -> None:
    files = {**BASE_FILES, "csrc/ops.cu": "__global__ void k() {}\n", "CMakeLists.txt": "project(x)\n"}
    q, _ = make_build_queue(tmp_path, files)
    parser_patch(q)
    q.write_patch("PN9-kernel.patch", unified("csrc/ops.cu", files["csrc/ops.cu"], "__global__ void k() { return; }\n"))
    q.set_series("P15-none.patch", "PN9-kernel.patch")
    q.run("checkout")
    q.run("push", "--all")
    proc = q.run("build", check=False)
    assert proc.returncode == 1
    assert "error[needs-source-build]: queue/PN9-kernel.patch:" in proc.stderr
    assert "PN9-kernel.patch (csrc/ops.cu)" in proc.stderr and "--mode source" in proc.stderr
    assert "P15-none.patch" not in proc.stderr
    doc = json.loads(q.run("build", "--json", check=False).stdout)
    assert doc["ok"] is False and doc["error"]["ref"] == "needs-source-build"
    assert not (q.root / "dist").exists()


def test_source_mode_builds_the_patched_tree_with_pip_wheel(tmp_path: Path) -> None:
    from gqueue.ops import build as build_op
    from gqueue.ops.workspace import Workspace
    from gqueue.store import Store

    files = {**BASE_FILES, "csrc/ops.cu": "__global__ void k() {}\n"}
    q, _ = make_build_queue(tmp_path, files, seed_cache=False)  # the upstream wheel is not needed
    q.write_patch("PN9-kernel.patch", unified("csrc/ops.cu", files["csrc/ops.cu"], "__global__ void k() { return; }\n"))
    parser_patch(q)
    q.set_series("PN9-kernel.patch", "P15-none.patch")
    q.run("checkout")
    q.run("push", "--all")
    calls: list[list[str]] = []

    def fake_pip(argv: list[str], cwd: Path) -> None:
        calls.append(argv)
        assert argv[1:4] == ["-m", "pip", "wheel"] and "--no-deps" in argv
        assert (cwd / "csrc/ops.cu").read_text() == "__global__ void k() { return; }\n"
        tree_files = {p.relative_to(cwd).as_posix(): p.read_bytes() for p in cwd.rglob("*") if p.is_file()}
        make_wheel(Path(argv[argv.index("--wheel-dir") + 1]), "0.1.0", tree_files)

    ws = Workspace(Store(q.root))
    try:
        result = build_op.build(ws, mode="source", runner=fake_pip, out_dir=tmp_path / "out")
    finally:
        ws.close()
    assert len(calls) == 1 and result.mode == "source"
    wheel = tmp_path / "out" / result.filename
    verify_record(wheel)
    with zipfile.ZipFile(wheel) as zf:
        assert b"('null', 'None')" in zf.read("vllm/parser.py")
        doc = json.loads(zf.read("vllm_genesis/gqueue_manifest.json"))
    assert doc["mode"] == "source" and doc["files"]["patched"] == ["csrc/ops.cu", "vllm/parser.py"]


def test_profile_builds_the_series_in_memory(tmp_path: Path) -> None:
    q, _ = make_build_queue(tmp_path)
    parser_patch(q)
    util = BASE_FILES["vllm/util.py"]
    q.write_patch("P2-util.patch", unified("vllm/util.py", util, edit(util, "return x + 7\n", "return x + 70\n")))
    q.write_patch("P3-more.patch", unified("vllm/util.py", util, edit(util, "return x + 9\n", "return x + 90\n")))
    q.set_series("P15-none.patch", "P2-util.patch", "P3-more.patch")
    (q.root / "profiles").mkdir()
    (q.root / "profiles" / "lean.yaml").write_text("name: lean\npolicy: compat\npatches: [P15, P2]\n")
    q.run("checkout")
    q.run("push")  # only the first is applied in work/
    stacked = build_json(q)
    assert stacked["patches"] == ["P15-none.patch"]
    proc = q.run("build", "--profile", "lean", "--json")
    result = json.loads(proc.stdout)["result"]
    assert result["patches"] == ["P15-none.patch", "P2-util.patch"] and result["profile"] == "lean"
    assert result["replaced"] == ["vllm/parser.py", "vllm/util.py"] and result["label"] != stacked["label"]
    assert q.run("applied").stdout.split() == ["P15-none.patch"]
    with zipfile.ZipFile(q.root / result["wheel"]) as zf:
        util_built = zf.read("vllm/util.py")
        assert b"return x + 70" in util_built and b"return x + 90" not in util_built
        assert json.loads(zf.read("vllm_genesis/gqueue_manifest.json"))["profile"] == "lean"


def test_local_wheel_must_match_the_pin(tmp_path: Path) -> None:
    q, upstream = make_build_queue(tmp_path, seed_cache=False)
    q.run("checkout")
    other = make_wheel(tmp_path / "other", "0.1.0", {**BASE_FILES, "vllm/extra.py": "X = 1\n"})
    proc = q.run("build", "--wheel", str(other), check=False)
    assert proc.returncode == 1 and "error[integrity]" in proc.stderr and "sha256 mismatch" in proc.stderr
    result = build_json(q, "--wheel", str(upstream))
    assert result["patches"] == [] and result["replaced"] == []


@pytest.mark.parametrize("path,kind", [
    ("csrc/attention/x.cu", "compiled"), ("CMakeLists.txt", "compiled"), ("cmake/utils.cmake", "compiled"),
    ("vllm/x/y.cuh", "compiled"), ("vllm/a.h", "compiled"), ("vllm/a.py", "shipped"),
    ("vllm/data.json", "shipped"), ("tests/test_x.py", "other"), ("setup.py", "other"),
])
def test_kind_of(path: str, kind: str) -> None:
    from gqueue.ops.selection import kind_of

    assert kind_of(path, "vllm") == kind


def test_set_version_keeps_every_other_byte() -> None:
    from gqueue.ops.wheel import set_version

    meta = b"Metadata-Version: 2.4\r\nName: vllm\nVersion: 0.24.0\nRequires-Dist: x\n\nVersion: in body\n"
    assert set_version(meta, "0.24.0+gq.1") == meta.replace(b"Version: 0.24.0\n", b"Version: 0.24.0+gq.1\n", 1)



def test_kernel_files_leave_out_install_metadata_and_refuse_a_linked_folder(tmp_path: Path) -> None:
    """kernels/ as a developer's checkout leaves it: a local install's metadata and caches are not
    part of the package; a linked folder (its files would be missing from the wheel) is refused."""
    from gqueue.errors import UsageError
    from gqueue.ops.build import kernel_files

    pkg = tmp_path / "kernels" / "vllm_genesis"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "k.py").write_text("K = 1\n")
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "kernels" / "vllm_genesis.egg-info").mkdir()
    (tmp_path / "kernels" / "vllm_genesis.egg-info" / "PKG-INFO").write_text("Name: x\n")
    (pkg / "old.dist-info").mkdir()
    (pkg / "old.dist-info" / "METADATA").write_text("Name: x\n")
    assert sorted(kernel_files(tmp_path)) == ["vllm_genesis/__init__.py", "vllm_genesis/sub/k.py"]
    os.symlink(pkg / "sub", pkg / "linked")
    with pytest.raises(UsageError, match="kernels/vllm_genesis/linked: a symbolic link to a folder"):
        kernel_files(tmp_path)
