"""One test suite for both storage adapters."""

from __future__ import annotations

from pathlib import Path

import pytest

from stream_dedupe.errors import StateError
from stream_dedupe.storage.base import KVStore
from stream_dedupe.storage.rocks import KEEP_LOG_FILES, RocksStore
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
    with pytest.raises(StateError, match="already open in this process"):
        RocksStore(tmp_path / "s")
    first.close()
    again = RocksStore(tmp_path / "s")
    assert again.get_many("docs", [b"a"]) == [b"1"]
    assert again.disk_bytes() > 0
    again.close()


def test_rocks_writes_keys_in_bytewise_order_and_stores_every_one(tmp_path: Path) -> None:
    import random

    from stream_dedupe.storage.rocks import in_key_order

    rng = random.Random(5)
    # 8-byte keys (the numpy path), including the extremes of the big-endian order
    eight = [rng.randbytes(8) for _ in range(2000)] + [b"\x00" * 8, b"\xff" * 8, b"\x80" + b"\x00" * 7]
    assert list(in_key_order(dict.fromkeys(eight))) == sorted(eight)
    # keys of other lengths (sorted's path): a prefix sorts first, as RocksDB's comparator has it
    mixed = [b"ab", b"a", b"abc", b"\x00", b"b" * 9, *eight[:300]]
    assert list(in_key_order(dict.fromkeys(mixed))) == sorted(mixed)

    store = RocksStore(tmp_path / "state")
    ops: dict[bytes, bytes | None] = {key: key[::-1] for key in eight}
    ops[eight[0]] = None  # a delete among the puts
    store.write({"boilerplate": {eight[0]: b"before"}})
    store.write({"boilerplate": ops, "docs": {b"b": b"2", b"a": b"1"}})
    stored = dict(store.items("boilerplate"))
    assert stored == {key: key[::-1] for key in eight[1:]}
    assert list(stored) == sorted(eight[1:])
    assert dict(store.items("docs")) == {b"a": b"1", b"b": b"2"}
    store.close()


_UNLOGGED_RUN = """
import os, sys, time
from stream_dedupe.storage.rocks import RocksStore

path, big = sys.argv[1], int(sys.argv[2])
store = RocksStore(path, wal=False)
store.write({"docs": {b"closed": b"1"}, "documents": {b"closed": b"1"}})
store.close()  # persisted by the close
store = RocksStore(path, wal=False)
value = os.urandom(1 << 20)
for i in range(big):  # 1 MB a batch: the 32 MB memtable of `documents` fills up and is flushed
    store.write({"docs": {b"k%03d" % i: b"1"}, "documents": {b"k%03d" % i: value}})
deadline = time.monotonic() + 60
while big and store.namespace_bytes()["documents"] < (16 << 20) and time.monotonic() < deadline:
    time.sleep(0.05)  # the flush runs in the background: wait until its table file is in place
os._exit(0)  # a kill: no close
"""


@pytest.mark.parametrize("big", [0, 40])
def test_rocks_without_the_log_keeps_every_namespace_as_of_the_last_flush(tmp_path: Path, big: int) -> None:
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", _UNLOGGED_RUN, str(tmp_path / "s"), str(big)], check=True, timeout=120)
    store = RocksStore(tmp_path / "s")
    docs = [key for key, _ in store.items("docs")]
    documents = [key for key, _ in store.items("documents")]
    store.close()
    assert docs[0] == b"closed"  # written before a close
    if not big:
        assert docs == documents == [b"closed"]  # written after it, then killed: not in the log, lost
        return
    # a memtable filled up and was flushed with every other namespace's, at one batch boundary:
    # both hold the same batches, some but not all of the 40 (the later ones were not flushed)
    assert docs == documents
    assert 1 < len(docs) < big + 1
    assert docs[1:] == [b"k%03d" % i for i in range(len(docs) - 1)]


_FAILED_FLUSH = """
import os, resource, signal, sys
from stream_dedupe.errors import StateError
from stream_dedupe.storage.rocks import RocksStore

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))  # no file over 1 MB: the final flush fails
store = RocksStore(sys.argv[1], wal=False)
for i in range(4):
    store.write({"documents": {b"k%d" % i: os.urandom(500_000)}})
try:
    store.close()
except StateError as exc:
    print(exc)
"""


def test_rocks_without_the_log_says_so_when_its_final_flush_fails(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _FAILED_FLUSH, str(tmp_path / "s")], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    # without the log nothing else would tell that the last batches never reached the disk
    assert "writing the state" in out.stdout and "run the same command again" in out.stdout, out.stdout


def test_rocks_merges_the_originals_less_often_than_the_rest(tmp_path: Path) -> None:
    from stream_dedupe.storage.rocks import DOCUMENTS_COMPACTION_TRIGGER

    RocksStore(tmp_path / "s").close()
    options = max((tmp_path / "s").glob("OPTIONS-*")).read_text()  # what RocksDB runs with, as it wrote it
    sections = {part.split("]", 1)[0]: part for part in options.split("\n[")}
    assert f"level0_file_num_compaction_trigger={DOCUMENTS_COMPACTION_TRIGGER}" in sections['CFOptions "documents"']
    assert "level0_file_num_compaction_trigger=4" in sections['CFOptions "sets"']


def test_opening_a_state_again_and_again_keeps_a_few_rocksdb_logs(tmp_path: Path) -> None:
    """RocksDB starts a new info LOG at every open and kept 1,000 old ones (~150 KB each here)."""
    for _ in range(KEEP_LOG_FILES + 4):
        RocksStore(tmp_path / "s").close()
    old = [f.name for f in (tmp_path / "s").glob("LOG.old*")]
    assert 0 < len(old) < KEEP_LOG_FILES
