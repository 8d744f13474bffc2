"""The LSH index over document ids: the band tables (:mod:`~stream_dedupe.core.bandindex`), ids for ordinals."""

from __future__ import annotations

import numpy as np

from stream_dedupe.core.bandindex import BandIndex


class LshIndex:
    """Band tables over document ids: assigns ordinals and maps them back to ids.

    Args:
        bands: Number of bands.
        rows: Rows per band.
        bucket_cap: A bucket with this many members is not joined (counted as a hot bucket).

    """

    def __init__(self, bands: int, rows: int, bucket_cap: int) -> None:
        self.tables = BandIndex(bands, rows)
        self.bucket_cap = bucket_cap
        self._ids: list[str] = []

    def __len__(self) -> int:
        return len(self._ids)

    def hashes(self, signatures: np.ndarray) -> np.ndarray:
        """Band hashes of ``(n, num_perm)`` signatures."""
        return self.tables.hashes(signatures)

    def add(self, doc_id: str, hashes: np.ndarray) -> tuple[set[str], int]:
        """Candidates of a document (ids sharing a band), then index it.

        Returns:
            ``(candidate ids, buckets that were full)``.

        """
        ordinals, full = self.tables.query_insert(hashes, len(self._ids), self.bucket_cap)
        self._ids.append(doc_id)
        ids = self._ids
        return {ids[o] for o in set(ordinals.tolist())}, full

    def skipped_bands(self) -> np.ndarray:
        """Per band, 1 where the last :meth:`add` found the bucket full and did not join it (uint8 copy)."""
        return self.tables.skipped.copy()

    def query(self, hashes: np.ndarray) -> set[str]:
        """Ids sharing a band with ``hashes`` (nothing is indexed)."""
        ordinals, _ = self.tables.query_insert(hashes, -1, self.bucket_cap, insert=False)
        return {self._ids[o] for o in set(ordinals.tolist())}

    def query_many(self, hashes: np.ndarray) -> set[str]:
        """Ids sharing a band with any of the ``(n, bands)`` rows of ``hashes`` (one compiled call)."""
        ids = self._ids
        return {ids[o] for o in set(self.tables.query_many(hashes).tolist())}

    def any_match(self, hashes: np.ndarray) -> np.ndarray:
        """Per row of the ``(n, bands)`` ``hashes``: True if an indexed document shares a band with it."""
        return self.tables.any_match(hashes)

    def add_new(self, doc_ids: list[str], hashes: np.ndarray) -> None:
        """Index documents that share no band with any indexed one, nor with each other, at once."""
        self.tables.insert_many(hashes, len(self._ids))
        self._ids.extend(doc_ids)

    def reserve(self, documents: int) -> None:
        """Size the tables for ``documents`` more (before a rebuild; an estimate will do)."""
        self.tables.reserve(documents)

    def add_all(self, doc_ids: list[str], hashes: np.ndarray) -> int:
        """Index documents one after the other, as :meth:`add` would, without their candidates.

        For a rebuild from the state (start-up, recovery): one compiled call for the whole
        ``(n, bands)`` ``hashes`` instead of one per document (BENCHMARKS.md, "Reopening a
        state"). Returns the buckets that were full.
        """
        full = self.tables.insert_capped(hashes, len(self._ids), self.bucket_cap)
        self._ids.extend(doc_ids)
        return full

    def add_all_masked(self, doc_ids: list[str], hashes: np.ndarray, skipped: np.ndarray) -> None:
        """Index documents in the bands they joined when they arrived (a rebuild: the live tables exactly).

        Args:
            doc_ids: The documents.
            hashes: Their ``(n, bands)`` band hashes.
            skipped: ``(n, bands)`` uint8, 1 where a document found the bucket full and did not join it.

        """
        self.tables.insert_masked(hashes, len(self._ids), skipped)
        self._ids.extend(doc_ids)

    def full_bands(self, hashes: np.ndarray) -> np.ndarray:
        """Per band of a document's ``(bands,)`` hashes: True if its bucket holds ``bucket_cap`` entries or more.

        Such a bucket is joined by no one any more, so a pair of documents sharing it may never
        have been offered (:mod:`~stream_dedupe.core.hidden_pairs`).
        """
        full: np.ndarray = self.tables.bucket_sizes(hashes) >= self.bucket_cap
        return full

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The index as arrays: the tables' (:meth:`BandIndex.to_arrays`), and the ids of the ordinals."""
        text = "".join(self._ids)
        arrays: dict[str, np.ndarray] = {
            "ids": np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8),
            "id_chars": np.fromiter(map(len, self._ids), dtype=np.int64, count=len(self._ids)),
        }
        arrays.update(self.tables.to_arrays())
        return arrays

    @classmethod
    def from_arrays(cls, bands: int, rows: int, bucket_cap: int, arrays: dict[str, np.ndarray]) -> LshIndex:
        """An index saved by :meth:`to_arrays` (ValueError if the arrays do not fit together)."""
        index = cls(bands, rows, bucket_cap)
        index.tables = BandIndex.from_arrays(bands, rows, arrays)
        text = arrays["ids"].tobytes().decode("utf-8", "surrogatepass")
        ends = np.cumsum(arrays["id_chars"]).tolist()
        if (ends[-1] if ends else 0) != len(text) or int(arrays["vals"].max(initial=-1)) >= len(ends):
            raise ValueError("the saved ids do not match the saved band tables")
        index._ids = [text[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]
        return index

    def remove(self, doc_id: str, hashes: np.ndarray) -> None:
        """Take a document's entries out of the tables."""
        ordinals, _ = self.tables.query_insert(hashes, -1, self.bucket_cap, insert=False)
        for ordinal in set(ordinals.tolist()):
            if self._ids[ordinal] == doc_id:
                self.tables.remove(hashes, ordinal)
