"""Kafka security settings: validation, client arguments, Faust credentials, real TLS handshakes.

The TLS part uses real files (a CA, server and client certificates made with the openssl CLI) and
real handshakes on 127.0.0.1; SASL/SCRAM against a real broker is in
tests/integration/test_kafka_security.py.
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from stream_dedupe.worker.errors import BrokerAuthError, WorkerConfigError
from stream_dedupe.worker.security import auth_error, client_security, describe, diagnose, faust_credentials
from stream_dedupe.worker.settings import WorkerSettings

SASL = {"security_protocol": "SASL_PLAINTEXT", "sasl_username": "alice"}


# ---------------------------------------------------------------- certificates ----
def _openssl(*args: str) -> None:
    exe = shutil.which("openssl")
    assert exe, "openssl missing: apt-get install -y openssl"
    done = subprocess.run([exe, *args], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"openssl {' '.join(args)} failed:\n{done.stderr}"


def _issue(d: Path, name: str, cn: str, ext: str, ca: str = "ca") -> None:
    _openssl(
        *("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/{name}.key", "-out", f"{d}/{name}.csr"),
        *("-subj", f"/CN={cn}"),
    )
    (d / f"{name}.ext").write_text(ext + "\n")
    _openssl(
        *("x509", "-req", "-in", f"{d}/{name}.csr", "-CA", f"{d}/{ca}.crt", "-CAkey", f"{d}/{ca}.key"),
        *("-CAcreateserial", "-out", f"{d}/{name}.crt", "-days", "2", "-extfile", f"{d}/{name}.ext"),
    )


def _ca(d: Path, name: str) -> None:
    _openssl(
        *("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/{name}.key", "-out", f"{d}/{name}.crt"),
        *("-days", "2", "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE"),
        *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ca.crt, server.crt/key (127.0.0.1), client.crt/key signed by ca; other-ca.crt signs nothing used."""
    d = tmp_path_factory.mktemp("pki")
    _ca(d, "ca")
    _ca(d, "other-ca")
    _issue(d, "server", "127.0.0.1", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth")
    _issue(d, "client", "sd-client", "extendedKeyUsage=clientAuth")
    return d


def _server_context(pki: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "server.crt"), str(pki / "server.key"))
    ctx.verify_mode = ssl.CERT_REQUIRED  # mutual TLS, as the test broker's SASL_SSL listener
    return ctx


async def _with_server(handler: Callable[[Any, Any], Awaitable[None]], tls: ssl.SSLContext | None, body: Any) -> Any:
    server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    try:
        return await body(port)
    finally:
        server.close()


# ------------------------------------------------------------------- validation ----
def test_defaults_are_plaintext_without_credentials() -> None:
    s = WorkerSettings()
    assert s.security_protocol == "PLAINTEXT" and s.sasl_mechanism == "SCRAM-SHA-512"
    assert client_security(s) == {"security_protocol": "PLAINTEXT"}
    assert faust_credentials(s) is None and s.faust_credentials() is None


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"security_protocol": "TLS"}, ["PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL", "STREAM_DEDUPE_SECURITY_PROTOCOL"]),
        ({**SASL, "sasl_password": "x", "sasl_mechanism": "GSSAPI"}, ["SCRAM-SHA-512", "STREAM_DEDUPE_SASL_MECHANISM"]),
        ({"security_protocol": "SASL_SSL", "sasl_password": "x"}, ["needs a SASL user", "--sasl-username"]),
        (SASL, ["needs a SASL password", "STREAM_DEDUPE_SASL_PASSWORD_FILE"]),
        ({"sasl_username": "alice"}, ["security_protocol is PLAINTEXT", "SASL_PLAINTEXT or SASL_SSL"]),
        ({**SASL, "sasl_password": "x", "ssl_cafile": Path("/x")}, ["does not use TLS", "SSL or SASL_SSL"]),
        (
            {**SASL, "sasl_password_file": Path("/nonexistent/pw")},
            ["does not exist", "STREAM_DEDUPE_SASL_PASSWORD_FILE"],
        ),
        ({"security_protocol": "SSL", "ssl_cafile": Path("/nonexistent")}, ["does not exist", "--ssl-cafile"]),
    ],
)
def test_invalid_security_settings_say_what_to_fix(given: dict[str, Any], expected: list[str]) -> None:
    with pytest.raises(WorkerConfigError) as info:
        WorkerSettings(**given)
    for text in expected:
        assert text in str(info.value)


def test_key_without_certificate_and_directories_are_refused(tmp_path: Path) -> None:
    key = tmp_path / "client.key"
    key.write_text("k")
    with pytest.raises(WorkerConfigError, match="STREAM_DEDUPE_SSL_CERTFILE"):
        WorkerSettings(security_protocol="SSL", ssl_keyfile=key)
    with pytest.raises(WorkerConfigError, match="not a file"):
        WorkerSettings(**SASL, sasl_password_file=tmp_path)


def test_empty_password_file_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "password"
    empty.write_text("\n")
    with pytest.raises(WorkerConfigError, match="is empty: mount the secret"):
        WorkerSettings(**SASL, sasl_password_file=empty)


def test_password_file_wins_and_is_read_when_a_client_is_built(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("from-the-file\n")  # a mounted secret usually ends with a newline
    s = WorkerSettings(**SASL, sasl_password="from-the-setting", sasl_password_file=secret)
    kwargs = client_security(s)
    assert kwargs == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "from-the-file",
    }
    secret.write_text("rotated")
    assert client_security(s)["sasl_plain_password"] == "rotated"
    assert "from-the-setting" not in repr(s) and "rotated" not in describe(s)


def test_environment_and_lower_case_values(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret")
    env = {
        "STREAM_DEDUPE_SECURITY_PROTOCOL": "sasl_plaintext",
        "STREAM_DEDUPE_SASL_MECHANISM": "scram-sha-256",
        "STREAM_DEDUPE_SASL_USERNAME": "bob",
        "STREAM_DEDUPE_SASL_PASSWORD_FILE": str(secret),
    }
    s = WorkerSettings.load(env)
    assert (s.security_protocol, s.sasl_mechanism, s.sasl_password_file) == ("SASL_PLAINTEXT", "SCRAM-SHA-256", secret)
    assert s.kafka_security()["sasl_mechanism"] == "SCRAM-SHA-256"
    assert WorkerSettings.load(env, sasl_username="carol").sasl_username == "carol"  # flag over variable


# ---------------------------------------------------------- TLS and Faust mapping ----
def test_ssl_context_from_files_and_faust_maps_it_like_our_clients(pki: Path) -> None:
    from faust.auth import SASLCredentials, SSLCredentials
    from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

    s = WorkerSettings(
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username="alice",
        sasl_password="pw",
        ssl_cafile=pki / "ca.crt",
        ssl_certfile=pki / "client.crt",
        ssl_keyfile=pki / "client.key",
    )
    ours = client_security(s)
    ctx = ours["ssl_context"]
    assert isinstance(ctx, ssl.SSLContext) and ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", "ca"),),)]
    creds = faust_credentials(s)
    assert isinstance(creds, SASLCredentials)
    faust_kwargs = dict(credentials_to_aiokafka_auth(creds))
    assert isinstance(faust_kwargs.pop("ssl_context"), ssl.SSLContext)
    assert faust_kwargs == {k: v for k, v in ours.items() if k != "ssl_context"}
    assert faust_kwargs["security_protocol"] == "SASL_SSL" and faust_kwargs["sasl_mechanism"] == "SCRAM-SHA-256"

    tls_only = WorkerSettings(security_protocol="SSL", ssl_cafile=pki / "ca.crt")
    assert isinstance(faust_credentials(tls_only), SSLCredentials)
    assert credentials_to_aiokafka_auth(faust_credentials(tls_only))["security_protocol"] == "SSL"


def test_bad_pem_files_are_a_config_error(pki: Path, tmp_path: Path) -> None:
    bogus = tmp_path / "ca.crt"
    bogus.write_text("not a certificate")
    with pytest.raises(WorkerConfigError, match="STREAM_DEDUPE_SSL_CAFILE"):
        client_security(WorkerSettings(security_protocol="SSL", ssl_cafile=bogus))
    mismatched = WorkerSettings(
        security_protocol="SSL", ssl_certfile=pki / "client.crt", ssl_keyfile=pki / "server.key"
    )
    with pytest.raises(WorkerConfigError, match="unencrypted private key"):
        client_security(mismatched)


def test_mutual_tls_handshake_with_the_built_context(pki: Path) -> None:
    good = WorkerSettings(
        security_protocol="SSL",
        ssl_cafile=pki / "ca.crt",
        ssl_certfile=pki / "client.crt",
        ssl_keyfile=pki / "client.key",
    )
    peers: list[Any] = []

    async def echo(reader: Any, writer: Any) -> None:
        peers.append(writer.get_extra_info("peercert"))
        writer.write(await reader.readexactly(4))
        await writer.drain()
        writer.close()

    async def talk(port: int) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_security(good)["ssl_context"])
        writer.write(b"ping")
        data = await reader.readexactly(4)
        writer.close()
        return bytes(data)

    assert asyncio.run(_with_server(echo, _server_context(pki), talk)) == b"ping"
    assert dict(x[0] for x in peers[0]["subject"])["commonName"] == "sd-client"


def test_untrusted_broker_certificate_is_reported_as_an_auth_error(pki: Path) -> None:
    wrong_ca = WorkerSettings(
        security_protocol="SASL_SSL", sasl_username="a", sasl_password="b", ssl_cafile=pki / "other-ca.crt"
    )

    async def idle(reader: Any, writer: Any) -> None:
        await reader.read(1)
        writer.close()

    async def probe(port: int) -> None:
        await diagnose(f"127.0.0.1:{port}", client_security(wrong_ca))

    with pytest.raises(BrokerAuthError, match=r"is not trusted.*STREAM_DEDUPE_SSL_CAFILE"):
        asyncio.run(_with_server(idle, _server_context(pki), probe))


def test_diagnose_tells_unreachable_from_cut_off() -> None:
    async def hang_up(reader: Any, writer: Any) -> None:
        writer.close()

    async def probe(port: int) -> str | None:
        return await diagnose(f"127.0.0.1:{port}", {"security_protocol": "PLAINTEXT"})

    cut_off = asyncio.run(_with_server(hang_up, None, probe))
    assert cut_off is not None and "closed it during the handshake" in cut_off

    async def nobody() -> str | None:
        server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        return await diagnose(f"127.0.0.1:{port}", {"security_protocol": "PLAINTEXT"})

    assert asyncio.run(nobody()) is None  # refused: the caller keeps waiting for the broker


def test_auth_error_messages_name_the_settings() -> None:
    from aiokafka.errors import IllegalSaslStateError, SaslAuthenticationFailed, UnsupportedSaslMechanismError

    security = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "u"}
    rejected = auth_error("h:1", security, SaslAuthenticationFailed("invalid credentials"))
    assert rejected is not None and "STREAM_DEDUPE_SASL_PASSWORD_FILE" in str(rejected) and "'u'" in str(rejected)
    unsupported = auth_error("h:1", security, UnsupportedSaslMechanismError("x"))
    assert unsupported is not None and "STREAM_DEDUPE_SASL_MECHANISM" in str(unsupported)
    not_sasl = auth_error("h:1", security, IllegalSaslStateError("x"))
    assert not_sasl is not None and "STREAM_DEDUPE_SECURITY_PROTOCOL" in str(not_sasl)
    assert auth_error("h:1", security, ConnectionResetError()) is None


def test_cli_flags_reach_the_settings(tmp_path: Path) -> None:
    doc = tmp_path / "d.jsonl"
    doc.write_text('{"id": "a", "text": "x"}\n')
    args = [sys.executable, "-m", "stream_dedupe", "produce", str(doc), "--broker", "127.0.0.1:1"]
    result = subprocess.run(
        [*args, "--security-protocol", "SASL_SSL", "--sasl-username", "u"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and "needs a SASL password" in result.stderr, result.stderr
    help_text = subprocess.run(
        [sys.executable, "-m", "stream_dedupe", "worker", "--help"], capture_output=True, text=True, timeout=60
    ).stdout
    for flag in ("--security-protocol", "--sasl-mechanism", "--sasl-password-file", "--ssl-cafile", "--ssl-keyfile"):
        assert flag in help_text
