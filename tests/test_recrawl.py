"""Unchanged re-crawls recognized by their fingerprint decide exactly as when their texts are read."""

from __future__ import annotations

import random
from collections.abc import Sequence

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream_dedupe.config import BoilerplateConfig, DedupeParams
from stream_dedupe.core import boilerplate as boilerplate_module
from stream_dedupe.core.batch import BatchPreparer
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.records import Document, Record, parse_document
from stream_dedupe.core.recrawl import text_fingerprint
from stream_dedupe.core.signer import Signer
from stream_dedupe.storage.base import NAMESPACES
from stream_dedupe.storage.docrecord import DocRecord
from stream_dedupe.storage.memory import MemoryStore

FOOTER = "\n".join(" ".join(f"legal{i}x{j}" for j in range(8)) for i in range(3))
#: Counters that count work, not outcomes: a recognized re-crawl is neither stripped nor signed.
WORK_COUNTERS = {"boilerplate_lines_stripped", "recognized_unchanged"}


def record(doc_id: str, text: str, **extra: object) -> Record:
    return parse_document(orjson.dumps({"id": doc_id, "text": text, **extra}), 1 << 20)


def words(rng: random.Random, n: int = 40) -> str:
    return " ".join(f"w{rng.randrange(600)}" for _ in range(n))


def test_the_fingerprint_is_of_text_title_and_source_only() -> None:
    base = record("a", "some words here", title="T", source="s", updated_at="2026-01-01T00:00:00Z")
    assert isinstance(base, Document)
    same = record("b", "some words here", title="T", source="s", updated_at="2026-02-02T00:00:00Z", extra=1)
    assert text_fingerprint(same) == text_fingerprint(base)  # type: ignore[arg-type]
    others = [
        record("a", "some words here!", title="T", source="s"),
        record("a", "some words here", title="U", source="s"),
        record("a", "some words here", source="s"),  # no title
        record("a", "some words here", title="", source="s"),  # an empty title is not no title
        record("a", "some words here", title="T", source="t"),
        record("a", "some words here", title="T"),  # no source
        record("a", "some words here", title="Ts", source=""),  # the fields do not run together
    ]
    prints = {text_fingerprint(d) for d in others}  # type: ignore[arg-type]
    assert len(prints) == len(others) and text_fingerprint(base) not in prints
    assert len(text_fingerprint(base)) == 8
    # stored in records on disk: a change of definition must be deliberate
    assert text_fingerprint(base).hex() == _PINNED


_PINNED = "5d8268a0dc018985"


@pytest.mark.parametrize("covered", [None, ("rep", 0.875)])
def test_a_version_4_record_reads_back_and_as_its_version_3_record(covered: tuple[str, float] | None) -> None:
    rep, similarity = covered or (None, None)
    full = DocRecord(b"\x01" * 16, 120, 5, 20, True, "src", rep, similarity, "abcd", b"\x02" * 8, 7)
    raw = full.encode()
    assert orjson.loads(raw)[0] == 4
    assert DocRecord.decode(raw) == full
    assert DocRecord.covered_by_of(raw) == rep and DocRecord.indexed_of(raw)
    # an older release reads the version 3 record inside it (it only knows fields 0-9)
    assert _decode_as_version_3(raw) == DocRecord(b"\x01" * 16, 120, 5, 20, True, "src", rep, similarity, "abcd")
    bare = DocRecord(b"\x01" * 16, 120, 5, 20, True, "src", rep, similarity, "abcd")
    assert orjson.loads(bare.encode())[0] == 3 and DocRecord.decode(bare.encode()) == bare
    if rep is None:
        encoded = DocRecord.encode_representative(b"\x01" * 16, 120, 5, 20, True, "src", "abcd", b"\x02" * 8, 7)
        assert encoded == raw


def test_a_version_5_record_carries_the_seen_time_and_reads_as_its_version_4_record() -> None:
    full = DocRecord(b"\x01" * 16, 120, 5, 20, True, "src", None, None, "abcd", b"\x02" * 8, 7, 99)
    raw = full.encode()
    assert orjson.loads(raw)[0] == 5 and DocRecord.decode(raw) == full and full.age_from_us == 99
    # an older release's decoder (version 4: fields 0-11) reads the same record without the seen time
    fields = orjson.loads(raw)
    assert DocRecord.decode(orjson.dumps([4, *fields[1:12]])) == DocRecord(
        b"\x01" * 16, 120, 5, 20, True, "src", None, None, "abcd", b"\x02" * 8, 7
    )
    assert _decode_as_version_3(raw) == DocRecord(b"\x01" * 16, 120, 5, 20, True, "src", None, None, "abcd")
    # no fingerprint: no seen time stored (a version 3 record)
    assert orjson.loads(DocRecord(b"\x01" * 16, 120, 5, 20, True, seen_at_us=99).encode())[0] == 3
    assert DocRecord(b"\x01" * 16, 120, None, 20, True, seen_at_us=7).age_from_us == 7
    assert DocRecord(b"\x01" * 16, 120, 9, 20, True, seen_at_us=7).age_from_us == 9


def _decode_as_version_3(raw: bytes) -> DocRecord:
    """What the decoder of the release before version 4 made of a record (copied from it)."""
    fields = orjson.loads(raw)
    covered_by, similarity = (fields[8], fields[9]) if len(fields) > 9 else (None, None)
    return DocRecord(
        bytes.fromhex(fields[1]),
        fields[2],
        fields[3],
        fields[4],
        fields[5],
        fields[6] if fields[0] >= 2 else None,
        covered_by,
        similarity,
        fields[7] if fields[0] >= 3 else None,
    )


def _learning(min_docs: int = 3, **extra: object) -> DedupeParams:
    return DedupeParams(min_tokens=3, boilerplate=BoilerplateConfig(learn=True, min_docs=min_docs), **extra)  # type: ignore[arg-type]


def _run(engine: DedupeEngine, records: Sequence[Record], batch: int) -> list[bytes]:
    out = []
    for start in range(0, len(records), batch):
        out += [orjson.dumps(e) for e in engine.process(records[start : start + batch])]
        engine.commit()
    return out


def test_an_unchanged_recrawl_is_neither_stripped_nor_signed(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(5)
    pages = [record(f"p{i}", f"{words(rng)}\n{FOOTER}", source="portal", title=f"Page {i}") for i in range(12)]
    engine = DedupeEngine(_learning(), MemoryStore())
    _run(engine, pages, 5)
    assert engine.boilerplate is not None and engine.boilerplate.epoch("portal") == 3  # the footer's lines
    signed: list[str] = []
    lines: list[str] = []
    real_sign, real_lines = Signer.sign, boilerplate_module.text_lines
    monkeypatch.setattr(Signer, "sign", lambda self, texts, *a: signed.extend(texts) or real_sign(self, texts, *a))
    monkeypatch.setattr(
        boilerplate_module, "text_lines", lambda texts, *a: lines.extend(texts) or real_lines(texts, *a)
    )
    again = [orjson.loads(e) for e in _run(engine, pages, 5)]
    # every text was counted when first decided (its record is current whatever is learned since;
    # the carriers signed again when the footer was learned kept that): none is read again
    assert [e["event"] for e in again] == ["unchanged"] * len(pages)
    assert signed == [] and lines == []  # no text read at all
    assert engine.counters["recognized_unchanged"] == len(pages)
    third = [orjson.loads(e) for e in _run(engine, pages, 5)]
    assert [e["event"] for e in third] == ["unchanged"] * len(pages)
    assert signed == [] and lines == []
    assert engine.counters["recognized_unchanged"] == 2 * len(pages)
    # a changed one is read, and only it
    changed = record("p3", f"{words(rng)}\n{FOOTER}", source="portal", title="Page 3")
    _run(engine, [changed, *pages[4:6]], 5)
    assert len(signed) == 1 and len(lines) == 1


def test_a_line_learned_since_makes_a_stored_text_strip_differently() -> None:
    """The case a fingerprint alone gets wrong: the record's text holds a line learned after it was decided.

    ``x`` gains a line in a re-crawl (a re-crawl is not counted, so it never carries the line);
    other pages then make the line boilerplate. The same text sent again now strips to what
    ``x`` was at first: not ``unchanged``.
    """
    rng = random.Random(8)
    line = "shared notice " + " ".join(f"n{j}" for j in range(8))
    first = words(rng)
    stream: list[Record] = [
        record("x", first, source="portal"),
        record("x", f"{first}\n{line}", source="portal"),
        *[record(f"o{i}", f"{words(rng)}\n{line}", source="portal") for i in range(3)],
        record("y", words(rng), source="wiki"),
        record("x", f"{first}\n{line}", source="portal"),
    ]
    outcomes = {}
    for recognize in (True, False):
        engine = DedupeEngine(_learning(), MemoryStore())
        engine.preparer.recognize = recognize
        events = [orjson.loads(e) for e in _run(engine, stream, 1)]
        outcomes[recognize] = [(e["event"], e["id"]) for e in events if e["event"] in ("new", "unchanged")]
    assert outcomes[True] == outcomes[False]
    assert outcomes[True][-1] == ("new", "x")  # its stored key had the line; the line is stripped now


def _stream(seed: int) -> list[Record]:
    """Pages of three sources (two with footers learned as they come), re-crawled unchanged,
    changed, retitled, moved to another source, twice in a row, deleted, and copied."""
    rng = random.Random(seed)
    texts: dict[str, tuple[str, str | None, str | None]] = {}
    out: list[Record] = []
    for i in range(160):
        roll = rng.random()
        known = sorted(texts)
        if known and roll < 0.45:
            doc_id = rng.choice(known)
            body, title, source = texts[doc_id]
            change = rng.random()
            if change < 0.12:
                body = words(rng)
            elif change < 0.18:
                title = f"T{rng.randrange(3)}"
            elif change < 0.22:
                source = rng.choice(["portal", "wiki", None])
            elif change < 0.26:
                out.append(parse_document(orjson.dumps({"id": doc_id, "deleted": True}), 1 << 20))
                if rng.random() < 0.5:  # gone for good; else sent again right away, unchanged
                    del texts[doc_id]
                    continue
        else:
            doc_id = f"d{i}"
            base = texts[rng.choice(known)][0] if known and roll < 0.6 else words(rng)
            body = base if rng.random() < 0.5 else base + f" w{rng.randrange(600)}"
            title = f"T{rng.randrange(3)}" if rng.random() < 0.5 else None
            source = rng.choice(["portal", "wiki", "notes", None])
        texts[doc_id] = (body, title, source)
        footer = {"portal": FOOTER, "wiki": "edit this page " + " ".join(f"e{j}" for j in range(8))}.get(source or "")
        full = f"{body}\n{footer}" if footer and rng.random() < 0.8 else body
        fields = {"id": doc_id, "text": full, "title": title, "source": source}
        out.append(parse_document(orjson.dumps({k: v for k, v in fields.items() if v is not None}), 1 << 20))
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.lists(st.integers(1, 40), min_size=1, max_size=4), st.booleans())
def test_recognition_decides_and_stores_as_reading_every_text(seed: int, batches: list[int], title_guard: bool) -> None:
    stream = _stream(seed) * 2  # the second half: every page again, most of them unchanged
    results = []
    for recognize in (True, False):
        engine = DedupeEngine(_learning(min_docs=4, title_guard=title_guard), MemoryStore())
        engine.preparer.recognize = recognize
        events: list[bytes] = []
        start, turn = 0, 0
        while start < len(stream):
            size = batches[turn % len(batches)]
            events += _run(engine, stream[start : start + size], size)
            start, turn = start + size, turn + 1
        state = {ns: list(engine.store.items(ns)) for ns in NAMESPACES}
        counters = {k: v for k, v in engine.counters.items() if k not in WORK_COUNTERS}
        results.append((events, state, counters, engine.counters["recognized_unchanged"]))
    assert results[0][:3] == results[1][:3]
    assert results[1][3] == 0


def test_the_stream_exercises_recognition() -> None:
    """The property above is not vacuous: re-crawls are recognized, and some are not (learning, changes)."""
    stream = _stream(3) * 2
    engine = DedupeEngine(_learning(min_docs=4), MemoryStore())
    events = [orjson.loads(e) for e in _run(engine, stream, 16)]
    unchanged = sum(1 for e in events if e["event"] == "unchanged")
    assert 0 < engine.counters["recognized_unchanged"] < unchanged
    assert BatchPreparer.recognize


def test_records_of_an_older_version_gain_their_fingerprint_on_the_next_recrawl() -> None:
    rng = random.Random(11)
    pages = [record(f"p{i}", words(rng), source="wiki") for i in range(8)]
    store = MemoryStore()
    engine = DedupeEngine(_learning(), store)
    _run(engine, pages, 4)
    # the records as the release before version 4 wrote them: no fingerprint, no epoch
    older = {key: DocRecord.decode(raw) for key, raw in store.items("docs")}
    store.write({"docs": {key: DocRecord(*[getattr(r, f) for f in _V3_FIELDS]).encode() for key, r in older.items()}})
    assert all(orjson.loads(raw)[0] == 3 for _, raw in store.items("docs"))
    engine = DedupeEngine(_learning(), store)  # reopened
    again = [orjson.loads(e) for e in _run(engine, pages, 4)]
    assert [e["event"] for e in again] == ["unchanged"] * len(pages)
    assert engine.counters["recognized_unchanged"] == 0  # read in full, once
    assert {key: DocRecord.decode(raw).fingerprint for key, raw in store.items("docs")} == {
        p.doc_id.encode(): text_fingerprint(p)  # type: ignore[union-attr]
        for p in pages
    }
    _run(engine, pages, 4)
    assert engine.counters["recognized_unchanged"] == len(pages)


_V3_FIELDS = ("content_hash", "length", "updated_at_us", "tokens", "indexed", "source", "covered_by")
_V3_FIELDS += ("covered_similarity", "title_key")


@pytest.mark.parametrize("before", ["deleted", "changed"])
def test_a_page_another_record_of_the_batch_names_is_read_in_full(before: str) -> None:
    """Deleted (or changed) and sent again in one batch, its stored record is not the one it meets.

    Both arms of the property test share this rule (:func:`named_once`), so it is checked here
    against the state itself: the page sent again is indexed with its own signature.
    """
    from stream_dedupe.core.recrawl import named_once

    rng = random.Random(2)
    text = words(rng)
    engine = DedupeEngine(_learning(), MemoryStore())
    _run(engine, [record("x", text)], 1)
    first = record("x", None, deleted=True) if before == "deleted" else record("x", words(rng))
    again = record("x", text)
    assert named_once([again], ()) == {"x"} and named_once([again], {"x"}) == set()  # a deletion names it
    assert named_once([first, again], ()) == set() or before == "deleted"  # a second version names it
    events = [orjson.loads(e) for e in _run(engine, [first, again], 2)]
    assert any(e["event"] == "new" and e["id"] == "x" and e["updated"] == (before == "changed") for e in events)
    assert engine.counters["recognized_unchanged"] == 0
    assert dict(engine.store.items("sigs")).keys() == {b"x"}  # signed, indexed: not prepared from the old record


def test_a_counted_record_is_read_once_by_the_release_before() -> None:
    """A first-time text's record has the COUNTED epoch; the release before compared epochs strictly."""
    from stream_dedupe.storage.docrecord import COUNTED, STALE

    rng = random.Random(4)
    pages = [record(f"p{i}", f"{words(rng)}\n{FOOTER}", source="portal") for i in range(6)]
    engine = DedupeEngine(_learning(), MemoryStore())
    _run(engine, pages, 3)
    stored = [DocRecord.decode(raw) for _, raw in engine.store.items("docs")]
    assert {r.epoch for r in stored} == {COUNTED}  # carriers signed again kept it too
    assert orjson.loads(stored[0].encode())[11] == -1
    learned = engine.preparer.epoch("portal")
    assert learned == 3
    # the recognition of the release before: ``prior.epoch == epoch``, and an epoch is never negative
    assert all(r.epoch != e for r in stored for e in range(learned + 1))
    assert STALE < 0 and STALE != COUNTED
    # a changed re-crawl is not counted: its record keeps the epoch it was stripped at
    _run(engine, [record("p0", f"{words(rng)}\n{FOOTER}", source="portal")], 1)
    assert DocRecord.decode(dict(engine.store.items("docs"))[b"p0"]).epoch == learned


@pytest.mark.parametrize("kind", ["id-from-key", "long-id", "large-metadata"])
def test_a_carrier_the_worker_accepted_is_signed_again_and_recognized_alike(kind: str) -> None:
    """Found by review: a carrier whose stored JSON the default bounds reject was never signed again.

    The worker accepts a document whose id is its Kafka key (none in the JSON), and wider bounds
    than the defaults (``--max-id-bytes``, metadata limits). Learning must be retroactive for it
    too, and recognition must decide its re-crawl as reading its text does.
    """
    from stream_dedupe.core.records import ParseLimits, parse_keyed

    rng = random.Random(1)
    line = "shared notice " + " ".join(f"n{j}" for j in range(8))
    fields: dict[str, object] = {"text": f"{words(rng)}\n{line}", "source": "portal"}
    limits = ParseLimits(max_id_bytes=2048, max_metadata_bytes=1 << 20)
    key = b"x"
    if kind == "long-id":
        key = b"x" * 600
        fields["id"] = key.decode()
    elif kind == "large-metadata":
        fields["id"] = "x"
        fields["metadata"] = {"blob": "m" * 70_000}
    carrier = parse_keyed(key, orjson.dumps(fields), limits)
    assert isinstance(carrier, Document)
    others = [record(f"o{i}", f"{words(rng)}\n{line}", source="portal") for i in range(2)]
    results = []
    for recognize in (True, False):
        engine = DedupeEngine(_learning(min_docs=3), MemoryStore())
        engine.preparer.recognize = recognize
        events = [orjson.loads(e) for batch in ([carrier], others, [carrier]) for e in _run(engine, batch, len(batch))]
        results.append((events, {ns: list(engine.store.items(ns)) for ns in NAMESPACES}))
        assert engine.counters["resigned"] == 3  # every carrier of the line, this one too
        assert events[-1]["event"] == "unchanged" and events[-1]["id"] == carrier.doc_id
    assert results[0] == results[1]


def test_a_carrier_left_without_words_is_read_in_full_at_its_next_recrawl() -> None:
    """A carrier that cannot be signed again (a strip pattern takes the rest) keeps its version, marked STALE."""
    from stream_dedupe.config import NormalizationConfig
    from stream_dedupe.storage.docrecord import STALE

    rng = random.Random(3)
    line = "shared notice " + " ".join(f"n{j}" for j in range(6))
    params = DedupeParams(
        min_tokens=3,
        normalization=NormalizationConfig(strip_patterns=(r"\bzz\w*",)),
        boilerplate=BoilerplateConfig(learn=True, min_docs=2, min_tokens=3),
    )
    x = record("x", f"zza zzb zzc\n{line}", source="s")
    other = record("o1", f"{words(rng)}\n{line}", source="s")
    results = []
    for recognize in (True, False):
        engine = DedupeEngine(params, MemoryStore())
        engine.preparer.recognize = recognize
        events = [e for batch in ([x], [other], [x], [x]) for e in _run(engine, batch, len(batch))]
        results.append((events, {ns: list(engine.store.items(ns)) for ns in NAMESPACES}))
    assert results[0] == results[1]
    engine = DedupeEngine(params, MemoryStore())
    _run(engine, [x], 1)
    _run(engine, [other], 1)  # learns the line: x is its carrier, and nothing would be left of it
    assert DocRecord.decode(dict(engine.store.items("docs"))[b"x"]).epoch == STALE
    (event,) = [orjson.loads(e) for e in _run(engine, [x], 1)]
    # read in full: without the learned line its text is empty, and it leaves the index
    assert event["event"] == "invalid" and event["reason"] == "empty-text"
    assert engine.counters["recognized_unchanged"] == 0
