"""The keyed sketch operator: one key per shard (Kafka partition); keyed state = the sketches.

:class:`ShardSketchFunction` is a ``KeyedProcessFunction`` over source rows
``(payload, partition, offset)`` keyed by partition. Its keyed state is a ``MapState`` from epoch
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
from typing import Any

from privstream.connectors.avro_codec import encode
from privstream.connectors.dead_letter import dead_letter_record
from privstream.operators.epochs import FINAL, EpochPolicy, ShardProgress
from privstream.operators.faults import TestFaults
from privstream.operators.payloads import EndPayload, PayloadError, decode_payload
from privstream.operators.shard_logic import Misrouted, ShardSketch, ShardSketcher
from privstream.operators.sketch_spec import SketchSpec
from pyflink.common import Types
from pyflink.datastream import OutputTag
from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import MapState, MapStateDescriptor, ValueStateDescriptor

logger = logging.getLogger(__name__)
BYTES = Types.PRIMITIVE_ARRAY(Types.BYTE())
DEAD_LETTERS = OutputTag("dead-letters", BYTES)
#: Event-time timer that fires only on the final (maximum) watermark, i.e. at the end of input.
END_OF_INPUT = 2**63 - 2


class _MapStateStore(MutableMapping[int, bytes]):
    """``MutableMapping`` view of a Flink ``MapState`` (epoch -> sketch bytes)."""

    def __init__(self, state: MapState) -> None:
        self._state = state

    def __getitem__(self, key: int) -> bytes:
        value = self._state.get(key)
        if value is None:
            raise KeyError(key)
        return bytes(value)

    def __setitem__(self, key: int, value: bytes) -> None:
        self._state.put(key, value)

    def __delitem__(self, key: int) -> None:
        self._state.remove(key)

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
    ) -> None:
        self.spec = spec
        self.shards = shards
        self.policy = policy
        self.topic = topic
        self.faults = faults or TestFaults()

    def open(self, runtime_context: RuntimeContext) -> None:
        self.sketches = runtime_context.get_map_state(
            MapStateDescriptor("epoch-sketches", Types.LONG(), BYTES)
        )
        self.progress = runtime_context.get_state(ValueStateDescriptor("shard-progress", BYTES))

    def _sketcher(self, shard: int) -> ShardSketcher:
        progress = ShardProgress.from_bytes(self.progress.value())
        return ShardSketcher(
            shard, self.spec, self.policy, _MapStateStore(self.sketches), progress, self.shards
        )

    def _dead_letter(
        self, value: bytes | None, error: str, partition: int, offset: int
    ) -> tuple[OutputTag, bytes]:
        record = dead_letter_record(
            value=value, error=error, topic=self.topic, partition=partition, offset=offset
        )
        return DEAD_LETTERS, encode("DeadLetter", record)

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
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
            out = _finish(sketcher)
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

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[ShardSketch]:
        sketcher = self._sketcher(int(ctx.get_current_key()))
        if sketcher.progress.closed_through == FINAL:
            return
        out = _finish(sketcher)
        self.progress.update(sketcher.progress.to_bytes())
        yield from out
