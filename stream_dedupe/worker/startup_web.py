"""``/healthz``, ``/readyz`` and ``/metrics`` before Faust serves them (broker wait, state restore).

Faust's web server starts with the app, after the worker has checked its topics (which waits for
the broker, without limit) and copied the changelogs into its local state (minutes on a large
state after a lost disk). Until then nothing answered on the web port: Prometheus saw the target
down (``StreamDedupeWorkerDown``) and could not tell a dead worker from one waiting for its
broker. :class:`StartupServer` answers on the same address in the meantime, and is stopped
before the app binds the port:

* ``/healthz``: 200, ``{"status": "starting", "phase": ...}`` (the process is alive);
* ``/readyz``: 503, with the phase and the broker part of the running worker's body;
* ``/metrics``: the worker's metrics at their start values, with ``stream_dedupe_ready`` 0,
  ``stream_dedupe_broker_connected`` and
  ``stream_dedupe_broker_last_contact_seconds`` (the seconds spent waiting for the broker), so
  that ``StreamDedupeBrokerUnreachable`` fires for a worker that cannot reach its broker at start.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from aiohttp import web

from stream_dedupe.worker.errors import WorkerConfigError
from stream_dedupe.worker.metrics import CONTENT_TYPE, WorkerMetrics

if TYPE_CHECKING:
    from stream_dedupe.worker.settings import WorkerSettings

#: The phase while the topics are checked (the broker not reached yet).
WAITING = "waiting for the broker"
#: The phase while the local state is brought up to the changelogs (the broker reached).
RESTORING = "restoring the state from the changelogs"


def _compact(value: Any) -> str:
    """JSON without spaces, as Faust's web server writes it (one format for a client matching the body)."""
    return json.dumps(value, separators=(",", ":"))


class StartupServer:
    """The worker's health and metrics endpoints before its Faust app starts.

    Args:
        host: The worker's ``web_host``.
        port: The worker's ``web_port``.
        index_shards: The deployment's ``index_shards`` (the gauge, as the app sets it).
        standby_replicas: The deployment's ``standby_replicas`` (likewise).
        app_id: The worker's ``app_id`` (``stream_dedupe_build_info``; None: not set).
        processing_guarantee: The worker's ``processing_guarantee`` (likewise).

    """

    def __init__(
        self,
        host: str,
        port: int,
        index_shards: int = 1,
        standby_replicas: int = 0,
        app_id: str | None = None,
        processing_guarantee: str | None = None,
    ) -> None:
        self.host, self.port = host, port
        self.phase = WAITING
        self.started_at = self._waiting_since = time.monotonic()
        self._runner: web.AppRunner | None = None
        # the worker's own metric definitions (the same names and help), at their start values
        self.metrics = WorkerMetrics(app_id, processing_guarantee)
        self.metrics.ready.set(0)
        # the configured values, as the app sets them: a dashboard line does not drop to 0 at each restart
        self.metrics.index_shards.set(index_shards)
        self.metrics.standby_replicas.set(standby_replicas)

    def broker_reached(self) -> None:
        """The topics are checked: the broker answers; the state is restored next."""
        self.phase = RESTORING

    def _broker(self) -> dict[str, Any]:
        waiting = self.phase == WAITING
        seconds = round(time.monotonic() - self._waiting_since, 3) if waiting else 0.0
        self.metrics.broker_connected.set(0 if waiting else 1)
        self.metrics.broker_last_contact.set(seconds)
        return {"connected": not waiting, "last_contact_seconds": seconds}

    async def _healthz(self, request: web.Request) -> web.Response:
        uptime = round(time.monotonic() - self.started_at, 3)
        return web.json_response({"status": "starting", "phase": self.phase, "uptime_seconds": uptime}, dumps=_compact)

    async def _readyz(self, request: web.Request) -> web.Response:
        body = {"ready": False, "phase": self.phase, "broker": self._broker()}
        return web.json_response(body, status=503, dumps=_compact)

    async def _metrics(self, request: web.Request) -> web.Response:
        self._broker()
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    async def start(self) -> None:
        """Serve on ``host:port`` (the port is free again after :meth:`stop`)."""
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port, reuse_address=True).start()

    async def stop(self) -> None:
        """Stop serving and release the port (Faust's web server takes it next)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


@contextmanager
def serving_while_starting(loop: asyncio.AbstractEventLoop, settings: WorkerSettings) -> Iterator[StartupServer]:
    """A :class:`StartupServer` on the worker's web address for the ``with`` block (run on ``loop``).

    Raises:
        WorkerConfigError: if the port is taken (the app could not serve on it either).

    """
    server = StartupServer(
        settings.web_host,
        settings.web_port,
        settings.index_shards,
        settings.standby_replicas,
        settings.app_id,
        settings.processing_guarantee,
    )
    try:
        loop.run_until_complete(server.start())
    except OSError as exc:
        raise WorkerConfigError(
            f"cannot serve on {settings.web_host}:{settings.web_port} ({exc}): another process holds the port; "
            "stop it or give this worker another --web-port"
        ) from exc
    try:
        yield server
    finally:
        loop.run_until_complete(server.stop())
