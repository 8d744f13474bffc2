"""One test suite for both storage adapters."""

from __future__ import annotations

from pathlib import Path

import pytest

from stream_dedupe.errors import StateError
from stream_dedupe.storage.base import KVStore
from stream_dedupe.storage.rocks import RocksStore
from stream_dedupe.storage.state import StateView


def test_get_write_delete_items(store: KVStore) -> None:
    store.write({"docs": {b"b": b"2", b"a": b"1"}, "sigs": {b"k": b"v"}})
    assert store.get_many("docs", [b"a", b"missing", b"b"]) == [b"1", None, b"2"]
    assert list(store.items("docs")) == [(b"a", b"1"), (b"b", b"2")]
    store.write({"docs": {b"a": None}})
    assert list(store.items("docs")) == [(b"b", b"2")]
    assert list(store.items("sigs")) == [(b"k", b"v")]  # namespaces are separate
    assert store.get_many("docs", []) == []


def test_overlay_holds_writes_until_commit(store: KVStore) -> None:
    view = StateView(store)
    view.put("docs", b"x", b"1")
    assert view.get("docs", b"x") == b"1"
    assert store.get_many("docs", [b"x"]) == [None]
    view.commit({b"seq": b"7"})
    assert store.get_many("docs", [b"x"]) == [b"1"]
    assert store.get_many("meta", [b"seq"]) == [b"7"]
    view.put("docs", b"y", b"2")
    view.discard()
    assert store.get_many("docs", [b"y"]) == [None]


def test_overlay_dicts_write_as_put_does_and_prefetch_marks_absent_keys(store: KVStore) -> None:
    store.write({"boilerplate": {b"old": b"1", b"held": b"2"}})
    view = StateView(store)
    view.prefetch("boilerplate", [b"old"], absent=[b"new"])
    cache, writes = view.overlay("boilerplate")
    assert cache == {b"old": b"1", b"new": None}  # b"new" is answered without a read
    cache[b"new"] = writes[b"new"] = b"3"
    assert view.get("boilerplate", b"new") == b"3" and view.staged("boilerplate", b"new")
    view.prefetch("boilerplate", [], absent=[b"new"])  # a staged value is kept
    assert view.get("boilerplate", b"new") == b"3"
    view.commit()
    assert store.get_many("boilerplate", [b"new", b"held"]) == [b"3", b"2"]
    for namespace in ("docs", "exact", "edges", "clusters"):
        with pytest.raises(ValueError, match="decoded values"):
            view.overlay(namespace)


def test_rocks_state_survives_reopen_and_is_locked(tmp_path: Path) -> None:
    first = RocksStore(tmp_path / "s")
    first.write({"docs": {b"a": b"1"}})
    with pytest.raises(StateError, match="in use by another"):
        RocksStore(tmp_path / "s")
    first.close()
    again = RocksStore(tmp_path / "s")
    assert again.get_many("docs", [b"a"]) == [b"1"]
    assert again.disk_bytes() > 0
    again.close()
