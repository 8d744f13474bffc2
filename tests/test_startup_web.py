"""The worker's web port answers while it waits for the broker and restores its state (no broker needed)."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from stream_dedupe.worker.errors import WorkerConfigError
from stream_dedupe.worker.settings import WorkerSettings
from stream_dedupe.worker.startup_web import RESTORING, WAITING, serving_while_starting


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


async def _in_thread(port: int, path: str) -> tuple[int, bytes]:
    return await asyncio.to_thread(_get, port, path)


def test_health_readiness_and_broker_gauges_before_the_app(tmp_path: Path) -> None:
    port = _free_port()
    settings = WorkerSettings(
        state_dir=tmp_path / "s", web_port=port, index_shards=3, standby_replicas=1, app_id="crawl-news"
    )
    loop = asyncio.new_event_loop()
    try:
        with serving_while_starting(loop, settings) as server:
            loop.run_until_complete(asyncio.sleep(0.3))
            status, body = loop.run_until_complete(_in_thread(port, "/healthz"))
            assert status == 200 and json.loads(body)["phase"] == WAITING
            assert body.startswith(b'{"status":"starting","phase":')  # compact, as Faust's server writes it
            status, body = loop.run_until_complete(_in_thread(port, "/readyz"))
            assert status == 503 and json.loads(body)["broker"]["connected"] is False
            metrics = loop.run_until_complete(_in_thread(port, "/metrics"))[1].decode()
            assert "stream_dedupe_ready 0.0" in metrics and "stream_dedupe_broker_connected 0.0" in metrics
            # the configured shards and copies (not 0 at each restart), and no standby following yet (-1)
            assert "stream_dedupe_index_shards 3.0" in metrics and "stream_dedupe_standby_replicas 1.0" in metrics
            assert "stream_dedupe_standby_lag_records -1.0" in metrics
            assert 'app_id="crawl-news"' in metrics.split("stream_dedupe_build_info{")[1].split("\n")[0]
            waited = float(re.search(r"^stream_dedupe_broker_last_contact_seconds (\S+)$", metrics, re.MULTILINE)[1])  # type: ignore[index]
            assert waited >= 0.3
            assert loop.run_until_complete(_in_thread(port, "/table/state-docs/"))[0] == 404
            server.broker_reached()
            status, body = loop.run_until_complete(_in_thread(port, "/readyz"))
            assert status == 503 and json.loads(body) == {
                "ready": False,
                "phase": RESTORING,
                "broker": {"connected": True, "last_contact_seconds": 0.0},
            }
        # the port is free again for the app's own server
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
    finally:
        loop.close()


def test_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        loop = asyncio.new_event_loop()
        try:
            settings = WorkerSettings(state_dir=tmp_path / "s", web_port=port)
            with (
                pytest.raises(WorkerConfigError, match="another process holds the port"),
                serving_while_starting(loop, settings),
            ):
                pass
        finally:
            loop.close()
