"""The generic sharded operator: one key per shard, the Flink side of every per-shard body.

:class:`ShardFunction` is a ``KeyedProcessFunction`` over Kafka source rows
``(payload, partition, offset)`` keyed by partition (the jobs), or with ``typed`` over
:class:`TypedEvent` rows ``(shard, payload object or None)`` that the public operators
(:mod:`privstream.flink`) made from a user's own elements (the shard is the hash of the item or
user, computed there; ``None`` only announces the shard, so that every shard reports its progress
downstream even without events). It decodes messages, sends dead letters (side output
``DEAD_LETTERS``; typed mode's rejections on ``REJECTED``), ends a shard's input (an event-time
timer at the maximum watermark, which Flink emits when a bounded source finishes; an ``EndMarker``
message does the same for one partition of an unbounded run), runs a declared schedule's clock,
counts metrics and injects test faults.

What a shard holds and how it is written to Flink state is its body's: a subclass gives
:meth:`ShardFunction._sketcher` (the shard's live object: ``add(payload) -> (outputs, late)``,
``finish()``, ``progress``, ``late_reason``, ``unreleased_events``) and
:meth:`ShardFunction._commit` (what a message writes). The two bodies are the heavy-hitters epoch
sketches (:class:`~privstream.operators.sketch_operator.ShardSketchFunction`, Lebeda–Tětek Alg. 1 /
Alg. 4 per shard) and the continual monitor's nodes
(:class:`~privstream.operators.continual_operator.ContinualNodeFunction`, Chan et al.'s PDCH node).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, MutableMapping
from typing import Any, NamedTuple

from privstream.connectors.avro_codec import encode
from privstream.connectors.dead_letter import dead_letter_record
from privstream.operators.epochs import FINAL, EpochPolicy, ShardProgress
from privstream.operators.kafka_io import BYTES
from privstream.operators.metrics import OperatorMetrics
from privstream.operators.payloads import EndPayload, Payload, PayloadError, WatermarkPayload, decode_payload
from privstream.operators.shard_keys import ShardRouting
from privstream.operators.shard_logic import Misrouted, ShardSketch
from privstream.operators.test_hooks import TestHooks
from privstream.operators.unflushed import UnflushedMessages
from pyflink.common import Types
from pyflink.datastream import OutputTag
from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ListStateDescriptor, MapState, MapStateDescriptor, ValueStateDescriptor

logger = logging.getLogger(__name__)
DEAD_LETTERS = OutputTag("dead-letters", BYTES)
#: typed mode's rejected elements: :class:`Rejected` objects
REJECTED = OutputTag("rejected", Types.PICKLED_BYTE_ARRAY())
#: Event-time timer that fires only on the final (maximum) watermark, i.e. at the end of input.
END_OF_INPUT = 2**63 - 2


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


class MapStateStore(MutableMapping[Any, bytes]):
    """``MutableMapping`` view of a Flink ``MapState`` (e.g. epoch -> sketch bytes); ``sizes`` (if given)
    tracks the byte size of every entry written or removed through it (the ``stateBytes`` gauge)."""

    def __init__(self, state: MapState, sizes: dict[Any, int] | None = None) -> None:
        self._state = state
        self._sizes = sizes

    def __getitem__(self, key: Any) -> bytes:
        value = self._state.get(key)
        if value is None:
            raise KeyError(key)
        return bytes(value)

    def __setitem__(self, key: Any, value: bytes) -> None:
        self._state.put(key, value)
        if self._sizes is not None:
            self._sizes[key] = len(value)

    def __delitem__(self, key: Any) -> None:
        self._state.remove(key)
        if self._sizes is not None:
            self._sizes.pop(key, None)

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._state.keys()))

    def __len__(self) -> int:
        return sum(1 for _ in self._state.keys())


def _finish(sketcher: Any) -> list[Any]:
    """End of a shard's input; says (in the TaskManager log) what lay after its last released epoch."""
    out: list[Any] = sketcher.finish()
    if sketcher.unreleased_events:
        logger.warning(
            "partition %s: %s events counted in epochs after the last punctuation were not released "
            "(punctuate past an epoch's end to release it)",
            sketcher.shard,
            sketcher.unreleased_events,
        )
    return out


class ShardFunction(KeyedProcessFunction):
    """The Flink side of a per-shard body (module docstring); subclasses give ``_sketcher`` and
    ``_commit``. ``user_sets``: messages are user sets (PAMG) rather than events; ``hooks``: TESTS
    ONLY (an injected failure), None in production; ``schedule`` (typed time epochs only): the
    declared span ``[start_ms, end_ms)`` whose epochs are all released: the shard's clock starts at
    ``start_ms`` and ends at ``end_ms`` at the end of the input (a public schedule in place of
    punctuation messages)."""

    def __init__(
        self,
        policy: EpochPolicy,
        topic: str,
        hooks: TestHooks | None = None,
        shards: int = 1,
        *,
        user_sets: bool = False,
        typed: bool = False,
        schedule: tuple[int, int] | None = None,
    ) -> None:
        self.shards = shards
        self.routing = ShardRouting(shards)  #: the shards' Flink keys (operators/shard_keys.py)
        self.policy = policy
        self.topic = topic
        self.user_sets = user_sets
        self.faults = (hooks or TestHooks()).faults  # TESTS ONLY: an injected failure
        self.typed = typed
        self.schedule = schedule
        self._sizes: dict[int, dict[Any, int]] = {}
        self._progress_sizes: dict[int, int] = {}
        self._live: dict[int, Any] = {}
        self.metrics = OperatorMetrics.disabled()  # open() registers the real ones

    def open(self, runtime_context: RuntimeContext) -> None:
        # the same state names (and so savepoint layout) for every body
        self.sketches = runtime_context.get_map_state(
            MapStateDescriptor("epoch-sketches", Types.LONG(), BYTES)
        )
        self.progress = runtime_context.get_state(ValueStateDescriptor("shard-progress", BYTES))
        #: the messages (payloads) counted since the last flush, in order: with the flushed sketches
        #: and progress they are the checkpointed state (sketch_operator's docstring)
        self.since = UnflushedMessages(
            runtime_context.get_list_state(ListStateDescriptor("since-flush", Types.PICKLED_BYTE_ARRAY()))
        )
        #: shard -> its live object in memory between messages; emptied by every restore (open()
        #: runs again) and rebuilt from the state
        self._live = {}
        #: shard -> (state key -> bytes written) and shard -> bytes of its progress record, as
        #: written since this task (re)started: the ``stateBytes`` gauge
        self._sizes = {}
        self._progress_sizes = {}
        self.metrics = OperatorMetrics.register(
            runtime_context,
            ("eventsCounted", "deadLettered", "epochsClosed"),
            {"stateBytes": self._state_bytes},
        )

    def _sketcher(self, shard: int) -> Any:
        """The shard's live object (the body's), rebuilt from Flink state after a restore."""
        raise NotImplementedError

    def _commit(self, sketcher: Any, payload: Payload | None, flush: bool) -> None:
        """What a message writes to Flink state (the body's); ``flush``: the message had outputs."""
        raise NotImplementedError

    def _state_bytes(self) -> int:
        return sum(sum(s.values()) for s in self._sizes.values()) + sum(self._progress_sizes.values())

    def _seen(self, shard: int) -> int:
        """The shard's accepted events (its live progress, else its progress record's ``seen``)."""
        live = self._live.get(shard)
        return (
            live.progress.seen if live is not None else ShardProgress.from_bytes(self.progress.value()).seen
        )

    def _measured(self, shard: int, outputs: Iterator[Any]) -> Iterator[Any]:
        """``outputs`` unchanged, counted on the way: dead letters (and typed mode's rejections),
        closed epochs (a shard sketch of an epoch, or a continual node's update per step), then the
        events the key's progress accepted and its state size."""
        seen = self._seen(shard)
        for out in outputs:
            if isinstance(out, tuple) and len(out) == 2 and (out[0] is DEAD_LETTERS or out[0] is REJECTED):
                self.metrics.inc("deadLettered")
            elif isinstance(out, bytes) or (isinstance(out, ShardSketch) and out.epoch is not None):
                self.metrics.inc("epochsClosed")
            yield out
        self.metrics.inc("eventsCounted", self._seen(shard) - seen)
        progress = self.progress.value()
        self._progress_sizes[shard] = 0 if progress is None else len(progress)

    def _scheduled_start(self, sketcher: Any) -> list[Any]:
        """A declared schedule's first punctuation, once per shard (before its first element)."""
        if self.schedule is None or sketcher.progress.watermark is not None:
            return []
        out: list[Any] = sketcher.add(WatermarkPayload("schedule", self.schedule[0]))[0]
        return out

    def _finish(self, sketcher: Any) -> list[Any]:
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
        if not 0 <= shard < self.shards:  # a Kafka partition added after the job started
            raise ValueError(
                f"partition {shard}: this job was started for {self.shards} partitions (shards) of "
                f"{self.topic!r}; restart it with the topic's partition count"
            )
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
            decoded = decode_payload(payload, user_sets=self.user_sets)
        except PayloadError as exc:
            yield self._dead_letter(payload, str(exc), shard, offset)
            return
        late = 0
        if isinstance(decoded, EndPayload):
            out = self._finish(sketcher)
        else:
            try:
                out, late = sketcher.add(decoded)
            except Misrouted as exc:  # the producer's partitioning breaks the neighbour relation
                self._commit(sketcher, None, flush=True)  # the shard now refuses releases
                yield self._dead_letter(
                    payload, f"{exc}; this job releases nothing more (fail closed)", shard, offset
                )
                yield from exc.messages  # refuse the epochs the merge still holds, too
                return
            except ValueError as exc:  # e.g. a user set larger than m: the message is unusable
                self._commit(sketcher, None, flush=True)
                yield self._dead_letter(payload, f"rejected by the sketch: {exc}", shard, offset)
                return
            if late:
                yield self._dead_letter(
                    payload, f"{late} event(s) {sketcher.late_reason}: not counted", shard, offset
                )
        # any output (a closed epoch, the end, a late events' dead letter) is written at once
        self._commit(sketcher, decoded, flush=bool(out) or bool(late) or isinstance(decoded, EndPayload))
        yield from out
        self.faults.on_message(shard, sketcher.progress.seen)

    def _process_typed(self, event: TypedEvent, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        """A user's element (already a payload, its shard the hash of its key): the same logic; a
        rejection is a :class:`Rejected` on :data:`REJECTED`."""
        sketcher = self._sketcher(event.shard)
        if sketcher.progress.closed_through == FINAL:
            yield REJECTED, Rejected(event.element, "element after the end of the input", event.shard)
            return
        ctx.timer_service().register_event_time_timer(END_OF_INPUT)
        started = self._scheduled_start(sketcher)  # a change of the clock that no message records
        flush = bool(started)
        yield from started
        if event.payload is not None:
            try:
                out, late = sketcher.add(event.payload)
            except ValueError as exc:  # e.g. a user set larger than m (misrouting cannot happen here)
                self._commit(sketcher, None, flush=True)
                yield REJECTED, Rejected(event.element, f"rejected by the sketch: {exc}", event.shard)
                return
            if late:
                yield REJECTED, Rejected(event.element, f"{sketcher.late_reason}: not counted", event.shard)
            flush = flush or bool(out) or bool(late)  # a rejection is written at once, too
            yield from out
        self._commit(sketcher, event.payload, flush=flush)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[Any]:
        shard = self.routing.shard(ctx.get_current_key())  # timers know the key, not the shard
        yield from self._measured(shard, self._on_timer(shard))

    def _on_timer(self, shard: int) -> Iterator[Any]:
        sketcher = self._sketcher(shard)
        if sketcher.progress.closed_through == FINAL:
            return
        out = self._finish(sketcher)
        self._commit(sketcher, None, flush=True)
        yield from out
