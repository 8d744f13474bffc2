"""The worker's index settings map onto the engine's parameters like the embedded command's flags."""

from __future__ import annotations

import pytest

from stream_dedupe.config import DedupeParams
from stream_dedupe.core.layout import band_layout
from stream_dedupe.worker.errors import WorkerConfigError
from stream_dedupe.worker.settings import WorkerSettings


def test_defaults_are_the_engines() -> None:
    params = WorkerSettings.load(env={}).params(None)
    assert params == DedupeParams()
    assert params.verify == "exact" and params.title_guard and params.boilerplate.learn


def test_source_thresholds_title_guard_and_verify_from_the_environment() -> None:
    env = {
        "STREAM_DEDUPE_SOURCE_THRESHOLDS": "release-notes=0.95,tickets=0.7",
        "STREAM_DEDUPE_TITLE_GUARD": "off",
        "STREAM_DEDUPE_VERIFY": "estimate",
    }
    params = WorkerSettings.load(env=env).params(DedupeParams())
    assert params.source_thresholds == (("release-notes", 0.95), ("tickets", 0.7))
    assert params.title_guard is False and params.verify == "estimate"
    # the LSH is tuned for the lowest threshold in use
    assert band_layout(params) == band_layout(DedupeParams(threshold=0.7))
    with pytest.raises(WorkerConfigError, match="title_guard"):
        WorkerSettings.load(env={"STREAM_DEDUPE_TITLE_GUARD": "yes"})
