"""``explain``: the evidence for one pair, for a person judging a borderline case.

The verdict follows the engine's own rules, in its order: two documents with the same identity
key (normalized text, and title under the title guard) are exact copies; a document under
``min_tokens`` has no signature and pairs with exact copies only; the title guard refuses two
different titles; otherwise the similarity (exact Jaccard, or the MinHash estimate with
``verify="estimate"``) must reach the threshold of the two documents' sources. With a state, the
texts are first stripped of the boilerplate lines learned for their sources, and the report says
what the engine recorded for the pair.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
from rich.console import Console
from rich.table import Table

from stream_dedupe.config import DedupeParams
from stream_dedupe.core.boilerplate import BoilerplateLearner
from stream_dedupe.core.candidates import titles_disagree
from stream_dedupe.core.layout import resolve
from stream_dedupe.core.lsh import band_keys, candidate_probability
from stream_dedupe.core.minhash import MinHasher
from stream_dedupe.core.normalize import Normalizer, title_key
from stream_dedupe.core.shingle import shingle_hash, shingles
from stream_dedupe.core.signer import Signer
from stream_dedupe.core.unionfind import UnionFind
from stream_dedupe.core.verify import estimated_jaccard, exact_jaccard
from stream_dedupe.errors import ConfigError
from stream_dedupe.inputs import read_whole
from stream_dedupe.storage.base import KVStore
from stream_dedupe.storage.state import StateView


@dataclass(frozen=True)
class PairDoc:
    """One side of a pair: what the engine's rules read of a document."""

    text: str
    title: str | None = None
    source: str | None = None


@dataclass(frozen=True)
class PairReport:
    """Everything ``explain`` shows about a pair.

    Attributes:
        names: The two documents' names (ids or files).
        params: The parameters the pair is judged with.
        shingle_counts: Distinct shingles of each (stripped, normalized) text.
        shared: The shingles they share.
        estimated: MinHash estimate of their Jaccard similarity.
        exact: Exact Jaccard similarity of their shingle sets.
        colliding_bands: LSH bands in which their signatures agree.
        candidate_probability: Chance that LSH offers a pair of this similarity.
        threshold: What the similarity must reach: the threshold of the two sources (plus the
            estimate margin with ``verify="estimate"``).
        identical: Same identity key: exact copies, whatever the rules below.
        refusal: A rule that keeps them apart whatever their similarity (too few tokens, titles
            that differ under the title guard), or None.
        stored: With a state: what the engine recorded for the pair, or None.

    """

    names: tuple[str, str]
    params: DedupeParams
    shingle_counts: tuple[int, int]
    shared: list[str]
    estimated: float
    exact: float
    colliding_bands: list[int]
    candidate_probability: float
    threshold: float = 0.0
    identical: bool = False
    refusal: str | None = None
    stored: str | None = None

    @property
    def duplicate(self) -> bool:
        """Whether the engine would pair the two documents (the verdict)."""
        if self.identical:
            return True
        if self.refusal is not None:
            return False
        value = self.exact if self.params.verify == "exact" else self.estimated
        return value >= self.threshold

    @property
    def reason(self) -> str:
        """The rule that gave the verdict, in words."""
        if self.identical:
            return "the same normalized text" + (" and title" if self.params.title_guard else "")
        if self.refusal is not None:
            return self.refusal
        p = self.params
        return f"verify={p.verify}, decided at >= {self.threshold}"


def _doc_of(raw: bytes, name: str) -> PairDoc:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        lines = [line for line in raw.splitlines() if line.strip()]
        if len(lines) > 1 and _is_document(lines[0]):
            raise ConfigError(
                f"{name} holds {len(lines):,} lines of JSON and explain compares one document a file: put each "
                "document in a file of its own, or dedupe the file into a state and pass --state DIR with two ids"
            ) from None
        return PairDoc(raw.decode("utf-8", errors="replace"))
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        title, source = value.get("title"), value.get("source")
        return PairDoc(
            str(value["text"]), title if isinstance(title, str) else None, source if isinstance(source, str) else None
        )
    raise ConfigError(f'{name}: a JSON input must be a document with a string "text"')


def _is_document(line: bytes) -> bool:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return isinstance(value, dict) and "text" in value


def load_pair(store: KVStore | None, a: str, b: str) -> tuple[PairDoc, PairDoc]:
    """The two documents: of the state by id, or files (plain text or a JSON document)."""
    docs = []
    for name in (a, b):
        if store is not None:
            raw = StateView(store).document_json(name)
            if raw is None:
                raise ConfigError(f"document {name!r} is not in the state (ids are case-sensitive)")
        else:
            path = Path(name)
            if not path.is_file():
                raise ConfigError(f"{name} is not a file; to compare documents of a state by id, pass --state DIR")
            raw = read_whole(name)  # a compressed file is read as dedupe reads it
        docs.append(_doc_of(raw, name))
    return docs[0], docs[1]


def state_learner(params: DedupeParams, store: KVStore) -> BoilerplateLearner | None:
    """The boilerplate lines a state has learned (None when it learns none), to strip texts as it does."""
    params = resolve(params)
    return BoilerplateLearner(params.boilerplate, StateView(store)) if params.boilerplate.learn else None


def stored_relation(store: KVStore, a: str, b: str) -> str:
    """What the state holds about two of its documents: a verified pair, one cluster, or neither."""
    state = StateView(store)
    for other, similarity, exact in state.edges(a):
        if other == b:
            return "a verified pair: exact copies" if exact else f"a verified pair at {similarity:.4f}"
    uf = UnionFind(state)
    label = uf.cluster_of(a).label
    if label == uf.cluster_of(b).label:
        return f"not paired directly, in one cluster ({label})"
    return "not paired, in different clusters"


def explain_pair(
    params: DedupeParams,
    doc_a: PairDoc | str,
    doc_b: PairDoc | str,
    names: tuple[str, str],
    learner: BoilerplateLearner | None = None,
    stored: str | None = None,
) -> PairReport:
    """Compute the evidence for a pair under ``params``.

    Args:
        params: The parameters (a state's, or the command's).
        doc_a: The first document (a bare string: a text with no title or source).
        doc_b: The second document.
        names: What to call them.
        learner: A state's learned boilerplate: each text is stripped of its source's lines first.
        stored: What the state recorded for the pair (:func:`stored_relation`), to show.

    """
    params = resolve(params)
    pair = [PairDoc(d) if isinstance(d, str) else d for d in (doc_a, doc_b)]
    texts = [d.text for d in pair]
    if learner is not None:
        before = learner.stripped_lines  # a statistic of the runs, not of this question
        texts = [learner.strip_and_count(d.text, d.source, count=False) for d in pair]
        learner.stripped_lines = before
    normalizer = Normalizer(params.normalization)
    norm = [normalizer.normalize(t) for t in texts]
    sh = [shingles(n, params.shingle) for n in norm]
    sets = [np.unique(np.array([shingle_hash(s) for s in x], dtype=np.uint32)) for x in sh]
    hasher = MinHasher(params.num_perm, params.seed, params.shingle)
    sigs = hasher.signatures([n.encode() for n in norm])
    keys = band_keys(sigs, params.bands, params.rows)
    colliding = [i for i, (x, y) in enumerate(zip(keys[0], keys[1], strict=True)) if x == y]
    shared = sorted(set(sh[0]) & set(sh[1]))
    exact = exact_jaccard(sets[0], sets[1])
    signed = Signer(params).sign(texts)  # the engine's own record of each text
    titles = [title_key(d.title) if params.title_guard else None for d in pair]
    refusal = None
    empty = [name for name, s in zip(names, signed, strict=True) if s.tokens == 0]
    if empty:
        refusal = f"{' and '.join(empty)}: no words after normalization, refused as empty-text, never deduplicated"
    elif any(s.signature is None for s in signed):
        refusal = f"fewer than min_tokens ({params.min_tokens}) tokens: only exact copies pair"
    elif titles_disagree(titles[0], titles[1]):
        refusal = "different titles (the title guard)"
    return PairReport(
        names=names,
        params=params,
        shingle_counts=(len(set(sh[0])), len(set(sh[1]))),
        shared=[s.decode() for s in shared],
        estimated=estimated_jaccard(sigs[0], sigs[1]),
        exact=exact,
        colliding_bands=colliding,
        candidate_probability=candidate_probability(exact, params.bands, params.rows),
        threshold=params.pair_decision_threshold(pair[0].source, pair[1].source),
        identical=not empty and signed[0].content_hash == signed[1].content_hash and titles[0] == titles[1],
        refusal=refusal,
        stored=stored,
    )


def render(console: Console, report: PairReport, show: int) -> None:
    """Print a report as a table."""
    p = report.params
    table = Table(title=f"{report.names[0]}  vs  {report.names[1]}", show_header=False, title_justify="left")
    table.add_column("what")
    table.add_column("value")
    verdict = "[green]duplicate[/]" if report.duplicate else "[yellow]not a duplicate[/]"
    table.add_row("verdict", f"{verdict} ({report.reason})")
    if report.stored is not None:
        table.add_row("in the state", report.stored)
    table.add_row("estimated Jaccard (MinHash)", f"{report.estimated:.4f}  ({p.num_perm} permutations)")
    table.add_row("exact Jaccard", f"{report.exact:.4f}")
    table.add_row(
        "shingles",
        f"{report.shingle_counts[0]} / {report.shingle_counts[1]} ({p.shingle}), {len(report.shared)} shared",
    )
    table.add_row(
        "colliding LSH bands",
        f"{len(report.colliding_bands)} of {p.bands} ({p.rows} rows each): {report.colliding_bands[:20]}",
    )
    table.add_row("P(candidate) at this similarity", f"{report.candidate_probability:.4f}")
    for s in report.shared[:show]:
        table.add_row("shared", s)
    console.print(table)
