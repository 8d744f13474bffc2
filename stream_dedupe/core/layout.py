"""The LSH band layout of a parameter set: the core's choice, not the configuration's.

:class:`~stream_dedupe.config.DedupeParams` holds numbers only; when ``bands`` and ``rows`` are
left at 0 they are chosen here, from the LSH threshold, with datasketch's weighting
(:func:`stream_dedupe.core.lsh.choose_bands`).
"""

from __future__ import annotations

import dataclasses

from stream_dedupe.config import DedupeParams
from stream_dedupe.core.lsh import choose_bands


def band_layout(params: DedupeParams) -> tuple[int, int]:
    """``(bands, rows)``: the explicit ones, or those datasketch's MinHashLSH picks for the LSH threshold.

    Raises:
        ConfigError: if the LSH threshold (threshold - lsh_margin) is not in (0, 1).

    """
    if params.bands:
        return params.bands, params.rows
    return choose_bands(params.lsh_threshold, params.num_perm)


def resolve(params: DedupeParams) -> DedupeParams:
    """Return a copy of ``params`` with ``bands`` and ``rows`` filled in (itself when they are)."""
    if params.bands:
        return params
    bands, rows = band_layout(params)
    return dataclasses.replace(params, bands=bands, rows=rows)
