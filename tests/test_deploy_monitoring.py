"""Alert rules (promtool) and the Grafana dashboard (every query names an exported metric)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from stream_dedupe.state_metrics import exposition
from stream_dedupe.state_stats import SourceStats, StateStats
from stream_dedupe.worker.metrics import WorkerMetrics

from .helpers import promtool

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


def exported_metric_names() -> set[str]:
    """Sample names the worker's /metrics can contain (histograms expanded)."""
    names = set()
    for line in WorkerMetrics().render().decode().splitlines():
        match = re.match(r"# TYPE (\S+) (\S+)", line)
        if match:
            name, kind = match.groups()
            names.add(name)
            if kind == "histogram":
                names.update({f"{name}_bucket", f"{name}_sum", f"{name}_count"})
            if kind == "counter":
                names.add(name if name.endswith("_total") else f"{name}_total")
    return names


def test_alert_rules_pass_their_unit_tests() -> None:
    check = subprocess.run(
        [promtool(), "check", "rules", str(DEPLOY / "prometheus" / "alerts.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    tests = subprocess.run(
        [promtool(), "test", "rules", "alerts.test.yaml"],
        cwd=DEPLOY / "prometheus",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert tests.returncode == 0 and "SUCCESS" in tests.stdout, tests.stdout + tests.stderr


def embedded_metric_names() -> set[str]:
    """Names ``stream-dedupe stats --prometheus`` writes (for node_exporter's textfile collector)."""
    counted = StateStats(0, 0, 0, 0, 0, 0, 0, 0, None, 0, {}, {"site": SourceStats()})
    text = exposition(counted, Path("state")).decode()
    return set(re.findall(r"^# TYPE (\S+) gauge$", text, flags=re.MULTILINE))


def test_alert_rules_name_exported_metrics() -> None:
    exported = exported_metric_names() | embedded_metric_names()
    text = (DEPLOY / "prometheus" / "alerts.yaml").read_text()
    used = set(re.findall(r"\bstream_dedupe_[a-z_]+", text))
    assert used and used <= exported, used - exported


def test_dashboard_structure_and_every_query_names_an_exported_metric() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "stream-dedupe.json").read_text())
    assert dashboard["uid"] == "stream-dedupe" and dashboard["panels"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    exported = exported_metric_names()
    titles = " ".join(p["title"].lower() for p in dashboard["panels"])
    for needed in ("throughput", "duplicate rate", "latency", "lag", "clusters", "dead letters", "state size"):
        assert needed in titles, needed
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            used = set(re.findall(r"\bstream_dedupe_[a-z_]+", target["expr"]))
            assert used, target["expr"]
            assert used <= exported, (panel["title"], used - exported)


def test_dashboard_shows_one_deployment_and_its_queries_parse(tmp_path: Path) -> None:
    """Every series is scoped to the chosen job (and namespace, service): two apps, or an embedded
    state's `stats --prometheus` file, are not added together; every query is valid PromQL."""
    import yaml

    dashboard = json.loads((DEPLOY / "grafana" / "stream-dedupe.json").read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert {"datasource", "job", "namespace", "service"} <= set(variables)
    assert variables["namespace"]["allValue"] == variables["service"]["allValue"] == ".*"
    values = {"$job": "stream-dedupe", "$namespace": ".*", "$service": ".*", "$__rate_interval": "1m"}
    rules = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            selectors = re.findall(r"\bstream_dedupe_[a-z_]+(\{[^}]*\})?", expr)
            assert selectors and all(
                s.startswith('{job="$job", namespace=~"$namespace", service=~"$service"') for s in selectors
            ), expr
            for name, value in values.items():
                expr = expr.replace(name, value)
            rules.append({"record": f"dashboard:query:{len(rules)}", "expr": expr})
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    check = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    for title, steps in (("Workers deciding (must be 1)", 3), ("Workers ready", 2)):
        (panel,) = [p for p in dashboard["panels"] if p["title"] == title]
        assert len(panel["fieldConfig"]["defaults"]["thresholds"]["steps"]) == steps, title


def test_recognized_recrawls_are_counted_apart_from_signing() -> None:
    """A re-crawl recognized by its fingerprint used no signature: not 'signed by the decide stage'."""
    from collections import Counter

    metrics = WorkerMetrics()
    events = [{"event": "unchanged", "id": f"d{i}"} for i in range(10)]
    metrics.record_batch(events, Counter(documents=10, presigned=3, recognized_unchanged=7), 10)
    sample = metrics.registry.get_sample_value
    assert sample("stream_dedupe_recrawls_recognized_total") == 7
    assert sample("stream_dedupe_signed_documents_total", {"stage": "sign"}) == 3
    assert sample("stream_dedupe_signed_documents_total", {"stage": "decide"}) == 0
