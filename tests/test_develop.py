"""gqueue develop: the work tree imported by a venv, upstream's compiled files beside it, and a clean uninstall."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from synth import BASE_FILES, unified
from test_build import FAKE_SO, make_build_queue, parser_patch


def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, capture_output=True)
    return path / "bin" / "python"


def _purelib(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def _snapshot(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if "__pycache__" not in p.parts}


PROBE = (
    "import json, importlib.metadata as md, vllm, vllm.util, vllm._wheel_only, vllm_genesis.runtime\n"
    "from vllm_genesis.manifest import manifest\n"
    "print(json.dumps({'vllm': vllm.__file__, 'f3': vllm.util.f3(0), 'built': vllm._wheel_only.BUILT,"
    " 'version': md.version('vllm'), 'genesis': vllm_genesis.runtime.__file__, 'manifest': manifest()}))\n"
)


def _probe(python: Path, cwd: Path) -> dict:
    proc = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_develop_imports_work_tree_live_and_uninstall_removes_every_trace(tmp_path: Path) -> None:
    q, _ = make_build_queue(tmp_path)
    parser_patch(q)
    q.set_series("P15-none.patch")
    q.run("checkout")
    q.run("push", "--all")
    python = _venv(tmp_path / "venv")
    purelib = _purelib(python)
    venv_before = _snapshot(tmp_path / "venv")
    work_before = _snapshot(q.work)
    exclude_before = (q.work / ".git/info/exclude").read_text()

    env = {"VIRTUAL_ENV": str(tmp_path / "venv")}
    doc = json.loads(q.run("develop", "--json", env=env).stdout)
    assert doc["ok"] and doc["result"]["upstream_files"] == 2 and doc["result"]["python"].startswith(str(tmp_path / "venv"))
    assert (q.work / "vllm/_C.abi3.so").read_bytes() == FAKE_SO
    assert json.loads(q.run("status", "--json").stdout)["result"]["dirty"] == []

    out = _probe(python, tmp_path)
    assert Path(out["vllm"]).resolve() == (q.work / "vllm/__init__.py").resolve()
    assert out["f3"] == 3 and out["built"] == "wheel" and out["version"] == "0.1.0+gq.develop"
    assert Path(out["genesis"]).resolve() == (q.root / "kernels/vllm_genesis/runtime.py").resolve()
    assert out["manifest"] is None
    util = q.work / "vllm/util.py"
    util.write_text(util.read_text().replace("return x + 3\n", "return x + 33\n"))
    assert _probe(python, tmp_path)["f3"] == 33  # edits are live
    util.write_text(BASE_FILES["vllm/util.py"])
    pip_view = (purelib / "vllm-0.1.0+gq.develop.dist-info")
    assert json.loads((pip_view / "direct_url.json").read_text())["dir_info"] == {"editable": True}
    assert (tmp_path / "venv/bin/vllm").is_file()

    q.run("push", check=False)  # moves of the stack are not blocked by the placed files
    q.run("pop")
    assert (q.work / "vllm/_C.abi3.so").exists()

    doc = json.loads(q.run("develop", "--uninstall", "--json").stdout)
    assert doc["ok"] and "work/vllm/_C.abi3.so" in doc["result"]["removed"]
    assert _snapshot(tmp_path / "venv") == venv_before
    assert _snapshot(q.work) == work_before
    assert (q.work / ".git/info/exclude").read_text() == exclude_before
    assert not (q.root / ".gqueue/develop").exists() and not (q.root / ".gqueue/develop.json").exists()
    assert "no editable install" in q.run("develop", "--uninstall").stdout


def test_develop_refuses_a_venv_with_vllm_installed(tmp_path: Path) -> None:
    q, _ = make_build_queue(tmp_path)
    q.run("checkout")
    python = _venv(tmp_path / "venv")
    installed = _purelib(python) / "vllm-0.1.0.dist-info"
    installed.mkdir(parents=True)
    (installed / "INSTALLER").write_text("pip\n")
    proc = q.run("develop", "--python", str(python), check=False)
    assert proc.returncode == 1 and "vllm-0.1.0.dist-info" in proc.stderr and "pip uninstall vllm" in proc.stderr
    assert not (q.work / "vllm/_C.abi3.so").exists()


def test_develop_twice_replaces_the_first(tmp_path: Path) -> None:
    q, _ = make_build_queue(tmp_path)
    q.run("checkout")
    python = _venv(tmp_path / "venv")
    q.run("develop", "--python", str(python))
    q.run("develop", "--python", str(python))
    assert _probe(python, tmp_path)["built"] == "wheel"
    q.run("develop", "--uninstall")
    assert not list(_purelib(python).glob("vllm*")) and not (_purelib(python) / "gqueue-develop.pth").exists()


def test_develop_keeps_a_file_deleted_by_a_patch_deleted(tmp_path: Path) -> None:
    q, _ = make_build_queue(tmp_path)
    config = BASE_FILES["vllm/config.py"]
    body = unified("vllm/config.py", config, "").replace("+++ b/vllm/config.py", "+++ /dev/null")
    body = body.replace("b/vllm/config.py\n", "b/vllm/config.py\ndeleted file mode 100644\n", 1)
    q.write_patch("D1-drop.patch", body)
    q.set_series("D1-drop.patch")
    q.run("checkout")
    q.run("push", "--all")
    assert not (q.work / "vllm/config.py").exists()
    q.run("develop", "--python", str(_venv(tmp_path / "venv")))
    assert not (q.work / "vllm/config.py").exists() and (q.work / "vllm/_wheel_only.py").exists()
    q.run("develop", "--uninstall")
