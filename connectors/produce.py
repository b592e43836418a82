"""Event producers: columns of items (and user ids, event times) -> Avro messages on a topic.

One event per message (``Event``) or micro-batches (``EventBatch``, ``events_per_message > 1``).
Partitioning is explicit and the same in both modes: the partition is a stable hash of the key —
the item (``key_by="item"``, the default) or the user (``"user"``) — modulo the partition count
(splitmix64 for ints, xxh64 for strings), so all events of one item/user land in one partition (a
batch only holds events of one partition). An event's partition therefore depends on that event
alone: removing one event changes one partition's stream and no other, which is what the
heavy-hitters job's guarantee needs (Lebeda–Tětek Cor. 7.2) and what it verifies per event.
Position-based partitioning (round-robin, sticky) would move every later event to another shard
when one event is removed, so it is not offered. :meth:`EventProducer.finish` flushes and
then writes an ``EndMarker`` with the per-partition event count to every partition, which is how
consumers detect the end of a bounded run (never by end offsets: tansu's are wrong).
:meth:`EventProducer.punctuate` likewise flushes and writes an ``EpochWatermark`` to every partition:
the public event-time clock that closes time epochs in the heavy-hitters job
(:mod:`privstream.operators.epochs`); a producer must not send events older than its last punctuation.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from privstream.connectors.avro_codec import default_registry
from privstream.connectors.clients import ProducerHandle, kafka_producer
from privstream.connectors.topics import EVENTS, LDP_REPORTS

from privstream.datagen import EventColumns
from privstream.partitioning import partition_for
from privstream.validation import check_int

KeyBy = Literal["item", "user"]
KEY_BY: tuple[str, ...] = ("item", "user")


def _as_list(values: np.ndarray | Sequence[Any], name: str) -> list[Any]:
    if isinstance(values, np.ndarray):
        if values.dtype.kind == "b":
            raise TypeError(f"{name}: bool values are not items/user ids")
        return values.tolist()  # numpy ints -> Python ints
    return list(values)


class EventProducer(ProducerHandle):
    """Writes events to ``topic`` as ``Event`` (``events_per_message == 1``) or ``EventBatch`` messages."""

    def __init__(
        self,
        bootstrap: str,
        topic: str = EVENTS,
        *,
        events_per_message: int = 1,
        key_by: KeyBy = "item",
        producer_id: str | None = None,
        **producer_config: Any,
    ) -> None:
        check_int("events_per_message", events_per_message, allow_numpy=True, type_error=ValueError)
        if key_by not in KEY_BY:
            raise ValueError(f"key_by: expected one of {KEY_BY}, got {key_by!r}")
        if topic == LDP_REPORTS:
            raise ValueError(
                f"topic: {LDP_REPORTS!r} carries only locally randomised reports; send them with "
                "privstream.connectors.ldp_producer.LdpProducer.submit, never raw events"
            )
        self.topic = topic
        self.events_per_message = events_per_message
        self.key_by = key_by
        self.producer_id = producer_id or uuid.uuid4().hex
        self._registry = default_registry()
        self._producer = kafka_producer(bootstrap, **producer_config)
        partitions = self._producer.partitions_for(topic)
        if not partitions:
            self._producer.close()
            raise ValueError(f"topic: {topic!r} does not exist on {bootstrap} (create it first)")
        self.partitions = sorted(partitions)
        self.events_per_partition = dict.fromkeys(self.partitions, 0)
        self.events_sent = 0
        self.messages_sent = 0

    def send_columns(self, columns: EventColumns) -> int:
        return self.send(columns.items, columns.user_ids, columns.event_time_ms)

    def send(
        self,
        items: np.ndarray | Sequence[int | str],
        user_ids: np.ndarray | Sequence[int | str | None] | None = None,
        event_time_ms: np.ndarray | Sequence[int] | int | None = None,
    ) -> int:
        """Send events (asynchronously); returns how many. Event time defaults to now."""
        item_list = _as_list(items, "items")
        n = len(item_list)
        users = [None] * n if user_ids is None else _as_list(user_ids, "user_ids")
        if event_time_ms is None:
            event_time_ms = int(time.time() * 1000)
        if isinstance(event_time_ms, (int, np.integer)):
            times = [int(event_time_ms)] * n
        else:
            times = _as_list(event_time_ms, "event_time_ms")
        if len(users) != n or len(times) != n:
            raise ValueError("user_ids/event_time_ms: must have the same length as items")
        if n == 0:
            return 0
        if self.key_by == "user" and any(u is None for u in users):
            raise ValueError("user_ids: key_by='user' needs a user id for every event")
        keys = users if self.key_by == "user" else item_list
        parts = partition_for(
            np.asarray(keys, dtype=object) if not _all_ints(keys) else np.asarray(keys),
            len(self.partitions),
        )
        order = np.argsort(parts, kind="stable")
        bounds = np.flatnonzero(np.diff(parts[order])) + 1
        groups = [
            (self.partitions[int(parts[chunk[0]])], chunk.tolist()) for chunk in np.split(order, bounds)
        ]
        for partition, indices in groups:
            self._send_partition(partition, indices, item_list, users, times)
        self.events_sent += n
        return n

    def send_user_sets(
        self,
        user_ids: Sequence[int | str],
        item_sets: Sequence[Sequence[int | str]],
        event_time_ms: Sequence[int] | int | None = None,
    ) -> int:
        """Send one ``UserSetEvent`` per user (the user-level job's input: its ≤ m distinct items),
        each to the partition of a hash of its user — whatever this producer's ``key_by``, since a
        user-level job's shards are always user-hashed. Send at most one set per user and epoch
        (a user with s sets in one epoch is protected only at group size s). Returns how many sets."""
        users = _as_list(user_ids, "user_ids")
        sets = [_as_list(items, "item_sets[]") for items in item_sets]
        if event_time_ms is None or isinstance(event_time_ms, (int, np.integer)):
            now = int(time.time() * 1000) if event_time_ms is None else int(event_time_ms)
            times = [now] * len(users)
        else:
            times = _as_list(event_time_ms, "event_time_ms")
        if len(sets) != len(users) or len(times) != len(users):
            raise ValueError("item_sets/event_time_ms: must have the same length as user_ids")
        if any(u is None for u in users):
            raise ValueError("user_ids: every user set needs a user id")
        if len(set(users)) != len(users):
            raise ValueError(
                "user_ids: a user appears twice; send one set per user (and epoch): a user with s sets "
                "is protected only at group size s"
            )
        if not users:
            return 0
        column = np.asarray(users) if _all_ints(users) else np.asarray(users, dtype=object)
        parts = partition_for(column, len(self.partitions))
        encode = self._registry.encode
        for user, items, when, part in zip(users, sets, times, parts.tolist(), strict=True):
            value = encode("UserSetEvent", {"user_id": user, "items": items, "event_time": when})
            partition = self.partitions[part]
            self._producer.send(self.topic, value=value, key=str(user).encode(), partition=partition)
            self.events_per_partition[partition] += 1
        self.messages_sent += len(users)
        self.events_sent += len(users)
        return len(users)

    def _send_partition(
        self, partition: int, indices: list[int], items: list[Any], users: list[Any], times: list[int]
    ) -> None:
        key_source = users if self.key_by == "user" else items
        send = self._producer.send
        if self.events_per_message == 1:
            encode = self._registry.encode
            for i in indices:
                value = encode("Event", {"item": items[i], "user_id": users[i], "event_time": times[i]})
                key = str(key_source[i]).encode()
                send(self.topic, value=value, key=key, partition=partition)
            self.messages_sent += len(indices)
        else:
            for start in range(0, len(indices), self.events_per_message):
                chunk = indices[start : start + self.events_per_message]
                events = [{"item": items[i], "user_id": users[i], "event_time": times[i]} for i in chunk]
                value = self._registry.encode("EventBatch", {"events": events})
                send(self.topic, value=value, partition=partition)
                self.messages_sent += 1
        self.events_per_partition[partition] += len(indices)

    def punctuate(self, watermark_ms: int, timeout: float | None = None) -> None:
        """Flush, then write an ``EpochWatermark`` (no more events with event time < ``watermark_ms``)
        to every partition. The flush keeps every event sent before it ahead of the punctuation.
        Time-epoch jobs start a partition's epochs at its first punctuation (punctuate before the
        first event) and release, at the end, only epochs ending by its last one."""
        watermark_ms = check_int("watermark_ms", watermark_ms, minimum=None, allow_numpy=True)
        self.flush(timeout)
        self._send_to_all_partitions(
            "EpochWatermark", {"producer_id": self.producer_id, "watermark_ms": watermark_ms}
        )

    def _send_to_all_partitions(self, schema_name: str, record: dict[str, Any]) -> None:
        value = self._registry.encode(schema_name, record)
        for partition in self.partitions:
            self._producer.send(self.topic, value=value, partition=partition)

    def finish(self, timeout: float | None = None) -> dict[int, int]:
        """Flush, then write an ``EndMarker`` to every partition; returns events sent per partition."""
        self.flush(timeout)
        encode = self._registry.encode
        for partition, count in self.events_per_partition.items():
            marker = encode("EndMarker", {"producer_id": self.producer_id, "events_sent": count})
            self._producer.send(self.topic, value=marker, partition=partition)
        self.flush(timeout)
        return dict(self.events_per_partition)


def _all_ints(values: list[Any]) -> bool:
    return all(type(v) is int for v in values)
