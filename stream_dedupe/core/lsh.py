"""LSH banding: parameter choice and band keys with an explicit byte order."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from stream_dedupe.core import pure_kernels
from stream_dedupe.core.jit import njit
from stream_dedupe.errors import ConfigError

#: Weights (false positive, false negative) given to datasketch's parameter optimizer. Recall is
#: what banding can lose for good; precision is restored by verification, so misses cost more.
FP_FN_WEIGHTS = (0.5, 0.5)


#: :func:`choose_bands` of the usual LSH thresholds (threshold - margin, rounded to 6 digits) and
#: sizes, computed once by ``lsh_params.optimal_layout``: the quadrature costs ~20 ms of every
#: start-up. ``tests/test_startup.py`` checks each entry against it and against datasketch.
KNOWN_LAYOUTS: dict[tuple[float, int], tuple[int, int]] = {
    (0.5, 64): (14, 4), (0.5, 128): (25, 5), (0.5, 256): (42, 6),
    (0.55, 64): (12, 5), (0.55, 128): (21, 6), (0.55, 256): (36, 7),
    (0.6, 64): (10, 6), (0.6, 128): (18, 7), (0.6, 256): (32, 8),
    (0.65, 64): (9, 7), (0.65, 128): (16, 8), (0.65, 256): (28, 9),
    (0.7, 64): (8, 8), (0.7, 128): (14, 9), (0.7, 256): (25, 10),
    (0.75, 64): (7, 9), (0.75, 128): (11, 11), (0.75, 256): (21, 12),
}  # fmt: skip


@lru_cache(maxsize=64)
def choose_bands(lsh_threshold: float, num_perm: int) -> tuple[int, int]:
    """Pick ``(bands, rows)`` for an LSH threshold with datasketch's FP/FN weighting.

    Args:
        lsh_threshold: Jaccard similarity at which the band S-curve is centred (the decision
            threshold minus the over-return margin).
        num_perm: Number of MinHash permutations.

    Returns:
        ``(bands, rows)`` with ``bands * rows <= num_perm``.

    """
    if not 0.0 < lsh_threshold < 1.0:
        raise ConfigError(
            f"the LSH threshold (threshold - lsh_margin) must be in (0, 1), got {lsh_threshold}: "
            "lower --lsh-margin or raise --threshold"
        )
    known = KNOWN_LAYOUTS.get((lsh_threshold, num_perm))
    if known is not None:
        return known
    from stream_dedupe.core.lsh_params import optimal_layout

    layout = optimal_layout(lsh_threshold, num_perm, FP_FN_WEIGHTS)  # the same choice, without scipy
    if layout is not None:
        return layout
    from datasketch import MinHashLSH

    lsh = MinHashLSH(threshold=lsh_threshold, num_perm=num_perm, weights=FP_FN_WEIGHTS)
    return int(lsh.b), int(lsh.r)


def candidate_probability(similarity: float, bands: int, rows: int) -> float:
    """P(two documents share at least one band | their Jaccard similarity): the LSH S-curve."""
    return float(1.0 - (1.0 - similarity**rows) ** bands)


@njit(cache=True, pure=pure_kernels.band_hashes)
def _band_hashes(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:  # pragma: no cover - jit
    n = signatures.shape[0]
    out = np.empty((n, bands), dtype=np.uint64)
    for d in range(n):
        for band in range(bands):
            h = np.uint64(0x9E3779B97F4A7C15) ^ np.uint64(band)
            for r in range(band * rows, (band + 1) * rows):
                h = h ^ np.uint64(signatures[d, r])
                h = h * np.uint64(0xFF51AFD7ED558CCD)
                h = h ^ (h >> np.uint64(33))
            h = h * np.uint64(0xC4CEB9FE1A85EC53)
            out[d, band] = h ^ (h >> np.uint64(29))
    return out


def band_hashes(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """``(n, bands)`` uint64 hashes of each band of each signature (byte-order independent)."""
    out: np.ndarray = _band_hashes(np.ascontiguousarray(signatures, dtype=np.uint32), bands, rows)
    return out


def band_keys(signatures: np.ndarray, bands: int, rows: int) -> list[list[bytes]]:
    """Band keys of each signature: 2-byte big-endian band index + 8-byte big-endian band hash.

    The hash is computed on the integer values of the rows, so keys are the same on any host
    byte order (unlike datasketch's ``byteswap`` keys).

    Args:
        signatures: ``(n, num_perm)`` uint32 signatures.
        bands: Number of bands.
        rows: Rows per band.

    Returns:
        For each document, its ``bands`` keys of 10 bytes.

    """
    hashes = band_hashes(signatures, bands, rows)
    packed = np.empty(hashes.shape, dtype=[("band", ">u2"), ("hash", ">u8")])
    packed["band"] = np.arange(bands, dtype=np.uint16)
    packed["hash"] = hashes
    raw = packed.tobytes()
    width = 10 * bands
    return [[raw[o + 10 * i : o + 10 * i + 10] for i in range(bands)] for o in range(0, len(raw), width)]
