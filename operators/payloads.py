"""Decoding of the events topic's Kafka values into what a shard's sketch operator consumes.

The events topic carries Avro single-object messages (:mod:`privstream.connectors.avro_codec`):
``EventBatch`` (a micro-batch: the fast path, see ``benchmarks/bench_flink.py``), ``Event`` (one
event), ``UserSetEvent`` (one user's set of ≤ m distinct items, for PAMG), ``EpochWatermark`` (a
producer's punctuation: the public event-time clock that closes time epochs) and ``EndMarker`` (a
producer finished this partition). Everything else, and anything undecodable, is a
:class:`PayloadError` whose message becomes the dead letter's reason: nothing is dropped silently.

Items of a batch become one numpy ``int64`` array when all are ints (the vectorised path of
``update_batch``) and a list otherwise; event times are an ``int64`` array in milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from privstream.connectors.avro_codec import AvroDecodeError, decode


class PayloadError(ValueError):
    """A message the job cannot use; the message is the dead-letter reason."""


@dataclass(frozen=True)
class EventPayload:
    """Events for an event-level sketch: ``items[i]`` happened at ``times[i]`` (ms); ``users[i]``
    is its user id (None where the producer gave none), used only to verify user-keyed sharding."""

    items: np.ndarray | list[object]
    times: np.ndarray
    users: tuple[object, ...] = ()

    def __len__(self) -> int:
        return len(self.times)

    def take(self, start: int, stop: int) -> EventPayload:
        return EventPayload(self.items[start:stop], self.times[start:stop], self.users[start:stop])

    def select(self, mask: np.ndarray) -> EventPayload:
        keep = mask.tolist()
        users = tuple(u for u, k in zip(self.users, keep, strict=True) if k) if self.users else ()
        if isinstance(self.items, np.ndarray):
            return EventPayload(self.items[mask], self.times[mask], users)
        return EventPayload([x for x, k in zip(self.items, keep, strict=True) if k], self.times[mask], users)


@dataclass(frozen=True)
class UserSetPayload:
    """One user's distinct items (PAMG, Lebeda–Tětek Alg. 4) at one event time."""

    user_id: int | str
    items: tuple[object, ...]
    time: int

    def __len__(self) -> int:
        return 1


@dataclass(frozen=True)
class EndPayload:
    """A producer finished this partition after ``events_sent`` events."""

    producer_id: str
    events_sent: int


@dataclass(frozen=True)
class WatermarkPayload:
    """Punctuation: no more events with event time < ``watermark_ms`` are accepted (public clock)."""

    producer_id: str
    watermark_ms: int

    def __len__(self) -> int:
        return 0


Payload = EventPayload | UserSetPayload | EndPayload | WatermarkPayload


def _items_array(items: list[object]) -> np.ndarray | list[object]:
    if all(type(x) is int for x in items):
        return np.fromiter(items, dtype=np.int64, count=len(items))
    return items


def decode_payload(value: bytes | None, *, user_sets: bool) -> Payload:
    """Decode one Kafka value; ``user_sets`` says whether the job runs PAMG (user-level) or MG.

    Raises :class:`PayloadError` for undecodable bytes or a message type the job does not accept.
    """
    try:
        name, record = decode(value)
    except AvroDecodeError as exc:
        raise PayloadError(f"undecodable: {exc.reason}") from exc
    if name == "EndMarker":
        return EndPayload(str(record["producer_id"]), int(record["events_sent"]))
    if name == "EpochWatermark":
        return WatermarkPayload(str(record["producer_id"]), int(record["watermark_ms"]))
    if user_sets:
        if name != "UserSetEvent":
            raise PayloadError(f"unexpected {name} message: a user-level (PAMG) job reads UserSetEvent")
        return UserSetPayload(record["user_id"], tuple(record["items"]), int(record["event_time"]))
    if name == "EventBatch":
        events = record["events"]
        items = [e["item"] for e in events]
        times = np.fromiter((e["event_time"] for e in events), dtype=np.int64, count=len(events))
        return EventPayload(_items_array(items), times, tuple(e["user_id"] for e in events))
    if name == "Event":
        return EventPayload(
            _items_array([record["item"]]),
            np.array([record["event_time"]], dtype=np.int64),
            (record["user_id"],),
        )
    raise PayloadError(f"unexpected {name} message: an event-level (MG) job reads EventBatch or Event")
