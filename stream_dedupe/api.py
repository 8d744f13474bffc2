"""The Python API: a :class:`Deduper` to add, remove and query documents from your own code.

>>> from stream_dedupe import Deduper
>>> text = "one two three four five six seven eight nine ten eleven twelve"
>>> with Deduper.memory(threshold=0.8) as dd:
...     dd.add({"id": "a", "text": text}).kind
...     dd.add(("b", text.removesuffix(" twelve"))).representative
...     dd.query(text).duplicate
'new'
'a'
True

It is a thin layer over :class:`~stream_dedupe.core.engine.DedupeEngine` with the same parameters
and state as the ``stream-dedupe`` command (docs/api.md). Not thread-safe: use one per thread, or
a lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import orjson

from stream_dedupe.api_params import params_overrides
from stream_dedupe.api_query import QueryPath, document_minhash, input_problem, query_document
from stream_dedupe.api_types import (
    Cluster,
    Decision,
    DocumentLike,
    Match,
    QueryResult,
    iter_documents,
    split_events,
    to_json,
    to_mapping,
)
from stream_dedupe.config import DedupeParams, RuntimeLimits
from stream_dedupe.core.engine import DedupeEngine, stored_params
from stream_dedupe.core.events import Event
from stream_dedupe.core.layout import resolve
from stream_dedupe.core.records import Deletion, Document, Invalid, ParseLimits, Record, parse_document
from stream_dedupe.errors import ConfigError, StateError
from stream_dedupe.explain import PairReport, explain_pair, load_pair, stored_relation
from stream_dedupe.exports import iter_canonical_documents, iter_clusters
from stream_dedupe.state_stats import StateStats, state_stats
from stream_dedupe.storage.base import KVStore
from stream_dedupe.storage.memory import MemoryStore

if TYPE_CHECKING:
    from datasketch import MinHash

#: Called with every batch's events (all of them, in order), e.g. to write them out.
EventHook = Callable[[list[Event]], None]


class Deduper:
    """Near-duplicate removal from Python: the engine, its state, and a read-only query path.

    Make one with :meth:`open` (a RocksDB state directory, shared with the command line) or
    :meth:`memory`; close it (or use it as a context manager) to release the state.

    Args:
        engine: The engine.
        batch_size: Documents per engine batch and atomic commit in :meth:`add_many`.
        on_events: Called with each batch's events after it is committed.

    """

    def __init__(self, engine: DedupeEngine, batch_size: int = 512, on_events: EventHook | None = None) -> None:
        self._engine = engine
        self._batch_size = RuntimeLimits(batch_size=batch_size).batch_size
        self._on_events = on_events
        self._query = QueryPath(engine)
        self._closed = False
        self._committed = True  # the engine's memory is the committed state's (a warm start can be saved)

    # -- construction -----------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        state_dir: str | Path,
        *,
        batch_size: int = 512,
        max_doc_bytes: int = 1 << 20,
        max_bucket_size: int = 500,
        on_events: EventHook | None = None,
        index_shards: int | None = None,
        **params: Any,
    ) -> Deduper:
        """Open (or create) a state directory, with the command line's parameter rules.

        Parameters given are checked against those stored in the state; those not given are
        taken from the state (or the defaults, for a new state).

        Args:
            state_dir: The state directory (created if missing; must be empty if not a state).
            batch_size: Documents per batch and atomic commit.
            max_doc_bytes: Larger documents are ``invalid`` (``too-large``).
            max_bucket_size: LSH bucket cap.
            on_events: Called with each batch's events after it is committed.
            index_shards: As ``dedupe --index-shards``: shard processes for a new state (None: the
                state's own layout; 1 for a new state: none).
            **params: Index parameters (see :func:`params_overrides`), e.g. ``threshold=0.85``.

        Raises:
            StateMismatchError: if the state was built with other parameters.
            StateError: if the directory is in use by another process.
            ConfigError: for an invalid parameter or a directory that is not a state.

        """
        from stream_dedupe import warm_file
        from stream_dedupe.cli import resolve_params
        from stream_dedupe.cli_support import check_new_state_dir, is_state
        from stream_dedupe.sharded_state import open_state

        path = Path(state_dir)
        overrides = params_overrides(params)
        limits = RuntimeLimits(max_doc_bytes=max_doc_bytes, max_bucket_size=max_bucket_size, batch_size=batch_size)
        if not is_state(path):  # every parameter is checked before the directory is created
            check_new_state_dir(path)
            resolve(resolve_params(None, overrides))
        store = open_state(path, index_shards)  # a sharded state with its shard processes
        try:
            resolved = resolve_params(stored_params(store), overrides)
            engine = DedupeEngine(resolved, store, limits, warm_file.load(store))
        except BaseException:
            store.close()
            raise
        return cls(engine, batch_size, on_events)

    @classmethod
    def memory(
        cls,
        *,
        batch_size: int = 512,
        max_doc_bytes: int = 1 << 20,
        max_bucket_size: int = 500,
        on_events: EventHook | None = None,
        **params: Any,
    ) -> Deduper:
        """An in-memory deduper (nothing is written to disk); arguments as :meth:`open`."""
        from stream_dedupe.cli import resolve_params

        limits = RuntimeLimits(max_doc_bytes=max_doc_bytes, max_bucket_size=max_bucket_size, batch_size=batch_size)
        engine = DedupeEngine(resolve_params(None, params_overrides(params)), MemoryStore(), limits)
        return cls(engine, batch_size, on_events)

    # -- properties -------------------------------------------------------------------------
    @property
    def params(self) -> DedupeParams:
        """The index parameters in use (bands and rows resolved)."""
        return self._engine.params

    @property
    def seq(self) -> int:
        """Sequence number of the last event (continues across reopenings of a state)."""
        return self._engine.seq

    @property
    def engine(self) -> DedupeEngine:
        """The engine underneath (for what this API does not cover)."""
        return self._live()

    @property
    def store(self) -> KVStore:
        """The key-value store of the state."""
        return self._live().store

    def _live(self) -> DedupeEngine:
        if self._closed:
            raise StateError("this Deduper is closed: open the state again with Deduper.open(state_dir)")
        return self._engine

    # -- writing ----------------------------------------------------------------------------
    def add(self, doc: DocumentLike) -> Decision:
        """Decide one document and commit it.

        Args:
            doc: A dict with ``id`` and ``text`` (and optionally ``title``, ``source``, ``url``,
                ``updated_at``, ``metadata``, as in the JSONL input), an ``(id, text)`` tuple,
                or a pandas row.

        Returns:
            Its decision; an invalid document is an ``invalid`` decision, never an exception.

        Raises:
            TypeError: if ``doc`` is none of the accepted forms.

        """
        return self.add_many([doc])[0]

    def add_many(self, docs: Iterable[DocumentLike] | Any, batch_size: int | None = None) -> list[Decision]:
        """Decide documents in batches, committing after each batch.

        Args:
            docs: An iterable (a list, a generator) of what :meth:`add` accepts, or a pandas DataFrame.
            batch_size: Documents per batch and commit (default: the deduper's).

        Returns:
            One decision per document, in order.

        Raises:
            TypeError: for a document of no accepted form (the batches before it are committed).

        """
        size = batch_size or self._batch_size
        out: list[Decision] = []
        batch: list[Record] = []
        limit = self._live().limits.max_doc_bytes
        for doc in iter_documents(docs):
            batch.append(parse_document(to_json(doc), limit))
            if len(batch) >= size:
                out.extend(self._process(batch))
                batch = []
        if batch:
            out.extend(self._process(batch))
        return out

    def remove(self, doc_id: str) -> Decision:
        """Delete a document (a ``deleted`` decision; ``events`` holds the cluster changes)."""
        return self.remove_many([doc_id])[0]

    def remove_many(self, doc_ids: Iterable[str]) -> list[Decision]:
        """Delete documents, in batches."""
        ids = list(doc_ids)
        for doc_id in ids:
            if not isinstance(doc_id, str):
                raise TypeError(f"a document id is a string, got {type(doc_id).__name__} {doc_id!r}")
        out: list[Decision] = []
        for start in range(0, len(ids), self._batch_size):
            out.extend(self._process([Deletion(i) for i in ids[start : start + self._batch_size]]))
        return out

    def _process(self, records: list[Record]) -> list[Decision]:
        engine = self._live()
        self._committed = False
        events = engine.process(records)
        engine.commit()
        self._committed = True
        if self._on_events is not None:
            self._on_events(events)
        return [Decision.from_event(group[0], group) for group in split_events(events)]

    # -- reading ----------------------------------------------------------------------------
    def query(
        self,
        text: str,
        title: str | None = None,
        source: str | None = None,
        *,
        doc_id: str | None = None,
        updated_at: str | datetime | None = None,
    ) -> QueryResult:
        """What :meth:`add` would decide for this document now, and what it matches; writes nothing.

        Args:
            text: The document's text.
            title: Its title (with the title guard, part of its identity).
            source: Its source (per-source thresholds, learned boilerplate).
            doc_id: Its id, if it has one: breaks ties of the canonical order as in :meth:`add`, and
                a known id with the same content answers ``unchanged``. Without one, an existing
                document of equal length and date ranks first.
            updated_at: RFC 3339 time or aware datetime (canonical order: the newest of equal length first).

        Returns:
            The would-be decision (``seq`` None) and the verified matches, most similar first.

        """
        doc: dict[str, Any] = {"text": text, "title": title, "source": source, "updated_at": updated_at}
        if doc_id is not None:
            doc["id"] = doc_id
        return self.query_many([doc])[0]

    def query_many(self, docs: Iterable[DocumentLike | str] | Any) -> list[QueryResult]:
        """:meth:`query` for many documents (texts, dicts with or without ``id``, pairs, rows).

        Each is answered against the committed state alone: they do not see each other.

        Raises:
            ConfigError: if a document is invalid (not a string ``text``, a bad ``updated_at``).

        """
        limits = ParseLimits(max_doc_bytes=self._live().limits.max_doc_bytes)  # as add() parses
        parsed: list[Document] = []
        given: list[str | None] = []
        problems: list[Invalid | None] = []
        for doc in iter_documents(docs):
            mapping = {"text": doc} if isinstance(doc, str) else dict(to_mapping(doc))
            doc_id = mapping.get("id")
            parsed.append(query_document(mapping, doc_id))
            given.append(doc_id)
            problems.append(input_problem(mapping, limits))
        return self._query.query(parsed, given, problems) if parsed else []

    def minhash(self, text: str, source: str | None = None) -> MinHash:
        """The document's MinHash as a ``datasketch.MinHash``, bit-identical to the index's.

        The text is normalized and stripped of the lines learned as boilerplate for ``source``
        (as :meth:`add` would sign it now; nothing is counted). The result has the index's
        ``num_perm`` and ``seed``: ``jaccard``, ``merge`` and ``MinHashLSH`` work with it.
        """
        return document_minhash(self._live(), text, source)

    def query_minhash(self, minhash: MinHash, threshold: float | None = None) -> list[Match]:
        """Documents whose MinHash estimate with ``minhash`` reaches ``threshold``; writes nothing.

        The datasketch ``MinHashLSH.query`` equivalent, verified: LSH candidates of the index,
        kept when the estimated Jaccard of the signatures is at least ``threshold`` (default:
        the index threshold). Without the text there is no exact Jaccard, title or source:
        ``exact`` is always False; use :meth:`query` when you have the text.

        Raises:
            ConfigError: if the MinHash was made with another ``num_perm`` or ``seed``.

        """
        params = self._live().params
        scheme = getattr(minhash, "scheme", "affine32")
        if scheme != "affine32":
            raise ConfigError(
                f"the MinHash uses the {scheme!r} permutation scheme, the index 'affine32' (datasketch's default "
                f"since 2.0): build it with MinHash(num_perm={params.num_perm}, seed={params.seed})"
            )
        if getattr(minhash, "seed", params.seed) != params.seed:
            raise ConfigError(
                f"the MinHash has seed {minhash.seed}, the index {params.seed}: "
                f"build it with MinHash(num_perm={params.num_perm}, seed={params.seed}) or Deduper.minhash(text)"
            )
        return self._query.query_signature(minhash.hashvalues, params.threshold if threshold is None else threshold)

    def document(self, doc_id: str) -> dict[str, Any] | None:
        """The original document stored for an id, or None."""
        raw = self.store.get_many("documents", [doc_id.encode("utf-8")])[0]
        return None if raw is None else dict(orjson.loads(raw))

    def clusters(self, min_size: int = 2) -> Iterator[Cluster]:
        """The clusters, by label (``min_size=1`` includes singletons)."""
        for exported in iter_clusters(self.store, min_size):
            yield Cluster.from_export(exported)

    def canonical_documents(self) -> Iterator[dict[str, Any]]:
        """The deduped set: the original document of every representative, by id."""
        for raw in iter_canonical_documents(self.store):
            yield dict(orjson.loads(raw))

    def stats(self, by_source: bool = False) -> StateStats:
        """What the state holds, as ``stream-dedupe stats`` counts it (``by_source``: per source too)."""
        store = self.store
        path = getattr(getattr(store, "local", store), "path", None)  # a sharded state's own directory
        return state_stats(store, self.params, path, by_source)

    def explain(self, a: str, b: str) -> PairReport:
        """The evidence for two documents of the state (``stream-dedupe explain --state``)."""
        doc_a, doc_b = load_pair(self.store, a, b)
        relation = stored_relation(self.store, a, b)
        return explain_pair(self.params, doc_a, doc_b, (a, b), self._engine.boilerplate, relation)

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        """Release the state (the RocksDB lock); everything added is already committed.

        A state of 10,000 documents or more gets its warm-start file (as after ``dedupe``), unless
        a batch failed while this deduper was open.
        """
        if not self._closed:
            self._closed = True
            if self._committed:
                from stream_dedupe import warm_file

                warm_file.save(self._engine.store, self._engine)
            self._engine.store.close()

    def __enter__(self) -> Deduper:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
