"""A release's sdist is looked up on the index once; later lookups read the cache's record."""

from __future__ import annotations

from pathlib import Path

import pytest

from gqueue.upstream import index as upstream_index
from test_bisect_pins import VERSIONS, Index, index  # noqa: F401 - the local index fixture


def test_a_second_lookup_asks_no_index(index: Index) -> None:  # noqa: F811
    first = upstream_index.find_sdist("vllm", VERSIONS[1])
    del index.routes["/simple/vllm/"]  # the index is gone: only the record can answer
    again = upstream_index.find_sdist("vllm", VERSIONS[1])
    assert again == first and len(again.sha256) == 64
    with pytest.raises(Exception, match="cannot read the package index"):
        upstream_index.find_sdist("vllm", VERSIONS[2])  # another release is not recorded


def test_the_record_is_per_index(index: Index, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    upstream_index.find_sdist("vllm", VERSIONS[1])
    monkeypatch.setenv("GQUEUE_INDEX_URL", index.url + "/other")  # another index: asked itself
    with pytest.raises(Exception, match="cannot read the package index"):
        upstream_index.find_sdist("vllm", VERSIONS[1])


def test_a_broken_record_is_ignored(index: Index) -> None:  # noqa: F811
    found = upstream_index.find_sdist("vllm", VERSIONS[1])
    records = list(Path(upstream_index._memo_path("vllm", VERSIONS[1])).parent.glob("*.json"))
    assert len(records) == 1
    records[0].write_text("{not json")
    assert upstream_index.find_sdist("vllm", VERSIONS[1]) == found  # asked the index again
