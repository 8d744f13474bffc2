"""Filters of the worker's log: repeated client errors rate-limited, retried ones not called errors."""

from __future__ import annotations

import logging
import re
import time

#: mode's warning when a timer's callback ran longer than its interval: the worker's timers are
#: coroutines awaited before the next run (the steering timer builds the engine at start), so
#: an overlap delays the next run and is not a problem worth a warning.
_TIMER_OVERLAP = "Timer %s is overlapping (interval=%r runtime=%r)"
#: aiokafka's message when a consumer group's coordinator lookup fails (logged at ERROR, then retried).
_COORDINATOR_LOOKUP = "Group Coordinator Request failed: %s"


#: Faust's, mode's and aiokafka's INFO records of routine steps: each start and stop logged
#: ~200 lines (every table, store and service "Starting..."/"Stopping...", the subscription and
#: assignment tables, "opening partition" per table), burying the worker's own lines. Dropped
#: unless the log level is DEBUG; recovery progress, group membership and every warning stay.
_SERVICE_CHATTER = re.compile(
    r"(\[\^.*?\]: )?("
    r"Starting\.\.\.|Stopping\.\.\.|Cleanup|Creating topic .*|Waiting for .*|Gathering .*|"
    r"Closing event loop|Flush producer buffer\.\.\.|Wait for streams\.\.\.|Resuming flow\.\.\.|"
    r"Seek stream partitions .*|Highwater for .*|active offsets at start of reading:.*|"
    r"Updating subscribed topics to:.*|Subscribed to topic\(s\):.*|Setting newly assigned partitions.*|"
    r"Revoking previously assigned partitions.*|Executing _on_partitions_assigned|opening partition .*|"
    r"generation id .*|Closing rocksdb on stop|Consumer shutting down for user cancel\.|Signal received: .*|"
    r"Timer .* is overlapping .*"
    r")\s*",
    re.DOTALL,
)


def service_chatter(record: logging.LogRecord) -> bool:
    """True for an INFO record of Faust's, mode's or aiokafka's routine steps (see :data:`_SERVICE_CHATTER`)."""
    if record.levelno != logging.INFO or record.name.startswith("stream_dedupe"):
        return False
    return _SERVICE_CHATTER.fullmatch(record.getMessage()) is not None


class RepeatFilter(logging.Filter):
    """Lets one record per (logger, message template) through every ``interval`` seconds; softens retried errors.

    While the broker is down, aiokafka logs the same connection error thousands of times a
    second; this keeps the log readable: the first record, then one per interval with the number
    of identical records suppressed in between.

    Args:
        interval: Seconds between two records of the same template (WARNING and above).
        quiet_services: Drop Faust's routine service steps (:func:`service_chatter`); False at DEBUG.

    """

    def __init__(self, interval: float = 10.0, quiet_services: bool = True) -> None:
        super().__init__()
        self.interval = interval
        self.quiet_services = quiet_services
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        """See :class:`logging.Filter` (a retried coordinator lookup is softened first: :func:`soften_retried`)."""
        template = str(record.msg)
        soften_retried(record)
        if self.quiet_services and service_chatter(record):
            return False
        if record.name.startswith("stream_dedupe") or record.levelno < logging.WARNING:
            return True
        key = (record.name, template)
        now = time.monotonic()
        last, suppressed = self._seen.get(key, (0.0, 0))
        if now - last < self.interval:
            self._seen[key] = (last, suppressed + 1)
            return False
        self._seen[key] = (now, 0)
        if suppressed:
            record.msg = f"{record.msg} [{suppressed} identical messages suppressed in the last {self.interval:.0f}s]"
        return True


def _retried_coordinator_lookup(record: logging.LogRecord) -> bool:
    """True for aiokafka's ERROR record of a coordinator lookup it retries (a broker still starting)."""
    if record.msg != _COORDINATOR_LOOKUP or record.levelno != logging.ERROR or not record.args:
        return False
    error = record.args[0] if isinstance(record.args, tuple) else None
    return bool(getattr(error, "retriable", False))


#: aiokafka's ERROR records of a failed connection, which it (or the worker) retries: a broker
#: that is down or restarting. The worker says so itself, with what to do
#: (``stream_dedupe_broker_connected``, "Kafka broker ... not reachable ...; retrying").
_RETRIED_CONNECTS = (
    'Unable connect to "%s:%s": %s',
    "Unable connect to node with id %s: %s",
    "Unable to update metadata from %s",  # retried after a backoff (faust_compat.throttle_metadata_retries)
)


def soften_retried(record: logging.LogRecord) -> None:
    """Log a retried coordinator lookup or connection as a WARNING that says it is retried.

    A new broker creates its consumer offsets topic in the first seconds, and until then every
    group's coordinator lookup fails with ``GroupCoordinatorNotAvailableError``; aiokafka logs
    each at ERROR and retries, so a worker started beside a new broker looked broken. The same
    for a connection refused while a broker restarts.
    """
    if record.msg == _TIMER_OVERLAP and record.levelno == logging.WARNING:
        record.levelno, record.levelname = logging.INFO, "INFO"  # the worker's timers await, they never pile up
    elif _retried_coordinator_lookup(record):
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.msg = _COORDINATOR_LOOKUP + " (retried: the broker is down, or still electing the group's coordinator)"
    elif record.levelno == logging.ERROR and record.msg in _RETRIED_CONNECTS:
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.msg = f"{record.msg} (retried)"
