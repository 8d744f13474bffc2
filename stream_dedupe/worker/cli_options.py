"""Options shared by the Kafka commands (``worker``, ``produce``, ``worker-reshard``) and their console.

Every option names its ``STREAM_DEDUPE_<NAME>`` environment variable in its help (flag over
variable over default).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from stream_dedupe.worker.settings import env_var

err = Console(stderr=True, soft_wrap=True)


def opt(name: str, text: str) -> Any:
    """A typer option whose help names its environment variable (``name``: the setting)."""
    return typer.Option(help=escape(f"{text} [env: {env_var(name)}]"), show_default=False)


# Kafka security flags, shared by `worker` and `produce` (docs/worker.md, "Kafka security").
SecurityProtocol = Annotated[
    str | None, opt("security_protocol", "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL [default: PLAINTEXT].")
]
SaslMechanism = Annotated[
    str | None, opt("sasl_mechanism", "SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN [default: SCRAM-SHA-512].")
]
SaslUsername = Annotated[str | None, opt("sasl_username", "SASL user.")]
SaslPassword = Annotated[str | None, opt("sasl_password", "SASL password (prefer --sasl-password-file).")]
SaslPasswordFile = Annotated[
    Path | None, opt("sasl_password_file", "File holding the SASL password (mounted secret); wins over the password.")
]
SslCafile = Annotated[Path | None, opt("ssl_cafile", "PEM CA bundle for the broker certificate [default: system].")]
SslCertfile = Annotated[Path | None, opt("ssl_certfile", "PEM client certificate (mutual TLS).")]
SslKeyfile = Annotated[Path | None, opt("ssl_keyfile", "PEM private key of the client certificate.")]
# The deployment's topics, shared by `worker` and `worker-reshard`.
Broker = Annotated[str | None, opt("broker", "Kafka bootstrap host:port [default: 127.0.0.1:9092].")]
InputTopic = Annotated[str | None, opt("input_topic", "Input topic [default: crawl.documents].")]
EventsTopic = Annotated[str | None, opt("events_topic", "Events topic [default: dedupe.events].")]
DedupedTopic = Annotated[
    str | None, opt("deduped_topic", "Compacted canonical topic [default: crawl.documents.deduped].")
]
DlqTopic = Annotated[str | None, opt("dlq_topic", "Dead-letter topic [default: dedupe.dlq].")]
InputPartitions = Annotated[
    int | None, opt("input_partitions", "Partitions of topics the worker creates [default: 4].")
]
