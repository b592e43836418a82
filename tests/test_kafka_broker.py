"""The embedded broker: start/stop, CLI, topic admin, unreachable-broker errors, durability across restarts."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from privstream.connectors import s3_local
from privstream.connectors.broker import EmbeddedBroker, tansu_binary
from privstream.connectors.clients import BrokerUnreachable, ensure_reachable, free_port, probe_metadata
from privstream.connectors.consume import EventConsumer
from privstream.connectors.produce import EventProducer
from privstream.connectors.topics import (
    TopicSpec,
    create_topics,
    default_topics,
    ensure_default_topics,
    list_topics,
)

from tests.flink_fixtures import ctrl_c_reaches_the_child

pytestmark = pytest.mark.kafka


def test_fixture_broker_answers_metadata(kafka_broker: EmbeddedBroker) -> None:
    host, port = kafka_broker.bootstrap.split(":")
    assert host == "127.0.0.1" and probe_metadata(host, int(port))
    assert os.access(tansu_binary(), os.X_OK)


def test_default_topics_are_created_once(kafka_broker: EmbeddedBroker) -> None:
    ensure_default_topics(kafka_broker.bootstrap)
    assert ensure_default_topics(kafka_broker.bootstrap) == []  # idempotent
    names = list_topics(kafka_broker.bootstrap)
    assert {"events", "events-dlq", "releases", "ledger", "ldp-reports"} <= names
    ledger = next(spec for spec in default_topics() if spec.name == "ledger")
    assert ledger.configs() == {"cleanup.policy": "compact"}


def test_stop_is_clean_and_frees_the_port() -> None:
    broker = EmbeddedBroker().start()
    port = broker.port
    assert broker.stop() is not None
    assert not broker.alive() and not probe_metadata("127.0.0.1", port, timeout=0.5)
    assert broker.stop() is None  # second stop is a no-op


def test_unreachable_broker_error_names_the_address() -> None:
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(BrokerUnreachable, match=address.replace(".", r"\.")):
        ensure_reachable(address, timeout=0.5)
    with pytest.raises(BrokerUnreachable, match="is unreachable"):
        EventProducer(address, "events")
    with pytest.raises(ValueError, match="bootstrap"):
        ensure_reachable("no-port-here")


@pytest.mark.parametrize("port", [0, 70000, True, "9092"])
def test_bad_port_is_rejected(port: object) -> None:
    with pytest.raises(ValueError, match="port"):
        EmbeddedBroker(port=port)  # type: ignore[arg-type]


def test_topic_spec_validation() -> None:
    with pytest.raises(ValueError, match="partitions"):
        TopicSpec("t", 0)
    with pytest.raises(ValueError, match="name"):
        TopicSpec("", 1)


@contextmanager
def _broker_cli(*args: str) -> Iterator[tuple[subprocess.Popen, str]]:
    """``privstream broker ARGS`` in a subprocess; yields it and the bootstrap it printed."""
    process = subprocess.Popen(
        [sys.executable, "-m", "privstream.cli", "broker", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_reaches_the_child,
    )
    try:
        yield process, process.stdout.readline().strip()  # type: ignore[union-attr]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_broker_cli_prints_bootstrap_and_stops_cleanly(stop_signal: signal.Signals) -> None:
    with _broker_cli("--partitions", "2") as (process, bootstrap):
        host, port = bootstrap.split(":")
        assert host == "127.0.0.1" and probe_metadata(host, int(port))
        assert "events" in list_topics(bootstrap)
        process.send_signal(stop_signal)  # SIGINT is what Ctrl-C sends: one line, exit 130
        assert process.wait(timeout=20) == (130 if stop_signal == signal.SIGINT else 0)
        stderr = process.stderr.read()  # type: ignore[union-attr]
        assert "Traceback" not in stderr
        if stop_signal == signal.SIGINT:
            assert stderr.strip().splitlines()[-1] == "privstream broker: stopped"
        assert not probe_metadata(host, int(port), timeout=0.5)  # tansu stopped with the CLI


def test_broker_cli_port_and_data_survive_a_restart(tmp_path) -> None:
    """``privstream broker --port P --data DIR``: listens on P; a topic created in one run is there
    after a restart on the same directory."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not on PATH: no s3rver, so no durable broker on this machine")
    port, data = free_port(), str(tmp_path / "cli-broker")
    with _broker_cli("--port", str(port), "--data", data, "--no-topics") as (process, bootstrap):
        assert bootstrap == f"127.0.0.1:{port}", process.stderr.read() if process.poll() is not None else ""
        create_topics(bootstrap, [TopicSpec("kept", 3)])
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    with _broker_cli("--port", str(port), "--data", data, "--no-topics") as (process, bootstrap):
        assert bootstrap == f"127.0.0.1:{port}" and "kept" in list_topics(bootstrap)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def test_durable_broker_keeps_topics_records_and_offsets(tmp_path) -> None:
    """With --data the log lives in s3rver under the directory; a restart keeps topics, data and the
    group's committed offsets. s3rver is required wherever npm exists (this machine): then a missing
    s3rver FAILS (run `privstream setup`); only a machine without npm skips, saying so."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not on PATH: no s3rver, so no durable broker on this machine")
    try:
        s3_local.ensure_s3rver()
    except s3_local.S3rverMissing as exc:
        pytest.fail(f"durable broker test needs s3rver: {exc}")
    data = tmp_path / "broker"
    with EmbeddedBroker(data_dir=data) as broker:
        create_topics(broker.bootstrap, [TopicSpec("durable", 2), TopicSpec("ledger", 1, compacted=True)])
        with EventProducer(broker.bootstrap, "durable", events_per_message=10) as producer:
            producer.send(list(range(100)), event_time_ms=1)
            producer.finish()
        consumer = EventConsumer(broker.bootstrap, "durable", group_id="g-durable")
        first = consumer.read(40, max_records=1)
        committed = consumer.commit()
        consumer.close()
    assert (data / "s3" / "tansu").is_dir()

    with EmbeddedBroker(data_dir=data) as broker:  # a new process (and a new port) on the same data
        assert {"durable", "ledger"} <= list_topics(broker.bootstrap)
        consumer = EventConsumer(broker.bootstrap, "durable", group_id="g-durable")
        assert {p: o for p, o in consumer.committed().items() if o is not None} == committed
        rest = consumer.read(until_end=True, timeout_s=30)
        consumer.close()
        everything = EventConsumer(broker.bootstrap, "durable", start="earliest")
        all_again = everything.read(100, until_end=True, timeout_s=30)
        everything.close()
    assert sorted(first.items.tolist() + rest.items.tolist()) == list(range(100))
    assert sorted(all_again.items.tolist()) == list(range(100))


def test_durable_broker_without_s3rver_fails_clearly(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PRIVSTREAM_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(s3_local.S3rverMissing, match="privstream setup"):
        EmbeddedBroker(data_dir=tmp_path / "d").start()
