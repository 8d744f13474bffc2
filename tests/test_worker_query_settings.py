"""Settings and request parsing of the worker's ``POST /query`` endpoint (no broker needed).

The endpoint itself, against a real broker and worker, is tested in
``tests/integration/test_worker_query.py``.
"""

from __future__ import annotations

import socket
from pathlib import Path

import orjson
import pytest

from stream_dedupe.worker.errors import WorkerConfigError
from stream_dedupe.worker.query_config import parse_bind, read_query_token
from stream_dedupe.worker.query_http import QueryRejected, _bind, parse_request
from stream_dedupe.worker.settings import WorkerSettings


def test_off_by_default() -> None:
    s = WorkerSettings()
    assert s.query_bind is None and s.query_address is None and s.query_token_file is None
    assert (s.query_max_docs, s.query_max_inflight, s.query_timeout) == (100, 16, 5.0)


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("6067", ("127.0.0.1", 6067)),
        ("127.0.0.1:6067", ("127.0.0.1", 6067)),
        ("0.0.0.0:8080", ("0.0.0.0", 8080)),
        ("[::1]:6067", ("::1", 6067)),
        (" localhost:1 ", ("localhost", 1)),
    ],
)
def test_bind_forms(text: str, address: tuple[str, int]) -> None:
    assert parse_bind(text) == address
    assert WorkerSettings(query_bind=text).query_address == address


@pytest.mark.parametrize("text", ["", "host:", ":6067", "127.0.0.1:0", "127.0.0.1:65536", "::1:6067", "a:b", "x"])
def test_bad_bind_is_refused_with_the_fix(text: str) -> None:
    with pytest.raises(
        WorkerConfigError, match=r"STREAM_DEDUPE_QUERY_BIND / --query-bind \(e\.g\. 127\.0\.0\.1:6067\)"
    ):
        WorkerSettings(query_bind=text)


def test_never_the_web_port() -> None:
    with pytest.raises(WorkerConfigError, match="uses the web \\(metrics\\) port 6066: give the query endpoint"):
        WorkerSettings(query_bind="0.0.0.0:6066")
    with pytest.raises(WorkerConfigError, match="web \\(metrics\\) port 7000"):
        WorkerSettings(query_bind="7000", web_port=7000)
    assert WorkerSettings(query_bind="6066", web_port=7000).query_address == ("127.0.0.1", 6066)


def test_environment_and_flags(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc\n")
    env = {
        "STREAM_DEDUPE_QUERY_BIND": "127.0.0.1:6070",
        "STREAM_DEDUPE_QUERY_TOKEN_FILE": str(token),
        "STREAM_DEDUPE_QUERY_MAX_DOCS": "7",
        "STREAM_DEDUPE_QUERY_MAX_INFLIGHT": "3",
        "STREAM_DEDUPE_QUERY_TIMEOUT": "1.5",
    }
    s = WorkerSettings.load(env)
    assert s.query_address == ("127.0.0.1", 6070) and s.query_token_file == token
    assert (s.query_max_docs, s.query_max_inflight, s.query_timeout) == (7, 3, 1.5)
    assert WorkerSettings.load(env, query_bind="6071").query_address == ("127.0.0.1", 6071)  # a flag wins
    with pytest.raises(WorkerConfigError, match="STREAM_DEDUPE_QUERY_MAX_DOCS='many' is not an integer"):
        WorkerSettings.load({"STREAM_DEDUPE_QUERY_MAX_DOCS": "many"})


def test_token_file(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    assert read_query_token(token) == "s3cret"
    with pytest.raises(WorkerConfigError, match="the query endpoint is off: set STREAM_DEDUPE_QUERY_BIND"):
        WorkerSettings(query_token_file=token)
    token.write_text("\n")
    with pytest.raises(WorkerConfigError, match="is empty: write the token into it"):
        WorkerSettings(query_bind="6070", query_token_file=token)
    with pytest.raises(WorkerConfigError, match=r"cannot be read .* fix STREAM_DEDUPE_QUERY_TOKEN_FILE"):
        WorkerSettings(query_bind="6070", query_token_file=tmp_path / "missing")


@pytest.mark.parametrize("bad", [{"query_max_docs": 0}, {"query_max_inflight": 0}, {"query_timeout": 0.0}])
def test_bounds(bad: dict[str, float]) -> None:
    with pytest.raises(WorkerConfigError, match="must be >= 1, query_timeout"):
        WorkerSettings(**bad)  # type: ignore[arg-type]


def test_body_one_document_or_a_list() -> None:
    docs, ids, single, _ = parse_request(orjson.dumps({"text": "a b c", "title": "T", "source": "s"}), 5)
    assert single and ids == [None] and docs[0].text == "a b c" and docs[0].title == "T" and docs[0].source == "s"
    body = [{"id": "x", "text": "t", "updated_at": "2026-01-31T12:00:00Z", "url": "u", "metadata": {}}, {"text": "u"}]
    docs, ids, single, _ = parse_request(orjson.dumps(body), 5)
    assert not single and ids == ["x", None] and docs[0].doc_id == "x" and docs[0].updated_at_us is not None


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{", "the body is not JSON"),
        (b"[]", "a non-empty list"),
        (b'"text"', "send one JSON document"),
        (b"[1]", "document 0 is a JSON int"),
        (b'{"txt": "a"}', "unknown fields ['txt']: use only id, text"),
        (b'{"text": null}', "a query needs a string text"),
        (b'{"text": "a", "id": 3}', "id must be a string"),
        (b'{"text": "a", "updated_at": "yesterday"}', "is not RFC 3339"),
        (orjson.dumps([{"text": "a"}] * 6), "6 documents in one request; at most 5 (query_max_docs)"),
    ],
)
def test_bad_bodies_are_400_with_what_to_send(body: bytes, message: str) -> None:
    with pytest.raises(QueryRejected) as info:
        parse_request(body, 5)
    assert info.value.status == 400 and message in info.value.message


def test_a_port_in_use_is_refused_at_start() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(WorkerConfigError, match=rf"cannot listen on 127\.0\.0\.1:{port} .*free the port"):
            _bind("127.0.0.1", port)
    sock = _bind("127.0.0.1", 0)
    sock.close()


def test_the_endpoint_checks_a_document_with_an_id_as_the_worker_input_does() -> None:
    from stream_dedupe.core.records import ParseLimits

    body = orjson.dumps([{"id": "", "text": "a b c"}, {"id": "x" * 600, "text": "a b c"}, {"text": "a b c"}])
    _, _, _, problems = parse_request(body, 5, ParseLimits())
    assert [p.reason if p else None for p in problems] == ["missing-id", "id-too-long", None]


def test_only_loopback_addresses_count_as_private() -> None:
    from stream_dedupe.worker.query_http import _loopback

    assert _loopback("127.0.0.1") and _loopback("localhost") and _loopback("::1")
    assert not _loopback("0.0.0.0") and not _loopback("::")  # every interface: the warning is logged
