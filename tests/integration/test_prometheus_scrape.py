"""A real Prometheus server scrapes a running worker while documents flow, and is queried for the dedup metrics.

Prometheus (Debian package ``prometheus``, installed by ``make tools``) runs on 127.0.0.1 with a
free port, a temporary config (scrape and rule evaluation every 1 s, job ``stream-dedupe`` like
the alert rules expect) and storage dir, and ``deploy/prometheus/alerts.yaml`` as its rule file;
it is stopped by PID. Documents are sent in two waves (so that counters *increase* between
scrapes, which ``rate()`` needs), with exact duplicates and bad records.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.integration.conftest import REPO, Broker, Names, free_port, produce

ALERTS = REPO / "deploy" / "prometheus" / "alerts.yaml"
JOB = "stream-dedupe"  # the job name the alert rules select on


class Prometheus:
    """A Prometheus server process and its HTTP API."""

    def __init__(self, tmp: Path, target: str) -> None:
        exe = shutil.which("prometheus")
        assert exe, "prometheus is not installed: run `make tools` (Debian package prometheus)"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(ALERTS)],
            "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": [target]}]}],
        }
        (tmp / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        self.log_path = tmp / "prometheus.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    exe,
                    f"--config.file={tmp / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def get(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=5) as r:
            return json.loads(r.read())

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"prometheus exited:\n{self.log_path.read_text()[-3000:]}"
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                if r.status == 200:
                    return
            time.sleep(0.2)
        raise AssertionError(f"prometheus not ready after {timeout}s:\n{self.log_path.read_text()[-3000:]}")

    def query(self, expr: str) -> dict[str, float]:
        """Instant query: {labels as 'k=v,...': value} of a vector result."""
        answer = self.get("/api/v1/query", query=expr)
        assert answer["status"] == "success", answer
        result = answer["data"]["result"]
        if answer["data"]["resultType"] == "scalar":
            return {"": float(result[1])}
        return {
            ",".join(f"{k}={v}" for k, v in sorted(r["metric"].items()) if k != "__name__"): float(r["value"][1])
            for r in result
        }

    def wait_for(self, expr: str, predicate: Any, what: str, timeout: float = 60.0) -> dict[str, float]:
        deadline = time.monotonic() + timeout
        last: dict[str, float] = {}
        while time.monotonic() < deadline:
            last = self.query(expr)
            if predicate(last):
                return last
            time.sleep(0.5)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}: {expr} = {last}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def prometheus_for(tmp_path: Path) -> Iterator[Any]:
    servers: list[Prometheus] = []

    def start(target: str) -> Prometheus:
        (tmp_path / "prom").mkdir()
        server = Prometheus(tmp_path / "prom", target)
        servers.append(server)
        server.wait_ready()
        return server

    yield start
    for server in servers:
        server.stop()


def doc(i: int) -> bytes:
    words = " ".join(f"w{(i * 97 + j * 13) % 5003}" for j in range(60))
    return orjson.dumps({"id": f"d{i}", "text": f"document {i} {words}"})


def wave(first: int, n: int, copies: int, bad: list[bytes]) -> list[tuple[bytes | None, bytes | None]]:
    """Originals first, then exact copies under ids that sort after theirs, then bad lines."""
    records: list[tuple[bytes | None, bytes | None]] = [(f"d{i}".encode(), doc(i)) for i in range(first, first + n)]
    for i in range(first, first + copies):
        records.append((f"r{i}".encode(), orjson.dumps({**orjson.loads(doc(i)), "id": f"r{i}"})))
    return records + [(None, raw) for raw in bad]


def produce_in_order(
    bootstrap: str,
    topic: str,
    records: list[tuple[bytes | None, bytes | None]],
    prom: Any,
    decided: str,
    before: int,
    n: int,
) -> None:
    """Originals, then (once they are decided) the rest: a copy that arrives second is a duplicate-of."""
    produce(bootstrap, topic, records[:n])
    prom.wait_for(decided, lambda v: total(v) == before + n, "originals in Prometheus")
    produce(bootstrap, topic, records[n:])


def total(values: dict[str, float]) -> float:
    return sum(values.values())


def test_prometheus_scrapes_worker_and_loads_alert_rules(
    broker: Broker, names: Names, workers: Any, prometheus_for: Any
) -> None:
    w = workers().start()
    w.wait_ready()
    prom = prometheus_for(f"127.0.0.1:{w.web_port}")
    prom.wait_for(f'up{{job="{JOB}"}}', lambda v: list(v.values()) == [1.0], "the worker target to be up")
    latency_count = f'stream_dedupe_decision_latency_seconds_count{{job="{JOB}"}}'
    prom.wait_for(latency_count, lambda v: list(v.values()) == [0.0], "a scrape before any document")

    decided = f'stream_dedupe_documents_total{{job="{JOB}"}}'
    first = wave(0, 20, 4, [b"not json at all", b'{"text": "no id"}'])
    produce_in_order(broker.bootstrap, names.input, first, prom, decided, 0, 20)
    prom.wait_for(decided, lambda v: total(v) == len(first), "wave 1 in Prometheus")
    second = wave(20, 20, 5, [b'{"id": 5, "text": "the id must be a string"}', b"{broken"])
    produce_in_order(broker.bootstrap, names.input, second, prom, decided, len(first), 20)
    prom.wait_for(decided, lambda v: total(v) == len(first) + len(second), "wave 2 in Prometheus")

    by_outcome = {k.rpartition("outcome=")[2].split(",")[0]: v for k, v in prom.query(decided).items()}
    # every outcome and reason is a series from the start (0 until its first record)
    assert by_outcome == {"new": 40.0, "duplicate": 9.0, "invalid": 4.0, "unchanged": 0.0, "deleted": 0.0}
    invalid = prom.query(f'sum by (reason) (stream_dedupe_invalid_records_total{{job="{JOB}"}} > 0)')
    assert invalid == {"reason=not-json": 2.0, "reason=missing-id": 1.0, "reason=bad-id": 1.0}
    assert prom.query(latency_count) == {f"instance=127.0.0.1:{w.web_port},job={JOB}": 53.0}
    # the one series that names the app: its id, release and guarantee
    from stream_dedupe import __version__

    build = prom.query(f'stream_dedupe_build_info{{job="{JOB}"}}')
    assert build == {
        f"app_id={names.app_id},instance=127.0.0.1:{w.web_port},job={JOB},processing_guarantee=at_least_once,"
        f"version={__version__}": 1.0
    }, build

    # rate() and histogram_quantile() over the decision latency: a finite number of seconds
    buckets = f'stream_dedupe_decision_latency_seconds_bucket{{job="{JOB}"}}'
    p99 = prom.wait_for(
        f"histogram_quantile(0.99, sum by (le) (rate({buckets}[1m])))",
        lambda v: len(v) == 1 and math.isfinite(total(v)),
        "a latency quantile",
    )
    assert 0 < total(p99) <= 60
    # the duplicate series exists from the start, so the rate counts the first duplicates too
    dup_rate = f'sum(rate(stream_dedupe_documents_total{{job="{JOB}",outcome="duplicate"}}[5m]))'
    assert total(prom.wait_for(dup_rate, lambda v: total(v) > 0, "a duplicate rate")) > 0

    # the alert rules loaded, were evaluated without error; the recording rule has a duplicate share
    expected = re.findall(r"^\s*- (?:alert|record): (\S+)$", ALERTS.read_text(), flags=re.MULTILINE)
    assert len(expected) >= 5, expected

    def all_evaluated() -> list[dict[str, Any]]:
        groups = prom.get("/api/v1/rules")["data"]["groups"]
        return [r for g in groups for r in g["rules"]]

    deadline = time.monotonic() + 30
    rules = all_evaluated()
    while any(r["health"] == "unknown" for r in rules) and time.monotonic() < deadline:
        time.sleep(0.5)
        rules = all_evaluated()
    assert [r["name"] for r in rules] == expected
    assert all(r["health"] == "ok" and not r.get("lastError") for r in rules), rules
    share = prom.wait_for(
        "stream_dedupe:duplicate_rate:1h", lambda v: len(v) == 1 and total(v) > 0, "the recording rule over both waves"
    )
    assert 0 < total(share) < 1
    firing = [a["labels"]["alertname"] for a in prom.get("/api/v1/alerts")["data"]["alerts"]]
    assert "StreamDedupeWorkerDown" not in firing and "StreamDedupeAppsShareJob" not in firing

    # the dashboard's job variable finds this worker, and each of its queries, scoped to it, runs
    dashboard = json.loads((REPO / "deploy" / "grafana" / "stream-dedupe.json").read_text())
    assert JOB in prom.get("/api/v1/label/job/values", **{"match[]": "stream_dedupe_decider"})["data"]
    values = {"$job": JOB, "$namespace": ".*", "$service": ".*"}
    answered = 0
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for name, value in values.items():
                expr = expr.replace(name, value)
            result = prom.get("/api/v1/query", query=expr)
            assert result["status"] == "success", (panel["title"], expr, result)
            answered += bool(result["data"]["result"])
    assert answered >= 10  # the throughput, lag, clusters, state and worker panels have this worker's data
    assert w.stop() == 0
