"""Produce/consume round trips against the embedded broker: single and batched messages, keys,
end markers, dead letters, resume from committed offsets, and the produce CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
import pytest
from privstream.connectors.avro_codec import MAGIC, AvroDecodeError, encode
from privstream.connectors.broker import EmbeddedBroker
from privstream.connectors.clients import kafka_producer
from privstream.connectors.consume import EventConsumer, RecordConsumer
from privstream.connectors.produce import EventProducer

from privstream import datagen
from tests.test_sketch_count_min import GAMMA, MASK64, splitmix64_finaliser

pytestmark = pytest.mark.kafka


def _sorted_events(columns: datagen.EventColumns) -> list[tuple]:
    users = columns.user_ids if columns.user_ids is not None else [None] * len(columns)
    return sorted(
        zip(columns.items.tolist(), list(users), columns.event_time_ms.tolist(), strict=True), key=repr
    )


@pytest.mark.parametrize(
    ("events_per_message", "key_by"), [(1, "item"), (1, "user"), (100, "item"), (1000, "item")]
)
def test_round_trip(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str], events_per_message: int, key_by: str
) -> None:
    topic = unique_topic(partitions=3)
    sent = datagen.generate_events("zipf", 3000, seed=5, num_users=40, rate=1000.0, start_time_ms=10**12)
    with EventProducer(
        kafka_broker.bootstrap, topic, events_per_message=events_per_message, key_by=key_by
    ) as producer:
        producer.send_columns(sent)
        per_partition = producer.finish()
    expected_messages = 3000 if events_per_message == 1 else None
    assert sum(per_partition.values()) == 3000
    assert expected_messages is None or producer.messages_sent == expected_messages

    with EventConsumer(kafka_broker.bootstrap, topic) as consumer:
        received = consumer.read(until_end=True, timeout_s=30)
        assert consumer.ended
        assert {p: m[0]["events_sent"] for p, m in consumer.end_markers.items()} == per_partition
    assert received.items.dtype == np.int64 and received.user_ids.dtype == np.int64
    assert _sorted_events(received) == _sorted_events(sent)


def test_keys_put_each_user_in_one_partition(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    topic = unique_topic(partitions=4)
    users = np.arange(200) % 17
    with EventProducer(kafka_broker.bootstrap, topic, events_per_message=7, key_by="user") as producer:
        producer.send(np.arange(200), users, 5)
        producer.finish()
    seen: dict[int, set[int]] = {}  # user -> partitions its events arrived on
    for partition in range(4):
        with EventConsumer(kafka_broker.bootstrap, topic, partitions=[partition]) as consumer:
            got = consumer.read(until_end=True, timeout_s=30)
        for u in got.user_ids.tolist():
            seen.setdefault(u, set()).add(partition)
    assert sorted(seen) == list(range(17)) and all(len(p) == 1 for p in seen.values())
    # the documented partitioner (privstream.partitioning), recomputed: SplitMix64 finaliser of u + γ, mod 4
    assert {u: p.pop() for u, p in seen.items()} == {
        u: splitmix64_finaliser((u + GAMMA) & MASK64) % 4 for u in range(17)
    }


def test_string_items_and_missing_users(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    topic = unique_topic()
    items = ["a", 1, "ünïcode", -5]
    with EventProducer(kafka_broker.bootstrap, topic, events_per_message=2) as producer:
        producer.send(items, [None, "u1", None, 3], [1, 2, 3, 4])
        producer.finish()
    with EventConsumer(kafka_broker.bootstrap, topic) as consumer:
        got = consumer.read(until_end=True, timeout_s=30)
    assert got.items.dtype == object and got.items.tolist() == items
    assert got.user_ids.tolist() == [None, "u1", None, 3]


def test_producer_rejects_bad_arguments(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    topic = unique_topic()
    with pytest.raises(ValueError, match="events_per_message"):
        EventProducer(kafka_broker.bootstrap, topic, events_per_message=0)
    with pytest.raises(ValueError, match="key_by"):
        EventProducer(kafka_broker.bootstrap, topic, key_by="session")  # type: ignore[arg-type]
    with EventProducer(kafka_broker.bootstrap, topic, key_by="user") as producer:
        with pytest.raises(ValueError, match="user_ids"):
            producer.send([1, 2], [None, 1])
        with pytest.raises(TypeError, match="items"):
            producer.send(np.array([True, False]))


def test_malformed_messages_go_to_the_dead_letter_topic(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    topic = unique_topic(partitions=1)
    good = encode("Event", {"item": 1, "user_id": None, "event_time": 1})
    bad = [
        (b"short", "too short"),
        (b"\x00\x00" + bytes(8) + b"\x02", "bad magic"),
        (MAGIC + b"\x01" * 8 + b"\x02", "unknown schema fingerprint"),
        (good[:-1], "invalid Avro body"),
        (encode("Release", {**_RELEASE}), "unexpected schema Release"),
    ]
    producer = kafka_producer(kafka_broker.bootstrap)
    for value, _ in bad:
        producer.send(topic, value=value, key=b"k", partition=0)
        producer.send(topic, value=good, partition=0)
    producer.flush()
    producer.close()
    with EventConsumer(kafka_broker.bootstrap, topic, group_id="dlq-test") as consumer:
        got = consumer.read(len(bad), timeout_s=30)
        consumer.commit()  # flushes the dead letters first
        assert len(got) == len(bad) and consumer.dead_lettered == len(bad)
    with RecordConsumer(kafka_broker.bootstrap, f"{topic}-dlq") as dlq:
        letters = []
        for _ in range(100):
            letters += dlq.poll(200)
            if len(letters) >= len(bad):
                break
    assert [r.schema for r in letters] == ["DeadLetter"] * len(bad)
    for record, (value, reason) in zip(letters, bad, strict=True):
        letter = record.value
        assert letter["original_value"] == value and letter["original_key"] == b"k"
        assert reason in letter["error"]
        assert letter["topic"] == topic and letter["partition"] == 0
    assert [r.value["offset"] for r in letters] == [0, 2, 4, 6, 8]


_RELEASE = {
    "items": [],
    "epsilon": 1.0,
    "delta": 0.0,
    "mechanism": "m",
    "neighbour_relation": "r",
    "privacy_unit": "event",
    "epoch": 1,
    "window_start": None,
    "window_end": None,
    "error_bound": 1.0,
    "release_time": 0,
}


@pytest.mark.parametrize("events_per_message", [1, 50])
def test_restart_from_committed_offsets_has_no_loss_or_duplicates(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str], events_per_message: int
) -> None:
    topic = unique_topic(partitions=3)
    n = 2000
    with EventProducer(kafka_broker.bootstrap, topic, events_per_message=events_per_message) as producer:
        producer.send(np.arange(n), event_time_ms=0)
        producer.finish()
    group = f"resume-{topic}"
    seen: list[int] = []
    for _ in range(3):  # read a slice (< 500 events), commit, close (a "crash" after commit), restart
        with EventConsumer(kafka_broker.bootstrap, topic, group_id=group) as consumer:
            chunk = consumer.read(300, max_records=3, timeout_s=30)
            consumer.commit()
        seen += chunk.items.tolist()
    assert len(seen) < n - 100
    # uncommitted reads are replayed: read some, do NOT commit, and restart
    with EventConsumer(kafka_broker.bootstrap, topic, group_id=group) as consumer:
        consumer.read(100, max_records=3, timeout_s=30)
    with EventConsumer(kafka_broker.bootstrap, topic, group_id=group) as consumer:
        seen += consumer.read(n - len(seen), timeout_s=30).items.tolist()
        consumer.commit()
    assert len(seen) == n and sorted(seen) == list(range(n))


def test_commit_needs_a_group(kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]) -> None:
    with RecordConsumer(kafka_broker.bootstrap, unique_topic()) as consumer:
        with pytest.raises(ValueError, match="group_id"):
            consumer.commit()
    with pytest.raises(ValueError, match="topic"):
        RecordConsumer(
            kafka_broker.bootstrap, "no-such-topic-xyz", start="earliest", allow_auto_create_topics=False
        )


def test_without_dead_letters_a_failing_poll_consumes_nothing(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    """``dead_letters=False``: an undecodable message raises, and the poll that met it is rewound, so
    the good messages before it are not lost: positions stay put and the next poll meets it again."""
    topic = unique_topic(partitions=1)
    good = encode("Event", {"item": 1, "user_id": None, "event_time": 1})
    producer = kafka_producer(kafka_broker.bootstrap)
    for value in (good, good, b"short", good):
        producer.send(topic, value=value, partition=0)
    producer.flush()
    producer.close()
    returned: list = []
    with RecordConsumer(kafka_broker.bootstrap, topic, dead_letters=False) as consumer:
        for _ in range(2):  # the same error twice: nothing was consumed in between
            with pytest.raises(AvroDecodeError, match="@2"):
                for _ in range(100):  # until the broker has returned the messages
                    returned += consumer.poll(200)
            # consumed = exactly what was returned (0 or both good messages, by how the broker
            # split its answers); the poll that met offset 2 was rewound
            assert consumer.positions().get(0, 0) == len(returned) <= 2
    # the column reader: an end marker and events before an unexpected schema are not applied twice
    topic = unique_topic(partitions=1)
    producer = kafka_producer(kafka_broker.bootstrap)
    marker = encode("EndMarker", {"producer_id": "p", "events_sent": 1})
    for value in (good, marker, encode("Release", {**_RELEASE})):
        producer.send(topic, value=value, partition=0)
    producer.flush()
    producer.close()
    with EventConsumer(kafka_broker.bootstrap, topic, dead_letters=False) as consumer:
        got = 0
        for _ in range(2):
            with pytest.raises(AvroDecodeError, match="unexpected schema"):
                for _ in range(100):
                    got += len(consumer.poll_columns(200))
            # either the broker's first answer held all three (all rewound) or only the first two
            # (returned once); never a marker counted twice
            assert len(consumer.end_markers[0]) == got <= 1 and consumer.records_returned == 2 * got


def _produce_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "privstream.cli", "produce", *args], capture_output=True, text=True, timeout=60
    )


def _produce_generated(
    bootstrap: str, topic: str, generator: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    """5000 generated events (seed 3, chunks of 1000) through ``privstream produce``."""
    return _produce_cli(
        "--bootstrap", bootstrap, "--topic", topic, "--generator", generator, "--count", "5000", "--seed", "3",
        "--chunk", "1000", *extra,
    )  # fmt: skip


def test_produce_cli_generator(kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]) -> None:
    topic = unique_topic(partitions=2)
    result = _produce_generated(
        kafka_broker.bootstrap, topic, "gaussian", "--users", "10", "--batch", "500", "--key", "user"
    )
    assert result.returncode == 0, result.stderr
    assert "produced 5000 events" in result.stderr
    with EventConsumer(kafka_broker.bootstrap, topic) as consumer:
        got = consumer.read(until_end=True, timeout_s=30)
    assert len(got) == 5000 and set(got.user_ids.tolist()) <= set(range(10))


def test_produce_cli_files(kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str], tmp_path) -> None:
    csv_path = tmp_path / "events.csv"
    csv_path.write_text("item,user_id,event_time\n1,alice,100\nfoo,,200\n-3,7,300\n")
    jsonl_path = tmp_path / "events.jsonl"
    jsonl_path.write_text(
        "\n".join(json.dumps(r) for r in [{"item": 5, "user_id": "u"}, {"item": "z", "event_time": 9}])
    )
    for path, expected in [(csv_path, [1, "foo", -3]), (jsonl_path, [5, "z"])]:
        topic = unique_topic()
        result = _produce_cli("--bootstrap", kafka_broker.bootstrap, "--topic", topic, "--file", str(path))
        assert result.returncode == 0, result.stderr
        with EventConsumer(kafka_broker.bootstrap, topic) as consumer:
            got = consumer.read(until_end=True, timeout_s=30)
        assert got.items.tolist() == expected
    assert got.user_ids.tolist() == ["u", None] and got.event_time_ms[1] == 9


def test_produce_cli_fails_fast_on_bad_input(kafka_broker: EmbeddedBroker) -> None:
    bad_param = _produce_cli(
        "--bootstrap", kafka_broker.bootstrap, "--generator", "zipf", "--count", "10", "--param", "s=0"
    )
    assert bad_param.returncode == 2 and "s: must be" in bad_param.stderr
    no_count = _produce_cli("--bootstrap", kafka_broker.bootstrap, "--generator", "zipf")
    assert no_count.returncode == 2 and "count" in no_count.stderr
    unreachable = _produce_cli("--bootstrap", "127.0.0.1:1", "--generator", "zipf", "--count", "10")
    assert unreachable.returncode == 2 and "127.0.0.1:1 is unreachable" in unreachable.stderr
    # checked before any broker is contacted (an unreachable one would be reported otherwise)
    generated = ("--bootstrap", "127.0.0.1:1", "--generator", "zipf", "--count", "10")
    no_batch = _produce_cli(*generated, "--batch", "0")
    assert no_batch.returncode == 2 and "error: --batch: must be an int >= 1" in no_batch.stderr
    no_users = _produce_cli(*generated, "--key", "user")
    assert no_users.returncode == 2 and "error: --users:" in no_users.stderr


def test_produce_cli_punctuates_every_partition_by_event_time(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    """``--punctuate-every``: ``EpochWatermark`` messages on every partition, non-decreasing, never
    ahead of an event sent after them, the first before any event, the last after every event;
    consumers skip them."""
    import time

    topic = unique_topic(partitions=2)
    result = _produce_generated(
        kafka_broker.bootstrap,
        topic,
        "zipf",
        "--rate",
        "10000",
        "--batch",
        "250",
        "--punctuate-every",
        "100ms",
    )
    assert result.returncode == 0, result.stderr
    with RecordConsumer(kafka_broker.bootstrap, topic, dead_letters=False) as consumer:
        records, deadline = [], time.monotonic() + 30
        while sum(r.schema == "EndMarker" for r in records) < 2 and time.monotonic() < deadline:
            records += consumer.poll(timeout_ms=200)
    times = [e["event_time"] for r in records if r.schema == "EventBatch" for e in r.value["events"]]
    min_time, max_time = min(times), max(times)
    for partition in (0, 1):
        watermark, marks = None, []
        assert next(r for r in records if r.partition == partition).schema == "EpochWatermark"
        for rec in (r for r in records if r.partition == partition):
            if rec.schema == "EpochWatermark":
                watermark = rec.value["watermark_ms"]
                marks.append(watermark)
            elif rec.schema == "EventBatch" and watermark is not None:
                assert min(e["event_time"] for e in rec.value["events"]) >= watermark  # none is late
        # clock ticks at multiples of 100 ms: the first at or below the first event, the last the
        # first tick after the largest event time
        assert len(marks) >= 3 and marks == sorted(marks) and all(m % 100 == 0 for m in marks)
        assert marks[-1] == (max_time // 100 + 1) * 100 and marks[0] <= min_time
    with EventConsumer(kafka_broker.bootstrap, topic) as events:
        assert len(events.read(until_end=True, timeout_s=30)) == 5000 and events.dead_lettered == 0
    bad = _produce_cli(
        "--bootstrap", kafka_broker.bootstrap, "--topic", topic, "--generator", "zipf", "--count", "10",
        "--punctuate-every", "ten",
    )  # fmt: skip
    assert bad.returncode == 2 and "punctuate-every" in bad.stderr


def test_produce_cli_punctuates_a_file_on_its_declared_schedule_in_time_order(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str], tmp_path
) -> None:
    """A file's punctuations are the declared schedule (never its events' times): the run needs
    ``--punctuate-from/--punctuate-to``, sends the events sorted by time, and no event is behind a tick."""
    import time

    path = tmp_path / "events.csv"
    times = [1500, 1010, 1990, 1200, 99_000, 1000, 1350]  # out of order, one far in the future
    path.write_text("item,event_time\n" + "".join(f"{i % 3},{t}\n" for i, t in enumerate(times)))
    topic = unique_topic(partitions=2)
    base = ("--bootstrap", kafka_broker.bootstrap, "--topic", topic, "--file", str(path), "--batch", "2")
    missing = _produce_cli(*base, "--punctuate-every", "250ms")
    assert missing.returncode == 2 and "error: --punctuate-from: required with --file" in missing.stderr
    result = _produce_cli(
        *base, "--punctuate-every", "250ms", "--punctuate-from", "1000", "--punctuate-to", "2000"
    )
    assert result.returncode == 0, result.stderr
    with RecordConsumer(kafka_broker.bootstrap, topic, dead_letters=False) as consumer:
        records, deadline = [], time.monotonic() + 30
        while sum(r.schema == "EndMarker" for r in records) < 2 and time.monotonic() < deadline:
            records += consumer.poll(timeout_ms=200)
    for partition in (0, 1):
        marks, sent, watermark = [], [], None
        for rec in (r for r in records if r.partition == partition):
            if rec.schema == "EpochWatermark":
                watermark = rec.value["watermark_ms"]
                marks.append(watermark)
            elif rec.schema in ("Event", "EventBatch"):
                events = rec.value["events"] if rec.schema == "EventBatch" else [rec.value]
                sent += [e["event_time"] for e in events]
                assert watermark is not None and min(e["event_time"] for e in events) >= watermark
        assert marks == [1000, 1250, 1500, 1750, 2000]  # the schedule, not 99 000
        assert sent == sorted(sent)


def test_user_sets_go_to_their_users_partition_and_pass_the_jobs_routing_check(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    """``EventProducer.send_user_sets``: one ``UserSetEvent`` per user, on the partition the
    user-level job's per-event check expects (whatever ``key_by`` says), counted in the EndMarkers."""
    from privstream.operators.payloads import decode_payload
    from privstream.operators.routing import routing_error

    topic = unique_topic(partitions=3)
    users = [*range(20), "alice", "bob"]
    sets = [[u % 5, u % 5 + 10] if isinstance(u, int) else ["x", "y"] for u in users]
    with EventProducer(kafka_broker.bootstrap, topic, key_by="item") as producer:
        assert producer.send_user_sets(users, sets, 1000) == len(users)
        with pytest.raises(ValueError, match="user_ids"):
            producer.send_user_sets([None], [[1]])
        with pytest.raises(ValueError, match="appears twice"):
            producer.send_user_sets([1, 1], [[1], [2]])
        counts = producer.finish()
    assert sum(counts.values()) == len(users) and len([c for c in counts.values() if c]) > 1
    got = {}
    with RecordConsumer(kafka_broker.bootstrap, topic, dead_letters=False) as consumer:
        records, deadline = [], time.monotonic() + 30
        while sum(r.schema == "EndMarker" for r in records) < 3 and time.monotonic() < deadline:
            records += consumer.poll(timeout_ms=200)
    for rec in records:
        if rec.schema == "UserSetEvent":
            got[rec.value["user_id"]] = rec.value["items"]
            payload = decode_payload(rec.raw, user_sets=True)
            assert routing_error(payload, rec.partition, 3, "user") is None
    assert got == dict(zip(users, sets, strict=True))
