"""gqueue bisect pins against a local package index serving synthetic releases."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from synth import BASE_FILES, Queue, make_queue, make_sdist, sha256, unified

PARSER = BASE_FILES["vllm/parser.py"]
UTIL = BASE_FILES["vllm/util.py"]
VERSIONS = [f"0.1.{k}" for k in range(10)]


def release_files(k: int) -> dict[str, str | bytes]:
    files: dict[str, str | bytes] = dict(BASE_FILES)
    if k >= 4:  # upstream changes a default: a command run with the queue applied notices it
        files["vllm/config.py"] = str(files["vllm/config.py"]).replace("OPTION_3 = 3\n", "OPTION_3 = 30\n")
    if k >= 6:  # upstream rewrites the line the parser patch changes
        files["vllm/parser.py"] = PARSER.replace("if text == 'null':", "if text in ('null',):")
    return files


class Index:
    def __init__(self, root: Path) -> None:
        self.routes: dict[str, tuple[str, bytes]] = {}
        self.downloads: list[str] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        files = []
        for k, version in enumerate(VERSIONS):
            archive = make_sdist(root / "index" / version, version, release_files(k))
            self.routes[f"/files/{archive.name}"] = ("application/gzip", archive.read_bytes())
            files.append({"filename": archive.name, "url": f"{self.url}/files/{archive.name}",
                          "hashes": {"sha256": sha256(archive)}, "size": archive.stat().st_size})
        files.append({"filename": "vllm-0.1.9-py3-none-any.whl", "url": f"{self.url}/files/x.whl",
                      "hashes": {"sha256": "0" * 64}})
        doc = {"meta": {"api-version": "1.1"}, "name": "vllm", "versions": VERSIONS + ["0.2.0rc1"], "files": files}
        self.routes["/simple/vllm/"] = ("application/vnd.pypi.simple.v1+json", json.dumps(doc).encode())

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        index = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                route = index.routes.get(self.path)
                if route is None:
                    self.send_error(404)
                    return
                if self.path.endswith(".tar.gz"):
                    index.downloads.append(self.path.rsplit("/", 1)[-1])
                self.send_response(200)
                self.send_header("Content-Type", route[0])
                self.send_header("Content-Length", str(len(route[1])))
                self.end_headers()
                self.wfile.write(route[1])

            def log_message(self, *args: object) -> None:
                pass

        return Handler


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Index]:
    served = Index(tmp_path)
    thread = threading.Thread(target=served.server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("GQUEUE_INDEX_URL", f"{served.url}/simple")
    yield served
    served.server.shutdown()


def pins_queue(tmp: Path) -> Queue:
    q = make_queue(tmp)
    q.write_patch("U1-util.patch", unified("vllm/util.py", UTIL, UTIL.replace("return x + 2\n", "return x + 20\n")))
    q.write_patch("P1-parser.patch", unified("vllm/parser.py", PARSER, PARSER.replace("== 'null'", "in ('null', 'None')")))
    q.set_series("U1-util.patch", "P1-parser.patch")
    q.run("checkout")
    return q


def test_first_release_where_patch_stops_applying(tmp_path: Path, index: Index) -> None:
    q = pins_queue(tmp_path)
    proc = q.run("bisect", "pins", "--from", "0.1.0", "--to", "0.1.9", "--patch", "P1", "--json")
    result = json.loads(proc.stdout)["result"]
    assert result["first_bad"] == "0.1.6" and result["last_good"] == "0.1.5"
    assert result["releases"] == 10  # the pre-release is left out
    bad = next(s for s in result["steps"] if s["version"] == "0.1.6")
    assert "P1-parser.patch does not apply: vllm/parser.py" in bad["detail"]
    assert len(index.downloads) <= 5 and len(set(index.downloads)) == len(index.downloads)
    assert "vllm-0.1.0.tar.gz" not in index.downloads  # the pinned release is already in work/.git
    assert q.run("applied").stdout.split() == []


def test_range_that_applies_throughout_fetches_one(tmp_path: Path, index: Index) -> None:
    q = pins_queue(tmp_path)
    proc = q.run("bisect", "pins", "--from", "0.1.0", "--to", "0.1.5", "--patch", "P1-parser.patch")
    assert "P1-parser.patch applies on every release up to 0.1.5" in proc.stdout
    assert index.downloads == ["vllm-0.1.5.tar.gz"]


def test_command_with_the_queue_applied(tmp_path: Path, index: Index) -> None:
    q = pins_queue(tmp_path)
    check = "import sys, vllm.config as c, vllm.util as u; sys.exit(0 if c.OPTION_3 == 3 and u.f2(0) == 20 else 1)"
    proc = q.run("bisect", "pins", "--from", "0.1.0", "--to", "0.1.5", "--patch", "U1", "--json", "--",
                 sys.executable, "-c", check)
    result = json.loads(proc.stdout)["result"]
    assert result["first_bad"] == "0.1.4" and result["last_good"] == "0.1.3"


def test_releases_where_the_queue_does_not_apply_are_skipped(tmp_path: Path, index: Index) -> None:
    q = pins_queue(tmp_path)
    check = "import sys, vllm.config as c; sys.exit(0 if c.OPTION_3 == 3 else 1)"
    proc = q.run("bisect", "pins", "--from", "0.1.0", "--to", "0.1.9", "--", sys.executable, "-c", check, check=False)
    assert proc.returncode == 1 and "cannot test the newest release" in proc.stderr


def test_usage_errors(tmp_path: Path, index: Index) -> None:
    q = pins_queue(tmp_path)
    assert q.run("bisect", "pins", "--from", "0.1.5", "--to", "0.1.2", "--patch", "P1", check=False).returncode == 2
    assert q.run("bisect", "pins", "--from", "0.1.0", "--to", "0.1.2", check=False).returncode == 2
    assert q.run("bisect", "pins", "--from", "0.1.0", "--to", "0.1.2", "--patch", "ZZ", check=False).returncode == 2


def test_earlier_patches_that_stop_applying_are_left_out(tmp_path: Path, index: Index) -> None:
    q = pins_queue(tmp_path)
    q.set_series("P1-parser.patch", "U1-util.patch")
    proc = q.run("bisect", "pins", "--from", "0.1.0", "--to", "0.1.9", "--patch", "U1", "--json")
    result = json.loads(proc.stdout)["result"]
    assert result["first_bad"] is None and result["last_good"] == "0.1.9"
    assert result["steps"][0]["detail"] == "applies (left out, not applying: P1-parser.patch)"
    strict = q.run("bisect", "pins", "--from", "0.1.0", "--to", "0.1.9", "--", "true", check=False)
    assert strict.returncode == 1 and "P1-parser.patch does not apply" in strict.stderr  # whole series: strict
