"""An admin client that waits for the broker: retries while it is unreachable, stops at once when it refuses us.

Every stage of the worker that talks to the cluster's metadata (topic creation and checks, the
topics' size limits, the shard standby placement) connects through :func:`connect_admin`.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiokafka.admin import AIOKafkaAdminClient  # type: ignore[import-untyped]
from aiokafka.errors import KafkaError  # type: ignore[import-untyped]

from stream_dedupe.worker.errors import BrokerUnavailableError
from stream_dedupe.worker.security import client_security, diagnose, dropped_error
from stream_dedupe.worker.settings import WorkerSettings

log = logging.getLogger("stream_dedupe.worker.topics")  # the name it logged under before it moved here

#: Handshakes in a row cut off by a listening broker before :func:`connect_admin` gives up.
DROPPED_LIMIT = 3


async def connect_admin(
    bootstrap: str, wait: float | None, retry: float = 2.0, settings: WorkerSettings | None = None
) -> AIOKafkaAdminClient:
    """A started admin client; retries (logging each attempt) while the broker is unreachable.

    An authentication or TLS failure is not "unreachable": it stops the wait at once (see
    :func:`~stream_dedupe.worker.security.diagnose`).

    Args:
        bootstrap: ``host:port[,host:port]``.
        wait: Give up after this many seconds (None: wait forever).
        retry: Seconds between attempts.
        settings: Security settings of the client (None: PLAINTEXT).

    Raises:
        BrokerUnavailableError: if ``wait`` passed without reaching the broker.
        BrokerAuthError: if the broker rejects the credentials or the TLS setup, or keeps closing
            the connection during the handshake.

    """
    deadline = None if wait is None else time.monotonic() + wait
    security = client_security(settings) if settings is not None else {}
    attempt = dropped = 0
    while True:
        attempt += 1
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000, **security)
        try:
            await admin.start()
            if attempt > 1:
                log.info("connected to Kafka broker %s after %d attempts", bootstrap, attempt)
            return admin
        except (KafkaError, OSError) as exc:
            await close_quietly(admin)
            cut_off = await diagnose(bootstrap, security)  # raises BrokerAuthError when retrying cannot help
            dropped = dropped + 1 if cut_off else 0
            if cut_off and dropped >= DROPPED_LIMIT:
                raise dropped_error(
                    bootstrap, security.get("security_protocol", "PLAINTEXT"), cut_off, dropped
                ) from exc
            if deadline is not None and time.monotonic() + retry > deadline:
                raise BrokerUnavailableError(
                    f"cannot reach the Kafka broker at {bootstrap} ({exc!r}) after {attempt} attempts: start the "
                    "broker, or point STREAM_DEDUPE_BROKER / --broker at a running one"
                ) from exc
            if cut_off:
                log.warning(
                    "%s; retrying in %.0fs (attempt %d) - check STREAM_DEDUPE_SECURITY_PROTOCOL",
                    cut_off,
                    retry,
                    attempt,
                )
            else:
                log.warning(
                    "Kafka broker %s not reachable (%s); retrying in %.0fs (attempt %d) - start the broker or fix "
                    "--broker / STREAM_DEDUPE_BROKER",
                    bootstrap,
                    type(exc).__name__,
                    retry,
                    attempt,
                )
            await asyncio.sleep(retry)


async def close_quietly(admin: AIOKafkaAdminClient) -> None:
    """Close an admin client, logging (not raising) what goes wrong."""
    try:
        await admin.close()
    except Exception:
        log.debug("admin close failed", exc_info=True)
