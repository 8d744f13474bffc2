"""Every metric a worker exports has its row in docs/worker.md's metric table (an SRE reads it there)."""

from __future__ import annotations

import re
from pathlib import Path

from stream_dedupe.worker.metrics import WorkerMetrics

DOCS = Path(__file__).parents[1] / "docs" / "worker.md"


def test_every_exported_metric_is_in_the_table_and_no_other() -> None:
    suffix = {"counter": "_total", "info": "_info"}
    exported = {family.name + suffix.get(family.type, "") for family in WorkerMetrics().registry.collect()}
    documented = set(re.findall(r"^\| `(stream_dedupe_[a-z_]+)", DOCS.read_text(), re.MULTILINE))
    assert exported - documented == set(), "exported, not in docs/worker.md's table"
    assert documented - exported == set(), "in docs/worker.md's table, not exported"


def test_labelled_counters_export_every_series_from_the_start() -> None:
    text = WorkerMetrics().render().decode()
    for series in (
        'stream_dedupe_documents_total{outcome="duplicate"} 0.0',
        'stream_dedupe_invalid_records_total{reason="not-json"} 0.0',
        'stream_dedupe_signed_documents_total{stage="decide"} 0.0',
        'stream_dedupe_index_changes_total{change="left"} 0.0',
    ):
        assert series in text


def test_the_duplicate_ratio_counts_pages_an_arrival_outranks() -> None:
    from collections import Counter

    metrics = WorkerMetrics()
    # a newer copy of an indexed page is "new", and the page it replaces leaves the index
    events = [
        {"event": "new", "id": "a"},
        {"event": "new", "id": "a2"},
        {"event": "cover-changed", "id": "a2", "entered": [], "left": [{"id": "a"}], "moved": []},
        {"event": "duplicate-of", "id": "a3"},
        {"event": "new", "id": "b"},
    ]
    metrics.record_batch(events, Counter(documents=4), 5)
    text = metrics.render().decode()
    assert "stream_dedupe_duplicate_ratio 0.5" in text  # a and a3 dropped, of four
    assert 'stream_dedupe_index_changes_total{change="left"} 1.0' in text


def test_build_info_names_the_app_and_only_when_it_is_known() -> None:
    from stream_dedupe import __version__

    text = WorkerMetrics("crawl-a", "exactly_once").render().decode()
    line = next(x for x in text.splitlines() if x.startswith("stream_dedupe_build_info{"))
    assert 'app_id="crawl-a"' in line and f'version="{__version__}"' in line, line
    assert 'processing_guarantee="exactly_once"' in line and line.endswith(" 1.0"), line
    # no app id (the metric table's test, a registry built for its names): no series with empty labels
    assert "stream_dedupe_build_info{" not in WorkerMetrics().render().decode()
