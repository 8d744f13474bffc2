"""Which 8-byte hash keys a namespace cannot hold: a growable blocked Bloom filter, in numpy.

Learned boilerplate reads the count of every distinct line of every document (about 30 per
page), and most lines have never been seen: on 20 Newsgroups 86% of those reads find nothing.
Each read still costs a RocksDB multi-get slot and a Python object (~0.6 us). The keys are
already 64-bit MurmurHash3 values, so a filter over them needs no hashing of its own: a key the
filter has never been given is certainly absent, and its read is skipped; a key it may hold is
read as before. The decisions cannot change (a false positive only costs the read it would have
made anyway); ``tests/test_keyfilter.py`` checks that no added key is ever reported absent.

Why our own: the Bloom filter packages on PyPI (pybloom-live, rbloom, bloom-filter2) hash each
key with a Python call, which is the per-key cost this filter exists to avoid; here a batch of
keys is one numpy array and each operation is vectorized.

Layout: one 64-bit word per key ("register-blocked"), the word chosen by the key's low 32 bits,
five bits in it chosen by five 6-bit fields of its high 32 bits. At :data:`BITS_PER_KEY` = 10
about 2% of absent keys are reported as maybe present. A filter that is full gets a successor
twice its size (a key is looked up in each); past :data:`MAX_BYTES` the filter stops filtering
(every key "may be present") instead of growing: memory stays bounded and decisions stay exact.
"""

from __future__ import annotations

import numpy as np

#: Bits of filter per key it is sized for (RocksDB's own default for its table filters).
BITS_PER_KEY = 10
#: Keys the first filter holds at least.
MIN_CAPACITY = 1 << 16
#: Memory bound of all filters together (about 30 million keys, the tables doubling); beyond it
#: nothing is filtered.
MAX_BYTES = 64 << 20
_FIELDS = (32, 38, 44, 50, 56)  # five 6-bit fields of the high half of a key


def as_words(keys: bytes) -> np.ndarray:
    """Concatenated 8-byte keys as a uint64 array (native byte order; any fixed order works)."""
    return np.frombuffer(keys, dtype=np.uint64)


def _masks(words: np.ndarray) -> np.ndarray:
    one = np.uint64(1)
    six = np.uint64(63)
    mask = np.zeros(words.shape[0], dtype=np.uint64)
    for shift in _FIELDS:
        mask |= one << ((words >> np.uint64(shift)) & six)
    return mask


class KeyFilter:
    """A set of 64-bit hash keys that answers "certainly absent" or "maybe present".

    Args:
        expected: Keys expected to be added (the first filter is sized for twice as many).

    """

    def __init__(self, expected: int = 0) -> None:
        self._tables: list[np.ndarray] = []
        self._held = 0  # keys added to the newest table
        self._capacity = 0  # keys the newest table is sized for
        self.saturated = False
        self._grow(max(MIN_CAPACITY, 2 * expected))

    @property
    def nbytes(self) -> int:
        """Memory of the filter's tables."""
        return sum(t.nbytes for t in self._tables)

    def saturate(self) -> None:
        """Stop filtering: every key may be present from now on (the memory is freed)."""
        self.saturated = True
        self._tables = []
        self._held = 0

    def _grow(self, capacity: int) -> None:
        words = 1 << max(0, int(np.ceil(np.log2(capacity * BITS_PER_KEY / 64))))
        if self.nbytes + 8 * words > MAX_BYTES:
            self.saturate()
            return
        self._tables.append(np.zeros(words, dtype=np.uint64))
        self._held = 0
        self._capacity = capacity

    def add(self, words: np.ndarray) -> None:
        """Add keys (:func:`as_words`); duplicates and keys already held are fine."""
        if self.saturated or words.shape[0] == 0:
            return
        if self._held + words.shape[0] > self._capacity:
            self._grow(2 * max(self._capacity, words.shape[0]))
            if self.saturated:
                return
        table = self._tables[-1]
        index = (words & np.uint64(0xFFFFFFFF)) & np.uint64(table.shape[0] - 1)
        np.bitwise_or.at(table, index, _masks(words))
        self._held += words.shape[0]

    def maybe_present(self, words: np.ndarray) -> np.ndarray:
        """Per key (:func:`as_words`): False if it was certainly never added, else True."""
        if self.saturated:
            return np.ones(words.shape[0], dtype=bool)
        masks = _masks(words)
        low = words & np.uint64(0xFFFFFFFF)
        found = np.zeros(words.shape[0], dtype=bool)
        for table in self._tables:
            found |= (table[low & np.uint64(table.shape[0] - 1)] & masks) == masks
        return found

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The filter as arrays: :meth:`from_arrays` gives it back."""
        return {
            "words": np.concatenate(self._tables) if self._tables else np.zeros(0, dtype=np.uint64),
            "sizes": np.array([t.shape[0] for t in self._tables], dtype=np.int64),
            "counts": np.array([self._held, self._capacity, int(self.saturated)], dtype=np.int64),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> KeyFilter:
        """A filter saved by :meth:`to_arrays` (ValueError if the arrays do not fit together)."""
        words, sizes = arrays["words"], arrays["sizes"].tolist()
        held, capacity, saturated = arrays["counts"].tolist()
        if sum(sizes) != words.shape[0] or any(n < 1 or n & (n - 1) for n in sizes) or (not sizes and not saturated):
            raise ValueError("the saved filter tables do not fit together")
        keys = cls.__new__(cls)
        ends = np.cumsum(sizes).tolist()
        keys._tables = [words[a:b].astype(np.uint64) for a, b in zip([0, *ends[:-1]], ends, strict=True)]
        keys._held, keys._capacity, keys.saturated = int(held), int(capacity), bool(saturated)
        return keys
