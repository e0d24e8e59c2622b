"""The parsed-header cache answers only for byte-identical headers and never changes a result."""

from __future__ import annotations

import datetime
import hashlib
import json
from pathlib import Path

import pytest
from synth import BASE_FILES, make_queue, unified

from gqueue.errors import FormatError
from gqueue.headercache import LOADER_VERSION, HeaderCache
from gqueue.model.safeyaml import load_mapping
from gqueue.store import Store

HEADER = "id: P1\ntitle: one\nrequires: [P0]\nupstream: {pr: 123, state: open}\ndefault_on: false\n"


class Counting:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, text: str, *, path: str, first_line: int):
        self.calls += 1
        return load_mapping(text, path=path, first_line=first_line)


def test_a_saved_header_is_answered_without_parsing(tmp_path: Path) -> None:
    path = tmp_path / "headers.json"
    first, loader = HeaderCache(path), Counting()
    expected = first.load(loader, HEADER, path="queue/p", first_line=2)
    first.save()
    again = HeaderCache(path)
    assert again.load(loader, HEADER, path="queue/p", first_line=2) == expected
    assert loader.calls == 1
    assert expected == load_mapping(HEADER, path="queue/p", first_line=2)
    # another text, or the same text starting on another line, is parsed
    again.load(loader, HEADER + "tier: x\n", path="queue/p", first_line=2)
    again.load(loader, HEADER, path="queue/p", first_line=3)
    assert loader.calls == 3


def test_values_json_would_change_are_never_cached(tmp_path: Path) -> None:
    path = tmp_path / "headers.json"
    text = "id: P1\nlast_update: 2026-05-05\n"
    cache, loader = HeaderCache(path), Counting()
    data, _ = cache.load(loader, text, path="q", first_line=2)
    cache.save()
    data2, _ = HeaderCache(path).load(loader, text, path="q", first_line=2)
    assert data["last_update"] == data2["last_update"] == datetime.date(2026, 5, 5)
    assert loader.calls == 2


def test_an_unreadable_cache_is_ignored_and_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "headers.json"
    for junk in (b"\xff\x00not json", b"[1, 2]", json.dumps({"2:x": 5}).encode(), b"[" * 100_000 + b"]" * 100_000):
        path.write_bytes(junk)
        cache, loader = HeaderCache(path), Counting()
        assert cache.load(loader, HEADER, path="q", first_line=2) == load_mapping(HEADER, path="q", first_line=2)
        cache.save()
        assert isinstance(json.loads(path.read_text()), dict)
    bad_entry = {k: "[1, 2" for k in json.loads(path.read_text())}
    path.write_text(json.dumps(bad_entry))
    loader = Counting()
    assert HeaderCache(path).load(loader, HEADER, path="q", first_line=2)[0]["id"] == "P1"
    assert loader.calls == 1


def test_store_reads_the_same_patches_with_a_warm_cache(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    util = BASE_FILES["vllm/util.py"]
    q.write_patch("A1-x.patch", unified("vllm/util.py", util, util.replace("+ 3\n", "+ 4\n")),
                  extra="requires: []\nnotes: |\n  two\n  lines\n")
    q.set_series("A1-x.patch")
    cold = Store(q.root).read_all()
    assert (q.root / ".gqueue" / "cache" / "headers.json").is_file()
    warm = Store(q.root).read_all()
    assert cold == warm
    assert warm[1][0].meta.line_of("notes") == cold[1][0].meta.line_of("notes") == 5


def test_an_entry_saved_before_the_loader_refused_duplicate_keys_does_not_answer(tmp_path: Path) -> None:
    text = "id: P1\ntitle: one\ntitle: two\n"
    old_key = "2:" + hashlib.sha1(text.encode()).hexdigest()  # the key an older gqueue wrote
    path = tmp_path / "headers.json"
    path.write_text(json.dumps({old_key: json.dumps([{"id": "P1", "title": "two"}, {"id": 2, "title": 3}])}))
    with pytest.raises(FormatError, match="duplicate key 'title'"):
        HeaderCache(path).load(load_mapping, text, path="queue/p", first_line=2)


def test_an_odd_entry_is_parsed_again(tmp_path: Path) -> None:
    text = "id: P1\ntitle: one\n"
    key = f"{LOADER_VERSION}:2:" + hashlib.sha1(text.encode()).hexdigest()
    for odd in ("5", "null", "[1, 2, 3]", "{", "[" * 100_000 + "]" * 100_000):  # the last: nested past Python's limit
        path = tmp_path / "headers.json"
        path.write_text(json.dumps({key: odd}))
        assert HeaderCache(path).load(load_mapping, text, path="queue/p", first_line=2) == load_mapping(
            text, path="queue/p", first_line=2)


def test_a_patch_gqueue_writes_is_read_back_without_parsing_its_header(tmp_path: Path, monkeypatch) -> None:
    """import, refresh and header edits write patch files whose headers they have just parsed:
    the next command reads them from the cache (a fresh import of 300 mails cost push ~40 ms)."""
    import gqueue.model.patch as patch_module
    from gqueue.model.patch import new_patch

    q = make_queue(tmp_path)
    util = BASE_FILES["vllm/util.py"]
    body = unified("vllm/util.py", util, util.replace("+ 3\n", "+ 4\n")).encode()
    one = new_patch("A1-x.patch", {"id": "A1", "title": "x", "headers": {"Date": "Fri, 17 Nov 2023"}}, body)
    two = new_patch("A2-y.patch", {"id": "A2", "title": "y", "requires": ["A1"]}, body)
    writer = Store(q.root)
    writer.write_patch(one)
    writer.write_patches([two])
    writer.headers.save()
    loader = Counting()
    monkeypatch.setattr(patch_module, "load_mapping", loader)
    reader = Store(q.root)
    assert reader.read_patch("A1-x.patch") == one
    assert reader.read_patch("A2-y.patch") == two
    assert loader.calls == 0
