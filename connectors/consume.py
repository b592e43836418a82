"""Consumer helpers for command-line and test use (Flink jobs use Flink's own KafkaSource).

- Manual partition assignment (no group join: tansu holds joins for ~session_timeout/2).
- Offsets: with a ``group_id``, reading starts at the group's committed offsets (``start="committed"``,
  falling back to the earliest offset) and :meth:`RecordConsumer.commit` commits exactly what was
  returned so far, so a restarted consumer resumes without loss or duplicates.
- Every message is decoded with :mod:`privstream.connectors.avro_codec`; undecodable ones go to the
  dead-letter topic with the reason (flushed before any commit past them); none is dropped.
- :meth:`RecordConsumer.records` is the one read loop: poll until a condition holds and the topic
  has been idle for a while, with an optional deadline; :func:`committed_reader` opens a topic from
  its beginning with ``read_committed`` (what reads of a job's outputs and inputs before it starts
  use, :mod:`privstream.connectors.scans`); :class:`ShowingReader` returns undecodable messages as
  records instead (``privstream tail``).
- :class:`EventConsumer` flattens ``Event``/``EventBatch`` messages into numpy columns and detects the
  end of a bounded run by ``EndMarker`` messages or a known event count (never by end offsets).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from privstream.connectors.avro_codec import HEADER_SIZE, AvroDecodeError, default_registry
from privstream.connectors.clients import kafka_consumer, kafka_producer
from privstream.connectors.dead_letter import DeadLetterSink, dead_letter_record
from privstream.connectors.topics import EVENTS

from privstream.datagen import EventColumns
from privstream.validation import check_int

Start = Literal["committed", "earliest"]


@dataclass(frozen=True)
class DecodedRecord:
    """One decoded message and where it came from."""

    schema: str
    value: dict[str, Any]
    topic: str
    partition: int
    offset: int
    key: bytes | None
    raw: bytes  #: the original message value


class TopicNotFound(ValueError):
    """The topic does not exist (it has no partitions)."""


class RecordConsumer:
    """Decoding consumer of one topic with manually assigned partitions.

    ``schemas``: decode and return only messages of these schemas (any registered version) and skip
    the others undecoded, unchecked and never dead-lettered: a fast scan for, e.g., ``EndMarker``."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        partitions: Sequence[int] | None = None,
        group_id: str | None = None,
        start: Start = "committed",
        dead_letters: bool = True,
        schemas: Collection[str] | None = None,
        **consumer_config: Any,
    ) -> None:
        from kafka import TopicPartition

        if start not in ("committed", "earliest"):
            raise ValueError(f"start: expected 'committed' or 'earliest', got {start!r}")
        self.topic = topic
        self.group_id = group_id
        self._registry = default_registry()
        consumer_config.setdefault("session_timeout_ms", 6000)
        self._consumer = kafka_consumer(bootstrap, group_id=group_id, **consumer_config)
        available = self._consumer.partitions_for_topic(topic)
        if not available:
            self._consumer.close()
            raise TopicNotFound(f"topic: {topic!r} does not exist on {bootstrap}")
        chosen = sorted(available) if partitions is None else sorted(set(partitions))
        if not set(chosen) <= set(available):
            self._consumer.close()
            raise ValueError(f"partitions: {chosen} not all in {topic!r}'s partitions {sorted(available)}")
        self.partitions: list[int] = chosen
        self._tps = {p: TopicPartition(topic, p) for p in chosen}
        self._consumer.assign(list(self._tps.values()))
        if start == "earliest" or group_id is None:
            self._consumer.seek_to_beginning(*self._tps.values())
        self._next_offsets: dict[int, int] = {}
        self._bootstrap = bootstrap
        self._dead_letters_enabled = dead_letters
        self._dlq_producer: Any = None
        self._dead_letters: DeadLetterSink | None = None
        self._schemas = None if schemas is None else frozenset(schemas)
        self.records_returned = 0

    @property
    def dead_lettered(self) -> int:
        """How many messages this consumer sent to the dead-letter topic."""
        return 0 if self._dead_letters is None else self._dead_letters.count

    def dead_letter(self, source: Any, value: bytes | None, error: str) -> None:
        """Send ``value`` (the original bytes) of the message at ``source`` (anything with ``topic``,
        ``partition``, ``offset``, ``key``) to ``<topic>-dlq`` with the reason; raises instead if
        dead letters are off."""
        if not self._dead_letters_enabled:
            raise AvroDecodeError(f"{source.topic}[{source.partition}]@{source.offset}: {error}")
        if self._dead_letters is None:  # created on first use: most consumers never need it
            self._dlq_producer = kafka_producer(self._bootstrap)
            self._dead_letters = DeadLetterSink(self._dlq_producer)
        record = dead_letter_record(
            value=value,
            key=source.key,
            error=error,
            topic=source.topic,
            partition=source.partition,
            offset=source.offset,
        )
        self._dead_letters.send(record)

    def poll(self, timeout_ms: int = 500, max_records: int | None = None) -> list[DecodedRecord]:
        """Decoded records in partition order; undecodable messages go to the dead-letter topic
        (with dead letters off, the poll raises and consumes nothing: see :meth:`_rewind`)."""
        batches = self._consumer.poll(timeout_ms=timeout_ms, max_records=max_records)
        out: list[DecodedRecord] = []
        decode = self._registry.decode
        for tp in sorted(batches, key=lambda t: t.partition):
            messages = batches[tp]
            for message in messages:
                if self._schemas is not None and not self._wanted(message.value):
                    continue
                try:
                    schema, value = decode(message.value)
                except AvroDecodeError as exc:
                    with self._rewind([m for ms in batches.values() for m in ms]):
                        self.dead_letter(message, message.value, f"AvroDecodeError: {exc.reason}")
                    continue
                out.append(
                    DecodedRecord(
                        schema,
                        value,
                        message.topic,
                        message.partition,
                        message.offset,
                        message.key,
                        message.value,
                    )
                )
            if messages:
                self._next_offsets[tp.partition] = messages[-1].offset + 1
        self.records_returned += len(out)
        return out

    def _wanted(self, value: bytes | None) -> bool:
        """Whether a message's single-object header names one of ``schemas`` (nothing is decoded)."""
        version = None if value is None else self._registry.by_fingerprint(value[2:HEADER_SIZE])
        return version is not None and version.name in (self._schemas or ())

    def records(
        self,
        *,
        idle_s: float = 0.0,
        until: Callable[[], bool] | None = None,
        timeout_s: float | None = None,
        poll_ms: int = 200,
    ) -> Iterator[DecodedRecord]:
        """Poll and yield records until ``until()`` holds (checked after the caller has taken each
        poll's records; always true if None) and no record has arrived for ``idle_s`` seconds.

        Raises ``TimeoutError`` once ``timeout_s`` have passed without that (the records yielded so
        far stay with the caller). End offsets are never used (tansu's ListOffsets(latest) is wrong)."""
        start = last = time.monotonic()
        while True:
            polled = self.poll(timeout_ms=poll_ms)
            now = time.monotonic()
            if polled:
                last = now
            yield from polled
            if (until is None or until()) and now - last >= idle_s:
                return
            if timeout_s is not None and now - start > timeout_s:
                raise TimeoutError(f"{self.topic}: not done after {timeout_s:g} s")

    def pause(self, partition: int) -> None:
        """Fetch nothing more from ``partition`` (e.g. once a scan found what it wanted there)."""
        self._consumer.pause(self._tps[partition])

    def resume(self, partition: int) -> None:
        """Fetch from ``partition`` again after :meth:`pause`."""
        self._consumer.resume(self._tps[partition])

    @contextmanager
    def _rewind(self, polled: Sequence[Any], returned: int = 0) -> Iterator[None]:
        """If the body raises, seek every partition in ``polled`` back to its first polled offset (and
        forget those positions and the ``returned`` records counted), so a poll that raises loses
        nothing: the next poll meets the same messages (and the same error) again."""
        try:
            yield
        except Exception:
            first: dict[int, int] = {}
            for m in polled:
                first[m.partition] = min(m.offset, first.get(m.partition, m.offset))
            for partition, offset in first.items():
                self._consumer.seek(self._tps[partition], offset)
                self._next_offsets[partition] = offset
            self.records_returned -= returned
            raise

    def positions(self) -> dict[int, int]:
        """Next offset per partition after what has been returned (only partitions read so far)."""
        return dict(self._next_offsets)

    def commit(self) -> dict[int, int]:
        """Flush dead letters, then commit the offsets after everything returned so far (needs ``group_id``)."""
        from kafka.structs import OffsetAndMetadata

        if self.group_id is None:
            raise ValueError("group_id: committing offsets needs a consumer group id")
        if self._dead_letters is not None:
            self._dead_letters.flush()
        offsets = {self._tps[p]: OffsetAndMetadata(o, "", -1) for p, o in self._next_offsets.items()}
        if offsets:
            self._consumer.commit(offsets)
        return dict(self._next_offsets)

    def committed(self) -> dict[int, int | None]:
        """The group's committed offset per assigned partition (None if none)."""
        return {p: self._consumer.committed(tp) for p, tp in self._tps.items()}

    def close(self) -> None:
        if self._dead_letters is not None:
            self._dead_letters.flush()
        if self._dlq_producer is not None:
            self._dlq_producer.close()
        self._consumer.close()

    def __enter__(self) -> RecordConsumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class ShowingReader(RecordConsumer):
    """A consumer that hands an undecodable message back, in its place, as a record of schema
    ``"Undecodable"`` (value: the reason and the size) instead of dead-lettering or raising: for
    readers that show everything and write nothing (``privstream tail``)."""

    def poll(self, timeout_ms: int = 500, max_records: int | None = None) -> list[DecodedRecord]:
        self._undecodable: list[DecodedRecord] = []
        polled = super().poll(timeout_ms, max_records)
        return sorted([*polled, *self._undecodable], key=lambda r: (r.partition, r.offset))

    def dead_letter(self, source: Any, value: bytes | None, error: str) -> None:
        size = 0 if value is None else len(value)
        where = (source.topic, source.partition, source.offset, source.key, value or b"")
        self._undecodable.append(DecodedRecord("Undecodable", {"error": error, "bytes": size}, *where))


def committed_reader(
    bootstrap: str, topic: str, *, reader: type[RecordConsumer] = RecordConsumer, **kwargs: Any
) -> RecordConsumer:
    """A :class:`RecordConsumer` (or subclass ``reader``) of every partition of ``topic`` from its
    beginning, committed records only (``read_committed``); an undecodable message raises rather
    than being dead-lettered (the reader must not write). Raises :class:`TopicNotFound`."""
    return reader(
        bootstrap,
        topic,
        start="earliest",
        dead_letters=False,
        isolation_level="read_committed",
        **kwargs,
    )


def read_topic(
    bootstrap: str,
    topic: str,
    *,
    idle_s: float = 2.0,
    expect: int | None = None,
    timeout_s: float | None = None,
) -> list[DecodedRecord]:
    """The committed records of ``topic`` (:func:`committed_reader`) in partition/offset order, read
    until ``expect`` records (if given) were read and then nothing more arrived for ``idle_s``; after
    ``timeout_s`` (if given), whatever was read by then."""
    out: list[DecodedRecord] = []
    with committed_reader(bootstrap, topic) as reader:
        until = None if expect is None else lambda: len(out) >= expect
        try:
            for record in reader.records(idle_s=idle_s, until=until, timeout_s=timeout_s):
                out.append(record)
        except TimeoutError:
            pass  # what was read by then
    return sorted(out, key=lambda r: (r.partition, r.offset))


def _column(values: list[Any]) -> np.ndarray:
    if all(type(v) is int for v in values):
        return np.array(values, dtype=np.int64)
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def append_events(
    schema: str, value: dict[str, Any], items: list[Any], users: list[Any], times: list[int]
) -> bool:
    """Append a decoded ``Event``/``EventBatch`` to column lists; False for any other schema."""
    if schema == "EventBatch":
        events = value["events"]
        items.extend([e["item"] for e in events])
        users.extend([e["user_id"] for e in events])
        times.extend([e["event_time"] for e in events])
        return True
    if schema == "Event":
        items.append(value["item"])
        users.append(value["user_id"])
        times.append(value["event_time"])
        return True
    return False


def columns_from_events(items: list[Any], users: list[Any], times: list[int]) -> EventColumns:
    """Numpy columns: int64 items/users when all are ints (else object arrays); users None if all missing."""
    user_column = None if all(u is None for u in users) else _column(users)
    return EventColumns(_column(items), user_column, np.array(times, dtype=np.int64))


class EventConsumer(RecordConsumer):
    """Reads ``Event``/``EventBatch`` messages as numpy columns; counts ``EndMarker`` messages per partition
    (``EpochWatermark`` punctuations are skipped)."""

    def __init__(
        self, bootstrap: str, topic: str = EVENTS, *, expected_producers: int = 1, **kwargs: Any
    ) -> None:
        check_int("expected_producers", expected_producers, allow_numpy=True, type_error=ValueError)
        super().__init__(bootstrap, topic, **kwargs)
        self.expected_producers = expected_producers
        self.end_markers: dict[int, list[dict[str, Any]]] = {p: [] for p in self.partitions}

    @property
    def ended(self) -> bool:
        """True once every assigned partition has an ``EndMarker`` from each expected producer."""
        return all(len(markers) >= self.expected_producers for markers in self.end_markers.values())

    def poll_columns(self, timeout_ms: int = 500, max_records: int | None = None) -> EventColumns:
        items: list[Any] = []
        users: list[Any] = []
        times: list[int] = []
        records = self.poll(timeout_ms, max_records)
        markers: list[DecodedRecord] = []  # applied only once the whole poll went through
        for record in records:
            if append_events(record.schema, record.value, items, users, times):
                continue
            if record.schema == "EndMarker":
                markers.append(record)
            elif record.schema == "EpochWatermark":
                continue  # punctuation: a public clock for time-epoch jobs, carries no events
            else:
                with self._rewind(records, returned=len(records)):
                    self.dead_letter(
                        record, record.raw, f"unexpected schema {record.schema} on topic {record.topic}"
                    )
        for record in markers:
            self.end_markers[record.partition].append(record.value)
        return columns_from_events(items, users, times)

    def read(
        self,
        count: int | None = None,
        *,
        until_end: bool = False,
        timeout_s: float = 60.0,
        max_records: int | None = None,
    ) -> EventColumns:
        """Poll until ``count`` events were read and/or (``until_end``) every partition ended.

        Whole polls are returned, so the result can exceed ``count`` (``max_records`` caps messages per
        poll, for a finer stop). Raises
        ``TimeoutError`` (with the progress) if the condition is not met within ``timeout_s``.
        """
        if count is None and not until_end:
            raise ValueError("count/until_end: give an event count, until_end=True, or both")
        parts: list[EventColumns] = []
        total = 0
        deadline = time.monotonic() + timeout_s
        while not ((count is None or total >= count) and (not until_end or self.ended)):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"read {total} events (wanted {count}), end markers {self._marker_summary()} after {timeout_s:g} s"
                )
            chunk = self.poll_columns(timeout_ms=200, max_records=max_records)
            if len(chunk):
                parts.append(chunk)
                total += len(chunk)
        return concat_columns(parts)

    def _marker_summary(self) -> dict[int, int]:
        return {p: len(m) for p, m in self.end_markers.items()}


def concat_columns(parts: Sequence[EventColumns]) -> EventColumns:
    """Concatenate column chunks (object dtype wins; users None only if all chunks lack users)."""
    if not parts:
        return EventColumns(np.empty(0, dtype=np.int64), None, np.empty(0, dtype=np.int64))
    items = np.concatenate([p.items for p in parts]) if len(parts) > 1 else parts[0].items
    if all(p.user_ids is None for p in parts):
        users = None
    else:
        users = np.concatenate(
            [p.user_ids if p.user_ids is not None else np.full(len(p), None, dtype=object) for p in parts]
        )
    times = np.concatenate([p.event_time_ms for p in parts])
    return EventColumns(items, users, times)
