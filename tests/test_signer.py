"""The sign stage's records: codec, fingerprint, and an engine fed signatures made elsewhere."""

from __future__ import annotations

import random

import numpy as np
import pytest

from stream_dedupe.config import BoilerplateConfig, DedupeParams
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.records import Document
from stream_dedupe.core.signer import Signer, decode_signed, encode_signed, params_fingerprint
from stream_dedupe.exports import iter_clusters
from stream_dedupe.storage.memory import MemoryStore

from .helpers import corpus, doc, edit, text


def documents(seed: int = 3) -> list[Document]:
    rng = random.Random(seed)
    items = corpus(seed, families=25, copies=3)
    items += [("short-1", "too short to sign"), ("short-2", "too short to sign")]
    base = text(rng)
    items += [("exact-a", base), ("exact-b", base.upper()), ("near", edit(rng, base, 2))]
    out = [doc(d, t) for d, t in items]
    assert all(isinstance(d, Document) for d in out)
    return out  # type: ignore[return-value]


@pytest.mark.parametrize("verify", ["estimate", "exact"])
def test_codec_round_trip(verify: str) -> None:
    signer = Signer(DedupeParams(verify=verify))
    docs = documents()
    for record in signer.sign([d.text for d in docs]):
        fingerprint, back = decode_signed(signer.encode(record))
        assert fingerprint == signer.fingerprint
        assert back.same_as(record)
        assert (back.shingle_set is not None) == (verify == "exact" and record.signature is not None)
    short = signer.sign(["too short to sign"])[0]
    assert short.signature is None and decode_signed(signer.encode(short))[1].signature is None


def test_decode_refuses_other_parameters_and_corrupt_bytes() -> None:
    mine, other = Signer(DedupeParams()), Signer(DedupeParams(num_perm=64))
    assert params_fingerprint(DedupeParams()) != params_fingerprint(DedupeParams(num_perm=64))
    assert params_fingerprint(DedupeParams()) != params_fingerprint(DedupeParams(verify="estimate"))
    blob = other.encode(other.sign([text(random.Random(1))])[0])
    assert mine.decode(blob) is None  # signed with 64 permutations: the engine signs it itself
    assert mine.decode(b"\x01garbage") is None
    good = mine.encode(mine.sign([text(random.Random(1))])[0])
    assert mine.decode(good) is not None
    with pytest.raises(ValueError, match="version"):
        decode_signed(b"\x09" + good[1:])
    with pytest.raises(ValueError, match="length"):
        decode_signed(good[:-4])
    # Signatures travel as explicit little-endian uint32, whatever the host's byte order.
    record = Signer(DedupeParams(verify="estimate")).sign([text(random.Random(2))])[0]  # signature last
    assert record.signature is not None and record.shingle_set is None
    tail = encode_signed(record, b"x" * 8)[-4 * len(record.signature) :]
    assert np.frombuffer(tail, dtype="<u4").tolist() == record.signature.tolist()


@pytest.mark.parametrize("verify", ["estimate", "exact"])
def test_engine_with_signatures_from_another_signer_decides_identically(verify: str) -> None:
    params = DedupeParams(verify=verify)
    docs = documents()
    local = DedupeEngine(params, MemoryStore())
    remote = DedupeEngine(params, MemoryStore())
    sign_stage = Signer(params)  # another process, in the worker: records cross Kafka as bytes
    events_local, events_remote = [], []
    for i in range(0, len(docs), 16):
        batch = docs[i : i + 16]
        events_local += local.process(batch)
        local.commit()
        wire = [sign_stage.encode(s) for s in sign_stage.sign([d.text for d in batch])]
        events_remote += remote.process(batch, signed=[remote.signer.decode(b) for b in wire])
        remote.commit()
    assert events_remote == events_local
    assert sum(len(c["covered_by"]) for c in iter_clusters(local.store)) >= 50  # type: ignore[arg-type]
    assert list(iter_clusters(remote.store)) == list(iter_clusters(local.store))
    assert remote.counters["presigned"] == len(docs) and local.counters["presigned"] == 0


def test_with_learned_boilerplate_records_signed_elsewhere_are_reused_only_when_nothing_is_stripped() -> None:
    params = DedupeParams(boilerplate=BoilerplateConfig(True, 2))
    footer = "shared footer line of the portal pages here"
    docs = [doc(d.doc_id, f"{d.text}\n{footer}") for d in documents()[:6]]  # type: ignore[union-attr]
    engine, plain = DedupeEngine(params, MemoryStore()), DedupeEngine(params, MemoryStore())
    assert not engine.signer.stateless
    sign_stage = Signer(params)  # the worker's sign stage signs the unstripped text
    first = engine.process(docs[:2], signed=sign_stage.sign([d.text for d in docs[:2]]))  # type: ignore[union-attr]
    assert engine.counters["presigned"] == 2  # nothing learned yet: the records are right
    rest = engine.process(docs[2:], signed=sign_stage.sign([d.text for d in docs[2:]]))  # type: ignore[union-attr]
    assert engine.counters["presigned"] == 2  # the footer is learned now: stripped documents are signed again
    assert first + rest == plain.process(docs[:2]) + plain.process(docs[2:])  # type: ignore[arg-type]


@pytest.mark.parametrize("verify", ["estimate", "exact"])
def test_texts_known_already_get_no_minhash_and_the_others_the_same_records(verify: str) -> None:
    """``sign(texts, known)``: a known text keeps its hash, length and tokens, and only loses its arrays."""
    signer = Signer(DedupeParams(verify=verify))
    texts = [d.text for d in documents()]
    full = signer.sign(texts)
    skipped = {i for i in range(len(texts)) if i % 3 == 0}
    asked: list[tuple[int, bytes]] = []

    def known(i: int, content_hash: bytes) -> bool:
        asked.append((i, content_hash))
        return i in skipped

    partial = signer.sign(texts, known)
    assert asked == [(i, r.content_hash) for i, r in enumerate(full)]
    for i, (a, b) in enumerate(zip(full, partial, strict=True)):
        if i in skipped:
            assert (b.content_hash, b.length, b.tokens) == (a.content_hash, a.length, a.tokens)
            assert b.signature is None and b.shingle_set is None
        else:
            assert b.same_as(a), i
    assert all(r.signature is None for r in signer.sign(texts, lambda i, h: True))


def test_an_unchanged_recrawl_is_not_minhashed() -> None:
    """The engine signs a re-crawl whose stored record has its content without its MinHash."""
    engine = DedupeEngine(DedupeParams(), MemoryStore())
    docs = documents()
    engine.process(docs)
    engine.commit()
    hashed: list[int] = []
    inner = engine.signer.hasher.shingle_hashes_packed

    def counting(buf: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        hashed.append(len(offsets) - 1)
        return inner(buf, offsets)

    engine.signer.hasher.shingle_hashes_packed = counting  # type: ignore[method-assign]
    changed = doc("near", docs[-1].text + " and one more sentence at the end of it")
    events = engine.process([*docs[:-1], changed])
    assert [e["event"] for e in events if e["id"] != "near"][: len(docs) - 1] == ["unchanged"] * (len(docs) - 1)
    assert hashed == [1]  # the changed document only
