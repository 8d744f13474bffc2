"""``stream-dedupe tune``: see the LSH S-curve against the corpus, and read the borderline pairs.

Writes two files: a PNG of P(candidate | similarity) for the engine's bands x rows drawn over the
histogram of exact similarities of the corpus's LSH candidate pairs (threshold and LSH threshold
marked), and a self-contained HTML page of the pairs nearest the threshold, side by side with
their differences highlighted, for a person to read before trusting a threshold.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from stream_dedupe.config import DedupeParams
from stream_dedupe.core.layout import resolve
from stream_dedupe.core.lsh import candidate_probability
from stream_dedupe.core.lshindex import LshIndex
from stream_dedupe.core.minhash import MinHasher
from stream_dedupe.core.normalize import Normalizer
from stream_dedupe.core.verify import estimated_jaccard, exact_jaccard


@dataclass(frozen=True)
class CandidatePair:
    """An LSH candidate pair with both similarity measures."""

    a: int
    b: int
    estimated: float
    exact: float


@dataclass
class TuneResult:
    """Candidate pairs of a corpus under one parameter set."""

    params: DedupeParams
    ids: list[str]
    texts: list[str]
    pairs: list[CandidatePair]

    def borderline(self, count: int) -> list[CandidatePair]:
        """The ``count`` pairs whose exact similarity is nearest the threshold."""
        t = self.params.threshold
        return sorted(self.pairs, key=lambda p: (abs(p.exact - t), -p.exact, p.a, p.b))[:count]


def candidate_pairs(raws: list[bytes], params: DedupeParams) -> TuneResult:
    """Every pair sharing an LSH band, with estimated and exact Jaccard.

    Args:
        raws: JSON documents (records without a string ``id`` and ``text`` are skipped).
        params: Engine parameters (bands and rows as the engine would choose them).

    """
    params = resolve(params)
    docs = [
        d for d in (orjson.loads(r) for r in raws) if isinstance(d.get("id"), str) and isinstance(d.get("text"), str)
    ]
    normalizer = Normalizer(params.normalization)
    buf, offsets = normalizer.normalize_batch([d["text"] for d in docs])
    hasher = MinHasher(params.num_perm, params.seed, params.shingle)
    hashes, bounds = hasher.shingle_hashes_packed(buf, offsets)
    signatures = hasher.signatures_from_hashes(hashes, bounds)
    sets = [np.unique(hashes[bounds[i] : bounds[i + 1]]) for i in range(len(docs))]
    lsh = LshIndex(params.bands, params.rows, bucket_cap=10_000)
    band_hashes = lsh.hashes(signatures)
    pairs = []
    for i in range(len(docs)):
        if bounds[i + 1] == bounds[i]:
            continue
        found, _ = lsh.add(str(i), band_hashes[i])
        for other in sorted(int(x) for x in found):
            pairs.append(
                CandidatePair(
                    other, i, estimated_jaccard(signatures[other], signatures[i]), exact_jaccard(sets[other], sets[i])
                )
            )
    return TuneResult(params, [d["id"] for d in docs], [d["text"] for d in docs], pairs)


def plot_scurve(result: TuneResult, path: Path) -> None:
    """Write the S-curve over the histogram of candidate-pair similarities as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = result.params
    fig, hist_axis = plt.subplots(figsize=(9, 5), dpi=110)
    similarities = [pair.exact for pair in result.pairs]
    hist_axis.hist(
        similarities,
        bins=[i / 50 for i in range(51)],
        color="#9ecae1",
        edgecolor="#3182bd",
        label=f"candidate pairs ({len(similarities):,}), by exact Jaccard",
    )
    hist_axis.set_yscale("log" if similarities else "linear")
    hist_axis.set_xlabel("Jaccard similarity")
    hist_axis.set_ylabel("candidate pairs (log scale)")
    curve_axis = hist_axis.twinx()
    s = np.linspace(0, 1, 201)
    curve_axis.plot(
        s,
        [candidate_probability(x, p.bands, p.rows) for x in s],
        color="#d62728",
        linewidth=2,
        label=f"P(candidate | s), {p.bands} bands x {p.rows} rows",
    )
    curve_axis.set_ylabel("P(candidate)")
    curve_axis.set_ylim(0, 1.02)
    curve_axis.axvline(p.threshold, color="black", linestyle="--", label=f"threshold {p.threshold}")
    lsh_threshold = p.threshold - p.lsh_margin
    curve_axis.axvline(
        lsh_threshold, color="#555555", linestyle=":", linewidth=1.8, label=f"LSH tuned for {lsh_threshold:.2f}"
    )
    lines = hist_axis.get_legend_handles_labels()
    more = curve_axis.get_legend_handles_labels()
    curve_axis.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left", fontsize=8)
    hist_axis.set_title(f"LSH S-curve over the corpus ({p.shingle}, {p.num_perm} permutations)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
