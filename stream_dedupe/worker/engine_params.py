"""The engine's parameters from the worker's settings: explicit settings over the stored ones over the defaults."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from stream_dedupe.config import BoilerplateConfig, DedupeParams, ShingleSpec

if TYPE_CHECKING:
    from stream_dedupe.worker.settings import WorkerSettings


def explicit_params(settings: WorkerSettings) -> dict[str, Any]:
    """The index parameters given explicitly (to merge with those stored in the state)."""
    given: dict[str, Any] = {"threshold": settings.threshold, "num_perm": settings.num_perm}
    if settings.shingle is not None:
        given["shingle"] = ShingleSpec.parse(settings.shingle)
    if settings.boilerplate_min_docs is not None:
        learn = settings.boilerplate_min_docs > 0
        min_docs = settings.boilerplate_min_docs
        given["boilerplate"] = BoilerplateConfig(True, min_docs) if learn else BoilerplateConfig(False)
    if settings.source_thresholds:
        from stream_dedupe.options import source_thresholds

        given["source_thresholds"] = source_thresholds([p for p in settings.source_thresholds.split(",") if p])
    if settings.title_guard is not None:
        given["title_guard"] = settings.title_guard == "on"
    given["verify"] = settings.verify
    return {k: v for k, v in given.items() if v is not None}


def engine_params(settings: WorkerSettings, stored: DedupeParams | None) -> DedupeParams:
    """Parameters for the engine: explicit settings over the stored ones over the defaults.

    Same rule as the embedded command: an explicit threshold or num_perm re-derives the LSH
    bands. The engine then refuses a state built with different parameters.
    """
    base = stored or DedupeParams()
    explicit = explicit_params(settings)
    values = {f.name: getattr(base, f.name) for f in dataclasses.fields(DedupeParams)}
    if explicit.keys() & {"threshold", "num_perm", "source_thresholds"}:
        values.update(bands=0, rows=0)
    values.update(explicit)
    return DedupeParams(**values)
