"""Kafka produce/consume rates (events/s) against the embedded tansu broker.

Workloads: one event per message (Avro ``Event``) and micro-batches (``EventBatch`` of
``--batch`` events). Clients: kafka-python (the supported default, via
:class:`privstream.connectors.produce.EventProducer` / :class:`~privstream.connectors.consume.EventConsumer`)
and, if installed (``bench`` extra), confluent-kafka (librdkafka) with the same Avro codec, in the same
run. Consumer rates include Avro decoding into numpy columns. Reported per wall second and per
CPU second of this process ("per core"; librdkafka's own threads count as CPU of this process).

Run (the machine is shared; never run two heavy jobs at once)::

    flock /tmp/privstream-heavy.lock python benchmarks/bench_kafka.py
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial

from privstream.connectors.avro_codec import default_registry
from privstream.connectors.broker import EmbeddedBroker
from privstream.connectors.consume import EventConsumer, append_events, columns_from_events
from privstream.connectors.produce import EventProducer
from privstream.connectors.topics import TopicSpec, create_topics

from privstream.datagen import generate_events

PARTITIONS = 4


@dataclass
class Result:
    client: str
    direction: str
    events_per_message: int
    events: int
    wall_s: float
    cpu_s: float

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s

    @property
    def events_per_cpu_s(self) -> float:
        return self.events / max(self.cpu_s, 1e-9)


def _timed(fn: Callable[[], int]) -> tuple[int, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    events = fn()
    return events, time.perf_counter() - wall, time.process_time() - cpu


def kafka_python_produce(bootstrap: str, topic: str, columns, events_per_message: int) -> int:
    with EventProducer(bootstrap, topic, events_per_message=events_per_message) as producer:
        chunk = 50_000
        for start in range(0, len(columns), chunk):
            producer.send(
                columns.items[start : start + chunk], None, columns.event_time_ms[start : start + chunk]
            )
        producer.finish()
        return producer.events_sent


def kafka_python_consume(bootstrap: str, topic: str, expected: int) -> int:
    with EventConsumer(
        bootstrap, topic, fetch_max_bytes=64 << 20, max_partition_fetch_bytes=16 << 20
    ) as consumer:
        got = consumer.read(expected, until_end=True, timeout_s=600)
    if len(got) != expected:
        raise AssertionError(f"kafka-python consumed {len(got)} of {expected}")
    return len(got)


def confluent_produce(
    bootstrap: str,
    topic: str,
    columns,
    events_per_message: int,
    *,
    partitions: int = PARTITIONS,
    encode_message: Callable[[list, list, int, int], bytes] | None = None,
    end_markers: bool = True,
    end_offsets: dict[int, int] | None = None,
) -> int:
    """Messages of ``events_per_message`` events (Avro ``Event``/``EventBatch`` unless
    ``encode_message(items, times, start, stop)`` encodes them), each partition holding the events
    whose item hashes to it (the partitioner the heavy-hitters job verifies; never round-robin), then
    an ``EndMarker`` per partition. ``end_offsets`` (if given) receives ``{partition: offset after
    its last message}``."""
    import numpy as np
    from confluent_kafka import Producer

    from privstream.partitioning import partition_for

    registry = default_registry()
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000}
    )
    parts = partition_for(np.asarray(columns.items), partitions)
    order = np.argsort(parts, kind="stable")
    items = np.asarray(columns.items)[order].tolist()
    times = np.asarray(columns.event_time_ms)[order].tolist()
    bounds = np.searchsorted(parts[order], np.arange(partitions + 1)).tolist()
    counts = dict.fromkeys(range(partitions), 0)

    def delivered(err, msg) -> None:
        if err is None and end_offsets is not None:
            end_offsets[msg.partition()] = max(end_offsets.get(msg.partition(), 0), msg.offset() + 1)

    callback = delivered if end_offsets is not None else None
    message_index = 0
    for partition in range(partitions):
        for start in range(bounds[partition], bounds[partition + 1], events_per_message):
            stop = min(bounds[partition + 1], start + events_per_message)
            if encode_message is not None:
                value = encode_message(items, times, start, stop)
            elif events_per_message == 1:
                value = registry.encode(
                    "Event", {"item": items[start], "user_id": None, "event_time": times[start]}
                )
            else:
                events = [
                    {"item": items[i], "user_id": None, "event_time": times[i]} for i in range(start, stop)
                ]
                value = registry.encode("EventBatch", {"events": events})
            while True:
                try:
                    producer.produce(topic, value=value, partition=partition, on_delivery=callback)
                    break
                except BufferError:
                    producer.poll(0.05)
            counts[partition] += stop - start
            message_index += 1
            if message_index % 10_000 == 0:
                producer.poll(0)
    producer.flush()
    for partition, count in counts.items() if end_markers else ():
        producer.produce(
            topic,
            registry.encode("EndMarker", {"producer_id": "bench", "events_sent": count}),
            partition=partition,
            on_delivery=delivered,
        )
    producer.flush()
    return len(items)


def confluent_consume(bootstrap: str, topic: str, expected: int) -> int:
    from confluent_kafka import Consumer, TopicPartition

    registry = default_registry()
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time_ns()}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])  # offset 0 = earliest
    items: list = []
    users: list = []
    times: list = []
    ended: set[int] = set()
    deadline = time.monotonic() + 600
    try:
        while len(ended) < PARTITIONS and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=10_000, timeout=0.5):
                if message.error():
                    continue
                schema, value = registry.decode(message.value())
                if not append_events(schema, value, items, users, times) and schema == "EndMarker":
                    ended.add(message.partition())
    finally:
        consumer.close()
    columns = columns_from_events(items, users, times)
    if len(columns) != expected:
        raise AssertionError(f"confluent-kafka consumed {len(columns)} of {expected}")
    return len(columns)


def codec_only(columns, events_per_message: int) -> tuple[float, float]:
    """Encode and decode rates (events/s) of the Avro codec alone, no Kafka."""
    registry = default_registry()
    items, times = columns.items.tolist(), columns.event_time_ms.tolist()
    started = time.perf_counter()
    if events_per_message == 1:
        blobs = [
            registry.encode("Event", {"item": i, "user_id": None, "event_time": t})
            for i, t in zip(items, times, strict=True)
        ]
    else:
        blobs = [
            registry.encode(
                "EventBatch",
                {
                    "events": [
                        {"item": i, "user_id": None, "event_time": t}
                        for i, t in zip(
                            items[s : s + events_per_message], times[s : s + events_per_message], strict=True
                        )
                    ]
                },
            )
            for s in range(0, len(items), events_per_message)
        ]
    encode_s = time.perf_counter() - started
    started = time.perf_counter()
    out_items: list = []
    out_users: list = []
    out_times: list = []
    for blob in blobs:
        append_events(*registry.decode(blob), out_items, out_users, out_times)
    columns_from_events(out_items, out_users, out_times)
    decode_s = time.perf_counter() - started
    return len(items) / encode_s, len(items) / decode_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--single-events", type=int, default=100_000, help="events for the one-per-message runs"
    )
    parser.add_argument("--batched-events", type=int, default=2_000_000, help="events for the batched runs")
    parser.add_argument("--batch", type=int, default=1000, help="events per message in the batched runs")
    parser.add_argument("--clients", default="kafka-python,confluent-kafka")
    parser.add_argument("--json", action="store_true", help="print results as JSON lines")
    args = parser.parse_args(argv)

    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    if "confluent-kafka" in clients:
        try:
            import confluent_kafka  # noqa: F401
        except ImportError:
            print("confluent-kafka not installed (pip install -e '.[bench]'): measuring kafka-python only")
            clients.remove("confluent-kafka")
    implementations = {
        "kafka-python": (kafka_python_produce, kafka_python_consume),
        "confluent-kafka": (confluent_produce, confluent_consume),
    }
    results: list[Result] = []
    with EmbeddedBroker() as broker:
        for events_per_message, count in ((1, args.single_events), (args.batch, args.batched_events)):
            columns = generate_events("zipf", count, seed=1, start_time_ms=1_700_000_000_000)
            encode_rate, decode_rate = codec_only(columns, events_per_message)
            print(
                f"codec only, {events_per_message} events/message: encode {encode_rate:,.0f} events/s, "
                f"decode to numpy {decode_rate:,.0f} events/s",
                flush=True,
            )
            for client in clients:
                produce, consume = implementations[client]
                topic = f"bench-{client}-{events_per_message}-{time.time_ns()}"
                create_topics(broker.bootstrap, [TopicSpec(topic, PARTITIONS)])
                for direction, fn in (
                    ("produce", partial(produce, broker.bootstrap, topic, columns, events_per_message)),
                    ("consume", partial(consume, broker.bootstrap, topic, count)),
                ):
                    events, wall, cpu = _timed(fn)
                    result = Result(client, direction, events_per_message, events, wall, cpu)
                    results.append(result)
                    print(
                        f"{client:16s} {direction:8s} {events_per_message:5d} ev/msg  {events:>9,d} events  "
                        f"{result.events_per_s:>12,.0f} ev/s  {result.events_per_cpu_s:>12,.0f} ev/CPU-s",
                        flush=True,
                    )
    if args.json:
        for result in results:
            print(
                json.dumps(
                    {
                        **asdict(result),
                        "events_per_s": result.events_per_s,
                        "events_per_cpu_s": result.events_per_cpu_s,
                    }
                )
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
