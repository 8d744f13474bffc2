"""Settings of the worker's read-only ``POST /query`` endpoint: address, token, bounds.

Validated by :class:`~stream_dedupe.worker.settings.WorkerSettings`; served by
:mod:`stream_dedupe.worker.query_http`. Imports nothing of the worker at run time.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from stream_dedupe.worker.errors import WorkerConfigError

if TYPE_CHECKING:
    from stream_dedupe.worker.settings import WorkerSettings

ENV_PREFIX = "STREAM_DEDUPE_"


def check_query(settings: WorkerSettings) -> None:
    """Validate the query endpoint's settings; called by ``WorkerSettings.__post_init__``.

    Raises:
        WorkerConfigError: a bad address, the web port, a token file without the endpoint or unreadable, bad bounds.

    """
    if settings.query_bind is None:
        if settings.query_token_file is not None:
            raise WorkerConfigError(
                f"query_token_file is given but the query endpoint is off: set {ENV_PREFIX}QUERY_BIND / "
                "--query-bind HOST:PORT to turn it on, or unset the token file"
            )
    else:
        _, port = parse_bind(settings.query_bind)
        if port == settings.web_port:
            raise WorkerConfigError(
                f"query_bind {settings.query_bind!r} uses the web (metrics) port {settings.web_port}: give the query "
                f"endpoint a port of its own ({ENV_PREFIX}QUERY_BIND / --query-bind HOST:PORT)"
            )
    if settings.query_token_file is not None:
        read_query_token(settings.query_token_file)
    s = settings
    if s.query_max_docs < 1 or s.query_max_inflight < 1 or not 0 < s.query_timeout <= 600:
        raise WorkerConfigError(
            f"query_max_docs (got {s.query_max_docs}) and query_max_inflight (got {s.query_max_inflight}) must be "
            f">= 1, query_timeout (got {s.query_timeout}) in (0, 600] seconds (STREAM_DEDUPE_QUERY_* / --query-*)"
        )


def parse_bind(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPv6]:PORT`` or ``PORT`` (host ``127.0.0.1``) as ``(host, port)``.

    Raises:
        WorkerConfigError: if the text is not one of those forms or the port is not in 1-65535.

    """
    value = text.strip()
    host, sep, port_text = value.rpartition(":")
    if not sep:
        host, port_text = "127.0.0.1", value
    elif host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        host = ""  # an IPv6 address without brackets: ambiguous
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not host or not 1 <= port <= 65535:
        raise WorkerConfigError(
            f"query_bind {text!r} is not HOST:PORT, [IPv6]:PORT or PORT with a port in 1-65535: fix "
            f"{ENV_PREFIX}QUERY_BIND / --query-bind (e.g. 127.0.0.1:6067)"
        )
    return host, port


def read_query_token(path: Path) -> str:
    """The bearer token of the query endpoint (one trailing newline ignored).

    Raises:
        WorkerConfigError: if the file is missing, unreadable or empty.

    """
    where = f"{ENV_PREFIX}QUERY_TOKEN_FILE / --query-token-file"
    try:
        token = Path(path).read_text(encoding="utf-8").removesuffix("\n").removesuffix("\r")
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkerConfigError(f"query_token_file {str(path)!r} cannot be read ({exc}): fix {where}") from exc
    if not token.strip():
        raise WorkerConfigError(f"query_token_file {str(path)!r} is empty: write the token into it, or unset {where}")
    return token
