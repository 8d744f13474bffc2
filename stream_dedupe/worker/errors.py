"""Errors of the Kafka worker; all derive from :class:`~stream_dedupe.errors.StreamDedupeError`."""

from __future__ import annotations

from stream_dedupe.errors import StreamDedupeError


class WorkerConfigError(StreamDedupeError):
    """A worker setting (flag or ``STREAM_DEDUPE_*`` variable) is invalid; the message names it."""


class TopicLayoutError(StreamDedupeError):
    """An existing topic has a layout (partition count) the worker cannot run against."""


class BrokerUnavailableError(StreamDedupeError):
    """The Kafka broker could not be reached within the configured wait."""


class BrokerAuthError(WorkerConfigError):
    """The broker refused the client's credentials or TLS setup; retrying cannot help (the message names the fix)."""
