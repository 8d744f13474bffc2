from __future__ import annotations

import numpy as np
from datasketch import MinHashLSH

from stream_dedupe.config import DedupeParams
from stream_dedupe.core.layout import band_layout
from stream_dedupe.core.lsh import FP_FN_WEIGHTS, band_keys, candidate_probability, choose_bands


def test_band_choice_is_datasketchs() -> None:
    for threshold in (0.5, 0.7, 0.9):
        lsh = MinHashLSH(threshold=threshold, num_perm=128, weights=FP_FN_WEIGHTS)
        assert choose_bands(threshold, 128) == (lsh.b, lsh.r)


def test_default_layout_over_returns() -> None:
    params = DedupeParams()
    bands, rows = band_layout(params)
    # Pairs exactly at the decision threshold are nearly always candidates.
    assert candidate_probability(params.threshold, bands, rows) > 0.97
    assert candidate_probability(params.threshold - params.lsh_margin, bands, rows) > 0.4


def test_band_keys_have_explicit_layout() -> None:
    sig = np.arange(12, dtype=np.uint32).reshape(1, 12)
    keys = band_keys(sig, 3, 4)[0]
    assert len(keys) == 3 and all(len(k) == 10 for k in keys)
    assert [int.from_bytes(k[:2], "big") for k in keys] == [0, 1, 2]
    # Same values in another array byte order give the same keys (no host byte order leaks in).
    swapped = sig.astype(">u4")
    assert band_keys(swapped, 3, 4)[0] == keys


def test_band_keys_change_only_in_changed_band() -> None:
    a = np.arange(12, dtype=np.uint32).reshape(1, 12)
    b = a.copy()
    b[0, 5] += 1
    ka, kb = band_keys(a, 3, 4)[0], band_keys(b, 3, 4)[0]
    assert ka[0] == kb[0] and ka[2] == kb[2] and ka[1] != kb[1]
    # the same band values in a different band index give a different key
    c = np.concatenate([a[:, 4:8], a[:, 0:4], a[:, 8:]], axis=1)
    assert band_keys(c, 3, 4)[0][0] != ka[1]
