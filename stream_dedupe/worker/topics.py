"""Creating and checking the worker's topics with the aiokafka admin client.

The worker creates what is missing before Faust starts (Faust creates its changelog topics
itself, compacted) and refuses to start against an internal index topic that does not have
exactly one partition: the decide stage and its tables are single-partition by design.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # type: ignore[import-untyped]
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType  # type: ignore[import-untyped]
from aiokafka.errors import KafkaError, TopicAlreadyExistsError  # type: ignore[import-untyped]

from stream_dedupe.worker.errors import BrokerUnavailableError, TopicLayoutError
from stream_dedupe.worker.security import client_security, diagnose, dropped_error
from stream_dedupe.worker.settings import WorkerSettings

log = logging.getLogger("stream_dedupe.worker.topics")

COMPACT = {"cleanup.policy": "compact"}
#: Handshakes in a row cut off by a listening broker before :func:`connect_admin` gives up.
DROPPED_LIMIT = 3


@dataclass(frozen=True)
class TopicSpec:
    """A topic the worker needs.

    Attributes:
        name: Topic name.
        partitions: Partitions when created.
        config: Topic configuration when created.
        exact_partitions: When set, an existing topic must have exactly ``partitions``.

    """

    name: str
    partitions: int
    config: dict[str, str]
    exact_partitions: bool = False


def worker_topics(settings: WorkerSettings) -> list[TopicSpec]:
    """The topics of a worker, with the settings they are created with."""
    n = settings.input_partitions
    return [
        TopicSpec(settings.input_topic, n, {}),
        TopicSpec(settings.events_topic, n, {}),
        TopicSpec(settings.deduped_topic, n, dict(COMPACT)),
        TopicSpec(settings.dlq_topic, n, {}),
        TopicSpec(settings.index_topic, 1, {}, exact_partitions=True),
    ]


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
                log.warning("connected to Kafka broker %s after %d attempts", bootstrap, attempt)
            return admin
        except (KafkaError, OSError) as exc:
            await _close_quietly(admin)
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
                    "STREAM_DEDUPE_BROKER",
                    bootstrap,
                    type(exc).__name__,
                    retry,
                    attempt,
                )
            await asyncio.sleep(retry)


async def _close_quietly(admin: AIOKafkaAdminClient) -> None:
    try:
        await admin.close()
    except Exception:
        log.debug("admin close failed", exc_info=True)


async def partition_counts(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, int]:
    """Partition count of each existing topic among ``names``."""
    existing = set(await admin.list_topics())
    wanted = [n for n in names if n in existing]
    if not wanted:
        return {}
    described: Any = await admin.describe_topics(wanted)
    return {t["topic"]: len(t["partitions"]) for t in described if not t.get("error_code")}


async def ensure_topics(admin: AIOKafkaAdminClient, specs: list[TopicSpec]) -> list[str]:
    """Create the missing topics and check the existing ones; returns the names created.

    Raises:
        TopicLayoutError: if an existing topic has a partition count the worker cannot use.

    """
    counts = await partition_counts(admin, [s.name for s in specs])
    for spec in specs:
        have = counts.get(spec.name)
        if have is not None and spec.exact_partitions and have != spec.partitions:
            raise TopicLayoutError(
                f"topic {spec.name!r} has {have} partitions but the worker's decide stage needs exactly "
                f"{spec.partitions} (its tables are single-partition): delete the topic "
                f"(kafka-topics.sh --delete --topic {spec.name}) so the worker recreates it, or use another "
                "app id (STREAM_DEDUPE_APP_ID / --app-id) which names a new index topic"
            )
    missing = [s for s in specs if s.name not in counts]
    if missing:
        new = [
            NewTopic(s.name, num_partitions=s.partitions, replication_factor=1, topic_configs=s.config) for s in missing
        ]
        try:
            await admin.create_topics(new, timeout_ms=30_000)
        except TopicAlreadyExistsError:
            log.info("topics created concurrently by another client")
        await _wait_visible(admin, [s.name for s in missing])
        for s in missing:
            log.info("created topic %s (%d partitions, %s)", s.name, s.partitions, s.config or "default config")
    return [s.name for s in missing]


async def _wait_visible(admin: AIOKafkaAdminClient, names: list[str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        counts = await partition_counts(admin, names)
        if all(n in counts for n in names):
            return
        await asyncio.sleep(0.2)
    raise TopicLayoutError(f"topics {names} were created but are not visible after {timeout:.0f}s: check the broker")


async def topic_configs(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, dict[str, str]]:
    """The configuration entries of each topic (e.g. to check ``cleanup.policy``)."""
    resources = [ConfigResource(ConfigResourceType.TOPIC, n) for n in names]
    out: dict[str, dict[str, str]] = {}
    for response in await admin.describe_configs(resources):
        for resource in response.resources:
            out[resource[3]] = {entry[0]: entry[1] for entry in resource[4]}
    return out


async def prepare_worker_topics(settings: WorkerSettings, wait: float | None = None) -> list[str]:
    """Connect (waiting for the broker), create missing topics, check the layout; the names created."""
    admin = await connect_admin(settings.bootstrap, wait, settings=settings)
    try:
        return await ensure_topics(admin, worker_topics(settings))
    finally:
        await _close_quietly(admin)


async def prepare_input_topic(
    bootstrap: str, topic: str, partitions: int, wait: float | None = 30.0, settings: WorkerSettings | None = None
) -> bool:
    """Create the input topic if missing (for ``produce``); True when it was created.

    ``settings`` gives the client's security settings (None: PLAINTEXT).
    """
    admin = await connect_admin(bootstrap, wait, settings=settings)
    try:
        return bool(await ensure_topics(admin, [TopicSpec(topic, partitions, {})]))
    finally:
        await _close_quietly(admin)
