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


def test_dedupes_switches_are_taken_by_the_worker_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--no-title-guard`` and ``--no-learn-boilerplate`` (dedupe's spelling) stand for the worker's settings."""
    from stream_dedupe.worker.cli import settings_from_flags

    for var in ("STREAM_DEDUPE_TITLE_GUARD", "STREAM_DEDUPE_BOILERPLATE_MIN_DOCS"):
        monkeypatch.delenv(var, raising=False)
    plain = settings_from_flags({"title_guard": None, "no_title_guard": False, "no_learn_boilerplate": False})
    assert plain.params(None).title_guard and plain.params(None).boilerplate.learn
    off = settings_from_flags({"no_title_guard": True, "no_learn_boilerplate": True})
    assert off.title_guard == "off" and off.boilerplate_min_docs == 0
    assert not off.params(None).title_guard and not off.params(None).boilerplate.learn
    same = settings_from_flags({"title_guard": "off", "no_title_guard": True})
    assert same.title_guard == "off"
    with pytest.raises(WorkerConfigError, match="--no-title-guard and --title-guard on contradict"):
        settings_from_flags({"title_guard": "on", "no_title_guard": True})
    with pytest.raises(WorkerConfigError, match="--no-learn-boilerplate and --boilerplate-min-docs 50"):
        settings_from_flags({"boilerplate_min_docs": 50, "no_learn_boilerplate": True})
