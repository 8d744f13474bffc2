"""The worker's log filters: repeated client errors rate-limited, retried ones not reported as errors."""

from __future__ import annotations

import logging

from aiokafka.errors import GroupAuthorizationFailedError, GroupCoordinatorNotAvailableError

from stream_dedupe.worker.logfilters import RepeatFilter


def _record(error: Exception, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(
        "aiokafka.consumer.group_coordinator",
        level,
        __file__,
        1,
        "Group Coordinator Request failed: %s",
        (error,),
        None,
    )


def test_a_retried_coordinator_lookup_is_a_warning_that_says_so() -> None:
    record = _record(GroupCoordinatorNotAvailableError())
    assert RepeatFilter().filter(record)
    assert record.levelno == logging.WARNING and record.levelname == "WARNING"
    assert "retried" in record.getMessage() and "GroupCoordinatorNotAvailableError" in record.getMessage()


def test_an_error_that_is_not_retried_stays_an_error() -> None:
    record = _record(GroupAuthorizationFailedError())
    RepeatFilter().filter(record)
    assert record.levelno == logging.ERROR and "retried" not in record.getMessage()


def test_repeats_are_suppressed_then_counted() -> None:
    repeats = RepeatFilter(interval=3600)
    first = _record(GroupCoordinatorNotAvailableError())
    assert repeats.filter(first)
    assert not any(repeats.filter(_record(GroupCoordinatorNotAvailableError())) for _ in range(5))


def test_a_refused_connection_that_aiokafka_retries_is_a_warning_that_says_so() -> None:
    record = logging.LogRecord(
        "aiokafka.client",
        logging.ERROR,
        __file__,
        1,
        'Unable connect to "%s:%s": %s',
        ("127.0.0.1", 9092, "refused"),
        None,
    )
    assert RepeatFilter().filter(record)
    assert record.levelno == logging.WARNING and record.getMessage().endswith("refused (retried)")
    metadata = logging.LogRecord(
        "aiokafka.client", logging.ERROR, __file__, 1, "Unable to update metadata from %s", ([1],), None
    )
    assert RepeatFilter().filter(metadata)
    assert metadata.levelno == logging.WARNING
    assert metadata.getMessage() == "Unable to update metadata from [1] (retried)"
    other = logging.LogRecord("aiokafka.client", logging.ERROR, __file__, 1, "Unexpected error: %s", ("x",), None)
    RepeatFilter().filter(other)
    assert other.levelno == logging.ERROR


def _captured(filt: RepeatFilter) -> list[str]:
    """INFO messages of a real mode service's start and stop (as Faust's services log them), through ``filt``."""
    import asyncio

    from mode import Service

    class Demo(Service):  # type: ignore[misc]
        pass

    messages: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    handler = Capture()
    handler.addFilter(filt)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:

        async def main() -> None:
            service = Demo()
            await service.start()
            await service.stop()

        asyncio.run(main())
        for name, text in (
            (
                "faust.tables.recovery",
                "[^---Recovery]: Still fetching changelog topics for recovery, estimated time remaining 1.2 minutes",
            ),
            ("stream_dedupe.worker", "engine ready: 20 documents in state"),
            ("faust.transport.drivers.aiokafka", "Setting newly assigned partitions\n+Topic Partition Set---+"),
            ("faust.agents.agent", "[^---Agent: stream_dedupe.worker.ap[.]decide]: Starting..."),
        ):
            logging.getLogger(name).info(text)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    return messages


def _overlap() -> logging.LogRecord:
    return logging.LogRecord(
        "mode.timers",
        logging.WARNING,
        __file__,
        1,
        "Timer %s is overlapping (interval=%r runtime=%r)",
        ("steer", 0.2, 0.22),
        None,
    )


def test_an_overlapping_timer_is_not_a_warning() -> None:
    assert not RepeatFilter().filter(_overlap())  # left out below debug
    shown = _overlap()
    assert RepeatFilter(quiet_services=False).filter(shown) and shown.levelno == logging.INFO


def test_faust_service_steps_are_left_out_unless_debug() -> None:
    quiet = _captured(RepeatFilter())
    assert not any(m.endswith(("Starting...", "Stopping...")) for m in quiet), quiet  # the agent's too
    assert not any(m.startswith("Setting newly assigned partitions") for m in quiet)
    assert any("Still fetching changelog topics" in m for m in quiet)  # recovery progress stays
    assert "engine ready: 20 documents in state" in quiet
    verbose = _captured(RepeatFilter(quiet_services=False))
    assert any(m.endswith("Starting...") for m in verbose) and any(m.endswith("Stopping...") for m in verbose)
