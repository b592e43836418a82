"""Epochs: which release a shard's events belong to, and when a shard may close an epoch.

Two policies, both decided *per shard from its own input order* (a Kafka partition is replayed in
the same order after a restart, so the epoch split and therefore every shard sketch is identical
in a failure-free run and in a run restored from a checkpoint):

- :class:`CountEpochs` ``(size)``: the i-th event (or user set) of a shard belongs to epoch
  ``i // size``; epoch e closes when the shard has seen ``(e + 1) * size`` events.
- :class:`TimeEpochs` ``(length_ms, lateness_ms)``: tumbling event-time epochs
  ``event_time // length_ms``; the shard's own watermark is ``max event time - lateness_ms``, and
  epoch e closes once that watermark reaches its end. Events of an already closed epoch are late:
  they are not counted and the message goes to the dead-letter topic with the reason.

At the end of the input (bounded run or an ``EndMarker``) every open epoch closes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np
from privstream.operators.payloads import EventPayload, Payload

#: ``closed_through`` of a shard that has finished its input: every epoch is closed.
FINAL = 2**62


@dataclass
class ShardProgress:
    """Per-shard bookkeeping kept in Flink keyed state next to the epoch sketches."""

    seen: int = 0  #: events (or user sets) accepted
    max_time: int | None = None  #: largest event time seen (ms)
    first_epoch: int | None = None  #: first epoch this shard touched
    closed_through: int | None = None  #: every epoch <= this is closed and emitted

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes | None) -> ShardProgress:
        return cls() if not data else cls(**json.loads(data))

    def is_closed(self, epoch: int) -> bool:
        return self.closed_through is not None and epoch <= self.closed_through


@dataclass(frozen=True)
class Split:
    """A message cut by epoch: ``pieces`` to count, ``late`` events of closed epochs (dropped)."""

    pieces: list[tuple[int, Payload]]
    late: int


class CountEpochs:
    """Epoch e = the shard's events ``[e * size, (e + 1) * size)``."""

    def __init__(self, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"epoch_events: must be an int >= 1, got {size!r}")
        self.size = size

    def describe(self) -> str:
        return f"count:{self.size}"

    def split(self, payload: Payload, progress: ShardProgress) -> Split:
        n = len(payload)
        pieces: list[tuple[int, Payload]] = []
        start = 0
        while start < n:
            epoch = (progress.seen + start) // self.size
            stop = min(n, (epoch + 1) * self.size - progress.seen)
            piece = payload.take(start, stop) if isinstance(payload, EventPayload) else payload
            pieces.append((epoch, piece))
            start = stop
        progress.seen += n
        if pieces and progress.first_epoch is None:
            progress.first_epoch = pieces[0][0]
        return Split(pieces, 0)

    def closable_through(self, progress: ShardProgress) -> int | None:
        last_full = progress.seen // self.size - 1
        return last_full if last_full >= 0 else None


class TimeEpochs:
    """Tumbling event-time epochs of ``length_ms``; a shard watermark lagging ``lateness_ms``."""

    def __init__(self, length_ms: int, lateness_ms: int = 0) -> None:
        if isinstance(length_ms, bool) or not isinstance(length_ms, int) or length_ms < 1:
            raise ValueError(f"epoch: the epoch length must be >= 1 ms, got {length_ms!r}")
        if isinstance(lateness_ms, bool) or not isinstance(lateness_ms, int) or lateness_ms < 0:
            raise ValueError(f"lateness: must be an int >= 0 ms, got {lateness_ms!r}")
        self.length_ms = length_ms
        self.lateness_ms = lateness_ms

    def describe(self) -> str:
        return f"time:{self.length_ms}ms,lateness:{self.lateness_ms}ms"

    def _times(self, payload: Payload) -> np.ndarray:
        if isinstance(payload, EventPayload):
            return payload.times
        return np.array([getattr(payload, "time", 0)], dtype=np.int64)

    def split(self, payload: Payload, progress: ShardProgress) -> Split:
        times = self._times(payload)
        if len(times) == 0:
            return Split([], 0)
        epochs = times // self.length_ms
        late_mask = epochs <= progress.closed_through if progress.closed_through is not None else None
        late = int(late_mask.sum()) if late_mask is not None else 0
        pieces: list[tuple[int, Payload]] = []
        for epoch in np.unique(epochs).tolist():
            if progress.is_closed(epoch):
                continue
            mask = epochs == epoch
            if isinstance(payload, EventPayload):
                pieces.append((epoch, payload if bool(mask.all()) else payload.select(mask)))
            else:
                pieces.append((epoch, payload))
        accepted = len(times) - late
        progress.seen += accepted
        if accepted:
            progress.max_time = max(int(times.max()), progress.max_time or int(times.max()))
            first = min(e for e, _ in pieces)
            progress.first_epoch = first if progress.first_epoch is None else min(progress.first_epoch, first)
        return Split(pieces, late)

    def closable_through(self, progress: ShardProgress) -> int | None:
        if progress.max_time is None:
            return None
        return (progress.max_time - self.lateness_ms) // self.length_ms - 1


EpochPolicy = CountEpochs | TimeEpochs
