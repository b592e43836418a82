"""Reads of a topic around a job run: where its input ends, and the budget its ledger already spent.

Both read committed records from the beginning (:func:`~privstream.connectors.consume.committed_reader`,
:func:`~privstream.connectors.consume.read_topic`) with the one read loop,
:meth:`~privstream.connectors.consume.RecordConsumer.records`; neither uses end offsets (tansu answers
ListOffsets(latest) wrongly).

- :func:`end_marker_offsets`: producers (:meth:`privstream.connectors.produce.EventProducer.finish`)
  close a bounded stream with an ``EndMarker`` on every partition; the offsets after them bound a Flink
  source by *specific* offsets, so the job ends by itself.
- :func:`latest_ledger`: the most advanced ledger state on the compacted ledger topic, from which a new
  job starts, so it never forgets spent budget.
"""

from __future__ import annotations

from functools import reduce

from privstream.connectors.consume import TopicNotFound, committed_reader, read_topic

from privstream.accounting import PrivacyLedger, most_advanced


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


def latest_ledger(bootstrap: str, ledger_topic: str, ledger_id: str, *, idle_s: float = 1.5) -> bytes | None:
    """The most advanced committed ledger state of ``ledger_id`` on ``ledger_topic``, if any (by
    history, not by the entry's sequence field: diverging histories raise LedgerFormatError).

    Reads from the beginning until the topic is idle for ``idle_s``; a missing topic has no state,
    an undecodable message raises."""
    try:
        records = read_topic(bootstrap, ledger_topic, idle_s=idle_s)
    except TopicNotFound:
        return None
    states = [
        PrivacyLedger.from_bytes(r.value["state"])
        for r in records
        if r.schema == "LedgerEntry" and r.value["ledger_id"] == ledger_id
    ]
    return reduce(most_advanced, states).to_bytes() if states else None
