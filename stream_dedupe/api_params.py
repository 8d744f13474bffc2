"""Keyword parameters of :class:`~stream_dedupe.api.Deduper`, as the command line's overrides."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from stream_dedupe.config import DedupeParams, NormalizationConfig, ShingleSpec
from stream_dedupe.errors import ConfigError

_FIELDS = {f.name for f in dataclasses.fields(DedupeParams)}
_EXTRA = {
    "learn_boilerplate",
    "boilerplate_min_docs",
    "boilerplate_min_tokens",
    "strip_patterns",
    "header_patterns",
    "footer_patterns",
}


def params_overrides(params: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword parameters as the command line's overrides (None: take the state's value).

    Accepts every :class:`~stream_dedupe.config.DedupeParams` field (``shingle`` also as
    ``"word:3"``, ``source_thresholds`` also as a dict) and the command line's spellings
    ``learn_boilerplate``, ``boilerplate_min_docs``, ``boilerplate_min_tokens``,
    ``strip_patterns``, ``header_patterns`` and ``footer_patterns``.

    Raises:
        ConfigError: for an unknown name.

    """
    from stream_dedupe.options import boilerplate_config

    unknown = sorted(set(params) - _FIELDS - _EXTRA)
    if unknown:
        raise ConfigError(f"unknown parameter(s) {unknown}: use {sorted(_FIELDS | _EXTRA)}")
    out = {k: v for k, v in params.items() if k in _FIELDS}
    if isinstance(out.get("shingle"), str):
        out["shingle"] = ShingleSpec.parse(out["shingle"])
    if isinstance(out.get("source_thresholds"), Mapping):
        out["source_thresholds"] = tuple(sorted(out["source_thresholds"].items()))
    elif out.get("source_thresholds") is not None:
        out["source_thresholds"] = tuple(sorted(tuple(p) for p in out["source_thresholds"]))
    if "boilerplate" not in out:
        out["boilerplate"] = boilerplate_config(
            params.get("learn_boilerplate"), params.get("boilerplate_min_docs"), params.get("boilerplate_min_tokens")
        )
    patterns = [params.get(f"{k}_patterns") for k in ("strip", "header", "footer")]
    if "normalization" not in out and any(p is not None for p in patterns):
        out["normalization"] = NormalizationConfig(*(tuple(p or ()) for p in patterns))
    return out
