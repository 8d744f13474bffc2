"""The read-only path of the Python API: what ``add`` would decide, without writing anything.

Built on the engine's public attributes only (``engine.store``, ``engine.lsh``, ``engine.preparer``,
``engine.signer``, ``engine.boilerplate``, ``engine.params``); it replays the engine's decision for
one new document (:meth:`~stream_dedupe.core.engine.DedupeEngine.process`) step by step:

1. strip the learned boilerplate lines, **without counting** the document's lines;
2. sign, key (content hash, title key) and band-hash it as the engine does;
3. an existing exact-content group is its match (similarity 1.0); otherwise look its bands up in
   the LSH index **without adding it**, and verify the candidates (title guard, pair thresholds,
   exact or estimated Jaccard);
4. apply the cover rule (:func:`stream_dedupe.core.cover.decide_one`): it would be covered by the
   most similar representative ranked before it in canonical order.

A known id with other content (a re-crawl, which first takes the old version out of the index)
is answered by the real engine on a throwaway shadow instead (:mod:`stream_dedupe.api_shadow`).

Reads go through a fresh :class:`~stream_dedupe.storage.state.StateView` that is dropped
afterwards, so nothing reaches the store, and ``seq``, the LSH tables and the boilerplate
counts stay as they were. Each queried document is answered against the committed state alone
(documents of one ``query_many`` call do not see each other).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping
from functools import reduce
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from stream_dedupe.api_shadow import shadow_engine
from stream_dedupe.api_types import Decision, Match, QueryResult
from stream_dedupe.core.batch import Prepared
from stream_dedupe.core.candidates import verify_candidates
from stream_dedupe.core.canonical import CanonicalKey, better
from stream_dedupe.core.cover import Assignment, Order, StateCoverGraph, decide_one, order_key
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.hidden_pairs import HiddenPairs
from stream_dedupe.core.records import Document, Invalid, ParseLimits, parse_document, parse_timestamp
from stream_dedupe.core.unionfind import UnionFind
from stream_dedupe.core.verify import estimated_jaccard
from stream_dedupe.errors import ConfigError
from stream_dedupe.storage.state import StateView

if TYPE_CHECKING:
    from datasketch import MinHash

#: Internal id of a queried text given without one: ranks after any document of equal length
#: and date, so that an existing document wins the tie (as the smaller id would).
NO_ID = "\U0010ffff"


def query_document(mapping: Mapping[str, Any], doc_id: str | None) -> Document:
    """A queried document (no JSON round trip: nothing is stored).

    Raises:
        ConfigError: if the text is not a string, or a field has the wrong type.

    """
    text, title, source = mapping.get("text"), mapping.get("title"), mapping.get("source")
    if not isinstance(text, str):
        raise ConfigError(f"a query needs a string text, got {type(text).__name__}")
    for name, value in (("title", title), ("source", source), ("id", doc_id)):
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"a query's {name} must be a string, got {type(value).__name__}")
    updated = mapping.get("updated_at")
    try:
        updated_us = None if updated is None else parse_timestamp(str(updated))
    except ValueError as exc:
        raise ConfigError(f"updated_at {updated!r} is not RFC 3339 with a time zone") from exc
    return Document(doc_id or NO_ID, text, updated_us, source, b"", title)


def input_problem(mapping: Mapping[str, Any], limits: ParseLimits) -> Invalid | None:
    """The ``invalid`` outcome the engine's input would give this queried document, or None.

    Only a document with an id is checked as a record (an empty or too long id, too much
    metadata): one without is a question about its text alone.
    """
    if mapping.get("id") is None:
        return None
    record = parse_document(orjson.dumps(dict(mapping)), limits.max_doc_bytes, limits)
    return record if isinstance(record, Invalid) else None


class _GraphWithQuery:
    """The state's cover graph, plus the queried document as a would-be representative."""

    def __init__(self, base: StateCoverGraph, doc_id: str, key: CanonicalKey) -> None:
        self.base, self.doc_id, self.key = base, doc_id, key

    def rank(self, doc_id: str) -> CanonicalKey:
        return self.key if doc_id == self.doc_id else self.base.rank(doc_id)

    def order(self, doc_id: str) -> Order:
        return order_key(self.key) if doc_id == self.doc_id else self.base.order(doc_id)

    def neighbours(self, doc_id: str) -> dict[str, float]:
        return self.base.neighbours(doc_id)

    def candidates(self, doc_id: str) -> tuple[dict[str, float], bool]:
        return self.base.candidates(doc_id)

    def assignment(self, doc_id: str) -> Assignment:
        return None if doc_id == self.doc_id else self.base.assignment(doc_id)

    def assign(self, doc_id: str, assignment: Assignment) -> None:
        raise AssertionError("the read-only query path never assigns")

    def successor(self, doc_id: str, former: str) -> Assignment:
        return None  # the read-only path verifies no pair the index did not offer


class QueryPath:
    """Answers queries for one engine.

    Args:
        engine: The engine whose committed state is queried.

    """

    def __init__(self, engine: DedupeEngine) -> None:
        self.engine = engine

    def query(
        self, docs: list[Document], ids: list[str | None], problems: list[Invalid | None] | None = None
    ) -> list[QueryResult]:
        """The would-be decision of each document, against the committed state.

        ``problems``: each document's :func:`input_problem`; one that has a problem is answered
        ``invalid`` with its reason, as the engine's input would decide it.
        """
        results = self._query(docs, ids)
        for i, problem in enumerate(problems or ()):
            if problem is not None:
                results[i] = QueryResult(Decision("invalid", ids[i], reason=problem.reason, detail=problem.detail), ())
        return results

    def _query(self, docs: list[Document], ids: list[str | None]) -> list[QueryResult]:
        engine = self.engine
        texts = [d.text for d in docs]
        learner = engine.boilerplate
        if learner is not None:
            before = learner.stripped_lines  # a statistic, restored: a query strips nothing for real
            texts = [learner.strip_and_count(d.text, d.source, count=False) for d in docs]
            learner.stripped_lines = before
        prepared = engine.preparer.keyed(docs, engine.signer.sign(texts), engine.lsh)
        view = StateView(engine.store)  # never committed: reads (and path compression) stay here
        return [self._decide(view, item, given) for item, given in zip(prepared, ids, strict=True)]

    def _decide(self, view: StateView, item: Prepared, given: str | None) -> QueryResult:
        doc, params = item.doc, self.engine.params
        prior = view.doc(doc.doc_id) if given is not None else None
        if item.tokens == 0:
            detail = (
                "the text has no words after normalization (empty, whitespace or punctuation only): nothing to index"
            )
            if prior is not None:
                detail += "; the earlier version of this document was removed"
            return QueryResult(Decision("invalid", given, reason="empty-text", detail=detail), ())
        uf = UnionFind(view)
        if prior is not None and prior.content_hash == item.content_hash:
            info = uf.cluster_of(doc.doc_id)
            decision = Decision(
                "unchanged",
                given,
                prior.covered_by or doc.doc_id,
                cluster=info.label,
                canonical=info.canonical.doc_id,
                cluster_size=info.size,
            )
            return QueryResult(decision, ())
        if prior is not None:
            return self._recrawl(item)
        group = view.exact_group(item.content_hash)
        neighbours: dict[str, float] = {}
        pairs: dict[str, float] = {}
        if group:
            matched = [group[0]]
            neighbours = dict.fromkeys(group, 1.0)
            for other, similarity, exact in view.edges(group[0]):
                if not exact and other not in neighbours and other != doc.doc_id:
                    pairs[other] = max(similarity, pairs.get(other, 0.0))
        elif item.signature is not None:
            pairs = self._near(view, item)
            matched = list(pairs)
        else:
            matched = []
        key = CanonicalKey(doc.doc_id, item.length, doc.updated_at_us)
        if not matched:
            decision = Decision("new", given, given, cluster=given, canonical=given, cluster_size=1, updated=False)
            return QueryResult(decision, ())
        self._expand(view, item, pairs, neighbours)
        graph = _GraphWithQuery(StateCoverGraph(view, params), doc.doc_id, key)
        assignment = decide_one(graph, doc.doc_id, neighbours)
        infos = {root: uf.info(root) for root in {uf.find(m) for m in matched}}
        label = min([*(i.label for i in infos.values()), doc.doc_id])
        canonical = reduce(better, [*(i.canonical for i in infos.values()), key]).doc_id
        size = 1 + sum(i.size for i in infos.values())
        public = {doc.doc_id: given}
        label_out, canonical_out = public.get(label, label), public.get(canonical, canonical)
        updated = prior is not None
        if assignment is None:
            decision = Decision(
                "new", given, given, cluster=label_out, canonical=canonical_out, cluster_size=size, updated=updated
            )
        else:
            rep_id, similarity = assignment
            rep = view.doc(rep_id)
            assert rep is not None
            decision = Decision(
                "duplicate-of",
                given,
                rep_id,
                round(similarity, 6),
                rep.content_hash == item.content_hash,
                params.pair_threshold(doc.source, rep.source),
                cluster=label_out,
                canonical=canonical_out,
                cluster_size=size,
                updated=updated,
            )
        return QueryResult(decision, self._matches(view, item, graph.rank, neighbours))

    def _recrawl(self, item: Prepared) -> QueryResult:
        """A known id with other content: the real engine's decision, on a shadow that is then dropped."""
        shadow = shadow_engine(self.engine)
        events = shadow.process([item.doc])
        decision = dataclasses.replace(Decision.from_event(events[0]), seq=None, events=())
        neighbours = shadow.cover.neighbours(item.doc.doc_id)
        return QueryResult(decision, self._matches(shadow.state, item, shadow.cover.rank, neighbours))

    def _near(self, view: StateView, item: Prepared) -> dict[str, float]:
        """Verified LSH candidates (as the engine's, without indexing the document or counting)."""
        assert item.band_hashes is not None
        engine = self.engine
        candidates = engine.lsh.query(item.band_hashes)
        candidates.discard(item.doc.doc_id)
        view.prefetch("docs", [c.encode("utf-8") for c in candidates])
        known = {c for c in candidates if view.doc(c) is not None}
        # as the engine's arrival: a full bucket may hide the representatives covering the candidates
        hidden = HiddenPairs(view, engine.params, lambda: engine.lsh, Counter())
        known |= hidden.covering(item.doc.doc_id, item.band_hashes, known)
        return {other: s for other, s, _ in verify_candidates(item, known, view, self.engine.params, Counter())}

    def _expand(self, view: StateView, item: Prepared, pairs: dict[str, float], out: dict[str, float]) -> None:
        """Every member of each paired content group (as :meth:`StateCoverGraph.neighbours`)."""
        params, doc = self.engine.params, item.doc
        mixed = bool(params.source_thresholds)
        for other, similarity in pairs.items():
            record = view.doc(other)
            if record is None:
                continue
            for member in view.exact_group(record.content_hash) or [other]:
                if member == doc.doc_id or (member in out and out[member] >= similarity):
                    continue
                if mixed:
                    member_record = view.doc(member)
                    source = None if member_record is None else member_record.source
                    if similarity < params.pair_decision_threshold(doc.source, source):
                        continue
                out[member] = similarity

    def _matches(
        self, view: StateView, item: Prepared, rank: Callable[[str], CanonicalKey], neighbours: dict[str, float]
    ) -> tuple[Match, ...]:
        params, out = self.engine.params, []
        for member, similarity in neighbours.items():
            record = view.doc(member)
            if record is None:
                continue
            out.append(
                Match(
                    member,
                    round(similarity, 6),
                    record.content_hash == item.content_hash,
                    record.covered_by is None,
                    params.pair_threshold(item.doc.source, record.source),
                )
            )
        out.sort(key=lambda m: (-m.similarity, order_key(rank(m.id))))
        return tuple(out)

    def query_signature(self, signature: np.ndarray, threshold: float) -> list[Match]:
        """Documents whose stored signature's estimated Jaccard with ``signature`` is >= ``threshold``.

        Raises:
            ConfigError: if the signature does not have the index's ``num_perm`` values.

        """
        engine = self.engine
        if signature.shape != (engine.params.num_perm,):
            raise ConfigError(
                f"the MinHash has {signature.size} permutations, the index {engine.params.num_perm}: "
                f"build it with MinHash(num_perm={engine.params.num_perm}, seed={engine.params.seed}) "
                "or with Deduper.minhash(text)"
            )
        signature = np.ascontiguousarray(signature, dtype=np.uint32)
        view = StateView(engine.store)
        hits: dict[str, float] = {}
        for other in engine.lsh.query(engine.lsh.hashes(signature[None, :])[0]):
            other_sig = view.signature(other)
            record = view.doc(other)
            if other_sig is None or record is None:
                continue
            similarity = estimated_jaccard(signature, other_sig)
            if similarity >= threshold:
                for member in view.exact_group(record.content_hash) or [other]:
                    hits[member] = max(similarity, hits.get(member, 0.0))
        matches = []
        for member, similarity in hits.items():
            record = view.doc(member)
            if record is not None:
                match = Match(member, round(similarity, 6), False, record.covered_by is None, threshold)
                matches.append(match)
        matches.sort(key=lambda m: (-m.similarity, m.id))
        return matches


def document_minhash(engine: DedupeEngine, text: str, source: str | None) -> MinHash:
    """The MinHash of a text as ``add`` would sign it now, as a ``datasketch.MinHash`` (nothing counted).

    The text is normalized and stripped of the lines learned as boilerplate for ``source``; a
    text below ``min_tokens`` (which the index keeps no signature for) is signed all the same.
    """
    from datasketch import MinHash

    from stream_dedupe.core.shingle import shingle_hash

    learner = engine.boilerplate
    if learner is not None:
        before = learner.stripped_lines
        text = learner.strip_and_count(text, source, count=False)
        learner.stripped_lines = before
    signed = engine.signer.sign([text])[0]
    values = signed.signature
    if values is None:
        values = engine.signer.hasher.signatures([engine.normalize(text).encode()])[0]
    params = engine.params
    return MinHash(
        num_perm=params.num_perm,
        seed=params.seed,
        hashfunc=shingle_hash,
        hashvalues=values.copy(),
        scheme="affine32",
    )
