"""kafka-python client factories with one clear error for an unreachable broker.

Every connector builds its clients here, and every command takes its ``--bootstrap`` option from
:func:`add_bootstrap_option` (default ``$PRIVSTREAM_BOOTSTRAP``, else ``127.0.0.1:9092``). Before constructing a client the broker is probed with a
raw Kafka ``Metadata`` (v0) request, so a wrong or dead address fails fast with
:class:`BrokerUnreachable` naming the address, instead of kafka-python's retries and a generic
``NoBrokersAvailable``.
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import time
from typing import Any, Self

_METADATA_API_KEY = 3
_CLIENT_ID = b"privstream-probe"


#: the environment variable every command's ``--bootstrap`` defaults to
BOOTSTRAP_ENV = "PRIVSTREAM_BOOTSTRAP"
LOCAL_BOOTSTRAP = "127.0.0.1:9092"


def default_bootstrap() -> str:
    """``$PRIVSTREAM_BOOTSTRAP`` if set (and not empty), else ``127.0.0.1:9092``: the one default of
    every command's ``--bootstrap``."""
    return os.environ.get(BOOTSTRAP_ENV) or LOCAL_BOOTSTRAP


def add_bootstrap_option(parser: argparse.ArgumentParser) -> None:
    """The ``--bootstrap`` option every command shares (default: :func:`default_bootstrap`)."""
    parser.add_argument(
        "--bootstrap",
        default=default_bootstrap(),
        help=f"Kafka bootstrap servers host:port[,host:port] (default: %(default)s; env {BOOTSTRAP_ENV})",
    )


class BrokerUnreachable(ConnectionError):
    """No Kafka broker answered at ``bootstrap``."""

    def __init__(self, bootstrap: str, detail: str) -> None:
        super().__init__(f"Kafka broker at {bootstrap} is unreachable: {detail}")
        self.bootstrap = bootstrap


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """``"host:port[,host:port]"`` -> ``[(host, port), ...]``; ValueError naming ``bootstrap`` if malformed."""
    addresses = []
    for part in str(bootstrap).split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bootstrap: expected host:port[,host:port...], got {bootstrap!r}")
        addresses.append((host.strip("[]"), int(port)))
    return addresses


def probe_metadata(host: str, port: int, timeout: float = 2.0) -> bool:
    """True if a Kafka broker at ``host:port`` answers a Metadata v0 request with the right correlation id."""
    correlation_id = 0x5052_4956  # "PRIV"
    header = struct.pack(">hhih", _METADATA_API_KEY, 0, correlation_id, len(_CLIENT_ID)) + _CLIENT_ID
    request = header + struct.pack(">i", 0)  # v0: an empty topic array asks for all topics
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack(">i", len(request)) + request)
            head = _recv_exactly(sock, 8)
    except OSError:
        return False
    if head is None:
        return False
    size, answered_id = struct.unpack(">ii", head)
    return size >= 4 and answered_id == correlation_id


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    chunks = b""
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            return None
        chunks += chunk
    return chunks


def ensure_reachable(bootstrap: str, timeout: float = 5.0) -> None:
    """Raise :class:`BrokerUnreachable` unless some bootstrap address answers within ``timeout`` seconds."""
    addresses = parse_bootstrap(bootstrap)
    deadline = time.monotonic() + timeout
    while True:
        for host, port in addresses:
            if probe_metadata(host, port, timeout=min(2.0, max(0.1, deadline - time.monotonic()))):
                return
        if time.monotonic() >= deadline:
            raise BrokerUnreachable(bootstrap, f"no Kafka Metadata response within {timeout:g} s")
        time.sleep(0.1)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _wrap(bootstrap: str, factory: Any, config: dict[str, Any]) -> Any:
    from kafka.errors import KafkaConnectionError, KafkaTimeoutError

    ensure_reachable(bootstrap)
    try:
        return factory(bootstrap_servers=parse_bootstrap_list(bootstrap), **config)
    except (KafkaConnectionError, KafkaTimeoutError) as exc:
        raise BrokerUnreachable(bootstrap, repr(exc)) from exc


def parse_bootstrap_list(bootstrap: str) -> list[str]:
    return [f"{host}:{port}" for host, port in parse_bootstrap(bootstrap)]


def kafka_producer(bootstrap: str, **config: Any) -> Any:
    """A ``kafka.KafkaProducer`` (raises :class:`BrokerUnreachable`)."""
    from kafka import KafkaProducer

    config.setdefault("linger_ms", 5)
    return _wrap(bootstrap, KafkaProducer, config)


def kafka_consumer(bootstrap: str, **config: Any) -> Any:
    """A ``kafka.KafkaConsumer`` with auto-commit off (raises :class:`BrokerUnreachable`)."""
    from kafka import KafkaConsumer

    config.setdefault("enable_auto_commit", False)
    config.setdefault("auto_offset_reset", "earliest")
    return _wrap(bootstrap, KafkaConsumer, config)


def kafka_admin(bootstrap: str, **config: Any) -> Any:
    """A ``kafka.KafkaAdminClient`` (raises :class:`BrokerUnreachable`)."""
    from kafka import KafkaAdminClient

    return _wrap(bootstrap, KafkaAdminClient, config)


class ProducerHandle:
    """Flush/close/context-manager plumbing for classes that own a kafka-python producer ``_producer``."""

    _producer: Any

    def flush(self, timeout: float | None = None) -> None:
        self._producer.flush(timeout=timeout)

    def close(self, timeout: float | None = None) -> None:
        self._producer.close(timeout=timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
