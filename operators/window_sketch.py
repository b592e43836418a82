"""The window-aggregate variant of the sketch operator (``--operator window``, event-time epochs only).

Pipeline: :class:`EpochPieces` (a ``ProcessFunction``) decodes each message and cuts it into one
piece per event-time epoch, timestamped with the epoch start; Flink assigns watermarks with a
bounded out-of-orderness of ``--lateness``; ``key_by(partition)`` →
``TumblingEventTimeWindows(epoch)`` → ``aggregate(SketchAggregate)``, whose accumulator — the
window state Flink checkpoints — is the serialised sketch; :class:`ShardWindowResult` tags it with
shard and epoch. :class:`WatermarkEpochMergeFunction` merges an epoch's shard sketches in shard-id
order once the watermark passes the epoch's end (every window of that epoch has fired by then, so a
shard without a window contributed nothing).

Difference from the keyed-process variant (:mod:`privstream.operators.sketch_operator`): the
watermark is one for all partitions (it is assigned after the source, in Python), so a partition
that lags the others by more than ``--lateness`` has its pieces declared late; they are never
dropped silently — the late side output goes to the dead-letter topic with the original message.
The keyed-process variant closes time epochs by the producers' punctuations and supports count epochs.

PRIVACY CAVEAT: Flink's event-time watermark here is data-driven (max event time seen less
``--lateness``; PyFlink offers no punctuated watermark generator), so ONE event with a far-future
time advances it, fires earlier windows and makes every later event of those epochs late. Then
adding/removing one event changes other events' inclusion and the add/remove-one-event (ε, δ)
guarantee does not hold. The job therefore refuses ``--operator window`` unless the user passes
``--trust-event-time``, and its releases then state the assumption
(:data:`privstream.operators.epochs.DATA_DRIVEN_WATERMARK_ASSUMPTION`) in their neighbour relation.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
from privstream.connectors.avro_codec import encode
from privstream.connectors.dead_letter import dead_letter_record
from privstream.operators.epochs import TimeEpochs
from privstream.operators.merge_operator import EpochMergeFunction
from privstream.operators.payloads import (
    EndPayload,
    EventPayload,
    PayloadError,
    UserSetPayload,
    WatermarkPayload,
    decode_payload,
)
from privstream.operators.routing import routing_error
from privstream.operators.shard_logic import MergedEpoch, ShardSketch
from privstream.operators.sketch_operator import DEAD_LETTERS
from privstream.operators.sketch_spec import SketchSpec
from pyflink.common import Types
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream import OutputTag
from pyflink.datastream.functions import (
    AggregateFunction,
    KeyedProcessFunction,
    ProcessFunction,
    ProcessWindowFunction,
)

#: Late pieces (their window already fired): ``(shard, epoch, piece, original bytes, offset)``.
LATE_PIECES = OutputTag("late-pieces", Types.PICKLED_BYTE_ARRAY())


class EpochPieces(ProcessFunction):
    """Rows ``(payload, partition, offset)`` → ``(shard, epoch, piece, payload, offset)`` per epoch."""

    def __init__(self, spec: SketchSpec, policy: TimeEpochs, topic: str, shards: int = 1) -> None:
        self.spec = spec
        self.policy = policy
        self.topic = topic
        self.shards = shards

    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterator[Any]:
        payload, shard, offset = value[0], int(value[1]), int(value[2])
        try:
            decoded = decode_payload(payload, user_sets=self.spec.user_sets)
            if isinstance(decoded, UserSetPayload):
                self.spec.check_user_set(decoded.items)
            misrouted = routing_error(decoded, shard, self.shards, self.spec.shard_key or "item")
            if misrouted is not None:
                raise ValueError(misrouted)
        except (PayloadError, ValueError) as exc:
            record = dead_letter_record(
                value=payload, error=str(exc), topic=self.topic, partition=shard, offset=offset
            )
            yield DEAD_LETTERS, encode("DeadLetter", record)
            return
        if isinstance(decoded, (EndPayload, WatermarkPayload)):
            return  # windows close on Flink's data-driven watermark (the final one at the end of a bounded run)
        if isinstance(decoded, EventPayload):
            epochs = decoded.times // self.policy.length_ms
            for epoch in np.unique(epochs).tolist():
                yield shard, epoch, decoded.select(epochs == epoch), payload, offset
        else:
            yield shard, decoded.time // self.policy.length_ms, decoded, payload, offset


class EpochStart(TimestampAssigner):
    def __init__(self, length_ms: int) -> None:
        self.length_ms = length_ms

    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return int(value[1]) * self.length_ms


class SketchAggregate(AggregateFunction):
    """Accumulator = the shard's epoch sketch in the core binary format."""

    def __init__(self, spec: SketchSpec) -> None:
        self.spec = spec

    def create_accumulator(self) -> bytes | None:
        return None

    def add(self, value: Any, accumulator: bytes | None) -> bytes:
        sketch = self.spec.load(accumulator) if accumulator else self.spec.new()
        self.spec.update(sketch, value[2])  # user sets were checked against m in EpochPieces
        return sketch.to_bytes()

    def get_result(self, accumulator: bytes | None) -> bytes:
        return accumulator if accumulator else self.spec.new().to_bytes()

    def merge(self, acc_a: bytes | None, acc_b: bytes | None) -> bytes:
        raise NotImplementedError("tumbling windows never merge accumulators")


class ShardWindowResult(ProcessWindowFunction):
    def __init__(self, length_ms: int) -> None:
        self.length_ms = length_ms

    def process(
        self, key: int, context: ProcessWindowFunction.Context, elements: Iterable[bytes]
    ) -> Iterator[Any]:
        epoch = context.window().start // self.length_ms
        for data in elements:
            yield ShardSketch(int(key), epoch, data, epoch)


class WatermarkEpochMergeFunction(EpochMergeFunction):
    """:class:`EpochMergeFunction` that also completes an epoch when the watermark passes its end."""

    def __init__(self, num_shards: int, spec: SketchSpec, length_ms: int) -> None:
        super().__init__(num_shards, spec)
        self.length_ms = length_ms

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[MergedEpoch]:
        yield from super().process_element(value, ctx)
        epoch = ShardSketch(*value).epoch
        if epoch is not None:
            ctx.timer_service().register_event_time_timer((epoch + 1) * self.length_ms - 1)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[MergedEpoch]:
        merger = self.merger()
        out = merger.close_all_through((timestamp + 1) // self.length_ms - 1)
        self.store(merger)
        yield from out


def late_dead_letter(topic: str) -> Any:
    """Map a late piece to a dead letter (original message bytes, partition and offset)."""

    def to_dead_letter(value: Any) -> bytes:
        shard, epoch, _, payload, offset = value
        error = f"late: epoch {epoch} of this message had already been released (window fired); not counted"
        return encode(
            "DeadLetter",
            dead_letter_record(value=payload, error=error, topic=topic, partition=shard, offset=offset),
        )

    return to_dead_letter
