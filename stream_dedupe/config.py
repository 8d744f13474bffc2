"""Parameters of the dedup engine, validated at construction.

:class:`DedupeParams` holds everything that shapes the index (stored with the state and checked
when the state is reopened); :class:`RuntimeLimits` holds the knobs that can change between runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from stream_dedupe.errors import ConfigError

ShingleKind = Literal["word", "char"]
VerifyMode = Literal["estimate", "exact"]

#: Bumped whenever :mod:`stream_dedupe.core.normalize` changes what it produces for the same input.
NORMALIZATION_VERSION = 1

#: Bumped whenever the decisions a state holds change meaning (2: representatives cover every
#: dropped document, see :mod:`stream_dedupe.core.cover`); a state of another version is refused.
DECISION_SEMANTICS = 2


@dataclass(frozen=True)
class ShingleSpec:
    """How a normalized text is cut into shingles.

    Attributes:
        kind: ``word`` for word k-grams, ``char`` for character k-grams (short, noisy text).
        size: k, the number of words or characters per shingle.

    """

    kind: ShingleKind = "word"
    size: int = 3

    def __post_init__(self) -> None:
        if self.kind not in ("word", "char"):
            raise ConfigError(f"shingle kind must be 'word' or 'char', got {self.kind!r} (e.g. --shingle word:3)")
        if not 1 <= self.size <= 64:
            raise ConfigError(f"shingle size must be between 1 and 64, got {self.size} (e.g. --shingle word:3)")

    @classmethod
    def parse(cls, text: str) -> ShingleSpec:
        """Parse ``word:3`` or ``char:5``.

        Raises:
            ConfigError: if the text is not ``KIND:SIZE``.

        """
        match = re.fullmatch(r"\s*(word|char)\s*:\s*(\d+)\s*", text)
        if not match:
            raise ConfigError(f"cannot parse shingle spec {text!r}: use KIND:SIZE, e.g. word:3 or char:5")
        kind: ShingleKind = "word" if match.group(1) == "word" else "char"
        return cls(kind, int(match.group(2)))

    def __str__(self) -> str:
        return f"{self.kind}:{self.size}"


@dataclass(frozen=True)
class NormalizationConfig:
    """Boilerplate removal applied after Unicode NFKC and case folding.

    Attributes:
        strip_patterns: Regular expressions removed wherever they match (multi-line mode).
        header_patterns: Leading lines are dropped while they match one of these (a header block).
        footer_patterns: Trailing lines are dropped while they match one of these (a footer block).

    """

    strip_patterns: tuple[str, ...] = ()
    header_patterns: tuple[str, ...] = ()
    footer_patterns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("strip_patterns", "header_patterns", "footer_patterns"):
            for pattern in getattr(self, name):
                try:
                    re.compile(pattern)
                except re.error as exc:
                    flag = "--" + name.replace("_patterns", "-pattern")
                    raise ConfigError(
                        f"invalid regular expression {pattern!r} in {name} ({flag}): {exc}; fix or quote it "
                        "(Python's re syntax)"
                    ) from exc

    @property
    def fingerprint(self) -> str:
        """A short digest of the version and the patterns; part of the stored parameters."""
        text = repr((NORMALIZATION_VERSION, self.strip_patterns, self.header_patterns, self.footer_patterns))
        return f"v{NORMALIZATION_VERSION}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


@dataclass(frozen=True)
class BoilerplateConfig:
    """Streaming boilerplate learning (on by default: shared chrome must not make pages duplicates).

    Attributes:
        learn: Count lines per ``source``; a line seen in ``min_docs`` documents of a source is
            learned as boilerplate and stripped from every document of that source, including
            those read before it was learned (:mod:`stream_dedupe.core.boilerplate`).
        min_docs: Documents a line must appear in before it is learned.
        min_tokens: Lines with fewer tokens are neither counted nor stripped.

    """

    learn: bool = True
    min_docs: int = 100
    min_tokens: int = 3

    def __post_init__(self) -> None:
        if self.min_docs < 2:
            raise ConfigError(f"boilerplate min_docs must be at least 2, got {self.min_docs}")
        if self.min_tokens < 1:
            raise ConfigError(f"boilerplate min_tokens must be at least 1, got {self.min_tokens}")


@dataclass(frozen=True)
class DedupeParams:
    """Everything that shapes the index; stored with the state and checked on reopen.

    Attributes:
        threshold: Decision threshold on Jaccard similarity; pairs at or above it are duplicates.
        num_perm: Number of MinHash permutations.
        seed: Seed of the permutations (datasketch's ``seed``).
        shingle: Shingling of the normalized text.
        min_tokens: Documents with fewer tokens are matched by exact normalized text only.
        lsh_margin: The LSH is tuned for ``threshold - lsh_margin`` so that it over-returns on
            purpose; verification removes the extra candidates.
        estimate_margin: With ``verify="estimate"``, a candidate is a duplicate only when its
            MinHash estimate reaches ``threshold + estimate_margin``: 0.01 is about 0.3 standard
            errors at 128 permutations and keeps pairs just under the threshold out
            (docs/quality.md measures it).
        bands: LSH bands; chosen from the LSH threshold with datasketch's weighting when 0.
        rows: Rows per band; chosen with ``bands`` when 0.
        verify: ``estimate`` (MinHash estimate) or ``exact`` (exact Jaccard on stored shingle sets).
        normalization: Boilerplate removal.
        boilerplate: Learned boilerplate.
        source_thresholds: ``(source, threshold)`` pairs overriding ``threshold`` for the documents
            of a ``source``; a pair of documents uses the stricter (higher) of its two thresholds,
            and 1.0 exempts a source from near-duplicate removal (only identical normalized text
            is dropped). The LSH bands are tuned for the lowest threshold in use.
        title_guard: A document's ``title`` is part of its identity: two documents whose
            normalized titles differ (reply and forward prefixes such as ``Re:``/``Fwd:`` are
            ignored) are never duplicates, not even with identical text. Documents without a
            title are compared on their text alone.

    """

    threshold: float = 0.8
    num_perm: int = 128
    seed: int = 1
    shingle: ShingleSpec = field(default_factory=ShingleSpec)
    min_tokens: int = 10
    lsh_margin: float = 0.2
    estimate_margin: float = 0.01
    bands: int = 0
    rows: int = 0
    verify: VerifyMode = "exact"
    normalization: NormalizationConfig = field(default_factory=NormalizationConfig)
    boilerplate: BoilerplateConfig = field(default_factory=BoilerplateConfig)
    source_thresholds: tuple[tuple[str, float], ...] = ()
    title_guard: bool = True

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ConfigError(f"threshold must be in (0, 1], got {self.threshold} (e.g. --threshold 0.8)")
        sources = [name for name, _ in self.source_thresholds]
        if len(set(sources)) != len(sources):
            raise ConfigError(f"a source is given two thresholds in {self.source_thresholds!r}: give each once")
        for name, value in self.source_thresholds:
            if not name:
                raise ConfigError("a per-source threshold needs a source name: --source-threshold SOURCE=0.9")
            if not 0.0 < value <= 1.0:
                raise ConfigError(
                    f"threshold of source {name!r} must be in (0, 1], got {value} (e.g. --source-threshold {name}=0.9)"
                )
            if not 0.0 <= self.lsh_margin < value:
                raise ConfigError(
                    f"lsh_margin {self.lsh_margin} must be below the threshold {value} of source {name!r}"
                )
        if not 16 <= self.num_perm <= 1024:
            raise ConfigError(f"num_perm must be between 16 and 1024, got {self.num_perm} (e.g. --num-perm 128)")
        if not 0 <= self.seed < 2**32:
            raise ConfigError(f"seed must be in [0, 2**32), got {self.seed}")
        if self.min_tokens < 0:
            raise ConfigError(f"min_tokens must be >= 0, got {self.min_tokens}")
        if not 0.0 <= self.lsh_margin < self.threshold:
            raise ConfigError(
                f"lsh_margin must be in [0, threshold), got {self.lsh_margin} with threshold {self.threshold}"
            )
        if not 0.0 <= self.estimate_margin <= 0.2:
            raise ConfigError(f"estimate_margin must be in [0, 0.2], got {self.estimate_margin}")
        if self.verify not in ("estimate", "exact"):
            raise ConfigError(f"verify must be 'estimate' or 'exact', got {self.verify!r}")
        if (self.bands == 0) != (self.rows == 0):
            raise ConfigError(
                "give both bands and rows (--bands and --rows), or neither (they are then chosen from the threshold)"
            )
        if self.bands and self.bands * self.rows > self.num_perm:
            raise ConfigError(
                f"bands * rows = {self.bands * self.rows} exceeds num_perm = {self.num_perm}: "
                "lower --bands/--rows or raise --num-perm"
            )

    @property
    def decision_threshold(self) -> float:
        """The similarity a verified candidate must reach: the threshold, plus the estimate margin."""
        return self.threshold if self.verify == "exact" else round(self.threshold + self.estimate_margin, 6)

    @cached_property
    def _source_map(self) -> dict[str, float]:
        return dict(self.source_thresholds)

    def threshold_for(self, source: str | None) -> float:
        """The threshold of a document's ``source`` (the global one when the source has none)."""
        if source is None or not self.source_thresholds:
            return self.threshold
        return self._source_map.get(source, self.threshold)

    def pair_threshold(self, source_a: str | None, source_b: str | None) -> float:
        """The threshold that decides a pair: the stricter of the two sources' thresholds."""
        return max(self.threshold_for(source_a), self.threshold_for(source_b))

    def pair_decision_threshold(self, source_a: str | None, source_b: str | None) -> float:
        """What a verified similarity must reach for a pair: its threshold (+ the estimate margin)."""
        if not self.source_thresholds:
            return self.decision_threshold
        threshold = self.pair_threshold(source_a, source_b)
        return threshold if self.verify == "exact" else round(threshold + self.estimate_margin, 6)

    @property
    def lowest_threshold(self) -> float:
        """The lowest threshold in use (the LSH bands are tuned for it)."""
        return min([self.threshold, *(value for _, value in self.source_thresholds)])

    @property
    def lsh_threshold(self) -> float:
        """The similarity the LSH bands are tuned for: the lowest threshold minus ``lsh_margin``.

        The bands and rows for it are chosen by the core (:func:`stream_dedupe.core.layout.resolve`).
        """
        return round(self.lowest_threshold - self.lsh_margin, 6)

    def to_state(self) -> dict[str, Any]:
        """The parameters as stored with the state.

        Call it on resolved parameters (:func:`stream_dedupe.core.layout.resolve`): ``bands`` and
        ``rows`` are stored as they are.
        """
        bands, rows = self.bands, self.rows
        return {
            "threshold": self.threshold,
            "num_perm": self.num_perm,
            "seed": self.seed,
            "shingle": str(self.shingle),
            "min_tokens": self.min_tokens,
            "bands": bands,
            "rows": rows,
            "verify": self.verify,
            "estimate_margin": self.estimate_margin,
            "normalization": self.normalization.fingerprint,
            "normalization_patterns": {
                "strip": list(self.normalization.strip_patterns),
                "header": list(self.normalization.header_patterns),
                "footer": list(self.normalization.footer_patterns),
            },
            "boilerplate": dataclasses.asdict(self.boilerplate),
            "minhash_scheme": "datasketch-affine32/murmur3_32",
            "source_thresholds": dict(sorted(self.source_thresholds)),
            "title_guard": self.title_guard,
            "semantics": DECISION_SEMANTICS,
        }

    @classmethod
    def from_state(cls, stored: dict[str, Any]) -> DedupeParams:
        """Rebuild the parameters stored by :meth:`to_state`."""
        patterns = stored.get("normalization_patterns", {})
        return cls(
            threshold=stored["threshold"],
            num_perm=stored["num_perm"],
            seed=stored["seed"],
            shingle=ShingleSpec.parse(stored["shingle"]),
            min_tokens=stored["min_tokens"],
            bands=stored["bands"],
            rows=stored["rows"],
            verify=stored["verify"],
            estimate_margin=stored.get("estimate_margin", 0.0),
            normalization=NormalizationConfig(
                tuple(patterns.get("strip", ())),
                tuple(patterns.get("header", ())),
                tuple(patterns.get("footer", ())),
            ),
            boilerplate=BoilerplateConfig(**stored.get("boilerplate", {})),
            source_thresholds=tuple(sorted(stored.get("source_thresholds", {}).items())),
            title_guard=stored.get("title_guard", False),
        )


@dataclass(frozen=True)
class RuntimeLimits:
    """Knobs that may change between runs without rebuilding the state.

    Attributes:
        max_doc_bytes: Larger input records are rejected as ``too-large``.
        max_bucket_size: An LSH bucket stops growing at this many members (a hot bucket, usually
            boilerplate); lookups still return the members it has, and a cluster of copies
            bigger than this still finds its representatives (:mod:`~stream_dedupe.core.hidden_pairs`).
        batch_size: Documents signed and decided together.
        state_cache_entries: Bound, in entries, of the committed state values kept in memory
            between batches (``storage/hot.py``); 0 (the default) keeps none: measured, the
            cache cost more than the reads it saved (BENCHMARKS.md, "The decide path, batch at
            a time"). About 190 bytes an entry.

    """

    max_doc_bytes: int = 1 << 20
    max_bucket_size: int = 500
    batch_size: int = 512
    state_cache_entries: int = 0

    def __post_init__(self) -> None:
        if self.max_doc_bytes < 64:
            raise ConfigError(f"max_doc_bytes must be at least 64, got {self.max_doc_bytes}")
        if self.max_bucket_size < 2:
            raise ConfigError(f"max_bucket_size must be at least 2, got {self.max_bucket_size}")
        if not 1 <= self.batch_size <= 100_000:
            raise ConfigError(f"batch_size must be between 1 and 100000, got {self.batch_size}")
        if self.state_cache_entries < 0:
            raise ConfigError(f"state_cache_entries must be 0 (no cache) or more, got {self.state_cache_entries}")


#: The command-line flags that set each stored parameter (the worker's flags have the same names).
PARAM_FLAGS: dict[str, str] = {
    "threshold": "--threshold",
    "num_perm": "--num-perm",
    "seed": "--seed",
    "shingle": "--shingle",
    "min_tokens": "--min-tokens",
    "verify": "--verify",
    "estimate_margin": "--estimate-margin",
    "normalization": "--strip-pattern/--header-pattern/--footer-pattern",
    "normalization_patterns": "--strip-pattern/--header-pattern/--footer-pattern",
    "boilerplate": "--learn-boilerplate/--boilerplate-min-docs/--boilerplate-min-tokens",
    "minhash_scheme": "none: this version signs differently; rebuild the state",
    "source_thresholds": "--source-threshold",
    "title_guard": "--title-guard/--no-title-guard",
    "semantics": "none: the state was built by a version that decided differently (before representatives); "
    "rebuild it with a new --state",
}
_LAYOUT_SOURCES = ("threshold", "num_perm", "source_thresholds")


def mismatch_message(stored: dict[str, Any], wanted: dict[str, Any], lsh_margin: float) -> str | None:
    """Describe how a run's parameters differ from a state's, naming the flags that caused it.

    Args:
        stored: The parameters stored with the state (:meth:`DedupeParams.to_state`).
        wanted: This run's parameters, in the same form.
        lsh_margin: This run's LSH margin (not stored; it only shapes the bands and rows).

    Returns:
        The error message, or None when the parameters agree.

    """
    differ = [k for k, v in wanted.items() if stored.get(k) != v]
    if not differ:
        return None
    layout = [k for k in ("bands", "rows") if k in differ]
    # normalization (the fingerprint) and normalization_patterns always differ together: say it once
    if "normalization" in differ and "normalization_patterns" in differ:
        differ.remove("normalization")
    parts = []
    for key in differ:
        if key in ("bands", "rows"):
            continue
        flag = PARAM_FLAGS.get(key, key)
        note = ""
        if layout and key in _LAYOUT_SOURCES:
            note = "; the LSH bands and rows follow from it"
        parts.append(f"{key}: state has {stored.get(key)!r}, this run asks for {wanted[key]!r} ({flag}{note})")
    if layout and not any(k in differ for k in _LAYOUT_SOURCES):
        layout_now = f"{wanted['bands']} bands x {wanted['rows']} rows"
        layout_then = f"{stored.get('bands')} bands x {stored.get('rows')} rows"
        cause = (
            f"--lsh-margin {lsh_margin} re-chose them; drop it or pass --bands {stored.get('bands')} "
            f"--rows {stored.get('rows')}"
            if lsh_margin != DedupeParams.lsh_margin
            else "--bands/--rows"
        )
        parts.append(f"LSH layout: state has {layout_then}, this run asks for {layout_now} ({cause})")
    return (
        "the state was built with different parameters (" + "; ".join(parts) + "). "
        "Re-run with the state's values (or without these flags: a run without them uses the state's), "
        "or point --state at a new directory to build a new index with these parameters."
    )
