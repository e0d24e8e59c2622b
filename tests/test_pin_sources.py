"""Pins beyond 'name-version.tar.gz': Debian orig tarballs, archives named by version=, and
upstream git commits (a URL and a full commit id), all driven through the command line."""

from __future__ import annotations

import io
import json
import lzma
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from synth import BASE_FILES, Queue, make_sdist, sha256


def _queue(tmp_path: Path, pin_line: str) -> Queue:
    root = tmp_path / "q"
    (root / "queue").mkdir(parents=True)
    (root / "series").write_text("")
    (root / "vendor-pin.txt").write_text(pin_line + "\n")
    return Queue(root)


def _pins(q: Queue) -> list[dict[str, object]]:
    return json.loads(q.run("pin", "--json").stdout)["result"]["pins"]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=Up Stream", "-c", "user.email=up@example.org", *args],
                          cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def _upstream_repo(tmp_path: Path) -> tuple[Path, str, str]:
    """A git repository 'vllm' with two commits: (path, first commit, second commit)."""
    repo = tmp_path / "upstream" / "vllm"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "--initial-branch=main")
    for name, text in BASE_FILES.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    (repo / "tools").mkdir()
    (repo / "tools" / "run.sh").write_text("#!/bin/sh\necho run\n")
    (repo / "tools" / "run.sh").chmod(0o755)
    (repo / "docs-link").symlink_to("README.md")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "first")
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "vllm" / "parser.py").write_text("def parse(text):\n    return text\n")
    _git(repo, "commit", "-q", "-a", "-m", "second")
    return repo, first, _git(repo, "rev-parse", "HEAD")


# --- archives -----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["9.2p1", "2.5.13+dfsg"])
def test_a_debian_orig_tarball_gives_its_name_and_version(tmp_path: Path, version: str) -> None:
    """Its URL as Path.as_uri() writes it: '+' spelled %2B (openldap_2.5.13+dfsg.orig.tar.xz)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, text in BASE_FILES.items():
            data = text.encode()
            info = tarfile.TarInfo(f"openssh-9.2p1/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    archive = tmp_path / "dl" / f"openssh_{version}.orig.tar.xz"
    archive.parent.mkdir()
    archive.write_bytes(lzma.compress(buf.getvalue(), format=lzma.FORMAT_XZ))
    assert ("%2B" in archive.as_uri()) == ("+" in version)
    q = _queue(tmp_path, f"pin {archive.as_uri()}#sha256={sha256(archive)}")
    [row] = _pins(q)
    assert (row["kind"], row["project"], row["version"]) == ("archive", "openssh", version)
    assert row["identity"] == f"sha256:{sha256(archive)}"
    q.run("checkout")
    assert (q.work / "vllm" / "parser.py").read_text() == BASE_FILES["vllm/parser.py"]


def test_an_archive_named_by_its_commit_needs_and_takes_version(tmp_path: Path) -> None:
    made = make_sdist(tmp_path / "dl", "0.1.0", BASE_FILES, top="vllm-0123abc")
    archive = made.rename(made.with_name("0123abc4567def.tar.gz"))
    line = f"pin {archive.as_uri()}#sha256={sha256(archive)}"
    q = _queue(tmp_path, line)
    proc = q.run("checkout", check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error[bad-format]: vendor-pin.txt:1: cannot read a project and version "
                                  "from archive name '0123abc4567def.tar.gz'")
    assert "project=NAME version=X.Y.Z" in proc.stderr and not q.work.exists()
    (q.root / "vendor-pin.txt").write_text(line + " project=vllm version=0.25.0.dev3\n")
    [row] = _pins(q)
    assert (row["project"], row["version"]) == ("vllm", "0.25.0.dev3")
    q.run("checkout")
    assert (q.work / "vllm" / "config.py").is_file()


def test_a_github_archive_url_gives_the_project_and_takes_version(tmp_path: Path) -> None:
    commit = "a" * 40
    url = f"https://github.com/vllm-project/vllm/archive/{commit}.tar.gz#sha256={'b' * 64}"
    q = _queue(tmp_path, f"pin {url} version=0.25.0.dev3")
    [row] = _pins(q)
    assert (row["kind"], row["project"], row["version"]) == ("archive", "vllm", "0.25.0.dev3")
    (q.root / "vendor-pin.txt").write_text(f"pin {url}\n")
    proc = q.run("pin", check=False)
    assert proc.returncode == 1 and "hint: name them on the line: 'version=X.Y.Z'" in proc.stderr


# --- git commits ----------------------------------------------------------------------------------


def test_a_git_pin_checks_out_that_commit_and_is_identified_by_it(tmp_path: Path) -> None:
    repo, first, second = _upstream_repo(tmp_path)
    q = _queue(tmp_path, f"pin git+{repo.as_uri()}@{first} version=0.25.0.dev0")
    [row] = _pins(q)
    assert (row["kind"], row["project"], row["version"], row["commit"]) == ("git", "vllm", "0.25.0.dev0", first)
    assert row["identity"] == f"git:{first}"
    out = json.loads(q.run("checkout", "--json").stdout)["result"]
    assert out["files"] == len(BASE_FILES) + 2
    assert (q.work / "vllm" / "parser.py").read_text() == BASE_FILES["vllm/parser.py"]  # the first commit's
    assert (q.work / "tools" / "run.sh").stat().st_mode & 0o100
    assert (q.work / "docs-link").is_symlink()
    # the base is gqueue's own commit of that tree, and says which upstream commit it is
    assert _git(q.work, "rev-parse", "HEAD^{tree}") == _git(repo, "rev-parse", f"{first}^{{tree}}")
    assert f"upstream commit {first}" in _git(q.work, "log", "-1", "--format=%B")
    # a second pin on the other commit is a pin of its own in the drift matrix
    (q.root / "vendor-pin.txt").write_text(
        f"pin git+{repo.as_uri()}@{first} version=0.25.0.dev0\nnext git+{repo.as_uri()}@{second} version=0.25.0.dev0\n")
    q.write_patch("P1-parser.patch", "diff --git a/vllm/parser.py b/vllm/parser.py\n--- a/vllm/parser.py\n"
                  "+++ b/vllm/parser.py\n@@ -1,3 +1,4 @@\n import json\n+import sys\n \n \n")
    q.set_series("P1-parser.patch")
    report = json.loads(q.run("check", "--no-lint", "--json", check=False).stdout)
    statuses = {p["label"]: p["patches"][0]["status"] for p in report["pins"]}
    assert statuses["pin"] == "clean" and statuses["next"] != "clean"


def test_a_git_pin_must_name_a_full_commit_the_repository_has(tmp_path: Path) -> None:
    repo, first, _second = _upstream_repo(tmp_path)
    q = _queue(tmp_path, f"pin git+{repo.as_uri()}@{first[:12]} version=0.25.0.dev0")
    proc = q.run("checkout", check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"error[bad-format]: vendor-pin.txt:1: '{first[:12]}' is not a full commit id")
    (q.root / "vendor-pin.txt").write_text(f"pin git+{repo.as_uri()}@main version=0.25.0.dev0\n")
    assert "is not a full commit id" in q.run("checkout", check=False).stderr
    (q.root / "vendor-pin.txt").write_text(f"pin git+{repo.as_uri()}@{first}\n")
    assert "a git pin needs 'version=X.Y.Z'" in q.run("checkout", check=False).stderr
    missing = "0123456789" * 4
    (q.root / "vendor-pin.txt").write_text(f"pin git+{repo.as_uri()}@{missing} version=0.25.0.dev0\n")
    proc = q.run("checkout", check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"error[network]: vendor-pin.txt:1: cannot fetch commit {missing}")
    assert not q.work.exists()


def test_init_and_check_take_a_git_pin_with_its_options(tmp_path: Path) -> None:
    repo, first, second = _upstream_repo(tmp_path)
    root = tmp_path / "q"
    root.mkdir()
    q = Queue(root)
    q.run("init", "--pin", f"git+{repo.as_uri()}@{first} version=0.25.0.dev0")
    assert (root / "vendor-pin.txt").read_text().endswith(f"pin git+{repo.as_uri()}@{first} version=0.25.0.dev0\n")
    q.run("checkout")
    q.write_patch("P1-parser.patch", "diff --git a/vllm/parser.py b/vllm/parser.py\n--- a/vllm/parser.py\n"
                  "+++ b/vllm/parser.py\n@@ -1,3 +1,4 @@\n import json\n+import sys\n \n \n")
    q.set_series("P1-parser.patch")
    report = json.loads(q.run("check", "--no-lint", "--json", "--pin", first, "--pin",
                              f"git+{repo.as_uri()}@{second} version=0.25.0.dev1", check=False).stdout)
    assert [(p["version"], p["patches"][0]["status"] != "clean") for p in report["pins"]] == [
        ("0.25.0.dev0", False), ("0.25.0.dev1", True)]
    proc = q.run("check", "--pin", f"git+{repo.as_uri()}@{second}", check=False)
    assert proc.returncode == 2 and "a git pin needs 'version=X.Y.Z'" in proc.stderr


def test_rebase_moves_the_stack_from_one_upstream_commit_to_the_next(tmp_path: Path) -> None:
    repo, first, second = _upstream_repo(tmp_path)
    q = _queue(tmp_path, f"pin git+{repo.as_uri()}@{first} version=0.25.0.dev0\n"
                         f"next git+{repo.as_uri()}@{second} version=0.25.0.dev1")
    q.run("checkout")
    q.write_patch("P1-run.patch", "diff --git a/tools/run.sh b/tools/run.sh\n--- a/tools/run.sh\n"
                  "+++ b/tools/run.sh\n@@ -1,2 +1,3 @@\n #!/bin/sh\n echo run\n+echo twice\n")
    q.set_series("P1-run.patch")
    q.run("push", "--all")
    q.run("rebase", "--pin", "next")
    assert f"pin git+{repo.as_uri()}@{second} version=0.25.0.dev1\n" in (q.root / "vendor-pin.txt").read_text()
    assert (q.work / "vllm" / "parser.py").read_text() == "def parse(text):\n    return text\n"
    assert (q.work / "tools" / "run.sh").read_text().endswith("echo twice\n")


def test_a_hard_link_to_a_file_of_the_archive_is_a_copy_of_it(tmp_path: Path) -> None:
    """tar stores a file met twice as a hard link to the first (bind9's orig tarball has them);
    it is read as a copy. A hard link to anything else is refused (tests/reliability)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, text in BASE_FILES.items():
            data = text.encode()
            info = tarfile.TarInfo(f"bind-9.18.49/{name}")
            info.size, info.mode = len(data), 0o755 if name == "vllm/util.py" else 0o644
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("bind-9.18.49/vllm/util_copy.py")
        link.type, link.linkname = tarfile.LNKTYPE, "bind-9.18.49/vllm/util.py"
        tar.addfile(link)
    archive = tmp_path / "dl" / "bind9_9.18.49.orig.tar.gz"
    archive.parent.mkdir()
    archive.write_bytes(buf.getvalue())
    q = _queue(tmp_path, f"pin {archive.as_uri()}#sha256={sha256(archive)}")
    q.run("checkout")
    copy = q.work / "vllm" / "util_copy.py"
    assert copy.read_text() == BASE_FILES["vllm/util.py"] and os.access(copy, os.X_OK) and not copy.is_symlink()
