"""The Helm chart helm/stream-dedupe, rendered by the real helm CLI (built by `make tools`).

Every object of every render (default values and the realistic value sets in the chart's ci/
directory) is validated with kubernetes-validate --strict against the schemas of the oldest
Kubernetes the chart supports and the newest bundled; the Prometheus Operator objects (CRDs that
kubernetes-validate does not know) are checked structurally here and their rules by promtool.
Bad value files (tests/helm-values/bad/, first line `# expect: <message>`) must be refused.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import shutil
import subprocess
import tarfile
import typing
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from .helpers import promtool

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "helm" / "stream-dedupe"
INSTALL_SCRIPT = ROOT / "tools" / "helm" / "install.sh"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"
CI_VALUES = {p.name.removesuffix("-values.yaml"): p for p in sorted((CHART / "ci").glob("*-values.yaml"))}
BAD_VALUES = sorted((ROOT / "tests" / "helm-values" / "bad").glob("*.yaml"))
RENDERS = ["default", *CI_VALUES]
# Chart.yaml's kubeVersion floor and the newest schemas kubernetes-validate bundles.
K8S_VERSIONS = ("1.27", "1.37")
RELEASE, NAMESPACE = "dedupe", "search"
STATE_DIR = "/var/lib/stream-dedupe"
# WorkerSettings fields that the chart sets itself (mounts, ports, Kafka security values).
CHART_OWNED = {
    "state_dir",
    "web_host",
    "web_port",
    "security_protocol",
    "sasl_mechanism",
    "sasl_username",
    "sasl_password_file",
    "ssl_cafile",
    "ssl_certfile",
    "ssl_keyfile",
    "query_bind",
    "query_token_file",
}
NEVER_RENDERED = {"sasl_password"}  # only ever from a mounted Secret file (sasl_password_file)


def helm_binary() -> Path:
    """The helm that tools/helm/install.sh builds (same version and cache path as the script)."""
    pinned = re.search(r'HELM_VERSION="\$\{HELM_VERSION:-(v[0-9.]+)\}"', INSTALL_SCRIPT.read_text())
    assert pinned, f"no default HELM_VERSION in {INSTALL_SCRIPT}"
    version = os.environ.get("HELM_VERSION") or pinned.group(1)
    cache_root = Path(os.environ.get("STREAM_DEDUPE_CACHE") or Path.home() / ".cache" / "stream-dedupe")
    path = cache_root / "helm" / version / "helm"
    if not os.access(path, os.X_OK):
        pytest.fail(f"helm {version} not found at {path}: run `make tools` (or `bash tools/helm/install.sh`)")
    return path


def helm(*args: str | Path, chart: Path = CHART) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm_binary()), *map(str, args)], cwd=chart, capture_output=True, text=True, timeout=120, check=False
    )


def template(*args: str | Path, chart: Path = CHART) -> subprocess.CompletedProcess[str]:
    return helm("template", RELEASE, ".", "--namespace", NAMESPACE, *args, chart=chart)


def values_args(name: str) -> list[str]:
    return [] if name == "default" else ["-f", str(CI_VALUES[name])]


@cache
def rendered(name: str) -> tuple[dict[str, Any], ...]:
    proc = template(*values_args(name))
    assert proc.returncode == 0, f"helm template ({name}) failed:\n{proc.stderr}"
    return tuple(d for d in yaml.safe_load_all(proc.stdout) if d)


def one(docs: tuple[dict[str, Any], ...], kind: str, name_suffix: str = "") -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, f"expected one {kind} *{name_suffix}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def worker(docs: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(pod spec, worker container) of the StatefulSet."""
    pod = one(docs, "StatefulSet")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod, container


def settings_env(docs: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """Every STREAM_DEDUPE_* variable the worker gets: the ConfigMap's, then the container's own."""
    _, container = worker(docs)
    env: dict[str, Any] = dict(one(docs, "ConfigMap")["data"])
    for var in container["env"]:
        if var["name"].startswith("STREAM_DEDUPE_"):
            env[var["name"]] = var.get("value", var.get("valueFrom"))
    return env


def rendered_notes(tmp_path: Path, *args: str) -> str:
    """NOTES.txt as `helm install` would print it (`helm template` skips it; install needs a cluster)."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "zz-notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n"
        '  notes: {{ include (print $.Template.BasePath "/NOTES.txt") . | quote }}\n'
    )
    proc = template("--show-only", "templates/zz-notes.yaml", *args, chart=chart)
    assert proc.returncode == 0, proc.stderr
    return str(yaml.safe_load(proc.stdout)["data"]["notes"])


# ------------------------------------------------------------------ tool, lint, schema validity ---


def test_install_script_is_idempotent_and_prints_the_cached_binary() -> None:
    binary = helm_binary()  # built by `make tools`: the script must find it and not build again
    proc = subprocess.run(["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True, timeout=60, check=True)
    assert Path(proc.stdout.strip()) == binary and "building" not in proc.stderr
    version = helm("version", "--template", "{{ .Version }}")
    assert version.stdout.strip() == helm_binary().parent.name


@pytest.mark.parametrize("name", RENDERS)
def test_helm_lint_strict(name: str) -> None:
    proc = helm("lint", "--strict", ".", *values_args(name))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout
    assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout


def test_kubernetes_older_than_the_floor_is_refused() -> None:
    assert template("--kube-version", f"{K8S_VERSIONS[0]}.0").returncode == 0
    proc = template("--kube-version", "1.26.9")
    assert proc.returncode != 0 and "kubeVersion" in proc.stderr


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", RENDERS)
def test_every_core_object_passes_kubernetes_validate_strict(name: str, version: str) -> None:
    docs = rendered(name)
    core = [d for d in docs if not d["apiVersion"].startswith("monitoring.coreos.com/")]
    assert {d["kind"] for d in core} >= {"ConfigMap", "Service", "StatefulSet"}
    for doc in core:
        kubernetes_validate.validate(doc, version, strict=True)  # raises ValidationError naming the field


def test_strict_validation_rejects_a_misspelled_field() -> None:
    sts = copy.deepcopy(one(rendered("default"), "StatefulSet"))
    sts["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFileSystem"] = True
    with pytest.raises(kubernetes_validate.ValidationError, match="readOnlyRootFileSystem"):
        kubernetes_validate.validate(sts, K8S_VERSIONS[-1], strict=True)


@pytest.mark.parametrize("bad", BAD_VALUES, ids=lambda p: p.stem)
def test_bad_values_are_refused_with_a_message_naming_the_problem(bad: Path) -> None:
    expected = bad.read_text().splitlines()[0].removeprefix("# expect: ")
    proc = template("-f", bad)
    assert proc.returncode != 0, f"{bad.name} was accepted"
    assert expected in proc.stderr, f"{bad.name}: expected {expected!r} in:\n{proc.stderr}"
    assert proc.stdout == ""


def test_replicas_below_one_fail_even_without_the_schema() -> None:
    proc = template("--skip-schema-validation", "--set", "replicas=0")
    assert proc.returncode != 0
    assert "replicas must be >= 1 (got 0)" in proc.stderr


# ------------------------------------------------------------------------------- the workload -----


@pytest.mark.parametrize("name", RENDERS)
def test_restrictive_security_context(name: str) -> None:
    pod, container = worker(rendered(name))
    psc, csc = pod["securityContext"], container["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] == psc["runAsGroup"] == psc["fsGroup"] == 10001
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert csc["readOnlyRootFilesystem"] is True and csc["allowPrivilegeEscalation"] is False
    assert csc["capabilities"] == {"drop": ["ALL"]} and csc["privileged"] is False
    assert pod["automountServiceAccountToken"] is False
    # Writable: the state volume and the /tmp emptyDir (numba's cache, TMPDIR), nothing else.
    writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
    assert writable == {STATE_DIR, "/tmp"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert set(volumes["tmp"]) == {"name", "emptyDir"} and volumes["tmp"]["emptyDir"]["sizeLimit"]
    env = {v["name"]: v.get("value") for v in container["env"]}
    assert env["NUMBA_CACHE_DIR"].startswith("/tmp/") and env["TMPDIR"] == "/tmp"


@pytest.mark.parametrize("name", RENDERS)
def test_probes_ports_and_services(name: str) -> None:
    docs = rendered(name)
    pod, container = worker(docs)
    assert container["args"][0] == "worker"
    assert container["ports"] == [{"name": "http", "containerPort": 6066, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["startupProbe"]["httpGet"]["port"] == "http"
    env = settings_env(docs)
    assert env["STREAM_DEDUPE_WEB_HOST"] == "0.0.0.0" and env["STREAM_DEDUPE_WEB_PORT"] == "6066"
    assert env["STREAM_DEDUPE_STATE_DIR"] == STATE_DIR
    headless, metrics = one(docs, "Service", "-headless"), one(docs, "Service", "-metrics")
    sts = one(docs, "StatefulSet")
    assert headless["spec"]["clusterIP"] == "None" and sts["spec"]["serviceName"] == headless["metadata"]["name"]
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    for svc in (headless, metrics):
        assert svc["spec"]["ports"][0]["targetPort"] == "http"
        assert svc["spec"]["selector"].items() <= pod_labels.items()
    pdb = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    if name == "dev-ephemeral":
        assert pdb == []  # podDisruptionBudget.enabled: false
    else:
        assert pdb[0]["spec"]["maxUnavailable"] == 1
        assert pdb[0]["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    # SIGTERM: the worker exits within shutdown_timeout; Kubernetes must wait longer.
    assert pod["terminationGracePeriodSeconds"] > float(env["STREAM_DEDUPE_SHUTDOWN_TIMEOUT"])


def test_startup_probe_allows_a_long_recovery_and_is_configurable() -> None:
    default = worker(rendered("default"))[1]["startupProbe"]
    assert default["httpGet"]["path"] == "/readyz"
    assert default["periodSeconds"] * default["failureThreshold"] >= 15 * 60
    assert worker(rendered("exactly-once-standby"))[1]["startupProbe"]["failureThreshold"] == 360


def test_settings_come_from_the_config_map() -> None:
    docs = rendered("exactly-once-standby")
    cm = one(docs, "ConfigMap")
    _, container = worker(docs)
    assert container["envFrom"] == [{"configMapRef": {"name": cm["metadata"]["name"]}}]
    values = yaml.safe_load(CI_VALUES["exactly-once-standby"].read_text())["config"]
    for key, value in values.items():  # numbers as the worker parses them (2097152, not 2.097152e+06)
        assert cm["data"][f"STREAM_DEDUPE_{key.upper()}"] == str(value)
    assert cm["data"]["STREAM_DEDUPE_SECURITY_PROTOCOL"] == "SASL_PLAINTEXT"
    assert cm["data"]["STREAM_DEDUPE_SASL_USERNAME"] == "dedupe-eu"
    annotations = one(docs, "StatefulSet")["spec"]["template"]["metadata"]["annotations"]
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/config"])  # settings changes roll the pods
    default_cm = one(rendered("default"), "ConfigMap")["data"]
    assert (
        annotations["checksum/config"]
        != one(rendered("default"), "StatefulSet")["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    )
    assert default_cm["STREAM_DEDUPE_PROCESSING_GUARANTEE"] == "at_least_once"
    custom = one(rendered("custom-placement"), "ConfigMap")["data"]  # null / "" = the worker's default
    assert "STREAM_DEDUPE_THRESHOLD" not in custom and "STREAM_DEDUPE_SHINGLE" not in custom


def test_kafka_secrets_are_mounted_read_only_and_referenced_by_file() -> None:
    docs = rendered("sasl-ssl-monitoring")
    pod, container = worker(docs)
    env = settings_env(docs)
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert env["STREAM_DEDUPE_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert env["STREAM_DEDUPE_SASL_MECHANISM"] == "SCRAM-SHA-512"
    assert env["STREAM_DEDUPE_SASL_USERNAME"] == {
        "secretKeyRef": {"name": "crawl-dedupe-kafka-user", "key": "username"}
    }
    expected = {  # variable -> (volume, Secret, key)
        "STREAM_DEDUPE_SASL_PASSWORD_FILE": ("kafka-sasl", "crawl-dedupe-kafka-user", "password"),
        "STREAM_DEDUPE_SSL_CAFILE": ("kafka-tls", "crawl-dedupe-kafka-tls", "ca.crt"),
        "STREAM_DEDUPE_SSL_CERTFILE": ("kafka-tls", "crawl-dedupe-kafka-tls", "tls.crt"),
        "STREAM_DEDUPE_SSL_KEYFILE": ("kafka-tls", "crawl-dedupe-kafka-tls", "tls.key"),
    }
    for var, (volume, secret, key) in expected.items():
        assert mounts[volume]["readOnly"] is True
        assert env[var] == f"{mounts[volume]['mountPath']}/{key}"
        assert volumes[volume]["secret"]["secretName"] == secret
        assert {"key": key, "path": key} in volumes[volume]["secret"]["items"]
        assert volumes[volume]["secret"]["defaultMode"] == 0o440
    assert "sasl_password" not in str(one(docs, "ConfigMap")["data"]).lower()
    # TLS with only a private CA: no client certificate; PLAINTEXT: no secret at all.
    dev = settings_env(rendered("dev-ephemeral"))
    assert dev["STREAM_DEDUPE_SSL_CAFILE"].endswith("/ca.crt") and "STREAM_DEDUPE_SSL_CERTFILE" not in dev
    default_pod, _ = worker(rendered("default"))
    assert {v["name"] for v in default_pod["volumes"]} == {"tmp"}
    assert not [k for k in settings_env(rendered("default")) if "SASL" in k or "SSL_" in k]


def test_state_volume_claim_templates() -> None:
    sts = one(rendered("default"), "StatefulSet")["spec"]
    (claim,) = sts["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "state" and claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi" and "storageClassName" not in claim["spec"]
    assert {"name": "state", "mountPath": STATE_DIR} in sts["template"]["spec"]["containers"][0]["volumeMounts"]
    assert sts["podManagementPolicy"] == "Parallel"
    custom_docs = rendered("custom-placement")
    custom = one(custom_docs, "StatefulSet")
    (claim,) = custom["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert claim["spec"]["resources"]["requests"]["storage"] == "200Gi"
    assert claim["metadata"]["annotations"] == {"backup.example.com/policy": "daily"}
    assert custom["spec"]["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Delete", "whenScaled": "Retain"}
    assert custom["metadata"]["name"] == "dedupe" and custom["spec"]["replicas"] == 4
    pod, container = worker(custom_docs)
    assert container["resources"] == {
        "requests": {"cpu": "2", "memory": "6Gi", "ephemeral-storage": "1Gi"},
        "limits": {"cpu": 4, "memory": "8Gi"},
    }
    assert container["image"] == "ghcr.io/example/stream-dedupe:0.1.0-rc1"
    assert pod["priorityClassName"] == "ingestion-critical" and pod["tolerations"][0]["value"] == "ingestion"
    assert pod["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    # No persistence: an emptyDir under the same name, no claim.
    dev = one(rendered("dev-ephemeral"), "StatefulSet")["spec"]
    assert "volumeClaimTemplates" not in dev
    assert {"name": "state", "emptyDir": {}} in dev["template"]["spec"]["volumes"]


# -------------------------------------------------------------- Prometheus Operator objects ------


def test_service_monitor_and_prometheus_rule(tmp_path: Path) -> None:
    docs = rendered("sasl-ssl-monitoring")
    metrics_svc = one(docs, "Service", "-metrics")
    monitor, rule = one(docs, "ServiceMonitor"), one(docs, "PrometheusRule")
    for obj in (monitor, rule):
        assert obj["apiVersion"] == "monitoring.coreos.com/v1"
        assert set(obj) == {"apiVersion", "kind", "metadata", "spec"}
        assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    spec = monitor["spec"]
    assert set(spec) <= {"selector", "namespaceSelector", "endpoints"}
    assert spec["selector"]["matchLabels"].items() <= metrics_svc["metadata"]["labels"].items()
    headless = one(docs, "Service", "-headless")  # scraping it too would count every worker twice
    assert not spec["selector"]["matchLabels"].items() <= headless["metadata"]["labels"].items()
    assert spec["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = spec["endpoints"]
    assert endpoint["port"] == metrics_svc["spec"]["ports"][0]["name"] and endpoint["path"] == "/metrics"
    assert re.fullmatch(r"[0-9]+s", endpoint["interval"]) and re.fullmatch(r"[0-9]+s", endpoint["scrapeTimeout"])
    # The alerts select job="stream-dedupe": the endpoint sets it, whatever the Service's labels.
    assert endpoint["relabelings"] == [{"action": "replace", "targetLabel": "job", "replacement": "stream-dedupe"}]
    assert 'up{job="stream-dedupe"}' in ALERTS.read_text()
    renamed = yaml.safe_load_all(
        template("--set", "nameOverride=crawl-dedupe", "--set", "metrics.serviceMonitor.enabled=true").stdout
    )
    (renamed_monitor,) = [d for d in renamed if d and d["kind"] == "ServiceMonitor"]
    assert renamed_monitor["spec"]["endpoints"][0]["relabelings"] == endpoint["relabelings"]
    # The rules are deploy/prometheus/alerts.yaml's worker groups, unchanged (templates not expanded
    # by helm); the embedded command's group (alerts on `stats --prometheus` files) is left out.
    assert set(rule["spec"]) == {"groups"}
    all_groups = yaml.safe_load(ALERTS.read_text())["groups"]
    assert "stream-dedupe-embedded" in {g["name"] for g in all_groups}
    assert rule["spec"]["groups"] == [g for g in all_groups if g["name"] != "stream-dedupe-embedded"]
    alerts = {r.get("alert") for g in rule["spec"]["groups"] for r in g["rules"]}
    assert "StreamDedupeWorkerDown" in alerts and "StreamDedupeEmbeddedRunStopped" not in alerts
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    check = subprocess.run([promtool(), "check", "rules", str(rules_file)], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert not [d for d in rendered("default") if d["apiVersion"].startswith("monitoring.coreos.com/")]


def test_packaged_chart_carries_the_alerts_file(tmp_path: Path) -> None:
    # files/alerts.yaml is a copy of deploy/prometheus/alerts.yaml (a link made every helm command
    # warn, and a checkout without links fails the chart)
    copy = CHART / "files" / "alerts.yaml"
    assert not copy.is_symlink()
    assert copy.read_bytes() == ALERTS.read_bytes(), "cp deploy/prometheus/alerts.yaml helm/stream-dedupe/files/"
    proc = helm("package", ".", "--destination", tmp_path)
    assert proc.returncode == 0, proc.stderr
    (archive,) = tmp_path.glob("stream-dedupe-*.tgz")
    with tarfile.open(archive) as tar:
        member = tar.getmember("stream-dedupe/files/alerts.yaml")
        assert member.isfile()
        packaged = tar.extractfile(member)
        assert packaged is not None and packaged.read() == ALERTS.read_bytes()
        assert not [n for n in tar.getnames() if "/ci/" in n]


# --------------------------------------------------------------------------------- NOTES.txt -----


def test_notes_explain_readiness_and_warn_about_idle_replicas(tmp_path: Path) -> None:
    notes = rendered_notes(tmp_path)
    assert "rollout status statefulset/dedupe-stream-dedupe" in notes
    assert "curl -s 127.0.0.1:6066/readyz" in notes and "/metrics" in notes
    assert "WARNING" not in notes
    scaled = rendered_notes(tmp_path / "a", "-f", str(CI_VALUES["dev-ephemeral"]))  # 3 replicas, 2 partitions
    assert "WARNING: replicas (3) > config.input_partitions (2)" in scaled
    assert "persistence.enabled=false" in scaled
    assert "WARNING" not in rendered_notes(tmp_path / "b", "-f", str(CI_VALUES["exactly-once-standby"]))
    standby = rendered_notes(tmp_path / "c", "--set", "config.standby_replicas=1")
    assert "WARNING: config.standby_replicas (1) >= replicas (1)" in standby


# ------------------------------------------------------------------ the worker's own settings ----


def _schema_type(annotation: Any) -> set[str]:
    names = {"str": "string", "int": "integer", "float": "number", "Path": "string", "NoneType": "null"}
    args = typing.get_args(annotation) or (annotation,)
    return {names[a.__name__] for a in args}


def test_chart_settings_are_worker_settings() -> None:
    from stream_dedupe.worker.settings import WorkerSettings

    fields = {f.name: f for f in dataclasses.fields(WorkerSettings)}
    hints = typing.get_type_hints(WorkerSettings)
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())
    config_props = schema["properties"]["config"]["properties"]
    rendered_vars = {k for name in RENDERS for k in settings_env(rendered(name))}
    names = {v.removeprefix("STREAM_DEDUPE_").lower() for v in rendered_vars} | set(config_props) | CHART_OWNED
    unknown = sorted(names - set(fields))
    assert not unknown, f"the chart sets settings that WorkerSettings does not have: {unknown}"
    missing = set(fields) - set(config_props) - CHART_OWNED - NEVER_RENDERED
    assert not missing, (
        f"WorkerSettings fields the chart cannot set: {sorted(missing)}: add them to config.properties in "
        "helm/stream-dedupe/values.schema.json (and values.yaml / the chart README)"
    )
    for name, prop in config_props.items():  # schema types follow the dataclass annotations
        allowed = set(prop["type"]) if isinstance(prop["type"], list) else {prop["type"]}
        assert allowed <= _schema_type(hints[name]) | {"null"}, f"config.{name}: {allowed} vs {hints[name]}"


@pytest.mark.parametrize("name", RENDERS)
def test_worker_accepts_the_rendered_settings(name: str, tmp_path: Path) -> None:
    """The ConfigMap plus the container's variables, as the pod would see them, load as WorkerSettings."""
    from stream_dedupe.worker.settings import WorkerSettings

    env: dict[str, str] = {}
    for var, value in settings_env(rendered(name)).items():
        if isinstance(value, dict):  # secretKeyRef: the Secret's content
            value = "dedupe-user"
        if value.startswith("/etc/stream-dedupe/"):  # a mounted Secret file
            local = tmp_path / value.removeprefix("/etc/")
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_text("secret\n")
            value = str(local)
        env[var] = value
    settings = WorkerSettings.load(env)
    assert str(settings.state_dir) == STATE_DIR and settings.web_port == 6066 and settings.web_host == "0.0.0.0"
    if "exactly-once" in name:  # a retention policy passes through the ConfigMap as the worker parses it
        policy = settings.retention()
        assert policy is not None and policy.max_age_us == {"news": 14 * 86_400_000_000, "": 365 * 86_400_000_000}
        assert settings.expire_interval == 3600
    assert settings.input_partitions == int(env["STREAM_DEDUPE_INPUT_PARTITIONS"])


# ------------------------------------------------------------------------------- network policy --


def _policies(docs: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "NetworkPolicy"]


def test_network_policy_is_off_by_default() -> None:
    assert _policies(rendered("default")) == []


def test_network_policy_admits_only_the_scraper_to_the_web_port_and_egress_to_kafka_and_dns() -> None:
    docs = rendered("sasl-ssl-monitoring")
    (policy,) = _policies(docs)
    spec = policy["spec"]
    sts = one(docs, "StatefulSet")
    assert spec["podSelector"] == {"matchLabels": sts["spec"]["selector"]["matchLabels"]}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    (ingress,) = spec["ingress"]  # one rule: the web port, from the monitoring namespace's Prometheus
    assert ingress["ports"] == [{"port": "http", "protocol": "TCP"}]
    _, container = worker(docs)
    assert [p["name"] for p in container["ports"]] == ["http"], "the named port must be the web port"
    assert ingress["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        }
    ]
    kafka, dns = spec["egress"]
    assert kafka["ports"] == [{"port": 9093, "protocol": "TCP"}]
    assert kafka["to"][0]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "kafka"}}
    assert {(p["port"], p["protocol"]) for p in dns["ports"]} == {(53, "UDP"), (53, "TCP")}
    assert dns["to"] == [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}]


def test_network_policy_without_scrapers_denies_all_ingress_and_validates(tmp_path: Path) -> None:
    proc = template("--set", "networkPolicy.enabled=true", "--set", "networkPolicy.dns.enabled=false")
    assert proc.returncode == 0, proc.stderr
    (policy,) = _policies(tuple(d for d in yaml.safe_load_all(proc.stdout) if d))
    assert policy["spec"]["ingress"] == []
    assert policy["spec"]["egress"] == [{"ports": [{"port": 9092, "protocol": "TCP"}]}]  # any broker address
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(policy, version, strict=True)


def test_replication_and_memory_settings_reach_the_worker() -> None:
    env = settings_env(rendered("default"))
    assert env["STREAM_DEDUPE_REPLICATION_FACTOR"] == "3"
    assert int(env["STREAM_DEDUPE_ROCKSDB_MEMORY_MB"]) >= 64
    assert settings_env(rendered("dev-ephemeral"))["STREAM_DEDUPE_REPLICATION_FACTOR"] == "1"


def test_jobs_are_rendered_and_checked() -> None:
    assert "STREAM_DEDUPE_JOBS" not in one(rendered("default"), "ConfigMap")["data"]  # null: the worker's default, 1
    proc = template("--set", "config.jobs=3")
    assert proc.returncode == 0, proc.stderr
    docs = tuple(d for d in yaml.safe_load_all(proc.stdout) if d)
    assert one(docs, "ConfigMap")["data"]["STREAM_DEDUPE_JOBS"] == "3"
    refused = template("--set", "config.jobs=-1")
    assert refused.returncode != 0 and "jobs" in refused.stderr


def test_index_shards_are_rendered_and_checked() -> None:
    assert "STREAM_DEDUPE_INDEX_SHARDS" not in one(rendered("default"), "ConfigMap")["data"]  # null: 1 shard
    proc = template("--set", "config.index_shards=4", "--set", "config.shard_timeout=30", "--set", "replicas=3")
    assert proc.returncode == 0, proc.stderr
    data = one(tuple(d for d in yaml.safe_load_all(proc.stdout) if d), "ConfigMap")["data"]
    assert data["STREAM_DEDUPE_INDEX_SHARDS"] == "4" and data["STREAM_DEDUPE_SHARD_TIMEOUT"] == "30"
    refused = template("--set", "config.index_shards=0")
    assert refused.returncode != 0 and "index_shards" in refused.stderr
    refused = template("--set", "config.index_shards=2", "--set", "query.enabled=true")
    assert refused.returncode != 0 and "not served with config.index_shards" in refused.stderr
