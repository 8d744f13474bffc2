from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from stream_dedupe.storage.base import KVStore
from stream_dedupe.storage.memory import MemoryStore
from stream_dedupe.storage.rocks import RocksStore

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
NEWSGROUPS = SHARED_DATA / "20newsgroups_bydate.jsonl.gz"
CLOUGH = SHARED_DATA / "clough_stevenson_plagiarism.jsonl"


def shared_file(path: Path) -> Path:
    # The shared corpora sit beside the repository in development and in CI; fail loudly if not.
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: tests need ../shared/data beside the repository")
    return path


@pytest.fixture(scope="session")
def newsgroups() -> list[dict[str, object]]:
    with gzip.open(shared_file(NEWSGROUPS)) as fh:
        return [orjson.loads(line) for line in fh]


@pytest.fixture(params=["memory", "rocksdb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KVStore]:
    """The same tests run against both storage adapters."""
    if request.param == "memory":
        yield MemoryStore()
    else:
        rocks = RocksStore(tmp_path / "state")
        yield rocks
        rocks.close()
