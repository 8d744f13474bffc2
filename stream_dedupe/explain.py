"""``explain``: the evidence for one pair, for a person judging a borderline case."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
from rich.console import Console
from rich.table import Table

from stream_dedupe.config import DedupeParams
from stream_dedupe.core.layout import resolve
from stream_dedupe.core.lsh import band_keys, candidate_probability
from stream_dedupe.core.minhash import MinHasher
from stream_dedupe.core.normalize import Normalizer
from stream_dedupe.core.shingle import shingle_hash, shingles
from stream_dedupe.core.verify import estimated_jaccard, exact_jaccard
from stream_dedupe.errors import ConfigError
from stream_dedupe.storage.base import KVStore
from stream_dedupe.storage.state import StateView


@dataclass(frozen=True)
class PairReport:
    """Everything ``explain`` shows about a pair."""

    names: tuple[str, str]
    params: DedupeParams
    shingle_counts: tuple[int, int]
    shared: list[str]
    estimated: float
    exact: float
    colliding_bands: list[int]
    candidate_probability: float

    @property
    def duplicate(self) -> bool:
        """Whether the engine's verification would call the pair duplicates."""
        value = self.exact if self.params.verify == "exact" else self.estimated
        return value >= self.params.decision_threshold


def _text_of(raw: bytes, name: str) -> str:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", errors="replace")
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        return str(value["text"])
    raise ConfigError(f'{name}: a JSON input must be a document with a string "text"')


def load_pair(store: KVStore | None, a: str, b: str) -> tuple[str, str]:
    """The two texts: documents of the state by id, or files (plain text or a JSON document)."""
    texts = []
    for name in (a, b):
        if store is not None:
            raw = StateView(store).document_json(name)
            if raw is None:
                raise ConfigError(f"document {name!r} is not in the state (ids are case-sensitive)")
        else:
            path = Path(name)
            if not path.is_file():
                raise ConfigError(f"{name} is not a file; to compare documents of a state by id, pass --state DIR")
            raw = path.read_bytes()
        texts.append(_text_of(raw, name))
    return texts[0], texts[1]


def explain_pair(params: DedupeParams, text_a: str, text_b: str, names: tuple[str, str]) -> PairReport:
    """Compute the evidence for a pair under ``params``."""
    params = resolve(params)
    normalizer = Normalizer(params.normalization)
    norm = [normalizer.normalize(t) for t in (text_a, text_b)]
    sh = [shingles(n, params.shingle) for n in norm]
    sets = [np.unique(np.array([shingle_hash(s) for s in x], dtype=np.uint32)) for x in sh]
    hasher = MinHasher(params.num_perm, params.seed, params.shingle)
    sigs = hasher.signatures([n.encode() for n in norm])
    keys = band_keys(sigs, params.bands, params.rows)
    colliding = [i for i, (x, y) in enumerate(zip(keys[0], keys[1], strict=True)) if x == y]
    shared = sorted(set(sh[0]) & set(sh[1]))
    exact = exact_jaccard(sets[0], sets[1])
    return PairReport(
        names=names,
        params=params,
        shingle_counts=(len(set(sh[0])), len(set(sh[1]))),
        shared=[s.decode() for s in shared],
        estimated=estimated_jaccard(sigs[0], sigs[1]),
        exact=exact,
        colliding_bands=colliding,
        candidate_probability=candidate_probability(exact, params.bands, params.rows),
    )


def render(console: Console, report: PairReport, show: int) -> None:
    """Print a report as a table."""
    p = report.params
    table = Table(title=f"{report.names[0]}  vs  {report.names[1]}", show_header=False, title_justify="left")
    table.add_column("what")
    table.add_column("value")
    verdict = "[green]duplicate[/]" if report.duplicate else "[yellow]not a duplicate[/]"
    table.add_row("verdict", f"{verdict} (verify={p.verify}, decided at >= {p.decision_threshold})")
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
