"""The keyed sketch operator: one key per shard; keyed state = the sketches.

:class:`ShardSketchFunction` is a ``KeyedProcessFunction`` over Kafka source rows
``(payload, partition, offset)`` keyed by partition (the jobs), or with ``typed`` over
:class:`TypedEvent` rows ``(shard, payload object or None)`` that :func:`to_typed_event` made from a
user's own elements (the public operators, :mod:`privstream.flink`: the shard is the hash of the
item or user, computed there; ``None`` only announces the shard, so that every shard reports its
progress to the merge even without events). Its keyed state is a ``MapState`` from epoch
to the serialised sketch (core binary format) of every open epoch, plus a small progress record;
both are checkpointed with the Kafka offsets, so a restore replays exactly the messages after the
checkpoint into exactly the sketches of the checkpoint. The work is in
:class:`~privstream.operators.shard_logic.ShardSketcher`; this class adapts Flink state, dead
letters (side output ``DEAD_LETTERS``) and the end of input (an event-time timer at the maximum
watermark, which Flink emits when a bounded source finishes; an ``EndMarker`` message does the
same for one partition of an unbounded run).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, MutableMapping
from typing import Any, NamedTuple

from privstream.connectors.avro_codec import encode
from privstream.connectors.dead_letter import dead_letter_record
from privstream.operators.epochs import FINAL, EpochPolicy, ShardProgress
from privstream.operators.faults import TestFaults
from privstream.operators.metrics import OperatorMetrics
from privstream.operators.payloads import EndPayload, Payload, PayloadError, WatermarkPayload, decode_payload
from privstream.operators.shard_logic import Misrouted, ShardSketch, ShardSketcher
from privstream.operators.sketch_spec import SketchSpec
from pyflink.common import Types
from pyflink.datastream import OutputTag
from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import MapState, MapStateDescriptor, ValueStateDescriptor

logger = logging.getLogger(__name__)
BYTES = Types.PRIMITIVE_ARRAY(Types.BYTE())
DEAD_LETTERS = OutputTag("dead-letters", BYTES)
#: typed mode's rejected elements: :class:`Rejected` objects
REJECTED = OutputTag("rejected", Types.PICKLED_BYTE_ARRAY())


class TypedEvent(NamedTuple):
    """One element of a user's stream on its way to its shard (typed mode)."""

    shard: int
    payload: Payload | None  #: None: a shard announcement (no event)
    element: Any = None  #: the user's element, for a rejection


class Rejected(NamedTuple):
    """An element of a user's stream that was not counted, and why (typed mode's dead letter)."""

    element: Any
    reason: str
    shard: int | None = None


#: Event-time timer that fires only on the final (maximum) watermark, i.e. at the end of input.
END_OF_INPUT = 2**63 - 2


class _MapStateStore(MutableMapping[int, bytes]):
    """``MutableMapping`` view of a Flink ``MapState`` (epoch -> sketch bytes); ``sizes`` (if given)
    tracks the byte size of every entry written or removed through it (the ``stateBytes`` gauge)."""

    def __init__(self, state: MapState, sizes: dict[int, int] | None = None) -> None:
        self._state = state
        self._sizes = sizes

    def __getitem__(self, key: int) -> bytes:
        value = self._state.get(key)
        if value is None:
            raise KeyError(key)
        return bytes(value)

    def __setitem__(self, key: int, value: bytes) -> None:
        self._state.put(key, value)
        if self._sizes is not None:
            self._sizes[key] = len(value)

    def __delitem__(self, key: int) -> None:
        self._state.remove(key)
        if self._sizes is not None:
            self._sizes.pop(key, None)

    def __iter__(self) -> Iterator[int]:
        return iter(list(self._state.keys()))

    def __len__(self) -> int:
        return sum(1 for _ in self._state.keys())


def _finish(sketcher: ShardSketcher) -> list[ShardSketch]:
    """End of a shard's input; says (in the TaskManager log) what lay after its last released epoch."""
    out = sketcher.finish()
    if sketcher.unreleased_events:
        logger.warning(
            "partition %s: %s events counted in epochs after the last punctuation were not released "
            "(punctuate past an epoch's end to release it)",
            sketcher.shard,
            sketcher.unreleased_events,
        )
    return out


class ShardSketchFunction(KeyedProcessFunction):
    """Per-shard epoch sketches; emits :class:`ShardSketch` tuples when epochs close."""

    def __init__(
        self,
        spec: SketchSpec,
        policy: EpochPolicy,
        topic: str,
        faults: TestFaults | None = None,
        shards: int = 1,
        *,
        typed: bool = False,
        schedule: tuple[int, int] | None = None,
    ) -> None:
        """``schedule`` (typed time epochs only): the declared span ``[start_ms, end_ms)`` whose
        epochs are all released: the shard's clock starts at ``start_ms`` and ends at ``end_ms`` at
        the end of the input (a public schedule in place of punctuation messages)."""
        self.spec = spec
        self.shards = shards
        self.policy = policy
        self.topic = topic
        self.faults = faults or TestFaults()
        self.typed = typed
        self.schedule = schedule
        self._sizes: dict[int, dict[int, int]] = {}
        self._progress_sizes: dict[int, int] = {}
        self.metrics = OperatorMetrics.disabled()  # open() registers the real ones

    def open(self, runtime_context: RuntimeContext) -> None:
        self.sketches = runtime_context.get_map_state(
            MapStateDescriptor("epoch-sketches", Types.LONG(), BYTES)
        )
        self.progress = runtime_context.get_state(ValueStateDescriptor("shard-progress", BYTES))
        #: shard -> (epoch -> bytes of its sketch) and shard -> bytes of its progress record, as
        #: written since this task (re)started: the ``stateBytes`` gauge
        self._sizes = {}
        self._progress_sizes = {}
        self.metrics = OperatorMetrics.register(
            runtime_context,
            ("eventsCounted", "deadLettered", "epochsClosed"),
            {"stateBytes": self._state_bytes},
        )

    def _state_bytes(self) -> int:
        return sum(sum(s.values()) for s in self._sizes.values()) + sum(self._progress_sizes.values())

    def _seen(self) -> int:
        """The current key's accepted events (its progress record's ``seen``)."""
        return ShardProgress.from_bytes(self.progress.value()).seen

    def _measured(self, shard: int, outputs: Iterator[Any]) -> Iterator[Any]:
        """``outputs`` unchanged, counted on the way: dead letters (and typed mode's rejections),
        closed epochs (a shard sketch of an epoch, or a continual node's update per step), then the
        events the key's progress accepted and its state size."""
        seen = self._seen()
        for out in outputs:
            if isinstance(out, tuple) and len(out) == 2 and (out[0] is DEAD_LETTERS or out[0] is REJECTED):
                self.metrics.inc("deadLettered")
            elif isinstance(out, bytes) or (isinstance(out, ShardSketch) and out.epoch is not None):
                self.metrics.inc("epochsClosed")
            yield out
        self.metrics.inc("eventsCounted", self._seen() - seen)
        progress = self.progress.value()
        self._progress_sizes[shard] = 0 if progress is None else len(progress)

    def _sketcher(self, shard: int) -> ShardSketcher:
        progress = ShardProgress.from_bytes(self.progress.value())
        return ShardSketcher(
            shard,
            self.spec,
            self.policy,
            _MapStateStore(self.sketches, self._sizes.setdefault(shard, {})),
            progress,
            self.shards,
        )

    def _scheduled_start(self, sketcher: ShardSketcher) -> list[ShardSketch]:
        """A declared schedule's first punctuation, once per shard (before its first element)."""
        if self.schedule is None or sketcher.progress.watermark is not None:
            return []
        return sketcher.add(WatermarkPayload("schedule", self.schedule[0]))[0]

    def _finish(self, sketcher: ShardSketcher) -> list[ShardSketch]:
        """End of input: a declared schedule's clock reaches its end first."""
        out = [] if self.schedule is None else sketcher.add(WatermarkPayload("schedule", self.schedule[1]))[0]
        return out + _finish(sketcher)

    def _dead_letter(
        self, value: bytes | None, error: str, partition: int, offset: int
    ) -> tuple[OutputTag, bytes]:
        record = dead_letter_record(
            value=value, error=error, topic=self.topic, partition=partition, offset=offset
        )
        return DEAD_LETTERS, encode("DeadLetter", record)

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        shard = int(TypedEvent(*value).shard if self.typed else value[1])
        yield from self._measured(shard, self._process_element(value, ctx))

    def _process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        if self.typed:
            yield from self._process_typed(TypedEvent(*value), ctx)
            return
        payload, shard, offset = value[0], int(value[1]), int(value[2])
        sketcher = self._sketcher(shard)
        if sketcher.progress.closed_through == FINAL:
            yield self._dead_letter(payload, "message after this partition's end of stream", shard, offset)
            return
        ctx.timer_service().register_event_time_timer(END_OF_INPUT)
        try:
            decoded = decode_payload(payload, user_sets=self.spec.user_sets)
        except PayloadError as exc:
            yield self._dead_letter(payload, str(exc), shard, offset)
            return
        if isinstance(decoded, EndPayload):
            out = self._finish(sketcher)
        else:
            try:
                out, late = sketcher.add(decoded)
            except Misrouted as exc:  # the producer's partitioning breaks the neighbour relation
                self.progress.update(sketcher.progress.to_bytes())  # the shard now refuses releases
                yield self._dead_letter(
                    payload, f"{exc}; this job releases nothing more (fail closed)", shard, offset
                )
                yield from exc.messages  # refuse the epochs the merge still holds, too
                return
            except ValueError as exc:  # e.g. a user set larger than m: the message is unusable
                yield self._dead_letter(payload, f"rejected by the sketch: {exc}", shard, offset)
                return
            if late:
                yield self._dead_letter(
                    payload, f"{late} event(s) {sketcher.late_reason}: not counted", shard, offset
                )
        self.progress.update(sketcher.progress.to_bytes())
        yield from out
        self.faults.on_message(shard, sketcher.progress.seen)

    def _process_typed(self, event: TypedEvent, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        """A user's element (already a payload, its shard the hash of its key): the same sketch
        logic; a rejection is a :class:`Rejected` on :data:`REJECTED`."""
        sketcher = self._sketcher(event.shard)
        if sketcher.progress.closed_through == FINAL:
            yield REJECTED, Rejected(event.element, "element after the end of the input", event.shard)
            return
        ctx.timer_service().register_event_time_timer(END_OF_INPUT)
        yield from self._scheduled_start(sketcher)
        if event.payload is not None:
            try:
                out, late = sketcher.add(event.payload)
            except ValueError as exc:  # e.g. a user set larger than m (misrouting cannot happen here)
                yield REJECTED, Rejected(event.element, f"rejected by the sketch: {exc}", event.shard)
                self.progress.update(sketcher.progress.to_bytes())
                return
            if late:
                yield REJECTED, Rejected(event.element, f"{sketcher.late_reason}: not counted", event.shard)
            yield from out
        self.progress.update(sketcher.progress.to_bytes())

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[Any]:
        shard = int(ctx.get_current_key())
        yield from self._measured(shard, self._on_timer(shard))

    def _on_timer(self, shard: int) -> Iterator[Any]:
        sketcher = self._sketcher(shard)
        if sketcher.progress.closed_through == FINAL:
            return
        out = self._finish(sketcher)
        self.progress.update(sketcher.progress.to_bytes())
        yield from out
