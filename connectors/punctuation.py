"""A producer's public event-time clock: ``EpochWatermark`` ticks on a declared schedule.

Time-epoch jobs start and close epochs only on punctuations, so *which* punctuations are written
and *which* events they make late must not depend on the data: otherwise one far-future event could
make other events late or add releases, and the job's "add/remove one event" relation would not
hold. A :class:`PunctuationSchedule` therefore

* ticks at the multiples of ``every_ms`` that cover a **declared** range ``[start_ms, end_ms)`` —
  the first at or below ``start_ms``, the last the first multiple at or above ``end_ms`` — so the
  set of ticks, and hence of released epochs, is public (it never looks at an event's time to
  choose a tick);
* takes events **in event-time order** (generated streams are; files are sorted first) and writes
  each tick just before the first event at or after it, so no event is ever behind a tick. An event
  outside the range lands before the first tick (the job dead-letters it) or after the last one
  (the job does not release its epoch): both decided by that event's own time alone.

Input that goes back in time raises :class:`ValueError`: the schedule cannot place a tick for it
without making earlier-sent events depend on later ones.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from privstream.datagen import EventColumns


class _Punctuating(Protocol):
    def send_columns(self, columns: EventColumns) -> int: ...

    def punctuate(self, watermark_ms: int) -> None: ...


def schedule_ticks(every_ms: int, start_ms: int, end_ms: int) -> list[int]:
    """The multiples of ``every_ms`` from the one at or below ``start_ms`` to the first at or above ``end_ms``."""
    if every_ms < 1:
        raise ValueError(f"--punctuate-every: must be > 0 ms, got {every_ms}")
    if end_ms <= start_ms:
        raise ValueError(f"--punctuate-to: must be after --punctuate-from ({start_ms}), got {end_ms}")
    first = start_ms // every_ms * every_ms
    last = -(-end_ms // every_ms) * every_ms
    return list(range(first, last + 1, every_ms))


def slice_columns(columns: EventColumns, begin: int, end: int) -> EventColumns:
    users = None if columns.user_ids is None else columns.user_ids[begin:end]
    return EventColumns(columns.items[begin:end], users, columns.event_time_ms[begin:end])


def sort_by_time(columns: EventColumns) -> EventColumns:
    """Stable sort by event time (file input, before it meets a schedule)."""
    order = np.argsort(columns.event_time_ms, kind="stable")
    users = None if columns.user_ids is None else columns.user_ids[order]
    return EventColumns(columns.items[order], users, columns.event_time_ms[order])


class PunctuationSchedule:
    """Send events through ``producer`` with ticks at multiples of ``every_ms`` over ``[start_ms, end_ms)``."""

    def __init__(self, producer: _Punctuating, every_ms: int, start_ms: int, end_ms: int) -> None:
        self.producer = producer
        self.ticks = schedule_ticks(every_ms, start_ms, end_ms)
        self.next = 0  #: index of the next tick to write
        self.last_time: int | None = None  #: largest event time sent

    def send(self, columns: EventColumns) -> int:
        """Send events (non-decreasing times, not before earlier ones) with the ticks they pass."""
        times: Any = columns.event_time_ms
        if len(times) == 0:
            return 0
        if np.any(np.diff(times) < 0) or (self.last_time is not None and int(times[0]) < self.last_time):
            raise ValueError(
                "event_time: input goes back in time; a punctuated stream must be sent in event-time "
                "order (files are sorted before sending)"
            )
        sent, begin = 0, 0
        while self.next < len(self.ticks) and self.ticks[self.next] <= int(times[-1]):
            cut = int(np.searchsorted(times, self.ticks[self.next], side="left"))
            if cut > begin:
                sent += self.producer.send_columns(slice_columns(columns, begin, cut))
            self.producer.punctuate(self.ticks[self.next])
            self.next, begin = self.next + 1, cut
        if begin < len(times):
            sent += self.producer.send_columns(slice_columns(columns, begin, len(times)))
        self.last_time = int(times[-1])
        return sent

    def end(self) -> None:
        """Write the remaining ticks (the whole declared schedule is always written)."""
        for tick in self.ticks[self.next :]:
            self.producer.punctuate(tick)
        self.next = len(self.ticks)
