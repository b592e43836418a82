"""Epochs: which release a shard's events belong to, and when a shard may close an epoch.

Two policies, both decided *per shard from its own input order* (a Kafka partition is replayed in
the same order after a restart, so the epoch split and therefore every shard sketch is identical
in a failure-free run and in a run restored from a checkpoint):

- :class:`CountEpochs` ``(size)``: the i-th event (or user set) of a shard belongs to epoch
  ``i // size``; epoch e closes when the shard has seen ``(e + 1) * size`` events.
- :class:`TimeEpochs` ``(length_ms, lateness_ms)``: tumbling event-time epochs
  ``event_time // length_ms``, closed by **punctuation**, never by event times. Producers write
  ``EpochWatermark`` messages (:meth:`privstream.connectors.produce.EventProducer.punctuate`, a
  public clock statement: no more events with event time < ``watermark_ms``) to every partition;
  a shard's ``watermark`` is the largest punctuation it has read, and epoch e closes once
  ``watermark - lateness_ms`` reaches the epoch's end ``(e + 1) * length_ms``. An event is late iff
  its own epoch is already closed: it is not counted and the message goes to the dead-letter topic
  with the reason.

Why punctuation (privacy review, HIGH): with a watermark of ``max event time seen - lateness``,
ONE event with a far-future time closes earlier epochs and every later event of those epochs is
dropped, so adding/removing one event changes *other* events' inclusion and the per-epoch
(ε, δ) claim for add/remove-one-event neighbours fails. With punctuation, an event's inclusion
depends only on its own event time and on its position relative to the public punctuations in its
partition, neither of which another event can change. So adding or removing one event changes
exactly one epoch's shard sketch by exactly that event (and the event-time histogram of an epoch
only by that event): Lebeda–Tětek Lemma 2 (sequential Alg. 1) and Cor. 7.2 (merged sketches) hold
per epoch, and disjoint epochs compose in parallel. The split is deterministic on replay because
the punctuations are messages in the same log as the events. Punctuations are *not* private
data: whoever writes them (a trusted clock/producer) must not derive them from individual events.

Which epochs a shard releases is public too. Count epochs: 0 up to the one holding the last
event (the stream length is public under their relation). Time epochs start at the shard's FIRST
punctuation (epochs it already closes are never released; events read before it are dead-lettered)
and end at its LAST: at the end of the input (bounded run or ``EndMarker``) the epochs ending at or
before the last punctuation close (lateness no longer matters: nothing more arrives), and later
epochs are not released. So one far-future or far-past event adds no release, and the empty epochs
in between are released as empty sketches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from privstream.operators.payloads import EventPayload, Payload
from privstream.operators.state_records import (
    SHARD_PROGRESS,
    from_optional_ints,
    optional_ints,
)

from privstream.privacy import (
    EpochKind,
    NeighbourRelation,
    Scope,
)
from privstream.sketches import SketchFormatError
from privstream.sketches.binary_format import decode_envelope, encode_envelope
from privstream.validation import check_int

#: ``closed_through`` of a shard that has finished its input: every epoch is closed.
FINAL = 2**62


@dataclass
class ShardProgress:
    """Per-shard bookkeeping kept in Flink keyed state next to the epoch sketches."""

    seen: int = 0  #: events (or user sets) accepted
    watermark: int | None = None  #: largest punctuation (``EpochWatermark``) read by this shard (ms)
    first_epoch: int | None = None  #: this shard's first epoch (count: 0; time: set by the first punctuation)
    closed_through: int | None = None  #: every epoch <= this is closed and emitted
    #: why this shard stopped supporting releases: set (for good) by the first misrouted event
    misrouted: str | None = None

    def close_through(self, last: int | None) -> range | None:
        """Close every epoch up to ``last`` not closed yet; returns them (empty ones included), or
        None if ``last`` closes nothing new. A shard with no epoch yet (time epochs: its first
        punctuation) starts after ``last``, so that call returns an empty range."""
        closed = self.closed_through
        if last is None or (closed is not None and last <= closed):
            return None
        if self.first_epoch is None:
            self.first_epoch = last + 1
        start = self.first_epoch if closed is None else max(self.first_epoch, closed + 1)
        self.closed_through = last
        return range(start, last + 1)

    def to_bytes(self) -> bytes:
        """The core's binary envelope (:mod:`privstream.operators.state_records`), not JSON."""
        params = optional_ints([self.seen, self.watermark, self.first_epoch, self.closed_through])
        reason = b"" if self.misrouted is None else self.misrouted.encode()
        return encode_envelope(SHARD_PROGRESS, [*params, int(self.misrouted is not None)], reason)

    @classmethod
    def from_bytes(cls, data: bytes | None) -> ShardProgress:
        if not data:
            return cls()
        params, payload = decode_envelope(data, SHARD_PROGRESS, 6, "ShardProgress")
        seen, watermark, first_epoch, closed_through = from_optional_ints(params[:5], 4)
        if seen is None or seen < 0 or params[5] not in (0, 1) or (payload and not params[5]):
            raise SketchFormatError("bad ShardProgress record")
        misrouted = payload.decode() if params[5] else None
        return cls(seen, watermark, first_epoch, closed_through, misrouted)

    def punctuate(self, watermark_ms: int) -> None:
        """Record a punctuation; the shard's watermark never moves back."""
        self.watermark = watermark_ms if self.watermark is None else max(self.watermark, watermark_ms)


@dataclass(frozen=True)
class Split:
    """A message cut by epoch: ``pieces`` to count; ``late`` events not counted, and why."""

    pieces: list[tuple[int, Payload]]
    late: int
    late_reason: str = ""


class CountEpochs:
    """Epoch e = the shard's events ``[e * size, (e + 1) * size)``."""

    def __init__(self, size: int) -> None:
        self.size = check_int("epoch_events", size, type_error=ValueError)

    #: Count epochs cut by position, so their guarantee is for replacing one record: its remove +
    #: add, calibrated by group privacy (Lebeda-Tetek Lemma 8.1, g = 2).
    group_size = 2

    @property
    def shard_events_bound(self) -> int:
        """A public bound on one shard's events in one epoch (the epoch size): ``auto``'s n_bound."""
        return self.size

    def describe(self) -> str:
        return f"count:{self.size}"

    @property
    def ledger_partition(self) -> str:
        """The epoch boundaries a parallel ledger is bound to (:func:`~privstream.accounting.parallel_epochs`)."""
        return f"count:{self.size}"

    def neighbour_relation(self, mechanism_relation: NeighbourRelation) -> NeighbourRelation:
        """Adding or removing one record would shift every later epoch (and the number of epochs
        would reveal n), so the release holds for *replacing* one record at a fixed position of one
        shard's stream by one routed to the same shard, stream lengths public: that changes one
        epoch by a remove plus an add, which ``mechanism_relation`` must cover (released with
        ``group_size`` = 2; :meth:`~privstream.privacy.NeighbourRelation.as_replacement` refuses
        otherwise)."""
        return mechanism_relation.as_replacement(Scope.SHARD).in_epochs(EpochKind.COUNT)

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

    def final_through(self, progress: ShardProgress) -> int | None:
        """End of input: through the epoch of the last event (the partial one included)."""
        return (progress.seen - 1) // self.size if progress.seen else None


class TimeEpochs:
    """Tumbling event-time epochs of ``length_ms``, closed by punctuation less ``lateness_ms``.

    Which epochs exist is public: from the shard's first punctuation on, every epoch up to the last
    punctuation is closed and released, empty ones too (:meth:`ShardProgress.close_through`), so
    one event never decides whether an epoch is released (issue 22; docs/privacy.md)."""

    #: epochs close on the producers' public punctuations, never on the data
    epoch_kind = EpochKind.PUNCTUATED_TIME

    def __init__(self, length_ms: int, lateness_ms: int = 0) -> None:
        self.length_ms = check_int("epoch (ms)", length_ms, type_error=ValueError)
        self.lateness_ms = check_int("lateness (ms)", lateness_ms, minimum=0, type_error=ValueError)

    #: One event changes one epoch (its own): no group privacy needed.
    group_size = 1
    #: no public bound on an epoch's events
    shard_events_bound = None

    def describe(self) -> str:
        return f"time:{self.length_ms}ms,lateness:{self.lateness_ms}ms,closed-by:punctuation"

    @property
    def ledger_partition(self) -> str:
        """The epoch boundaries a parallel ledger is bound to (lateness moves no boundary)."""
        return f"time:{self.length_ms}ms"

    def neighbour_relation(self, mechanism_relation: NeighbourRelation) -> NeighbourRelation:
        """The mechanism's add/remove relation, per time epoch: one event changes only its own epoch."""
        return mechanism_relation.in_epochs(self.epoch_kind)

    def _times(self, payload: Payload) -> np.ndarray:
        if isinstance(payload, EventPayload):
            return payload.times
        return np.array([getattr(payload, "time", 0)], dtype=np.int64)

    def split(self, payload: Payload, progress: ShardProgress) -> Split:
        """Cut by each event's own epoch. Before the shard's first punctuation no epoch has started
        (``closed_through`` is None): every event is early; after it, events of closed epochs are late."""
        times = self._times(payload)
        if len(times) == 0:
            return Split([], 0)
        closed = progress.closed_through
        if closed is None:
            return Split([], len(times), "early (before this partition's first EpochWatermark punctuation)")
        epochs = times // self.length_ms
        late = int((epochs <= closed).sum())
        pieces: list[tuple[int, Payload]] = []
        for epoch in np.unique(epochs[epochs > closed]).tolist():
            mask = epochs == epoch
            if isinstance(payload, EventPayload):
                pieces.append((epoch, payload if bool(mask.all()) else payload.select(mask)))
            else:
                pieces.append((epoch, payload))
        progress.seen += len(times) - late
        return Split(
            pieces, late, f"late (their epochs <= {closed} were closed by punctuation)" if late else ""
        )

    def closable_through(self, progress: ShardProgress) -> int | None:
        """Every epoch ending at or before ``watermark - lateness_ms`` (punctuation only)."""
        if progress.watermark is None:
            return None
        return (progress.watermark - self.lateness_ms) // self.length_ms - 1

    def final_through(self, progress: ShardProgress) -> int | None:
        """End of input: every epoch ending at or before the last punctuation (no lateness: nothing
        more arrives); later epochs are not released."""
        return None if progress.watermark is None else progress.watermark // self.length_ms - 1


EpochPolicy = CountEpochs | TimeEpochs
