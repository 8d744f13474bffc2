"""The one exception hierarchy of stream-dedupe.

Every error a user can cause derives from :class:`StreamDedupeError`, and its message says how to
fix the problem, not only what went wrong.
"""


class StreamDedupeError(Exception):
    """Root of all stream-dedupe errors."""


class ConfigError(StreamDedupeError):
    """A parameter or option is invalid; the message names it and the accepted values."""


class StateMismatchError(StreamDedupeError):
    """The state directory was built with parameters different from the ones requested."""


class StateError(StreamDedupeError):
    """The state directory cannot be opened or is damaged."""


class StateInUseError(StateError):
    """Another process holds the state directory's lock (one process uses a state at a time)."""
