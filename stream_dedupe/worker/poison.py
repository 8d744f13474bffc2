"""Which errors a stage retries, which it blames on a record (the poison-record policy), which stop it.

* **transient**: the broker is unreachable or slow (retriable Kafka errors, timeouts, socket
  errors): waited out, never counted against a record;
* **record errors**: anything that is not a Kafka error (the engine failing on a record) and the
  broker refusing a record (too large, corrupt): retried, then dead-lettered as ``unprocessable``
  after ``poison_retries`` failures in a row;
* everything else (fenced by a newer decider, not authorized, ...) stops the stage as before:
  retrying cannot help and no record is to blame.
"""

from __future__ import annotations

import asyncio

from aiokafka import errors  # type: ignore[import-untyped]

_RECORD_KAFKA_ERRORS = (
    errors.MessageSizeTooLargeError,
    errors.RecordTooLargeError,
    errors.RecordListTooLargeError,
    errors.CorruptRecordException,
    errors.InvalidMessageError,
)


class ChangelogError(RuntimeError):
    """The state's changelog could not be written after retries: no record is to blame."""


def is_transient(exc: BaseException) -> bool:
    """True for a broker outage or a slow broker: retry without blaming a record."""
    if isinstance(exc, errors.KafkaError):
        return bool(getattr(exc, "retriable", False)) or isinstance(exc, errors.KafkaTimeoutError)
    return isinstance(exc, (OSError, asyncio.TimeoutError, TimeoutError))


def is_record_error(exc: BaseException) -> bool:
    """True for an error a record can cause (see the module docstring)."""
    if isinstance(exc, errors.KafkaError):
        return isinstance(exc, _RECORD_KAFKA_ERRORS)
    return not is_transient(exc) and isinstance(exc, Exception) and not isinstance(exc, ChangelogError)
