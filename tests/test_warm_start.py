"""The warm start: indexes saved when a run ends, loaded instead of rebuilt, only for the very same state."""

from __future__ import annotations

import logging
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from stream_dedupe import warm_file
from stream_dedupe.config import BoilerplateConfig, DedupeParams, RuntimeLimits
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.storage.rocks import RocksStore

from .helpers import corpus, doc, edit

PARAMS = DedupeParams(boilerplate=BoilerplateConfig(min_docs=4))
FOOTER = "\nthis page is maintained by the platform team of the portal\n"


def _records(seed: int) -> list[Any]:
    """Families of near-duplicates, every page with the same footer (so a line is learned)."""
    return [doc(doc_id, body + FOOTER, source="wiki") for doc_id, body in corpus(seed, families=40)]


def _run(engine: DedupeEngine, records: list[Any]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for at in range(0, len(records), 16):
        events.extend(engine.process(records[at : at + 16]))
        engine.commit()
    return events


def _later_copies(seed: int) -> list[Any]:
    """Near-copies of every other page of ``_records(seed)``, arriving later (they need its index)."""
    rng = random.Random(seed)
    return [doc(f"{i}-again", edit(rng, body, 1) + FOOTER, source="wiki") for i, body in corpus(seed, families=40)[::2]]


def test_a_warm_start_decides_as_the_engine_that_never_stopped(tmp_path: Path) -> None:
    first, second = _records(1), _later_copies(1) + _records(2)
    one = DedupeEngine(PARAMS, RocksStore(tmp_path / "one"))
    _run(one, first)
    want = _run(one, second)

    store = RocksStore(tmp_path / "warm")
    saved = DedupeEngine(PARAMS, store)
    _run(saved, first)
    arrays = saved.warm_arrays()
    assert arrays is not None
    store.close()
    shutil.copytree(tmp_path / "warm", tmp_path / "cold")

    store = RocksStore(tmp_path / "warm")
    warm = DedupeEngine(PARAMS, store, None, arrays)
    cold = DedupeEngine(PARAMS, RocksStore(tmp_path / "cold"))
    assert warm.warm_started and not cold.warm_started
    assert warm.boilerplate is not None and cold.boilerplate is not None
    assert warm.boilerplate.learned == cold.boilerplate.learned != set()
    assert warm.boilerplate.learned_by_source == cold.boilerplate.learned_by_source != {}  # the epochs of re-crawls
    assert len(warm.lsh) >= len(cold.lsh) > 0  # the live tables keep the ordinals of documents re-signed
    assert sum(e["event"] == "duplicate-of" for e in want) >= 40, "the later pages must need the saved index"
    assert _run(warm, second) == want
    assert _run(cold, second) == want  # no bucket is full here: the rebuild decides alike


def test_arrays_saved_with_other_settings_are_not_used(tmp_path: Path) -> None:
    store = RocksStore(tmp_path / "s")
    engine = DedupeEngine(PARAMS, store)
    _run(engine, _records(3))
    arrays = engine.warm_arrays()
    assert arrays is not None
    other_cap = DedupeEngine(PARAMS, store, RuntimeLimits(max_bucket_size=7), arrays)
    assert not other_cap.warm_started
    broken = {**arrays, "lsh.id_chars": arrays["lsh.id_chars"][:-1]}
    assert not DedupeEngine(PARAMS, store, None, broken).warm_started
    assert DedupeEngine(PARAMS, store, None, arrays).warm_started


def test_the_file_is_used_only_while_nothing_was_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(warm_file, "MIN_DOCUMENTS", 1)
    store = RocksStore(tmp_path / "s")
    engine = DedupeEngine(PARAMS, store)
    _run(engine, _records(4))
    assert warm_file.save(store, engine)
    assert warm_file.load(store) is not None
    store.close()
    store = RocksStore(tmp_path / "s")
    assert warm_file.load(store) is not None, "reopening a state is not a write"
    engine = DedupeEngine(PARAMS, store, None, warm_file.load(store))
    assert engine.warm_started
    _run(engine, [doc("late", "a page that arrives after the file was saved " * 5)])
    assert warm_file.load(store) is None, "a write since the save: the file is stale"
    assert warm_file.save(store, engine) and warm_file.load(store) is not None
    (tmp_path / "s" / warm_file.FILE_NAME).write_bytes(b"not a zip file")
    with caplog.at_level(logging.WARNING, logger="stream_dedupe.warm_file"):
        assert warm_file.load(store) is None
    assert "ignoring the warm-start file" in caplog.text


def test_dedupe_saves_a_big_state_and_the_next_run_decides_as_a_rebuild(tmp_path: Path) -> None:
    rng = random.Random(5)
    vocab = [f"w{i}" for i in range(4000)]
    bodies = [" ".join(rng.choice(vocab) for _ in range(40)) for _ in range(warm_file.MIN_DOCUMENTS)]
    first = tmp_path / "first.jsonl"
    first.write_bytes(b"".join(orjson.dumps({"id": f"d{i}", "text": b}) + b"\n" for i, b in enumerate(bodies)))
    second = tmp_path / "second.jsonl"
    copies = [{"id": f"c{i}", "text": bodies[i * 7] + " edited"} for i in range(300)]
    second.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in copies))
    cli = [sys.executable, "-m", "stream_dedupe", "dedupe", "--no-progress"]
    subprocess.run([*cli, str(first), "--state", str(tmp_path / "warm")], check=True, capture_output=True)
    assert (tmp_path / "warm" / warm_file.FILE_NAME).is_file()
    shutil.copytree(tmp_path / "warm", tmp_path / "cold")
    (tmp_path / "cold" / warm_file.FILE_NAME).unlink()
    for name in ("warm", "cold"):
        args = [str(second), "--state", str(tmp_path / name), "--events", str(tmp_path / f"{name}.jsonl")]
        subprocess.run([*cli, *args], check=True, capture_output=True)
    events = (tmp_path / "warm.jsonl").read_bytes()
    assert events == (tmp_path / "cold.jsonl").read_bytes()
    assert events.count(b'"cluster_size":2') >= 290  # each copy joined its original (longer: it now represents both)
    store = RocksStore(tmp_path / "warm")
    assert warm_file.load(store) is not None, "the second run saved the state it ended with"
    store.close()
    again = subprocess.run(
        [*cli, str(second), "--state", str(tmp_path / "warm"), "--no-warm-start", "--events", "-"],
        check=True,
        capture_output=True,
    )
    assert again.stdout.count(b'"unchanged"') == len(copies)
    assert not (tmp_path / "warm" / warm_file.FILE_NAME).exists(), "--no-warm-start keeps no file"


def test_the_python_api_saves_on_close_and_loads_on_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from stream_dedupe.api import Deduper

    monkeypatch.setattr(warm_file, "MIN_DOCUMENTS", 1)
    pages = [{"id": doc_id, "text": body} for doc_id, body in corpus(6, families=10)]
    with Deduper.open(tmp_path / "s") as deduper:
        deduper.add_many(pages[:20])
    assert (tmp_path / "s" / warm_file.FILE_NAME).is_file()
    with Deduper.open(tmp_path / "s") as deduper:
        assert deduper._engine.warm_started
        deduper.add_many(pages[20:])

        def fail(*_: object) -> None:
            raise OSError("disk full")

        monkeypatch.setattr(deduper._engine, "commit", fail)
        with pytest.raises(OSError):
            deduper.add({"id": "late", "text": "a page whose batch fails to commit " * 4})
    store = RocksStore(tmp_path / "s")
    assert warm_file.load(store) is None, "a failed batch: the indexes in memory were not saved"
    assert not DedupeEngine(DedupeParams(), store, None, warm_file.load(store)).warm_started
