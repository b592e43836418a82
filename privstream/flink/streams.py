"""What every public operator does to the user's stream before its keyed operator: argument checks
that name the argument, the ``Punctuation`` clock element, and the hash routing of elements to
shards (:mod:`privstream.operators.elements`), kept in the user's own order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

from pyflink.common import Types
from pyflink.common.typeinfo import BasicTypeInfo, RowTypeInfo, TupleTypeInfo
from pyflink.datastream import DataStream
from pyflink.datastream.functions import FlatMapFunction

from privstream.operators.elements import Rejection, element_payload
from privstream.operators.payloads import WatermarkPayload
from privstream.operators.shard_operator import Rejected, TypedEvent

PICKLED = Types.PICKLED_BYTE_ARRAY()

#: Why every public operator whose process function also yields side outputs is built with
#: ``disable_chaining()``: PyFlink 2.3 fuses a chained downstream Python function (e.g. the user's
#: ``out.releases.map(...)`` at the same parallelism) into the operator, and the fused function then
#: receives the side outputs' ``(OutputTag, value)`` tuples as if they were main-output elements
#: (measured: a release stream at parallelism 1 followed by a flat_map got the ledger entries).
SIDE_OUTPUT_LEAK = "chained Python functions receive the upstream's side outputs"


class Punctuation(NamedTuple):
    """The public clock of time epochs and event-time windows, as an element of the stream: no later
    element has an event time before ``watermark_ms`` (the jobs' ``EpochWatermark``)."""

    watermark_ms: int


class ToShard(FlatMapFunction):
    """Element → TypedEvent(shard, payload, element), or a Rejected; a Punctuation → every shard."""

    def __init__(self, *, user_level: bool, shard_key: str, shards: int, needs_time: bool) -> None:
        self.shards = shards
        self.options = {"user_level": user_level, "shard_key": shard_key, "needs_time": needs_time}

    def flat_map(self, value: Any) -> Iterator[TypedEvent | Rejected]:
        if isinstance(value, Punctuation):
            tick = WatermarkPayload("punctuation", int(value.watermark_ms))
            yield from (TypedEvent(shard, tick, value) for shard in range(self.shards))
            return
        try:
            shard, payload = element_payload(value, shards=self.shards, **self.options)
        except Rejection as exc:
            yield Rejected(value, str(exc))
            return
        yield TypedEvent(shard, payload, value)


def route(events: DataStream, to_shard: ToShard, name: str) -> tuple[DataStream, DataStream]:
    """``(accepted TypedEvents, rejected elements)``. Up to the operator's ``key_by`` the user's
    sub-tasks are kept one to one (the input's parallelism, a forward connection): each upstream
    sub-task's elements and punctuations reach every shard in the order it sent them; a rebalance
    would reorder them (elements late, or ahead of their punctuation; count epochs cut by a race)."""
    parallelism = parallelism_of(events)
    routed = (
        events.flat_map(to_shard, output_type=PICKLED)
        .name(f"{name}: hash shard")
        .set_parallelism(parallelism)
    )
    accepted = routed.filter(lambda e: isinstance(e, TypedEvent)).set_parallelism(parallelism)
    rejected = routed.filter(lambda e: isinstance(e, Rejected)).set_parallelism(parallelism)
    return accepted, rejected


def parallelism_of(stream: DataStream) -> int:
    """The stream's parallelism (PyFlink has no public getter)."""
    return int(stream._j_data_stream.getParallelism())


def check_argument(name: str, value: Any, ok: bool, expected: str) -> None:
    """Graph-build check: ``ValueError("<name>: expected <expected>, got <value>")`` unless ``ok``."""
    if not ok:
        raise ValueError(f"{name}: expected {expected}, got {value!r}")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_stream(events: Any, *, needs_time: bool, user_level: bool, punctuated: bool, epochs: str) -> None:
    """Graph-build checks of the element type a stream declares (``epochs``: how the operator names
    its time slices in messages); a pickled stream is checked per element, its rejections naming the
    problem."""
    check_argument("events", events, isinstance(events, DataStream), "a pyflink DataStream")
    declared = events.get_type()
    if isinstance(declared, BasicTypeInfo):
        if punctuated:
            raise ValueError(
                f"events: punctuated {epochs} need a pickled stream (Punctuation elements among the events)"
            )
        if user_level:
            raise ValueError(
                "events: user level (m) needs (user, items, event_time) elements, not plain items"
            )
        if needs_time:
            raise ValueError(
                f"events: {epochs} need an event time per element: a stream of (item, user, event_time) "
                "tuples or Rows, not plain items"
            )
    elif isinstance(declared, RowTypeInfo | TupleTypeInfo):
        arity = len(declared.get_field_types())
        check_argument("events", declared, arity == 3, "elements of 3 fields: (item, user, event_time)")
