"""The LDP producer: values are randomised on the client and only reports reach the wire."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from privstream.connectors.avro_codec import decode
from privstream.connectors.broker import EmbeddedBroker
from privstream.connectors.consume import RecordConsumer
from privstream.connectors.ldp_producer import LdpProducer, report_from_record, report_to_record
from privstream.connectors.produce import EventProducer
from privstream.connectors.topics import LDP_REPORTS

from privstream.ldp import GeneralizedRandomizedResponse, LdpReport
from privstream.noise.rng import SeededRandomSource

pytestmark = pytest.mark.kafka

SECRETS = [f"secret-site-{i:03d}.example" for i in range(6)]


def _read_raw(bootstrap: str, topic: str, count: int) -> list:
    """Raw Kafka messages (bytes), read without our decoder so nothing is hidden."""
    with RecordConsumer(bootstrap, topic, dead_letters=False) as consumer:
        messages = []
        for _ in range(300):
            batches = consumer._consumer.poll(timeout_ms=200)
            for records in batches.values():
                messages.extend(records)
            if len(messages) >= count:
                return messages
    raise AssertionError(f"only {len(messages)} of {count} messages arrived")


def test_ldp_producer_never_emits_a_raw_value(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    topic = unique_topic(partitions=2)
    grr = GeneralizedRandomizedResponse(1.0, SECRETS, rng=SeededRandomSource(9))
    counts = [250, 150, 100, 50, 30, 20]  # unequal: raw values would estimate far off (GRR debiasing)
    values = [SECRETS[i] for i, c in enumerate(counts) for _ in range(c)]
    with LdpProducer(kafka_broker.bootstrap, grr, topic=topic) as producer:
        for value in values:
            producer.submit(value)
        producer.flush()
        assert producer.reports_sent == len(values)
    messages = _read_raw(kafka_broker.bootstrap, topic, len(values))
    assert len(messages) == len(values)
    for message in messages:
        assert message.key is None
        for secret in SECRETS:
            assert secret.encode() not in message.value
            assert secret.encode("utf-16-le") not in message.value
        schema, record = decode(message.value)
        assert schema == "LdpReport" and record["scheme"] == "grr"
        assert set(record["parameters"]) == {
            "epsilon_ratio",
            "effective_epsilon",
            "domain_size",
            "domain_digest",
        }
        assert len(record["payload"]) == 1

    # the server can still estimate: |ĉ − c| ≤ 4.5 sd per value (false failure ≈ 4e-5, fixed seed);
    # unrandomised reports would give ĉ = (c − nq)/(p − q), e.g. 774 for c = 250
    aggregator = grr.new_aggregator()
    aggregator.add_all(report_from_record(decode(m.value)[1]) for m in messages)
    for estimate, c in zip(aggregator.estimate(), counts, strict=True):
        assert abs(estimate - c) <= 4.5 * math.sqrt(grr.variance(c, len(values)))


def test_what_reaches_the_wire_is_distributed_as_grr_not_as_the_raw_values(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    """Every client holds the SAME value, so the reports on the wire must follow GRR's output law
    (keep w.p. e^ε/(e^ε+d−1), each other value w.p. 1/(e^ε+d−1)); a producer that skipped or
    weakened randomisation (all 600 reports equal to the raw value, or ε effectively larger) fails
    the chi-square test. Level α = 1e-3 (the false-failure rate), fixed seed, read from raw bytes."""
    from scipy import stats

    topic = unique_topic(partitions=2)
    grr = GeneralizedRandomizedResponse(1.0, SECRETS, rng=SeededRandomSource(21))
    n = 600
    with LdpProducer(kafka_broker.bootstrap, grr, topic=topic) as producer:
        for _ in range(n):
            producer.submit(SECRETS[0])
        producer.flush()
    outputs = [
        grr.decode_index(report_from_record(decode(m.value)[1]))
        for m in _read_raw(kafka_broker.bootstrap, topic, n)
    ]
    observed = [outputs.count(i) for i in range(len(SECRETS))]
    keep = math.exp(1.0) / (math.exp(1.0) + len(SECRETS) - 1)
    expected = [n * keep] + [n * (1 - keep) / (len(SECRETS) - 1)] * (len(SECRETS) - 1)
    assert stats.chisquare(observed, expected).pvalue > 1e-3, observed
    assert observed[0] < 0.5 * n  # raw values would give all n here


def test_ldp_producer_has_no_path_for_raw_values(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    """``submit`` (which randomises) is the only sending method: no method takes a report or bytes,
    so a hand-built report carrying a raw value cannot be sent; raw events are refused on the LDP topic."""
    topic = unique_topic()
    grr = GeneralizedRandomizedResponse(1.0, SECRETS)
    with LdpProducer(kafka_broker.bootstrap, grr, topic=topic) as producer:
        public = {n for n in dir(producer) if not n.startswith("_") and callable(getattr(producer, n))}
        assert public == {"submit", "submit_many", "flush", "close"}
        with pytest.raises(ValueError, match="withheld"):
            producer.submit("not-in-domain")
        assert producer.reports_sent == 0
    with pytest.raises(TypeError, match="randomiser"):
        LdpProducer(kafka_broker.bootstrap, "grr", topic=topic)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="only locally randomised"):
        EventProducer(kafka_broker.bootstrap, LDP_REPORTS)


def test_report_record_round_trip() -> None:
    grr = GeneralizedRandomizedResponse(0.5, 300, rng=SeededRandomSource(1))
    report = grr.encode(299)
    again = report_from_record(report_to_record(report))
    assert again == report and isinstance(again, LdpReport) and grr.accepts(again)
    with pytest.raises(TypeError, match="only LdpReport"):
        report_to_record(b"raw")  # type: ignore[arg-type]


def test_batched_grr_producer_sends_one_message_per_batch_and_no_raw_value(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    """``submit_many`` of 600 copies of one secret in batches of 200: three ``LdpReportBatch``
    messages, no secret in the bytes, and the 600 outputs follow GRR's law (chi-square, level 1e-3
    = the false-failure rate; fixed seed), as the one-per-message test above."""
    from privstream.connectors.ldp_producer import batch_from_record
    from scipy import stats

    topic = unique_topic(partitions=1)
    grr = GeneralizedRandomizedResponse(1.0, SECRETS, rng=SeededRandomSource(22))
    with LdpProducer(kafka_broker.bootstrap, grr, topic=topic) as producer:
        for _ in range(3):
            producer.submit_many([SECRETS[0]] * 200)
        producer.flush()
        assert producer.reports_sent == 600
    messages = _read_raw(kafka_broker.bootstrap, topic, 3)
    assert len(messages) == 3
    outputs: list[int] = []
    for message in messages:
        assert message.key is None
        assert all(secret.encode() not in message.value for secret in SECRETS)
        schema, record = decode(message.value)
        assert schema == "LdpReportBatch" and record["count"] == 200 and len(record["payloads"]) == 200
        batch = batch_from_record(record)
        outputs += [grr.decode_index(report) for report in batch.reports()]
    observed = [outputs.count(i) for i in range(len(SECRETS))]
    keep = math.exp(1.0) / (math.exp(1.0) + len(SECRETS) - 1)
    expected = [600 * keep] + [600 * (1 - keep) / (len(SECRETS) - 1)] * (len(SECRETS) - 1)
    assert stats.chisquare(observed, expected).pvalue > 1e-3, observed
