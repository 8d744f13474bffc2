"""Kafka security (TLS, SASL/SCRAM) from the worker settings, in one place for every client.

The settings ``security_protocol``, ``sasl_*`` and ``ssl_*`` (see :mod:`stream_dedupe.worker.settings`)
become:

- keyword arguments for aiokafka clients (:func:`client_security`: admin, producers, consumers);
- Faust's ``broker_credentials`` (:func:`faust_credentials`): ``faust.SASLCredentials`` passes the
  mechanism (SCRAM-SHA-256/512, PLAIN) through to aiokafka and switches to ``SASL_SSL`` when it is
  given an SSL context; ``faust.SSLCredentials`` for ``SSL``. No workaround is needed with
  faust-streaming 0.15.

:func:`diagnose` tells an authentication or TLS failure (which retrying cannot fix) from an
unreachable broker (which the worker waits for), so that wrong credentials stop the process at
start-up with a message naming the settings to fix.

This module imports nothing of the worker at run time: :mod:`stream_dedupe.worker.settings` calls
:func:`check_security` to validate the fields.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stream_dedupe.worker.errors import BrokerAuthError, WorkerConfigError

if TYPE_CHECKING:
    from stream_dedupe.worker.settings import WorkerSettings

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
#: Settings that name files (converted to ``Path`` when read from the environment).
PATH_SETTINGS = ("sasl_password_file", "ssl_cafile", "ssl_certfile", "ssl_keyfile")
#: How long :func:`diagnose` waits for each step of one connection attempt.
PROBE_TIMEOUT = 5.0


def where(name: str) -> str:
    """How a setting is given: ``STREAM_DEDUPE_<NAME> / --<name>``."""
    return f"STREAM_DEDUPE_{name.upper()} / --{name.replace('_', '-')}"


def uses_sasl(settings: WorkerSettings) -> bool:
    """True for ``SASL_PLAINTEXT`` and ``SASL_SSL``."""
    return settings.security_protocol.startswith("SASL_")


def uses_tls(settings: WorkerSettings) -> bool:
    """True for ``SSL`` and ``SASL_SSL``."""
    return settings.security_protocol.endswith("SSL")


def check_security(settings: WorkerSettings) -> None:
    """Validate (and upper-case) the security settings; called by ``WorkerSettings.__post_init__``.

    Raises:
        WorkerConfigError: unknown protocol or mechanism, SASL without user or password, credentials
            or certificate files given to a protocol that does not use them, unreadable files.

    """
    s = settings
    object.__setattr__(s, "security_protocol", s.security_protocol.strip().upper())
    object.__setattr__(s, "sasl_mechanism", s.sasl_mechanism.strip().upper())
    if s.security_protocol not in PROTOCOLS:
        raise WorkerConfigError(
            f"security_protocol {s.security_protocol!r} is not supported: use one of {', '.join(PROTOCOLS)} "
            f"(set {where('security_protocol')})"
        )
    if s.sasl_mechanism not in MECHANISMS:
        raise WorkerConfigError(
            f"sasl_mechanism {s.sasl_mechanism!r} is not supported: use one of {', '.join(MECHANISMS)} "
            f"(set {where('sasl_mechanism')})"
        )
    sasl_given = [n for n in ("sasl_username", "sasl_password", "sasl_password_file") if getattr(s, n)]
    if uses_sasl(s):
        if not s.sasl_username:
            raise WorkerConfigError(
                f"security_protocol {s.security_protocol} needs a SASL user: set {where('sasl_username')}"
            )
        if not s.sasl_password and s.sasl_password_file is None:
            raise WorkerConfigError(
                f"security_protocol {s.security_protocol} needs a SASL password: set {where('sasl_password_file')} "
                f"(a mounted secret) or {where('sasl_password')}"
            )
    elif sasl_given:
        raise WorkerConfigError(
            f"{', '.join(sasl_given)} given but security_protocol is {s.security_protocol}, which sends no SASL "
            f"credentials: set {where('security_protocol')} to SASL_PLAINTEXT or SASL_SSL, or unset them"
        )
    tls_given = [n for n in ("ssl_cafile", "ssl_certfile", "ssl_keyfile") if getattr(s, n) is not None]
    if tls_given and not uses_tls(s):
        raise WorkerConfigError(
            f"{', '.join(tls_given)} given but security_protocol is {s.security_protocol}, which does not use TLS: "
            f"set {where('security_protocol')} to SSL or SASL_SSL, or unset them"
        )
    if s.ssl_keyfile is not None and s.ssl_certfile is None:
        raise WorkerConfigError(f"ssl_keyfile needs the client certificate too: set {where('ssl_certfile')}")
    for name in PATH_SETTINGS:
        if getattr(s, name) is not None:
            _check_readable(name, Path(getattr(s, name)))
    if uses_sasl(s):
        read_password(s)  # an empty secret file is an error now, not an authentication failure later


def _check_readable(name: str, path: Path) -> None:
    if not path.is_file():
        raise WorkerConfigError(f"{name} {str(path)!r} does not exist or is not a file: fix {where(name)}")
    try:
        with path.open("rb") as f:
            f.read(1)
    except OSError as exc:
        raise WorkerConfigError(
            f"{name} {str(path)!r} cannot be read ({exc.strerror}): fix its permissions or {where(name)}"
        ) from exc


def read_password(settings: WorkerSettings) -> str | None:
    """The SASL password: the file's content (read now, one trailing newline dropped) or the setting.

    Raises:
        WorkerConfigError: if the password file cannot be read or is empty.

    """
    path = settings.sasl_password_file
    if path is None:
        return settings.sasl_password
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkerConfigError(
            f"sasl_password_file {str(path)!r} cannot be read ({exc}): fix {where('sasl_password_file')}"
        ) from exc
    password = text.removesuffix("\n").removesuffix("\r")
    if not password:
        raise WorkerConfigError(
            f"sasl_password_file {str(path)!r} is empty: mount the secret holding the password there "
            f"or fix {where('sasl_password_file')}"
        )
    return password


def ssl_context(settings: WorkerSettings) -> ssl.SSLContext | None:
    """The client TLS context (None unless the protocol uses TLS).

    Verifies the broker certificate and host name against ``ssl_cafile`` (else the system CAs) and
    presents ``ssl_certfile``/``ssl_keyfile`` when given (mutual TLS).

    Raises:
        WorkerConfigError: if a file is not a valid PEM CA bundle, certificate or matching key.

    """
    if not uses_tls(settings):
        return None
    from aiokafka.helpers import create_ssl_context  # type: ignore[import-untyped]

    s = settings
    try:
        context: ssl.SSLContext = create_ssl_context(
            cafile=_opt_str(s.ssl_cafile), certfile=_opt_str(s.ssl_certfile), keyfile=_opt_str(s.ssl_keyfile)
        )
        return context
    except (ssl.SSLError, OSError) as exc:
        raise WorkerConfigError(
            f"cannot load the TLS files (ssl_cafile={_opt_str(s.ssl_cafile)}, ssl_certfile={_opt_str(s.ssl_certfile)}, "
            f"ssl_keyfile={_opt_str(s.ssl_keyfile)}): {exc}. They must be PEM files (CA bundle, client certificate, "
            f"its unencrypted private key): fix {where('ssl_cafile')}, {where('ssl_certfile')}, {where('ssl_keyfile')}"
        ) from exc


def _opt_str(path: Path | str | None) -> str | None:
    return None if path is None else os.fspath(path)


def client_security(settings: WorkerSettings) -> dict[str, Any]:
    """Keyword arguments for ``AIOKafkaProducer``/``AIOKafkaConsumer``/``AIOKafkaAdminClient``.

    Reads the password file each time (a rotated secret is picked up by the next client).
    """
    s = settings
    kwargs: dict[str, Any] = {"security_protocol": s.security_protocol}
    context = ssl_context(s)
    if context is not None:
        kwargs["ssl_context"] = context
    if uses_sasl(s):
        kwargs.update(
            sasl_mechanism=s.sasl_mechanism, sasl_plain_username=s.sasl_username, sasl_plain_password=read_password(s)
        )
    return kwargs


def faust_credentials(settings: WorkerSettings) -> Any:
    """``broker_credentials`` for ``faust.App`` (None for ``PLAINTEXT``).

    Faust 0.15 maps ``SASLCredentials`` to ``security_protocol`` SASL_PLAINTEXT, or SASL_SSL when
    an SSL context is given, with the mechanism and user/password unchanged; ``SSLCredentials``
    to SSL with the context (``faust/transport/drivers/aiokafka.py``, ``credentials_to_aiokafka_auth``).
    """
    from faust.auth import SASLCredentials, SSLCredentials

    s = settings
    context = ssl_context(s)
    if uses_sasl(s):
        return SASLCredentials(
            username=s.sasl_username, password=read_password(s), ssl_context=context, mechanism=s.sasl_mechanism
        )
    if context is not None:
        return SSLCredentials(context)
    return None


def describe(settings: WorkerSettings) -> str:
    """One line for logs (never the password)."""
    s = settings
    text = s.security_protocol
    if uses_sasl(s):
        text += f", {s.sasl_mechanism} as {s.sasl_username!r}"
    if uses_tls(s):
        text += f", CA {_opt_str(s.ssl_cafile) or 'system'}"
        if s.ssl_certfile is not None:
            text += f", client certificate {_opt_str(s.ssl_certfile)}"
    return text


# ------------------------------------------------------------------ start-up diagnosis ----
async def diagnose(bootstrap: str, security: dict[str, Any]) -> str | None:
    """Why the bootstrap servers cannot be used, when retrying will not help.

    Opens one connection per server with the client settings ``security`` and asks for metadata.

    Returns:
        None when no server answered at the TCP level (unreachable: wait and retry) or one works
        now; otherwise a description of a server that accepted the TCP connection and then closed
        it during the handshake (a PLAINTEXT client on a SASL or TLS listener, a missing client
        certificate): one such answer can be a broker restarting, several in a row are not.

    Raises:
        BrokerAuthError: the broker rejected the credentials, the mechanism or the TLS certificates.

    """
    from aiokafka.errors import KafkaError  # type: ignore[import-untyped]

    from stream_dedupe.worker.faust_compat import probe_metadata

    dropped = None
    for server in bootstrap.split(","):
        host, _, port_text = server.strip().rpartition(":")
        host = host.strip("[]")
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port_text)), PROBE_TIMEOUT)
            writer.close()
        except (OSError, TimeoutError, ValueError):
            continue  # not listening (or not resolvable): the caller waits for it
        try:
            await asyncio.wait_for(
                probe_metadata(host, int(port_text), int(PROBE_TIMEOUT * 1000), security), 2 * PROBE_TIMEOUT
            )
            return None
        except TimeoutError:
            continue  # accepted but slow (a broker starting): not a verdict
        except (KafkaError, OSError) as exc:
            error = auth_error(server, security, exc)
            if error is not None:
                raise error from exc
            dropped = f"{server} accepted the connection and closed it during the handshake ({exc!r})"
    return dropped


_SASL_REJECTED = ("SaslAuthenticationFailed", "AuthenticationFailedError", "AuthenticationMethodNotSupported")


def auth_error(server: str, security: dict[str, Any], exc: BaseException) -> BrokerAuthError | None:
    """The :class:`BrokerAuthError` for a definitive handshake failure, else None."""
    kind = type(exc).__name__
    protocol = security.get("security_protocol", "PLAINTEXT")
    mechanism, user = security.get("sasl_mechanism"), security.get("sasl_plain_username")
    if kind in _SASL_REJECTED:
        return BrokerAuthError(
            f"the Kafka broker at {server} rejected the SASL credentials of user {user!r} ({mechanism}): {exc}. "
            f"Fix {where('sasl_username')} and the password in {where('sasl_password_file')} (or "
            f"{where('sasl_password')}); {where('sasl_mechanism')} must be a mechanism the user has "
            "credentials for on the broker"
        )
    if kind == "UnsupportedSaslMechanismError":
        return BrokerAuthError(
            f"the Kafka broker at {server} does not enable SASL mechanism {mechanism} ({exc}): set "
            f"{where('sasl_mechanism')} to one its listener enables ({', '.join(MECHANISMS)})"
        )
    if kind == "IllegalSaslStateError":
        return BrokerAuthError(
            f"the Kafka listener at {server} does not speak SASL but security_protocol is {protocol}: point "
            f"{where('broker')} at the SASL listener, or set {where('security_protocol')} to what the listener uses"
        )
    if isinstance(exc, ssl.SSLCertVerificationError):
        return BrokerAuthError(
            f"the TLS certificate of the Kafka broker at {server} is not trusted ({exc.verify_message}): set "
            f"{where('ssl_cafile')} to the CA bundle that signed it (and use the host name or address the "
            f"certificate names in {where('broker')})"
        )
    if isinstance(exc, ssl.SSLError) and not isinstance(exc, ssl.SSLEOFError | ssl.SSLZeroReturnError):
        return BrokerAuthError(
            f"the TLS handshake with the Kafka broker at {server} failed ({exc}): check {where('security_protocol')} "
            f"(is the listener TLS?), {where('ssl_certfile')} and {where('ssl_keyfile')}"
        )
    return None


def dropped_error(bootstrap: str, protocol: str, detail: str, attempts: int) -> BrokerAuthError:
    """The error after ``attempts`` handshakes in a row were cut off by the broker."""
    return BrokerAuthError(
        f"the Kafka broker at {bootstrap} accepts connections but closes them during the handshake "
        f"({attempts} attempts; last: {detail}). With security_protocol {protocol}: the listener may require "
        f"SASL or TLS (set {where('security_protocol')} to SASL_PLAINTEXT, SASL_SSL or SSL), a client "
        f"certificate (set {where('ssl_certfile')} and {where('ssl_keyfile')}), or {where('broker')} names "
        "the wrong port"
    )
