"""Where a bounded run ends: the offset after each partition's ``EndMarker``.

Producers (:meth:`privstream.connectors.produce.EventProducer.finish`) close a bounded stream with
an ``EndMarker`` on every partition. ``--stop-at-end-markers`` scans the topic once before the job
starts and turns the markers into explicit stopping offsets (``marker offset + 1``), so the Flink
source is bounded by *specific* offsets and the job ends by itself — ListOffsets(latest), which
tansu answers wrongly, is never used.
"""

from __future__ import annotations

import time

from privstream.connectors.avro_codec import HEADER_SIZE, default_registry


def end_marker_offsets(bootstrap: str, topic: str, *, timeout_s: float = 60.0) -> dict[int, int]:
    """``{partition: offset after its first EndMarker}`` for every partition of ``topic``.

    Raises ``TimeoutError`` naming the partitions without a marker after ``timeout_s``."""
    from kafka import TopicPartition
    from privstream.connectors.clients import kafka_consumer

    marker = default_registry().current("EndMarker").header
    consumer = kafka_consumer(bootstrap, isolation_level="read_committed", fetch_max_bytes=64 << 20)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not tps:
            raise ValueError(f"topic: {topic!r} does not exist on {bootstrap}")
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        found: dict[int, int] = {}
        deadline = time.monotonic() + timeout_s
        while len(found) < len(tps):
            if time.monotonic() > deadline:
                missing = sorted({tp.partition for tp in tps} - set(found))
                raise TimeoutError(
                    f"no EndMarker on partitions {missing} of {topic!r} within {timeout_s:g} s"
                )
            for tp, records in consumer.poll(timeout_ms=200).items():
                for rec in records:
                    if (
                        tp.partition not in found
                        and rec.value is not None
                        and rec.value[:HEADER_SIZE] == marker
                    ):
                        found[tp.partition] = rec.offset + 1
                if tp.partition in found:
                    consumer.pause(tp)
        return found
    finally:
        consumer.close()
