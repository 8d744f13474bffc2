"""``stream-dedupe stats`` and ``Deduper.stats``: what a state holds, checked against the other outputs."""

from __future__ import annotations

import gzip
import json
import os
import random
import signal
import subprocess
import tempfile
import time
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from stream_dedupe import Deduper

from .helpers import promtool
from .test_cli import CLI, cli
from .test_cli import read_jsonl as jsonl

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "crawl-sample.jsonl"


SCHEMA = jsonschema.Draft202012Validator(
    json.loads(resources.files("stream_dedupe").joinpath("schema/stats.schema.json").read_text())
)


def stats_json(state: Path, *extra: str) -> dict[str, Any]:
    """``stats --json``, validated against the published schema."""
    got = dict(orjson.loads(cli("stats", "--state", str(state), "--json", *extra).stdout))
    SCHEMA.validate(got)
    return got


def test_stats_agree_with_the_events_the_deduped_set_and_the_clusters(tmp_path: Path) -> None:
    state, events, deduped = tmp_path / "s", tmp_path / "events.jsonl", tmp_path / "deduped.jsonl"
    run = cli("dedupe", str(SAMPLE), "--state", str(state), "--events", str(events), "--deduped", str(deduped))
    clusters_out = tmp_path / "clusters.jsonl"
    cli("clusters", "--state", str(state), "--min-size", "1", "-o", str(clusters_out))
    got = stats_json(state, "--by-source")

    emitted = jsonl(events)
    ids = {e["id"] for e in emitted if e["event"] in ("new", "duplicate-of")}
    clusters = jsonl(clusters_out)
    covered = {doc: rep for c in clusters for doc, rep in c["covered_by"].items()}
    held = Counter(covered.values())
    assert got["documents"] == len(ids) == 400
    assert got["representatives"] == len(deduped.read_bytes().splitlines()) == len(ids) - len(covered)
    assert got["dropped"] == len(covered) and got["dropped_rate"] == pytest.approx(len(covered) / len(ids))
    assert got["clusters"] == len(clusters)
    assert got["clusters_with_duplicates"] == sum(c["size"] >= 2 for c in clusters)
    assert got["largest_cluster"] == max(c["size"] for c in clusters)
    assert got["largest_cover"] == 1 + max(held.values())
    assert got["events"] == len(emitted) == emitted[-1]["seq"]
    assert got["unfinished_run"] is None
    assert got["params"]["threshold"] == 0.8 and got["params"]["bands"] * got["params"]["rows"] <= 128
    # what the files took while the command had the state open (RocksDB writes its LOG at each open)
    tables = sum(f.stat().st_size for f in state.glob("*.sst"))
    assert tables > 0 and tables <= got["disk_bytes"] <= 2 * sum(f.stat().st_size for f in state.iterdir())

    # the end of the run counted the same state the same way
    summary = dict(line.strip().rsplit(None, 1) for line in run.stderr.splitlines()[-22:] if "  " in line.strip())
    assert summary["documents in state"] == f"{got['documents']:,}"
    assert summary["representatives (the deduped set)"] == f"{got['representatives']:,}"
    assert summary["clusters"] == f"{got['clusters']:,}"

    # per source, from the input's own sources
    source_of = {d["id"]: d.get("source") or "" for d in (orjson.loads(x) for x in _documents(SAMPLE))}
    by_source = got["sources"]
    assert {name: s["documents"] for name, s in by_source.items()} == Counter(source_of[i] for i in ids)
    assert {name: s["dropped"] for name, s in by_source.items()} == {
        name: sum(source_of[d] == name for d in covered) for name in by_source
    }
    assert stats_json(state)["sources"] is None  # only when asked for


def _documents(path: Path) -> list[bytes]:
    """The sample's lines that are documents (it has two bad lines on purpose)."""
    out = []
    for line in path.read_bytes().splitlines():
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict) and isinstance(value.get("id"), str) and isinstance(value.get("text"), str):
            out.append(line)
    return out


def test_stats_count_the_learned_lines_as_the_boilerplate_command_lists_them(tmp_path: Path) -> None:
    footers = {"wiki": "this page is maintained by the platform team please ask in chat", "portal": None}
    docs = []
    for i in range(12):
        source = "wiki" if i % 2 else "portal"
        body = f"page {i} talks about " + " ".join(f"topic{i}x{j}" for j in range(30))
        footer = footers[source] or "copyright the portal company all rights reserved worldwide"
        docs.append({"id": f"{source}-{i}", "source": source, "text": f"{body}\n{footer}\nsee also the index page\n"})
    corpus = tmp_path / "in.jsonl"
    corpus.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in docs))
    state = tmp_path / "s"
    cli("dedupe", str(corpus), "--state", str(state), "--boilerplate-min-docs", "3", "--no-progress")
    listed = [orjson.loads(line) for line in cli("boilerplate", "--state", str(state)).stdout.splitlines()]
    assert len(listed) == 4  # each source: its footer and the "see also" line

    got = stats_json(state, "--by-source")
    assert got["learned_lines"] == len(listed)
    assert {name: s["learned_lines"] for name, s in got["sources"].items()} == Counter(x["source"] for x in listed)
    assert got["params"]["boilerplate"] == {"learn": True, "min_docs": 3, "min_tokens": 3}

    # the same lines listed while a Python Deduper holds the state (read without its lock)
    held = tmp_path / "held"
    with Deduper.open(held, boilerplate_min_docs=3) as dd:
        dd.add_many(docs)
        live = cli("boilerplate", "--state", str(held))
        assert "in use by another stream-dedupe process" in live.stderr
        assert sorted(live.stdout.splitlines()) == sorted(cli("boilerplate", "--state", str(state)).stdout.splitlines())

    off = tmp_path / "off"
    cli("dedupe", str(corpus), "--state", str(off), "--no-learn-boilerplate", "--no-progress")
    assert stats_json(off)["learned_lines"] == 0
    assert "learned boilerplate lines" in (text := cli("stats", "--state", str(off)).stdout) and "off" in text


def test_stats_say_where_an_unfinished_run_stopped(tmp_path: Path) -> None:
    docs = [{"id": f"d{i}", "text": " ".join(f"w{(i * 7 + j) % 997}" for j in range(40))} for i in range(3000)]
    whole = gzip.compress(b"".join(orjson.dumps(d) + b"\n" for d in docs))
    corpus = tmp_path / "crawl.jsonl.gz"
    corpus.write_bytes(whole[: len(whole) * 2 // 3])  # a download cut short
    state = tmp_path / "s"
    first = cli("dedupe", str(corpus), "--state", str(state), "--batch-size", "100", "--no-progress", check=False)
    assert first.returncode == 2, first.stderr
    got = stats_json(state)
    assert got["unfinished_run"]["path"] == os.path.realpath(corpus)
    assert got["documents"] == got["unfinished_run"]["line"] > 500  # every whole line read was committed
    text = cli("stats", "--state", str(state)).stdout
    assert f"last run: unfinished, committed up to line {got['documents']:,} of {os.path.realpath(corpus)}" in text


def test_the_python_api_counts_what_the_command_counts(tmp_path: Path) -> None:
    state = tmp_path / "s"
    with Deduper.open(state) as dd:
        dd.add_many(orjson.loads(line) for line in _documents(SAMPLE))
        from_api = dd.stats(by_source=True)
        assert from_api.documents == 400 and from_api.dropped == from_api.documents - from_api.representatives
        assert sum(s.documents for s in (from_api.sources or {}).values()) == 400
        expected = from_api.to_json()
        SCHEMA.validate(expected)
    from_cli = stats_json(state, "--by-source")
    for field in ("documents", "representatives", "clusters", "largest_cluster", "largest_cover", "events", "sources"):
        assert from_cli[field] == expected[field], field
    in_memory = Deduper.memory().stats().to_json()
    SCHEMA.validate(in_memory)
    assert in_memory["disk_bytes"] is None and in_memory["documents"] == 0


def test_stats_read_a_state_that_a_deduper_holds_as_it_committed_it(tmp_path: Path) -> None:
    """The lock holder's committed batches (written with the log) are read without its lock, by
    stats, clusters and boilerplate; a command that writes is told to wait, not to stop its user."""
    state = tmp_path / "s"
    docs = [orjson.loads(line) for line in _documents(SAMPLE)]
    with Deduper.open(state) as dd:
        dd.add_many(docs[:150])
        first = stats_json(state)
        assert first["live"] is True and first["documents"] == 150 and first["unfinished_run"] is None
        dd.add_many(docs[150:])
        during = stats_json(state, "--by-source")
        assert during["live"] is True and during["documents"] == 400
        text = cli("stats", "--state", str(state)).stdout
        assert "(in use by another process: as it had persisted it)" in text and "run: none on disk (a Python" in text
        live_reads = {}
        for command in ("clusters", "boilerplate"):
            result = cli(command, "--state", str(state))
            assert "is in use by another stream-dedupe process: read as that process last wrote it" in result.stderr
            live_reads[command] = result.stdout
        assert len(live_reads["clusters"].splitlines()) == during["clusters_with_duplicates"] > 0
        first_cluster = orjson.loads(live_reads["clusters"].splitlines()[0])
        pair = first_cluster["members"][:2]
        explained = cli("explain", *pair, "--state", str(state))
        assert "in use by another stream-dedupe process" in explained.stderr and pair[0] in explained.stdout
        result = cli("expire", "--state", str(state), "--max-age", "=1d", check=False)
        assert result.returncode == 2, result.stderr
        assert "is in use by another stream-dedupe process" in result.stderr
        assert "run this command again once it has finished" in result.stderr and "stop that" not in result.stderr
    after = stats_json(state, "--by-source")
    for command, listed in live_reads.items():  # what was read live is what the closed state holds
        result = cli(command, "--state", str(state))
        assert result.stdout == listed and "in use" not in result.stderr, command
    assert after.pop("live") is False and during.pop("live") is True
    after.pop("disk_bytes"), during.pop("disk_bytes")
    assert after == during


def test_stats_follow_a_running_dedupe_at_its_flushes(tmp_path: Path) -> None:
    """A run without the log is read as of its last flush: the documents and its checkpoint agree."""
    rng = random.Random(5)
    words = [f"w{i}" for i in range(5000)]
    corpus = tmp_path / "crawl.jsonl"
    with corpus.open("wb") as out:
        for i in range(80_000):
            out.write(orjson.dumps({"id": f"d{i}", "text": " ".join(rng.choices(words, k=150))}) + b"\n")
    state = tmp_path / "s"
    readers = set(Path(tempfile.gettempdir()).glob("stream-dedupe-reader-*"))
    args = [*CLI, "dedupe", str(corpus), "--state", str(state), "--no-progress", "--jobs", "1"]
    run = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        seen = None
        while run.poll() is None and seen is None:
            result = cli("stats", "--state", str(state), "--json", check=False)
            if result.returncode == 0:
                got = orjson.loads(result.stdout)
                if got["live"] and got["documents"]:
                    seen = got
            time.sleep(0.1)
        assert seen is not None, "the run ended before a flush was seen: give it a bigger corpus"
        SCHEMA.validate(seen)
        run.send_signal(signal.SIGSTOP)  # held where it is, so that the text below reads the same run
        try:
            text = cli("stats", "--state", str(state)).stdout
            gauges = cli("stats", "--state", str(state), "--prometheus", "-").stdout
        finally:
            run.send_signal(signal.SIGCONT)
        assert "(in use by another process: as it had persisted it)" in text and "run: in progress, persisted" in text
        values = {s.name: s.value for f in text_string_to_metric_families(gauges) for s in f.samples}
        assert values["stream_dedupe_state_in_use"] == 1 and values["stream_dedupe_state_run_unfinished"] == 1
        assert values["stream_dedupe_state_run_line"] == values["stream_dedupe_state_documents"] >= seen["documents"]
        assert seen["unfinished_run"] == {"path": os.path.realpath(corpus), "line": seen["documents"]}
        assert 0 < seen["documents"] < 80_000
    finally:
        _, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr
    done = stats_json(state)
    assert done["live"] is False and done["documents"] == 80_000 and done["unfinished_run"] is None
    assert set(Path(tempfile.gettempdir()).glob("stream-dedupe-reader-*")) <= readers  # their own logs are gone


def test_stats_as_prometheus_gauges_pass_promtool_and_equal_the_json(tmp_path: Path) -> None:
    """For node_exporter's textfile collector: the file promtool accepts, holding the JSON's numbers."""
    state = tmp_path / "s"
    cli("dedupe", str(SAMPLE), "--state", str(state), "--no-progress")
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    prom = textfiles / "stream_dedupe.prom"
    written = cli("stats", "--state", str(state), "--by-source", "--prometheus", str(prom))
    assert written.stdout == "" and list(textfiles.iterdir()) == [prom]  # a cron job's file, no partial one
    check = subprocess.run([promtool(), "check", "metrics"], input=prom.read_text(), capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr

    got = stats_json(state, "--by-source")
    samples = [s for family in text_string_to_metric_families(prom.read_text()) for s in family.samples]
    assert {s.labels["state"] for s in samples} == {str(state.resolve())}
    whole = {s.name: s.value for s in samples if "source" not in s.labels}
    assert whole == {
        "stream_dedupe_state_documents": got["documents"],
        "stream_dedupe_state_representatives": got["representatives"],
        "stream_dedupe_state_dropped": got["dropped"],
        "stream_dedupe_clusters": got["clusters"],
        "stream_dedupe_state_clusters_with_duplicates": got["clusters_with_duplicates"],
        "stream_dedupe_largest_cluster_size": got["largest_cluster"],
        "stream_dedupe_state_largest_cover": got["largest_cover"],
        "stream_dedupe_state_learned_lines": got["learned_lines"],
        "stream_dedupe_state_events": got["events"],
        "stream_dedupe_state_bytes": pytest.approx(got["disk_bytes"], rel=0.2),  # RocksDB logs each open
        "stream_dedupe_state_run_unfinished": 0,
        "stream_dedupe_state_run_line": 0,
        "stream_dedupe_state_in_use": 0,
    }
    per_source = {(s.name, s.labels["source"]): s.value for s in samples if "source" in s.labels}
    assert per_source == {
        (f"stream_dedupe_state_source_{field}", source): counts[field]
        for source, counts in got["sources"].items()
        for field in ("documents", "dropped", "learned_lines")
    }
    both = cli("stats", "--state", str(state), "--json", "--prometheus", "-", check=False)
    assert both.returncode == 2 and "both write to stdout" in both.stderr


def test_stats_give_every_stored_parameter_as_its_flag_and_the_index_shards(tmp_path: Path) -> None:
    state = tmp_path / "state"
    flags = ["--min-tokens", "5", "--boilerplate-min-tokens", "7", "--no-title-guard", "--seed", "3"]
    flags += ["--source-threshold", "wiki=0.9", "--strip-pattern", "Page [0-9]+ of", "--index-shards", "2"]
    cli("dedupe", str(SAMPLE), "--state", str(state), "--no-progress", *flags)
    got = stats_json(state)
    assert got["index_shards"] == 2 and got["params"]["min_tokens"] == 5
    text = cli("stats", "--state", str(state)).stdout
    assert text.startswith(f"state directory {state}\n")
    listed = text.split("parameters (stored in the state; a run on it takes them from there):\n", 1)[1]
    for expected in (
        "--min-tokens 5",
        "--boilerplate-min-tokens 7",
        "--no-title-guard",
        "--seed 3",
        "--source-threshold wiki=0.9",
        "--strip-pattern 'Page [0-9]+ of'",
        "--index-shards 2",
        "--threshold 0.8",
        "--verify exact",
    ):
        assert expected in listed, expected
    unsharded = tmp_path / "plain"
    cli("dedupe", str(SAMPLE), "--state", str(unsharded), "--no-progress")
    assert stats_json(unsharded)["index_shards"] == 1
