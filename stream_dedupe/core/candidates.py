"""A document's verified pairs: its LSH candidates, each checked against its pair's threshold.

LSH may over-return; no candidate becomes a pair unless its similarity (exact Jaccard of the
stored shingle sets, or the MinHash estimate with ``verify="estimate"``) reaches the threshold of
the two documents' sources, and, with the title guard, their titles agree. Rejections are counted.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, cast

import numpy as np

from stream_dedupe.config import DedupeParams
from stream_dedupe.core.batch import Prepared
from stream_dedupe.core.lshindex import LshIndex
from stream_dedupe.core.verify import estimated_jaccard, estimated_jaccards, exact_jaccard, exact_jaccards
from stream_dedupe.storage.state import StateView

if TYPE_CHECKING:  # hidden_pairs verifies its pairs with this module's rules
    from stream_dedupe.core.hidden_pairs import HiddenPairs

#: Candidates from which one call over their sets joined beats a call a pair (measured: ~3 us more
#: for the call, ~2 us less a set; BENCHMARKS.md, "Verification a document at a time").
_JOINED_FROM = 3

#: ``(other document, similarity, exact)``: a verified pair (``exact``: the same content).
Match = tuple[str, float, bool]


def near_matches(
    item: Prepared,
    state: StateView,
    lsh: LshIndex,
    params: DedupeParams,
    counters: Counter[str],
    hidden: HiddenPairs | None = None,
) -> list[Match]:
    """Add ``item`` to the band tables and return its verified pairs with the documents already there.

    Args:
        item: The document, signed and band-hashed.
        state: The engine's state view (the candidates' records, shingle sets or signatures).
        lsh: The band tables.
        params: The thresholds, the title guard.
        counters: The engine's counters (candidates, rejections, hot-bucket skips).
        hidden: When the lookup met a full bucket, also verify the representatives covering the
            candidates that a full bucket may have hidden (:mod:`~stream_dedupe.core.hidden_pairs`).

    """
    doc_id = item.doc.doc_id
    assert item.band_hashes is not None and item.signature is not None
    candidates, full = lsh.add(doc_id, item.band_hashes)
    counters["hot_bucket_skips"] += full
    candidates.discard(doc_id)
    if full:  # kept, so that a rebuild from the state joins the same buckets (rebuild.rebuild_index)
        state.put_skipped_bands(doc_id, lsh.skipped_bands())
    if full and hidden is not None:
        candidates |= hidden.covering(doc_id, item.band_hashes, candidates)
    counters["candidates"] += len(candidates)
    return verify_candidates(item, candidates, state, params, counters)


def verify_candidates(
    item: Prepared, candidates: set[str], state: StateView, params: DedupeParams, counters: Counter[str]
) -> list[Match]:
    """The candidates (in id order) whose similarity with ``item`` reaches their pair's threshold.

    The engine's decisions and the read-only query (:mod:`stream_dedupe.api_query`) both verify here.
    """
    kept = sorted(candidates)
    thresholds = [params.decision_threshold] * len(kept)
    if params.source_thresholds or item.title_key is not None:  # each pair's own rules: read its record
        kept, thresholds = _pair_rules(item, kept, state, params, counters)
    matches: list[Match] = []
    rejected = 0
    for other, threshold, similarity in zip(kept, thresholds, similarities_to(item, kept, state), strict=True):
        if similarity >= threshold:
            matches.append((other, similarity, False))
        else:
            rejected += 1
    if rejected:
        counters["rejected_candidates"] += rejected
    return matches


def _pair_rules(
    item: Prepared, others: list[str], state: StateView, params: DedupeParams, counters: Counter[str]
) -> tuple[list[str], list[float]]:
    """The candidates the title guard lets through, and the threshold of each pair's sources."""
    kept: list[str] = []
    thresholds: list[float] = []
    for other in others:
        other_record = state.doc(other)
        assert other_record is not None, f"LSH candidate {other!r} has no record in the state"
        if titles_disagree(item.title_key, other_record.title_key):
            counters["title_rejections"] += 1
            counters["rejected_candidates"] += 1
            continue
        kept.append(other)
        thresholds.append(params.pair_decision_threshold(item.doc.source, other_record.source))
    return kept, thresholds


def titles_disagree(mine: str | None, theirs: str | None) -> bool:
    """The title guard's refusal: both documents have a title key (the guard is on) and they differ.

    The one rule for an LSH candidate and for a pair a full bucket hid
    (:meth:`~stream_dedupe.core.hidden_pairs.HiddenPairs.pair`).
    """
    return mine is not None and theirs is not None and mine != theirs


def similarity_to(item: Prepared, other: str, state: StateView) -> float:
    """Jaccard of ``item`` and a document in the state: exact when ``item`` has its shingle set, else estimated."""
    return similarity_with_stored(item.shingle_set, item.signature, other, state)


def similarities_to(item: Prepared, others: list[str], state: StateView) -> list[float]:
    """:func:`similarity_to` of ``item`` and each of ``others``, measured together (one kernel call)."""
    if len(others) < _JOINED_FROM:  # a call a pair is cheaper for so few
        return [similarity_to(item, other, state) for other in others]
    if item.shingle_set is not None:
        raws = state.shingle_set_bytes(others)
        assert None not in raws, f"exact mode: no shingle set stored for {others[raws.index(None)]!r}"
        return exact_jaccards(item.shingle_set, cast("list[bytes]", raws))
    raws = state.signature_bytes(others)
    assert item.signature is not None and None not in raws
    return estimated_jaccards(item.signature, cast("list[bytes]", raws))


def similarity_with_stored(
    shingle_set: np.ndarray | None, signature: np.ndarray | None, other: str, state: StateView
) -> float:
    """Jaccard of a document (its shingle set, its signature) and ``other`` in the state.

    Exact on the shingle sets when the document has one (exact verification stores every
    document's), else the MinHash estimate of the signatures.
    """
    if shingle_set is not None:
        other_set = state.shingle_set(other)
        assert other_set is not None, f"exact mode: no shingle set stored for {other!r}"
        return exact_jaccard(shingle_set, other_set)
    other_sig = state.signature(other)
    assert other_sig is not None and signature is not None
    return estimated_jaccard(signature, other_sig)
