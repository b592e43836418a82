"""HG-LDP over the embedded broker: the state-version protocol end to end, dead-lettered refusals."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from fractions import Fraction

import pytest
from privstream.connectors.avro_codec import decode, encode
from privstream.connectors.broker import EmbeddedBroker
from privstream.connectors.consume import RecordConsumer
from privstream.connectors.ldp_producer import LdpProducer, report_to_record
from privstream.connectors.ldp_server import LdpServerLoop
from privstream.connectors.ldp_state import StateReader
from privstream.connectors.topics import dead_letter_topic

from privstream.ldp import HgLdpParams, HgLdpServer, LdpReport, PublicState, make_client
from privstream.noise.rng import SeededRandomSource

pytestmark = pytest.mark.kafka

D, K = 100, 5


def _skewed(n: int, seed: int) -> list[int]:
    rnd = random.Random(seed)
    return rnd.choices(range(D), [1 / (i + 1) ** 1.5 for i in range(D)], k=n)


def _read_all(bootstrap: str, topic: str, count: int) -> list:
    with RecordConsumer(bootstrap, topic, dead_letters=False) as consumer:
        records = list(
            consumer.records(idle_s=0.3, until=lambda: consumer.records_returned >= count, timeout_s=30)
        )
    return records


def _warm_server(params: HgLdpParams, seed: int) -> HgLdpServer:
    """A server after the skewed warm-up (40 items), statistics started."""
    server = HgLdpServer(params, rng=SeededRandomSource(seed))
    server.warm_up(_skewed(40, 2))
    server.start_statistics()
    return server


@pytest.mark.parametrize("scheme", ["dsr", "cnr"])
def test_state_version_round_trip(
    scheme: str, kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    """The server publishes its state, the producer randomises against the latest version it read
    and tags each report; the server applies every report with that version (none refused), its
    state moves on across chunks, and what reached the wire are only randomised reports."""
    reports, states = unique_topic("reports", partitions=1), unique_topic("state", compacted=True)
    params = HgLdpParams(scheme, 3.0, D, K)
    server = _warm_server(params, 1)
    values = _skewed(600, 3)
    with LdpServerLoop(
        kafka_broker.bootstrap, server, deployment="dep", reports_topic=reports, state_topic=states
    ) as loop:
        loop.publish_state()
        client = make_client(params, rng=SeededRandomSource(4))
        with LdpProducer(
            kafka_broker.bootstrap, client, reports, deployment="dep", state_topic=states
        ) as producer:
            for begin in range(0, len(values), 100):
                for value in values[begin : begin + 100]:
                    producer.submit(value)
                producer.flush()
                loop.run(until=lambda b=begin: loop.applied >= b + 100, timeout_s=30)
                time.sleep(0.2)  # let the client's state fetch arrive (it never blocks a report)
                assert client.state is not None
            public = {n for n in dir(producer) if not n.startswith("_") and callable(getattr(producer, n))}
            assert public == {"submit", "submit_many", "flush", "close"}
        assert loop.applied == len(values) and not loop.refused
        assert loop.publisher.published is not None and loop.publisher.published.version > 0
    assert server.n == len(values)
    wire = _read_all(kafka_broker.bootstrap, reports, len(values))
    versions = Counter(r.value["state_version"] for r in wire)
    assert len(wire) == len(values) and len(versions) > 1  # clients followed the state across chunks
    for record in wire:
        assert (
            record.key is None
            and record.value["scheme"] == f"hg-{scheme}"
            and len(record.value["payload"]) == 1
        )
    top = {item for item, _ in server.heavy_hitters()}
    assert 0 in top  # the head of the skewed stream (≈ 40 % of it) is found (ε = 3)


def test_unknown_and_too_old_versions_are_dead_lettered(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    """A server keeping only its latest state (max_lag = 0): reports against a version it dropped,
    against a version it never published, from other parameters, an impossible ⊥ and a report
    naming the current version with another run's digest all go to ``<reports>-dlq`` with the
    reason; the good ones are applied."""
    reports, states = unique_topic("reports"), unique_topic("state", compacted=True)
    params = HgLdpParams("bdr", 1.0, D, K)
    server = HgLdpServer(params, gamma_h=Fraction(1, 2), max_lag=0, rng=SeededRandomSource(5))
    server.warm_start(dict.fromkeys(range(K), 1))  # weakest count 1: an eviction is due
    server.start_statistics()
    client = make_client(params, rng=SeededRandomSource(6))
    with LdpServerLoop(
        kafka_broker.bootstrap, server, deployment="dep2", reports_topic=reports, state_topic=states
    ) as loop:
        v0 = loop.publish_state()
        with LdpProducer(
            kafka_broker.bootstrap, client, reports, deployment="dep2", state_topic=states
        ) as producer:
            for value in range(10):
                producer.submit(value)
            producer.flush()
        # the server's state moves on before it reads those reports: v0 is dropped (max_lag = 0)
        rng_items = iter(range(50, D))
        while server.public_state().version == v0.version:
            server.insert_output(next(rng_items), server.history.latest)
        loop.publish_state()
        canonical = LdpReport.canonical_parameters(params.public)
        raw = [
            LdpReport("hg-bdr", canonical, b"\x01", state_version=999),  # never published
            LdpReport("hg-bdr", LdpReport.canonical_parameters({"k": "9"}), b"\x01", state_version=1),
            LdpReport(
                "hg-bdr",
                canonical,
                bytes([D]),
                state_version=server.public_state().version,
                state_digest=server.public_state().digest,
            ),  # ⊥ while evicting
            LdpReport(  # the current version number, but a state of another server run
                "hg-bdr",
                canonical,
                b"\x01",
                state_version=server.public_state().version,
                state_digest=bytes(16),
            ),
        ]
        with kafka_broker_producer(kafka_broker.bootstrap) as send:
            for report in raw:
                send(reports, encode("LdpReport", report_to_record(report)))
        loop.run(until=lambda: sum(loop.refused.values()) >= 14, timeout_s=30)
    assert loop.refused == {
        "stale-state (too-old)": 10,
        "stale-state (unknown)": 1,
        "rejected": 1,
        "inconsistent": 1,
        "state digest mismatch": 1,
    }
    letters = _read_all(kafka_broker.bootstrap, dead_letter_topic(reports), 14)
    errors = Counter(decode(r.raw)[1]["error"].split(":")[0] for r in letters)
    assert errors == loop.refused
    assert all(decode(r.raw)[1]["topic"] == reports for r in letters)


class kafka_broker_producer:  # noqa: N801 - a context manager used like a function
    """A plain producer for hand-built messages (what a misbehaving client could send)."""

    def __init__(self, bootstrap: str) -> None:
        from privstream.connectors.clients import kafka_producer

        self._producer = kafka_producer(bootstrap)

    def __enter__(self) -> Callable[[str, bytes], None]:
        return lambda topic, value: self._producer.send(topic, value=value)

    def __exit__(self, *exc_info: object) -> None:
        self._producer.flush()
        self._producer.close()


def test_producer_needs_a_published_state_with_matching_parameters(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    reports, states = unique_topic("reports"), unique_topic("state", compacted=True)
    client = make_client(HgLdpParams("dsr", 1.0, D, K))
    with pytest.raises(ValueError, match="deployment"):
        LdpProducer(kafka_broker.bootstrap, client, reports, state_topic=states)
    with pytest.raises(TimeoutError, match="dep3"):
        LdpProducer(
            kafka_broker.bootstrap, client, reports, deployment="dep3", state_topic=states, state_timeout_s=1
        )
    server = HgLdpServer(HgLdpParams("dsr", 2.0, D, K))
    server.warm_start(dict.fromkeys(range(K), 3))
    server.start_statistics()
    with LdpServerLoop(
        kafka_broker.bootstrap, server, deployment="dep3", reports_topic=reports, state_topic=states
    ) as loop:
        loop.publish_state()
        with pytest.raises(ValueError, match="parameters"):
            LdpProducer(kafka_broker.bootstrap, client, reports, deployment="dep3", state_topic=states)
        reader = StateReader(kafka_broker.bootstrap, deployment="dep3", scheme="hg-dsr", topic=states)
        try:
            assert reader.wait(10).version == 0 and reader.parameters == server.params.public
        finally:
            reader.close()


def test_produce_cli_emits_ldp_reports(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    """``privstream produce --ldp dsr`` randomises generated Normal items against the published
    state (d = 1000 by default); the server applies every report; ``--file`` is refused."""
    import subprocess
    import sys

    reports, states = unique_topic("reports"), unique_topic("state", compacted=True)
    params = HgLdpParams("dsr", 2.0, 1000, 20)
    server = HgLdpServer(params, rng=SeededRandomSource(8))
    server.warm_up([495 + i % 25 for i in range(400)])
    server.start_statistics()
    with LdpServerLoop(
        kafka_broker.bootstrap, server, deployment="cli", reports_topic=reports, state_topic=states
    ) as loop:
        loop.publish_state()
        common = ["--bootstrap", kafka_broker.bootstrap, "--topic", reports, "--state-topic", states]
        ldp = ["--ldp", "dsr", "--epsilon", "2", "--k", "20", "--deployment", "cli"]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "privstream.cli",
                "produce",
                *common,
                *ldp,
                "--generator",
                "normal",
                "--count",
                "300",
                "--seed",
                "1",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "produced 300 dsr reports" in done.stderr
        loop.run(until=lambda: loop.applied >= 300, timeout_s=30)
        assert not loop.refused
        one_each = subprocess.run(  # --batch 1: one LdpReport message per report
            [sys.executable, "-m", "privstream.cli", "produce", *common, *ldp, "--generator", "normal",
             "--count", "20", "--batch", "1"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert one_each.returncode == 0, one_each.stderr
        loop.run(until=lambda: loop.applied >= 320, timeout_s=30)
        assert not loop.refused
    schemas = Counter(r.schema for r in _read_all(kafka_broker.bootstrap, reports, 21))
    assert schemas == {"LdpReportBatch": 1, "LdpReport": 20}  # the default: batches of 1,000
    refused = subprocess.run(
        [sys.executable, "-m", "privstream.cli", "produce", *common, *ldp, "--file", "x.csv"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2 and "--ldp" in refused.stderr


def test_producer_rechecks_the_parameters_of_every_new_state(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    """A newer state published under other parameters (a redeployed server) is refused on refresh,
    never randomised against."""
    from privstream.connectors.ldp_state import StatePublisher

    reports, states = unique_topic("reports"), unique_topic("state", compacted=True)
    params, other = HgLdpParams("cnr", 1.0, D, K), HgLdpParams("cnr", 2.0, D, K)
    hot = tuple(range(K))
    for version, published in ((0, params), (1, other)):
        with StatePublisher(
            kafka_broker.bootstrap,
            deployment="dep4",
            scheme="hg-cnr",
            parameters=published.public,
            topic=states,
        ) as publisher:
            publisher.publish(PublicState(version, hot, False, b"run"))
            publisher.flush()
        if version == 0:
            client = make_client(params, rng=SeededRandomSource(1))
            producer = LdpProducer(
                kafka_broker.bootstrap, client, reports, deployment="dep4", state_topic=states
            )
    try:
        assert client.state is not None and client.state.version == 0
        deadline = time.monotonic() + 20
        with pytest.raises(ValueError, match="parameters"):  # once version 1 has been read
            while time.monotonic() < deadline:
                producer.submit(3)
                time.sleep(0.05)
        assert client.state.version == 0
    finally:
        producer.close()


def _follow(producer: LdpProducer, state: PublicState) -> None:
    """Wait until ``producer`` has read ``state`` and adopted it (what submit does before a report)."""
    deadline = time.monotonic() + 20
    while producer.randomiser.state != state:  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, f"the producer never took state {state}"
        latest = producer._state.refresh(timeout_ms=200)  # type: ignore[union-attr]
        if latest is not None:
            producer._adopt(latest)


def test_clients_follow_the_latest_record_not_an_older_runs_higher_version(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    """A server started afresh (new run id) on topics that hold an older run's versions 0..3
    publishes a new version 0. Clients take the deployment's latest record, not the highest version
    number: a new producer and a running one both randomise against the new run's version 0, and
    the new server applies all their reports; a report against the old run's version 0 (the same
    number) is dead-lettered as a state digest mismatch, never applied."""
    reports, states = unique_topic("reports", partitions=1), unique_topic("state", compacted=True)
    params = HgLdpParams("dsr", 2.0, D, K)
    servers = []
    for run in (b"old run", b"new run"):
        server = HgLdpServer(params, rng=SeededRandomSource(run), run_id=run)
        server.warm_start({i: 9 for i in range(K)})
        server.start_statistics()
        servers.append(server)
    old, new = servers
    stale_client = make_client(params, rng=SeededRandomSource(1))
    stale_client.update_state(old.public_state())
    stale = encode("LdpReport", report_to_record(stale_client.encode(2)))
    with LdpServerLoop(
        kafka_broker.bootstrap, old, deployment="dep5", reports_topic=reports, state_topic=states
    ) as old_loop:
        old_loop.publish_state()
        for hot in ((0, 1, 2, 3, 50), (0, 1, 2, 3, 51), (0, 1, 2, 3, 52)):
            old_loop.publisher.publish(old.history.publish(hot, False))
        old_loop.publisher.flush()
        running = LdpProducer(
            kafka_broker.bootstrap, make_client(params, rng=SeededRandomSource(2)), reports,
            deployment="dep5", state_topic=states,
        )  # fmt: skip
    try:
        _follow(running, old.history.latest)  # type: ignore[arg-type]
        assert old.history.latest.version == 3  # type: ignore[union-attr]
        with LdpServerLoop(
            kafka_broker.bootstrap, new, deployment="dep5", reports_topic=reports, state_topic=states
        ) as loop:
            v0 = loop.publish_state()
            with LdpProducer(
                kafka_broker.bootstrap, make_client(params, rng=SeededRandomSource(3)), reports,
                deployment="dep5", state_topic=states,
            ) as fresh:  # fmt: skip
                assert fresh.randomiser.state == v0 and v0.run_id == b"new run"  # type: ignore[attr-defined]
                for value in _skewed(50, 4):
                    fresh.submit(value)
                fresh.flush()
            _follow(running, v0)
            for value in _skewed(50, 5):
                running.submit(value)
            running.flush()
            with kafka_broker_producer(kafka_broker.bootstrap) as send:
                send(reports, stale)
            loop.run(until=lambda: loop.applied + sum(loop.refused.values()) >= 101, timeout_s=30)
        assert loop.applied == 100 and loop.refused == {"state digest mismatch": 1}
    finally:
        running.close()


def test_batched_producer_round_trip(kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]) -> None:
    """``submit_many``: each chunk of 100 values is ONE ``LdpReportBatch`` message randomised against
    the state the producer last read (refreshed between batches); the server loop applies every
    report (none refused), the batches name more than one state version, and the head of the
    skewed stream is found. Before its next batch the test waits until the client has adopted the
    state the server published after the previous one."""
    reports, states = unique_topic("reports", partitions=1), unique_topic("state", compacted=True)
    params = HgLdpParams("cnr", 3.0, D, K)
    server = _warm_server(params, 11)
    values = _skewed(600, 3)
    with LdpServerLoop(
        kafka_broker.bootstrap, server, deployment="dep-b", reports_topic=reports, state_topic=states
    ) as loop:
        loop.publish_state()
        client = make_client(params, rng=SeededRandomSource(12))
        with LdpProducer(
            kafka_broker.bootstrap, client, reports, deployment="dep-b", state_topic=states
        ) as producer:
            for begin in range(0, len(values), 100):
                producer.submit_many(values[begin : begin + 100])
                producer.flush()
                loop.run(until=lambda b=begin: loop.applied >= b + 100, timeout_s=30)
                published = loop.publisher.published
                assert published is not None and client.state is not None
                deadline = time.monotonic() + 30  # wait for the event: the client adopted that state
                while client.state.version < published.version:
                    assert time.monotonic() < deadline, "the published state never reached the client"
                    producer._follow_state()  # what submit_many does first, without sending
            assert producer.reports_sent == len(values)
        assert loop.applied == len(values) and not loop.refused
    wire = _read_all(kafka_broker.bootstrap, reports, len(values) // 100)
    assert len(wire) == len(values) // 100
    assert all(r.schema == "LdpReportBatch" and r.value["count"] == 100 and r.key is None for r in wire)
    assert len({r.value["state_version"] for r in wire}) > 1  # the batches followed the state
    assert 0 in {item for item, _ in server.heavy_hitters()}
