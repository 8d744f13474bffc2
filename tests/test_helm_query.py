"""The chart's values for the worker's read-only ``POST /query`` endpoint, rendered by the real helm.

Off by default: no query port on the container or any Service, no query variable. Enabled
(tests/helm-values/query-values.yaml): the port on the container and the headless Service only
(not the metrics Service), ``STREAM_DEDUPE_QUERY_BIND`` on all interfaces, the token Secret
mounted read-only and referenced by file, the NetworkPolicy admitting ``queryFrom`` to the query
port; every object passes kubernetes-validate --strict, and the settings load as the worker's.
Refusals (query port = web port, ``query_bind`` in ``config``, a token without the endpoint) are
files of tests/helm-values/bad/, checked by tests/test_helm.py.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.test_helm import K8S_VERSIONS, RENDERS, helm, one, rendered, rendered_notes, settings_env, template, worker

QUERY_VALUES = Path(__file__).resolve().parent / "helm-values" / "query-values.yaml"


@cache
def enabled() -> tuple[dict[str, Any], ...]:
    proc = template("-f", QUERY_VALUES)
    assert proc.returncode == 0, proc.stderr
    return tuple(d for d in yaml.safe_load_all(proc.stdout) if d)


@pytest.mark.parametrize("name", RENDERS)
def test_off_by_default_and_in_every_ci_render(name: str) -> None:
    docs = rendered(name)
    _, container = worker(docs)
    assert [p["name"] for p in container["ports"]] == ["http"]
    assert not {k for k in settings_env(docs) if k.startswith("STREAM_DEDUPE_QUERY_")}
    for svc in (d for d in docs if d["kind"] == "Service"):
        assert [p["name"] for p in svc["spec"]["ports"]] in (["http"], ["http-metrics"])
    assert not [v for v in worker(docs)[0]["volumes"] if v["name"] == "query-token"]


def test_enabled_port_env_token_and_services() -> None:
    docs = enabled()
    pod, container = worker(docs)
    assert container["ports"] == [
        {"name": "http", "containerPort": 6066, "protocol": "TCP"},
        {"name": "query", "containerPort": 6067, "protocol": "TCP"},
    ]
    env = settings_env(docs)
    assert env["STREAM_DEDUPE_QUERY_BIND"] == "0.0.0.0:6067"
    assert env["STREAM_DEDUPE_QUERY_TOKEN_FILE"] == "/etc/stream-dedupe/query-token/token"
    assert env["STREAM_DEDUPE_QUERY_MAX_DOCS"] == "50" and env["STREAM_DEDUPE_QUERY_TIMEOUT"] == "2.5"
    assert not {"STREAM_DEDUPE_QUERY_BIND", "STREAM_DEDUPE_QUERY_TOKEN_FILE"} & set(one(docs, "ConfigMap")["data"])
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "query-token"]
    assert mount == {"name": "query-token", "mountPath": "/etc/stream-dedupe/query-token", "readOnly": True}
    (volume,) = [v for v in pod["volumes"] if v["name"] == "query-token"]
    assert volume["secret"]["secretName"] == "crawl-dedupe-query-token"
    assert volume["secret"]["items"] == [{"key": "token", "path": "token"}] and volume["secret"]["defaultMode"] == 288
    headless, metrics = one(docs, "Service", "-headless"), one(docs, "Service", "-metrics")
    assert {"name": "query", "port": 6067, "targetPort": "query", "protocol": "TCP"} in headless["spec"]["ports"]
    assert [p["name"] for p in metrics["spec"]["ports"]] == ["http-metrics"]  # never scraped, never merged
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    scrape, query = policy["spec"]["ingress"]
    assert scrape["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert query["ports"] == [{"port": "query", "protocol": "TCP"}]
    assert query["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "crawler"}}}]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_enabled_objects_pass_kubernetes_validate_strict(version: str) -> None:
    for doc in enabled():
        kubernetes_validate.validate(doc, version, strict=True)


def test_enabled_lints_and_the_worker_accepts_the_settings(tmp_path: Path) -> None:
    from stream_dedupe.worker.settings import WorkerSettings

    proc = helm("lint", "--strict", ".", "-f", QUERY_VALUES)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    env: dict[str, str] = {}
    for var, value in settings_env(enabled()).items():
        if isinstance(value, str) and value.startswith("/etc/stream-dedupe/"):  # the mounted Secret
            local = tmp_path / value.removeprefix("/etc/")
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_text("the-token\n")
            value = str(local)
        env[var] = value
    settings = WorkerSettings.load(env)
    assert settings.query_address == ("0.0.0.0", 6067) and settings.web_port == 6066
    assert settings.query_token_file is not None and settings.query_max_docs == 50


def test_notes_say_how_to_query_and_warn_without_a_token(tmp_path: Path) -> None:
    notes = rendered_notes(tmp_path / "a", "-f", str(QUERY_VALUES))
    assert "POST /query on port 6067, bearer token from Secret crawl-dedupe-query-token" in notes
    assert "dedupe-stream-dedupe-headless.search.svc:6067/query" in notes and "WARNING" not in notes
    open_notes = rendered_notes(tmp_path / "b", "--set", "query.enabled=true")
    assert "WARNING: query.enabled without query.tokenSecret.name" in open_notes
    assert "Read-only queries" not in rendered_notes(tmp_path / "c")
