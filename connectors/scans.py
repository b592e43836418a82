"""Reads of a topic around a job run: where its input ends.

It reads committed records from the beginning (:func:`~privstream.connectors.consume.committed_reader`)
with the one read loop, :meth:`~privstream.connectors.consume.RecordConsumer.records`, and never uses
end offsets (tansu answers ListOffsets(latest) wrongly).

- :func:`end_marker_offsets`: producers (:meth:`privstream.connectors.produce.EventProducer.finish`)
  close a bounded stream with an ``EndMarker`` on every partition; the offsets after them bound a Flink
  source by *specific* offsets, so the job ends by itself.

The ledger topic's start-up read (fenced, fail-closed) is
:func:`privstream.connectors.ledger_topic.read_ledger`.
"""

from __future__ import annotations

from privstream.connectors.consume import committed_reader


def end_marker_offsets(bootstrap: str, topic: str, *, timeout_s: float = 60.0) -> dict[int, int]:
    """``{partition: offset after its first EndMarker}`` for every partition of ``topic`` (only the
    markers are decoded; a partition is no longer fetched once its marker was found).

    Raises ``TimeoutError`` naming the partitions without a marker after ``timeout_s``, and
    :class:`~privstream.connectors.consume.TopicNotFound` (a ValueError) for a missing topic."""
    found: dict[int, int] = {}
    with committed_reader(bootstrap, topic, schemas=("EndMarker",), fetch_max_bytes=64 << 20) as reader:
        try:
            for record in reader.records(
                until=lambda: len(found) == len(reader.partitions), timeout_s=timeout_s
            ):
                if record.partition not in found:
                    found[record.partition] = record.offset + 1
                    reader.pause(record.partition)
        except TimeoutError:
            missing = sorted(set(reader.partitions) - set(found))
            raise TimeoutError(
                f"no EndMarker on partitions {missing} of {topic!r} within {timeout_s:g} s"
            ) from None
    return found
